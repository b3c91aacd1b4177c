"""The AWS clock in the local runtime (`trainrun local --aws-clock`): waits as long as AWS's, compressed.

By default the local emulators make every resource ready on the second look, so a local run says
nothing about how long a run waits on AWS. With the AWS clock on, each emulator takes the duration
trainrun.logic.aws_clock tables for what it emulates, divided by the runtime's time scale (the same
compression the Step Functions interpreter runs at, `LOCAL_TIME_SCALE`): the workflow's real code
then waits, polls and overlaps as it would on AWS, only faster. The emulators consult this module
(`real_seconds`); it is off unless the runtime turns it on, so the default run is as fast as ever.
The patches that make moto itself wait live in trainrun.local.moto_clock: this module imports no
moto, so the local ParallelCluster API stays usable where moto is not installed (tests/pcluster).

It also keeps the billing facts of the run on that clock (`Ledger`): when each compute node began
and stopped billing (the local ParallelCluster API records it) and when a Slurm job step ran on
each node (the local head node's srun stand-in logs it). `figures` turns them into node-minutes
billed and idle; trainrun.local.summary reports them as a model (docs/architecture.md#the-aws-clock).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from trainrun.logic.aws_clock import Duration

__all__ = [
    "BillingFigures",
    "JobStep",
    "Ledger",
    "NodeBilling",
    "copy_duration",
    "disable",
    "enable",
    "figures",
    "ledger",
    "real_seconds",
    "register_copy",
    "scale",
]


@dataclass
class NodeBilling:
    """One compute node's billing on the local clock (time.time() seconds); `ended` None: still billing."""

    cluster: str
    instance_id: str
    node: str  # its Slurm node name
    started: float
    ended: float | None = None


@dataclass(frozen=True)
class JobStep:
    """A Slurm job step (an srun) that ran on `node` from `started` to `ended` (time.time() seconds)."""

    cluster: str
    node: str
    started: float
    ended: float


@dataclass
class Ledger:
    """The billing facts of the runtime's clusters, as they happen."""

    origin: float = field(default_factory=time.time)
    nodes: list[NodeBilling] = field(default_factory=list)
    steps: list[JobStep] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def node_started(self, cluster: str, instance_id: str, node: str, at: float) -> None:
        with self._lock:
            self.nodes.append(NodeBilling(cluster, instance_id, node, at))

    def nodes_ended(self, cluster: str, instance_ids: Iterable[str], at: float) -> None:
        ids = set(instance_ids)
        with self._lock:
            for billing in self.nodes:
                if billing.cluster == cluster and billing.instance_id in ids and billing.ended is None:
                    billing.ended = at

    def add_steps(self, steps: Iterable[JobStep]) -> None:
        with self._lock:
            self.steps.extend(steps)

    def of_cluster(self, cluster: str) -> tuple[list[NodeBilling], list[JobStep]]:
        with self._lock:
            return (
                [billing for billing in self.nodes if billing.cluster == cluster],
                [step for step in self.steps if step.cluster == cluster],
            )


_state: dict[str, float | None] = {"scale": None}
_ledger = Ledger()


def enable(time_scale: float) -> None:
    """Turn the AWS clock on at `time_scale` AWS seconds per real second; a fresh ledger."""
    global _ledger
    if time_scale < 1:
        raise ValueError(f"time_scale must be at least 1 (real time), not {time_scale}")
    _state["scale"] = float(time_scale)
    _ledger = Ledger()


def disable() -> None:
    """Back to the instant emulators (the ledger stays readable until the next enable)."""
    _state["scale"] = None
    _copies.clear()


def scale() -> float | None:
    """AWS seconds per real second, or None when the AWS clock is off."""
    return _state["scale"]


def real_seconds(duration: Duration) -> float | None:
    """How long `duration` lasts in real seconds on the compressed clock; None when the clock is off."""
    factor = scale()
    return None if factor is None else duration.scaled(factor).seconds


def ledger() -> Ledger:
    return _ledger


# --- the dataset copy ----------------------------------------------------------------------------
# A fixture's object is a tiny stand-in of the real dataset. On the AWS clock, GetObject of one the
# runtime registered answers as late as copying the real one into the run's file system takes
# (trainrun.logic.aws_clock.dataset_copy; trainrun.local.moto_clock makes moto wait).
_copies: dict[tuple[str, str], Duration] = {}


def register_copy(bucket: str, key: str, duration: Duration) -> None:
    _copies[(bucket, key)] = duration


def copy_duration(bucket: str, key: str) -> Duration | None:
    """How long reading this registered object takes on the AWS clock; None for any other object."""
    return _copies.get((bucket, key))


# --- the figures ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class BillingFigures:
    """Node-minutes on the AWS clock: billed (launch to termination) and idle (billed, no step running)."""

    node_minutes: float
    idle_node_minutes: float
    # The last job step's end to the last compute node's termination (AWS seconds); None while a
    # node still bills, or when no step ran.
    job_end_to_terminated_seconds: float | None = None


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def figures(nodes: list[NodeBilling], steps: list[JobStep], *, time_scale: float, now: float) -> BillingFigures:
    """Billed and idle node-minutes on the AWS clock (real seconds x `time_scale`).

    A node bills from its launch to its termination (`now` while it runs); it is busy while a job
    step runs on it (overlapping steps count once, and only within its billing), idle otherwise.
    """
    billed = busy = 0.0
    for node in nodes:
        start, end = node.started, node.ended if node.ended is not None else now
        billed += max(0.0, end - start)
        on_node = [(max(s.started, start), min(s.ended, end)) for s in steps if s.node == node.node]
        busy += sum(e - s for s, e in _merged([(s, e) for s, e in on_node if e > s]))
    ends = [node.ended for node in nodes]
    release = None
    if steps and ends and None not in ends:
        release = max(0.0, max(e for e in ends if e is not None) - max(step.ended for step in steps)) * time_scale
    return BillingFigures(
        node_minutes=billed * time_scale / 60,
        idle_node_minutes=(billed - busy) * time_scale / 60,
        job_end_to_terminated_seconds=release,
    )
