"""EC2 and Resource Groups calls behind the Validate capacity step, and a head node's state.

Functions take their boto3 clients as arguments. Throttling and service-side failures become
`TransientAwsError` (the state machine retries it by name); answers that mean "this does not
exist" become data in the `CapacityLookup`, for `trainrun.logic.capacity` to judge.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from trainrun.adapters.aws_errors import call, error_code, raise_if_transient
from trainrun.logic.capacity import CapacityLookup, CapacityReservation
from trainrun.model.run_file import Capacity

CAPACITY_RESERVATION_TYPE = "AWS::EC2::CapacityReservation"
NOT_FOUND_CODES = ("InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed")
# EC2 forgets a terminated instance about an hour after its termination.
INSTANCE_NOT_FOUND = "InvalidInstanceID.NotFound"


def lookup_capacity(ec2: Any, resource_groups: Any, capacity: Capacity) -> CapacityLookup:
    """Describe the run's reservation, or its group's members, and the zones that offer its type.

    A group that does not exist gives `group_member_ids=None` (RESERVATION_GROUP_EMPTY, "does not
    exist"); a group without capacity reservations gives `[]`. Unknown or malformed reservation ids
    are listed in `missing_ids`.
    """
    if capacity.reservation_id:
        member_ids = None
        reservations, missing = _describe_reservations(ec2, [capacity.reservation_id])
    else:
        member_ids = _group_member_ids(resource_groups, capacity.reservation_group_arn or "")
        reservations, missing = _describe_reservations(ec2, member_ids or [])
    zones = sorted({r.availability_zone for r in reservations} | _given(capacity.availability_zone))
    return CapacityLookup(
        reservations=reservations,
        group_member_ids=member_ids,
        missing_ids=missing,
        offerings=_offerings(ec2, capacity.instance_type, zones),
    )


def _given(zone: str | None) -> set[str]:
    return {zone} if zone else set()


def _describe_reservations(ec2: Any, ids: list[str]) -> tuple[list[CapacityReservation], list[str]]:
    if not ids:
        return [], []
    try:
        return _describe(ec2, ids), []
    except ClientError as exc:
        if error_code(exc) not in NOT_FOUND_CODES:
            raise_if_transient(exc, "DescribeCapacityReservations")
            raise
    # EC2 fails the whole call for one unknown id, without saying which one in a structured way:
    # ask about each id alone to tell the known from the missing.
    found: list[CapacityReservation] = []
    missing: list[str] = []
    for reservation_id in ids:
        try:
            found += _describe(ec2, [reservation_id])
        except ClientError as exc:
            if error_code(exc) not in NOT_FOUND_CODES:
                raise_if_transient(exc, "DescribeCapacityReservations")
                raise
            missing.append(reservation_id)
    return found, missing


def _describe(ec2: Any, ids: list[str]) -> list[CapacityReservation]:
    pages = ec2.get_paginator("describe_capacity_reservations").paginate(CapacityReservationIds=ids)
    return [_reservation(item) for page in pages for item in page.get("CapacityReservations", [])]


def _reservation(item: dict[str, Any]) -> CapacityReservation:
    return CapacityReservation(
        id=item["CapacityReservationId"],
        arn=item.get("CapacityReservationArn"),
        instance_type=item["InstanceType"],
        availability_zone=item["AvailabilityZone"],
        total_instance_count=item.get("TotalInstanceCount", 0),
        available_instance_count=item.get("AvailableInstanceCount", 0),
        state=item["State"],
        start_date=item.get("StartDate"),
        end_date=item.get("EndDate"),
        instance_match_criteria=item.get("InstanceMatchCriteria", "open"),
        platform=item["InstancePlatform"],
        reservation_type=item.get("ReservationType", "default"),
    )


def _group_member_ids(resource_groups: Any, group_arn: str) -> list[str] | None:
    paginator = resource_groups.get_paginator("list_group_resources")
    pages = paginator.paginate(
        Group=group_arn, Filters=[{"Name": "resource-type", "Values": [CAPACITY_RESERVATION_TYPE]}]
    )
    ids: list[str] = []
    try:
        for page in pages:
            for resource in page.get("Resources", []):
                identifier = resource.get("Identifier", {})
                if identifier.get("ResourceType") == CAPACITY_RESERVATION_TYPE:
                    # arn:aws:ec2:<region>:<account>:capacity-reservation/cr-...
                    ids.append(identifier["ResourceArn"].rsplit("/", 1)[-1])
    except ClientError as exc:
        if error_code(exc) == "NotFoundException":
            return None
        raise_if_transient(exc, "ListGroupResources")
        raise
    return ids


def _offerings(ec2: Any, instance_type: str, zones: list[str]) -> dict[str, list[str]] | None:
    if not zones:
        return None
    try:
        pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone",
            Filters=[
                {"Name": "instance-type", "Values": [instance_type]},
                {"Name": "location", "Values": zones},
            ],
        )
        offered: dict[str, list[str]] = {zone: [] for zone in zones}
        for page in pages:
            for offering in page.get("InstanceTypeOfferings", []):
                if offering["Location"] in offered:
                    offered[offering["Location"]].append(offering["InstanceType"])
    except ClientError as exc:
        raise_if_transient(exc, "DescribeInstanceTypeOfferings")
        raise
    return offered


def instance_state(ec2: Any, instance_id: str) -> str:
    """The instance's state name (pending, running, shutting-down, terminated, stopping, stopped);
    "terminated" for one EC2 no longer knows."""
    try:
        answer = call(ec2.describe_instances, "DescribeInstances", InstanceIds=[instance_id])
    except ClientError as exc:
        if error_code(exc) == INSTANCE_NOT_FOUND:
            return "terminated"
        raise
    instances = [i for reservation in answer.get("Reservations", []) for i in reservation.get("Instances", [])]
    return str(instances[0]["State"]["Name"]) if instances else "terminated"
