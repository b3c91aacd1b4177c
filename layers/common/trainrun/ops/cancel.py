"""Cancelling a run: stop its execution so that teardown still happens, then wait until it has.

Stopping an execution ends it ABORTED; the stack's status-change rule then starts the teardown
workflow for the run (the same safety net as for a failure). Should that event be late or lost,
the cancel starts the teardown workflow itself (under a name of its own, so twice is once).

The run record says why the run ended: the cancel records its request (who, when) before it
stops the execution, and the step that records the end (FinishRun, after the teardown) then
records the run CANCELLED, announces it and counts it in RunsCancelled, as it does any outcome.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime

from pydantic import BaseModel

from trainrun.adapters.inventory import tagged_resources
from trainrun.model.run_record import FINAL_STATUSES, RunError, RunRecord, RunStatus
from trainrun.model.tags import RUN_ID
from trainrun.ops.stack import Stack

CANCELLED = "Cancelled"
# How long the status-change rule gets to start the teardown before the cancel starts it itself.
RULE_GRACE_SECONDS = 60.0


class CancelPreview(BaseModel):
    """What a cancel would do, shown before it is confirmed."""

    run_id: str
    name: str | None
    running: bool  # False: the run has already ended; nothing to stop
    status: str
    # Everything of the run that exists now: its cluster, and what carries its tag.
    resources: list[str]
    # teardown.on_failure: keep — teardown keeps everything (a cancel is a failure).
    kept_by_policy: bool


class CancelOutcome(BaseModel):
    run_id: str
    status: str
    torn_down: bool
    kept: bool
    remaining: list[str]
    explicit_teardown: bool  # True: the status-change rule did not start it in time; the cancel did


def tagged_with_run(stack: Stack, run_id: str) -> list[str]:
    """`<kind> <id>` of everything that carries the run's tag now."""
    return [
        f"{resource.kind} {resource.id}"
        for resource in tagged_resources(
            stack.client("ec2"), stack.client("fsx"), key=RUN_ID, value=run_id, eks=stack.client("eks")
        )
    ]


def existing_resources(stack: Stack, record: RunRecord) -> list[str]:
    """What of the run exists now: its cluster (while the record has not seen it torn down) and
    what carries its tag."""
    # The cluster is ParallelCluster's stack, not a tagged resource of ours: the record knows it.
    # A borrowed cluster (cluster.reuse) is the owner's: not the run's to delete.
    owned = record.cluster if record.borrowed is None and record.torn_down_at is None else None
    cluster = [f"cluster {owned.name}"] if owned is not None else []
    return [*cluster, *tagged_with_run(stack, record.run_id)]


def teardown_input(run_id: str, status: str, **teardown: object) -> str:
    """The teardown workflow's input: the shape of the run execution's status-change event that
    the safety net's rule starts it with, the run's own input (with `teardown`'s fields) inside."""
    return json.dumps({"name": run_id, "status": status, "input": json.dumps({"run_id": run_id, **teardown})})


def preview(stack: Stack, record: RunRecord) -> CancelPreview:
    return CancelPreview(
        run_id=record.run_id,
        name=record.name,
        running=record.status == RunStatus.RUNNING,
        status=record.status.value,
        resources=existing_resources(stack, record),
        kept_by_policy=record.spec is not None and record.spec.teardown.on_failure == "keep",
    )


def stop(stack: Stack, record: RunRecord, *, who: str | None = None) -> bool:
    """Record the cancel request and stop the execution; False when the run had already ended."""
    who = who or _user()
    cause = f"cancelled by {who} with `trainrun cancel` at {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC"
    if not stack.store().request_cancel(record.run_id, RunError(error=CANCELLED, cause=cause)):
        return False
    if record.execution_arn is not None:
        sfn = stack.client("stepfunctions")
        # An execution that has just ended by itself cannot be stopped; its own teardown runs.
        with contextlib.suppress(sfn.exceptions.ExecutionDoesNotExist):
            sfn.stop_execution(executionArn=record.execution_arn, error=CANCELLED, cause=cause)
    return True


def wait_for_teardown(
    stack: Stack,
    run_id: str,
    *,
    timeout: float,
    poll: float = 2.0,
    rule_grace: float = RULE_GRACE_SECONDS,
    on_progress: Callable[[list[str]], None] = lambda remaining: None,
    sleep: Callable[[float], None] = time.sleep,
) -> CancelOutcome:
    """Wait until teardown has deleted the run's resources (or kept them by policy) and the run's
    end is recorded (FinishRun comes after the teardown)."""
    store = stack.store()
    started = time.monotonic()
    explicit = False
    while True:
        record = store.get(run_id)
        remaining = tagged_with_run(stack, run_id)
        on_progress(remaining)
        torn_down = record is not None and record.torn_down_at is not None
        kept = record is not None and record.kept_at is not None
        if (torn_down or kept) and record is not None and record.status in FINAL_STATUSES:
            return CancelOutcome(
                run_id=run_id,
                status=record.status.value,
                torn_down=torn_down,
                kept=kept,
                remaining=remaining,
                explicit_teardown=explicit,
            )
        elapsed = time.monotonic() - started
        if not explicit and elapsed >= rule_grace and not _teardown_running(stack, run_id):
            start_teardown(stack, run_id)
            explicit = True
        if elapsed >= timeout:
            left = ", ".join(remaining) or "nothing tagged"
            raise TimeoutError(f"run {run_id} is not torn down after {timeout:.0f}s; still there: {left}")
        sleep(poll)


def start_teardown(stack: Stack, run_id: str) -> None:
    """Start the teardown workflow for the run, as the status-change rule would (once per run)."""
    sfn = stack.client("stepfunctions")
    with contextlib.suppress(sfn.exceptions.ExecutionAlreadyExists):
        sfn.start_execution(
            stateMachineArn=stack.outputs["TeardownStateMachineArn"],
            name=f"cancel-{run_id}"[:80],
            input=teardown_input(run_id, "ABORTED"),
        )


def _teardown_running(stack: Stack, run_id: str) -> bool:
    sfn = stack.client("stepfunctions")
    pages = sfn.get_paginator("list_executions").paginate(
        stateMachineArn=stack.outputs["TeardownStateMachineArn"], statusFilter="RUNNING"
    )
    for page in pages:
        for execution in page["executions"]:
            detail = json.loads(sfn.describe_execution(executionArn=execution["executionArn"]).get("input") or "{}")
            # The run's id is in its execution's input (a continued run's executions are <run id>-c<n>).
            if json.loads(detail.get("input") or "{}").get("run_id") == run_id:
                return True
    return False


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "an unknown user"
