"""The progress handler's logic: one CloudWatch Logs batch of a job's output -> the run record.

The jobs log group holds one stream per run and job (`jobs.LOG_STREAM`). For every batch the
subscription delivers, `apply_batch` parses the lines (trainrun.logic.job_log), merges them into the
job's `JobProgress` with one conditional write, emits metrics, sends the waiting task a heartbeat
and, when the wrapper's end marker arrives, completes it.

Delivery is at least once and not in order (a failed invocation is retried after later batches
succeeded), so the merge is split in two:

- facts that are idempotent to re-apply (the highest step, compile totals, the NEFFs found in
  the compile cache, failure signatures, history points) are merged from every event of the
  batch: a late batch can still raise the step, a redelivered one changes nothing;
- counts (lines, unparsed lines, checkpoints, rejected markers and steps), heartbeats and
  completions come only from events not applied yet: `JobProgress.applied_ranges` keeps the
  event id ranges of the batches applied (at most MAX_APPLIED_RANGES; beyond that the two
  lowest are joined), so a redelivery is never counted or acted on twice and a late batch (ids
  below ones already applied) is still counted. CloudWatch Logs batches of one stream cover
  disjoint id ranges; a redelivery repeats a batch whole.

A job's end is told by its end marker only when the marker is authentic (trainrun.model.end_marker):
signed with the job's end key, of this run and job, in this run's stream, of the Slurm job the
record knows. Any other marker is counted (`rejected_end_markers`, metric RejectedEndMarkers)
and ignored. Training lines beyond the run's total_steps (or implausible) are counted
(`rejected_steps`) and ignored, so one hostile line cannot pin the step.

The payload is hostile until decoded. Powertools' CloudWatchLogsEvent decodes it (base64, gzip,
JSON) and checks none of what follows, so it is checked around it: the base64 must be valid, the
gzip stream must end (a truncated one is refused) and may not inflate to more than
MAX_DECODED_BYTES (checked before the data class inflates it whole), and JSON nested too deep
for the parser is refused as invalid rather than raising RecursionError out of the handler.

A job resubmitted after an infrastructure failure (trainrun.steps.resume) logs to the same
stream; a batch's lines are the attempt the run record names current when it is applied, and
`JobProgress.attempts` keeps each attempt's first and last step, failure signatures and end
(idempotent facts, merged from every event) beside the job's highest step.

A batch whose merge changes nothing writes nothing. Side effects on the task (heartbeat,
completion) happen before the write that records the batch: if they fail, the batch is not
marked as applied and its redelivery tries again; a completion sent twice only meets a stale
token, which is tolerated.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import logging
import math
import re
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from aws_lambda_powertools.utilities.data_classes import CloudWatchLogsEvent
from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainrun.adapters.aws_errors import error_code, raise_if_transient
from trainrun.errors import JobFailed, TrainrunError
from trainrun.logic.job_log import (
    HISTORY_MAX_POINTS,
    MAX_CACHE_NEFFS,
    TRAIN_FORMATS,
    EndEvent,
    JobLogSummary,
    TrainEvent,
    compile_progress_pattern,
)
from trainrun.metrics import Dimension, Metric
from trainrun.model.end_marker import is_authentic
from trainrun.model.jobs import LOG_STREAM, AttemptProgress, JobKind, JobProgress, TrainPoint
from trainrun.model.run_record import RunRecord, RunStore
from trainrun.steps.run_events import RunEvents, RunState

logger = logging.getLogger(__name__)

PUT_ATTEMPTS = 3
"""Conditional writes per batch at most, whatever its size: the first and two retries on conflict."""
MAX_DECODED_BYTES = 16 * 1024 * 1024
"""A decoded awslogs payload is at most ~1 MB; anything far larger is not one (a gzip bomb)."""
MAX_CAUSE_BYTES = 32 * 1024
"""SendTaskFailure's cause limit."""
STALE_TOKEN_CODES = frozenset({"TaskTimedOut", "TaskDoesNotExist", "InvalidToken"})
"""A task that timed out, already completed or belongs to an ended execution: nothing left to tell."""
CONTROL_MESSAGE = "CONTROL_MESSAGE"
MAX_APPLIED_RANGES = 64
"""Event id ranges of applied batches a job's progress keeps (see the module's docstring)."""
NO_PROGRESS_LINES = 100
"""Unparsed lines of a train job without one progress line, after which the run says so (once)."""
KEPT_TAIL_LINES = 20
KEPT_LINE_CHARS = 200
"""The log's last lines a job's progress keeps for the failure cause, each cut: 4,000 characters at most."""


