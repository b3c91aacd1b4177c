"""The head-node and job steps against a fake SSM: what they send, keep and conclude."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

import trainrun.steps.head_node
from trainrun.logic.head_node_scripts import SLURM_KILL_WAIT_SECONDS
from trainrun.model.end_marker import END_KEY_PATTERN, end_marker, new_end_key
from trainrun.model.jobs import AttemptProgress, JobProgress, JobRecord
from trainrun.model.resources import ClusterRef, ReservationWindow
from trainrun.model.run_file import parse_run_file
from trainrun.model.run_record import CONTINUED, RunFileRef, RunRecord, RunStore
from trainrun.steps.head_node import (
    CHECKS_PER_EXECUTION,
    ComputeNodesFailed,
    HeadNodeLost,
    HeadNodePreparationFailed,
    JobFailed,
    JobLost,
    JobRequest,
    MaxRuntimeExceeded,
    ReservationEnded,
    SubmitRequest,
    check_job,
    continues_in_new_execution,
    prepare_head_node,
    submit_job,
)

from .conftest import moto_run_events

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "single-node-0123456789ab"
HEAD_NODE = "i-0123456789abcdef0"
NOW = datetime(2026, 11, 21, 12, tzinfo=UTC)


@dataclass
class FakeSsm:
    """SendCommand / GetCommandInvocation: each command answers with the next scripted result."""

    results: list[dict[str, Any]]
    sent: list[str] = field(default_factory=list)

    def send_command(self, **kwargs: Any) -> dict[str, Any]:
        self.sent.append(kwargs["Parameters"]["commands"][0])
        return {"Command": {"CommandId": f"command-{len(self.sent)}"}}

    def get_command_invocation(self, **kwargs: Any) -> dict[str, Any]:
        index = int(kwargs["CommandId"].rsplit("-", 1)[1]) - 1
        return self.results[index]


@dataclass
class FakeEc2:
    """DescribeInstances: the head node in the given state."""

    state: str = "running"

    def describe_instances(self, **kwargs: Any) -> dict[str, Any]:
        [instance_id] = kwargs["InstanceIds"]
        return {"Reservations": [{"Instances": [{"InstanceId": instance_id, "State": {"Name": self.state}}]}]}


class ForgottenEc2:
    """DescribeInstances about an instance EC2 no longer knows (about an hour after its termination)."""

    def describe_instances(self, **kwargs: Any) -> dict[str, Any]:
        error = {"Error": {"Code": "InvalidInstanceID.NotFound", "Message": f"{kwargs['InstanceIds']} not found"}}
        raise ClientError(error, "DescribeInstances")


def success(stdout: str) -> dict[str, Any]:
    return {"Status": "Success", "ResponseCode": 0, "StandardOutputContent": stdout, "StandardErrorContent": ""}


def failure(stderr: str) -> dict[str, Any]:
    return {"Status": "Failed", "ResponseCode": 1, "StandardOutputContent": "", "StandardErrorContent": stderr}


@pytest.fixture
def run(store: RunStore) -> RunStore:
    """A run whose cluster is up, with its head node recorded."""
    spec = parse_run_file((ROOT / "examples" / "single-node.yaml").read_text())
    store.create(
        RunRecord(
            run_id=RUN_ID,
            run_file=RunFileRef(bucket="config", key="runs/single-node.yaml", version_id="v1", etag="e"),
            created_at=NOW,
            updated_at=NOW,
        )
    )
    store.set_spec(RUN_ID, spec)
    store.set_cluster(
        RUN_ID, ClusterRef(name=f"trainrun-{RUN_ID}", region="us-west-2", head_node_instance_id=HEAD_NODE)
    )
    return store


def no_sleep(seconds: float) -> None:
    return None


# A run on a cluster of its own: Prepare head node copies nothing (no S3 client).
PREPARE: dict[str, Any] = {
    "jobs_log_group": "/trainrun/t/jobs",
    "region": "us-west-2",
    "config_bucket": "trainrun-config-test",
    "poll_seconds": 5,
    "sleep": no_sleep,
}


def test_prepare_sends_one_command_and_reports_it_done(run: RunStore) -> None:
    ssm = FakeSsm([success(f"TRAINRUN-PREPARED run={RUN_ID}\n")])
    progress = prepare_head_node(ssm, None, FakeEc2(), run, RUN_ID, **PREPARE)
    assert progress.done
    # A second call (a replayed state) sends nothing again
    prepare_head_node(ssm, None, FakeEc2(), run, RUN_ID, **PREPARE)
    assert len(ssm.sent) == 1
    assert ssm.sent[0].startswith(f"# trainrun: prepare the head node for run {RUN_ID}.")


def test_prepare_waits_for_the_head_nodes_instance_while_the_cluster_is_created(run: RunStore) -> None:
    # Given a cluster being created whose head node ParallelCluster does not report yet
    run.set_cluster(RUN_ID, ClusterRef(name=f"trainrun-{RUN_ID}", region="us-west-2", status="CREATE_IN_PROGRESS"))
    ssm = FakeSsm([success(f"TRAINRUN-PREPARED run={RUN_ID}\n")])
    # When the preparation's loop looks
    progress = prepare_head_node(ssm, None, FakeEc2(), run, RUN_ID, **PREPARE)
    # Then it waits for it, sending nothing
    assert not progress.done and progress.retry_after_seconds == 5
    assert progress.waiting_on == ["the head node's instance (the cluster is being created)"]
    assert ssm.sent == []


def test_a_failed_preparation_carries_the_stderr_tail(run: RunStore) -> None:
    ssm = FakeSsm([failure("TRAINRUN-ERROR step setup failed with exit code 2\npip: no such package")])
    with pytest.raises(HeadNodePreparationFailed, match="pip: no such package"):
        prepare_head_node(ssm, None, FakeEc2(), run, RUN_ID, **PREPARE)


def test_a_preparation_whose_head_node_ec2_forgot_lost_it_too(run: RunStore) -> None:
    ssm = FakeSsm([failure("Session terminated, killing shell...")])
    with pytest.raises(HeadNodeLost, match=f"the head node {HEAD_NODE} is terminated"):
        prepare_head_node(ssm, None, ForgottenEc2(), run, RUN_ID, **PREPARE)


@pytest.mark.parametrize("state", ["shutting-down", "terminated"])
def test_a_preparation_that_lost_its_head_node_says_so_not_that_the_staging_failed(run: RunStore, state: str) -> None:
    # Given a preparation whose session died with its head node (a failed create's rollback)
    ssm = FakeSsm([failure("Session terminated, killing shell...")])
    # When the step looks at it
    with pytest.raises(HeadNodeLost) as raised:
        prepare_head_node(ssm, None, FakeEc2(state), run, RUN_ID, **PREPARE)
    # Then its error names the head node's state, for the workflow to retry while Create cluster
    # reports the cause (a distinct error name: the state retries it, not HeadNodePreparationFailed)
    assert f"the head node {HEAD_NODE} is {state}" in str(raised.value)
    assert "Session terminated" in str(raised.value)
    assert type(raised.value).__name__ == "HeadNodeLost"


def test_submit_keeps_the_token_and_the_slurm_job_id(run: RunStore) -> None:
    ssm = FakeSsm([success("TRAINRUN-SUBMITTED job=train slurm_job_id=42 existing=false\n")])
    submitted = submit_job(
        ssm,
        run,
        SubmitRequest(run_id=RUN_ID, job="train", task_token="token-1"),
        sfn=None,
        run_events=moto_run_events(),
        config_bucket="trainrun-config-test",
        sleep=no_sleep,
    )
    assert (submitted.slurm_job_id, submitted.existing) == (42, False)
    record = run.get(RUN_ID)
    assert record is not None
    job = record.job("train")
    assert job is not None and (job.task_token, job.slurm_job_id, job.state) == ("token-1", 42, "SUBMITTED")


def test_a_second_submission_replaces_the_token_and_keeps_the_first_submission_time(run: RunStore) -> None:
    first = datetime(2026, 11, 21, 10, tzinfo=UTC)
    run.set_job(RUN_ID, "train", JobRecord(task_token="old", slurm_job_id=42, submitted_at=first, state="SUBMITTED"))
    ssm = FakeSsm([success("TRAINRUN-SUBMITTED job=train slurm_job_id=42 existing=true\n")])
    submitted = submit_job(
        ssm,
        run,
        SubmitRequest(run_id=RUN_ID, job="train", task_token="new"),
        sfn=None,
        run_events=moto_run_events(),
        config_bucket="trainrun-config-test",
        sleep=no_sleep,
    )
    assert submitted.existing
    record = run.get(RUN_ID)
    assert record is not None
    job = record.job("train")
    assert job is not None and (job.task_token, job.submitted_at) == ("new", first)


def with_job(store: RunStore, submitted_at: datetime = NOW) -> RunStore:
    store.set_job(RUN_ID, "train", JobRecord(task_token="t", slurm_job_id=42, submitted_at=submitted_at))
    return store


def test_check_reports_a_running_job_as_not_finished(run: RunStore) -> None:
    ssm = FakeSsm([success("TRAINRUN-JOB-STATE slurm_job_id=42 state=RUNNING exit_code=-1\n")])
    check = check_job(
        ssm,
        with_job(run),
        JobRequest(run_id=RUN_ID, job="train"),
        run_events=moto_run_events(),
        sleep=no_sleep,
        now=NOW,
    )
    assert (check.state, check.finished) == ("RUNNING", False)


def test_check_fails_a_job_that_slurm_saw_fail(run: RunStore) -> None:
    ssm = FakeSsm([success("TRAINRUN-JOB-STATE slurm_job_id=42 state=NODE_FAIL exit_code=-1\n")])
    with pytest.raises(JobFailed, match="NODE_FAIL"):
        check_job(
            ssm,
            with_job(run),
            JobRequest(run_id=RUN_ID, job="train"),
            run_events=moto_run_events(),
            sleep=no_sleep,
            now=NOW,
        )
    record = run.get(RUN_ID)
    assert record is not None and record.job("train") is not None
    assert record.job("train").state == "FAILED"  # type: ignore[union-attr]


PENDING_BEHIND_DOWN_NODE = (
    "TRAINRUN-JOB-STATE slurm_job_id=42 state=PENDING exit_code=0\n"
    "TRAINRUN-QUEUE nodes=1 up=0 inactive={inactive}\n"
    "TRAINRUN-NODE-DOWN name=queue-st-trn1-32xlarge-1 state=down reason=Node bootstrap error: "
    "Failed to execute OnNodeConfigured script 1, return code: 1.\n"
)


def test_check_fails_a_job_pending_on_a_queue_in_protected_mode_with_the_nodes_reason(run: RunStore) -> None:
    # Given a pending job whose queue ParallelCluster has set INACTIVE (protected mode), a minute in
    ssm = FakeSsm([success(PENDING_BEHIND_DOWN_NODE.format(inactive=1))])
    # When it is checked, then the run fails at once, naming the node and its bootstrap error
    with pytest.raises(ComputeNodesFailed, match="protected mode") as failed:
        check_job(
            ssm,
            with_job(run, submitted_at=NOW - timedelta(minutes=1)),
            JobRequest(run_id=RUN_ID, job="train"),
            run_events=moto_run_events(),
            sleep=no_sleep,
            now=NOW,
        )
    assert "queue-st-trn1-32xlarge-1 (down): Node bootstrap error: Failed to execute OnNodeConfigured" in str(
        failed.value
    )


def test_check_waits_for_nodes_that_are_down_within_the_node_bootstrap_timeout(run: RunStore) -> None:
    ssm = FakeSsm([success(PENDING_BEHIND_DOWN_NODE.format(inactive=0))])
    check = check_job(
        ssm,
        with_job(run, submitted_at=NOW - timedelta(minutes=29)),
        JobRequest(run_id=RUN_ID, job="train"),
        run_events=moto_run_events(),
        sleep=no_sleep,
        now=NOW,
    )
    assert (check.state, check.finished) == ("PENDING", False)


def test_check_fails_a_job_whose_nodes_are_still_down_after_the_node_bootstrap_timeout(run: RunStore) -> None:
    # Given the default node_bootstrap_timeout (30m) and, in compressed local time, 61 real seconds
    ssm = FakeSsm([success(PENDING_BEHIND_DOWN_NODE.format(inactive=0))])
    with pytest.raises(ComputeNodesFailed, match="0 of the 1 compute nodes the run needs are up"):
        check_job(
            ssm,
            with_job(run, submitted_at=NOW - timedelta(seconds=61)),
            JobRequest(run_id=RUN_ID, job="train"),
            run_events=moto_run_events(),
            sleep=no_sleep,
            now=NOW,
            time_scale=30,
        )


def test_the_node_bootstrap_timeout_counts_from_a_capacity_blocks_start_when_it_is_later(run: RunStore) -> None:
    # Given a job submitted 45 minutes ago whose capacity block started 10 minutes ago, its node still
    # down (max_runtime 2h)
    spec = run.get(RUN_ID).spec  # type: ignore[union-attr]
    assert spec is not None
    run.set_spec(RUN_ID, spec.model_copy(update={"workload": spec.workload.model_copy(update={"max_runtime": "2h"})}))
    window = ReservationWindow(reservation_id="cr-0123456789abcdef0", starts_at=NOW - timedelta(minutes=10))
    run.set_reservation_window(RUN_ID, window)
    ssm = FakeSsm([success(PENDING_BEHIND_DOWN_NODE.format(inactive=0))])
    # When it is checked, then it waits on: the block's nodes have had 10 of their 30 minutes
    check = check_job(
        ssm,
        with_job(run, submitted_at=NOW - timedelta(minutes=45)),
        JobRequest(run_id=RUN_ID, job="train"),
        run_events=moto_run_events(),
        sleep=no_sleep,
        now=NOW,
    )
    assert (check.state, check.finished) == ("PENDING", False)


def test_check_fails_a_job_running_past_max_runtime(run: RunStore) -> None:
    # The single-node example's max_runtime is 30m
    ssm = FakeSsm([success("TRAINRUN-JOB-STATE slurm_job_id=42 state=RUNNING exit_code=-1\n")])
    with pytest.raises(MaxRuntimeExceeded, match="30m"):
        check_job(
            ssm,
            with_job(run, submitted_at=NOW - timedelta(minutes=31)),
            JobRequest(run_id=RUN_ID, job="train"),
            run_events=moto_run_events(),
            sleep=no_sleep,
            now=NOW,
        )


def test_in_compressed_local_time_max_runtime_is_measured_in_nominal_time(run: RunStore) -> None:
    # Given the local runtime's 30 nominal seconds a real second, and a job running for 61 real
    # seconds: 30.5 nominal minutes, past the single-node example's 30m
    ssm = FakeSsm([success("TRAINRUN-JOB-STATE slurm_job_id=42 state=RUNNING exit_code=-1\n")])
    with pytest.raises(MaxRuntimeExceeded, match="30m"):
        check_job(
            ssm,
            with_job(run, submitted_at=NOW - timedelta(seconds=61)),
            JobRequest(run_id=RUN_ID, job="train"),
            run_events=moto_run_events(),
            sleep=no_sleep,
            now=NOW,
            time_scale=30,
        )


def test_check_of_a_job_slurm_forgot_is_lost(run: RunStore) -> None:
    ssm = FakeSsm([success("TRAINRUN-JOB-STATE slurm_job_id=42 state=UNKNOWN exit_code=-1\n")])
    with pytest.raises(JobLost):
        check_job(
            ssm,
            with_job(run),
            JobRequest(run_id=RUN_ID, job="train"),
            run_events=moto_run_events(),
            sleep=no_sleep,
            now=NOW,
        )


def test_check_of_a_job_never_submitted_is_lost(run: RunStore) -> None:
    with pytest.raises(JobLost, match="never submitted"):
        check_job(
            FakeSsm([]),
            run,
            JobRequest(run_id=RUN_ID, job="compile"),
            run_events=moto_run_events(),
            sleep=no_sleep,
            now=NOW,
        )


def test_submit_keeps_a_new_end_key_and_hands_it_to_roots_end_watcher_only(run: RunStore) -> None:
    ssm = FakeSsm([success("TRAINRUN-SUBMITTED job=train slurm_job_id=42 existing=false\n")])
    submit_job(
        ssm,
        run,
        SubmitRequest(run_id=RUN_ID, job="train", task_token="t"),
        sfn=None,
        run_events=moto_run_events(),
        config_bucket="trainrun-config-test",
        sleep=no_sleep,
    )
    record = run.get(RUN_ID)
    assert record is not None and record.job("train") is not None
    key = record.job("train").end_key  # type: ignore[union-attr]
    assert key is not None and END_KEY_PATTERN.fullmatch(key)
    (script,) = ssm.sent
    # the key is in the root part of the script, before the default user's part (its heredoc) starts
    user_part_start = script.index(" <<'TRAINRUN_EOF")
    assert script.count(key) == 1 and script.index(key) < user_part_start


def test_a_second_submission_keeps_the_jobs_end_key(run: RunStore) -> None:
    key = new_end_key()
    run.set_job(RUN_ID, "train", JobRecord(task_token="old", slurm_job_id=42, submitted_at=NOW, end_key=key))
    ssm = FakeSsm([success("TRAINRUN-SUBMITTED job=train slurm_job_id=42 existing=true\n")])
    submit_job(
        ssm,
        run,
        SubmitRequest(run_id=RUN_ID, job="train", task_token="new"),
        sfn=None,
        run_events=moto_run_events(),
        config_bucket="trainrun-config-test",
        sleep=no_sleep,
    )
    record = run.get(RUN_ID)
    assert record is not None and record.job("train").end_key == key  # type: ignore[union-attr]
    assert key in ssm.sent[0]


def forgotten_with_record(record: str) -> FakeSsm:
    return FakeSsm(
        [success(f"TRAINRUN-JOB-STATE slurm_job_id=42 state=UNKNOWN exit_code=-1\nTRAINRUN-JOB-RECORD {record}\n")]
    )


def test_check_of_a_job_slurm_forgot_reads_its_signed_end_record(run: RunStore) -> None:
    # Given a job that ended COMPLETED, forgotten by slurmctld (MinJobAge), its marker lost
    key = new_end_key()
    run.set_job(RUN_ID, "train", JobRecord(task_token="t", slurm_job_id=42, submitted_at=NOW, end_key=key))
    record = end_marker(key, run_id=RUN_ID, job="train", slurm_job_id=42, exit_code=0, state="COMPLETED", ended_at=1)
    # When it is checked
    check = check_job(
        ssm := forgotten_with_record(record),
        run,
        JobRequest(run_id=RUN_ID, job="train"),
        run_events=moto_run_events(),
        sleep=no_sleep,
    )
    # Then it is read from its end record: finished, exit code 0
    assert (check.state, check.exit_code, check.finished) == ("COMPLETED", 0, True)
    assert "end_record" in ssm.sent[0] or "train.end" in ssm.sent[0]
    stored = run.get(RUN_ID)
    assert stored is not None and stored.job("train").state == "SUCCEEDED"  # type: ignore[union-attr]


def test_check_reads_a_forgotten_jobs_real_exit_code_from_its_end_record(run: RunStore) -> None:
    key = new_end_key()
    run.set_job(RUN_ID, "train", JobRecord(task_token="t", slurm_job_id=42, submitted_at=NOW, end_key=key))
    record = end_marker(key, run_id=RUN_ID, job="train", slurm_job_id=42, exit_code=7, state="FAILED", ended_at=1)
    with pytest.raises(JobFailed, match="exit code 7"):
        check_job(
            forgotten_with_record(record),
            run,
            JobRequest(run_id=RUN_ID, job="train"),
            run_events=moto_run_events(),
            sleep=no_sleep,
        )


def test_check_of_a_forgotten_job_with_a_forged_end_record_is_lost(run: RunStore) -> None:
    run.set_job(RUN_ID, "train", JobRecord(task_token="t", slurm_job_id=42, submitted_at=NOW, end_key=new_end_key()))
    forged = end_marker(
        new_end_key(), run_id=RUN_ID, job="train", slurm_job_id=42, exit_code=0, state="COMPLETED", ended_at=1
    )
    with pytest.raises(JobLost):
        check_job(
            forgotten_with_record(forged),
            run,
            JobRequest(run_id=RUN_ID, job="train"),
            run_events=moto_run_events(),
            sleep=no_sleep,
        )


EXECUTION = "arn:aws:states:us-west-2:123456789012:execution:trainrun-run:" + RUN_ID
RUNNING = "TRAINRUN-JOB-STATE slurm_job_id=42 state=RUNNING exit_code=-1\n"


def checks_of_a_silent_job(store: RunStore, count: int, execution_arn: str = EXECUTION) -> list[Any]:
    ssm = FakeSsm([success(RUNNING)] * count)
    request = JobRequest(run_id=RUN_ID, job="train", execution_arn=execution_arn)
    return [check_job(ssm, store, request, run_events=moto_run_events(), sleep=no_sleep, now=NOW) for _ in range(count)]


def test_an_execution_continues_once_its_checks_reach_half_the_history_quota() -> None:
    # 13 history events a check: the budget is about half of the 25,000-event quota
    assert 12_000 <= CHECKS_PER_EXECUTION * 13 <= 13_000
    assert not continues_in_new_execution(CHECKS_PER_EXECUTION - 1)
    assert continues_in_new_execution(CHECKS_PER_EXECUTION)


def test_checks_below_the_budget_are_counted_and_do_not_continue(
    run: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trainrun.steps.head_node, "CHECKS_PER_EXECUTION", 3)
    checks = checks_of_a_silent_job(with_job(run), 2)
    assert [check.continuation for check in checks] == [None, None]
    record = run.get(RUN_ID)
    assert record is not None
    assert [(link.execution_arn, link.checks, link.ended_because) for link in record.executions] == [
        (EXECUTION, 2, None)
    ]


def test_the_check_that_reaches_the_budget_links_and_names_the_next_execution(
    run: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trainrun.steps.head_node, "CHECKS_PER_EXECUTION", 3)
    *_, last = checks_of_a_silent_job(with_job(run), 3)
    assert last.continuation is not None
    assert (last.continuation.job, last.continuation.execution_name) == ("train", f"{RUN_ID}-c1")
    record = run.get(RUN_ID)
    assert record is not None
    assert [(link.execution_arn, link.ended_because) for link in record.executions] == [
        (EXECUTION, CONTINUED),
        (f"{EXECUTION}-c1", None),
    ]
    # The current execution is the next one: cancel stops it, the janitor asks about it
    assert record.execution_arn == f"{EXECUTION}-c1"


def test_a_retried_check_of_a_continued_execution_names_the_same_next_execution(
    run: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trainrun.steps.head_node, "CHECKS_PER_EXECUTION", 3)
    *_, first, retried = checks_of_a_silent_job(with_job(run), 4)
    assert first.continuation == retried.continuation
    record = run.get(RUN_ID)
    assert record is not None
    assert len(record.executions) == 2


def test_the_next_execution_continues_after_its_own_budget_with_the_next_number(
    run: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trainrun.steps.head_node, "CHECKS_PER_EXECUTION", 2)
    checks_of_a_silent_job(with_job(run), 2)
    *_, last = checks_of_a_silent_job(run, 2, execution_arn=f"{EXECUTION}-c1")
    assert last.continuation is not None and last.continuation.execution_name == f"{RUN_ID}-c2"


def test_a_finished_job_never_continues(run: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trainrun.steps.head_node, "CHECKS_PER_EXECUTION", 1)
    ssm = FakeSsm([success("TRAINRUN-JOB-STATE slurm_job_id=42 state=COMPLETED exit_code=0\n")])
    request = JobRequest(run_id=RUN_ID, job="train", execution_arn=EXECUTION)
    check = check_job(ssm, with_job(run), request, run_events=moto_run_events(), sleep=no_sleep, now=NOW)
    assert check.finished and check.continuation is None


# --- reservation windows ------------------------------------------------------------------------

RUNNING = "TRAINRUN-JOB-STATE slurm_job_id=42 state=RUNNING exit_code=-1\n"
CANCELLED = "TRAINRUN-JOB-STATE slurm_job_id=42 state=CANCELLED exit_code=143\n"


def with_window(store: RunStore, stop_job_at: datetime) -> RunStore:
    window = ReservationWindow(
        reservation_id="cr-0123456789abcdef0", ends_at=stop_job_at + timedelta(minutes=45), stop_job_at=stop_job_at
    )
    store.set_reservation_window(RUN_ID, window)
    return store


def check(store: RunStore, ssm: FakeSsm, now: datetime) -> Any:
    request = JobRequest(run_id=RUN_ID, job="train")
    return check_job(ssm, store, request, run_events=moto_run_events(), sleep=no_sleep, now=now)


def test_a_job_is_left_alone_before_its_reservation_says_stop(run: RunStore) -> None:
    ssm = FakeSsm([success(RUNNING)])
    assert check(with_window(with_job(run), NOW + timedelta(minutes=1)), ssm, NOW).finished is False
    assert len(ssm.sent) == 1  # only the status


def test_once_its_reservation_says_stop_the_job_is_stopped_with_its_grace_and_the_run_ends(run: RunStore) -> None:
    # Given a running job whose reservation window said stop a minute ago; the stop finds it CANCELLED
    store = with_window(with_job(run), NOW - timedelta(minutes=1))
    ssm = FakeSsm([success(RUNNING), success(CANCELLED)])
    # When it is checked
    with pytest.raises(ReservationEnded) as raised:
        check(store, ssm, NOW)
    # Then the stop script ran after the status (scancel: SIGTERM, then KillWait)
    status, stop = ssm.sent
    assert status.startswith("# trainrun: the state of Slurm job 42.")
    assert stop.startswith("# trainrun: stop Slurm job 42.")
    # And the error names the block, the grace the job had, how it ended and what to do next
    message = str(raised.value)
    assert "capacity block cr-0123456789abcdef0 ends" in message
    assert f"up to {SLURM_KILL_WAIT_SECONDS} s (Slurm's KillWait)" in message
    assert "ended CANCELLED with exit code 143" in message
    assert "next capacity block" in message and "workload.resume_from" in message


def test_a_job_that_ended_is_not_stopped_whatever_the_window(run: RunStore) -> None:
    ssm = FakeSsm([success("TRAINRUN-JOB-STATE slurm_job_id=42 state=COMPLETED exit_code=0\n")])
    assert check(with_window(with_job(run), NOW - timedelta(minutes=1)), ssm, NOW).finished is True
    assert len(ssm.sent) == 1


def test_a_job_not_submitted_before_its_reservation_says_stop_is_not_submitted(run: RunStore) -> None:
    with_window(run, NOW - timedelta(minutes=1))
    ssm = FakeSsm([])
    with pytest.raises(ReservationEnded, match="too little of it is left to start the train job"):
        submit_job(
            ssm,
            run,
            SubmitRequest(run_id=RUN_ID, job="train", task_token="t"),
            sfn=None,
            run_events=moto_run_events(),
            config_bucket="trainrun-config-test",
            sleep=no_sleep,
        )
    assert ssm.sent == []


# --- train queued behind compile ---------------------------------------------------------------


@dataclass
class FakeSfn:
    """SendTaskSuccess / SendTaskFailure: what the step told the waiting task."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def send_task_success(self, **kwargs: Any) -> None:
        self.calls.append(("success", kwargs))

    def send_task_failure(self, **kwargs: Any) -> None:
        self.calls.append(("failure", kwargs))


