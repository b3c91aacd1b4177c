"""What a `cluster.kind: eks` run asks Amazon EKS and EC2 for, rendered from its run file.

Pure: no AWS calls, like `trainrun.logic.cluster_config` for ParallelCluster. The ids of what
exists before the cluster (the run's subnets and security group, the stack's roles) come in as
`EksIds`; whether the reservation is a Capacity Block, known only from the account, comes in as
`capacity_block`. Each request is the keyword arguments of its boto3 call: EKS CreateCluster, EC2
CreateLaunchTemplate, EKS CreateNodegroup (tests/unit/test_eks_node_group.py checks each against
botocore's service model).

The node group runs on the EKS-optimized Amazon Linux 2023 Neuron AMI, in the private subnet of
the reservation's zone, from a launch template that targets the run's reservation and gives each
node one EFA interface per network card. Sources: Amazon EKS User Guide, "Customize managed nodes
with launch templates", "Create a managed node group with Capacity Blocks for ML" and "Run machine
learning training on Amazon EKS with Elastic Fabric Adapter"; Amazon EC2 User Guide, "Maximize
network bandwidth on Amazon EC2 instances with multiple network cards".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal, NotRequired, TypedDict

from pydantic import BaseModel, ConfigDict, StringConstraints

from trainrun.logic.cluster_config import COMPUTE_ROOT_GIB, SECURITY_GROUP_ID
from trainrun.model.run_file import SUBNET_ID, RunSpec

# One EFA interface per network card (an instance takes at most one EFA per card): 8 cards on a
# trn1.32xlarge, 16 on a trn1n.32xlarge (AWS Neuron documentation, "How to prepare trn1.32xlarge for
# multi-node execution") and on a trn2.48xlarge (Amazon EC2 User Guide, "Network cards"). A
# trn1.2xlarge has no EFA: its node gets one ordinary interface.
EFA_INTERFACES = {"trn1.32xlarge": 8, "trn1n.32xlarge": 16, "trn2.48xlarge": 16}
# Neuron devices (Trainium chips) per instance, what the Neuron device plugin advertises as
# `aws.amazon.com/neuron`: 1 on a trn1.2xlarge, 16 on a trn1.32xlarge and trn1n.32xlarge (AWS Neuron
# documentation, "Trn1/Trn1n Architecture"), 16 Trainium2 chips on a trn2.48xlarge ("Trn2 Architecture").
NEURON_DEVICES = {"trn1.2xlarge": 1, "trn1.32xlarge": 16, "trn1n.32xlarge": 16, "trn2.48xlarge": 16}
# The EKS-optimized Amazon Linux 2023 AMI with the Neuron driver, which EKS picks (and updates) for
# the cluster's Kubernetes version: the launch template names no ImageId, so EKS bootstraps it.
AMI_TYPE = "AL2023_x86_64_NEURON"
# Keeps every pod that does not tolerate it off the Trainium nodes. They are the cluster's only
# nodes, so the add-ons' own Deployments (CoreDNS, the FSx CSI controller, the CloudWatch agent's
# operator) need the toleration in their add-on configuration to be scheduled at all.
NEURON_TAINT: Taint = {"key": "aws.amazon.com/neuron", "value": "true", "effect": "NO_SCHEDULE"}
# The label that names the run on its nodes (a run name is a valid label value: at most 40 of [a-z0-9-]).
RUN_NAME_LABEL = "trainrun/run-name"
# The EKS add-ons a run's cluster gets, and what each is for (EKS installs the VPC CNI, kube-proxy
# and CoreDNS itself).
ADD_ONS = {
    # EKS installs a CoreDNS of its own, whose pods tolerate no taint: on a cluster whose only nodes
    # are the tainted Trainium ones it never runs, and `<job>-0.workers` (torchrun's rendezvous)
    # never resolves. The managed add-on replaces it, with the toleration in its configuration.
    "coredns": "resolves the pods' names (rank 0's, through the headless Service) on the tainted nodes",
    "aws-fsx-csi-driver": "mounts the run's FSx for Lustre file system in the pods",
    "amazon-cloudwatch-observability": "ships the pods' logs and the nodes' metrics to CloudWatch",
}
# A new launch template's only version: the node group is pinned to it rather than to $Default.
LAUNCH_TEMPLATE_VERSION = "1"
# The root device of the Amazon Linux 2023 AMIs.
ROOT_DEVICE_NAME = "/dev/xvda"
# What EKS sets in the launch template it makes itself, for containers that use IMDSv2 (Amazon EKS
# User Guide, "Customize managed nodes with launch templates"): a pod's request to the instance
# metadata service takes a second hop, out of the pod's network namespace.
METADATA_HOP_LIMIT = 2
IAM_ROLE_ARN = r"^arn:aws(-cn|-us-gov|-iso(-[a-z])?)?:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$"
# EKS and EC2 refuse tag keys with this prefix; both take at most 50 tags of 128/256 characters.
RESERVED_TAG_PREFIX = "aws:"
MAX_TAGS = 50


class EksIds(BaseModel):
    """What the EKS cluster and its node group are built into and with; they exist before the cluster."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    # The cluster's two subnets, where EKS places its control plane's network interfaces: it needs
    # them in two Availability Zones (Amazon EKS User Guide, "View Amazon EKS networking requirements
    # for VPC and subnets"). The private one, in the reservation's zone, also holds the node group;
    # the run's network gives an EKS run the other in another zone (NetworkIds.control_plane_subnet_id).
    private_subnet_id: Annotated[str, StringConstraints(pattern=SUBNET_ID)]
    control_plane_subnet_id: Annotated[str, StringConstraints(pattern=SUBNET_ID)]
    # The run's EFA security group (all traffic from and to itself). It is on the control plane's
    # network interfaces too, so the nodes and the control plane reach each other through it: a
    # launch template that names its own security groups does not get EKS's cluster security group.
    security_group_id: Annotated[str, StringConstraints(pattern=SECURITY_GROUP_ID)]
    cluster_role_arn: Annotated[str, StringConstraints(pattern=IAM_ROLE_ARN)]
    node_role_arn: Annotated[str, StringConstraints(pattern=IAM_ROLE_ARN)]

    @classmethod
    def placeholders(cls) -> EksIds:
        """Ids that pass the checks but name nothing, for showing a run's requests before it exists."""
        return cls(
            private_subnet_id="subnet-0000000000000000b",
            control_plane_subnet_id="subnet-0000000000000000c",
            security_group_id="sg-00000000000000000",
            cluster_role_arn="arn:aws:iam::000000000000:role/trainrun-eks-cluster",
            node_role_arn="arn:aws:iam::000000000000:role/trainrun-eks-node",
        )


