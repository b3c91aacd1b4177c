"""What the end-to-end tests share: the trainrun command as a subprocess, the local head node's
availability (real Slurm and MUNGE, root), and a local stack served by `trainrun serve`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sourcing import sourced
from trainrun.local.slurm_head_node import LocalHeadNodeUnavailable, check_available

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TRAINRUN = [sys.executable, "-m", "trainrun"]


def trainrun(
    *args: str | Path, timeout: float = 300, env: dict[str, str] | None = None, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`trainrun ARGS` from the checkout, `input` on its stdin."""
    return subprocess.run(
        [*TRAINRUN, *map(str, args)],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
        env=env,
    )


def _unavailable() -> str | None:
    try:
        check_available()
    except LocalHeadNodeUnavailable as exc:
        return str(exc)
    return None


LOCAL_HEAD_NODE_UNAVAILABLE = _unavailable()
# pytestmark of a module whose tests need the local head node: skipped, with the reason, where it cannot run.
NEEDS_LOCAL_HEAD_NODE = [
    pytest.mark.slurm,
    pytest.mark.skipif(
        LOCAL_HEAD_NODE_UNAVAILABLE is not None,
        reason=f"this machine cannot play the head node: {LOCAL_HEAD_NODE_UNAVAILABLE}",
    ),
]


# Per module: each module of operator commands gets a stack of its own (its runs, its head nodes).
@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment of a shell that `trainrun serve` told how to reach the local stack."""
    with serving(tmp_path_factory.mktemp("serve")) as environment:
        yield environment


@contextlib.contextmanager
def serving(directory: Path, *options: str | Path) -> Iterator[dict[str, str]]:
    """`trainrun serve <options>` running, its log and env file in `directory`: the environment of a
    shell it told how to reach the local stack; SIGTERM at the end, which must stop it cleanly."""
    env_file = directory / "env"
    log = (directory / "serve.log").open("w")
    command = [*TRAINRUN, "serve", "--env-file", env_file, *options]
    server = subprocess.Popen(command, cwd=ROOT, stderr=log, stdout=log)
    try:
        deadline = time.monotonic() + 120
        while not env_file.exists():
            assert server.poll() is None, (directory / "serve.log").read_text()
            assert time.monotonic() < deadline, "trainrun serve did not come up in 120 s"
            time.sleep(0.2)
        yield {**os.environ, **sourced(env_file)}
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
        log.close()
    assert server.returncode == 0, (directory / "serve.log").read_text()
