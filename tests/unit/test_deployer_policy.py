"""The deployer's policies (tools/deployer_policy.py): worked out from the template as SAM expands
it and the CloudFormation registry schemas' handler permissions, within IAM's size limit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools import deployer_policy

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def types() -> set[str]:
    return deployer_policy.template_resource_types("us-west-2")


@pytest.fixture(scope="module")
def handlers() -> dict:
    return deployer_policy.registry_handlers()


def actions_of(documents: list[dict]) -> list[str]:
    found = []
    for document in documents:
        for statement in document["Statement"]:
            action = statement["Action"]
            found += [action] if isinstance(action, str) else action
    return found


def test_every_resource_type_of_the_expanded_template_has_its_handlers_permissions(types, handlers) -> None:
    # SAM's expansion is what CloudFormation creates: functions become roles, permissions, rules
    assert {"AWS::Lambda::Function", "AWS::IAM::Role", "AWS::StepFunctions::StateMachine"} <= types
    assert "AWS::Serverless::Function" not in types
    _, missing = deployer_policy.handler_actions(types, handlers)
    assert missing == []


def test_the_policies_grant_every_handler_action_once_and_each_fits_a_managed_policy(types, handlers) -> None:
    actions, _ = deployer_policy.handler_actions(types, handlers)
    documents = deployer_policy.policies("trainrun", "us-west-2", "123456789012", actions)
    assert len(documents) >= 2  # together they are over one policy's limit
    assert all(deployer_policy.size(d) <= deployer_policy.MANAGED_POLICY_LIMIT for d in documents)
    granted = actions_of(documents)
    handler_granted = [a for d in documents for s in d["Statement"] if s["Resource"] == "*" for a in s["Action"]]
    assert sorted(handler_granted) == sorted(actions)  # each exactly once
    for needed in (
        "iam:PassRole",
        "lambda:CreateFunction",
        "lambda:PublishLayerVersion",
        "dynamodb:CreateTable",
        "states:CreateStateMachine",
        "scheduler:CreateSchedule",
        "logs:PutSubscriptionFilter",
    ):
        assert needed in granted


def test_a_type_without_a_schema_is_named(handlers) -> None:
    _, missing = deployer_policy.handler_actions({"AWS::Lambda::Function", "AWS::Made::Up"}, handlers)
    assert missing == ["AWS::Made::Up"]


def test_the_stacks_own_calls_are_scoped_to_the_stack_and_sams_managed_stack() -> None:
    statements = deployer_policy.sam_statements("my-stack", "eu-west-1", "111122223333")
    change_sets = next(s for s in statements if s["Sid"] == "StackChangeSets")
    assert change_sets["Resource"] == [
        "arn:aws:cloudformation:eu-west-1:111122223333:stack/my-stack/*",
        "arn:aws:cloudformation:eu-west-1:111122223333:stack/aws-sam-cli-managed-default/*",
    ]


def test_out_writes_one_file_per_policy(tmp_path: Path) -> None:
    assert deployer_policy.main(["--out", str(tmp_path), "--stack", "s"]) == 0
    files = sorted(tmp_path.glob("deployer-*.json"))
    assert [f.name for f in files][:2] == ["deployer-1.json", "deployer-2.json"]
    assert json.loads(files[0].read_text())["Statement"][0]["Sid"] == "StackChangeSets"


def test_the_first_real_run_guide_gives_the_command() -> None:
    assert "make deployer-policy" in (ROOT / "docs" / "deploying.md").read_text()
