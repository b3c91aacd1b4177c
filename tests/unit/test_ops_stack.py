"""Finding the stack the operator commands work against: its name, then its outputs."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from trainrun.ops.stack import (
    FALLBACK_STACK_NAME,
    REQUIRED_OUTPUTS,
    STACK_ENVIRONMENT_VARIABLE,
    StackName,
    StackNotFound,
    connect,
    default_stack_name,
)

REGION = "us-west-2"


@pytest.fixture(autouse=True)
def no_stack_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STACK_ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


def samconfig(directory: Path, text: str) -> Path:
    (directory / "samconfig.toml").write_text(text)
    return directory


def test_an_explicit_stack_wins_over_the_environment_and_samconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STACK_ENVIRONMENT_VARIABLE, "from-env")
    samconfig(tmp_path, '[default.deploy.parameters]\nstack_name = "from-samconfig"\n')
    assert default_stack_name("explicit", tmp_path) == StackName("explicit", "--stack")


def test_the_environment_wins_over_samconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STACK_ENVIRONMENT_VARIABLE, "from-env")
    samconfig(tmp_path, '[default.deploy.parameters]\nstack_name = "from-samconfig"\n')
    assert default_stack_name(None, tmp_path) == StackName("from-env", "$TRAINRUN_STACK")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[default.deploy.parameters]\nstack_name = "deployed"\n', "deployed"),
        ('[default.global.parameters]\nstack_name = "global"\n', "global"),
        (
            '[default.global.parameters]\nstack_name = "global"\n'
            '[default.deploy.parameters]\nstack_name = "deployed"\n',
            "deployed",
        ),
        ('[prod.deploy.parameters]\nstack_name = "prod-only"\n', FALLBACK_STACK_NAME),
        ("not toml = = =", FALLBACK_STACK_NAME),
    ],
    ids=["deploy", "global", "deploy-over-global", "other-environment", "broken"],
)
def test_samconfig_gives_the_stack_sam_deploy_used(tmp_path: Path, text: str, expected: str) -> None:
    assert default_stack_name(None, samconfig(tmp_path, text)).name == expected


def test_this_repository_samconfig_names_the_stack_trainrun() -> None:
    root = Path(__file__).resolve().parents[2]
    assert default_stack_name(None, root) == StackName("trainrun", str(root / "samconfig.toml"))


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield


def deploy(name: str, outputs: dict[str, str]) -> None:
    template = {
        "Resources": {"Placeholder": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        boto3.client("cloudformation", region_name=REGION).create_stack(
            StackName=name, TemplateBody=json.dumps(template)
        )


def test_connect_reads_the_stack_outputs(aws: None) -> None:
    outputs = {key: f"value-of-{key}" for key in REQUIRED_OUTPUTS}
    deploy("trainrun", outputs)
    stack = connect(StackName("trainrun", "--stack"), region=REGION)
    assert stack.outputs == outputs and stack.region == REGION


def test_a_stack_that_does_not_exist_is_named_with_where_its_name_came_from(aws: None) -> None:
    with pytest.raises(StackNotFound, match=r"stack 'nope' \(from \$TRAINRUN_STACK\) in us-west-2: .*does not exist"):
        connect(StackName("nope", "$TRAINRUN_STACK"), region=REGION)


def test_a_stack_without_the_trainrun_outputs_is_not_a_trainrun_stack(aws: None) -> None:
    deploy("someone-elses", {"ConfigBucketName": "bucket"})
    with pytest.raises(StackNotFound, match="is not a trainrun stack: it has no output RunsTableName, StateMachineArn"):
        connect(StackName("someone-elses", "--stack"), region=REGION)


def test_no_region_at_all_is_an_error_that_says_how_to_give_one(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(StackNotFound, match="no AWS region: pass --region"):
        connect(StackName("trainrun", "--stack"))
