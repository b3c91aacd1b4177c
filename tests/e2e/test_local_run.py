"""Whole runs on the local runtime with the real head node: Slurm schedules the jobs, the stand-in
workload prints the Neuron tutorials' log formats, the log shipper feeds the progress function.

In process (LocalRuntime, as `trainrun local` drives it) so a test can reach into the head node
(set a node DOWN) and read the summary as a model; test_cli.py runs the command itself.
"""

from __future__ import annotations

import pwd
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainrun.cli.local import write_private_file
from trainrun.local.fixture import AccountFixture, load_fixture
from trainrun.local.runtime import LocalRuntime
from trainrun.local.slurm_head_node import WORKLOAD_USER, LocalHeadNode
from trainrun.local.summary import LocalRunSummary, summarize
from trainrun.model.jobs import DEFAULT_USERS
from trainrun.workflow import State

from .conftest import EXAMPLES, NEEDS_LOCAL_HEAD_NODE

pytestmark = NEEDS_LOCAL_HEAD_NODE

# Every Task state of a successful run of the small example, in order; the three of the Parallel
# state start side by side, in any order.
BEFORE_THE_CLUSTER = [State.LOAD_RUN_SPEC, State.VALIDATE_CAPACITY, State.CREATE_NETWORK, State.CREATE_FILE_SYSTEM]
SIDE_BY_SIDE = {State.CREATE_CLUSTER, State.LINK_DATA_REPOSITORY, State.PREPARE_HEAD_NODE}
AFTER_THE_CLUSTER = [State.COMPILE, State.TRAIN, State.TEAR_DOWN, State.RECORD_SUCCESS]
SUCCESSFUL_RUN_TASK_STATES = [*BEFORE_THE_CLUSTER, *sorted(SIDE_BY_SIDE), *AFTER_THE_CLUSTER]


@pytest.fixture(scope="module")
def account() -> AccountFixture:
    return load_fixture(EXAMPLES / "accounts" / "default.yaml")


# One runtime for the module's runs (each run has its own cluster and head node, torn down at its
# end): starting and stopping a local stack costs seconds a test. Runs that need a runtime of their
# own (a rehearsed failure, other stack parameters) are in test_local_run_rehearsals.py: two local
# runtimes cannot be up at once in one process (moto's backends and the emulators are process-wide).
@pytest.fixture(scope="module")
def runtime(account: AccountFixture) -> Iterator[LocalRuntime]:
    with LocalRuntime(account) as local:
        yield local


def run_file(**workload: Any) -> bytes:
    """The small example with workload fields replaced (env merged)."""
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    env = {**document["workload"].get("env", {}), **workload.pop("env", {})}
    document["workload"].update(workload)
    if env:
        document["workload"]["env"] = env
    if "nodes" in workload:
        document["capacity"]["nodes"] = document["workload"].pop("nodes")
    return yaml.safe_dump(document).encode()


def run(runtime: LocalRuntime, data: bytes, key: str = "runs/e2e.yaml") -> LocalRunSummary:
    started = runtime.submit(data, key)
    return summarize(runtime, started, runtime.wait(started.execution_arn, timeout=240))


