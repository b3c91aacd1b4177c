"""Head-node and job steps: prepare the head node, submit a job, ask Slurm how a job ended.

Everything reaches the head node as an SSM command (AWS-RunShellScript) to the instance
ParallelCluster reported as the cluster's head node. A job state waits for a callback (its
task token is kept in the run record; the progress handler completes it when the job's
authentic end marker arrives in the logs, see trainrun.model.end_marker); when no heartbeat comes,
`check_job` asks Slurm directly, and reads the job's signed end record when Slurm has forgotten it.

A check also fails a job that waits for compute nodes that will not come up (ComputeNodesFailed:
a failing bootstrap puts the queue in ParallelCluster's protected mode, or leaves the nodes down
past workload.node_bootstrap_timeout), and enforces workload.max_runtime and the run's budget
(budget.max_cost_usd): a run with a budget is checked at least once a heartbeat period however
much its job logs (Load run spec sets the job states' timeout and heartbeat,
trainrun.steps.run.job_wait_seconds). And its reservation window: once the window says stop (a
capacity block about to end), the progress function sends no more heartbeats, so the next check
comes within a heartbeat period, and stops the job.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from trainrun.adapters.ec2 import instance_state
from trainrun.adapters.kubernetes import GatewayFor
from trainrun.adapters.s3 import ObjectNotCopied, copy_object
from trainrun.adapters.ssm import CommandResult, send_script, stderr_tail, wait_for_command
from trainrun.errors import HeadNodeLost, JobFailed, SubmitStillRunning, TrainrunError
from trainrun.logic.cluster_reuse import lent_source_key
from trainrun.logic.compute_nodes import compute_nodes_failure
from trainrun.logic.head_node_scripts import (
    END_WATCHER_POLL_SECONDS,
    JOB_STOP_WAIT_SECONDS,
    RUNNING_STATES,
    SLURM_KILL_WAIT_SECONDS,
    JobState,
    parse_job_state,
    parse_submitted,
    prepare_script,
    status_script,
    stop_jobs_script,
    stop_script,
    submit_script,
)
from trainrun.logic.job_log import EndEvent, parse_line
from trainrun.model.end_marker import is_authentic, new_end_key
from trainrun.model.jobs import JOB_KINDS, JobKind, JobRecord
from trainrun.model.resources import Progress
from trainrun.model.run_file import RunSpec
from trainrun.model.run_record import CONTINUED, RunRecord, RunStore, utcnow
from trainrun.steps.budget import BudgetExceeded, budget_spent
from trainrun.steps.progress import complete_ended_task
from trainrun.steps.run import load_run
from trainrun.steps.run_events import JOB_STATES, RunEvents
from trainrun.workflow import State

logger = logging.getLogger(__name__)

# How long a step waits for a short command (submit, status) before giving up on this attempt.
# Every function that waits has a Timeout with room to spare after it (a test checks template.yaml).
SHORT_COMMAND_SECONDS = 45
# How long Check waits for the stop script (it waits up to JOB_STOP_WAIT_SECONDS on the head node),
# with room for SSM to deliver it and report its end.
STOP_COMMAND_SECONDS = JOB_STOP_WAIT_SECONDS + 20
# How often a function asks whether its SSM command has ended.
COMMAND_POLL_SECONDS = 0.5
# Step Functions fails an execution whose history reaches 25,000 events. A silent job costs one
# check per heartbeat period, about 13 events (the job state's 6, the check's 5, the choice's 2).
# After this many checks, half the quota, the wait goes on in a fresh execution: what is left
# covers the provisioning before and the teardown after, with their retries, many times over.
CHECKS_PER_EXECUTION = 1_000
PREPARE_TIMEOUT_SECONDS = 2 * 3600
# A head node in another state (shutting-down, terminated, stopped) lost its preparation with it.
LIVE_INSTANCE_STATES = ("pending", "running")


class HeadNodePreparationFailed(TrainrunError):
    """The head node's preparation command failed; the message ends with its stderr."""