class Tag(TypedDict):
    Key: str
    Value: str


class TagSpecification(TypedDict):
    ResourceType: Literal["instance", "volume", "launch-template"]
    Tags: list[Tag]


class NetworkInterface(TypedDict):
    NetworkCardIndex: int
    DeviceIndex: int
    InterfaceType: NotRequired[Literal["efa"]]
    Groups: list[str]
    DeleteOnTermination: bool
    Description: str


class CapacityReservationTarget(TypedDict, total=False):
    CapacityReservationId: str
    CapacityReservationResourceGroupArn: str


class CapacityReservationSpecification(TypedDict):
    CapacityReservationTarget: CapacityReservationTarget


class InstanceMarketOptions(TypedDict):
    MarketType: Literal["capacity-block"]


class EbsVolume(TypedDict):
    VolumeSize: int
    VolumeType: str
    Encrypted: bool
    DeleteOnTermination: bool


class BlockDeviceMapping(TypedDict):
    DeviceName: str
    Ebs: EbsVolume


class MetadataOptions(TypedDict):
    HttpEndpoint: Literal["enabled"]
    HttpTokens: Literal["required"]
    HttpPutResponseHopLimit: int


class LaunchTemplateData(TypedDict):
    """EC2's RequestLaunchTemplateData, as a managed node group takes it: no IamInstanceProfile (the
    node group's nodeRole), no SubnetId in a network interface (its subnets), no shutdown or
    hibernation behaviour (EKS owns the instances' lifecycle), no ImageId (the AMI type's), and no
    Placement: an instance in a placement group only uses a reservation made for that group."""

    InstanceType: str
    CapacityReservationSpecification: CapacityReservationSpecification
    InstanceMarketOptions: NotRequired[InstanceMarketOptions]
    NetworkInterfaces: list[NetworkInterface]
    BlockDeviceMappings: list[BlockDeviceMapping]
    MetadataOptions: MetadataOptions
    TagSpecifications: list[TagSpecification]


class CreateLaunchTemplateRequest(TypedDict):
    LaunchTemplateName: str
    LaunchTemplateData: LaunchTemplateData
    TagSpecifications: list[TagSpecification]


class VpcConfig(TypedDict):
    subnetIds: list[str]
    securityGroupIds: list[str]
    endpointPublicAccess: bool
    endpointPrivateAccess: bool


class AccessConfig(TypedDict):
    authenticationMode: Literal["API"]
    bootstrapClusterCreatorAdminPermissions: bool


