"""The network of a run: build it idempotently, wait for it, and tear it down completely.

The layout is the one the AWS ParallelCluster User Guide's network examples describe: one VPC (DNS support and hostnames
on, FSx and ParallelCluster need both), its CIDR cut into a public half (head node,
MapPublicIpOnLaunch, default route to an internet gateway) and a private half (compute nodes,
default route to a NAT gateway with its own Elastic IP), both in the reservation's zone, an EFA
security group (all traffic from itself, all traffic to itself and to anywhere: EFA needs the
self-referencing egress rule too) and an S3 gateway endpoint on both route tables.

An Amazon EKS run (`control_plane_zone`) adds one subnet: EKS places its control plane's network
interfaces in subnets of at least two Availability Zones (Amazon EKS User Guide, "View Amazon EKS
networking requirements for VPC and subnets"), while the nodes stay in the reservation's zone. The
public half then gives its second quarter to that subnet (a /18 of the default /16: EKS asks for
at least six free addresses and recommends sixteen), on the private route table.

Tags are the source of truth:

- Every resource is tagged when it is created (TagSpecifications, never a later CreateTags),
  with `run_tags(run_id, stack)`, `trainrun:component` and `Name = trainrun-<run_id>-<component>`,
  so nothing a run creates ever exists untagged.
- `ensure_network` looks each piece up before creating it: a `known` id is used if the resource
  still exists, else a resource tagged with the run and the component is adopted, else one is
  created. A retried or crashed step therefore never creates a second VPC. Routes, route table
  associations and security group rules are re-added safely (duplicates are ignored).
- `delete_network` deletes only resources that carry this run's `trainrun:run-id` tag: the ids in
  `known` are checked against it, and resources found by the tag but never recorded are deleted
  too. It makes one pass in dependency order and reports what it still waits for; the state
  machine's wait loop calls it again (the loop is the backoff).

A run that names an existing VPC and subnets (`describe_existing_network`) owns exactly one piece
of that network: the EFA security group, created in the existing VPC and tagged with the run.
Its `NetworkIds` has `created=False`, and `delete_network` then deletes only the run's tagged
security groups: never a VPC, subnet, gateway or route table it did not create.

Throttling and 5xx answers become `TransientAwsError` (retried by name in the ASL); "not found"
answers during teardown count as already deleted.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from trainrun.adapters.aws_errors import call, error_code, raise_if_transient
from trainrun.errors import TrainrunError
from trainrun.model.resources import NetworkIds, Progress
from trainrun.model.tags import COMPONENT, RUN_ID, run_tags

ANYWHERE = "0.0.0.0/0"
# A resource in one of these states is gone, or going, for good: never adopt it.
DEAD_STATES = {"deleting", "deleted", "pending-deletion"}
# Answers to a delete call that mean "not yet": the next pass of the wait loop tries again.
DEPENDENCY_VIOLATION = "DependencyViolation"
NOT_YET_CODES = {DEPENDENCY_VIOLATION, "InvalidIPAddress.InUse", "IncorrectState"}


class NetworkFailed(TrainrunError):
    """A piece of the run's network failed to come up (a NAT gateway in state 'failed')."""


class NetworkInvalid(TrainrunError):
    """The existing VPC or subnets named by the run file cannot host the cluster."""


@dataclass(frozen=True)
class _Kind:
    """How to describe one EC2 resource type, and how its TagSpecifications name it."""

    describe: str
    items: str
    ids_param: str
    id_key: str
    resource_type: str
    filter_param: str = "Filters"
    scoped_to_vpc: bool = True


