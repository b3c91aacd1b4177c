"""A run file uploaded to the config bucket runs through the real state machine on moto.

Starting a local runtime costs seconds of CPU, so the tests at the end of the module share one
of the default account (`shared_runtime`): each reads its own run, by run id, and what a test
changes in the runtime (`fail_at`) is put back after it. The local runtime is process-wide
(moto's backend, the function registry), so the module's shared runtime must be the last one it
starts: the tests that need a runtime of their own (another account, runs stopped while they
provision) come first.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainrun.local.runtime import LocalRuntime, StartedRun
from trainrun.local.summary import LocalRunSummary
from trainrun.workflow import State

from .conftest import example, fixture_with, remaining, run_to_end
from .scripted_head_node import ClusterOfEachTest, ScriptedCluster

# Every execution starts by asking whether it continues a run's long wait (here: no).
ACCEPTED_START = [
    State.CONTINUED_RUN,
    State.LOAD_RUN_SPEC,
    State.VALIDATE_CAPACITY,
    State.CAPACITY_ACCEPTED,
    State.REUSING_A_KEPT_CLUSTER,
    State.CREATE_NETWORK,
]
ACCEPTED_END = [State.TEAR_DOWN, State.TORN_DOWN, State.RUN_OUTCOME, State.RECORD_SUCCESS, State.RUN_SUCCEEDED]
REJECTED_PATH = [
    State.CONTINUED_RUN,
    State.LOAD_RUN_SPEC,
    State.VALIDATE_CAPACITY,
    State.CAPACITY_ACCEPTED,
    State.RECORD_REJECTION,
    State.RUN_REJECTED,
]


def executions_of(runtime: LocalRuntime) -> list[str]:
    """The ARNs of the run state machine's executions."""
    executions = runtime.client("stepfunctions").list_executions(
        stateMachineArn=runtime.deployed.outputs["StateMachineArn"]
    )["executions"]
    return [execution["executionArn"] for execution in executions]


# --- on a runtime of the test's own ---------------------------------------------------------------


def test_a_reservation_too_small_rejects_the_run_with_findings(tmp_path: Path) -> None:
    # Given a reservation with 8 of the 16 nodes the run asks for
    with LocalRuntime(fixture_with(tmp_path, available_instance_count=8)) as runtime:
        _, summary = run_to_end(runtime, example("bert-large-phase1.yaml"))
    # Then the run is REJECTED, and the finding says why
    assert summary.status == "REJECTED"
    assert summary.states == REJECTED_PATH
    codes = {f.code: f for f in summary.findings}
    assert codes["INSUFFICIENT_CAPACITY"].severity == "ERROR"
    assert "8" in codes["INSUFFICIENT_CAPACITY"].message


def test_a_rhel9_run_is_rejected_before_anything_is_created_for_the_neuron_release_it_cannot_run(
    tmp_path: Path,
) -> None:
    # Given a reservation billed as Red Hat Enterprise Linux, as ParallelCluster requires for RHEL
    rhel9 = example("bert-large-phase1.yaml").replace(b"os: ubuntu2204", b"os: rhel9")
    with LocalRuntime(fixture_with(tmp_path, platform="Red Hat Enterprise Linux")) as runtime:
        # When a rhel9 run is uploaded
        _, summary = run_to_end(runtime, rhel9)
    # Then the run file is rejected at cluster.os (the pinned Neuron release has no PyTorch Neuron for
    # RHEL), naming the OSes to use, and nothing is created
    assert summary.status == "REJECTED"
    assert summary.states == [State.CONTINUED_RUN, State.LOAD_RUN_SPEC, State.RECORD_REJECTION, State.RUN_REJECTED]
    messages = [f.message for f in summary.findings if f.code == "RUN_FILE_INVALID"]
    assert any(m.startswith("cluster.os (line ") and "use 'ubuntu2204' or 'ubuntu2404'" in m for m in messages)
    assert summary.resources.remaining == []


def test_an_ubuntu_run_on_a_red_hat_enterprise_linux_reservation_is_rejected_for_its_platform(
    tmp_path: Path,
) -> None:
    # Given a reservation billed as Red Hat Enterprise Linux
    with LocalRuntime(fixture_with(tmp_path, platform="Red Hat Enterprise Linux")) as runtime:
        # When an Ubuntu run is uploaded
        _, summary = run_to_end(runtime, example("bert-large-phase1.yaml"))
    # Then it is REJECTED before anything is created, naming the platform it needs
    assert summary.status == "REJECTED"
    assert summary.states == REJECTED_PATH
    mismatch = next(f for f in summary.findings if f.code == "PLATFORM_MISMATCH")
    assert mismatch.severity == "ERROR"
    assert "use a Linux/UNIX reservation" in mismatch.message


