"""What `trainrun local` shows a person: on a terminal (a pty, as a shell gives it) and piped.

A whole run costs some 25 CPU-seconds, a run that fails before the cluster some 10: each run here
proves all that its output shows (the states, the progress, what is left, the status).
"""

from __future__ import annotations

import errno
import fcntl
import os
import pty
import re
import struct
import subprocess
import termios

from .conftest import EXAMPLES, NEEDS_LOCAL_HEAD_NODE, ROOT, TRAINRUN, trainrun

pytestmark = NEEDS_LOCAL_HEAD_NODE

INJECTED = "InjectedFailure: --fail-at 'Create cluster': failure injected by trainrun local"


def on_a_terminal(*args: str, timeout: float = 300) -> tuple[int, str]:
    """Run `trainrun <args>` with stdout and stderr on one terminal 160 columns wide; its exit code
    and everything the terminal received."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 160, 0, 0))
    environment = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160"}
    process = subprocess.Popen(
        [*TRAINRUN, *args], stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal, cwd=ROOT, env=environment
    )
    os.close(terminal)
    received = bytearray()
    try:
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError as exc:  # Linux answers EIO once the last writer has closed the terminal
                if exc.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            received += chunk
    finally:
        os.close(controller)
    return process.wait(timeout=timeout), received.decode(errors="replace")


def test_a_failure_outside_a_job_is_shown_as_its_message_on_a_terminal() -> None:
    exit_code, shown = on_a_terminal("local", str(EXAMPLES / "single-node.yaml"), "--fail-at", "Create cluster")

    assert exit_code == 1, shown
    # The live view's error row and the summary both say what failed, in one line
    assert shown.count(INJECTED) >= 2, shown
    # And neither the Lambda error's JSON and stack trace nor the functions' metrics reach the terminal
    for raw in ('"errorMessage"', "stackTrace", "Traceback", '{"_aws"', "RunsStarted"):
        assert raw not in shown, raw


def test_piped_the_live_view_ends_with_a_newline_and_the_summary_says_teardown_left_nothing() -> None:
    wide = {**os.environ, "COLUMNS": "200"}
    result = trainrun("local", EXAMPLES / "single-node.yaml", "--fail-at", "Create cluster", env=wide)

    assert result.returncode == 1, result.stderr
    assert INJECTED in result.stderr and result.stderr.endswith("\n")
    assert '{"_aws"' not in result.stdout + result.stderr
    # And what it created before the cluster (network, file system) was torn down: the summary
    # says nothing is left (that a successful run leaves nothing: test_cli.py's resumed run)
    assert re.search(r"resources created: [1-9]\d*; left behind: none\n", result.stdout), result.stdout


def test_local_without_json_prints_the_states_the_progress_the_status_and_with_keep_counts_what_it_left() -> None:
    wide = {**os.environ, "COLUMNS": "200"}
    result = trainrun("local", EXAMPLES / "single-node.yaml", "--keep", env=wide)

    assert result.returncode == 0, result.stderr
    # The states, the training progress and the status
    assert "Validate capacity" in result.stdout
    assert "Create cluster" in result.stdout
    assert "Train" in result.stdout
    assert "train: epoch 0, step 40" in result.stdout
    assert "SUCCEEDED" in result.stdout
    # And --keep counts what it left behind as it counts what it created
    counts = re.search(r"resources created: (\d+); left behind: (\d+)", result.stdout)
    assert counts is not None, result.stdout
    created, left = map(int, counts.groups())
    assert created == left > 10
    # Each left behind once, the cluster with its nodes
    listed = [line for line in result.stdout.splitlines() if line.strip().startswith("left:")]
    assert len(listed) == left and sum(" cluster " in line for line in listed) == 1
    assert not any(" instance " in line or "not recorded" in line for line in listed)