class JobSubmitFailed(TrainrunError):
    """sbatch (or the lookup before it) failed on the head node."""


class JobLost(TrainrunError):
    """Slurm does not know the job any more (or never did)."""


class JobsNotStopped(TrainrunError):
    """A run's jobs could not be cancelled on the kept cluster it ran on; the message ends with the command's stderr."""


class ComputeNodesFailed(TrainrunError):
    """The job is PENDING and its compute nodes will not come up (their bootstrap fails): the queue
    is in ParallelCluster's protected mode, or the nodes are not up workload.node_bootstrap_timeout
    after the job's submission (trainrun.logic.compute_nodes). The message names the nodes, each
    with Slurm's reason; the run's teardown follows."""


class MaxRuntimeExceeded(TrainrunError):
    """The job still runs after workload.max_runtime; the run's teardown stops it."""


class ReservationEnded(TrainrunError):
    """The run's capacity block is about to end: its job was stopped with its grace period
    before EC2 begins terminating the block's instances, and the run's teardown follows."""


class JobRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    run_id: str
    job: JobKind
    # The execution that asks ($$.Execution.Id): Check counts its checks against the history quota.
    execution_arn: str | None = None


class Continuation(BaseModel):
    """Where the wait goes on: the workflow starts this execution, which resumes at `job`."""

    job: JobKind
    execution_name: str


class SubmitRequest(JobRequest):
    task_token: str


class Submitted(BaseModel):
    run_id: str
    job: JobKind
    slurm_job_id: int
    existing: bool


class JobCheck(BaseModel):
    run_id: str
    job: JobKind
    slurm_job_id: int
    state: str
    exit_code: int
    finished: bool
    continuation: Continuation | None = None


def continues_in_new_execution(checks: int) -> bool:
    """Whether an execution that has made `checks` silent-job checks hands the wait on."""
    return checks >= CHECKS_PER_EXECUTION


def continuation_name(run_id: str, number: int) -> str:
    """The n-th continuation's execution name: deterministic, so a retried continuation finds
    the execution already started (ExecutionAlreadyExists) instead of starting a second."""
    return f"{run_id}-c{number}"


def prepare_head_node(
    ssm: Any,
    s3: Any,
    ec2: Any,
    store: RunStore,
    run_id: str,
    *,
    jobs_log_group: str,
    region: str,
    config_bucket: str,
    poll_seconds: int,
    wait_for_node_configured: bool = True,
    sleep: Callable[[float], None] = time.sleep,
) -> Progress:
    """Send the preparation command once, then report on it at each call.

    It runs while the cluster is created (the compute nodes boot meanwhile): until ParallelCluster
    reports the head node's instance it waits (done false); SendCommand then fails
    InstanceNotReachable until the instance's SSM agent is online (the workflow retries it), and
    the script itself waits for /fsx to be mounted (prepare-as-root.sh). A failed command whose
    head node is no longer running is HeadNodeLost, not the preparation's own failure.

    Each call waits up to SHORT_COMMAND_SECONDS for the command to end, so a quick preparation
    (a small workload, no dataset) costs one visit of the state instead of a wait loop. A run on a
    kept cluster has its workload archive copied first to where that cluster's head node reads it
    (trainrun.logic.cluster_reuse.lent_source_key).
    """
    record, spec = load_run(store, run_id)
    if record.cluster is None or record.cluster.head_node_instance_id is None:
        return Progress(
            done=False,
            waiting_on=["the head node's instance (the cluster is being created)"],
            retry_after_seconds=poll_seconds,
        )
    instance_id = head_node_instance(record)
    command_id = record.prepare_command_id
    if command_id is None:
        if record.borrowed is not None:
            spec = _with_lent_source(s3, spec, config_bucket, owner_run_id=record.borrowed.run_id, run_id=run_id)
        command_id = send_script(
            ssm,
            instance_id=instance_id,
            script=prepare_script(
                spec,
                run_id,
                jobs_log_group=jobs_log_group,
                region=region,
                cluster_run_id=record.borrowed.run_id if record.borrowed is not None else None,
                wait_for_node_configured=wait_for_node_configured,
            ),
            comment=f"trainrun {run_id}: prepare head node"[:100],
            timeout_seconds=PREPARE_TIMEOUT_SECONDS,
        )
        store.set_prepare_command(run_id, command_id)
    result = wait_for_head_node_command(ssm, command_id, instance_id, sleep)
    if not result.finished:
        return Progress(
            done=False,
            waiting_on=[f"command {command_id} {result.status}"],
            retry_after_seconds=poll_seconds,
        )
    if not result.succeeded:
        output = stderr_tail(result.stderr) or result.stdout[-2000:]
        state = instance_state(ec2, instance_id)
        if state not in LIVE_INSTANCE_STATES:
            raise HeadNodeLost(
                f"the head node {instance_id} is {state}: its command (preparing the head node) ended "
                f"{result.status}: {output}; the cluster's creation failed or the cluster was deleted"
            )
        raise HeadNodePreparationFailed(f"preparing the head node ended {result.status}: {output}")
    return Progress(done=True, retry_after_seconds=poll_seconds)


