"""The janitor against moto: which runs' leftovers it tears down, and which it leaves alone.

A run's leftovers are a VPC tagged as the workflow tags it. The teardown workflow is a moto
Step Functions state machine with one Pass state: the tests look at the executions the janitor
starts on it (moto leaves them RUNNING), never at what they would do.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from trainrun.adapters.fsx import ensure_file_system
from trainrun.model.resources import ClusterRef, NetworkIds, StorageIds
from trainrun.model.run_file import Cluster, Fsx
from trainrun.model.run_record import Borrowed, RunFileRef, RunRecord, RunStatus, RunStore, utcnow
from trainrun.model.tags import run_tags
from trainrun.steps.janitor import SweepReport, sweep
from trainrun.steps.provisioning import TeardownInput, tear_down

from .conftest import PASS_DEFINITION, REGION, STATE_MACHINE_ROLE, RecordedMetrics, moto_run_events
from .test_provisioning import given_run, spec_of, until_done

STACK_NAME = "trainrun-test"
OTHER_STACK = "trainrun-other"
RUN = "bert-large-0123456789ab"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE = timedelta(hours=2)
LONG_AGO = NOW - GRACE - timedelta(minutes=1)
JUST_NOW = NOW - timedelta(minutes=5)
RUN_FILE = RunFileRef(bucket="trainrun-config-test", key="runs/bert-large.yaml")


@pytest.fixture
def teardown_arn(sfn: Any) -> str:
    """The teardown workflow: a STANDARD state machine with one Pass state."""
    created = sfn.create_state_machine(
        name="trainrun-teardown-test", definition=PASS_DEFINITION, roleArn=STATE_MACHINE_ROLE, type="STANDARD"
    )
    arn: str = created["stateMachineArn"]
    return arn


def leftover_vpc(ec2: Any, run_id: str = RUN, stack: str = STACK_NAME) -> str:
    """A VPC tagged as a run of `stack` tags what it creates."""
    tags = [{"Key": key, "Value": value} for key, value in run_tags(run_id, stack).items()]
    created = ec2.create_vpc(CidrBlock="10.0.0.0/16", TagSpecifications=[{"ResourceType": "vpc", "Tags": tags}])
    vpc_id: str = created["Vpc"]["VpcId"]
    return vpc_id


def given_record(store: RunStore, status: RunStatus, *, at: datetime, run_id: str = RUN, **fields: Any) -> None:
    """A run record last written at `at` (and ended then, if `status` is final)."""
    ended = {"ended_at": at} if status != RunStatus.RUNNING else {}
    store.create(
        RunRecord(
            run_id=run_id,
            status=status,
            run_file=RUN_FILE,
            created_at=at - timedelta(hours=1),
            updated_at=at,
            **ended,
            **fields,
        )
    )


def run_sweep(ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str, now: datetime = NOW) -> SweepReport:
    return sweep(ec2, fsx, sfn, store, stack=STACK_NAME, teardown_state_machine_arn=teardown_arn, grace=GRACE, now=now)


def teardown_inputs(sfn: Any, teardown_arn: str) -> list[dict[str, Any]]:
    """The input of every execution started on the teardown workflow."""
    executions = sfn.list_executions(stateMachineArn=teardown_arn)["executions"]
    return [json.loads(sfn.describe_execution(executionArn=e["executionArn"])["input"]) for e in executions]


def live_execution(sfn: Any, state_machine_arn: str) -> str:
    """An execution of the run workflow that is still RUNNING (moto never runs one to its end)."""
    arn: str = sfn.start_execution(stateMachineArn=state_machine_arn, name=RUN, input="{}")["executionArn"]
    return arn


ORPHANED = {"name": RUN, "status": "ORPHANED", "input": json.dumps({"run_id": RUN})}


def test_resources_no_run_record_knows_are_torn_down(
    ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str
) -> None:
    # Given a run's VPC and no record of the run
    vpc_id = leftover_vpc(ec2)
    # When the janitor sweeps
    report = run_sweep(ec2, fsx, sfn, store, teardown_arn)
    # Then it starts the teardown of that run, as an orphan
    assert teardown_inputs(sfn, teardown_arn) == [ORPHANED]
    assert report.torn_down == {RUN: "no run record knows this run"}
    assert report.resources_by_run == {RUN: [f"vpc {vpc_id}"]}


@pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.REJECTED])
def test_a_run_that_ended_past_the_grace_period_is_torn_down(
    ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str, status: RunStatus
) -> None:
    # Given a run that ended longer ago than the grace period, with its VPC still there
    given_record(store, status, at=LONG_AGO)
    leftover_vpc(ec2)
    # When the janitor sweeps
    report = run_sweep(ec2, fsx, sfn, store, teardown_arn)
    # Then it starts the run's teardown
    assert teardown_inputs(sfn, teardown_arn) == [ORPHANED]
    assert list(report.torn_down) == [RUN]


def test_a_run_that_ended_within_the_grace_period_is_left_alone(
    ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str
) -> None:
    # Given a run that ended a few minutes ago (its own teardown may still be under way)
    given_record(store, RunStatus.SUCCEEDED, at=JUST_NOW)
    leftover_vpc(ec2)
    # When the janitor sweeps
    report = run_sweep(ec2, fsx, sfn, store, teardown_arn)
    # Then nothing is started
    assert teardown_inputs(sfn, teardown_arn) == []
    assert report.torn_down == {}
    assert "within the grace period" in report.left_alone[RUN]


def test_a_kept_run_is_left_alone(ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str) -> None:
    # Given a run that ended long ago and whose owner kept its cluster
    given_record(store, RunStatus.SUCCEEDED, at=LONG_AGO, kept_at=LONG_AGO)
    leftover_vpc(ec2)
    # When the janitor sweeps
    report = run_sweep(ec2, fsx, sfn, store, teardown_arn)
    # Then nothing is started
    assert teardown_inputs(sfn, teardown_arn) == []
    assert report.left_alone == {RUN: f"kept since {LONG_AGO.isoformat()}"}


def test_a_running_run_with_a_live_execution_is_left_alone(
    ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str, state_machine_arn: str
) -> None:
    # Given a run whose record says RUNNING, last written long ago, and whose execution still runs
    given_record(store, RunStatus.RUNNING, at=LONG_AGO, execution_arn=live_execution(sfn, state_machine_arn))
    leftover_vpc(ec2)
    # When the janitor sweeps
    report = run_sweep(ec2, fsx, sfn, store, teardown_arn)
    # Then nothing is started
    assert teardown_inputs(sfn, teardown_arn) == []
    assert report.left_alone == {RUN: "the run is in progress"}


def test_a_running_run_whose_execution_stopped_long_ago_is_torn_down(
    ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str, state_machine_arn: str
) -> None:
    # Given a run whose record says RUNNING, last written long ago, but whose execution was stopped
    # (the status-change event that would have finished the record was lost)
    execution_arn = live_execution(sfn, state_machine_arn)
    sfn.stop_execution(executionArn=execution_arn)
    given_record(store, RunStatus.RUNNING, at=LONG_AGO, execution_arn=execution_arn)
    leftover_vpc(ec2)
    # When the janitor sweeps
    report = run_sweep(ec2, fsx, sfn, store, teardown_arn)
    # Then it starts the run's teardown
    assert teardown_inputs(sfn, teardown_arn) == [ORPHANED]
    assert report.torn_down == {RUN: "record says RUNNING but its execution is ABORTED"}


def test_a_running_run_whose_execution_is_gone_is_torn_down(
    ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str, state_machine_arn: str
) -> None:
    # Given a run whose record says RUNNING, last written long ago, for an execution that does not exist
    missing = state_machine_arn.replace(":stateMachine:", ":execution:") + f":{RUN}"
    given_record(store, RunStatus.RUNNING, at=LONG_AGO, execution_arn=missing)
    leftover_vpc(ec2)
    # When the janitor sweeps
    report = run_sweep(ec2, fsx, sfn, store, teardown_arn)
    # Then it starts the run's teardown
    assert teardown_inputs(sfn, teardown_arn) == [ORPHANED]
    assert report.torn_down == {RUN: "record says RUNNING but its execution is missing"}


def test_a_running_run_whose_execution_stopped_just_now_is_left_alone(
    ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str, state_machine_arn: str
) -> None:
    # Given a run whose execution was stopped, with its record written a few minutes ago
    # (the status-change event may still be on its way)
    execution_arn = live_execution(sfn, state_machine_arn)
    sfn.stop_execution(executionArn=execution_arn)
    given_record(store, RunStatus.RUNNING, at=JUST_NOW, execution_arn=execution_arn)
    leftover_vpc(ec2)
    # When the janitor sweeps
    report = run_sweep(ec2, fsx, sfn, store, teardown_arn)
    # Then nothing is started yet
    assert teardown_inputs(sfn, teardown_arn) == []
    assert list(report.left_alone) == [RUN]


def test_a_second_sweep_in_the_same_hour_starts_no_second_execution(
    ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str
) -> None:
    # Given a sweep that started the teardown of an orphan
    leftover_vpc(ec2)
    run_sweep(ec2, fsx, sfn, store, teardown_arn, now=NOW)
    # When the janitor sweeps again later in the same hour, with the VPC still there
    report = run_sweep(ec2, fsx, sfn, store, teardown_arn, now=NOW + timedelta(minutes=30))
    # Then there is still one teardown execution
    assert teardown_inputs(sfn, teardown_arn) == [ORPHANED]
    assert list(report.torn_down) == [RUN]


def test_a_sweep_in_the_next_hour_starts_the_teardown_again(
    ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str
) -> None:
    # Given a sweep that started the teardown of an orphan
    leftover_vpc(ec2)
    run_sweep(ec2, fsx, sfn, store, teardown_arn, now=NOW)
    # When the VPC is still there an hour later
    run_sweep(ec2, fsx, sfn, store, teardown_arn, now=NOW + timedelta(hours=1))
    # Then a second teardown is started
    assert teardown_inputs(sfn, teardown_arn) == [ORPHANED, ORPHANED]


def test_resources_of_another_stack_are_ignored(
    ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str
) -> None:
    # Given a VPC of a run of another stack, which no record of this stack knows
    leftover_vpc(ec2, stack=OTHER_STACK)
    # When the janitor sweeps
    report = run_sweep(ec2, fsx, sfn, store, teardown_arn)
    # Then nothing is started, and the report does not mention it
    assert teardown_inputs(sfn, teardown_arn) == []
    assert report == SweepReport()


def test_a_run_that_kept_its_file_system_is_left_alone_after_its_teardown(
    ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str
) -> None:
    # Given a run that succeeded and whose teardown kept its file system, as the run file asked
    given_run(store, teardown={"keep_file_system": True})
    file_system_id = ensure_file_system(
        fsx,
        run_id=RUN,
        stack=STACK_NAME,
        spec=Fsx(),
        subnet_id="subnet-0123456789abcdef0",
        security_group_id="sg-0123456789abcdef0",
    ).file_system_id
    store.set_storage(RUN, StorageIds(file_system_id=file_system_id))
    until_done(
        lambda: tear_down(
            ec2,
            fsx,
            None,
            store,
            TeardownInput(run_id=RUN),
            region=REGION,
            poll_seconds=1,
            run_events=moto_run_events(),
            metrics=RecordedMetrics(),
            ssm=None,  # no job ran: nothing to export
            config_bucket="trainrun-config-test",
        )
    )
    store.finish(RUN, RunStatus.SUCCEEDED)
    # When the janitor sweeps after the grace period
    report = run_sweep(ec2, fsx, sfn, store, teardown_arn, now=utcnow() + GRACE + timedelta(minutes=1))
    # Then it leaves the kept file system alone
    assert teardown_inputs(sfn, teardown_arn) == []
    assert list(report.left_alone) == [RUN]


def test_a_kept_cluster_lent_to_a_run_that_ended_long_ago_stays_the_owners_and_is_left_alone(
    ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str
) -> None:
    # Given a kept run's network, and a run that borrowed its cluster (cluster.reuse) and ended
    # past the grace period without being torn down (its teardown never ran)
    vpc_id = leftover_vpc(ec2)
    given_record(store, RunStatus.SUCCEEDED, at=LONG_AGO, kept_at=LONG_AGO)
    given_record(
        store,
        RunStatus.FAILED,
        at=LONG_AGO,
        run_id="borrower-0123456789ab",
        borrowed=Borrowed(run_id=RUN, cluster=Cluster()),
        network=NetworkIds(created=False, vpc_id=vpc_id),
        cluster=ClusterRef(name=f"trainrun-{RUN}", region=REGION),
    )
    # When the janitor sweeps
    report = run_sweep(ec2, fsx, sfn, store, teardown_arn)
    # Then the network is the owner's, kept, and left alone; nothing is torn down for the borrower
    assert report.resources_by_run == {RUN: [f"vpc {vpc_id}"]}
    assert report.left_alone == {RUN: f"kept since {LONG_AGO.isoformat()}"}
    assert report.torn_down == {}
    assert teardown_inputs(sfn, teardown_arn) == []


# --- teardown.keep_for ----------------------------------------------------------------------------

KEPT_FOR_2H = {"teardown": {"on_success": "keep", "keep_for": "2h"}}


def given_kept_cluster(store: RunStore, *, kept_at: datetime, **sections: dict[str, Any]) -> None:
    """A run that succeeded and kept its cluster at `kept_at`, its run file's sections as given."""
    given_record(
        store,
        RunStatus.SUCCEEDED,
        at=kept_at,
        kept_at=kept_at,
        spec=spec_of(**sections),
        cluster=ClusterRef(name=f"trainrun-{RUN}", region=REGION),
    )


