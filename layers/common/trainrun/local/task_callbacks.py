"""Task callbacks as Step Functions takes them (moto 5.2.5, pinned). The patches are idempotent.

- SendTaskFailure with its cause: moto's handler passes the error on to the waiting task but
  drops the cause, so a failed job would reach the workflow without the log tail and failure
  signatures the progress function sent. The patch passes the cause as Step Functions does.
- A callback that comes before the wait: a task token is valid from the moment its task is
  scheduled, so Step Functions completes a `.waitForTaskToken` task whose SendTaskSuccess or
  SendTaskFailure arrives while the invoked function still runs (a fast job's end marker). moto
  keeps such an outcome, but with HeartbeatSeconds it then waits for a heartbeat that never
  comes and times the task out (States.HeartbeatTimeout). The patch takes the kept outcome.
- An execution whose worker has not built its environment yet (started, its thread not yet
  run; seen under load as a runtime stopped): moto dereferences the missing environment and the
  request ends in a stack trace. A callback then looks on (such an execution holds no task; Step
  Functions' answer for a token no task holds is InvalidToken, which the progress function
  takes as stale), and StopExecution is kept and applied the moment the environment is built (its
  thread first parses the definition, seconds under load), so the execution ends ABORTED, as Step
  Functions stops any running execution, and the request never waits on it.
"""

from __future__ import annotations

import threading
from typing import Any

from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_callback import (
    StateTaskServiceCallback,
)
from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker
from moto.stepfunctions.parser.models import StepFunctionsParserBackend
from moto.stepfunctions.responses import StepFunctionResponse

_original_wait_with_heartbeat = StateTaskServiceCallback._wait_for_task_token_heartbeat
_original_get_executions = StepFunctionsParserBackend._get_executions
_original_evaluation_environment = ExecutionWorker._get_evaluation_environment
# Between a worker's environment being built and its assignment to the worker, a stop must not be lost.
_environment_lock = threading.Lock()


def _send_task_failure(self: StepFunctionResponse) -> Any:
    from moto.core.responses import EmptyResult

    # The backend of an executing state machine (moto.stepfunctions.parser) takes the cause.
    self.stepfunction_backend.send_task_failure(  # type: ignore[call-arg]
        self._get_param("taskToken"), error=self._get_param("error"), cause=self._get_param("cause")
    )
    return EmptyResult()


def _wait_for_task_token_heartbeat(
    self: StateTaskServiceCallback, env: Any, callback_endpoint: Any, heartbeat_endpoint: Any
) -> Any:
    outcome = callback_endpoint.get_outcome()
    if outcome is not None:
        return outcome  # sent while the task's function still ran: the task is done
    return _original_wait_with_heartbeat(self, env, callback_endpoint, heartbeat_endpoint)


def _executions_with_an_environment(self: StepFunctionsParserBackend, execution_status: Any = None) -> list[Any]:
    # Every caller of this moto helper (the task callbacks, the map runs) reads the worker's environment.
    executions = _original_get_executions(self, execution_status)
    return [e for e in executions if e.exec_worker is not None and e.exec_worker.env is not None]


def _evaluation_environment(self: ExecutionWorker) -> Any:
    environment = _original_evaluation_environment(self)
    with _environment_lock:
        self._trainrun_environment = environment  # type: ignore[attr-defined]
        stop = self.__dict__.pop("_trainrun_pending_stop", None)
    if stop is not None:
        environment.set_stop(**stop)
    return environment


def _stop_worker(self: ExecutionWorker, stop_date: Any, error: Any, cause: Any) -> None:
    with _environment_lock:
        environment = self.env or getattr(self, "_trainrun_environment", None)
        if environment is None:
            self._trainrun_pending_stop = {"stop_date": stop_date, "cause": cause, "error": error}  # type: ignore[attr-defined]
            return
    environment.set_stop(stop_date=stop_date, cause=cause, error=error)


def install() -> None:
    ExecutionWorker.stop = _stop_worker  # type: ignore[method-assign]
    ExecutionWorker._get_evaluation_environment = _evaluation_environment  # type: ignore[method-assign]
    StepFunctionsParserBackend._get_executions = _executions_with_an_environment  # type: ignore[method-assign]
    StepFunctionResponse.send_task_failure = _send_task_failure  # type: ignore[method-assign]
    StateTaskServiceCallback._wait_for_task_token_heartbeat = _wait_for_task_token_heartbeat  # type: ignore[method-assign]