def submit(store: RunStore, job: str, stdout: str, sfn: FakeSfn | None = None) -> FakeSsm:
    ssm = FakeSsm([success(stdout)])
    submit_job(
        ssm,
        store,
        SubmitRequest(run_id=RUN_ID, job=job, task_token=f"{job}-token"),  # type: ignore[arg-type]
        sfn=sfn or FakeSfn(),
        run_events=moto_run_events(),
        config_bucket="trainrun-config-test",
        sleep=no_sleep,
    )
    return ssm


CHAINED = (
    "TRAINRUN-SUBMITTED job=compile slurm_job_id=42 existing=false\n"
    "TRAINRUN-STEP end-watcher\n"
    "TRAINRUN-SUBMITTED job=train slurm_job_id=43 existing=false\n"
    "TRAINRUN-STEP end-watcher\n"
)


def test_compile_submission_queues_train_behind_it_with_trains_own_end_key(run: RunStore) -> None:
    # When Compile submits its job
    ssm = submit(run, "compile", CHAINED)
    # Then the same command queues train behind it, and the record keeps compile's job and train's end key
    assert "submit_chained" in ssm.sent[0] and "--kill-on-invalid-dep=yes" in ssm.sent[0]
    record = run.get(RUN_ID)
    assert record is not None
    compile_, train = record.job("compile"), record.job("train")
    assert compile_ is not None and compile_.slurm_job_id == 42
    assert train is not None and train.end_key is not None and train.end_key != compile_.end_key
    assert train.end_key in ssm.sent[0]
    # And train's job is left to the Train state to record, with its token (none here to overwrite)
    assert (train.slurm_job_id, train.task_token, train.submitted_at) == (None, None, None)


