"""The local Step Functions' task callbacks, where moto 5.2.5 differs from Step Functions."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from moto import mock_aws
from moto.stepfunctions.parser.api import ExecutionStatus, InvalidToken
from moto.stepfunctions.parser.models import stepfunctions_parser_backends

from trainrun.local import task_callbacks

ACCOUNT, REGION = "123456789012", "us-east-1"
DEFINITION = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}})


def running_without_an_environment() -> tuple[Any, Any, Any]:
    """(backend, execution, its environment): an execution that ran, then set back to RUNNING without
    its worker's environment, as one is between its start and its thread's first step."""
    task_callbacks.install()
    backend = stepfunctions_parser_backends[ACCOUNT][REGION]
    machine = backend.create_state_machine(name="m", definition=DEFINITION, roleArn=f"arn:aws:iam::{ACCOUNT}:role/r")
    execution = backend.start_execution(machine.arn, name="e")
    deadline = time.monotonic() + 10
    while execution.exec_status == ExecutionStatus.RUNNING and time.monotonic() < deadline:
        time.sleep(0.01)  # ended: its thread no longer reads the worker
    environment = execution.exec_worker.env
    execution.exec_worker.env, execution.exec_status = None, ExecutionStatus.RUNNING
    execution.exec_worker.__dict__.pop("_trainrun_environment", None)
    return backend, execution, environment


@mock_aws
def test_a_callback_while_an_execution_has_no_environment_yet_is_an_invalid_token_not_a_stack_trace() -> None:
    # Given a running execution whose worker has not built its environment yet (its thread not yet run)
    backend, _, _ = running_without_an_environment()
    # When a heartbeat, a success or a failure arrives for a task token
    # Then Step Functions' answer for a token no task holds comes back, which callers take as stale
    with pytest.raises(InvalidToken):
        backend.send_task_heartbeat("token")
    with pytest.raises(InvalidToken):
        backend.send_task_success("token", "{}")
    with pytest.raises(InvalidToken):
        backend.send_task_failure("token", error="E", cause="C")


@mock_aws
def test_stop_execution_of_an_execution_without_an_environment_yet_is_applied_once_it_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a running execution whose worker has not built its environment yet
    backend, execution, environment = running_without_an_environment()
    stops: list[object] = []
    environment.set_stop = lambda **kwargs: stops.append(kwargs)
    # When it is stopped: the request returns at once, nothing to stop yet
    backend.stop_execution(execution.execution_arn)
    assert stops == []
    # Then the stop reaches the environment the moment the worker builds it
    monkeypatch.setattr(task_callbacks, "_original_evaluation_environment", lambda worker: environment)
    assert execution.exec_worker._get_evaluation_environment() is environment
    assert len(stops) == 1
