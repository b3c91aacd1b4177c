"""The head nodes of the local runtime's clusters: started when a cluster boots, stopped when it goes.

The local ParallelCluster API tells `HeadNodes` (its `ClusterLifecycle`) when a cluster's
nodes are up; `HeadNodes` asks its factory for a head node (the real Slurm one of
trainrun.local.slurm_head_node for `trainrun local`, a scripted one in the integration tests), starts
it with a log shipper that writes to CloudWatch Logs, and registers it with the SSM emulator so
the commands the workflow sends to the head node instance run on it.

The head nodes' sandboxes live under one directory (`trl-*` in the temporary directory) that
names its owner (pid and start time, in OWNER_FILE). A runtime that died without stopping its
head nodes (kill -9) leaves it behind: the next `HeadNodes` reaps it (`reap_dead_sandboxes`),
ending what is left in each head node's mount namespace, then deleting it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from trainrun.local import clock, ssm_emulator
from trainrun.local.pcluster_api import BootedCluster, HeadNodeBootFailed, NodeScripts
from trainrun.local.slurm_head_node import (
    NAMESPACE_FILE,
    SSM_ENVIRONMENT,
    CommandRun,
    LocalHeadNodeUnavailable,
    OnNodeConfiguredFailed,
    check_available,
    end_namespace_processes,
    is_alive,
    job_steps,
    namespace_pids,
    namespace_still_held,
    process_identity,
)
from trainrun.model.jobs import DEFAULT_USERS
from trainrun.model.tags import RUN_ID

logger = logging.getLogger(__name__)

SANDBOXES_PREFIX = "trl-"
OWNER_FILE = "owner"
# In a head node's sandbox while it runs: its instance's id (`trainrun shell` finds it by that).
INSTANCE_ID_FILE = "instance-id"

# ship(log group, log stream, lines): what the CloudWatch agent does with a file's new lines.
Ship = Callable[[str, str, list[str]], None]


class HeadNode(Protocol):
    def start(self, ship: Ship) -> None: ...

    def stop(self) -> None: ...

    def run_script(self, script: str, run: CommandRun) -> None: ...

    def mount_file_system(self) -> None:
        """Mount the cluster's file system at /fsx, as the head node's configuration does after it started."""

    def run_on_node_configured(self, script_uri: str, args: list[str]) -> None:
        """Fetch and run one OnNodeConfigured script; OnNodeConfiguredFailed if it cannot."""

    def bootstrap_compute_nodes(self, scripts: NodeScripts, on_protected: Callable[[], None]) -> None:
        """Run the queue's OnNodeConfigured scripts for each compute node; a node whose script fails
        is DOWN and replaced, and after repeated failures the queue is protected (`on_protected`)."""

    def fail_job(self, job: str) -> None:
        """Make the run's `job` (compile or train) exit non-zero after its command ran."""

    def lose_node_at_step(self, step: int) -> None:
        """Take a compute node down when the train job logs `step`, and bring it back a little later."""


@dataclass(frozen=True)
class HeadNodeRequest:
    """What a head node is made from: the run, its instance, its compute nodes, its OS's user."""

    run_id: str
    instance_id: str
    nodes: list[str]
    user: str
    sandbox: Path


HeadNodeFactory = Callable[[HeadNodeRequest], HeadNode]


