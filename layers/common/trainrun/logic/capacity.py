"""Validate capacity: can this run's reservation host its cluster?

Pure domain logic. The adapter (`trainrun.adapters.ec2.lookup_capacity`) asks EC2 and Resource
Groups what exists and hands over a `CapacityLookup`; `assess_capacity` turns it into findings.
Like aws-parallelcluster's validators, it returns every finding, never the first exception:
each has a stable code (`Code`, a contract with the CLI, the run record and tests), a severity,
and a message a person can act on. Any ERROR rejects the run before anything billable exists.

INFO findings (what the cluster will be given) are only produced when there is no ERROR: a
rejected run gets no cluster, and telling its owner which zone it "will use" would mislead.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict

from trainrun.logic import aws_clock
from trainrun.logic.neuron_install import supported_os
from trainrun.model.findings import Code, Finding, Severity, has_errors
from trainrun.model.resources import ReservationWindow

if TYPE_CHECKING:
    from trainrun.model.run_file import RunSpec

# The reservation platform each cluster OS consumes, as ParallelCluster 3.16 itself decides
# (pcluster.constants.CAPACITY_RESERVATION_OS_MAP, checked by
# pcluster.validators.ec2_validators.CapacityReservationValidator, which fails the cluster with
# "Capacity reservation ... has platform ..., which is not compatible with the cluster OS ...").
# RHEL AMIs are billed as Red Hat Enterprise Linux; every other OS as Linux/UNIX.
LINUX_UNIX = "Linux/UNIX"
RED_HAT_ENTERPRISE_LINUX = "Red Hat Enterprise Linux"
RESERVATION_PLATFORM_BY_OS = {
    "alinux2023": LINUX_UNIX,
    "ubuntu2204": LINUX_UNIX,
    "ubuntu2404": LINUX_UNIX,
    "rhel8": RED_HAT_ENTERPRISE_LINUX,
    "rocky8": LINUX_UNIX,
    "rhel9": RED_HAT_ENTERPRISE_LINUX,
    "rocky9": LINUX_UNIX,
}
DEFAULT_STARTUP_ALLOWANCE = timedelta(minutes=45)
# How long before a reservation's start the run begins to provision: everything that must exist
# before ParallelCluster launches the compute nodes, so that they launch as the block starts and no
# reserved minute is spent waiting for the rest. From the AWS clock's figures (each with its source):
# the NAT gateway and a PERSISTENT_2 file system, created side by side, then ParallelCluster's stack,
# the head node's boot and its OnNodeConfigured with a first build of the Neuron environment (a reused
# one is shorter), then clustermgtd's first loop, which launches the static nodes. Longer rather than
# shorter: early costs the head node's and the file system's minutes, late costs the whole block's.
# ParallelCluster creates a cluster whose capacity block has not started yet and launches the block's
# static nodes once it is active (AWS ParallelCluster User Guide, "Launch instances with Capacity
# Blocks (CB)"). Each stack can change it (TRAINRUN_RESERVATION_PROVISIONING_LEAD_SECONDS).
PROVISIONING_LEAD = timedelta(
    seconds=max(aws_clock.NAT_GATEWAY_AVAILABLE.seconds, aws_clock.fsx_created("PERSISTENT_2", 1200).seconds)
    + aws_clock.CLUSTER_STACK_RESOURCES.seconds
    + aws_clock.HEAD_NODE_BOOT.seconds
    + aws_clock.HEAD_NODE_CUSTOM_ACTION.seconds
    + aws_clock.NEURON_VENV_BUILD.seconds
    + aws_clock.CLUSTERMGTD_LOOP.seconds
)
# EC2 begins terminating a capacity block's instances 30 minutes before the block's end (Amazon
# EC2 User Guide, "Monitor Capacity Blocks using EventBridge": forty minutes before the end, the
# Capacity Block Expiration Warning says the instances "will begin to terminate in 10 minutes").
# Only capacity blocks do this: an On-Demand Capacity Reservation's instances keep running as
# On-Demand instances once it expires. TRAINRUN_RESERVATION_TERMINATION_LEAD_SECONDS changes it
# (the local runtime, whose fixture blocks last minutes, shortens it).
CAPACITY_BLOCK_TERMINATION_LEAD = timedelta(minutes=30)
# A Wait state waits at most a year (AWS Step Functions Developer Guide, "Wait workflow state"),
# and a standard workflow's execution lasts at most a year: a start later than this is refused.
LONGEST_CAPACITY_WAIT = timedelta(days=360)
# Reservation states in which a reservation will start by itself: a future-dated Capacity
# Reservation or a paid Capacity Block before its start date (Amazon EC2 User Guide, "View
# Capacity Blocks"). payment-pending is not one: the block is released if payment fails.
STARTS_LATER_STATES = frozenset({"scheduled"})


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CapacityReservation(_Frozen):
    """The part of EC2's CapacityReservation this check needs."""

    id: str
    arn: str | None = None
    instance_type: str
    availability_zone: str
    total_instance_count: int
    available_instance_count: int
    state: str
    start_date: AwareDatetime | None = None
    end_date: AwareDatetime | None = None
    instance_match_criteria: Literal["open", "targeted"]
    platform: str
    reservation_type: Literal["default", "capacity-block"] = "default"


