"""The operator commands (submit, runs, status, watch, logs, plot, cancel, plan --check) against
the local stack, the way a user reaches a deployed one: CloudFormation outputs at an endpoint.

Each command runs as its own process and talks to the runtime over HTTP only (in process, the
functions' output would mix with the command's); the head node is scripted (recorded job logs).
tests/e2e/test_cli_ops.py does the same with real Slurm against `trainrun serve`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainrun.local.runtime import LocalRuntime
from trainrun.model.run_record import RunError, RunStatus
from trainrun.workflow import State

from .conftest import EXAMPLES, ROOT, example, run_to_end
from .scripted_head_node import ScriptedCluster, ScriptedJob, recorded_log
from .test_iam_enforcement import without_action
from .test_provisioning import record_of, remaining

COMMANDS_ON_A_RUN = ["status", "watch", "logs", "plot", "cancel"]


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def trainrun(
    runtime: LocalRuntime, *args: str, stack: str | None = None, target: bool = True, env: dict[str, str] | None = None
) -> Result:
    """`trainrun <args>` aimed at the local stack (unless target=False), as a user would aim it."""
    options = ["--stack", stack or runtime.deployed.name, "--endpoint-url", runtime.endpoint_url]
    options += ["--region", runtime.region]
    # The operator's credentials (the runtime refuses any key it did not issue), not its endpoint:
    # the commands are aimed with --endpoint-url, as a user would aim them.
    operator = {k: v for k, v in runtime.aws_environment().items() if k.startswith("AWS_") and "KEY" in k}
    environment = {**os.environ, **operator, "COLUMNS": "160"}
    environment.pop("AWS_ENDPOINT_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "trainrun", *args, *(options if target else [])],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**environment, **(env or {})},
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def wait_until(condition: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def config_objects(runtime: LocalRuntime) -> list[str]:
    listed = runtime.client("s3").list_objects_v2(Bucket=runtime.deployed.outputs["ConfigBucketName"])
    return [item["Key"] for item in listed.get("Contents", [])]


# --- submit ----------------------------------------------------------------------------------------


def test_submit_uploads_the_run_file_and_prints_the_run_id_of_the_execution_it_started(
    runtime: LocalRuntime,
) -> None:
    result = trainrun(runtime, "submit", str(EXAMPLES / "single-node.yaml"), "--json")
    assert result.exit_code == 0, result.output
    submitted = json.loads(result.stdout)
    # The run id is the execution's name, and the run goes on to succeed
    execution = runtime.client("stepfunctions").describe_execution(executionArn=submitted["execution_arn"])
    assert execution["name"] == submitted["run_id"]
    assert config_objects(runtime) == ["runs/single-node.yaml"]
    runtime.wait(submitted["execution_arn"], timeout=120)
    assert record_of(runtime, submitted["run_id"]).status == RunStatus.SUCCEEDED


def test_submit_with_watch_follows_the_run_to_its_end_and_exits_with_its_outcome(runtime: LocalRuntime) -> None:
    result = trainrun(runtime, "submit", str(EXAMPLES / "single-node.yaml"), "--watch")
    assert result.exit_code == 0, result.output
    run_id = result.stdout.split()[1]
    assert f"follow it with: trainrun watch {run_id}" in result.stderr
    assert "SUCCEEDED" in result.stderr and "nothing left" in result.stderr
    assert remaining(runtime, run_id) == []


def test_submit_rejects_an_invalid_run_file_naming_the_field_and_uploads_nothing(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(example("single-node.yaml").decode().replace("nodes: 1", "nodes: 0"))
    result = trainrun(runtime, "submit", str(bad))
    assert result.exit_code == 2
    assert f"{bad}:9: capacity.nodes: 0 is too small: the least is 1" in result.stderr
    assert config_objects(runtime) == []


def test_a_second_submit_of_the_same_file_is_a_new_run(runtime: LocalRuntime) -> None:
    first = json.loads(trainrun(runtime, "submit", str(EXAMPLES / "single-node.yaml"), "--json").stdout)
    second = json.loads(trainrun(runtime, "submit", str(EXAMPLES / "single-node.yaml"), "--json").stdout)
    assert first["run_id"] != second["run_id"]
    for run in (first, second):
        runtime.wait(run["execution_arn"], timeout=120)


# --- wrong stack, missing run ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "command", [["runs"], ["submit", str(EXAMPLES / "single-node.yaml")]] + [[c, "x"] for c in COMMANDS_ON_A_RUN]
)
def test_every_command_names_a_stack_that_does_not_exist_and_exits_2(runtime: LocalRuntime, command: list[str]) -> None:
    result = trainrun(runtime, *command, stack="no-such-stack")
    assert result.exit_code == 2
    assert "stack 'no-such-stack' (from --stack)" in result.stderr
    assert "does not exist" in result.stderr
    assert config_objects(runtime) == []


@pytest.mark.parametrize("command", COMMANDS_ON_A_RUN)
def test_every_command_on_a_run_says_when_there_is_no_such_run_and_exits_2(runtime: LocalRuntime, command: str) -> None:
    result = trainrun(runtime, command, "no-such-run", *(["--yes"] if command == "cancel" else []))
    assert result.exit_code == 2
    assert f"no run 'no-such-run' in stack '{runtime.deployed.name}'" in result.stderr


def test_the_region_comes_from_samconfig_toml_where_sam_deploy_guided_saved_it(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    # Given the directory `sam deploy --guided` ran in, and no region in the environment or the AWS configuration
    (tmp_path / "samconfig.toml").write_text(
        f'version = 0.1\n[default.deploy.parameters]\nstack_name = "{runtime.deployed.name}"\n'
        f'region = "{runtime.region}"\n'
    )
    (tmp_path / "aws-config").write_text("")
    operator = {k: v for k, v in runtime.aws_environment().items() if k.startswith("AWS_") and "KEY" in k}
    environment = {k: v for k, v in os.environ.items() if k not in ("AWS_REGION", "AWS_DEFAULT_REGION")}
    environment.update(
        operator, AWS_CONFIG_FILE=str(tmp_path / "aws-config"), PYTHONPATH=str(ROOT / "layers" / "common")
    )
    environment.pop("AWS_ENDPOINT_URL", None)
    # When a command runs there without --region
    done = subprocess.run(
        [sys.executable, "-m", "trainrun", "runs", "--json", "--endpoint-url", runtime.endpoint_url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=environment,
        check=False,
    )
    # Then it finds the stack in samconfig.toml's region
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_the_stack_comes_from_the_environment_when_not_given(runtime: LocalRuntime) -> None:
    environment = {"TRAINRUN_STACK": "from-the-environment", "AWS_ENDPOINT_URL": runtime.endpoint_url}
    result = trainrun(runtime, "runs", "--region", runtime.region, target=False, env=environment)
    assert result.exit_code == 2
    assert "stack 'from-the-environment' (from $TRAINRUN_STACK)" in result.stderr


# --- runs, status ----------------------------------------------------------------------------------


def test_runs_lists_the_newest_first_with_status_nodes_step_and_loss(runtime: LocalRuntime, tmp_path: Path) -> None:
    succeeded, _ = run_to_end(runtime, example("single-node.yaml"), key="runs/single-node.yaml")
    rejected_file = example("single-node.yaml").decode().replace("cr-0123456789abcdef0", "cr-0000000000000000f")
    rejected, _ = run_to_end(runtime, rejected_file.encode(), key="runs/rejected.yaml")
    rows = json.loads(trainrun(runtime, "runs", "--json").stdout)
    assert [row["run_id"] for row in rows] == [rejected.run_id, succeeded.run_id]
    newest, oldest = rows
    assert (newest["status"], newest["step"], newest["error"]) == ("REJECTED", None, "CAPACITY_RESERVATION_NOT_FOUND")
    progress = record_of(runtime, succeeded.run_id).progress_train
    assert progress is not None
    assert (oldest["status"], oldest["nodes"], oldest["instance_type"]) == ("SUCCEEDED", 1, "trn1.32xlarge")
    assert (oldest["step"], oldest["loss"]) == (progress.step, progress.loss)
    # Piped, the text has every column whole, however narrow the terminal it came from
    text = trainrun(runtime, "runs", env={"COLUMNS": "60"})
    assert text.exit_code == 0
    listed = [line.split() for line in text.stdout.splitlines()]
    rejected_row, succeeded_row = [row for row in listed if row and row[0] in (rejected.run_id, succeeded.run_id)]
    assert rejected_row[:3] == [rejected.run_id, "REJECTED", "CAPACITY_RESERVATION_NOT_FOUND"]
    assert succeeded_row[:2] == [succeeded.run_id, "SUCCEEDED"] and succeeded_row[-5:-2] == ["1", "x", "trn1.32xlarge"]
    assert "…" not in text.stdout
    assert len(json.loads(trainrun(runtime, "runs", "--json", "--limit", "1").stdout)) == 1


def undelivered(runtime: LocalRuntime) -> list[dict[str, Any]]:
    rows = json.loads(trainrun(runtime, "runs", "--json").stdout)
    return [row for row in rows if row["status"] == "UNDELIVERED"]


def upload(runtime: LocalRuntime, key: str) -> None:
    """A run file uploaded as a user would (s3 put), without waiting for its run."""
    bucket = runtime.deployed.outputs["ConfigBucketName"]
    runtime.operator_client("s3").put_object(Bucket=bucket, Key=key, Body=example("single-node.yaml"))


def test_an_upload_whose_start_fails_shows_in_runs_as_undelivered(runtime: LocalRuntime) -> None:
    # Given Start run's role without states:StartExecution: its StartExecution fails on every try
    assert runtime.iam is not None
    principal = runtime.iam.principals.named("StartRunFunction")
    assert principal is not None and principal.policies is not None
    runtime.iam.principals.replace("StartRunFunction", without_action(principal.policies, "states:StartExecution"))

    # When a run file is uploaded
    upload(runtime, "runs/lost.yaml")

    # Then after Lambda's retries the start is kept in the undelivered-runs queue, sent there as
    # Start run's own role, and `trainrun runs` shows which run file and why
    (row,) = undelivered(runtime)
    bucket = runtime.deployed.outputs["ConfigBucketName"]
    assert (row["run_id"], row["error"]) == (None, "ClientError")
    start = row["undelivered"]
    assert (start["trigger"], start["run_file"], start["by"]) == ("upload", f"s3://{bucket}/runs/lost.yaml", "Lambda")
    assert "AccessDeniedException" in start["error_message"] and "states:StartExecution" in start["error_message"]
    text = trainrun(runtime, "runs")
    assert text.exit_code == 0
    assert "UNDELIVERED" in text.stdout and f"s3://{bucket}/runs/lost.yaml" in text.stdout


def test_an_upload_eventbridge_cannot_deliver_shows_in_runs_as_undelivered(runtime: LocalRuntime) -> None:
    # Given a stack whose Start run function no longer exists (EventBridge cannot deliver to it)
    runtime.client("lambda").delete_function(FunctionName=runtime.deployed.outputs["StartRunFunctionName"])

    # When a run file is uploaded
    upload(runtime, "runs/nowhere.yaml")

    # Then EventBridge sends the event to the rule target's dead-letter queue (the queue's policy
    # lets it for that rule), and `trainrun runs` shows it with EventBridge's error code
    (row,) = undelivered(runtime)
    start = row["undelivered"]
    assert (row["error"], start["by"], start["trigger"]) == ("NO_RESOURCE", "EventBridge", "upload")
    assert start["run_file"].endswith("/runs/nowhere.yaml")


def test_runs_shows_nothing_undelivered_when_every_start_was_delivered(runtime: LocalRuntime) -> None:
    run_to_end(runtime, example("single-node.yaml"))
    assert undelivered(runtime) == []


def test_status_tells_everything_known_about_a_finished_run(runtime: LocalRuntime) -> None:
    started, summary = run_to_end(runtime, example("single-node.yaml"))
    view = json.loads(trainrun(runtime, "status", started.run_id, "--json").stdout)
    assert (view["status"], view["execution_status"], view["current_state"]) == ("SUCCEEDED", "SUCCEEDED", None)
    assert [state["name"] for state in view["states"]] == summary.states
    assert all(state["seconds"] is not None and state["entered_at"] for state in view["states"])
    assert view["progress"] == summary.progress.model_dump(mode="json")
    assert view["resources"]["created"] == summary.resources.created and view["resources"]["remaining"] == []
    assert view["torn_down_at"] is not None
    assert view["history"] and view["history"][-1]["step"] == summary.progress.train.step  # type: ignore[union-attr]
    assert view["cost"]["per_hour"] > 0 and view["cost"]["so_far"] >= 0
    assert view["created_at"] < view["cost"]["billable_since"] < view["torn_down_at"]
    assert [finding["code"] for finding in view["findings"]] == [finding.code for finding in summary.findings]
    # (the scripted head node's jobs save no checkpoints: teardown found nothing to export)
    assert view["checkpoints"]["status"] == "SKIPPED" and "was empty or missing" in view["checkpoints"]["reason"]
    # The text says the same for a person
    text = trainrun(runtime, "status", started.run_id).stdout
    assert f"run {started.run_id} (single-node): SUCCEEDED" in text
    assert "checkpoints skipped: /fsx/trainrun/" in text
    assert State.CREATE_CLUSTER in text and "still there: nothing" in text and "cost so far: about $" in text
    # with each state once, a wait loop's rounds counted in its row
    for name in set(summary.states):
        (row,) = [line for line in text.splitlines() if re.match(rf"│ {re.escape(name)}\s+│", line)]
        assert row.split("│")[3].strip() == str(summary.states.count(name))
    assert any(summary.states.count(name) > 1 for name in summary.states)
    # and every resource it created in a table, deleted
    for item in summary.resources.created:
        kind, resource_id = item.split(" ", 1)
        (row,) = [line for line in text.splitlines() if resource_id in line]
        assert [cell.strip() for cell in row.split("│")[1:4]] == [kind, resource_id, "deleted"]


def test_status_of_a_running_run_shows_its_resources_up_not_left(
    runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    # Given a run whose training job is running
    run_id = a_training_run(runtime, cluster)
    # When its status is shown
    result = trainrun(runtime, "status", run_id)
    # Then what it created is up (in use), not left behind
    assert result.exit_code == 0, result.output
    assert "left" not in result.stdout and "still there" not in result.stdout
    assert re.search(r"cluster\s.*\sup", result.stdout) and "up: " in result.stdout


def test_status_piped_prints_every_table_whole_whatever_the_width(runtime: LocalRuntime) -> None:
    # Given a finished run
    started, _ = run_to_end(runtime, example("single-node.yaml"))
    # When its status is piped with no terminal width (rich's default: 80 columns) and with a wide one
    narrow = trainrun(runtime, "status", started.run_id, env={"COLUMNS": ""})
    wide = trainrun(runtime, "status", started.run_id, env={"COLUMNS": "400"})
    # Then both are the same lines: nothing was cut or wrapped at 80 columns
    assert narrow.exit_code == 0, narrow.output
    assert narrow.stdout == wide.stdout
    assert max(len(line) for line in narrow.stdout.splitlines()) > 80


def test_a_run_rejected_before_it_created_anything_costs_nothing(runtime: LocalRuntime) -> None:
    run_file = example("single-node.yaml").replace(b"cr-0123456789abcdef0", b"cr-0000000000000000f")
    started, _ = run_to_end(runtime, run_file)
    cost = json.loads(trainrun(runtime, "status", started.run_id, "--json").stdout)["cost"]
    assert (cost["so_far"], cost["hours"], cost["billable_since"]) == (0.0, 0.0, None)
    shown = trainrun(runtime, "status", started.run_id).stdout
    assert "cost so far: none, nothing billable was created" in shown and "$" not in shown
    watched = trainrun(runtime, "watch", started.run_id, "--timeout", "30")
    assert "nothing billable was created" in watched.stderr and "$" not in watched.stderr


def test_status_of_a_run_with_a_budget_says_how_much_of_it_is_spent(runtime: LocalRuntime) -> None:
    # Given a run with a budget it stays far within
    started, summary = run_to_end(runtime, example("single-node.yaml") + b"budget: {max_cost_usd: 1000}\n")
    assert summary.status == "SUCCEEDED", summary.error
    # Then status says the budget and its share spent, beside the cost
    text = trainrun(runtime, "status", started.run_id).stdout
    assert re.search(r"^budget \$1,000\.00, [0-9]+% spent$", text, re.MULTILINE), text


def test_status_finds_a_run_by_its_name_meaning_its_latest_run(runtime: LocalRuntime) -> None:
    run_to_end(runtime, example("single-node.yaml"), key="runs/single-node.yaml")
    latest, _ = run_to_end(runtime, example("single-node.yaml"), key="runs/single-node.yaml")
    view = json.loads(trainrun(runtime, "status", "single-node", "--json").stdout)
    assert view["run_id"] == latest.run_id


def test_status_of_a_failed_run_shows_its_error(runtime: LocalRuntime, cluster: ScriptedCluster) -> None:
    cluster.jobs["train"] = ScriptedJob(recorded_log("train_bert_failed.out"), exit_code=1)
    started, _ = run_to_end(runtime, example("single-node.yaml"))
    result = trainrun(runtime, "status", started.run_id)
    assert "FAILED" in result.stdout and "error: JobFailed" in result.stdout


def test_a_lambda_errors_message_is_shown_and_its_raw_cause_only_when_asked_for(runtime: LocalRuntime) -> None:
    # Given a run that failed in a Lambda function: its cause is the function's error JSON, stack trace and all
    runtime.fail_at("Create cluster")
    started, _ = run_to_end(runtime, example("single-node.yaml"))
    message = "InjectedFailure: --fail-at 'Create cluster': failure injected by trainrun local"
    # Then status, watch's last frame and the JSON's message say it in one line
    shown = trainrun(runtime, "status", started.run_id)
    watched = trainrun(runtime, "watch", started.run_id, "--timeout", "30")
    assert watched.exit_code == 1
    for text in (shown.stdout, watched.stderr):
        assert message in text
        assert "errorMessage" not in text and "stackTrace" not in text and "Traceback" not in text
    error = json.loads(trainrun(runtime, "status", started.run_id, "--json").stdout)["error"]
    assert error["message"] == message
    # And the raw cause is in --json and --verbose only
    assert json.loads(error["cause"])["errorType"] == "InjectedFailure"
    verbose = trainrun(runtime, "status", started.run_id, "--verbose").stdout
    assert message in verbose and '"errorMessage"' in verbose and "stackTrace" in verbose


# --- watch -----------------------------------------------------------------------------------------


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


def a_training_run(runtime: LocalRuntime, cluster: ScriptedCluster) -> str:
    """A run whose train job has started and goes on for a minute."""
    cluster.jobs["train"] = ScriptedJob(recorded_log("train_bert_ok.out"), silent_seconds=60)
    started = runtime.submit(example("single-node.yaml"), "runs/single-node.yaml")
    # The record is written by the run's first state: it may not exist yet right after the upload.
    wait_until(lambda: (record := runtime.store().get(started.run_id)) is not None and record.job_train is not None)
    return started.run_id


def test_cancel_stops_the_run_tears_it_down_and_reports_nothing_left(
    runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    run_id = a_training_run(runtime, cluster)
    record = record_of(runtime, run_id)
    result = trainrun(runtime, "cancel", run_id, "--yes")
    assert result.exit_code == 0, result.output
    # It said what it would delete: what the run created so far
    assert f"cluster {record.cluster.name}" in result.stderr  # type: ignore[union-attr]
    assert f"file-system {record.storage.file_system_id}" in result.stderr  # type: ignore[union-attr]
    assert f"run {run_id} cancelled and torn down: nothing left" in result.stdout
    # The execution was stopped, the record says it was cancelled and by whom, and nothing
    # carries the run's tag (Step Functions ends an execution stopped in a task-token wait
    # ABORTED; moto's interpreter wakes the wait, which times out, and ends it FAILED. Either way
    # it has ended.)
    execution = runtime.client("stepfunctions").describe_execution(executionArn=record.execution_arn)
    assert execution["status"] in ("ABORTED", "FAILED")
    ended = record_of(runtime, run_id)
    assert ended.status == RunStatus.CANCELLED and ended.error is not None and ended.error.error == "Cancelled"
    assert "with `trainrun cancel` at" in ended.error.cause
    assert ended.torn_down_at is not None
    assert remaining(runtime, run_id) == []
    # And every view says CANCELLED: watch with its own exit code, runs and status
    watched = trainrun(runtime, "watch", run_id, "--timeout", "30")
    assert watched.exit_code == 5 and "CANCELLED" in watched.stderr
    (row,) = [row for row in json.loads(trainrun(runtime, "runs", "--json").stdout) if row["run_id"] == run_id]
    assert (row["status"], row["error"]) == ("CANCELLED", "Cancelled")
    assert f"run {run_id} (single-node): CANCELLED" in trainrun(runtime, "status", run_id).stdout


def test_cancel_asks_first_and_without_a_terminal_or_yes_changes_nothing(
    runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    run_id = a_training_run(runtime, cluster)
    result = trainrun(runtime, "cancel", run_id)
    assert result.exit_code == 2
    assert "pass --yes" in result.stderr
    assert record_of(runtime, run_id).status == RunStatus.RUNNING
    runtime.client("stepfunctions").stop_execution(executionArn=record_of(runtime, run_id).execution_arn)


def test_cancel_of_an_ended_run_says_so(runtime: LocalRuntime) -> None:
    started, _ = run_to_end(runtime, example("single-node.yaml"))
    result = trainrun(runtime, "cancel", started.run_id, "--yes")
    assert result.exit_code == 0
    assert f"run {started.run_id} has already ended: SUCCEEDED" in result.stderr
    assert record_of(runtime, started.run_id).status == RunStatus.SUCCEEDED


def test_cancel_starts_the_teardown_itself_when_the_status_change_event_is_lost(
    runtime: LocalRuntime, cluster: ScriptedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainrun.ops import cancel
    from trainrun.ops.stack import StackName, connect

    run_id = a_training_run(runtime, cluster)
    record = record_of(runtime, run_id)
    for name, value in runtime.aws_environment().items():
        if name.startswith("AWS_") and "KEY" in name:
            monkeypatch.setenv(name, value)
    stack = connect(StackName(runtime.deployed.name, "test"), endpoint_url=runtime.endpoint_url, region=runtime.region)
    # The rule's teardown never comes: the cancel is requested, and the execution is not stopped
    # (so no status change reaches anyone).
    assert stack.store().request_cancel(run_id, RunError(error="Cancelled", cause="by the test"))
    outcome = cancel.wait_for_teardown(stack, run_id, timeout=120, poll=0.1, rule_grace=0.5)
    assert outcome.explicit_teardown and outcome.torn_down and outcome.remaining == []
    # And the teardown it started recorded the run's end: cancelled
    assert outcome.status == RunStatus.CANCELLED
    runtime.client("stepfunctions").stop_execution(executionArn=record.execution_arn)


# --- plan --check ----------------------------------------------------------------------------------


def test_plan_check_runs_the_capacity_validation_against_the_account(runtime: LocalRuntime) -> None:
    result = trainrun(runtime, "plan", str(EXAMPLES / "single-node.yaml"), "--check", "--json")
    assert result.exit_code == 0, result.output
    check = json.loads(result.stdout)["capacity_check"]
    assert check["accepted"] and check["region"] == runtime.region
    assert {finding["severity"] for finding in check["findings"]} <= {"INFO", "WARNING"}


def test_plan_check_accepts_buckets_the_stack_allows(runtime: LocalRuntime) -> None:
    # Given the stack deployed with the fixture's RunBucketArns, which hold the example's buckets
    # When plan --check looks at the example that names them
    result = trainrun(runtime, "plan", str(EXAMPLES / "bert-large-phase1.yaml"), "--check", "--json")
    # Then its buckets are accepted, as Load run spec will accept them
    assert result.exit_code == 0, result.output
    check = json.loads(result.stdout)["stack_check"]
    assert (check["stack"], check["accepted"], check["findings"]) == (runtime.deployed.name, True, [])


def test_plan_check_stages_the_dataset_in_the_timeline_by_its_listed_size(runtime: LocalRuntime) -> None:
    # Given the example's dataset in the account's bucket
    # When plan --check looks at the run
    result = trainrun(runtime, "plan", str(EXAMPLES / "bert-large-phase1.yaml"), "--check", "--json")
    # Then the timeline counts its staging by the object's size, and no longer says the size is unknown
    assert result.exit_code == 0, result.output
    timeline = json.loads(result.stdout)["timeline"]
    assert not [line for line in timeline["assumptions"] if "size is unknown" in line]
    offline = json.loads(trainrun(runtime, "plan", str(EXAMPLES / "bert-large-phase1.yaml"), "--json").stdout)
    staged, unknown = (
        next(bar for bar in plan["workflow"]["bars"] if bar["label"] == "Prepare head node")
        for plan in (timeline, offline["timeline"])
    )
    assert staged["end_seconds"] - staged["start_seconds"] > unknown["end_seconds"] - unknown["start_seconds"]


def test_plan_check_exits_3_with_the_fix_when_the_stack_does_not_allow_a_bucket(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    # Given a run file whose data repository is in a bucket the stack's RunBucketArns does not hold
    other = tmp_path / "other-bucket.yaml"
    other.write_bytes(example("bert-large-phase1.yaml").replace(b"s3://my-trainrun-data/bert", b"s3://team-data/bert"))
    # When plan --check looks at it
    result = trainrun(runtime, "plan", str(other), "--check")
    # Then it exits 3 (docs/cli.md), with the finding Load run spec would reject the run with, and the fix
    assert result.exit_code == 3, result.output
    assert f"Buckets and topic against stack {runtime.deployed.name}: REJECTED" in result.stdout
    assert (
        "ERROR   BUCKET_NOT_ALLOWED: storage.fsx.data_repository: bucket 'team-data' is not one this stack lets "
        "runs use; add arn:aws:s3:::team-data to the stack parameter RunBucketArns "
        "(now: my-trainrun-data, trainrun-examples)"
    ) in result.stdout
    # And the capacity, checked too, is fine
    assert "Capacity check" in result.stdout and "accepted" in result.stdout


def test_plan_check_exits_3_with_the_finding_when_the_run_would_be_rejected(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    rejected = tmp_path / "rejected.yaml"
    rejected.write_bytes(example("single-node.yaml").replace(b"cr-0123456789abcdef0", b"cr-0000000000000000f"))
    result = trainrun(runtime, "plan", str(rejected), "--check")
    assert result.exit_code == 3
    assert "REJECTED: the run would end before creating anything" in result.stdout
    assert "ERROR   CAPACITY_RESERVATION_NOT_FOUND" in result.stdout


# --- what the run will read, looked up before anything is created ---------------------------------

MISSING_DATASET = "s3://my-trainrun-data/datasets/not-uploaded.tar"


def run_file_with(tmp_path: Path, name: str, **workload: Any) -> Path:
    """The single-node example under another name, its workload changed as given."""
    document = yaml.safe_load(example("single-node.yaml"))
    document["name"] = name
    document["workload"].update(workload)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def refuse_listing(runtime: LocalRuntime, bucket: str, prefix: str) -> None:
    """A bucket policy that denies everyone listing `prefix` of `bucket` (as a bucket of another
    team may): the stack's policies allow it, the bucket does not."""
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:ListBucket",
                "Resource": f"arn:aws:s3:::{bucket}",
                "Condition": {"StringLike": {"s3:prefix": f"{prefix}*"}},
            }
        ],
    }
    runtime.client("s3").put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))


