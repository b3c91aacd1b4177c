"""EventBridge in the local runtime, where moto stops short (moto 5.2.5, pinned).

- Rules deliver to Lambda functions and Step Functions state machines (moto raises
  NotImplementedError for both), honouring a target's InputPath. A state machine is started as
  the target's role, through the local server (so IAM is enforced on it like any other call).
  A function is invoked asynchronously (trainrun.local.lambdas); an event that cannot be
  delivered to it goes to the target's dead-letter queue, if the queue's policy lets EventBridge.
- An execution of a state machine with tracing on sends its trace to X-Ray as the machine's role.
- Step Functions executions publish "Step Functions Execution Status Change" events when they
  end, as the service does; the teardown safety net is a rule on them.
Both patches are idempotent.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from moto.events.models import Rule, events_backends
from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication

from trainrun.local import lambdas

logger = logging.getLogger(__name__)
_original_send_to_targets = Rule.send_to_targets
_original_terminated = BaseExecutionWorkerCommunication.terminated
_HANDLED_SERVICES = ("lambda", "states")


def _send_to_targets(self: Rule, original_event: Any, transform_input: bool = True) -> None:
    handled = [target for target in self.targets if target["Arn"].split(":")[2] in _HANDLED_SERVICES]
    if len(handled) < len(self.targets):
        # moto raises NotImplementedError on the targets handled here; let it deliver the others.
        others = copy.copy(self)
        others.targets = [target for target in self.targets if target not in handled]
        _original_send_to_targets(others, original_event, transform_input)
    if not handled or not self.event_pattern.matches_event(original_event):
        return
    for target in handled:
        event = _input_path(original_event, target.get("InputPath"))
        arn = target["Arn"]
        service, region = arn.split(":")[2], arn.split(":")[3]
        if service == "lambda":
            _invoke_function(self, target, region, event)
        else:
            _start_execution_as_target_role(target, region, event)


def _invoke_function(rule: Rule, target: dict[str, Any], region: str, event: Any) -> None:
    """EventBridge invokes a function asynchronously: Lambda takes the event and answers at once,
    so what can fail here is the delivery itself, e.g. a function that no longer exists. EventBridge
    does not retry that kind of error (missing permissions, a target that no longer exists): it
    sends the event to the target's dead-letter queue at once, or drops it without one (EventBridge
    User Guide, "Using dead-letter queues to process undelivered events"). What the function does
    with the event, errors included, is Lambda's (trainrun.local.lambdas.invoke_asynchronously)."""
    from moto.awslambda.exceptions import UnknownFunctionException
    from moto.awslambda.utils import get_backend

    try:
        function = get_backend(rule.account_id, region).get_function(target["Arn"])
    except UnknownFunctionException as exc:
        _dead_letter(rule, target, event, "NO_RESOURCE", exc.message)
        return
    lambdas.invoke_asynchronously(function, event)


def _dead_letter(rule: Rule, target: dict[str, Any], event: Any, code: str, message: str) -> None:
    """Send an undelivered event to the target's dead-letter queue, as EventBridge does: the event
    as the body, with the RULE_ARN, TARGET_ARN, ERROR_CODE, ERROR_MESSAGE and RETRY_ATTEMPTS
    attributes (EventBridge User Guide, "Using dead-letter queues to process undelivered events").
    EventBridge sends as itself, so the queue's policy must let events.amazonaws.com send for this
    rule ("Granting permissions to the dead-letter queue"); otherwise the event is lost
    (InvocationsFailedToBeSentToDlq), as without a queue."""
    from moto.sqs.exceptions import QueueDoesNotExist
    from moto.sqs.models import sqs_backends

    queue_arn = target.get("DeadLetterConfig", {}).get("Arn")
    if not queue_arn:
        logger.warning(
            "rule %s: event %s dropped, no dead-letter queue (%s: %s)", rule.name, event.get("id"), code, message
        )
        return
    region, account, queue_name = queue_arn.split(":")[3:6]
    backend = sqs_backends[account][region]
    try:
        queue = backend.get_queue(queue_name)
    except QueueDoesNotExist:
        logger.warning(
            "rule %s: event %s dropped, dead-letter queue %s does not exist", rule.name, event.get("id"), queue_arn
        )
        return
    if not _queue_policy_lets_eventbridge(queue.policy, queue_arn, rule.arn):
        logger.warning(
            "rule %s: event %s dropped, %s's policy does not let EventBridge send",
            rule.name,
            event.get("id"),
            queue_arn,
        )
        return
    attributes = {
        "RULE_ARN": rule.arn,
        "TARGET_ARN": target["Arn"],
        "ERROR_CODE": code,
        "ERROR_MESSAGE": message,
        "RETRY_ATTEMPTS": "0",
    }
    backend.send_message(
        queue_name,
        json.dumps(event),
        message_attributes={name: {"DataType": "String", "StringValue": value} for name, value in attributes.items()},
    )


def _queue_policy_lets_eventbridge(policy: str | None, queue_arn: str, rule_arn: str) -> bool:
    from trainrun.local.iam.policy import PolicySet, Request, Resource

    statements = json.loads(policy).get("Statement", []) if policy else []
    statements = [statements] if isinstance(statements, dict) else statements
    # The statements whose Principal is EventBridge, evaluated as identity statements would be.
    for_eventbridge = [
        {key: value for key, value in statement.items() if key != "Principal"}
        for statement in statements
        if _names_eventbridge(statement.get("Principal"))
    ]
    context = {"aws:SourceArn": rule_arn, "aws:SourceAccount": rule_arn.split(":")[4]}
    request = Request("sqs:SendMessage", (Resource(queue_arn),), context)
    return PolicySet("events.amazonaws.com", [{"Statement": for_eventbridge}]).evaluate(request).allowed


