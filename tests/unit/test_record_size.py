"""The run record stays under DynamoDB's 400 KB item limit, whatever the run file, the job or the errors.

moto refuses an item over 405,000 bytes (stricter than DynamoDB's 409,600), so a write the
real table would refuse fails here too; these tests build the largest record the budgets allow
and check it, and every later update, on moto.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainrun.errors import RunSpecInvalid
from trainrun.logic.job_log import FAILURE_SIGNATURES, MAX_CACHE_NEFFS, MAX_TRAIN_STEP, NEFF_ID_CHARS
from trainrun.model.findings import Code, Finding, Severity
from trainrun.model.jobs import Attempt, AttemptProgress, JobProgress, JobRecord, TrainPoint
from trainrun.model.record_size import (
    DYNAMODB_ITEM_LIMIT_BYTES,
    MAX_ATTEMPT_WHY_BYTES,
    MAX_ERROR_CAUSE_BYTES,
    MAX_FINDING_MESSAGE_BYTES,
    MAX_FINDINGS,
    MAX_PROGRESS_BYTES,
    MAX_SPEC_BYTES,
    clip_text,
    encode_json,
    encode_progress,
    item_size,
)
from trainrun.model.resources import ClusterRef, NetworkIds, StorageIds
from trainrun.model.run_file import MAX_RETRIES, MAX_RUN_FILE_BYTES, RunSpec, parse_run_file
from trainrun.model.run_record import RunError, RunFileRef, RunRecord, RunStatus, RunStore
from trainrun.steps.run import LoadRunSpecInput, load_run_spec

from .conftest import EXAMPLE_ALLOW_LISTS, REGION, moto_run_events
from .test_runfile import valid_document

# The worst case the budgets allow (run_record.py's table) stays this far below DynamoDB's limit.
MARGIN_BYTES = 100 * 1024
NOW = datetime(2026, 11, 23, tzinfo=UTC)
# A 4-byte character, a character JSON escapes to 6 bytes, and the two JSON escapes to 2.
HOSTILE = '😀\x01"\\'


def raw_item(dynamodb: Any, table: str, run_id: str) -> dict[str, Any]:
    item: dict[str, Any] = dynamodb.get_item(TableName=table, Key={"run_id": {"S": run_id}})["Item"]
    return item


def test_moto_refuses_an_item_over_dynamodbs_limit_as_dynamodb_does(dynamodb: Any, runs_table: str) -> None:
    # Given an item of 400 KB + 1 byte (attribute names count, strings as UTF-8)
    remaining = DYNAMODB_ITEM_LIMIT_BYTES + 1 - len("run_id") - len("r") - len("big")
    value = "é" * (remaining // 2) + "a" * (remaining % 2)
    item = {"run_id": {"S": "r"}, "big": {"S": value}}
    assert item_size(item) == DYNAMODB_ITEM_LIMIT_BYTES + 1
    # When it is written, then the table refuses it with DynamoDB's ValidationException
    with pytest.raises(ClientError) as refused:
        dynamodb.put_item(TableName=runs_table, Item=item)
    assert refused.value.response["Error"]["Code"] == "ValidationException"


def test_moto_refuses_an_update_that_takes_an_item_over_the_limit(dynamodb: Any, runs_table: str) -> None:
    # Given a small item
    dynamodb.put_item(TableName=runs_table, Item={"run_id": {"S": "r"}})
    # When an update would take it over 400 KB, then the table refuses it
    with pytest.raises(ClientError) as refused:
        dynamodb.update_item(
            TableName=runs_table,
            Key={"run_id": {"S": "r"}},
            UpdateExpression="SET big = :big",
            ExpressionAttributeValues={":big": {"S": "x" * DYNAMODB_ITEM_LIMIT_BYTES}},
        )
    assert refused.value.response["Error"]["Code"] == "ValidationException"


def largest_spec() -> RunSpec:
    """A valid run file whose stored spec is as close to MAX_SPEC_BYTES as its commands allow."""
    document = valid_document()
    document["name"] = "n" * 40  # the longest name, stored twice: the record's and the spec's
    # Shell fields hold no control characters: 4-byte characters, quotes and backslashes grow most.
    document["workload"]["env"] = {f"V{i}": '"\\' * 2048 for i in range(4)}
    document["workload"]["setup"] = '😀"\\' * 2_600
    document["workload"]["compile"] = '😀"\\' * 2_600
    document["workload"]["train"] = "😀" * 5_000
    spec = parse_run_file(yaml.safe_dump(document, allow_unicode=True))
    assert MAX_SPEC_BYTES - 4096 < len(encode_json(spec.stored()).encode()) <= MAX_SPEC_BYTES
    return spec


def hostile_findings(count: int) -> list[Finding]:
    return [
        Finding(code=Code.RUN_FILE_INVALID, severity=Severity.ERROR, message=f"{i}: " + HOSTILE * 5_000)
        for i in range(count)
    ]


def largest_progress(points: int) -> JobProgress:
    """A job's progress with the largest numbers a log line can carry, and many points."""
    huge = 10**4000 - 1  # Python's int() parses at most 4,300 digits from a log line
    return JobProgress(
        last_event_id="9" * 56,
        lines=huge,
        unparsed_lines=huge,
        epoch=huge,
        step=huge,
        loss=-1.2345678901234567e-300,
        learning_rate=-1.2345678901234567e-300,
        throughput=-1.2345678901234567e-300,
        checkpoints=huge,
        failures=list(FAILURE_SIGNATURES),
        # As many distinct NEFFs found in the compile cache as the parser counts, found and failed
        cache_hit_neffs=[f"{i:0{NEFF_ID_CHARS}x}" for i in range(MAX_CACHE_NEFFS)],
        cached_failed_neffs=[f"{i:0{NEFF_ID_CHARS}x}" for i in range(MAX_CACHE_NEFFS)],
        # Every attempt a run may make (workload.retries at most MAX_RETRIES), each with every signature
        attempts=[
            AttemptProgress(
                number=number,
                # A training line's step is at most MAX_TRAIN_STEP, or it is ignored (job_log's step_limit)
                first_step=MAX_TRAIN_STEP,
                last_step=MAX_TRAIN_STEP,
                failures=list(FAILURE_SIGNATURES),
                slurm_job_id=2**31,
                end_state="N" * 40,
            )
            for number in range(1, MAX_RETRIES + 2)
        ],
        history=[
            TrainPoint(step=10**300 + i, loss=-1.2345678901234567e-300, learning_rate=1e-300, throughput=1e300)
            for i in range(points)
        ],
        last_heartbeat_at=NOW,
    )


