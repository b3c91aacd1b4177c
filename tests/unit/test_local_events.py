"""The local EventBridge's dead-letter queues (trainrun.local.events): as strict as EventBridge."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from trainrun.local import events

REGION, ACCOUNT = "us-west-2", "123456789012"
GONE = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:no-longer-there"
EVENT = {"Source": "test", "DetailType": "Object Created", "Detail": json.dumps({"key": "runs/x.yaml"})}


@pytest.fixture
def rule(aws: None) -> dict[str, Any]:
    """A rule whose function target no longer exists, with a dead-letter queue."""
    events.install()
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(QueueName="dead-letters")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    bridge = boto3.client("events", region_name=REGION)
    rule_arn = bridge.put_rule(Name="uploads", EventPattern=json.dumps({"source": ["test"]}))["RuleArn"]
    target = {"Id": "start", "Arn": GONE, "DeadLetterConfig": {"Arn": queue_arn}}
    bridge.put_targets(Rule="uploads", Targets=[target])
    return {"sqs": sqs, "url": url, "queue_arn": queue_arn, "rule_arn": rule_arn, "events": bridge}


def let_eventbridge_send(rule: dict[str, Any], source_arn: str) -> None:
    statement = {
        "Effect": "Allow",
        "Principal": {"Service": "events.amazonaws.com"},
        "Action": "sqs:SendMessage",
        "Resource": rule["queue_arn"],
        "Condition": {"ArnEquals": {"aws:SourceArn": source_arn}},
    }
    policy = json.dumps({"Version": "2012-10-17", "Statement": [statement]})
    rule["sqs"].set_queue_attributes(QueueUrl=rule["url"], Attributes={"Policy": policy})


def dead_letters(rule: dict[str, Any]) -> list[dict[str, Any]]:
    answer = rule["sqs"].receive_message(QueueUrl=rule["url"], MaxNumberOfMessages=10, MessageAttributeNames=["All"])
    return list(answer.get("Messages", []))


def test_an_event_for_a_function_that_no_longer_exists_goes_to_the_dead_letter_queue(rule: dict[str, Any]) -> None:
    # Given a queue whose policy lets EventBridge send for this rule
    let_eventbridge_send(rule, rule["rule_arn"])
    # When an event matches the rule
    rule["events"].put_events(Entries=[EVENT])
    # Then the event is in the queue at once (not retried), with EventBridge's attributes
    (message,) = dead_letters(rule)
    attributes = {name: value["StringValue"] for name, value in message["MessageAttributes"].items()}
    assert attributes["RULE_ARN"] == rule["rule_arn"]
    assert attributes["TARGET_ARN"] == GONE
    assert attributes["ERROR_CODE"] == "NO_RESOURCE"
    assert json.loads(message["Body"])["detail"] == {"key": "runs/x.yaml"}


@pytest.mark.parametrize("policy_for", [None, "arn:aws:events:us-west-2:123456789012:rule/another-rule"])
def test_the_event_is_lost_when_the_queue_policy_does_not_let_eventbridge_send_for_the_rule(
    rule: dict[str, Any], policy_for: str | None
) -> None:
    # Given a queue with no policy, or one for another rule
    if policy_for is not None:
        let_eventbridge_send(rule, policy_for)
    # When an event matches the rule
    rule["events"].put_events(Entries=[EVENT])
    # Then EventBridge may not send it there: it is lost, as without a queue
    assert dead_letters(rule) == []
