"""What a finished local run amounts to: the run record and the execution history, in one model.

On the AWS clock (`trainrun local --aws-clock`, trainrun.local.clock) it also says what the run
would have cost in time and money on AWS: `AwsClockFigures`, a model with its sources.
"""

from __future__ import annotations

import contextlib
import time
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from trainrun.adapters.inventory import tagged_resources
from trainrun.local import clock
from trainrun.local.runtime import LocalRuntime, StartedRun
from trainrun.logic.aws_clock import SOURCES_DOC
from trainrun.logic.job_log import TrainEvent, parse_line
from trainrun.logic.prices import PRICES
from trainrun.model.checkpoints import CheckpointExport
from trainrun.model.findings import Finding
from trainrun.model.run_record import RunRecord, RunStore, cause_message
from trainrun.model.tags import RUN_ID
from trainrun.ops.runs import execution_history
from trainrun.ops.views import Resources, RunProgress, StateVisit, created_resources, state_visits


def run_progress(store: RunStore, run_id: str) -> RunProgress:
    record = store.get(run_id)
    return RunProgress.of(
        store.get_progress(run_id, "compile")[0],
        store.get_progress(run_id, "train")[0],
        record.job_train if record is not None else None,
        eks=record is not None and record.on_eks,
    )


class AwsClockFigures(BaseModel):
    """The run on the AWS clock: what it would have taken and cost on AWS. A model, not a
    measurement: the durations are trainrun.logic.aws_clock's (see `model`), the local work between
    them counts at the same compression, and prices are the project's dated list prices."""

    model: str
    # AWS seconds per real second.
    time_scale: float
    # From the run's start: its first training step logged; everything the run created deleted.
    time_to_first_step_minutes: float | None
    time_to_deleted_minutes: float | None
    # Compute nodes from launch to termination; of that, while no job step ran on them.
    node_minutes: float
    idle_node_minutes: float
    # The last job's end to the last compute node terminated (AWS seconds); None: not seen.
    job_end_to_nodes_terminated_seconds: float | None = None
    instance_type: str | None
    cost_usd: float | None  # None: the price table has no price for the instance type
    idle_cost_usd: float | None
    prices_as_of: str
    # Each state's visits on the AWS clock, summed (minutes): one after another, they are the baseline.
    state_minutes: dict[str, float]

    def lines(self) -> list[str]:
        """The figures for a person, each saying it is the model's."""

        def minutes(value: float | None) -> str:
            return "not reached" if value is None else f"{value:.1f} min"

        def dollars(value: float | None) -> str:
            return f"${value:,.2f}" if value is not None else f"(no price for {self.instance_type})"

        return [
            f"{self.model}:",
            f"  time to first training step: {minutes(self.time_to_first_step_minutes)}",
            f"  time to everything deleted: {minutes(self.time_to_deleted_minutes)}",
            f"  compute node-minutes billed: {self.node_minutes:.1f} ({dollars(self.cost_usd)}), "
            f"idle: {self.idle_node_minutes:.1f} ({dollars(self.idle_cost_usd)}); "
            f"{self.instance_type} list prices as of {self.prices_as_of}",
            "  last job's end to compute nodes terminated: "
            + (
                "not seen"
                if self.job_end_to_nodes_terminated_seconds is None
                else f"{self.job_end_to_nodes_terminated_seconds:.0f} s"
            ),
        ]


class LocalRunSummary(BaseModel):
    run_id: str
    status: str
    execution_status: str
    executions: list[str]
    states: list[str]
    state_visits: list[StateVisit]
    state_transitions: int
    findings: list[Finding]
    progress: RunProgress
    resources: Resources
    torn_down_at: datetime | None
    # What teardown did with the checkpoint directory (exported_to: a later run's resume_from).
    checkpoints: CheckpointExport | None = None
    error: dict[str, str] | None
    aws_clock: AwsClockFigures | None = None


