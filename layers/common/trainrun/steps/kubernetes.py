"""The jobs of a `cluster.kind: eks` run, through its cluster's Kubernetes API (trainrun.adapters.kubernetes):
what the head node and Slurm do for a ParallelCluster run (trainrun.steps.head_node), the same
workflow states calling them.

- Dry run (`dry_run`, from Create node group, before the node group is created: nothing costly
  runs before a real API server has checked every object of the run): the namespace is applied
  first (a namespaced object cannot be checked in a namespace that does not exist: the API
  server's NamespaceLifecycle admission answers 404), then every other object of the run is
  applied with `dryRun=All`: the device plugins, the file system's volume and claim, the
  headless Service, and the stage, compile and first train Jobs.
- Prepare Kubernetes (`prepare_kubernetes`, a wait loop): apply the bootstrap objects, wait until
  every node of the group is Ready and advertises its Neuron devices and EFA interfaces (the
  device plugins run on it), then run the stage Job; done once it Completed.
- Compile / Train (`submit_job`): keep the task token, apply the job's Job (`compile`,
  `train-<attempt>`): applying it again is the same Job, so a retried submission submits nothing
  twice.
- How a job ended (`job_status`): the Job's status in the API, never a log line. Its Complete or
  Failed condition decides; a failed Job's pods say why (a DisruptionTarget condition: the node
  was lost, an infrastructure failure; OOMKilled; else the container's exit code), in the state
  vocabulary the ParallelCluster side uses (NODE_FAIL, OUT_OF_MEMORY, FAILED, COMPLETED), so that
  trainrun.logic.job_failure classifies both alike. Each pod's last line (POD_END_LINE) only
  prompts the progress function to ask (`complete_if_ended`); Check asks when the job is silent.
- Check (`check_job`): as on ParallelCluster: the job's end, nodes that never come
  (workload.node_bootstrap_timeout: its pods still unschedulable, with the scheduler's reason),
  max_runtime, the reservation's end and the budget; the last three stop the job
  (`stop_job`: the Job deleted with foreground propagation, its pods get SIGTERM and their grace
  period, waited on until gone).
- Resume (`nodes_ready`): a resubmission waits until the group has its nodes back, as
  trainrun.steps.resume does with Slurm's.

On EKS the job record's `slurm_job_id` holds the attempt number (the Job is `train-<attempt>`):
the progress, status and resume code that follow a job by that number work unchanged.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from trainrun.adapters.kubernetes import GatewayFor, KubernetesGateway
from trainrun.errors import JobFailed, TrainrunError
from trainrun.logic import kubernetes_objects as objects
from trainrun.logic.device_plugins import device_plugin_manifests
from trainrun.logic.eks_node_group import nodegroup_name
from trainrun.model.jobs import JobKind, JobRecord
from trainrun.model.resources import EksClusterRef, Progress
from trainrun.model.run_file import RunSpec
from trainrun.model.run_record import RunRecord, RunStore, utcnow
from trainrun.steps.budget import hold_budget
from trainrun.steps.run import RunRef, load_run
from trainrun.steps.run_events import JOB_STATES, RunEvents

if TYPE_CHECKING:
    from trainrun.steps.head_node import JobCheck, Submitted

logger = logging.getLogger(__name__)

# Kubernetes' node condition and the label EKS puts on a managed node group's nodes.
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
# How long a stop waits for the Job's pods to be gone: their grace period, and room to spare.
STOP_WAIT_SECONDS = objects.TERMINATION_GRACE_SECONDS + 30
# How long the progress function waits, prompted by a pod's end line, for the Job's status to say
# it ended: the pod's own status comes a moment after its last line, the Job's after that.
END_PROMPT_WAIT_SECONDS = 20.0
POLL_SECONDS = 1.0


class KubernetesNotReady(TrainrunError):
    """The cluster's nodes never became ready for the jobs (with why: the device plugins, a node)."""


class StagingFailed(TrainrunError):
    """The stage Job failed: the workload, the dataset or the checkpoints could not be staged."""


@dataclass(frozen=True)
class JobStatus:
    """How a Job stands, from the API: `state` in the ParallelCluster side's vocabulary."""

    name: str
    finished: bool
    succeeded: bool
    state: str
    exit_code: int
    why: str = ""
    # The scheduler's reason for pods not placed yet (None when every pod is placed).
    unschedulable: str | None = None


# --- dry run and preparation ------------------------------------------------------------------------


