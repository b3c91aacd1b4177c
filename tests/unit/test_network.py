"""The network adapter against moto: build, adopt, wait for, and tear down a run's network.

Real boto3 clients talk to `moto.mock_aws` in process. moto's NAT gateways are 'available' as soon
as they are created and 'deleted' as soon as they are deleted, so the in-between states are set on
moto's own NAT gateway object; throttling, which moto never answers, uses botocore's Stubber.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends
from moto.ec2.models.nat_gateways import NatGatewayBackend

from trainrun.adapters.network import (
    COMPONENT,
    EKS_DISALLOWED_ZONE_IDS,
    NetworkFailed,
    NetworkInvalid,
    delete_network,
    describe_existing_network,
    ensure_network,
    find_run_network,
    network_progress,
    second_zone,
)
from trainrun.errors import TransientAwsError
from trainrun.model.resources import NetworkIds, Progress
from trainrun.model.tags import RUN_ID, STACK

REGION = "us-west-2"
ZONE = "us-west-2b"
RUN = "run-20250101-bert"
OTHER_RUN = "run-20250101-other"
STACK_NAME = "trainrun-test"
CIDR = "10.20.0.0/16"
# The network of a ParallelCluster run (an EKS run's adds the control plane's subnet).
ID_FIELDS = [name for name in NetworkIds.model_fields if name not in ("created", "control_plane_subnet_id")]
CONTROL_PLANE_ZONE = "us-west-2a"
COMPONENT_OF = {
    "control_plane_subnet_id": "control-plane-subnet",
    "vpc_id": "vpc",
    "public_subnet_id": "public-subnet",
    "private_subnet_id": "private-subnet",
    "internet_gateway_id": "internet-gateway",
    "eip_allocation_id": "eip",
    "nat_gateway_id": "nat-gateway",
    "public_route_table_id": "public-route-table",
    "private_route_table_id": "private-route-table",
    "security_group_id": "security-group",
    "s3_endpoint_id": "s3-endpoint",
}


@pytest.fixture
def ec2(aws: None) -> Any:
    return boto3.client("ec2", region_name=REGION)


@pytest.fixture
def tag_writes(ec2: Any) -> Iterator[list[dict[str, Any]]]:
    """Every CreateTags call made through the client (there must be none: tags go on at creation)."""
    calls: list[dict[str, Any]] = []
    handler = ec2.meta.events.register("provide-client-params.ec2.CreateTags", lambda params, **_: calls.append(params))
    yield calls
    ec2.meta.events.unregister("provide-client-params.ec2.CreateTags", handler)


def build(
    ec2: Any,
    run_id: str = RUN,
    known: NetworkIds | None = None,
    cidr: str = CIDR,
    control_plane_zone: str | None = None,
) -> NetworkIds:
    return ensure_network(
        ec2,
        run_id=run_id,
        stack=STACK_NAME,
        cidr=cidr,
        availability_zone=ZONE,
        control_plane_zone=control_plane_zone,
        known=known,
    )


def tear_down(ec2: Any, run_id: str, known: NetworkIds, passes: int = 5) -> Progress:
    """The wait loop of the Tear down state, without the waiting."""
    for _ in range(passes):
        progress = delete_network(ec2, run_id=run_id, known=known)
        if progress.done:
            return progress
    return progress


def tagged(ec2: Any, run_id: str) -> dict[str, list[str]]:
    """Every live resource of every type the network uses that carries the run's tag."""
    run = [{"Name": f"tag:{RUN_ID}", "Values": [run_id]}]
    return {
        "vpcs": [v["VpcId"] for v in ec2.describe_vpcs(Filters=run)["Vpcs"]],
        "subnets": [s["SubnetId"] for s in ec2.describe_subnets(Filters=run)["Subnets"]],
        "internet_gateways": [
            i["InternetGatewayId"] for i in ec2.describe_internet_gateways(Filters=run)["InternetGateways"]
        ],
        "addresses": [a["AllocationId"] for a in ec2.describe_addresses(Filters=run)["Addresses"]],
        # moto ignores tag filters on DescribeNatGateways: check the tag here.
        "nat_gateways": [
            n["NatGatewayId"]
            for n in ec2.describe_nat_gateways(Filter=run)["NatGateways"]
            if n["State"] not in ("deleting", "deleted") and {"Key": RUN_ID, "Value": run_id} in n.get("Tags", [])
        ],
        "route_tables": [r["RouteTableId"] for r in ec2.describe_route_tables(Filters=run)["RouteTables"]],
        "security_groups": [g["GroupId"] for g in ec2.describe_security_groups(Filters=run)["SecurityGroups"]],
        "vpc_endpoints": [
            e["VpcEndpointId"]
            for e in ec2.describe_vpc_endpoints(Filters=run)["VpcEndpoints"]
            if e["State"].lower() != "deleted"
        ],
    }