def _with_lent_source(s3: Any, spec: RunSpec, config_bucket: str, *, owner_run_id: str, run_id: str) -> RunSpec:
    """`spec` with its S3 workload archive copied (server-side) under the kept cluster's lent
    sources, and named there; a git source is cloned as it is."""
    source = spec.workload.source
    if source.s3 is None:
        return spec
    try:
        copied = copy_object(s3, source.s3, config_bucket, lent_source_key(owner_run_id, run_id, source.s3))
    except ObjectNotCopied as exc:
        raise HeadNodePreparationFailed(
            f"workload.source.s3: {exc}; the kept cluster of run {owner_run_id} reads a later run's workload there"
        ) from exc
    lent = source.model_copy(update={"s3": copied})
    return spec.model_copy(update={"workload": spec.workload.model_copy(update={"source": lent})})


def submit_job(
    ssm: Any,
    store: RunStore,
    request: SubmitRequest,
    *,
    sfn: Any,
    run_events: RunEvents,
    config_bucket: str,
    sleep: Callable[[float], None] = time.sleep,
    end_watcher_poll_seconds: float = END_WATCHER_POLL_SECONDS,
    kubernetes: GatewayFor | None = None,
) -> Submitted:
    """Keep the task token, then sbatch the job (or find the one a first attempt submitted);
    announce the job the first time it is submitted (not when a silent job is waited for again).
    `config_bucket`: the stack's, where the run's Neuron compile cache is by default; `sfn`: Step
    Functions, for a job found already ended.

    Compile's submission also queues the train job's first attempt behind it (a Slurm dependency,
    see submit_script): train starts the moment compile succeeds, while its end marker still
    travels to the workflow. Only train's end key is kept here: the Train state's own submission
    finds that job by its name and records it, with its token (recording it here could overwrite a
    token the Train state already kept: a callback may complete Compile while this still runs). A
    job found already ended (its end marker arrived before the token) completes the task here.
    An EKS run's job is a Kubernetes Job (trainrun.steps.kubernetes, through `kubernetes`)."""
    record, spec = load_run(store, request.run_id)
    if spec.cluster.kind == "eks":
        from trainrun.steps import kubernetes as kubernetes_jobs

        return kubernetes_jobs.submit_job(
            _gateways(kubernetes), store, request, sfn=sfn, run_events=run_events, config_bucket=config_bucket
        )
    instance_id = head_node_instance(record)
    window = record.reservation_window
    never_submitted = (record.job(request.job) or JobRecord()).slurm_job_id is None
    if window is not None and window.stop_is_due(utcnow()) and never_submitted:
        raise ReservationEnded(window.ended_cause(request.job))
    # The token and the end key first: a fast job's end marker must find them. A job submitted
    # again (found by name) keeps its key: its watcher may already be signing with it.
    previous = record.job(request.job) or JobRecord()
    end_key = previous.end_key or new_end_key()
    previous = previous.model_copy(update={"end_key": end_key})
    store.set_job(request.run_id, request.job, previous.model_copy(update={"task_token": request.task_token}))
    chained_end_key = _chained_train_end_key(store, record) if request.job == "compile" else None
    command_id = previous.command_id if previous.slurm_job_id is None else None
    if command_id is None:
        command_id = send_script(
            ssm,
            instance_id=instance_id,
            script=submit_script(
                spec,
                request.run_id,
                request.job,
                end_key=end_key,
                config_bucket=config_bucket,
                attempt=previous.attempt,
                chained_end_key=chained_end_key,
                end_watcher_poll_seconds=end_watcher_poll_seconds,
            ),
            comment=f"trainrun {request.run_id}: submit {request.job} (attempt {previous.attempt})"[:100],
            timeout_seconds=600,
        )
        # Kept before waiting: an attempt that ends before the command does looks at it again
        # (sending another could sbatch the job twice).
        previous = previous.model_copy(update={"command_id": command_id})
        store.set_job(request.run_id, request.job, previous.model_copy(update={"task_token": request.task_token}))
    result = wait_for_head_node_command(ssm, command_id, instance_id, sleep)
    if not result.finished:
        raise SubmitStillRunning(
            f"the {request.job} job's submit command {command_id} is still {result.status} after "
            f"{SHORT_COMMAND_SECONDS} s; the next attempt checks it again"
        )
    if not result.succeeded:
        raise JobSubmitFailed(f"submitting the {request.job} job ended {result.status}: {stderr_tail(result.stderr)}")
    slurm_job_id, existing = parse_submitted(result.stdout, request.job)
    store.set_job(
        request.run_id,
        request.job,
        JobRecord(
            attempt=previous.attempt,
            attempts=previous.attempts,
            task_token=request.task_token,
            command_id=command_id,
            slurm_job_id=slurm_job_id,
            submitted_at=previous.submitted_at or utcnow(),
            state="SUBMITTED",
            end_key=end_key,
        ),
    )
    if previous.submitted_at is None:
        resubmission = f" (attempt {previous.attempt}, a resubmission)" if previous.attempt > 1 else ""
        run_events.publish(record, JOB_STATES[request.job], f"Slurm job {slurm_job_id}{resubmission}")
    if existing:
        progress, _ = store.get_progress(request.run_id, request.job)
        if progress is not None:
            complete_ended_task(sfn, request.task_token, request.run_id, request.job, slurm_job_id, progress)
    return Submitted(run_id=request.run_id, job=request.job, slurm_job_id=slurm_job_id, existing=existing)


