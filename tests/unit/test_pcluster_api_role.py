"""The ParallelCluster API's own role creating a cluster's stack: the node roles, their policies
and instance profiles CloudFormation creates as that role, authorized with the policies
ParallelCluster's template gives it for the parameters the README deploys the API with."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from trainrun.local.iam.access import PCLUSTER_API, PCLUSTER_API_PARAMETERS, pcluster_api_policies
from trainrun.local.iam.calls import CallRecord
from trainrun.local.iam.cluster_stack import CREATION_FAILURE, QUEUES_STACK, ClusterStackIam, StackCreation
from trainrun.local.iam.enforcement import Enforcer
from trainrun.local.iam.principals import Principal, Principals, session_arn
from trainrun.local.iam.template_roles import stack_managed_policies
from trainrun.logic.cluster_config import ClusterIds, cluster_name, render_cluster_config
from trainrun.model.run_file import parse_run_file
from trainrun.model.tags import run_tags

ROOT = Path(__file__).resolve().parents[2]
REGION, ACCOUNT, STACK = "us-west-2", "123456789012", "trainrun-test"
RUN_ID = "single-node-20250101t000000z"
CLUSTER = cluster_name(RUN_ID)
STACK_ARN = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{CLUSTER}/0b6e5f10-0000-0000-0000-000000000000"


def stacks_node_policy_arn() -> str:
    """The stack's ClusterNodePolicy, by the ARN the local deployer gives it (as CloudFormation would)."""
    policies = stack_managed_policies(ROOT / "template.yaml", {}, region=REGION, stack_name=STACK)
    return next(arn for arn in policies if "ClusterNodePolicy" in arn)


def our_config(node_policy_arn: str) -> dict[str, Any]:
    """The cluster configuration Create cluster renders for examples/single-node.yaml."""
    spec = parse_run_file((ROOT / "examples" / "single-node.yaml").read_text())
    return render_cluster_config(
        spec, ClusterIds.placeholders(spec), tags=run_tags(RUN_ID, STACK), node_policy_arn=node_policy_arn
    )


def create_stack(
    parameters: dict[str, str], config: dict[str, Any], tmp_path: Path
) -> tuple[StackCreation, list[CallRecord]]:
    """The stack's IAM resources, created as the API's role for an API deployed with `parameters`:
    the creation (its events, and describeCluster's failure: None when created) and the recorded decisions."""
    principals = Principals(ACCOUNT)
    policies = pcluster_api_policies(parameters, account=ACCOUNT)
    arn = session_arn(ACCOUNT, "ParallelClusterLambdaRole-1a2b3c4d", "pcluster-api-ParallelClusterFunction")
    principals.issue(Principal(PCLUSTER_API, arn, policies))
    enforcer = Enforcer(principals, tmp_path / "iam-calls.jsonl")
    creation = ClusterStackIam(enforcer, PCLUSTER_API, ACCOUNT).create(CLUSTER, REGION, config, STACK_ARN)
    return creation, enforcer.calls


def denied(records: list[CallRecord]) -> list[tuple[str, str]]:
    return [(r.action, r.resources[0] if r.resources else "*") for r in records if not r.allowed]


def test_the_documented_api_deploy_lets_the_stack_create_our_configs_node_roles(tmp_path: Path) -> None:
    # Given the API deployed as the README deploys it, and our config naming the stack's ClusterNodePolicy
    config = our_config(stacks_node_policy_arn())
    # When the cluster's stack creates the nodes' roles, policies and instance profiles as the API's role
    creation, records = create_stack(PCLUSTER_API_PARAMETERS, config, tmp_path)
    # Then every call is allowed
    assert creation.failure is None, denied(records)
    assert {r.action for r in records} >= {
        "iam:CreateRole",
        "iam:TagRole",
        "iam:AttachRolePolicy",
        "iam:PutRolePolicy",
        "iam:CreateInstanceProfile",
        "iam:AddRoleToInstanceProfile",
        "iam:PassRole",
    }


