"""The operator commands that stop a run or check one before it starts (cancel, plan --check, the
rejections at Load run spec) against the local stack; see test_cli_ops.py for how they are run.

The module's tests share one runtime (starting a local stack costs seconds of CPU): each cancels,
checks or submits runs of its own and looks at them by run id, and none changes the stack (the
bucket policy two of them put refuses only what they read: see refuse_listing). Cancel of an
ended run is in test_cli_ops.py, on the runs it has finished.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainrun.local.runtime import LocalRuntime
from trainrun.logic import aws_clock
from trainrun.model.run_record import RunError, RunStatus

from .cli_ops import a_training_run, trainrun
from .conftest import EXAMPLES, example
from .scripted_head_node import ScriptedCluster
from .test_provisioning import record_of, remaining


@pytest.fixture(scope="module")
def runtime(module_runtime: LocalRuntime) -> LocalRuntime:
    """The module's shared runtime (conftest.py), in place of a runtime of each test's own."""
    return module_runtime


# The runs a test starts play the jobs its own `cluster` scripts (conftest.py).
pytestmark = pytest.mark.usefixtures("scripted_by_the_test")


def test_cancel_asks_first_and_with_yes_stops_the_run_tears_it_down_and_reports_nothing_left(
    runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    # Given a run whose training job is running
    run_id = a_training_run(runtime, cluster)
    record = record_of(runtime, run_id)
    # When it is cancelled without a terminal to ask on, and without --yes
    unconfirmed = trainrun(runtime, "cancel", run_id)
    # Then nothing changes: it asks for --yes, and the run goes on
    assert unconfirmed.exit_code == 2
    assert "pass --yes" in unconfirmed.stderr
    assert record_of(runtime, run_id).status == RunStatus.RUNNING
    # When it is cancelled with --yes
    result = trainrun(runtime, "cancel", run_id, "--yes")
    assert result.exit_code == 0, result.output
    # Then it said what it would delete: what the run created so far
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
    # (beside the workload's setup, which the stand-in's small archive takes less time than: its
    # copy is counted, by its source, without lengthening the staging)
    copy_source = aws_clock.dataset_copy(1, 1200, 125).source
    assert copy_source in staged["source"] and copy_source not in unknown["source"]
    assert staged["end_seconds"] - staged["start_seconds"] >= unknown["end_seconds"] - unknown["start_seconds"]


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
    team may): the stack's policies allow it, the bucket does not. It replaces the bucket's policy
    (the fixture's buckets have none), and refuses nothing outside `prefix`."""
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


def executions(runtime: LocalRuntime) -> list[str]:
    """The run state machine's executions (their ARNs): every run the stack started."""
    listed = runtime.client("stepfunctions").list_executions(
        stateMachineArn=runtime.deployed.outputs["StateMachineArn"]
    )
    return [execution["executionArn"] for execution in listed["executions"]]


def test_plan_check_exits_3_with_the_fix_when_the_dataset_object_is_not_there(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    # Given a run file whose dataset, in a bucket the stack allows, was never uploaded
    run_file = run_file_with(tmp_path, "missing-data", dataset={"source": MISSING_DATASET, "path": "/fsx/data"})
    before = executions(runtime)
    # When plan --check looks at it
    result = trainrun(runtime, "plan", str(run_file), "--check")
    # Then it exits 3 with the finding Load run spec would reject the run with, and the fix
    assert result.exit_code == 3, result.output
    assert "What the head node will read (workload, dataset, checkpoints): REJECTED" in result.stdout
    assert (
        f"ERROR   S3_INPUT_NOT_FOUND: workload.dataset.source: {MISSING_DATASET} does not exist: the run would "
        f"fail at Prepare head node; upload the dataset there (aws s3 cp FILE {MISSING_DATASET}"
    ) in result.stdout
    # And the buckets themselves are fine, and nothing was created: no execution started
    assert f"Buckets and topic against stack {runtime.deployed.name}: accepted" in result.stdout
    assert executions(runtime) == before


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
