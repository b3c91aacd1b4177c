"""The AWS clock in the local runtime (trainrun.local.clock): emulators take the table's time,
compressed; billed and idle node-minutes come from launch, step and termination times."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from trainrun.local import clock, moto_clock
from trainrun.local.clock import JobStep, NodeBilling
from trainrun.logic import aws_clock

from .test_fsx_emulator import create, lifecycle

# One AWS hour in a real minute: a 6 minute file system is ready in 6 s, long enough to see it
# CREATING on a loaded machine.
SCALE = 60.0


@pytest.fixture
def aws_clock_on() -> Iterator[None]:
    moto_clock.install()
    clock.enable(SCALE)
    yield
    clock.disable()


def node(name: str, started: float, ended: float | None) -> NodeBilling:
    return NodeBilling(cluster="c", instance_id=f"i-{name}", node=name, started=started, ended=ended)


def step(name: str, started: float, ended: float) -> JobStep:
    return JobStep(cluster="c", node=name, started=started, ended=ended)


# --- the figures ---------------------------------------------------------------------------------


def test_a_node_with_no_step_is_idle_for_all_it_billed() -> None:
    # Given one node billed 60 real seconds on a 30x clock (30 AWS minutes)
    figures = clock.figures([node("a", 0, 60)], [], time_scale=30, now=100)
    # Then it billed 30 node-minutes, all idle
    assert figures.node_minutes == pytest.approx(30)
    assert figures.idle_node_minutes == pytest.approx(30)


def test_a_step_on_a_node_is_busy_time_and_the_rest_idle() -> None:
    nodes = [node("a", 0, 60), node("b", 0, 60)]
    steps = [step("a", 10, 40), step("b", 10, 40)]
    figures = clock.figures(nodes, steps, time_scale=1, now=100)
    assert figures.node_minutes == pytest.approx(2)
    assert figures.idle_node_minutes == pytest.approx(1)


def test_overlapping_steps_on_a_node_count_once() -> None:
    figures = clock.figures([node("a", 0, 60)], [step("a", 0, 40), step("a", 20, 50)], time_scale=1, now=60)
    assert figures.idle_node_minutes == pytest.approx(10 / 60)


def test_a_step_counts_only_within_the_nodes_billing_and_only_on_its_node() -> None:
    nodes = [node("a", 10, 30)]
    steps = [step("a", 0, 20), step("b", 10, 30)]
    figures = clock.figures(nodes, steps, time_scale=60, now=100)
    assert figures.node_minutes == pytest.approx(20)
    assert figures.idle_node_minutes == pytest.approx(10)


def test_a_node_still_running_bills_until_now() -> None:
    figures = clock.figures([node("a", 0, None)], [], time_scale=60, now=5)
    assert figures.node_minutes == pytest.approx(5)


def test_the_ledger_ends_only_the_named_clusters_nodes() -> None:
    ledger = clock.Ledger()
    ledger.node_started("c", "i-1", "n1", 0)
    ledger.node_started("other", "i-1", "n1", 0)
    ledger.nodes_ended("c", ["i-1"], 9)
    nodes, _ = ledger.of_cluster("c")
    others, _ = ledger.of_cluster("other")
    assert [n.ended for n in nodes] == [9]
    assert [n.ended for n in others] == [None]


# --- the emulators on the clock ------------------------------------------------------------------


def test_off_the_clock_durations_are_not_waited() -> None:
    clock.disable()
    assert clock.real_seconds(aws_clock.FSX_DELETED) is None


def test_on_the_clock_a_duration_is_compressed_by_the_scale(aws_clock_on: None) -> None:
    assert clock.real_seconds(aws_clock.FSX_DELETED) == pytest.approx(aws_clock.FSX_DELETED.seconds / SCALE)


def test_a_file_system_stays_creating_until_its_tabled_duration_has_passed(aws_clock_on: None, fsx: Any) -> None:
    # Given a SCRATCH_2 file system created on the clock (its tabled creation, compressed)
    lasts = clock.real_seconds(aws_clock.fsx_created("SCRATCH_2", 1200))
    assert lasts is not None
    created_at = time.monotonic()
    file_system_id = create(fsx, "SCRATCH_2")["FileSystemId"]
    # When it is described again and again
    seen = []
    while not seen or seen[-1] != "AVAILABLE":
        before = time.monotonic()
        seen.append(lifecycle(fsx, file_system_id))
        # Then each look before its duration has passed sees it CREATING, however many there are
        if seen[-1] == "CREATING":
            assert before - created_at < lasts + 0.5
    # And it is AVAILABLE only once the duration has passed (not on the second look)
    assert time.monotonic() - created_at >= lasts
    assert seen.count("CREATING") >= 2


def test_a_nat_gateway_is_pending_until_its_tabled_duration_has_passed(aws_clock_on: None, aws: None) -> None:
    ec2 = boto3.client("ec2", region_name="us-west-2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    nat = ec2.create_nat_gateway(SubnetId=subnet, AllocationId=allocation)["NatGateway"]["NatGatewayId"]

    def state() -> str:
        return str(ec2.describe_nat_gateways(NatGatewayIds=[nat])["NatGateways"][0]["State"])

    assert state() == "pending"
    time.sleep((clock.real_seconds(aws_clock.NAT_GATEWAY_AVAILABLE) or 0) + 0.02)
    assert state() == "available"
    ec2.delete_nat_gateway(NatGatewayId=nat)
    assert state() == "deleting"