class HeadNodes:
    """The running head nodes, by cluster; a `ClusterLifecycle` for the local ParallelCluster API."""

    def __init__(self, factory: HeadNodeFactory, ship: Ship, os_of_run: Callable[[str], str | None]):
        self._factory = factory
        self._ship = ship
        self._os_of_run = os_of_run
        self._running: dict[tuple[str, str], tuple[str, HeadNode, Path]] = {}
        self._lock = threading.Lock()
        reap_dead_sandboxes()
        # Short: Slurm's sockets live under the sandbox, and a Unix socket path has 108 bytes at most.
        self._sandboxes = Path(tempfile.mkdtemp(prefix=SANDBOXES_PREFIX))
        (self._sandboxes / OWNER_FILE).write_text(process_identity(os.getpid()) or "")
        self._booted = 0
        # Runs whose next job should exit non-zero (`--fail-at Compile` / `Train`).
        self.failing_jobs: set[str] = set()
        # The train step at which each head node loses a compute node (`--node-failure-at-step`).
        self.node_failure_at_step: int | None = None
        # Keep each sandbox when its cluster is deleted (LocalRuntime(keep_sandboxes=True)).
        self.keep_sandboxes = False

    def cluster_booted(self, cluster: BootedCluster) -> None:
        run_id = cluster.tags.get(RUN_ID)
        if run_id is None:
            return  # not a trainrun cluster: nothing runs on it
        os_name = self._os_of_run(run_id)
        request = HeadNodeRequest(
            run_id=run_id,
            instance_id=cluster.head_node_id,
            nodes=cluster.compute_node_names,
            user=DEFAULT_USERS.get(os_name or "", "ec2-user"),
            sandbox=self._sandboxes / str(self._booted),
        )
        self._booted += 1
        head_node = self._start(request)
        for job in self.failing_jobs:
            head_node.fail_job(job)
        if self.node_failure_at_step is not None:
            head_node.lose_node_at_step(self.node_failure_at_step)
        with self._lock:
            self._running[(cluster.region, cluster.name)] = (cluster.head_node_id, head_node, request.sandbox)
        # As on AWS, the SSM agent is online while the cluster is still being created, before the
        # node's configuration has mounted the file system, run OnNodeConfigured and booted the
        # compute nodes: the workflow prepares the head node meanwhile.
        ssm_emulator.register_head_node(cluster.head_node_id, head_node)
        (request.sandbox / INSTANCE_ID_FILE).write_text(cluster.head_node_id)
        # A failed boot leaves the head node running, as on AWS: the stack's rollback terminates
        # its instance (then its SSM commands die with it), or, without a rollback, it stays up
        # until the cluster is deleted (cluster_gone stops it either way).
        if cluster.shared_file_system:
            # ParallelCluster mounts a file system in SharedStorage itself, before the custom actions.
            try:
                head_node.mount_file_system()
            except Exception as exc:
                raise HeadNodeBootFailed(f"the local head node did not mount /fsx: {exc}") from exc
        # In order, stopping at the first that fails (ParallelCluster's Sequence); a mount script
        # among them mounts /fsx.
        for script_uri, args in cluster.on_node_configured:
            try:
                head_node.run_on_node_configured(script_uri, args)
            except OnNodeConfiguredFailed as exc:
                # ParallelCluster's head node wait condition fails: the creation ends CREATE_FAILED.
                raise HeadNodeBootFailed(exc.reason, exc.failure_code) from exc
        if cluster.compute_on_node_configured:
            # A compute node's failing bootstrap does not fail the cluster's creation (ParallelCluster
            # replaces the node): the cluster is created, its nodes down, then its queue protected.
            head_node.bootstrap_compute_nodes(
                cluster.compute_on_node_configured,
                on_protected=lambda: cluster.set_compute_fleet_status("PROTECTED"),
            )

    def _start(self, request: HeadNodeRequest) -> HeadNode:
        """A started head node for the request; HeadNodeBootFailed if it cannot start.

        LocalHeadNodeUnavailable is tried once more, in a clean sandbox: what fails then is this
        machine's plumbing, not the run's (a port picked free that another process took before
        slurmctld bound it, daemons slow to come up on a loaded machine). Twice fails the creation."""
        try:
            return self._started(request)
        except LocalHeadNodeUnavailable as exc:
            logger.warning("the local head node of %s did not start (%s): starting it again", request.run_id, exc)
        except Exception as exc:
            raise HeadNodeBootFailed(f"the local head node did not start: {exc}") from exc
        try:
            return self._started(request)
        except Exception as exc:
            raise HeadNodeBootFailed(f"the local head node did not start: {exc}") from exc

    def _started(self, request: HeadNodeRequest) -> HeadNode:
        shutil.rmtree(request.sandbox, ignore_errors=True)
        request.sandbox.mkdir(parents=True)
        head_node = self._factory(request)
        try:
            head_node.start(self._ship)
        except BaseException:
            head_node.stop()
            raise
        return head_node

    def cluster_gone(self, name: str, region: str, *, keep_sandbox: bool = False) -> None:
        """Stop the cluster's head node and delete its sandbox (as its instance's disk goes with it)."""
        with self._lock:
            entry = self._running.pop((region, name), None)
        if entry is not None:
            instance_id, head_node, sandbox = entry
            ssm_emulator.unregister_head_node(instance_id)
            # Before it stops: its namespace's id may be another head node's a moment later.
            (sandbox / INSTANCE_ID_FILE).unlink(missing_ok=True)
            head_node.stop()
            # Before its disk goes: the job steps its nodes ran, for the AWS clock's idle node-minutes.
            clock.ledger().add_steps(clock.JobStep(name, *step) for step in job_steps(sandbox))
            if not (keep_sandbox or self.keep_sandboxes):
                # Here rather than all at the end: the runtime then stops within seconds.
                shutil.rmtree(sandbox, ignore_errors=True)

    def running(self) -> list[HeadNode]:
        with self._lock:
            return [head_node for _, head_node, _ in self._running.values()]

    def stop_all(self, *, keep_sandboxes: bool = False) -> None:
        """Stop every head node; delete their sandboxes unless asked to keep them (to look at)."""
        with self._lock:
            running = list(self._running)
        # At once: each takes a second or more (Slurm's state saved, the last log lines shipped).
        stopping = [
            threading.Thread(
                target=self.cluster_gone,
                args=(name, region),
                kwargs={"keep_sandbox": keep_sandboxes},
                name=f"stop-{name}",
            )
            for region, name in running
        ]
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join()
        if not keep_sandboxes:
            shutil.rmtree(self._sandboxes, ignore_errors=True)

    @property
    def sandboxes(self) -> Path:
        return self._sandboxes


