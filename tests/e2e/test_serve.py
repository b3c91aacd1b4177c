"""`trainrun serve` as an operator runs it: what it tells other users (nothing secret), how it stops
(within seconds of SIGTERM), and how it holds up under 10 concurrent runs (marked slow: the load
test, `make load-test`)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from .conftest import EXAMPLES, NEEDS_LOCAL_HEAD_NODE, ROOT, TRAINRUN, sourced, trainrun

pytestmark = NEEDS_LOCAL_HEAD_NODE

CONCURRENT_RUNS = 10
# SIGTERM to `serve` stops it within this: executions stopped, head nodes shut down at once.
STOP_SECONDS = 30


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    env_file: Path
    log: Path
    environment: dict[str, str]

    def stop(self) -> float:
        """SIGTERM, then the seconds serve took to exit."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=120)
        return time.monotonic() - started


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    env_file = tmp_path / "private" / "serve.env"
    log = tmp_path / "serve.log"
    with log.open("w") as output:
        process = subprocess.Popen([*TRAINRUN, "serve", "--env-file", env_file], cwd=ROOT, stderr=output, stdout=output)
    try:
        deadline = time.monotonic() + 180
        while not env_file.exists():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "trainrun serve did not come up in 180 s"
            time.sleep(0.2)
        yield Served(process, env_file, log, {**os.environ, **sourced(env_file)})
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_serve_keeps_its_credentials_in_a_file_only_its_user_reads_and_stops_within_seconds_on_sigterm(
    served: Served,
) -> None:
    # Given serve up, its environment in the env file
    secret = served.environment["AWS_SECRET_ACCESS_KEY"]
    # Then the file is its user's only (0600), and what serve prints does not hold the secret
    assert stat.S_IMODE(served.env_file.stat().st_mode) == 0o600
    # (serve writes the file, then announces it: a loaded machine may show the file first)
    deadline = time.monotonic() + 30
    while str(served.env_file) not in served.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert str(served.env_file) in served.log.read_text()
    assert f"AWS_SECRET_ACCESS_KEY={secret}" not in served.log.read_text()
    # When it gets SIGTERM, it stops within seconds, cleanly
    assert served.stop() < STOP_SECONDS
    assert served.process.returncode == 0, served.log.read_text()


def run_file(directory: Path, number: int) -> Path:
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    document["name"] = f"load-{number:02d}"
    path = directory / f"load-{number:02d}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


@pytest.mark.slow
def test_serve_runs_ten_concurrent_runs_to_the_end_each_torn_down_then_stops_within_seconds(
    served: Served, tmp_path: Path
) -> None:
    # Given serve up, and 10 run files of the single-node example
    files = [run_file(tmp_path, number) for number in range(1, CONCURRENT_RUNS + 1)]
    started = time.monotonic()

    # When they are submitted at once
    def submit(path: Path) -> str:
        submitted = trainrun("submit", path, "--json", env=served.environment)
        assert submitted.returncode == 0, submitted.stderr
        return str(json.loads(submitted.stdout)["run_id"])

    with ThreadPoolExecutor(CONCURRENT_RUNS) as pool:
        run_ids = list(pool.map(submit, files))

    # Then every run ends SUCCEEDED and is torn down, nothing left of it
    deadline = started + 45 * 60
    while True:
        listed = trainrun("runs", "--json", "--limit", "50", env=served.environment)
        assert listed.returncode == 0, listed.stderr
        statuses = {row["run_id"]: row["status"] for row in json.loads(listed.stdout) if row["run_id"] in run_ids}
        if len(statuses) == CONCURRENT_RUNS and "RUNNING" not in statuses.values():
            break
        assert time.monotonic() < deadline, f"runs still running after 45 min: {statuses}"
        time.sleep(5)
    views = [json.loads(trainrun("status", run_id, "--json", env=served.environment).stdout) for run_id in run_ids]
    elapsed = time.monotonic() - started
    assert [view["status"] for view in views] == ["SUCCEEDED"] * CONCURRENT_RUNS, [v["error"] for v in views]
    assert all(view["torn_down_at"] and view["resources"]["remaining"] == [] for view in views)
    print(f"\nload test: {CONCURRENT_RUNS} concurrent runs of single-node.yaml on trainrun serve: {elapsed:.0f} s")
    # ... and serve then stops within seconds of SIGTERM
    stop_seconds = served.stop()
    print(f"load test: trainrun serve stopped {stop_seconds:.1f} s after SIGTERM")
    assert stop_seconds < STOP_SECONDS
    assert served.process.returncode == 0, served.log.read_text()
    # ... having printed no warning (Powertools', Python's) and no stack trace while it ran them
    log = served.log.read_text()
    assert not [line for line in log.splitlines() if "Warning" in line or "Traceback" in line], log
