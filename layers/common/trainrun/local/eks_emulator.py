"""Amazon EKS as trainrun's `cluster.kind: eks` meets it, for moto, in process: at least as strict as EKS.

Written against moto 5.2.5 (pinned in requirements-local.txt). Moto's EKS accepts what EKS refuses,
so a local run would pass where a real one fails: clusters and node groups are ACTIVE at once;
the default Kubernetes version is 1.19; subnets, security groups and roles that do not exist are
taken; `accessConfig` is dropped; a CAPACITY_BLOCK node group needs no launch template; a node
group defaults to AL2 and t3.medium whatever its launch template says; DeleteCluster and
DeleteNodegroup forget at once; and add-ons and access entries answer "Not yet implemented" (a
404: moto routes no URL to them). `install()` patches moto's classes in this process, so it serves
both `moto.mock_aws` (tests) and the `ThreadedMotoServer` the local runtime starts in the same
process. Call it before the server answers its first EKS request: the server builds a service's
URL map from `moto.eks.urls.url_paths` on that service's first request (`mock_aws` reads the dict
on every request).

EKS speaks REST-JSON: an action is a method and a URI. moto reaches `EKSResponse.dispatch` only for
the paths in `url_paths`; dispatch then finds the action from botocore's model (method and URI,
`BaseResponse._get_action`) and calls the `EKSResponse` method named after it, snake_cased. So a
new action is a method on `EKSResponse` plus a route to dispatch.

Patches (each one's reason is next to it below):
1. `EKSResponse.create_cluster` - replaced: refuses what CreateCluster refuses (rules below), keeps
   `accessConfig`, fills in the VPC and the cluster security group EKS creates, and starts CREATING.
2. `EKSBackend.describe_cluster` / `list_clusters` - wrapped: advance the lifecycle; a cluster whose
   deletion settled is gone (ResourceNotFoundException).
3. `EKSBackend.delete_cluster` - replaced: refused while node groups or Fargate profiles exist
   (moto forgets the DELETING ones at once, so it would not); DELETING, then gone.
4. `EKSBackend.create_nodegroup` - wrapped: refuses what CreateNodegroup refuses (rules below);
   the node group's version, AMI type and instance types are what EKS would answer, not moto's
   1.19/AL2/t3.medium defaults; CREATING, then ACTIVE or CREATE_FAILED.
5. `EKSBackend.describe_nodegroup` / `list_nodegroups` / `delete_nodegroup` - the node group
   lifecycle: DELETING, then gone. `update_nodegroup_config` - wrapped: the scaling rule below holds
   for the merged scaling config too.
6. `EKSResponse.create_access_entry`, `describe_access_entry`, `list_access_entries`,
   `delete_access_entry`, `associate_access_policy`, `list_associated_access_policies`,
   `disassociate_access_policy`, `list_access_policies` - new actions.
7. `EKSResponse.create_addon`, `describe_addon`, `list_addons`, `delete_addon`,
   `describe_addon_versions` - new actions.
8. `moto.eks.urls.url_paths` - the routes for (6) and (7).

Rules (the error codes are EKS's; the messages are ours unless a source gives EKS's own words):
- CreateCluster: a Kubernetes version in trainrun.logic.eks_versions (none: its pinned default);
  a role that exists in IAM and trusts eks.amazonaws.com; subnets that exist, in one VPC, in at
  least two Availability Zones, none in a zone EKS disallows; at most five security groups, each
  existing, in that VPC; an authenticationMode of the API's enum, CONFIG_MAP when none is given
  ("If you create a cluster by using the EKS API, AWS SDKs, or CloudFormation, the default is
  CONFIG_MAP": Amazon EKS API Reference, CreateAccessConfigRequest);
  bootstrapClusterCreatorAdminPermissions true unless false: the caller gets a cluster admin
  access entry when the mode includes the API and moto's IAM knows the caller. Sources: Amazon EKS
  User Guide, "View Amazon EKS networking requirements for VPC and subnets" ("at least two subnets
  that are in different Availability Zones"; the disallowed zone IDs); Amazon EKS API Reference,
  CreateCluster ("You can specify up to five security groups").
- DeleteCluster: ResourceInUseException while node groups or Fargate profiles remain (Amazon EKS API
  Reference, DeleteCluster: "you must delete them first").
- CreateNodegroup: a cluster that is ACTIVE (moto's own check, now that clusters start CREATING);
  the cluster's Kubernetes version ("equal to the current Kubernetes version for the cluster":
  API Reference, CreateNodegroup); a node role that exists and trusts ec2.amazonaws.com; subnets
  that exist, in the cluster's VPC; amiType and capacityType of the API's enums, and no AL2 AMI type
  from Kubernetes 1.33 on ("Kubernetes version 1.32 is the last version for which Amazon EKS will
  release AL2 AMIs": Amazon EKS User Guide, "Create nodes with optimized Amazon Linux AMIs");
  minSize <= desiredSize <= maxSize; a launch template given by id or by name, not both, that exists
  in EC2 at the version asked for; none of the launch template settings managed node groups
  prohibit: a subnet in a network interface, an IAM instance profile, the shutdown behaviour,
  hibernation (User Guide, "Customize managed nodes with launch templates") and a Spot request
  (API Reference, LaunchTemplateSpecification: "can't include SubnetId, IamInstanceProfile,
  RequestSpotInstances, HibernationOptions, or TerminateInstances"); not both instance-level and
  network-interface security groups (same User Guide page); instanceTypes not both in the request
  and the launch template, and no amiType with a launch template's custom AMI (API Reference,
  CreateNodegroup); CAPACITY_BLOCK with a launch template whose data has InstanceMarketOptions
  MarketType capacity-block, a CapacityReservationTarget CapacityReservationId and an InstanceType,
  and such a launch template only with CAPACITY_BLOCK ("the create request will be rejected": User
  Guide, "Create a managed node group with Capacity Blocks for ML"). moto itself refuses diskSize
  and remoteAccess with a launch template.
- A node group whose launch template targets a capacity reservation (trainrun.local.capacity_emulator's,
  in an account it seeded) settles CREATE_FAILED, `health.issues` code AsgInstanceLaunchFailures,
  when no node subnet is in the reservation's Availability Zone, the reservation is unknown, of
  another instance type, or active with fewer instances available than desiredSize (EC2's
  ReservationCapacityExceeded). A Capacity Block that has not started yet does not fail it: "if the
  create request is made before the capacity reservation is active, then the ASG won't be able to
  launch Amazon EC2 instances until it becomes active" (User Guide, Capacity Blocks page above), and
  EKS does not check that Capacity Block nodes join.
- Access entries: refused while the cluster's authenticationMode is CONFIG_MAP; the principal an
  IAM role or user that exists, not a service-linked role, in no other entry (ResourceInUseException);
  a type of STANDARD, EC2_LINUX, EC2_WINDOWS, FARGATE_LINUX, HYBRID_LINUX, EC2, HYPERPOD_LINUX
  (STANDARD when none); other types only for a role of the cluster's account, without groups,
  username or access policies; no username starting system:, eks:, aws:, amazon: or iam:. Access
  policies: one of EKS's predefined ones (`ACCESS_POLICIES`), not one designated for service-linked
  roles only; accessScope cluster (no namespaces) or namespace (namespaces required). Sources: Amazon
  EKS User Guide, "Grant IAM users access to Kubernetes with EKS access entries" and "Review access
  policy permissions"; API Reference, CreateAccessEntry and AccessScope.
- Add-ons: a name from `ADDONS` (EKS's own are many more: the others are refused, as EKS refuses a
  name DescribeAddonVersions does not list), a version DescribeAddonVersions lists, an ACTIVE
  cluster, one add-on of a name, roles that exist. An add-on whose pods are a Deployment (coredns,
  the FSx CSI driver's controller, the CloudWatch agent operator) settles DEGRADED with
  `health.issues` InsufficientNumberOfReplicas ("The add-on is unhealthy because it doesn't have
  the desired number of replicas", as EKS reports it: aws/containers-roadmap issue #2328,
  terraform-aws-modules/terraform-aws-eks issue #3001, eksctl issue #4607) while the cluster has no
  node group last described ACTIVE with nodes its pods can run on (desiredSize > 0, no NO_SCHEDULE
  or NO_EXECUTE taint, unless its configurationValues name tolerations), and becomes
  ACTIVE on its first look after one has. DaemonSet-only add-ons (vpc-cni, kube-proxy,
  eks-pod-identity-agent) are ACTIVE without nodes.

Lifecycle: a created resource (cluster, node group, add-on) is CREATING and settles on the look
that sees it the `DESCRIBES_UNTIL_SETTLED`th time, or on the first look `SECONDS_UNTIL_SETTLED`
seconds after it was created (None: never by time alone); a deleted one is DELETING and is gone by
the same rule. A look is a Describe or a List that names the resource. Both are module settings the
local runtime lowers to make a run quick; `reset()` leaves them. The default (the 2nd look) makes a
test see CREATING once, as a waiting loop does on AWS. On the AWS clock (trainrun.local.clock,
`trainrun local --aws-clock`) neither rule applies: a resource settles once its duration in
trainrun.logic.aws_clock (EKS_*) has passed on the compressed clock, however often it is looked at.

What this stand-in does NOT check (EKS does, or may):
- clientRequestToken idempotency; tags on add-ons and access entries beyond returning them
  (TagResource still tags clusters only, as in moto).
- UpdateClusterConfig's accessConfig (moto ignores it: a mode change is not emulated), UpdateAddon,
  UpdateAccessEntry, UpdateNodegroupVersion, Pod Identity associations (moto still answers "Not
  yet implemented"), Fargate profiles beyond moto's; UpdateNodegroupConfig beyond its scaling
  config (moto's, in any node group state; a new desiredSize is not checked against a reservation).
- Subnet free IP addresses, the VPC's DNS attributes, the cluster role's attached policies (only its
  trust), instance types offered in the subnets' zones, the AMI of a launch template's ImageId.
- Whether the cluster may be deleted while CREATING, or a node group while CREATING.
- Add-on versions: `ADDONS` gives one stand-in version per add-on (EKS's own version strings
  change weekly), compatible with every supported Kubernetes version; configurationValues are
  kept, not checked against DescribeAddonConfiguration's schema.
- An add-on's health after it is ACTIVE beyond the node rule above; a node group's health once ACTIVE.
- Node group scaling activity: no EC2 instances are launched; a Capacity Block node group created
  before its block starts reports no launch errors.

Kubernetes: with `kubernetes` set (the local runtime sets it: trainrun.local.kube_cluster.LocalKubernetes),
each cluster has a Kubernetes API server on this machine, started in this process (it checks tokens
against moto's STS and IAM here) on the first look that sees the cluster ACTIVE: from then on
DescribeCluster answers its `endpoint` (http://127.0.0.1:<port>; EKS's is HTTPS) and a
`certificateAuthority` of the server's own (a self-signed certificate it does not serve: the
server speaks plain HTTP). Its authorizer reads the cluster's access entries here
(`access_policies`). A node group's nodes register when it becomes ACTIVE and go when its deletion
starts; the server stops, and every pod's processes end, when the cluster is gone.

What the emulator adds lives on moto's EKS backend object, so moto's own reset (the end of a
`mock_aws`) discards it with the clusters; `reset()` discards it without touching moto's data.
"""

