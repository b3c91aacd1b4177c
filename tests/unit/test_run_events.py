"""Run-state events: what is published, where, what is counted, and which step publishes each state once."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_lambda_powertools import Metrics
from botocore.exceptions import ClientError, EndpointConnectionError

from trainrun.adapters.pcluster import Ec2Instance
from trainrun.errors import RunSpecInvalid
from trainrun.metrics import Dimension, Metric, for_stack
from trainrun.model.findings import Code, Finding, Severity
from trainrun.model.jobs import JobProgress, JobRecord
from trainrun.model.resources import ClusterRef
from trainrun.model.run_file import parse_run_file
from trainrun.model.run_record import RunError, RunFileRef, RunRecord, RunStatus, RunStore
from trainrun.steps.head_node import SubmitRequest, submit_job
from trainrun.steps.janitor import SweepReport, count_leftovers
from trainrun.steps.provisioning import TeardownInput
from trainrun.steps.run import FinishRunInput, finish_run, load_run_spec
from trainrun.steps.run_events import (
    COUNTED_STATES,
    DETAIL_TYPE,
    MAX_DETAIL_CHARS,
    SOURCE,
    RunEvents,
    RunState,
    outcome_detail,
)

from .conftest import EXAMPLE_ALLOW_LISTS, REGION, RecordedMetrics
from .test_job_steps import FakeSsm, no_sleep, success
from .test_provisioning import (
    CLUSTER,
    RUN,
    FakePclusterApi,
    cluster_ids,
    cluster_step,
    given_run,
    teardown_step,
    until_done,
)
from .test_steps import INVALID_RUN_FILE, SINGLE_NODE, request_for, upload

ROOT = Path(__file__).resolve().parents[2]
STACK = "trainrun-test"
RUN_ID = "single-node-0123456789ab"
EXECUTION_ARN = f"arn:aws:states:{REGION}:123456789012:execution:trainrun-run:{RUN_ID}"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TOPIC_NAME = "trainrun-runs"


# --- fakes and helpers ----------------------------------------------------------------------------


@dataclass
class CapturedBus:
    """EventBridge's PutEvents, keeping the entries it was given; `answer` makes it fail."""

    answer: Callable[[], dict[str, Any]] = lambda: {"FailedEntryCount": 0, "Entries": [{"EventId": "e-1"}]}
    entries: list[dict[str, Any]] = field(default_factory=list)

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.entries += Entries
        return self.answer()

    @property
    def details(self) -> list[dict[str, Any]]:
        return [json.loads(entry["Detail"]) for entry in self.entries]

    @property
    def states(self) -> list[str]:
        return [detail["state"] for detail in self.details]


def no_topic(region: str) -> Any:
    raise AssertionError(f"no SNS client should be needed (asked for {region})")


def publisher(bus: Any, sns: Callable[[str], Any] = no_topic, metrics: Any = None) -> RunEvents:
    return RunEvents(
        bus, sns, stack=STACK, metrics=metrics if metrics is not None else RecordedMetrics(), now=lambda: NOW
    )


def record(topic: str | None = None, **fields: Any) -> RunRecord:
    """The single-node example's run record, after Load run spec; notifying `topic` if given."""
    spec = parse_run_file((ROOT / "examples" / "single-node.yaml").read_text())
    if topic is not None:
        spec = spec.model_copy(update={"notify": spec.notify.model_copy(update={"sns_topic_arn": topic})})
    return RunRecord(
        run_id=RUN_ID,
        run_file=RunFileRef(bucket="trainrun-config-test", key="runs/single-node.yaml"),
        execution_arn=EXECUTION_ARN,
        name=spec.name,
        spec=spec,
        created_at=NOW,
        updated_at=NOW,
        **fields,
    )


def sqs_queue(region: str = REGION) -> tuple[Any, str, str]:
    sqs = boto3.client("sqs", region_name=region)
    url = sqs.create_queue(QueueName="listener")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return sqs, url, arn


def received(sqs: Any, url: str) -> list[dict[str, Any]]:
    return [json.loads(m["Body"]) for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]]