def summarize(runtime: LocalRuntime, run: StartedRun, execution: dict[str, Any]) -> LocalRunSummary:
    store = runtime.store()
    record = store.get(run.run_id)
    sfn = runtime.client("stepfunctions")
    # Every execution of the run, oldest first: a long wait continues in a fresh one.
    arns = [link.execution_arn for link in record.executions] if record is not None and record.executions else []
    visits = []
    for arn in arns or [run.execution_arn]:
        with contextlib.suppress(sfn.exceptions.ExecutionDoesNotExist):
            visits.extend(state_visits(execution_history(sfn, arn)))
    error = None
    if record is not None and record.error is not None:
        error = {"error": record.error.error, "cause": cause_message(record.error.cause)}
    elif execution["status"] != "SUCCEEDED" and (record is None or record.status.value != "REJECTED"):
        error = {
            "error": execution.get("error", execution["status"]),
            "cause": cause_message(execution.get("cause", "")),
        }
    return LocalRunSummary(
        run_id=run.run_id,
        # The record is the run's truth; without one (the record could not be written), the execution's.
        status=record.status.value if record is not None else execution["status"],
        execution_status=execution["status"],
        executions=arns or [run.execution_arn],
        states=[visit.name for visit in visits],
        state_visits=visits,
        state_transitions=len(visits),
        findings=record.findings if record is not None else [],
        progress=run_progress(store, run.run_id),
        resources=Resources(
            created=created_resources(record) if record is not None else [],
            remaining=[
                f"{resource.kind} {resource.id}"
                for resource in tagged_resources(
                    runtime.client("ec2"),
                    runtime.client("fsx"),
                    key=RUN_ID,
                    value=run.run_id,
                    eks=runtime.client("eks"),
                )
            ],
        ),
        torn_down_at=record.torn_down_at if record is not None else None,
        checkpoints=record.checkpoints if record is not None else None,
        error=error,
        aws_clock=aws_clock_figures(runtime, record, visits) if clock.scale() is not None else None,
    )


def aws_clock_figures(runtime: LocalRuntime, record: RunRecord | None, visits: list[StateVisit]) -> AwsClockFigures:
    """The run's figures on the AWS clock: its states' times, its first step's and its teardown's,
    from the billing facts the emulators kept (trainrun.local.clock's ledger)."""
    scale = clock.scale() or 1.0
    started = next((v.entered_at for v in visits if v.entered_at is not None), None)
    origin = started.timestamp() if started is not None else clock.ledger().origin

    def minutes_since_start(at: float | None) -> float | None:
        return None if at is None else max(0.0, at - origin) * scale / 60

    cluster = record.cluster.name if record is not None and record.cluster is not None else None
    nodes, steps = clock.ledger().of_cluster(cluster) if cluster else ([], [])
    billing = clock.figures(nodes, steps, time_scale=scale, now=time.time())
    spec = record.spec if record is not None else None
    instance_type = spec.capacity.instance_type if spec is not None else None
    hourly = PRICES.instance(instance_type) if instance_type else None
    state_minutes: dict[str, float] = {}
    for visit in visits:
        state_minutes[visit.name] = state_minutes.get(visit.name, 0.0) + (visit.seconds or 0.0) * scale / 60
    return AwsClockFigures(
        model=f"on the AWS clock model ({SOURCES_DOC}): trainrun.logic.aws_clock's durations, compressed {scale:g}x",
        time_scale=scale,
        time_to_first_step_minutes=minutes_since_start(_first_train_step_at(runtime, record)),
        time_to_deleted_minutes=minutes_since_start(
            record.torn_down_at.timestamp() if record is not None and record.torn_down_at else None
        ),
        node_minutes=billing.node_minutes,
        idle_node_minutes=billing.idle_node_minutes,
        job_end_to_nodes_terminated_seconds=billing.job_end_to_terminated_seconds,
        instance_type=instance_type,
        cost_usd=None if hourly is None else billing.node_minutes * hourly / 60,
        idle_cost_usd=None if hourly is None else billing.idle_node_minutes * hourly / 60,
        prices_as_of=PRICES.as_of.isoformat(),
        state_minutes=state_minutes,
    )


def _first_train_step_at(runtime: LocalRuntime, record: RunRecord | None) -> float | None:
    """When the train job's first step line reached CloudWatch Logs (time.time() seconds), if it did."""
    if record is None:
        return None
    logs = runtime.client("logs")
    kwargs: dict[str, Any] = {
        "logGroupName": runtime.deployed.outputs["JobsLogGroupName"],
        "logStreamName": record.log_stream("train"),
        "startFromHead": True,
    }
    while True:
        try:
            page = logs.get_log_events(**kwargs)
        except logs.exceptions.ResourceNotFoundException:
            return None
        for event in page["events"]:
            if isinstance(parse_line(event["message"]), TrainEvent):
                return float(event["timestamp"]) / 1000
        if not page["events"] or page["nextForwardToken"] == kwargs.get("nextToken"):
            return None
        kwargs["nextToken"] = page["nextForwardToken"]