class CapacityLookup(_Frozen):
    """What AWS said about the run's capacity.

    - `reservations`: every reservation EC2 described (the run's one, or the group's members).
    - `group_member_ids`: for a run naming a reservation group, the ids of its capacity
      reservation members, `[]` for a group with none, and `None` when the group does not exist
      (or is not visible to this account); ignored for a run naming one reservation.
    - `missing_ids`: reservation ids asked for that EC2 does not know.
    - `offerings`: availability zone -> instance types offered there (the adapter only asks about
      the run's instance type), for the zones concerned; `None` when not checked.
    """

    reservations: list[CapacityReservation] = []
    group_member_ids: list[str] | None = None
    missing_ids: list[str] = []
    offerings: dict[str, list[str]] | None = None

    def get(self, reservation_id: str) -> CapacityReservation | None:
        return next((r for r in self.reservations if r.id == reservation_id), None)


def reservation_platform(spec: RunSpec) -> str:
    """The reservation platform the run's cluster OS launches as (ParallelCluster's own mapping)."""
    return RESERVATION_PLATFORM_BY_OS[spec.cluster.os]


def target_zone(spec: RunSpec, found: CapacityLookup) -> str | None:
    """The availability zone the run's network (and so its compute nodes) must be built in.

    The run's own `capacity.availability_zone` wins; otherwise the zone of its reservation, or,
    for a group, the zone whose usable members hold the most available instances (ties: the
    first by name). `None` when nothing usable was found.
    """
    if spec.capacity.availability_zone:
        return spec.capacity.availability_zone
    if spec.capacity.reservation_id:
        reservation = found.get(spec.capacity.reservation_id)
        return reservation.availability_zone if reservation else None
    available = _available_by_zone(_usable(spec, _members(spec, found)))
    if not available:
        return None
    return min(available, key=lambda zone: (-available[zone], zone))