def test_without_iam_admin_access_the_stack_may_not_create_the_node_roles(tmp_path: Path) -> None:
    # Given the API deployed with the template's defaults (EnableIamAdminAccess=false)
    config = our_config(stacks_node_policy_arn())
    # When the cluster's stack creates the head node's role
    creation, records = create_stack({}, config, tmp_path)
    # Then CloudFormation is refused iam:CreateRole, and the cluster fails as ParallelCluster reports it
    assert (
        creation.failure
        == CREATION_FAILURE
        == {
            "failureCode": "ClusterCreationFailure",
            "failureReason": "Failed to create the cluster.",
        }
    )
    action, resource = denied(records)[0]
    assert action == "iam:CreateRole"
    assert resource.startswith(f"arn:aws:iam::{ACCOUNT}:role/parallelcluster/{CLUSTER}/{CLUSTER}-RoleHeadNode-")


def test_with_iam_admin_access_a_policy_outside_the_parallelcluster_names_may_not_be_attached(tmp_path: Path) -> None:
    # Given the API with IAM admin access, and a node policy at IAM's default path, named trainrun-...
    outside = f"arn:aws:iam::{ACCOUNT}:policy/{STACK}-ClusterNodePolicy-1A2B3C4D5E6F"
    # When the cluster's stack attaches it to the head node's role
    creation, records = create_stack({"EnableIamAdminAccess": "true"}, our_config(outside), tmp_path)
    # Then iam:AttachRolePolicy is refused (iam:PolicyARN is neither parallelcluster* nor /parallelcluster/)
    assert creation.failure == CREATION_FAILURE
    assert [r.request.context.get("iam:PolicyARN") for r in records if not r.allowed] == [outside]
    assert denied(records)[0][0] == "iam:AttachRolePolicy"


def test_a_refused_role_is_its_stacks_create_failed_event_with_cloudformations_reason(tmp_path: Path) -> None:
    # Given the API with IAM admin access, and a node policy outside the names it may attach
    outside = f"arn:aws:iam::{ACCOUNT}:policy/{STACK}-ClusterNodePolicy-1A2B3C4D5E6F"
    # When the cluster's stack creates the head node's role
    creation, _ = create_stack({"EnableIamAdminAccess": "true"}, our_config(outside), tmp_path)
    # Then the main stack's events: the queues' nested stack started, the role started and failed
    # with the caller, the action and the resource, and the nested stack cancelled
    statuses = [(e.resource.logical_id, e.status) for e in creation.events]
    assert statuses == [
        (QUEUES_STACK, "CREATE_IN_PROGRESS"),
        ("RoleHeadNode", "CREATE_IN_PROGRESS"),
        ("RoleHeadNode", "CREATE_FAILED"),
        (QUEUES_STACK, "CREATE_FAILED"),
    ]
    role_failed, cancelled = creation.events[2:]
    assert role_failed.resource.type == "AWS::IAM::Role"
    assert role_failed.resource.physical_id.startswith(f"{CLUSTER}-RoleHeadNode-")
    assert role_failed.reason is not None
    assert re.search(
        r"User: arn:aws:sts::\d+:assumed-role/ParallelClusterLambdaRole-1a2b3c4d/\S+ is not authorized to perform: "
        rf"iam:AttachRolePolicy on resource: arn:aws:iam::{ACCOUNT}:role/parallelcluster/{CLUSTER}/"
        rf"{CLUSTER}-RoleHeadNode-",
        role_failed.reason,
    )
    assert cancelled.reason == "Resource creation cancelled"


def test_a_created_stack_has_each_iam_resource_complete_and_the_queues_nested_stack_last(tmp_path: Path) -> None:
    # Given the API as the README deploys it
    # When the cluster's stack creates the nodes' IAM resources
    creation, _ = create_stack(PCLUSTER_API_PARAMETERS, our_config(stacks_node_policy_arn()), tmp_path)
    # Then each head node resource starts and completes once, and the queues' nested stack completes last
    completed = [e.resource.logical_id for e in creation.events if e.status == "CREATE_COMPLETE"]
    assert completed == [
        "RoleHeadNode",
        "ParallelClusterPoliciesHeadNode",
        "S3AccessPoliciesHeadNode",
        "InstanceProfileHeadNode",
        "HeadNode",
        QUEUES_STACK,
    ]
    started = [e.resource.logical_id for e in creation.events if e.status == "CREATE_IN_PROGRESS"]
    assert sorted(started) == sorted(completed)


