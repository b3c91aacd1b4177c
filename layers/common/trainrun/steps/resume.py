"""Resume train: after the train job failed, decide whether to resubmit it, wait for the cluster
to have its nodes back, and open the next attempt (workload.retries; trainrun.logic.job_failure
says which failures are the infrastructure's).

The workflow calls `resume_job` from the state after the failure ("Resume train") and again
after each "Wait for nodes", until it answers `resubmit` (the next attempt is open: Train submits
it) or `resubmit=False` (the failure is the run's). Every call is safe to repeat:

1. The failed attempt is decided once and closed in the run record (`JobRecord.attempts`), from
   Slurm's state for it (Check found it, or its end marker said it) and the failure signatures its
   own log lines matched (`JobProgress.attempts`). The end marker completes the job state before
   the progress function records its batch, so an attempt whose end is not recorded yet is waited
   for (a few polls, `END_RECORD_POLLS`), then decided on what there is.
2. Nodes: the head node's sinfo, through SSM like every head-node check, until the run's nodes are
   idle (ParallelCluster replaces a failed static node), for at most `NODES_BACK_SECONDS`; at once
   ComputeNodesFailed if the replacements' bootstrap keeps failing and the queue is in protected mode. The
   cluster bills all the while, so the run's budget holds at each look (trainrun.steps.budget).
3. The next attempt is opened (attempt + 1, no Slurm job yet): a retried call finds it open and
   answers the same; Train's submission of it names the attempt (its own Slurm job name), so a
   retried submission finds the job instead of submitting a second.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from trainrun.adapters.kubernetes import GatewayFor
from trainrun.adapters.ssm import send_script, stderr_tail
from trainrun.errors import TrainrunError
from trainrun.logic.compute_nodes import protected_mode
from trainrun.logic.head_node_scripts import node_states_script, parse_node_states
from trainrun.logic.job_failure import infrastructure_failure, workload_failure
from trainrun.model.jobs import Attempt, AttemptProgress, JobKind, JobRecord
from trainrun.model.record_size import MAX_ATTEMPT_WHY_BYTES, clip_text
from trainrun.model.run_file import RunSpec
from trainrun.model.run_record import RunRecord, RunStore, utcnow
from trainrun.steps.budget import BudgetExceeded, budget_spent
from trainrun.steps.head_node import ComputeNodesFailed, head_node_instance, wait_for_head_node_command
from trainrun.steps.run import load_run
from trainrun.steps.run_events import RunEvents

# Visits of "Resume train" that wait for the failed attempt's end to be recorded before deciding.
END_RECORD_POLLS = 6
# How long (nominal seconds) a resubmission waits for the cluster's nodes to be idle again.
# ParallelCluster replaces an unhealthy static node in minutes (a new instance, then its bootstrap).
NODES_BACK_SECONDS = 3600
# How often it looks, at least: each look costs the execution about 9 history events, so an hour's
# wait is some 540 of them per resubmission (10 resubmissions stay far from the 25,000-event quota,
# beside the silent-job checks' half: trainrun.steps.head_node.CHECKS_PER_EXECUTION).
NODES_POLL_SECONDS = 60


class NodesNotBack(TrainrunError):
    """The cluster did not have its nodes back within NODES_BACK_SECONDS of the failure."""


class NodeStatesUnknown(TrainrunError):
    """Asking the head node for its nodes' states failed."""


class ResumeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    run_id: str
    job: JobKind


class ResumeDecision(BaseModel):
    """Whether the job is resubmitted, and whether its next attempt is open (`ready`) yet."""

    run_id: str
    job: JobKind
    resubmit: bool
    ready: bool
    # The attempt that failed, and why (for a person: the run's events and its record say it too).
    failed_attempt: int
    why: str
    retry_after_seconds: int = 0


def resume_job(
    ssm: Any,
    store: RunStore,
    request: ResumeRequest,
    *,
    poll_seconds: int,
    run_events: RunEvents,
    now: datetime | None = None,
    time_scale: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
    kubernetes: GatewayFor | None = None,
) -> ResumeDecision:
    """One visit of "Resume train" (see the module's docstring). `time_scale`: the local
    runtime's compressed time (nominal seconds per real second), 1 on AWS; the budget counts real
    time, as the bill does."""
    record, spec = load_run(store, request.run_id)
    job = record.job(request.job)
    if job is None:
        raise TrainrunError(f"the {request.job} job of run {request.run_id} was never submitted")
    if job.slurm_job_id is None and job.attempts and job.attempts[-1].number == job.attempt - 1:
        # Opened by an earlier call that did not get to answer: answer the same again.
        return _decision(request, job.attempts[-1], resubmit=True, ready=True)
    closed = _closed(job)
    if closed is None:
        decided, job = _close_attempt(store, request, spec, job)
        if decided is None:
            return ResumeDecision(
                run_id=request.run_id,
                job=request.job,
                resubmit=True,
                ready=False,
                failed_attempt=job.attempt,
                why="waiting for the failed attempt's end to be recorded",
                retry_after_seconds=poll_seconds,
            )
        closed = decided
    if not _resubmits(spec, request.job, closed):
        return _decision(request, closed, resubmit=False, ready=False)
    if not _nodes_back(ssm, record, spec, closed, sleep, kubernetes):
        now = now or utcnow()
        standing = budget_spent(store, record, run_events, now)
        if standing is not None:
            raise BudgetExceeded(
                f"{standing}, while the cluster got its nodes back after attempt {closed.number} of the "
                f"{request.job} job failed: no job runs; the teardown deletes the cluster"
            )
        waited = (now - (closed.ended_at or utcnow())).total_seconds() * time_scale
        if waited > NODES_BACK_SECONDS:
            raise NodesNotBack(
                f"the cluster of run {request.run_id} did not have its {spec.capacity.nodes} nodes idle again "
                f"{NODES_BACK_SECONDS // 60} minutes after attempt {closed.number} of the {request.job} job failed "
                f"({closed.why})"
            )
        wait = max(poll_seconds, NODES_POLL_SECONDS)
        return _decision(request, closed, resubmit=True, ready=False, retry_after_seconds=wait)
    store.set_job(
        request.run_id,
        request.job,
        # The next attempt: no Slurm job yet; the end key stays (each attempt's end marker names its own job).
        JobRecord(attempt=closed.number + 1, attempts=job.attempts, end_key=job.end_key),
    )
    return _decision(request, closed, resubmit=True, ready=True)