def assess_capacity(
    spec: RunSpec,
    found: CapacityLookup,
    *,
    stack_region: str,
    now: datetime,
    startup_allowance: timedelta = DEFAULT_STARTUP_ALLOWANCE,
    aws_startup_allowance: timedelta | None = None,
) -> list[Finding]:
    """Every finding about the run's capacity, ERRORs first, then WARNINGs, then INFOs.

    `now` must be timezone-aware (EC2 dates are), so that comparing them is meaningful.
    `aws_startup_allowance`: when `startup_allowance` is the local runtime's compressed one, AWS's:
    a reservation that ends before a cluster on AWS could be up is then a WARNING saying AWS
    refuses the run (the local cluster is up in seconds, and a rehearsal's reservations end
    minutes away, so the local run goes on).
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware, e.g. datetime.now(UTC)")
    # A run that waits for its reservation's start needs its instances from that start on.
    starts = max(now + startup_allowance, _waits_for(spec, found, now) or now)
    window = _RunWindow(starts=starts, ends=starts + timedelta(seconds=spec.workload.max_runtime_seconds))
    findings = _region_findings(spec, stack_region)
    if spec.capacity.reservation_id:
        findings += _reservation_findings(spec, found, window, stack_region, now)
    else:
        findings += _group_findings(spec, found, window, stack_region)
    if not has_errors(findings):
        findings += _what_the_cluster_gets(spec, found, window)
    if aws_startup_allowance is not None and aws_startup_allowance > startup_allowance:
        findings += _refused_on_aws(spec, found, now, aws_startup_allowance, findings)
    order = list(Severity)
    return sorted(findings, key=lambda finding: order.index(finding.severity))


# --- checks -------------------------------------------------------------------------------------


class _RunWindow(_Frozen):
    """When the run's instances are needed: from the earliest the cluster can launch them to the
    latest the training can end."""

    starts: datetime
    ends: datetime


def _error(code: Code, message: str) -> Finding:
    return Finding(code=code, severity=Severity.ERROR, message=message)


def _warning(code: Code, message: str) -> Finding:
    return Finding(code=code, severity=Severity.WARNING, message=message)


def _info(code: Code, message: str) -> Finding:
    return Finding(code=code, severity=Severity.INFO, message=message)


def _as_warning(finding: Finding) -> Finding:
    """A group member's ERROR: the member is left out rather than the run rejected."""
    return _warning(finding.code, f"{finding.message} (this member of the group is not counted)")


def _region_findings(spec: RunSpec, stack_region: str) -> list[Finding]:
    findings = []
    if spec.region and spec.region != stack_region:
        findings.append(
            _error(
                Code.REGION_MISMATCH,
                f"region is {spec.region}, but this trainrun stack runs in {stack_region} and can only create "
                f"resources there; submit the run to a trainrun stack deployed in {spec.region}, or set region "
                f"to {stack_region} with a reservation in {stack_region}",
            )
        )
    arn = spec.capacity.reservation_group_arn
    if arn and arn.split(":")[3] != stack_region and arn.split(":")[3] != spec.region:
        findings.append(
            _error(
                Code.REGION_MISMATCH,
                f"capacity.reservation_group_arn is in {arn.split(':')[3]}, but this trainrun stack runs in "
                f"{stack_region}; use a reservation group in {stack_region}, or a trainrun stack deployed in "
                f"{arn.split(':')[3]}",
            )
        )
    return findings


def _reservation_findings(
    spec: RunSpec, found: CapacityLookup, window: _RunWindow, stack_region: str, now: datetime
) -> list[Finding]:
    wanted = spec.capacity
    reservation = found.get(wanted.reservation_id or "")
    if reservation is None:
        return [
            _error(
                Code.CAPACITY_RESERVATION_NOT_FOUND,
                f"capacity reservation {wanted.reservation_id} does not exist in {stack_region} for this account "
                "(or is not shared with it); check capacity.reservation_id with "
                f"`aws ec2 describe-capacity-reservations --region {stack_region}`",
            )
        ]
    findings = []
    starts_later = _starts_later(reservation, now)
    if starts_later:
        findings.append(_starts_later_finding(reservation, now))
    elif reservation.state != "active":
        findings.append(_not_active(reservation))
    if reservation.instance_type != wanted.instance_type:
        findings.append(
            _error(
                Code.INSTANCE_TYPE_MISMATCH,
                f"{reservation.id} reserves {reservation.instance_type}, but capacity.instance_type is "
                f"{wanted.instance_type}; set capacity.instance_type to {reservation.instance_type} or use a "
                f"reservation for {wanted.instance_type}",
            )
        )
    if reservation.platform != reservation_platform(spec):
        findings.append(_platform_mismatch(spec, reservation))
    if wanted.availability_zone and reservation.availability_zone != wanted.availability_zone:
        findings.append(
            _error(
                Code.AVAILABILITY_ZONE_MISMATCH,
                f"{reservation.id} is in {reservation.availability_zone}, but capacity.availability_zone is "
                f"{wanted.availability_zone}; instances only consume a reservation in its own zone: set "
                f"capacity.availability_zone to {reservation.availability_zone} or remove it",
            )
        )
    findings += _offering_findings(spec, found, reservation.availability_zone)
    ends = _ends_during(reservation, window)
    if ends is not None:
        findings.append(ends)
    # Before a capacity block starts EC2 shows its available capacity as zero (Amazon EC2 User
    # Guide, "View Capacity Blocks"): what it will hold is its total.
    available = reservation.total_instance_count if starts_later else reservation.available_instance_count
    if not has_errors(findings) and available < wanted.nodes:
        findings.append(
            _error(
                Code.INSUFFICIENT_CAPACITY,
                f"{reservation.id} has {available} of "
                f"{reservation.total_instance_count} instances available, and the run needs {wanted.nodes}; lower "
                f"capacity.nodes to {available} or less, free instances running in the "
                "reservation, or use a reservation group with more capacity",
            )
        )
    return findings


