"""The progress handler's logic: awslogs batches of a job's output -> run record, metrics, task."""

from __future__ import annotations

import base64
import gzip
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools import Metrics
from aws_lambda_powertools.utilities.data_classes import CloudWatchLogsEvent
from botocore.exceptions import ClientError

from trainrun.errors import TransientAwsError
from trainrun.logic.job_log import MAX_CACHE_NEFFS, EndEvent, parse_line
from trainrun.model.end_marker import end_marker
from trainrun.model.jobs import JobKind, JobProgress, JobRecord
from trainrun.model.resources import ClusterRef, ReservationWindow
from trainrun.model.run_file import RunSpec, parse_run_file
from trainrun.model.run_record import RunFileRef, RunRecord, RunStore
from trainrun.steps.progress import (
    MAX_CAUSE_BYTES,
    BatchOutcome,
    LogBatch,
    LogEvent,
    ProgressEventInvalid,
    ProgressNotRecorded,
    TaskCallbackFailed,
    apply_batch,
    decode_awslogs,
    encode_awslogs,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "joblogs"
RUN_ID = "bert-large-p1"  # the run the fixtures' end markers name
END_KEY = "ab" * 32  # the train job's end key in the run record
NOW = datetime(2023, 8, 24, 16, 40, tzinfo=UTC)
RUN_FILE = RunFileRef(bucket="trainrun-config-test", key="runs/bert.yaml")
TRAIN_LINE = (
    "LOG Thu Aug 24 16:35:15 2023 - ({epoch}, {step}) step_loss : {loss} learning_rate : 2.00e-07 throughput : 1628.54"
)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def event_id(n: int) -> str:
    """CloudWatch Logs event ids: numeric strings of equal length (56 digits)."""
    return f"{n:056d}"


def log_batch(messages: Sequence[str], *, first: int = 1, stream: str = f"{RUN_ID}/train") -> LogBatch:
    return LogBatch(
        message_type="DATA_MESSAGE",
        owner="123456789012",
        log_group="/trainrun/jobs",
        log_stream=stream,
        subscription_filters=["trainrun-progress"],
        log_events=[
            LogEvent(id=event_id(first + i), timestamp=1692895000000 + i, message=message)
            for i, message in enumerate(messages)
        ],
    )


def signed(line: str, *, key: str = "", slurm_job_id: int | None = None) -> str:
    """An end marker line as the head node's end watcher prints it: signed with the job's end key."""
    event = parse_line(line)
    assert isinstance(event, EndEvent)
    return end_marker(
        key or END_KEY,
        run_id=event.run_id,
        job=event.job,
        slurm_job_id=slurm_job_id if slurm_job_id is not None else event.slurm_job_id,
        exit_code=event.exit_code,
        state="COMPLETED" if event.exit_code == 0 else "FAILED",
        ended_at=1692895000,
    )


def fixture_lines(name: str) -> list[str]:
    """A recorded job log, its end marker signed as the end watcher signs it."""
    lines = (FIXTURES / name).read_text().splitlines()
    return [signed(line) if line.startswith("TRAINRUN-END") else line for line in lines]


def train_lines(steps: Sequence[int]) -> list[str]:
    return [TRAIN_LINE.format(epoch=0, step=step, loss=f"{10 - step / 1000:.4f}") for step in steps]


class FakeSfn:
    """Records SendTask* calls; raises a ClientError with a given code for chosen operations."""

    def __init__(self, fail: dict[str, str] | None = None):
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail = fail or {}

    def _call(self, operation: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((operation, kwargs))
        if operation in self.fail:
            code = self.fail[operation]
            status = 400 if code != "ServiceUnavailable" else 503
            raise ClientError(
                {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, operation
            )
        return {}

    def send_task_heartbeat(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("send_task_heartbeat", kwargs)

    def send_task_success(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("send_task_success", kwargs)

    def send_task_failure(self, **kwargs: Any) -> dict[str, Any]:
        return self._call("send_task_failure", kwargs)

    def operations(self) -> list[str]:
        return [operation for operation, _ in self.calls]


def given_run(store: RunStore, *, token: str | None = "tok", job: JobKind = "train") -> None:
    store.create(RunRecord(run_id=RUN_ID, run_file=RUN_FILE, created_at=NOW, updated_at=NOW))
    if token is not None:
        # The Slurm job id is not recorded yet: a marker of any job id signed with the key is the job's.
        store.set_job(RUN_ID, job, JobRecord(task_token=token, submitted_at=NOW, state="SUBMITTED", end_key=END_KEY))


@pytest.fixture
def aws_calls(dynamodb: Any) -> Counter[str]:
    """AWS calls made through the store's DynamoDB client, by operation name."""
    calls: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        calls[model.name] += 1

    dynamodb.meta.events.register("before-call", count)
    return calls


@pytest.fixture(autouse=True)
def metrics() -> Iterator[Metrics]:
    """Powertools metrics share their set across instances: start and end each test empty."""
    metrics = Metrics(namespace="TrainrunTest", service="progress")
    metrics.clear_metrics()
    yield metrics
    metrics.clear_metrics()


def apply(
    batch: LogBatch, store: RunStore, sfn: FakeSfn | None = None, metrics: Any = None, now: datetime = NOW
) -> BatchOutcome:
    """Apply one batch; without a metrics object, flush nothing and forget them, as after an invocation."""
    own = metrics is None
    metrics = Metrics(namespace="TrainrunTest") if own else metrics
    outcome = apply_batch(batch, store=store, sfn=sfn if sfn is not None else FakeSfn(), metrics=metrics, now=now)
    if own:
        metrics.clear_metrics()
    return outcome


def progress_of(store: RunStore, job: JobKind = "train") -> JobProgress:
    progress, _ = store.get_progress(RUN_ID, job)
    assert progress is not None
    return progress


# --------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------


def test_decode_reads_the_awslogs_shape_cloudwatch_delivers() -> None:
    # Given the exact shape CloudWatch Logs delivers: base64 of gzip of the JSON document
    document = {
        "messageType": "DATA_MESSAGE",
        "owner": "123456789012",
        "logGroup": "/trainrun/jobs",
        "logStream": f"{RUN_ID}/train",
        "subscriptionFilters": ["trainrun-progress"],
        "logEvents": [
            {"id": event_id(7), "timestamp": 1692895000000, "message": "Begin epoch 0"},
            {"id": event_id(8), "timestamp": 1692895000001, "message": "Files to process: 500"},
        ],
    }
    event = {"awslogs": {"data": base64.b64encode(gzip.compress(json.dumps(document).encode())).decode()}}

    # When it is decoded
    batch = decode_awslogs(event)

    # Then every field is there
    assert batch.message_type == "DATA_MESSAGE"
    assert batch.log_group == "/trainrun/jobs"
    assert batch.log_stream == f"{RUN_ID}/train"
    assert [(e.id, e.timestamp, e.message) for e in batch.log_events] == [
        (event_id(7), 1692895000000, "Begin epoch 0"),
        (event_id(8), 1692895000001, "Files to process: 500"),
    ]


def test_encode_is_the_inverse_of_decode() -> None:
    batch = log_batch(["a", "b\nc"])
    assert decode_awslogs(encode_awslogs(batch)) == batch


def test_a_control_message_decodes_to_an_empty_batch_that_is_ignored(store: RunStore, aws_calls: Counter[str]) -> None:
    # Given CloudWatch Logs' health check of the destination
    document = {
        "messageType": "CONTROL_MESSAGE",
        "owner": "CloudwatchLogs",
        "logGroup": "",
        "logStream": "",
        "subscriptionFilters": [],
        "logEvents": [
            {"id": "", "timestamp": 1692895000000, "message": "CWL CONTROL MESSAGE: Checking health of destination"}
        ],
    }
    event = {"awslogs": {"data": base64.b64encode(gzip.compress(json.dumps(document).encode())).decode()}}

    # When it is decoded and applied
    batch = decode_awslogs(event)
    outcome = apply(batch, store)

    # Then nothing is read or written
    assert batch.log_events == []
    assert outcome.ignored_reason == "control message"
    assert sum(aws_calls.values()) == 0


@pytest.mark.parametrize(
    "event",
    [
        {},
        {"awslogs": {}},
        {"awslogs": {"data": "not base64 !!"}},
        {"awslogs": {"data": base64.b64encode(b"not gzip").decode()}},
        {"awslogs": {"data": base64.b64encode(gzip.compress(b"{not json")).decode()}},
        {"awslogs": {"data": base64.b64encode(gzip.compress(b"[1, 2]")).decode()}},
        {
            "awslogs": {
                "data": base64.b64encode(gzip.compress(b'{"logEvents": [{"id": "x1", "timestamp": 1}]}')).decode()
            }
        },
        {"awslogs": {"data": base64.b64encode(gzip.compress(b"\x00" * (17 * 1024 * 1024))).decode()}},
    ],
    ids=["no-awslogs", "no-data", "bad-base64", "not-gzip", "not-json", "not-an-object", "bad-events", "gzip-bomb"],
)
def test_a_payload_that_is_not_awslogs_raises_a_typed_error(event: dict[str, Any]) -> None:
    with pytest.raises(ProgressEventInvalid):
        decode_awslogs(event)


# --------------------------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------------------------


def test_a_training_log_becomes_the_jobs_progress(store: RunStore) -> None:
    # Given a run and the real-format output of a training job (without its end marker)
    given_run(store, token=None)
    lines = [line for line in fixture_lines("train_bert_ok.out") if "TRAINRUN-END" not in line]

    # When it arrives in one batch
    outcome = apply(log_batch(lines), store)

    # Then the job's progress is what the log said
    progress = progress_of(store)
    assert outcome.wrote and outcome.writes == 1 and outcome.applied_events == len(lines)
    assert (progress.epoch, progress.step, progress.loss) == (0, 40, 9.5999)
    assert progress.learning_rate == 8e-06 and progress.throughput == 1625.73
    assert progress.checkpoints == 2
    assert progress.lines == len(lines) and progress.unparsed_lines == 11
    # The one graph torch-neuronx found in the Neuron compile cache
    assert len(progress.cache_hit_neffs) == 1
    assert [point.step for point in progress.history] == list(range(1, 41))
    assert progress.last_event_id == event_id(len(lines))
    assert progress.failures == []


def test_a_compile_log_records_the_compile_totals(store: RunStore) -> None:
    given_run(store, token=None, job="compile")
    apply(log_batch(fixture_lines("compile_bert_ok.out"), stream=f"{RUN_ID}/compile"), store)
    progress = progress_of(store, "compile")
    assert (progress.compile_graphs, progress.compile_succeeded, progress.compile_failed) == (2, 2, 0)


def test_graphs_found_in_the_compile_cache_count_once_across_batches_and_redeliveries(store: RunStore) -> None:
    # Given a compile whose two workers found both graphs in the cache, in two batches
    given_run(store, token=None, job="compile")
    lines = fixture_lines("compile_bert_cached.out")
    stream = f"{RUN_ID}/compile"
    first, second = log_batch(lines[:11], stream=stream), log_batch(lines[11:], stream=stream, first=12)
    # When both arrive, and the second is delivered again
    for batch in (first, second, second):
        apply(batch, store)
    # Then each graph is one hit, whichever worker printed it and however often
    progress = progress_of(store, "compile")
    assert len(progress.cache_hit_neffs) == 2 and progress.cached_failed_neffs == []
    assert progress.compile_graphs == 2


def test_the_graphs_found_in_the_compile_cache_are_bounded_across_batches(store: RunStore) -> None:
    given_run(store, token=None, job="compile")
    stream = f"{RUN_ID}/compile"

    def hits(first: int) -> list[str]:
        return [
            f"INFO ||NCC_WRAPPER||: Using a cached neff at /c/MODULE_{n}+d41d8cd9/model.neff."
            for n in range(first, first + 200)
        ]

    apply(log_batch(hits(0), stream=stream), store)
    apply(log_batch(hits(200), stream=stream, first=201), store)
    assert len(progress_of(store, "compile").cache_hit_neffs) == MAX_CACHE_NEFFS


def test_an_event_holding_several_lines_counts_each_line(store: RunStore) -> None:
    given_run(store, token=None)
    apply(log_batch(["Begin epoch 0\n" + "\n".join(train_lines([1, 2])) + "\n", "Files to process: 500"]), store)
    progress = progress_of(store)
    assert progress.lines == 4 and progress.step == 2


def test_failures_are_recorded_in_order_and_once(store: RunStore) -> None:
    given_run(store, token=None)
    lines = [line for line in fixture_lines("train_bert_failed.out") if "TRAINRUN-END" not in line]
    apply(log_batch(lines), store)
    apply(log_batch(["Traceback (most recent call last):", "srun: error: node: task 0"], first=1000), store)
    assert progress_of(store).failures == ["neuron_runtime_error", "traceback", "out_of_memory", "srun_error"]


def test_garbage_and_binary_lines_are_counted_never_fatal(store: RunStore) -> None:
    # Given lines no parser knows: binary, NULs, a huge line, broken training lines, empty messages
    given_run(store, token=None)
    garbage = [
        "\x00\x01\x02\xff\ufffd",
        "x" * 300_000,
        "LOG Thu Aug 24 - (0, x) step_loss : nan? learning_rate : throughput :",
        "",
        "\r\r\n",
        "TRAINRUN-END run=bert-large-p1 job=train slurm_job_id=x exit_code=0",
        *train_lines([5]),
    ]

    # When they arrive
    outcome = apply(log_batch(garbage), store)

    # Then they are counted, and the one good line still counts
    progress = progress_of(store)
    assert outcome.wrote
    assert progress.lines == len(garbage)
    assert progress.unparsed_lines == 4  # blank lines are lines, not unparsed ones
    assert progress.step == 5


def test_non_finite_values_are_stored_as_null(store: RunStore) -> None:
    given_run(store, token=None)
    apply(log_batch([TRAIN_LINE.format(epoch=0, step=3, loss="nan")]), store)
    progress = progress_of(store)
    assert progress.step == 3 and progress.loss is None
    # and a redelivery of that batch still changes nothing
    assert not apply(log_batch([TRAIN_LINE.format(epoch=0, step=3, loss="nan")]), store).wrote


def test_a_late_batch_with_lower_steps_never_lowers_the_step(store: RunStore) -> None:
    # Given progress at step 20
    given_run(store, token=None)
    apply(log_batch(train_lines(range(11, 21)), first=11), store)

    # When a batch with newer event ids but lower steps arrives (another rank's lines, say)
    apply(log_batch(train_lines(range(1, 11)), first=100), store)

    # Then the step stays at 20, and the lines are counted
    progress = progress_of(store)
    assert progress.step == 20 and progress.loss == pytest.approx(10 - 20 / 1000)
    assert progress.lines == 20
    assert [point.step for point in progress.history] == list(range(1, 21))


def test_a_late_batch_raises_the_step_and_its_lines_and_checkpoints_are_counted(store: RunStore) -> None:
    # Given batch 2 applied before batch 1 (steps 1..5 and a checkpoint), e.g. batch 1 retried
    given_run(store, token=None)
    apply(log_batch(["Saving checkpoint", "Checkpointing done"], first=7), store)

    # When batch 1 arrives late, its event ids below batch 2's
    outcome = apply(log_batch([*train_lines(range(1, 6)), "Checkpointing done"], first=1), store)

    # Then it is applied whole: its step, its lines and its checkpoint count
    progress = progress_of(store)
    assert outcome.duplicate_events == 0 and outcome.applied_events == 6
    assert progress.step == 5
    assert progress.lines == 8 and progress.checkpoints == 2


def test_a_late_batch_delivered_again_is_not_counted_twice(store: RunStore) -> None:
    # Given batch 2, then the late batch 1, both applied
    given_run(store, token=None)
    apply(log_batch(["Saving checkpoint", "Checkpointing done"], first=7), store)
    late = log_batch([*train_lines(range(1, 6)), "Checkpointing done"], first=1)
    apply(late, store)

    # When batch 1 is delivered once more
    outcome = apply(late, store)

    # Then nothing is counted again
    progress = progress_of(store)
    assert outcome.duplicate_events == 6 and outcome.applied_events == 0
    assert progress.lines == 8 and progress.checkpoints == 2


def test_a_duplicate_batch_changes_nothing_and_writes_nothing(store: RunStore, aws_calls: Counter[str]) -> None:
    # Given a batch already applied
    given_run(store)
    batch = log_batch([*train_lines(range(1, 50)), "Checkpointing done"])
    apply(batch, store)
    before = progress_of(store)
    aws_calls.clear()

    # When it is delivered again
    sfn = FakeSfn()
    outcome = apply(batch, store, sfn, now=NOW + timedelta(hours=1))

    # Then nothing is written (reads only), nothing counted twice, no heartbeat sent
    assert outcome.duplicate_events == 50 and outcome.applied_events == 0
    assert not outcome.wrote and outcome.writes == 0
    assert aws_calls["UpdateItem"] == 0 and aws_calls["PutItem"] == 0
    assert progress_of(store) == before
    assert sfn.calls == []


def test_ten_thousand_events_cost_one_write(store: RunStore, aws_calls: Counter[str]) -> None:
    # Given a run and a batch of 10,000 events (the most CloudWatch Logs delivers at once)
    given_run(store)
    messages = [line for step in range(1, 5001) for line in (*train_lines([step]), "Files to process: 500")]
    batch = decode_awslogs(encode_awslogs(log_batch(messages)))
    aws_calls.clear()

    # When it is applied
    outcome = apply(batch, store)

    # Then one conditional write records it all, with a bounded history
    assert aws_calls["UpdateItem"] == 1 and aws_calls["PutItem"] == 0 and aws_calls["BatchWriteItem"] == 0
    assert aws_calls["GetItem"] == 2
    assert outcome.writes == 1 and outcome.applied_events == 10_000
    progress = progress_of(store)
    assert progress.step == 5000 and progress.lines == 10_000
    assert 250 <= len(progress.history) <= 500 and progress.history[-1].step == 5000


def test_the_history_is_the_same_whatever_order_the_batches_came_in(store: RunStore) -> None:
    # Given steps 1..1000 and 1001..2000, delivered in order to one job and in reverse to the other
    given_run(store, token=None)
    early, late = train_lines(range(1, 1001)), train_lines(range(1001, 2001))
    apply(log_batch(early, first=1), store)
    apply(log_batch(late, first=2000), store)
    apply(log_batch(late, first=1, stream=f"{RUN_ID}/compile"), store)
    apply(log_batch(early, first=2000, stream=f"{RUN_ID}/compile"), store)

    # Then both histories are the same 500 points: every 4th step, ending at the last
    in_order, reversed_order = progress_of(store).history, progress_of(store, "compile").history
    assert in_order == reversed_order
    assert len(in_order) == 500 and in_order[-1].step == 2000
    assert all(point.step % 4 == 0 for point in in_order)


# --------------------------------------------------------------------------------------------
# Conflicts
# --------------------------------------------------------------------------------------------


class ContendedStore(RunStore):
    """A store where another writer gets in first `conflicts` times, applying `theirs`."""

    def __init__(self, dynamodb: Any, table: str, conflicts: int, theirs: LogBatch):
        super().__init__(dynamodb, table)
        self.conflicts = conflicts
        self.theirs = theirs
        self.other = RunStore(dynamodb, table)
        self.puts = 0

    def put_progress(self, run_id: str, job: Any, progress: JobProgress, expected_version: int) -> bool:
        self.puts += 1
        if self.conflicts > 0:
            self.conflicts -= 1
            metrics = Metrics(namespace="TrainrunTest")
            apply_batch(self.theirs, store=self.other, sfn=FakeSfn(), metrics=metrics, now=NOW)
            metrics.clear_metrics()
            self.theirs = log_batch([f"other writer {self.puts}"], first=int(self.theirs.log_events[-1].id) + 1)
        return super().put_progress(run_id, job, progress, expected_version)


def test_a_write_conflict_is_retried_on_a_fresh_read(store: RunStore, dynamodb: Any, runs_table: str) -> None:
    # Given another invocation that writes this job's progress between our read and our write
    given_run(store, token=None)
    theirs = log_batch(train_lines(range(1, 11)), first=1)
    contended = ContendedStore(dynamodb, runs_table, conflicts=1, theirs=theirs)

    # When our (later) batch is applied
    outcome = apply(log_batch(train_lines(range(11, 21)), first=11), contended)

    # Then our second write lands, on top of theirs
    assert outcome.writes == 2 and outcome.wrote
    progress = progress_of(store)
    assert progress.lines == 20 and progress.step == 20
    assert progress.last_event_id == event_id(20)


def test_write_conflicts_give_up_after_three_writes(store: RunStore, dynamodb: Any, runs_table: str) -> None:
    given_run(store, token=None)
    contended = ContendedStore(dynamodb, runs_table, conflicts=10, theirs=log_batch(["theirs"], first=1))
    with pytest.raises(ProgressNotRecorded):
        apply(log_batch(train_lines(range(1, 11)), first=100), contended)
    assert contended.puts == 3


# --------------------------------------------------------------------------------------------
# Heartbeats
# --------------------------------------------------------------------------------------------


def test_a_heartbeat_is_sent_at_most_once_a_minute(store: RunStore) -> None:
    # Given a submitted job with a task token
    given_run(store)
    sfn = FakeSfn()

    # When batches arrive at 0 s, 30 s and 61 s
    first = apply(log_batch(train_lines([1]), first=1), store, sfn, now=NOW)
    second = apply(log_batch(train_lines([2]), first=2), store, sfn, now=NOW + timedelta(seconds=30))
    third = apply(log_batch(train_lines([3]), first=3), store, sfn, now=NOW + timedelta(seconds=61))

    # Then heartbeats go with the first and the third, each recorded in that batch's one write
    assert (first.heartbeat_sent, second.heartbeat_sent, third.heartbeat_sent) == (True, False, True)
    assert sfn.calls == [("send_task_heartbeat", {"taskToken": "tok"})] * 2
    assert (first.writes, second.writes, third.writes) == (1, 1, 1)
    assert progress_of(store).last_heartbeat_at == NOW + timedelta(seconds=61)


def test_without_a_task_token_progress_is_recorded_and_nothing_sent(store: RunStore) -> None:
    # Given a job whose token is not stored yet
    given_run(store, token=None)
    sfn = FakeSfn()

    # When its log arrives, end marker included
    outcome = apply(log_batch(fixture_lines("train_bert_ok.out")), store, sfn)

    # Then progress is recorded, and there is nothing to tell
    assert outcome.wrote and outcome.completed is None and not outcome.heartbeat_sent
    assert sfn.calls == []
    assert progress_of(store).step == 40


def test_an_end_recorded_as_a_token_is_kept_completes_that_task(store: RunStore, monkeypatch: Any) -> None:
    # Given a chained train job whose end marker is read while no token is kept, and the Train
    # state keeps its token (and looks for the end, not written yet) before the end is written
    given_run(store, token=None)
    store.set_job(RUN_ID, "train", JobRecord(end_key=END_KEY))
    put_progress = store.put_progress

    def token_kept_first(*args: Any, **kwargs: Any) -> bool:
        store.set_job(RUN_ID, "train", JobRecord(task_token="late", slurm_job_id=18, end_key=END_KEY))
        return put_progress(*args, **kwargs)

    monkeypatch.setattr(store, "put_progress", token_kept_first)
    sfn = FakeSfn()
    # When the batch with the end marker is applied
    outcome = apply(log_batch(fixture_lines("train_bert_ok.out")), store, sfn)
    # Then the task that token waits in is completed: the end is not left to the heartbeat timeout
    assert [(operation, call["taskToken"]) for operation, call in sfn.calls] == [("send_task_success", "late")]
    assert outcome.completed == "success"


# --------------------------------------------------------------------------------------------
# Completion
# --------------------------------------------------------------------------------------------


def test_an_end_marker_with_exit_code_zero_completes_the_task_with_the_progress(store: RunStore) -> None:
    # Given a submitted job
    given_run(store)
    sfn = FakeSfn()

    # When its whole log, end marker last, arrives
    outcome = apply(log_batch(fixture_lines("train_bert_ok.out")), store, sfn)

    # Then the task succeeds with the job, its Slurm id, exit code and progress
    assert outcome.completed == "success" and not outcome.token_was_stale and not outcome.heartbeat_sent
    [(operation, call)] = sfn.calls
    assert operation == "send_task_success" and call["taskToken"] == "tok"
    output = json.loads(call["output"])
    assert (output["job"], output["slurm_job_id"], output["exit_code"]) == ("train", 18, 0)
    assert output["progress"]["step"] == 40 and output["progress"]["checkpoints"] == 2
    assert "history" not in output["progress"]
    assert outcome.wrote and progress_of(store).step == 40


def test_a_failed_job_fails_the_task_with_signatures_and_the_logs_tail(store: RunStore) -> None:
    # Given a submitted job whose log shows an out-of-memory failure
    given_run(store)
    sfn = FakeSfn()

    # When its log arrives
    outcome = apply(log_batch(fixture_lines("train_bert_failed.out")), store, sfn)

    # Then the task fails with JobFailed, and the cause says why
    assert outcome.completed == "failure"
    [(operation, call)] = sfn.calls
    assert operation == "send_task_failure" and call["error"] == "JobFailed"
    cause = call["cause"]
    assert "out_of_memory" in cause and "neuron_runtime_error" in cause and "srun_error" in cause
    assert "exited with code 1" in cause
    assert "first failure: 1: 2023-Aug-24 16:36:12.0456 98211:98342 ERROR  TDRV:dmem_alloc_internal" in cause
    assert "RuntimeError: Bad StatusOr access" in cause
    assert cause.splitlines()[-1].startswith("TRAINRUN-END run=bert-large-p1 job=train slurm_job_id=19 exit_code=1 ")


def test_the_failure_cause_fits_in_32_kb_however_long_the_lines(store: RunStore) -> None:
    given_run(store)
    sfn = FakeSfn()
    lines = ["Traceback (most recent call last):" + "é" * 5000, *["é" * 10_000] * 60]
    end = signed("TRAINRUN-END run=bert-large-p1 job=train slurm_job_id=19 exit_code=137")
    apply(log_batch([*lines, end]), store, sfn)
    cause = sfn.calls[0][1]["cause"]
    assert len(cause.encode()) <= MAX_CAUSE_BYTES
    assert "traceback" in cause and cause.endswith(end)


def test_an_end_marker_of_another_run_or_job_completes_nothing(store: RunStore) -> None:
    given_run(store)
    sfn = FakeSfn()
    outcome = apply(
        log_batch(
            [
                signed("TRAINRUN-END run=other-run job=train slurm_job_id=18 exit_code=0"),
                signed("TRAINRUN-END run=bert-large-p1 job=compile slurm_job_id=17 exit_code=0"),
            ]
        ),
        store,
        sfn,
    )
    assert outcome.completed is None and sfn.operations() == ["send_task_heartbeat"]
    assert outcome.rejected_end_markers == 2 and progress_of(store).rejected_end_markers == 2


def test_a_redelivered_end_marker_does_not_complete_the_task_again(store: RunStore) -> None:
    given_run(store)
    sfn = FakeSfn()
    batch = log_batch(fixture_lines("train_bert_ok.out"))
    apply(batch, store, sfn)
    outcome = apply(batch, store, sfn)
    assert outcome.completed is None and sfn.operations() == ["send_task_success"]


def test_a_job_recorded_as_ended_is_not_told_anything(store: RunStore) -> None:
    given_run(store, token=None)
    store.set_job(
        RUN_ID,
        "train",
        JobRecord(task_token="tok", slurm_job_id=18, exit_code=0, state="SUCCEEDED", end_key=END_KEY),
    )
    sfn = FakeSfn()
    outcome = apply(log_batch(fixture_lines("train_bert_ok.out")), store, sfn)
    assert sfn.calls == [] and outcome.completed is None and outcome.wrote


@pytest.mark.parametrize("code", ["TaskTimedOut", "TaskDoesNotExist", "InvalidToken"])
@pytest.mark.parametrize("log", ["train_bert_ok.out", "train_bert_failed.out", "heartbeat"])
def test_a_stale_token_is_not_an_error(store: RunStore, code: str, log: str) -> None:
    # Given a task that timed out, was completed already, or whose execution ended
    given_run(store)
    sfn = FakeSfn(
        fail={"send_task_success": code, "send_task_failure": code, "send_task_heartbeat": code},
    )
    lines = train_lines([1, 2]) if log == "heartbeat" else fixture_lines(log)

    # When the job's log arrives
    outcome = apply(log_batch(lines), store, sfn)

    # Then that is said, and the progress is recorded all the same
    assert outcome.token_was_stale
    assert outcome.completed is None and not outcome.heartbeat_sent
    assert outcome.wrote and len(sfn.calls) == 1


@pytest.mark.parametrize(
    ("code", "error"), [("AccessDeniedException", TaskCallbackFailed), ("ServiceUnavailable", TransientAwsError)]
)
def test_a_refused_completion_leaves_the_batch_unapplied_for_its_retry(
    store: RunStore, code: str, error: type[Exception]
) -> None:
    # Given Step Functions refuses the completion for a reason other than a stale token
    given_run(store)
    batch = log_batch(fixture_lines("train_bert_ok.out"))

    # When the batch is applied, it raises a typed error and records nothing
    with pytest.raises(error):
        apply(batch, store, FakeSfn(fail={"send_task_success": code}))
    assert store.get_progress(RUN_ID, "train") == (None, 0)

    # Then its redelivery completes the task
    sfn = FakeSfn()
    assert apply(batch, store, sfn).completed == "success"
    assert sfn.operations() == ["send_task_success"]


# --------------------------------------------------------------------------------------------
# What is ignored
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", ["i-0123456789abcdef0", f"{RUN_ID}/eval", "Bert/train", f"{RUN_ID}/train/x"])
def test_a_stream_that_names_no_run_and_job_is_ignored(store: RunStore, aws_calls: Counter[str], stream: str) -> None:
    outcome = apply(log_batch(train_lines([1]), stream=stream), store)
    assert outcome.ignored_reason is not None and stream in outcome.ignored_reason
    assert outcome.run_id is None and sum(aws_calls.values()) == 0


def test_a_stream_of_an_unknown_run_is_ignored(store: RunStore, aws_calls: Counter[str]) -> None:
    outcome = apply(log_batch(train_lines([1]), stream="no-such-run/train"), store)
    assert outcome.ignored_reason == "no run record for no-such-run"
    assert aws_calls["UpdateItem"] == 0


# --------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------


def emf_blobs(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


def test_a_batch_emits_its_metrics_dimensioned_by_run_and_job(
    store: RunStore, metrics: Metrics, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a run and a batch with training and compile lines
    given_run(store, token=None)
    lines = [
        *train_lines([1, 2, 3]),
        "2023-08-22 19:53:37.000212:  12345  INFO ||NEURON_PARALLEL_COMPILE||: Total graphs: 42",
        "2023-08-22 19:53:37.000212:  12345  INFO ||NEURON_PARALLEL_COMPILE||: Total successful compilations: 40",
        "2023-08-22 19:53:37.000212:  12345  INFO ||NEURON_PARALLEL_COMPILE||: Total failed compilations: 2",
        "some noise",
    ]

    # When it is applied and the metrics flushed (as the handler's log_metrics decorator does)
    apply(log_batch(lines), store, metrics=metrics)
    metrics.flush_metrics()

    # Then one EMF blob carries every metric, with the RunId and Job dimensions
    [blob] = emf_blobs(capsys)
    [directive] = blob["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "TrainrunTest"
    assert {"RunId", "Job"} <= set(directive["Dimensions"][0])
    assert (blob["RunId"], blob["Job"]) == (RUN_ID, "train")
    names = {metric["Name"] for metric in directive["Metrics"]}
    assert names == {
        "TrainingStep",
        "Loss",
        "LearningRate",
        "Throughput",
        "CompileGraphs",
        "CompileSucceeded",
        "CompileFailed",
        "LogLines",
        "UnparsedLogLines",
    }
    assert (blob["TrainingStep"], blob["CompileGraphs"], blob["CompileFailed"]) == ([3.0], [42.0], [2.0])
    assert (blob["LogLines"], blob["UnparsedLogLines"]) == ([7.0], [1.0])


def test_a_batch_without_training_lines_emits_only_line_counts(
    store: RunStore, metrics: Metrics, capsys: pytest.CaptureFixture[str]
) -> None:
    given_run(store, token=None)
    apply(log_batch(["Begin epoch 0", ""]), store, metrics=metrics)
    metrics.flush_metrics()
    [blob] = emf_blobs(capsys)
    names = {metric["Name"] for metric in blob["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert names == {"LogLines", "UnparsedLogLines"}
    assert (blob["LogLines"], blob["UnparsedLogLines"]) == ([2.0], [1.0])


# --------------------------------------------------------------------------------------------
# A job cannot lie about how it ended (trainrun.model.end_marker)
# --------------------------------------------------------------------------------------------


def test_a_forged_success_marker_of_the_right_run_and_job_is_counted_and_ignored(
    store: RunStore, metrics: Metrics, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a submitted job whose training script prints an unsigned success marker
    given_run(store)
    sfn = FakeSfn()
    forged = f"TRAINRUN-END run={RUN_ID} job=train slurm_job_id=18 exit_code=0"

    # When it arrives
    outcome = apply(log_batch([forged, *train_lines([1])]), store, sfn, metrics=metrics)
    metrics.flush_metrics()

    # Then the task is not completed (only a heartbeat), and the marker is counted
    assert outcome.completed is None and sfn.operations() == ["send_task_heartbeat"]
    progress = progress_of(store)
    assert progress.rejected_end_markers == 1 and progress.exit_code is None
    [blob] = emf_blobs(capsys)
    assert blob["RejectedEndMarkers"] == [1.0]


def test_a_marker_resigned_with_another_exit_code_is_ignored(store: RunStore) -> None:
    given_run(store)
    sfn = FakeSfn()
    real = signed(f"TRAINRUN-END run={RUN_ID} job=train slurm_job_id=18 exit_code=7")
    outcome = apply(log_batch([real.replace("exit_code=7", "exit_code=0")]), store, sfn)
    assert outcome.completed is None and outcome.rejected_end_markers == 1


def test_a_stale_marker_of_an_earlier_slurm_job_is_ignored(store: RunStore) -> None:
    # Given a job the record knows as Slurm job 42
    given_run(store)
    record = store.get(RUN_ID)
    assert record is not None and record.job("train") is not None
    store.set_job(RUN_ID, "train", record.job("train").model_copy(update={"slurm_job_id": 42}))  # type: ignore[union-attr]
    sfn = FakeSfn()
    # When an authentic marker of an earlier job (41) of the same run and job arrives
    outcome = apply(log_batch([signed(f"TRAINRUN-END run={RUN_ID} job=train slurm_job_id=41 exit_code=0")]), store, sfn)
    # Then it completes nothing
    assert outcome.completed is None and outcome.rejected_end_markers == 1


def test_a_marker_written_into_another_runs_stream_changes_nothing_there(store: RunStore) -> None:
    # Given two runs, each with its own end key: ours, and another one still training
    given_run(store)
    other = "other-run"
    store.create(RunRecord(run_id=other, run_file=RUN_FILE, created_at=NOW, updated_at=NOW))
    store.set_job(other, "train", JobRecord(task_token="other-tok", state="SUBMITTED", end_key="cd" * 32))
    sfn = FakeSfn()
    apply(log_batch(train_lines([1, 2, 3]), stream=f"{other}/train"), store, sfn)
    before = store.get_progress(other, "train")[0]
    assert before is not None

    # When markers are written into the other run's stream: our authentic one, and one naming
    # the other run but signed with our key
    ours = signed(f"TRAINRUN-END run={RUN_ID} job=train slurm_job_id=18 exit_code=0")
    theirs = signed(f"TRAINRUN-END run={other} job=train slurm_job_id=18 exit_code=0")
    outcome = apply(log_batch([ours, theirs], first=10, stream=f"{other}/train"), store, sfn)

    # Then the other run's task is not completed and its progress says no end
    after = store.get_progress(other, "train")[0]
    assert after is not None
    assert outcome.completed is None and "send_task_success" not in sfn.operations()
    assert (after.exit_code, after.slurm_job_id, after.step) == (None, None, before.step)
    assert after.rejected_end_markers == 2


# --------------------------------------------------------------------------------------------
# Hostile payloads
# --------------------------------------------------------------------------------------------


def awslogs_of(raw: bytes) -> dict[str, Any]:
    return {"awslogs": {"data": base64.b64encode(raw).decode()}}


def test_deeply_nested_json_is_an_invalid_payload_not_a_recursion_error() -> None:
    nested = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(ProgressEventInvalid, match="nested too deep"):
        decode_awslogs(awslogs_of(gzip.compress(nested)))


def test_a_truncated_gzip_stream_is_an_invalid_payload() -> None:
    whole = gzip.compress(json.dumps({"messageType": "DATA_MESSAGE", "logEvents": []}).encode())
    with pytest.raises(ProgressEventInvalid, match="truncated"):
        decode_awslogs(awslogs_of(whole[:-8]))  # the stream's CRC and size are missing


def test_a_payload_inflating_beyond_the_bound_is_refused_before_powertools_inflates_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given valid awslogs JSON padded to 17 MB (a gzip bomb that would otherwise decode fine)
    padded = b'{"messageType": "DATA_MESSAGE", "logEvents": []' + b" " * (17 * 1024 * 1024) + b"}"
    inflated_whole: list[bool] = []
    decompress = CloudWatchLogsEvent.decompress_logs_data.fget  # type: ignore[attr-defined]

    def counted(event: CloudWatchLogsEvent) -> bytes:
        inflated_whole.append(True)
        return decompress(event)

    monkeypatch.setattr(CloudWatchLogsEvent, "decompress_logs_data", property(counted))
    # When it arrives, it is refused for its size, and the data class never inflated it whole
    with pytest.raises(ProgressEventInvalid, match="more than"):
        decode_awslogs(awslogs_of(gzip.compress(padded)))
    assert inflated_whole == []
    # (while a payload within the bound is decoded by the data class)
    decode_awslogs(awslogs_of(gzip.compress(b'{"messageType": "DATA_MESSAGE", "logEvents": []}')))
    assert inflated_whole == [True]


def test_data_that_is_not_strictly_base64_is_an_invalid_payload() -> None:
    # Powertools' decoder skips characters outside the base64 alphabet; a payload holding any is refused.
    event = awslogs_of(gzip.compress(json.dumps({"messageType": "DATA_MESSAGE", "logEvents": []}).encode()))
    event["awslogs"]["data"] = "%%%" + event["awslogs"]["data"]
    with pytest.raises(ProgressEventInvalid, match="not an awslogs payload"):
        decode_awslogs(event)


def test_a_step_beyond_any_plausible_one_is_counted_and_ignored(store: RunStore) -> None:
    # Given a job at step 5
    given_run(store, token=None)
    apply(log_batch(train_lines([5])), store)
    # When one line claims a step near 10^18 (the parser takes up to 18 digits)
    apply(log_batch(train_lines([10**18 - 1, 6]), first=2), store)
    # Then the step is not pinned: the next real line still moves it
    progress = progress_of(store)
    assert progress.step == 6 and progress.rejected_steps == 1
    assert max(point.step for point in progress.history) == 6


def test_a_step_beyond_the_runs_total_steps_is_counted_and_ignored(store: RunStore) -> None:
    # Given a run that declares total_steps: 100
    given_run(store, token=None)
    store.set_spec(
        RUN_ID,
        RunSpec.model_validate(
            {
                "name": "bert",
                "capacity": {"reservation_id": "cr-0123456789abcdef0", "instance_type": "trn1.32xlarge", "nodes": 1},
                "workload": {"source": {"s3": "s3://bucket/workload.tar.gz"}, "train": "t", "total_steps": 100},
            }
        ),
    )
    apply(log_batch(train_lines([99, 101, 100])), store)
    progress = progress_of(store)
    assert progress.step == 100 and progress.rejected_steps == 1


def test_an_end_marker_in_a_batch_of_its_own_still_gives_the_cause_its_exception_and_the_logs_tail(
    store: RunStore,
) -> None:
    # Given a job whose traceback arrived in one batch
    given_run(store)
    sfn = FakeSfn()
    crash = ["step 19 done", "Traceback (most recent call last):", '  File "train.py"', "RuntimeError: crashed at 20"]
    apply(log_batch(crash), store, sfn)
    # When the end watcher's marker arrives in a later batch of its own
    end = signed(f"TRAINRUN-END run={RUN_ID} job=train slurm_job_id=18 exit_code=1")
    apply(log_batch([end], first=10), store, sfn)
    # Then the failure cause still shows the exception and the log's last lines
    cause = sfn.calls[-1][1]["cause"]
    assert "exception: RuntimeError: crashed at 20" in cause
    assert "step 19 done" in cause and cause.endswith(end)


# --------------------------------------------------------------------------------------------
# Attempts (resume after failure)
# --------------------------------------------------------------------------------------------


def test_each_attempts_lines_are_its_own_and_the_step_never_goes_back(store: RunStore) -> None:
    # Given a first attempt that logged steps 1..22 and lost a node (its end marker: NODE_FAIL)
    given_run(store)
    node_failure = end_marker(
        END_KEY, run_id=RUN_ID, job="train", slurm_job_id=7, exit_code=143, state="NODE_FAIL", ended_at=1692895000
    )
    lines = [*train_lines(range(1, 23)), "srun: error: Node failure on compute-st-trn1-2", node_failure]
    apply(log_batch(lines, first=1), store, FakeSfn())
    # When its resubmission (attempt 2, the record says) logs steps 21..30 from the checkpoint of step 20
    store.set_job(RUN_ID, "train", JobRecord(attempt=2, task_token="tok2", state="SUBMITTED", end_key=END_KEY))
    second = log_batch(train_lines(range(21, 31)), first=100)
    apply(second, store, FakeSfn())
    apply(second, store, FakeSfn())  # delivered twice
    # Then each attempt has its own steps, failures and end; the job's step is the highest reached
    progress = progress_of(store)
    first, resumed = progress.attempts
    assert (first.number, first.first_step, first.last_step, first.end_state) == (1, 1, 22, "NODE_FAIL")
    assert first.slurm_job_id == 7 and "node_failure" in first.failures
    assert (resumed.number, resumed.first_step, resumed.last_step, resumed.failures) == (2, 21, 30, [])
    assert progress.step == 30


# --------------------------------------------------------------------------------------------
# Reservation windows
# --------------------------------------------------------------------------------------------


def with_window(store: RunStore, stop_job_at: datetime) -> None:
    store.set_reservation_window(
        RUN_ID,
        ReservationWindow(
            reservation_id="cr-0123456789abcdef0", ends_at=stop_job_at + timedelta(minutes=45), stop_job_at=stop_job_at
        ),
    )


def test_no_heartbeat_once_the_reservation_says_stop_so_that_check_stops_the_job(store: RunStore) -> None:
    given_run(store)
    with_window(store, NOW + timedelta(seconds=30))
    sfn = FakeSfn()
    before = apply(log_batch(train_lines([1]), first=1), store, sfn, now=NOW)
    after = apply(log_batch(train_lines([2]), first=2), store, sfn, now=NOW + timedelta(minutes=2))
    assert (before.heartbeat_sent, after.heartbeat_sent) == (True, False)
    assert sfn.operations() == ["send_task_heartbeat"]


@pytest.mark.parametrize(
    ("borrowed_from", "stream", "applied"),
    [
        # A run on another run's kept cluster: that cluster's nodes write under their run's id
        ("owner-0123", f"owner-0123/{RUN_ID}/train", True),
        ("owner-0123", f"{RUN_ID}/train", False),
        ("owner-0123", f"other-0123/{RUN_ID}/train", False),
        # A run on its own cluster: its stream is its own id's, never under another's
        (None, f"{RUN_ID}/train", True),
        (None, f"owner-0123/{RUN_ID}/train", False),
    ],
)
def test_a_runs_progress_comes_only_from_the_stream_of_the_cluster_it_runs_on(
    store: RunStore, borrowed_from: str | None, stream: str, applied: bool
) -> None:
    # Given a run, on a kept cluster of another run or on its own
    given_run(store, token=None)
    if borrowed_from is not None:
        spec = parse_run_file((Path(__file__).parents[2] / "examples" / "single-node.yaml").read_text())
        owner = RunRecord(
            run_id=borrowed_from,
            run_file=RUN_FILE,
            spec=spec,
            cluster=ClusterRef(name=f"trainrun-{borrowed_from}", region="us-west-2", head_node_instance_id="i-0abc"),
            created_at=NOW,
            updated_at=NOW,
        )
        store.set_borrowed(RUN_ID, owner)
    # When a batch of training lines arrives in that stream
    outcome = apply(log_batch(train_lines([1, 2]), stream=stream), store)
    # Then it is the run's progress only when the stream is the one its cluster's nodes write
    assert outcome.wrote is applied, outcome.ignored_reason
    if not applied:
        assert outcome.ignored_reason is not None and "is not run" in outcome.ignored_reason
