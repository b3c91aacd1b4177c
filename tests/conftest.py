"""What every tier shares: this machine's workload user, made once before any test worker starts,
and the order in which the parallel pass hands out its files.

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


# The parallel pass (`make test`) hands whole files to its workers (--dist loadfile) in collection
# order (--no-loadscope-reorder: pytest-xdist otherwise sorts files by their number of tests, which
# put the single-test files that wait minutes on the real clock last, one core busy while the
# others had nothing left). Longest first, so that short files fill the end: the files that mostly
# wait (marked `waits`), then the end-to-end, integration and unit tiers.
TIERS_LONGEST_FIRST = ("e2e", "integration", "unit")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def place(item: pytest.Item) -> tuple[bool, int]:
        tier = item.path.parent.name
        rank = TIERS_LONGEST_FIRST.index(tier) if tier in TIERS_LONGEST_FIRST else len(TIERS_LONGEST_FIRST)
        return item.get_closest_marker("waits") is None, rank

    items.sort(key=place)  # stable: a file's tests keep their order
