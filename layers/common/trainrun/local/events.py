"""EventBridge in the local runtime, where moto stops short (moto 5.2.5, pinned).

- Rules deliver to Lambda functions and Step Functions state machines (moto raises
  NotImplementedError for both), honouring a target's InputPath.
- Step Functions executions publish "Step Functions Execution Status Change" events when they
  end, as the service does; the teardown safety net is a rule on them.
Both patches are idempotent.
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from datetime import UTC, datetime
from typing import Any

from moto.events.models import Rule, events_backends
from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication

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
            from moto.awslambda.utils import get_backend

            get_backend(self.account_id, region).invoke(
                function_name=arn,
                qualifier=None,
                body=json.dumps(event),
                headers={"x-amz-invocation-type": "Event"},
                response_headers={},
            )
        else:
            from moto.stepfunctions.responses import get_backend as sfn_backend

            # EventBridge names the executions it starts itself.
            sfn_backend(self.account_id, region).start_execution(
                arn, name=str(uuid.uuid4()), execution_input=json.dumps(event)
            )


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
        _publish_status_change(self)
    finally:
        with _publishing_lock:
            _publishing -= 1


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
