"""Business errors. The state machine catches them by class name, so names are a contract.

Transient AWS errors are not wrapped: the ASL retries Lambda service errors, and an adapter
re-raises throttling as `TransientAwsError` so one Retry block covers both.
"""

from __future__ import annotations


class TrainrunError(Exception):
    """Base of every error the workflow expects and catches by name."""


class RunSpecInvalid(TrainrunError):
    """The run file is not valid: every problem, each with its field path.

    The message (a Lambda error's errorMessage, carried by the workflow whose state is at most
    256 KB) names the first problems only, each cut short; `problems` holds them all.
    """

    MESSAGE_PROBLEMS = 20
    MESSAGE_PROBLEM_CHARACTERS = 500

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        shown = [f"{path}: {message}"[: self.MESSAGE_PROBLEM_CHARACTERS] for path, message in problems]
        if len(shown) > self.MESSAGE_PROBLEMS:
            shown = [*shown[: self.MESSAGE_PROBLEMS], f"and {len(shown) - self.MESSAGE_PROBLEMS} more problems"]
        super().__init__("; ".join(shown))


class RunFileNotFound(TrainrunError):
    """The run file named by the trigger does not exist (or is not readable)."""


class TransientAwsError(TrainrunError):
    """An AWS call failed for a reason worth retrying (throttling, 5xx)."""