def test_a_second_compile_submission_keeps_the_chained_trains_end_key(run: RunStore) -> None:
    submit(run, "compile", CHAINED)
    first = run.get(RUN_ID)
    assert first is not None and first.job("train") is not None
    # When Compile is entered again (its job silent, still running) and submits again
    ssm = submit(run, "compile", CHAINED.replace("existing=false", "existing=true"))
    # Then the train job's watcher is started with the key it already has
    again = run.get(RUN_ID)
    assert again is not None and again.job("train") == first.job("train")
    assert first.job("train").end_key in ssm.sent[0]  # type: ignore[union-attr]


def test_the_train_state_finds_the_chained_job_and_keeps_its_token(run: RunStore) -> None:
    submit(run, "compile", CHAINED)
    # When the Train state submits train
    ssm = submit(run, "train", "TRAINRUN-SUBMITTED job=train slurm_job_id=43 existing=true\n")
    # Then it finds the chained job (by name, with the key compile's submission gave its watcher) and records it
    record = run.get(RUN_ID)
    assert record is not None
    train = record.job("train")
    assert train is not None and (train.slurm_job_id, train.task_token, train.state) == (43, "train-token", "SUBMITTED")
    assert train.end_key is not None and train.end_key in ssm.sent[0]
    # And its max_runtime counts from now (the Train state), not from compile's submission
    assert train.submitted_at is not None and train.attempt == 1


