"""Fuzzing the progress function's input: hostile awslogs payloads and hostile log lines.

Whatever arrives, decoding either gives a batch or raises ProgressEventInvalid (nothing else
escapes the handler), and applying batches never raises, never lowers the (epoch, step) progress
and never lets a step or epoch beyond the plausible bounds in.
"""

from __future__ import annotations

import base64
import gzip
import itertools
import json
import zlib
from typing import Any

from aws_lambda_powertools import Metrics
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainrun.logic.job_log import MAX_TRAIN_EPOCH, MAX_TRAIN_STEP
from trainrun.model.jobs import JobProgress, JobRecord
from trainrun.model.run_record import RunRecord, RunStore
from trainrun.steps.progress import LogBatch, LogEvent, ProgressEventInvalid, apply_batch, decode_awslogs

from .test_progress import NOW, RUN_FILE, TRAIN_LINE, FakeSfn, event_id

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=30,
)


@st.composite
def payload_bytes(draw: st.DrawFn) -> bytes:
    """What a hostile sender may put behind awslogs.data: JSON (deep, odd or awslogs-like), then
    gzip (whole, truncated or with trailing bytes), or plain garbage."""
    kind = draw(st.sampled_from(["json", "deep", "awslogs", "garbage"]))
    if kind == "garbage":
        return draw(st.binary(max_size=200))
    if kind == "deep":
        depth = draw(st.integers(1, 100_000))
        raw = (
            ("[" * depth + "]" * depth).encode()
            if draw(st.booleans())
            else ('{"a":' * depth + "1" + "}" * depth).encode()
        )
    elif kind == "awslogs":
        document: dict[str, Any] = {
            "messageType": draw(st.sampled_from(["DATA_MESSAGE", "CONTROL_MESSAGE", "x"])),
            "logStream": draw(st.sampled_from(["r/train", "bad", ""])),
            "logEvents": draw(st.lists(json_values, max_size=3)),
        }
        raw = json.dumps(document).encode()
    else:
        raw = json.dumps(draw(json_values)).encode()
    compressed = gzip.compress(raw)
    cut = draw(st.sampled_from(["whole", "truncated", "trailing", "raw-deflate"]))
    if cut == "truncated":
        return compressed[: draw(st.integers(0, len(compressed) - 1))]
    if cut == "trailing":
        return compressed + draw(st.binary(min_size=1, max_size=20))
    if cut == "raw-deflate":
        return zlib.compress(raw)
    return compressed


@settings(max_examples=300, deadline=None)
@given(raw=payload_bytes(), shape=st.sampled_from(["ok", "not-base64", "no-data", "not-a-dict"]))
def test_decoding_any_payload_gives_a_batch_or_an_invalid_payload_error(raw: bytes, shape: str) -> None:
    event: Any = {"awslogs": {"data": base64.b64encode(raw).decode()}}
    if shape == "not-base64":
        event["awslogs"]["data"] = "%%%" + event["awslogs"]["data"]
    elif shape == "no-data":
        event = {"awslogs": {}}
    elif shape == "not-a-dict":
        event = {"awslogs": ["data"]}
    try:
        batch = decode_awslogs(event)
    except ProgressEventInvalid:
        return
    assert isinstance(batch, LogBatch)


hostile_lines = st.one_of(
    st.builds(
        lambda epoch, step: TRAIN_LINE.format(epoch=epoch, step=step, loss="1.0"),
        st.integers(0, 10**18 - 1),
        st.integers(0, 10**18 - 1),
    ),
    st.builds(lambda step: TRAIN_LINE.format(epoch=0, step=step, loss="nan"), st.integers(0, 100)),
    st.builds(
        lambda run, code: f"TRAINRUN-END run={run} job=train slurm_job_id=1 exit_code={code}",
        st.sampled_from(["fuzz-run", "other-run"]),
        st.integers(-5, 300),
    ),
    st.just("Checkpointing done"),
    st.text(max_size=300),
)
_runs = itertools.count()


@st.composite
def hostile_deliveries(draw: st.DrawFn) -> tuple[list[list[str]], list[int]]:
    """Batches of hostile lines, and an order of delivery: any order, some batches twice."""
    batches = draw(st.lists(st.lists(hostile_lines, min_size=1, max_size=5), min_size=1, max_size=3))
    order = draw(st.permutations(range(len(batches))))
    return batches, [*order, *draw(st.lists(st.sampled_from(range(len(batches))), max_size=2))]


# Each delivery is a few DynamoDB calls on moto: few examples, no shrinking budget wasted on time.
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=hostile_deliveries())
def test_applying_hostile_batches_never_raises_and_keeps_the_step_monotonic_and_bounded(
    store: RunStore, plan: tuple[list[list[str]], list[int]]
) -> None:
    batches, order = plan
    run_id = f"fuzz-run-{next(_runs)}"
    store.create(RunRecord(run_id=run_id, run_file=RUN_FILE, created_at=NOW, updated_at=NOW))
    store.set_job(run_id, "train", JobRecord(task_token="tok", state="SUBMITTED", end_key="ef" * 32))
    events: list[LogEvent] = []
    ids = itertools.count(1)
    for lines in batches:
        events_of_batch = [LogEvent(id=event_id(next(ids)), timestamp=0, message=line) for line in lines]
        events.extend(events_of_batch)
    offsets = list(itertools.accumulate([0, *map(len, batches)]))
    sfn = FakeSfn()
    previous = JobProgress()
    for index in order:
        batch = LogBatch(log_stream=f"{run_id}/train", log_events=events[offsets[index] : offsets[index + 1]])
        metrics = Metrics(namespace="TrainrunFuzz")
        apply_batch(batch, store=store, sfn=sfn, metrics=metrics, now=NOW)
        metrics.clear_metrics()
        progress, _ = store.get_progress(run_id, "train")
        assert progress is not None
        # progress is (epoch, step): never lowered, never beyond the plausible bounds
        assert (progress.epoch or 0, progress.step or 0) >= (previous.epoch or 0, previous.step or 0)
        assert (progress.step or 0) <= MAX_TRAIN_STEP and (progress.epoch or 0) <= MAX_TRAIN_EPOCH
        assert progress.lines >= previous.lines and progress.rejected_end_markers >= previous.rejected_end_markers
        previous = progress
    # No forged marker ever completed the task
    assert "send_task_success" not in sfn.operations() and "send_task_failure" not in sfn.operations()