VPC = _Kind("describe_vpcs", "Vpcs", "VpcIds", "VpcId", "vpc", scoped_to_vpc=False)
SUBNET = _Kind("describe_subnets", "Subnets", "SubnetIds", "SubnetId", "subnet")
# An internet gateway is not in a VPC until attached: a crash between the two must still find it.
IGW = _Kind(
    "describe_internet_gateways",
    "InternetGateways",
    "InternetGatewayIds",
    "InternetGatewayId",
    "internet-gateway",
    scoped_to_vpc=False,
)
EIP = _Kind("describe_addresses", "Addresses", "AllocationIds", "AllocationId", "elastic-ip", scoped_to_vpc=False)
NAT = _Kind(
    "describe_nat_gateways", "NatGateways", "NatGatewayIds", "NatGatewayId", "natgateway", filter_param="Filter"
)
ROUTE_TABLE = _Kind("describe_route_tables", "RouteTables", "RouteTableIds", "RouteTableId", "route-table")
SECURITY_GROUP = _Kind("describe_security_groups", "SecurityGroups", "GroupIds", "GroupId", "security-group")
ENDPOINT = _Kind("describe_vpc_endpoints", "VpcEndpoints", "VpcEndpointIds", "VpcEndpointId", "vpc-endpoint")

# component tag -> (resource kind, NetworkIds field), in creation order.
COMPONENTS: dict[str, tuple[_Kind, str]] = {
    "vpc": (VPC, "vpc_id"),
    "public-subnet": (SUBNET, "public_subnet_id"),
    "private-subnet": (SUBNET, "private_subnet_id"),
    "control-plane-subnet": (SUBNET, "control_plane_subnet_id"),
    "internet-gateway": (IGW, "internet_gateway_id"),
    "eip": (EIP, "eip_allocation_id"),
    "nat-gateway": (NAT, "nat_gateway_id"),
    "public-route-table": (ROUTE_TABLE, "public_route_table_id"),
    "private-route-table": (ROUTE_TABLE, "private_route_table_id"),
    "security-group": (SECURITY_GROUP, "security_group_id"),
    "s3-endpoint": (ENDPOINT, "s3_endpoint_id"),
}


# --- build ----------------------------------------------------------------------------------


