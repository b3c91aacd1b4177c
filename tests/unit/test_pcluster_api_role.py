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
from trainrun.local.iam.cluster_stack import CREATION_FAILURE, ClusterStackIam
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


def stacks_node_policy_arn() -> str:
    """The stack's ClusterNodePolicy, by the ARN the local deployer gives it (as CloudFormation would)."""
    policies = stack_managed_policies(ROOT / "template.yaml", {}, region=REGION, stack_name=STACK)
    return next(arn for arn in policies if "ClusterNodePolicy" in arn)


def our_config(node_policy_arn: str) -> dict[str, Any]:
    """The cluster configuration Create cluster renders for examples/single-node.yaml."""
    spec = parse_run_file((ROOT / "examples" / "single-node.yaml").read_text())
    return render_cluster_config(
        spec, ClusterIds.placeholders(), tags=run_tags(RUN_ID, STACK), node_policy_arn=node_policy_arn
    )


def create_stack(parameters: dict[str, str], config: dict[str, Any], tmp_path: Path) -> tuple[Any, list[CallRecord]]:
    """The stack's IAM resources, created as the API's role for an API deployed with `parameters`:
    describeCluster's failure (None when created) and the recorded decisions."""
    principals = Principals(ACCOUNT)
    policies = pcluster_api_policies(parameters, account=ACCOUNT)
    arn = session_arn(ACCOUNT, "ParallelClusterLambdaRole-1a2b3c4d", "pcluster-api-ParallelClusterFunction")
    principals.issue(Principal(PCLUSTER_API, arn, policies))
    enforcer = Enforcer(principals, tmp_path / "iam-calls.jsonl")
    failure = ClusterStackIam(enforcer, PCLUSTER_API, ACCOUNT).refusal(CLUSTER, REGION, config)
    return failure, enforcer.calls


def denied(records: list[CallRecord]) -> list[tuple[str, str]]:
    return [(r.action, r.resources[0] if r.resources else "*") for r in records if not r.allowed]


def test_the_documented_api_deploy_lets_the_stack_create_our_configs_node_roles(tmp_path: Path) -> None:
    # Given the API deployed as the README deploys it, and our config naming the stack's ClusterNodePolicy
    config = our_config(stacks_node_policy_arn())
    # When the cluster's stack creates the nodes' roles, policies and instance profiles as the API's role
    failure, records = create_stack(PCLUSTER_API_PARAMETERS, config, tmp_path)
    # Then every call is allowed
    assert failure is None, denied(records)
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
    failure, records = create_stack({}, config, tmp_path)
    # Then CloudFormation is refused iam:CreateRole, and the cluster fails as ParallelCluster reports it
    assert (
        failure
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
    failure, records = create_stack({"EnableIamAdminAccess": "true"}, our_config(outside), tmp_path)
    # Then iam:AttachRolePolicy is refused (iam:PolicyARN is neither parallelcluster* nor /parallelcluster/)
    assert failure == CREATION_FAILURE
    assert [r.request.context.get("iam:PolicyARN") for r in records if not r.allowed] == [outside]
    assert denied(records)[0][0] == "iam:AttachRolePolicy"


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
