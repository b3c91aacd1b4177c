"""EC2 capacity reservations and capacity reservation groups for moto, in process.

Written against moto 5.2.5 (pinned in requirements-local.txt). Moto has neither
DescribeCapacityReservations nor a working ListGroupResources, and the Validate capacity step
needs both. `install()` adds them by patching moto's classes in this process, so it serves both
`moto.mock_aws` (tests) and the `ThreadedMotoServer` the local runtime starts in the same process.
Call it before the server answers its first Resource Groups request: the server builds each
service's URL map on that service's first request.

Patches (each one's reason is next to it below):
1. `moto.ec2.responses.EC2Response.describe_capacity_reservations` - new method. Moto's query
   protocol dispatch (`BaseResponse.call_action`) calls the method named after the snake_cased
   Action, so a method on the class is a new EC2 action; returning an `ActionResult` lets moto
   serialize the EC2 XML from botocore's own output shape, and raising `EC2ClientError` gives
   the `<Response><Errors>` document botocore turns into a `ClientError` with that code.
2. `moto.resourcegroups.responses.ResourceGroupsResponse.list_group_resources` - replaces moto's
   stub, which raises NotImplementedError.
3. `moto.resourcegroups.urls.url_paths["{0}/list-group-resources$"]` - the REST route for (2);
   moto 5.2.5 routes no request to it at all (a 404 before any method is looked up).
4. `moto.ec2.responses.EC2Response.run_instances` - wrapped: a launch that targets an emulated
   reservation (CapacityReservationSpecification) is refused unless the reservation is active
   and has the instances available, as EC2 refuses it; moto itself ignores the target.

A reservation's state follows the clock (`FixtureReservation.state_at`): it is described
`scheduled` before its start date, with no capacity available, `active` from then on, and
`expired` from its end date, so a run that waits for a capacity block sees it start.

DescribeInstanceTypeOfferings needs no patch: moto 5.2.5's offering data already lists
trn1.32xlarge (and trn1.2xlarge, trn1n.32xlarge) in us-west-2d.

The emulated reservations and group members live in this module, keyed by account and region
(groups by their ARN, which carries both); moto's own reset does not clear them, `reset()` does.
"""

from __future__ import annotations

import json
import re
import threading
from datetime import UTC, datetime
from typing import Any

import moto
from moto.core import DEFAULT_ACCOUNT_ID
from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response
from moto.ec2.responses.instances import InstanceResponse
from moto.resourcegroups import urls as resourcegroups_urls
from moto.resourcegroups.exceptions import BadRequestException
from moto.resourcegroups.models import resourcegroups_backends
from moto.resourcegroups.responses import ResourceGroupsResponse

from trainrun.local.fixture import AccountFixture, FixtureReservation

MOTO_VERSION = "5.2.5"
CAPACITY_RESERVATION_TYPE = "AWS::EC2::CapacityReservation"
LIST_GROUP_RESOURCES_PATH = "{0}/list-group-resources$"
# What `aws resource-groups create-group` is given for a capacity reservation group
# (EC2 User Guide, "Work with Capacity Reservation groups").
CAPACITY_RESERVATION_POOL: list[dict[str, Any]] = [
    {"Type": "AWS::EC2::CapacityReservationPool"},
    {
        "Type": "AWS::ResourceGroups::Generic",
        "Parameters": [
            {"Name": "allowed-resource-types", "Values": [CAPACITY_RESERVATION_TYPE]},
            {"Name": "deletion-protection", "Values": ["UNLESS_EMPTY"]},
        ],
    },
]
RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{17}$")
# EC2's answer to a launch the targeted reservation cannot hold (Amazon EC2 API Reference, "Error
# codes"); before a Capacity Block starts its available capacity is zero, so a launch into it
# meets this too.
RESERVATION_CAPACITY_EXCEEDED = "ReservationCapacityExceeded"
_TARGET = "CapacityReservationSpecification.CapacityReservationTarget."

_lock = threading.Lock()
_installed = False
# (account id, region) -> reservation id -> the reservation as EC2 describes it (botocore shape),
# and the fixture's reservation it came from (its dates move its state along).
_reservations: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
_sources: dict[tuple[str, str], dict[str, FixtureReservation]] = {}
_original_run_instances = InstanceResponse.run_instances
# group ARN -> member resource ARNs
_group_members: dict[str, list[str]] = {}
# (account id, region) -> names of the groups the last seed created there
_seeded_groups: dict[tuple[str, str], list[str]] = {}