def _chained_train_end_key(store: RunStore, record: RunRecord) -> str:
    """The end key of the train job queued behind compile, kept in the run record before the
    compile submission that starts its watcher is sent (a first attempt's, if it made one)."""
    train = record.job("train") or JobRecord()
    if train.end_key is None:
        train = train.model_copy(update={"end_key": new_end_key()})
        store.set_job(record.run_id, "train", train)
    assert train.end_key is not None
    return train.end_key


def check_job(
    ssm: Any,
    store: RunStore,
    request: JobRequest,
    *,
    run_events: RunEvents,
    sleep: Callable[[float], None] = time.sleep,
    now: datetime | None = None,
    time_scale: float = 1.0,
    kubernetes: GatewayFor | None = None,
) -> JobCheck:
    """Ask Slurm how the job is doing, after its heartbeat stopped or its state timed out; raise
    if it ended badly, if it still runs past workload.max_runtime (the state's own timeout
    starts again each time it is entered, so max_runtime is enforced here), or if the run's
    budget is spent (see `guard_running_job`). `time_scale`: the local runtime's compressed time
    (nominal seconds per real second), 1 on AWS; the budget counts real time, as the bill does."""
    record, spec = load_run(store, request.run_id)
    if spec.cluster.kind == "eks":
        from trainrun.steps import kubernetes as kubernetes_jobs

        check = kubernetes_jobs.check_job(
            _gateways(kubernetes), store, request, run_events=run_events, now=now, time_scale=time_scale, sleep=sleep
        )
        if not check.finished and request.execution_arn is not None:
            check.continuation = _continuation(store, request, request.execution_arn)
        return check
    job = record.job(request.job)
    if job is None or job.slurm_job_id is None:
        raise JobLost(f"the {request.job} job of run {request.run_id} was never submitted")
    instance_id = head_node_instance(record)
    command_id = send_script(
        ssm,
        instance_id=instance_id,
        script=status_script(job.slurm_job_id, request.run_id, request.job, job.attempt),
        comment=f"trainrun {request.run_id}: {request.job} job state"[:100],
        timeout_seconds=120,
    )
    result = wait_for_head_node_command(ssm, command_id, instance_id, sleep)
    if not result.succeeded:
        raise JobLost(f"asking Slurm about job {job.slurm_job_id} ended {result.status}: {stderr_tail(result.stderr)}")
    state = parse_job_state(result.stdout)
    if state.state == "UNKNOWN" and state.end_record is not None:
        state = job_state_from_end_record(state, request.run_id, request.job, job)
    check = JobCheck(
        run_id=request.run_id,
        job=request.job,
        slurm_job_id=job.slurm_job_id,
        state=state.state,
        exit_code=state.exit_code,
        finished=state.finished,
    )
    if state.state == "UNKNOWN":
        raise JobLost(f"Slurm does not know the {request.job} job {job.slurm_job_id} of run {request.run_id}")
    if state.finished:
        outcome = "SUCCEEDED" if state.succeeded else "FAILED"
        store.set_job(
            request.run_id,
            request.job,
            job.model_copy(
                update={
                    "state": outcome,
                    "exit_code": state.exit_code,
                    "ended_at": utcnow(),
                    "slurm_state": state.state,
                }
            ),
        )
        if not state.succeeded:
            raise JobFailed(
                f"the {request.job} job {job.slurm_job_id} ended {state.state} with exit code {state.exit_code} "
                "(found by asking Slurm: its end marker never reached the logs)"
            )
    else:
        now = now or utcnow()
        if job.submitted_at is not None:
            running_for = (now - job.submitted_at) * time_scale
            nodes_failure = compute_nodes_failure(
                state.queue,
                needed=spec.capacity.nodes,
                waited_seconds=_nodes_waited_for(record, job.submitted_at, now) * time_scale,
                timeout_seconds=spec.workload.node_bootstrap_timeout_seconds,
            )
            if nodes_failure is not None:
                raise ComputeNodesFailed(
                    f"the {request.job} job {job.slurm_job_id} is still {state.state}: {nodes_failure}"
                )
            if running_for.total_seconds() > spec.workload.max_runtime_seconds:
                raise MaxRuntimeExceeded(
                    f"the {request.job} job {job.slurm_job_id} is still {state.state} after {running_for} "
                    f"(workload.max_runtime is {spec.workload.max_runtime})"
                )
        running = job
        guard_running_job(
            store,
            record,
            request.job,
            run_events,
            now,
            stop=lambda: _stop_job(ssm, record, request.job, running, sleep),
        )
    if not state.finished and request.execution_arn is not None:
        check.continuation = _continuation(store, request, request.execution_arn)
    return check