def _decision(
    request: ResumeRequest, closed: Attempt, *, resubmit: bool, ready: bool, retry_after_seconds: int = 0
) -> ResumeDecision:
    return ResumeDecision(
        run_id=request.run_id,
        job=request.job,
        resubmit=resubmit,
        ready=ready,
        failed_attempt=closed.number,
        why=closed.why or "",
        retry_after_seconds=retry_after_seconds,
    )


def _closed(job: JobRecord) -> Attempt | None:
    """The current attempt as closed by an earlier call, if it was."""
    return next((item for item in job.attempts if item.number == job.attempt), None)


def _resubmits(spec: RunSpec, kind: JobKind, closed: Attempt) -> bool:
    """Whether the failed attempt is resubmitted: an infrastructure failure, with attempts left."""
    return kind == "train" and closed.infrastructure and closed.number <= spec.workload.train_retries


def _close_attempt(
    store: RunStore, request: ResumeRequest, spec: RunSpec, job: JobRecord
) -> tuple[Attempt | None, JobRecord]:
    """Decide why the current attempt failed and record it closed; (None, job) while its end is
    not recorded yet (and END_RECORD_POLLS allow waiting for it)."""
    progress = _attempt_progress(store, request, job)
    logged_end = progress is not None and progress.slurm_job_id == job.slurm_job_id and progress.end_state is not None
    if job.slurm_state is None and not logged_end and job.resume_polls < END_RECORD_POLLS:
        waiting = job.model_copy(update={"resume_polls": job.resume_polls + 1})
        store.set_job(request.run_id, request.job, waiting)
        return None, waiting
    state = job.slurm_state or (progress.end_state if logged_end and progress is not None else None)
    signatures = progress.failures if progress is not None else []
    succeeded = job.state == "SUCCEEDED"
    # An EKS run's state is its Kubernetes Job's, in Slurm's words (trainrun.steps.kubernetes).
    scheduler = "Kubernetes" if spec.cluster.kind == "eks" else "Slurm"
    infrastructure = None if succeeded else infrastructure_failure(state, signatures, scheduler=scheduler)
    if succeeded:
        why = "the attempt succeeded: nothing to resubmit"
    elif infrastructure is not None:
        why = infrastructure
        if job.attempt > spec.workload.train_retries:
            why += f"; no resubmission left (workload.retries: {spec.workload.train_retries})"
    else:
        why = workload_failure(state, job.exit_code, signatures, scheduler=scheduler)
    closed = Attempt(
        number=job.attempt,
        slurm_job_id=job.slurm_job_id,
        submitted_at=job.submitted_at,
        ended_at=job.ended_at or utcnow(),
        state=state,
        infrastructure=infrastructure is not None,
        why=clip_text(why, MAX_ATTEMPT_WHY_BYTES),
    )
    outcome = "SUCCEEDED" if succeeded else "FAILED"
    job = job.model_copy(update={"state": outcome, "attempts": [*job.attempts, closed], "task_token": None})
    store.set_job(request.run_id, request.job, job)
    return closed, job


def _attempt_progress(store: RunStore, request: ResumeRequest, job: JobRecord) -> AttemptProgress | None:
    progress, _ = store.get_progress(request.run_id, request.job)
    if progress is None:
        return None
    return next((item for item in progress.attempts if item.number == job.attempt), None)


def _nodes_back(
    ssm: Any,
    record: RunRecord,
    spec: RunSpec,
    closed: Attempt,
    sleep: Callable[[float], None],
    kubernetes: GatewayFor | None,
) -> bool:
    """Whether the cluster has the run's nodes idle again (sinfo on the head node); ComputeNodesFailed
    when the replacements' bootstrap failed until ParallelCluster put the queue in protected mode.
    An EKS run's: every node of its group Ready with its devices (trainrun.steps.kubernetes)."""
    if spec.cluster.kind == "eks":
        from trainrun.steps.kubernetes import nodes_ready

        if kubernetes is None:
            raise TrainrunError("an EKS run's Resume train was given no Kubernetes gateway (KUBERNETES_ROLE_ARN)")
        return nodes_ready(kubernetes(record), record, spec)
    instance_id = head_node_instance(record)
    command_id = send_script(
        ssm,
        instance_id=instance_id,
        script=node_states_script(record.run_id),
        comment=f"trainrun {record.run_id}: compute node states"[:100],
        timeout_seconds=120,
    )
    result = wait_for_head_node_command(ssm, command_id, instance_id, sleep)
    if not result.succeeded:
        raise NodeStatesUnknown(
            f"asking Slurm for the nodes' states ended {result.status}: {stderr_tail(result.stderr)}"
        )
    states = parse_node_states(result.stdout)
    protected = protected_mode(states.queue)
    if protected is not None:
        raise ComputeNodesFailed(
            f"the cluster of run {record.run_id} will not get its nodes back after attempt {closed.number} of the "
            f"train job failed ({closed.why}): {protected}"
        )
    return states.idle >= spec.capacity.nodes
