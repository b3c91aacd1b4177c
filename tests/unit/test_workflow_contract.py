"""trainrun.workflow against the definitions it describes: every state named once, every Task
state's function, code, step and models as statemachines/*.asl.json and template.yaml have them."""

from __future__ import annotations

import importlib
import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from trainrun.local.fixture import load_fixture
from trainrun.local.runtime import LocalRunError, LocalRuntime
from trainrun.local.template import load_template
from trainrun.workflow import FUNCTIONS, INTEGRATIONS, TASK_STATES, Function, State, all_states

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = load_template(ROOT / "template.yaml")
DEFINITIONS = {
    logical_id: all_states(json.loads((ROOT / "statemachines" / file).read_text())["States"])
    for logical_id, file in [("RunStateMachine", "run.asl.json"), ("TeardownStateMachine", "teardown.asl.json")]
}
RUN, TEARDOWN = DEFINITIONS["RunStateMachine"], DEFINITIONS["TeardownStateMachine"]
WAIT_FOR_TASK_TOKEN = "arn:aws:states:::lambda:invoke.waitForTaskToken"
EACH_FUNCTION = sorted(set(FUNCTIONS.values()), key=lambda function: function.logical_id)


def resolve(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def task_states(states: dict[str, Any]) -> list[str]:
    return [name for name, state in states.items() if state["Type"] == "Task"]


def test_state_names_every_state_of_both_workflows_in_the_run_workflows_order() -> None:
    assert [state for state in State if state in RUN] == list(RUN)
    assert set(State) == set(RUN) | set(TEARDOWN)


def test_task_states_are_the_run_workflows_task_states_in_order() -> None:
    assert list(TASK_STATES) == task_states(RUN)


def test_every_task_state_of_both_workflows_has_its_function_or_integration_and_nothing_else_does() -> None:
    tasks = set(task_states(RUN)) | set(task_states(TEARDOWN))
    assert not set(FUNCTIONS) & set(INTEGRATIONS)
    assert set(FUNCTIONS) | set(INTEGRATIONS) == tasks


@pytest.mark.parametrize("machine", DEFINITIONS)
def test_each_task_state_invokes_the_function_the_table_names(machine: str) -> None:
    substitutions = TEMPLATE["Resources"][machine]["Properties"]["DefinitionSubstitutions"]
    for name in task_states(DEFINITIONS[machine]):
        state = DEFINITIONS[machine][name]
        if name in INTEGRATIONS:
            assert state["Resource"] == INTEGRATIONS[State(name)], name
            continue
        function = FUNCTIONS[State(name)]
        # A callback state names its function in the parameters; any other state in its Resource.
        assert (state["Resource"] == WAIT_FOR_TASK_TOKEN) == function.callback, name
        reference = state["Parameters"]["FunctionName"] if function.callback else state["Resource"]
        assert reference == f"${{{function.logical_id}Arn}}", name
        assert substitutions[f"{function.logical_id}Arn"] == {"Fn::GetAtt": [function.logical_id, "Arn"]}, name


@pytest.mark.parametrize("function", EACH_FUNCTION, ids=lambda function: function.logical_id)
def test_each_function_is_the_templates_with_its_code(function: Function) -> None:
    resource = TEMPLATE["Resources"][function.logical_id]
    assert resource["Type"] == "AWS::Serverless::Function"
    assert resource["Properties"]["CodeUri"] == function.code_uri
    assert (ROOT / function.code_uri / "app.py").is_file()


@pytest.mark.parametrize("function", EACH_FUNCTION, ids=lambda function: function.logical_id)
def test_each_functions_step_returns_its_output_model(function: Function) -> None:
    step, output = resolve(function.step), resolve(function.output)
    assert issubclass(output, BaseModel)
    assert typing.get_type_hints(step)["return"] is output


@pytest.mark.parametrize(("machine", "name"), [(m, n) for m in DEFINITIONS for n in task_states(DEFINITIONS[m])])
def test_each_task_states_parameters_are_what_its_input_model_reads(machine: str, name: str) -> None:
    if name in INTEGRATIONS:
        return
    function = FUNCTIONS[State(name)]
    model = resolve(function.input)
    assert issubclass(model, BaseModel)
    parameters = DEFINITIONS[machine][name]["Parameters"]
    payload = parameters["Payload"] if function.callback else parameters
    given = {re.sub(r"\.\$$", "", key) for key in payload}
    required = {field for field, info in model.model_fields.items() if info.is_required()}
    # Everything the model requires is given, and nothing is given that it would not read.
    assert required <= given <= set(model.model_fields), (name, sorted(given))


@pytest.mark.parametrize("name", [State.CAPACITY_ACCEPTED, State.RECORD_FAILURE_AND_LEFTOVERS, "Launch rockets"])
def test_trainrun_local_fails_only_a_task_state_of_the_run_and_names_them_all(name: str) -> None:
    # Given a local runtime, not started: the name is checked before anything is deployed
    runtime = LocalRuntime(load_fixture(ROOT / "examples" / "accounts" / "default.yaml"))
    # When a rehearsal asks to fail a Choice state, the safety net's own task, or no state at all
    with pytest.raises(LocalRunError) as refused:
        runtime.fail_at(name)
    # Then it is refused, and the message offers every state that can fail
    assert name in str(refused.value)
    assert all(state in str(refused.value) for state in TASK_STATES)