def test_plan_check_exits_3_with_the_fix_when_the_dataset_object_is_not_there(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    # Given a run file whose dataset, in a bucket the stack allows, was never uploaded
    run_file = run_file_with(tmp_path, "missing-data", dataset={"source": MISSING_DATASET, "path": "/fsx/data"})
    # When plan --check looks at it
    result = trainrun(runtime, "plan", str(run_file), "--check")
    # Then it exits 3 with the finding Load run spec would reject the run with, and the fix
    assert result.exit_code == 3, result.output
    assert "What the head node will read (workload, dataset, checkpoints): REJECTED" in result.stdout
    assert (
        f"ERROR   S3_INPUT_NOT_FOUND: workload.dataset.source: {MISSING_DATASET} does not exist: the run would "
        f"fail at Prepare head node; upload the dataset there (aws s3 cp FILE {MISSING_DATASET}"
    ) in result.stdout
    # And the buckets themselves are fine, and nothing was created
    assert f"Buckets and topic against stack {runtime.deployed.name}: accepted" in result.stdout
    executions = runtime.client("stepfunctions").list_executions(
        stateMachineArn=runtime.deployed.outputs["StateMachineArn"]
    )
    assert executions["executions"] == []


def test_plan_check_exits_3_when_the_bucket_refuses_the_workload_archive(runtime: LocalRuntime, tmp_path: Path) -> None:
    # Given a workload archive in an allowed bucket whose policy refuses listing it
    runtime.client("s3").put_object(Bucket="trainrun-examples", Key="locked/workload.tar.gz", Body=b"")
    refuse_listing(runtime, "trainrun-examples", "locked/")
    run_file = run_file_with(tmp_path, "locked", source={"s3": "s3://trainrun-examples/locked/workload.tar.gz"})
    # When plan --check looks at it
    result = trainrun(runtime, "plan", str(run_file), "--check", "--json")
    # Then it is unreadable, with the fix
    assert result.exit_code == 3, result.output
    [finding] = json.loads(result.stdout)["inputs_check"]["findings"]
    assert (finding["code"], finding["severity"]) == ("S3_INPUT_NOT_READABLE", "ERROR")
    assert finding["message"].startswith(
        "workload.source.s3: S3 refused your credentials to list s3://trainrun-examples/locked/workload.tar.gz "
        "(403 Forbidden)"
    )
    assert "let the stack's roles list and read it in the bucket's policy" in finding["message"]


def test_plan_check_exits_3_when_the_git_ref_is_not_in_the_repository(runtime: LocalRuntime, tmp_path: Path) -> None:
    # Given a repository served at an https URL (git's url.<base>.insteadOf to a local one) with
    # branch main only, and a run file naming branch release-2 of it
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.test"]
    subprocess.run([*git, "init", "-q", "--bare", "-b", "main", str(tmp_path / "train.git")], check=True)
    subprocess.run([*git, "init", "-q", "-b", "main", str(tmp_path / "work")], check=True)
    subprocess.run([*git, "-C", str(tmp_path / "work"), "commit", "-q", "--allow-empty", "-m", "one"], check=True)
    subprocess.run([*git, "-C", str(tmp_path / "work"), "push", "-q", str(tmp_path / "train.git"), "main"], check=True)
    served = {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"url.file://{tmp_path}/.insteadOf",
        "GIT_CONFIG_VALUE_0": "https://git.example.test/team/",
    }
    url = "https://git.example.test/team/train.git"
    run_file = run_file_with(tmp_path, "git-ref", source={"git": url, "ref": "release-2"})
    # When plan --check looks at it
    result = trainrun(runtime, "plan", str(run_file), "--check", env=served)
    # Then it exits 3, saying the run would fail at its clone (Load run spec cannot check a ref),
    # naming the ref, the branches there are, and the fix
    assert result.exit_code == 3, result.output
    assert "(workload, dataset, checkpoints): FAILS: the run would fail at Prepare head node" in result.stdout
    assert (
        f"ERROR   GIT_REF_NOT_FOUND: workload.source.ref: {url} has no branch or tag 'release-2'; push it, or "
        "name one of its branches (now: main) or tags, or a commit id"
    ) in result.stdout


def test_a_submitted_run_whose_dataset_is_not_there_is_rejected_at_load_run_spec_saying_why(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    # Given a run file whose dataset was never uploaded
    run_file = run_file_with(tmp_path, "missing-data", dataset={"source": MISSING_DATASET, "path": "/fsx/data"})
    # When it is submitted and watched
    result = trainrun(runtime, "submit", str(run_file), "--watch")
    # Then it ends REJECTED (exit 3), and the watch says why, with the fix
    assert result.exit_code == 3, result.output
    assert "REJECTED" in result.stderr
    assert f"S3_INPUT_NOT_FOUND: workload.dataset.source: {MISSING_DATASET} does not exist" in result.stderr
    # And it was rejected at Load run spec, before anything was created
    run_id = result.stdout.split()[1]
    record = record_of(runtime, run_id)
    assert (record.status, record.network, record.storage, record.cluster) == (RunStatus.REJECTED, None, None, None)
    assert remaining(runtime, run_id) == []
    # And status finds it by its name, with the reason
    status = trainrun(runtime, "status", "missing-data")
    assert status.exit_code == 0, status.output
    assert f"run {run_id} (missing-data): REJECTED" in status.stdout
    assert "ERROR   S3_INPUT_NOT_FOUND: workload.dataset.source" in status.stdout


def test_a_submitted_run_whose_bucket_refuses_its_workload_is_rejected_at_load_run_spec(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    # Given a workload archive its bucket's policy refuses to list (to Load run spec's role too)
    runtime.client("s3").put_object(Bucket="trainrun-examples", Key="locked/workload.tar.gz", Body=b"")
    refuse_listing(runtime, "trainrun-examples", "locked/")
    run_file = run_file_with(tmp_path, "locked", source={"s3": "s3://trainrun-examples/locked/workload.tar.gz"})
    # When it is submitted and watched
    result = trainrun(runtime, "submit", str(run_file), "--watch")
    # Then it is rejected, saying that Load run spec's role was refused, with nothing created
    assert result.exit_code == 3, result.output
    assert "S3_INPUT_NOT_READABLE: workload.source.s3: S3 refused Load run spec's role to list" in result.stderr
    assert remaining(runtime, result.stdout.split()[1]) == []


def test_a_submitted_run_in_a_bucket_the_stack_does_not_allow_is_rejected_saying_why(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    run_file = run_file_with(tmp_path, "other-bucket", source={"s3": "s3://team-data/workload.tar.gz"})
    result = trainrun(runtime, "submit", str(run_file), "--watch")
    assert result.exit_code == 3, result.output
    assert "BUCKET_NOT_ALLOWED: workload.source.s3: bucket 'team-data' is not one this stack lets runs use" in (
        result.stderr
    )
