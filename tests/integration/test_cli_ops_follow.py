"""The operator commands that follow a run and read what it left (watch, logs, plot, checkpoints)
against the local stack; see test_cli_ops.py for how they are run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from trainrun.local.runtime import LocalRuntime
from trainrun.model.run_record import RunStatus

from .cli_ops import a_training_run, trainrun
from .conftest import example, run_to_end
from .scripted_head_node import ScriptedCluster, ScriptedJob, recorded_log
from .test_provisioning import record_of


def test_watch_follows_a_running_run_to_its_end(runtime: LocalRuntime, cluster: ScriptedCluster) -> None:
    cluster.jobs["train"] = ScriptedJob(recorded_log("train_bert_ok.out"), silent_seconds=3)
    started = runtime.submit(example("single-node.yaml"), "runs/single-node.yaml")
    result = trainrun(runtime, "watch", started.run_id, "--interval", "0.2", "--timeout", "120")
    assert result.exit_code == 0, result.output
    assert "SUCCEEDED" in result.stderr and "nothing left" in result.stderr
    assert record_of(runtime, started.run_id).torn_down_at is not None


def test_watch_that_times_out_exits_124_not_a_runs_outcome(runtime: LocalRuntime, cluster: ScriptedCluster) -> None:
    # Given a run whose training goes on for a minute
    run_id = a_training_run(runtime, cluster)
    # When it is watched for a second
    result = trainrun(runtime, "watch", run_id, "--timeout", "1")
    # Then watch gives up with its own exit code (as timeout(1)), not the run's
    assert result.exit_code == 124, result.output
    assert "has not settled after 1 seconds" in result.stderr


@pytest.mark.parametrize(("exit_code", "status"), [(1, "FAILED"), (3, "REJECTED")])
def test_watch_of_an_ended_run_returns_at_once_with_its_outcome(
    runtime: LocalRuntime, cluster: ScriptedCluster, exit_code: int, status: str
) -> None:
    run_file = example("single-node.yaml")
    if status == "REJECTED":
        run_file = run_file.replace(b"cr-0123456789abcdef0", b"cr-0000000000000000f")
    else:
        cluster.jobs["train"] = ScriptedJob(recorded_log("train_bert_failed.out"), exit_code=1)
    started, _ = run_to_end(runtime, run_file)
    result = trainrun(runtime, "watch", started.run_id, "--timeout", "30")
    assert result.exit_code == exit_code
    assert status in result.stderr


# --- logs ------------------------------------------------------------------------------------------


def test_logs_print_each_jobs_output_as_written_without_trainruns_markers(runtime: LocalRuntime) -> None:
    started, _ = run_to_end(runtime, example("single-node.yaml"))
    result = trainrun(runtime, "logs", started.run_id)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    compile_log, train_log = recorded_log("compile_bert_ok.out"), recorded_log("train_bert_ok.out")
    # Both jobs, compile first, as written (one node: no rank prefix), the end markers hidden
    assert lines == [line or " " for line in compile_log + train_log]
    assert "==> compile job" in result.stderr and "==> train job" in result.stderr
    only_train = trainrun(runtime, "logs", started.run_id, "--job", "train").stdout.splitlines()
    assert only_train == lines[len(compile_log) :]
    as_json = [json.loads(line) for line in trainrun(runtime, "logs", started.run_id, "--json").stdout.splitlines()]
    assert [entry["line"] for entry in as_json] == lines
    assert [entry["job"] for entry in as_json] == ["compile"] * len(compile_log) + ["train"] * len(train_log)


def test_logs_raw_show_the_end_markers_trainrun_wrote(runtime: LocalRuntime) -> None:
    started, _ = run_to_end(runtime, example("single-node.yaml"))
    result = trainrun(runtime, "logs", started.run_id, "--job", "train", "--raw")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-1].startswith(f"TRAINRUN-END run={started.run_id} job=train")


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


def test_logs_follow_a_running_job_until_the_run_ends(runtime: LocalRuntime, cluster: ScriptedCluster) -> None:
    cluster.jobs["train"] = ScriptedJob(recorded_log("train_bert_ok.out"), silent_seconds=2)
    started = runtime.submit(example("single-node.yaml"), "runs/single-node.yaml")
    result = trainrun(runtime, "logs", started.run_id, "--job", "train", "--follow")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-1] == recorded_log("train_bert_ok.out")[-1]
    assert record_of(runtime, started.run_id).status == RunStatus.SUCCEEDED


def test_logs_of_a_run_without_job_output_say_so(runtime: LocalRuntime) -> None:
    run_file = example("single-node.yaml").replace(b"cr-0123456789abcdef0", b"cr-0000000000000000f")
    started, _ = run_to_end(runtime, run_file)
    result = trainrun(runtime, "logs", started.run_id)
    assert result.exit_code == 0 and result.stdout == ""
    assert f"no output from the compile job of {started.run_id}" in result.stderr


# --- plot ------------------------------------------------------------------------------------------


def test_plot_writes_a_png_of_the_recorded_loss_curve(runtime: LocalRuntime, tmp_path: Path) -> None:
    from PIL import Image

    started, _ = run_to_end(runtime, example("single-node.yaml"))
    history = record_of(runtime, started.run_id).progress_train.history  # type: ignore[union-attr]
    output = tmp_path / "loss.png"
    result = trainrun(runtime, "plot", started.run_id, "-o", str(output))
    assert result.exit_code == 0, result.output
    steps = [point.step for point in history]
    assert f"wrote {output}: {len(history)} points, steps {steps[0]} to {steps[-1]}" in result.stdout
    with Image.open(output) as image:
        assert image.format == "PNG" and image.width > 300 and image.height > 300
    # And what it drew is the recorded history, point for point
    plotted = json.loads(trainrun(runtime, "plot", started.run_id, "-o", str(output), "--json").stdout)
    assert plotted["loss"] == {"steps": steps, "values": [point.loss for point in history]}
    assert plotted["throughput"]["steps"] == steps


def test_plot_of_a_run_with_no_training_history_writes_nothing_and_exits_2(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    run_file = example("single-node.yaml").replace(b"cr-0123456789abcdef0", b"cr-0000000000000000f")
    started, _ = run_to_end(runtime, run_file)
    output = tmp_path / "loss.png"
    result = trainrun(runtime, "plot", started.run_id, "-o", str(output))
    assert result.exit_code == 2
    assert "no training history" in result.stderr
    assert not output.exists()


# --- checkpoints -----------------------------------------------------------------------------------

CHECKPOINT_FILES = {
    "step-20.json": b'{"step": 20}',
    "step-40.json": b'{"step": 40, "more": true}',
    "tokenizer/vocab.txt": b"a\nb\n",
}


def run_with_exported_checkpoints(runtime: LocalRuntime, cluster: ScriptedCluster) -> str:
    """A finished run whose teardown exported CHECKPOINT_FILES to the config bucket."""
    bucket_client = runtime.client("s3")

    def put(url: str, body: bytes) -> None:
        bucket, _, key = url.removeprefix("s3://").partition("/")
        bucket_client.put_object(Bucket=bucket, Key=key, Body=body)

    cluster.checkpoints.update(CHECKPOINT_FILES)
    cluster.put_checkpoint = put
    started, _ = run_to_end(runtime, example("single-node.yaml"))
    return started.run_id


def test_checkpoints_lists_a_runs_exported_files_with_step_and_size(
    runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    # Given a run whose teardown exported its checkpoints
    run_id = run_with_exported_checkpoints(runtime, cluster)
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
    runtime: LocalRuntime, cluster: ScriptedCluster, tmp_path: Path
) -> None:
    # Given a run with exported checkpoints, and one of them already downloaded (another, cut short)
    run_id = run_with_exported_checkpoints(runtime, cluster)
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


def test_checkpoints_of_a_run_that_exported_none_says_why(runtime: LocalRuntime) -> None:
    # Given a run whose jobs saved no checkpoints (the scripted head node's export finds none)
    started, _ = run_to_end(runtime, example("single-node.yaml"))
    # When its checkpoints are asked for
    result = trainrun(runtime, "checkpoints", started.run_id)
    # Then it says there are none, and why
    assert result.exit_code == 2
    assert f"run {started.run_id} has no exported checkpoints: skipped:" in result.stderr
    assert "was empty or missing" in result.stderr


def test_the_operator_may_read_exported_checkpoints_and_no_other_object_of_the_config_bucket(
    runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    from botocore.exceptions import ClientError

    # Given a run with exported checkpoints, and the operator's own client (the documented policy)
    run_id = run_with_exported_checkpoints(runtime, cluster)
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


# --- cancel ----------------------------------------------------------------------------------------
