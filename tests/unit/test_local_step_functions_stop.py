"""The local Step Functions keeps a stopped execution ABORTED, as StopExecution makes it on AWS."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from types import SimpleNamespace

from moto.stepfunctions.parser.api import ExecutionFailedEventDetails
from moto.stepfunctions.parser.asl.eval.program_state import ProgramError, ProgramStopped

from trainrun.local import step_functions


def test_an_error_raised_after_a_stop_leaves_the_execution_stopped() -> None:
    # Given an execution that StopExecution has stopped while one of its tasks was still running
    stopped = ProgramStopped(stop_date=datetime.now(UTC), cause="test", error="Stopped")
    execution = SimpleNamespace(_state_mutex=threading.RLock(), _program_state=stopped, event_manager=None)
    # When the interrupted task then fails (moto's set_error would overwrite any program state)
    step_functions._set_error(execution, ExecutionFailedEventDetails(error="States.TaskFailed", cause="late"))  # type: ignore[arg-type]
    # Then the execution is still stopped: it ends ABORTED, not FAILED
    assert execution._program_state is stopped
    assert not isinstance(execution._program_state, ProgramError)