def _group_findings(spec: RunSpec, found: CapacityLookup, window: _RunWindow, stack_region: str) -> list[Finding]:
    arn = spec.capacity.reservation_group_arn or ""
    if found.group_member_ids is None:
        return [
            _error(
                Code.RESERVATION_GROUP_EMPTY,
                f"reservation group {arn} does not exist in {stack_region} for this account (or is not visible to "
                "it); check capacity.reservation_group_arn with `aws resource-groups list-groups`",
            )
        ]
    if not found.group_member_ids:
        return [
            _error(
                Code.RESERVATION_GROUP_EMPTY,
                f"reservation group {arn} has no capacity reservations; add one with `aws resource-groups "
                "group-resources`, or name a reservation with capacity.reservation_id",
            )
        ]
    findings = []
    members = _members(spec, found)
    missing = [rid for rid in found.group_member_ids if rid in found.missing_ids or found.get(rid) is None]
    if missing:
        findings.append(
            _warning(
                Code.CAPACITY_RESERVATION_NOT_FOUND,
                f"reservation group {arn} lists {_ids(missing)}, which EC2 does not know in {stack_region}; "
                "they are not counted (remove them from the group)",
            )
        )
    zone = target_zone(spec, found)
    findings += _mixed_group_findings(spec, members, zone)
    for reservation in members:
        # A member the run cannot use is not a reason to reject the run: it is not counted, and
        # INSUFFICIENT_CAPACITY follows if the rest is too small.
        if reservation.instance_type != spec.capacity.instance_type:
            continue  # already named by RESERVATION_GROUP_MIXED
        if reservation.state != "active":
            findings.append(_as_warning(_not_active(reservation)))
        elif reservation.platform != reservation_platform(spec):
            findings.append(_as_warning(_platform_mismatch(spec, reservation)))
    if zone:
        findings += _offering_findings(spec, found, zone)
    usable = [r for r in _usable(spec, members) if r.availability_zone == zone]
    counted = []
    for reservation in usable:
        ends = _ends_during(reservation, window)
        if ends is not None and ends.severity is Severity.ERROR:
            findings.append(_as_warning(ends))
            continue
        if ends is not None:
            findings.append(ends)
        counted.append(reservation)
    available = sum(r.available_instance_count for r in counted)
    if available < spec.capacity.nodes:
        findings.append(_group_short(spec, members, counted, zone, available))
    return findings


def _mixed_group_findings(spec: RunSpec, members: list[CapacityReservation], zone: str | None) -> list[Finding]:
    findings = []
    by_type = _ids_by(members, lambda r: r.instance_type)
    if len(by_type) > 1:
        findings.append(
            _warning(
                Code.RESERVATION_GROUP_MIXED,
                f"reservation group {spec.capacity.reservation_group_arn} mixes instance types "
                f"({_described(by_type)}); only the {spec.capacity.instance_type} reservations count for this run",
            )
        )
    matching = [r for r in members if r.instance_type == spec.capacity.instance_type]
    by_zone = _ids_by(matching, lambda r: r.availability_zone)
    if len(by_zone) > 1:
        if spec.capacity.availability_zone:
            consequence = (
                f"only those in capacity.availability_zone {spec.capacity.availability_zone} count for this run"
            )
        else:
            consequence = (
                "the cluster's compute subnet is in one zone, so only the reservations in the zone with the most "
                f"available instances ({zone or 'none usable'}) count; set capacity.availability_zone to choose the "
                "zone"
            )
        findings.append(
            _warning(
                Code.RESERVATION_GROUP_MIXED,
                f"reservation group {spec.capacity.reservation_group_arn} has {spec.capacity.instance_type} "
                f"reservations in several availability zones ({_described(by_zone)}); {consequence}",
            )
        )
    return findings


