"""The state machine definition's contract: state names, retries, catches, substitutions."""

from __future__ import annotations

import json
import re
from pathlib import Path

from trainrun.local.template import load_template

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = json.loads((ROOT / "statemachines" / "run.asl.json").read_text())
STATES = DEFINITION["States"]
TASKS = {name: state for name, state in STATES.items() if state["Type"] == "Task"}
TRANSIENT = {
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
    "TransientAwsError",
}


def test_state_names_are_the_documented_contract() -> None:
    assert list(STATES) == [
        "Load run spec",
        "Validate capacity",
        "Capacity accepted?",
        "Record success",
        "Run succeeded",
        "Record rejection",
        "Run rejected",
        "Record failure",
        "Run failed",
    ]


def test_every_task_retries_transient_errors_with_backoff_and_jitter() -> None:
    for name, state in TASKS.items():
        (retry,) = state["Retry"]
        assert set(retry["ErrorEquals"]) == TRANSIENT, name
        assert retry["BackoffRate"] > 1 and retry["MaxAttempts"] >= 2, name
        assert retry["JitterStrategy"] == "FULL", name


def test_every_task_but_the_last_resort_catches_everything_and_keeps_its_input() -> None:
    for name, state in TASKS.items():
        if name == "Record failure":
            assert "Catch" not in state
            continue
        last = state["Catch"][-1]
        assert last["ErrorEquals"] == ["States.ALL"], name
        assert last["ResultPath"] == "$.error", name
        assert last["Next"] == "Record failure", name


def test_an_invalid_run_file_is_a_rejection_not_a_failure() -> None:
    first = STATES["Load run spec"]["Catch"][0]
    assert first == {"ErrorEquals": ["RunSpecInvalid"], "ResultPath": "$.error", "Next": "Record rejection"}


def test_a_failed_run_ends_with_the_original_error() -> None:
    assert STATES["Run failed"] == {"Type": "Fail", "ErrorPath": "$.error.Error", "CausePath": "$.error.Cause"}
    assert STATES["Record failure"]["Parameters"]["error.$"] == "$.error"


def test_every_substitution_is_defined_by_the_template_and_used() -> None:
    text = (ROOT / "statemachines" / "run.asl.json").read_text()
    used = set(re.findall(r"\$\{(\w+)\}", text))
    template = load_template(ROOT / "template.yaml")
    defined = set(template["Resources"]["RunStateMachine"]["Properties"]["DefinitionSubstitutions"])
    assert used == defined


def test_every_path_reaches_an_end() -> None:
    for name, state in STATES.items():
        targets = [state.get("Next"), state.get("Default")]
        targets += [choice["Next"] for choice in state.get("Choices", [])]
        targets += [catch["Next"] for catch in state.get("Catch", [])]
        for target in filter(None, targets):
            assert target in STATES, f"{name} -> {target}"
        if state["Type"] not in {"Succeed", "Fail", "Choice"}:
            assert "Next" in state or state.get("End"), name
