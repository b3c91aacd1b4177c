"""The operator commands that follow a run and read what it left (watch, logs, plot, checkpoints)
against the local stack; see test_cli_ops.py for how they are run.

The module's tests share one runtime (starting a local stack costs seconds of CPU): each reads
or follows runs of its own, by run id, and none changes the stack. The runs that tests only read
(a finished run, a rejected one, one with exported checkpoints) are run once each. Watch of an
ended run is in test_cli_ops.py, on the runs it has finished.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from trainrun.local.runtime import LocalRuntime
from trainrun.model.run_record import RunStatus

from .cli_ops import a_training_run, trainrun
from .conftest import example, run_to_end
from .scripted_head_node import ClusterOfEachTest, ScriptedCluster, ScriptedJob, recorded_log
from .test_provisioning import record_of


@pytest.fixture(scope="module")
def runtime(module_runtime: LocalRuntime) -> LocalRuntime:
    """The module's shared runtime (conftest.py), in place of a runtime of each test's own."""
    return module_runtime


# The runs a test starts play the jobs its own `cluster` scripts (conftest.py).
pytestmark = pytest.mark.usefixtures("scripted_by_the_test")


def finished_run_of(
    runtime: LocalRuntime, clusters: ClusterOfEachTest, cluster: ScriptedCluster, run_file: bytes
) -> str:
    """The id of a run of `run_file` run to its end, its head node scripted by `cluster`."""
    clusters.cluster = cluster
    started, _ = run_to_end(runtime, run_file)
    return started.run_id


@pytest.fixture(scope="module")
def finished_run(runtime: LocalRuntime, clusters: ClusterOfEachTest) -> str:
    """A run of the single-node example that succeeded, its jobs printing the recorded logs and
    saving no checkpoints."""
    return finished_run_of(runtime, clusters, ScriptedCluster(), example("single-node.yaml"))


@pytest.fixture(scope="module")
def rejected_run(runtime: LocalRuntime, clusters: ClusterOfEachTest) -> str:
    """A run rejected at Validate capacity (no such reservation): it created nothing, ran no job."""
    run_file = example("single-node.yaml").replace(b"cr-0123456789abcdef0", b"cr-0000000000000000f")
    return finished_run_of(runtime, clusters, ScriptedCluster(), run_file)


def test_watch_and_logs_follow_a_running_run_to_its_end(runtime: LocalRuntime, cluster: ScriptedCluster) -> None:
    # Given a run whose train job prints its lines after a few seconds
    cluster.jobs["train"] = ScriptedJob(recorded_log("train_bert_ok.out"), silent_seconds=3)
    started = runtime.submit(example("single-node.yaml"), "runs/single-node.yaml")
    # When it is watched, and its train job's output followed, both from its start
    with ThreadPoolExecutor(max_workers=1) as follower:
        followed = follower.submit(trainrun, runtime, "logs", started.run_id, "--job", "train", "--follow")
        watched = trainrun(runtime, "watch", started.run_id, "--interval", "0.2", "--timeout", "120")
        logs = followed.result()
    # Then watch follows it to its end, torn down
    assert watched.exit_code == 0, watched.output
    assert "SUCCEEDED" in watched.stderr and "nothing left" in watched.stderr
    assert record_of(runtime, started.run_id).torn_down_at is not None
    # And logs print the job's lines until the run has ended
    assert logs.exit_code == 0, logs.output
    assert logs.stdout.splitlines()[-1] == recorded_log("train_bert_ok.out")[-1]
    assert record_of(runtime, started.run_id).status == RunStatus.SUCCEEDED


def test_status_of_a_running_run_shows_its_resources_up_and_a_watch_that_times_out_exits_124(
    runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    # Given a run whose training goes on for a minute
    run_id = a_training_run(runtime, cluster)
    # When its status is shown
    status = trainrun(runtime, "status", run_id)
    # Then what it created is up (in use), not left behind
    assert status.exit_code == 0, status.output
    assert "left" not in status.stdout and "still there" not in status.stdout
    assert re.search(r"cluster\s.*\sup", status.stdout) and "up: " in status.stdout
    # When it is watched for a second
    result = trainrun(runtime, "watch", run_id, "--timeout", "1")
    # Then watch gives up with its own exit code (as timeout(1)), not the run's
    assert result.exit_code == 124, result.output
    assert "has not settled after 1 seconds" in result.stderr
    # (stopped, not left to train for a minute on the module's runtime)
    runtime.client("stepfunctions").stop_execution(executionArn=record_of(runtime, run_id).execution_arn)


# --- logs ------------------------------------------------------------------------------------------


def test_logs_print_each_jobs_output_as_written_without_trainruns_markers(
    runtime: LocalRuntime, finished_run: str
) -> None:
    result = trainrun(runtime, "logs", finished_run)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    compile_log, train_log = recorded_log("compile_bert_ok.out"), recorded_log("train_bert_ok.out")
    # Both jobs, compile first, as written (one node: no rank prefix), the end markers hidden
    assert lines == [line or " " for line in compile_log + train_log]
    assert "==> compile job" in result.stderr and "==> train job" in result.stderr
    only_train = trainrun(runtime, "logs", finished_run, "--job", "train").stdout.splitlines()
    assert only_train == lines[len(compile_log) :]
    as_json = [json.loads(line) for line in trainrun(runtime, "logs", finished_run, "--json").stdout.splitlines()]
    assert [entry["line"] for entry in as_json] == lines
    assert [entry["job"] for entry in as_json] == ["compile"] * len(compile_log) + ["train"] * len(train_log)


def test_logs_raw_show_the_end_markers_trainrun_wrote(runtime: LocalRuntime, finished_run: str) -> None:
    result = trainrun(runtime, "logs", finished_run, "--job", "train", "--raw")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-1].startswith(f"TRAINRUN-END run={finished_run} job=train")


def test_logs_of_a_multi_node_run_name_the_ranks_and_show_every_ranks_copy_once(
    runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    # Given a two-node run whose train job's lines carry srun's rank labels, some from both ranks
    cluster.jobs["train"] = ScriptedJob(
        [
            "0: Begin epoch 0",
            "1: Begin epoch 0",
            "0: LOG - (0, 1) step_loss : 9.8438 learning_rate : 1.22e-04 throughput : 1642.51",
            "1: warning: only on the second node",
            "0: Checkpointing done...",
            "1: Checkpointing done...",
            "srun: error: Node failure on compute-st-trn1-2",
        ]
    )
    started, _ = run_to_end(runtime, example("single-node.yaml").replace(b"nodes: 1", b"nodes: 2"))
    # When its train job's output is shown
    result = trainrun(runtime, "logs", started.run_id, "--job", "train")
    # Then a line every rank printed is shown once, the others with their rank, srun's own as it is
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "(all ranks) Begin epoch 0",
        "(rank 0) LOG - (0, 1) step_loss : 9.8438 learning_rate : 1.22e-04 throughput : 1642.51",
        "(rank 1) warning: only on the second node",
        "(all ranks) Checkpointing done...",
        "srun: error: Node failure on compute-st-trn1-2",
    ]
    # And --json names the ranks of each line
    entries = [
        json.loads(line)
        for line in trainrun(runtime, "logs", started.run_id, "--job", "train", "--json").stdout.splitlines()
    ]
    assert [entry["ranks"] for entry in entries] == [[0, 1], [0], [1], [0, 1], None]


def test_logs_with_a_mistyped_job_say_which_job_was_meant(runtime: LocalRuntime) -> None:
    result = trainrun(runtime, "logs", "any-run", "--job", "trian")
    assert result.exit_code == 2
    assert "--job 'trian' is not a job: the jobs are compile and train; did you mean train?" in result.stderr


def test_logs_of_a_run_without_job_output_say_so(runtime: LocalRuntime, rejected_run: str) -> None:
    result = trainrun(runtime, "logs", rejected_run)
    assert result.exit_code == 0 and result.stdout == ""
    assert f"no output from the compile job of {rejected_run}" in result.stderr


# --- plot ------------------------------------------------------------------------------------------


def test_plot_writes_a_png_of_the_recorded_loss_curve(runtime: LocalRuntime, finished_run: str, tmp_path: Path) -> None:
    from PIL import Image

    history = record_of(runtime, finished_run).progress_train.history  # type: ignore[union-attr]
    output = tmp_path / "loss.png"
    result = trainrun(runtime, "plot", finished_run, "-o", str(output))
    assert result.exit_code == 0, result.output
    steps = [point.step for point in history]
    assert f"wrote {output}: {len(history)} points, steps {steps[0]} to {steps[-1]}" in result.stdout
    with Image.open(output) as image:
        assert image.format == "PNG" and image.width > 300 and image.height > 300
    # And what it drew is the recorded history, point for point
    plotted = json.loads(trainrun(runtime, "plot", finished_run, "-o", str(output), "--json").stdout)
    assert plotted["loss"] == {"steps": steps, "values": [point.loss for point in history]}
    assert plotted["throughput"]["steps"] == steps


def test_plot_of_a_run_with_no_training_history_writes_nothing_and_exits_2(
    runtime: LocalRuntime, rejected_run: str, tmp_path: Path
) -> None:
    output = tmp_path / "loss.png"
    result = trainrun(runtime, "plot", rejected_run, "-o", str(output))
    assert result.exit_code == 2
    assert "no training history" in result.stderr
    assert not output.exists()


# --- checkpoints -----------------------------------------------------------------------------------

CHECKPOINT_FILES = {
    "step-20.json": b'{"step": 20}',
    "step-40.json": b'{"step": 40, "more": true}',
    "tokenizer/vocab.txt": b"a\nb\n",
}


@pytest.fixture(scope="module")
def run_with_exported_checkpoints(runtime: LocalRuntime, clusters: ClusterOfEachTest) -> str:
    """A finished run whose teardown exported CHECKPOINT_FILES to the config bucket."""
    bucket_client = runtime.client("s3")

    def put(url: str, body: bytes) -> None:
        bucket, _, key = url.removeprefix("s3://").partition("/")
        bucket_client.put_object(Bucket=bucket, Key=key, Body=body)

    cluster = ScriptedCluster(checkpoints=dict(CHECKPOINT_FILES), put_checkpoint=put)
    return finished_run_of(runtime, clusters, cluster, example("single-node.yaml"))


def test_checkpoints_lists_a_runs_exported_files_with_step_and_size(
    runtime: LocalRuntime, run_with_exported_checkpoints: str
) -> None:
    # Given a run whose teardown exported its checkpoints
    run_id = run_with_exported_checkpoints
    # When its checkpoints are listed, as the operator (the documented operator policy, enforced)
    result = trainrun(runtime, "checkpoints", run_id, "--json")
    # Then each exported file is listed with its step (from its name) and size
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    bucket = runtime.deployed.outputs["ConfigBucketName"]
    assert listed["location"] == f"s3://{bucket}/checkpoints/{run_id}/"
    assert [(f["path"], f["step"], f["size"]) for f in listed["files"]] == [
        ("step-20.json", 20, 12),
        ("step-40.json", 40, 26),
        ("tokenizer/vocab.txt", None, 4),
    ]
    text = trainrun(runtime, "checkpoints", run_id)
    assert text.exit_code == 0, text.output
    assert re.search(r"step-40\.json\s+40\s+26 bytes", text.stdout), text.stdout
    assert "3 files, 42 bytes" in text.stdout


def test_checkpoints_download_fetches_every_file_and_a_second_download_skips_them(
    runtime: LocalRuntime, run_with_exported_checkpoints: str, tmp_path: Path
) -> None:
    # Given a run with exported checkpoints, and one of them already downloaded (another, cut short)
    run_id = run_with_exported_checkpoints
    target = tmp_path / "ckpt"
    target.mkdir()
    (target / "step-20.json").write_bytes(CHECKPOINT_FILES["step-20.json"])
    (target / "step-40.json").write_bytes(b"{")
    # When they are downloaded
    result = trainrun(runtime, "checkpoints", run_id, "--download", str(target))
    # Then every file is there, whole; the one already there was not fetched again
    assert result.exit_code == 0, result.output
    assert {str(p.relative_to(target)): p.read_bytes() for p in target.rglob("*") if p.is_file()} == CHECKPOINT_FILES
    assert "downloaded 2 files (30 bytes), 1 already there" in result.stdout
    # And a second download fetches nothing
    again = trainrun(runtime, "checkpoints", run_id, "--download", str(target))
    assert again.exit_code == 0, again.output
    assert "downloaded 0 files (0 bytes), 3 already there" in again.stdout


def test_checkpoints_of_a_run_that_exported_none_says_why(runtime: LocalRuntime, finished_run: str) -> None:
    # Given a run whose jobs saved no checkpoints (the scripted head node's export finds none)
    # When its checkpoints are asked for
    result = trainrun(runtime, "checkpoints", finished_run)
    # Then it says there are none, and why
    assert result.exit_code == 2
    assert f"run {finished_run} has no exported checkpoints: skipped:" in result.stderr
    assert "was empty or missing" in result.stderr


def test_the_operator_may_read_exported_checkpoints_and_no_other_object_of_the_config_bucket(
    runtime: LocalRuntime, run_with_exported_checkpoints: str
) -> None:
    from botocore.exceptions import ClientError

    # Given a run with exported checkpoints, and the operator's own client (the documented policy)
    run_id = run_with_exported_checkpoints
    s3 = runtime.operator_client("s3")
    bucket = runtime.deployed.outputs["ConfigBucketName"]
    # When it lists and reads the run's checkpoints, and reads elsewhere in the bucket
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"checkpoints/{run_id}/")
    assert len(listed["Contents"]) == len(CHECKPOINT_FILES)
    assert s3.get_object(Bucket=bucket, Key=f"checkpoints/{run_id}/step-20.json")["Body"].read() == b'{"step": 20}'
    # Then every other object's data is refused (its name may be listed: `plan --check` looks up
    # what a run will read in any bucket the stack allows, by listing; docs/deployment.md)
    for refused in (
        lambda: s3.get_object(Bucket=bucket, Key="runs/test-run.yaml"),
        lambda: s3.get_object(Bucket=bucket, Key="neuron-compile-cache/trn1.32xlarge/x"),
    ):
        with pytest.raises(ClientError) as denied:
            refused()
        assert denied.value.response["Error"]["Code"] == "AccessDenied"
