"""The local runtime's functions run concurrently, each in its own function's environment."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import boto3
import pytest

from trainrun.local.lambdas import FunctionRegistry, LocalFunction, OverlaidEnvironment, install_environment

HANDLER = """
import os
import threading

import boto3

# Both invocations must be inside their handlers at once to get past this.
both_running = threading.Barrier(2, timeout=10)


def handler(event, context):
    both_running.wait()
    credentials = boto3.Session().get_credentials()
    return {
        "variable": os.environ["TRAINRUN_TEST_NAME"],
        "getenv": os.getenv("TRAINRUN_TEST_NAME"),
        "access_key": credentials.access_key,
    }
"""


@pytest.fixture
def functions(tmp_path: Path) -> list[LocalFunction]:
    (tmp_path / "app.py").write_text(HANDLER)
    return [
        LocalFunction(
            name=name,
            arn=f"arn:aws:lambda:us-east-1:123456789012:function:{name}",
            code_dir=tmp_path,
            handler="app.handler",
            environment={"TRAINRUN_TEST_NAME": name, "AWS_ACCESS_KEY_ID": f"AKIA{name.upper()}"},
        )
        for name in ("first", "second")
    ]


def test_two_functions_run_at_once_each_seeing_its_own_environment_and_credentials(
    functions: list[LocalFunction], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two functions of one code package, each with its own variables and access key
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    registry = FunctionRegistry()
    # ... sharing the loaded module (its barrier), as two functions of one process share imports
    functions[1].load = functions[0].load  # type: ignore[method-assign]
    results: dict[str, Any] = {}

    def invoke(function: LocalFunction) -> None:
        results[function.name] = registry.invoke(function, {})

    # When both are invoked at the same time
    threads = [threading.Thread(target=invoke, args=(function,)) for function in functions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    # Then both ran to the end concurrently (the barrier let them through), each with its own values
    answers = {name: (json.loads(result), errored) for name, (result, errored, _logs) in results.items()}
    assert answers == {
        "first": ({"variable": "first", "getenv": "first", "access_key": "AKIAFIRST"}, False),
        "second": ({"variable": "second", "getenv": "second", "access_key": "AKIASECOND"}, False),
    }


def test_a_function_environment_is_gone_from_the_process_after_its_invocation(
    functions: list[LocalFunction],
) -> None:
    # Given a function with its own variable (and a handler that sets another one)
    function = functions[0]
    function.load = lambda: lambda event, context: os.environ.setdefault("TRAINRUN_TEST_SET", "x")  # type: ignore[method-assign]
    # When it has run
    result, errored, _ = FunctionRegistry().invoke(function, {})
    # Then neither is in the process environment, which is still the real one underneath
    assert (json.loads(result), errored) == ("x", False)
    assert "TRAINRUN_TEST_NAME" not in os.environ
    assert "TRAINRUN_TEST_SET" not in os.environ


def test_outside_invocations_the_overlaid_environment_is_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given os.environ replaced by the overlay
    environment = install_environment()
    assert isinstance(os.environ, OverlaidEnvironment)
    # When the process sets and deletes a variable outside any invocation
    monkeypatch.setenv("TRAINRUN_TEST_PROCESS", "1")
    # Then the real environment has it, and boto3 sessions made now read it
    assert environment.base["TRAINRUN_TEST_PROCESS"] == "1"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAPROCESS")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    assert boto3.Session().get_credentials().access_key == "AKIAPROCESS"
    monkeypatch.delenv("TRAINRUN_TEST_PROCESS")
    assert "TRAINRUN_TEST_PROCESS" not in environment.base


TRACING_HANDLER = """
from aws_lambda_powertools import Tracer


def handler(event, context):
    # Powertools' own test of whether to trace, on this invocation's environment.
    return {"trace_disabled": bool(Tracer._is_tracer_disabled())}
"""


def test_a_function_never_traces_here_even_with_lambdas_task_root(tmp_path: Path) -> None:
    # Given a function whose environment has what Lambda sets, and which would make Powertools trace
    (tmp_path / "app.py").write_text(TRACING_HANDLER)
    function = LocalFunction(
        name="traced",
        arn="arn:aws:lambda:us-east-1:123456789012:function:traced",
        code_dir=tmp_path,
        handler="app.handler",
        environment={"LAMBDA_TASK_ROOT": "/var/task"},
    )
    # When the local runtime invokes it
    result, errored, _logs = FunctionRegistry().invoke(function, {})
    # Then Powertools' Tracer is off in it: no X-Ray daemon listens here
    assert (json.loads(result), errored) == ({"trace_disabled": True}, False)
