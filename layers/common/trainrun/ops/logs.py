"""A run's job output, read back from the jobs log group (one stream per run and job)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from trainrun.model.jobs import JobKind, log_stream_name
from trainrun.model.run_record import FINAL_STATUSES
from trainrun.ops.stack import Stack


@dataclass
class JobLogReader:
    """Reads one job's stream from where it last stopped (CloudWatch Logs' forward token)."""

    stack: Stack
    run_id: str
    job: JobKind
    _token: str | None = field(default=None, repr=False)
    exists: bool = False
    _stream: str | None = field(default=None, repr=False)

    def read(self) -> list[str]:
        """The lines that arrived since the last read (all of them on the first); [] before the stream exists."""
        logs = self.stack.client("logs")
        lines: list[str] = []
        if not self.exists:
            # Which stream is the record's to say (RunRecord.log_stream): a run on a kept cluster
            # learns it at Validate capacity, after `trainrun logs --follow` may have begun.
            record = self.stack.store().get(self.run_id)
            self._stream = record.log_stream(self.job) if record is not None else log_stream_name(self.run_id, self.job)
        while True:
            kwargs = {
                "logGroupName": self.stack.outputs["JobsLogGroupName"],
                "logStreamName": self._stream,
                "startFromHead": True,
            }
            if self._token is not None:
                kwargs["nextToken"] = self._token
            try:
                page = logs.get_log_events(**kwargs)
            except logs.exceptions.ResourceNotFoundException:
                return lines  # the job has not written anything yet, or never ran
            self.exists = True
            lines.extend(event["message"] for event in page["events"])
            # The forward token stays the same once the end of the stream is reached.
            done = page["nextForwardToken"] == self._token or not page["events"]
            self._token = page["nextForwardToken"]
            if done:
                return lines


def print_job_logs(
    stack: Stack,
    run_id: str,
    jobs: Sequence[JobKind],
    emit: Callable[[JobKind, str], None],
    *,
    follow: bool = False,
    poll: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[JobKind, bool]:
    """Emit each job's lines in order; with `follow`, go on until the run has ended and its
    output has drained. Returns, per job, whether it has any output at all."""
    readers = [JobLogReader(stack, run_id, job) for job in jobs]
    while True:
        # Read whether the run had ended *before* reading: the lines that arrive before its end
        # are then all read by this pass.
        ended = not follow or _ended(stack, run_id)
        for reader in readers:
            for line in reader.read():
                emit(reader.job, line)
        if ended:
            return {reader.job: reader.exists for reader in readers}
        sleep(poll)


def _ended(stack: Stack, run_id: str) -> bool:
    record = stack.store().get(run_id)
    return record is None or record.status in FINAL_STATUSES
