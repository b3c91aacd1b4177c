"""Stopping a local head node ends its namespace's processes, and never those of a namespace
that got the same id once its own was gone (trainrun.local.slurm_head_node.end_namespace_processes)."""

from __future__ import annotations

import signal

import pytest

from trainrun.local import slurm_head_node


class FakeProcesses:
    """A namespace id whose processes end when signalled; `reused_by` moves in once ours are gone."""

    def __init__(self, ours: dict[int, int], reused_by: dict[int, int]) -> None:
        self.alive = dict(ours)  # pid -> start (clock ticks)
        self.reused_by = reused_by
        self.ticks = 1_000
        self.signalled: list[tuple[int, int]] = []

    def namespace_pids(self, namespace: str) -> list[int]:
        if not self.alive:  # the namespace is gone: its id goes to the next one made
            self.alive.update(self.reused_by)
            self.reused_by = {}
        return list(self.alive)

    def started_at(self, pid: int) -> int | None:
        return self.alive.get(pid)

    def kill(self, pid: int, sig: int) -> None:
        self.signalled.append((pid, sig))
        self.alive.pop(pid, None)

    def now_ticks(self) -> int:
        self.ticks += 5
        return self.ticks


@pytest.fixture
def processes(monkeypatch: pytest.MonkeyPatch) -> FakeProcesses:
    fake = FakeProcesses(ours={}, reused_by={})
    monkeypatch.setattr(slurm_head_node, "namespace_pids", fake.namespace_pids)
    monkeypatch.setattr(slurm_head_node, "started_at", fake.started_at)
    monkeypatch.setattr(slurm_head_node, "_now_ticks", fake.now_ticks)
    monkeypatch.setattr(slurm_head_node.os, "kill", fake.kill)
    monkeypatch.setattr(slurm_head_node.time, "sleep", lambda seconds: None)
    return fake


def test_stopping_ends_every_process_of_the_namespace(processes: FakeProcesses) -> None:
    processes.alive.update({11: 100, 12: 120, 13: 130})
    slurm_head_node.end_namespace_processes("mnt:[4026532177]", spare=set())
    assert sorted(pid for pid, _ in processes.signalled) == [11, 12, 13]
    assert {sig for _, sig in processes.signalled} == {signal.SIGTERM}


def test_a_namespace_that_reused_the_id_after_ours_ended_is_left_alone(processes: FakeProcesses) -> None:
    # Given our head node's processes, and another head node that gets the namespace id once ours is gone
    processes.alive.update({11: 100, 12: 120})
    processes.reused_by = {21: 5_000, 22: 5_010}
    # When ours is stopped
    slurm_head_node.end_namespace_processes("mnt:[4026532177]", spare=set())
    # Then only our processes were signalled; the other head node's run on
    assert sorted(pid for pid, _ in processes.signalled) == [11, 12]
    assert set(processes.alive) == {21, 22}
