"""IAM is enforced on every call of every local run: who calls, with which key, and what happens
when a grant is missing."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError

import trainrun.steps.eks
import trainrun.steps.head_node
import trainrun.steps.kubernetes
import trainrun.steps.resume
import trainrun.steps.start_run
from trainrun.local import ssm_emulator
from trainrun.local.fixture import load_fixture
from trainrun.local.iam import calls
from trainrun.local.iam.calls import CallRecord
from trainrun.local.iam.policy import PolicySet, StatementRef, action_matches
from trainrun.local.iam.report import stack_policies
from trainrun.local.pcluster_api import DEFAULT_AMI_ID
from trainrun.local.runtime import LocalRuntime
from trainrun.logic.cluster_config import cluster_name
from trainrun.model.run_record import RunRecord
from trainrun.ops import shell as shells
from trainrun.ops.cancel import teardown_input
from trainrun.workflow import State

from .conftest import EXAMPLES, ROOT, example, ghost_eks_cluster, ghost_network, remaining, run_to_end, wait_for
from .scripted_head_node import NODE_FAILURE, NODE_FAILURE_LINE, ScriptedCluster, ScriptedJob, recorded_log

DEFAULT_ACCOUNT = EXAMPLES / "accounts" / "default.yaml"
# The default account's capacity reservation group (holding its one reservation).
GROUP_ARN = "arn:aws:resource-groups:us-west-2:123456789012:group/trn1-pool"
STACK = "trainrun-local"
# The template's roles, as the local runtime deploys them (parametrizes the mutation test).
ACCOUNT = load_fixture(DEFAULT_ACCOUNT)
POLICIES = stack_policies(ROOT / "template.yaml", STACK, ACCOUNT.region, ACCOUNT.stack_parameters)
STATEMENTS = [statement for policies in POLICIES.values() for statement in policies.statements()]
# Grants that no call of the recorded runs needs, with why. strict: once a statement is exercised
# or removed, its entry must go.
_ASSUMED_BY_EKS = (
    "the managed policies of the roles EKS's control plane and the node group's instances work as: no local "
    "principal works as them (the local EKS runs neither; docs/local-runtime.md, 'The local EKS')"
)
NOT_EXERCISED: dict[str, str] = {
    "EksClusterRole/AmazonEKSClusterPolicy/0": _ASSUMED_BY_EKS,
    "EksClusterRole/AmazonEKSClusterPolicy/1": _ASSUMED_BY_EKS,
    "EksClusterRole/AmazonEKSClusterPolicy/2": _ASSUMED_BY_EKS,
    "EksNodeRole/AmazonEKSWorkerNodePolicy/0": _ASSUMED_BY_EKS,
    "EksNodeRole/AmazonEC2ContainerRegistryReadOnly/0": _ASSUMED_BY_EKS,
    "EksNodeRole/AmazonEKS_CNI_Policy/0": _ASSUMED_BY_EKS,
    "EksNodeRole/AmazonEKS_CNI_Policy/1": _ASSUMED_BY_EKS,
    # The CloudWatch agent reads a configuration from an AmazonCloudWatch-* parameter only when told
    # to; the Observability add-on configures its own, and the local add-on runs no agent.
    "EksNodeRole/CloudWatchAgentServerPolicy/1": "the CloudWatch agent's configuration from SSM, which the "
    "Observability add-on's agent is not given (and the local add-on runs no agent)",
    # A dataset given as an S3 prefix is staged with `aws s3 sync`, which lists it; the recorded EKS
    # runs' datasets are single archives (aws s3 cp).
    "EksNodeRole/run-data/4": "s3:ListBucket on the run buckets: a dataset given as a prefix (aws s3 sync); "
    "the recorded EKS runs stage archives",
}
# A job that logs nothing for this long is checked with Slurm (the template's minimum heartbeat).
QUICK_HEARTBEAT_SECONDS = 60


def _example(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / name).read_text())  # type: ignore[no-any-return]


def _run_file(name: str, **changes: Any) -> bytes:
    document = _example(name)
    for section, values in changes.items():
        document[section] = {**document.get(section, {}), **values}
    return yaml.safe_dump(document).encode()


def _existing_network(runtime: LocalRuntime) -> dict[str, str]:
    """A VPC and two subnets the run did not create (untagged): Create network reuses them."""
    ec2 = runtime.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsSupport={"Value": True})
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.20.{i}.0/24", AvailabilityZone="us-west-2d")["Subnet"]["SubnetId"]
        for i in (0, 1)
    ]
    return {"vpc_id": vpc, "public_subnet_id": subnets[0], "private_subnet_id": subnets[1]}


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    wait_for(condition, what, timeout=120.0)


def _record(runtime: LocalRuntime, run_id: str) -> RunRecord | None:
    return runtime.store().get(run_id)


@pytest.fixture(scope="module")
def recorded() -> list[CallRecord]:
    """The calls of every path a run can take, each as the role that makes it: what the mutation
    test replays. A grant no path here needs is an unused grant."""
    cluster = ScriptedCluster()
    # A training job silent for longer than the heartbeat: Check train asks Slurm about it.
    cluster.jobs["train"] = ScriptedJob(recorded_log("train_bert_ok.out"), silent_until_checked=1)
    parameters = {"JobHeartbeatSeconds": str(QUICK_HEARTBEAT_SECONDS)}
    with (
        LocalRuntime(ACCOUNT, head_node_factory=cluster, parameters=parameters) as runtime,
        pytest.MonkeyPatch.context() as patch,
    ):
        # ... and the wait hands itself on to a new execution after its first check, as a long one
        # does before the history quota (the run state machine starts itself as its own role).
        patch.setattr(trainrun.steps.head_node, "CHECKS_PER_EXECUTION", 1)
        _, success = run_to_end(runtime, example("bert-large-phase1.yaml"), key="runs/success.yaml")
        assert success.status == "SUCCEEDED", success.error
        # The same run on EKS: its cluster, node group and add-ons, the Kubernetes objects' dry run,
        # the container logs' subscription, staging, compile and train as Kubernetes Jobs (the pods
        # calling S3 and CloudWatch Logs as the node role), the export Job, then its teardown
        # (on one node: what the pods call is the same on each, and sixteen would cost the suite a minute)
        one_node = _run_file("bert-large-phase1-eks.yaml", capacity={"nodes": 1})
        _, on_eks = run_to_end(runtime, one_node, key="runs/eks.yaml")
        assert on_eks.status == "SUCCEEDED", on_eks.error
        # ... and the single-node one twice: its second compile reads the first's graphs from the
        # Neuron compile cache in the config bucket (a pod's GetObject as the node role)
        for attempt in (1, 2):
            _, small = run_to_end(runtime, example("single-node-eks.yaml"), key=f"runs/eks-small-{attempt}.yaml")
            assert small.status == "SUCCEEDED", small.error
        # ... one that loses a node at step 25: Resume train waits for the group's nodes through the
        # Kubernetes API, then Train resubmits it as train-2
        assert runtime.kubernetes is not None
        runtime.kubernetes.node_failure_at_step = 25  # EKS clusters only: the head nodes here are scripted
        eks_resumable = _run_file(
            "single-node-eks.yaml", workload={"resume": "python3 train.py --steps 40", "retries": 1}
        )
        _, eks_resumed = run_to_end(runtime, eks_resumable, key="runs/eks-resumed.yaml")
        runtime.kubernetes.node_failure_at_step = None
        assert eks_resumed.status == "SUCCEEDED", eks_resumed.error
        assert eks_resumed.progress.train is not None and eks_resumed.progress.train.attempts == 2
        # ... and one whose budget Prepare Kubernetes finds spent (its clock a day ahead: the
        # budget_warning event, then BudgetExceeded, no job run)
        patch.setattr(trainrun.steps.kubernetes, "utcnow", lambda: datetime.now(UTC) + timedelta(days=1))
        eks_small_budget = _run_file("single-node-eks.yaml", budget={"max_cost_usd": 1})
        _, eks_prepare_spent = run_to_end(runtime, eks_small_budget, key="runs/eks-prepare-spent.yaml")
        patch.undo()
        assert eks_prepare_spent.error is not None, eks_prepare_spent
        assert eks_prepare_spent.error["error"] == "BudgetExceeded", eks_prepare_spent.error
        assert "no job ran" in eks_prepare_spent.error["cause"], eks_prepare_spent.error
        # ... and with a budget found spent while its cluster is created (the clock a day ahead): the
        # budget_warning event, then BudgetExceeded
        patch.setattr(trainrun.steps.eks, "utcnow", lambda: datetime.now(UTC) + timedelta(days=1))
        eks_budgeted = _run_file("bert-large-phase1-eks.yaml", budget={"max_cost_usd": 1})
        _, eks_spent = run_to_end(runtime, eks_budgeted, key="runs/eks-spent.yaml")
        patch.undo()
        assert eks_spent.error is not None and eks_spent.error["error"] == "BudgetExceeded", eks_spent.error
        assert State.CHECK_TRAIN in success.states
        assert len(success.executions) >= 2, success.executions
        patch.undo()
        # A run whose train job loses a node: Resume train waits for the nodes, then resubmits it
        train_ok = cluster.jobs["train"]
        cluster.jobs["train"] = ScriptedJob(
            [*recorded_log("train_bert_ok.out")[:20], NODE_FAILURE_LINE], **NODE_FAILURE
        )
        cluster.jobs["train-2"] = ScriptedJob(recorded_log("train_bert_ok.out"))
        resumable = _run_file("single-node.yaml", workload={"resume": "python3 train.py --steps 40 --resume"})
        _, resumed = run_to_end(runtime, resumable, key="runs/resumed.yaml")
        assert resumed.status == "SUCCEEDED", resumed.error
        assert resumed.progress.train is not None and resumed.progress.train.attempts == 2
        # The same failure in a run with a budget, which Resume train finds spent while the cluster gets
        # its nodes back (its clock a day ahead, so that look is the one that finds it: the budget_warning
        # event, then BudgetExceeded)
        cluster.nodes_missing_for_checks = 1
        patch.setattr(trainrun.steps.resume, "utcnow", lambda: datetime.now(UTC) + timedelta(days=1))
        budgeted = _run_file("single-node.yaml", workload={"resume": "./resume.sh"}, budget={"max_cost_usd": 1})
        _, spent_waiting = run_to_end(runtime, budgeted, key="runs/spent-waiting.yaml")
        patch.undo()
        cluster.nodes_missing_for_checks = 0
        assert spent_waiting.error is not None and spent_waiting.error["error"] == "BudgetExceeded", spent_waiting
        assert "while the cluster got its nodes back" in spent_waiting.error["cause"], spent_waiting.error
        cluster.jobs["train"] = train_ok
        del cluster.jobs["train-2"]
        # A run over its budget at its first job check: the budget_warning event, then the stop. Its
        # network is not its own (no NAT gateway bills), so the budget outlasts the one look Create
        # cluster takes at it while the cluster is created (a third of a second of the cluster's price)
        over_budget = _run_file("single-node.yaml", budget={"max_cost_usd": 0.002}, network=_existing_network(runtime))
        _, stopped = run_to_end(runtime, over_budget, key="runs/over-budget.yaml")
        assert stopped.status == "FAILED" and stopped.error is not None, stopped
        assert stopped.error["error"] == "BudgetExceeded", stopped.error
        assert "got SIGTERM" in stopped.error["cause"], stopped.error  # by a job check, not Create cluster
        # A run that keeps its cluster, a run on that cluster named by the kept run's name (Validate
        # capacity finds it among the runs), then the kept run's `trainrun down`
        owner_file = _example("single-node.yaml") | {
            "name": "kept-owner",
            "teardown": {"on_success": "keep", "keep_for": "30d"},
        }
        owner, kept = run_to_end(runtime, yaml.safe_dump(owner_file).encode(), key="runs/kept.yaml")
        assert kept.status == "SUCCEEDED", kept.error
        borrower_file = _example("single-node.yaml") | {"name": "borrower", "cluster": {"reuse": "kept-owner"}}
        del borrower_file["storage"]
        borrower, borrowed = run_to_end(runtime, yaml.safe_dump(borrower_file).encode(), key="runs/borrower.yaml")
        assert borrowed.status == "SUCCEEDED", borrowed.error
        # It created nothing: no network, and Create cluster reported the kept cluster ready
        assert State.CREATE_NETWORK not in borrowed.states
        assert cluster_name(borrower.run_id) not in runtime.pcluster.cluster_names()
        # A second run on it, its archive in the config bucket (the first's is in one of
        # RunBucketArns: Prepare head node copies each for the kept head node), whose train job
        # prints lines that carry no progress (the progress function's no_progress run event)
        bucket = runtime.deployed.outputs["ConfigBucketName"]
        archive = (
            runtime.client("s3").get_object(Bucket="trainrun-examples", Key="local-workload.tar.gz")["Body"].read()
        )
        runtime.client("s3").put_object(Bucket=bucket, Key="sources/borrower-2.tar.gz", Body=archive)
        second_file = borrower_file | {"name": "borrower-2"}
        second_file["workload"] = borrower_file["workload"] | {
            "source": {"s3": f"s3://{bucket}/sources/borrower-2.tar.gz"}
        }
        train_ok = cluster.jobs["train"]
        cluster.jobs["train"] = ScriptedJob([f"reading shard {n}" for n in range(120)])
        _, second = run_to_end(runtime, yaml.safe_dump(second_file).encode(), key="runs/borrower-2.yaml")
        cluster.jobs["train"] = train_ok
        assert second.status == "SUCCEEDED", second.error
        # The janitor's sweep finds the owner kept, idle for less than its keep_for: left alone
        sweep = json.loads(runtime.fire_schedule("JanitorFunction", "Sweep")["Payload"].read())
        assert owner.run_id in sweep["left_alone"], sweep
        runtime.client("stepfunctions").start_execution(
            stateMachineArn=runtime.deployed.outputs["TeardownStateMachineArn"],
            name=f"down-{owner.run_id}",
            input=teardown_input(owner.run_id, "DOWN", delete_kept=True),
        )
        _wait_for(
            lambda: (r := _record(runtime, owner.run_id)) is not None and r.torn_down_at is not None,
            "the kept run's down",
        )
        # A run on a reservation group, rejected (more nodes than it holds): its failed execution
        # is torn down by the safety net, which EventBridge starts as the rule's role, and whose
        # teardown announces torn_down.
        group = {"reservation_group_arn": GROUP_ARN, "reservation_id": None, "nodes": 128}
        rejected_file = _run_file("bert-large-phase1.yaml", capacity=group)
        rejected, summary = run_to_end(runtime, _without_nulls(rejected_file), key="runs/rejected.yaml")
        assert summary.status == "REJECTED", summary.error
        _wait_for(
            lambda: (r := _record(runtime, rejected.run_id)) is not None and r.torn_down_at is not None,
            "the safety net",
        )
        # A run file uploaded while Step Functions throttles every start: after Lambda's retries,
        # Start run's invocation record goes to the undelivered-runs queue, sent as its own role
        patch.setattr(trainrun.steps.start_run, "run_id_for", _throttled)
        bucket = runtime.deployed.outputs["ConfigBucketName"]
        runtime.operator_client("s3").put_object(Bucket=bucket, Key="runs/throttled.yaml", Body=b"name: throttled\n")
        patch.undo()
        queue = runtime.deployed.outputs["UndeliveredRunsQueueUrl"]
        attributes = runtime.client("sqs").get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
        assert attributes["ApproximateNumberOfMessages"] == "1", attributes
        # A run in progress, and a network no run record knows, when the schedule fires the janitor
        defaults = (runtime.pcluster.describes_to_complete, runtime.pcluster.seconds_to_complete)
        runtime.pcluster.describes_to_complete, runtime.pcluster.seconds_to_complete = 10**9, float("inf")
        busy = runtime.submit(example("single-node.yaml"), "runs/busy.yaml")
        _wait_for(lambda: (r := _record(runtime, busy.run_id)) is not None and r.cluster is not None, "the cluster")
        ghost = ghost_network(runtime)
        ghost_eks = ghost_eks_cluster(runtime)
        janitor = runtime.fire_schedule("JanitorFunction", "Sweep")
        assert "FunctionError" not in janitor
        answer = json.loads(janitor["Payload"].read())
        assert busy.run_id in answer["left_alone"] and {ghost, ghost_eks} <= set(answer["torn_down"]), answer
        runtime.pcluster.describes_to_complete, runtime.pcluster.seconds_to_complete = defaults
        runtime.client("stepfunctions").stop_execution(executionArn=busy.execution_arn, error="Stopped", cause="test")
        for run_id in (ghost, ghost_eks, busy.run_id):
            _wait_for(lambda run_id=run_id: not remaining(runtime, run_id), f"{run_id} to be torn down")
        # A run whose staging fails on the head node: Prepare head node asks EC2 whether the head node
        # is still running (it is: the preparation's own failure, HeadNodePreparationFailed)
        cluster.prepare_failure = "TRAINRUN-ERROR step dataset failed with exit code 1"
        staged = _run_file("single-node.yaml", network=_existing_network(runtime))
        _, unstaged = run_to_end(runtime, staged, key="runs/unstaged.yaml")
        cluster.prepare_failure = None
        assert unstaged.error is not None and unstaged.error["error"] == "HeadNodePreparationFailed", unstaged
        # A run that reuses an existing VPC, links a prefix of the config bucket and stages a dataset
        # object from it (the success run linked and read one of RunBucketArns; Load run spec looks
        # the object up in the config bucket), and fails at Compile: after the Parallel state whose
        # branches create the cluster and link the bucket (a failure in one branch stops the others,
        # so a failure at Create cluster could come before the link's call on a loaded machine)
        runtime.fail_at(State.COMPILE)
        config_bucket = runtime.deployed.outputs["ConfigBucketName"]
        config_prefix = f"s3://{config_bucket}/datasets/"
        runtime.client("s3").put_object(Bucket=config_bucket, Key="datasets/shards.tar", Body=b"")
        failing = _run_file(
            "bert-large-phase1.yaml",
            network=_existing_network(runtime),
            storage={"fsx": {**_example("bert-large-phase1.yaml")["storage"]["fsx"], "data_repository": config_prefix}},
            workload={"dataset": {"source": f"{config_prefix}shards.tar", "path": "/fsx/data"}},
        )
        _, failure = run_to_end(runtime, failing, key="runs/failure.yaml")
        assert failure.status == "FAILED"
        assert runtime.iam is not None
        assert runtime.iam.enforcer.unmapped == []
        return list(runtime.iam.enforcer.calls)


def _throttled(*args: Any) -> str:
    raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "StartExecution")


def _without_nulls(run_file: bytes) -> bytes:
    document = yaml.safe_load(run_file)
    document["capacity"] = {k: v for k, v in document["capacity"].items() if v is not None}
    return yaml.safe_dump(document).encode()


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
    with LocalRuntime(ACCOUNT, head_node_factory=ScriptedCluster()) as local:
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
    assert remaining(runtime, started.run_id) == []
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


class _IdleAgent:
    """A head node's SSM agent that is online and runs nothing (Session Manager only asks it is there)."""

    def run_script(self, script: str, run: Any) -> None:
        raise AssertionError("no command is sent in a session test")


