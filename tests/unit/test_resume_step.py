"""Resume train (trainrun.steps.resume) against a fake SSM: how it decides, waits and opens the
next attempt of a failed train job, and that every call of it is safe to repeat."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from trainrun.model.end_marker import new_end_key
from trainrun.model.jobs import AttemptProgress, JobProgress, JobRecord
from trainrun.model.run_file import Budget, parse_run_file
from trainrun.model.run_record import RunStore
from trainrun.steps import resume
from trainrun.steps.budget import BudgetExceeded
from trainrun.steps.head_node import ComputeNodesFailed, SubmitRequest, submit_job
from trainrun.steps.resume import NodesNotBack, ResumeRequest, resume_job

from .conftest import moto_run_events
from .test_job_steps import NOW, RUN_ID, FakeSsm, run, success  # noqa: F401 - `run` is a fixture
from .test_run_events import CapturedBus, publisher

ROOT = Path(__file__).resolve().parents[2]
REQUEST = ResumeRequest(run_id=RUN_ID, job="train")
SLURM_JOB_ID = 42
NODE_FAILURE = AttemptProgress(
    number=1,
    first_step=1,
    last_step=22,
    failures=["node_failure", "srun_error"],
    slurm_job_id=SLURM_JOB_ID,
    end_state="NODE_FAIL",
)
NODES_BACK = success("TRAINRUN-NODES total=1 idle=1\n")
NODE_MISSING = success("TRAINRUN-NODES total=1 idle=0\n")


@pytest.fixture
def resumable(run: RunStore) -> RunStore:  # noqa: F811 - the fixture imported above
    """The run, saying how to resume (two resubmissions), with its train job's first attempt submitted."""
    text = (ROOT / "examples" / "single-node.yaml").read_text()
    run.set_spec(RUN_ID, parse_run_file(text.replace("total_steps: 40", "total_steps: 40\n  resume: ./resume.sh")))
    run.set_job(
        RUN_ID,
        "train",
        JobRecord(slurm_job_id=SLURM_JOB_ID, submitted_at=NOW, state="SUBMITTED", end_key=new_end_key()),
    )
    return run


def logged(store: RunStore, *attempts: AttemptProgress) -> None:
    _, version = store.get_progress(RUN_ID, "train")
    assert store.put_progress(RUN_ID, "train", JobProgress(attempts=list(attempts)), expected_version=version)


def visit(store: RunStore, ssm: FakeSsm, **kwargs: object) -> resume.ResumeDecision:
    kwargs.setdefault("run_events", publisher(CapturedBus()))
    return resume_job(ssm, store, REQUEST, poll_seconds=5, sleep=lambda _: None, **kwargs)  # type: ignore[arg-type]


def test_a_node_failure_waits_for_the_nodes_then_opens_the_next_attempt_once(resumable: RunStore) -> None:
    # Given a first attempt whose log and end said a node failed
    logged(resumable, NODE_FAILURE)
    ssm = FakeSsm([NODE_MISSING, NODES_BACK])
    # When Resume train looks while the replacement is not idle yet
    waiting = visit(resumable, ssm)
    # Then it resubmits, but not yet: the workflow waits for the nodes
    assert (waiting.resubmit, waiting.ready, waiting.failed_attempt) == (True, False, 1)
    assert waiting.retry_after_seconds == resume.NODES_POLL_SECONDS  # at least a minute: history events
    assert "a node of the job failed" in waiting.why
    # And when the nodes are back, the next attempt is open: no Slurm job yet, the first one closed
    ready = visit(resumable, ssm)
    assert (ready.resubmit, ready.ready) == (True, True)
    record = resumable.get(RUN_ID)
    assert record is not None and record.job_train is not None
    job = record.job_train
    assert (job.attempt, job.slurm_job_id, job.submitted_at, job.state, job.task_token) == (2, None, None, None, None)
    (closed,) = job.attempts
    assert (closed.number, closed.slurm_job_id, closed.state, closed.infrastructure) == (1, 42, "NODE_FAIL", True)
    assert len(ssm.sent) == 2 and all("# trainrun: the compute nodes of run" in script for script in ssm.sent)
    # And a retried call (its answer lost) answers the same, asking nothing and opening nothing more
    again = visit(resumable, ssm)
    assert (again.resubmit, again.ready, again.failed_attempt) == (True, True, 1)
    assert len(ssm.sent) == 2
    assert resumable.get(RUN_ID).job_train.attempt == 2  # type: ignore[union-attr]