def install() -> None:
    """Patch moto (once per process; later calls do nothing)."""
    global _installed
    with _lock:
        if _installed:
            return
        if moto.__version__ != MOTO_VERSION:
            raise RuntimeError(
                f"trainrun's capacity emulator patches moto {MOTO_VERSION} internals, but moto {moto.__version__} "
                "is installed: check the patches in trainrun/local/capacity_emulator.py against it, then update "
                "MOTO_VERSION"
            )
        EC2Response.describe_capacity_reservations = _describe_capacity_reservations  # type: ignore[attr-defined]
        InstanceResponse.run_instances = _run_instances  # type: ignore[method-assign]
        ResourceGroupsResponse.list_group_resources = _list_group_resources  # type: ignore[method-assign,assignment]
        resourcegroups_urls.url_paths.setdefault(LIST_GROUP_RESOURCES_PATH, ResourceGroupsResponse.dispatch)
        _installed = True


def seed(fixture: AccountFixture, account_id: str = DEFAULT_ACCOUNT_ID) -> None:
    """Make the fixture's reservations and groups exist in moto's account `account_id`.

    Seeding again replaces what an earlier seed put in that account and region.
    """
    install()
    region = fixture.region
    for group in fixture.capacity_reservation_groups:
        if group.account_id != account_id:
            raise ValueError(f"group {group.arn} belongs to account {group.account_id}, not {account_id}")
    now = datetime.now(UTC)
    reservations = {r.id: _described(r, account_id, region, now) for r in fixture.capacity_reservations}
    backend = resourcegroups_backends[account_id][region]
    with _lock:
        _reservations[(account_id, region)] = reservations
        _sources[(account_id, region)] = {r.id: r for r in fixture.capacity_reservations}
        for name in _seeded_groups.pop((account_id, region), []):
            if name in backend.groups:
                _group_members.pop(backend.delete_group(name).arn, None)
        for group in fixture.capacity_reservation_groups:
            if group.name in backend.groups:
                backend.delete_group(group.name)
            backend.create_group(
                name=group.name,
                resource_query={},
                description="Capacity reservation group seeded by trainrun local",
                configuration=CAPACITY_RESERVATION_POOL,
            )
            _group_members[group.arn] = [reservations[rid]["CapacityReservationArn"] for rid in group.reservations]
        _seeded_groups[(account_id, region)] = [group.name for group in fixture.capacity_reservation_groups]


def reset() -> None:
    """Forget every emulated reservation and group membership (the groups themselves are moto's)."""
    with _lock:
        _reservations.clear()
        _sources.clear()
        _group_members.clear()
        _seeded_groups.clear()


def _described(reservation: FixtureReservation, account_id: str, region: str, now: datetime) -> dict[str, Any]:
    described = {
        "CapacityReservationId": reservation.id,
        "OwnerId": account_id,
        "CapacityReservationArn": f"arn:aws:ec2:{region}:{account_id}:capacity-reservation/{reservation.id}",
        "InstanceType": reservation.instance_type,
        "InstancePlatform": reservation.platform,
        "AvailabilityZone": reservation.availability_zone,
        "Tenancy": "default",
        "TotalInstanceCount": reservation.total_instance_count,
        "AvailableInstanceCount": reservation.available_at(now),
        "EbsOptimized": True,
        "EphemeralStorage": False,
        "State": reservation.state_at(now),
        "StartDate": reservation.start_date or now,
        "EndDateType": "limited" if reservation.end_date else "unlimited",
        "InstanceMatchCriteria": reservation.instance_match_criteria,
        "CreateDate": now,
        "Tags": [],
        "ReservationType": reservation.reservation_type,
    }
    if reservation.end_date:
        described["EndDate"] = reservation.end_date
    return described


# --- patch 1: EC2 DescribeCapacityReservations --------------------------------------------------

# EC2 filter name -> the field of the described reservation it matches.
_FILTERS = {
    "instance-type": "InstanceType",
    "availability-zone": "AvailabilityZone",
    "state": "State",
    "instance-platform": "InstancePlatform",
    "instance-match-criteria": "InstanceMatchCriteria",
    "owner-id": "OwnerId",
    "end-date-type": "EndDateType",
    "tenancy": "Tenancy",
}


def _as_of(described: dict[str, Any], source: FixtureReservation | None, now: datetime) -> dict[str, Any]:
    """The reservation as EC2 describes it at `now`."""
    if source is None:
        return described
    return {**described, "State": source.state_at(now), "AvailableInstanceCount": source.available_at(now)}


def _current(account_id: str, region: str) -> dict[str, dict[str, Any]]:
    now = datetime.now(UTC)
    sources = _sources.get((account_id, region), {})
    return {
        rid: _as_of(described, sources.get(rid), now)
        for rid, described in _reservations.get((account_id, region), {}).items()
    }