class CreateClusterRequest(TypedDict):
    name: str
    version: str
    roleArn: str
    resourcesVpcConfig: VpcConfig
    accessConfig: AccessConfig
    tags: dict[str, str]


class ScalingConfig(TypedDict):
    minSize: int
    maxSize: int
    desiredSize: int


class Taint(TypedDict):
    key: str
    value: str
    effect: Literal["NO_SCHEDULE"]


class LaunchTemplateSpecification(TypedDict):
    name: str
    version: str


class CreateNodegroupRequest(TypedDict):
    """No instanceTypes: the launch template names the instance type (a Capacity Block needs it
    there), and EKS refuses a node group that gives it in both places."""

    clusterName: str
    nodegroupName: str
    scalingConfig: ScalingConfig
    subnets: list[str]
    amiType: str
    nodeRole: str
    labels: dict[str, str]
    taints: list[Taint]
    launchTemplate: LaunchTemplateSpecification
    capacityType: Literal["ON_DEMAND", "CAPACITY_BLOCK"]
    nodeRepairConfig: dict[str, bool]
    tags: dict[str, str]


class EksRequests(TypedDict):
    """The requests in the order they are made: the node group needs the cluster and the template."""

    cluster: CreateClusterRequest
    launch_template: CreateLaunchTemplateRequest
    nodegroup: CreateNodegroupRequest


def nodegroup_name(spec: RunSpec) -> str:
    """The node group's name: its instance type (a cluster of a run has the one node group)."""
    return spec.capacity.instance_type.replace(".", "-")


def launch_template_name(cluster_name: str, spec: RunSpec) -> str:
    """The launch template's name: EC2's are per account and region, so it carries the cluster's."""
    return f"{cluster_name}-{nodegroup_name(spec)}"


def neuron_device_count(instance_type: str) -> int:
    """How many Neuron devices a node of `instance_type` has."""
    return NEURON_DEVICES[instance_type]


def efa_interface_count(instance_type: str) -> int:
    """How many EFA interfaces a node of `instance_type` gets: one per network card, none without EFA."""
    return EFA_INTERFACES.get(instance_type, 0)


def render_eks_requests(
    spec: RunSpec, ids: EksIds, *, cluster_name: str, tags: Mapping[str, str], capacity_block: bool = False
) -> EksRequests:
    """Every request a kind: eks run makes for its cluster and nodes; `tags` go on each resource."""
    template_name = launch_template_name(cluster_name, spec)
    return {
        "cluster": render_cluster_request(spec, ids, cluster_name=cluster_name, tags=tags),
        "launch_template": {
            "LaunchTemplateName": template_name,
            "LaunchTemplateData": render_launch_template_data(spec, ids, tags=tags, capacity_block=capacity_block),
            "TagSpecifications": [{"ResourceType": "launch-template", "Tags": _ec2_tags(tags)}],
        },
        "nodegroup": render_nodegroup_request(
            spec,
            ids,
            cluster_name=cluster_name,
            launch_template=template_name,
            tags=tags,
            capacity_block=capacity_block,
        ),
    }


def render_cluster_request(
    spec: RunSpec, ids: EksIds, *, cluster_name: str, tags: Mapping[str, str]
) -> CreateClusterRequest:
    """EKS CreateCluster: the Kubernetes version and API endpoints of cluster.eks, in its two subnets.
    Access entries are the only way in (authentication mode API): its creator, a step of
    the workflow, gets no standing admin access; the workflow's access entry grants what it needs."""
    eks = spec.cluster.eks_settings
    return {
        "name": cluster_name,
        "version": eks.kubernetes_version,
        "roleArn": ids.cluster_role_arn,
        "resourcesVpcConfig": {
            "subnetIds": [ids.private_subnet_id, ids.control_plane_subnet_id],
            "securityGroupIds": [ids.security_group_id],
            "endpointPublicAccess": eks.endpoint_public_access,
            "endpointPrivateAccess": eks.endpoint_private_access,
        },
        "accessConfig": {"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": False},
        "tags": _eks_tags(tags),
    }


