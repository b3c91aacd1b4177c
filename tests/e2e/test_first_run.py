"""README.md's "A first real run on AWS", followed as written against the local stack: `trainrun
serve` deployed with the parameters of the README's `sam deploy`, then the README's `plan --check`
and its upload of the example run file, which the run accepts (tests/first_run.py reads the
commands from the README)."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import boto3
import pytest
import yaml

from tests.first_run import command, deploy_parameters, upload
from trainrun.local.fixture import resolve_directories
from trainrun.workflow import State

from .conftest import EXAMPLES, NEEDS_LOCAL_HEAD_NODE, ROOT, serving, trainrun

pytestmark = NEEDS_LOCAL_HEAD_NODE

# The local stack's own ParallelCluster API and its user role stand in for these two.
LOCAL_STAND_INS = ("PclusterApiUrl", "PclusterApiRoleArn")
AWS_CLI = ROOT / ".venv-awscli" / "bin" / "aws"


def account_with_readme_parameters(directory: Path) -> Path:
    """The default account fixture, its stack deployed with the README's parameters instead of its own."""
    document = yaml.safe_load((EXAMPLES / "accounts" / "default.yaml").read_text())
    resolve_directories(document, EXAMPLES / "accounts")
    document["stack_parameters"] = {k: v for k, v in deploy_parameters().items() if k not in LOCAL_STAND_INS}
    account = directory / "account.yaml"
    account.write_text(yaml.safe_dump(document))
    return account


def config_bucket(environment: dict[str, str]) -> str:
    session = boto3.Session(
        aws_access_key_id=environment["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=environment["AWS_SECRET_ACCESS_KEY"],
        region_name=environment["AWS_REGION"],
    )
    cloudformation = session.client("cloudformation", endpoint_url=environment["AWS_ENDPOINT_URL"])
    (stack,) = cloudformation.describe_stacks(StackName=environment["TRAINRUN_STACK"])["Stacks"]
    return next(o["OutputValue"] for o in stack["Outputs"] if o["OutputKey"] == "ConfigBucketName")


def run(words: list[str], environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(words, capture_output=True, text=True, cwd=ROOT, env=environment, timeout=300, check=False)


def test_the_readmes_first_run_against_the_local_stack_is_accepted(tmp_path: Path) -> None:
    if not AWS_CLI.exists():
        pytest.skip("no .venv-awscli for the README's aws s3 cp (`make demo` or `make test` builds it)")
    # Given `trainrun serve` deployed with the README's parameters
    with serving(tmp_path, "--account", account_with_readme_parameters(tmp_path)) as environment:
        # When the README's plan --check runs, as written
        plan = run(command(".venv/bin/trainrun", "plan", naming="--check"), environment)
        # Then it passes: the reservation, and every bucket the example names
        assert plan.returncode == 0, plan.stdout + plan.stderr
        assert re.search(r"Buckets and topic against stack \S+: accepted", plan.stdout), plan.stdout

        # When the README's upload runs (the aws CLI of .venv-awscli), into the stack's config bucket
        words = upload()
        uploaded = run(
            [str(AWS_CLI), *words[1:4], words[4].replace("<ConfigBucketName>", config_bucket(environment))], environment
        )
        assert uploaded.returncode == 0, uploaded.stderr

        # Then the run is accepted: past Load run spec and Validate capacity, it creates its network
        deadline = time.monotonic() + 240
        while True:
            status = trainrun("status", "bert-large-phase1", "--json", env=environment)
            view = json.loads(status.stdout) if status.returncode == 0 else {}
            states = [state["name"] for state in view.get("states", [])]
            if State.CREATE_NETWORK in states or view.get("status") not in (None, "RUNNING"):
                break
            assert time.monotonic() < deadline, status.stdout + status.stderr
            time.sleep(2)
        assert view["status"] == "RUNNING" and State.CREATE_NETWORK in states, view
        assert [f for f in view["findings"] if f["severity"] == "ERROR"] == [], view
