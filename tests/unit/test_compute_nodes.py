"""A pending job whose compute nodes will not come up fails the run fast (trainrun.logic.compute_nodes)."""

from __future__ import annotations

from trainrun.logic.compute_nodes import compute_nodes_failure, protected_mode
from trainrun.logic.head_node_scripts import DownNode, QueueState

BOOTSTRAP_ERROR = "Node bootstrap error: Failed to execute OnNodeConfigured script 1, return code: 1."
TIMEOUT = 1800


def queue(up: int, nodes: int = 2, inactive: int = 0) -> QueueState:
    down = tuple(DownNode(f"compute-st-trn1-{n}", "down", BOOTSTRAP_ERROR) for n in range(up + 1, nodes + 1))
    return QueueState(nodes=nodes, up=up, inactive_partitions=inactive, down=down)


def test_an_inactive_partition_fails_the_run_at_once_naming_protected_mode_and_the_nodes_reason():
    why = compute_nodes_failure(queue(up=0, inactive=1), needed=2, waited_seconds=60, timeout_seconds=TIMEOUT)
    assert why is not None
    assert "protected mode" in why
    assert f"compute-st-trn1-1 (down): {BOOTSTRAP_ERROR}" in why


def test_nodes_still_down_within_the_bootstrap_timeout_are_waited_for():
    assert compute_nodes_failure(queue(up=1), needed=2, waited_seconds=TIMEOUT - 1, timeout_seconds=TIMEOUT) is None


def test_nodes_still_down_after_the_bootstrap_timeout_fail_the_run_with_their_reason():
    why = compute_nodes_failure(queue(up=1), needed=2, waited_seconds=TIMEOUT + 1, timeout_seconds=TIMEOUT)
    assert why is not None
    assert "1 of the 2 compute nodes the run needs are up" in why
    assert "workload.node_bootstrap_timeout: 30 min" in why
    assert f"compute-st-trn1-2 (down): {BOOTSTRAP_ERROR}" in why


def test_a_job_pending_behind_enough_nodes_that_are_up_is_not_a_bootstrap_failure():
    assert compute_nodes_failure(queue(up=2), needed=2, waited_seconds=10 * TIMEOUT, timeout_seconds=TIMEOUT) is None


def test_a_job_whose_status_says_nothing_of_the_nodes_is_waited_for():
    assert compute_nodes_failure(None, needed=2, waited_seconds=10 * TIMEOUT, timeout_seconds=TIMEOUT) is None


def test_nodes_beyond_the_listed_ones_are_counted():
    listed = QueueState(nodes=64, up=0, inactive_partitions=1, down=queue(up=0, nodes=10).down)
    why = compute_nodes_failure(listed, needed=64, waited_seconds=0, timeout_seconds=TIMEOUT)
    assert why is not None and why.endswith("; and 54 more")


def test_protected_mode_is_only_an_inactive_partition():
    assert protected_mode(queue(up=0)) is None
    assert protected_mode(None) is None
    why = protected_mode(queue(up=0, inactive=1))
    assert why is not None and "protected mode" in why and BOOTSTRAP_ERROR in why
