"""The operator commands as a user runs them: `trainrun serve` in one process (the local stack,
real Slurm head nodes), and submit, watch, runs, status, logs, plot and cancel as separate
processes that find it through the environment serve printed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

from .conftest import EXAMPLES, NEEDS_LOCAL_HEAD_NODE, trainrun

pytestmark = NEEDS_LOCAL_HEAD_NODE


def test_serve_prints_the_environment_the_other_commands_need(served: dict[str, str]) -> None:
    assert served["TRAINRUN_STACK"] == "trainrun-local"
    assert served["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")


def test_a_submitted_run_is_watched_to_its_end_then_listed_shown_logged_and_plotted(
    served: dict[str, str], tmp_path: Path
) -> None:
    # When a run is submitted and watched
    submitted = trainrun("submit", EXAMPLES / "single-node.yaml", "--watch", env=served)
    # Then watch ends with the run, torn down, and exits 0
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.split()[1]
    assert "SUCCEEDED" in submitted.stderr and "nothing left" in submitted.stderr
    # And runs lists it with its last step
    (row,) = [row for row in json.loads(trainrun("runs", "--json", env=served).stdout) if row["run_id"] == run_id]
    assert (row["status"], row["step"], row["nodes"]) == ("SUCCEEDED", 40, 1)
    # And status has its states, progress, and nothing left
    view = json.loads(trainrun("status", run_id, "--json", env=served).stdout)
    assert view["progress"]["train"]["step"] == 40 and view["resources"]["remaining"] == []
    assert "Train" in [state["name"] for state in view["states"]]
    # And logs print the training job's output, without trainrun's end marker (--raw shows it)
    logs = trainrun("logs", run_id, "--job", "train", env=served)
    assert "TRAINRUN-END" not in logs.stdout
    assert sum(line.startswith("LOG ") and "step_loss" in line for line in logs.stdout.splitlines()) == 40
    raw = trainrun("logs", run_id, "--job", "train", "--raw", env=served)
    assert raw.stdout.splitlines()[-1].startswith(f"TRAINRUN-END run={run_id} job=train")
    assert sum(line.startswith("0: LOG ") for line in raw.stdout.splitlines()) == 40
    # And plot draws the loss curve of the recorded history
    plotted = trainrun("plot", run_id, "-o", tmp_path / "loss.png", env=served)
    assert plotted.returncode == 0, plotted.stderr
    assert f"{len(view['history'])} points, steps 1 to 40" in plotted.stdout
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_training_run_is_cancelled_and_nothing_is_left(served: dict[str, str], tmp_path: Path) -> None:
    # Given a run whose training takes a minute (a step a second), with a checkpoint every 2 steps
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    document["name"] = "slow-run"
    document["workload"]["env"] = {"TRAINRUN_LOCAL_STEP_SECONDS": "1.5"}
    document["workload"]["train"] = "python3 train.py --steps 40 --checkpoint-every 2"
    run_file = tmp_path / "slow-run.yaml"
    run_file.write_text(yaml.safe_dump(document))
    submitted = trainrun("submit", run_file, "--json", env=served)
    run_id = json.loads(submitted.stdout)["run_id"]
    deadline = time.monotonic() + 180
    while True:
        view = json.loads(trainrun("status", run_id, "--json", env=served).stdout)
        if view["current_state"] == "Train" and ((view["progress"]["train"] or {}).get("step") or 0) >= 3:
            break
        assert view["status"] == "RUNNING" and time.monotonic() < deadline, view
        time.sleep(1)
    # When it is cancelled
    cancelled = trainrun("cancel", run_id, "--yes", env=served)
    # Then teardown deleted what it showed, and nothing is left
    assert cancelled.returncode == 0, cancelled.stderr
    assert "teardown deletes:" in cancelled.stderr and "cluster " in cancelled.stderr
    assert f"run {run_id} cancelled and torn down: nothing left" in cancelled.stdout
    view = json.loads(trainrun("status", run_id, "--json", env=served).stdout)
    # (ABORTED in Step Functions; moto's interpreter ends an execution stopped in a task-token wait FAILED.)
    assert (view["status"], view["error"]["error"]) == ("CANCELLED", "Cancelled")
    assert view["execution_status"] in ("ABORTED", "FAILED")
    assert view["resources"]["remaining"] == [] and view["progress"]["train"]["step"] < 40
    # And the checkpoints it had saved were exported before its file system went
    checkpoints = view["checkpoints"]
    assert checkpoints["status"] == "EXPORTED" and checkpoints["files"] >= 1, checkpoints
    assert checkpoints["destination"].endswith(f"/checkpoints/{run_id}/")
    # And the operator fetches them with trainrun checkpoints (the operator's policy, enforced)
    fetched = trainrun("checkpoints", run_id, "--download", tmp_path / "ckpt", env=served)
    assert fetched.returncode == 0, fetched.stderr
    saved = sorted(path.name for path in (tmp_path / "ckpt").iterdir())
    assert len(saved) == checkpoints["files"] and all(name.startswith("step-") for name in saved), saved
    assert f"downloaded {checkpoints['files']} file" in fetched.stdout
    # And watch exits with a cancelled run's own code
    watched = trainrun("watch", run_id, "--timeout", "30", env=served)
    assert watched.returncode == 5 and "CANCELLED" in watched.stderr


def test_submit_packs_a_local_directory_and_the_job_runs_a_script_from_it(
    served: dict[str, str], tmp_path: Path
) -> None:
    # Given a run file whose workload is a directory beside it, with an executable script
    code = tmp_path / "code"
    code.mkdir()
    (code / "hello.sh").write_text("#!/bin/sh\necho packed script ran\n")
    (code / "hello.sh").chmod(0o755)
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    document["name"] = "local-dir"
    document["workload"].update(source={"path": "./code"}, train="./hello.sh")
    del document["workload"]["compile"], document["workload"]["total_steps"]
    run_file = tmp_path / "run.yaml"
    run_file.write_text(yaml.safe_dump(document))
    # When it is submitted and watched
    submitted = trainrun("submit", run_file, "--watch", env=served)
    # Then the directory was uploaded under sources/, and the run succeeded
    assert submitted.returncode == 0, submitted.stderr
    assert "packed ./code: 1 file, 33 bytes" in submitted.stderr
    assert "uploaded to s3://" in submitted.stderr and "/sources/local-dir/" in submitted.stderr
    run_id = submitted.stdout.split()[1]
    # And the training job's output is the packed script's
    logs = trainrun("logs", run_id, "--job", "train", env=served)
    assert "packed script ran" in logs.stdout.splitlines()
    # When the unchanged directory is submitted again, its archive is not uploaded twice
    again = trainrun("submit", run_file, "--json", env=served)
    assert again.returncode == 0, again.stderr
    assert "unchanged, already at" not in again.stderr  # --json: nothing but the JSON
    again_text = trainrun("submit", run_file, env=served)
    assert "unchanged, already at s3://" in again_text.stderr


def test_a_run_file_naming_a_local_directory_uploaded_without_trainrun_is_rejected(
    served: dict[str, str], tmp_path: Path
) -> None:
    # Given a run file whose workload is a local directory, put in runs/ as aws s3 cp would (one
    # PutObject; trainrun's upload only to learn the run id, which a run rejected unread has no name for)
    import boto3

    from trainrun.ops.submit import upload

    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    document["name"] = "not-packed"
    document["workload"]["source"] = {"path": "./code"}
    operator = boto3.Session(
        aws_access_key_id=served["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=served["AWS_SECRET_ACCESS_KEY"],
        region_name=served["AWS_REGION"],
    )
    described = operator.client("cloudformation", endpoint_url=served["AWS_ENDPOINT_URL"]).describe_stacks(
        StackName=served["TRAINRUN_STACK"]
    )
    outputs = {output["OutputKey"]: output["OutputValue"] for output in described["Stacks"][0]["Outputs"]}
    run = upload(
        operator.client("s3", endpoint_url=served["AWS_ENDPOINT_URL"]),
        outputs["ConfigBucketName"],
        "runs/not-packed.yaml",
        yaml.safe_dump(document).encode(),
        outputs["StateMachineArn"],
    )
    # When the run it starts has ended
    watched = trainrun("watch", run.run_id, "--timeout", "120", env=served)
    # Then it was rejected, with the finding that says to submit it with trainrun
    assert watched.returncode == 3, watched.stderr
    view = json.loads(trainrun("status", run.run_id, "--json", env=served).stdout)
    [finding] = [finding for finding in view["findings"] if finding["code"] == "SOURCE_NOT_PACKED"]
    assert "trainrun submit" in finding["message"]