def _group_short(
    spec: RunSpec,
    members: list[CapacityReservation],
    counted: list[CapacityReservation],
    zone: str | None,
    available: int,
) -> Finding:
    arn = spec.capacity.reservation_group_arn
    where = f" in {zone}" if zone else ""
    parts = ", ".join(f"{r.id} ({r.available_instance_count})" for r in counted) or "no reservation"
    excluded = [r for r in members if r not in counted]
    reasons = "; ".join(f"{r.id} ({_why_not_counted(spec, r, zone)})" for r in excluded)
    not_counted = f"; not counted: {reasons}" if reasons else ""
    remedy = f"lower capacity.nodes to {available} or less, or " if available else ""
    return _error(
        Code.INSUFFICIENT_CAPACITY,
        f"reservation group {arn} has {available} {spec.capacity.instance_type} instances available{where} "
        f"across {parts}, and the run needs {spec.capacity.nodes}{not_counted}; {remedy}add active "
        f"{reservation_platform(spec)} {spec.capacity.instance_type} reservations{where} to the group",
    )


def _why_not_counted(spec: RunSpec, reservation: CapacityReservation, zone: str | None) -> str:
    if reservation.instance_type != spec.capacity.instance_type:
        return reservation.instance_type
    if reservation.state != "active":
        return reservation.state
    if reservation.platform != reservation_platform(spec):
        return reservation.platform
    if reservation.availability_zone != zone:
        return f"in {reservation.availability_zone}"
    return "ends before the run can start"


def _not_active(reservation: CapacityReservation) -> Finding:
    if reservation.state in ("scheduled", "pending", "assessing", "delayed", "payment-pending"):
        starts = f" (starts {_when(reservation.start_date)})" if reservation.start_date else ""
        action = "submit the run once it is active, or use an active reservation"
    else:
        starts = ""
        action = "use an active reservation"
    return _error(
        Code.CAPACITY_RESERVATION_NOT_ACTIVE,
        f"{reservation.id} is {reservation.state}{starts}, not active, so no instance can launch into it; {action}",
    )


def _platform_mismatch(spec: RunSpec, reservation: CapacityReservation) -> Finding:
    expected = reservation_platform(spec)
    # Only an OS a run file may name (one the pinned Neuron release serves) is worth suggesting.
    oses = [os for os in supported_os() if RESERVATION_PLATFORM_BY_OS[os] == reservation.platform]
    other_os = f", or set cluster.os to one that runs as {reservation.platform} ({', '.join(oses)})" if oses else ""
    return _error(
        Code.PLATFORM_MISMATCH,
        f"{reservation.id} reserves {reservation.platform} instances, but cluster.os {spec.cluster.os} nodes run "
        f"as {expected}, so they would not consume it (and ParallelCluster refuses the cluster); use a {expected} "
        f"reservation{other_os}",
    )


def _offering_findings(spec: RunSpec, found: CapacityLookup, zone: str) -> list[Finding]:
    if found.offerings is None or zone not in found.offerings:
        return []
    if spec.capacity.instance_type in found.offerings[zone]:
        return []
    return [
        _error(
            Code.INSTANCE_TYPE_NOT_SUPPORTED,
            f"{spec.capacity.instance_type} is not offered in {zone}; choose a zone that offers it "
            f"(`aws ec2 describe-instance-type-offerings --location-type availability-zone "
            f"--filters Name=instance-type,Values={spec.capacity.instance_type}`) and a reservation there",
        )
    ]


def _ends_during(reservation: CapacityReservation, window: _RunWindow) -> Finding | None:
    end = reservation.end_date
    if end is None or end >= window.ends:
        return None
    if end <= window.starts:
        return _error(
            Code.RESERVATION_ENDS_BEFORE_RUN,
            f"{reservation.id} ends {_when(end)}, before the cluster could be up (about {_when(window.starts)}); "
            "extend the reservation's end date or use another reservation",
        )
    return _warning(
        Code.RESERVATION_ENDS_BEFORE_RUN,
        f"{reservation.id} ends {_when(end)}, before the run's max_runtime is over ({_when(window.ends)}); "
        "training still running then will lose its instances: extend the reservation or lower "
        "workload.max_runtime",
    )