def ensure_network(
    ec2: Any,
    *,
    run_id: str,
    stack: str,
    cidr: str,
    availability_zone: str,
    control_plane_zone: str | None = None,
    known: NetworkIds | None = None,
) -> NetworkIds:
    """Create what is missing of the run's network and return the ids of all of it; with
    `control_plane_zone`, the EKS control plane's second subnet there too.

    Safe to call any number of times, and after a crash at any point: each piece is taken from
    `known` if it still exists, else adopted by its tags, else created.
    """
    known = known or NetworkIds()
    builder = _Builder(ec2, run_id, stack, known)
    public_half, private_half = ipaddress.IPv4Network(cidr).subnets(prefixlen_diff=1)
    public_cidr, private_cidr = str(public_half), str(private_half)
    control_plane_cidr = None
    if control_plane_zone is not None:
        public_quarter, control_plane_quarter = public_half.subnets(prefixlen_diff=1)
        public_cidr, control_plane_cidr = str(public_quarter), str(control_plane_quarter)

    vpc_id = builder.ensure("vpc", None, lambda tags: _call(ec2.create_vpc, CidrBlock=cidr, **tags)["Vpc"]["VpcId"])
    for attribute in ("EnableDnsSupport", "EnableDnsHostnames"):  # one attribute per call, says the API
        _call(ec2.modify_vpc_attribute, VpcId=vpc_id, **{attribute: {"Value": True}})

    def subnet(block: str, zone: str = availability_zone) -> Callable[[dict[str, Any]], str]:
        return lambda tags: _call(ec2.create_subnet, VpcId=vpc_id, CidrBlock=block, AvailabilityZone=zone, **tags)[
            "Subnet"
        ]["SubnetId"]

    public_subnet_id = builder.ensure("public-subnet", vpc_id, subnet(public_cidr))
    private_subnet_id = builder.ensure("private-subnet", vpc_id, subnet(private_cidr))
    _call(ec2.modify_subnet_attribute, SubnetId=public_subnet_id, MapPublicIpOnLaunch={"Value": True})

    igw_id = builder.ensure(
        "internet-gateway",
        None,
        lambda tags: _call(ec2.create_internet_gateway, **tags)["InternetGateway"]["InternetGatewayId"],
    )
    _attach_internet_gateway(ec2, igw_id, vpc_id)

    allocation_id = builder.ensure(
        "eip", None, lambda tags: _call(ec2.allocate_address, Domain="vpc", **tags)["AllocationId"]
    )
    nat_id = builder.ensure(
        "nat-gateway",
        vpc_id,
        lambda tags: _call(
            ec2.create_nat_gateway,
            SubnetId=public_subnet_id,
            AllocationId=allocation_id,
            ClientToken=_client_token(run_id, "nat-gateway", public_subnet_id, allocation_id),
            **tags,
        )["NatGateway"]["NatGatewayId"],
    )

    def route_table(tags: dict[str, Any]) -> str:
        return str(_call(ec2.create_route_table, VpcId=vpc_id, **tags)["RouteTable"]["RouteTableId"])

    public_rt_id = builder.ensure("public-route-table", vpc_id, route_table)
    _ensure_default_route(ec2, public_rt_id, "GatewayId", igw_id)
    _ensure_association(ec2, public_rt_id, public_subnet_id)
    private_rt_id = builder.ensure("private-route-table", vpc_id, route_table)
    _ensure_default_route(ec2, private_rt_id, "NatGatewayId", nat_id)
    _ensure_association(ec2, private_rt_id, private_subnet_id)
    control_plane_subnet_id = None
    if control_plane_zone is not None and control_plane_cidr is not None:
        control_plane_subnet_id = builder.ensure(
            "control-plane-subnet", vpc_id, subnet(control_plane_cidr, control_plane_zone)
        )
        _ensure_association(ec2, private_rt_id, control_plane_subnet_id)

    security_group_id = _ensure_security_group(builder, vpc_id)

    service = f"com.amazonaws.{ec2.meta.region_name}.s3"
    route_tables = [public_rt_id, private_rt_id]
    endpoint_id = builder.ensure(
        "s3-endpoint",
        vpc_id,
        lambda tags: _call(
            ec2.create_vpc_endpoint,
            VpcEndpointType="Gateway",
            VpcId=vpc_id,
            ServiceName=service,
            RouteTableIds=route_tables,
            ClientToken=_client_token(run_id, "s3-endpoint", vpc_id, *route_tables),
            **tags,
        )["VpcEndpoint"]["VpcEndpointId"],
    )
    _ensure_endpoint_route_tables(ec2, endpoint_id, route_tables)

    return NetworkIds(
        created=True,
        vpc_id=vpc_id,
        public_subnet_id=public_subnet_id,
        private_subnet_id=private_subnet_id,
        control_plane_subnet_id=control_plane_subnet_id,
        internet_gateway_id=igw_id,
        eip_allocation_id=allocation_id,
        nat_gateway_id=nat_id,
        public_route_table_id=public_rt_id,
        private_route_table_id=private_rt_id,
        security_group_id=security_group_id,
        s3_endpoint_id=endpoint_id,
    )


# Availability Zone IDs where no EKS cluster subnet may be (Amazon EKS User Guide, "View Amazon EKS
# networking requirements for VPC and subnets"): CreateCluster refuses them with
# UnsupportedAvailabilityZoneException.
EKS_DISALLOWED_ZONE_IDS = frozenset({"use1-az3", "usw1-az2", "cac1-az3"})


def second_zone(ec2: Any, zone: str) -> str:
    """Another available Availability Zone of the region than `zone`, the first by name that EKS
    takes a cluster subnet in: where an EKS run's control plane gets its second subnet."""
    answer = _call(
        ec2.describe_availability_zones,
        Filters=[{"Name": "state", "Values": ["available"]}, {"Name": "zone-type", "Values": ["availability-zone"]}],
    )
    others = sorted(
        z["ZoneName"]
        for z in answer["AvailabilityZones"]
        if z["ZoneName"] != zone and z.get("ZoneId") not in EKS_DISALLOWED_ZONE_IDS
    )
    if not others:
        raise NetworkInvalid(
            f"the region has no available Availability Zone besides {zone}, and Amazon EKS needs subnets in two"
        )
    return others[0]


def zone_of_subnet(ec2: Any, subnet_id: str) -> str:
    (subnet,) = _call(ec2.describe_subnets, SubnetIds=[subnet_id])["Subnets"]
    return str(subnet["AvailabilityZone"])


