"""The operator commands that start runs and show them (submit, runs, status) against the local
stack, the way a user reaches a deployed one: CloudFormation outputs at an endpoint. The others
are in test_cli_ops_follow.py (watch, logs, plot, checkpoints) and test_cli_ops_cancel_check.py
(cancel, plan --check), three files so that the parallel test run spreads them.

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
from pathlib import Path
from typing import Any

import pytest

from trainrun.local.runtime import LocalRuntime
from trainrun.model.run_record import RunStatus
from trainrun.workflow import State

from .cli_ops import COMMANDS_ON_A_RUN, a_training_run, config_objects, trainrun
from .conftest import EXAMPLES, ROOT, example, run_to_end
from .scripted_head_node import ScriptedCluster, ScriptedJob, recorded_log
from .test_iam_enforcement import without_action
from .test_provisioning import record_of, remaining

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
