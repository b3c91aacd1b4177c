"""The janitor: the last safety net against a bill for something nobody uses.

On a schedule it lists everything tagged with this stack, groups it by run, and starts the
teardown workflow for each run that should have nothing left: a run that ended (and was not
kept) more than a grace period ago, a run whose execution is gone while its record still says
RUNNING (a lost status-change event), and resources that no run record knows. Runs that are
still running, and runs whose owners kept them, are left alone. Running it twice is harmless:
the teardown workflow is idempotent and one execution per run and hour is started at most.
"""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field

from trainrun.adapters.inventory import tagged_resources
from trainrun.metrics import Metric
from trainrun.model.run_record import FINAL_STATUSES, RunStatus, RunStore
from trainrun.model.tags import STACK


class SweepReport(BaseModel):
    torn_down: dict[str, str] = Field(default_factory=dict)  # run id -> why
    left_alone: dict[str, str] = Field(default_factory=dict)  # run id -> why
    resources_by_run: dict[str, list[str]] = Field(default_factory=dict)


def sweep(
    ec2: Any,
    fsx: Any,
    sfn: Any,
    store: RunStore,
    *,
    stack: str,
    teardown_state_machine_arn: str,
    grace: timedelta,
    now: datetime,
) -> SweepReport:
    by_run: dict[str, list[str]] = defaultdict(list)
    for resource in tagged_resources(ec2, fsx, key=STACK, value=stack):
        if resource.run_id is not None:
            by_run[resource.run_id].append(f"{resource.kind} {resource.id}")
    report = SweepReport(resources_by_run=dict(by_run))
    for run_id in sorted(report.resources_by_run):
        tear_down, reason = _verdict(sfn, store, run_id, grace=grace, now=now)
        if not tear_down:
            report.left_alone[run_id] = reason
            continue
        _start_teardown(sfn, teardown_state_machine_arn, run_id, now)
        report.torn_down[run_id] = reason
    return report


def count_leftovers(metrics: Any, report: SweepReport) -> None:
    """LeftoverRuns: the runs this sweep started a teardown for. 0 is emitted too, so the alarm
    on it knows a sweep found nothing rather than having no data."""
    metrics.add_metric(name=Metric.LEFTOVER_RUNS, unit="Count", value=len(report.torn_down))


def _verdict(sfn: Any, store: RunStore, run_id: str, *, grace: timedelta, now: datetime) -> tuple[bool, str]:
    """Whether to tear the run down, and why (the reason is logged either way)."""
    record = store.get(run_id)
    if record is None:
        # Load run spec creates the record before anything is provisioned: nothing live owns these.
        return True, "no run record knows this run"
    if record.kept_at is not None:
        return False, f"kept since {record.kept_at.isoformat()}"
    if record.status in FINAL_STATUSES:
        ended = record.ended_at or record.updated_at
        if now - ended < grace:
            return False, f"ended {ended.isoformat()}, within the grace period"
        return True, f"{record.status.value} at {ended.isoformat()}, past the grace period"
    if record.status == RunStatus.RUNNING and record.execution_arn:
        try:
            status = sfn.describe_execution(executionArn=record.execution_arn)["status"]
        except sfn.exceptions.ExecutionDoesNotExist:
            status = "missing"
        if status != "RUNNING" and now - record.updated_at >= grace:
            return True, f"record says RUNNING but its execution is {status}"
    return False, "the run is in progress"


def _start_teardown(sfn: Any, state_machine_arn: str, run_id: str, now: datetime) -> None:
    # One execution per run and hour: a second sweep within the hour is a no-op.
    name = f"janitor-{now:%Y%m%d%H}-{run_id}"[:80]
    detail = {"name": run_id, "status": "ORPHANED", "input": json.dumps({"run_id": run_id})}
    with contextlib.suppress(sfn.exceptions.ExecutionAlreadyExists):
        sfn.start_execution(stateMachineArn=state_machine_arn, name=name, input=json.dumps(detail))
