"""Tear down's first phase: export the run's checkpoint directory before its file system goes.

How. The head node copies the directory with `aws s3 cp --recursive` (an SSM command, its instance
role allowed that one prefix: trainrun.logic.cluster_config), to the stack's config bucket or,
when the run has a data repository, under that repository (trainrun.model.checkpoints). An FSx
data repository task (CreateDataRepositoryTask EXPORT_TO_REPOSITORY) is not used: it exports only
paths under an association's file system path, and the checkpoint directory lives outside the
data repository's /data (RunPaths.checkpoint_dir), while a run without a data repository has no
association to export through at all. One copy from the head node covers both destinations.
An EKS run has no head node: its export Job's pod copies the directory
(trainrun.logic.kubernetes_objects.export_job), its result read from the container's
termination message.

When. In the pass that is about to delete the cluster, since the head node goes with it: on
success, failure and cancel alike (the safety net runs the same teardown). A run whose policy
keeps everything (`keep`) exports when `trainrun down` deletes it later; `keep_file_system`
exports now, because the file system's later deletion (`trainrun down`) has no head node left to
copy from. A file system the run did not create (storage.fsx.file_system_id) is never deleted,
so its checkpoints stay where they are.

Bounds. Each pass waits up to PASS_WAIT_SECONDS for the copy (a small one ends within a single
pass), then leaves the rest to the teardown's own Wait loop, which calls again. An export that
has not ended after EXPORT_TIMEOUT_SECONDS, or that fails, is recorded FAILED with a WARNING
finding, and the teardown goes on: deleting what bills comes first.
The record's `checkpoints` is written when the export starts (with its command) and when it
ends, so a retried teardown follows the command already sent and never exports twice.
"""

from __future__ import annotations

import logging
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from trainrun.adapters.kubernetes import GatewayFor, KubernetesGateway
from trainrun.adapters.ssm import CommandResult, send_script, stderr_tail, wait_for_command
from trainrun.errors import TrainrunError, TransientAwsError
from trainrun.logic.head_node_scripts import export_checkpoints_script, parse_checkpoint_export
from trainrun.model.checkpoints import CheckpointExport, ExportStatus, export_destination
from trainrun.model.findings import Code, Finding, Severity
from trainrun.model.jobs import RunPaths
from trainrun.model.record_size import MAX_ERROR_CAUSE_BYTES, clip_text
from trainrun.model.resources import Progress
from trainrun.model.run_record import RunRecord, RunStore, utcnow
from trainrun.steps.head_node import COMMAND_POLL_SECONDS, SHORT_COMMAND_SECONDS

logger = logging.getLogger(__name__)

# The copy's execution timeout on the head node, and how long teardown waits for it: an hour
# moves hundreds of gigabytes from FSx for Lustre to S3 in the same region.
EXPORT_TIMEOUT_SECONDS = 3600
# How long one teardown pass waits for the copy before the Wait loop takes over: as long as a
# head-node step waits for its command (Tear down's function timeout leaves room for it).
PASS_WAIT_SECONDS: float = SHORT_COMMAND_SECONDS
# Cluster states in which the head node is already going (an earlier teardown pass got there).
_DELETING = ("DELETE_IN_PROGRESS", "DELETE_FAILED")


def export_checkpoints(
    ssm: Any,
    store: RunStore,
    record: RunRecord,
    *,
    config_bucket: str,
    region: str,
    kubernetes: GatewayFor | None = None,
) -> Progress:
    """One pass of the export: done once it ended (exported, skipped or failed), else waiting on it.
    An EKS run's copy is the export Job (`kubernetes`: its cluster's gateway)."""
    export = record.checkpoints
    if export is None:
        export = _start(ssm, store, record, config_bucket=config_bucket, region=region, kubernetes=kubernetes)
    if export.ended:
        return Progress(done=True)
    if record.on_eks:
        return _follow_export_job(_gateway(kubernetes, record), store, record, export)
    return _follow(ssm, store, record, export)


def _gateway(kubernetes: GatewayFor | None, record: RunRecord) -> KubernetesGateway:
    if kubernetes is None:
        raise TrainrunError("an EKS run's teardown was given no Kubernetes gateway (KUBERNETES_ROLE_ARN)")
    return kubernetes(record)