def _nodes_waited_for(record: RunRecord, submitted_at: datetime, now: datetime) -> float:
    """How long (seconds) the job has waited for nodes that could be up: since its submission, or
    since its reservation started if later (ParallelCluster launches a capacity block's static
    nodes only once the block is active, and the run provisions ahead of its start)."""
    window = record.reservation_window
    since = submitted_at
    if window is not None and window.starts_at is not None and window.starts_at > since:
        since = window.starts_at
    return max((now - since).total_seconds(), 0.0)


def guard_running_job(
    store: RunStore,
    record: RunRecord,
    job: JobKind,
    run_events: RunEvents,
    now: datetime,
    *,
    stop: Callable[[], str],
) -> None:
    """The guards of a job that still runs, of either cluster kind (`stop` stops it with its grace
    period and says how it went):
    - the reservation window: once it says stop (stop_job_at, see
      trainrun.logic.capacity.reservation_window), the job is stopped and ReservationEnded sends the
      run to its teardown, before EC2 begins terminating the instances;
    - the budget (trainrun.steps.budget): once it is spent, the job is stopped and BudgetExceeded
      sends the run to its teardown."""
    window = record.reservation_window
    if window is not None and window.stop_is_due(now):
        raise ReservationEnded(window.ended_cause(job, stop()))
    standing = budget_spent(store, record, run_events, now)
    if standing is not None:
        raise BudgetExceeded(f"{standing}: {stop()}")