def tags_of(ec2: Any, field: str, resource_id: str) -> dict[str, str]:
    describe = {
        "vpc_id": lambda: ec2.describe_vpcs(VpcIds=[resource_id])["Vpcs"],
        "public_subnet_id": lambda: ec2.describe_subnets(SubnetIds=[resource_id])["Subnets"],
        "private_subnet_id": lambda: ec2.describe_subnets(SubnetIds=[resource_id])["Subnets"],
        "control_plane_subnet_id": lambda: ec2.describe_subnets(SubnetIds=[resource_id])["Subnets"],
        "internet_gateway_id": lambda: ec2.describe_internet_gateways(InternetGatewayIds=[resource_id])[
            "InternetGateways"
        ],
        "eip_allocation_id": lambda: ec2.describe_addresses(AllocationIds=[resource_id])["Addresses"],
        "nat_gateway_id": lambda: ec2.describe_nat_gateways(NatGatewayIds=[resource_id])["NatGateways"],
        "public_route_table_id": lambda: ec2.describe_route_tables(RouteTableIds=[resource_id])["RouteTables"],
        "private_route_table_id": lambda: ec2.describe_route_tables(RouteTableIds=[resource_id])["RouteTables"],
        "security_group_id": lambda: ec2.describe_security_groups(GroupIds=[resource_id])["SecurityGroups"],
        "s3_endpoint_id": lambda: ec2.describe_vpc_endpoints(VpcEndpointIds=[resource_id])["VpcEndpoints"],
    }[field]
    (item,) = describe()
    return {tag["Key"]: tag["Value"] for tag in item.get("Tags", [])}


def route_table(ec2: Any, route_table_id: str) -> dict[str, Any]:
    table: dict[str, Any] = ec2.describe_route_tables(RouteTableIds=[route_table_id])["RouteTables"][0]
    return table


def default_route(ec2: Any, route_table_id: str) -> dict[str, Any]:
    routes = route_table(ec2, route_table_id)["Routes"]
    return next(route for route in routes if route.get("DestinationCidrBlock") == "0.0.0.0/0")


def moto_nat(nat_gateway_id: str) -> Any:
    return ec2_backends[DEFAULT_ACCOUNT_ID][REGION].nat_gateways[nat_gateway_id]