def dry_run(gateway: KubernetesGateway, record: RunRecord, spec: RunSpec, *, config_bucket: str) -> None:
    """Check every object of the run against the cluster's API server (see the module's docstring)."""
    everything = _run_objects(record, spec, config_bucket=config_bucket)
    gateway.apply(everything[:1], dry_run=True)
    gateway.apply(everything[:1])
    gateway.apply(everything[1:], dry_run=True)


def _run_objects(record: RunRecord, spec: RunSpec, *, config_bucket: str) -> list[dict[str, Any]]:
    if record.storage is None:
        raise TrainrunError(f"run {record.run_id} has no file system recorded; was 'Create file system' skipped?")
    return objects.run_objects(
        spec,
        record.run_id,
        record.storage,
        device_plugin_manifests(),
        config_bucket=config_bucket,
        region=_eks(record).region,
    )


def prepare_kubernetes(
    gateway_for: GatewayFor,
    logs: Any,
    store: RunStore,
    request: RunRef,
    *,
    stack: str,
    progress_function_arn: str,
    log_retention_days: int,
    poll_seconds: int,
    run_events: RunEvents,
    now: datetime | None = None,
    time_scale: float = 1.0,
) -> Progress:
    """One pass of Prepare Kubernetes: bootstrap, nodes ready, staged (see the module's docstring).
    First of all, the cluster's container log group and its subscription to the progress function
    (`progress_function_arn`), before any pod logs (trainrun.adapters.container_logs)."""
    from trainrun.adapters.container_logs import ensure_container_logs
    from trainrun.model.tags import run_tags

    record, spec = load_run(store, request.run_id)
    eks = _eks(record)
    gateway = gateway_for(record)
    now = now or utcnow()
    if eks.bootstrapped_at is None:
        assert record.storage is not None
        ensure_container_logs(
            logs,
            cluster=eks.name,
            run_id=record.run_id,
            progress_function_arn=progress_function_arn,
            retention_days=log_retention_days,
            tags=run_tags(record.run_id, stack),
        )
        gateway.apply(objects.bootstrap_objects(spec, record.run_id, record.storage, device_plugin_manifests()))
        store.set_eks(request.run_id, eks := eks.model_copy(update={"bootstrapped_at": now}))
    if eks.nodes_ready_at is None:
        problems = node_problems(gateway, spec, eks)
        if problems:
            waited = (now - eks.bootstrapped_at).total_seconds() * time_scale if eks.bootstrapped_at else 0.0
            if waited > spec.workload.node_bootstrap_timeout_seconds:
                raise KubernetesNotReady(
                    f"the nodes of EKS cluster {eks.name} were not ready for the jobs "
                    f"{int(waited)} s after the device plugins were applied (workload.node_bootstrap_timeout is "
                    f"{spec.workload.node_bootstrap_timeout}): {'; '.join(problems)}"
                )
            hold_budget(store, record, run_events, now, "waiting until the nodes got ready for the jobs")
            return Progress(done=False, waiting_on=problems, retry_after_seconds=poll_seconds)
        store.set_eks(request.run_id, eks := eks.model_copy(update={"nodes_ready_at": now}))
    status = job_status(gateway, objects.STAGE_JOB)
    if status is None:
        gateway.apply([objects.stage_job(spec, record.run_id, region=eks.region)])
        status = job_status(gateway, objects.STAGE_JOB)
    if status is None or not status.finished:
        hold_budget(store, record, run_events, now, "waiting until the workload was staged")
        why = status.unschedulable if status is not None and status.unschedulable else "running"
        return Progress(done=False, waiting_on=[f"stage job: {why}"], retry_after_seconds=poll_seconds)
    if not status.succeeded:
        raise StagingFailed(f"the stage job ended {status.state}: {status.why}")
    if eks.staged_at is None:
        store.set_eks(request.run_id, eks.model_copy(update={"staged_at": now}))
        logger.info("staged", extra={"run_id": record.run_id, "cluster": eks.name})
    return Progress(done=True, retry_after_seconds=poll_seconds)


