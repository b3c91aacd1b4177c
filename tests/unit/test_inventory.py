"""The inventory against moto with the FSx emulator: everything tagged with a stack, by kind and run.

Each resource is created directly with the boto3 client, tagged as the workflow tags it, so a
test states exactly which tags a resource carries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from trainrun.adapters.inventory import TaggedResource, tagged_resources
from trainrun.model.tags import RUN_ID, STACK, run_tags

from .conftest import REGION

ZONE = "us-west-2b"
STACK_NAME = "trainrun-test"
OTHER_STACK = "trainrun-other"
RUN = "bert-large-0123456789ab"
# Any AMI id will do: moto launches an instance from an id it does not know.
AMI = "ami-12c6146b"


def tag_spec(resource_type: str, tags: dict[str, str]) -> dict[str, Any]:
    return {"TagSpecifications": [{"ResourceType": resource_type, "Tags": fsx_tags(tags)}]}


def fsx_tags(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value} for key, value in tags.items()]


def untagged_vpc(ec2: Any) -> str:
    vpc_id: str = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    return vpc_id


def untagged_subnet(ec2: Any) -> str:
    subnet_id: str = ec2.create_subnet(VpcId=untagged_vpc(ec2), CidrBlock="10.9.0.0/24", AvailabilityZone=ZONE)[
        "Subnet"
    ]["SubnetId"]
    return subnet_id


# One creator per kind: given the clients and the tags, create one resource of that kind; its id.
Creator = Callable[[Any, Any, dict[str, str]], str]


def create_vpc(ec2: Any, fsx: Any, tags: dict[str, str]) -> str:
    return str(ec2.create_vpc(CidrBlock="10.1.0.0/16", **tag_spec("vpc", tags))["Vpc"]["VpcId"])


def create_subnet(ec2: Any, fsx: Any, tags: dict[str, str]) -> str:
    created = ec2.create_subnet(
        VpcId=untagged_vpc(ec2), CidrBlock="10.9.1.0/24", AvailabilityZone=ZONE, **tag_spec("subnet", tags)
    )
    return str(created["Subnet"]["SubnetId"])


def create_internet_gateway(ec2: Any, fsx: Any, tags: dict[str, str]) -> str:
    return str(
        ec2.create_internet_gateway(**tag_spec("internet-gateway", tags))["InternetGateway"]["InternetGatewayId"]
    )


def create_route_table(ec2: Any, fsx: Any, tags: dict[str, str]) -> str:
    return str(
        ec2.create_route_table(VpcId=untagged_vpc(ec2), **tag_spec("route-table", tags))["RouteTable"]["RouteTableId"]
    )


def create_security_group(ec2: Any, fsx: Any, tags: dict[str, str]) -> str:
    created = ec2.create_security_group(
        GroupName="efa", Description="efa", VpcId=untagged_vpc(ec2), **tag_spec("security-group", tags)
    )
    return str(created["GroupId"])


def create_nat_gateway(ec2: Any, fsx: Any, tags: dict[str, str]) -> str:
    allocation_id = ec2.allocate_address(Domain="vpc")["AllocationId"]
    created = ec2.create_nat_gateway(
        SubnetId=untagged_subnet(ec2), AllocationId=allocation_id, **tag_spec("natgateway", tags)
    )
    return str(created["NatGateway"]["NatGatewayId"])


def create_vpc_endpoint(ec2: Any, fsx: Any, tags: dict[str, str]) -> str:
    created = ec2.create_vpc_endpoint(
        VpcEndpointType="Gateway",
        VpcId=untagged_vpc(ec2),
        ServiceName=f"com.amazonaws.{REGION}.s3",
        **tag_spec("vpc-endpoint", tags),
    )
    return str(created["VpcEndpoint"]["VpcEndpointId"])


def create_elastic_ip(ec2: Any, fsx: Any, tags: dict[str, str]) -> str:
    return str(ec2.allocate_address(Domain="vpc", **tag_spec("elastic-ip", tags))["AllocationId"])


def create_instance(ec2: Any, fsx: Any, tags: dict[str, str]) -> str:
    created = ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1, **tag_spec("instance", tags))
    return str(created["Instances"][0]["InstanceId"])


def create_file_system(ec2: Any, fsx: Any, tags: dict[str, str]) -> str:
    created = fsx.create_file_system(
        FileSystemType="LUSTRE",
        FileSystemTypeVersion="2.15",
        StorageCapacity=1200,
        SubnetIds=[untagged_subnet(ec2)],
        LustreConfiguration={"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250},
        **({"Tags": fsx_tags(tags)} if tags else {}),
    )
    return str(created["FileSystem"]["FileSystemId"])


def create_data_repository_association(ec2: Any, fsx: Any, tags: dict[str, str]) -> str:
    file_system_id = create_file_system(ec2, fsx, {})
    # The emulator's file system is AVAILABLE on its second describe, and only then takes a link.
    for _ in range(2):
        fsx.describe_file_systems(FileSystemIds=[file_system_id])
    created = fsx.create_data_repository_association(
        FileSystemId=file_system_id,
        FileSystemPath="/data",
        DataRepositoryPath="s3://trainrun-data/wiki",
        Tags=fsx_tags(tags),
    )
    return str(created["Association"]["AssociationId"])


CREATORS: dict[str, Creator] = {
    "vpc": create_vpc,
    "subnet": create_subnet,
    "internet-gateway": create_internet_gateway,
    "route-table": create_route_table,
    "security-group": create_security_group,
    "nat-gateway": create_nat_gateway,
    "vpc-endpoint": create_vpc_endpoint,
    "elastic-ip": create_elastic_ip,
    "instance": create_instance,
    "file-system": create_file_system,
    "data-repository-association": create_data_repository_association,
}


def inventory(ec2: Any, fsx: Any, stack: str = STACK_NAME) -> list[TaggedResource]:
    return tagged_resources(ec2, fsx, key=STACK, value=stack)


@pytest.mark.parametrize("kind", CREATORS)
def test_a_resource_tagged_with_the_stack_is_found_with_its_kind_and_run_id(ec2: Any, fsx: Any, kind: str) -> None:
    # Given one resource of the kind, tagged as a run of the stack tags it
    resource_id = CREATORS[kind](ec2, fsx, run_tags(RUN, STACK_NAME))
    # When the stack's resources are listed
    found = inventory(ec2, fsx)
    # Then it is the one found, with its kind and run id
    assert found == [TaggedResource(kind=kind, id=resource_id, run_id=RUN)]


def test_resources_of_another_stack_are_not_found(ec2: Any, fsx: Any) -> None:
    # Given one resource of every kind, tagged by a run of another stack
    for create in CREATORS.values():
        create(ec2, fsx, run_tags(RUN, OTHER_STACK))
    # When this stack's resources are listed
    found = inventory(ec2, fsx)
    # Then there are none
    assert found == []


def test_a_resource_without_the_stack_tag_is_not_found(ec2: Any, fsx: Any) -> None:
    # Given a VPC that carries a run id but no stack tag
    create_vpc(ec2, fsx, {RUN_ID: RUN, "Name": "someone-else"})
    # When the stack's resources are listed
    found = inventory(ec2, fsx)
    # Then it is not among them
    assert found == []


def test_a_resource_with_the_stack_tag_but_no_run_id_is_found_without_one(ec2: Any, fsx: Any) -> None:
    # Given a VPC tagged with the stack only (a run id was never written)
    vpc_id = create_vpc(ec2, fsx, {STACK: STACK_NAME})
    # When the stack's resources are listed
    found = inventory(ec2, fsx)
    # Then it is found, with no run id
    assert found == [TaggedResource(kind="vpc", id=vpc_id, run_id=None)]


def test_a_deleted_nat_gateway_is_not_found(ec2: Any, fsx: Any) -> None:
    # Given a run's NAT gateway that was deleted (moto keeps it as 'deleted', as AWS does for a while)
    nat_id = create_nat_gateway(ec2, fsx, run_tags(RUN, STACK_NAME))
    ec2.delete_nat_gateway(NatGatewayId=nat_id)
    # When the stack's resources are listed
    found = inventory(ec2, fsx)
    # Then the NAT gateway is not among them
    assert [r for r in found if r.kind == "nat-gateway"] == []


def test_a_terminated_instance_is_not_found(ec2: Any, fsx: Any) -> None:
    # Given a run's instance that was terminated
    instance_id = create_instance(ec2, fsx, run_tags(RUN, STACK_NAME))
    ec2.terminate_instances(InstanceIds=[instance_id])
    # When the stack's resources are listed
    found = inventory(ec2, fsx)
    # Then the instance is not among them
    assert found == []


def test_a_stopped_instance_is_still_found(ec2: Any, fsx: Any) -> None:
    # Given a run's instance that was stopped (its volumes still cost money)
    instance_id = create_instance(ec2, fsx, run_tags(RUN, STACK_NAME))
    ec2.stop_instances(InstanceIds=[instance_id])
    # When the stack's resources are listed
    found = inventory(ec2, fsx)
    # Then the instance is among them
    assert found == [TaggedResource(kind="instance", id=instance_id, run_id=RUN)]


def test_resources_of_several_runs_are_told_apart_by_run_id(ec2: Any, fsx: Any) -> None:
    # Given a VPC of one run and a file system of another, both of the stack
    vpc_id = create_vpc(ec2, fsx, run_tags(RUN, STACK_NAME))
    file_system_id = create_file_system(ec2, fsx, run_tags("gpt-small-0123456789ab", STACK_NAME))
    # When the stack's resources are listed
    found = inventory(ec2, fsx)
    # Then each carries its own run id
    assert found == [
        TaggedResource(kind="vpc", id=vpc_id, run_id=RUN),
        TaggedResource(kind="file-system", id=file_system_id, run_id="gpt-small-0123456789ab"),
    ]