def test_duplicate_upload_events_start_one_execution_and_uploading_the_same_key_again_starts_a_new_run(
    runtime: LocalRuntime,
) -> None:
    # Given a run file uploaded once (EventBridge delivered its event, a run started)
    started = runtime.submit(example("single-node.yaml"), "runs/dup.yaml")
    s3 = runtime.client("s3")
    bucket = runtime.deployed.outputs["ConfigBucketName"]
    head = s3.head_object(Bucket=bucket, Key="runs/dup.yaml")
    event = {
        "version": "0",
        "id": "a-redelivery",
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": "123456789012",
        "time": "2026-11-21T09:14:07Z",
        "region": runtime.region,
        "resources": [f"arn:aws:s3:::{bucket}"],
        "detail": {
            "version": "0",
            "bucket": {"name": bucket},
            "object": {"key": "runs/dup.yaml", "size": 1, "version-id": head["VersionId"], "sequencer": "00"},
            "request-id": "R",
            "requester": "123456789012",
            "reason": "PutObject",
        },
    }
    # When the same event is delivered twice more
    function = runtime.deployed.function_name("StartRunFunction")
    answers = [
        json.loads(runtime.client("lambda").invoke(FunctionName=function, Payload=json.dumps(event))["Payload"].read())
        for _ in range(2)
    ]
    # Then no second execution starts, and the function says it was a duplicate
    assert [a["started"] for a in answers] == [False, False]
    assert all(a["reason"].startswith("duplicate") for a in answers)
    assert all(a["run_id"] == started.run_id for a in answers)
    assert len(executions_of(runtime)) == 1
    # When the same key is uploaded again (a new version of the object)
    again = runtime.submit(example("single-node.yaml"), "runs/dup.yaml")
    # Then that upload starts a new run
    assert again.run_id != started.run_id
    # Both runs are stopped and torn down here: a run left running would outlive this runtime and
    # call into the next one (moto's interpreter thread is not stopped with it)
    for run in (started, again):
        runtime.client("stepfunctions").stop_execution(executionArn=run.execution_arn, error="Stopped", cause="test")
        runtime.wait(run.execution_arn, timeout=120)


# --- on the module's shared runtime (the last one the module starts) -------------------------------


@pytest.fixture(scope="module")
def good_run(module_runtime: LocalRuntime, clusters: ClusterOfEachTest) -> tuple[StartedRun, LocalRunSummary]:
    """The BERT example uploaded to the config bucket and run to its end, on the default account,
    whose reservation fits it (read by more than one test: it is run once)."""
    clusters.cluster = ScriptedCluster()
    return run_to_end(module_runtime, example("bert-large-phase1.yaml"))


def test_a_good_run_file_runs_through_every_state_to_success(
    good_run: tuple[StartedRun, LocalRunSummary],
) -> None:
    # Given the default account, whose reservation fits the BERT example
    # When the run file is uploaded to the config bucket
    _, summary = good_run
    # Then the workflow runs every state to success and records it
    assert summary.status == "SUCCEEDED"
    assert summary.execution_status == "SUCCEEDED"
    assert summary.states[: len(ACCEPTED_START)] == ACCEPTED_START
    assert summary.states[-len(ACCEPTED_END) :] == ACCEPTED_END
    assert summary.error is None
    assert not [f for f in summary.findings if f.severity == "ERROR"]


def test_the_run_record_holds_the_validated_spec_and_findings(
    shared_runtime: LocalRuntime, good_run: tuple[StartedRun, LocalRunSummary]
) -> None:
    started, _ = good_run
    store = shared_runtime.store()
    record = store.get(started.run_id)
    assert record is not None
    assert record.name == "bert-large-phase1"
    assert record.spec is not None and record.spec.capacity.nodes == 16
    assert record.execution_arn == started.execution_arn
    assert record.ended_at is not None
    assert {f.code for f in record.findings} >= {"TARGETED_RESERVATION", "AVAILABILITY_ZONE_SELECTED"}


def on_an_unknown_reservation(run_file: bytes) -> bytes:
    """The run file naming a reservation the default account does not have."""
    return run_file.replace(b"cr-0123456789abcdef0", b"cr-0fedcba9876543210")


