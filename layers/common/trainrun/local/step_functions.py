"""Step Functions quotas and compressed time for moto's ASL interpreter (moto 5.2.5, pinned).

Quotas, as the Step Functions developer guide states them ("Step Functions service quotas"):
- **Execution history: 25,000 events.** "If the execution history reaches this quota, the
  execution fails." AWS records it as an ExecutionFailed event with error `States.Runtime` and
  cause "The execution reached the maximum number of history events (25000)." A Catch cannot
  handle it (`States.ALL` does not match `States.Runtime`). moto counts nothing: this patch fails
  the execution the moment its history reaches the quota, whatever state it is in.
- **Payload: 256 KB** for a state's input or output. moto's interpreter already fails a state,
  a Lambda result or a service integration result over 256 KB with `States.DataLimitExceeded`
  (`moto.stepfunctions.parser.quotas`); tests/integration pins that.

A task's heartbeat below its timeout: the States Language specification ("Task State") says "If
provided, the HeartbeatSeconds interval MUST be smaller than the TimeoutSeconds value". Literal
values are checked when the state machine is created: moto's parser refuses them, and this patch
names the refusal `InvalidDefinition` as the Step Functions API reference does (moto leaves the
code empty). Values read through HeartbeatSecondsPath / TimeoutSecondsPath can only be checked
when the task starts: there the execution fails with `States.Runtime`, the error the developer
guide ("Error handling in Step Functions") gives an execution that fails on something it cannot
process, and which no Retry or Catch handles, not even `States.ALL`. The task is not scheduled.

Compressed time: a local run must be quick, but the stack's parameters keep their deployable
minimums (a 60 s heartbeat, a 5 s poll). So the interpreter runs `time_scale` nominal seconds in
one real second: Wait states, task heartbeats and task timeouts are divided by it, except a Wait
until a timestamp (Wait for capacity): that is a moment of the real clock, which the account
fixture's reservation dates are written in, so it is waited for in real time. The functions
learn the same factor (`TRAINRUN_LOCAL_TIME_SCALE`, set only by the local runtime; never in
template.yaml) where they pace themselves against those clocks (the progress heartbeat).
Idempotent; `install(time_scale=1)` is real time.

The Step Functions integration (`arn:aws:states:::states:startExecution`): moto's interpreter
hands the ASL's parameter names (`StateMachineArn`, `Name`, `Input`) to boto3 unchanged, and
botocore knows only the API's (`stateMachineArn`, ...): every call fails with a KeyError. This
patch renames them as Step Functions does, and the response's back (`ExecutionArn`,
`StartDate`), as the integration's documented output names them.
"""

from __future__ import annotations

import math
import threading
import time
from datetime import UTC, datetime
from typing import Any

from moto.stepfunctions.parser.api import ExecutionFailedEventDetails, HistoryEventType, InvalidDefinition
from moto.stepfunctions.parser.asl.component.common.error_name.failure_event import FailureEventException
from moto.stepfunctions.parser.asl.component.common.timeouts.heartbeat import Heartbeat
from moto.stepfunctions.parser.asl.component.common.timeouts.timeout import Timeout
from moto.stepfunctions.parser.asl.component.state.exec.execute_state import ExecutionState
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_sfn import (
    StateTaskServiceSfn,
)
from moto.stepfunctions.parser.asl.component.state.wait.wait_function.timestamp import Timestamp
from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction
from moto.stepfunctions.parser.asl.eval.environment import Environment
from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager
from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped

HISTORY_EVENT_QUOTA = 25_000
HISTORY_QUOTA_ERROR = "States.Runtime"
HISTORY_QUOTA_CAUSE = f"The execution reached the maximum number of history events ({HISTORY_EVENT_QUOTA})."
TIME_SCALE_VARIABLE = "TRAINRUN_LOCAL_TIME_SCALE"
_TERMINAL_EVENTS = {
    HistoryEventType.ExecutionFailed,
    HistoryEventType.ExecutionSucceeded,
    HistoryEventType.ExecutionAborted,
    HistoryEventType.ExecutionTimedOut,
}

_settings = {"time_scale": 1.0}
_lock = threading.Lock()
_originals: dict[str, Any] = {}


def install(*, time_scale: float = 1.0) -> None:
    """Enforce the quotas and run the interpreter's clocks `time_scale` times faster."""
    if time_scale < 1:
        raise ValueError(f"time_scale must be at least 1 (real time), not {time_scale}")
    _settings["time_scale"] = float(time_scale)
    with _lock:
        if _originals:
            return
        _originals["environment_init"] = Environment.__init__
        _originals["set_error"] = Environment.set_error
        _originals["add_event"] = EventManager.add_event
        _originals["sfn_service_task"] = StateTaskServiceSfn._eval_service_task
        _originals["evaluate_with_timeout"] = ExecutionState._evaluate_with_timeout
        ExecutionState._evaluate_with_timeout = _evaluate_with_timeout  # type: ignore[method-assign]
        InvalidDefinition.TYPE = "InvalidDefinition"
        StateTaskServiceSfn._eval_service_task = _sfn_service_task  # type: ignore[method-assign]
        Environment.__init__ = _environment_init  # type: ignore[method-assign]
        Environment.set_error = _set_error  # type: ignore[method-assign]
        EventManager.add_event = _add_event  # type: ignore[method-assign]
        WaitFunction._wait_interval = _wait_interval  # type: ignore[method-assign]
        Timestamp._get_wait_seconds = _seconds_until_timestamp  # type: ignore[method-assign]
        Heartbeat._eval_body = _scaled_seconds  # type: ignore[method-assign]
        Timeout._eval_body = _scaled_seconds  # type: ignore[method-assign]