def hostile_error(name: str) -> RunError:
    # Step Functions carries an error name of up to 256 and a cause of up to 32,768 characters.
    return RunError(error=name + "E" * 300, cause="😀" * 32_768)


def build_largest_record(store: RunStore, run_id: str) -> None:
    """Every part of the record at the most its budget (or AWS) lets it hold."""
    now = datetime.now(UTC)
    run_file = RunFileRef(bucket="b" * 63, key="\x01" * 1024, version_id="v" * 1024, etag="e" * 34)
    execution_arn = f"arn:aws:states:{REGION}:123456789012:execution:" + "x" * 2000
    assert store.create(
        RunRecord(run_id=run_id, run_file=run_file, execution_arn=execution_arn, created_at=now, updated_at=now)
    )
    store.set_spec(run_id, largest_spec())
    store.set_findings(run_id, hostile_findings(10_000))
    store.set_availability_zone(run_id, "us-west-2d")
    store.set_network(
        run_id,
        NetworkIds(**{name: "vpc-" + "0" * 17 for name in NetworkIds.model_fields if name != "created"}),
    )
    store.set_storage(
        run_id, StorageIds(file_system_id="fs-" + "0" * 17, data_repository_association_id="dra-" + "0" * 17)
    )
    store.set_cluster(
        run_id,
        ClusterRef(name="c" * 60, region=REGION, status="CREATE_COMPLETE", head_node_instance_id="i-" + "0" * 17),
    )
    store.set_prepare_command(run_id, "0" * 36)
    for job in ("compile", "train"):
        record = JobRecord(
            # Every attempt a run may make, each ended, why cut as Resume train cuts it
            attempt=MAX_RETRIES + 1,
            attempts=[
                Attempt(
                    number=number,
                    slurm_job_id=2**31,
                    submitted_at=now,
                    ended_at=now,
                    state="N" * 40,
                    why=clip_text(HOSTILE * 1000, MAX_ATTEMPT_WHY_BYTES),
                    infrastructure=True,
                )
                for number in range(1, MAX_RETRIES + 2)
            ],
            task_token="t" * 2048,
            command_id="0" * 36,
            slurm_job_id=2**31,
            submitted_at=now,
            ended_at=now,
            exit_code=255,
            state="FAILED",
        )
        store.set_job(run_id, job, record)
        assert store.put_progress(run_id, job, largest_progress(500), 0)
    assert store.request_cancel(run_id, hostile_error("Cancel"))
    store.mark_kept(run_id)
    assert store.mark_torn_down(run_id)


