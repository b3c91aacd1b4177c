"""`trainrun local` stopped from outside mid-run (SIGTERM, kill -9) leaves nothing running, and the
local head node's Slurm listens on loopback only. Real Slurm and MUNGE; root."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trainrun.local.head_node_lifecycle import OWNER_FILE, SANDBOXES_PREFIX, reap_dead_sandboxes
from trainrun.local.slurm_head_node import NAMESPACE_FILE, LocalHeadNode, started_at

from .conftest import EXAMPLES, NEEDS_LOCAL_HEAD_NODE, ROOT, TRAINRUN

pytestmark = NEEDS_LOCAL_HEAD_NODE


def wait_until(condition: Callable[[], object], what: str, timeout: float = 240.0) -> object:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return value


def sandboxes_of(pid: int, root: Path) -> Path | None:
    for sandboxes in root.glob(f"{SANDBOXES_PREFIX}*"):
        owner = sandboxes / OWNER_FILE
        if owner.is_file() and owner.read_text().split(" ")[0] == str(pid):
            return sandboxes
    return None


def still_running(snapshot: dict[tuple[int, int | None], str]) -> dict[int, str]:
    """The processes of a snapshot (pid, start time -> name) that still run: the same pid and start."""
    return {pid: name for (pid, start), name in snapshot.items() if start is not None and started_at(pid) == start}


def snapshot_of(namespace: str) -> dict[tuple[int, int | None], str]:
    """The processes of the namespace now, each with its start time. A namespace's id (its inode)
    is reused once it is gone, by whichever head node another test starts next, so a process is
    known by its pid and start time, never by the namespace's id alone."""
    return {(pid, started_at(pid)): name for pid, name in processes_in(namespace).items()}


def processes_in(namespace: str) -> dict[int, str]:
    """pid -> command name of every process in the mount namespace."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "ns" / "mnt") == namespace:
                    found[int(entry.name)] = (entry / "comm").read_text().strip()
            except OSError:
                continue
    return found


@pytest.fixture
def local_run(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, str]]:
    """`trainrun local` of the single-node example, once its head node runs a job: (process, sandboxes, namespace).

    Its temporary directory is its own: every local runtime that starts removes the sandboxes of
    dead runtimes in its temporary directory, so a runtime another test starts meanwhile would
    otherwise remove the sandbox a killed run leaves before this test looks (a short path: the
    head node's sockets live in its sandbox, and a socket's path is at most 107 bytes)."""
    private_tmp = Path(tempfile.mkdtemp(prefix="trs-", dir="/tmp"))
    private_tmp.chmod(0o755)  # as /tmp: the head node's unprivileged workload user passes through it
    log = (tmp_path / "local.log").open("w")
    process = subprocess.Popen(
        [*TRAINRUN, "local", EXAMPLES / "single-node.yaml", "--json"],
        cwd=ROOT,
        stdout=log,
        stderr=log,
        env={**os.environ, "TMPDIR": str(private_tmp)},
        # Its own process group, as a shell gives a foreground command: Ctrl-C signals the whole group.
        start_new_session=True,
    )
    try:
        sandboxes = wait_until(lambda: sandboxes_of(process.pid, private_tmp), "the run's sandboxes")
        assert isinstance(sandboxes, Path)
        namespace_file = sandboxes / "0" / NAMESPACE_FILE
        wait_until(namespace_file.is_file, "the head node's mount namespace")
        namespace = namespace_file.read_text()
        wait_until(lambda: "slurmstepd" in processes_in(namespace).values(), "a job running on the head node")
        yield process, sandboxes, namespace
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
        reap_dead_sandboxes(private_tmp)
        shutil.rmtree(private_tmp, ignore_errors=True)


def test_sigterm_to_trainrun_local_mid_run_stops_every_process_and_removes_the_sandbox(
    local_run: tuple[subprocess.Popen[bytes], Path, str],
) -> None:
    # Given `trainrun local` with a job running on its head node (munged, slurmctld, slurmd, the job)
    process, sandboxes, namespace = local_run
    head_node = snapshot_of(namespace)
    assert {"munged", "slurmctld", "slurmd", "sleep"} <= set(head_node.values())
    # When it gets SIGTERM
    process.send_signal(signal.SIGTERM)
    # Then it stops within seconds, as on Ctrl-C (exit code 130), leaving no process and no sandbox
    assert process.wait(timeout=60) == 130
    assert still_running(head_node) == {}
    assert not sandboxes.exists()


def test_ctrl_c_of_trainrun_local_mid_run_stops_it_without_a_stack_trace(
    local_run: tuple[subprocess.Popen[bytes], Path, str], tmp_path: Path
) -> None:
    # Given `trainrun local` with a job running on its head node
    process, sandboxes, _ = local_run
    # When Ctrl-C is pressed: the terminal sends SIGINT to every process of the foreground group
    os.killpg(process.pid, signal.SIGINT)
    # Then it stops with 130, says so in one line, and prints no stack trace from any of its processes
    assert process.wait(timeout=60) == 130
    output = (tmp_path / "local.log").read_text()
    assert "trainrun local: interrupted; everything the run started is stopped" in output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output
    assert not sandboxes.exists()


def test_kill_9_of_trainrun_local_mid_run_leaves_no_process_and_the_next_start_removes_the_sandbox(
    local_run: tuple[subprocess.Popen[bytes], Path, str],
) -> None:
    # Given `trainrun local` with a job running on its head node
    process, sandboxes, namespace = local_run
    head_node = snapshot_of(namespace)
    # When it is killed with SIGKILL (no chance to clean up)
    process.kill()
    process.wait()
    # Then every process of its head node ends within seconds (its watchdog sees it die)
    wait_until(lambda: still_running(head_node) == {}, "the head node's processes to end", timeout=15)
    # ... and the next start of a local runtime removes the sandbox it left
    assert sandboxes.exists()
    assert sandboxes in reap_dead_sandboxes(sandboxes.parent)
    assert not sandboxes.exists()


def listening_addresses(pids: set[int]) -> set[str]:
    """The local addresses (IPv4 `a.b.c.d:port`, IPv6 `[...]:port`) the processes listen on (TCP)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    addresses = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # LISTEN
                host, port = local.split(":")
                raw = bytes.fromhex(host)
                text = ".".join(str(b) for b in reversed(raw)) if width == 8 else "[" + raw.hex() + "]"
                addresses.add(f"{text}:{int(port, 16)}")
    return addresses


def test_the_local_head_nodes_slurm_daemons_listen_on_loopback_only(tmp_path: Path) -> None:
    # Given a started local head node (slurmctld and two slurmd)
    node = LocalHeadNode(
        sandbox=tmp_path / "sandbox", nodes=["compute-1", "compute-2"], user="ubuntu", aws_environment={}
    )
    (tmp_path / "sandbox").mkdir()
    node.start(lambda group, stream, lines: None)
    node.mount_file_system()  # as the node's configuration does after it started
    try:
        assert node.mount_namespace is not None
        # When we look at the TCP ports its processes listen on
        addresses = listening_addresses(set(processes_in(node.mount_namespace)))
    finally:
        node.stop()
    # Then there are some (slurmctld's and each slurmd's), every one on 127.0.0.1
    assert len(addresses) >= 3
    assert all(address.startswith("127.0.0.1:") for address in addresses), addresses
