"""Run starts that never became runs: the stack's undelivered-runs queue, read without consuming it.

Three services put a run start there instead of dropping it (template.yaml, UndeliveredRunsQueue):
- EventBridge, an upload event it could not deliver to Start run after the rule target's retries:
  the event is the body, RULE_ARN, ERROR_CODE and ERROR_MESSAGE are attributes (EventBridge User
  Guide, "Using dead-letter queues to process undelivered events");
- EventBridge Scheduler, a schedule occurrence it could not deliver: the schedule's input is the
  body, ERROR_CODE and ERROR_MESSAGE attributes (EventBridge Scheduler User Guide, "Configuring a
  dead-letter queue");
- Lambda, an invocation of Start run that failed after its retries: the invocation record, with
  the event (requestPayload) and the error (responsePayload) (Lambda developer guide, "Capturing
  records of Lambda asynchronous invocations").
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from trainrun.ops.stack import Stack

QUEUE_OUTPUT = "UndeliveredRunsQueueUrl"
# ReceiveMessage gives at most 10 messages a call; the count says how many more wait.
_MOST_SHOWN = 10


class UndeliveredRun(BaseModel):
    """One run start that was not delivered."""

    trigger: str  # "upload" or "schedule"
    run_file: str | None  # s3://bucket/key, when the message names it
    occurrence: str | None  # a schedule's scheduled time
    by: str  # who gave up: "EventBridge", "EventBridge Scheduler" or "Lambda"
    error: str
    error_message: str
    failed_at: datetime


class Undelivered(BaseModel):
    count: int  # ApproximateNumberOfMessages: every undelivered start in the queue
    shown: list[UndeliveredRun]


def undelivered_runs(stack: Stack) -> Undelivered | None:
    """What waits in the queue, newest first; None for a stack without the queue (deployed before it).

    Peeked at, never consumed: received with a visibility timeout of 0, each message stays
    visible (and in the queue, for 14 days) for the next look and for whoever redrives it."""
    url = stack.outputs.get(QUEUE_OUTPUT)
    if url is None:
        return None
    sqs = stack.client("sqs")
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    count = int(attributes["Attributes"]["ApproximateNumberOfMessages"])
    if count == 0:
        return Undelivered(count=0, shown=[])
    # A long poll (1 s) asks every SQS server, where a short one samples some.
    messages = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=_MOST_SHOWN,
        VisibilityTimeout=0,
        WaitTimeSeconds=1,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["SentTimestamp"],
    ).get("Messages", [])
    shown = sorted((undelivered_run(message) for message in messages), key=lambda run: run.failed_at, reverse=True)
    return Undelivered(count=max(count, len(shown)), shown=shown)


def undelivered_run(message: dict[str, Any]) -> UndeliveredRun:
    """What one message of the queue says: which run file, from which trigger, and why."""
    attributes = {name: value.get("StringValue", "") for name, value in message.get("MessageAttributes", {}).items()}
    sent = datetime.fromtimestamp(int(message.get("Attributes", {}).get("SentTimestamp", "0")) / 1000, UTC)
    body = _json(message.get("Body", ""))
    if isinstance(body, dict) and "requestContext" in body and "requestPayload" in body:
        payload = body.get("responsePayload")
        response: dict[str, Any] = payload if isinstance(payload, dict) else {}
        return UndeliveredRun(
            **_start(body["requestPayload"]),
            by="Lambda",
            error=str(response.get("errorType") or body.get("requestContext", {}).get("condition", "")),
            error_message=str(response.get("errorMessage", "")),
            failed_at=_timestamp(body.get("timestamp")) or sent,
        )
    return UndeliveredRun(
        **_start(body),
        by="EventBridge" if "RULE_ARN" in attributes else "EventBridge Scheduler",
        error=attributes.get("ERROR_CODE", ""),
        error_message=attributes.get("ERROR_MESSAGE", ""),
        failed_at=sent,
    )


def _start(event: Any) -> dict[str, Any]:
    """The trigger and run file of a start event: an S3 Object Created event or a schedule's input."""
    if isinstance(event, dict) and "detail-type" in event:
        detail = event.get("detail", {})
        bucket, key = detail.get("bucket", {}).get("name"), detail.get("object", {}).get("key")
        return {"trigger": "upload", "run_file": f"s3://{bucket}/{key}" if bucket and key else None, "occurrence": None}
    if isinstance(event, dict) and "run_file" in event:
        return {"trigger": "schedule", "run_file": str(event["run_file"]), "occurrence": event.get("scheduled_time")}
    return {"trigger": "unknown", "run_file": None, "occurrence": None}


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _timestamp(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
