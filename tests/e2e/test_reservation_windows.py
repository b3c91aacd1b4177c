"""Reservation windows, rehearsed whole: a capacity block that starts a minute or two away, and one
that ends while the job trains (docs/run-file.md, "Reservation windows").

The fixture's dates are real-clock moments relative to when it is loaded, and the local runtime
gives the functions short leads (trainrun.local.LOCAL_*_LEAD_SECONDS): provisioning begins at
the block's start, and the block's instances "go" 30 seconds before its end.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from trainrun.local import LOCAL_TERMINATION_LEAD_SECONDS
from trainrun.local.fixture import AccountFixture, load_fixture
from trainrun.local.runtime import LocalRuntime
from trainrun.local.summary import LocalRunSummary, summarize
from trainrun.workflow import State

from .conftest import EXAMPLES, NEEDS_LOCAL_HEAD_NODE

pytestmark = [*NEEDS_LOCAL_HEAD_NODE, pytest.mark.waits]


def block_account(tmp_path: Any, **dates: str) -> AccountFixture:
    """The example account with its reservation as a capacity block with these (relative) dates."""
    document = yaml.safe_load((EXAMPLES / "accounts" / "default.yaml").read_text())
    reservation = document["capacity_reservations"][0]
    reservation.update(reservation_type="capacity-block", **dates)
    del reservation["state"]  # as the dates say: scheduled before the start, then active
    path = tmp_path / "accounts" / "block.yaml"
    path.parent.mkdir()
    # The fixture's directories are relative to where it lives: keep them pointing at examples/.
    for section, key in (("s3_objects", "tarball_of"), ("git_repositories", "tree_of")):
        for entry in document.get(section) or []:
            entry[key] = str((EXAMPLES / "accounts" / entry[key]).resolve())
    path.write_text(yaml.safe_dump(document))
    return load_fixture(path)


def run_file(**workload: Any) -> bytes:
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    document["workload"].update(workload)
    return yaml.safe_dump(document).encode()


def run(runtime: LocalRuntime, data: bytes, timeout: float) -> LocalRunSummary:
    started = runtime.submit(data, "runs/window.yaml")
    return summarize(runtime, started, runtime.wait(started.execution_arn, timeout=timeout))


@pytest.fixture
def starting_soon(tmp_path: Any) -> Iterator[tuple[LocalRuntime, datetime]]:
    starts = datetime.now(UTC) + timedelta(seconds=75)
    account = block_account(tmp_path, start_date="+75s", end_date="+2h")
    with LocalRuntime(account) as local:
        yield local, starts


def test_a_run_waits_in_wait_for_capacity_until_its_block_starts_then_succeeds(
    starting_soon: tuple[LocalRuntime, datetime],
) -> None:
    runtime, starts = starting_soon
    summary = run(runtime, run_file(), timeout=300)
    assert summary.status == "SUCCEEDED", summary.error
    # It was accepted with the INFO finding, waited, and only then provisioned
    assert [f.severity for f in summary.findings if f.code == "RESERVATION_STARTS_LATER"] == ["INFO"]
    assert summary.states.index(State.WAIT_FOR_CAPACITY) < summary.states.index(State.CREATE_NETWORK)
    network = next(v for v in summary.state_visits if v.name == State.CREATE_NETWORK)
    # Step Functions truncates a timestamp to its second
    assert network.entered_at is not None and network.entered_at >= starts.replace(microsecond=0)
    # The cluster's node launched into the block (the emulated EC2 refuses one before its start)
    assert summary.progress.train is not None and summary.progress.train.step == 40
    assert summary.resources.remaining == []


@pytest.fixture
def ending_soon(tmp_path: Any) -> Iterator[tuple[LocalRuntime, datetime]]:
    ends = datetime.now(UTC) + timedelta(seconds=240)
    account = block_account(tmp_path, start_date="-10m", end_date="+240s")
    with LocalRuntime(account) as local:
        yield local, ends


def test_a_block_that_ends_mid_run_stops_the_job_before_its_instances_go(
    ending_soon: tuple[LocalRuntime, datetime],
) -> None:
    runtime, ends = ending_soon
    # Given a training that would outlast the block by far (400 steps of a second; a max_runtime of
    # 4 nominal hours is 8 real minutes)
    data = run_file(
        train="python3 train.py --steps 400",
        total_steps=400,
        max_runtime="4h",
        env={"TRAINRUN_LOCAL_STEP_SECONDS": "1"},
    )
    summary = run(runtime, data, timeout=300)
    # Then it was accepted here, told that AWS refuses it: a cluster there could not be up by the block's end
    on_aws = [f for f in summary.findings if f.code == "RESERVATION_ENDS_BEFORE_RUN" and "on AWS" in f.message]
    assert [f.severity for f in on_aws] == ["WARNING"], summary.findings
    assert "before the cluster could be up" in on_aws[0].message
    # And the run failed ReservationEnded, saying what to do next
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "ReservationEnded", summary.error
    assert "next capacity block" in summary.error["cause"] and "workload.resume_from" in summary.error["cause"]
    # And the job was stopped (SIGTERM, then its checkpoint) while it trained, well before its last step
    assert "got SIGTERM" in summary.error["cause"] and "ended CANCELLED" in summary.error["cause"]
    assert summary.progress.train is not None and 0 < (summary.progress.train.step or 0) < 400
    # And its checkpoints were exported by the teardown, where the next block's run can start from
    assert summary.checkpoints is not None and summary.checkpoints.status == "EXPORTED", summary.checkpoints
    assert summary.checkpoints.destination and summary.checkpoints.files
    # And everything was torn down before the block's instances would go
    instances_go = ends - timedelta(seconds=LOCAL_TERMINATION_LEAD_SECONDS)
    assert summary.torn_down_at is not None and summary.torn_down_at < instances_go
    assert summary.resources.remaining == []
