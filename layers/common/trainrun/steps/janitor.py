"""The janitor: the last safety net against a bill for something nobody uses.

On a schedule it lists everything tagged with this stack, groups it by run, and starts the
teardown workflow for each run that should have nothing left: a run that ended (and was not
kept) more than a grace period ago, a run whose execution is gone while its record still says
RUNNING (a lost status-change event), and resources that no run record knows. Runs that are
still running, and runs whose owners kept them, are left alone; except a kept cluster whose
`teardown.keep_for` has passed with no run on it (the janitor runs on its schedule even when
nothing else does, so a kept cluster nobody comes back to stops billing). Running it twice is
harmless: the teardown workflow is idempotent and one execution per run and hour is started at most.
"""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

from trainrun.adapters.inventory import tagged_resources
from trainrun.logic.cluster_reuse import borrowers, claim_for_teardown
from trainrun.metrics import Metric
from trainrun.model.run_file import duration_seconds
from trainrun.model.run_record import FINAL_STATUSES, RunRecord, RunStatus, RunStore
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
    time_scale: float = 1.0,
    eks: Any | None = None,
) -> SweepReport:
    """`time_scale`: the local runtime's compressed time (trainrun.local.step_functions), by which
    a kept cluster's idle time is counted; 1 on AWS."""
    by_run: dict[str, list[str]] = defaultdict(list)
    for resource in tagged_resources(ec2, fsx, key=STACK, value=stack, eks=eks):
        if resource.run_id is not None:
            by_run[resource.run_id].append(f"{resource.kind} {resource.id}")
    report = SweepReport(resources_by_run=dict(by_run))
    for run_id in sorted(report.resources_by_run):
        verdict = _verdict(sfn, store, run_id, grace=grace, now=now, time_scale=time_scale)
        if not verdict.tear_down:
            report.left_alone[run_id] = verdict.reason
            continue
        _start_teardown(sfn, teardown_state_machine_arn, run_id, now, delete_kept=verdict.delete_kept)
        report.torn_down[run_id] = verdict.reason
    return report


def count_leftovers(metrics: Any, report: SweepReport) -> None:
    """LeftoverRuns: the runs this sweep started a teardown for. 0 is emitted too, so the alarm
    on it knows a sweep found nothing rather than having no data."""
    metrics.add_metric(name=Metric.LEFTOVER_RUNS, unit="Count", value=len(report.torn_down))


class _Verdict(NamedTuple):
    tear_down: bool
    reason: str  # logged either way
    # A kept cluster past its keep_for goes whole, as `trainrun down` deletes it.
    delete_kept: bool = False


def _verdict(sfn: Any, store: RunStore, run_id: str, *, grace: timedelta, now: datetime, time_scale: float) -> _Verdict:
    """Whether to tear the run down, and why (the reason is logged either way)."""
    record = store.get(run_id)
    if record is None:
        # Load run spec creates the record before anything is provisioned: nothing live owns these.
        return _Verdict(True, "no run record knows this run")
    if record.kept_at is not None:
        return _kept_verdict(store, record, now=now, time_scale=time_scale)
    if record.status in FINAL_STATUSES:
        ended = record.ended_at or record.updated_at
        if now - ended < grace:
            return _Verdict(False, f"ended {ended.isoformat()}, within the grace period")
        return _Verdict(True, f"{record.status.value} at {ended.isoformat()}, past the grace period")
    if record.status == RunStatus.RUNNING and record.execution_arn:
        try:
            status = sfn.describe_execution(executionArn=record.execution_arn)["status"]
        except sfn.exceptions.ExecutionDoesNotExist:
            status = "missing"
        if status != "RUNNING" and now - record.updated_at >= grace:
            return _Verdict(True, f"record says RUNNING but its execution is {status}")
    return _Verdict(False, "the run is in progress")


def _kept_verdict(store: RunStore, record: RunRecord, *, now: datetime, time_scale: float) -> _Verdict:
    """A kept cluster goes once it has been idle for its keep_for: no run on it (cluster.reuse) for
    that long since it was kept or since its last run ended. The janitor claims it first, as
    `trainrun down` does (trainrun.logic.cluster_reuse.claim_for_teardown), so a run that reuses it
    meanwhile is either found here or rejected."""
    assert record.kept_at is not None
    keep_for = record.spec.teardown.keep_for if record.spec is not None else None
    if keep_for is None:
        return _Verdict(False, f"kept since {record.kept_at.isoformat()}")
    if record.down_requested_at is not None or record.torn_down_at is not None:
        return _Verdict(False, "its teardown has begun (`trainrun down`)")
    records = store.scan()
    running = borrowers(records, record)
    if not running:
        ended = [run.ended_at for run in records if run.borrowed is not None and run.borrowed.run_id == record.run_id]
        idle_since = max([record.kept_at, *(when for when in ended if when is not None)])
        if (now - idle_since) * time_scale < timedelta(seconds=duration_seconds(keep_for)):
            return _Verdict(False, f"kept for {keep_for} once idle; idle since {idle_since.isoformat()}")
        running = claim_for_teardown(store, record)
    if running:
        return _Verdict(False, f"kept, and in use (cluster.reuse) by {', '.join(run.run_id for run in running)}")
    return _Verdict(True, f"kept, and idle since {idle_since.isoformat()}: past its keep_for of {keep_for}", True)


def _start_teardown(sfn: Any, state_machine_arn: str, run_id: str, now: datetime, *, delete_kept: bool) -> None:
    # One execution per run and hour: a second sweep within the hour is a no-op.
    name = f"janitor-{now:%Y%m%d%H}-{run_id}"[:80]
    execution_input = {"run_id": run_id, "delete_kept": True} if delete_kept else {"run_id": run_id}
    detail = {"name": run_id, "status": "ORPHANED", "input": json.dumps(execution_input)}
    with contextlib.suppress(sfn.exceptions.ExecutionAlreadyExists):
        sfn.start_execution(stateMachineArn=state_machine_arn, name=name, input=json.dumps(detail))
