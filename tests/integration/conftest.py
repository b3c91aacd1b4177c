"""The workflow harness: template.yaml deployed onto moto, the real ASL, handlers in-process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainrun.local.fixture import AccountFixture, load_fixture, resolve_directories
from trainrun.local.runtime import LocalRuntime, StartedRun
from trainrun.local.summary import RunSummary, summarize

from .scripted_head_node import ScriptedCluster

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@pytest.fixture
def account(tmp_path: Path) -> AccountFixture:
    return load_fixture(EXAMPLES / "accounts" / "default.yaml")


def fixture_with(tmp_path: Path, **reservation_changes: Any) -> AccountFixture:
    """The default account fixture with its first reservation changed."""
    document = yaml.safe_load((EXAMPLES / "accounts" / "default.yaml").read_text())
    reservation = document["capacity_reservations"][0]
    old_id = reservation["id"]
    reservation.update(reservation_changes)
    for group in document.get("capacity_reservation_groups", []):
        group["reservations"] = [reservation["id"] if r == old_id else r for r in group["reservations"]]
    resolve_directories(document, EXAMPLES / "accounts")
    path = tmp_path / "account.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_fixture(path)


@pytest.fixture
def cluster() -> ScriptedCluster:
    """The head nodes of the runtime's clusters: scripted (no Slurm); configure before a run."""
    return ScriptedCluster()


@pytest.fixture
def runtime(account: AccountFixture, cluster: ScriptedCluster) -> Iterator[LocalRuntime]:
    with LocalRuntime(account, head_node_factory=cluster) as local:
        yield local


def run_to_end(
    runtime: LocalRuntime, run_file: bytes, key: str = "runs/test-run.yaml"
) -> tuple[StartedRun, RunSummary]:
    started = runtime.submit(run_file, key)
    execution = runtime.wait(started.execution_arn, timeout=120)
    return started, summarize(runtime, started, execution)


def example(name: str) -> bytes:
    return (EXAMPLES / name).read_bytes()