def test_a_run_trains_for_real_as_the_unprivileged_default_user_who_cannot_read_roots_secrets_and_leaves_nothing(
    runtime: LocalRuntime,
) -> None:
    # Given root's secrets on the head node's machine: credentials in a file only root may read
    # (as `trainrun serve` writes its env file) in a directory anyone may enter; the job's end key,
    # in the environment of its end watcher and in the submit command's script (the SSM scripts)
    assert runtime.head_nodes is not None
    secrets = Path(tempfile.mkdtemp(prefix="trainrun-e2e-secrets-"))
    secrets.chmod(0o755)
    credentials = secrets / "serve.env"
    write_private_file(credentials, "AWS_SECRET_ACCESS_KEY=root-only\n")
    # and the small example whose training job first checks who it runs as, then tries to read
    # each secret: every check that does not hold exits with its own code (the run's exit code
    # then names it); then it trains as the example does. The watcher is root's process:
    # `pgrep -u 0`, as the job's own subshells carry the pattern in their command line too, and
    # once PIDs wrap (pid_max 32768, a whole suite's worth) one may sort first.
    checks = (
        'test "$(id -u)" -ne 0 || exit 11; '
        'test "$(id -u):$(id -un)" = "$EXPECTED_USER" || exit 12; '
        'if cat -- "$CREDENTIALS" >/dev/null 2>&1; then exit 13; fi; '
        "for _ in $(seq 100); do watcher=$(pgrep -u 0 -f trainrun-end-watch | head -n 1); "
        '[ -n "$watcher" ] && break; sleep 0.1; done; '
        '[ -n "$watcher" ] || exit 14; '
        'if cat -- "/proc/$watcher/environ" >/dev/null 2>&1; then exit 15; fi; '
        'if cat -- "$SANDBOXES"/*/ssm/* >/dev/null 2>&1; then exit 16; fi; '
        "python3 train.py --steps 40"
    )
    expected_user = f"{pwd.getpwnam(WORKLOAD_USER).pw_uid}:{DEFAULT_USERS['ubuntu2204']}"
    env = {
        "EXPECTED_USER": expected_user,
        "CREDENTIALS": str(credentials),
        "SANDBOXES": str(runtime.head_nodes.sandboxes),
    }
    try:
        # When the run goes
        summary = run(runtime, run_file(train=checks, env=env), "runs/unprivileged.yaml")
    finally:
        shutil.rmtree(secrets)
    # Then every check held (the job ran as the default user, this machine's unprivileged
    # WORKLOAD_USER, and read none of root's secrets), and it trained: the run succeeds
    assert summary.status == "SUCCEEDED", summary.error
    # And it went through every Task state of a successful run, in order, with no Check (each
    # job's end was reported before a heartbeat was missed)
    first_visits = list(dict.fromkeys(s for s in summary.states if s in SUCCESSFUL_RUN_TASK_STATES))
    before, side_by_side, after = first_visits[:4], first_visits[4:7], first_visits[7:]
    assert (before, set(side_by_side), after) == (BEFORE_THE_CLUSTER, SIDE_BY_SIDE, AFTER_THE_CLUSTER)
    assert State.CHECK_COMPILE not in summary.states and State.CHECK_TRAIN not in summary.states
    # And the stand-in compile printed neuron_parallel_compile's summary; the stand-in training 40 steps
    assert summary.progress.compile is not None and (
        summary.progress.compile.graphs,
        summary.progress.compile.failed,
    ) == (2, 0)
    assert summary.progress.train is not None and summary.progress.train.step == 40
    assert summary.progress.train.checkpoints == 2 and summary.progress.train.loss is not None
    # And nothing is left
    assert summary.resources.remaining == []
    assert summary.error is None


def test_a_crashed_training_fails_the_run_with_its_traceback_unresubmitted_and_a_later_run_resumes_from_its_checkpoints(
    runtime: LocalRuntime,
) -> None:
    # Given a run that may be resubmitted twice (it says how to resume), whose training script
    # raises at step 25, with a checkpoint every 10 steps
    crashing = run_file(
        train="python3 train.py --steps 40 --checkpoint-every 10",
        resume="python3 train.py --steps 40 --checkpoint-every 10",
        env={"TRAINRUN_LOCAL_CRASH_AT_STEP": "25"},
    )
    # When it runs
    crashed = run(runtime, crashing, "runs/crashes.yaml")
    # Then the failure is the workload's: one attempt, no wait for nodes, FAILED with its traceback
    assert crashed.status == "FAILED"
    assert crashed.error is not None and crashed.error["error"] == "JobFailed"
    assert "traceback" in crashed.error["cause"]
    assert "stand-in training crashed at step 25" in crashed.error["cause"]
    assert crashed.states.count(State.TRAIN) == 1 and State.WAIT_FOR_NODES not in crashed.states
    assert State.HAND_THE_TRAIN_FAILURE_ON in crashed.states
    train = crashed.progress.train
    assert train is not None and train.attempts == 1 and train.step == 24
    (attempt,) = train.attempt_history
    assert attempt.why is not None and attempt.why.startswith("the workload failed")
    # And it is torn down, and its checkpoints are in the emulated S3, where the summary says
    assert crashed.resources.remaining == []
    bucket = runtime.deployed.outputs["ConfigBucketName"]
    location = f"s3://{bucket}/checkpoints/{crashed.run_id}/"
    assert crashed.checkpoints is not None and crashed.checkpoints.exported_to == location
    listed = runtime.client("s3").list_objects_v2(Bucket=bucket, Prefix=f"checkpoints/{crashed.run_id}/")
    keys = sorted(item["Key"].rsplit("/", 1)[1] for item in listed.get("Contents", []))
    assert keys == ["step-10.json", "step-20.json"]
    # When a second run resumes from them
    resumed = run(runtime, run_file(resume_from=location), "runs/resumes.yaml")
    # Then it starts after the checkpoint's step and succeeds, leaving nothing
    assert resumed.status == "SUCCEEDED", resumed.error
    progress, _ = runtime.store().get_progress(resumed.run_id, "train")
    assert progress is not None and progress.history and progress.history[0].step == 21
    assert resumed.progress.train is not None and resumed.progress.train.step == 40
    assert resumed.resources.remaining == []


