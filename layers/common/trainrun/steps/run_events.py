"""Run-state change events: what a run's operators (and their automation) hear about it.

At each of these moments a step publishes one event to the account's default EventBridge bus
(source `trainrun`, detail type `Run state changed`) and, when the run file names one
(`notify.sns_topic_arn`), sends the same detail to that SNS topic:

    started      Load run spec created the run record
    provisioned  the cluster reached CREATE_COMPLETE
    compiling    the compile job was first submitted
    training     the train job was first submitted (and again for each resubmission after an
                 infrastructure failure: trainrun.steps.resume; its detail names the attempt)
    budget_warning
                 a check found the estimated cost at 80% of budget.max_cost_usd (once a run;
                 at 100% the run ends failed with BudgetExceeded)
    no_progress  the train job printed many lines and none carried training progress (once a
                 job; the progress function, trainrun.steps.progress; its detail names the
                 formats trainrun reads and workload.progress_pattern)
    succeeded, failed, rejected, cancelled
                 the final status was recorded (by the first FinishRun that wrote it)
    torn_down    teardown left nothing behind, and the run has ended

`torn_down` comes after the final status, from whichever step makes the second of the two
true: FinishRun when the run's own teardown came first (success, failure), the teardown when
it came after (the safety net behind a rejected or stopped run, the janitor).

Each event is published by the call whose write changed the run record (a conditional write,
or a state the record did not hold before), so a replayed step does not publish it again.
Delivery is at least once all the same (EventBridge and SNS deliver at least once, and two
concurrent attempts can both see the change): consumers de-duplicate on (run_id, state).

Notifications are a side channel: one that cannot be sent is logged, counted
(NotificationsFailed) and never fails or stops the run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict

from trainrun.metrics import Metric
from trainrun.model.findings import Severity
from trainrun.model.jobs import JobKind
from trainrun.model.run_record import RunRecord, RunStatus, utcnow

logger = logging.getLogger(__name__)

SOURCE = "trainrun"
DETAIL_TYPE = "Run state changed"
MAX_DETAIL_CHARS = 1000
"""A detail is a line for a person (an error, the step reached), not the whole log tail."""


class RunState(StrEnum):
    STARTED = "started"
    PROVISIONED = "provisioned"
    COMPILING = "compiling"
    TRAINING = "training"
    BUDGET_WARNING = "budget_warning"
    NO_PROGRESS = "no_progress"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    TORN_DOWN = "torn_down"


JOB_STATES: dict[JobKind, RunState] = {"compile": RunState.COMPILING, "train": RunState.TRAINING}
ENDED_STATES = {
    RunStatus.SUCCEEDED: RunState.SUCCEEDED,
    RunStatus.FAILED: RunState.FAILED,
    RunStatus.REJECTED: RunState.REJECTED,
    RunStatus.CANCELLED: RunState.CANCELLED,
}
COUNTED_STATES = {
    RunState.STARTED: Metric.RUNS_STARTED,
    RunState.SUCCEEDED: Metric.RUNS_SUCCEEDED,
    RunState.FAILED: Metric.RUNS_FAILED,
    RunState.REJECTED: Metric.RUNS_REJECTED,
    RunState.CANCELLED: Metric.RUNS_CANCELLED,
}


class RunEvent(BaseModel):
    """The event's detail, and the SNS message."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    name: str | None
    state: RunState
    stack: str
    execution_arn: str | None
    time: datetime
    detail: str

    @property
    def subject(self) -> str:
        # SNS subjects are at most 100 printable ASCII characters; run names and ids are.
        return f"trainrun {self.name or self.run_id}: {self.state}"[:100]


class RunEvents:
    """Publishes a run's state changes: built by the handler, called by the steps."""

    def __init__(
        self,
        events: Any,
        sns: Callable[[str], Any],
        *,
        stack: str,
        metrics: Any,
        now: Callable[[], datetime] = utcnow,
    ):
        """`sns` gives an SNS client for a region: a topic is published to in its own region."""
        self._events = events
        self._sns = sns
        self._stack = stack
        self._metrics = metrics
        self._now = now

    def publish(self, record: RunRecord, state: RunState, detail: str = "") -> RunEvent:
        """Announce the run's new state on the default bus, and to its topic if it names one;
        count it if it starts or ends a run. Never raises for an event that cannot be sent."""
        event = RunEvent(
            run_id=record.run_id,
            name=record.name,
            state=state,
            stack=self._stack,
            execution_arn=record.execution_arn,
            time=self._now(),
            detail=_shortened(detail),
        )
        logger.info("run state changed", extra={"run_event": event.model_dump(mode="json")})
        if state in COUNTED_STATES:
            self._metrics.add_metric(name=COUNTED_STATES[state], unit="Count", value=1)
        self._put_event(event)
        topic = notification_topic(record)
        if topic is not None:
            self._notify(topic, event)
        return event

    def _put_event(self, event: RunEvent) -> None:
        entry = {
            "Source": SOURCE,
            "DetailType": DETAIL_TYPE,
            "Detail": event.model_dump_json(),
            "Resources": [event.execution_arn] if event.execution_arn else [],
        }
        try:
            response = self._events.put_events(Entries=[entry])
        except (ClientError, BotoCoreError) as exc:
            self._not_sent(event, "EventBridge", str(exc))
            return
        if response.get("FailedEntryCount"):
            (failed,) = response["Entries"]
            self._not_sent(event, "EventBridge", f"{failed.get('ErrorCode')}: {failed.get('ErrorMessage')}")

    def _notify(self, topic: str, event: RunEvent) -> None:
        request: dict[str, Any] = {
            "TopicArn": topic,
            "Subject": event.subject,
            "Message": event.model_dump_json(),
            # Lets a subscription's filter policy pick states (say, only failed and rejected).
            "MessageAttributes": {"state": {"DataType": "String", "StringValue": event.state.value}},
        }
        if topic.endswith(".fifo"):
            # A FIFO topic needs a group, and de-duplicates on the id for five minutes.
            request["MessageGroupId"] = event.run_id
            request["MessageDeduplicationId"] = f"{event.run_id}-{event.state}"
        try:
            self._sns(topic.split(":")[3]).publish(**request)
        except (ClientError, BotoCoreError) as exc:
            self._not_sent(event, topic, str(exc))

    def _not_sent(self, event: RunEvent, destination: str, reason: str) -> None:
        logger.warning(
            "run event not sent; the run goes on",
            extra={"destination": destination, "reason": reason, "run_event": event.model_dump(mode="json")},
        )
        self._metrics.add_metric(name=Metric.NOTIFICATIONS_FAILED, unit="Count", value=1)


def notification_topic(record: RunRecord) -> str | None:
    """The SNS topic the run file names under `notify`, once Load run spec has recorded it."""
    return record.spec.notify.sns_topic_arn if record.spec is not None else None


def outcome_detail(record: RunRecord) -> str:
    """What a person reads first about an ended run: why it was rejected, the error it failed
    with, or how far training got."""
    if record.status == RunStatus.REJECTED:
        errors = [f"{f.code}: {f.message}" for f in record.findings if f.severity == Severity.ERROR]
        if errors:
            return "; ".join(errors)
    if record.error is not None:
        return record.error.message
    if record.progress_train is not None and record.progress_train.step is not None:
        return f"training reached step {record.progress_train.step}"
    return ""


def _shortened(text: str) -> str:
    return text if len(text) <= MAX_DETAIL_CHARS else text[: MAX_DETAIL_CHARS - 1] + "…"