def _owner_alive(sandboxes: Path) -> bool | None:
    """Whether the runtime that made these sandboxes is alive; None when they are not this user's
    runtime's (no owner file), or gone meanwhile."""
    try:
        if sandboxes.is_symlink() or sandboxes.stat().st_uid != os.geteuid():
            return None
        identity = (sandboxes / OWNER_FILE).read_text().strip()
    except OSError:
        return None
    return is_alive(identity)


def reap_dead_sandboxes(root: Path | None = None) -> list[Path]:
    """Delete the sandboxes of runtimes that died without stopping their head nodes (kill -9),
    ending the processes left in their mount namespaces first; the sandboxes deleted.

    A sandbox is dead when the process its owner file names is gone (or is another process that
    reuses the pid). Only this user's sandboxes are looked at.
    """
    root = root or Path(tempfile.gettempdir())
    dead, live_namespaces = [], set()
    for sandboxes in sorted(root.glob(f"{SANDBOXES_PREFIX}*")):
        alive = _owner_alive(sandboxes)
        if alive is None:
            continue
        namespaces = set()
        for namespace_file in sandboxes.glob(f"*/{NAMESPACE_FILE}"):
            # A namespace whose holder is gone was ended by its watchdog; its id may be another
            # head node's by now (any runtime's, wherever its sandbox is), so it is not touched.
            if alive or namespace_still_held(namespace_file.parent):
                with contextlib.suppress(OSError):
                    namespaces.add(namespace_file.read_text().strip())
        if alive:
            live_namespaces |= namespaces
        else:
            dead.append((sandboxes, namespaces))
    reaped = []
    for sandboxes, namespaces in dead:
        # A namespace's number is reused once it is gone: never end a live runtime's head node.
        for namespace in namespaces - live_namespaces:
            end_namespace_processes(namespace, spare=set())
        logger.warning("removing the sandbox of a local runtime that did not stop its head nodes: %s", sandboxes)
        shutil.rmtree(sandboxes, ignore_errors=True)
        reaped.append(sandboxes)
    return reaped


def shell_argv(instance_id: str, command: str | None = None, root: Path | None = None) -> list[str] | None:
    """How to run a shell (or `sh -c command`) on this instance's running local head node, as
    its SSM commands run (trainrun.local.slurm_head_node): in its mount namespace, as root; None when
    no local runtime of this machine runs that head node.

    Its sandbox is found by INSTANCE_ID_FILE among the live runtimes' sandboxes, and its
    namespace entered through a process in it (the namespace's id is the one its head node
    wrote at start; the file is removed before the head node stops, so the id is still its).
    LocalHeadNodeUnavailable when this machine cannot enter it (not root).
    """
    root = root or Path(tempfile.gettempdir())
    for sandboxes in sorted(root.glob(f"{SANDBOXES_PREFIX}*")):
        if not _owner_alive(sandboxes):
            continue  # not ours, or a dead runtime's: its head nodes are gone
        for id_file in sandboxes.glob(f"*/{INSTANCE_ID_FILE}"):
            with contextlib.suppress(OSError):
                if id_file.read_text().strip() != instance_id:
                    continue
                namespace = (id_file.parent / NAMESPACE_FILE).read_text().strip()
                members = sorted(namespace_pids(namespace))
                if not members:
                    return None
                nsenter = check_available()["nsenter"]
                shell = ["sh"] if command is None else ["sh", "-c", command]
                # The agent's environment; the terminal's type too, for an interactive shell.
                terminal = {"TERM": os.environ["TERM"]} if "TERM" in os.environ else {}
                env = [f"{key}={value}" for key, value in {**SSM_ENVIRONMENT, **terminal}.items()]
                return [nsenter, f"--target={members[0]}", "--mount", "--wd=/", "--", "env", "-i", *env, *shell]
    return None
