"""`trainrun runs`' state column: the state a running execution entered last, on AWS and on moto.

Step Functions answers GetExecutionHistory(reverseOrder=True) newest first, a page of
maxResults at a time; moto 5.2.5 ignores reverseOrder (and maxResults) and answers oldest first.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from trainrun.model.run_record import RunFileRef, RunRecord
from trainrun.ops.runs import current_state
from trainrun.ops.stack import Stack
from trainrun.workflow import State

ARN = "arn:aws:states:us-east-1:123456789012:execution:trainrun-run:run-1"
STATES = [State.LOAD_RUN_SPEC, State.VALIDATE_CAPACITY, State.CREATE_NETWORK, State.WAIT_FOR_HEAD_NODE, State.TRAIN]


def history() -> list[dict[str, Any]]:
    """Each state entered then exited, in order; the last one (Train) still running."""
    events: list[dict[str, Any]] = [{"id": 1, "type": "ExecutionStarted"}]
    for name in STATES:
        events.append({"id": len(events) + 1, "type": "TaskStateEntered", "stateEnteredEventDetails": {"name": name}})
        if name != STATES[-1]:
            events.append({"id": len(events) + 1, "type": "TaskStateExited", "stateExitedEventDetails": {"name": name}})
    return events


class _NotFound(Exception):
    pass


class FakeStepFunctions:
    """GetExecutionHistory as AWS answers it (`honours_order`), or as moto does (everything, oldest first)."""

    class exceptions:  # boto3 spells it so
        ExecutionDoesNotExist = _NotFound

    def __init__(self, events: list[dict[str, Any]], *, honours_order: bool):
        self.events = events
        self.honours_order = honours_order
        self.calls = 0

    def get_execution_history(self, **request: Any) -> dict[str, Any]:
        self.calls += 1
        if not self.honours_order:
            return {"events": list(self.events)}
        ordered = list(reversed(self.events)) if request.get("reverseOrder") else list(self.events)
        start = int(request.get("nextToken", 0))
        end = start + int(request.get("maxResults", 1000))
        page: dict[str, Any] = {"events": ordered[start:end]}
        if end < len(ordered):
            page["nextToken"] = str(end)
        return page


def stack_with(sfn: FakeStepFunctions) -> Stack:
    stack = Stack(name="trainrun", outputs={}, session=None, endpoint_url=None)
    stack._clients["stepfunctions"] = sfn
    return stack


def running_record() -> RunRecord:
    return RunRecord(
        run_id="run-1",
        run_file=RunFileRef(bucket="b", key="runs/a.yaml", version_id=None, etag="e"),
        execution_arn=ARN,
        created_at=datetime.now(UTC),
        updated_at=datetime.now(UTC),
    )


def test_the_state_of_a_running_run_is_the_last_state_entered_when_history_comes_oldest_first() -> None:
    # Given an emulator that ignores reverseOrder (moto)
    sfn = FakeStepFunctions(history(), honours_order=False)
    # When the runs list asks for the run's current state
    state = current_state(stack_with(sfn), running_record())
    # Then it is the state entered last, not the first one
    assert state == State.TRAIN


def test_the_state_of_a_running_run_is_found_past_a_page_without_state_changes_on_aws() -> None:
    # Given Step Functions' ordering and a long history (200 events: four pages of 50)
    events = history()
    for _ in range(190):
        events.append({"id": len(events) + 1, "type": "TaskSubmitted"})
    sfn = FakeStepFunctions(events, honours_order=True)
    # When the runs list asks for the current state
    state = current_state(stack_with(sfn), running_record())
    # Then the state is the last entered, found by reading on until a StateEntered shows up
    assert state == State.TRAIN
    assert sfn.calls == 4


def test_the_state_of_a_running_run_costs_one_call_on_aws_when_the_newest_page_has_it() -> None:
    # Given Step Functions' ordering and a short history
    sfn = FakeStepFunctions(history(), honours_order=True)
    # When the runs list asks for the current state
    state = current_state(stack_with(sfn), running_record())
    # Then one call of the newest events finds it
    assert (state, sfn.calls) == (State.TRAIN, 1)