def _refused_on_aws(
    spec: RunSpec, found: CapacityLookup, now: datetime, allowance: timedelta, findings: list[Finding]
) -> list[Finding]:
    """The WARNING a local run gets when its reservation ends before a cluster on AWS could be up
    (`allowance` from `now`), which AWS refuses as an ERROR; none when the run has that ERROR anyway."""
    reservation = found.get(spec.capacity.reservation_id or "")
    if reservation is None or any(
        f.code == Code.RESERVATION_ENDS_BEFORE_RUN and f.severity is Severity.ERROR for f in findings
    ):
        return []
    starts = max(now + allowance, _waits_for(spec, found, now) or now)
    window = _RunWindow(starts=starts, ends=starts + timedelta(seconds=spec.workload.max_runtime_seconds))
    on_aws = _ends_during(reservation, window)
    if on_aws is None or on_aws.severity is not Severity.ERROR:
        return []
    return [
        _warning(
            Code.RESERVATION_ENDS_BEFORE_RUN,
            f"on AWS this run would be refused: {on_aws.message}. The local run goes on, its cluster up in seconds",
        )
    ]


def _what_the_cluster_gets(spec: RunSpec, found: CapacityLookup, window: _RunWindow) -> list[Finding]:
    zone = target_zone(spec, found)
    used = [
        r
        for r in _usable(spec, _members(spec, found), waiting=True)
        if r.availability_zone == zone and not (r.end_date and r.end_date <= window.starts)
    ]
    target = (
        f"CapacityReservationId {spec.capacity.reservation_id}"
        if spec.capacity.reservation_id
        else f"CapacityReservationResourceGroupArn {spec.capacity.reservation_group_arn}"
    )
    findings = []
    targeted = [r.id for r in used if r.instance_match_criteria == "targeted"]
    opened = [r.id for r in used if r.instance_match_criteria == "open"]
    if targeted:
        findings.append(
            _info(
                Code.TARGETED_RESERVATION,
                f"{_are(targeted)} targeted: only instances that name the reservation launch into it; the compute "
                f"queue's CapacityReservationTarget is {target}",
            )
        )
    if opened:
        findings.append(
            _info(
                Code.OPEN_RESERVATION,
                f"{_are(opened)} open: any matching instance in the account launches into it, so other "
                f"{spec.capacity.instance_type} instances started in {zone} can take capacity this run counts on; the "
                f"compute queue's CapacityReservationTarget is {target}",
            )
        )
    if used and all(r.reservation_type == "capacity-block" for r in used):
        findings.append(
            _info(
                Code.CAPACITY_BLOCK,
                f"{_are([r.id for r in used])} a Capacity Block for ML: the compute resource gets "
                "CapacityType: CAPACITY_BLOCK, and its nodes stop when the block ends",
            )
        )
    findings.append(
        _info(
            Code.PLACEMENT_GROUP_DISABLED,
            "the compute queue's placement group is off: an instance launched into a placement group only uses "
            "a reservation made for that placement group, so the cluster's own placement group would miss this "
            "reservation's capacity",
        )
    )
    if zone:
        source = (
            "capacity.availability_zone"
            if spec.capacity.availability_zone
            else f"the zone of {_ids([r.id for r in used])}"
        )
        findings.append(
            _info(
                Code.AVAILABILITY_ZONE_SELECTED,
                f"the run's network and compute nodes will be in {zone} ({source})",
            )
        )
    return findings


def _starts_later(reservation: CapacityReservation, now: datetime) -> bool:
    return (
        reservation.state in STARTS_LATER_STATES and reservation.start_date is not None and reservation.start_date > now
    )


