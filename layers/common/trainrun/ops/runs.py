"""Reading runs for the operator commands: find one, list recent ones, and build a RunView.

A run is named by its run id (what `trainrun submit` prints) or by its run file's `name`, which
means that name's most recent run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from trainrun.adapters.inventory import tagged_resources
from trainrun.errors import TrainrunError
from trainrun.logic.cluster_reuse import keeps_cluster
from trainrun.logic.cost import estimate_cost, kept_per_hour, spent
from trainrun.model.run_file import RunSpec
from trainrun.model.run_record import Billed, RunRecord, RunStatus, record_from_item
from trainrun.model.tags import RUN_ID
from trainrun.ops.stack import Stack
from trainrun.ops.undelivered import Undelivered, UndeliveredRun
from trainrun.ops.views import (
    Cost,
    ErrorView,
    ExecutionView,
    Resources,
    RunProgress,
    RunView,
    StateVisit,
    created_resources,
    job_views,
    state_visits,
)

# The status of a run start that never became a run (`trainrun runs`).
UNDELIVERED = "UNDELIVERED"


class RunNotFound(TrainrunError):
    """No run with that id (or name) in the stack's runs table."""


def find_run(stack: Stack, ref: str) -> RunRecord:
    """The run with run id `ref`, else the latest run named `ref`; RunNotFound otherwise."""
    record = stack.store().get(ref)
    if record is not None:
        return record
    named = [run for run in list_runs(stack) if run.name == ref]
    if named:
        return named[0]
    raise RunNotFound(f"no run {ref!r} in stack {stack.name!r} (`trainrun runs` lists its runs)")


def wait_for_record(
    stack: Stack, run_id: str, *, timeout: float = 60.0, poll: float = 0.5, sleep: Callable[[float], None] = time.sleep
) -> RunRecord:
    """The record of a run that has just started: its first state (Load run spec) writes it."""
    deadline = time.monotonic() + timeout
    while (record := stack.store().get(run_id)) is None:
        if time.monotonic() >= deadline:
            raise RunNotFound(f"run {run_id} has no record {timeout:.0f}s after it started: see its execution")
        sleep(poll)
    return record


def list_runs(stack: Stack, limit: int | None = None) -> list[RunRecord]:
    """The stack's runs, newest first.

    A scan: the runs table is keyed by run id only. A stack keeps hundreds of runs, not
    millions; past that, a created-at index would be the way to page through them.
    """
    dynamodb = stack.client("dynamodb")
    records: list[RunRecord] = []
    for page in dynamodb.get_paginator("scan").paginate(TableName=stack.outputs["RunsTableName"]):
        records.extend(record_from_item(item) for item in page["Items"])
    records.sort(key=lambda record: record.created_at, reverse=True)
    return records if limit is None else records[:limit]


def execution_history(sfn: Any, execution_arn: str) -> list[dict[str, Any]]:
    """Every event of an execution, in order (a Step Functions client)."""
    events: list[dict[str, Any]] = []
    # 1,000 a page, the most the API gives: a run with long wait loops has thousands of events.
    pages = sfn.get_paginator("get_execution_history").paginate(
        executionArn=execution_arn, PaginationConfig={"PageSize": 1000}
    )
    for page in pages:
        events.extend(page["events"])
    return events


# A live view's look for the events added since its last look: a poll or two adds a few.
NEWEST_EVENTS_PAGE = 50


class ExecutionHistories:
    """Execution histories for a view that looks again and again (`trainrun watch`): each history
    read whole once, then only the events added since, read newest first (reverseOrder) until an
    event already held. Event ids number an execution's events in order, from 1 (Step Functions
    API reference, HistoryEvent), and events never change once written."""

    def __init__(self) -> None:
        self._held: dict[str, list[dict[str, Any]]] = {}

    def events(self, sfn: Any, execution_arn: str) -> list[dict[str, Any]]:
        held = self._held.get(execution_arn)
        if held is None:
            held = self._held[execution_arn] = execution_history(sfn, execution_arn)
            return held
        newest = held[-1]["id"] if held else 0
        fresh: list[dict[str, Any]] = []
        request: dict[str, Any] = {
            "executionArn": execution_arn,
            "reverseOrder": True,
            "maxResults": NEWEST_EVENTS_PAGE,
        }
        while True:
            page = sfn.get_execution_history(**request)
            fresh.extend(event for event in page["events"] if event["id"] > newest)
            if any(event["id"] <= newest for event in page["events"]) or not page.get("nextToken"):
                break
            request["nextToken"] = page["nextToken"]
        held.extend(sorted(fresh, key=lambda event: event["id"]))
        return held