def test_an_unknown_reservation_rejects_the_run(shared_runtime: LocalRuntime) -> None:
    _, summary = run_to_end(shared_runtime, on_an_unknown_reservation(example("bert-large-phase1.yaml")))
    assert summary.status == "REJECTED"
    assert "CAPACITY_RESERVATION_NOT_FOUND" in {f.code for f in summary.findings}


def test_a_rejected_run_whose_record_fails_is_recorded_as_failed(shared_runtime: LocalRuntime) -> None:
    # Given a run that Validate capacity rejects (why does not matter here), and Record rejection failing
    shared_runtime.fail_at(State.RECORD_REJECTION)
    _, summary = run_to_end(shared_runtime, on_an_unknown_reservation(example("single-node.yaml")))
    assert summary.status == "FAILED"
    assert summary.states == [*REJECTED_PATH[:-1], State.RECORD_FAILURE, State.RUN_FAILED]


def test_an_invalid_run_file_is_rejected_with_every_problem(shared_runtime: LocalRuntime) -> None:
    bad = example("bert-large-phase1.yaml").replace(b"nodes: 16", b"nodes: 0").replace(b"ubuntu2204", b"alinux2")
    _, summary = run_to_end(shared_runtime, bad)
    assert summary.status == "REJECTED"
    assert summary.states == [State.CONTINUED_RUN, State.LOAD_RUN_SPEC, State.RECORD_REJECTION, State.RUN_REJECTED]
    messages = [f.message for f in summary.findings if f.code == "RUN_FILE_INVALID"]
    assert any(m.startswith("capacity.nodes (line ") and "0 is too small" in m for m in messages)
    assert any(m.startswith("cluster.os (line ") and "alinux2023" in m for m in messages)


@pytest.mark.parametrize("key", ["runs/notes.txt", "other/run.yaml", "runs/"])
def test_objects_that_are_not_run_files_start_nothing(shared_runtime: LocalRuntime, key: str) -> None:
    runtime = shared_runtime
    executions = executions_of(runtime)
    runtime.client("s3").put_object(Bucket=runtime.deployed.outputs["ConfigBucketName"], Key=key, Body=b"x")
    assert executions_of(runtime) == executions


@pytest.mark.parametrize(
    ("state", "path"),
    [
        (State.LOAD_RUN_SPEC, [State.LOAD_RUN_SPEC, State.RECORD_FAILURE, State.RUN_FAILED]),
        (
            State.VALIDATE_CAPACITY,
            [State.LOAD_RUN_SPEC, State.VALIDATE_CAPACITY, State.RECORD_FAILURE, State.RUN_FAILED],
        ),
        (State.RECORD_SUCCESS, [State.RECORD_SUCCESS, State.RECORD_FAILURE, State.RUN_FAILED]),
    ],
)
def test_a_failure_at_any_task_state_ends_failed_with_the_original_error(
    shared_runtime: LocalRuntime, state: str, path: list[str]
) -> None:
    runtime = shared_runtime
    # Given a failure injected at one state
    runtime.fail_at(state)
    # When a good run file is uploaded
    started, summary = run_to_end(runtime, example("single-node.yaml"))
    # Then the run ends FAILED carrying the injected error, not a later one, and leaves nothing
    assert summary.status == "FAILED"
    assert summary.states[-len(path) :] == path
    assert summary.error is not None
    assert summary.error["error"] == "InjectedFailure"
    assert state in summary.error["cause"]
    assert remaining(runtime, started.run_id) == []


def test_a_run_file_with_thousands_of_problems_is_rejected_with_its_findings_kept(
    shared_runtime: LocalRuntime,
) -> None:
    # Given a run file within the size limit whose 10,000 unknown keys are 10,000 problems (each a
    # finding: together far more than DynamoDB's 400 KB item limit)
    unknown = "".join(f"u{i}: é\n" for i in range(10_000)).encode()
    _, summary = run_to_end(shared_runtime, example("single-node.yaml") + unknown)
    # Then the run is REJECTED (not FAILED on a refused write), with the findings the record keeps
    assert summary.status == "REJECTED"
    assert summary.states == [State.CONTINUED_RUN, State.LOAD_RUN_SPEC, State.RECORD_REJECTION, State.RUN_REJECTED]
    messages = [f.message for f in summary.findings if f.code == "RUN_FILE_INVALID"]
    first_line = example("single-node.yaml").count(b"\n") + 1
    assert messages[0] == f"u0 (line {first_line}): is not a known field"
    assert messages[-1].startswith("and 9969 more findings the run record does not keep")
