"""Run-state events and the operator views on the local stack.

A rule on the default event bus with an SQS target, and an SNS topic with an SQS subscription
named in the run file, hear a run's state changes as a consumer in the account would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainrun.local.fixture import AccountFixture
from trainrun.local.runtime import LocalRuntime
from trainrun.local.template_deployer import ACCOUNT_ID
from trainrun.steps.run_events import DETAIL_TYPE, SOURCE, RunState

from .conftest import EXAMPLES, fixture_with, run_to_end
from .scripted_head_node import ScriptedCluster

SUCCESS = [
    RunState.STARTED,
    RunState.PROVISIONED,
    RunState.COMPILING,
    RunState.TRAINING,
    RunState.SUCCEEDED,
    RunState.TORN_DOWN,
]


TOPIC_NAME = "trainrun-runs"


@pytest.fixture
def runtime(account: AccountFixture, cluster: ScriptedCluster) -> Iterator[LocalRuntime]:
    """The local stack with the test's topic among those runs may notify (RunTopicArns)."""
    topic = f"arn:aws:sns:{account.region}:{ACCOUNT_ID}:{TOPIC_NAME}"
    with LocalRuntime(account, head_node_factory=cluster, parameters={"RunTopicArns": topic}) as local:
        yield local


def queue(runtime: LocalRuntime, name: str) -> tuple[str, str]:
    sqs = runtime.client("sqs")
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return url, arn


def rule_on_the_default_bus(runtime: LocalRuntime) -> str:
    """A consumer's rule for trainrun's run events, delivering to a queue; returns the queue's URL."""
    url, arn = queue(runtime, "run-events")
    events = runtime.client("events")
    events.put_rule(Name="run-events", EventPattern=json.dumps({"source": [SOURCE], "detail-type": [DETAIL_TYPE]}))
    events.put_targets(Rule="run-events", Targets=[{"Id": "queue", "Arn": arn}])
    return url


def topic_with_a_subscriber(runtime: LocalRuntime) -> tuple[str, str]:
    """An SNS topic with a queue subscribed to it: (topic ARN, queue URL)."""
    url, arn = queue(runtime, "run-notifications")
    sns = runtime.client("sns")
    topic = sns.create_topic(Name=TOPIC_NAME)["TopicArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
    return topic, url


def messages(runtime: LocalRuntime, url: str) -> list[dict[str, Any]]:
    sqs = runtime.client("sqs")
    bodies: list[dict[str, Any]] = []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        bodies += [json.loads(message["Body"]) for message in batch]
        sqs.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)]
        )
    return bodies


