"""The local head node's start (trainrun.local.head_node_lifecycle.HeadNodes): this machine's
plumbing failing once is tried again in a clean sandbox; failing twice fails the cluster's creation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from trainrun.local import ssm_emulator
from trainrun.local.head_node_lifecycle import HeadNodeRequest, HeadNodes, Ship
from trainrun.local.pcluster_api import BootedCluster, HeadNodeBootFailed
from trainrun.local.slurm_head_node import LocalHeadNodeUnavailable
from trainrun.model.tags import RUN_ID


class FlakyHeadNode:
    """A head node whose start fails while `failures` says so; it leaves a file in its sandbox."""

    def __init__(self, request: HeadNodeRequest, failures: list[Exception]):
        self.request, self._failures = request, failures
        self.started = self.stopped = False

    def start(self, ship: Ship) -> None:
        assert not any(self.request.sandbox.iterdir()), "a start begins in a clean sandbox"
        (self.request.sandbox / "half-started").write_text("")
        if self._failures:
            raise self._failures.pop(0)
        self.started = True

    def stop(self) -> None:
        self.stopped = True


@pytest.fixture
def made() -> list[FlakyHeadNode]:
    return []


@pytest.fixture
def failures() -> list[Exception]:
    """What the next starts raise, in order (a start succeeds once it is empty)."""
    return []


@pytest.fixture
def nodes(made: list[FlakyHeadNode], failures: list[Exception]) -> Iterator[HeadNodes]:
    def factory(request: HeadNodeRequest) -> FlakyHeadNode:
        made.append(FlakyHeadNode(request, failures))
        return made[-1]

    head_nodes = HeadNodes(factory, ship=lambda group, stream, lines: None, os_of_run=lambda run_id: None)
    yield head_nodes
    head_nodes.stop_all()


@pytest.fixture(autouse=True)
def no_ssm_registrations(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(ssm_emulator, "register_head_node", lambda instance_id, head_node: None)
    yield


def booted() -> BootedCluster:
    return BootedCluster(
        name="trainrun-r1", region="us-west-2", head_node_id="i-0123", compute_node_names=[], tags={RUN_ID: "r1"}
    )


def test_a_start_this_machine_failed_once_is_tried_again_in_a_clean_sandbox(
    nodes: HeadNodes, made: list[FlakyHeadNode], failures: list[Exception]
) -> None:
    failures.append(LocalHeadNodeUnavailable("slurmctld exited with 1"))
    nodes.cluster_booted(booted())
    first, second = made
    assert first.stopped and not first.started
    assert second.started and nodes.running() == [second]
    assert first.request.sandbox == second.request.sandbox


def test_a_start_that_fails_twice_fails_the_clusters_creation_with_the_reason(
    nodes: HeadNodes, made: list[FlakyHeadNode], failures: list[Exception]
) -> None:
    failures.extend([LocalHeadNodeUnavailable("timed out"), LocalHeadNodeUnavailable("timed out again")])
    with pytest.raises(HeadNodeBootFailed, match="the local head node did not start: timed out again"):
        nodes.cluster_booted(booted())
    assert [node.stopped for node in made] == [True, True] and nodes.running() == []


def test_any_other_failure_to_start_is_not_tried_again(
    nodes: HeadNodes, made: list[FlakyHeadNode], failures: list[Exception]
) -> None:
    failures.append(RuntimeError("Slurm is not installed"))
    with pytest.raises(HeadNodeBootFailed, match="Slurm is not installed"):
        nodes.cluster_booted(booted())
    assert len(made) == 1 and made[0].stopped
