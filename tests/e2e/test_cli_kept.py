"""A kept cluster as a user iterates on it against `trainrun serve`: a run that reuses it brings new
code and a new env (its own workload directory, or an S3 archive), `trainrun runs` says the kept
cluster bills and how much, a second submit of a run file that is still running is warned about,
and the kept cluster is torn down by the janitor once it has been idle for `teardown.keep_for`."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainrun.local.fixture import resolve_directories
from trainrun.ops.runs import find_run, wait_for_record

from .conftest import EXAMPLES, NEEDS_LOCAL_HEAD_NODE, serving, trainrun
from .test_cli_reuse import emulated_aws, operator_stack, status, submitted_run_id

pytestmark = [*NEEDS_LOCAL_HEAD_NODE, pytest.mark.waits]

STEPS = 5
# Idle time after which the janitor tears the kept cluster down: 120 real seconds on the local
# stack's compressed time (trainrun.local.runtime.LOCAL_TIME_SCALE, 30).
KEEP_FOR = "1h"
# The janitor's schedule in this module's stack: every 20 real seconds (the default hour is two
# real minutes).
JANITOR_SCHEDULE = "rate(10 minutes)"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`trainrun serve` on the example account, its stack deployed with JANITOR_SCHEDULE."""
    accounts = EXAMPLES / "accounts"
    document = yaml.safe_load((accounts / "default.yaml").read_text())
    resolve_directories(document, accounts)
    document["stack_parameters"]["JanitorSchedule"] = JANITOR_SCHEDULE
    directory = tmp_path_factory.mktemp("serve")
    account = directory / "account.yaml"
    account.write_text(yaml.safe_dump(document))
    with serving(directory, "--account", account) as environment:
        yield environment


def workload_directory(tmp_path: Path, version: str) -> Path:
    """The stand-in training script with a VERSION file: each version packs to another archive."""
    code = tmp_path / f"code-{version}"
    code.mkdir()
    shutil.copy(EXAMPLES / "local-workload" / "train.py", code / "train.py")
    (code / "VERSION").write_text(f"{version}\n")
    return code


def run_file(tmp_path: Path, name: str, **sections: Any) -> Path:
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    document["name"] = name
    workload = document["workload"]
    del workload["compile"]
    workload["train"] = f'echo "workload $(cat VERSION) env $MARKER" && python3 train.py --steps {STEPS}'
    workload["total_steps"] = STEPS
    for section, value in sections.items():
        if section == "workload":
            workload.update(value)
        elif value is None:
            del document[section]
        else:
            document[section] = value
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def train_lines(run_id: str, served: dict[str, str]) -> list[str]:
    # --raw: as the job wrote them, trainrun's end marker (which names the run) included.
    shown = trainrun("logs", run_id, "--job", "train", "--json", "--raw", env=served)
    assert shown.returncode == 0, shown.stderr
    return [json.loads(line)["line"] for line in shown.stdout.splitlines()]


def runs(served: dict[str, str]) -> dict[str, dict[str, Any]]:
    listed = trainrun("runs", "--json", env=served)
    assert listed.returncode == 0, listed.stderr
    return {row["run_id"]: row for row in json.loads(listed.stdout) if row["run_id"]}