def render_launch_template_data(
    spec: RunSpec, ids: EksIds, *, tags: Mapping[str, str], capacity_block: bool = False
) -> LaunchTemplateData:
    """The launch template's data: the reservation as the capacity target (with the capacity-block
    market for a Capacity Block), one EFA interface per network card, IMDSv2, the root volume, tags."""
    capacity = spec.capacity
    if capacity.reservation_id is not None:
        target: CapacityReservationTarget = {"CapacityReservationId": capacity.reservation_id}
    elif capacity_block:
        raise ValueError("a Capacity Block is targeted by its reservation id; a launch template takes no group for it")
    else:
        assert capacity.reservation_group_arn is not None  # Capacity: exactly one of the two
        target = {"CapacityReservationResourceGroupArn": capacity.reservation_group_arn}
    ec2_tags = _ec2_tags(tags)
    data: LaunchTemplateData = {
        "InstanceType": capacity.instance_type,
        "CapacityReservationSpecification": {"CapacityReservationTarget": target},
        "NetworkInterfaces": _network_interfaces(capacity.instance_type, ids.security_group_id),
        "BlockDeviceMappings": [
            {
                "DeviceName": ROOT_DEVICE_NAME,
                "Ebs": {
                    "VolumeSize": COMPUTE_ROOT_GIB,
                    "VolumeType": "gp3",
                    "Encrypted": True,
                    "DeleteOnTermination": True,
                },
            }
        ],
        "MetadataOptions": {
            "HttpEndpoint": "enabled",
            "HttpTokens": "required",
            "HttpPutResponseHopLimit": METADATA_HOP_LIMIT,
        },
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": ec2_tags},
            {"ResourceType": "volume", "Tags": ec2_tags},
        ],
    }
    if capacity_block:
        data["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    return data


def render_nodegroup_request(
    spec: RunSpec,
    ids: EksIds,
    *,
    cluster_name: str,
    launch_template: str,
    tags: Mapping[str, str],
    capacity_block: bool = False,
) -> CreateNodegroupRequest:
    """EKS CreateNodegroup: capacity.nodes static nodes of the launch template named `launch_template`,
    in the private subnet (a Capacity Block's node group may only name subnets in the block's zone)."""
    nodes = spec.capacity.nodes
    return {
        "clusterName": cluster_name,
        "nodegroupName": nodegroup_name(spec),
        # Static: the reservation is paid for either way, and a job must not wait for a boot.
        "scalingConfig": {"minSize": nodes, "maxSize": nodes, "desiredSize": nodes},
        "subnets": [ids.private_subnet_id],
        "amiType": AMI_TYPE,
        "nodeRole": ids.node_role_arn,
        "labels": {RUN_NAME_LABEL: spec.name},
        "taints": [NEURON_TAINT.copy()],
        "launchTemplate": {"name": launch_template, "version": LAUNCH_TEMPLATE_VERSION},
        "capacityType": "CAPACITY_BLOCK" if capacity_block else "ON_DEMAND",
        # EKS replaces a node that reports unhealthy (a Neuron device or the kubelet failing) itself.
        "nodeRepairConfig": {"enabled": True},
        "tags": _eks_tags(tags),
    }


def _network_interfaces(instance_type: str, security_group_id: str) -> list[NetworkInterface]:
    """One EFA interface per network card: the primary (card 0) at device index 0, each other card's
    at device index 1, as ParallelCluster and the Neuron EKS samples give them. The security group is
    on each interface, since a launch template names its groups on the interfaces or on the instance,
    not both (Amazon EKS User Guide, "Customize managed nodes with launch templates")."""
    count = efa_interface_count(instance_type)
    if count == 0:
        return [
            {
                "NetworkCardIndex": 0,
                "DeviceIndex": 0,
                "Groups": [security_group_id],
                "DeleteOnTermination": True,
                "Description": "trainrun node",
            }
        ]
    return [
        {
            "NetworkCardIndex": card,
            "DeviceIndex": 0 if card == 0 else 1,
            "InterfaceType": "efa",
            "Groups": [security_group_id],
            "DeleteOnTermination": True,
            "Description": f"trainrun EFA, network card {card}",
        }
        for card in range(count)
    ]


def _checked_tags(tags: Mapping[str, str]) -> Mapping[str, str]:
    if len(tags) > MAX_TAGS:
        raise ValueError(f"{len(tags)} tags; EKS and EC2 take at most {MAX_TAGS} on a resource")
    for key, value in tags.items():
        if key.lower().startswith(RESERVED_TAG_PREFIX):
            raise ValueError(f"tag key {key!r} uses the prefix {RESERVED_TAG_PREFIX!r}, which AWS reserves")
        if not 1 <= len(key) <= 128 or len(value) > 256:
            raise ValueError(f"tag {key!r}: keys are 1 to 128 characters and values at most 256")
    return tags


def _eks_tags(tags: Mapping[str, str]) -> dict[str, str]:
    return dict(sorted(_checked_tags(tags).items()))


def _ec2_tags(tags: Mapping[str, str]) -> list[Tag]:
    return [{"Key": key, "Value": value} for key, value in sorted(_checked_tags(tags).items())]
