"""SendTaskFailure with its cause (moto 5.2.5, pinned).

moto's SendTaskFailure handler passes the error on to the waiting task but drops the cause,
so a failed job would reach the workflow without the log tail and failure signatures the
progress function sent. The patch passes the cause as Step Functions does. It is idempotent.
"""

from __future__ import annotations

from typing import Any

from moto.stepfunctions.responses import StepFunctionResponse


def _send_task_failure(self: StepFunctionResponse) -> Any:
    from moto.core.responses import EmptyResult

    # The backend of an executing state machine (moto.stepfunctions.parser) takes the cause.
    self.stepfunction_backend.send_task_failure(  # type: ignore[call-arg]
        self._get_param("taskToken"), error=self._get_param("error"), cause=self._get_param("cause")
    )
    return EmptyResult()


def install() -> None:
    StepFunctionResponse.send_task_failure = _send_task_failure  # type: ignore[method-assign]
