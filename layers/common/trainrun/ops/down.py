"""Tearing down a run that has ended: most often one whose teardown policy kept its cluster
(`teardown: {on_success: keep}` / `on_failure: keep` / `keep_file_system`), to iterate on it.

`trainrun down` starts the stack's teardown workflow for the run with `delete_kept: true`, so it
deletes what the policy kept (the cluster, then the file system, then the network), and waits
until the run is recorded torn down. A run still running is `trainrun cancel`'s: stopping it is
another thing. A run already torn down needs nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from pydantic import BaseModel

from trainrun.logic.cluster_reuse import claim_for_teardown
from trainrun.model.run_record import RunRecord, RunStatus
from trainrun.ops.cancel import existing_resources, teardown_input
from trainrun.ops.stack import Stack


class StillRunning(Exception):
    """The run has not ended: `trainrun cancel` stops it (and tears it down)."""


class ClusterInUse(Exception):
    """Runs on the run's kept cluster (cluster.reuse) are still running: deleting it would kill their jobs."""


class DownOutcome(BaseModel):
    run_id: str
    already_torn_down: bool
    deleted: list[str]  # what existed when `down` began and is gone now
    remaining: list[str]  # still tagged with the run (teardown failed: see its teardown error)
    teardown_error: str | None


def start(stack: Stack, record: RunRecord) -> str:
    """Start the teardown workflow for the run, deleting what was kept; its execution's ARN."""
    if record.status == RunStatus.RUNNING:
        raise StillRunning(f"run {record.run_id} is still running: `trainrun cancel {record.run_id}` stops it")
    _refuse_while_borrowed(stack, record)
    sfn = stack.client("stepfunctions")
    # Its own name each time: a teardown that failed can be started again (names are unique for 90 days).
    name = f"down-{datetime.now(UTC):%Y%m%dT%H%M%S}-{record.run_id}"[:80]
    started = sfn.start_execution(
        stateMachineArn=stack.outputs["TeardownStateMachineArn"],
        name=name,
        input=teardown_input(record.run_id, "DOWN", delete_kept=True),
    )
    return str(started["executionArn"])


def _refuse_while_borrowed(stack: Stack, record: RunRecord) -> None:
    """No run may be left running on a cluster that is being deleted."""
    if record.cluster is None or record.borrowed is not None or record.torn_down_at is not None:
        return  # no cluster of its own to lend
    running = claim_for_teardown(stack.store(), record)
    if running:
        names = ", ".join(run.run_id for run in running)
        raise ClusterInUse(
            f"run {record.run_id}'s cluster {record.cluster.name} is in use by {names} (cluster.reuse), still "
            f"running: deleting it would kill their jobs. Wait for them to end (`trainrun watch RUN`), or stop them "
            f"with `trainrun cancel RUN`, then `trainrun down {record.run_id}` again"
        )


def wait(
    stack: Stack,
    record: RunRecord,
    execution_arn: str,
    before: list[str],
    *,
    timeout: float,
    poll: float = 2.0,
    on_progress: Callable[[list[str]], None] = lambda remaining: None,
    sleep: Callable[[float], None] = time.sleep,
) -> DownOutcome:
    """Wait until the teardown execution has ended, reporting what is left on each poll."""
    sfn = stack.client("stepfunctions")
    store = stack.store()
    deadline = time.monotonic() + timeout
    while True:
        # The execution first: read after it has ended, the record and the resources are its end's.
        # (Read before, they could predate it, and a teardown that had just succeeded look failed.)
        execution = sfn.describe_execution(executionArn=execution_arn)
        current = store.get(record.run_id) or record
        remaining = existing_resources(stack, current)
        on_progress(remaining)
        if execution["status"] != "RUNNING":
            error = None
            if current.torn_down_at is None:
                failure = current.teardown_error
                error = (
                    f"{failure.error}: {failure.cause}"
                    if failure is not None
                    else f"its execution ended {execution['status']}: {execution.get('cause', 'no cause given')}"
                )
            return DownOutcome(
                run_id=record.run_id,
                already_torn_down=False,
                deleted=[item for item in before if item not in remaining],
                remaining=remaining,
                teardown_error=error,
            )
        if time.monotonic() >= deadline:
            left = ", ".join(remaining) or "nothing tagged"
            raise TimeoutError(
                f"run {record.run_id} is not torn down after {timeout:.0f}s (the teardown goes on); still there: {left}"
            )
        sleep(poll)