def _stop_job(ssm: Any, record: RunRecord, job: JobKind, running: JobRecord, sleep: Callable[[float], None]) -> str:
    """Cancel the job with its grace period (stop_script) and wait for it to end; say so, as the
    cause of the guard that stopped it gives it."""
    if running.slurm_job_id is None:
        raise JobLost(f"the {job} job of run {record.run_id} was never submitted")
    instance_id = head_node_instance(record)
    command_id = send_script(
        ssm,
        instance_id=instance_id,
        script=stop_script(running.slurm_job_id, record.run_id, job, running.attempt),
        comment=f"trainrun {record.run_id}: stop {job}"[:100],
        # SSM's own limit for the script, past Check's wait: SSM never cuts the stop short first.
        timeout_seconds=STOP_COMMAND_SECONDS + 60,
    )
    result = wait_for_head_node_command(ssm, command_id, instance_id, sleep, seconds=STOP_COMMAND_SECONDS)
    return (
        f"the {job} job {running.slurm_job_id} got SIGTERM and up to {SLURM_KILL_WAIT_SECONDS} s (Slurm's KillWait) "
        f"to write its checkpoint; it ended {_how_the_stop_ended(result)}"
    )


def _how_the_stop_ended(result: CommandResult) -> str:
    if not result.succeeded:
        # The teardown that follows stops the job with its cluster all the same.
        return f"in an unknown state (the stop command ended {result.status}: {stderr_tail(result.stderr)})"
    state = parse_job_state(result.stdout)
    if not state.finished:
        return f"still {state.state} after {JOB_STOP_WAIT_SECONDS} s: the teardown stops it with its cluster"
    return f"{state.state} with exit code {state.exit_code}"


def _continuation(store: RunStore, request: JobRequest, execution_arn: str) -> Continuation | None:
    """Count this check; once the execution has made enough, link the next execution in the
    record (before it starts: the janitor and cancel then already ask about it) and name it.
    A retried check of an execution already continued names the same execution again."""
    link = store.count_check(request.run_id, execution_arn)
    if link.ended_because != CONTINUED and not continues_in_new_execution(link.checks):
        return None
    record = store.get(request.run_id)
    assert record is not None  # count_check found it
    arns = [item.execution_arn for item in record.executions]
    position = arns.index(execution_arn)
    if position + 1 < len(arns):
        next_arn = arns[position + 1]
    else:
        # The execution's ARN is its state machine's with the execution's name in place of its own.
        next_arn = f"{execution_arn.rsplit(':', 1)[0]}:{continuation_name(request.run_id, position + 1)}"
        store.continue_execution(request.run_id, execution_arn, next_arn)
    return Continuation(job=request.job, execution_name=next_arn.rsplit(":", 1)[1])