def subscribed_topic(region: str = REGION) -> tuple[str, Any, str]:
    """An SNS topic with a queue subscribed to it: (topic ARN, SQS client, queue URL)."""
    sqs, url, queue_arn = sqs_queue(region)
    sns = boto3.client("sns", region_name=region)
    topic = sns.create_topic(Name=TOPIC_NAME)["TopicArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    return topic, sqs, url


def sns_in(region: str) -> Any:
    return boto3.client("sns", region_name=region)


# --- the publisher ----------------------------------------------------------------------------


def test_an_event_reaches_a_rule_on_the_default_bus_with_the_runs_detail(aws: None) -> None:
    # Given a rule on the default bus for trainrun's events, delivering to a queue
    sqs, url, queue_arn = sqs_queue()
    events = boto3.client("events", region_name=REGION)
    events.put_rule(Name="runs", EventPattern=json.dumps({"source": [SOURCE], "detail-type": [DETAIL_TYPE]}))
    events.put_targets(Rule="runs", Targets=[{"Id": "queue", "Arn": queue_arn}])
    # When a run's start is published
    publisher(events).publish(record(), RunState.STARTED, "run file s3://trainrun-config-test/runs/single-node.yaml")
    # Then the rule delivers it, with the run's detail
    [event] = received(sqs, url)
    assert (event["source"], event["detail-type"], event["resources"]) == (SOURCE, DETAIL_TYPE, [EXECUTION_ARN])
    assert event["detail"] == {
        "run_id": RUN_ID,
        "name": "single-node",
        "state": "started",
        "stack": STACK,
        "execution_arn": EXECUTION_ARN,
        "time": NOW.isoformat().replace("+00:00", "Z"),
        "detail": "run file s3://trainrun-config-test/runs/single-node.yaml",
    }


def test_without_notify_only_the_bus_hears_of_the_run() -> None:
    # Given a run file without a notify section (no_topic fails the test if SNS is reached)
    bus = CapturedBus()
    # When its state changes
    publisher(bus).publish(record(), RunState.PROVISIONED, "cluster ready")
    # Then the event went to the bus only
    assert bus.states == ["provisioned"]


def test_with_notify_the_topic_gets_the_same_detail_with_a_short_subject(aws: None) -> None:
    # Given a run file naming a topic that a queue subscribes to
    topic, sqs, url = subscribed_topic()
    bus = CapturedBus()
    # When the run fails
    publisher(bus, sns_in).publish(record(topic), RunState.FAILED, "JobFailed: exit code 1")
    # Then the topic got the bus event's detail as its message, a subject, and the state to filter on
    [notification] = received(sqs, url)
    assert json.loads(notification["Message"]) == bus.details[0]
    assert notification["Subject"] == "trainrun single-node: failed"
    assert notification["MessageAttributes"]["state"] == {"Type": "String", "Value": "failed"}


def test_a_topic_is_published_to_in_its_own_region(aws: None) -> None:
    # Given a topic in another region than the stack's
    topic, sqs, url = subscribed_topic("eu-west-1")
    regions: list[str] = []

    def sns(region: str) -> Any:
        regions.append(region)
        return sns_in(region)

    # When a run naming it starts
    publisher(CapturedBus(), sns).publish(record(topic), RunState.STARTED)
    # Then it was reached in its region, and its subscriber heard
    assert regions == ["eu-west-1"]
    assert json.loads(received(sqs, url)[0]["Message"])["state"] == "started"


@dataclass
class CapturedSns:
    requests: list[dict[str, Any]] = field(default_factory=list)

    def publish(self, **request: Any) -> dict[str, Any]:
        self.requests.append(request)
        return {"MessageId": "m-1"}


def test_a_fifo_topic_groups_by_run_and_deduplicates_on_run_and_state() -> None:
    sns = CapturedSns()
    publisher(CapturedBus(), lambda region: sns).publish(
        record(f"arn:aws:sns:{REGION}:123456789012:runs.fifo"), RunState.TRAINING
    )
    [request] = sns.requests
    assert (request["MessageGroupId"], request["MessageDeduplicationId"]) == (RUN_ID, f"{RUN_ID}-training")


def test_a_notification_that_cannot_be_sent_is_logged_and_counted_and_the_run_goes_on(
    aws: None, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a run file naming a topic that does not exist
    missing = f"arn:aws:sns:{REGION}:123456789012:nobody-home"
    bus, metrics = CapturedBus(), RecordedMetrics()
    # When the run succeeds
    with caplog.at_level(logging.WARNING, logger="trainrun.steps.run_events"):
        event = publisher(bus, sns_in, metrics).publish(record(missing), RunState.SUCCEEDED)
    # Then publishing returned (nothing raised), the bus still heard, and the failure is logged and counted
    assert event.state == RunState.SUCCEEDED and bus.states == ["succeeded"]
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert getattr(warning, "destination") == missing  # noqa: B009 - set through `extra`
    assert metrics.emitted == [(Metric.RUNS_SUCCEEDED, 1), (Metric.NOTIFICATIONS_FAILED, 1)]


def refused() -> dict[str, Any]:
    return {"FailedEntryCount": 1, "Entries": [{"ErrorCode": "InternalFailure", "ErrorMessage": "try again"}]}


def unreachable() -> dict[str, Any]:
    raise EndpointConnectionError(endpoint_url="https://events.us-west-2.amazonaws.com")


def denied() -> dict[str, Any]:
    raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "PutEvents")


@pytest.mark.parametrize("answer", [refused, unreachable, denied])
def test_an_event_the_bus_does_not_take_is_counted_and_the_run_goes_on(answer: Callable[[], Any]) -> None:
    metrics = RecordedMetrics()
    publisher(CapturedBus(answer), metrics=metrics).publish(record(), RunState.TORN_DOWN)
    assert metrics.emitted == [(Metric.NOTIFICATIONS_FAILED, 1)]


@pytest.mark.parametrize("state", list(RunState))
def test_runs_are_counted_when_they_start_and_when_they_end(state: RunState) -> None:
    metrics = RecordedMetrics()
    publisher(CapturedBus(), metrics=metrics).publish(record(), state)
    expected = {
        RunState.STARTED: [(Metric.RUNS_STARTED, 1)],
        RunState.SUCCEEDED: [(Metric.RUNS_SUCCEEDED, 1)],
        RunState.FAILED: [(Metric.RUNS_FAILED, 1)],
        RunState.REJECTED: [(Metric.RUNS_REJECTED, 1)],
        RunState.CANCELLED: [(Metric.RUNS_CANCELLED, 1)],
    }
    assert metrics.emitted == expected.get(state, [])


@pytest.fixture
def powertools_metrics() -> Iterator[Metrics]:
    """Powertools' Metrics, whose metric set and default dimensions are shared: empty before and after."""
    metrics = Metrics(namespace="Trainrun", service="trainrun")
    metrics.clear_default_dimensions()
    metrics.clear_metrics()
    yield metrics
    metrics.clear_default_dimensions()
    metrics.clear_metrics()


def test_the_counts_reach_cloudwatch_as_emf_with_the_stack_dimension(
    powertools_metrics: Metrics, capsys: pytest.CaptureFixture[str]
) -> None:
    # When a run starts, published with the handler's metrics
    publisher(CapturedBus(), metrics=for_stack(powertools_metrics, STACK)).publish(record(), RunState.STARTED)
    powertools_metrics.flush_metrics()
    # Then one EMF blob counts it, dimensioned by the stack (and the service, as Powertools does)
    [blob] = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    [directive] = blob["_aws"]["CloudWatchMetrics"]
    assert set(directive["Dimensions"][0]) == {Dimension.STACK, Dimension.SERVICE}
    assert directive["Metrics"] == [{"Name": Metric.RUNS_STARTED, "Unit": "Count"}]
    assert (blob[Dimension.STACK], blob[Metric.RUNS_STARTED]) == (STACK, [1.0])


def test_a_long_detail_is_shortened_to_a_line_for_a_person() -> None:
    bus = CapturedBus()
    publisher(bus).publish(record(), RunState.FAILED, "x" * 5000)
    assert len(bus.details[0]["detail"]) == MAX_DETAIL_CHARS and bus.details[0]["detail"].endswith("…")


def test_every_counted_state_names_a_run_metric() -> None:
    assert set(COUNTED_STATES.values()) == {
        Metric.RUNS_STARTED,
        Metric.RUNS_SUCCEEDED,
        Metric.RUNS_FAILED,
        Metric.RUNS_REJECTED,
        Metric.RUNS_CANCELLED,
    }


# --- what an ended run's event says ---------------------------------------------------------------


def test_a_rejected_runs_detail_is_its_error_findings() -> None:
    findings = [
        Finding(code=Code.INSUFFICIENT_CAPACITY, severity=Severity.ERROR, message="8 of 16 instances available"),
        Finding(code=Code.TARGETED_RESERVATION, severity=Severity.INFO, message="targeted"),
    ]
    rejected = record(status=RunStatus.REJECTED, findings=findings)
    assert outcome_detail(rejected) == "INSUFFICIENT_CAPACITY: 8 of 16 instances available"


def test_a_failed_runs_detail_is_its_error_with_the_message_out_of_the_lambda_cause() -> None:
    cause = json.dumps({"errorMessage": "the train job 7 ended FAILED", "errorType": "JobFailed", "stackTrace": []})
    failed = record(status=RunStatus.FAILED, error=RunError(error="JobFailed", cause=cause))
    assert outcome_detail(failed) == "JobFailed: the train job 7 ended FAILED"


def test_a_succeeded_runs_detail_is_the_step_training_reached() -> None:
    succeeded = record(status=RunStatus.SUCCEEDED, progress_train=JobProgress(step=40))
    assert outcome_detail(succeeded) == "training reached step 40"


# --- which step publishes which state, once ------------------------------------------------------


def test_load_run_spec_announces_the_run_once_with_its_name(s3: Any, config_bucket: str, store: RunStore) -> None:
    bus = CapturedBus()
    request = request_for(upload(s3, config_bucket, SINGLE_NODE))
    # When Load run spec runs, and is replayed
    for _ in range(2):
        load_run_spec(
            s3, store, request, job_heartbeat_seconds=600, allowed=EXAMPLE_ALLOW_LISTS, run_events=publisher(bus)
        )
    # Then the run was announced once, with its name and run file
    assert bus.states == ["started"]
    assert bus.details[0]["name"] == "single-node"
    assert bus.details[0]["detail"] == f"run file {request.run_file.uri}"


def test_a_bad_run_file_is_announced_before_its_rejection(s3: Any, config_bucket: str, store: RunStore) -> None:
    bus = CapturedBus()
    with pytest.raises(RunSpecInvalid):
        load_run_spec(
            s3,
            store,
            request_for(upload(s3, config_bucket, INVALID_RUN_FILE)),
            job_heartbeat_seconds=600,
            allowed=EXAMPLE_ALLOW_LISTS,
            run_events=publisher(bus),
        )
    # The run has no name (its file is invalid), but it started
    assert bus.states == ["started"] and bus.details[0]["name"] is None


def loaded(s3: Any, bucket: str, store: RunStore) -> None:
    load_run_spec(
        s3,
        store,
        request_for(upload(s3, bucket, SINGLE_NODE)),
        job_heartbeat_seconds=600,
        allowed=EXAMPLE_ALLOW_LISTS,
        run_events=publisher(CapturedBus()),
    )


def test_finish_run_announces_the_outcome_once_and_then_that_nothing_is_left(
    s3: Any, config_bucket: str, store: RunStore
) -> None:
    # Given a run whose own teardown finished (it comes before the final status)
    loaded(s3, config_bucket, store)
    store.mark_torn_down(RUN_ID)
    bus = CapturedBus()
    # When FinishRun records success, and a late duplicate records failure
    finish_run(store, FinishRunInput(run_id=RUN_ID, outcome="SUCCEEDED"), run_events=publisher(bus))
    failure = FinishRunInput.model_validate(
        {"run_id": RUN_ID, "outcome": "FAILED", "state": {"error": {"Error": "States.TaskFailed", "Cause": "late"}}}
    )
    finish_run(store, failure, run_events=publisher(bus))
    # Then success was announced once, and then that the run was torn down
    assert bus.states == ["succeeded", "torn_down"]


CANCEL = RunError(error="Cancelled", cause="cancelled by ops with `trainrun cancel` at 2026-03-01 12:05:00 UTC")
# What the teardown workflow's Record failure gives FinishRun after a stopped execution.
STOPPED = FinishRunInput.model_validate(
    {"run_id": RUN_ID, "outcome": "FAILED", "state": {"error": {"Error": "ABORTED", "Cause": "safety net"}}}
)


def test_a_run_whose_cancel_was_requested_ends_cancelled_announced_and_counted_once(
    s3: Any, config_bucket: str, store: RunStore
) -> None:
    # Given a run that `trainrun cancel` asked to stop, and that its safety net then tore down
    loaded(s3, config_bucket, store)
    assert store.request_cancel(RUN_ID, CANCEL)
    store.mark_torn_down(RUN_ID)
    bus, metrics = CapturedBus(), RecordedMetrics()
    # When FinishRun records the stopped execution's failure, and a replay does it again
    outputs = [finish_run(store, STOPPED, run_events=publisher(bus, metrics=metrics)) for _ in range(2)]
    # Then the run is CANCELLED with the cancel's error, not FAILED with the stop's
    assert [(output.status, output.recorded) for output in outputs] == [
        (RunStatus.CANCELLED, True),
        (RunStatus.CANCELLED, False),
    ]
    ended = store.get(RUN_ID)
    assert ended is not None and (ended.status, ended.error) == (RunStatus.CANCELLED, CANCEL)
    # And it was announced once as cancelled, then torn down, and counted as cancelled, not failed
    assert bus.states == ["cancelled", "torn_down"]
    assert bus.details[0]["detail"] == f"Cancelled: {CANCEL.cause}"
    assert metrics.emitted == [(Metric.RUNS_CANCELLED, 1)]


def test_a_run_that_succeeded_before_its_cancel_took_effect_stays_succeeded(
    s3: Any, config_bucket: str, store: RunStore
) -> None:
    loaded(s3, config_bucket, store)
    assert store.request_cancel(RUN_ID, CANCEL)
    succeeded = FinishRunInput(run_id=RUN_ID, outcome="SUCCEEDED")
    finished = finish_run(store, succeeded, run_events=publisher(CapturedBus()))
    assert (finished.status, finished.error) == (RunStatus.SUCCEEDED, None)


def test_a_cancel_of_an_ended_run_is_refused_and_changes_nothing(s3: Any, config_bucket: str, store: RunStore) -> None:
    loaded(s3, config_bucket, store)
    finish_run(store, STOPPED, run_events=publisher(CapturedBus()))
    assert not store.request_cancel(RUN_ID, CANCEL)
    ended = store.get(RUN_ID)
    assert ended is not None and (ended.status, ended.cancel_request) == (RunStatus.FAILED, None)


def test_a_second_cancel_keeps_the_first_ones_request(s3: Any, config_bucket: str, store: RunStore) -> None:
    loaded(s3, config_bucket, store)
    assert store.request_cancel(RUN_ID, CANCEL)
    assert store.request_cancel(RUN_ID, RunError(error="Cancelled", cause="cancelled by someone else"))
    running = store.get(RUN_ID)
    assert running is not None and (running.status, running.cancel_request) == (RunStatus.RUNNING, CANCEL)


def test_a_run_ended_before_its_teardown_is_announced_torn_down_by_the_teardown_once(
    ec2: Any, fsx: Any, store: RunStore
) -> None:
    # Given a rejected run (its safety net tears it down after the final status)
    given_run(store)
    bus = CapturedBus()
    finish_run(store, FinishRunInput(run_id=RUN, outcome="REJECTED"), run_events=publisher(bus))
    # When its teardown runs, and runs again
    rejected = TeardownInput.model_validate({"run_id": RUN, "state": {"error": {"Error": "REJECTED"}}})
    for _ in range(2):
        until_done(lambda: teardown_step(ec2, fsx, None, store, rejected, run_events=publisher(bus)))
    # Then it announced, once, that nothing is left
    assert bus.states == ["rejected", "torn_down"]


def test_a_teardown_before_the_end_leaves_the_announcement_to_finish_run(ec2: Any, fsx: Any, store: RunStore) -> None:
    # Given a running run whose teardown finishes
    given_run(store)
    bus = CapturedBus()
    until_done(lambda: teardown_step(ec2, fsx, None, store, run_events=publisher(bus)))
    # Then nothing was announced yet: the run has not ended
    assert bus.states == []
    # And FinishRun announces both, the outcome first
    finish_run(store, FinishRunInput(run_id=RUN, outcome="SUCCEEDED"), run_events=publisher(bus))
    assert bus.states == ["succeeded", "torn_down"]


def test_create_cluster_announces_the_run_provisioned_when_its_cluster_is_first_complete(store: RunStore) -> None:
    # Given a run whose cluster is being created
    api = FakePclusterApi()
    given_run(store)
    cluster_ids(store)
    bus = CapturedBus()
    cluster_step(api, store, run_events=publisher(bus))
    assert bus.states == []
    # When it completes, and the step is called again (a replay)
    api.set(CLUSTER, "CREATE_COMPLETE", headNode=Ec2Instance(instanceId="i-0123456789abcdef0"))
    cluster_step(api, store, run_events=publisher(bus))
    cluster_step(api, store, run_events=publisher(bus))
    # Then it was announced once
    assert bus.states == ["provisioned"]
    assert bus.details[0]["detail"] == f"cluster {CLUSTER} is ready (head node i-0123456789abcdef0)"


@pytest.fixture
def cluster_up(store: RunStore) -> RunStore:
    """The single-node run with its head node recorded."""
    store.create(record())
    store.set_cluster(RUN_ID, ClusterRef(name=f"trainrun-{RUN_ID}", region=REGION, head_node_instance_id="i-0abc"))
    return store


@pytest.mark.parametrize(("job", "state"), [("compile", "compiling"), ("train", "training")])
def test_a_job_is_announced_when_first_submitted_not_when_waited_for_again(
    cluster_up: RunStore, job: Any, state: str
) -> None:
    bus = CapturedBus()
    for token, existing in (("token-1", "false"), ("token-2", "true")):
        ssm = FakeSsm([success(f"TRAINRUN-SUBMITTED job={job} slurm_job_id=42 existing={existing}\n")])
        request = SubmitRequest(run_id=RUN_ID, job=job, task_token=token)
        submit_job(
            ssm,
            cluster_up,
            request,
            sfn=None,
            run_events=publisher(bus),
            config_bucket="trainrun-config-test",
            sleep=no_sleep,
        )
    assert bus.states == [state]
    assert bus.details[0]["detail"] == "Slurm job 42"


def test_a_job_whose_first_attempt_crashed_before_recording_it_is_announced(cluster_up: RunStore) -> None:
    # Given a token kept by an attempt that never recorded its submission
    cluster_up.set_job(RUN_ID, "train", JobRecord(task_token="token-1"))
    bus = CapturedBus()
    ssm = FakeSsm([success("TRAINRUN-SUBMITTED job=train slurm_job_id=42 existing=true\n")])
    submit_job(
        ssm,
        cluster_up,
        SubmitRequest(run_id=RUN_ID, job="train", task_token="token-1"),
        sfn=None,
        run_events=publisher(bus),
        config_bucket="trainrun-config-test",
        sleep=no_sleep,
    )
    assert bus.states == ["training"]


# --- the janitor's count ---------------------------------------------------------------------------


@pytest.mark.parametrize("leftovers", [0, 2])
def test_the_janitor_counts_the_runs_it_started_a_teardown_for_zero_included(leftovers: int) -> None:
    metrics = RecordedMetrics()
    report = SweepReport(torn_down={f"run-{i}": "no run record knows this run" for i in range(leftovers)})
    count_leftovers(metrics, report)
    assert metrics.emitted == [(Metric.LEFTOVER_RUNS, leftovers)]
