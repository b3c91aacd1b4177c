"""`trainrun local --aws-clock`: the emulated services take the AWS clock table's durations
(compressed), and the summary reports the run's figures on that clock, as a model."""

from __future__ import annotations

import json

import pytest

from trainrun.logic import aws_clock

from .conftest import EXAMPLES, NEEDS_LOCAL_HEAD_NODE, trainrun

pytestmark = [*NEEDS_LOCAL_HEAD_NODE, pytest.mark.waits]


def waited(state_minutes: dict[str, float], *states: str) -> float:
    return sum(state_minutes.get(state, 0.0) for state in states)


@pytest.mark.timeout(600)
def test_a_single_node_run_on_the_aws_clock_waits_the_tables_durations_and_reports_its_figures() -> None:
    # Given the single-node example (a SCRATCH_2 file system of 1,200 GiB)
    # When it runs on the AWS clock
    result = trainrun("local", EXAMPLES / "single-node.yaml", "--aws-clock", "--json", timeout=540)

    # Then it succeeds and its summary reports the figures, labelled as the model they are
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "SUCCEEDED", summary["error"]
    figures = summary["aws_clock"]
    assert figures["model"].startswith(f"on the AWS clock model ({aws_clock.SOURCES_DOC})")
    assert 0 < figures["time_to_first_step_minutes"] < figures["time_to_deleted_minutes"]
    assert 0 <= figures["idle_node_minutes"] < figures["node_minutes"]
    assert figures["cost_usd"] > figures["idle_cost_usd"] >= 0
    # And the NAT gateway and the file system really took their tabled times (not ready on the second
    # look): the file system is requested beside the network, and its wait (in Link data repository,
    # beside the cluster's creation) ends when it is AVAILABLE, its tabled time after the request
    minutes = figures["state_minutes"]
    network = waited(minutes, "Create network", "Network ready?", "Wait for network", "Create file system")
    assert network >= 0.95 * aws_clock.NAT_GATEWAY_AVAILABLE.minutes
    fsx_wait = waited(minutes, "Link data repository", "Data repository ready?", "Wait for data repository")
    fsx = aws_clock.fsx_created("SCRATCH_2", 1200).minutes
    assert network + fsx_wait >= 0.95 * fsx
    # And the cluster's create waited for its compute nodes after the head node's custom action
    cluster = waited(minutes, "Create cluster", "Cluster ready?", "Wait for cluster")
    assert cluster >= 0.95 * aws_clock.cluster_created(1).minutes