def jobs_may_run(record: RunRecord) -> bool:
    """Whether a job of the run may still be queued or running: one was submitted (its submission
    sent, or its end key made for one: train's, queued behind compile by compile's submission, is
    recorded by the Train state only; on EKS, its Kubernetes Job applied: `slurm_job_id` holds its
    attempt), and neither Slurm or the Job's status (Check) nor its authentic end marker (the
    progress handler) has said that it ended."""
    for kind in JOB_KINDS:
        job, progress = record.job(kind), record.progress(kind)
        if job is None or (job.command_id is None and job.end_key is None and job.slurm_job_id is None):
            continue
        if job.state not in ("SUCCEEDED", "FAILED") and (progress is None or progress.exit_code is None):
            return True
    return False


def stop_jobs(ssm: Any, record: RunRecord, *, sleep: Callable[[float], None] = time.sleep) -> bool:
    """Cancel the run's jobs on its head node (a run on a kept cluster, at its teardown: the cluster
    stays, so nothing else stops them). True once none is queued or running; False while the command
    has not ended (the next teardown pass sends it again: scancel twice is once)."""
    if record.spec is None:
        raise JobsNotStopped(f"run {record.run_id} has no run spec: its jobs' names are not known")
    instance_id = head_node_instance(record)
    command_id = send_script(
        ssm,
        instance_id=instance_id,
        script=stop_jobs_script(record.spec, record.run_id),
        comment=f"trainrun {record.run_id}: stop its jobs"[:100],
        timeout_seconds=120,
    )
    result = wait_for_head_node_command(ssm, command_id, instance_id, sleep)
    if not result.finished:
        return False
    if not result.succeeded:
        raise JobsNotStopped(
            f"stopping the jobs of run {record.run_id} on its kept cluster ended {result.status}: "
            f"{stderr_tail(result.stderr)}"
        )
    return True


def job_state_from_end_record(unknown: JobState, run_id: str, job: JobKind, record: JobRecord) -> JobState:
    """How the job ended, from its end record on /fsx, when the record's signature holds (else
    the job stays UNKNOWN: the default user can write that file, only the end watcher can sign it)."""
    event = parse_line(unknown.end_record or "")
    if not isinstance(event, EndEvent) or event.state is None:
        return unknown
    if not is_authentic(event, run_id=run_id, job=job, end_key=record.end_key, slurm_job_id=record.slurm_job_id):
        logger.warning("the job's end record is not authentic; ignored", extra={"run_id": run_id, "job": job})
        return unknown
    finished = event.state not in RUNNING_STATES
    return JobState(
        state=event.state,
        exit_code=event.exit_code,
        finished=finished,
        succeeded=finished and event.state == "COMPLETED" and event.exit_code == 0,
    )


def wait_for_head_node_command(
    ssm: Any, command_id: str, instance_id: str, sleep: Callable[[float], None], seconds: float | None = None
) -> CommandResult:
    """The command's result once it ends, or as it stands after `seconds` (SHORT_COMMAND_SECONDS)."""
    return wait_for_command(
        ssm,
        command_id=command_id,
        instance_id=instance_id,
        seconds=SHORT_COMMAND_SECONDS if seconds is None else seconds,
        poll_seconds=COMMAND_POLL_SECONDS,
        sleep=sleep,
    )


def _gateways(kubernetes: GatewayFor | None) -> GatewayFor:
    if kubernetes is None:
        raise TrainrunError("an EKS run's job step was given no Kubernetes gateway (KUBERNETES_ROLE_ARN)")
    return kubernetes


def head_node_instance(record: RunRecord) -> str:
    if record.cluster is None or record.cluster.head_node_instance_id is None:
        raise TrainrunError(f"run {record.run_id} has no head node recorded; was '{State.CREATE_CLUSTER}' skipped?")
    return record.cluster.head_node_instance_id