def describe_existing_network(
    ec2: Any, vpc_id: str, public_subnet_id: str, private_subnet_id: str, *, run_id: str, stack: str
) -> NetworkIds:
    """Check the run's existing VPC and subnets, and give the run its own EFA security group there.

    Raises `NetworkInvalid` naming the run file field to fix when the VPC or a subnet does not
    exist, a subnet is in another VPC, or the VPC lacks the DNS attributes ParallelCluster needs.
    The security group is the only thing created (tagged with the run, so teardown deletes it and
    nothing else); the result has `created=False`.
    """
    vpcs = _describe(ec2, VPC, ids=[vpc_id])
    if not vpcs:
        raise NetworkInvalid(f"spec.network.vpc_id: VPC {vpc_id} does not exist in {ec2.meta.region_name}")
    # One by one: EC2 fails a whole describe for one unknown id, and the message must name the right one.
    subnets = {
        item["SubnetId"]: item
        for subnet_id in (public_subnet_id, private_subnet_id)
        for item in _describe(ec2, SUBNET, ids=[subnet_id])
    }
    problems = []
    for path, subnet_id in (("public_subnet_id", public_subnet_id), ("private_subnet_id", private_subnet_id)):
        if subnet_id not in subnets:
            problems.append(f"spec.network.{path}: subnet {subnet_id} does not exist in {ec2.meta.region_name}")
        elif subnets[subnet_id]["VpcId"] != vpc_id:
            problems.append(
                f"spec.network.{path}: subnet {subnet_id} is in {subnets[subnet_id]['VpcId']}, not in {vpc_id}"
            )
    for attribute, key in (("enableDnsSupport", "EnableDnsSupport"), ("enableDnsHostnames", "EnableDnsHostnames")):
        answer = _call(ec2.describe_vpc_attribute, VpcId=vpc_id, Attribute=attribute)
        if not answer.get(key, {}).get("Value"):
            problems.append(
                f"spec.network.vpc_id: VPC {vpc_id} has {attribute} off; ParallelCluster and FSx need it on "
                f"(aws ec2 modify-vpc-attribute --vpc-id {vpc_id} --{_dashed(attribute)})"
            )
    if problems:
        raise NetworkInvalid("; ".join(problems))

    builder = _Builder(ec2, run_id, stack, NetworkIds(created=False))
    return NetworkIds(
        created=False,
        vpc_id=vpc_id,
        public_subnet_id=public_subnet_id,
        private_subnet_id=private_subnet_id,
        security_group_id=_ensure_security_group(builder, vpc_id),
    )


def network_progress(ec2: Any, ids: NetworkIds) -> Progress:
    """Done when the NAT gateway is available; a failed (or vanished) NAT gateway raises `NetworkFailed`.

    A reused network has no NAT gateway of ours, and is done at once.
    """
    if ids.nat_gateway_id is None:
        if ids.created:
            raise NetworkFailed("the run's network has no NAT gateway recorded; Create network did not finish")
        return Progress(done=True)
    found = _describe(ec2, NAT, ids=[ids.nat_gateway_id])
    if not found:
        raise NetworkFailed(f"NAT gateway {ids.nat_gateway_id} does not exist")
    nat = found[0]
    state = nat.get("State", "")
    if state == "available":
        return Progress(done=True)
    if state == "pending":
        return Progress(done=False, waiting_on=[f"nat-gateway {ids.nat_gateway_id} (pending)"])
    if state == "failed":
        reason = nat.get("FailureMessage") or "no failure message"
        code = nat.get("FailureCode")
        raise NetworkFailed(f"NAT gateway {ids.nat_gateway_id} failed: {reason}" + (f" ({code})" if code else ""))
    raise NetworkFailed(f"NAT gateway {ids.nat_gateway_id} is {state}, not coming up")