def tag_spec(resource_type: str, component: str, run_id: str = RUN) -> list[dict[str, Any]]:
    tags = {RUN_ID: run_id, STACK: STACK_NAME, COMPONENT: component}
    return [{"ResourceType": resource_type, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]


# --- build ------------------------------------------------------------------------------------


def test_ensure_network_creates_every_piece(ec2: Any) -> None:
    # Given an account with only the default VPC
    # When the network is built
    ids = build(ec2)
    # Then every id is set and the run created it
    assert ids.created is True
    assert all(getattr(ids, name) for name in ID_FIELDS), ids


def test_every_resource_is_tagged_at_creation_with_run_component_and_name(
    ec2: Any, tag_writes: list[dict[str, Any]]
) -> None:
    # Given a new network
    ids = build(ec2)
    # Then every resource carries the run's tags, its component and its Name
    for name in ID_FIELDS:
        tags = tags_of(ec2, name, getattr(ids, name))
        component = COMPONENT_OF[name]
        assert tags[RUN_ID] == RUN, name
        assert tags[STACK] == STACK_NAME, name
        assert tags[COMPONENT] == component, name
        assert tags["Name"] == f"trainrun-{RUN}-{component}", name
    # And no tag was ever added after the fact
    assert tag_writes == []


def test_vpc_has_dns_support_and_hostnames_on(ec2: Any) -> None:
    ids = build(ec2)
    support = ec2.describe_vpc_attribute(VpcId=ids.vpc_id, Attribute="enableDnsSupport")
    hostnames = ec2.describe_vpc_attribute(VpcId=ids.vpc_id, Attribute="enableDnsHostnames")
    assert support["EnableDnsSupport"]["Value"] is True
    assert hostnames["EnableDnsHostnames"]["Value"] is True


def test_subnets_split_the_cidr_in_two_halves_in_the_zone(ec2: Any) -> None:
    # Given a network built from a /16
    ids = build(ec2)
    # Then the public and private subnets are its two /17 halves, in the run's zone
    subnets = {
        s["SubnetId"]: s
        for s in ec2.describe_subnets(SubnetIds=[ids.public_subnet_id, ids.private_subnet_id])["Subnets"]
    }
    public, private = subnets[ids.public_subnet_id], subnets[ids.private_subnet_id]
    assert (public["CidrBlock"], private["CidrBlock"]) == ("10.20.0.0/17", "10.20.128.0/17")
    assert public["AvailabilityZone"] == private["AvailabilityZone"] == ZONE
    assert public["VpcId"] == private["VpcId"] == ids.vpc_id
    # And only the public one gives instances a public address
    assert public["MapPublicIpOnLaunch"] is True
    assert private["MapPublicIpOnLaunch"] is False


def test_an_eks_network_adds_the_control_plane_s_subnet_in_a_second_zone_from_the_public_half(ec2: Any) -> None:
    # Given a network built from a /16 for an EKS run, whose control plane needs a second zone
    ids = build(ec2, control_plane_zone=CONTROL_PLANE_ZONE)
    subnet_ids = [ids.public_subnet_id, ids.control_plane_subnet_id, ids.private_subnet_id]
    subnets = {s["SubnetId"]: s for s in ec2.describe_subnets(SubnetIds=subnet_ids)["Subnets"]}
    public, control_plane, private = (subnets[i] for i in subnet_ids)
    # Then the public half gives its second quarter to the control plane's subnet, in the other zone
    assert (public["CidrBlock"], control_plane["CidrBlock"], private["CidrBlock"]) == (
        "10.20.0.0/18",
        "10.20.64.0/18",
        "10.20.128.0/17",
    )
    assert (public["AvailabilityZone"], private["AvailabilityZone"]) == (ZONE, ZONE)
    assert control_plane["AvailabilityZone"] == CONTROL_PLANE_ZONE
    assert tags_of(ec2, "control_plane_subnet_id", control_plane["SubnetId"])[COMPONENT] == "control-plane-subnet"
    # And it routes through the private route table
    (table,) = ec2.describe_route_tables(RouteTableIds=[ids.private_route_table_id])["RouteTables"]
    assert ids.control_plane_subnet_id in {a.get("SubnetId") for a in table["Associations"]}
    # And building it again adopts it, and the teardown deletes it with the rest
    assert build(ec2, known=ids, control_plane_zone=CONTROL_PLANE_ZONE) == ids
    assert tear_down(ec2, RUN, ids, passes=10).done
    assert ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [ids.vpc_id]}])["Subnets"] == []


def test_internet_gateway_is_attached_to_the_vpc(ec2: Any) -> None:
    ids = build(ec2)
    (gateway,) = ec2.describe_internet_gateways(InternetGatewayIds=[ids.internet_gateway_id])["InternetGateways"]
    assert [attachment["VpcId"] for attachment in gateway["Attachments"]] == [ids.vpc_id]


def test_nat_gateway_is_in_the_public_subnet_with_the_runs_elastic_ip(ec2: Any) -> None:
    ids = build(ec2)
    (nat,) = ec2.describe_nat_gateways(NatGatewayIds=[ids.nat_gateway_id])["NatGateways"]
    (address,) = ec2.describe_addresses(AllocationIds=[ids.eip_allocation_id])["Addresses"]
    assert nat["SubnetId"] == ids.public_subnet_id
    assert [a["AllocationId"] for a in nat["NatGatewayAddresses"]] == [ids.eip_allocation_id]
    assert address["Domain"] == "vpc"


def test_public_subnet_routes_to_the_internet_gateway(ec2: Any) -> None:
    ids = build(ec2)
    assert default_route(ec2, ids.public_route_table_id).get("GatewayId") == ids.internet_gateway_id
    associations = route_table(ec2, ids.public_route_table_id)["Associations"]
    assert [a["SubnetId"] for a in associations] == [ids.public_subnet_id]


