"""A run's job output, read back from CloudWatch Logs.

- A ParallelCluster run's: from the stack's jobs log group, one stream per run and job, each line
  labelled with its rank by srun (`0: ...`).
- An EKS run's: from its cluster's container log group (the Amazon CloudWatch Observability
  add-on's `/aws/containerinsights/<cluster>/application`, trainrun.adapters.container_logs), one
  stream per container, each event a JSON record of one line with its pod's metadata. The job's
  pods are told by their labels (trainrun/job, trainrun/run-id) and each line is labelled with its
  pod's completion index, the rank, as srun labels a task's: `0: ...`. The group outlives the
  cluster, so a torn-down run's output is still there.

Both read through one interface (JobLogReader): `print_job_logs` follows either.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainrun.logic import kubernetes_objects as objects
from trainrun.logic.job_log import EndEvent, parse_line
from trainrun.model.jobs import JobKind, log_stream_name
from trainrun.model.run_record import FINAL_STATUSES
from trainrun.ops.stack import Stack


class JobLogReader(Protocol):
    """One job's output, read from where the last read stopped."""

    job: JobKind
    # Whether the job has any output (so far).
    exists: bool

    def read(self) -> list[str]:
        """The lines that arrived since the last read (all of them on the first), in order; [] when none."""
        ...


@dataclass
class StreamLogReader:
    """A ParallelCluster run's job: its stream of the jobs log group, read from where it last
    stopped (CloudWatch Logs' forward token)."""

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


# Container Insights' Fluent Bit ships each container's lines in batches (every few seconds, again
# after a refused one), each event stamped with when its line was written: an event can arrive
# after later-stamped ones of other pods. So each read after the first asks again from this long
# before the latest event seen, and skips the events it has already read (by event id).
LATE_EVENTS_MS = 60_000


@dataclass
class ContainerLogReader:
    """An EKS run's job: its pods' lines in the cluster's container log group (FilterLogEvents over
    every stream of the group, paginated), in time order, each `<completion index>: <line>`."""

    stack: Stack
    run_id: str
    job: JobKind
    exists: bool = False
    _group: str | None = field(default=None, repr=False)
    _start: int = field(default=0, repr=False)  # milliseconds since the epoch
    _seen: dict[str, int] = field(default_factory=dict, repr=False)  # event id -> timestamp

    def read(self) -> list[str]:
        """The lines that arrived since the last read (all of them on the first); [] before the
        run's cluster, or its log group, exists."""
        if self._group is None:
            record = self.stack.store().get(self.run_id)
            if record is None or record.eks is None:
                return []  # no cluster yet: nothing can have logged
            self._group = objects.container_log_group(record.eks.name)
            self._start = int(record.created_at.timestamp() * 1000)
        logs = self.stack.client("logs")
        request: dict[str, Any] = {"logGroupName": self._group, "startTime": self._start}
        events: list[dict[str, Any]] = []
        while True:
            try:
                page = logs.filter_log_events(**request)
            except logs.exceptions.ResourceNotFoundException:
                return []  # the group is made before the first pod logs (Prepare Kubernetes)
            events.extend(page.get("events", []))
            # A page may be empty and still have a token: the search goes on.
            if not page.get("nextToken"):
                break
            request["nextToken"] = page["nextToken"]
        new = sorted((event for event in events if event["eventId"] not in self._seen), key=lambda e: e["timestamp"])
        lines = []
        for event in new:
            self._seen[event["eventId"]] = event["timestamp"]
            line = objects.container_line(event["message"])
            if line is not None and line.job == self.job:
                lines.append(f"{line.index}: {line.text}")
        self.exists = self.exists or bool(lines)
        if self._seen:
            self._start = max(self._start, max(self._seen.values()) - LATE_EVENTS_MS)
            self._seen = {event_id: at for event_id, at in self._seen.items() if at >= self._start}
        return lines


def job_log_reader(stack: Stack, run_id: str, job: JobKind, *, eks: bool) -> JobLogReader:
    """The reader of a job's output where the run's kind of cluster puts it."""
    return ContainerLogReader(stack, run_id, job) if eks else StreamLogReader(stack, run_id, job)


def print_job_logs(
    stack: Stack,
    run_id: str,
    jobs: Sequence[JobKind],
    emit: Callable[[JobKind, list[str]], None],
    *,
    follow: bool = False,
    poll: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
    eks: bool | None = None,
) -> dict[JobKind, bool]:
    """Emit each job's lines in order; with `follow`, go on until the run has ended and its
    output has drained. `emit` gets each job's lines of one read, [] when there were none (the
    stream is quiet). Returns, per job, whether it has any output at all. `eks`: whether the run
    is an EKS run (None: its record says)."""
    if eks is None:
        record = stack.store().get(run_id)
        eks = record is not None and record.on_eks
    readers = [job_log_reader(stack, run_id, job, eks=eks) for job in jobs]
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
# task's number, right-aligned to the widest ("0: ", " 7: " among 16 tasks), then ": "; an EKS
# pod's lines get their completion index so (ContainerLogReader).
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
    first copy came. Markers (the end watcher's TRAINRUN-END, an EKS pod's TRAINRUN-POD-END) are
    dropped."""

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
        if objects.is_pod_end_line(text):
            return []
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