def _names_eventbridge(principal: Any) -> bool:
    if principal == "*":
        return True
    services = principal.get("Service", []) if isinstance(principal, dict) else []
    return "events.amazonaws.com" in ([services] if isinstance(services, str) else services)


# The access key of a role the local runtime issued, by role ARN (set by trainrun.local.iam.access).
_key_of_role: Callable[[str], Any] | None = None


def sign_state_machine_targets_with(key_of_role: Callable[[str], Any]) -> None:
    global _key_of_role
    _key_of_role = key_of_role


def _start_execution_as_target_role(target: dict[str, Any], region: str, event: Any) -> None:
    """EventBridge starts a state machine as the target's role (RoleArn), with that role's
    states:StartExecution (EventBridge user guide, "Permissions for targets"): the call goes
    through the local server like any other, so a role without it is denied. A failed delivery
    is dropped, as EventBridge drops an event after its retries; nothing raises into the caller."""
    from botocore.exceptions import ClientError

    key = _key_of_role(target["RoleArn"]) if _key_of_role is not None and "RoleArn" in target else None
    if key is None:
        logger.warning("rule target %s: no role the local runtime issued (%s)", target["Arn"], target.get("RoleArn"))
        return
    client = key.client("stepfunctions", region)
    try:
        # EventBridge names the executions it starts itself.
        client.start_execution(stateMachineArn=target["Arn"], name=str(uuid.uuid4()), input=json.dumps(event))
    except ClientError as exc:
        logger.warning("rule target %s: %s", target["Arn"], exc)


def _input_path(event: Any, path: str | None) -> Any:
    if not path or path == "$":
        return event
    value = event
    for part in path.removeprefix("$.").split("."):
        value = value[part]
    return value


_publishing = 0
_publishing_lock = threading.Lock()


def publishing_status_changes() -> bool:
    """Whether an ended execution's status change is still being delivered. The status turns
    final inside the same call, so once this is False every rule it matched has run."""
    with _publishing_lock:
        return _publishing > 0


def _terminated(self: BaseExecutionWorkerCommunication) -> None:
    global _publishing
    with _publishing_lock:
        _publishing += 1
    try:
        _original_terminated(self)
        _send_trace(self)
        _publish_status_change(self)
    finally:
        with _publishing_lock:
            _publishing -= 1


def _send_trace(self: BaseExecutionWorkerCommunication) -> None:
    """A state machine with tracing on sends its execution's trace to X-Ray as its own role (the
    Step Functions developer guide, "AWS X-Ray and Step Functions": the execution role needs
    xray:PutTraceSegments): through the local server, so a role without it is denied and recorded."""
    from botocore.exceptions import ClientError
    from moto.stepfunctions.exceptions import StateMachineDoesNotExist
    from moto.stepfunctions.responses import get_backend as sfn_backend

    execution = self.execution
    region, account = execution.state_machine_arn.split(":")[3:5]
    try:
        machine = sfn_backend(account, region).describe_state_machine(execution.state_machine_arn)
    except StateMachineDoesNotExist:
        return  # the local stack was torn down while this execution ended: nothing to trace
    if not (getattr(machine, "tracingConfiguration", None) or {}).get("enabled"):
        return
    key = _key_of_role(machine.roleArn) if _key_of_role is not None else None
    if key is None:
        return
    now = time.time()
    segment = {
        "name": execution.state_machine_arn.rsplit(":", 1)[-1],
        "id": os.urandom(8).hex(),
        "trace_id": f"1-{int(now):08x}-{os.urandom(12).hex()}",
        "start_time": execution.start_date.timestamp() if execution.start_date else now,
        "end_time": now,
        "origin": "AWS::StepFunctions::StateMachine",
    }
    client = key.client("xray", region)
    try:
        client.put_trace_segments(TraceSegmentDocuments=[json.dumps(segment)])
    except ClientError as exc:
        # A trace that cannot be sent is lost; the execution's outcome stands.
        logger.warning("trace of %s: %s", execution.exec_arn, exc)


def _publish_status_change(self: BaseExecutionWorkerCommunication) -> None:
    execution = self.execution
    status = execution.exec_status.value if execution.exec_status is not None else "UNKNOWN"
    arn_parts = execution.exec_arn.split(":")
    region, account = arn_parts[3], arn_parts[4]
    event: dict[str, Any] = {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "account": account,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [execution.exec_arn],
        "detail": {
            "executionArn": execution.exec_arn,
            "stateMachineArn": execution.state_machine_arn,
            "name": execution.name,
            "status": status,
            "startDate": _millis(execution.start_date),
            "stopDate": _millis(execution.stop_date),
            "input": json.dumps(execution.input_data),
            "output": None if execution.output is None else json.dumps(execution.output),
            "error": execution.error,
            "cause": execution.cause,
        },
    }
    for bus in events_backends[account][region].event_buses.values():
        for rule in list(bus.rules.values()):
            if rule.state == "ENABLED":
                rule.send_to_targets(event, transform_input=False)  # type: ignore[arg-type]


def _millis(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


def install() -> None:
    Rule.send_to_targets = _send_to_targets  # type: ignore[method-assign]
    BaseExecutionWorkerCommunication.terminated = _terminated  # type: ignore[method-assign]