def node_problems(gateway: KubernetesGateway, spec: RunSpec, eks: EksClusterRef) -> list[str]:
    """Why the node group is not ready for the jobs: nodes missing, not Ready, or without the Neuron
    devices and EFA interfaces their instance type has (no device plugin runs on them). Empty: ready."""
    wanted = objects.device_resources(spec.capacity.instance_type)
    group = eks.nodegroup or nodegroup_name(spec)
    nodes = gateway.list("Node", labels={NODEGROUP_LABEL: group})
    problems = []
    ready = 0
    for node in nodes:
        name = node["metadata"]["name"]
        status = node.get("status") or {}
        conditions = {item["type"]: item for item in status.get("conditions") or []}
        if (conditions.get("Ready") or {}).get("status") != "True":
            problems.append(f"node {name} is not Ready")
            continue
        allocatable = status.get("allocatable") or {}
        short = [
            f"{resource} {allocatable.get(resource, '0')} of {count}"
            for resource, count in wanted.items()
            if _whole(allocatable.get(resource)) < count
        ]
        if short:
            problems.append(
                f"node {name} advertises {', '.join(short)} (is the {_plugin_of(short)} device plugin running on it?)"
            )
            continue
        ready += 1
    if ready >= spec.capacity.nodes:
        # Enough for a pod on each: a node beside them that is not (a lost one not yet deleted while
        # the Auto Scaling group's replacement has joined) keeps nothing waiting.
        return []
    if len(nodes) < spec.capacity.nodes:
        problems.insert(0, f"{len(nodes)} of {spec.capacity.nodes} nodes of node group {group} registered")
    return problems


def nodes_ready(gateway: KubernetesGateway, record: RunRecord, spec: RunSpec) -> bool:
    """Whether the group has all its nodes ready for a job again (a resubmission waits for it)."""
    return not node_problems(gateway, spec, _eks(record))


# --- jobs --------------------------------------------------------------------------------------------


def submit_job(
    gateway_for: GatewayFor,
    store: RunStore,
    request: Any,
    *,
    sfn: Any,
    run_events: RunEvents,
    config_bucket: str,
) -> Submitted:
    """Keep the task token, then apply the job's Job (once: the same object again changes nothing);
    a Job found already ended completes the task here."""
    from trainrun.steps.head_node import ReservationEnded, Submitted

    record, spec = load_run(store, request.run_id)
    previous = record.job(request.job) or JobRecord()
    window = record.reservation_window
    if window is not None and window.stop_is_due(utcnow()) and previous.slurm_job_id is None:
        raise ReservationEnded(window.ended_cause(request.job))
    store.set_job(request.run_id, request.job, previous.model_copy(update={"task_token": request.task_token}))
    gateway = gateway_for(record)
    name = objects.job_name(request.job, previous.attempt)
    existing = gateway.get("Job", name, objects.NAMESPACE) is not None
    gateway.apply(
        [
            objects.workload_job(
                spec,
                request.run_id,
                request.job,
                previous.attempt,
                config_bucket=config_bucket,
                region=_eks(record).region,
            )
        ]
    )
    store.set_job(
        request.run_id,
        request.job,
        previous.model_copy(
            update={
                "task_token": request.task_token,
                "slurm_job_id": previous.attempt,
                "submitted_at": previous.submitted_at or utcnow(),
                "state": "SUBMITTED",
            }
        ),
    )
    if previous.submitted_at is None:
        resubmission = f" (attempt {previous.attempt}, a resubmission)" if previous.attempt > 1 else ""
        run_events.publish(record, JOB_STATES[request.job], f"Kubernetes Job {name}{resubmission}")
    if existing:
        complete_if_ended(gateway, store, sfn, request.run_id, request.job, wait_seconds=0)
    return Submitted(run_id=request.run_id, job=request.job, slurm_job_id=previous.attempt, existing=existing)


def job_status(gateway: KubernetesGateway, name: str) -> JobStatus | None:
    """The Job's standing from the API (None: no such Job)."""
    job = gateway.get("Job", name, objects.NAMESPACE)
    if job is None:
        return None
    status = job.get("status") or {}
    conditions = {item["type"] for item in status.get("conditions") or [] if item.get("status") == "True"}
    pods = gateway.list("Pod", objects.NAMESPACE, {JOB_NAME_LABEL: name})
    if "Complete" in conditions:
        return JobStatus(name=name, finished=True, succeeded=True, state="COMPLETED", exit_code=0)
    if "Failed" in conditions:
        state, exit_code, why = _failure(job, pods)
        return JobStatus(name=name, finished=True, succeeded=False, state=state, exit_code=exit_code, why=why)
    unschedulable = _unschedulable(pods)
    state = "RUNNING" if (status.get("active") or 0) and unschedulable is None else "PENDING"
    return JobStatus(name=name, finished=False, succeeded=False, state=state, exit_code=0, unschedulable=unschedulable)