def test_a_failure_of_the_workload_is_not_resubmitted_and_no_node_is_asked_about(resumable: RunStore) -> None:
    logged(
        resumable,
        AttemptProgress(
            number=1, first_step=1, last_step=19, failures=["traceback"], slurm_job_id=42, end_state="FAILED"
        ),
    )
    ssm = FakeSsm([])
    decision = visit(resumable, ssm)
    assert (decision.resubmit, decision.ready) == (False, False)
    assert decision.why.startswith("the workload failed (Slurm state FAILED")
    assert ssm.sent == []
    job = resumable.get(RUN_ID).job_train  # type: ignore[union-attr]
    assert job is not None and job.state == "FAILED" and not job.attempts[0].infrastructure


def test_an_end_not_recorded_yet_is_waited_for_then_decided_on_what_there_is(resumable: RunStore) -> None:
    # Given a job whose end marker completed the state before its batch was recorded
    ssm = FakeSsm([])
    for _ in range(resume.END_RECORD_POLLS):
        waiting = visit(resumable, ssm)
        assert (waiting.resubmit, waiting.ready, waiting.retry_after_seconds) == (True, False, 5)
    # Then, the polls spent with nothing recorded, nothing says the infrastructure failed
    decided = visit(resumable, ssm)
    assert (decided.resubmit, decided.ready) == (False, False)
    assert "Slurm state unknown" in decided.why and ssm.sent == []


def test_the_state_check_found_decides_without_waiting_for_the_logs(resumable: RunStore) -> None:
    # Given a job Check found ended NODE_FAIL (its end marker never reached the logs)
    job = resumable.get(RUN_ID).job_train  # type: ignore[union-attr]
    assert job is not None
    resumable.set_job(RUN_ID, "train", job.model_copy(update={"slurm_state": "NODE_FAIL", "exit_code": 143}))
    decision = visit(resumable, FakeSsm([NODES_BACK]))
    assert (decision.resubmit, decision.ready) == (True, True)


def test_nodes_that_never_come_back_fail_the_run(resumable: RunStore) -> None:
    logged(resumable, NODE_FAILURE)
    ssm = FakeSsm([NODE_MISSING, NODE_MISSING])
    assert not visit(resumable, ssm).ready
    ended = resumable.get(RUN_ID).job_train.attempts[0].ended_at  # type: ignore[union-attr]
    assert ended is not None
    with pytest.raises(NodesNotBack, match="did not have its 1 nodes idle again 60 minutes after attempt 1"):
        visit(resumable, ssm, now=ended + timedelta(seconds=resume.NODES_BACK_SECONDS + 1))


def test_replacements_whose_bootstrap_fails_until_protected_mode_fail_the_run_at_once(resumable: RunStore) -> None:
    # Given a train job that lost a node, whose replacements fail to bootstrap until the queue is protected
    logged(resumable, NODE_FAILURE)
    protected = success(
        "TRAINRUN-NODES total=1 idle=0\n"
        "TRAINRUN-QUEUE nodes=1 up=0 inactive=1\n"
        "TRAINRUN-NODE-DOWN name=queue-st-trn1-32xlarge-1 state=drain reason=Node bootstrap error: no driver\n"
    )
    # When Resume train looks for the nodes, then the run fails now, not an hour later, naming the node
    with pytest.raises(ComputeNodesFailed, match="protected mode") as failed:
        visit(resumable, FakeSsm([protected]))
    assert "queue-st-trn1-32xlarge-1 (drain): Node bootstrap error: no driver" in str(failed.value)
    assert "will not get its nodes back after attempt 1 of the train job failed" in str(failed.value)