def test_the_largest_record_the_budgets_allow_is_far_below_the_item_limit(
    store: RunStore, dynamodb: Any, runs_table: str
) -> None:
    # Given a record with every part at its largest: hostile spec, 10,000 findings, progress of
    # absurd numbers, maximal ids and tokens
    build_largest_record(store, "largest")
    # When it finishes with the longest errors Step Functions can carry
    assert store.finish("largest", RunStatus.FAILED, hostile_error("Job"), teardown_error=hostile_error("Teardown"))
    # Then the item is within DynamoDB's limit with the margin the budgets promise
    size = item_size(raw_item(dynamodb, runs_table, "largest"))
    assert size <= DYNAMODB_ITEM_LIMIT_BYTES - MARGIN_BYTES, size
    # And it reads back
    record = store.get("largest")
    assert record is not None and record.status == RunStatus.FAILED


def test_a_record_at_its_largest_still_accepts_every_later_update(
    store: RunStore, dynamodb: Any, runs_table: str
) -> None:
    # Given the largest record
    build_largest_record(store, "largest")
    # When the progress keeps growing, findings are replaced, jobs are rewritten and the run ends
    for version in range(1, 4):
        for job in ("compile", "train"):
            progress, current = store.get_progress("largest", job)
            assert progress is not None and current == version
            grown = largest_progress(500 + 100 * version)
            assert store.put_progress("largest", job, grown, current)
    store.set_findings("largest", hostile_findings(MAX_FINDINGS * 3))
    store.set_job("largest", "train", JobRecord(task_token="u" * 2048, state="SUCCEEDED", exit_code=0))
    assert store.finish("largest", RunStatus.FAILED, hostile_error("Job"), teardown_error=hostile_error("Teardown"))
    # Then every write succeeded and the item is still within the limit with its margin
    assert item_size(raw_item(dynamodb, runs_table, "largest")) <= DYNAMODB_ITEM_LIMIT_BYTES - MARGIN_BYTES


def test_findings_are_kept_to_their_budget_errors_first_with_a_count_of_the_rest(store: RunStore) -> None:
    # Given many warnings and then errors, each with a long message
    warnings = [Finding(code=Code.OPEN_RESERVATION, severity=Severity.WARNING, message="w" * 5000)] * 100
    errors = hostile_findings(100)
    # When they are recorded
    build = RunRecord(run_id="r", run_file=RunFileRef(bucket="b", key="k"), created_at=NOW, updated_at=NOW)
    assert store.create(build)
    store.set_findings("r", [*warnings, *errors])
    # Then the record keeps MAX_FINDINGS, the errors first, the last one counting the others
    record = store.get("r")
    assert record is not None
    kept = record.findings
    assert len(kept) == MAX_FINDINGS
    assert all(finding.severity == Severity.ERROR for finding in kept)
    assert kept[-1].message.startswith(f"and {200 - MAX_FINDINGS + 1} more findings")
    assert all(len(encode_json(f.message).encode()) - 2 <= MAX_FINDING_MESSAGE_BYTES for f in kept)
    assert kept[0].message.startswith("0: 😀")


def test_an_errors_cause_is_cut_to_its_budget_keeping_its_start(store: RunStore) -> None:
    assert store.create(RunRecord(run_id="r", run_file=RunFileRef(bucket="b", key="k"), created_at=NOW, updated_at=NOW))
    store.finish("r", RunStatus.FAILED, RunError(error="States.TaskFailed", cause="start " + "😀" * 32_768))
    record = store.get("r")
    assert record is not None and record.error is not None
    assert record.error.cause.startswith("start 😀")
    assert record.error.cause.endswith("…[cut]")
    assert len(record.error.cause.encode()) <= MAX_ERROR_CAUSE_BYTES


def test_a_progress_too_large_keeps_its_newest_points_and_thins_the_older_ones() -> None:
    progress = largest_progress(500)
    stored = JobProgress.model_validate_json(encode_progress(progress))
    assert len(encode_progress(progress).encode()) <= MAX_PROGRESS_BYTES
    steps = [point.step for point in stored.history]
    assert steps == sorted(steps) and steps
    # The newest point is kept, and so are older ones (thinned, not dropped)
    assert steps[-1] == progress.history[-1].step
    assert steps[0] < progress.history[-64].step
    assert stored.step == progress.step and stored.failures == progress.failures