def _starts_later_finding(reservation: CapacityReservation, now: datetime) -> Finding:
    assert reservation.start_date is not None  # _starts_later
    if reservation.start_date - now > LONGEST_CAPACITY_WAIT:
        return _error(
            Code.RESERVATION_STARTS_LATER,
            f"{reservation.id} starts {_when(reservation.start_date)}, more than {LONGEST_CAPACITY_WAIT.days} days "
            "from now, longer than a workflow can wait; submit the run closer to the start",
        )
    kind = "capacity block" if reservation.reservation_type == "capacity-block" else "reservation"
    return _info(
        Code.RESERVATION_STARTS_LATER,
        f"{reservation.id} is a {kind} that starts {_when(reservation.start_date)} ({reservation.state}); the run "
        "waits in 'Wait for capacity', with nothing billable created, and provisions shortly before the start",
    )


def _waits_for(spec: RunSpec, found: CapacityLookup, now: datetime) -> datetime | None:
    """The start of the run's reservation when the run must wait for it (a reservation group's
    members are only counted once active)."""
    reservation = found.get(spec.capacity.reservation_id or "")
    if reservation is None or not _starts_later(reservation, now):
        return None
    return reservation.start_date


def reservation_window(
    spec: RunSpec,
    found: CapacityLookup,
    *,
    now: datetime,
    provisioning_lead: timedelta,
    termination_lead: timedelta,
    stop_margin: timedelta,
) -> ReservationWindow | None:
    """The window of the one reservation the run names (None for a group, or a reservation with
    neither a later start nor an end that takes its instances away).

    `stop_margin`: how long before EC2 begins terminating the instances the job must be told to
    stop: its grace period, plus how late the workflow may notice the time has come.
    """
    reservation = found.get(spec.capacity.reservation_id or "")
    if reservation is None:
        return None
    starts = _waits_for(spec, found, now)
    provision_at = starts - provisioning_lead if starts is not None and starts - provisioning_lead > now else None
    stop_job_at = None
    if reservation.reservation_type == "capacity-block" and reservation.end_date is not None:
        stop_job_at = reservation.end_date - termination_lead - stop_margin
    if provision_at is None and stop_job_at is None:
        return None
    return ReservationWindow(
        reservation_id=reservation.id,
        starts_at=reservation.start_date,
        ends_at=reservation.end_date,
        provision_at=provision_at,
        stop_job_at=stop_job_at,
    )


# --- helpers ------------------------------------------------------------------------------------


def _members(spec: RunSpec, found: CapacityLookup) -> list[CapacityReservation]:
    """The reservations the run may use: its own, or the group's described members."""
    if spec.capacity.reservation_id:
        reservation = found.get(spec.capacity.reservation_id)
        return [reservation] if reservation else []
    ids = found.group_member_ids or []
    return [r for r in found.reservations if r.id in ids]


def _usable(
    spec: RunSpec, reservations: list[CapacityReservation], *, waiting: bool = False
) -> list[CapacityReservation]:
    """Reservations the run's instances would consume, wherever they are; `waiting`: also the
    one reservation the run names when it starts later (the run waits for it)."""
    states = {"active", *STARTS_LATER_STATES} if waiting and spec.capacity.reservation_id else {"active"}
    return [
        r
        for r in reservations
        if r.instance_type == spec.capacity.instance_type
        and r.state in states
        and r.platform == reservation_platform(spec)
        and (spec.capacity.availability_zone is None or r.availability_zone == spec.capacity.availability_zone)
    ]


def _available_by_zone(reservations: list[CapacityReservation]) -> dict[str, int]:
    available: dict[str, int] = defaultdict(int)
    for reservation in reservations:
        available[reservation.availability_zone] += reservation.available_instance_count
    return available


def _ids_by(reservations: list[CapacityReservation], key: Callable[[CapacityReservation], str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = defaultdict(list)
    for reservation in reservations:
        grouped[key(reservation)].append(reservation.id)
    return dict(sorted(grouped.items()))


def _described(grouped: dict[str, list[str]]) -> str:
    return "; ".join(f"{value}: {', '.join(ids)}" for value, ids in grouped.items())


def _ids(ids: list[str]) -> str:
    return ", ".join(ids)


def _are(ids: list[str]) -> str:
    return f"{_ids(ids)} {'is' if len(ids) == 1 else 'are each'}"


def _when(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if moment else "at an unknown time"
