"""The workflow's steps against moto: the versioned config bucket, the runs table and the emulated capacity."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
import yaml

from trainrun.errors import RunFileNotFound, RunSpecInvalid
from trainrun.local import capacity_emulator
from trainrun.local.fixture import AccountFixture
from trainrun.model.findings import Code, Severity
from trainrun.model.run_record import RunError, RunFileRef, RunStatus, RunStore
from trainrun.steps.run import (
    FinishRunInput,
    LoadRunSpecInput,
    ReservationLeads,
    RunRef,
    RunSummary,
    finish_run,
    load_run_spec,
    validate_capacity,
)
from trainrun.workflow import State

from .conftest import EXAMPLE_ALLOW_LISTS, moto_run_events

pytestmark = pytest.mark.usefixtures("no_network")

REGION = "us-west-2"
KEY = "runs/single-node.yaml"
RUN_ID = "single-node-0123456789ab"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RESERVATION_ID = "cr-0123456789abcdef0"
# The account of the local runtime's default fixture: one targeted reservation for 16
# trn1.32xlarge in us-west-2d.
ACCOUNT = AccountFixture.model_validate(
    {
        "region": REGION,
        "capacity_reservations": [
            {
                "id": RESERVATION_ID,
                "instance_type": "trn1.32xlarge",
                "availability_zone": "us-west-2d",
                "total_instance_count": 16,
                "available_instance_count": 16,
            }
        ],
    }
)
LEADS = ReservationLeads(
    provisioning=timedelta(minutes=20), termination=timedelta(minutes=30), stop_margin=timedelta(minutes=15)
)
# A one-node run on that reservation (examples/single-node.yaml).
SINGLE_NODE = f"""\
name: single-node
region: {REGION}
capacity:
  reservation_id: {RESERVATION_ID}
  instance_type: trn1.32xlarge
  nodes: 1
  availability_zone: us-west-2d
storage:
  fsx:
    deployment_type: SCRATCH_2
    storage_capacity_gib: 1200
workload:
  source:
    s3: s3://trainrun-examples/local-workload.tar.gz
  workdir: .
  compile: neuron_parallel_compile python3 train.py --steps 40
  train: python3 train.py --steps 40
  max_runtime: 30m
"""


def run_file(**capacity: Any) -> str:
    """The single-node run, with capacity fields changed."""
    document = yaml.safe_load(SINGLE_NODE)
    document["capacity"].update(capacity)
    return yaml.safe_dump(document, sort_keys=False)


INVALID_RUN_FILE = """\
name: Single Node
capacity:
  reservation_id: cr-0123456789abcdef0
  instance_type: trn1.32xlarge
  nodes: 0