def time_scale() -> float:
    return _settings["time_scale"]


# --- the history quota ---------------------------------------------------------------------------


def _environment_init(self: Environment, *args: Any, **kwargs: Any) -> None:
    _originals["environment_init"](self, *args, **kwargs)
    # The execution's own environment: frames (Map, Parallel) share its event manager later.
    self.event_manager._trainrun_execution = self  # type: ignore[attr-defined]
    self.event_manager._trainrun_runtime_error = None  # type: ignore[attr-defined]


def _fail_execution(event_manager: EventManager, error: ExecutionFailedEventDetails) -> None:
    """End the execution with a States.Runtime error, as Step Functions does: no Retry or Catch
    handles it; the running state is interrupted and no other state starts."""
    execution: Environment | None = getattr(event_manager, "_trainrun_execution", None)
    if execution is None or getattr(event_manager, "_trainrun_runtime_error", None) is not None:
        return
    event_manager._trainrun_runtime_error = error  # type: ignore[attr-defined]
    execution.set_error(error)


def _add_event(self: EventManager, context: Any, event_type: Any, *args: Any, **kwargs: Any) -> int:
    event_id: int = _originals["add_event"](self, context, event_type, *args, **kwargs)
    if event_id >= HISTORY_EVENT_QUOTA and event_type not in _TERMINAL_EVENTS:
        _fail_execution(self, ExecutionFailedEventDetails(error=HISTORY_QUOTA_ERROR, cause=HISTORY_QUOTA_CAUSE))
    return event_id


def _set_error(self: Environment, error: ExecutionFailedEventDetails) -> None:
    with self._state_mutex:  # moto's own lock (reentrant): a stop cannot come in between
        # A stopped execution stays stopped: StopExecution makes it ABORTED (the Step Functions API
        # reference), whatever its interrupted state raises afterwards. moto's set_error, unlike its
        # set_stop and set_ended, overwrites any program state, so a stop racing a task's end
        # (seen under load) could end the execution FAILED.
        if isinstance(self._program_state, ProgramStopped):
            return
        # Once the execution failed on a runtime error, what the interrupted state raises next is not the reason.
        runtime_error = getattr(self.event_manager, "_trainrun_runtime_error", None)
        _originals["set_error"](self, runtime_error or error)


# --- a task's heartbeat below its timeout --------------------------------------------------------


class HeartbeatNotBelowTimeout(Exception):
    """Interrupts the task state whose resolved heartbeat is not below its timeout."""


def _evaluate_with_timeout(self: ExecutionState, env: Environment) -> None:
    # Without TimeoutSeconds a task's timeout is 99999999 s on AWS (the developer guide's "Task
    # state"), over any heartbeat; moto's stand-in default of 60 s is not compared.
    if self.heartbeat is not None and not self.timeout.is_default_value():
        # The nominal seconds (the state's input), before compressed time divides them.
        timeout = self.timeout._eval_seconds(env=env)
        heartbeat = self.heartbeat._eval_seconds(env=env)
        if heartbeat >= timeout:
            cause = (
                f"An error occurred while executing the state '{self.name}'. The HeartbeatSeconds ({heartbeat}) "
                f"must be smaller than the TimeoutSeconds ({timeout})."
            )
            _fail_execution(env.event_manager, ExecutionFailedEventDetails(error="States.Runtime", cause=cause))
            raise HeartbeatNotBelowTimeout(cause)
    _originals["evaluate_with_timeout"](self, env)


# --- the Step Functions integration --------------------------------------------------------------


def _sfn_service_task(
    self: StateTaskServiceSfn,
    env: Environment,
    resource_runtime_part: Any,
    normalised_parameters: dict[str, Any],
    state_credentials: Any,
) -> None:
    api_parameters = {name[:1].lower() + name[1:]: value for name, value in normalised_parameters.items()}
    _originals["sfn_service_task"](self, env, resource_runtime_part, api_parameters, state_credentials)
    response = env.stack.pop()
    env.stack.append(
        {
            name[:1].upper() + name[1:]: value.isoformat() if isinstance(value, datetime) else value
            for name, value in response.items()
        }
    )


# --- compressed time -----------------------------------------------------------------------------


def _scaled_seconds(self: Any, env: Environment) -> None:
    env.stack.append(self._eval_seconds(env=env) / time_scale())


def _seconds_until_timestamp(self: Timestamp, env: Environment) -> int:
    # moto subtracts the machine's local time (datetime.now()) from the UTC timestamp, and rounds
    # down: this waits from UTC, and never ends before the moment.
    self.string.eval(env=env)
    text: str = env.stack.pop()
    moment = self._from_timestamp_string(timestamp=text)
    if moment is None:
        raise FailureEventException(self._create_failure_event(env, text))
    return math.ceil((moment.replace(tzinfo=UTC) - datetime.now(UTC)).total_seconds())


def _wait_interval(self: WaitFunction, env: Environment, wait_seconds: float) -> None:
    # moto's own loop counts whole seconds, and never ends for a fraction of one. Timestamp and
    # TimestampPath (its subclass) wait until a moment of the real clock.
    scale = 1.0 if isinstance(self, Timestamp) else time_scale()
    deadline = time.monotonic() + wait_seconds / scale
    while env.is_running():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        env.program_state_event.wait(remaining)