def test_the_budget_holds_while_the_cluster_gets_its_nodes_back(resumable: RunStore) -> None:
    # Given a resumable run with a $10 budget whose train job lost a node, its cluster billing since it was made
    record = resumable.get(RUN_ID)
    assert record is not None and record.spec is not None and record.cluster_since is not None
    resumable.set_spec(RUN_ID, record.spec.model_copy(update={"budget": Budget(max_cost_usd=10)}))
    logged(resumable, NODE_FAILURE)
    bus = CapturedBus()
    # When Resume train looks an hour later (the single-node cluster costs about $22 an hour), the nodes still not back
    with pytest.raises(
        BudgetExceeded, match=r"of budget.max_cost_usd \(\$10.00\), while the cluster got its nodes back"
    ):
        visit(
            resumable, FakeSsm([NODE_MISSING]), run_events=publisher(bus), now=record.cluster_since + timedelta(hours=1)
        )
    # Then the run fails BudgetExceeded (its teardown follows), the budget's warning given on the way
    assert bus.states == ["budget_warning"]


def test_the_last_allowed_attempt_is_not_resubmitted(resumable: RunStore) -> None:
    # Given the third attempt (the run allows two resubmissions), which lost a node too
    job = resumable.get(RUN_ID).job_train  # type: ignore[union-attr]
    assert job is not None
    resumable.set_job(RUN_ID, "train", job.model_copy(update={"attempt": 3, "slurm_job_id": 44}))
    logged(resumable, NODE_FAILURE.model_copy(update={"number": 3, "slurm_job_id": 44}))
    ssm = FakeSsm([])
    decision = visit(resumable, ssm)
    assert (decision.resubmit, decision.failed_attempt) == (False, 3)
    assert "no resubmission left (workload.retries: 2)" in decision.why
    assert ssm.sent == []


def submit(store: RunStore, ssm: FakeSsm, token: str) -> int:
    request = SubmitRequest(run_id=RUN_ID, job="train", task_token=token)
    submitted = submit_job(
        ssm,
        store,
        request,
        sfn=None,
        run_events=moto_run_events(),
        config_bucket="trainrun-config-test",
        sleep=lambda _: None,
    )
    return submitted.slurm_job_id


def test_the_opened_attempt_is_submitted_once_and_a_continued_execution_waits_for_it_again(
    resumable: RunStore,
) -> None:
    # Given a node failure whose next attempt Resume train opened
    logged(resumable, NODE_FAILURE)
    assert visit(resumable, FakeSsm([NODES_BACK])).ready
    # When Train submits it, then submits again (a continued execution's Train after a long silence)
    ssm = FakeSsm(
        [
            success("TRAINRUN-SUBMITTED job=train slurm_job_id=43 existing=false\n"),
            success("TRAINRUN-SUBMITTED job=train slurm_job_id=43 existing=true\n"),
        ]
    )
    assert submit(resumable, ssm, "token-2") == 43
    assert submit(resumable, ssm, "token-3") == 43
    # Then both submissions are of attempt 2: its own job name, its TRAINRUN_ATTEMPT, the resume command
    for script in ssm.sent:
        assert f"job_name=trainrun-{RUN_ID}-train-2" in script
        assert "attempt=2" in script and "./resume.sh" in script
    # And the record keeps the attempt and the closed one before it
    job = resumable.get(RUN_ID).job_train  # type: ignore[union-attr]
    assert job is not None and (job.attempt, job.slurm_job_id, job.task_token) == (2, 43, "token-3")
    assert [attempt.number for attempt in job.attempts] == [1]