def current_state(stack: Stack, record: RunRecord) -> str | None:
    """The state a running execution is in: the last one entered, newest events first.

    Step Functions gives the newest page first when asked (reverseOrder), so on AWS one call of
    50 events finds it. An emulator that ignores reverseOrder answers oldest first: then the
    pages are read on to the end, and the state entered last (the highest event id) wins.
    """
    if record.execution_arn is None or record.status != RunStatus.RUNNING:
        return None
    sfn = stack.client("stepfunctions")
    latest: tuple[int, str] | None = None
    request: dict[str, Any] = {"executionArn": record.execution_arn, "reverseOrder": True, "maxResults": 50}
    while True:
        try:
            page = sfn.get_execution_history(**request)
        except sfn.exceptions.ExecutionDoesNotExist:
            return None
        events = page["events"]
        for event in events:
            if event["type"].endswith("StateEntered") and (latest is None or event["id"] > latest[0]):
                latest = (event["id"], str(event["stateEnteredEventDetails"]["name"]))
        newest_first = len(events) < 2 or events[0]["id"] > events[-1]["id"]
        if (latest is not None and newest_first) or not page.get("nextToken"):
            return latest[1] if latest is not None else None
        request["nextToken"] = page["nextToken"]


def build_view(
    stack: Stack,
    record: RunRecord,
    *,
    now: datetime | None = None,
    inventory_while_running: bool = True,
    histories: ExecutionHistories | None = None,
) -> RunView:
    """Everything known about one run: its record, its execution's states, what is left of it.

    What is left is an inventory of the run's tags (about a dozen describe calls).
    `inventory_while_running=False` skips it while the run has not ended (its `remaining` is then
    empty): a live view shows what is left only once the run has ended, and polls often. So does
    `histories`: the execution's events held from the view's earlier looks, only new ones read."""
    now = now or datetime.now(UTC)
    visits: list[StateVisit] = []
    execution_status = None
    if record.execution_arn is not None:
        sfn = stack.client("stepfunctions")
        try:
            execution_status = sfn.describe_execution(executionArn=record.execution_arn)["status"]
            events = (
                histories.events(sfn, record.execution_arn)
                if histories is not None
                else execution_history(sfn, record.execution_arn)
            )
            visits = state_visits(events)
        except sfn.exceptions.ExecutionDoesNotExist:
            execution_status = None  # expired from Step Functions' history (90 days)
    running = execution_status == "RUNNING"
    open_visits = [visit for visit in visits if visit.seconds is None]
    spec = record.spec
    train_progress = record.progress_train
    looked_up = inventory_while_running or record.status != RunStatus.RUNNING
    remaining = (
        tagged_resources(
            stack.client("ec2"), stack.client("fsx"), key=RUN_ID, value=record.run_id, eks=stack.client("eks")
        )
        if looked_up
        else []
    )
    return RunView(
        run_id=record.run_id,
        name=record.name,
        status=record.status.value,
        execution_status=execution_status,
        current_state=open_visits[-1].name if running and open_visits else None,
        run_file=record.run_file.uri,
        created_at=record.created_at,
        ended_at=record.ended_at,
        torn_down_at=record.torn_down_at,
        kept_at=record.kept_at,
        taken_at=now,
        nodes=spec.capacity.nodes if spec else None,
        instance_type=spec.capacity.instance_type if spec else None,
        total_steps=spec.workload.total_steps if spec else None,
        states=visits,
        executions=[
            ExecutionView(execution_arn=link.execution_arn, checks=link.checks, ended_because=link.ended_because)
            for link in record.executions
        ],
        findings=record.findings,
        resources=Resources(
            created=created_resources(record),
            remaining=[f"{resource.kind} {resource.id}" for resource in remaining],
        ),
        progress=RunProgress.of(record.progress_compile, train_progress, record.job_train, eks=record.on_eks),
        jobs=job_views(record),
        history=train_progress.history if train_progress is not None else [],
        train_submitted_at=record.job_train.submitted_at if record.job_train is not None else None,
        cost=cost_so_far(record, spec, now, billing=bool(remaining)),
        error=ErrorView.of(record.error),
        teardown_error=ErrorView.of(record.teardown_error),
        checkpoints=record.checkpoints,
    )


