"""IAM is enforced on every call of every local run: who calls, with which key, and what happens
when a grant is missing."""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError

from trainrun.inventory import tagged_resources
from trainrun.local.fixture import load_fixture
from trainrun.local.iam import calls
from trainrun.local.iam.calls import CallRecord
from trainrun.local.iam.policy import PolicySet, StatementRef, action_matches
from trainrun.local.iam.report import stack_policies
from trainrun.local.runtime import LocalRuntime
from trainrun.tags import RUN_ID

from .conftest import EXAMPLES, ROOT, example, run_to_end
from .scripted_head_node import ScriptedCluster

DEFAULT_ACCOUNT = EXAMPLES / "accounts" / "default.yaml"
STACK = "trainrun-local"
# The template's roles, as the local runtime deploys them (parametrizes the mutation test).
POLICIES = stack_policies(ROOT / "template.yaml", STACK, load_fixture(DEFAULT_ACCOUNT).region)
STATEMENTS = [statement for policies in POLICIES.values() for statement in policies.statements()]
# Grants that no call of the recorded runs needs. Each one is either never needed (helper `iam`
# removes it from template.yaml) or needed on a path these runs do not take, or made by a service
# the local runtime does not play yet (Scheduler, EventBridge's role, the ParallelCluster API's
# execute-api). strict: once a statement is exercised or removed, its entry must go.
NOT_EXERCISED = {
    "TearDownFunction/RunEventsPolicy/0": "Tear down publishes no run event in the recorded runs",
    "ValidateCapacityFunction/ValidateCapacityFunctionRolePolicy1/1": "no recorded run targets a reservation group",
    "ValidateCapacityFunction/ValidateCapacityFunctionRolePolicy1/2": "no recorded run targets a reservation group",
    "ValidateCapacityFunction/ValidateCapacityFunctionRolePolicy1/3": "no recorded run targets a reservation group",
    "CreateNetworkFunction/CreateNetworkFunctionRolePolicy1/1": "no recorded run reuses an existing VPC",
    "CheckJobFunction/RunRecordsPolicy/0": "no recorded job misses its heartbeat",
    "CheckJobFunction/AWSLambdaBasicExecutionRole/0": "no recorded job misses its heartbeat",
    "CheckJobFunction/AWSXrayWriteOnlyAccess/0": "no recorded job misses its heartbeat",
    "CheckJobFunction/HeadNodeCommandsPolicy/0": "no recorded job misses its heartbeat",
    "CheckJobFunction/HeadNodeCommandsPolicy/1": "no recorded job misses its heartbeat",
    "CheckJobFunction/HeadNodeCommandsPolicy/2": "no recorded job misses its heartbeat",
    "JanitorFunction/JanitorFunctionRolePolicy0/0": "the recorded janitor sweep finds no run records to read",
    "JanitorFunction/JanitorFunctionRolePolicy1/0": "the recorded janitor sweep finds nothing to tear down",
    "JanitorFunction/JanitorFunctionRolePolicy2/1": "the recorded janitor sweep finds nothing to tear down",
    "JanitorFunctionSweepRole/JanitorFunctionSweepLambdaPolicy/0": "EventBridge Scheduler is not played locally",
    "TeardownStateMachine/AWSXrayWriteOnlyAccess/0": "Step Functions' X-Ray traces are not played locally",
    "RunStateMachine/AWSXrayWriteOnlyAccess/0": "Step Functions' X-Ray traces are not played locally",
    "RunStateMachine/RunStateMachineRolePolicy11/0": "Step Functions' log delivery is not played locally",
    "LinkDataRepositoryFunction/LinkDataRepositoryFunctionRolePolicy1/4": (
        "FSx's own s3:ListBucket on the linked bucket is not asked locally (no recorded run links the config bucket)"
    ),
    "TeardownStateMachineRunExecutionEndedRole/TeardownStateMachineRunExecutionEndedRoleStartExecutionPolicy/0": (
        "EventBridge starts the safety net in-process, not as its role"
    ),
}