class _Builder:
    """Finds each component of a run's network by its known id or its tags, or creates it tagged."""

    def __init__(self, ec2: Any, run_id: str, stack: str, known: NetworkIds):
        self.ec2 = ec2
        self.run_id = run_id
        self.stack = stack
        self.known = known

    def ensure(self, component: str, vpc_id: str | None, create: Callable[[dict[str, Any]], Any]) -> str:
        """The component's id: known and alive, or adopted by its tags, or `create(TagSpecifications=...)`."""
        kind, attribute = COMPONENTS[component]
        existing = self.find(component, vpc_id, getattr(self.known, attribute))
        if existing:
            return existing
        return str(create({"TagSpecifications": [{"ResourceType": kind.resource_type, "Tags": self.tags(component)}]}))

    def find(self, component: str, vpc_id: str | None, known_id: str | None) -> str | None:
        kind, _ = COMPONENTS[component]
        if known_id:
            live = [item for item in _describe(self.ec2, kind, ids=[known_id]) if _alive(item, kind, vpc_id)]
            if live:
                return known_id
        live = [item for item in _tagged(self.ec2, kind, self.run_id, component, vpc_id) if _alive(item, kind, vpc_id)]
        # Any rule will do, as long as every retry picks the same one.
        return min((str(item[kind.id_key]) for item in live), default=None)

    def tags(self, component: str) -> list[dict[str, str]]:
        tags = {
            **run_tags(self.run_id, self.stack),
            COMPONENT: component,
            "Name": f"trainrun-{self.run_id}-{component}",
        }
        return [{"Key": key, "Value": value} for key, value in tags.items()]


def _alive(item: dict[str, Any], kind: _Kind, vpc_id: str | None) -> bool:
    if _state(item) in DEAD_STATES:
        return False
    return not (vpc_id and kind.scoped_to_vpc and item.get("VpcId") not in (None, vpc_id))


def _attach_internet_gateway(ec2: Any, igw_id: str, vpc_id: str) -> None:
    attachments = _describe(ec2, IGW, ids=[igw_id])[0].get("Attachments", [])
    if any(attachment.get("VpcId") == vpc_id for attachment in attachments):
        return
    _attempt(ec2.attach_internet_gateway, {"Resource.AlreadyAssociated"}, InternetGatewayId=igw_id, VpcId=vpc_id)


def _ensure_default_route(ec2: Any, route_table_id: str, target_key: str, target_id: str) -> None:
    routes = _describe(ec2, ROUTE_TABLE, ids=[route_table_id])[0].get("Routes", [])
    current = next((route for route in routes if route.get("DestinationCidrBlock") == ANYWHERE), None)
    if current is None:
        _attempt(
            ec2.create_route,
            {"RouteAlreadyExists"},
            RouteTableId=route_table_id,
            DestinationCidrBlock=ANYWHERE,
            **{target_key: target_id},
        )
    elif current.get(target_key) != target_id:
        # A route to a gateway that was replaced (a NAT gateway re-created after a failure).
        _call(ec2.replace_route, RouteTableId=route_table_id, DestinationCidrBlock=ANYWHERE, **{target_key: target_id})


def _ensure_association(ec2: Any, route_table_id: str, subnet_id: str) -> None:
    associations = _describe(ec2, ROUTE_TABLE, ids=[route_table_id])[0].get("Associations", [])
    if any(association.get("SubnetId") == subnet_id for association in associations):
        return
    _attempt(ec2.associate_route_table, {"Resource.AlreadyAssociated"}, RouteTableId=route_table_id, SubnetId=subnet_id)


def _ensure_security_group(builder: _Builder, vpc_id: str) -> str:
    """The EFA security group: all traffic from itself, to itself, and to anywhere."""
    ec2 = builder.ec2
    group_id = builder.ensure(
        "security-group",
        vpc_id,
        lambda tags: _call(
            ec2.create_security_group,
            GroupName=f"trainrun-{builder.run_id}-efa",
            Description=f"trainrun {builder.run_id}: EFA, all traffic within the group",
            VpcId=vpc_id,
            **tags,
        )["GroupId"],
    )
    itself = [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group_id}]}]
    anywhere = [{"IpProtocol": "-1", "IpRanges": [{"CidrIp": ANYWHERE}]}]
    duplicate = {"InvalidPermission.Duplicate"}
    _attempt(ec2.authorize_security_group_ingress, duplicate, GroupId=group_id, IpPermissions=itself)
    _attempt(ec2.authorize_security_group_egress, duplicate, GroupId=group_id, IpPermissions=itself)
    _attempt(ec2.authorize_security_group_egress, duplicate, GroupId=group_id, IpPermissions=anywhere)
    return group_id


