"""A long silent job: its wait goes on in fresh executions before Step Functions' history quota.

Step Functions fails an execution whose history reaches 25,000 events, and a job that logs
nothing costs about 13 of them per heartbeat period (the job state times out, Check asks
Slurm, the choice sends it back): a 29-day silent job at the default 600 s heartbeat is some
4,200 checks, twice the quota. Time is compressed (LocalRuntime's time_scale): 29 days are
about 42 real seconds. A check costs the emulator about 0.3 real seconds, so these seconds
hold some 140 checks, not 4,200: the check budget per execution and the history quota are
scaled down together, by the same factor, so that the run meets the quota as AWS would.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import yaml

from trainrun.local import step_functions
from trainrun.local.fixture import AccountFixture
from trainrun.local.runtime import LocalRuntime, StartedRun
from trainrun.local.summary import LocalRunSummary, summarize
from trainrun.model.run_record import CONTINUED
from trainrun.ops.runs import execution_history
from trainrun.steps import head_node

from .cli_ops import trainrun
from .conftest import EXAMPLES
from .scripted_head_node import NODE_FAILURE, NODE_FAILURE_LINE, ScriptedCluster, ScriptedJob, recorded_log
from .test_provisioning import remaining

HEARTBEAT_SECONDS = 600  # the template's default
SILENT_DAYS = 29  # workload.max_runtime may be 30d at most
# Nominal seconds per real second: a 600 s heartbeat is 10 real ms, 29 days about 42 real seconds.
TIME_SCALE = 60_000
# The check budget and the quota, scaled down together (trainrun.steps.head_node.CHECKS_PER_EXECUTION checks
# per execution against a 25,000-event quota on AWS).
CHECKS_PER_EXECUTION = 50
HISTORY_EVENT_QUOTA = step_functions.HISTORY_EVENT_QUOTA * CHECKS_PER_EXECUTION // head_node.CHECKS_PER_EXECUTION


def long_runtime_at(
    time_scale: int, account: AccountFixture, cluster: ScriptedCluster, monkeypatch: pytest.MonkeyPatch
) -> LocalRuntime:
    # The functions' own wait for an SSM command is compressed too (real seconds otherwise).
    monkeypatch.setattr(head_node, "COMMAND_POLL_SECONDS", 0.01)
    monkeypatch.setattr(head_node, "CHECKS_PER_EXECUTION", CHECKS_PER_EXECUTION)
    monkeypatch.setattr(step_functions, "HISTORY_EVENT_QUOTA", HISTORY_EVENT_QUOTA)
    parameters = {"JobHeartbeatSeconds": str(HEARTBEAT_SECONDS)}
    return LocalRuntime(account, head_node_factory=cluster, parameters=parameters, time_scale=time_scale)


@pytest.fixture
def long_runtime(
    account: AccountFixture, cluster: ScriptedCluster, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LocalRuntime]:
    with long_runtime_at(TIME_SCALE, account, cluster, monkeypatch) as local:
        yield local


def month_long_run() -> bytes:
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    document["workload"]["max_runtime"] = "30d"
    return yaml.safe_dump(document).encode()


def silent_training(cluster: ScriptedCluster, time_scale: int = TIME_SCALE) -> None:
    cluster.jobs["train"] = ScriptedJob(
        recorded_log("train_bert_ok.out"), silent_seconds=SILENT_DAYS * 86_400 / time_scale
    )


def test_a_29_day_silent_job_succeeds_across_linked_executions(
    long_runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    # Given a training job that logs nothing for 29 days, then ends well
    silent_training(cluster)
    # When the run goes through
    started, summary = run_to_end_slowly(long_runtime, month_long_run())
    # Then it succeeded, across two or more executions that the record links in order
    assert summary.status == "SUCCEEDED", summary.error
    record = long_runtime.store().get(started.run_id)
    assert record is not None
    arns = [link.execution_arn for link in record.executions]
    assert len(arns) >= 2, record.executions
    assert arns[0] == started.execution_arn
    assert arns[1:] == [f"{started.execution_arn}-c{n}" for n in range(1, len(arns))]
    assert [link.ended_because for link in record.executions] == [CONTINUED] * (len(arns) - 1) + [None]
    assert record.execution_arn == arns[-1]
    # And no execution came near the history quota; each continued one ended SUCCEEDED
    sfn = long_runtime.client("stepfunctions")
    for arn in arns:
        described = sfn.describe_execution(executionArn=arn)
        assert described["status"] == "SUCCEEDED", (arn, described.get("error"), described.get("cause"))
        assert len(execution_history(sfn, arn)) < HISTORY_EVENT_QUOTA * 3 // 4
    # And the cluster was not torn down while the job ran, and nothing is left
    (node,) = cluster.head_nodes
    assert node.job_states_at_stop == {"compile": "COMPLETED", "train": "COMPLETED"}
    assert remaining(long_runtime, started.run_id) == []
    # And `trainrun status` lists the executions, each with why it ended
    shown = trainrun(long_runtime, "status", started.run_id)
    assert shown.exit_code == 0, shown.output
    for arn in arns:
        assert arn in shown.output
    assert shown.output.count("ended: continued") == len(arns) - 1


def run_to_end_slowly(runtime: LocalRuntime, run_file: bytes) -> tuple[StartedRun, LocalRunSummary]:
    started = runtime.submit(run_file, "runs/month-long.yaml")
    execution = runtime.wait(started.execution_arn, timeout=600)
    return started, summarize(runtime, started, execution)


# The run without continuation meets the quota after a number of checks, each taking real time
# (more on a loaded machine); the job must still be silent then. Less compressed time gives its 29
# days four times the real seconds, so that the quota comes first even with checks four times as
# slow as on an idle machine; the run ends at the quota, so it takes no longer.
SLOWER_TIME_SCALE = TIME_SCALE // 4


def test_without_continuation_the_same_job_ends_its_execution_at_the_quota_and_is_torn_down(
    account: AccountFixture, cluster: ScriptedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the same 29-day silent job, and a workflow that never hands its wait on
    silent_training(cluster, SLOWER_TIME_SCALE)
    # When the run goes through
    with long_runtime_at(SLOWER_TIME_SCALE, account, cluster, monkeypatch) as long_runtime:
        monkeypatch.setattr(head_node, "CHECKS_PER_EXECUTION", 10**9)
        started, summary = run_to_end_slowly(long_runtime, month_long_run())
        # Then its only execution failed at the history quota, mid-job, and the safety net tore it down
        assert summary.status == "FAILED"
        assert summary.executions == [started.execution_arn]
        described = long_runtime.client("stepfunctions").describe_execution(executionArn=started.execution_arn)
        assert (described["status"], described["error"]) == ("FAILED", step_functions.HISTORY_QUOTA_ERROR)
        record = long_runtime.store().get(started.run_id)
        assert record is not None and record.job_train is not None and record.job_train.submitted_at is not None
        job_ends = record.job_train.submitted_at + timedelta(seconds=SILENT_DAYS * 86_400 / SLOWER_TIME_SCALE)
        assert described["stopDate"] < job_ends
        assert record.torn_down_at is not None
        assert remaining(long_runtime, started.run_id) == []


def test_a_resubmitted_job_that_goes_silent_is_waited_for_in_the_next_execution_as_its_own_attempt(
    long_runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    # Given a run that may resume, whose first train job loses a node and whose resubmission then
    # logs nothing for 29 days before it ends well
    cluster.jobs["train"] = ScriptedJob([*recorded_log("train_bert_ok.out")[:12], NODE_FAILURE_LINE], **NODE_FAILURE)
    cluster.jobs["train-2"] = ScriptedJob(
        recorded_log("train_bert_ok.out"), silent_seconds=SILENT_DAYS * 86_400 / TIME_SCALE
    )
    document = yaml.safe_load(month_long_run())
    document["workload"]["resume"] = "python3 train.py --steps 40"
    # When the run goes through
    started, summary = run_to_end_slowly(long_runtime, yaml.safe_dump(document).encode())
    # Then it succeeded across two or more executions, with two Slurm jobs: attempt 1 and attempt 2
    assert summary.status == "SUCCEEDED", summary.error
    record = long_runtime.store().get(started.run_id)
    assert record is not None and record.job_train is not None
    assert len(record.executions) >= 2
    (node,) = cluster.head_nodes
    assert sorted(node.slurm_jobs) == ["compile", "train", "train-2"]
    # And every submission after the resubmission, the continued executions' included, was of attempt 2
    submissions = [script for script in node.scripts if script.startswith("# trainrun: submit the train job")]
    first_of_attempt_2 = next(i for i, script in enumerate(submissions) if "-train-2" in script)
    assert first_of_attempt_2 == 1
    assert all(f"job_name=trainrun-{started.run_id}-train-2" in script for script in submissions[1:])
    assert len(submissions) > len(record.executions)  # each execution waited for it again
    assert (record.job_train.attempt, [a.number for a in record.job_train.attempts]) == (2, [1])
    assert summary.progress.train is not None and summary.progress.train.attempts == 2