from __future__ import annotations

import base64
import functools
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import unquote

import botocore.session
import moto
from moto.core.responses import ActionResult, EmptyResult
from moto.core.utils import utcnow
from moto.ec2.exceptions import InvalidSubnetIdError
from moto.ec2.models import ec2_backends
from moto.eks import urls as eks_urls
from moto.eks.exceptions import (
    EKSError,
    InvalidParameterException,
    InvalidRequestException,
    ResourceInUseException,
    ResourceNotFoundException,
)
from moto.eks.models import (
    CLUSTER_IN_USE_MSG,
    CLUSTER_NOT_FOUND_MSG,
    CLUSTER_NOT_READY_MSG,
    Cluster,
    EKSBackend,
    Nodegroup,
    eks_backends,
)
from moto.eks.responses import EKSResponse
from moto.iam.models import iam_backends
from moto.sts.models import sts_backends

from trainrun.adapters.network import EKS_DISALLOWED_ZONE_IDS
from trainrun.local import capacity_emulator, clock
from trainrun.logic import aws_clock, eks_versions
from trainrun.logic.aws_clock import Duration

if TYPE_CHECKING:
    from trainrun.local.kube_cluster import NodeGroupNodes

MOTO_VERSION = "5.2.5"

# How soon a CREATING or DELETING resource settles (see the module docstring).
DESCRIBES_UNTIL_SETTLED = 2
SECONDS_UNTIL_SETTLED: float | None = None

CREATING, ACTIVE, DELETING = "CREATING", "ACTIVE", "DELETING"
CREATE_FAILED, DEGRADED = "CREATE_FAILED", "DEGRADED"
CONFIG_MAP = "CONFIG_MAP"
STANDARD = "STANDARD"
ACCESS_ENTRY_TYPES = ("STANDARD", "EC2_LINUX", "EC2_WINDOWS", "FARGATE_LINUX", "HYBRID_LINUX", "EC2", "HYPERPOD_LINUX")
# "It can't start with system:, eks:, aws:, amazon:, or iam:" (User Guide, access entries).
RESERVED_USERNAME_PREFIXES = ("system:", "eks:", "aws:", "amazon:", "iam:")
# "You can specify up to five security groups" (API Reference, CreateCluster, resourcesVpcConfig).
MAX_CLUSTER_SECURITY_GROUPS = 5
# Availability Zone IDs no cluster subnet may be in: trainrun.adapters.network's table, with its source.
DISALLOWED_ZONE_IDS = EKS_DISALLOWED_ZONE_IDS
# EKS optimized AL2 AMIs stop at Kubernetes 1.32 (User Guide, "Create nodes with optimized Amazon
# Linux AMIs").
LAST_AL2_KUBERNETES_VERSION = (1, 32)
# Launch template data managed node groups refuse, by the field's place in LaunchTemplateData.
PROHIBITED_LAUNCH_TEMPLATE_FIELDS = {
    "IamInstanceProfile": "IAM instance profile (the node group's nodeRole gives the nodes their role)",
    "InstanceInitiatedShutdownBehavior": "shutdown behavior (EKS must control the instance lifecycle)",
    "HibernationOptions": "Stop - Hibernate behavior (EKS must control the instance lifecycle)",
    "NetworkInterfaces.SubnetId": "subnet in a network interface (use the node group's subnets)",
    "InstanceMarketOptions.MarketType=spot": "Spot request (use capacityType SPOT)",
}
CAPACITY_BLOCK_MARKET = "capacity-block"

ACCESS_POLICY_ARN = "arn:aws:eks::aws:cluster-access-policy/{}"
# EKS's predefined access policies (User Guide, "Review access policy permissions", as of its
# November 6, 2025 update), and those "designated for AWS service-linked roles only".
ACCESS_POLICIES = (
    "AmazonAIOpsAssistantPolicy",
    "AmazonARCRegionSwitchScalingPolicy",
    "AmazonEKSAdminPolicy",
    "AmazonEKSAdminViewPolicy",
    "AmazonEKSAutoNodePolicy",
    "AmazonEKSBlockStorageClusterPolicy",
    "AmazonEKSBlockStoragePolicy",
    "AmazonEKSClusterAdminPolicy",
    "AmazonEKSClusterInsightsPolicy",
    "AmazonEKSComputeClusterPolicy",
    "AmazonEKSComputePolicy",
    "AmazonEKSEditPolicy",
    "AmazonEKSHybridPolicy",
    "AmazonEKSLoadBalancingClusterPolicy",
    "AmazonEKSLoadBalancingPolicy",
    "AmazonEKSNetworkingClusterPolicy",
    "AmazonEKSNetworkingPolicy",
    "AmazonEKSSecretReaderPolicy",
    "AmazonEKSViewPolicy",
)
SERVICE_LINKED_ONLY_POLICIES = frozenset(
    {
        "AmazonEKSBlockStorageClusterPolicy",
        "AmazonEKSBlockStoragePolicy",
        "AmazonEKSClusterInsightsPolicy",
        "AmazonEKSComputeClusterPolicy",
        "AmazonEKSComputePolicy",
        "AmazonEKSHybridPolicy",
    }
)
CLUSTER_ADMIN_POLICY = ACCESS_POLICY_ARN.format("AmazonEKSClusterAdminPolicy")


@dataclass(frozen=True)
class AddonInfo:
    """An EKS add-on as DescribeAddonVersions lists it; `needs_nodes`: its pods include a Deployment."""

    type: str
    namespace: str
    version: str
    needs_nodes: bool
    requires_iam: bool


# The add-ons trainrun's eks cluster uses. The versions are stand-ins in EKS's vX.Y.Z-eksbuild.N form,
# not EKS's current releases (see the module docstring); types and namespaces as DescribeAddonVersions
# gives them.
ADDONS: dict[str, AddonInfo] = {
    "vpc-cni": AddonInfo("networking", "kube-system", "v1.20.4-eksbuild.1", needs_nodes=False, requires_iam=True),
    "kube-proxy": AddonInfo("networking", "kube-system", "v1.35.0-eksbuild.1", needs_nodes=False, requires_iam=False),
    "coredns": AddonInfo("networking", "kube-system", "v1.12.3-eksbuild.1", needs_nodes=True, requires_iam=False),
    "eks-pod-identity-agent": AddonInfo(
        "security", "kube-system", "v1.3.9-eksbuild.1", needs_nodes=False, requires_iam=False
    ),
    "aws-fsx-csi-driver": AddonInfo("storage", "kube-system", "v1.7.0-eksbuild.1", needs_nodes=True, requires_iam=True),
    "amazon-cloudwatch-observability": AddonInfo(
        "observability", "amazon-cloudwatch", "v4.5.0-eksbuild.1", needs_nodes=True, requires_iam=True
    ),
}
INSUFFICIENT_REPLICAS = "The add-on is unhealthy because it doesn't have the desired number of replicas."

