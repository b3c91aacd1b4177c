"""What a finished local run amounts to: the run record and the execution history, in one model."""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from trainrun.adapters.inventory import tagged_resources
from trainrun.local.runtime import LocalRuntime, StartedRun
from trainrun.model.checkpoints import CheckpointExport
from trainrun.model.findings import Finding
from trainrun.model.run_record import RunStore, cause_message
from trainrun.model.tags import RUN_ID
from trainrun.ops.runs import execution_history
from trainrun.ops.views import Resources, RunProgress, StateVisit, created_resources, state_visits


def run_progress(store: RunStore, run_id: str) -> RunProgress:
    record = store.get(run_id)
    return RunProgress.of(
        store.get_progress(run_id, "compile")[0],
        store.get_progress(run_id, "train")[0],
        record.job_train if record is not None else None,
    )


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
                    runtime.client("ec2"), runtime.client("fsx"), key=RUN_ID, value=run.run_id
                )
            ],
        ),
        torn_down_at=record.torn_down_at if record is not None else None,
        checkpoints=record.checkpoints if record is not None else None,
        error=error,
    )
