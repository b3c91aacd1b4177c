"""`trainrun shell` and `trainrun down` as a user runs them against `trainrun serve`: a shell in
the kept run's head node (piped, one command, and on a terminal), then the kept run torn down."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time
from pathlib import Path

import yaml

from .conftest import EXAMPLES, NEEDS_LOCAL_HEAD_NODE, ROOT, TRAINRUN, trainrun

pytestmark = NEEDS_LOCAL_HEAD_NODE


def shell_on_a_terminal(run_id: str, typed: bytes, env: dict[str, str], until: bytes, timeout: float = 60) -> bytes:
    """What `trainrun shell RUN` shows on a terminal (a pty) while `typed` is typed, up to `until`."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [*TRAINRUN, "shell", run_id], stdin=terminal, stdout=terminal, stderr=terminal, cwd=ROOT, env=env
    )
    os.close(terminal)
    shown = b""
    deadline = time.monotonic() + timeout
    try:
        os.write(controller, typed)
        while until not in shown and time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 1)
            if ready:
                try:
                    shown += os.read(controller, 4096)
                except OSError:
                    break  # the terminal closed: the session ended
        os.write(controller, b"exit\n")
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(controller)
    return shown


def test_a_kept_run_has_a_shell_on_its_head_node_until_down_tears_it_down(
    served: dict[str, str], tmp_path: Path
) -> None:
    # Given a run that keeps its cluster when it succeeds, run to its end
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    document["name"] = "kept-run"
    document["teardown"] = {"on_success": "keep"}
    run_file = tmp_path / "kept-run.yaml"
    run_file.write_text(yaml.safe_dump(document))
    submitted = trainrun("submit", run_file, "--watch", env=served)
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.split()[1]
    view = json.loads(trainrun("status", run_id, "--json", env=served).stdout)
    assert view["kept_at"] is not None and view["torn_down_at"] is None
    # (its checkpoints stay on its kept file system: nothing is exported yet)
    assert view["checkpoints"] is None

    # When commands are piped into `trainrun shell`
    piped = subprocess.run(
        [*TRAINRUN, "shell", run_id],
        input="id -u\nsed -n 's/^ClusterName=//p' /etc/slurm/slurm.conf\nexit 7\n",
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=served,
        check=False,
    )
    # Then they ran as root in the head node's sandbox, whose /etc/slurm is the local cluster's,
    # and the exit code is the shell's
    assert piped.returncode == 7, piped.stderr
    assert piped.stdout.split() == ["0", "trainrun-local"], piped.stdout
    # through a Session Manager session the operator's policy granted, ended without a warning
    assert "session trainrun-" in piped.stderr and "warning" not in piped.stderr, piped.stderr

    # When one command is run with --command
    one = trainrun("shell", run_id, "--command", "ls /fsx/trainrun", env=served)
    # Then it saw the run's file system, with the run's directory on it
    assert one.returncode == 0, one.stderr
    assert run_id in one.stdout.split(), one.stdout

    # When a shell is opened on a terminal and a command typed
    shown = shell_on_a_terminal(run_id, b"echo marker-$((6 * 7))\n", served, until=b"marker-42")
    # Then the shell ran it and showed its output
    assert b"marker-42" in shown, shown.decode(errors="replace")

    # When the kept run is taken down
    down = trainrun("down", run_id, env=served)
    # Then everything it kept is deleted: its cluster, its file system, its network; nothing is left
    assert down.returncode == 0, down.stderr
    deleted = [line.split()[1] for line in down.stdout.splitlines() if line.startswith("deleted ")]
    assert {"cluster", "file-system", "vpc"} <= set(deleted), down.stdout
    assert f"run {run_id} torn down: nothing left" in down.stdout
    view = json.loads(trainrun("status", run_id, "--json", env=served).stdout)
    assert view["torn_down_at"] is not None and view["resources"]["remaining"] == []
    # And its checkpoints were exported before its file system went
    assert (view["checkpoints"]["status"], view["checkpoints"]["files"]) == ("EXPORTED", 2), view["checkpoints"]

    # And the run has no head node for a shell any more
    gone = trainrun("shell", run_id, "--command", "true", env=served)
    assert gone.returncode == 2 and "torn down" in gone.stderr and "no head node" in gone.stderr
    # And a second down has nothing to do
    again = trainrun("down", run_id, env=served)
    assert again.returncode == 0 and "nothing to do" in again.stdout