def test_private_subnet_routes_to_the_nat_gateway(ec2: Any) -> None:
    ids = build(ec2)
    assert default_route(ec2, ids.private_route_table_id).get("NatGatewayId") == ids.nat_gateway_id
    associations = route_table(ec2, ids.private_route_table_id)["Associations"]
    assert [a["SubnetId"] for a in associations] == [ids.private_subnet_id]


def test_security_group_allows_all_traffic_within_itself_and_all_out(ec2: Any) -> None:
    # Given a new network
    ids = build(ec2)
    (group,) = ec2.describe_security_groups(GroupIds=[ids.security_group_id])["SecurityGroups"]
    # Then ingress is all traffic from the group itself, nothing else
    assert [(r["IpProtocol"], [p["GroupId"] for p in r["UserIdGroupPairs"]]) for r in group["IpPermissions"]] == [
        ("-1", [ids.security_group_id])
    ]
    assert all(not r.get("IpRanges") for r in group["IpPermissions"])
    # And egress is all traffic to the group itself (EFA needs it) and to anywhere
    egress = [r for r in group["IpPermissionsEgress"] if r["IpProtocol"] == "-1"]
    assert {p["GroupId"] for r in egress for p in r.get("UserIdGroupPairs", [])} == {ids.security_group_id}
    assert {c["CidrIp"] for r in egress for c in r.get("IpRanges", [])} == {"0.0.0.0/0"}


def test_s3_gateway_endpoint_is_on_both_route_tables(ec2: Any) -> None:
    ids = build(ec2)
    (endpoint,) = ec2.describe_vpc_endpoints(VpcEndpointIds=[ids.s3_endpoint_id])["VpcEndpoints"]
    assert endpoint["ServiceName"] == f"com.amazonaws.{REGION}.s3"
    assert endpoint["VpcEndpointType"] == "Gateway"
    assert sorted(endpoint["RouteTableIds"]) == sorted([ids.public_route_table_id, ids.private_route_table_id])


def test_building_twice_creates_nothing_more(ec2: Any) -> None:
    # Given a network already built
    first = build(ec2)
    before = tagged(ec2, RUN)
    # When the step runs again, with and without the recorded ids
    again = build(ec2, known=first)
    blind = build(ec2)
    # Then it returns the same network, and the run owns exactly what it owned before
    assert again == blind == first
    assert tagged(ec2, RUN) == before
    assert {kind: len(ids) for kind, ids in before.items()} == {
        "vpcs": 1,
        "subnets": 2,
        "internet_gateways": 1,
        "addresses": 1,
        "nat_gateways": 1,
        "route_tables": 2,
        "security_groups": 1,
        "vpc_endpoints": 1,
    }
    # And no route or association was doubled
    assert len(route_table(ec2, first.public_route_table_id)["Associations"]) == 1
    assert len(route_table(ec2, first.private_route_table_id)["Associations"]) == 1


def test_a_crashed_attempt_is_adopted_not_duplicated(ec2: Any) -> None:
    # Given a first attempt that created the VPC and subnets, then died before recording them
    vpc_id = ec2.create_vpc(CidrBlock=CIDR, TagSpecifications=tag_spec("vpc", "vpc"))["Vpc"]["VpcId"]
    public_id = ec2.create_subnet(
        VpcId=vpc_id,
        CidrBlock="10.20.0.0/17",
        AvailabilityZone=ZONE,
        TagSpecifications=tag_spec("subnet", "public-subnet"),
    )["Subnet"]["SubnetId"]
    private_id = ec2.create_subnet(
        VpcId=vpc_id,
        CidrBlock="10.20.128.0/17",
        AvailabilityZone=ZONE,
        TagSpecifications=tag_spec("subnet", "private-subnet"),
    )["Subnet"]["SubnetId"]
    # When the step is retried with nothing recorded
    ids = build(ec2, known=NetworkIds())
    # Then it finished that network rather than starting another
    assert (ids.vpc_id, ids.public_subnet_id, ids.private_subnet_id) == (vpc_id, public_id, private_id)
    assert tagged(ec2, RUN)["vpcs"] == [vpc_id]
    assert len(tagged(ec2, RUN)["subnets"]) == 2


