"""Prepare head node, Compile and Train through the real state machine, driven by the jobs' logs.

The head node is scripted (tests/integration/scripted_head_node.py): it answers the SSM
scripts and ships recorded job logs to the jobs log group, whose subscription runs the
progress function, which completes the waiting job state. The real Slurm head node is in
the end-to-end tests.

The tests differ only in how the head node plays the jobs, not in the stack: those on the
template's heartbeat share one runtime (`shared_runtime`; starting one costs seconds of CPU),
each run's head node scripted by the test's own `cluster`. The local runtime is process-wide
(moto's backend, the function registry), so that shared runtime must be the last one the module
starts: the tests on a quick heartbeat, each on a runtime of its own, come first.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import yaml

from trainrun.local.fixture import AccountFixture
from trainrun.local.runtime import LOCAL_TIME_SCALE, LocalRuntime, StartedRun
from trainrun.local.summary import LocalRunSummary
from trainrun.workflow import State

from .conftest import EXAMPLES, example, run_to_end
from .scripted_head_node import ClusterOfEachTest, ScriptedCluster, ScriptedJob, recorded_log
from .test_provisioning import remaining

JOB_STATES = [
    State.PREPARE_HEAD_NODE,
    State.HEAD_NODE_READY,
    State.COMPILE_NEEDED,
    State.COMPILE,
    State.TRAIN,
    State.TEAR_DOWN,
]
# A job that logs nothing for this long is checked with Slurm: the template's minimum, 2 real
# seconds in the local runtime's compressed time.
QUICK_HEARTBEAT_SECONDS = 60
# The same in real seconds: what a scripted job's silence is measured in.
QUICK_HEARTBEAT_REAL_SECONDS = QUICK_HEARTBEAT_SECONDS / LOCAL_TIME_SCALE


def states_between(states: list[str], first: str, last: str) -> list[str]:
    start = states.index(first)
    return states[start : states.index(last, start) + 1]


def without_compile() -> bytes:
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    del document["workload"]["compile"]
    return yaml.safe_dump(document).encode()


# --- on a quick heartbeat, each on a runtime of its own ----------------------------------------------


@pytest.fixture
def quick_runtime(account: AccountFixture, cluster: ScriptedCluster) -> Iterator[LocalRuntime]:
    """The local stack with a heartbeat short enough to go silent within a test."""
    parameters = {"JobHeartbeatSeconds": str(QUICK_HEARTBEAT_SECONDS)}
    with LocalRuntime(account, head_node_factory=cluster, parameters=parameters) as local:
        yield local


def test_a_lost_end_marker_is_recovered_by_asking_slurm(quick_runtime: LocalRuntime, cluster: ScriptedCluster) -> None:
    # Given a training job whose end marker never reaches the logs, though Slurm saw it complete
    cluster.jobs["train"] = ScriptedJob(recorded_log("train_bert_ok.out"), lose_end_marker=True)
    _, summary = run_to_end(quick_runtime, example("single-node.yaml"))
    # Then the silent job state times out, Slurm is asked, and the run goes on to success
    assert summary.status == "SUCCEEDED", summary.error
    assert states_between(summary.states, State.TRAIN, State.TRAIN_FINISHED) == [
        State.TRAIN,
        State.CHECK_TRAIN,
        State.TRAIN_FINISHED,
    ]
    assert summary.states[summary.states.index(State.TRAIN_FINISHED) + 1] == State.TEAR_DOWN


def test_a_lost_end_marker_of_a_failed_job_fails_the_run(quick_runtime: LocalRuntime, cluster: ScriptedCluster) -> None:
    cluster.jobs["compile"] = ScriptedJob([], exit_code=137, lose_end_marker=True, slurm_state="NODE_FAIL")
    started, summary = run_to_end(quick_runtime, example("single-node.yaml"))
    assert summary.status == "FAILED"
    assert State.CHECK_COMPILE in summary.states and State.TRAIN not in summary.states
    assert summary.error is not None and summary.error["error"] == "JobFailed"
    assert "NODE_FAIL" in summary.error["cause"] and "asking Slurm" in summary.error["cause"]
    assert remaining(quick_runtime, started.run_id) == []


def test_a_silent_job_still_running_is_waited_for_again_without_a_second_submission(
    quick_runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    # Given a training job that prints nothing for longer than the heartbeat, then ends well
    cluster.jobs["train"] = ScriptedJob(recorded_log("train_bert_ok.out"), silent_until_checked=1)
    _, summary = run_to_end(quick_runtime, example("single-node.yaml"))
    # Then Slurm says it is running, the state waits again, and the end marker ends it
    assert summary.status == "SUCCEEDED", summary.error
    assert states_between(summary.states, State.TRAIN, State.TRAIN_FINISHED) == [
        State.TRAIN,
        State.CHECK_TRAIN,
        State.TRAIN_FINISHED,
    ]
    assert summary.states[summary.states.index(State.TRAIN_FINISHED) + 1] == State.TRAIN
    # And the second submission found the first job by name: one Slurm job, submitted once
    (head_node,) = cluster.head_nodes
    submissions = [s for s in head_node.scripts if s.startswith("# trainrun: submit the train job")]
    assert len(submissions) >= 2
    assert sorted(head_node.slurm_jobs) == ["compile", "train"]


def test_a_job_slurm_forgot_is_recovered_from_its_end_record(
    quick_runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    # Given a training job whose end marker never reaches the logs, and that slurmctld has
    # forgotten (MinJobAge passed, no accounting) when the silent state asks
    cluster.jobs["train"] = ScriptedJob(recorded_log("train_bert_ok.out"), lose_end_marker=True, slurm_forgets=True)
    _, summary = run_to_end(quick_runtime, example("single-node.yaml"))
    # Then the status check reads the end watcher's signed record, and the run succeeds
    assert summary.status == "SUCCEEDED", summary.error
    assert states_between(summary.states, State.TRAIN, State.TRAIN_FINISHED) == [
        State.TRAIN,
        State.CHECK_TRAIN,
        State.TRAIN_FINISHED,
    ]


# --- on the template's heartbeat, on the module's shared runtime (the last one it starts) ---------


@dataclass(frozen=True)
class FinishedRun:
    started: StartedRun
    summary: LocalRunSummary
    # The head nodes of its cluster, as they played the jobs.
    cluster: ScriptedCluster


@pytest.fixture(scope="module")
def recorded_logs_run(module_runtime: LocalRuntime, clusters: ClusterOfEachTest) -> FinishedRun:
    """A run of the single-node example whose compile and train jobs print the recorded logs and
    end well (read by more than one test: it is run once)."""
    clusters.cluster = ScriptedCluster()
    started, summary = run_to_end(module_runtime, example("single-node.yaml"))
    return FinishedRun(started, summary, clusters.cluster)


def test_compile_then_train_end_through_their_logs_and_record_progress(
    shared_runtime: LocalRuntime, recorded_logs_run: FinishedRun
) -> None:
    runtime = shared_runtime
    # When a run goes through its jobs, each completed by its end marker in the logs
    started, summary = recorded_logs_run.started, recorded_logs_run.summary
    # Then it succeeds without ever asking Slurm (no heartbeat timed out)
    assert summary.status == "SUCCEEDED", summary.error
    prepared = states_between(summary.states, State.PREPARE_HEAD_NODE, State.HEAD_NODE_READY)
    assert summary.states[summary.states.index(State.COMPILE_NEEDED) :][:3] == [
        State.COMPILE_NEEDED,
        State.COMPILE,
        State.TRAIN,
    ]
    assert prepared[0] == State.PREPARE_HEAD_NODE
    assert State.CHECK_COMPILE not in summary.states and State.CHECK_TRAIN not in summary.states
    # And the record holds what the logs said: compile totals, the last training step, the end
    store = runtime.store()
    compile_progress, _ = store.get_progress(started.run_id, "compile")
    train_progress, _ = store.get_progress(started.run_id, "train")
    assert compile_progress is not None and train_progress is not None
    assert (compile_progress.compile_graphs, compile_progress.compile_failed) == (2, 0)
    assert compile_progress.exit_code == 0
    assert train_progress.step == max(point.step for point in train_progress.history)
    assert train_progress.exit_code == 0 and train_progress.checkpoints >= 1
    # And one Slurm job of each kind was submitted, by name, to the run's head node
    (head_node,) = recorded_logs_run.cluster.head_nodes
    assert sorted(head_node.slurm_jobs) == ["compile", "train"]
    assert head_node.request.run_id == started.run_id
    assert head_node.log_group == runtime.deployed.outputs["JobsLogGroupName"]
    # And nothing is left
    assert remaining(runtime, started.run_id) == []


def test_a_long_training_costs_no_more_state_transitions_than_a_short_one(
    shared_runtime: LocalRuntime, cluster: ScriptedCluster, recorded_logs_run: FinishedRun
) -> None:
    # Given two runs, one after the other, whose training logs differ tenfold in length: the
    # module's run of the recorded logs, and one whose training prints its log ten times over
    cluster.jobs["train"] = ScriptedJob(recorded_log("train_bert_ok.out") * 10)
    _, long_training = run_to_end(shared_runtime, example("single-node.yaml"))
    job_phases = []
    for summary in (recorded_logs_run.summary, long_training):
        assert summary.status == "SUCCEEDED", summary.error
        # From Compile needed? to Tear down: where a longer training would show. Before it the
        # workflow polls the cluster, data repository and head node side by side, and after it the
        # teardown, for as many rounds as the machine's load takes.
        states = summary.states
        job_phases.append(states[states.index(State.COMPILE_NEEDED) : states.index(State.TEAR_DOWN)])
    # Then they visited the same states: waiting is a callback, not a poll
    assert job_phases[0] == job_phases[1]


def test_compile_is_skipped_when_the_run_has_no_compile_command(
    shared_runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    _, summary = run_to_end(shared_runtime, without_compile())
    assert summary.status == "SUCCEEDED", summary.error
    assert State.COMPILE not in summary.states
    assert summary.states[summary.states.index(State.COMPILE_NEEDED) + 1] == State.TRAIN
    assert sorted(cluster.head_nodes[0].slurm_jobs) == ["train"]


def test_a_failing_compile_fails_the_run_with_the_log_tail_and_tears_down(
    shared_runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    runtime = shared_runtime
    # Given a compile job that fails: an error in its log, exit code 1
    cluster.jobs["compile"] = ScriptedJob(
        [*recorded_log("compile_bert_ok.out")[:5], "srun: error: queue1-st-trn1-1: task 0: Exited with exit code 1"],
        exit_code=1,
    )
    started, summary = run_to_end(runtime, example("single-node.yaml"))
    # Then the run fails with the job's failure, training never starts, and nothing is left
    assert summary.status == "FAILED"
    assert State.TRAIN not in summary.states
    assert summary.error is not None and summary.error["error"] == "JobFailed"
    assert "exited with code 1" in summary.error["cause"]
    assert "srun_error" in summary.error["cause"]
    assert "srun: error: queue1-st-trn1-1" in summary.error["cause"]
    assert remaining(runtime, started.run_id) == []


def test_a_crashing_training_job_fails_the_run_with_its_failure_signatures(
    shared_runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    runtime = shared_runtime
    cluster.jobs["train"] = ScriptedJob(recorded_log("train_bert_failed.out"), exit_code=1)
    started, summary = run_to_end(runtime, example("single-node.yaml"))
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "JobFailed"
    assert "traceback" in summary.error["cause"]
    train_progress, _ = runtime.store().get_progress(started.run_id, "train")
    assert train_progress is not None and train_progress.exit_code == 1 and train_progress.step is not None
    assert remaining(runtime, started.run_id) == []


def test_a_failed_preparation_fails_the_run_with_the_commands_stderr(
    shared_runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    runtime = shared_runtime
    cluster.prepare_failure = (
        "TRAINRUN-ERROR step fetch-workload failed with exit code 128\nfatal: repository not found"
    )
    started, summary = run_to_end(runtime, example("single-node.yaml"))
    assert summary.status == "FAILED"
    assert State.COMPILE not in summary.states
    assert summary.error is not None and summary.error["error"] == "HeadNodePreparationFailed"
    assert "fatal: repository not found" in summary.error["cause"]
    assert remaining(runtime, started.run_id) == []


def test_a_job_that_prints_a_forged_success_marker_then_exits_7_fails_with_exit_code_7(
    shared_runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    runtime = shared_runtime
    # Given a training job whose first line is an end marker of its own run, job and Slurm job
    # saying exit code 0 (unsigned: the job has no key), and which then exits 7
    forged = "TRAINRUN-END run={run_id} job=train slurm_job_id={slurm_job_id} exit_code=0"
    cluster.jobs["train"] = ScriptedJob([forged, *recorded_log("train_bert_ok.out")], exit_code=7)
    started, summary = run_to_end(runtime, example("single-node.yaml"))
    # Then the forged marker is counted and ignored; the end watcher's marker fails the run with 7
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "JobFailed"
    assert "exited with code 7" in summary.error["cause"]
    progress, _ = runtime.store().get_progress(started.run_id, "train")
    assert progress is not None and progress.rejected_end_markers == 1 and progress.exit_code == 7
    assert remaining(runtime, started.run_id) == []