def _ensure_endpoint_route_tables(ec2: Any, endpoint_id: str, route_tables: list[str]) -> None:
    current = set(_describe(ec2, ENDPOINT, ids=[endpoint_id])[0].get("RouteTableIds", []))
    missing = [route_table for route_table in route_tables if route_table not in current]
    if missing:
        _call(ec2.modify_vpc_endpoint, VpcEndpointId=endpoint_id, AddRouteTableIds=missing)


def _client_token(run_id: str, *parts: str) -> str:
    """The same request gives the same token (at most 64 characters, as EC2 requires)."""
    return "trainrun-" + hashlib.sha256("/".join((run_id, *parts)).encode()).hexdigest()[:48]


def _dashed(attribute: str) -> str:
    return "".join(f"-{char.lower()}" if char.isupper() else char for char in attribute)


# --- find and tear down -----------------------------------------------------------------------


def find_run_network(ec2: Any, run_id: str) -> NetworkIds:
    """Every live network resource tagged with the run, by component (`created` if a VPC is among them)."""
    found: dict[str, str] = {}
    for component, (kind, attribute) in COMPONENTS.items():
        live = [str(item[kind.id_key]) for item in _tagged(ec2, kind, run_id, component) if _alive(item, kind, None)]
        if live:
            found[attribute] = min(live)
    return NetworkIds(created="vpc_id" in found, **found)


def delete_network(ec2: Any, *, run_id: str, known: NetworkIds) -> Progress:
    """One pass of deleting the run's network, in dependency order; call again until done.

    Deletes every resource tagged with `run_id` (found by the tag, or by an id in `known` whose
    resource carries the tag), never anything else. When `known.created` is False the run reused
    someone's network: only the run's tagged security groups are deleted.
    """
    teardown = _Teardown(ec2, run_id)

    def ids(*attributes: str) -> list[str]:
        return [value for attribute in attributes if (value := getattr(known, attribute))]

    if not known.created:
        for group in teardown.tagged(SECURITY_GROUP, ids("security_group_id")):
            teardown.security_group(group)
        return teardown.progress()

    for nat in teardown.tagged(NAT, ids("nat_gateway_id")):
        teardown.nat_gateway(nat)
    if teardown.waiting:
        # The EIP, the internet gateway and the public subnet are all in use until it is gone.
        return teardown.progress()
    for address in teardown.tagged(EIP, ids("eip_allocation_id")):
        teardown.address(address)
    for endpoint in teardown.tagged(ENDPOINT, ids("s3_endpoint_id")):
        teardown.endpoint(endpoint)
    for gateway in teardown.tagged(IGW, ids("internet_gateway_id")):
        teardown.internet_gateway(gateway)
    for subnet in teardown.tagged(SUBNET, ids("public_subnet_id", "private_subnet_id", "control_plane_subnet_id")):
        teardown.delete("subnet", subnet["SubnetId"], ec2.delete_subnet, SubnetId=subnet["SubnetId"])
    for route_table in teardown.tagged(ROUTE_TABLE, ids("public_route_table_id", "private_route_table_id")):
        teardown.route_table(route_table)
    for group in teardown.tagged(SECURITY_GROUP, ids("security_group_id")):
        teardown.security_group(group)
    vpcs = teardown.tagged(VPC, ids("vpc_id"))
    if teardown.blocked:
        teardown.blocked += [f"vpc {vpc['VpcId']} (after the above)" for vpc in vpcs]
    elif teardown.waiting:
        teardown.waiting += [f"vpc {vpc['VpcId']} (after the above)" for vpc in vpcs]
    else:
        for vpc in vpcs:
            if not vpc.get("IsDefault"):
                teardown.delete("vpc", vpc["VpcId"], ec2.delete_vpc, VpcId=vpc["VpcId"])
    return teardown.progress()