def test_a_refused_queue_role_is_its_nested_stacks_failure_naming_the_role(tmp_path: Path) -> None:
    # Given a queue whose role attaches a policy the API's role may not attach (the head node's may)
    config = our_config(stacks_node_policy_arn())
    [queue] = config["Scheduling"]["SlurmQueues"]
    outside = f"arn:aws:iam::{ACCOUNT}:policy/{STACK}-QueuePolicy-1A2B3C4D5E6F"
    queue["Iam"]["AdditionalIamPolicies"].append({"Policy": outside})
    # When the cluster's stack creates the nodes' IAM resources
    creation, _ = create_stack(PCLUSTER_API_PARAMETERS, config, tmp_path)
    # Then the main stack's events show the nested stack failed, naming the queue's role in it
    assert creation.failure == CREATION_FAILURE
    last = creation.events[-1]
    assert (last.resource.logical_id, last.status) == (QUEUES_STACK, "CREATE_FAILED")
    assert last.reason is not None
    assert re.fullmatch(
        rf"Embedded stack arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{CLUSTER}-{QUEUES_STACK}-\w+/[\w-]+ "
        r"was not successfully created: "
        r"The following resource\(s\) failed to create: \[Role[0-9A-Z][0-9a-f]{15}\]\. ",
        last.reason,
    )


def test_the_queues_nested_stack_has_the_logical_id_cdk_gives_parallelclusters() -> None:
    # A real ParallelCluster 3 stack's nested stack is named <cluster>-ComputeFleetQueuesNestedStack
    # QueuesNestedStackResource4C142E85-<random> (CloudFormation: <stack>-<logical id>-<random>).
    assert QUEUES_STACK == "ComputeFleetQueuesNestedStackQueuesNestedStackResource4C142E85"


def test_the_stacks_cluster_node_policy_is_under_the_path_the_api_may_attach() -> None:
    # Given the stack's ClusterNodePolicy as deployed
    # When its ARN is read
    arn = stacks_node_policy_arn()
    # Then it is under /parallelcluster/, the path ParallelCluster's IamPolicy statement allows
    assert arn.startswith(f"arn:aws:iam::{ACCOUNT}:policy/parallelcluster/{STACK}-ClusterNodePolicy")


def test_an_api_parameter_the_policy_file_is_not_resolved_for_is_refused() -> None:
    # Given a deploy restricting the API to one region (its statements would carry aws:RequestedRegion)
    # When the API's role is built for it
    # Then it is refused, naming the parameter and the value
    with pytest.raises(ValueError, match=r"Region='us-west-2'"):
        pcluster_api_policies({"Region": "us-west-2"}, account=ACCOUNT)


_PARAMETER = re.compile(r"ParameterKey=(\w+),ParameterValue=([^\s\\]+)")


def test_the_readme_deploys_the_api_with_the_parameters_the_local_api_enforces() -> None:
    # Given the README's command that deploys the ParallelCluster API
    readme = (ROOT / "README.md").read_text()
    commands = [block for block in re.findall(r"```sh\n(.*?)```", readme, re.S) if "parallelcluster-api.yaml" in block]
    # When its --parameters are read
    # Then they are the ones the local runtime gives the API's role its policies for
    assert len(commands) == 1
    assert dict(_PARAMETER.findall(commands[0])) == PCLUSTER_API_PARAMETERS


def test_the_deploying_guide_names_the_parameters_the_local_api_enforces() -> None:
    # Given docs/deploying.md's lines on the ParallelCluster API stack's template
    lines = [
        line for line in (ROOT / "docs" / "deploying.md").read_text().splitlines() if "parallelcluster-api.yaml" in line
    ]
    # Then each names every parameter the local runtime deploys the API with
    assert lines
    for line in lines:
        for key, value in PCLUSTER_API_PARAMETERS.items():
            assert f"{key}={value}" in line, line
