"""A run's job output, read back from the jobs log group (one stream per run and job)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from trainrun.logic.job_log import EndEvent, parse_line
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
    emit: Callable[[JobKind, list[str]], None],
    *,
    follow: bool = False,
    poll: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[JobKind, bool]:
    """Emit each job's lines in order; with `follow`, go on until the run has ended and its
    output has drained. `emit` gets each job's lines of one read, [] when there were none (the
    stream is quiet). Returns, per job, whether it has any output at all."""
    readers = [JobLogReader(stack, run_id, job) for job in jobs]
    while True:
        # Read whether the run had ended *before* reading: the lines that arrive before its end
        # are then all read by this pass.
        ended = not follow or _ended(stack, run_id)
        for reader in readers:
            emit(reader.job, reader.read())
        if ended:
            return {reader.job: reader.exists for reader in readers}
        sleep(poll)


def _ended(stack: Stack, run_id: str) -> bool:
    record = stack.store().get(run_id)
    return record is None or record.status in FINAL_STATUSES


# --- what a person reads: ranks named, duplicates merged, trainrun's own lines hidden -----------

# srun --label's prefix (trainrun.logic.head_node_scripts runs each job's command with it): the
# task's number, right-aligned to the widest ("0: ", " 7: " among 16 tasks), then ": ".
_SRUN_LABEL = re.compile(r" {0,8}(\d{1,6}): ")
# How many distinct pending lines wait for the other ranks' copies before the oldest is shown
# with the ranks that printed it so far: ranks drift apart by a few lines, not by hundreds.
MERGE_WINDOW = 64


@dataclass(frozen=True)
class ShownLine:
    """A line as `trainrun logs` shows it: its text, and the ranks (srun tasks, one per node:
    rank i runs on the allocation's i-th node) that printed it; None for a line of no rank
    (srun's or Slurm's own, such as `srun: error: Node failure on ...`)."""

    text: str
    ranks: tuple[int, ...] | None
    every_rank: bool = False

    def prefix(self, *, single_node: bool) -> str:
        if self.ranks is None or single_node:
            return ""
        if self.every_rank:
            return "(all ranks) "
        label = "rank" if len(self.ranks) == 1 else "ranks"
        return f"({label} {','.join(map(str, self.ranks))}) "


@dataclass
class _Pending:
    text: str
    ranks: set[int]


@dataclass
class RankMerger:
    """One job's lines, merged across ranks: a line every rank printed is shown once, as
    "(all ranks)"; one some ranks printed, once with those ranks; lines stay in the order their
    first copy came. Markers (the end watcher's TRAINRUN-END) are dropped."""

    ranks: int
    _pending: list[_Pending] = field(default_factory=list)

    def feed(self, line: str) -> list[ShownLine]:
        if isinstance(parse_line(line), EndEvent):
            return []
        label = _SRUN_LABEL.match(line)
        if label is None:
            # Not a rank's: what was pending is shown first, so that order is kept.
            return [*self.flush(), ShownLine(line, None)]
        rank, text = int(label[1]), line[label.end() :]
        group = next((p for p in self._pending if p.text == text and rank not in p.ranks), None)
        if group is None:
            self._pending.append(_Pending(text, {rank}))
        else:
            group.ranks.add(rank)
        shown = []
        while self._pending and (len(self._pending[0].ranks) >= self.ranks or len(self._pending) > MERGE_WINDOW):
            shown.append(self._shown(self._pending.pop(0)))
        return shown

    def flush(self) -> list[ShownLine]:
        """Everything pending, with the ranks that printed it so far (the stream has gone quiet)."""
        shown = [self._shown(pending) for pending in self._pending]
        self._pending.clear()
        return shown

    def _shown(self, pending: _Pending) -> ShownLine:
        ranks = tuple(sorted(pending.ranks))
        return ShownLine(pending.text, ranks, every_rank=ranks == tuple(range(self.ranks)))