def _follow_export_job(
    gateway: KubernetesGateway, store: RunStore, record: RunRecord, export: CheckpointExport
) -> Progress:
    from trainrun.logic.kubernetes_objects import EXPORT_JOB
    from trainrun.steps.kubernetes import job_status, termination_message

    status = job_status(gateway, EXPORT_JOB)
    if status is None:
        _failed(store, record, export, f"its Kubernetes Job {EXPORT_JOB} is gone")
        return Progress(done=True)
    if not status.finished:
        started = export.started_at or utcnow()
        if (utcnow() - started).total_seconds() > EXPORT_TIMEOUT_SECONDS:
            _failed(
                store, record, export, f"its Job {EXPORT_JOB} was still {status.state} after {EXPORT_TIMEOUT_SECONDS} s"
            )
            return Progress(done=True)
        why = status.unschedulable or status.state
        return Progress(done=False, waiting_on=[f"checkpoint export to {export.destination} ({why})"])
    if not status.succeeded:
        _failed(store, record, export, f"the copy ended {status.state}: {status.why}")
        return Progress(done=True)
    return _recorded_end(store, record, export, termination_message(gateway, EXPORT_JOB) or "")


def export_starts(record: RunRecord) -> bool:
    """Whether the next teardown pass starts a copy on the head node (not yet started, nor skipped)."""
    return record.checkpoints is None and _skip_reason(record) is None


def _skip_reason(record: RunRecord) -> str | None:
    storage, cluster = record.storage, record.cluster
    if record.spec is None or (record.job_compile is None and record.job_train is None):
        return "no job ran, so there are no checkpoints"
    if storage is None or not storage.created:
        return (
            "the file system is not the run's own (storage.fsx.file_system_id): teardown never deletes it, "
            f"so the checkpoints stay in {RunPaths(run_id=record.run_id).checkpoint_dir} on it"
        )
    if record.on_eks:
        eks = record.eks
        if eks is None or eks.status != "ACTIVE" or eks.nodegroup_status != "ACTIVE":
            return (
                "the EKS cluster's nodes were already gone when the teardown began, "
                "so nothing could copy the checkpoints"
            )
        return None
    if cluster is None or cluster.head_node_instance_id is None or cluster.status in _DELETING:
        return "the head node was already gone when the teardown began, so nothing could copy the checkpoints"
    return None


def _start(
    ssm: Any, store: RunStore, record: RunRecord, *, config_bucket: str, region: str, kubernetes: GatewayFor | None
) -> CheckpointExport:
    reason = _skip_reason(record)
    if reason is not None:
        skipped = CheckpointExport(status=ExportStatus.SKIPPED, reason=reason, ended_at=utcnow())
        return _recorded_start(store, record.run_id, skipped)
    if record.on_eks:
        return _start_export_job(_gateway(kubernetes, record), store, record, config_bucket=config_bucket)
    assert record.spec is not None and record.cluster is not None and record.cluster.head_node_instance_id
    destination = export_destination(record.spec, record.run_id, config_bucket)
    try:
        command_id = send_script(
            ssm,
            instance_id=record.cluster.head_node_instance_id,
            script=export_checkpoints_script(record.spec, record.run_id, destination=destination, region=region),
            comment=f"trainrun {record.run_id}: export checkpoints",
            timeout_seconds=EXPORT_TIMEOUT_SECONDS,
        )
    except (ClientError, BotoCoreError, TrainrunError) as exc:
        return _not_started(store, record, destination, f"the head node could not be asked to copy them: {exc}")
    return _started(store, record, destination, command_id)


def _start_export_job(
    gateway: KubernetesGateway, store: RunStore, record: RunRecord, *, config_bucket: str
) -> CheckpointExport:
    from trainrun.logic.kubernetes_objects import EXPORT_JOB, export_job

    assert record.spec is not None
    destination = export_destination(record.spec, record.run_id, config_bucket)
    try:
        region = record.eks.region if record.eks is not None else (record.spec.region or "")
        gateway.apply([export_job(record.spec, record.run_id, destination=destination, region=region)])
    except TrainrunError as exc:
        return _not_started(store, record, destination, f"the cluster could not be asked to copy them: {exc}")
    return _started(store, record, destination, f"job/{EXPORT_JOB}")


def _started(store: RunStore, record: RunRecord, destination: str, command_id: str) -> CheckpointExport:
    """The copy asked for (its SSM command, or its Job: `command_id`), recorded."""
    exporting = CheckpointExport(
        status=ExportStatus.EXPORTING, destination=destination, command_id=command_id, started_at=utcnow()
    )
    return _recorded_start(store, record.run_id, exporting)