workload:
  source: {s3: s3://trainrun-examples/local-workload.tar.gz}
  train: python3 train.py
  colour: blue
"""


def upload(s3: Any, bucket: str, text: str, key: str = KEY) -> RunFileRef:
    put = s3.put_object(Bucket=bucket, Key=key, Body=text.encode())
    return RunFileRef(bucket=bucket, key=key, version_id=put["VersionId"], etag=put["ETag"].strip('"'))


def request_for(ref: RunFileRef) -> LoadRunSpecInput:
    return LoadRunSpecInput(
        run_id=RUN_ID, run_file=ref, execution_arn=f"arn:aws:states:{REGION}:123456789012:execution:run:{RUN_ID}"
    )


def load(s3: Any, store: RunStore, ref: RunFileRef) -> RunSummary:
    """Load run spec on `ref`, as its handler calls it (the stack's default heartbeat, the examples'
    allow-lists, run events to moto)."""
    return load_run_spec(
        s3,
        store,
        request_for(ref),
        job_heartbeat_seconds=600,
        allowed=EXAMPLE_ALLOW_LISTS,
        run_events=moto_run_events(),
    )


# --- Load run spec --------------------------------------------------------------------------------


def test_load_run_spec_creates_the_record_with_the_spec_and_returns_a_summary(
    s3: Any, config_bucket: str, store: RunStore
) -> None:
    # Given the single-node example uploaded as a run file
    ref = upload(s3, config_bucket, SINGLE_NODE)
    # When the run spec is loaded
    summary = load(s3, store, ref)
    # Then the summary carries what the state machine needs
    assert summary == RunSummary(
        run_id=RUN_ID,
        name="single-node",
        nodes=1,
        instance_type="trn1.32xlarge",
        has_compile=True,
        job_timeout_seconds=30 * 60,
        job_heartbeat_seconds=600,
    )
    # And the record holds the run file, the execution, the name and the validated spec
    record = store.get(RUN_ID)
    assert record is not None
    assert (record.status, record.run_file, record.name) == (RunStatus.RUNNING, ref, "single-node")
    assert record.execution_arn == request_for(ref).execution_arn
    assert record.spec is not None
    assert record.spec.capacity.model_dump(exclude_none=True) == {
        "reservation_id": RESERVATION_ID,
        "instance_type": "trn1.32xlarge",
        "nodes": 1,
        "availability_zone": "us-west-2d",
    }


def test_load_run_spec_reads_the_version_that_started_the_run(s3: Any, config_bucket: str, store: RunStore) -> None:
    # Given a valid version of the run file, then an invalid one uploaded over it
    first = upload(s3, config_bucket, SINGLE_NODE)
    upload(s3, config_bucket, INVALID_RUN_FILE)
    # When the run started by the first upload loads its spec
    summary = load(s3, store, first)
    # Then it reads the first version, which is valid
    assert summary.name == "single-node"


def test_an_invalid_run_file_still_creates_the_record(s3: Any, config_bucket: str, store: RunStore) -> None:
    ref = upload(s3, config_bucket, INVALID_RUN_FILE)
    with pytest.raises(RunSpecInvalid):
        load(s3, store, ref)
    record = store.get(RUN_ID)
    assert record is not None and record.run_file == ref and record.spec is None


def test_an_invalid_run_file_raises_run_spec_invalid(s3: Any, config_bucket: str, store: RunStore) -> None:
    ref = upload(s3, config_bucket, INVALID_RUN_FILE)
    with pytest.raises(RunSpecInvalid):
        load(s3, store, ref)


def test_an_invalid_run_file_is_recorded_as_one_finding_per_problem(
    s3: Any, config_bucket: str, store: RunStore
) -> None:
    # Given a run file with three problems
    ref = upload(s3, config_bucket, INVALID_RUN_FILE)
    # When its spec is loaded
    with pytest.raises(RunSpecInvalid) as raised:
        load(s3, store, ref)
    # Then the record holds one RUN_FILE_INVALID error per problem, each naming its field and its line
    record = store.get(RUN_ID)
    assert record is not None
    problems = raised.value.problems
    assert {"name", "capacity.nodes", "workload.colour"} <= {problem.path for problem in problems}
    assert len(record.findings) == len(problems)
    for finding, problem in zip(record.findings, problems, strict=True):
        assert (finding.code, finding.severity) == (Code.RUN_FILE_INVALID, Severity.ERROR)
        assert finding.message.startswith(f"{problem.path} (line {problem.line}): ")


def test_a_missing_run_file_is_not_found(s3: Any, config_bucket: str, store: RunStore) -> None:
    ref = RunFileRef(bucket=config_bucket, key="runs/absent.yaml")
    with pytest.raises(RunFileNotFound, match=r"s3://trainrun-config-test/runs/absent\.yaml"):
        load(s3, store, ref)


def test_a_missing_version_of_the_run_file_is_not_found(s3: Any, config_bucket: str, store: RunStore) -> None:
    ref = upload(s3, config_bucket, SINGLE_NODE)
    gone = ref.model_copy(update={"version_id": "3HL4kqtJlcpXroDTDmJ.rmSpXd3dIbrHY"})
    with pytest.raises(RunFileNotFound):
        load(s3, store, gone)


def test_loading_the_run_spec_twice_is_safe(s3: Any, config_bucket: str, store: RunStore) -> None:
    # Given a run spec already loaded once
    ref = upload(s3, config_bucket, SINGLE_NODE)
    first = load(s3, store, ref)
    before = store.get(RUN_ID)
    # When the step is retried
    again = load(s3, store, ref)
    # Then it answers the same and the record is the same one
    after = store.get(RUN_ID)
    assert again == first
    assert before is not None and after is not None
    assert after.model_dump(exclude={"updated_at"}) == before.model_dump(exclude={"updated_at"})


# --- Finish run -----------------------------------------------------------------------------------


def test_finish_run_records_the_outcome_and_error_once(s3: Any, config_bucket: str, store: RunStore) -> None:
    # Given a loaded run
    load(s3, store, upload(s3, config_bucket, SINGLE_NODE))
    failed = FinishRunInput.model_validate(
        {
            "run_id": RUN_ID,
            "outcome": "FAILED",
            "state": {"error": {"Error": "States.TaskFailed", "Cause": "train.sh exit 1"}},
        }
    )
    # When it finishes as failed, then a late duplicate says it succeeded
    first = finish_run(store, failed, run_events=moto_run_events())
    late = finish_run(store, FinishRunInput(run_id=RUN_ID, outcome="SUCCEEDED"), run_events=moto_run_events())
    # Then only the first outcome is recorded, with its error
    assert (first.recorded, late.recorded) == (True, False)
    record = store.get(RUN_ID)
    assert record is not None
    assert record.status is RunStatus.FAILED
    assert record.error == RunError(error="States.TaskFailed", cause="train.sh exit 1")
    assert late.status is RunStatus.FAILED and late.error == record.error


def test_finish_run_keeps_the_original_error_and_records_the_teardowns_beside_it(s3, store, config_bucket) -> None:
    load(s3, store, upload(s3, config_bucket, SINGLE_NODE))
    original = {"Error": "ClusterCreateFailed", "Cause": "HeadNodeBootstrapFailure"}
    teardown = {"Error": "TeardownFailed", "Cause": "cluster is DELETE_FAILED"}
    answer = finish_run(
        store,
        FinishRunInput.model_validate(
            {"run_id": RUN_ID, "outcome": "FAILED", "state": {"error": original, "teardown_error": teardown}}
        ),
        run_events=moto_run_events(),
    )
    record = store.get(RUN_ID)
    assert record is not None
    assert answer.error == record.error == RunError.model_validate(original)
    assert record.teardown_error == RunError.model_validate(teardown)


def test_a_successful_run_whose_teardown_failed_ends_with_the_teardown_error(s3, store, config_bucket) -> None:
    load(s3, store, upload(s3, config_bucket, SINGLE_NODE))
    teardown = {"Error": "TeardownFailed", "Cause": "cluster is DELETE_FAILED"}
    answer = finish_run(
        store,
        FinishRunInput.model_validate({"run_id": RUN_ID, "outcome": "FAILED", "state": {"teardown_error": teardown}}),
        run_events=moto_run_events(),
    )
    assert answer.error == RunError.model_validate(teardown)


def test_a_run_whose_training_succeeded_stays_succeeded_when_its_teardown_could_not_finish(
    s3: Any, store: RunStore, config_bucket: str
) -> None:
    # Given a run that trained, and a teardown that gave up on its cluster
    load(s3, store, upload(s3, config_bucket, SINGLE_NODE))
    teardown = {"Error": "TransientAwsError", "Cause": "ParallelCluster API (502) may succeed if retried"}
    # When the workflow records its success with the teardown's error
    answer = finish_run(
        store,
        FinishRunInput.model_validate(
            {"run_id": RUN_ID, "outcome": "SUCCEEDED", "state": {"teardown_error": teardown}}
        ),
        run_events=moto_run_events(),
    )
    # Then the run is SUCCEEDED, without an error of its own, and the teardown's error is kept beside it
    record = store.get(RUN_ID)
    assert record is not None
    assert (answer.status, answer.error) == (RunStatus.SUCCEEDED, None)
    assert (record.status, record.error) == (RunStatus.SUCCEEDED, None)
    assert record.teardown_error == RunError.model_validate(teardown)


# --- Validate capacity ----------------------------------------------------------------------------


@pytest.fixture
def ec2(aws: None) -> Any:
    return boto3.client("ec2", region_name=REGION)


@pytest.fixture
def resource_groups(aws: None) -> Any:
    return boto3.client("resource-groups", region_name=REGION)


@pytest.fixture
def example_account(aws: None) -> None:
    capacity_emulator.seed(ACCOUNT)


def loaded(s3: Any, bucket: str, store: RunStore, text: str) -> RunRef:
    load(s3, store, upload(s3, bucket, text))
    return RunRef(run_id=RUN_ID)


def test_a_run_that_fits_its_reservation_is_accepted_in_its_zone(
    s3: Any, config_bucket: str, store: RunStore, ec2: Any, resource_groups: Any, example_account: None
) -> None:
    # Given the single-node run on the example account's reservation
    run = loaded(s3, config_bucket, store, SINGLE_NODE)
    # When its capacity is validated
    verdict = validate_capacity(ec2, resource_groups, store, run, stack_region=REGION, now=NOW, leads=LEADS)
    # Then it is accepted in the reservation's zone, and the findings are recorded
    assert verdict.accepted is True
    assert verdict.availability_zone == "us-west-2d"
    assert all(f.severity is not Severity.ERROR for f in verdict.findings)
    record = store.get(RUN_ID)
    assert record is not None and record.findings == verdict.findings


@pytest.mark.parametrize(
    ("capacity", "code"),
    [
        ({"instance_type": "trn1n.32xlarge"}, Code.INSTANCE_TYPE_MISMATCH),
        ({"nodes": 32}, Code.INSUFFICIENT_CAPACITY),
    ],
    ids=["wrong-instance-type", "too-many-nodes"],
)
def test_a_run_its_reservation_cannot_host_is_rejected_with_findings_recorded(
    s3: Any,
    config_bucket: str,
    store: RunStore,
    ec2: Any,
    resource_groups: Any,
    example_account: None,
    capacity: dict[str, Any],
    code: Code,
) -> None:
    # Given a run the example reservation cannot host
    run = loaded(s3, config_bucket, store, run_file(**capacity))
    # When its capacity is validated
    verdict = validate_capacity(ec2, resource_groups, store, run, stack_region=REGION, now=NOW, leads=LEADS)
    # Then it is not accepted, no zone is chosen, and the error finding is in the record
    assert verdict.accepted is False
    assert verdict.availability_zone is None
    assert (code, Severity.ERROR) in {(f.code, f.severity) for f in verdict.findings}
    record = store.get(RUN_ID)
    assert record is not None and record.findings == verdict.findings


def test_a_run_on_a_capacity_block_that_starts_later_waits_until_its_start_less_the_lead(
    s3: Any, config_bucket: str, store: RunStore, ec2: Any, resource_groups: Any
) -> None:
    # Given the example reservation as a capacity block that starts in 3 hours and lasts a day
    now = datetime.now(UTC).replace(microsecond=0)
    block = ACCOUNT.capacity_reservations[0].model_copy(
        update={
            "reservation_type": "capacity-block",
            "start_date": now + timedelta(hours=3),
            "end_date": now + timedelta(hours=27),
        }
    )
    capacity_emulator.seed(ACCOUNT.model_copy(update={"capacity_reservations": [block]}))
    run = loaded(s3, config_bucket, store, SINGLE_NODE)
    # When its capacity is validated
    verdict = validate_capacity(ec2, resource_groups, store, run, stack_region=REGION, now=now, leads=LEADS)
    # Then it is accepted, says so, and waits until 20 minutes before the start
    assert verdict.accepted is True
    assert [f.severity for f in verdict.findings if f.code == Code.RESERVATION_STARTS_LATER] == [Severity.INFO]
    assert verdict.wait_until == (now + timedelta(hours=3, minutes=-20)).strftime("%Y-%m-%dT%H:%M:%SZ")
    # And the record keeps the window: the job stops 30 + 15 minutes before the block's end
    record = store.get(RUN_ID)
    assert record is not None and record.reservation_window is not None
    assert record.reservation_window.stop_job_at == now + timedelta(hours=27) - timedelta(minutes=45)


def test_a_run_on_an_active_reservation_with_no_end_neither_waits_nor_keeps_a_window(
    s3: Any, config_bucket: str, store: RunStore, ec2: Any, resource_groups: Any, example_account: None
) -> None:
    run = loaded(s3, config_bucket, store, SINGLE_NODE)
    verdict = validate_capacity(ec2, resource_groups, store, run, stack_region=REGION, now=NOW, leads=LEADS)
    assert verdict.wait_until is None
    record = store.get(RUN_ID)
    assert record is not None and record.reservation_window is None


def test_validate_capacity_without_a_loaded_spec_is_not_found(
    store: RunStore, ec2: Any, resource_groups: Any, example_account: None
) -> None:
    with pytest.raises(RunFileNotFound, match=State.LOAD_RUN_SPEC):
        validate_capacity(ec2, resource_groups, store, RunRef(run_id=RUN_ID), stack_region=REGION, now=NOW, leads=LEADS)


def test_a_risky_environment_variable_is_a_recorded_warning_that_does_not_reject_the_run(
    s3: Any, config_bucket: str, store: RunStore, ec2: Any, resource_groups: Any, example_account: None
) -> None:
    # Given the single-node run with NEURON_RT_VISIBLE_CORES set for every process of the job
    text = SINGLE_NODE.replace("max_runtime: 30m", "max_runtime: 30m\n  env: {NEURON_RT_VISIBLE_CORES: '0-1'}")
    run = loaded(s3, config_bucket, store, text)
    # When its capacity is validated
    verdict = validate_capacity(ec2, resource_groups, store, run, stack_region=REGION, now=NOW, leads=LEADS)
    # Then it is accepted, and the warning is among the recorded findings
    assert verdict.accepted is True
    risky = [f for f in verdict.findings if f.code == Code.ENVIRONMENT_VARIABLE_RISKY]
    assert [(f.severity, f.message.split(":")[0]) for f in risky] == [
        (Severity.WARNING, "workload.env.NEURON_RT_VISIBLE_CORES")
    ]
    record = store.get(RUN_ID)
    assert record is not None and record.findings == verdict.findings
