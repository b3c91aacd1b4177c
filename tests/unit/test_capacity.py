"""Validate capacity: every finding code and severity, from lookups built by hand.

Pure: no AWS, a fixed clock. Each test names the one behaviour it checks.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from trainrun.logic.capacity import (
    CapacityLookup,
    CapacityReservation,
    assess_capacity,
    reservation_window,
    target_zone,
)
from trainrun.model.findings import Code, Finding, Severity, has_errors
from trainrun.model.run_file import RunSpec
from trainrun.settings import StepSettings

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
STACK_REGION = "us-west-2"
RESERVATION_ID = "cr-0123456789abcdef0"
GROUP_ARN = "arn:aws:resource-groups:us-west-2:123456789012:group/trn1-pool"


def run_spec(*, region: str | None = None, max_runtime: str = "24h", **capacity: Any) -> RunSpec:
    target = {"reservation_id": RESERVATION_ID} if "reservation_group_arn" not in capacity else {}
    document: dict[str, Any] = {
        "name": "bert-phase1",
        "capacity": {"instance_type": "trn1.32xlarge", "nodes": 16, **target, **capacity},
        "workload": {
            "source": {"s3": "s3://bucket/workload.tar.gz"},
            "train": "./train.sh",
            "max_runtime": max_runtime,
        },
    }
    if region:
        document["region"] = region
    return RunSpec.model_validate(document)


def group_spec(**capacity: Any) -> RunSpec:
    return run_spec(reservation_group_arn=GROUP_ARN, **capacity)


def run_spec_with_os(os: str, *, custom_ami: str | None = None, **capacity: Any) -> RunSpec:
    spec = run_spec(**capacity)
    return spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"os": os, "custom_ami": custom_ami})})


def reservation(id: str = RESERVATION_ID, **fields: Any) -> CapacityReservation:
    values: dict[str, Any] = {
        "id": id,
        "arn": f"arn:aws:ec2:us-west-2:123456789012:capacity-reservation/{id}",
        "instance_type": "trn1.32xlarge",
        "availability_zone": "us-west-2d",
        "total_instance_count": 16,
        "available_instance_count": 16,
        "state": "active",
        "instance_match_criteria": "targeted",
        "platform": "Linux/UNIX",
        "reservation_type": "default",
    }
    return CapacityReservation(**{**values, **fields})


def single(*reservations: CapacityReservation, offered: list[str] | None = None) -> CapacityLookup:
    zones = {r.availability_zone for r in reservations}
    offerings = {zone: ["trn1.32xlarge"] if offered is None else offered for zone in zones}
    return CapacityLookup(reservations=list(reservations), offerings=offerings)


def group(*reservations: CapacityReservation, missing: list[str] | None = None) -> CapacityLookup:
    zones = {r.availability_zone for r in reservations}
    return CapacityLookup(
        reservations=list(reservations),
        group_member_ids=[r.id for r in reservations] + (missing or []),
        missing_ids=missing or [],
        offerings={zone: ["trn1.32xlarge"] for zone in zones},
    )


def member(n: int, **fields: Any) -> CapacityReservation:
    return reservation(f"cr-{n:017x}", **fields)


def assess(spec: RunSpec, found: CapacityLookup, **kwargs: Any) -> list[Finding]:
    return assess_capacity(spec, found, stack_region=STACK_REGION, now=NOW, **kwargs)


def only(findings: list[Finding], code: Code) -> Finding:
    matching = [f for f in findings if f.code == code]
    assert len(matching) == 1, f"expected one {code}, got {findings}"
    return matching[0]


def codes(findings: list[Finding]) -> set[str]:
    return {f.code for f in findings}


# --- a usable reservation -----------------------------------------------------------------------


def test_a_matching_active_reservation_has_no_error_or_warning() -> None:
    # Given a targeted trn1.32xlarge x16 reservation in us-west-2d
    # When a 16-node run is assessed against it
    findings = assess(run_spec(availability_zone="us-west-2d"), single(reservation()))
    # Then every finding is informational
    assert {f.severity for f in findings} == {Severity.INFO}
    assert not has_errors(findings)


def test_a_targeted_reservation_is_explained_as_targeted() -> None:
    finding = only(assess(run_spec(), single(reservation())), Code.TARGETED_RESERVATION)
    assert finding.severity is Severity.INFO
    assert f"CapacityReservationId {RESERVATION_ID}" in finding.message


def test_an_open_reservation_is_explained_as_open() -> None:
    findings = assess(run_spec(), single(reservation(instance_match_criteria="open")))
    finding = only(findings, Code.OPEN_RESERVATION)
    assert finding.severity is Severity.INFO
    assert Code.TARGETED_RESERVATION not in codes(findings)


def test_a_capacity_block_gets_capacity_type_capacity_block() -> None:
    findings = assess(run_spec(), single(reservation(reservation_type="capacity-block")))
    finding = only(findings, Code.CAPACITY_BLOCK)
    assert finding.severity is Severity.INFO
    assert "CapacityType: CAPACITY_BLOCK" in finding.message


def test_a_default_reservation_is_not_called_a_capacity_block() -> None:
    assert Code.CAPACITY_BLOCK not in codes(assess(run_spec(), single(reservation())))


def test_the_placement_group_is_reported_off() -> None:
    finding = only(assess(run_spec(), single(reservation())), Code.PLACEMENT_GROUP_DISABLED)
    assert finding.severity is Severity.INFO


def test_the_selected_zone_is_the_reservations_zone() -> None:
    finding = only(assess(run_spec(), single(reservation())), Code.AVAILABILITY_ZONE_SELECTED)
    assert finding.severity is Severity.INFO
    assert "us-west-2d" in finding.message


def test_no_informational_finding_accompanies_an_error() -> None:
    # Given a reservation too small for the run
    findings = assess(run_spec(nodes=32), single(reservation()))
    # Then the run is rejected and nothing describes a cluster it will not get
    assert has_errors(findings)
    assert all(f.severity is not Severity.INFO for f in findings)


def test_findings_are_ordered_errors_then_warnings_then_infos() -> None:
    findings = assess(
        group_spec(nodes=8),
        group(member(1, available_instance_count=8), member(2, instance_type="trn1n.32xlarge")),
    )
    severities = [f.severity for f in findings]
    assert severities == sorted(severities, key=list(Severity).index)


# --- one reservation: errors --------------------------------------------------------------------


def test_an_unknown_reservation_is_not_found() -> None:
    finding = only(
        assess(run_spec(), CapacityLookup(missing_ids=[RESERVATION_ID])), Code.CAPACITY_RESERVATION_NOT_FOUND
    )
    assert finding.severity is Severity.ERROR
    assert RESERVATION_ID in finding.message and "us-west-2" in finding.message


@pytest.mark.parametrize("state", ["expired", "cancelled", "pending", "scheduled", "failed"])
def test_a_reservation_that_is_not_active_is_an_error(state: str) -> None:
    finding = only(assess(run_spec(), single(reservation(state=state))), Code.CAPACITY_RESERVATION_NOT_ACTIVE)
    assert finding.severity is Severity.ERROR
    assert state in finding.message


def test_a_capacity_block_waiting_for_payment_says_when_it_starts() -> None:
    starts = NOW + timedelta(days=2)
    findings = assess(
        run_spec(), single(reservation(state="payment-pending", start_date=starts, reservation_type="capacity-block"))
    )
    assert "2026-03-03 12:00 UTC" in only(findings, Code.CAPACITY_RESERVATION_NOT_ACTIVE).message


# --- reservation windows ------------------------------------------------------------------------


def scheduled_block(starts_in: timedelta, **fields: Any) -> CapacityReservation:
    """A capacity block as EC2 describes one before its start: scheduled, no capacity available yet."""
    values: dict[str, Any] = {
        "state": "scheduled",
        "start_date": NOW + starts_in,
        "end_date": NOW + starts_in + timedelta(days=2),
        "reservation_type": "capacity-block",
        "available_instance_count": 0,
    }
    return reservation(**{**values, **fields})


def test_a_capacity_block_that_starts_later_is_accepted_with_an_info() -> None:
    findings = assess(run_spec(), single(scheduled_block(timedelta(hours=3))))
    assert not has_errors(findings)
    finding = only(findings, Code.RESERVATION_STARTS_LATER)
    assert finding.severity is Severity.INFO
    assert "2026-03-01 15:00 UTC" in finding.message and "Wait for capacity" in finding.message
    # What the cluster gets is still said: the block is what the run will use.
    assert {Code.CAPACITY_BLOCK, Code.AVAILABILITY_ZONE_SELECTED} <= codes(findings)


def test_a_capacity_block_that_starts_later_counts_its_total_not_its_zero_available() -> None:
    # Given a block of 8 instances, which EC2 shows with 0 available before it starts
    block = scheduled_block(timedelta(hours=3), total_instance_count=8)
    # Then a run of 8 fits, and a run of 16 does not, named with the block's 8
    assert not has_errors(assess(run_spec(nodes=8), single(block)))
    assert "has 8 of 8 instances" in only(assess(run_spec(), single(block)), Code.INSUFFICIENT_CAPACITY).message


def test_a_start_further_away_than_a_workflow_can_wait_is_refused() -> None:
    finding = only(assess(run_spec(), single(scheduled_block(timedelta(days=400)))), Code.RESERVATION_STARTS_LATER)
    assert finding.severity is Severity.ERROR
    assert "longer than a workflow can wait" in finding.message


def test_a_scheduled_reservation_whose_start_has_passed_is_not_active() -> None:
    # EC2 has not made it active although its start date has passed: nothing to wait for.
    findings = assess(run_spec(), single(scheduled_block(-timedelta(minutes=5))))
    assert only(findings, Code.CAPACITY_RESERVATION_NOT_ACTIVE).severity is Severity.ERROR


def test_the_run_window_of_a_waiting_run_starts_at_the_reservation_start() -> None:
    # Given a block that starts in 3 days and ends 10 hours later, and a 24 h max_runtime
    block = scheduled_block(timedelta(days=3), end_date=NOW + timedelta(days=3, hours=10))
    finding = only(assess(run_spec(), single(block)), Code.RESERVATION_ENDS_BEFORE_RUN)
    # Then the block ending is a warning about max_runtime, not a block ending before the run starts
    assert finding.severity is Severity.WARNING
    assert "before the run's max_runtime is over (2026-03-05 12:00 UTC)" in finding.message


def test_a_reservation_ending_before_a_cluster_on_aws_could_be_up_is_refused() -> None:
    # Given an active reservation that ends in ten minutes
    ending = reservation(end_date=NOW + timedelta(minutes=10))
    # When a run is assessed with AWS's startup allowance
    finding = only(assess(run_spec(), single(ending)), Code.RESERVATION_ENDS_BEFORE_RUN)
    # Then it is refused: the cluster could not be up before the reservation ends
    assert finding.severity is Severity.ERROR
    assert "before the cluster could be up" in finding.message
    assert "extend the reservation's end date or use another reservation" in finding.message


def test_a_local_run_whose_reservation_ends_before_a_cluster_on_aws_could_be_up_is_told_aws_refuses_it() -> None:
    # Given an active reservation that ends in ten minutes, and the local runtime's compressed allowance
    ending = reservation(end_date=NOW + timedelta(minutes=10))
    # When the run is assessed with AWS's allowance beside it
    findings = assess(
        run_spec(max_runtime="1m"),
        single(ending),
        startup_allowance=timedelta(seconds=90),
        aws_startup_allowance=timedelta(minutes=45),
    )
    # Then the local run is not refused, but told AWS would refuse it, why, and the fix
    assert not has_errors(findings)
    finding = only(findings, Code.RESERVATION_ENDS_BEFORE_RUN)
    assert finding.severity is Severity.WARNING
    assert finding.message.startswith("on AWS this run would be refused: ")
    assert "before the cluster could be up (about 2026-03-01 12:45 UTC)" in finding.message
    assert "extend the reservation's end date or use another reservation" in finding.message


def test_a_local_run_whose_reservation_outlasts_a_cluster_on_aws_gets_no_such_warning() -> None:
    lasting = reservation(end_date=NOW + timedelta(hours=2))

    findings = assess(
        run_spec(max_runtime="1m"),
        single(lasting),
        startup_allowance=timedelta(seconds=90),
        aws_startup_allowance=timedelta(minutes=45),
    )

    assert Code.RESERVATION_ENDS_BEFORE_RUN not in codes(findings)


def test_a_group_member_that_starts_later_is_not_counted() -> None:
    findings = assess(group_spec(nodes=16), group(scheduled_block(timedelta(hours=1))))
    assert only(findings, Code.INSUFFICIENT_CAPACITY).severity is Severity.ERROR
    assert Code.RESERVATION_STARTS_LATER not in codes(findings)


LEADS = {
    "provisioning_lead": timedelta(minutes=20),
    "termination_lead": timedelta(minutes=30),
    "stop_margin": timedelta(minutes=15),
}


def test_the_window_of_a_block_that_starts_later_provisions_a_lead_before_its_start() -> None:
    block = scheduled_block(timedelta(hours=3))
    window = reservation_window(run_spec(), single(block), now=NOW, **LEADS)
    assert window is not None
    assert window.provision_at == NOW + timedelta(hours=3) - timedelta(minutes=20)
    # And the job is told to stop before EC2 begins terminating (30 min) less the margin (15 min)
    assert window.stop_job_at == block.end_date - timedelta(minutes=45)  # type: ignore[operator]


def test_a_stacks_block_is_provisioned_early_enough_for_its_compute_nodes_to_launch_at_its_start() -> None:
    # Given a capacity block that starts in 3 hours, and the stack's default provisioning lead
    lead = timedelta(seconds=StepSettings.model_fields["reservation_provisioning_lead_seconds"].default)
    block = scheduled_block(timedelta(hours=3))
    # When its window is drawn
    window = reservation_window(run_spec(), single(block), now=NOW, **(LEADS | {"provisioning_lead": lead}))
    # Then provisioning begins as long before the start as what must exist before ParallelCluster
    # launches the compute nodes takes (the AWS clock's estimates): the NAT gateway beside a
    # PERSISTENT_2 file system (the longer: 12 min), then the cluster's stack (3), the head node's
    # boot (8) and its OnNodeConfigured building the Neuron environment (1 + 6), and clustermgtd's
    # first loop (1)
    before_launch = timedelta(seconds=720 + 180 + 480 + 60 + 360 + 60)
    assert window is not None
    assert window.provision_at == block.start_date - before_launch


def test_a_block_starting_within_the_lead_provisions_at_once() -> None:
    window = reservation_window(run_spec(), single(scheduled_block(timedelta(minutes=10))), now=NOW, **LEADS)
    assert window is not None and window.provision_at is None and window.stop_job_at is not None


def test_an_active_reservation_that_ends_keeps_its_instances_so_no_window() -> None:
    # An On-Demand Capacity Reservation's instances run on as On-Demand instances once it ends.
    ending = reservation(end_date=NOW + timedelta(hours=30))
    assert reservation_window(run_spec(), single(ending), now=NOW, **LEADS) is None
    block = reservation(end_date=NOW + timedelta(hours=30), reservation_type="capacity-block")
    window = reservation_window(run_spec(), single(block), now=NOW, **LEADS)
    assert window is not None and window.provision_at is None
    assert window.stop_job_at == NOW + timedelta(hours=30) - timedelta(minutes=45)


def test_a_reservation_for_another_instance_type_is_a_mismatch() -> None:
    findings = assess(run_spec(), single(reservation(instance_type="trn1n.32xlarge")))
    finding = only(findings, Code.INSTANCE_TYPE_MISMATCH)
    assert finding.severity is Severity.ERROR
    assert "set capacity.instance_type to trn1n.32xlarge" in finding.message


def test_a_reservation_for_another_platform_is_a_mismatch() -> None:
    findings = assess(run_spec(), single(reservation(platform="Red Hat Enterprise Linux")))
    finding = only(findings, Code.PLATFORM_MISMATCH)
    assert finding.severity is Severity.ERROR
    assert "use a Linux/UNIX reservation" in finding.message
    # and not to switch to RHEL: the pinned Neuron release does not serve it, so the run file would be refused
    assert "set cluster.os" not in finding.message


@pytest.mark.parametrize("os", ["rhel8", "rhel9"])
def test_a_rhel_cluster_uses_a_red_hat_enterprise_linux_reservation(os: str) -> None:
    # Given a RHEL cluster and a reservation billed as Red Hat Enterprise Linux (what
    # ParallelCluster's CapacityReservationValidator requires for RHEL)
    spec = run_spec_with_os(os)
    # Then the reservation fits
    findings = assess(spec, single(reservation(platform="Red Hat Enterprise Linux")))
    assert Code.PLATFORM_MISMATCH not in codes(findings)
    assert not has_errors(findings)


@pytest.mark.parametrize("os", ["rhel8", "rhel9"])
def test_a_rhel_cluster_rejects_a_linux_unix_reservation(os: str) -> None:
    findings = assess(run_spec_with_os(os), single(reservation(platform="Linux/UNIX")))
    finding = only(findings, Code.PLATFORM_MISMATCH)
    assert finding.severity is Severity.ERROR
    assert f"cluster.os {os}" in finding.message
    assert "use a Red Hat Enterprise Linux reservation" in finding.message


def test_a_rocky_cluster_uses_a_linux_unix_reservation() -> None:
    spec = run_spec_with_os("rocky9", custom_ami="ami-0123456789abcdef0")
    assert not has_errors(assess(spec, single(reservation(platform="Linux/UNIX"))))
    assert Code.PLATFORM_MISMATCH in codes(assess(spec, single(reservation(platform="Red Hat Enterprise Linux"))))


def test_a_rhel_group_counts_only_its_red_hat_enterprise_linux_members() -> None:
    # Given a group with one RHEL and one Linux/UNIX member of 16 instances each, and a rhel9 run of 16
    found = group(member(1, platform="Red Hat Enterprise Linux"), member(2, platform="Linux/UNIX"))
    spec = run_spec_with_os("rhel9", reservation_group_arn=GROUP_ARN, nodes=16)
    findings = assess(spec, found)
    # Then the run fits on the RHEL member, and the Linux/UNIX one is left out with a warning
    assert not has_errors(findings)
    assert only(findings, Code.PLATFORM_MISMATCH).severity is Severity.WARNING


def test_a_reservation_in_another_zone_than_the_run_names_is_a_mismatch() -> None:
    findings = assess(run_spec(availability_zone="us-west-2b"), single(reservation()))
    finding = only(findings, Code.AVAILABILITY_ZONE_MISMATCH)
    assert finding.severity is Severity.ERROR
    assert "set capacity.availability_zone to us-west-2d" in finding.message


def test_a_reservation_with_too_few_available_instances_is_insufficient() -> None:
    # Given a reservation of 16 with 8 free
    findings = assess(run_spec(nodes=16), single(reservation(available_instance_count=8)))
    # Then the message says how many are free and what to change
    finding = only(findings, Code.INSUFFICIENT_CAPACITY)
    assert finding.severity is Severity.ERROR
    assert "has 8 of 16 instances available" in finding.message
    assert "lower capacity.nodes to 8" in finding.message


def test_capacity_is_not_counted_for_a_reservation_of_the_wrong_type() -> None:
    findings = assess(run_spec(), single(reservation(instance_type="trn1n.32xlarge", available_instance_count=0)))
    assert Code.INSUFFICIENT_CAPACITY not in codes(findings)


def test_an_instance_type_not_offered_in_the_zone_is_not_supported() -> None:
    findings = assess(run_spec(), single(reservation(), offered=[]))
    finding = only(findings, Code.INSTANCE_TYPE_NOT_SUPPORTED)
    assert finding.severity is Severity.ERROR
    assert "trn1.32xlarge is not offered in us-west-2d" in finding.message


def test_offerings_that_were_not_checked_raise_nothing() -> None:
    findings = assess(run_spec(), CapacityLookup(reservations=[reservation()], offerings=None))
    assert Code.INSTANCE_TYPE_NOT_SUPPORTED not in codes(findings)


# --- end dates ----------------------------------------------------------------------------------


def test_a_reservation_ending_before_the_cluster_is_up_is_an_error() -> None:
    # Given the default 45 minute startup allowance and a reservation ending in 30 minutes
    findings = assess(run_spec(), single(reservation(end_date=NOW + timedelta(minutes=30))))
    finding = only(findings, Code.RESERVATION_ENDS_BEFORE_RUN)
    assert finding.severity is Severity.ERROR


def test_a_reservation_ending_during_the_run_is_a_warning() -> None:
    # Given a 24h max_runtime and a reservation ending in 2 hours
    findings = assess(run_spec(max_runtime="24h"), single(reservation(end_date=NOW + timedelta(hours=2))))
    finding = only(findings, Code.RESERVATION_ENDS_BEFORE_RUN)
    assert finding.severity is Severity.WARNING
    assert "workload.max_runtime" in finding.message
    assert not has_errors(findings)


def test_a_reservation_ending_after_the_run_raises_nothing() -> None:
    findings = assess(run_spec(max_runtime="1h"), single(reservation(end_date=NOW + timedelta(hours=2))))
    assert Code.RESERVATION_ENDS_BEFORE_RUN not in codes(findings)


def test_the_startup_allowance_moves_the_start_of_the_run() -> None:
    # Given a reservation ending in 30 minutes and a 10 minute startup allowance
    findings = assess(
        run_spec(max_runtime="1m"),
        single(reservation(end_date=NOW + timedelta(minutes=30))),
        startup_allowance=timedelta(minutes=10),
    )
    # Then the run fits before the end
    assert Code.RESERVATION_ENDS_BEFORE_RUN not in codes(findings)


def test_a_naive_clock_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        assess_capacity(run_spec(), single(reservation()), stack_region=STACK_REGION, now=NOW.replace(tzinfo=None))


# --- regions ------------------------------------------------------------------------------------


def test_a_run_for_another_region_than_the_stack_is_a_mismatch() -> None:
    findings = assess(run_spec(region="us-east-1"), CapacityLookup(missing_ids=[RESERVATION_ID]))
    finding = only(findings, Code.REGION_MISMATCH)
    assert finding.severity is Severity.ERROR
    assert "us-east-1" in finding.message and "us-west-2" in finding.message


def test_a_group_in_another_region_than_the_stack_is_a_mismatch() -> None:
    spec = run_spec(reservation_group_arn="arn:aws:resource-groups:us-east-1:123456789012:group/trn1-pool")
    finding = only(assess(spec, CapacityLookup(group_member_ids=None)), Code.REGION_MISMATCH)
    assert finding.severity is Severity.ERROR
    assert "capacity.reservation_group_arn is in us-east-1" in finding.message


def test_a_run_in_the_stacks_region_has_no_region_finding() -> None:
    findings = assess(run_spec(region="us-west-2"), single(reservation()))
    assert Code.REGION_MISMATCH not in codes(findings)


# --- groups -------------------------------------------------------------------------------------


def test_a_group_that_does_not_exist_is_empty() -> None:
    finding = only(assess(group_spec(), CapacityLookup(group_member_ids=None)), Code.RESERVATION_GROUP_EMPTY)
    assert finding.severity is Severity.ERROR
    assert "does not exist" in finding.message


def test_a_group_without_reservations_is_empty() -> None:
    finding = only(assess(group_spec(), CapacityLookup(group_member_ids=[])), Code.RESERVATION_GROUP_EMPTY)
    assert finding.severity is Severity.ERROR
    assert "has no capacity reservations" in finding.message


def test_a_group_counts_the_sum_of_its_matching_members() -> None:
    # Given two members with 8 free instances each
    found = group(member(1, available_instance_count=8), member(2, available_instance_count=8))
    # When a 16-node run is assessed
    findings = assess(group_spec(nodes=16), found)
    # Then together they are enough
    assert not has_errors(findings)
    assert f"CapacityReservationResourceGroupArn {GROUP_ARN}" in only(findings, Code.TARGETED_RESERVATION).message


def test_a_group_with_too_few_instances_is_insufficient() -> None:
    found = group(member(1, available_instance_count=4), member(2, available_instance_count=4))
    finding = only(assess(group_spec(nodes=16), found), Code.INSUFFICIENT_CAPACITY)
    assert finding.severity is Severity.ERROR
    assert "has 8 trn1.32xlarge instances available in us-west-2d" in finding.message
    assert "lower capacity.nodes to 8" in finding.message


def test_a_group_does_not_count_members_of_another_instance_type() -> None:
    found = group(member(1, available_instance_count=8), member(2, instance_type="trn1n.32xlarge"))
    finding = only(assess(group_spec(nodes=16), found), Code.INSUFFICIENT_CAPACITY)
    assert "not counted: cr-00000000000000002 (trn1n.32xlarge)" in finding.message


def test_a_group_does_not_count_inactive_members_and_says_so() -> None:
    found = group(member(1), member(2, state="expired"))
    findings = assess(group_spec(nodes=16), found)
    # Then the run still fits on the active member, with a warning about the expired one
    assert not has_errors(findings)
    warning = only(findings, Code.CAPACITY_RESERVATION_NOT_ACTIVE)
    assert warning.severity is Severity.WARNING
    assert "not counted" in warning.message


def test_a_group_does_not_count_members_of_another_platform_and_says_so() -> None:
    found = group(member(1), member(2, platform="Windows"))
    warning = only(assess(group_spec(nodes=16), found), Code.PLATFORM_MISMATCH)
    assert warning.severity is Severity.WARNING


def test_a_group_member_ending_before_the_run_is_left_out_with_a_warning() -> None:
    # Given one member that ends in 10 minutes and one that lasts
    found = group(member(1, end_date=NOW + timedelta(minutes=10)), member(2, available_instance_count=8))
    findings = assess(group_spec(nodes=8), found)
    # Then the run is not rejected for the short-lived member alone
    warning = only(findings, Code.RESERVATION_ENDS_BEFORE_RUN)
    assert warning.severity is Severity.WARNING
    assert not has_errors(findings)


def test_a_group_member_ending_before_the_run_does_not_count_towards_capacity() -> None:
    found = group(member(1, end_date=NOW + timedelta(minutes=10)), member(2, available_instance_count=8))
    finding = only(assess(group_spec(nodes=16), found), Code.INSUFFICIENT_CAPACITY)
    assert "ends before the run can start" in finding.message


def test_a_group_member_ec2_does_not_know_is_a_warning() -> None:
    found = group(member(1), missing=["cr-0000000000000000f"])
    finding = only(assess(group_spec(nodes=16), found), Code.CAPACITY_RESERVATION_NOT_FOUND)
    assert finding.severity is Severity.WARNING
    assert "cr-0000000000000000f" in finding.message


def test_a_group_of_mixed_instance_types_is_a_warning() -> None:
    found = group(member(1), member(2, instance_type="trn1n.32xlarge"))
    finding = only(assess(group_spec(nodes=16), found), Code.RESERVATION_GROUP_MIXED)
    assert finding.severity is Severity.WARNING
    assert "only the trn1.32xlarge reservations count" in finding.message


def test_a_group_spread_over_zones_without_a_zone_warns_that_one_zone_is_used() -> None:
    # Given members in two zones and no capacity.availability_zone
    found = group(member(1, availability_zone="us-west-2b", available_instance_count=4), member(2))
    findings = assess(group_spec(nodes=16), found)
    # Then the warning explains the one-zone compute subnet and how to choose
    finding = only(findings, Code.RESERVATION_GROUP_MIXED)
    assert finding.severity is Severity.WARNING
    assert "compute subnet is in one zone" in finding.message
    assert "set capacity.availability_zone" in finding.message


def test_a_group_spread_over_zones_uses_the_zone_with_most_available() -> None:
    found = group(member(1, availability_zone="us-west-2b", available_instance_count=4), member(2))
    assert target_zone(group_spec(nodes=16), found) == "us-west-2d"
    assert "us-west-2d" in only(assess(group_spec(nodes=16), found), Code.AVAILABILITY_ZONE_SELECTED).message


def test_a_group_spread_over_zones_does_not_add_up_across_zones() -> None:
    # Given 8 free in each of two zones and a 16-node run
    found = group(
        member(1, availability_zone="us-west-2b", available_instance_count=8),
        member(2, available_instance_count=8),
    )
    # Then only one zone's 8 count
    finding = only(assess(group_spec(nodes=16), found), Code.INSUFFICIENT_CAPACITY)
    assert "has 8 trn1.32xlarge instances available" in finding.message
    assert "(in us-west-2" in finding.message


def test_a_group_counts_only_members_in_the_zone_the_run_names() -> None:
    found = group(member(1, availability_zone="us-west-2b"), member(2, available_instance_count=4))
    findings = assess(group_spec(nodes=16, availability_zone="us-west-2d"), found)
    assert (
        "only those in capacity.availability_zone us-west-2d count"
        in only(findings, Code.RESERVATION_GROUP_MIXED).message
    )
    assert "has 4 trn1.32xlarge instances available in us-west-2d" in only(findings, Code.INSUFFICIENT_CAPACITY).message


def test_a_group_of_capacity_blocks_gets_capacity_type_capacity_block() -> None:
    found = group(member(1, reservation_type="capacity-block"))
    assert only(assess(group_spec(nodes=16), found), Code.CAPACITY_BLOCK).severity is Severity.INFO


def test_a_group_with_open_and_targeted_members_explains_both() -> None:
    found = group(
        member(1, available_instance_count=8), member(2, instance_match_criteria="open", available_instance_count=8)
    )
    findings = assess(group_spec(nodes=16), found)
    assert "cr-00000000000000001" in only(findings, Code.TARGETED_RESERVATION).message
    assert "cr-00000000000000002" in only(findings, Code.OPEN_RESERVATION).message


# --- target zone --------------------------------------------------------------------------------


def test_the_target_zone_is_the_one_the_run_names() -> None:
    assert target_zone(run_spec(availability_zone="us-west-2b"), single(reservation())) == "us-west-2b"


def test_the_target_zone_is_the_reservations_zone_by_default() -> None:
    assert target_zone(run_spec(), single(reservation(availability_zone="us-west-2a"))) == "us-west-2a"


def test_there_is_no_target_zone_without_a_reservation() -> None:
    assert target_zone(run_spec(), CapacityLookup(missing_ids=[RESERVATION_ID])) is None


def test_there_is_no_target_zone_for_a_group_without_usable_members() -> None:
    assert target_zone(group_spec(), group(member(1, state="expired"))) is None


# --- the model ----------------------------------------------------------------------------------


def test_every_code_is_its_own_name() -> None:
    # The codes are a contract: their values are the exact strings readers match on.
    assert all(code.value == code.name for code in Code)


def test_findings_serialize_to_plain_strings() -> None:
    finding = Finding(code=Code.INSUFFICIENT_CAPACITY, severity=Severity.ERROR, message="m")
    assert finding.model_dump(mode="json") == {"code": "INSUFFICIENT_CAPACITY", "severity": "ERROR", "message": "m"}