def test_recorded_ids_of_resources_that_no_longer_exist_are_not_trusted(ec2: Any) -> None:
    # Given a record naming a VPC that is gone
    stale = NetworkIds(vpc_id="vpc-0123456789abcdef0", public_subnet_id="subnet-0123456789abcdef0")
    # When the network is built from that record
    ids = build(ec2, known=stale)
    # Then a real VPC and subnet are used instead
    assert ids.vpc_id != stale.vpc_id
    assert ids.public_subnet_id != stale.public_subnet_id
    assert tagged(ec2, RUN)["vpcs"] == [ids.vpc_id]


def test_find_run_network_finds_every_component_by_its_tags(ec2: Any) -> None:
    ids = build(ec2)
    build(ec2, run_id=OTHER_RUN, cidr="10.30.0.0/16")
    assert find_run_network(ec2, RUN) == ids


# --- wait -------------------------------------------------------------------------------------


def test_network_is_ready_when_the_nat_gateway_is_available(ec2: Any) -> None:
    ids = build(ec2)
    assert network_progress(ec2, ids) == Progress(done=True)


def test_network_is_not_ready_while_the_nat_gateway_is_pending(ec2: Any) -> None:
    # Given a NAT gateway still coming up (moto makes them 'available' at once)
    ids = build(ec2)
    moto_nat(ids.nat_gateway_id).state = "pending"
    # When the wait loop asks
    progress = network_progress(ec2, ids)
    # Then it waits on the NAT gateway
    assert progress.done is False
    assert progress.waiting_on == [f"nat-gateway {ids.nat_gateway_id} (pending)"]


def test_a_failed_nat_gateway_raises_network_failed_with_its_message(ec2: Any) -> None:
    # Given a NAT gateway that failed (moto has no FailureMessage: the answer is stubbed)
    ids = NetworkIds(nat_gateway_id="nat-0123456789abcdef0", vpc_id="vpc-0123456789abcdef0")
    answer = {
        "NatGateways": [
            {
                "NatGatewayId": ids.nat_gateway_id,
                "State": "failed",
                "FailureCode": "InsufficientFreeAddressesInSubnet",
                "FailureMessage": "Subnet has insufficient free addresses to create this NAT gateway",
            }
        ]
    }
    with Stubber(ec2) as stub:
        stub.add_response("describe_nat_gateways", answer, {"NatGatewayIds": [ids.nat_gateway_id]})
        # When the wait loop asks
        # Then the typed error carries the failure message
        with pytest.raises(NetworkFailed, match="insufficient free addresses"):
            network_progress(ec2, ids)


def test_a_reused_network_is_ready_at_once(ec2: Any) -> None:
    assert network_progress(ec2, NetworkIds(created=False, vpc_id="vpc-0123456789abcdef0")).done is True


def test_throttling_is_transient(ec2: Any) -> None:
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_nat_gateways", "RequestLimitExceeded", http_status_code=503)
        with pytest.raises(TransientAwsError):
            network_progress(ec2, NetworkIds(nat_gateway_id="nat-0123456789abcdef0"))


# --- tear down --------------------------------------------------------------------------------


def test_delete_leaves_nothing_tagged_with_the_run_and_the_default_vpc_untouched(ec2: Any) -> None:
    # Given a built network and the account's default VPC
    default_before = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]
    ids = build(ec2)
    # When teardown runs to completion
    progress = tear_down(ec2, RUN, ids)
    # Then it is done and no resource of any type carries the run's tag
    assert progress.done is True
    assert all(not found for found in tagged(ec2, RUN).values()), tagged(ec2, RUN)
    assert ec2.describe_vpcs(Filters=[{"Name": "vpc-id", "Values": [ids.vpc_id]}])["Vpcs"] == []
    # And the default VPC is still there
    default_vpc_id = default_before[0]["VpcId"]
    assert ec2.describe_vpcs(VpcIds=[default_vpc_id])["Vpcs"][0]["IsDefault"] is True


def test_delete_reports_what_it_deleted(ec2: Any) -> None:
    ids = build(ec2)
    progress = tear_down(ec2, RUN, ids)
    assert f"vpc {ids.vpc_id}" in progress.deleted
    assert f"nat-gateway {ids.nat_gateway_id}" in progress.deleted


def test_delete_finds_everything_by_tags_when_nothing_was_recorded(ec2: Any) -> None:
    # Given a network whose ids never reached the run record
    build(ec2)
    # When teardown runs with an empty record
    progress = tear_down(ec2, RUN, NetworkIds())
    # Then everything tagged with the run is gone all the same
    assert progress.done is True
    assert all(not found for found in tagged(ec2, RUN).values()), tagged(ec2, RUN)