# The new actions' routes; each reaches EKSResponse.dispatch, which finds the action from the model.
ROUTES = (
    "{0}/clusters/(?P<name>[^/]+)/access-entries$",
    "{0}/clusters/(?P<name>[^/]+)/access-entries/(?P<principalArn>.+)$",
    "{0}/clusters/(?P<name>[^/]+)/addons$",
    "{0}/clusters/(?P<name>[^/]+)/addons/(?P<addonName>[^/]+)$",
    "{0}/addons/supported-versions$",
    "{0}/access-policies$",
)


class Kubernetes(Protocol):
    """The clusters' Kubernetes on this machine (trainrun.local.kube_cluster.LocalKubernetes)."""

    def cluster_active(self, cluster_name: str) -> tuple[str, str]:
        """The endpoint and certificate authority data of the cluster's API server (started once)."""

    def nodegroup_active(self, nodes: NodeGroupNodes) -> None: ...

    def nodegroup_deleting(self, cluster_name: str, nodegroup_name: str) -> None: ...

    def cluster_deleted(self, cluster_name: str) -> None: ...


# Set by the local runtime while it runs (see the module docstring, Kubernetes); None: no Kubernetes.
kubernetes: Kubernetes | None = None

_STATE_ATTR = "_trainrun_eks_emulator"
_lock = threading.RLock()
_installed = False
_originals: dict[str, Callable[..., Any]] = {}


def install() -> None:
    """Patch moto (once per process; later calls do nothing)."""
    global _installed
    with _lock:
        if _installed:
            return
        if moto.__version__ != MOTO_VERSION:
            raise RuntimeError(
                f"trainrun's EKS emulator patches moto {MOTO_VERSION} internals, but moto {moto.__version__} "
                "is installed: check the patches in trainrun/local/eks_emulator.py against it, then update MOTO_VERSION"
            )
        for name in (
            "create_nodegroup",
            "describe_cluster",
            "list_clusters",
            "describe_nodegroup",
            "list_nodegroups",
            "update_nodegroup_config",
        ):
            _originals[name] = getattr(EKSBackend, name)
        EKSResponse.create_cluster = _create_cluster  # type: ignore[method-assign]
        EKSBackend.describe_cluster = _describe_cluster  # type: ignore[method-assign]
        EKSBackend.list_clusters = _list_clusters  # type: ignore[method-assign]
        EKSBackend.delete_cluster = _delete_cluster  # type: ignore[method-assign]
        EKSBackend.create_nodegroup = _create_nodegroup  # type: ignore[method-assign,assignment]
        EKSBackend.describe_nodegroup = _describe_nodegroup  # type: ignore[method-assign]
        EKSBackend.list_nodegroups = _list_nodegroups  # type: ignore[method-assign]
        EKSBackend.delete_nodegroup = _delete_nodegroup  # type: ignore[method-assign]
        EKSBackend.update_nodegroup_config = _update_nodegroup_config  # type: ignore[method-assign,assignment]
        for action in _NEW_ACTIONS:
            setattr(EKSResponse, action.__name__.lstrip("_"), action)
        for route in ROUTES:
            eks_urls.url_paths.setdefault(route, EKSResponse.dispatch)
        _installed = True


def original(name: str) -> Callable[..., Any]:
    """moto's own EKSBackend method the emulator wrapped (`create_nodegroup`, `describe_cluster`, ...)."""
    return _originals[name]


def reset() -> None:
    """Forget what the emulator added (lifecycles, access entries, add-ons) in every EKS backend.

    moto's clusters and node groups stay, as ACTIVE; the settings above are left as they are.
    """
    with _lock:
        for account_backends in eks_backends.values():
            for backend in account_backends.values():
                if backend.__dict__.pop(_STATE_ATTR, None) is None:
                    continue
                for cluster in backend.clusters.values():
                    cluster.status = ACTIVE
                    for nodegroup in cluster.nodegroups.values():
                        nodegroup.status = ACTIVE


# --- the emulated state --------------------------------------------------------------------------


@dataclass
class _Lifecycle:
    state: str
    # On the AWS clock: the real seconds this state lasts (trainrun.local.clock); None: the rule above.
    lasts: float | None = None
    entered: float = field(default_factory=time.monotonic)
    looks: int = 0

    def enter(self, state: str, lasts: float | None = None) -> None:
        self.state, self.lasts, self.entered, self.looks = state, lasts, time.monotonic(), 0

    def due(self) -> bool:
        """One look at a CREATING or DELETING resource: whether it has been seen enough, or long enough, to settle."""
        self.looks += 1
        waited = time.monotonic() - self.entered
        if self.lasts is not None:
            return waited >= self.lasts
        return self.looks >= DESCRIBES_UNTIL_SETTLED or (
            SECONDS_UNTIL_SETTLED is not None and waited >= SECONDS_UNTIL_SETTLED
        )


def _lasting(state: str, duration: Duration) -> _Lifecycle:
    return _Lifecycle(state, lasts=clock.real_seconds(duration))


@dataclass
class _AssociatedPolicy:
    policy_arn: str
    scope: dict[str, Any]
    associated_at: datetime
    modified_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "policyArn": self.policy_arn,
            "accessScope": self.scope,
            "associatedAt": self.associated_at,
            "modifiedAt": self.modified_at,
        }


@dataclass
class _AccessEntry:
    cluster_name: str
    principal_arn: str
    arn: str
    type: str
    username: str
    groups: list[str]
    tags: dict[str, str]
    created_at: datetime = field(default_factory=utcnow)
    policies: dict[str, _AssociatedPolicy] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "clusterName": self.cluster_name,
            "principalArn": self.principal_arn,
            "kubernetesGroups": self.groups,
            "accessEntryArn": self.arn,
            "createdAt": self.created_at,
            "modifiedAt": self.created_at,
            "tags": self.tags,
            "username": self.username,
            "type": self.type,
        }


@dataclass
class _Addon:
    name: str
    cluster_name: str
    arn: str
    version: str
    lifecycle: _Lifecycle
    params: dict[str, Any]
    created_at: datetime = field(default_factory=utcnow)
    issues: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            "addonName": self.name,
            "clusterName": self.cluster_name,
            "status": self.lifecycle.state,
            "addonVersion": self.version,
            "health": {"issues": self.issues},
            "addonArn": self.arn,
            "createdAt": self.created_at,
            "modifiedAt": self.created_at,
            "tags": self.params.get("tags") or {},
            "publisher": "eks",
            "owner": "aws",
        }
        for key in ("serviceAccountRoleArn", "configurationValues", "namespaceConfig"):
            if self.params.get(key):
                described[key] = self.params[key]
        return described


@dataclass
class _ClusterExtras:
    lifecycle: _Lifecycle
    vpc_id: str | None
    security_group_id: str | None
    authentication_mode: str
    access_entries: dict[str, _AccessEntry] = field(default_factory=dict)
    addons: dict[str, _Addon] = field(default_factory=dict)


@dataclass
class _NodegroupExtras:
    lifecycle: _Lifecycle
    zones: set[str]
    # The launch template data the node group launches with (None: no launch template).
    template: dict[str, Any] | None


@dataclass
class _Emulated:
    clusters: dict[str, _ClusterExtras] = field(default_factory=dict)
    nodegroups: dict[tuple[str, str], _NodegroupExtras] = field(default_factory=dict)


def _state(backend: EKSBackend) -> _Emulated:
    state: _Emulated | None = backend.__dict__.get(_STATE_ATTR)
    if state is None:
        state = _Emulated()
        setattr(backend, _STATE_ATTR, state)
    return state


def _cluster_extras(backend: EKSBackend, cluster: Cluster) -> _ClusterExtras:
    """The emulated side of a cluster; one the emulator did not see created is ACTIVE, CONFIG_MAP."""
    clusters = _state(backend).clusters
    if cluster.name not in clusters:
        vpc_id = _vpc_of(backend, (cluster.resources_vpc_config or {}).get("subnetIds") or [])
        clusters[cluster.name] = _ClusterExtras(_Lifecycle(ACTIVE), vpc_id, None, CONFIG_MAP)
    return clusters[cluster.name]


def _nodegroup_extras(backend: EKSBackend, nodegroup: Nodegroup) -> _NodegroupExtras:
    key = (nodegroup.cluster_name, nodegroup.nodegroup_name)
    nodegroups = _state(backend).nodegroups
    if key not in nodegroups:
        nodegroups[key] = _NodegroupExtras(_Lifecycle(ACTIVE), set(), None)
    return nodegroups[key]


# --- errors and small helpers --------------------------------------------------------------------


class UnsupportedAvailabilityZoneException(EKSError):
    TYPE = "UnsupportedAvailabilityZoneException"
    STATUS = 400


def _invalid(message: str, **names: Any) -> InvalidParameterException:
    return InvalidParameterException(message=message, **names)


def _not_found(message: str, **names: Any) -> ResourceNotFoundException:
    return ResourceNotFoundException(message=message, **names)


def _ec2(backend: EKSBackend) -> Any:
    return ec2_backends[backend.account_id][backend.region_name]