def test_a_progress_within_its_budget_is_stored_unchanged() -> None:
    progress = largest_progress(20).model_copy(update={"step": 40, "lines": 1, "epoch": 1, "checkpoints": 0})
    assert encode_progress(progress) == progress.model_dump_json()


@pytest.mark.parametrize("text", ["", "abc", "é" * 10, "\ud800x", '"\\\x01' * 3])
def test_clip_text_keeps_text_within_budget_unchanged_but_a_lone_surrogate(text: str) -> None:
    assert clip_text(text, 1024) == text.replace("\ud800", "\ufffd")


@given(st.text(), st.integers(min_value=16, max_value=400))
def test_clip_text_fits_every_text_in_its_budget_as_stored(text: str, budget: int) -> None:
    clipped = clip_text(text, budget)
    assert len(encode_json(clipped).encode()) - 2 <= budget
    assert (
        clipped == text.replace("\ud800", "\ufffd")
        or clipped.endswith("…[cut]")
        or any("\ud800" <= c <= "\udfff" for c in text)
    )


# --- hostile run files through Load run spec -------------------------------------------------------

# Characters that grow most when stored: 4-byte UTF-8, JSON-escaped controls, quotes, backslashes.
GROWING = st.sampled_from(["😀", "é", "中", "\x01", "\x1b", '"', "\\", "\t", "\n", "a", " "])
repeated_text = st.builds(
    lambda unit, times: unit * times, st.text(GROWING, min_size=1, max_size=6), st.integers(1, 16_000)
)
env_values = st.builds(
    lambda unit, times: (unit * times)[:4096],
    st.text(st.sampled_from('"\\ax'), min_size=1, max_size=3),
    st.integers(1, 4096),
)


@st.composite
def hostile_run_files(draw: st.DrawFn) -> bytes:
    document = valid_document()
    workload = document["workload"]
    for field in ("setup", "compile", "train"):
        if draw(st.booleans()):
            workload[field] = draw(repeated_text)
    workload["env"] = {f"V{i}": draw(env_values) for i in range(draw(st.integers(0, 40)))}
    for i in range(draw(st.integers(0, 3000))):  # one finding each
        document[f"unknown_{i}_{'x' * 60}"] = i
    text = yaml.safe_dump(document, allow_unicode=draw(st.booleans()), width=10**6).encode()
    if draw(st.booleans()):  # a file at (or just over) the size limit: padded with a comment
        text += b"\n#" + b"x" * max(0, MAX_RUN_FILE_BYTES - len(text) - 2 + draw(st.integers(0, 1)))
    return text


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
@given(text=hostile_run_files())
def test_load_run_spec_keeps_every_record_within_the_limit_whatever_the_run_file(
    text: bytes, s3: Any, config_bucket: str, store: RunStore, dynamodb: Any, runs_table: str
) -> None:
    # Given a hostile run file uploaded to the config bucket
    put = s3.put_object(Bucket=config_bucket, Key="runs/hostile.yaml", Body=text)
    run_id = f"hostile-{put['VersionId'][:12].lower()}"
    ref = RunFileRef(bucket=config_bucket, key="runs/hostile.yaml", version_id=put["VersionId"])
    request = LoadRunSpecInput(run_id=run_id, run_file=ref)
    # When Load run spec reads it, then it is accepted or refused with findings, never a failed write
    try:
        load_run_spec(
            s3, store, request, job_heartbeat_seconds=600, allowed=EXAMPLE_ALLOW_LISTS, run_events=moto_run_events()
        )
    except RunSpecInvalid:
        record = store.get(run_id)
        assert record is not None and record.findings
        assert all(finding.code == Code.RUN_FILE_INVALID for finding in record.findings)
    # And the record, with the longest errors the run could end with, is within the limit
    assert store.finish(run_id, RunStatus.REJECTED, hostile_error("RunSpecInvalid"))
    assert item_size(raw_item(dynamodb, runs_table, run_id)) <= DYNAMODB_ITEM_LIMIT_BYTES - MARGIN_BYTES


def test_findings_within_the_budget_keep_their_order(store: RunStore) -> None:
    findings = [
        Finding(code=Code.TARGETED_RESERVATION, severity=Severity.INFO, message="info"),
        Finding(code=Code.INSUFFICIENT_CAPACITY, severity=Severity.ERROR, message="error"),
    ]
    assert store.create(RunRecord(run_id="r", run_file=RunFileRef(bucket="b", key="k"), created_at=NOW, updated_at=NOW))
    store.set_findings("r", findings)
    record = store.get("r")
    assert record is not None and record.findings == findings