@pytest.fixture(scope="module")
def recorded() -> list[CallRecord]:
    """The calls of a successful run, of a run that fails (and is torn down by the safety net), and
    of a janitor sweep: what the mutation test replays."""
    with LocalRuntime(load_fixture(DEFAULT_ACCOUNT), head_node_factory=ScriptedCluster()) as runtime:
        _, success = run_to_end(runtime, example("bert-large-phase1.yaml"), key="runs/success.yaml")
        assert success.status == "SUCCEEDED", success.error
        runtime.fail_at("Create cluster")
        _, failure = run_to_end(runtime, example("bert-large-phase1.yaml"), key="runs/failure.yaml")
        assert failure.status == "FAILED"
        janitor = runtime.client("lambda").invoke(
            FunctionName=runtime.deployed.function_name("JanitorFunction"), Payload=b"{}"
        )
        assert "FunctionError" not in janitor
        assert runtime.iam is not None
        assert runtime.iam.enforcer.unmapped == []
        return list(runtime.iam.enforcer.calls)


def _param(statement: StatementRef) -> object:
    marks = []
    if statement.id in NOT_EXERCISED:
        marks.append(pytest.mark.xfail(strict=True, reason=f"unused grant: {NOT_EXERCISED[statement.id]}"))
    return pytest.param(statement, id=statement.id, marks=marks)


@pytest.mark.parametrize("statement", [_param(s) for s in STATEMENTS])
def test_every_granted_statement_is_needed_by_a_recorded_call(
    recorded: list[CallRecord], statement: StatementRef
) -> None:
    # Given the calls a full run made, as the role that made them
    policies = POLICIES[statement.principal]
    mine = [record for record in recorded if record.principal == statement.principal]
    # When they are replayed with this one statement removed
    denied = calls.denied_without(policies, statement, mine)
    # Then at least one is denied, on an action the statement grants: no grant is unused
    assert denied, f"unused grant {statement.id}: {statement.actions} on {statement.statement.get('Resource')}"
    assert any(action_matches(pattern, d.action) for _, d in denied for pattern in statement.actions), denied


def test_every_recorded_call_was_allowed(recorded: list[CallRecord]) -> None:
    assert [r for r in recorded if not r.allowed] == []


@pytest.fixture
def runtime() -> Iterator[LocalRuntime]:
    with LocalRuntime(load_fixture(DEFAULT_ACCOUNT), head_node_factory=ScriptedCluster()) as local:
        yield local


def without_action(policies: PolicySet, action: str) -> PolicySet:
    """The same policies with `action` taken out of every statement that grants it."""
    documents = copy.deepcopy(policies.documents)
    for document in documents:
        statements = document["Statement"] if isinstance(document["Statement"], list) else [document["Statement"]]
        for statement in statements:
            actions = statement.get("Action", [])
            if isinstance(actions, list) and action in actions:
                actions.remove(action)
    return PolicySet(policies.name, documents, policy_names=policies.policy_names)


def test_a_run_missing_one_permission_fails_with_access_denied_and_leaves_nothing(runtime: LocalRuntime) -> None:
    # Given Create network's role without ec2:CreateNatGateway (everything else it has stays)
    assert runtime.iam is not None
    principal = runtime.iam.principals.named("CreateNetworkFunction")
    assert principal is not None and principal.policies is not None
    runtime.iam.principals.replace("CreateNetworkFunction", without_action(principal.policies, "ec2:CreateNatGateway"))
    # When a run is submitted
    started, summary = run_to_end(runtime, example("bert-large-phase1.yaml"))
    # Then it fails with EC2's UnauthorizedOperation naming the action, and leaves nothing behind
    assert summary.status == "FAILED"
    assert summary.error is not None
    assert "UnauthorizedOperation" in summary.error["cause"]
    assert "ec2:CreateNatGateway" in summary.error["cause"]
    assert "assumed-role/trainrun-local-CreateNetworkFunctionRole/" in summary.error["cause"]
    assert tagged_resources(runtime.client("ec2"), runtime.client("fsx"), key=RUN_ID, value=started.run_id) == []
    assert summary.resources.remaining == []