def given_borrower(store: RunStore, status: RunStatus, *, at: datetime) -> None:
    given_record(
        store,
        status,
        at=at,
        run_id="borrower-0123456789ab",
        borrowed=Borrowed(run_id=RUN, cluster=Cluster()),
        cluster=ClusterRef(name=f"trainrun-{RUN}", region=REGION),
    )


def test_a_kept_cluster_idle_past_its_keep_for_is_torn_down_whole(
    ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str
) -> None:
    # Given a cluster kept 3 hours ago for 2 hours once idle, and no run on it since
    leftover_vpc(ec2)
    given_kept_cluster(store, kept_at=NOW - timedelta(hours=3), **KEPT_FOR_2H)
    # When the janitor sweeps
    report = run_sweep(ec2, fsx, sfn, store, teardown_arn)
    # Then it tears the cluster down with what was kept, as `trainrun down` does
    assert list(report.torn_down) == [RUN]
    [started] = teardown_inputs(sfn, teardown_arn)
    assert json.loads(started["input"]) == {"run_id": RUN, "delete_kept": True}
    # And it recorded the teardown on the run first: a run that reuses the cluster now is refused it
    assert store.get(RUN).down_requested_at is not None  # type: ignore[union-attr]


def test_a_kept_cluster_within_its_keep_for_is_left_alone(
    ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str
) -> None:
    leftover_vpc(ec2)
    given_kept_cluster(store, kept_at=NOW - timedelta(hours=1), **KEPT_FOR_2H)
    report = run_sweep(ec2, fsx, sfn, store, teardown_arn)
    assert report.torn_down == {}
    assert report.left_alone[RUN].startswith("kept for 2h once idle")


