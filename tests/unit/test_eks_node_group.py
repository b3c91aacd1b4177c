"""What a `cluster.kind: eks` run asks EKS and EC2 for: the cluster, the launch template, the node group."""

from __future__ import annotations

from typing import Any

import botocore.session
import pytest
import yaml
from botocore.validate import ParamValidator
from pydantic import ValidationError

from trainrun.logic.cluster_config import COMPUTE_ROOT_GIB, EFA_INSTANCE_TYPES
from trainrun.logic.eks_node_group import (
    AMI_TYPE,
    EFA_INTERFACES,
    LAUNCH_TEMPLATE_VERSION,
    METADATA_HOP_LIMIT,
    EksIds,
    EksRequests,
    efa_interface_count,
    launch_template_name,
    render_eks_requests,
)
from trainrun.model.run_file import TRAINIUM_INSTANCE_TYPES, RunSpec, parse_run_file

RESERVATION_ID = "cr-0123456789abcdef0"
GROUP_ARN = "arn:aws:resource-groups:us-west-2:123456789012:group/trn1-odcrs"
CLUSTER = "trainrun-bert-phase1-0123456789ab"
TAGS = {"trainrun:run-id": "bert-phase1-0123456789ab", "trainrun:stack": "trainrun", "Name": "trainrun-bert-phase1"}
IDS = EksIds(
    private_subnet_id="subnet-0fedcba9",
    control_plane_subnet_id="subnet-0123456789abcdef0",
    security_group_id="sg-0123456789abcdef0",
    cluster_role_arn="arn:aws:iam::123456789012:role/trainrun-eks-cluster",
    node_role_arn="arn:aws:iam::123456789012:role/trainrun-eks-node",
)
# What a managed node group refuses in its launch template, or what would make it miss the
# reservation (Amazon EKS User Guide, "Customize managed nodes with launch templates").
REFUSED_IN_LAUNCH_TEMPLATE = {
    "IamInstanceProfile",
    "InstanceInitiatedShutdownBehavior",
    "HibernationOptions",
    "Placement",
    "SecurityGroupIds",
    "SecurityGroups",
    "ImageId",
}


def eks_spec(*, instance_type: str = "trn1.32xlarge", group: bool = False, **eks: Any) -> RunSpec:
    target = {"reservation_group_arn": GROUP_ARN} if group else {"reservation_id": RESERVATION_ID}
    document = {
        "name": "bert-phase1",
        "region": "us-west-2",
        "capacity": {**target, "instance_type": instance_type, "nodes": 16, "availability_zone": "us-west-2d"},
        "cluster": {"kind": "eks", **({"eks": eks} if eks else {})},
        "workload": {"source": {"git": "https://github.com/aws-neuron/aws-neuron-samples.git"}, "train": "./train.sh"},
    }
    return parse_run_file(yaml.safe_dump(document, sort_keys=False))


def render(spec: RunSpec | None = None, *, capacity_block: bool = False) -> EksRequests:
    return render_eks_requests(spec or eks_spec(), IDS, cluster_name=CLUSTER, tags=TAGS, capacity_block=capacity_block)


# --- the launch template ----------------------------------------------------------------------


def test_the_launch_template_targets_the_reservation_by_its_id() -> None:
    data = render()["launch_template"]["LaunchTemplateData"]
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": RESERVATION_ID}
    }
    assert data["InstanceType"] == "trn1.32xlarge"
    assert "InstanceMarketOptions" not in data


def test_the_launch_template_targets_a_reservation_group_by_its_arn() -> None:
    data = render(eks_spec(group=True))["launch_template"]["LaunchTemplateData"]
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationResourceGroupArn": GROUP_ARN}
    }


def test_a_capacity_block_gets_its_market_type_and_capacity_type() -> None:
    requests = render(capacity_block=True)
    assert requests["launch_template"]["LaunchTemplateData"]["InstanceMarketOptions"] == {
        "MarketType": "capacity-block"
    }
    assert requests["nodegroup"]["capacityType"] == "CAPACITY_BLOCK"


def test_an_odcr_is_on_demand_capacity() -> None:
    assert render()["nodegroup"]["capacityType"] == "ON_DEMAND"


def test_a_capacity_block_in_a_reservation_group_is_refused() -> None:
    with pytest.raises(ValueError, match="Capacity Block is targeted by its reservation id"):
        render(eks_spec(group=True), capacity_block=True)


