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
looks for a failed wait condition only; the detail stays in the stack's events, which
getClusterStackEvents answers: `StackCreation.events`). The head node's resources are the main
stack's (RoleHeadNode, ParallelClusterPoliciesHeadNode, InstanceProfileHeadNode, HeadNode); a
queue's are in the Queues nested stack, whose failure the main stack's events show as the nested
stack's, naming the queue's resource that failed.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainrun.local.iam.cluster_roles import managed_policy_arns, partition, principal_tags
from trainrun.local.iam.enforcement import Enforcer
from trainrun.local.iam.operations import checked
from trainrun.local.iam.policy import Decision, Request, Resource
from trainrun.local.iam.principals import Principal
from trainrun.local.stack_events import ResourceEvent, StackResource

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


def _cdk_logical_id(path: list[str]) -> str:
    """The logical id CDK 1 gives a resource nested in constructs (aws-cdk core makeUniqueId): the
    path's parts, alphanumerics only, then the first 8 hex digits of the path's MD5, uppercased."""
    digest = hashlib.md5("/".join(path).encode(), usedforsecurity=False).hexdigest()[:8].upper()
    return "".join(filter(str.isalnum, "".join(path))) + digest


# The queues' nested stack as the main stack names it (pcluster.templates.compute_fleet_stack:
# QueuesStack "Queues" in the "ComputeFleet" construct; CDK's NestedStack puts its resource there).
QUEUES_STACK = _cdk_logical_id(["ComputeFleet", "Queues.NestedStack", "Queues.NestedStackResource"])


@dataclass(frozen=True)
class StackCall:
    """What CloudFormation asks IAM (`operation`, its `requests`) to create `resource` of the stack;
    `nested` when the resource is in the Queues nested stack."""

    resource: StackResource
    operation: str
    requests: list[Request]
    nested: bool = False


@dataclass(frozen=True)
class StackCreation:
    """The stack's IAM part created: its events in the main stack, and describeCluster's failure if
    it was refused (None when created)."""

    events: list[ResourceEvent] = field(default_factory=list)
    failure: dict[str, str] | None = None