def test_a_node_that_goes_down_during_training_fails_the_run_cleanly(runtime: LocalRuntime) -> None:
    # Given a two-node run whose training takes a while
    started = runtime.submit(
        run_file(nodes=2, train="python3 train.py --steps 400", env={"TRAINRUN_LOCAL_STEP_SECONDS": "0.1"}),
        "runs/node-down.yaml",
    )
    store = runtime.store()
    deadline = time.monotonic() + 120
    while True:
        progress, _ = store.get_progress(started.run_id, "train")
        if progress is not None and (progress.step or 0) >= 5:
            break
        assert time.monotonic() < deadline, "training never reached step 5"
        time.sleep(0.2)
    # When a compute node goes DOWN under the job
    assert runtime.head_nodes is not None
    (head_node,) = runtime.head_nodes.running()
    assert isinstance(head_node, LocalHeadNode)
    head_node.scontrol("update", f"NodeName={head_node.nodes[-1]}", "State=DOWN", "Reason=e2e-node-failure")
    summary = summarize(runtime, started, runtime.wait(started.execution_arn, timeout=240))
    # Then Slurm ends the job (the wrapper is killed), the head node's end watcher reports it at
    # once, and the run fails with the node failure, torn down
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "JobFailed"
    assert "(Slurm state NODE_FAIL)" in summary.error["cause"]
    assert State.CHECK_TRAIN not in summary.states
    assert summary.resources.remaining == []


def test_a_job_that_prints_a_forged_success_marker_then_exits_7_fails_with_exit_code_7(
    runtime: LocalRuntime,
) -> None:
    # Given a training script that writes the end marker of its own run, job and Slurm job, with
    # exit code 0, as a line of its own in the job's output file (what it prints goes through
    # `srun --label`, behind its rank, which is no marker at all; its run id is in its working
    # directory, the file's path in Slurm's record of the job), then exits 7
    forge = (
        "run=$(pwd | cut -d/ -f4); "
        "out=$(scontrol show job $SLURM_JOB_ID | sed -n 's/^ *StdOut=//p'); "
        'echo "TRAINRUN-END run=$run job=train slurm_job_id=$SLURM_JOB_ID exit_code=0" >> "$out"; '
        "sleep 2; exit 7"
    )
    # When the run goes
    summary = run(runtime, run_file(train=forge), "runs/forged.yaml")
    # Then the forged marker changed nothing: the run fails with the job's real exit code
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "JobFailed"
    assert "exited with code 7" in summary.error["cause"]
    progress, _ = runtime.store().get_progress(summary.run_id, "train")
    assert progress is not None and progress.rejected_end_markers == 1 and progress.exit_code == 7
    assert summary.resources.remaining == []


def test_a_run_over_its_budget_is_stopped_with_its_grace_period_and_fails_budget_exceeded(
    runtime: LocalRuntime,
) -> None:
    # Given a run without compile whose budget, one cent, is spent a second or two after its
    # first billable resource (the single-node example costs about $22 an hour by the plan's
    # prices), and whose training would take minutes: its only checkpoint is the one the stand-in
    # writes on SIGTERM
    document = yaml.safe_load(
        run_file(
            compile=None,
            train="python3 train.py --steps 3000 --checkpoint-every 100000",
            total_steps=3000,
            env={"TRAINRUN_LOCAL_STEP_SECONDS": "0.05"},
        )
    )
    document["budget"] = {"max_cost_usd": 0.01}
    # When it runs
    summary = run(runtime, yaml.safe_dump(document).encode(), "runs/budget.yaml")
    # Then the first Check train (a heartbeat period into the training) finds the budget spent:
    # the run fails with BudgetExceeded, the job cancelled by Slurm
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "BudgetExceeded", summary.error
    assert "of budget.max_cost_usd ($0.01)" in summary.error["cause"]
    assert "ended CANCELLED" in summary.error["cause"]
    assert State.CHECK_TRAIN in summary.states and State.TEAR_DOWN in summary.states
    # and the job was stopped mid-training with its grace period: the stand-in got SIGTERM and
    # wrote its checkpoint before it exited
    train = summary.progress.train
    assert train is not None and train.step is not None and 0 < train.step < 3000
    assert train.checkpoints == 1
    progress, _ = runtime.store().get_progress(summary.run_id, "train")
    assert progress is not None and any("SIGTERM after step" in line for line in progress.tail), progress.tail
    # and the warning was recorded on the way (the same check found 80% passed), and nothing is left
    record = runtime.store().get(summary.run_id)
    assert record is not None and record.budget_warned_at is not None
    assert summary.resources.remaining == []