# Four runs (one creates the cluster, three run on it) and the janitor's sweeps, on a loaded machine.
@pytest.mark.timeout(900)
def test_a_kept_cluster_runs_new_code_shows_its_cost_and_is_torn_down_after_keep_for(
    served: dict[str, str], tmp_path: Path
) -> None:
    # Given a run that keeps its cluster for KEEP_FOR once idle, its workload a directory (v1)
    workload_directory(tmp_path, "v1")
    owner_file = run_file(
        tmp_path,
        "owner",
        workload={"source": {"path": "./code-v1"}, "env": {"MARKER": "old"}},
        teardown={"on_success": "keep", "keep_for": KEEP_FOR},
    )
    owner_id = submitted_run_id(owner_file, served, "--watch")
    assert status(owner_id, served)["kept_at"] is not None
    assert any("workload v1 env old" in line for line in train_lines(owner_id, served))

    # When the runs are listed
    listed = runs(served)
    # Then the owner shows as a kept cluster, billing by the hour
    assert listed[owner_id]["kept"] is True, listed[owner_id]
    assert listed[owner_id]["per_hour"] > 0, listed[owner_id]
    table = trainrun("runs", env=served)
    assert "kept" in table.stdout and "/h" in table.stdout + table.stderr, table.stdout + table.stderr

    # When a run that would stage a dataset the kept cluster's head node cannot read is planned
    unreadable_file = run_file(
        tmp_path,
        "unreadable",
        workload={
            "source": {"s3": "s3://trainrun-examples/local-workload.tar.gz"},
            "dataset": {"source": "s3://my-trainrun-data/other.tar", "path": "/fsx/other"},
        },
        storage=None,
        cluster={"reuse": "owner"},
    )
    planned = trainrun("plan", unreadable_file, "--check", env=served)
    # Then plan --check says the run would be rejected, and why, as Validate capacity will
    assert planned.returncode == 3, planned.stdout + planned.stderr
    assert "REUSED_CLUSTER_DOES_NOT_FIT: workload.dataset.source: s3://my-trainrun-data/other.tar" in planned.stdout, (
        planned.stdout
    )

    # When a run reuses it with changed code (another directory: another archive) and a new env
    workload_directory(tmp_path, "v2")
    changed_file = run_file(
        tmp_path,
        "changed",
        workload={"source": {"path": "./code-v2"}, "env": {"MARKER": "new"}},
        storage=None,
        cluster={"reuse": "owner"},
    )
    changed_id = submitted_run_id(changed_file, served)
    # And a run reuses it with an S3 archive from an allowed bucket, submitted twice
    archive_file = run_file(
        tmp_path,
        "archive",
        workload={
            "source": {"s3": "s3://trainrun-examples/local-workload.tar.gz"},
            # Long enough to be running still when it is submitted again.
            "train": f"sleep 30 && python3 train.py --steps {STEPS}",
        },
        storage=None,
        cluster={"reuse": owner_id},
    )
    archive_id = submitted_run_id(archive_file, served)
    # (the second submit finds the first by its record, written by its first state)
    stack = operator_stack(served)
    wait_for_record(stack, archive_id, timeout=60)
    again = trainrun("submit", archive_file, env=served)
    # Then the second submit starts a second run, and warns that one of that run file is running
    assert again.returncode == 0, again.stderr
    assert f"run {archive_id} of this run file is still running" in again.stderr, again.stderr
    second_id = again.stdout.split()[1]

    # And each run succeeds on the kept cluster, running its own code with its own env
    for run_id in (changed_id, archive_id, second_id):
        watched = trainrun("watch", run_id, "--timeout", "600", env=served)
        assert watched.returncode == 0, watched.stdout + watched.stderr
        assert status(run_id, served)["status"] == "SUCCEEDED"
    # And the kept cluster is still there: its runs ended less than KEEP_FOR ago
    assert status(owner_id, served)["torn_down_at"] is None
    assert emulated_aws(served)["instances"]
    changed_lines = train_lines(changed_id, served)
    assert any("workload v2 env new" in line for line in changed_lines), changed_lines[-5:]
    assert not any("workload v1" in line for line in changed_lines), changed_lines[-5:]
    assert any(f"run={archive_id} job=train" in line for line in train_lines(archive_id, served))

    # When it stays idle for KEEP_FOR (the janitor sweeps on its schedule, here every 20 s)
    # (its record is read in this process, every 5 s for two minutes or more: through `trainrun
    # status`, each look would cost a CPU-second)
    deadline = time.monotonic() + 300
    while find_run(stack, owner_id).torn_down_at is None:
        assert time.monotonic() < deadline, "the kept cluster was not torn down after keep_for"
        time.sleep(5)
    # Then the janitor has torn it down, and nothing is left in the account
    owner = status(owner_id, served)
    assert owner["torn_down_at"] is not None
    assert emulated_aws(served) == {"vpcs": [], "file_systems": [], "instances": []}
    assert owner["status"] == "SUCCEEDED"
    # And the runs no longer show it as kept
    assert runs(served)[owner_id]["kept"] is False