@pytest.mark.parametrize(
    ("instance_type", "cards"), [("trn1.32xlarge", 8), ("trn1n.32xlarge", 16), ("trn2.48xlarge", 16)]
)
def test_each_network_card_gets_one_efa_interface_in_the_security_group(instance_type: str, cards: int) -> None:
    interfaces = render(eks_spec(instance_type=instance_type))["launch_template"]["LaunchTemplateData"][
        "NetworkInterfaces"
    ]
    assert [interface["NetworkCardIndex"] for interface in interfaces] == list(range(cards))
    # The primary interface at device index 0 on card 0; each other card's at device index 1
    assert [interface["DeviceIndex"] for interface in interfaces] == [0] + [1] * (cards - 1)
    for interface in interfaces:
        assert interface.get("InterfaceType") == "efa"
        assert interface["Groups"] == [IDS.security_group_id]
        assert interface["DeleteOnTermination"] is True
        # A managed node group refuses a subnet in a launch template's interface (its own subnets place it)
        assert "SubnetId" not in interface
        assert "AssociatePublicIpAddress" not in interface
    assert efa_interface_count(instance_type) == cards


def test_a_trainium_type_without_efa_gets_one_plain_interface() -> None:
    interfaces = render(eks_spec(instance_type="trn1.2xlarge"))["launch_template"]["LaunchTemplateData"][
        "NetworkInterfaces"
    ]
    assert len(interfaces) == 1
    assert (interfaces[0]["NetworkCardIndex"], interfaces[0]["DeviceIndex"]) == (0, 0)
    assert "InterfaceType" not in interfaces[0]
    assert efa_interface_count("trn1.2xlarge") == 0


def test_the_efa_table_has_the_trainium_types_cluster_config_enables_efa_for() -> None:
    assert set(EFA_INTERFACES) == set(EFA_INSTANCE_TYPES)
    assert set(EFA_INTERFACES) <= set(TRAINIUM_INSTANCE_TYPES)


@pytest.mark.parametrize(("group", "capacity_block"), [(False, False), (True, False), (False, True)])
def test_the_launch_template_has_nothing_a_managed_node_group_refuses(group: bool, capacity_block: bool) -> None:
    data = render(eks_spec(group=group), capacity_block=capacity_block)["launch_template"]["LaunchTemplateData"]
    assert not set(data) & REFUSED_IN_LAUNCH_TEMPLATE


def test_the_nodes_require_imdsv2_with_a_hop_for_their_pods() -> None:
    options = render()["launch_template"]["LaunchTemplateData"]["MetadataOptions"]
    assert options == {
        "HttpEndpoint": "enabled",
        "HttpTokens": "required",
        "HttpPutResponseHopLimit": METADATA_HOP_LIMIT,
    }


def test_the_root_volume_is_a_compute_nodes_as_on_parallelcluster_encrypted() -> None:
    [root] = render()["launch_template"]["LaunchTemplateData"]["BlockDeviceMappings"]
    assert root["Ebs"] == {
        "VolumeSize": COMPUTE_ROOT_GIB,
        "VolumeType": "gp3",
        "Encrypted": True,
        "DeleteOnTermination": True,
    }


def test_the_instances_their_volumes_and_the_template_carry_the_runs_tags() -> None:
    template = render()["launch_template"]
    tags = [{"Key": key, "Value": TAGS[key]} for key in sorted(TAGS)]
    assert template["LaunchTemplateData"]["TagSpecifications"] == [
        {"ResourceType": "instance", "Tags": tags},
        {"ResourceType": "volume", "Tags": tags},
    ]
    assert template["TagSpecifications"] == [{"ResourceType": "launch-template", "Tags": tags}]


# --- the node group ---------------------------------------------------------------------------


def test_the_node_group_is_static_on_the_neuron_ami_in_the_private_subnet() -> None:
    nodegroup = render()["nodegroup"]
    assert nodegroup["clusterName"] == CLUSTER
    assert nodegroup["scalingConfig"] == {"minSize": 16, "maxSize": 16, "desiredSize": 16}
    assert nodegroup["subnets"] == [IDS.private_subnet_id]
    assert nodegroup["amiType"] == AMI_TYPE == "AL2023_x86_64_NEURON"
    assert nodegroup["nodeRole"] == IDS.node_role_arn
    assert nodegroup["nodeRepairConfig"] == {"enabled": True}
    assert nodegroup["labels"] == {"trainrun/run-name": "bert-phase1"}
    assert nodegroup["tags"] == TAGS