def _vpc_of(backend: EKSBackend, subnet_ids: list[str]) -> str | None:
    try:
        return str(_ec2(backend).get_subnet(subnet_ids[0]).vpc_id) if subnet_ids else None
    except InvalidSubnetIdError:
        return None


@functools.cache
def _enum(shape: str) -> tuple[str, ...]:
    """An enum of the EKS API, as botocore's model of it has it."""
    model = botocore.session.get_session().get_service_model("eks")
    return tuple(model.shape_for(shape).enum)


def _iam_principal(arn: str) -> Any:
    """The IAM role or user an ARN names, in moto's IAM, or None."""
    parts = arn.split(":", 5)
    if len(parts) != 6 or parts[2] != "iam" or parts[4] not in iam_backends:
        return None
    iam = iam_backends[parts[4]]["global"]
    if parts[5].startswith("role/"):
        return next((role for role in iam.roles.values() if role.arn == arn), None)
    if parts[5].startswith("user/"):
        return next((user for user in iam.users.values() if user.arn == arn), None)
    return None


def _trusts(role: Any, service: str) -> bool:
    """Whether a role's trust policy lets `service` assume it."""
    document = role.assume_role_policy_document
    try:
        policy = json.loads(unquote(document)) if isinstance(document, str) else document
    except ValueError:
        return False
    statements = policy.get("Statement", [])
    for statement in statements if isinstance(statements, list) else [statements]:
        services = (statement.get("Principal") or {}).get("Service", []) if isinstance(statement, dict) else []
        if statement.get("Effect") == "Allow" and service in ([services] if isinstance(services, str) else services):
            return True
    return False


def _role_for(arn: str, service: str, what: str) -> None:
    """Refuse a role that does not exist, or does not trust `service` (EKS checks both)."""
    role = _iam_principal(arn) if ":role/" in arn else None
    if role is None:
        raise _invalid(
            f"Role with arn: {arn}, could not be assumed because it does not exist or the trusted entity is not correct"
        )
    if not _trusts(role, service):
        raise _invalid(
            f"Following required service principals [{service}] were not found in the trust relationships of "
            f"{what} {arn}"
        )


def _page(items: list[Any], params: dict[str, Any]) -> tuple[list[Any], str | None]:
    """A page of `items` and the nextToken of the next (maxResults 100 by default, as EKS's lists)."""
    token = params.get("nextToken")
    start = int(base64.b64decode(token).decode()) if token else 0
    end = start + int(params.get("maxResults") or 100)
    return items[start:end], base64.b64encode(str(end).encode()).decode() if end < len(items) else None


def _query(response: EKSResponse, name: str) -> list[str]:
    """A query string parameter's values (EKS's list parameters repeat the name)."""
    values: list[str] = response.querystring.get(name) or []
    return values


def _uri(response: EKSResponse, name: str) -> str:
    """A URI label's value, decoded: a principal or policy ARN arrives percent-encoded."""
    return unquote(str(response._get_param(name) or ""))


# --- patch 1: CreateCluster ----------------------------------------------------------------------


def _create_cluster(self: EKSResponse) -> ActionResult:
    backend = self.eks_backend
    name = self._get_param("name")
    vpc_config: dict[str, Any] = dict(self._get_param("resourcesVpcConfig") or {})
    access: dict[str, Any] = self._get_param("accessConfig") or {}
    version = self._get_param("version") or eks_versions.DEFAULT_KUBERNETES_VERSION
    with _lock:
        if name not in backend.clusters:
            _check_cluster_request(backend, name, version, self._get_param("roleArn") or "", vpc_config, access)
        cluster = backend.create_cluster(
            name=name,
            version=version,
            role_arn=self._get_param("roleArn"),
            resources_vpc_config=vpc_config,
            kubernetes_network_config=self._get_param("kubernetesNetworkConfig"),
            logging=self._get_param("logging"),
            client_request_token=self._get_param("clientRequestToken"),
            tags=self._get_param("tags"),
            encryption_config=self._get_param("encryptionConfig"),
            remote_network_config=self._get_param("remoteNetworkConfig"),
        )
        vpc_id = _vpc_of(backend, vpc_config.get("subnetIds") or [])
        group = _ec2(backend).create_security_group(
            name=f"eks-cluster-sg-{name}-{uuid.uuid4().hex[:10]}",
            description="EKS created security group applied to ENI that is attached to EKS Control Plane master "
            "nodes, as well as any managed workloads.",
            vpc_id=vpc_id,
            tags={"aws:eks:cluster-name": name, f"kubernetes.io/cluster/{name}": "owned"},
        )
        # What DescribeCluster answers beyond the request: the VPC, the cluster security group EKS
        # creates, and the endpoint defaults ("By default, public access is enabled, and private
        # access is disabled": API Reference, CreateCluster).
        vpc_config.setdefault("securityGroupIds", [])
        vpc_config.update(vpcId=vpc_id, clusterSecurityGroupId=group.id)
        vpc_config.setdefault("endpointPublicAccess", True)
        vpc_config.setdefault("endpointPrivateAccess", False)
        vpc_config.setdefault("publicAccessCidrs", ["0.0.0.0/0"])
        cluster.resources_vpc_config = vpc_config
        mode = access.get("authenticationMode") or CONFIG_MAP
        bootstrap = access.get("bootstrapClusterCreatorAdminPermissions", True) is not False
        # moto's serializer reads the attribute named after the member (accessConfig -> access_config).
        cluster.access_config = {  # type: ignore[attr-defined]
            "authenticationMode": mode,
            "bootstrapClusterCreatorAdminPermissions": bootstrap,
        }
        cluster.status = CREATING
        extras = _ClusterExtras(_lasting(CREATING, aws_clock.EKS_CLUSTER_ACTIVE), vpc_id, group.id, mode)
        _state(backend).clusters[name] = extras
        if bootstrap and mode != CONFIG_MAP:
            _bootstrap_admin(self, cluster, extras)
    return ActionResult({"cluster": cluster})


def _check_cluster_request(
    backend: EKSBackend, name: str, version: str, role_arn: str, vpc_config: dict[str, Any], access: dict[str, Any]
) -> None:
    """Refuse what CreateCluster refuses (module docstring, Rules)."""
    if version not in eks_versions.SUPPORTED_KUBERNETES_VERSIONS:
        raise _invalid(
            f"version {version} is not a Kubernetes version EKS creates clusters with: use one of "
            f"{', '.join(eks_versions.SUPPORTED_KUBERNETES_VERSIONS)}",
            clusterName=name,
        )
    mode = access.get("authenticationMode")
    if mode is not None and mode not in _enum("AuthenticationMode"):
        raise _invalid(f"accessConfig.authenticationMode {mode} is not one of {', '.join(_enum('AuthenticationMode'))}")
    _role_for(role_arn, "eks.amazonaws.com", "clusterRole")
    ec2 = _ec2(backend)
    subnets = []
    for subnet_id in vpc_config.get("subnetIds") or []:
        try:
            subnets.append(ec2.get_subnet(subnet_id))
        except InvalidSubnetIdError:
            raise _invalid(f"resourcesVpcConfig.subnetIds: the subnet ID '{subnet_id}' does not exist") from None
    vpcs = {subnet.vpc_id for subnet in subnets}
    if len(vpcs) > 1:
        raise _invalid(f"resourcesVpcConfig.subnetIds: subnets are in different VPCs ({', '.join(sorted(vpcs))})")
    if len({subnet.availability_zone for subnet in subnets}) < 2:
        raise _invalid("resourcesVpcConfig.subnetIds: subnets specified must be in at least two different AZs")
    for subnet in subnets:
        if subnet.availability_zone_id in DISALLOWED_ZONE_IDS:
            valid = [z.name for z in ec2.describe_availability_zones() if z.zone_id not in DISALLOWED_ZONE_IDS]
            raise UnsupportedAvailabilityZoneException(
                message=f"Cannot create cluster '{name}' because {subnet.availability_zone}, the targeted "
                "availability zone, does not currently have sufficient capacity to support the cluster. Retry "
                f"and choose from these availability zones: {', '.join(valid)}",
                clusterName=name,
                validZones=valid,
            )
    group_ids = vpc_config.get("securityGroupIds") or []
    if len(group_ids) > MAX_CLUSTER_SECURITY_GROUPS:
        raise _invalid(f"resourcesVpcConfig.securityGroupIds: at most {MAX_CLUSTER_SECURITY_GROUPS} security groups")
    for group_id in group_ids:
        group = ec2.get_security_group_from_id(group_id)
        if group is None:
            raise _invalid(f"resourcesVpcConfig.securityGroupIds: the security group '{group_id}' does not exist")
        if group.vpc_id not in vpcs:
            raise _invalid(
                f"resourcesVpcConfig.securityGroupIds: {group_id} is in {group.vpc_id}, not the subnets' VPC"
            )