def _failure(job: Mapping[str, Any], pods: list[dict[str, Any]]) -> tuple[str, int, str]:
    """Why a failed Job failed: its pod failure policy's verdict on a disrupted pod (the pod itself
    is gone by then), else its first failed pod: (state, exit code, why)."""
    failed_condition: dict[str, Any] = next(
        (item for item in (job.get("status") or {}).get("conditions") or [] if item.get("type") == "Failed"), {}
    )
    if failed_condition.get("reason") == "PodFailurePolicy" and "DisruptionTarget" in failed_condition.get(
        "message", ""
    ):
        return "NODE_FAIL", 143, f"{failed_condition['message']}: the node was lost"
    failed = sorted((pod for pod in pods if (pod.get("status") or {}).get("phase") == "Failed"), key=_finished_at)
    for pod in failed:
        conditions = {item["type"]: item for item in (pod.get("status") or {}).get("conditions") or []}
        disruption = conditions.get("DisruptionTarget")
        if disruption is not None and disruption.get("status") == "True":
            node = (pod.get("spec") or {}).get("nodeName", "?")
            return (
                "NODE_FAIL",
                143,
                (
                    f"pod {pod['metadata']['name']} on node {node} was disrupted ({disruption.get('reason')}: "
                    f"{disruption.get('message', '')}): the node was lost"
                ),
            )
    for pod in failed:
        terminated = _terminated(pod)
        if terminated is None:
            continue
        code = int(terminated.get("exitCode", 1))
        reason = terminated.get("reason", "Error")
        state = "OUT_OF_MEMORY" if reason == "OOMKilled" else "FAILED"
        return state, code, f"pod {pod['metadata']['name']} exited with code {code} ({reason})"
    failures = [item for item in (job.get("status") or {}).get("conditions") or [] if item.get("type") == "Failed"]
    message = failures[0].get("message", "") if failures else ""
    return "FAILED", 1, f"the Job failed: {message or 'no pod says why'}"


def termination_message(gateway: KubernetesGateway, name: str) -> str | None:
    """The termination message of the Job's (first) pod's container (its `terminationMessagePath`)."""
    for pod in gateway.list("Pod", objects.NAMESPACE, {JOB_NAME_LABEL: name}):
        terminated = _terminated(pod)
        if terminated is not None and terminated.get("message"):
            return str(terminated["message"])
    return None


