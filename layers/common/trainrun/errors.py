"""The errors the workflow catches by class name (a contract with statemachines/*.asl.json:
tests/unit/test_state_machine.py checks that every name the ASL retries or catches is here),
and the base of every business error.

The other business errors (NetworkFailed, JobLost, ...) live beside the code that raises them:
the ASL catches them only as States.ALL, and the run record keeps their class name as the error.
Transient AWS errors are not wrapped: the ASL retries Lambda service errors, and an adapter
re-raises throttling as `TransientAwsError` so one Retry block covers both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class TrainrunError(Exception):
    """Base of every error the workflow expects and catches by name."""


class Problem(NamedTuple):
    """One thing wrong with a run file: the field's dotted path ("(file)" for the whole file), what
    is wrong and how to fix it, and where it is in the file (1-based line and column, when known)."""

    path: str
    message: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        if self.line is None:
            return f"{self.path}: {self.message}"
        if self.path == WHOLE_FILE:
            return f"line {self.line}: {self.message}"
        return f"{self.path} (line {self.line}): {self.message}"


# The path of a problem with the file itself rather than with one field.
WHOLE_FILE = "(file)"


class RunSpecInvalid(TrainrunError):
    """The run file is not valid: every problem, each with its field path and, when known, its line.

    The message (a Lambda error's errorMessage, carried by the workflow whose state is at most
    256 KB) names the first problems only, each cut short; `problems` holds them all.
    """

    MESSAGE_PROBLEMS = 20
    MESSAGE_PROBLEM_CHARACTERS = 500

    def __init__(self, problems: Sequence[Problem | tuple[str, str]]):
        self.problems = [problem if isinstance(problem, Problem) else Problem(*problem) for problem in problems]
        shown = [str(problem)[: self.MESSAGE_PROBLEM_CHARACTERS] for problem in self.problems]
        if len(shown) > self.MESSAGE_PROBLEMS:
            shown = [*shown[: self.MESSAGE_PROBLEMS], f"and {len(shown) - self.MESSAGE_PROBLEMS} more problems"]
        super().__init__("; ".join(shown))


class RunFileNotFound(TrainrunError):
    """The run file named by the trigger does not exist (or is not readable)."""


class TransientAwsError(TrainrunError):
    """An AWS call failed for a reason worth retrying (throttling, 5xx)."""


class InstanceNotReachable(TrainrunError):
    """SSM cannot send commands to the instance: it is not running, or its SSM agent is not registered.

    Right after a cluster is created the head node's agent may not be online yet: SendCommand
    answers InvalidInstanceId until it registers. So the state machine retries this error by name
    with backoff, for minutes, before it fails the run."""


class HeadNodeLost(TrainrunError):
    """The preparation failed because its head node was terminated under it: the cluster's creation
    failed (its rollback deletes the head node) or the cluster was deleted. The workflow retries it
    for a few poll periods (run.asl.json), so that Create cluster, in the branch beside it, reports
    why the cluster failed: that reason, not this consequence, is the run's error."""


class JobFailed(TrainrunError):
    """A job ended in a state other than COMPLETED with exit code 0: its end marker said so (the
    progress function fails the job state with this name) or Slurm did (Check). The workflow
    catches it by name: a failed train job goes to "Resume train" (trainrun.steps.resume)."""


class SubmitStillRunning(TrainrunError):
    """The submit command has not ended within this invocation's wait; the state machine retries
    the state by this name, and the next attempt looks at the same command again."""