@dataclass
class _Teardown:
    ec2: Any
    run_id: str
    deleted: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    # Refused with DependencyViolation: in use by something else (say, a cluster's instances).
    blocked: list[str] = field(default_factory=list)

    def progress(self) -> Progress:
        waiting_on = self.waiting + self.blocked
        return Progress(done=not waiting_on, waiting_on=waiting_on, deleted=self.deleted, blocked=self.blocked)

    def tagged(self, kind: _Kind, known_ids: Iterable[str]) -> list[dict[str, Any]]:
        """The run's live resources of one kind: found by the run tag, plus known ids that carry it."""
        by_id = {item[kind.id_key]: item for item in _tagged(self.ec2, kind, self.run_id)}
        missing = [known_id for known_id in dict.fromkeys(known_ids) if known_id not in by_id]
        for known_id in missing:  # one by one: EC2 fails a whole describe for one unknown id
            by_id.update({item[kind.id_key]: item for item in _describe(self.ec2, kind, ids=[known_id])})
        return [
            item for _, item in sorted(by_id.items()) if _tag(item, RUN_ID) == self.run_id and _state(item) != "deleted"
        ]

    def delete(self, label: str, resource_id: str, method: Callable[..., Any], **params: Any) -> bool:
        """Delete one resource: True when it is gone (now or already), False when it must wait."""
        try:
            _call(method, **params)
        except ClientError as exc:
            if _not_found(exc):
                return True
            if error_code(exc) in NOT_YET_CODES:
                reason = f"{label} {resource_id} ({error_code(exc)}: {exc.response['Error'].get('Message', '')})"
                (self.blocked if error_code(exc) == DEPENDENCY_VIOLATION else self.waiting).append(reason)
                return False
            raise
        self.deleted.append(f"{label} {resource_id}")
        return True

    def nat_gateway(self, nat: dict[str, Any]) -> None:
        nat_id = nat["NatGatewayId"]
        if _state(nat) != "deleting":
            self.delete("nat-gateway", nat_id, self.ec2.delete_nat_gateway, NatGatewayId=nat_id)
        now = _describe(self.ec2, NAT, ids=[nat_id])
        state = _state(now[0]) if now else "deleted"
        if state != "deleted":
            self.waiting.append(f"nat-gateway {nat_id} ({state})")

    def address(self, address: dict[str, Any]) -> None:
        allocation_id = address["AllocationId"]
        if address.get("AssociationId"):
            _attempt(
                self.ec2.disassociate_address, {"InvalidAssociationID.NotFound"}, AssociationId=address["AssociationId"]
            )
        self.delete("eip", allocation_id, self.ec2.release_address, AllocationId=allocation_id)

    def endpoint(self, endpoint: dict[str, Any]) -> None:
        endpoint_id = endpoint["VpcEndpointId"]
        if _state(endpoint) == "deleting":
            self.waiting.append(f"s3-endpoint {endpoint_id} (deleting)")
            return
        answer = _call(self.ec2.delete_vpc_endpoints, VpcEndpointIds=[endpoint_id])
        # This call reports failures per endpoint instead of raising.
        for failure in answer.get("Unsuccessful", []):
            error = failure.get("Error", {})
            if "NotFound" not in error.get("Code", ""):
                self.waiting.append(f"s3-endpoint {endpoint_id} ({error.get('Code')}: {error.get('Message')})")
                return
        self.deleted.append(f"s3-endpoint {endpoint_id}")

    def internet_gateway(self, gateway: dict[str, Any]) -> None:
        igw_id = gateway["InternetGatewayId"]
        for attachment in gateway.get("Attachments", []):
            try:
                _attempt(
                    self.ec2.detach_internet_gateway,
                    {"Gateway.NotAttached"},
                    InternetGatewayId=igw_id,
                    VpcId=attachment["VpcId"],
                )
            except ClientError as exc:
                if error_code(exc) not in NOT_YET_CODES:
                    raise
                reason = f"internet-gateway {igw_id} ({error_code(exc)}: cannot detach yet)"
                (self.blocked if error_code(exc) == DEPENDENCY_VIOLATION else self.waiting).append(reason)
                return
        self.delete("internet-gateway", igw_id, self.ec2.delete_internet_gateway, InternetGatewayId=igw_id)

    def route_table(self, route_table: dict[str, Any]) -> None:
        associations = route_table.get("Associations", [])
        if any(association.get("Main") for association in associations):
            return  # the VPC's main route table goes with the VPC
        for association in associations:
            _attempt(
                self.ec2.disassociate_route_table,
                {"InvalidAssociationID.NotFound"},
                AssociationId=association["RouteTableAssociationId"],
            )
        route_table_id = route_table["RouteTableId"]
        self.delete("route-table", route_table_id, self.ec2.delete_route_table, RouteTableId=route_table_id)

    def security_group(self, group: dict[str, Any]) -> None:
        if group.get("GroupName") == "default":
            return  # the VPC's default group goes with the VPC
        group_id = group["GroupId"]
        # Rules naming the group are references to it: drop them so that they cannot hold it in place.
        for rules, revoke in (
            (group.get("IpPermissions", []), self.ec2.revoke_security_group_ingress),
            (group.get("IpPermissionsEgress", []), self.ec2.revoke_security_group_egress),
        ):
            own = _self_references(rules, group_id)
            if own:
                _attempt(revoke, {"InvalidPermission.NotFound"}, GroupId=group_id, IpPermissions=own)
        self.delete("security-group", group_id, self.ec2.delete_security_group, GroupId=group_id)


