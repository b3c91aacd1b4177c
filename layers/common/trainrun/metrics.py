"""The stack's CloudWatch metrics: their names and dimensions, in one place.

The functions emit them as EMF through Powertools, in the namespace of the template's
POWERTOOLS_METRICS_NAMESPACE (`Trainrun`); template.yaml's dashboard and alarms name them, and
tests/unit/test_operator_views.py checks that both sides agree.

Every metric carries the stack's name (`Stack`), so two stacks in one account (say, dev and
prod) keep apart their dashboards and alarms; Powertools adds `service` (POWERTOOLS_SERVICE_NAME)
to every metric as well.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class Metric(StrEnum):
    # Runs, counted where their run-state events are published (trainrun.steps.run_events).
    RUNS_STARTED = "RunsStarted"
    RUNS_SUCCEEDED = "RunsSucceeded"
    RUNS_FAILED = "RunsFailed"
    RUNS_REJECTED = "RunsRejected"
    # Stopped with `trainrun cancel`: not in RunsFailed, so a cancel does not look like a failure.
    RUNS_CANCELLED = "RunsCancelled"
    # A run-state event or notification that could not be sent (the run goes on).
    NOTIFICATIONS_FAILED = "NotificationsFailed"
    # The runs one janitor sweep started a teardown for (0 included).
    LEFTOVER_RUNS = "LeftoverRuns"
    # Per run and job, from the job logs (trainrun.steps.progress).
    TRAINING_STEP = "TrainingStep"
    LOSS = "Loss"
    LEARNING_RATE = "LearningRate"
    THROUGHPUT = "Throughput"
    COMPILE_GRAPHS = "CompileGraphs"
    COMPILE_SUCCEEDED = "CompileSucceeded"
    COMPILE_FAILED = "CompileFailed"
    LOG_LINES = "LogLines"
    UNPARSED_LOG_LINES = "UnparsedLogLines"
    # End markers that were not authentic (trainrun.model.end_marker) and training lines with an
    # implausible step: counted and ignored.
    REJECTED_END_MARKERS = "RejectedEndMarkers"
    REJECTED_STEPS = "RejectedSteps"


class Dimension(StrEnum):
    STACK = "Stack"
    RUN_ID = "RunId"
    JOB = "Job"
    # Added by Powertools itself, with POWERTOOLS_SERVICE_NAME as its value.
    SERVICE = "service"


def for_stack(metrics: Any, stack: str) -> Any:
    """Give every metric the stack's name: a Powertools default dimension, kept across invocations
    (setting it again would replace it with a warning at each one)."""
    if metrics.default_dimensions.get(Dimension.STACK) != stack:
        metrics.set_default_dimensions(**{Dimension.STACK: stack})
    return metrics
