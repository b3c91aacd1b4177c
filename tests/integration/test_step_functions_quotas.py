"""The local Step Functions enforces the service's quotas: 25,000 history events, 256 KB payloads."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core.config import default_user_config

from trainrun.local import step_functions

ROLE = "arn:aws:iam::123456789012:role/machine"


@pytest.fixture
def sfn(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    config = default_user_config.setdefault("stepfunctions", {})
    before = config.get("execute_state_machine")
    config["execute_state_machine"] = True
    step_functions.install()
    try:
        with mock_aws():
            yield boto3.client("stepfunctions", region_name="us-west-2")
    finally:
        config["execute_state_machine"] = bool(before)


def run(sfn: Any, definition: dict[str, Any], execution_input: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
    machine = sfn.create_state_machine(name="m", definition=json.dumps(definition), roleArn=ROLE)["stateMachineArn"]
    arn = sfn.start_execution(stateMachineArn=machine, input=json.dumps(execution_input))["executionArn"]
    deadline = time.monotonic() + timeout
    while (described := sfn.describe_execution(executionArn=arn))["status"] == "RUNNING":
        assert time.monotonic() < deadline, "the execution did not end"
        time.sleep(0.2)
    return described


def history(sfn: Any, arn: str) -> list[dict[str, Any]]:
    pages = sfn.get_paginator("get_execution_history").paginate(executionArn=arn, PaginationConfig={"PageSize": 1000})
    return [event for page in pages for event in page["events"]]


def test_an_execution_fails_when_its_history_reaches_25000_events(sfn: Any) -> None:
    # Given a loop that never ends by itself
    loop = {
        "StartAt": "Again",
        "States": {
            "Again": {"Type": "Pass", "Next": "Again"},
        },
    }
    # When it runs
    described = run(sfn, loop, {})
    # Then the execution fails as Step Functions fails it at the quota
    assert described["status"] == "FAILED"
    assert described["error"] == "States.Runtime"
    assert described["cause"] == "The execution reached the maximum number of history events (25000)."
    events = history(sfn, described["executionArn"])
    assert events[-1]["type"] == "ExecutionFailed"
    assert step_functions.HISTORY_EVENT_QUOTA <= len(events) <= step_functions.HISTORY_EVENT_QUOTA + 2


def test_a_state_output_over_256_kb_fails_with_data_limit_exceeded(sfn: Any) -> None:
    # Given a state that makes its input four times larger than 100 KB
    grow = {
        "StartAt": "Grow",
        "States": {
            "Grow": {
                "Type": "Pass",
                "Parameters": {"a.$": "$.blob", "b.$": "$.blob", "c.$": "$.blob", "d.$": "$.blob"},
                "End": True,
            }
        },
    }
    described = run(sfn, grow, {"blob": "x" * 100_000})
    # Then the state fails as Step Functions fails it
    assert described["status"] == "FAILED"
    assert described["error"] == "States.DataLimitExceeded"


CONTINUE = {
    "StartAt": "Continued?",
    "States": {
        "Continued?": {
            "Type": "Choice",
            "Choices": [{"Variable": "$.continuation", "IsPresent": True, "Next": "Done"}],
            "Default": "Continue",
        },
        "Continue": {
            "Type": "Task",
            "Resource": "arn:aws:states:::states:startExecution",
            "Parameters": {"StateMachineArn.$": "$$.StateMachine.Id", "Name": "next", "Input.$": "$"},
            "ResultPath": "$.continued",
            "Retry": [{"ErrorEquals": ["StepFunctions.ExecutionAlreadyExistsException"], "MaxAttempts": 0}],
            "Catch": [
                {"ErrorEquals": ["StepFunctions.ExecutionAlreadyExistsException"], "ResultPath": None, "Next": "Done"}
            ],
            "Next": "Done",
        },
        "Done": {"Type": "Succeed"},
    },
}


def test_a_workflow_starts_a_named_execution_of_itself_with_its_state_as_input(sfn: Any) -> None:
    # Given a workflow that continues in an execution of itself named "next"
    # When it runs
    described = run(sfn, CONTINUE, {"run_id": "r1"})
    # Then the integration started it, with the state as its input, and answered as Step Functions does
    assert described["status"] == "SUCCEEDED"
    continued = json.loads(described["output"])["continued"]
    assert continued["ExecutionArn"].endswith(":next")
    assert "StartDate" in continued
    started = sfn.describe_execution(executionArn=continued["ExecutionArn"])
    assert json.loads(started["input"]) == {"run_id": "r1"}


def test_a_second_start_of_the_same_name_is_execution_already_exists_and_caught(sfn: Any) -> None:
    # Given a workflow whose continuation "next" was already started once
    machine = sfn.create_state_machine(name="m", definition=json.dumps(CONTINUE), roleArn=ROLE)["stateMachineArn"]
    sfn.start_execution(stateMachineArn=machine, name="next", input=json.dumps({"continuation": {"other": 1}}))
    # When the workflow tries to start it again (a retried continuation)
    arn = sfn.start_execution(stateMachineArn=machine, input=json.dumps({"run_id": "r1"}))["executionArn"]
    while (described := sfn.describe_execution(executionArn=arn))["status"] == "RUNNING":
        time.sleep(0.1)
    # Then the error is StepFunctions.ExecutionAlreadyExistsException, caught: no second execution
    assert described["status"] == "SUCCEEDED"
    failed = [e for e in history(sfn, arn) if e["type"] == "TaskFailed"]
    assert [e["taskFailedEventDetails"]["error"] for e in failed] == ["StepFunctions.ExecutionAlreadyExistsException"]
    assert len(sfn.list_executions(stateMachineArn=machine)["executions"]) == 2


QUEUE_URL = "https://sqs.us-west-2.amazonaws.com/123456789012/q"


def waiting_task(timing: dict[str, Any]) -> dict[str, Any]:
    """A callback task with `timing` (its HeartbeatSeconds/TimeoutSeconds fields), whose
    every error is caught into "Caught"."""
    return {
        "StartAt": "Wait for callback",
        "States": {
            "Wait for callback": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                "Parameters": {"QueueUrl": QUEUE_URL, "MessageBody.$": "$$.Task.Token"},
                **timing,
                "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Caught"}],
                "End": True,
            },
            "Caught": {"Type": "Succeed"},
        },
    }


@pytest.mark.parametrize("heartbeat", [60, 61])
def test_a_literal_heartbeat_not_below_the_timeout_is_an_invalid_definition(sfn: Any, heartbeat: int) -> None:
    # Given a task whose HeartbeatSeconds equals or exceeds its TimeoutSeconds
    definition = waiting_task({"HeartbeatSeconds": heartbeat, "TimeoutSeconds": 60})
    # When the state machine is created
    # Then Step Functions refuses the definition, and creates nothing
    with pytest.raises(sfn.exceptions.InvalidDefinition):
        sfn.create_state_machine(name="m", definition=json.dumps(definition), roleArn=ROLE)
    assert sfn.list_state_machines()["stateMachines"] == []


@pytest.mark.parametrize("heartbeat", [60, 61])
def test_a_resolved_heartbeat_not_below_the_timeout_fails_the_execution_uncaught(sfn: Any, heartbeat: int) -> None:
    # Given a task whose heartbeat and timeout come from its input, the heartbeat not below the timeout
    definition = waiting_task({"HeartbeatSecondsPath": "$.heartbeat", "TimeoutSecondsPath": "$.timeout"})
    # When it runs
    described = run(sfn, definition, {"heartbeat": heartbeat, "timeout": 60}, timeout=30)
    # Then the execution fails with States.Runtime, which a States.ALL catcher does not catch
    assert described["status"] == "FAILED"
    assert described["error"] == "States.Runtime"
    assert f"HeartbeatSeconds ({heartbeat})" in described["cause"]
    assert "TimeoutSeconds (60)" in described["cause"]
    events = history(sfn, described["executionArn"])
    assert not [e for e in events if e["type"] == "TaskScheduled"]
    assert not [e for e in events if e.get("stateEnteredEventDetails", {}).get("name") == "Caught"]


def test_a_resolved_heartbeat_below_the_timeout_schedules_the_task(sfn: Any) -> None:
    # Given a task whose resolved heartbeat is one second below its timeout
    boto3.client("sqs", region_name="us-west-2").create_queue(QueueName="q")
    definition = waiting_task({"HeartbeatSecondsPath": "$.heartbeat", "TimeoutSecondsPath": "$.timeout"})
    # When it runs and no callback comes
    described = run(sfn, definition, {"heartbeat": 1, "timeout": 2}, timeout=30)
    # Then the task was scheduled, and its time-out caught as usual
    assert described["status"] == "SUCCEEDED"
    assert [e for e in history(sfn, described["executionArn"]) if e["type"] == "TaskScheduled"]
    assert json.loads(described["output"])["error"]["Error"] in ("States.HeartbeatTimeout", "States.Timeout")


def test_a_resolved_heartbeat_without_a_timeout_schedules_the_task(sfn: Any) -> None:
    # Given a task with a heartbeat from its input and no timeout (AWS's default: 99999999 s)
    boto3.client("sqs", region_name="us-west-2").create_queue(QueueName="q")
    definition = waiting_task({"HeartbeatSecondsPath": "$.heartbeat"})
    machine = sfn.create_state_machine(name="m", definition=json.dumps(definition), roleArn=ROLE)["stateMachineArn"]
    # When it runs with a heartbeat over moto's 60 s stand-in default
    arn = sfn.start_execution(stateMachineArn=machine, input=json.dumps({"heartbeat": 61}))["executionArn"]
    deadline = time.monotonic() + 30
    while not [e for e in history(sfn, arn) if e["type"] == "TaskScheduled"]:
        # Then the task is scheduled, not refused
        assert sfn.describe_execution(executionArn=arn)["status"] == "RUNNING"
        assert time.monotonic() < deadline, "the task was not scheduled"
        time.sleep(0.2)
    sfn.stop_execution(executionArn=arn)