def _not_started(store: RunStore, record: RunRecord, destination: str, why: str) -> CheckpointExport:
    """The copy that could not be asked for, recorded FAILED with a warning (once)."""
    failed = _failure(CheckpointExport(status=ExportStatus.FAILED, destination=destination), why)
    started = _recorded_start(store, record.run_id, failed)
    if started is failed:
        _warn(store, record, failed)
    return started


def _recorded_start(store: RunStore, run_id: str, export: CheckpointExport) -> CheckpointExport:
    """`export`, recorded; or the one another teardown pass recorded first (its command is the one followed)."""
    if store.start_checkpoint_export(run_id, export):
        return export
    current = store.get(run_id)
    return current.checkpoints if current is not None and current.checkpoints is not None else export


def _follow(ssm: Any, store: RunStore, record: RunRecord, export: CheckpointExport) -> Progress:
    assert export.command_id is not None and record.cluster is not None and record.cluster.head_node_instance_id
    try:
        result = wait_for_command(
            ssm,
            command_id=export.command_id,
            instance_id=record.cluster.head_node_instance_id,
            seconds=PASS_WAIT_SECONDS,
            poll_seconds=COMMAND_POLL_SECONDS,
        )
    except TransientAwsError as exc:
        # Throttled: the next pass looks again (still bounded by the export's start).
        result = CommandResult(status="Pending", stdout="", stderr=str(exc), finished=False, succeeded=False)
    except (ClientError, BotoCoreError, TrainrunError) as exc:
        _failed(store, record, export, f"its command {export.command_id} could not be followed: {exc}")
        return Progress(done=True)
    if not result.finished:
        started = export.started_at or utcnow()
        if (utcnow() - started).total_seconds() > EXPORT_TIMEOUT_SECONDS:
            _failed(
                store,
                record,
                export,
                f"its command {export.command_id} was still {result.status} after {EXPORT_TIMEOUT_SECONDS} s",
            )
            return Progress(done=True)
        return Progress(done=False, waiting_on=[f"checkpoint export to {export.destination} ({result.status})"])
    if not result.succeeded:
        detail = stderr_tail(result.stderr) or result.status_details or result.status
        _failed(store, record, export, f"the copy ended {result.status}: {detail}")
        return Progress(done=True)
    return _recorded_end(store, record, export, result.stdout)


def _recorded_end(store: RunStore, record: RunRecord, export: CheckpointExport, output: str) -> Progress:
    """Record the copy that ended well, from its output's TRAINRUN-CHECKPOINTS line."""
    try:
        files = parse_checkpoint_export(output)
    except TrainrunError as exc:
        _failed(store, record, export, str(exc))
        return Progress(done=True)
    ended = utcnow()
    if files == 0:
        directory = RunPaths(run_id=record.run_id).checkpoint_dir
        outcome = export.model_copy(
            update={
                "status": ExportStatus.SKIPPED,
                "ended_at": ended,
                "reason": f"{directory} was empty or missing: the workload saved no checkpoints there",
            }
        )
    else:
        outcome = export.model_copy(update={"status": ExportStatus.EXPORTED, "files": files, "ended_at": ended})
    store.set_checkpoint_export(record.run_id, outcome)
    return Progress(done=True)


def unexpected_failure(store: RunStore, record: RunRecord, exc: Exception) -> None:
    """Record an export that failed in a way its own steps did not foresee (as far as it got:
    the record read again, since the pass may have recorded the export's start)."""
    current = store.get(record.run_id) or record
    export = current.checkpoints or CheckpointExport(status=ExportStatus.FAILED)
    _failed(store, current, export, f"{type(exc).__name__}: {exc}")


def _failure(export: CheckpointExport, why: str) -> CheckpointExport:
    reason = clip_text(f"exporting the checkpoints to {export.destination} failed: {why}", MAX_ERROR_CAUSE_BYTES)
    return export.model_copy(update={"status": ExportStatus.FAILED, "ended_at": utcnow(), "reason": reason})


def _failed(store: RunStore, record: RunRecord, export: CheckpointExport, why: str) -> None:
    """Record the failed export, and say so as a WARNING finding: the teardown goes on."""
    failed = _failure(export, why)
    store.set_checkpoint_export(record.run_id, failed)
    _warn(store, record, failed)


def _warn(store: RunStore, record: RunRecord, failed: CheckpointExport) -> None:
    logger.warning(failed.reason, extra={"run_id": record.run_id})
    finding = Finding(code=Code.CHECKPOINT_EXPORT_FAILED, severity=Severity.WARNING, message=failed.reason)
    store.set_findings(record.run_id, [*record.findings, finding])