def cost_so_far(record: RunRecord, spec: RunSpec | None, now: datetime, *, billing: bool) -> Cost | None:
    """The plan's prices over the time each billable resource of the run existed: from its creation
    to the run's teardown, or to now while anything of the run is left. A run rejected before it
    created anything costs nothing. The cluster's line counts its compute nodes from the cluster's
    creation, a little before they start."""
    if spec is None:
        return None
    estimate = estimate_cost(spec)
    end = now if billing else (record.torn_down_at or record.ended_at or now)
    started = [since for billed in Billed if (since := record.billed_since(billed)) is not None]
    first = min(started) if started else None
    return Cost(
        # On a kept cluster (cluster.reuse) the run owns nothing billable: the owner's cost counts the cluster.
        per_hour=0.0 if record.borrowed is not None else estimate.per_hour,
        so_far=round(spent(estimate, record, end), 2),
        hours=round(max((end - first).total_seconds(), 0.0) / 3600, 4) if first is not None else 0.0,
        billable_since=first,
        partial=estimate.partial,
        prices_as_of=estimate.prices_as_of.isoformat(),
        budget_usd=spec.budget.max_cost_usd if spec.budget is not None else None,
    )


class RunRow(BaseModel):
    """One line of `trainrun runs`: a run, or a run start that was never delivered (status
    UNDELIVERED, no run id; `undelivered` says which run file and why)."""

    run_id: str | None
    name: str | None
    status: str
    state: str | None
    created_at: datetime
    age_seconds: float
    nodes: int | None
    instance_type: str | None
    step: int | None
    loss: float | None
    error: str | None  # the error it failed with, or the finding that rejected it
    undelivered: UndeliveredRun | None = None
    # A run that ended and kept what it created (teardown: keep, keep_file_system): it bills
    # `per_hour` (the plan's prices) until `trainrun down`, or until the janitor tears it down
    # once idle for `keep_for`.
    kept: bool = False
    per_hour: float | None = None
    keep_for: str | None = None


def run_rows(stack: Stack, *, limit: int, now: datetime | None = None) -> list[RunRow]:
    now = now or datetime.now(UTC)
    rows = []
    for record in list_runs(stack, limit):
        spec = record.spec
        train = record.progress_train
        rows.append(
            RunRow(
                run_id=record.run_id,
                name=record.name,
                status=record.status.value,
                state=current_state(stack, record),
                created_at=record.created_at,
                age_seconds=round((now - record.created_at).total_seconds(), 1),
                nodes=spec.capacity.nodes if spec else None,
                instance_type=spec.capacity.instance_type if spec else None,
                step=train.step if train else None,
                loss=train.loss if train else None,
                error=_why_it_ended(record),
                **_kept(record, spec),
            )
        )
    return rows


def _kept(record: RunRecord, spec: RunSpec | None) -> dict[str, Any]:
    """A kept run's fields of its row: what it bills by the hour, and how long it may stay idle."""
    if record.kept_at is None or record.torn_down_at is not None or record.borrowed is not None or spec is None:
        return {}
    per_hour = kept_per_hour(estimate_cost(spec), record, cluster_kept=keeps_cluster(record))
    return {"kept": True, "per_hour": round(per_hour, 2), "keep_for": spec.teardown.keep_for}


def undelivered_rows(undelivered: Undelivered, *, now: datetime | None = None) -> list[RunRow]:
    """The run starts waiting in the undelivered-runs queue, as rows of `trainrun runs`."""
    now = now or datetime.now(UTC)
    return [
        RunRow(
            run_id=None,
            name=None,
            status=UNDELIVERED,
            state=None,
            created_at=start.failed_at,
            age_seconds=round((now - start.failed_at).total_seconds(), 1),
            nodes=None,
            instance_type=None,
            step=None,
            loss=None,
            error=start.error,
            undelivered=start,
        )
        for start in undelivered.shown
    ]


def _why_it_ended(record: RunRecord) -> str | None:
    """The error a run failed with; for a rejected run, the first finding that rejected it."""
    if record.error is not None:
        return record.error.error
    rejections = [finding.code for finding in record.findings if finding.severity == "ERROR"]
    return rejections[0] if rejections else None