def test_delete_twice_is_safe(ec2: Any) -> None:
    ids = build(ec2)
    tear_down(ec2, RUN, ids)
    again = delete_network(ec2, run_id=RUN, known=ids)
    assert again == Progress(done=True)


def test_delete_waits_for_a_deleting_nat_gateway_before_anything_else(
    ec2: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a NAT gateway that takes its time to go (moto deletes at once)
    ids = build(ec2)

    def start_deleting(backend: Any, nat_id: str) -> Any:
        backend.nat_gateways[nat_id].state = "deleting"
        return backend.nat_gateways[nat_id]

    monkeypatch.setattr(NatGatewayBackend, "delete_nat_gateway", start_deleting)
    # When teardown makes one pass
    progress = delete_network(ec2, run_id=RUN, known=ids)
    # Then it waits on the NAT gateway and has touched nothing that depends on it
    assert progress.done is False
    assert progress.waiting_on == [f"nat-gateway {ids.nat_gateway_id} (deleting)"]
    assert tagged(ec2, RUN)["vpcs"] == [ids.vpc_id]
    assert tagged(ec2, RUN)["addresses"] == [ids.eip_allocation_id]
    # And once the NAT gateway is gone, the next pass finishes the job
    moto_nat(ids.nat_gateway_id).state = "deleted"
    assert tear_down(ec2, RUN, ids).done is True
    assert all(not found for found in tagged(ec2, RUN).values())


def test_a_dependency_violation_is_waited_on_not_raised(ec2: Any) -> None:
    # Given someone's own subnet in the run's VPC (moto enforces no other dependency of a VPC)
    ids = build(ec2)
    ec2.associate_vpc_cidr_block(VpcId=ids.vpc_id, CidrBlock="10.21.0.0/16")
    foreign = ec2.create_subnet(VpcId=ids.vpc_id, CidrBlock="10.21.0.0/24")["Subnet"]["SubnetId"]
    # When teardown makes a pass
    progress = delete_network(ec2, run_id=RUN, known=ids)
    # Then it deletes what it can, names the VPC it waits on, and leaves the foreign subnet alone
    assert progress.done is False
    assert [w.split(" (")[0] for w in progress.waiting_on] == [f"vpc {ids.vpc_id}"]
    assert "DependencyViolation" in progress.waiting_on[0]
    assert ec2.describe_subnets(SubnetIds=[foreign])["Subnets"]
    assert tagged(ec2, RUN)["vpcs"] == [ids.vpc_id]
    # And once the subnet is gone, the next pass finishes
    ec2.delete_subnet(SubnetId=foreign)
    assert delete_network(ec2, run_id=RUN, known=ids).done is True


def test_another_runs_network_is_never_touched(ec2: Any) -> None:
    # Given two runs' networks
    mine = build(ec2)
    theirs = build(ec2, run_id=OTHER_RUN, cidr="10.30.0.0/16")
    before = tagged(ec2, OTHER_RUN)
    # When my run is torn down, even with a record that wrongly names their resources
    confused = NetworkIds(**{**theirs.model_dump(), "created": True})
    tear_down(ec2, RUN, confused)
    tear_down(ec2, RUN, mine)
    # Then theirs is whole, and mine is gone
    assert tagged(ec2, OTHER_RUN) == before
    assert find_run_network(ec2, OTHER_RUN) == theirs
    assert all(not found for found in tagged(ec2, RUN).values())


# --- reuse an existing network ----------------------------------------------------------------


@pytest.fixture
def existing(ec2: Any) -> dict[str, str]:
    """Someone's VPC with a public and a private subnet, DNS on, tagged with nothing of ours."""
    vpc_id = ec2.create_vpc(CidrBlock="10.50.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": True})
    public = ec2.create_subnet(VpcId=vpc_id, CidrBlock="10.50.0.0/24", AvailabilityZone=ZONE)["Subnet"]["SubnetId"]
    private = ec2.create_subnet(VpcId=vpc_id, CidrBlock="10.50.1.0/24", AvailabilityZone=ZONE)["Subnet"]["SubnetId"]
    return {"vpc_id": vpc_id, "public_subnet_id": public, "private_subnet_id": private}


