"""The operator commands that start runs and show them (submit, runs, status) against the local
stack, the way a user reaches a deployed one: CloudFormation outputs at an endpoint. The others
are in test_cli_ops_follow.py (watch, logs, plot, checkpoints) and test_cli_ops_cancel_check.py
(cancel, plan --check), three files so that the parallel test run spreads them.

Each command runs as its own process and talks to the runtime over HTTP only (in process, the
functions' output would mix with the command's); the head node is scripted (recorded job logs).
tests/e2e/test_cli_ops.py does the same with real Slurm against `trainrun serve`.

The tests that start runs or change the stack have a runtime each; those that only read share one
stack and the runs it finished (FinishedRuns, last in the file), among them what watch and cancel
say of a run that has ended.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from trainrun.local.fixture import load_fixture
from trainrun.local.runtime import LocalRuntime
from trainrun.local.summary import LocalRunSummary
from trainrun.model.run_record import RunStatus
from trainrun.workflow import State

from .cli_ops import COMMANDS_ON_A_RUN, config_objects, trainrun
from .conftest import EXAMPLES, ROOT, example, run_to_end
from .scripted_head_node import ScriptedCluster, ScriptedJob, recorded_log
from .test_iam_enforcement import without_action
from .test_provisioning import record_of, remaining

# --- submit ----------------------------------------------------------------------------------------


def test_submit_starts_a_new_run_of_the_uploaded_file_each_time_and_with_watch_follows_it_to_its_end(
    runtime: LocalRuntime,
) -> None:
    # When a run file is submitted
    result = trainrun(runtime, "submit", str(EXAMPLES / "single-node.yaml"), "--json")
    # Then it is uploaded, and the run id printed is the name of the execution it started
    assert result.exit_code == 0, result.output
    first = json.loads(result.stdout)
    execution = runtime.client("stepfunctions").describe_execution(executionArn=first["execution_arn"])
    assert execution["name"] == first["run_id"]
    assert config_objects(runtime) == ["runs/single-node.yaml"]
    # When the same file is submitted again, with --watch
    watched = trainrun(runtime, "submit", str(EXAMPLES / "single-node.yaml"), "--watch")
    # Then it is a new run, followed to its end: the command exits with its outcome
    assert watched.exit_code == 0, watched.output
    second = watched.stdout.split()[1]
    assert second != first["run_id"]
    assert f"follow it with: trainrun watch {second}" in watched.stderr
    assert "SUCCEEDED" in watched.stderr and "nothing left" in watched.stderr
    assert remaining(runtime, second) == []
    # And the first run goes on to succeed too
    runtime.wait(first["execution_arn"], timeout=120)
    assert record_of(runtime, first["run_id"]).status == RunStatus.SUCCEEDED


# --- runs: starts that never became runs -----------------------------------------------------------


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


# --- status of a run failed in a Lambda function ---------------------------------------------------


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


# --- on one stack and the runs it finished ---------------------------------------------------------
# The tests from here on only read: they share one runtime and its finished runs instead of starting
# a stack and a run each (seconds of CPU a test). They come last in the file because two local
# runtimes cannot be up at once in one process (moto's backends and the emulators are process-wide):
# the module's runtime is stopped only after the module's last test, each runtime above by its test.


@dataclass
class FinishedRuns:
    """A stack and the runs it ran to their end, one after the other in the order of the fields:
    each of the single-node example (named single-node), from a run file of its own name (none is
    runs/single-node.yaml, which `trainrun submit` of the example would upload)."""

    runtime: LocalRuntime
    succeeded: LocalRunSummary
    within_budget: LocalRunSummary
    failed: LocalRunSummary
    rejected: LocalRunSummary

    @property
    def newest_first(self) -> list[str]:
        """The run ids of every run of the stack, the newest first."""
        return [run.run_id for run in (self.rejected, self.failed, self.within_budget, self.succeeded)]


@pytest.fixture(scope="module")
def finished() -> Iterator[FinishedRuns]:
    cluster = ScriptedCluster()
    with LocalRuntime(load_fixture(EXAMPLES / "accounts" / "default.yaml"), head_node_factory=cluster) as runtime:
        run_file = example("single-node.yaml")
        _, succeeded = run_to_end(runtime, run_file, key="runs/succeeded.yaml")
        # A budget it stays far within
        _, within_budget = run_to_end(runtime, run_file + b"budget: {max_cost_usd: 1000}\n", key="runs/budget.yaml")
        # Its train job fails (the runs above have played theirs)
        cluster.jobs["train"] = ScriptedJob(recorded_log("train_bert_failed.out"), exit_code=1)
        _, failed = run_to_end(runtime, run_file, key="runs/failed.yaml")
        # Rejected at Validate capacity: no such reservation
        rejected_file = run_file.replace(b"cr-0123456789abcdef0", b"cr-0000000000000000f")
        _, rejected = run_to_end(runtime, rejected_file, key="runs/rejected.yaml")
        yield FinishedRuns(runtime, succeeded, within_budget, failed, rejected)


def test_submit_rejects_an_invalid_run_file_naming_the_field_and_uploads_nothing(
    finished: FinishedRuns, tmp_path: Path
) -> None:
    runtime = finished.runtime
    bad = tmp_path / "bad.yaml"
    bad.write_text(example("single-node.yaml").decode().replace("nodes: 1", "nodes: 0"))
    uploaded = config_objects(runtime)
    result = trainrun(runtime, "submit", str(bad))
    assert result.exit_code == 2
    assert f"{bad}:9: capacity.nodes: 0 is too small: the least is 1" in result.stderr
    assert config_objects(runtime) == uploaded


# --- wrong stack, missing run ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "command", [["runs"], ["submit", str(EXAMPLES / "single-node.yaml")]] + [[c, "x"] for c in COMMANDS_ON_A_RUN]
)
def test_every_command_names_a_stack_that_does_not_exist_and_exits_2(
    finished: FinishedRuns, command: list[str]
) -> None:
    runtime = finished.runtime
    uploaded = config_objects(runtime)
    result = trainrun(runtime, *command, stack="no-such-stack")
    assert result.exit_code == 2
    assert "stack 'no-such-stack' (from --stack)" in result.stderr
    assert "does not exist" in result.stderr
    assert config_objects(runtime) == uploaded


@pytest.mark.parametrize("command", COMMANDS_ON_A_RUN)
def test_every_command_on_a_run_says_when_there_is_no_such_run_and_exits_2(
    finished: FinishedRuns, command: str
) -> None:
    runtime = finished.runtime
    result = trainrun(runtime, command, "no-such-run", *(["--yes"] if command == "cancel" else []))
    assert result.exit_code == 2
    assert f"no run 'no-such-run' in stack '{runtime.deployed.name}'" in result.stderr


def test_the_region_comes_from_samconfig_toml_where_sam_deploy_guided_saved_it(
    finished: FinishedRuns, tmp_path: Path
) -> None:
    runtime = finished.runtime
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
    # Then it finds the stack in samconfig.toml's region, and its runs
    assert done.returncode == 0, done.stderr
    assert [row["run_id"] for row in json.loads(done.stdout)] == finished.newest_first


def test_the_stack_comes_from_the_environment_when_not_given(finished: FinishedRuns) -> None:
    runtime = finished.runtime
    environment = {"TRAINRUN_STACK": "from-the-environment", "AWS_ENDPOINT_URL": runtime.endpoint_url}
    result = trainrun(runtime, "runs", "--region", runtime.region, target=False, env=environment)
    assert result.exit_code == 2
    assert "stack 'from-the-environment' (from $TRAINRUN_STACK)" in result.stderr


# --- runs, status ----------------------------------------------------------------------------------


def test_runs_lists_the_newest_first_with_status_nodes_step_and_loss(finished: FinishedRuns) -> None:
    runtime, succeeded, rejected = finished.runtime, finished.succeeded, finished.rejected
    rows = json.loads(trainrun(runtime, "runs", "--json").stdout)
    assert [row["run_id"] for row in rows] == finished.newest_first
    by_run_id = {row["run_id"]: row for row in rows}
    newest, oldest = by_run_id[rejected.run_id], by_run_id[succeeded.run_id]
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
    limited = json.loads(trainrun(runtime, "runs", "--json", "--limit", "1").stdout)
    assert [row["run_id"] for row in limited] == finished.newest_first[:1]


def test_runs_shows_nothing_undelivered_when_every_start_was_delivered(finished: FinishedRuns) -> None:
    assert undelivered(finished.runtime) == []


def test_status_tells_everything_known_about_a_finished_run(finished: FinishedRuns) -> None:
    runtime, summary = finished.runtime, finished.succeeded
    view = json.loads(trainrun(runtime, "status", summary.run_id, "--json").stdout)
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
    text = trainrun(runtime, "status", summary.run_id).stdout
    assert f"run {summary.run_id} (single-node): SUCCEEDED" in text
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


def test_status_piped_prints_every_table_whole_whatever_the_width(finished: FinishedRuns) -> None:
    # Given a finished run
    runtime, run_id = finished.runtime, finished.succeeded.run_id
    # When its status is piped with no terminal width (rich's default: 80 columns) and with a wide one
    narrow = trainrun(runtime, "status", run_id, env={"COLUMNS": ""})
    wide = trainrun(runtime, "status", run_id, env={"COLUMNS": "400"})
    # Then both are the same lines: nothing was cut or wrapped at 80 columns
    assert narrow.exit_code == 0, narrow.output
    assert narrow.stdout == wide.stdout
    assert max(len(line) for line in narrow.stdout.splitlines()) > 80


def test_a_run_rejected_before_it_created_anything_costs_nothing(finished: FinishedRuns) -> None:
    runtime, run_id = finished.runtime, finished.rejected.run_id
    cost = json.loads(trainrun(runtime, "status", run_id, "--json").stdout)["cost"]
    assert (cost["so_far"], cost["hours"], cost["billable_since"]) == (0.0, 0.0, None)
    shown = trainrun(runtime, "status", run_id).stdout
    assert "cost so far: none, nothing billable was created" in shown and "$" not in shown
    watched = trainrun(runtime, "watch", run_id, "--timeout", "30")
    assert "nothing billable was created" in watched.stderr and "$" not in watched.stderr


def test_status_of_a_run_with_a_budget_says_how_much_of_it_is_spent(finished: FinishedRuns) -> None:
    # Given a run with a budget it stays far within
    runtime, summary = finished.runtime, finished.within_budget
    assert summary.status == "SUCCEEDED", summary.error
    # Then status says the budget and its share spent, beside the cost
    text = trainrun(runtime, "status", summary.run_id).stdout
    assert re.search(r"^budget \$1,000\.00, [0-9]+% spent$", text, re.MULTILINE), text


def test_status_finds_a_run_by_its_name_meaning_its_latest_run(finished: FinishedRuns) -> None:
    # Given runs that all have the same name, single-node
    # When status is asked for a run by that name
    view = json.loads(trainrun(finished.runtime, "status", "single-node", "--json").stdout)
    # Then it shows the latest of them
    assert view["run_id"] == finished.newest_first[0]


def test_status_of_a_failed_run_shows_its_error(finished: FinishedRuns) -> None:
    result = trainrun(finished.runtime, "status", finished.failed.run_id)
    assert "FAILED" in result.stdout and "error: JobFailed" in result.stdout


# --- watch, cancel of an ended run -----------------------------------------------------------------


@pytest.mark.parametrize(("ended", "exit_code", "status"), [("failed", 1, "FAILED"), ("rejected", 3, "REJECTED")])
def test_watch_of_an_ended_run_returns_at_once_with_its_outcome(
    finished: FinishedRuns, ended: str, exit_code: int, status: str
) -> None:
    run: LocalRunSummary = getattr(finished, ended)
    result = trainrun(finished.runtime, "watch", run.run_id, "--timeout", "30")
    assert result.exit_code == exit_code
    assert status in result.stderr


def test_cancel_of_an_ended_run_says_so(finished: FinishedRuns) -> None:
    runtime, run_id = finished.runtime, finished.succeeded.run_id
    result = trainrun(runtime, "cancel", run_id, "--yes")
    assert result.exit_code == 0
    assert f"run {run_id} has already ended: SUCCEEDED" in result.stderr
    assert record_of(runtime, run_id).status == RunStatus.SUCCEEDED
