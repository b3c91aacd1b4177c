"""Business errors. The state machine catches them by class name, so names are a contract.

Transient AWS errors are not wrapped: the ASL retries Lambda service errors, and an adapter
re-raises throttling as `TransientAwsError` so one Retry block covers both.
"""

from __future__ import annotations


class TrainrunError(Exception):
    """Base of every error the workflow expects and catches by name."""


class RunSpecInvalid(TrainrunError):
    """The run file is not valid: every problem, each with its field path."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{path}: {message}" for path, message in problems))


class RunFileNotFound(TrainrunError):
    """The run file named by the trigger does not exist (or is not readable)."""


class TransientAwsError(TrainrunError):
    """An AWS call failed for a reason worth retrying (throttling, 5xx)."""