def ended(store: RunStore, slurm_job_id: int, exit_code: int) -> None:
    """The progress of a train job whose authentic end marker arrived while no task waited for it."""
    state = "COMPLETED" if exit_code == 0 else "FAILED"
    progress = JobProgress(
        slurm_job_id=slurm_job_id,
        exit_code=exit_code,
        step=40,
        tail=["Traceback ...", "RuntimeError: boom"] if exit_code else [],
        attempts=[AttemptProgress(number=1, slurm_job_id=slurm_job_id, end_state=state)],
    )
    assert store.put_progress(RUN_ID, "train", progress, expected_version=0)


def test_a_chained_train_job_that_ended_before_its_token_succeeds_at_submission(run: RunStore) -> None:
    # Given the chained train job ended, its end marker recorded before the Train state had its token
    submit(run, "compile", CHAINED)
    ended(run, 43, 0)
    sfn = FakeSfn()
    # When the Train state submits train and finds that job
    submit(run, "train", "TRAINRUN-SUBMITTED job=train slurm_job_id=43 existing=true\n", sfn)
    # Then the task succeeds with what the progress function would have sent
    assert [(kind, call["taskToken"]) for kind, call in sfn.calls] == [("success", "train-token")]
    output = json.loads(sfn.calls[0][1]["output"])
    assert (output["job"], output["slurm_job_id"], output["exit_code"], output["progress"]["step"]) == (
        "train",
        43,
        0,
        40,
    )


def test_a_chained_train_job_that_failed_before_its_token_fails_the_task_as_its_end_marker_would(
    run: RunStore,
) -> None:
    submit(run, "compile", CHAINED)
    ended(run, 43, 1)
    sfn = FakeSfn()
    submit(run, "train", "TRAINRUN-SUBMITTED job=train slurm_job_id=43 existing=true\n", sfn)
    # Then the task fails with JobFailed (Resume train decides), its cause from the recorded progress
    [(kind, call)] = sfn.calls
    assert (kind, call["taskToken"], call["error"]) == ("failure", "train-token", "JobFailed")
    assert call["cause"].startswith("train job 43 exited with code 1 (Slurm state FAILED)")
    assert "RuntimeError: boom" in call["cause"]


def test_an_end_of_another_slurm_job_completes_no_task_at_submission(run: RunStore) -> None:
    # Given the progress holds the end of another job (an earlier attempt's)
    ended(run, 41, 1)
    sfn = FakeSfn()
    # When the Train state finds its job still queued or running
    submit(run, "train", "TRAINRUN-SUBMITTED job=train slurm_job_id=43 existing=true\n", sfn)
    # Then the task keeps waiting for the job's own end marker
    assert sfn.calls == []