def _bootstrap_admin(self: EKSResponse, cluster: Cluster, extras: _ClusterExtras) -> None:
    """The cluster creator's admin access entry, when moto's IAM knows the caller (an IAM user, or a role's session)."""
    _, caller, _ = sts_backends[self.current_account]["global"].get_caller_identity(self.get_access_key(), self.region)
    if ":assumed-role/" in caller:
        role_name = caller.split(":assumed-role/", 1)[1].split("/", 1)[0]
        iam = iam_backends[self.current_account]["global"]
        caller = next((role.arn for role in iam.roles.values() if role.name == role_name), "")
    if not caller or _iam_principal(caller) is None:
        return
    entry = _new_entry(self.eks_backend, cluster.name, caller, STANDARD, None, [], {})
    now = utcnow()
    entry.policies[CLUSTER_ADMIN_POLICY] = _AssociatedPolicy(CLUSTER_ADMIN_POLICY, {"type": "cluster"}, now, now)
    extras.access_entries[caller] = entry


# --- patch 2 and 3: a cluster's lifecycle --------------------------------------------------------


def _look_at_cluster(backend: EKSBackend, name: str, forgotten: list[str]) -> None:
    """One look at a cluster: settle it when due; a cluster whose deletion settled is forgotten
    (its name added to `forgotten`, for its Kubernetes to be stopped once _lock is released)."""
    cluster = backend.clusters.get(name)
    if cluster is None:
        return
    extras = _cluster_extras(backend, cluster)
    lifecycle = extras.lifecycle
    if lifecycle.state in (CREATING, DELETING) and lifecycle.due():
        if lifecycle.state == DELETING:
            _forget_cluster(backend, cluster, extras)
            forgotten.append(cluster.name)
            return
        lifecycle.enter(ACTIVE)
    cluster.status = lifecycle.state
    if lifecycle.state == ACTIVE and kubernetes is not None:
        cluster.endpoint, authority = kubernetes.cluster_active(cluster.name)
        cluster.certificate_authority = {"data": authority}


def _forget_cluster(backend: EKSBackend, cluster: Cluster, extras: _ClusterExtras) -> None:
    del backend.clusters[cluster.name]
    backend.cluster_count -= 1
    _state(backend).clusters.pop(cluster.name, None)
    if extras.security_group_id:
        _ec2(backend).delete_security_group(group_id=extras.security_group_id)


def _stop_kubernetes_of(forgotten: list[str]) -> None:
    """Stop the Kubernetes of the clusters just forgotten. Never under _lock: stopping a cluster
    waits for its log shipper, which asks has_addon (under _lock) before it ships."""
    if kubernetes is not None:
        for name in forgotten:
            kubernetes.cluster_deleted(name)


def _describe_cluster(self: EKSBackend, name: str) -> Cluster:
    forgotten: list[str] = []
    try:
        with _lock:
            _look_at_cluster(self, name, forgotten)
            cluster: Cluster = original("describe_cluster")(self, name=name)
            return cluster
    finally:
        _stop_kubernetes_of(forgotten)


def _list_clusters(self: EKSBackend, max_results: int, next_token: str | None) -> tuple[list[Any], Any]:
    forgotten: list[str] = []
    try:
        with _lock:
            for name in list(self.clusters):
                _look_at_cluster(self, name, forgotten)
            listed: tuple[list[Any], Any] = original("list_clusters")(
                self, max_results=max_results, next_token=next_token
            )
            return listed
    finally:
        _stop_kubernetes_of(forgotten)


def _delete_cluster(self: EKSBackend, name: str) -> Cluster:
    with _lock:
        cluster = self.clusters.get(name)
        if cluster is None:
            raise _not_found(CLUSTER_NOT_FOUND_MSG.format(clusterName=name), clusterName=name)
        if cluster.nodegroups or cluster.fargate_profiles:
            in_use = ",".join([*cluster.nodegroups, *cluster.fargate_profiles])
            raise ResourceInUseException(
                clusterName=name, nodegroupName=in_use, addonName=None, message=CLUSTER_IN_USE_MSG
            )
        extras = _cluster_extras(self, cluster)
        if extras.lifecycle.state != DELETING:
            extras.lifecycle.enter(DELETING, lasts=clock.real_seconds(aws_clock.EKS_CLUSTER_DELETED))
            cluster.status = DELETING
        return cluster


# --- patch 4 and 5: node groups ------------------------------------------------------------------


def _create_nodegroup(self: EKSBackend, **params: Any) -> Nodegroup:
    with _lock:
        cluster = self.clusters.get(params["cluster_name"])
        if cluster is None or params["nodegroup_name"] in cluster.nodegroups or not cluster.is_active:
            # moto's own refusals: no cluster, a duplicate name, a cluster not ACTIVE.
            nodegroup: Nodegroup = original("create_nodegroup")(self, **params)
            return nodegroup
        template, zones = _check_nodegroup_request(self, cluster, params)
        ami_type = params.get("ami_type") or ("CUSTOM" if template and template.get("ImageId") else None)
        nodegroup = original("create_nodegroup")(
            self, **{**params, "ami_type": ami_type or "AL2023_x86_64_STANDARD", "version": cluster.version}
        )
        # What EKS answers, not moto's defaults: no disk size, instance types or SSH key it was not given
        # (the launch template holds them), and the release version EKS picks is not ours to make up.
        # moto types these attributes as always set, hence vars().
        vars(nodegroup).update(
            instance_types=params.get("instance_types")
            or (None if template and template.get("InstanceType") else ["t3.medium"]),
            disk_size=params.get("disk_size") or (None if template else 20),
            remote_access=params.get("remote_access"),
            release_version=params.get("release_version"),
            health={"issues": []},
            # moto's default scaling config is one dict shared by every node group it creates:
            # UpdateNodegroupConfig would change them all.
            scaling_config=dict(nodegroup.scaling_config),
        )
        nodegroup.status = CREATING
        _state(self).nodegroups[(cluster.name, nodegroup.nodegroup_name)] = _NodegroupExtras(
            _lasting(CREATING, aws_clock.EKS_NODEGROUP_ACTIVE), zones, template
        )
        return nodegroup


def _check_nodegroup_request(
    backend: EKSBackend, cluster: Cluster, params: dict[str, Any]
) -> tuple[dict[str, Any] | None, set[str]]:
    """Refuse what CreateNodegroup refuses (module docstring, Rules); the launch template's data, the subnets' zones."""
    names = {"clusterName": cluster.name, "nodegroupName": params["nodegroup_name"]}
    version = params.get("version")
    if version and version != cluster.version:
        raise _invalid(f"version {version} is not the cluster's Kubernetes version {cluster.version}", **names)
    _role_for(params.get("node_role") or "", "ec2.amazonaws.com", "nodeRole")
    zones = _nodegroup_zones(backend, cluster, params.get("subnets") or [], names)
    ami_type, capacity_type = params.get("ami_type"), params.get("capacity_type")
    if ami_type is not None and ami_type not in _enum("AMITypes"):
        raise _invalid(f"amiType {ami_type} is not one of {', '.join(_enum('AMITypes'))}", **names)
    minor = tuple(int(part) for part in cluster.version.split("."))
    if ami_type and ami_type.startswith("AL2_") and minor > LAST_AL2_KUBERNETES_VERSION:
        raise _invalid(f"amiType {ami_type}: EKS releases no AL2 AMIs for Kubernetes {cluster.version}", **names)
    if capacity_type is not None and capacity_type not in _enum("CapacityTypes"):
        raise _invalid(f"capacityType {capacity_type} is not one of {', '.join(_enum('CapacityTypes'))}", **names)
    _check_scaling(params.get("scaling_config") or {}, names)
    spec = params.get("launch_template")
    template = _launch_template_data(backend, spec, names) if spec else None
    market = ((template or {}).get("InstanceMarketOptions") or {}).get("MarketType")
    if capacity_type == "CAPACITY_BLOCK":
        _check_capacity_block(template, names)
    elif market == CAPACITY_BLOCK_MARKET:
        raise _invalid(
            f"launchTemplate: MarketType {CAPACITY_BLOCK_MARKET} needs capacityType CAPACITY_BLOCK, "
            f"not {capacity_type or 'ON_DEMAND (the default)'}",
            **names,
        )
    if template is not None:
        _check_launch_template(template, params, names)
    return template, zones


def _nodegroup_zones(backend: EKSBackend, cluster: Cluster, subnet_ids: list[str], names: dict[str, str]) -> set[str]:
    if not subnet_ids:
        raise _invalid("subnets: a node group needs at least one subnet", **names)
    vpc_id = _cluster_extras(backend, cluster).vpc_id
    zones = set()
    for subnet_id in subnet_ids:
        try:
            subnet = _ec2(backend).get_subnet(subnet_id)
        except InvalidSubnetIdError:
            raise _invalid(f"subnets: the subnet ID '{subnet_id}' does not exist", **names) from None
        if vpc_id is not None and subnet.vpc_id != vpc_id:
            raise _invalid(f"subnets: {subnet_id} is in {subnet.vpc_id}, not the cluster's VPC {vpc_id}", **names)
        zones.add(subnet.availability_zone)
    return zones