def reuse(ec2: Any, existing: dict[str, str], **overrides: str) -> NetworkIds:
    given = {**existing, **overrides}
    return describe_existing_network(
        ec2, given["vpc_id"], given["public_subnet_id"], given["private_subnet_id"], run_id=RUN, stack=STACK_NAME
    )


def test_reusing_a_network_creates_only_the_runs_efa_security_group(ec2: Any, existing: dict[str, str]) -> None:
    # When the run names an existing VPC and subnets
    ids = reuse(ec2, existing)
    # Then they are used as they are, with an EFA security group of the run's in that VPC
    assert ids.created is False
    assert (ids.vpc_id, ids.public_subnet_id, ids.private_subnet_id) == tuple(existing.values())
    assert ids.nat_gateway_id is None
    assert tagged(ec2, RUN) == {**{kind: [] for kind in tagged(ec2, RUN)}, "security_groups": [ids.security_group_id]}
    (group,) = ec2.describe_security_groups(GroupIds=[ids.security_group_id])["SecurityGroups"]
    assert group["VpcId"] == existing["vpc_id"]
    assert [p["GroupId"] for r in group["IpPermissions"] for p in r["UserIdGroupPairs"]] == [ids.security_group_id]
    # And doing it again gives the same group
    assert reuse(ec2, existing) == ids


def test_tearing_down_a_reused_network_deletes_only_the_runs_security_group(ec2: Any, existing: dict[str, str]) -> None:
    # Given a run on someone's network
    ids = reuse(ec2, existing)
    # When it is torn down
    progress = tear_down(ec2, RUN, ids)
    # Then its security group is gone and their VPC and subnets are not
    assert progress.done is True
    assert progress.deleted == [f"security-group {ids.security_group_id}"]
    assert ec2.describe_vpcs(VpcIds=[existing["vpc_id"]])["Vpcs"]
    subnet_ids = [existing["public_subnet_id"], existing["private_subnet_id"]]
    assert len(ec2.describe_subnets(SubnetIds=subnet_ids)["Subnets"]) == 2


def test_a_missing_vpc_is_invalid_naming_the_field(ec2: Any, existing: dict[str, str]) -> None:
    with pytest.raises(NetworkInvalid, match=r"spec\.network\.vpc_id: VPC vpc-0123456789abcdef0 does not exist"):
        reuse(ec2, existing, vpc_id="vpc-0123456789abcdef0")


def test_a_missing_subnet_is_invalid_naming_the_field(ec2: Any, existing: dict[str, str]) -> None:
    with pytest.raises(NetworkInvalid, match=r"spec\.network\.private_subnet_id: subnet subnet-0123456789abcdef0"):
        reuse(ec2, existing, private_subnet_id="subnet-0123456789abcdef0")


def test_a_subnet_of_another_vpc_is_invalid(ec2: Any, existing: dict[str, str]) -> None:
    # Given a subnet in the default VPC
    default_subnet = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"][0]
    # Then naming it as the public subnet of the existing VPC is refused
    with pytest.raises(NetworkInvalid, match=rf"public_subnet_id: subnet {default_subnet['SubnetId']} is in vpc-"):
        reuse(ec2, existing, public_subnet_id=default_subnet["SubnetId"])


def test_a_vpc_without_dns_hostnames_is_invalid(ec2: Any, existing: dict[str, str]) -> None:
    ec2.modify_vpc_attribute(VpcId=existing["vpc_id"], EnableDnsHostnames={"Value": False})
    with pytest.raises(NetworkInvalid, match="enableDnsHostnames off"):
        reuse(ec2, existing)
    assert tagged(ec2, RUN)["security_groups"] == []


def test_the_eks_control_planes_zone_is_one_eks_takes_a_cluster_subnet_in() -> None:
    # Given a region whose first zone by name (after the reservation's) is one EKS refuses
    class Zones:
        def describe_availability_zones(self, **_: Any) -> dict[str, Any]:
            zones = [("us-east-1a", "use1-az6"), ("us-east-1e", "use1-az3"), ("us-east-1f", "use1-az5")]
            return {"AvailabilityZones": [{"ZoneName": name, "ZoneId": zone_id} for name, zone_id in zones]}

    # Then the control plane's subnet goes to the next one
    assert "use1-az3" in EKS_DISALLOWED_ZONE_IDS
    assert second_zone(Zones(), "us-east-1a") == "us-east-1f"