class ProgressEventInvalid(TrainrunError):
    """The event is not an awslogs subscription payload (bad base64, gzip, JSON or shape)."""


class ProgressNotRecorded(TrainrunError):
    """Every conditional write of a batch met a concurrent one; the batch is retried whole."""


class TaskCallbackFailed(TrainrunError):
    """Step Functions refused a heartbeat or completion for a reason other than a stale token."""


# --------------------------------------------------------------------------------------------
# The awslogs payload
# --------------------------------------------------------------------------------------------


class LogEvent(BaseModel):
    model_config = ConfigDict(frozen=True)

    # CloudWatch Logs event ids are numeric strings of equal length; compared as integers.
    id: str = Field(pattern=r"^[0-9]{1,100}$")
    timestamp: int
    message: str


class LogBatch(BaseModel):
    """One decoded subscription delivery (the `awslogs.data` JSON)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    message_type: str = Field(default="DATA_MESSAGE", alias="messageType")
    owner: str = ""
    log_group: str = Field(default="", alias="logGroup")
    log_stream: str = Field(default="", alias="logStream")
    subscription_filters: list[str] = Field(default_factory=list, alias="subscriptionFilters")
    log_events: list[LogEvent] = Field(default_factory=list, alias="logEvents")


def decode_awslogs(event: dict[str, Any]) -> LogBatch:
    """Decode `{"awslogs": {"data": base64(gzip(json))}}`; a control message gives an empty batch."""
    logs = CloudWatchLogsEvent(event)
    try:
        _check_compressed_payload(logs.raw_logs_data)
        payload = logs.parse_logs_data().raw_event
    except ProgressEventInvalid:
        raise
    except RecursionError as exc:
        raise ProgressEventInvalid("not an awslogs payload: its JSON is nested too deep") from exc
    except (KeyError, TypeError, AttributeError, binascii.Error, zlib.error, ValueError) as exc:
        raise ProgressEventInvalid(f"not an awslogs payload: {type(exc).__name__}: {exc}") from exc
    if not isinstance(payload, dict):
        raise ProgressEventInvalid("not an awslogs payload: the decoded JSON is not an object")
    if payload.get("messageType") == CONTROL_MESSAGE:
        # CloudWatch Logs checks the destination is reachable; there is nothing to record.
        return LogBatch(message_type=CONTROL_MESSAGE, owner=str(payload.get("owner", "")))
    try:
        return LogBatch.model_validate(payload)
    except ValidationError as exc:
        raise ProgressEventInvalid(f"not an awslogs payload: {exc}") from exc


def _check_compressed_payload(data: str) -> None:
    """What Powertools' CloudWatchLogsEvent does not check before it decodes `data` whole: that
    it is base64 (its decoder skips other characters) of one gzip stream that ends and inflates
    to at most MAX_DECODED_BYTES (inflated here in bounded memory, then thrown away)."""
    compressed = base64.b64decode(data, validate=True)
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip framing
    inflater.decompress(compressed, MAX_DECODED_BYTES)
    if inflater.unconsumed_tail:
        raise ProgressEventInvalid(f"awslogs payload decodes to more than {MAX_DECODED_BYTES} bytes")
    if not inflater.eof:
        raise ProgressEventInvalid("not an awslogs payload: the gzip stream is truncated")


def encode_awslogs(batch: LogBatch) -> dict[str, Any]:
    """The event CloudWatch Logs delivers for a batch (decode_awslogs' inverse): for the local
    stack, tests and the benchmark."""
    payload = batch.model_dump(mode="json", by_alias=True)
    data = base64.b64encode(gzip.compress(json.dumps(payload).encode(), mtime=0)).decode()
    return {"awslogs": {"data": data}}


# --------------------------------------------------------------------------------------------
# The outcome
# --------------------------------------------------------------------------------------------


class BatchOutcome(BaseModel):
    """What one batch did; the handler logs it."""

    run_id: str | None = None
    job: JobKind | None = None
    applied_events: int = 0
    duplicate_events: int = 0
    wrote: bool = False
    writes: int = 0
    heartbeat_sent: bool = False
    completed: Literal["success", "failure"] | None = None
    token_was_stale: bool = False
    ignored_reason: str | None = None
    rejected_end_markers: int = 0


# --------------------------------------------------------------------------------------------
# Parsing a batch
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Parsed:
    """What some events of a batch said: job_log's summary, every training point, the end marker."""

    summary: JobLogSummary
    points: list[TrainEvent] = field(default_factory=list)  # every training line, for the history
    end: EndEvent | None = None  # the authentic end marker
    rejected_end_markers: int = 0
    last_event_id: str | None = None
    first_event_id: str | None = None


def _message_lines(message: str) -> list[str]:
    """A log event message holds one line, or several when the agent joined them (multi_line_start_pattern)."""
    lines = message.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


def _parse(
    events: Iterable[LogEvent],
    authentic: Callable[[EndEvent], bool],
    step_limit: int | None = None,
    pattern: re.Pattern[str] | None = None,
    counted_from: int | None = 0,
) -> _Parsed:
    parsed = _Parsed(summary=JobLogSummary(step_limit, pattern, counted_from))
    feed = parsed.summary.feed
    points = parsed.points
    for event in events:
        for line in _message_lines(event.message):
            parsed_event = feed(line)
            if isinstance(parsed_event, TrainEvent):
                points.append(parsed_event)
            elif isinstance(parsed_event, EndEvent):
                if authentic(parsed_event):
                    parsed.end = parsed_event
                else:
                    parsed.rejected_end_markers += 1
        if parsed.first_event_id is None:
            parsed.first_event_id = event.id
        parsed.last_event_id = event.id
    return parsed


def _ranges(progress: JobProgress | None, source: str | None = None) -> list[tuple[int, int]]:
    """The applied event id ranges (a record written before ranges were kept: all up to its mark);
    of one pod's stream, for an EKS run's (`source`)."""
    if progress is None:
        return []
    if source is not None:
        return [(int(low), int(high)) for low, high in progress.applied_ranges_by_source.get(source, [])]
    if progress.applied_ranges:
        return [(int(low), int(high)) for low, high in progress.applied_ranges]
    return [(0, int(progress.last_event_id))] if progress.last_event_id else []


def _is_applied(event_id: str, ranges: Sequence[tuple[int, int]]) -> bool:
    number = int(event_id)
    return any(low <= number <= high for low, high in ranges)


def _with_range(ranges: Sequence[tuple[int, int]], low: int, high: int) -> list[tuple[int, int]]:
    """`ranges` and [low, high], overlapping ones joined, at most MAX_APPLIED_RANGES (the lowest
    two joined first: the oldest batches are the least likely to arrive late)."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted([*ranges, (low, high)]):
        if merged and start <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    while len(merged) > MAX_APPLIED_RANGES:
        merged[0:2] = [(merged[0][0], merged[1][1])]
    return merged


# --------------------------------------------------------------------------------------------
# Merging into JobProgress (pure)
# --------------------------------------------------------------------------------------------


def _finite(value: float | None) -> float | None:
    """DynamoDB JSON keeps no NaN/Infinity: they are stored as null, so merge them as null too."""
    return value if value is not None and math.isfinite(value) else None


def _max_optional(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _thinned_steps(steps: Iterable[int], limit: int, min_stride: int) -> list[int]:
    """The steps that are multiples of the smallest power-of-two stride (at least `min_stride`)
    leaving at most `limit`, plus the highest step, in order.

    The same steps give the same history whatever order they came in, and a step dropped once is
    never needed again (the stride only grows). job_log thins by arrival order instead, which
    batches arriving out of order would make differ.
    """
    ordered = sorted(steps)
    if not ordered:
        return []
    last = ordered[-1]
    stride = max(1, min_stride)
    while True:
        kept = [step for step in ordered if step % stride == 0 or step == last]
        if len(kept) <= limit:
            return kept
        stride *= 2


def _history_stride(history: Sequence[TrainPoint]) -> int:
    """The stride a stored history was thinned with, at least: the largest power of two dividing
    every step but the last (the last is kept whatever its step)."""
    steps = [point.step for point in history[:-1]]
    if len(history) < HISTORY_MAX_POINTS // 2 or not steps:
        return 1  # never thinned: below half the limit a thinning would not have been needed
    stride = 1
    while stride < 2**62 and all(step % (stride * 2) == 0 for step in steps):
        stride *= 2
    return stride


def _merge_history(history: list[TrainPoint], events: list[TrainEvent]) -> list[TrainPoint]:
    """The stored history and a batch's training lines, thinned; a stored point of a step wins."""
    by_step: dict[int, TrainPoint | TrainEvent] = {point.step: point for point in history}
    for event in events:
        by_step.setdefault(event.step, event)
    kept = _thinned_steps(by_step, HISTORY_MAX_POINTS, _history_stride(history))
    return [_train_point(by_step[step]) for step in kept]


def _train_point(point: TrainPoint | TrainEvent) -> TrainPoint:
    if isinstance(point, TrainPoint):
        return point
    return TrainPoint(
        step=point.step,
        loss=_finite(point.loss),
        learning_rate=_finite(point.learning_rate),
        throughput=_finite(point.throughput),
    )


def _union(kept: list[str], found: set[str]) -> list[str]:
    """The distinct NEFF ids of both, sorted; at most MAX_CACHE_NEFFS (the ones kept first)."""
    if found <= set(kept):
        return kept
    merged = list(dict.fromkeys([*kept, *sorted(found)]))[:MAX_CACHE_NEFFS]
    return sorted(merged)


def _merge(
    stored: JobProgress | None,
    new: _Parsed,
    replayed: _Parsed,
    attempt: int = 1,
    source: str | None = None,
) -> JobProgress:
    """The job's progress after a batch: counts from new events only, idempotent facts from all.
    `attempt`: the job's attempt the record names current, which the batch's lines are of."""
    base = stored if stored is not None else JobProgress()
    merged = base.model_copy(deep=True)
    fresh = new.summary
    if new.last_event_id is not None and (
        merged.last_event_id is None or int(new.last_event_id) > int(merged.last_event_id)
    ):
        merged.last_event_id = new.last_event_id
    if new.first_event_id is not None and new.last_event_id is not None:
        ranges = _with_range(_ranges(stored, source), int(new.first_event_id), int(new.last_event_id))
        kept = [(str(low), str(high)) for low, high in ranges]
        if source is None:
            merged.applied_ranges = kept
        else:
            merged.applied_ranges_by_source[source] = kept
    merged.lines += fresh.lines
    merged.unparsed_lines += fresh.unparsed_lines
    merged.checkpoints += fresh.checkpoints
    if fresh.counted_steps is not None:
        merged.counted_steps = max(merged.counted_steps, fresh.counted_steps)
    merged.rejected_end_markers += new.rejected_end_markers
    merged.rejected_steps += fresh.rejected_steps
    if merged.first_failure is None and fresh.first_failure is not None:
        merged.first_failure = fresh.first_failure[:KEPT_LINE_CHARS]
    if merged.exception is None and fresh.exception is not None:
        merged.exception = fresh.exception[:KEPT_LINE_CHARS]
    if new.last_event_id is not None and new.last_event_id == merged.last_event_id:
        # The newest lines so far: the log's tail (a late batch's lines are not its end).
        lines = [line[:KEPT_LINE_CHARS] for line in fresh.tail[-KEPT_TAIL_LINES:]]
        merged.tail = [*merged.tail, *lines][-KEPT_TAIL_LINES:]

    for parsed in (new, replayed):
        summary = parsed.summary
        if summary.compile is not None:
            merged.compile_graphs = _max_optional(merged.compile_graphs, summary.compile.graphs)
            merged.compile_succeeded = _max_optional(merged.compile_succeeded, summary.compile.succeeded)
            merged.compile_failed = _max_optional(merged.compile_failed, summary.compile.failed)
        merged.cache_hit_neffs = _union(merged.cache_hit_neffs, summary.cache_hits)
        merged.cached_failed_neffs = _union(merged.cached_failed_neffs, summary.cached_failures)
        train = summary.train
        if train is not None and (merged.step is None or (train.epoch, train.step) > (merged.epoch or 0, merged.step)):
            merged.epoch = train.epoch
            merged.step = train.step
            merged.loss = _finite(train.loss)
            merged.learning_rate = _finite(train.learning_rate)
            merged.throughput = _finite(train.throughput)
        for signature in summary.failures:
            if signature not in merged.failures:
                merged.failures.append(signature)
        if parsed.end is not None:
            merged.slurm_job_id, merged.exit_code = parsed.end.slurm_job_id, parsed.end.exit_code

    if new.points or replayed.points:
        merged.history = _merge_history(merged.history, [*new.points, *replayed.points])
    _merge_attempt(merged, attempt, (new, replayed))
    return merged


def no_progress_notice(lines: int) -> str:
    """What the run says once when its train job printed `lines` lines and none carried progress."""
    formats = "; ".join(TRAIN_FORMATS.values())
    return (
        f"the train job printed {lines} lines and none carried training progress (step, loss): trainrun reads "
        f"{formats}. Print one of these, or set workload.progress_pattern to a regular expression with "
        "named groups for your own (docs/run-file.md, Training progress)"
    )


def _note_no_progress(merged: JobProgress) -> None:
    if merged.step is None and merged.no_progress_notice is None and merged.unparsed_lines >= NO_PROGRESS_LINES:
        merged.no_progress_notice = no_progress_notice(merged.lines)


def _merge_attempt(merged: JobProgress, attempt: int, batches: tuple[_Parsed, ...]) -> None:
    """The attempt's own steps (the first and last it logged), failure signatures and end: what
    tells a resubmission that resumed from a checkpoint apart from the attempt before it, and why
    an attempt failed. Idempotent facts only (minimum, maximum, set), so a redelivery changes nothing."""
    steps = [point.step for parsed in batches for point in parsed.points]
    failures = [signature for parsed in batches for signature in parsed.summary.failures]
    ends = [parsed.end for parsed in batches if parsed.end is not None]
    if not (steps or failures or ends):
        return
    entry = next((item for item in merged.attempts if item.number == attempt), None)
    if entry is None:
        entry = AttemptProgress(number=attempt)
        merged.attempts = sorted([*merged.attempts, entry], key=lambda item: item.number)
    if steps:
        entry.first_step = min(steps) if entry.first_step is None else min(entry.first_step, *steps)
        entry.last_step = max(steps) if entry.last_step is None else max(entry.last_step, *steps)
    for signature in failures:
        if signature not in entry.failures:
            entry.failures.append(signature)
    for end in ends:
        entry.slurm_job_id, entry.end_state = end.slurm_job_id, end.state


# --------------------------------------------------------------------------------------------
# Step Functions (the waiting task)
# --------------------------------------------------------------------------------------------


def call_task(sfn: Any, operation: str, **kwargs: Any) -> bool:
    """Call SendTask*; False when the token is stale (timed out, used, or its execution ended)."""
    try:
        getattr(sfn, operation)(**kwargs)
    except ClientError as exc:
        code = error_code(exc)
        if code in STALE_TOKEN_CODES:
            logger.warning(
                "task token is stale, nothing to tell the workflow", extra={"operation": operation, "code": code}
            )
            return False
        raise_if_transient(exc, operation)
        raise TaskCallbackFailed(f"{operation} failed: {exc}") from exc
    return True


def progress_summary(progress: JobProgress) -> dict[str, Any]:
    """The part of a job's progress the workflow gets in its task output (no history)."""
    return progress.model_dump(mode="json", exclude={"history", "last_event_id", "applied_ranges", "last_heartbeat_at"})


def success_output(end: EndEvent, progress: JobProgress) -> str:
    return json.dumps(
        {
            "job": end.job,
            "slurm_job_id": end.slurm_job_id,
            "exit_code": end.exit_code,
            "progress": progress_summary(progress),
        }
    )


def failure_cause(end: EndEvent, progress: JobProgress, summary: JobLogSummary, limit: int = MAX_CAUSE_BYTES) -> str:
    """Why the job failed, for a person: signatures, the first failure line, the exception and the
    log's last lines (this batch's), cut from the oldest line to fit `limit` UTF-8 bytes."""
    state = f" (Slurm state {end.state})" if end.state is not None else ""
    head = [f"{end.job} job {end.slurm_job_id} exited with code {end.exit_code}{state}"]
    head.append("failure signatures: " + (", ".join(progress.failures) if progress.failures else "none recognised"))
    first_failure = summary.first_failure or progress.first_failure
    if first_failure is not None:
        head.append(f"first failure: {first_failure}")
    exception = summary.exception or progress.exception
    if exception is not None:
        head.append(f"exception: {exception}")
    head.append("last lines:")
    text_head = "\n".join(head)
    budget = limit - len(text_head.encode()) - 1
    if budget < 0:
        return text_head.encode()[:limit].decode(errors="ignore")
    tail: list[str] = []
    # The end marker comes from the end watcher, often in a batch of its own: the kept tail is the log's.
    for line in reversed(progress.tail or summary.tail):
        size = len(line.encode()) + 1
        if size > budget:
            break
        tail.append(line)
        budget -= size
    return text_head + "\n" + "\n".join(reversed(tail))


def complete_ended_task(
    sfn: Any, token: str, run_id: str, job: JobKind, slurm_job_id: int, progress: JobProgress
) -> bool:
    """Complete the task whose token arrived after the job's authentic end marker did (a train job
    queued behind compile can end before the Train state has its token: the marker then found no
    task to tell, and only its progress was recorded). False when the progress holds no end of
    `slurm_job_id`, or the token is stale (the progress function completed the task after all)."""
    if progress.exit_code is None or progress.slurm_job_id != slurm_job_id:
        return False
    attempt = next((item for item in progress.attempts if item.slurm_job_id == slurm_job_id), None)
    end = EndEvent(
        run_id=run_id,
        job=job,
        slurm_job_id=slurm_job_id,
        exit_code=progress.exit_code,
        state=attempt.end_state if attempt is not None else None,
    )
    if end.exit_code == 0:
        return call_task(sfn, "send_task_success", taskToken=token, output=success_output(end, progress))
    cause = failure_cause(end, progress, JobLogSummary())
    return call_task(sfn, "send_task_failure", taskToken=token, error=JobFailed.__name__, cause=cause)


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------


def _emit_metrics(metrics: Any, run_id: str, job: JobKind, new: _Parsed, progress: JobProgress) -> None:
    """Per batch, dimensioned by RunId and Job; the handler's log_metrics decorator flushes them."""
    metrics.add_dimension(name=Dimension.RUN_ID, value=run_id)
    metrics.add_dimension(name=Dimension.JOB, value=job)
    summary = new.summary

    def add(name: Metric, unit: str, value: float | None) -> None:
        if value is not None and math.isfinite(value):  # EMF is JSON: no NaN/Infinity
            metrics.add_metric(name=name, unit=unit, value=value)

    if summary.train is not None and progress.step is not None:
        add(Metric.TRAINING_STEP, "Count", progress.step)
        add(Metric.LOSS, "None", progress.loss)
        add(Metric.LEARNING_RATE, "None", progress.learning_rate)
        add(Metric.THROUGHPUT, "Count/Second", progress.throughput)
    if summary.compile is not None:
        add(Metric.COMPILE_GRAPHS, "Count", summary.compile.graphs)
        add(Metric.COMPILE_SUCCEEDED, "Count", summary.compile.succeeded)
        add(Metric.COMPILE_FAILED, "Count", summary.compile.failed)
    add(Metric.LOG_LINES, "Count", summary.lines)
    add(Metric.UNPARSED_LOG_LINES, "Count", summary.unparsed_lines)
    if new.rejected_end_markers:
        add(Metric.REJECTED_END_MARKERS, "Count", new.rejected_end_markers)
    if summary.rejected_steps:
        add(Metric.REJECTED_STEPS, "Count", summary.rejected_steps)


# --------------------------------------------------------------------------------------------
# One batch
# --------------------------------------------------------------------------------------------


def apply_batch(
    batch: LogBatch,
    *,
    store: RunStore,
    sfn: Any,
    metrics: Any,
    now: datetime,
    heartbeat_every: timedelta = timedelta(minutes=1),
    run_events: RunEvents | None = None,
    source: str | None = None,
) -> BatchOutcome:
    """Record one batch of a job's log: at most PUT_ATTEMPTS writes, one in the normal case.
    `source`: the pod whose stream it is, for an EKS run's (see apply_container_batch)."""
    if batch.message_type == CONTROL_MESSAGE or not batch.log_events:
        return BatchOutcome(ignored_reason="control message" if batch.message_type == CONTROL_MESSAGE else "no events")
    match = LOG_STREAM.match(batch.log_stream)
    if match is None:
        return BatchOutcome(
            ignored_reason=f"log stream {batch.log_stream!r} is not [<cluster's run_id>/]<run_id>/<compile|train>"
        )
    run_id = match["run_id"]
    job: JobKind = "compile" if match["job"] == "compile" else "train"
    outcome = BatchOutcome(run_id=run_id, job=job)

    record = store.get(run_id)
    if record is None:
        outcome.ignored_reason = f"no run record for {run_id}"
        return outcome
    if batch.log_stream != record.log_stream(job):
        # Only the nodes of the cluster the run runs on can write its stream: another's is not its output.
        outcome.ignored_reason = f"log stream {batch.log_stream!r} is not run {run_id}'s ({record.log_stream(job)!r})"
        return outcome
    job_record = record.job(job)
    # No token yet (submitted, token not stored) or the job already recorded as ended: nothing to tell.
    ended = job_record is not None and job_record.state in ("SUCCEEDED", "FAILED")
    token = job_record.task_token if job_record is not None and not ended else None

    end_key = job_record.end_key if job_record is not None else None
    known_slurm_job_id = job_record.slurm_job_id if job_record is not None else None

    def authentic(end: EndEvent) -> bool:
        return is_authentic(end, run_id=run_id, job=job, end_key=end_key, slurm_job_id=known_slurm_job_id)

    step_limit = record.spec.workload.total_steps if record.spec is not None else None
    pattern_text = record.spec.workload.progress_pattern if record.spec is not None else None
    pattern = compile_progress_pattern(pattern_text) if pattern_text else None  # validated at load
    events = sorted(batch.log_events, key=lambda event: int(event.id))
    stored, version = store.get_progress(run_id, job)
    heartbeat_at: datetime | None = None
    for attempt in range(1, PUT_ATTEMPTS + 1):
        ranges = _ranges(stored, source)
        fresh = [event for event in events if not _is_applied(event.id, ranges)]
        seen = [event for event in events if _is_applied(event.id, ranges)]
        outcome.applied_events, outcome.duplicate_events = len(fresh), len(seen)
        counted_from = stored.counted_steps if stored is not None else 0
        # A redelivered batch's stepless lines were counted when it was applied: not again.
        new = _parse(fresh, authentic, step_limit, pattern, counted_from)
        replayed = _parse(seen, authentic, step_limit, pattern, None)
        outcome.rejected_end_markers = new.rejected_end_markers
        merged = _merge(stored, new, replayed, job_record.attempt if job_record is not None else 1, source)
        if job == "train":
            _note_no_progress(merged)
        if attempt == 1:
            # Before the write: if telling the task fails, the batch stays unapplied and is retried.
            heartbeat_at = _tell_the_task(
                outcome, sfn, token, new, merged, stored, now=now, every=heartbeat_every, record=record
            )
            _emit_metrics(metrics, run_id, job, new, merged)
        if heartbeat_at is not None and (merged.last_heartbeat_at is None or merged.last_heartbeat_at < heartbeat_at):
            merged.last_heartbeat_at = heartbeat_at
        if merged.model_dump() == (stored or JobProgress()).model_dump():
            return outcome  # nothing new: a redelivered batch, or a concurrent writer applied it
        outcome.writes += 1
        if store.put_progress(run_id, job, merged, expected_version=version):
            outcome.wrote = True
            if run_events is not None and merged.no_progress_notice and not (stored and stored.no_progress_notice):
                run_events.publish(record, RunState.NO_PROGRESS, merged.no_progress_notice)  # the write that set it
            if token is None and new.end is not None:
                _complete_a_token_kept_meanwhile(outcome, store, sfn, new.end, merged)
            return outcome
        logger.info("progress write conflict, re-reading", extra={"run_id": run_id, "job": job, "attempt": attempt})
        stored, version = store.get_progress(run_id, job)
    raise ProgressNotRecorded(f"{run_id}/{job}: {PUT_ATTEMPTS} progress writes met concurrent ones")


def _complete_a_token_kept_meanwhile(
    outcome: BatchOutcome, store: RunStore, sfn: Any, end: EndEvent, progress: JobProgress
) -> None:
    """An end recorded while the record held no task token: a token kept since (the Train state's
    submission of a train job queued behind compile, which looked for this end before it was
    written: trainrun.steps.head_node.submit_job) is completed now, or nobody would complete it
    before the job state's heartbeat timeout."""
    record = store.get(end.run_id)
    job_record = record.job(end.job) if record is not None else None
    if job_record is None or job_record.task_token is None or job_record.state in ("SUCCEEDED", "FAILED"):
        return
    if job_record.slurm_job_id not in (None, end.slurm_job_id):
        return
    sent = complete_ended_task(sfn, job_record.task_token, end.run_id, end.job, end.slurm_job_id, progress)
    outcome.completed = ("success" if end.exit_code == 0 else "failure") if sent else None


def _tell_the_task(
    outcome: BatchOutcome,
    sfn: Any,
    token: str | None,
    new: _Parsed,
    progress: JobProgress,
    stored: JobProgress | None,
    *,
    now: datetime,
    every: timedelta,
    record: RunRecord,
) -> datetime | None:
    """Complete the task on a new end marker, else heartbeat when one is due; returns the
    heartbeat time to record. Only new events count: a redelivered batch proves nothing new.

    Once the run's reservation window says the job must stop, no heartbeat is sent: the job
    state times out within a heartbeat period and Check stops the job
    (trainrun.steps.head_node.check_job).
    """
    if token is None or new.last_event_id is None:
        return None  # not submitted yet (or the token not stored yet), or nothing new
    end = new.end
    if end is not None:
        if end.exit_code == 0:
            sent = call_task(sfn, "send_task_success", taskToken=token, output=success_output(end, progress))
        else:
            cause = failure_cause(end, progress, new.summary)
            sent = call_task(sfn, "send_task_failure", taskToken=token, error=JobFailed.__name__, cause=cause)
        outcome.completed = ("success" if end.exit_code == 0 else "failure") if sent else None
        outcome.token_was_stale = not sent
        return None
    last = stored.last_heartbeat_at if stored is not None else None
    if last is not None and now - last < every:
        return None
    if record.reservation_window is not None and record.reservation_window.stop_is_due(now):
        return None
    sent = call_task(sfn, "send_task_heartbeat", taskToken=token)
    outcome.heartbeat_sent = sent
    outcome.token_was_stale = not sent
    # Recorded even when stale, so a stale token is not tried again on every batch.
    return now


# --------------------------------------------------------------------------------------------
# An EKS run's container logs
# --------------------------------------------------------------------------------------------


class ContainerBatchOutcome(BaseModel):
    """What one batch of an EKS run's container logs did: an outcome per pod it held lines of."""

    outcomes: list[BatchOutcome]


def apply_container_batch(
    batch: LogBatch,
    *,
    store: RunStore,
    sfn: Any,
    metrics: Any,
    now: datetime,
    heartbeat_every: timedelta = timedelta(minutes=1),
    run_events: RunEvents | None = None,
    kubernetes: Callable[[RunRecord], Any] | None = None,
) -> list[BatchOutcome]:
    """A batch of an EKS run's cluster's application log group (the run named by the subscription
    that delivered it): each pod's lines, prefixed with its completion index (the rank, as srun
    --label prefixes a task's), are applied as that job's
    (`apply_batch`, the pod its own `source`). A pod's end line (POD_END_LINE) prompts the gateway
    to ask the API whether the Job ended (trainrun.steps.kubernetes.complete_if_ended); the line
    itself decides nothing."""
    from trainrun.logic.kubernetes_objects import (
        CONTAINER_LOG_GROUP,
        PROGRESS_SUBSCRIPTION,
        ContainerLine,
        container_line,
        is_pod_end_line,
    )
    from trainrun.steps.kubernetes import complete_if_ended

    match = CONTAINER_LOG_GROUP.match(batch.log_group)
    if match is None or batch.message_type == CONTROL_MESSAGE:
        return [BatchOutcome(ignored_reason=f"log group {batch.log_group!r} is no EKS cluster's application logs")]
    runs = [name.removeprefix(PROGRESS_SUBSCRIPTION) for name in batch.subscription_filters]
    run_id = next((name for name, full in zip(runs, batch.subscription_filters, strict=True) if name != full), None)
    if run_id is None:
        return [BatchOutcome(ignored_reason=f"no subscription of {batch.log_group!r} names a run")]
    groups: dict[tuple[JobKind, str], list[tuple[LogEvent, ContainerLine]]] = {}
    for event in batch.log_events:
        line = container_line(event.message)
        if line is not None:
            groups.setdefault((line.job, line.pod), []).append((event, line))
    if not groups:
        return []
    record = store.get(run_id)
    if record is None or record.eks is None or record.eks.name != match["cluster"]:
        reason = f"cluster {match['cluster']} is not run {run_id}'s"
        return [BatchOutcome(run_id=run_id, job=job, ignored_reason=reason) for job, _ in groups]
    outcomes = []
    for (job, source), lines in groups.items():
        relabelled = batch.model_copy(
            update={
                "log_stream": record.log_stream(job),
                "log_events": [
                    LogEvent(id=event.id, timestamp=event.timestamp, message=f"{line.index}: {line.text}")
                    for event, line in lines
                ],
            }
        )
        outcome = apply_batch(
            relabelled,
            store=store,
            sfn=sfn,
            metrics=metrics,
            now=now,
            heartbeat_every=heartbeat_every,
            run_events=run_events,
            source=source,
        )
        prompted = any(is_pod_end_line(line.text) for _, line in lines)
        if prompted and kubernetes is not None and outcome.applied_events:
            completed = complete_if_ended(kubernetes(record), store, sfn, run_id, job)
            if completed is not None:
                outcome.completed = completed
        outcomes.append(outcome)
    return outcomes