def test_trainrun_shells_session_is_authorized_as_session_manager_authorizes_it(runtime: LocalRuntime) -> None:
    # Given a run's head node (tagged with its run, its agent online) and an instance of no run
    ec2 = runtime.client("ec2")
    image = DEFAULT_AMI_ID  # the local ParallelCluster's (moto loads no catalogue of images)

    def instance(tags: dict[str, str]) -> str:
        specs = (
            [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
        )
        launched = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, TagSpecifications=specs)
        return str(launched["Instances"][0]["InstanceId"])

    head_node, stranger = instance({"trainrun:run-id": "r-shell"}), instance({})
    for instance_id in (head_node, stranger):
        ssm_emulator.register_head_node(instance_id, _IdleAgent(), agent_registers_in=0)
    operator = runtime.operator_client("ssm")
    try:
        # When the operator opens a session on the run's head node, Then it is granted, named after the caller
        session = shells.start_session(operator, head_node)
        assert session.startswith("trainrun-")
        # and it may end its own session
        assert shells.end_session(operator, session) is None
        # When it asks for a session on an instance of no run, Then Session Manager refuses it by IAM
        with pytest.raises(shells.SessionRefused, match=f"AccessDenied.*ssm:StartSession.*instance/{stranger}"):
            shells.start_session(operator, stranger)
        # When it tries to end a session someone else started, Then that is denied too
        others = runtime.client("ssm").start_session(Target=head_node)["SessionId"]
        problem = shells.end_session(operator, others)
        assert problem is not None and "ssm:TerminateSession" in problem, problem
        # When the head node's agent is not online, Then the session is refused as AWS refuses it
        ssm_emulator.unregister_head_node(head_node)
        with pytest.raises(shells.SessionRefused, match="not connected to Session Manager"):
            shells.start_session(operator, head_node)
    finally:
        for instance_id in (head_node, stranger):
            ssm_emulator.unregister_head_node(instance_id)
        ec2.terminate_instances(InstanceIds=[head_node, stranger])
