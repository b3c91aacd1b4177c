"""GetExecutionHistory as Step Functions pages it, where moto (5.2.5, pinned) returns every event at once.

The Step Functions API reference, GetExecutionHistory: `maxResults` is 0 to 1000, 0 meaning the
default of 100 events a page; `reverseOrder` lists the newest first; `nextToken` is returned while
more events follow and must be passed back unchanged (a token that is not one is InvalidToken,
HTTP 400). moto ignores all three: a client that forgot to page, or asked for the newest events
only, would pass here and break on AWS. This module makes the local service page as AWS does.
It also keeps a reader of the newest events cheap: moto serializes every event it returns, which a
long execution's full history makes the dearest call of a local run.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from moto.core.responses import ActionResult
from moto.stepfunctions.exceptions import InvalidToken, ValidationException
from moto.stepfunctions.responses import StepFunctionResponse

__all__ = ["DEFAULT_PAGE_SIZE", "MAX_PAGE_SIZE", "install"]

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


def _token(execution_arn: str, reverse: bool, start: int) -> str:
    document = json.dumps({"arn": execution_arn, "reverse": reverse, "start": start})
    return base64.urlsafe_b64encode(document.encode()).decode()


def _start(token: str | None, execution_arn: str, reverse: bool) -> int:
    """Where the page `token` names begins; InvalidToken for anything this service did not hand out
    for this execution and order."""
    if token is None:
        return 0
    try:
        document = json.loads(base64.urlsafe_b64decode(token.encode()))
        start = document["start"]
        valid = document["arn"] == execution_arn and document["reverse"] is reverse and isinstance(start, int)
    except (ValueError, TypeError, KeyError):
        valid = False
    if not valid or start < 0:
        raise InvalidToken(f"{token!r} is not a nextToken of this execution's history in this order")
    return int(start)


def _get_execution_history(self: StepFunctionResponse) -> ActionResult:
    execution_arn = self._get_param("executionArn")
    max_results = self._get_param("maxResults")
    if max_results is not None and not (isinstance(max_results, int) and 0 <= max_results <= MAX_PAGE_SIZE):
        raise ValidationException(
            f"1 validation error detected: Value '{max_results}' at 'maxResults' failed to satisfy constraint: "
            f"Member must have value between 0 and {MAX_PAGE_SIZE}"
        )
    size = max_results or DEFAULT_PAGE_SIZE
    reverse = bool(self._get_param("reverseOrder"))
    history = self.stepfunction_backend.get_execution_history(execution_arn)
    events: list[dict[str, Any]] = list(history["events"])
    if reverse:
        events.reverse()
    start = _start(self._get_param("nextToken"), execution_arn, reverse)
    page: dict[str, Any] = {"events": events[start : start + size]}
    if start + size < len(events):
        page["nextToken"] = _token(execution_arn, reverse, start + size)
    return ActionResult(page)


def install() -> None:
    """Page GetExecutionHistory (idempotent)."""
    StepFunctionResponse.get_execution_history = _get_execution_history  # type: ignore[method-assign]