def test_keep_for_counts_from_the_end_of_the_last_run_on_the_cluster(
    ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str
) -> None:
    # Given a cluster kept 3 hours ago for 2 hours once idle, and a run on it that ended an hour ago
    leftover_vpc(ec2)
    given_kept_cluster(store, kept_at=NOW - timedelta(hours=3), **KEPT_FOR_2H)
    given_borrower(store, RunStatus.SUCCEEDED, at=NOW - timedelta(hours=1))
    # When the janitor sweeps
    report = run_sweep(ec2, fsx, sfn, store, teardown_arn)
    # Then the cluster has been idle for an hour only, and stays
    assert report.torn_down == {}
    assert (NOW - timedelta(hours=1)).isoformat() in report.left_alone[RUN]


def test_a_kept_cluster_past_its_keep_for_with_a_run_on_it_is_left_alone(
    ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str
) -> None:
    leftover_vpc(ec2)
    given_kept_cluster(store, kept_at=NOW - timedelta(hours=3), **KEPT_FOR_2H)
    given_borrower(store, RunStatus.RUNNING, at=NOW - timedelta(hours=2, minutes=30))
    report = run_sweep(ec2, fsx, sfn, store, teardown_arn)
    assert report.torn_down == {}
    assert "in use (cluster.reuse) by borrower-0123456789ab" in report.left_alone[RUN]
    assert store.get(RUN).down_requested_at is None  # type: ignore[union-attr]


def test_keep_for_is_counted_on_the_local_runtimes_compressed_time(
    ec2: Any, fsx: Any, sfn: Any, store: RunStore, teardown_arn: str
) -> None:
    # Given a cluster kept 5 real minutes ago for 2 hours, on a clock 30 times faster (150 minutes)
    leftover_vpc(ec2)
    given_kept_cluster(store, kept_at=NOW - timedelta(minutes=5), **KEPT_FOR_2H)
    # When the janitor sweeps with that time scale
    report = sweep(
        ec2,
        fsx,
        sfn,
        store,
        stack=STACK_NAME,
        teardown_state_machine_arn=teardown_arn,
        grace=GRACE,
        now=NOW,
        time_scale=30,
    )
    # Then the cluster is past its keep_for
    assert list(report.torn_down) == [RUN]