def _describe_capacity_reservations(self: EC2Response) -> ActionResult:
    self.error_on_dryrun()
    known = _current(self.current_account, self.region)
    ids = self._get_param("CapacityReservationIds", []) or []
    for reservation_id in ids:
        if not RESERVATION_ID.match(reservation_id):
            raise EC2ClientError(
                "InvalidCapacityReservationId.Malformed",
                f'Invalid id: "{reservation_id}" (expecting "cr-...")',
            )
        if reservation_id not in known:
            # The code is what EC2 returns; the text follows EC2's other "...ID.NotFound" messages.
            raise EC2ClientError(
                "InvalidCapacityReservationId.NotFound",
                f"The capacity reservation ID '{reservation_id}' does not exist",
            )
    chosen = [known[i] for i in ids] if ids else list(known.values())
    # moto annotates the values as str; they are the filter's list of values.
    filters: dict[str, list[str]] = self._filters_from_querystring()  # type: ignore[assignment]
    unknown = sorted(set(filters) - set(_FILTERS))
    if unknown:
        raise EC2ClientError("InvalidParameterValue", f"The filter '{unknown[0]}' is invalid")
    chosen = [r for r in chosen if all(r.get(_FILTERS[name]) in values for name, values in filters.items())]
    return ActionResult({"CapacityReservations": chosen})


# --- patch 4: EC2 RunInstances into a reservation ----------------------------------------------


def _run_instances(self: InstanceResponse) -> ActionResult:
    reservation_id = self._get_param(_TARGET + "CapacityReservationId")
    group_arn = self._get_param(_TARGET + "CapacityReservationResourceGroupArn")
    # Only an account a fixture was seeded into has reservations to launch into: in any other
    # (a test of moto alone, in a process where the emulator is installed) launches go unchecked.
    seeded = (self.current_account, self.region) in _reservations
    if seeded and (reservation_id or group_arn):
        _check_launch(self, reservation_id, group_arn, int(self._get_param("MinCount", if_none="1")))
    return _original_run_instances(self)


def _check_launch(self: InstanceResponse, reservation_id: str | None, group_arn: str | None, count: int) -> None:
    known = _current(self.current_account, self.region)
    instance_type = self._get_param("InstanceType")
    if reservation_id:
        if reservation_id not in known:
            raise EC2ClientError(
                "InvalidCapacityReservationId.NotFound",
                f"The capacity reservation ID '{reservation_id}' does not exist",
            )
        candidates = [known[reservation_id]]
    else:
        members = set(_group_members.get(group_arn or "", []))
        candidates = [r for r in known.values() if r["CapacityReservationArn"] in members]
    matching = [r for r in candidates if r["InstanceType"] == instance_type]
    available = sum(r["AvailableInstanceCount"] for r in matching if r["State"] == "active")
    if available < count:
        states = ", ".join(f"{r['CapacityReservationId']} {r['State']}" for r in matching) or "none matching"
        raise EC2ClientError(
            RESERVATION_CAPACITY_EXCEEDED,
            f"The targeted capacity reservation does not have enough available capacity for {count} "
            f"{instance_type} instances ({available} available; {states})",
        )


# --- patch 2: Resource Groups ListGroupResources -----------------------------------------------


def _list_group_resources(self: ResourceGroupsResponse) -> str:
    group_ref = self._get_param("Group") or self._get_param("GroupName")
    if not group_ref:
        raise BadRequestException("Either Group or GroupName must be specified")
    # get_group takes a name or an ARN (moto indexes both) and raises NotFoundException.
    group = self.resourcegroups_backend.get_group(group_ref)
    wanted_types = {
        value
        for item in self._get_param("Filters") or []
        if item.get("Name") == "resource-type"
        for value in item.get("Values", [])
    }
    members = [
        {"ResourceArn": arn, "ResourceType": CAPACITY_RESERVATION_TYPE}
        for arn in _group_members.get(group.arn, [])
        if not wanted_types or CAPACITY_RESERVATION_TYPE in wanted_types
    ]
    start = int(self._get_param("NextToken") or 0)
    size = int(self._get_param("MaxResults") or 50)
    page = members[start : start + size]
    answer: dict[str, Any] = {
        "Resources": [{"Identifier": identifier} for identifier in page],
        "ResourceIdentifiers": page,
        "QueryErrors": [],
    }
    if start + size < len(members):
        answer["NextToken"] = str(start + size)
    return json.dumps(answer)