def in_publication_order(details: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # A standard queue does not keep order; the events' own time does.
    return sorted(details, key=lambda detail: datetime.fromisoformat(detail["time"]))


def single_node_notifying(topic: str) -> bytes:
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    document["notify"] = {"sns_topic_arn": topic}
    return yaml.safe_dump(document).encode()


def test_a_successful_run_is_heard_on_the_default_bus_and_its_topic_in_order(runtime: LocalRuntime) -> None:
    # Given a rule on the default bus, and a run file naming a topic with a subscriber
    bus_queue = rule_on_the_default_bus(runtime)
    topic, topic_queue = topic_with_a_subscriber(runtime)
    # When the run goes through to success
    started, summary = run_to_end(runtime, single_node_notifying(topic))
    assert summary.status == "SUCCEEDED", summary.error
    # Then the rule heard every state change once, in order, each naming the run
    events = messages(runtime, bus_queue)
    assert {(event["source"], event["detail-type"]) for event in events} == {(SOURCE, DETAIL_TYPE)}
    details = in_publication_order([event["detail"] for event in events])
    assert [detail["state"] for detail in details] == SUCCESS
    for detail in details:
        assert detail["run_id"] == started.run_id and detail["name"] == "single-node"
        assert detail["stack"] == runtime.deployed.name and detail["execution_arn"] == started.execution_arn
    assert details[-2]["detail"].startswith("training reached step ")
    # And the topic's subscriber got the same details, with a readable subject
    notifications = messages(runtime, topic_queue)
    assert in_publication_order([json.loads(n["Message"]) for n in notifications]) == details
    assert {n["Subject"] for n in notifications} == {f"trainrun single-node: {state}" for state in SUCCESS}


def test_run_events_start_nothing_the_stack_listens_for(runtime: LocalRuntime) -> None:
    # Given a run that succeeded (so no safety net ran), its events published on the default bus
    rule_on_the_default_bus(runtime)
    run_to_end(runtime, (EXAMPLES / "single-node.yaml").read_bytes())
    # Then neither the upload rule nor the status-change rule reacted to them: one run, no teardown
    sfn = runtime.client("stepfunctions")
    outputs = runtime.deployed.outputs
    assert len(sfn.list_executions(stateMachineArn=outputs["StateMachineArn"])["executions"]) == 1
    assert sfn.list_executions(stateMachineArn=outputs["TeardownStateMachineArn"])["executions"] == []


def test_a_rejected_run_is_heard_started_rejected_and_torn_down_by_its_safety_net(tmp_path: Path) -> None:
    # Given a reservation too small for the run
    with LocalRuntime(fixture_with(tmp_path, available_instance_count=8)) as runtime:
        bus_queue = rule_on_the_default_bus(runtime)
        # When the run is rejected (its execution fails, so the safety net tears it down)
        _, summary = run_to_end(runtime, (EXAMPLES / "bert-large-phase1.yaml").read_bytes())
        details = in_publication_order([event["detail"] for event in messages(runtime, bus_queue)])
    # Then the rejection says why, and the safety net's teardown is heard last
    assert summary.status == "REJECTED"
    assert [detail["state"] for detail in details] == [RunState.STARTED, RunState.REJECTED, RunState.TORN_DOWN]
    assert details[1]["detail"].startswith("INSUFFICIENT_CAPACITY: ")


def test_the_local_stack_deploys_the_dashboard_and_alarms_of_the_template(runtime: LocalRuntime) -> None:
    cloudwatch = runtime.client("cloudwatch")
    outputs = runtime.deployed.outputs
    names = [outputs["RunFailedAlarmName"], outputs["LeftoverRunsAlarmName"], outputs["UndeliveredRunsAlarmName"]]
    alarms = {alarm["AlarmName"]: alarm for alarm in cloudwatch.describe_alarms(AlarmNames=names)["MetricAlarms"]}
    # The dashboard, whose alarm widget shows the alarms deployed beside it
    body = json.loads(cloudwatch.get_dashboard(DashboardName=outputs["DashboardName"])["DashboardBody"])
    [alarm_widget] = [widget for widget in body["widgets"] if widget["type"] == "alarm"]
    assert alarm_widget["properties"]["alarms"] == [alarms[name]["AlarmArn"] for name in names]
    # The alarms, on the run state machine and the janitor's metric, without actions by default
    failed = alarms[outputs["RunFailedAlarmName"]]
    assert failed["Dimensions"] == [{"Name": "StateMachineArn", "Value": outputs["StateMachineArn"]}]
    assert (failed["Namespace"], failed["MetricName"], failed["AlarmActions"]) == ("AWS/States", "ExecutionsFailed", [])
    leftovers = alarms[outputs["LeftoverRunsAlarmName"]]
    assert {"Name": "Stack", "Value": runtime.deployed.name} in leftovers["Dimensions"]
    assert (leftovers["Namespace"], leftovers["MetricName"]) == ("Trainrun", "LeftoverRuns")
    # ... and on the first run start waiting in the undelivered-runs queue
    undelivered = alarms[outputs["UndeliveredRunsAlarmName"]]
    queue_name = outputs["UndeliveredRunsQueueArn"].rsplit(":", 1)[-1]
    assert undelivered["Dimensions"] == [{"Name": "QueueName", "Value": queue_name}]
    assert (undelivered["Namespace"], undelivered["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert (undelivered["ComparisonOperator"], undelivered["Threshold"]) == ("GreaterThanThreshold", 0.0)


def test_an_alarm_topic_becomes_the_alarms_action(tmp_path: Path) -> None:
    topic = f"arn:aws:sns:us-west-2:{ACCOUNT_ID}:oncall"
    with LocalRuntime(fixture_with(tmp_path), parameters={"AlarmTopicArn": topic}) as runtime:
        outputs = runtime.deployed.outputs
        names = [outputs["RunFailedAlarmName"], outputs["LeftoverRunsAlarmName"], outputs["UndeliveredRunsAlarmName"]]
        alarms = runtime.client("cloudwatch").describe_alarms(AlarmNames=names)["MetricAlarms"]
    assert [alarm["AlarmActions"] for alarm in alarms] == [[topic], [topic], [topic]]