def _self_references(rules: list[dict[str, Any]], group_id: str) -> list[dict[str, Any]]:
    own: list[dict[str, Any]] = []
    for rule in rules:
        pairs = [{"GroupId": group_id} for pair in rule.get("UserIdGroupPairs", []) if pair.get("GroupId") == group_id]
        if pairs:
            ports: dict[str, Any] = {key: rule[key] for key in ("FromPort", "ToPort") if key in rule}
            own.append({"IpProtocol": rule["IpProtocol"], **ports, "UserIdGroupPairs": pairs})
    return own


# --- AWS calls --------------------------------------------------------------------------------


def _describe(
    ec2: Any, kind: _Kind, *, ids: list[str] | None = None, filters: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Items of one kind by id or by filter; ids that do not exist give nothing rather than an error."""
    if ids is not None and not ids:
        return []
    params: dict[str, Any] = {kind.ids_param: ids} if ids else {kind.filter_param: filters or []}
    try:
        if ec2.can_paginate(kind.describe):
            pages = ec2.get_paginator(kind.describe).paginate(**params)
            return [item for page in pages for item in page.get(kind.items, [])]
        return list(getattr(ec2, kind.describe)(**params).get(kind.items, []))
    except ClientError as exc:
        if ids and _not_found(exc):
            return []
        raise_if_transient(exc, kind.describe)
        raise


def _tagged(
    ec2: Any, kind: _Kind, run_id: str, component: str | None = None, vpc_id: str | None = None
) -> list[dict[str, Any]]:
    """Resources of one kind tagged with the run (and component), checked here as well as filtered.

    The tag filters keep the answer small; the check makes it right even where a filter is ignored
    (moto ignores tag filters on DescribeNatGateways).
    """
    wanted = {RUN_ID: run_id} | ({COMPONENT: component} if component else {})
    filters = [{"Name": f"tag:{key}", "Values": [value]} for key, value in wanted.items()]
    if vpc_id and kind.scoped_to_vpc:
        filters.append({"Name": "vpc-id", "Values": [vpc_id]})
    return [
        item
        for item in _describe(ec2, kind, filters=filters)
        if all(_tag(item, key) == value for key, value in wanted.items())
    ]


def _call(method: Callable[..., Any], **params: Any) -> dict[str, Any]:
    """trainrun.adapters.aws_errors.call, named after the client method (EC2 has many here)."""
    return call(method, getattr(method, "__name__", "EC2 call"), **params)


def _attempt(method: Callable[..., Any], harmless: set[str], **params: Any) -> None:
    """Make a call whose listed failures mean the work is already done (a duplicate rule, say)."""
    try:
        _call(method, **params)
    except ClientError as exc:
        if error_code(exc) not in harmless:
            raise


def _not_found(exc: ClientError) -> bool:
    code = error_code(exc)
    return "NotFound" in code or "Malformed" in code


def _state(item: dict[str, Any]) -> str:
    """Lower case: the API model spells endpoint states 'Available', the service answers 'available'."""
    return str(item.get("State", "")).lower()


def _tag(item: dict[str, Any], key: str) -> str | None:
    return next((tag["Value"] for tag in item.get("Tags", []) if tag.get("Key") == key), None)
