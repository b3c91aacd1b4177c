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
