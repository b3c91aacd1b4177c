"""Provisioning and teardown through the real state machine: nothing is left behind, ever.

Starting a local runtime costs seconds of CPU, so the tests at the end of the module share one
(`shared_runtime`): each reads its own run, by run id, and what a test changes in the runtime
(`fail_at`, `wrap`) is put back after it. The local runtime is process-wide (moto's backend, the
function registry), so the module's shared runtime must be the last one it starts: the tests
that need a runtime of their own (ParallelCluster, IAM or retries changed, resources left behind,
a look at every cluster or a sweep of the whole stack) come first.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import yaml

from trainrun.errors import TransientAwsError
from trainrun.local.iam.access import PCLUSTER_API, pcluster_api_policies
from trainrun.local.lambdas import LocalFunction, registry
from trainrun.local.runtime import InjectedFailure, LocalRuntime
from trainrun.local.template_deployer import ACCOUNT_ID
from trainrun.model.run_record import RunRecord, utcnow
from trainrun.steps.janitor import sweep
from trainrun.workflow import FUNCTIONS, State

from .conftest import EXAMPLES, example, ghost_network, remaining, run_to_end, wait_for

PROVISIONING = [State.CREATE_NETWORK, State.CREATE_FILE_SYSTEM, State.LINK_DATA_REPOSITORY, State.CREATE_CLUSTER]
RECORD_FIELD_OF_STATE = {
    State.CREATE_NETWORK: "network",
    State.CREATE_FILE_SYSTEM: "storage",
    State.LINK_DATA_REPOSITORY: "storage",
    State.CREATE_CLUSTER: "cluster",
}


def cluster_requested(runtime: LocalRuntime, run_id: str) -> bool:
    # The record is written by the run's first state: it may not exist yet right after the upload.
    record = runtime.store().get(run_id)
    return record is not None and record.cluster is not None


def record_of(runtime: LocalRuntime, run_id: str) -> RunRecord:
    record = runtime.store().get(run_id)
    assert record is not None
    return record


def with_changes(name: str, **changes: Any) -> bytes:
    """An example run file with some top-level sections replaced or merged."""
    document = yaml.safe_load((EXAMPLES / name).read_text())
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(document.get(key), dict):
            document[key] = {**document[key], **value}
        else:
            document[key] = value
    return yaml.safe_dump(document).encode()


def wrap(runtime: LocalRuntime, state: State, around: Callable[[Callable[..., Any], Any, Any], Any]) -> None:
    """Replace the function behind a state with `around(real_handler, event, context)`."""
    wrap_function(runtime, FUNCTIONS[state].logical_id, around)


def wrap_function(
    runtime: LocalRuntime, logical_id: str, around: Callable[[Callable[..., Any], Any, Any], Any]
) -> None:
    """Replace a function of the stack with `around(real_handler, event, context)`."""
    name = runtime.deployed.function_name(logical_id)
    real = registry.get(name)
    assert real is not None
    handler = real.load()
    wrapped = LocalFunction(
        name=real.name, arn=real.arn, code_dir=real.code_dir, handler=real.handler, environment=real.environment
    )
    wrapped.load = lambda: lambda event, context: around(handler, event, context)  # type: ignore[method-assign]
    registry.register(wrapped)


def invoke(runtime: LocalRuntime, logical_id: str, event: Any) -> Any:
    response = runtime.client("lambda").invoke(
        FunctionName=runtime.deployed.function_name(logical_id), Payload=json.dumps(event)
    )
    payload = json.loads(response["Payload"].read())
    assert "FunctionError" not in response, payload
    return payload


# --- on a runtime of the test's own ---------------------------------------------------------------


def test_a_kept_run_keeps_exactly_one_of_everything(runtime: LocalRuntime) -> None:
    # Given a run that keeps its cluster on success, and steps delivered twice each
    for state in PROVISIONING:
        wrap(runtime, state, lambda handler, event, context: (handler(event, context), handler(event, context))[1])
    run_file = with_changes("bert-large-phase1.yaml", teardown={"on_success": "keep"})
    started, summary = run_to_end(runtime, run_file)
    # Then it succeeded, says when it was kept, and holds one of each resource: no duplicates
    assert summary.status == "SUCCEEDED", summary.error
    record = record_of(runtime, started.run_id)
    assert record.kept_at is not None and record.torn_down_at is None
    kinds = Counter(resource.kind for resource in remaining(runtime, started.run_id))
    assert kinds["vpc"] == 1 and kinds["nat-gateway"] == 1 and kinds["elastic-ip"] == 1
    assert kinds["subnet"] == 2 and kinds["internet-gateway"] == 1 and kinds["vpc-endpoint"] == 1
    assert kinds["file-system"] == 1 and kinds["data-repository-association"] == 1
    assert kinds["instance"] == 16 + 1  # the compute nodes and the head node
    assert runtime.pcluster.cluster_names() == [record.cluster.name]


def test_a_run_whose_teardown_fails_after_training_stays_succeeded_with_the_teardown_error(
    runtime: LocalRuntime,
) -> None:
    # Given a run whose training succeeds and whose Tear down then fails
    runtime.fail_at(State.TEAR_DOWN)
    # When it ends
    started, summary = run_to_end(runtime, example("bert-large-phase1.yaml"))
    # Then it is SUCCEEDED (its training did), and the record says why teardown did not finish
    assert summary.status == "SUCCEEDED", summary.error
    record = record_of(runtime, started.run_id)
    assert record.teardown_error is not None and record.teardown_error.error == "InjectedFailure"
    assert State.TEAR_DOWN in record.teardown_error.message


def test_a_cluster_that_fails_to_create_fails_the_run_with_parallelclusters_reasons(runtime: LocalRuntime) -> None:
    runtime.pcluster.fail_next_create(
        failures=[{"failureCode": "HeadNodeBootstrapFailure", "failureReason": "Cluster creation timed out."}]
    )
    started, summary = run_to_end(runtime, example("single-node.yaml"))
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "ClusterCreateFailed"
    assert "HeadNodeBootstrapFailure: Cluster creation timed out." in summary.error["cause"]
    assert remaining(runtime, started.run_id) == []


def test_a_run_whose_cluster_stack_the_apis_role_may_not_create_fails_and_leaves_nothing(
    runtime: LocalRuntime,
) -> None:
    # Given the ParallelCluster API deployed with the template's default EnableIamAdminAccess=false
    assert runtime.iam is not None
    role = pcluster_api_policies({"EnableIamAdminAccess": "false"}, account=ACCOUNT_ID)
    runtime.iam.principals.replace(PCLUSTER_API, role)
    # When a run creates its cluster (whose stack creates the nodes' roles as the API's role)
    started, summary = run_to_end(runtime, example("single-node.yaml"))
    # Then the run fails with ParallelCluster's reason and, from the cluster stack's events, the
    # role CloudFormation could not create and the action refused; and teardown leaves nothing
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "ClusterCreateFailed"
    cause = summary.error["cause"]
    assert "ClusterCreationFailure: Failed to create the cluster. First failed resource: RoleHeadNode: " in cause
    assert "is not authorized to perform: iam:CreateRole on resource: arn:aws:iam::" in cause
    assert remaining(runtime, started.run_id) == []


def test_the_janitor_spares_a_run_in_progress_and_tears_down_what_no_run_record_knows(runtime: LocalRuntime) -> None:
    # Given a run waiting for a cluster that takes its time, and a network tagged with this stack
    # for a run that no record knows (a crashed start)
    runtime.pcluster.describes_to_complete = 10**9
    runtime.pcluster.seconds_to_complete = float("inf")
    started = runtime.submit(example("single-node.yaml"), "runs/busy.yaml")
    wait_for(lambda: cluster_requested(runtime, started.run_id), "the cluster to be requested")
    ghost = ghost_network(runtime)
    assert remaining(runtime, ghost)
    # When the janitor sweeps
    answer = invoke(runtime, "JanitorFunction", {})
    # Then it leaves the run in progress alone, and starts the teardown of the unknown run, which leaves nothing
    assert started.run_id in answer["left_alone"]
    assert remaining(runtime, started.run_id)
    assert ghost in answer["torn_down"]
    wait_for(lambda: not remaining(runtime, ghost), "the janitor's teardown")
    # When someone then stops the run's execution (a stopped execution never reaches its Catch)
    runtime.client("stepfunctions").stop_execution(executionArn=started.execution_arn, error="Stopped", cause="test")
    # Then the status-change rule starts the teardown workflow, which deletes everything and records the run
    wait_for(lambda: not remaining(runtime, started.run_id), "the safety net to tear the run down")
    wait_for(lambda: record_of(runtime, started.run_id).status.value == "FAILED", "the run to be recorded FAILED")
    record = record_of(runtime, started.run_id)
    assert record.error is not None and record.error.error == "ABORTED"


def test_a_cluster_that_cannot_be_deleted_leaves_only_what_it_holds_and_the_janitor_tries_again(
    runtime: LocalRuntime,
) -> None:
    # Given a run whose cluster's deletion ends DELETE_FAILED with its nodes still running
    runtime.pcluster.fail_next_delete()
    # When it runs to the end
    started, summary = run_to_end(runtime, example("single-node.yaml"))
    # Then the training's success stands, with the teardown's error recorded beside it
    assert summary.status == "SUCCEEDED", summary.error
    record = record_of(runtime, started.run_id)
    assert record.error is None
    assert record.teardown_error is not None and "DELETE_FAILED" in record.teardown_error.message
    # And what does not depend on the cluster is gone: the file system, the NAT gateway and its address
    kinds = Counter(resource.kind for resource in remaining(runtime, started.run_id))
    assert "file-system" not in kinds and "nat-gateway" not in kinds and "elastic-ip" not in kinds
    # While the cluster's nodes hold their subnets, security group and VPC (EC2 refuses: DependencyViolation)
    assert kinds["instance"] >= 1 and kinds["subnet"] >= 1 and kinds["vpc"] == 1
    # And the teardown counted the run in the leftovers alarm's metric
    group = f"/aws/lambda/{runtime.deployed.function_name('TearDownFunction')}"
    logged = runtime.client("logs").filter_log_events(logGroupName=group, filterPattern="LeftoverRuns")["events"]
    (metric,) = [json.loads(event["message"]) for event in logged]
    assert (metric["LeftoverRuns"], metric["Stack"], metric["service"]) == ([1.0], runtime.deployed.name, "trainrun")
    # When the janitor sweeps after its grace period, and ParallelCluster can delete the cluster this time
    report = sweep(
        runtime.client("ec2"),
        runtime.client("fsx"),
        runtime.client("stepfunctions"),
        runtime.store(),
        stack=runtime.deployed.name,
        teardown_state_machine_arn=runtime.deployed.outputs["TeardownStateMachineArn"],
        grace=timedelta(hours=2),
        now=utcnow() + timedelta(hours=3),
    )
    assert started.run_id in report.torn_down
    runtime.wait_for_safety_net(timeout=60)
    # Then it deletes the cluster again, and nothing is left
    assert remaining(runtime, started.run_id) == []
    assert record_of(runtime, started.run_id).torn_down_at is not None


def test_a_teardown_that_keeps_failing_transiently_leaves_a_successful_run_succeeded(runtime: LocalRuntime) -> None:
    # Given a Tear down that fails with a transient error every time, and its retries shortened
    # for the test (their length is checked in tests/unit/test_state_machine.py)
    definition = json.loads(json.dumps(runtime.deployed.state_machine_definitions["RunStateMachine"]))
    definition["States"][State.TEAR_DOWN]["Retry"][0].update({"IntervalSeconds": 1, "MaxAttempts": 2, "BackoffRate": 1})
    runtime.client("stepfunctions").update_state_machine(
        stateMachineArn=runtime.deployed.outputs["StateMachineArn"], definition=json.dumps(definition)
    )
    attempts: list[str] = []

    def unavailable(handler: Callable[..., Any], event: Any, context: Any) -> Any:
        attempts.append(event["run_id"])
        raise TransientAwsError("ParallelCluster API (502) may succeed if retried: Bad Gateway")

    wrap_function(runtime, "TearDownFunction", unavailable)
    # When a run trains successfully
    started, summary = run_to_end(runtime, example("single-node.yaml"))
    # Then its teardown was retried, and the run is SUCCEEDED with the teardown's error beside it
    assert len(attempts) == 3
    assert summary.status == "SUCCEEDED", summary.error
    record = record_of(runtime, started.run_id)
    assert record.error is None
    assert record.teardown_error is not None and record.teardown_error.error == "TransientAwsError"


# --- on the module's shared runtime (the last one the module starts) -------------------------------


def test_a_run_creates_network_file_system_repository_and_cluster_then_leaves_nothing(
    shared_runtime: LocalRuntime,
) -> None:
    runtime = shared_runtime
    # Given the BERT example (16 nodes, a data repository) and a reservation that fits
    # When it runs
    started, summary = run_to_end(runtime, example("bert-large-phase1.yaml"))
    # Then every provisioning state ran, the run succeeded, and nothing tagged with it remains
    assert summary.status == "SUCCEEDED", summary.error
    for state in [*PROVISIONING, State.TEAR_DOWN]:
        assert state in summary.states
    record = record_of(runtime, started.run_id)
    assert record.network is not None and record.network.nat_gateway_id and record.network.vpc_id
    assert record.storage is not None and record.storage.file_system_id
    assert record.storage.data_repository_association_id
    assert record.cluster is not None and record.cluster.status == "CREATE_COMPLETE"
    assert record.cluster.head_node_instance_id
    assert record.torn_down_at is not None
    assert remaining(runtime, started.run_id) == []


def test_a_run_without_a_data_repository_links_none(shared_runtime: LocalRuntime) -> None:
    runtime = shared_runtime
    started, summary = run_to_end(runtime, example("single-node.yaml"))
    assert summary.status == "SUCCEEDED", summary.error
    record = record_of(runtime, started.run_id)
    assert record.storage is not None and record.storage.data_repository_association_id is None
    assert remaining(runtime, started.run_id) == []


@pytest.mark.parametrize("state", PROVISIONING)
def test_a_failure_at_any_provisioning_state_tears_everything_down(shared_runtime: LocalRuntime, state: str) -> None:
    runtime = shared_runtime
    runtime.fail_at(state)
    started, summary = run_to_end(runtime, example("bert-large-phase1.yaml"))
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "InjectedFailure"
    assert state in summary.error["cause"]
    assert remaining(runtime, started.run_id) == []


@pytest.mark.parametrize("state", PROVISIONING)
def test_a_step_that_crashes_after_creating_but_before_recording_leaves_nothing(
    shared_runtime: LocalRuntime, state: str
) -> None:
    runtime = shared_runtime

    # Given a step that creates its resource, then dies before the run record holds its id
    def create_then_crash(handler: Callable[..., Any], event: Any, context: Any) -> Any:
        handler(event, context)
        table = runtime.deployed.outputs["RunsTableName"]
        runtime.client("dynamodb").update_item(
            TableName=table,
            Key={"run_id": {"S": event["run_id"]}},
            UpdateExpression="REMOVE #field",
            ExpressionAttributeNames={"#field": RECORD_FIELD_OF_STATE[state]},
        )
        raise InjectedFailure(f"{state} crashed after creating")

    wrap(runtime, state, create_then_crash)
    started, summary = run_to_end(runtime, example("bert-large-phase1.yaml"))
    # Then teardown still finds what it created, by its tags
    assert summary.status == "FAILED"
    assert summary.error is not None and "crashed after creating" in summary.error["cause"]
    assert remaining(runtime, started.run_id) == []


def test_a_failed_run_that_keeps_on_failure_keeps_its_resources(shared_runtime: LocalRuntime) -> None:
    runtime = shared_runtime
    runtime.fail_at(State.CREATE_CLUSTER)
    started, summary = run_to_end(runtime, with_changes("single-node.yaml", teardown={"on_failure": "keep"}))
    assert summary.status == "FAILED"
    assert record_of(runtime, started.run_id).kept_at is not None
    assert {"vpc", "file-system"} <= {resource.kind for resource in remaining(runtime, started.run_id)}


def test_keep_file_system_deletes_the_cluster_and_keeps_the_file_system(shared_runtime: LocalRuntime) -> None:
    runtime = shared_runtime
    started, summary = run_to_end(runtime, with_changes("single-node.yaml", teardown={"keep_file_system": True}))
    assert summary.status == "SUCCEEDED", summary.error
    kinds = {resource.kind for resource in remaining(runtime, started.run_id)}
    assert "file-system" in kinds and "instance" not in kinds


def test_an_existing_network_and_file_system_are_reused_and_never_deleted(shared_runtime: LocalRuntime) -> None:
    runtime = shared_runtime
    # Given a VPC, two subnets and a file system the run did not create (untagged)
    ec2, fsx = runtime.client("ec2"), runtime.client("fsx")
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsSupport={"Value": True})
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    public = ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.0.0/24", AvailabilityZone="us-west-2d")["Subnet"]["SubnetId"]
    private = ec2.create_subnet(VpcId=vpc, CidrBlock="10.20.1.0/24", AvailabilityZone="us-west-2d")["Subnet"][
        "SubnetId"
    ]
    file_system = fsx.create_file_system(
        FileSystemType="LUSTRE",
        StorageCapacity=1200,
        SubnetIds=[private],
        LustreConfiguration={"DeploymentType": "SCRATCH_2"},
    )["FileSystem"]["FileSystemId"]
    while fsx.describe_file_systems(FileSystemIds=[file_system])["FileSystems"][0]["Lifecycle"] != "AVAILABLE":
        time.sleep(0.01)
    run_file = with_changes(
        "single-node.yaml",
        network={"vpc_id": vpc, "public_subnet_id": public, "private_subnet_id": private},
        storage={"fsx": {"file_system_id": file_system}},
    )
    # When the run uses them
    started, summary = run_to_end(runtime, run_file)
    # Then it succeeds, and they are all still there, while what it did create is gone
    assert summary.status == "SUCCEEDED", summary.error
    record = record_of(runtime, started.run_id)
    assert record.network is not None and record.network.created is False and record.network.vpc_id == vpc
    assert record.storage is not None and record.storage.created is False
    assert ec2.describe_vpcs(VpcIds=[vpc])["Vpcs"]
    assert len(ec2.describe_subnets(SubnetIds=[public, private])["Subnets"]) == 2
    assert fsx.describe_file_systems(FileSystemIds=[file_system])["FileSystems"][0]["Lifecycle"] == "AVAILABLE"
    assert remaining(runtime, started.run_id) == []
