"""The local EC2 refuses to delete a network that is still in use, as EC2 does (DependencyViolation)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from botocore.exceptions import ClientError

from trainrun.local import ec2_dependencies

AMI = "ami-04681a1dbd79675a5"  # one of the AMIs moto loads by default


@dataclass(frozen=True)
class Network:
    vpc_id: str
    subnet_id: str
    group_id: str
    gateway_id: str


@pytest.fixture
def strict(ec2: Any) -> Iterator[Any]:
    ec2_dependencies.install()
    yield ec2
    ec2_dependencies.uninstall()


@pytest.fixture
def network(strict: Any) -> Network:
    vpc_id = strict.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet_id = strict.create_subnet(VpcId=vpc_id, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    group_id = strict.create_security_group(GroupName="cluster", Description="cluster", VpcId=vpc_id)["GroupId"]
    gateway_id = strict.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    strict.attach_internet_gateway(InternetGatewayId=gateway_id, VpcId=vpc_id)
    return Network(vpc_id, subnet_id, group_id, gateway_id)


def launch(ec2: Any, network: Network, **extra: Any) -> str:
    return str(
        ec2.run_instances(
            ImageId=AMI,
            MinCount=1,
            MaxCount=1,
            SubnetId=network.subnet_id,
            SecurityGroupIds=[network.group_id],
            **extra,
        )["Instances"][0]["InstanceId"]
    )


def refusal(call: Any, **params: Any) -> str:
    with pytest.raises(ClientError) as raised:
        call(**params)
    assert raised.value.response["Error"]["Code"] == "DependencyViolation"
    return str(raised.value.response["Error"]["Message"])


def test_a_subnet_security_group_and_vpc_with_a_running_instance_cannot_be_deleted(
    strict: Any, network: Network
) -> None:
    # Given an instance running in the subnet, in the security group
    launch(strict, network)
    # When each is deleted, then EC2 refuses with DependencyViolation, in EC2's words
    assert refusal(strict.delete_subnet, SubnetId=network.subnet_id) == (
        f"The subnet '{network.subnet_id}' has dependencies and cannot be deleted."
    )
    assert refusal(strict.delete_security_group, GroupId=network.group_id) == (
        f"resource {network.group_id} has a dependent object"
    )
    assert refusal(strict.delete_vpc, VpcId=network.vpc_id) == (
        f"The vpc '{network.vpc_id}' has dependencies and cannot be deleted."
    )


def test_the_internet_gateway_cannot_be_detached_while_an_instance_has_a_public_address(
    strict: Any, network: Network
) -> None:
    strict.modify_subnet_attribute(SubnetId=network.subnet_id, MapPublicIpOnLaunch={"Value": True})
    launch(strict, network)

    message = refusal(strict.detach_internet_gateway, InternetGatewayId=network.gateway_id, VpcId=network.vpc_id)

    assert message.startswith(f"Network {network.vpc_id} has some mapped public address(es)")


def test_once_the_instance_is_terminated_the_network_can_be_deleted(strict: Any, network: Network) -> None:
    instance_id = launch(strict, network)
    strict.terminate_instances(InstanceIds=[instance_id])

    strict.detach_internet_gateway(InternetGatewayId=network.gateway_id, VpcId=network.vpc_id)
    strict.delete_subnet(SubnetId=network.subnet_id)
    strict.delete_security_group(GroupId=network.group_id)
    strict.delete_vpc(VpcId=network.vpc_id)

    assert strict.describe_vpcs(Filters=[{"Name": "vpc-id", "Values": [network.vpc_id]}])["Vpcs"] == []


def test_a_deleted_nat_gateway_no_longer_holds_its_subnet(strict: Any, network: Network) -> None:
    allocation_id = strict.allocate_address(Domain="vpc")["AllocationId"]
    nat_id = strict.create_nat_gateway(SubnetId=network.subnet_id, AllocationId=allocation_id)["NatGateway"][
        "NatGatewayId"
    ]
    refusal(strict.delete_subnet, SubnetId=network.subnet_id)

    strict.delete_nat_gateway(NatGatewayId=nat_id)

    strict.delete_subnet(SubnetId=network.subnet_id)