def test_the_node_group_is_tainted_for_neuron_pods_only() -> None:
    assert render()["nodegroup"]["taints"] == [
        {"key": "aws.amazon.com/neuron", "value": "true", "effect": "NO_SCHEDULE"}
    ]


def test_the_node_group_uses_the_launch_template_it_is_rendered_with_and_names_no_instance_type() -> None:
    requests = render()
    nodegroup = requests["nodegroup"]
    assert nodegroup["launchTemplate"] == {
        "name": requests["launch_template"]["LaunchTemplateName"],
        "version": LAUNCH_TEMPLATE_VERSION,
    }
    assert requests["launch_template"]["LaunchTemplateName"] == launch_template_name(CLUSTER, eks_spec())
    # EKS refuses a node group that names the instance type in the request and the template both
    assert "instanceTypes" not in nodegroup
    assert "InstanceType" in requests["launch_template"]["LaunchTemplateData"]


# --- the cluster ------------------------------------------------------------------------------


def test_the_cluster_has_the_run_files_version_and_endpoints_in_the_private_and_control_plane_subnets() -> None:
    cluster = render(eks_spec(kubernetes_version="1.34", endpoint_private_access=True))["cluster"]
    assert (cluster["name"], cluster["version"], cluster["roleArn"]) == (CLUSTER, "1.34", IDS.cluster_role_arn)
    assert cluster["resourcesVpcConfig"] == {
        "subnetIds": [IDS.private_subnet_id, IDS.control_plane_subnet_id],
        "securityGroupIds": [IDS.security_group_id],
        "endpointPublicAccess": True,
        "endpointPrivateAccess": True,
    }
    assert cluster["tags"] == TAGS


def test_the_cluster_is_reached_by_access_entries_only_and_its_creator_is_no_admin() -> None:
    assert render()["cluster"]["accessConfig"] == {
        "authenticationMode": "API",
        "bootstrapClusterCreatorAdminPermissions": False,
    }


# --- the requests as the APIs take them ---------------------------------------------------------


@pytest.mark.parametrize("instance_type", TRAINIUM_INSTANCE_TYPES)
@pytest.mark.parametrize(("group", "capacity_block"), [(False, False), (True, False), (False, True)])
def test_every_request_is_valid_for_its_api(instance_type: str, group: bool, capacity_block: bool) -> None:
    requests = render(eks_spec(instance_type=instance_type, group=group), capacity_block=capacity_block)
    session = botocore.session.get_session()
    for service, operation, params in (
        ("eks", "CreateCluster", requests["cluster"]),
        ("ec2", "CreateLaunchTemplate", requests["launch_template"]),
        ("eks", "CreateNodegroup", requests["nodegroup"]),
    ):
        shape = session.get_service_model(service).operation_model(operation).input_shape
        report = ParamValidator().validate(params, shape)
        assert not report.has_errors(), report.generate_report()


# --- what comes in ------------------------------------------------------------------------------


def test_a_tag_with_the_prefix_aws_reserves_is_refused() -> None:
    with pytest.raises(ValueError, match="which AWS reserves"):
        render_eks_requests(eks_spec(), IDS, cluster_name=CLUSTER, tags={"aws:cloudformation:stack-name": "x"})


def test_more_tags_than_a_resource_takes_are_refused() -> None:
    with pytest.raises(ValueError, match="at most 50"):
        render_eks_requests(eks_spec(), IDS, cluster_name=CLUSTER, tags={f"k{i}": "v" for i in range(51)})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("control_plane_subnet_id", "subnet-xyz"),
        ("security_group_id", "sg-0123"),
        ("node_role_arn", "arn:aws:iam::123456789012:user/someone"),
    ],
)
def test_ids_that_are_not_what_they_say_are_refused(field: str, value: str) -> None:
    with pytest.raises(ValidationError, match=field):
        EksIds(**{**IDS.model_dump(), field: value})


def test_the_placeholder_ids_pass_the_checks() -> None:
    assert EksIds.model_validate(EksIds.placeholders().model_dump()) == EksIds.placeholders()