def _nodes(config: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    queues = config.get("Scheduling", {}).get("SlurmQueues", [])
    return [("HeadNode", config.get("HeadNode", {})), *((str(q["Name"]), q) for q in queues)]


def stack_requests(config: Mapping[str, Any], cluster_name: str, *, account: str, region: str) -> list[StackCall]:
    """What the cluster's stack asks IAM, in order, each call with the resource it creates."""
    iam_arn = f"arn:{partition(region)}:iam::{account}"
    path = f"{ROLE_PATH}{cluster_name}/"
    tags = principal_tags(config, cluster_name)
    calls: list[StackCall] = []
    for node_name, node in _nodes(config):
        iam = node.get("Iam", {})
        if iam.get("InstanceProfile"):
            continue
        suffix = _suffix(node_name)
        node_calls: list[tuple[StackResource, str, list[Request]]] = []
        profile_name = f"{cluster_name}-InstanceProfile{suffix}-{_random()}"
        profile = Resource(f"{iam_arn}:instance-profile{path}{profile_name}")
        if iam.get("InstanceRole"):
            role = Resource(str(iam["InstanceRole"]))
        else:
            # CloudFormation names a role that has no RoleName: <stack>-<logical id>-<random>.
            role_name = f"{cluster_name}-Role{suffix}-{_random()}"
            role = Resource(f"{iam_arn}:role{path}{role_name}", tags=tags)
            created = Resource(role.arn, request_tags=tags)
            role_resource = StackResource(f"Role{suffix}", "AWS::IAM::Role", role_name)
            node_calls.append(
                (
                    role_resource,
                    "iam:CreateRole",
                    [Request("iam:CreateRole", (created,)), Request("iam:TagRole", (created,))],
                )
            )
            node_calls += [
                (
                    role_resource,
                    "iam:AttachRolePolicy",
                    [Request("iam:AttachRolePolicy", (role,), {"iam:PolicyARN": arn})],
                )
                for arn in managed_policy_arns(config, node, region)
            ]
            # One PutRolePolicy per inline policy: "parallelcluster", and "S3Access" with S3Access.
            inline = ["ParallelClusterPolicies"] + (["S3AccessPolicies"] if iam.get("S3Access") else [])
            node_calls += [
                (
                    # CloudFormation's name for a policy: parts of the stack's and of the logical id.
                    StackResource(
                        f"{policy}{suffix}", "AWS::IAM::Policy", f"{cluster_name[:5]}-{policy[:5]}-{_random()}"
                    ),
                    "iam:PutRolePolicy",
                    [Request("iam:PutRolePolicy", (role,))],
                )
                for policy in inline
            ]
        profile_resource = StackResource(f"InstanceProfile{suffix}", "AWS::IAM::InstanceProfile", profile_name)
        node_calls.append(
            (profile_resource, "iam:CreateInstanceProfile", [Request("iam:CreateInstanceProfile", (profile,))])
        )
        # The Service Authorization Reference lists iam:PassRole on the role as its dependent action.
        added = [Request("iam:AddRoleToInstanceProfile", (profile,)), Request("iam:PassRole", (role,))]
        node_calls.append((profile_resource, "iam:AddRoleToInstanceProfile", added))
        # The head node is the stack's instance; a queue's nodes launch from its launch templates
        # (pcluster.templates.queues_stack: LaunchTemplate<hash of the queue's and the compute resource's names>).
        compute_resource = (node.get("ComputeResources") or [{}])[0].get("Name", "")
        launched = (
            StackResource("HeadNode", "AWS::EC2::Instance")
            if node_name == "HeadNode"
            else StackResource(
                f"LaunchTemplate{_suffix(node_name + str(compute_resource))}", "AWS::EC2::LaunchTemplate"
            )
        )
        passed = [Request("iam:PassRole", (role,), {"iam:PassedToService": "ec2.amazonaws.com"})]
        node_calls.append((launched, "ec2:RunInstances", passed))
        calls += [
            StackCall(resource, operation, checked(operation, requests), nested=node_name != "HeadNode")
            for resource, operation, requests in node_calls
        ]
    return calls


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

    def create(self, cluster_name: str, region: str, config: Mapping[str, Any], stack_arn: str) -> StackCreation:
        """The stack's IAM resources, created as the API's role until the first denial."""
        principal = self._enforcer.principals.named(self._principal_name)
        if principal is None:
            raise RuntimeError(f"no principal {self._principal_name} to create cluster stacks as")
        calls = stack_requests(config, cluster_name, account=self._account, region=region)
        queues = bool(config.get("Scheduling", {}).get("SlurmQueues"))
        events = _MainStackEvents(cluster_name, stack_arn, queues=queues)
        for index, call in enumerate(calls):
            denial = self._enforcer.decide(principal, call.operation, region, call.requests)
            if denial is not None:
                reason = status_reason(principal, denial)
                _log.warning(
                    "cluster %s: its stack's creation failed: %s: %s", cluster_name, call.resource.logical_id, reason
                )
                events.failed(call, reason)
                return StackCreation(events.events, dict(CREATION_FAILURE))
            events.called(call, last=index + 1 == len(calls) or calls[index + 1].resource != call.resource)
        events.done()
        return StackCreation(events.events)


class _MainStackEvents:
    """The main stack's events of the calls as they are made: each resource in progress at its first
    call and complete after its last; the queues' resources as the one nested stack, started with
    the stack (nothing of the head node's is needed before it)."""

    def __init__(self, cluster_name: str, stack_arn: str, *, queues: bool):
        self.events: list[ResourceEvent] = []
        self._queues: StackResource | None = None
        self._started: set[StackResource] = set()
        if queues:
            # CloudFormation names a nested stack <stack>-<logical id>-<random>.
            name = f"{cluster_name}-{QUEUES_STACK}-{_random()}"
            self._queues = StackResource(
                QUEUES_STACK, "AWS::CloudFormation::Stack", f"{stack_arn.rsplit('/', 2)[0]}/{name}/{uuid.uuid4()}"
            )
            self.events.append(ResourceEvent(self._queues, "CREATE_IN_PROGRESS"))

    def called(self, call: StackCall, *, last: bool) -> None:
        if call.nested:
            return
        if call.resource not in self._started:
            self._started.add(call.resource)
            self.events.append(ResourceEvent(call.resource, "CREATE_IN_PROGRESS"))
        if last:
            self.events.append(ResourceEvent(call.resource, "CREATE_COMPLETE"))

    def failed(self, call: StackCall, reason: str) -> None:
        if call.nested and self._queues is not None:
            embedded = (
                f"Embedded stack {self._queues.physical_id} was not successfully created: "
                f"The following resource(s) failed to create: [{call.resource.logical_id}]. "
            )
            self.events.append(ResourceEvent(self._queues, "CREATE_FAILED", embedded))
            return
        if call.resource not in self._started:
            self.events.append(ResourceEvent(call.resource, "CREATE_IN_PROGRESS"))
        self.events.append(ResourceEvent(call.resource, "CREATE_FAILED", reason))
        if self._queues is not None:
            # Still being created when the stack's creation failed.
            self.events.append(ResourceEvent(self._queues, "CREATE_FAILED", "Resource creation cancelled"))

    def done(self) -> None:
        if self._queues is not None:
            self.events.append(ResourceEvent(self._queues, "CREATE_COMPLETE"))
