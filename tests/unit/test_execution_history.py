"""GetExecutionHistory paged as Step Functions pages it (trainrun.local.execution_history), and the
live view's reader that asks only for the events added since its last look (ExecutionHistories)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.stepfunctions.models import StepFunctionBackend

from trainrun.local import execution_history
from trainrun.ops.runs import NEWEST_EVENTS_PAGE, ExecutionHistories
from trainrun.ops.runs import execution_history as read_whole

ARN = "arn:aws:states:us-east-1:123456789012:execution:machine:run"


@pytest.fixture
def history(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, list[dict[str, Any]]]]:
    """(a Step Functions client, the events its one execution holds: append to grow the history)."""
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(StepFunctionBackend, "get_execution_history", lambda self, arn: {"events": events})
    execution_history.install()
    with mock_aws():
        yield boto3.client("stepfunctions", region_name="us-east-1"), events


def grow(events: list[dict[str, Any]], count: int) -> None:
    for _ in range(count):
        events.append({"id": len(events) + 1, "type": "PassStateEntered", "timestamp": 1_700_000_000 + len(events)})


def test_pages_hold_the_default_100_events_then_a_next_token_until_the_last(history: tuple[Any, Any]) -> None:
    sfn, events = history
    grow(events, 250)
    first = sfn.get_execution_history(executionArn=ARN)
    assert [e["id"] for e in first["events"]] == list(range(1, 101))
    second = sfn.get_execution_history(executionArn=ARN, nextToken=first["nextToken"], maxResults=0)
    assert [e["id"] for e in second["events"]] == list(range(101, 201))
    last = sfn.get_execution_history(executionArn=ARN, nextToken=second["nextToken"])
    assert [e["id"] for e in last["events"]] == list(range(201, 251))
    assert "nextToken" not in last


def test_reverse_order_gives_the_newest_first(history: tuple[Any, Any]) -> None:
    sfn, events = history
    grow(events, 30)
    page = sfn.get_execution_history(executionArn=ARN, reverseOrder=True, maxResults=10)
    assert [e["id"] for e in page["events"]] == list(range(30, 20, -1))
    following = sfn.get_execution_history(
        executionArn=ARN, reverseOrder=True, maxResults=10, nextToken=page["nextToken"]
    )
    assert [e["id"] for e in following["events"]] == list(range(20, 10, -1))


def test_the_paginator_reads_a_long_history_whole_in_order(history: tuple[Any, Any]) -> None:
    sfn, events = history
    grow(events, 2_345)
    assert [e["id"] for e in read_whole(sfn, ARN)] == list(range(1, 2_346))


@pytest.mark.parametrize(
    ("request_fields", "code"),
    [
        ({"maxResults": 1001}, "ValidationException"),
        ({"nextToken": "not-a-token"}, "InvalidToken"),
    ],
)
def test_what_step_functions_refuses_is_refused(
    history: tuple[Any, Any], request_fields: dict[str, Any], code: str
) -> None:
    sfn, events = history
    grow(events, 5)
    with pytest.raises(ClientError) as refused:
        sfn.get_execution_history(executionArn=ARN, **request_fields)
    assert refused.value.response["Error"]["Code"] == code


def test_a_token_of_one_order_is_refused_in_the_other(history: tuple[Any, Any]) -> None:
    sfn, events = history
    grow(events, 5)
    token = sfn.get_execution_history(executionArn=ARN, maxResults=2)["nextToken"]
    with pytest.raises(ClientError) as refused:
        sfn.get_execution_history(executionArn=ARN, reverseOrder=True, nextToken=token)
    assert refused.value.response["Error"]["Code"] == "InvalidToken"


def test_the_live_views_reader_holds_the_history_and_reads_only_the_new_events(
    history: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    sfn, events = history
    grow(events, 120)
    histories = ExecutionHistories()
    assert [e["id"] for e in histories.events(sfn, ARN)] == list(range(1, 121))
    requests: list[dict[str, Any]] = []
    read = sfn.get_execution_history
    monkeypatch.setattr(sfn, "get_execution_history", lambda **request: requests.append(request) or read(**request))
    # A few events later: one call, newest first, and the history in order
    grow(events, 3)
    assert [e["id"] for e in histories.events(sfn, ARN)] == list(range(1, 124))
    assert requests == [{"executionArn": ARN, "reverseOrder": True, "maxResults": NEWEST_EVENTS_PAGE}]
    # More than a page later: it pages back until an event it holds
    requests.clear()
    grow(events, NEWEST_EVENTS_PAGE + 7)
    assert [e["id"] for e in histories.events(sfn, ARN)] == list(range(1, 124 + NEWEST_EVENTS_PAGE + 7))
    assert len(requests) == 2
    # Nothing new: one call, nothing added
    requests.clear()
    assert len(histories.events(sfn, ARN)) == 123 + NEWEST_EVENTS_PAGE + 7
    assert len(requests) == 1
