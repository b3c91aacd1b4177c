"""The IAM resources a cluster's CloudFormation stack creates, authorized as the ParallelCluster
API's own role.

ParallelCluster's API creates the cluster's stack with its Lambda function's credentials and no
service role (aws-parallelcluster 3.16.1, pcluster.aws.cfn.CfnClient.create_stack passes no
RoleARN), so CloudFormation creates every resource as ParallelClusterLambdaRole, with the
policies ParallelCluster's own template gives it (access.pcluster_api_policies). For each node
that names no InstanceRole or InstanceProfile, the stack creates (pcluster.templates.
cdk_builder_utils.NodeIamResourcesBase):
- a role under the path /parallelcluster/<cluster>/, tagged with the stack's tags (iam:CreateRole,
  iam:TagRole), attaching the node's managed policies (iam:AttachRolePolicy, condition key
  iam:PolicyARN: cluster_roles.managed_policy_arns);
- its inline policies: "parallelcluster" always, "S3Access" with `Iam/S3Access`
  (iam:PutRolePolicy);
- an instance profile under the same path (iam:CreateInstanceProfile, iam:AddRoleToInstanceProfile
  with its dependent iam:PassRole on the role);
and passes the role to EC2 when it launches the node (iam:PassRole, iam:PassedToService). With
an InstanceRole it creates the instance profile and passes that role; with an InstanceProfile it
creates nothing of IAM (the role inside is not known here, its iam:PassRole is not checked).

The first denial ends the stack's creation: CloudFormation's status reason for the resource
names the caller, the action and the resource, and ParallelCluster's describeCluster reports
the generic ClusterCreationFailure (pcluster.models.cluster_resources.get_cluster_creation_failure
looks for a failed wait condition only; the detail stays in the stack's events).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from trainrun.local.iam.cluster_roles import managed_policy_arns, partition, principal_tags
from trainrun.local.iam.enforcement import Enforcer
from trainrun.local.iam.operations import checked
from trainrun.local.iam.policy import Decision, Request, Resource
from trainrun.local.iam.principals import Principal

ROLE_PATH = "/parallelcluster/"  # pcluster.constants.IAM_ROLE_PATH
# What describeCluster's failures[] says when no wait condition failed (get_cluster_creation_failure).
CREATION_FAILURE = {"failureCode": "ClusterCreationFailure", "failureReason": "Failed to create the cluster."}

_log = logging.getLogger(__name__)


def _suffix(node_name: str) -> str:
    """pcluster.templates.cdk_builder_utils.create_hash_suffix: "HeadNode" as it is, a queue's
    name as the first 16 hex digits of its SHA-1, capitalized."""
    if node_name == "HeadNode":
        return node_name
    return hashlib.sha1(node_name.encode(), usedforsecurity=False).hexdigest()[:16].capitalize()


def _nodes(config: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    queues = config.get("Scheduling", {}).get("SlurmQueues", [])
    return [("HeadNode", config.get("HeadNode", {})), *((str(q["Name"]), q) for q in queues)]


def stack_requests(
    config: Mapping[str, Any], cluster_name: str, *, account: str, region: str
) -> list[tuple[str, list[Request]]]:
    """What the cluster's stack asks IAM, in order: (operation, its requests) per call."""
    iam_arn = f"arn:{partition(region)}:iam::{account}"
    path = f"{ROLE_PATH}{cluster_name}/"
    tags = principal_tags(config, cluster_name)
    calls: list[tuple[str, list[Request]]] = []
    for node_name, node in _nodes(config):
        iam = node.get("Iam", {})
        if iam.get("InstanceProfile"):
            continue
        suffix = _suffix(node_name)
        profile = Resource(f"{iam_arn}:instance-profile{path}{cluster_name}-InstanceProfile{suffix}-{_random()}")
        if iam.get("InstanceRole"):
            role = Resource(str(iam["InstanceRole"]))
        else:
            # CloudFormation names a role that has no RoleName: <stack>-<logical id>-<random>.
            role = Resource(f"{iam_arn}:role{path}{cluster_name}-Role{suffix}-{_random()}", tags=tags)
            created = Resource(role.arn, request_tags=tags)
            calls.append(
                ("iam:CreateRole", [Request("iam:CreateRole", (created,)), Request("iam:TagRole", (created,))])
            )
            calls += [
                ("iam:AttachRolePolicy", [Request("iam:AttachRolePolicy", (role,), {"iam:PolicyARN": arn})])
                for arn in managed_policy_arns(config, node, region)
            ]
            # One PutRolePolicy per inline policy: "parallelcluster", and "S3Access" with S3Access.
            inline = 2 if iam.get("S3Access") else 1
            calls += [("iam:PutRolePolicy", [Request("iam:PutRolePolicy", (role,))])] * inline
        calls.append(("iam:CreateInstanceProfile", [Request("iam:CreateInstanceProfile", (profile,))]))
        # The Service Authorization Reference lists iam:PassRole on the role as its dependent action.
        added = [Request("iam:AddRoleToInstanceProfile", (profile,)), Request("iam:PassRole", (role,))]
        calls.append(("iam:AddRoleToInstanceProfile", added))
        passed = {"iam:PassedToService": "ec2.amazonaws.com"}
        calls.append(("ec2:RunInstances", [Request("iam:PassRole", (role,), passed)]))
    return [(operation, checked(operation, requests)) for operation, requests in calls]


def _random() -> str:
    return uuid.uuid4().hex[:12].upper()


def status_reason(principal: Principal, denial: Decision) -> str:
    """CloudFormation's status reason for the resource whose creation `denial` refused."""
    why = (
        "with an explicit deny in an identity-based policy"
        if denial.reason.startswith("explicit deny")
        else f"because no identity-based policy allows the {denial.action} action"
    )
    denied = f"User: {principal.arn} is not authorized to perform: {denial.action} on resource: {denial.resource} {why}"
    if denial.action == "iam:PassRole":
        # EC2 refuses the launch (the instance's or launch template's resource fails with it).
        return f"API: iam:PassRole {denied}"
    return (
        f'Resource handler returned message: "{denied} (Service: Iam, Status Code: 403, Request ID: {uuid.uuid4()})" '
        f"(RequestToken: {uuid.uuid4()}, HandlerErrorCode: AccessDenied)"
    )


class ClusterStackIam:
    """Authorizes a cluster stack's IAM resources as the ParallelCluster API's role
    (`principal_name` among the enforcer's principals); the local API asks it on each create."""

    def __init__(self, enforcer: Enforcer, principal_name: str, account: str):
        self._enforcer = enforcer
        self._principal_name = principal_name
        self._account = account

    def refusal(self, cluster_name: str, region: str, config: Mapping[str, Any]) -> dict[str, str] | None:
        """describeCluster's failure if the stack's creation is refused (None when allowed)."""
        principal = self._enforcer.principals.named(self._principal_name)
        if principal is None:
            raise RuntimeError(f"no principal {self._principal_name} to create cluster stacks as")
        for operation, requests in stack_requests(config, cluster_name, account=self._account, region=region):
            denial = self._enforcer.decide(principal, operation, region, requests)
            if denial is not None:
                _log.warning(
                    "cluster %s: its stack's creation failed: %s", cluster_name, status_reason(principal, denial)
                )
                return dict(CREATION_FAILURE)
        return None