@pytest.mark.parametrize(
    ("service", "call", "code"),
    [
        ("ec2", lambda c: c.describe_vpcs(), "AuthFailure"),
        ("dynamodb", lambda c: c.list_tables(), "UnrecognizedClientException"),
        ("s3", lambda c: c.list_buckets(), "InvalidAccessKeyId"),
        ("sts", lambda c: c.get_caller_identity(), "InvalidClientTokenId"),
    ],
)
@pytest.mark.parametrize("key", ["testing", "ak", "AKIAIOSFODNN7EXAMPLE"])
def test_a_key_the_runtime_did_not_issue_is_refused(
    runtime: LocalRuntime, service: str, call: object, code: str, key: str
) -> None:
    # Given moto's well-known test keys and a made-up one
    client = boto3.Session(aws_access_key_id=key, aws_secret_access_key=key, region_name=runtime.region).client(
        service, endpoint_url=runtime.endpoint_url
    )
    # When they call the local account, Then the call is refused as AWS refuses an unknown key
    with pytest.raises(ClientError) as refused:
        call(client)  # type: ignore[operator]
    assert refused.value.response["Error"]["Code"] == code
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_the_operator_may_not_do_what_its_policy_does_not_grant(runtime: LocalRuntime) -> None:
    # Given the operator's credentials (the trainrun commands' identity)
    s3 = runtime.operator_client("s3")
    # When they delete a run file, Then S3 answers AccessDenied naming the action and the object
    with pytest.raises(ClientError) as denied:
        s3.delete_object(Bucket=runtime.deployed.outputs["ConfigBucketName"], Key="runs/someone-else.yaml")
    assert denied.value.response["Error"]["Code"] == "AccessDenied"
    assert "s3:DeleteObject" in denied.value.response["Error"]["Message"]
    assert denied.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


AWS_CLI = ROOT / ".venv-awscli" / "bin" / "aws"


@pytest.mark.skipif(not AWS_CLI.exists(), reason="the head node's aws CLI is not installed (make demo installs it)")
def test_the_head_nodes_aws_cli_calls_as_the_head_node_role(runtime: LocalRuntime, tmp_path: Path) -> None:
    # Given a run whose cluster is kept (its head node stays up) and another team's bucket
    document = yaml.safe_load(example("single-node.yaml"))
    document["teardown"] = {"on_success": "keep"}
    started, summary = run_to_end(runtime, yaml.safe_dump(document).encode(), key="runs/kept.yaml")
    assert summary.status == "SUCCEEDED", summary.error
    runtime.client("s3").create_bucket(
        Bucket="another-team", CreateBucketConfiguration={"LocationConstraint": runtime.region}
    )
    runtime.client("s3").put_object(Bucket="another-team", Key="secret.txt", Body=b"not yours")
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **runtime.head_node_environment(started.run_id)}

    def aws(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(AWS_CLI), *args], env=environment, capture_output=True, text=True, timeout=60, check=False
        )

    # When its aws CLI fetches the run's workload, Then it may (S3Access of the cluster config)
    fetched = aws("s3", "cp", "s3://trainrun-examples/local-workload.tar.gz", str(tmp_path / "workload.tar.gz"))
    assert fetched.returncode == 0, fetched.stderr
    # When it reads another bucket, Then S3 denies it, naming the head node's role
    stolen = aws("s3", "cp", "s3://another-team/secret.txt", str(tmp_path / "secret.txt"))
    assert stolen.returncode != 0
    assert "403" in stolen.stderr or "AccessDenied" in stolen.stderr, stolen.stderr
    assert runtime.iam is not None
    denial = [c for c in runtime.iam.enforcer.calls if not c.allowed and c.principal == "HeadNodeRole"]
    assert denial and denial[-1].resources == ("arn:aws:s3:::another-team/secret.txt",)
    assert "assumed-role/trainrun-local-HeadNodeRole/i-" in denial[-1].principal_arn
