"""What every tier shares: this machine's workload user, made once before any test worker starts.

The local head node creates the user on first use (useradd); useradd replaces /etc/passwd, and
Linux then drops the /etc/passwd bind mount of every head node already running, in any process.
With the suite spread over workers (pytest-xdist), one worker's first head node would break
another's: so the controlling process creates the user before the workers exist.
"""

from __future__ import annotations

import pytest

from trainrun.local.slurm_head_node import LocalHeadNodeUnavailable, check_available, workload_account


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its controller has done this
        return
    try:
        check_available()
    except LocalHeadNodeUnavailable:
        return  # no head node can run here: the tests that need one skip themselves
    workload_account()
