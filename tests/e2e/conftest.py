"""What the end-to-end tests share: the trainrun command as a subprocess, and the local head node's
availability (real Slurm and MUNGE, root)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trainrun.local.head_node import LocalHeadNodeUnavailable, check_available

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TRAINRUN = [sys.executable, "-m", "trainrun"]


def trainrun(
    *args: str | Path, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TRAINRUN, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False, env=env
    )


def sourced(env_file: Path) -> dict[str, str]:
    """What `. ENV_FILE` exports in a shell that starts with an empty environment (`trainrun serve`'s
    file, as its message tells a user to use it)."""
    shell = subprocess.run(
        ["env", "-i", "sh", "-c", '. "$1" && env -0', "sh", str(env_file)], capture_output=True, check=True
    )
    pairs = (entry.split("=", 1) for entry in shell.stdout.decode().split("\0") if entry)
    return {key: value for key, value in pairs if key not in ("PWD", "SHLVL", "_")}


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