def _terminated(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    for container in (pod.get("status") or {}).get("containerStatuses") or []:
        if container.get("name") == objects.CONTAINER:
            return (container.get("state") or {}).get("terminated")
    return None


def _finished_at(pod: Mapping[str, Any]) -> str:
    terminated = _terminated(pod) or {}
    return str(terminated.get("finishedAt") or "9999")


def _unschedulable(pods: list[dict[str, Any]]) -> str | None:
    for pod in pods:
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return (
                    f"pod {pod['metadata']['name']} is Pending: {condition.get('message') or condition.get('reason')}"
                )
    return None


def record_end(store: RunStore, run_id: str, job: JobKind, running: JobRecord, status: JobStatus) -> JobRecord:
    """Record how the job ended, as Check records what Slurm said."""
    ended = running.model_copy(
        update={
            "state": "SUCCEEDED" if status.succeeded else "FAILED",
            "exit_code": status.exit_code,
            "ended_at": running.ended_at or utcnow(),
            "slurm_state": status.state,
        }
    )
    store.set_job(run_id, job, ended)
    return ended


def complete_if_ended(
    gateway: KubernetesGateway,
    store: RunStore,
    sfn: Any,
    run_id: str,
    job: JobKind,
    *,
    wait_seconds: float = END_PROMPT_WAIT_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> Literal["success", "failure"] | None:
    """Prompted (a pod's end line, a submission finding its Job): ask the API whether the job's Job
    ended, waiting up to `wait_seconds` for its status; if it did, record it and complete the task
    ("success" or "failure"). None while it runs: a line can prompt, never decide."""
    from trainrun.steps.progress import call_task

    record = store.get(run_id)
    running = record.job(job) if record is not None else None
    if running is None or running.slurm_job_id is None:
        return None
    name = objects.job_name(job, running.attempt)
    deadline = time.monotonic() + wait_seconds
    while True:
        status = job_status(gateway, name)
        if status is not None and status.finished:
            break
        if time.monotonic() >= deadline:
            return None
        sleep(POLL_SECONDS)
    ended = record_end(store, run_id, job, running, status)
    if ended.task_token is None:
        return None
    if status.succeeded:
        output = {"job": job, "slurm_job_id": running.slurm_job_id, "exit_code": 0, "kubernetes_job": name}
        sent = call_task(sfn, "send_task_success", taskToken=ended.task_token, output=json.dumps(output))
        return "success" if sent else None
    cause = f"{job} Job {name} ended {status.state} with exit code {status.exit_code}: {status.why}"
    sent = call_task(sfn, "send_task_failure", taskToken=ended.task_token, error=JobFailed.__name__, cause=cause[:4000])
    return "failure" if sent else None


def stop_job(gateway: KubernetesGateway, name: str, *, sleep: Callable[[float], None] = time.sleep) -> str:
    """Delete the Job with foreground propagation and wait until it (and so its pods) is gone; say how
    it went, as the guard that stopped it tells it."""
    if not gateway.delete("Job", name, objects.NAMESPACE):
        return f"the Job {name} was already gone"
    deadline = time.monotonic() + STOP_WAIT_SECONDS
    while gateway.get("Job", name, objects.NAMESPACE) is not None:
        if time.monotonic() >= deadline:
            return f"the Job {name} was still terminating after {STOP_WAIT_SECONDS} s: the teardown deletes its nodes"
        sleep(POLL_SECONDS)
    return (
        f"the Job {name} was deleted: its pods got SIGTERM and up to {objects.TERMINATION_GRACE_SECONDS} s "
        "(their grace period) to write a checkpoint, and are gone"
    )


def check_job(
    gateway_for: GatewayFor,
    store: RunStore,
    request: Any,
    *,
    run_events: RunEvents,
    now: datetime | None = None,
    time_scale: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> JobCheck:
    """Check compile / Check train of an EKS run (see the module's docstring)."""
    from trainrun.steps.head_node import ComputeNodesFailed, JobCheck, JobLost, MaxRuntimeExceeded, guard_running_job

    record, spec = load_run(store, request.run_id)
    running = record.job(request.job)
    if running is None or running.slurm_job_id is None:
        raise JobLost(f"the {request.job} job of run {request.run_id} was never submitted")
    gateway = gateway_for(record)
    name = objects.job_name(request.job, running.attempt)
    status = job_status(gateway, name)
    if status is None:
        raise JobLost(f"the Kubernetes Job {name} of run {request.run_id} is gone")
    check = JobCheck(
        run_id=request.run_id,
        job=request.job,
        slurm_job_id=running.slurm_job_id,
        state=status.state,
        exit_code=status.exit_code,
        finished=status.finished,
    )
    if status.finished:
        record_end(store, request.run_id, request.job, running, status)
        if not status.succeeded:
            raise JobFailed(
                f"the {request.job} Job {name} ended {status.state} with exit code {status.exit_code}: {status.why} "
                "(found by asking the Kubernetes API)"
            )
        return check
    now = now or utcnow()
    if running.submitted_at is not None:
        running_for = (now - running.submitted_at) * time_scale
        if (
            status.unschedulable is not None
            and running_for.total_seconds() > spec.workload.node_bootstrap_timeout_seconds
        ):
            raise ComputeNodesFailed(
                f"the {request.job} Job {name} is still PENDING after {running_for} "
                f"(workload.node_bootstrap_timeout is {spec.workload.node_bootstrap_timeout}): {status.unschedulable}"
            )
        if running_for.total_seconds() > spec.workload.max_runtime_seconds:
            raise MaxRuntimeExceeded(
                f"the {request.job} Job {name} is still {status.state} after {running_for} "
                f"(workload.max_runtime is {spec.workload.max_runtime}): {stop_job(gateway, name, sleep=sleep)}"
            )
    guard_running_job(store, record, request.job, run_events, now, stop=lambda: stop_job(gateway, name, sleep=sleep))
    return check


def stop_run_jobs(gateway: KubernetesGateway, record: RunRecord) -> list[str]:
    """Stop every job of the run still running (cancel, teardown): each Job deleted, waited on."""
    said = []
    jobs: tuple[JobKind, ...] = ("compile", "train")
    for job in jobs:
        running = record.job(job)
        if running is None or running.slurm_job_id is None or running.state in ("SUCCEEDED", "FAILED"):
            continue
        said.append(stop_job(gateway, objects.job_name(job, running.attempt)))
    return said


# --- helpers -----------------------------------------------------------------------------------------


def _eks(record: RunRecord) -> EksClusterRef:
    if record.eks is None or record.eks.status != "ACTIVE":
        raise TrainrunError(f"run {record.run_id} has no ACTIVE EKS cluster recorded")
    return record.eks


def _whole(quantity: Any) -> int:
    try:
        return int(str(quantity))
    except (TypeError, ValueError):
        return 0


def _plugin_of(short: list[str]) -> str:
    return "EFA" if all(item.startswith("vpc.amazonaws.com/efa") for item in short) else "Neuron"
