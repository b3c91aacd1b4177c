"""Every sample event in events/ goes through its handler, against the harness.

The file name says which function takes it: events/<LogicalId>[.<variant>].json, the same
name `sam local invoke <LogicalId> -e events/<file>` uses.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from trainrun.local import ssm_emulator
from trainrun.local.runtime import LocalRuntime
from trainrun.local.template_deployer import ACCOUNT_ID
from trainrun.model.resources import Progress
from trainrun.steps.head_node import JobCheck, Submitted
from trainrun.steps.janitor import SweepReport
from trainrun.steps.progress import BatchOutcome, ContainerBatchOutcome
from trainrun.steps.resume import ResumeDecision
from trainrun.steps.run import CapacityVerdict, FinishRunOutput, RunSummary
from trainrun.steps.start_run import StartDecision

from .conftest import EXAMPLES, ROOT
from .scripted_head_node import ScriptedCluster, ScriptedJob

EVENTS = sorted((ROOT / "events").glob("*.json"))
# In workflow order: each step needs what the steps before it recorded.
ORDER = [
    "LoadRunSpecFunction",
    "ValidateCapacityFunction",
    "CreateNetworkFunction",
    "CreateFileSystemFunction",
    "LinkDataRepositoryFunction",
    # The EKS run's (its *.eks.json events before them): its node group launches no instance
    # locally, so the ParallelCluster run's cluster still finds the reservation whole.
    "CreateEksClusterFunction",
    "CreateNodeGroupFunction",
    "PrepareKubernetesFunction",
    "CreateClusterFunction",
    "PrepareHeadNodeFunction",
    "SubmitJobFunction",
    "ProgressFunction",
    "CheckJobFunction",
    "ResumeJobFunction",
    "TearDownFunction",
    "FinishRunFunction",
    "StartRunFunction",
    "JanitorFunction",
]
# A step that reports progress is called again until done, as its wait loop would.
LOOPING = {
    "CreateNetworkFunction",
    "CreateFileSystemFunction",
    "LinkDataRepositoryFunction",
    "CreateClusterFunction",
    "CreateEksClusterFunction",
    "CreateNodeGroupFunction",
    "PrepareKubernetesFunction",
    "PrepareHeadNodeFunction",
    "TearDownFunction",
}
# Steps that wait on something running on this machine (the EKS run's nodes and its stage Job on
# the local Kubernetes), not only on an emulator's next look: called again after a pause.
PAUSED = {"PrepareKubernetesFunction": 0.5}


EXPECTED = {
    "CreateNetworkFunction.json": (Progress, {"done": True}),
    "CreateFileSystemFunction.json": (Progress, {"done": True}),
    "LinkDataRepositoryFunction.json": (Progress, {"done": True}),
    "CreateClusterFunction.json": (Progress, {"done": True}),
    # An EKS run (cluster.kind: eks) through its own steps, beside the ParallelCluster run.
    "LoadRunSpecFunction.eks.json": (RunSummary, {"name": "bert-large-phase1-eks", "kind": "eks"}),
    "ValidateCapacityFunction.eks.json": (CapacityVerdict, {"accepted": True, "availability_zone": "us-west-2d"}),
    "CreateNetworkFunction.eks.json": (Progress, {"done": True}),
    "CreateFileSystemFunction.eks.json": (Progress, {"done": True}),
    "CreateEksClusterFunction.json": (Progress, {"done": True}),
    "CreateNodeGroupFunction.json": (Progress, {"done": True}),
    "PrepareKubernetesFunction.json": (Progress, {"done": True}),
    "TearDownFunction.eks.json": (Progress, {"done": True}),
    "PrepareHeadNodeFunction.json": (Progress, {"done": True}),
    "SubmitJobFunction.json": (Submitted, {"job": "train", "existing": False}),
    # The sample token belongs to no execution: the end marker is recorded, the token found stale.
    "ProgressFunction.json": (BatchOutcome, {"job": "train", "wrote": True, "token_was_stale": True}),
    # An EKS run's container logs (the Observability add-on's records): the run from the subscription's
    # name, the job and rank from the pod's; no job is waiting yet, so only progress is recorded.
    "ProgressFunction.eks.json": (
        ContainerBatchOutcome,
        {
            "outcomes": [
                BatchOutcome(
                    run_id="bert-large-phase1-eks-5f0c2d9a41be", job="train", applied_events=2, wrote=True, writes=1
                )
            ]
        },
    ),
    "CheckJobFunction.json": (JobCheck, {"state": "COMPLETED", "finished": True}),
    # The job Check found COMPLETED did not fail: nothing to resubmit.
    "ResumeJobFunction.json": (
        ResumeDecision,
        {"resubmit": False, "failed_attempt": 1, "why": "the attempt succeeded: nothing to resubmit"},
    ),
    "TearDownFunction.json": (Progress, {"done": True}),
    "TearDownFunction.safety-net.json": (Progress, {"done": True, "waiting_on": []}),
    "JanitorFunction.json": (SweepReport, {"torn_down": {}}),
    "LoadRunSpecFunction.json": (RunSummary, {"name": "bert-large-phase1", "nodes": 16}),
    "ValidateCapacityFunction.json": (CapacityVerdict, {"accepted": True, "availability_zone": "us-west-2d"}),
    "FinishRunFunction.failed.json": (FinishRunOutput, {"status": "FAILED", "recorded": True}),
    # The run has already ended (FAILED, above): a late success changes nothing and says so.
    "FinishRunFunction.succeeded.json": (FinishRunOutput, {"status": "FAILED", "recorded": False}),
    "StartRunFunction.s3-object-created.json": (StartDecision, {"started": True}),
    "StartRunFunction.schedule.json": (StartDecision, {"started": True}),
}


def _function_of(path: Path) -> str:
    return path.name.split(".", 1)[0]


def test_every_sample_event_has_an_expected_answer() -> None:
    assert {path.name for path in EVENTS} == set(EXPECTED)


def test_every_function_has_a_sample_event() -> None:
    from trainrun.local.template import load_template

    functions = {
        name
        for name, resource in load_template(ROOT / "template.yaml")["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }
    assert functions == {_function_of(path) for path in EVENTS}


@pytest.fixture(scope="module")
def stack_named_like_the_events():
    """A harness whose config bucket is the one the sample events name (trainrun-configbucket)."""
    from trainrun.local.fixture import load_fixture

    # A head node whose train job runs on until CheckJobFunction asks, and logs nothing itself
    # (ProgressFunction's sample event is the job's log).
    cluster = ScriptedCluster()
    cluster.jobs["train"] = ScriptedJob([], lose_end_marker=True)
    fixture = load_fixture(EXAMPLES / "accounts" / "default.yaml")
    # The events are invoked one after the other, without the state machine's retry of a head
    # node whose SSM agent is not online yet (tests/integration/test_ssm_as_it_is.py has that).
    registration, ssm_emulator.AGENT_REGISTRATION_SECONDS = ssm_emulator.AGENT_REGISTRATION_SECONDS, 0.0
    with LocalRuntime(fixture, stack_name="trainrun", head_node_factory=cluster) as runtime:
        for example in ("bert-large-phase1.yaml", "bert-large-phase1-eks.yaml"):
            runtime.client("s3").put_object(
                Bucket=runtime.deployed.outputs["ConfigBucketName"],
                Key=f"runs/{example}",
                Body=(EXAMPLES / example).read_bytes(),
            )
        try:
            yield runtime
        finally:
            ssm_emulator.AGENT_REGISTRATION_SECONDS = registration


@pytest.mark.parametrize(
    "event_file", sorted(EVENTS, key=lambda p: (ORDER.index(_function_of(p)), p.name)), ids=lambda p: p.name
)
def test_sample_event_runs_through_its_handler(stack_named_like_the_events: LocalRuntime, event_file: Path) -> None:
    runtime = stack_named_like_the_events
    event = json.loads(event_file.read_text())
    function = _function_of(event_file)
    pause = PAUSED.get(function)
    for _ in range(10 if pause is None else 240):
        response = runtime.client("lambda").invoke(
            FunctionName=runtime.deployed.function_name(function), Payload=json.dumps(event)
        )
        payload = json.loads(response["Payload"].read())
        assert "FunctionError" not in response, payload
        if function not in LOOPING or payload["done"]:
            break
        if pause is not None:
            time.sleep(pause)
    model, expected = EXPECTED[event_file.name]
    answer = model.model_validate(payload)
    assert {key: getattr(answer, key) for key in expected} == expected


def test_the_sample_s3_event_is_the_shape_eventbridge_delivers() -> None:
    event = json.loads((ROOT / "events" / "StartRunFunction.s3-object-created.json").read_text())
    assert event["detail-type"] == "Object Created"
    assert event["account"] == ACCOUNT_ID
    assert set(event["detail"]["object"]) == {"key", "size", "etag", "version-id", "sequencer"}