def _check_scaling(scaling: dict[str, Any], names: dict[str, str]) -> None:
    low, desired, high = scaling.get("minSize"), scaling.get("desiredSize"), scaling.get("maxSize")
    if low is not None and high is not None and low > high:
        raise _invalid(f"scalingConfig: minSize {low} is greater than maxSize {high}", **names)
    if desired is not None and low is not None and desired < low:
        raise _invalid(f"scalingConfig: desiredSize {desired} is less than minSize {low}", **names)
    if desired is not None and high is not None and desired > high:
        raise _invalid(f"scalingConfig: desiredSize {desired} is greater than maxSize {high}", **names)


def _launch_template_data(backend: EKSBackend, spec: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """The data of the launch template version a node group names; refused when it is not in EC2."""
    if bool(spec.get("id")) == bool(spec.get("name")):
        raise _invalid(
            "launchTemplate: you must specify either the launch template ID or the launch template name in the "
            "request, but not both",
            **names,
        )
    ec2 = _ec2(backend)
    template_id = spec.get("id") or ec2.launch_template_name_to_ids.get(spec["name"])
    template = ec2.launch_templates.get(template_id or "")
    if template is None:
        raise _invalid(f"launchTemplate: launch template {spec.get('id') or spec.get('name')} does not exist", **names)
    version = spec.get("version") or "$Default"
    found = [v for v in template.versions if str(v.number) == version]
    if version.lower() in ("$latest", "$default"):
        found = [template.get_version(version)]
    if not found:
        raise _invalid(f"launchTemplate: {template.id} has no version {version}", **names)
    data: dict[str, Any] = found[0].data
    return data


def _check_capacity_block(template: dict[str, Any] | None, names: dict[str, str]) -> None:
    """What a CAPACITY_BLOCK node group's launch template must hold (User Guide, Capacity Blocks page)."""
    if template is None:
        raise _invalid(
            "capacityType CAPACITY_BLOCK: managed node groups with Capacity Blocks need a launch template", **names
        )
    market = (template.get("InstanceMarketOptions") or {}).get("MarketType")
    target = (template.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}
    missing = [
        what
        for what, present in (
            (f"InstanceMarketOptions.MarketType {CAPACITY_BLOCK_MARKET}", market == CAPACITY_BLOCK_MARKET),
            (
                "CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId",
                bool(target.get("CapacityReservationId")),
            ),
            ("InstanceType", bool(template.get("InstanceType"))),
        )
        if not present
    ]
    if missing:
        raise _invalid(f"capacityType CAPACITY_BLOCK: the launch template data lacks {', '.join(missing)}", **names)


def _check_launch_template(template: dict[str, Any], params: dict[str, Any], names: dict[str, str]) -> None:
    interfaces = template.get("NetworkInterfaces") or []
    present = {
        "IamInstanceProfile": bool(template.get("IamInstanceProfile")),
        "InstanceInitiatedShutdownBehavior": bool(template.get("InstanceInitiatedShutdownBehavior")),
        "HibernationOptions": bool(template.get("HibernationOptions")),
        "NetworkInterfaces.SubnetId": any(interface.get("SubnetId") for interface in interfaces),
        "InstanceMarketOptions.MarketType=spot": (template.get("InstanceMarketOptions") or {}).get("MarketType")
        == "spot",
    }
    for name, why in PROHIBITED_LAUNCH_TEMPLATE_FIELDS.items():
        if present[name]:
            raise _invalid(f"launchTemplate: managed node groups prohibit {name} in a launch template: {why}", **names)
    if (template.get("SecurityGroupIds") or template.get("SecurityGroups")) and any(
        i.get("Groups") for i in interfaces
    ):
        raise _invalid(
            "launchTemplate: security groups both for the instance (SecurityGroupIds) and in NetworkInterfaces.Groups",
            **names,
        )
    if params.get("instance_types") and template.get("InstanceType"):
        raise _invalid(
            "instanceTypes: the launch template has an InstanceType: specify instance types in one place", **names
        )
    if params.get("ami_type") and template.get("ImageId"):
        raise _invalid(
            f"amiType: the launch template has a custom AMI ({template['ImageId']}): don't specify amiType", **names
        )


def _look_at_nodegroup(backend: EKSBackend, cluster: Cluster, name: str) -> None:
    nodegroup = cluster.nodegroups.get(name)
    if nodegroup is None:
        return
    extras = _nodegroup_extras(backend, nodegroup)
    lifecycle = extras.lifecycle
    if lifecycle.state in (CREATING, DELETING) and lifecycle.due():
        if lifecycle.state == DELETING:
            del cluster.nodegroups[name]
            cluster.nodegroup_count -= 1
            _state(backend).nodegroups.pop((cluster.name, name), None)
            return
        issue = _launch_issue(backend, nodegroup, extras)
        lifecycle.enter(ACTIVE if issue is None else CREATE_FAILED)
        nodegroup.health = {"issues": [issue] if issue else []}
        if issue is None and kubernetes is not None:
            kubernetes.nodegroup_active(_nodes_of(nodegroup, extras))
    nodegroup.status = lifecycle.state


def _nodes_of(nodegroup: Nodegroup, extras: _NodegroupExtras) -> NodeGroupNodes:
    """What the node group's instances are, for their Node objects."""
    from trainrun.local.kube_cluster import NodeGroupNodes

    instance_types = nodegroup.instance_types or [(extras.template or {}).get("InstanceType", "t3.medium")]
    return NodeGroupNodes(
        cluster_name=nodegroup.cluster_name,
        nodegroup_name=nodegroup.nodegroup_name,
        count=int((nodegroup.scaling_config or {}).get("desiredSize") or 0),
        instance_type=instance_types[0],
        capacity_type=nodegroup.capacity_type,
        zones=tuple(sorted(extras.zones)) or ("unknown",),
        taints=tuple(nodegroup.taints or ()),
        labels=dict(nodegroup.labels or {}),
    )


def _launch_issue(backend: EKSBackend, nodegroup: Nodegroup, extras: _NodegroupExtras) -> dict[str, Any] | None:
    """Why the node group's instances cannot launch into the reservation its launch template targets, or None."""
    template = extras.template or {}
    target = (template.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}
    reservation_id = target.get("CapacityReservationId")
    # The reservations live in the capacity emulator; an account it did not seed has none to check.
    known = capacity_emulator._current(backend.account_id, backend.region_name)
    if not reservation_id or not known:
        return None
    wanted = int((nodegroup.scaling_config or {}).get("desiredSize") or 0)
    reservation = known.get(reservation_id)
    instance_type = template.get("InstanceType")
    if reservation is None:
        problem = (
            f"InvalidCapacityReservationId.NotFound: the capacity reservation ID '{reservation_id}' does not exist"
        )
    elif reservation["AvailabilityZone"] not in extras.zones:
        problem = (
            f"the capacity reservation {reservation_id} is in {reservation['AvailabilityZone']}, and none of the node "
            f"group's subnets is ({', '.join(sorted(extras.zones))})"
        )
    elif instance_type and reservation["InstanceType"] != instance_type:
        problem = f"the capacity reservation {reservation_id} holds {reservation['InstanceType']}, not {instance_type}"
    elif reservation["State"] == "scheduled" and nodegroup.capacity_type == "CAPACITY_BLOCK":
        return None
    elif wanted > (reservation["AvailableInstanceCount"] if reservation["State"] == "active" else 0):
        problem = (
            f"{capacity_emulator.RESERVATION_CAPACITY_EXCEEDED}: the capacity reservation {reservation_id} "
            f"({reservation['State']}) has {reservation['AvailableInstanceCount']} instances available, not {wanted}"
        )
    else:
        return None
    return {
        "code": "AsgInstanceLaunchFailures",
        "message": f"Could not launch instances: {problem}. Launching EC2 instance failed.",
        "resourceIds": [
            group["name"] for group in cast(list[dict[str, str]], nodegroup.resources["autoScalingGroups"])
        ],
    }


def _describe_nodegroup(self: EKSBackend, cluster_name: str, nodegroup_name: str) -> Nodegroup:
    with _lock:
        cluster = self.clusters.get(cluster_name)
        if cluster is not None:
            _look_at_nodegroup(self, cluster, nodegroup_name)
        nodegroup: Nodegroup = original("describe_nodegroup")(
            self, cluster_name=cluster_name, nodegroup_name=nodegroup_name
        )
        return nodegroup


def _list_nodegroups(
    self: EKSBackend, cluster_name: str, max_results: int, next_token: str | None
) -> tuple[list[Any], Any]:
    with _lock:
        cluster = self.clusters.get(cluster_name)
        if cluster is None:
            raise _not_found(CLUSTER_NOT_FOUND_MSG.format(clusterName=cluster_name), clusterName=cluster_name)
        for name in list(cluster.nodegroups):
            _look_at_nodegroup(self, cluster, name)
        listed: tuple[list[Any], Any] = original("list_nodegroups")(
            self, cluster_name=cluster_name, max_results=max_results, next_token=next_token
        )
        return listed


def _update_nodegroup_config(self: EKSBackend, **params: Any) -> dict[str, Any]:
    """moto's UpdateNodegroupConfig, refusing a scaling config out of order once merged with the node group's."""
    with _lock:
        nodegroup: Nodegroup = original("describe_nodegroup")(
            self, cluster_name=params["cluster_name"], nodegroup_name=params["nodegroup_name"]
        )
        names = {"clusterName": nodegroup.cluster_name, "nodegroupName": nodegroup.nodegroup_name}
        _check_scaling({**(nodegroup.scaling_config or {}), **(params.get("scaling_config") or {})}, names)
        update: dict[str, Any] = original("update_nodegroup_config")(self, **params)
        return update


def _delete_nodegroup(self: EKSBackend, cluster_name: str, nodegroup_name: str) -> Nodegroup:
    with _lock:
        nodegroup: Nodegroup = original("describe_nodegroup")(
            self, cluster_name=cluster_name, nodegroup_name=nodegroup_name
        )
        extras = _nodegroup_extras(self, nodegroup)
        if extras.lifecycle.state != DELETING:
            extras.lifecycle.enter(DELETING, lasts=clock.real_seconds(aws_clock.EKS_NODEGROUP_DELETED))
            nodegroup.status = DELETING
            if kubernetes is not None:  # its instances are terminated while it is DELETING
                kubernetes.nodegroup_deleting(cluster_name, nodegroup_name)
        return nodegroup


def access_policies(account: str, region: str, cluster_name: str, principal: str) -> list[str] | None:
    """The ARNs of the access policies associated with the principal's access entry on the cluster;
    None without an entry (what the cluster's Kubernetes API server authorizes with)."""
    with _lock:
        backend = eks_backends[account][region]
        cluster = backend.clusters.get(cluster_name)
        if cluster is None:
            return None
        entry = _cluster_extras(backend, cluster).access_entries.get(principal)
        return None if entry is None else list(entry.policies)


def has_addon(account: str, region: str, cluster_name: str, addon_name: str) -> bool:
    """Whether the cluster has the add-on (in any state but DELETING)."""
    with _lock:
        backend = eks_backends[account][region]
        cluster = backend.clusters.get(cluster_name)
        if cluster is None:
            return False
        addon = _cluster_extras(backend, cluster).addons.get(addon_name)
        return addon is not None and addon.lifecycle.state != DELETING


# --- patch 6: access entries ---------------------------------------------------------------------


def _cluster_for(response: EKSResponse, *, active: bool = False) -> tuple[Cluster, _ClusterExtras]:
    backend = response.eks_backend
    name = _uri(response, "name")
    cluster = backend.clusters.get(name)
    if cluster is None:
        raise _not_found(CLUSTER_NOT_FOUND_MSG.format(clusterName=name), clusterName=name)
    if active and cluster.status != ACTIVE:
        raise InvalidRequestException(message=CLUSTER_NOT_READY_MSG.format(clusterName=name))
    return cluster, _cluster_extras(backend, cluster)


def _access_entries_for(response: EKSResponse) -> tuple[Cluster, _ClusterExtras]:
    """The cluster, refused while its authentication mode leaves out the EKS API (User Guide, access entries)."""
    cluster, extras = _cluster_for(response)
    if extras.authentication_mode == CONFIG_MAP:
        raise InvalidRequestException(
            message=f"The cluster's authentication mode must be set to one of [API, API_AND_CONFIG_MAP] to perform "
            f"this operation (cluster {cluster.name} is {CONFIG_MAP})"
        )
    return cluster, extras


def _entry_for(response: EKSResponse) -> tuple[Cluster, _AccessEntry]:
    cluster, extras = _access_entries_for(response)
    principal = _uri(response, "principalArn")
    entry = extras.access_entries.get(principal)
    if entry is None:
        raise _not_found(
            f"The specified access entry resource {principal} could not be found.", clusterName=cluster.name
        )
    return cluster, entry


def _new_entry(
    backend: EKSBackend,
    cluster_name: str,
    principal: str,
    kind: str,
    username: str | None,
    groups: list[str],
    tags: dict[str, str],
) -> _AccessEntry:
    account, resource = principal.split(":")[4], principal.split(":", 5)[5]
    principal_type, principal_name = resource.split("/", 1)[0], resource.rsplit("/", 1)[-1]
    if username is None:
        # What EKS sets when the request has none (User Guide, access entries, the username table).
        if principal_type == "user":
            username = principal
        elif kind == STANDARD:
            username = f"arn:{backend.partition}:sts::{account}:assumed-role/{principal_name}/{{{{SessionName}}}}"
        elif kind in ("EC2_LINUX", "EC2_WINDOWS"):
            username = "system:node:{{EC2PrivateDNSName}}"
        else:
            username = "system:node:{{SessionName}}"
    return _AccessEntry(
        cluster_name=cluster_name,
        principal_arn=principal,
        arn=f"arn:{backend.partition}:eks:{backend.region_name}:{backend.account_id}:access-entry/{cluster_name}/"
        f"{principal_type}/{account}/{principal_name}/{uuid.uuid4()}",
        type=kind,
        username=username,
        groups=groups,
        tags=tags,
    )


def _create_access_entry(self: EKSResponse) -> ActionResult:
    with _lock:
        cluster, extras = _access_entries_for(self)
        principal: str = self._get_param("principalArn") or ""
        kind: str = self._get_param("type") or STANDARD
        username: str | None = self._get_param("username")
        groups: list[str] = self._get_param("kubernetesGroups") or []
        names = {"clusterName": cluster.name}
        if kind not in ACCESS_ENTRY_TYPES:
            raise _invalid(f"type {kind} is not one of {', '.join(ACCESS_ENTRY_TYPES)}", **names)
        if ":role/aws-service-role/" in principal:
            raise _invalid(f"principalArn {principal}: access entries do not support service-linked roles", **names)
        if _iam_principal(principal) is None:
            raise _invalid(f"principalArn {principal} is not an existing IAM role or user", **names)
        if kind != STANDARD:
            if ":role/" not in principal or principal.split(":")[4] != self.current_account:
                raise _invalid(f"type {kind} takes an IAM role of the cluster's account, not {principal}", **names)
            if groups or username:
                raise _invalid(f"type {kind} takes no kubernetesGroups or username: only STANDARD does", **names)
        if username and username.startswith(RESERVED_USERNAME_PREFIXES):
            raise _invalid(f"username {username} can't start with {', '.join(RESERVED_USERNAME_PREFIXES)}", **names)
        if principal in extras.access_entries:
            raise ResourceInUseException(
                clusterName=cluster.name,
                nodegroupName=None,
                addonName=None,
                message=f"The specified access entry resource is already in use on this cluster: {principal}",
            )
        entry = _new_entry(
            self.eks_backend, cluster.name, principal, kind, username, groups, self._get_param("tags") or {}
        )
        extras.access_entries[principal] = entry
        return ActionResult({"accessEntry": entry.to_dict()})


def _describe_access_entry(self: EKSResponse) -> ActionResult:
    with _lock:
        _, entry = _entry_for(self)
        return ActionResult({"accessEntry": entry.to_dict()})


def _list_access_entries(self: EKSResponse) -> ActionResult:
    with _lock:
        _, extras = _access_entries_for(self)
        policy = self._get_param("associatedPolicyArn")
        principals = [arn for arn, entry in extras.access_entries.items() if not policy or policy in entry.policies]
        page, next_token = _page(
            principals, {"maxResults": self._get_param("maxResults"), "nextToken": self._get_param("nextToken")}
        )
        return ActionResult({"accessEntries": page, "nextToken": next_token})


def _delete_access_entry(self: EKSResponse) -> ActionResult:
    with _lock:
        cluster, entry = _entry_for(self)
        del _cluster_extras(self.eks_backend, cluster).access_entries[entry.principal_arn]
        return EmptyResult()


def _associate_access_policy(self: EKSResponse) -> ActionResult:
    with _lock:
        cluster, entry = _entry_for(self)
        policy_arn: str = self._get_param("policyArn") or ""
        scope: dict[str, Any] = self._get_param("accessScope") or {}
        names = {"clusterName": cluster.name}
        policy_name = policy_arn.rsplit("/", 1)[-1]
        if policy_arn != ACCESS_POLICY_ARN.format(policy_name) or policy_name not in ACCESS_POLICIES:
            raise _invalid(f"policyArn {policy_arn} is not an Amazon EKS access policy (ListAccessPolicies)", **names)
        if policy_name in SERVICE_LINKED_ONLY_POLICIES:
            raise _invalid(f"policyArn {policy_arn} is designated for AWS service-linked roles only", **names)
        if entry.type != STANDARD:
            raise _invalid(f"access entry of type {entry.type}: access policies go only to STANDARD entries", **names)
        scope_type, namespaces = scope.get("type"), scope.get("namespaces") or []
        if scope_type not in _enum("AccessScopeType"):
            raise _invalid(
                f"accessScope.type {scope_type} is not one of {', '.join(_enum('AccessScopeType'))}", **names
            )
        if scope_type == "namespace" and not namespaces:
            raise _invalid("accessScope.namespaces: a namespace scope needs at least one namespace", **names)
        if scope_type == "cluster" and namespaces:
            raise _invalid("accessScope.namespaces: a cluster scope takes no namespaces", **names)
        now = utcnow()
        earlier = entry.policies.get(policy_arn)
        scope = {"type": scope_type, "namespaces": namespaces}
        entry.policies[policy_arn] = _AssociatedPolicy(
            policy_arn, scope, earlier.associated_at if earlier else now, now
        )
        return ActionResult(
            {
                "clusterName": cluster.name,
                "principalArn": entry.principal_arn,
                "associatedAccessPolicy": entry.policies[policy_arn].to_dict(),
            }
        )


def _list_associated_access_policies(self: EKSResponse) -> ActionResult:
    with _lock:
        cluster, entry = _entry_for(self)
        page, next_token = _page(
            [policy.to_dict() for policy in entry.policies.values()],
            {"maxResults": self._get_param("maxResults"), "nextToken": self._get_param("nextToken")},
        )
        return ActionResult(
            {
                "clusterName": cluster.name,
                "principalArn": entry.principal_arn,
                "associatedAccessPolicies": page,
                "nextToken": next_token,
            }
        )


def _disassociate_access_policy(self: EKSResponse) -> ActionResult:
    with _lock:
        cluster, entry = _entry_for(self)
        policy_arn = _uri(self, "policyArn")
        if entry.policies.pop(policy_arn, None) is None:
            raise _not_found(f"{policy_arn} is not associated with {entry.principal_arn}", clusterName=cluster.name)
        return EmptyResult()


def _list_access_policies(self: EKSResponse) -> ActionResult:
    policies = [{"name": name, "arn": ACCESS_POLICY_ARN.format(name)} for name in ACCESS_POLICIES]
    page, next_token = _page(
        policies, {"maxResults": self._get_param("maxResults"), "nextToken": self._get_param("nextToken")}
    )
    return ActionResult({"accessPolicies": page, "nextToken": next_token})


# --- patch 7: add-ons ----------------------------------------------------------------------------


def _schedulable(cluster: Cluster, addon: _Addon) -> bool:
    """Whether the add-on's pods find a node: an ACTIVE node group with nodes and no taint they don't tolerate."""
    # configurationValues is JSON or YAML, its schema the add-on's (tolerations at the top, or under
    # the Deployment's own key): any tolerations there are taken to tolerate the node group's taints.
    tolerates = "tolerations" in (addon.params.get("configurationValues") or "")
    for nodegroup in cluster.nodegroups.values():
        blocking = [t for t in nodegroup.taints or [] if t.get("effect") in ("NO_SCHEDULE", "NO_EXECUTE")]
        if (
            nodegroup.status == ACTIVE
            and int((nodegroup.scaling_config or {}).get("desiredSize") or 0) > 0
            and (tolerates or not blocking)
        ):
            return True
    return False


def _look_at_addon(cluster: Cluster, extras: _ClusterExtras, name: str) -> None:
    addon = extras.addons.get(name)
    if addon is None:
        return
    lifecycle = addon.lifecycle
    if lifecycle.state == DELETING:
        if lifecycle.due():
            del extras.addons[name]
        return
    if lifecycle.state == CREATING and not lifecycle.due():
        return
    healthy = not ADDONS[name].needs_nodes or _schedulable(cluster, addon)
    if lifecycle.state != (ACTIVE if healthy else DEGRADED):
        lifecycle.enter(ACTIVE if healthy else DEGRADED)
    addon.issues = (
        []
        if healthy
        else [{"code": "InsufficientNumberOfReplicas", "message": INSUFFICIENT_REPLICAS, "resourceIds": []}]
    )


def _addon_for(response: EKSResponse) -> tuple[Cluster, _ClusterExtras, _Addon]:
    cluster, extras = _cluster_for(response)
    name = _uri(response, "addonName")
    _look_at_addon(cluster, extras, name)
    addon = extras.addons.get(name)
    if addon is None:
        raise _not_found(f"No addon: {name} found in cluster: {cluster.name}", clusterName=cluster.name, addonName=name)
    return cluster, extras, addon


def _create_addon(self: EKSResponse) -> ActionResult:
    with _lock:
        cluster, extras = _cluster_for(self, active=True)
        name: str = self._get_param("addonName") or ""
        names = {"clusterName": cluster.name, "addonName": name}
        info = ADDONS.get(name)
        if info is None:
            raise _invalid(f"Addon {name} specified is not supported in {cluster.version} kubernetes version", **names)
        version = self._get_param("addonVersion") or info.version
        if version != info.version:
            raise _invalid(f"Addon version {version} specified is not supported (DescribeAddonVersions)", **names)
        resolve = self._get_param("resolveConflicts")
        if resolve is not None and resolve not in _enum("ResolveConflicts"):
            raise _invalid(f"resolveConflicts {resolve} is not one of {', '.join(_enum('ResolveConflicts'))}", **names)
        roles = [self._get_param("serviceAccountRoleArn")]
        roles += [a.get("roleArn") for a in self._get_param("podIdentityAssociations") or []]
        for role in filter(None, roles):
            if ":role/" not in role or _iam_principal(role) is None:
                raise _invalid(f"role {role} does not exist", **names)
        if name in extras.addons:
            raise ResourceInUseException(
                clusterName=cluster.name, nodegroupName=None, addonName=name, message="Addon already exists."
            )
        params = {
            key: self._get_param(key)
            for key in ("serviceAccountRoleArn", "configurationValues", "tags", "namespaceConfig")
        }
        backend = self.eks_backend
        addon = _Addon(
            name=name,
            cluster_name=cluster.name,
            arn=f"arn:{backend.partition}:eks:{backend.region_name}:{backend.account_id}:addon/{cluster.name}/{name}/"
            f"{uuid.uuid4()}",
            version=version,
            lifecycle=_lasting(CREATING, aws_clock.EKS_ADDON_ACTIVE),
            params=params,
        )
        extras.addons[name] = addon
        return ActionResult({"addon": addon.to_dict()})


def _describe_addon(self: EKSResponse) -> ActionResult:
    with _lock:
        _, _, addon = _addon_for(self)
        return ActionResult({"addon": addon.to_dict()})


def _list_addons(self: EKSResponse) -> ActionResult:
    with _lock:
        cluster, extras = _cluster_for(self)
        for name in list(extras.addons):
            _look_at_addon(cluster, extras, name)
        page, next_token = _page(
            sorted(extras.addons),
            {"maxResults": self._get_param("maxResults"), "nextToken": self._get_param("nextToken")},
        )
        return ActionResult({"addons": page, "nextToken": next_token})


def _delete_addon(self: EKSResponse) -> ActionResult:
    with _lock:
        _, _, addon = _addon_for(self)
        if addon.lifecycle.state != DELETING:
            addon.lifecycle.enter(DELETING, lasts=clock.real_seconds(aws_clock.EKS_ADDON_DELETED))
        return ActionResult({"addon": addon.to_dict()})


def _describe_addon_versions(self: EKSResponse) -> ActionResult:
    name = self._get_param("addonName")
    kubernetes = self._get_param("kubernetesVersion")
    if name and name not in ADDONS:
        raise _not_found(f"Addon {name} not found", addonName=name)
    if kubernetes and kubernetes not in eks_versions.SUPPORTED_KUBERNETES_VERSIONS:
        raise _invalid(f"kubernetesVersion {kubernetes} is not a version EKS supports")
    filters: dict[str, Iterable[str]] = {
        "type": _query(self, "types"),
        "publisher": _query(self, "publishers"),
        "owner": _query(self, "owners"),
    }
    versions = [kubernetes] if kubernetes else list(eks_versions.SUPPORTED_KUBERNETES_VERSIONS)
    chosen = []
    for addon_name, info in ADDONS.items():
        fields = {"type": info.type, "publisher": "eks", "owner": "aws"}
        if (name and addon_name != name) or any(
            values and fields[key] not in values for key, values in filters.items()
        ):
            continue
        chosen.append(
            {
                "addonName": addon_name,
                "type": info.type,
                "addonVersions": [
                    {
                        "addonVersion": info.version,
                        "architecture": ["amd64", "arm64"],
                        "computeTypes": ["ec2"],
                        "compatibilities": [
                            {"clusterVersion": v, "platformVersions": ["*"], "defaultVersion": True} for v in versions
                        ],
                        "requiresConfiguration": False,
                        "requiresIamPermissions": info.requires_iam,
                    }
                ],
                "publisher": "eks",
                "owner": "aws",
                "defaultNamespace": info.namespace,
            }
        )
    page, next_token = _page(
        chosen, {"maxResults": self._get_param("maxResults"), "nextToken": self._get_param("nextToken")}
    )
    return ActionResult({"addons": page, "nextToken": next_token})


_NEW_ACTIONS = (
    _create_access_entry,
    _describe_access_entry,
    _list_access_entries,
    _delete_access_entry,
    _associate_access_policy,
    _list_associated_access_policies,
    _disassociate_access_policy,
    _list_access_policies,
    _create_addon,
    _describe_addon,
    _list_addons,
    _delete_addon,
    _describe_addon_versions,
)
