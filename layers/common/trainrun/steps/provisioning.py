"""Provisioning and teardown steps: network, file system, data repository, cluster — and back.

Each create step is idempotent and is also its own wait loop's check: the state machine calls
it again after a wait until it reports done, and every call adopts what earlier calls (or a
crashed attempt) created, found by the run's tags. Teardown makes one pass per call in
dependency order and finds resources by tag as well as by the ids in the run record.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict

from trainrun.adapters.kubernetes import GatewayFor
from trainrun.errors import TrainrunError, TransientAwsError
from trainrun.metrics import Metric
from trainrun.model.findings import Code
from trainrun.model.record_size import clip_text
from trainrun.model.resources import ClusterRef, NetworkIds, Progress, StorageIds
from trainrun.model.run_record import FINAL_STATUSES, RunError, RunRecord, RunStore, utcnow
from trainrun.model.tags import run_tags
from trainrun.steps.budget import hold_budget
from trainrun.steps.run import RunRef, load_run
from trainrun.steps.run_events import RunEvents, RunState
from trainrun.workflow import State

logger = logging.getLogger(__name__)
# The failed resource's part of ClusterCreateFailed's message, at most: the error's cause
# (record_size.MAX_ERROR_CAUSE_BYTES) holds ParallelCluster's failures and the stack trace too.
MAX_FAILED_RESOURCE_BYTES = 2048


class ClusterCreateFailed(TrainrunError):
    """ParallelCluster ended CREATE_FAILED; the message carries its failures[] (code: reason)."""


class TeardownFailed(TrainrunError):
    """Something the run created could not be deleted (e.g. a cluster ended DELETE_FAILED)."""


class ClusterDeleteFailed(TeardownFailed):
    """ParallelCluster ended the cluster's deletion DELETE_FAILED."""


class ConfigurationMissing(TrainrunError):
    """The stack lacks a setting this step needs (e.g. PclusterApiUrl)."""


class WorkflowState(BaseModel):
    """The parts of the state machine's state that teardown and the final record look at."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    error: RunError | None = None
    teardown_error: RunError | None = None


class TeardownInput(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    run_id: str
    state: WorkflowState = WorkflowState()
    # `trainrun down`: delete what the teardown policy kept (keep, keep_file_system) after all.
    delete_kept: bool = False


# --- create ------------------------------------------------------------------------------------


def create_network(ec2: Any, store: RunStore, request: RunRef, *, stack: str, poll_seconds: int) -> Progress:
    from trainrun.adapters.network import (
        describe_existing_network,
        ensure_network,
        network_progress,
        second_zone,
        zone_of_subnet,
    )

    record, spec = load_run(store, request.run_id)
    existing = spec.network.existing
    if existing is not None:
        ids = describe_existing_network(
            ec2,
            run_id=request.run_id,
            stack=stack,
            vpc_id=existing.vpc_id,
            public_subnet_id=existing.public_subnet_id,
            private_subnet_id=existing.private_subnet_id,
        )
        store.set_network(request.run_id, ids)
        return Progress(done=True, retry_after_seconds=poll_seconds)
    zone = record.availability_zone
    if zone is None:
        raise TrainrunError(f"run {request.run_id} has no availability zone; was '{State.VALIDATE_CAPACITY}' skipped?")
    known = record.network
    control_plane_zone = None
    if spec.cluster.kind == "eks":
        recorded = known.control_plane_subnet_id if known is not None else None
        control_plane_zone = zone_of_subnet(ec2, recorded) if recorded else second_zone(ec2, zone)
    ids = ensure_network(
        ec2,
        run_id=request.run_id,
        stack=stack,
        cidr=spec.network.cidr,
        availability_zone=zone,
        control_plane_zone=control_plane_zone,
        known=known,
    )
    store.set_network(request.run_id, ids)
    return _with_retry(network_progress(ec2, ids), poll_seconds)


def create_file_system(fsx: Any, store: RunStore, request: RunRef, *, stack: str, poll_seconds: int) -> Progress:
    from trainrun.adapters.fsx import describe_existing_file_system, ensure_file_system

    record, spec = load_run(store, request.run_id)
    existing_id = spec.storage.fsx.file_system_id
    if existing_id is not None:
        store.set_storage(request.run_id, describe_existing_file_system(fsx, existing_id))
        return Progress(done=True, retry_after_seconds=poll_seconds)
    # Only the private subnet and the security group are needed: the file system is created while
    # the network's NAT gateway comes up (Create network records both in its first call).
    network = record.network
    if network is None or network.private_subnet_id is None or network.security_group_id is None:
        return Progress(
            done=False,
            waiting_on=["the network's private subnet and security group"],
            retry_after_seconds=poll_seconds,
        )
    created = ensure_file_system(
        fsx,
        run_id=request.run_id,
        stack=stack,
        spec=spec.storage.fsx,
        subnet_id=network.private_subnet_id,
        security_group_id=network.security_group_id,
    )
    names = created.model_dump(include={"file_system_id", "dns_name", "mount_name"})
    store.set_storage(request.run_id, (record.storage or StorageIds()).model_copy(update=names))
    # Requested is enough: the cluster is created while FSx creates the file system (its nodes mount
    # it once it is AVAILABLE), and Link data repository waits for it, failing the run if it fails.
    return Progress(done=True, retry_after_seconds=poll_seconds)


def link_data_repository(fsx: Any, store: RunStore, request: RunRef, *, stack: str, poll_seconds: int) -> Progress:
    """Wait until the file system the run creates is AVAILABLE (StorageFailed if FSx fails to create
    it), then link its data repository. A file system the run names was AVAILABLE already, and
    takes no link: done at once, as for a run without a data repository once its file system is up."""
    from trainrun.adapters.fsx import data_repository_progress, ensure_data_repository, file_system_progress

    record, spec = load_run(store, request.run_id)
    storage = record.storage
    if storage is None or not storage.created:
        return Progress(done=True, retry_after_seconds=poll_seconds)
    file_system = file_system_progress(fsx, _required(storage.file_system_id, "the file system"))
    if not file_system.done:
        return _with_retry(file_system, poll_seconds)
    data_repository = spec.storage.fsx.data_repository
    if data_repository is None:
        return Progress(done=True, retry_after_seconds=poll_seconds)
    association_id = ensure_data_repository(
        fsx,
        run_id=request.run_id,
        stack=stack,
        file_system_id=_required(storage.file_system_id, "the file system"),
        data_repository=data_repository,
    )
    store.set_storage(request.run_id, storage.model_copy(update={"data_repository_association_id": association_id}))
    return _with_retry(data_repository_progress(fsx, association_id), poll_seconds)


def create_cluster(
    api: Any,
    store: RunStore,
    request: RunRef,
    *,
    stack: str,
    region: str,
    neuron_install_script_uri: str | None,
    poll_seconds: int,
    run_events: RunEvents,
    node_policy_arn: str | None = None,
    s3: Any = None,
    config_bucket: str = "",
    now: datetime | None = None,
) -> Progress:
    """Create the cluster through the ParallelCluster API (adopting one of the same name) and follow it;
    announce it provisioned when it first reaches CREATE_COMPLETE. While it is created, the run's
    budget holds (trainrun.steps.budget): spent, the run fails BudgetExceeded (`now`: the time it is
    checked at, the clock's by default).

    Without `neuron_install_script_uri` the nodes run trainrun's own Neuron script, uploaded
    first to `config_bucket` (through `s3`) under its content address. The run's Neuron compile
    cache is in `config_bucket` too unless the run names its own (trainrun.logic.compile_cache)."""
    from trainrun.adapters.pcluster import ClusterAlreadyExists
    from trainrun.logic.cluster_config import ClusterIds, cluster_name, render_cluster_config, to_yaml
    from trainrun.logic.file_system_mount import upload_mount_script
    from trainrun.logic.neuron_install import upload_script

    record, spec = load_run(store, request.run_id)
    if record.borrowed is not None:
        # cluster.reuse: the kept cluster (Validate capacity recorded it) is ready; nothing is created.
        return Progress(done=True, retry_after_seconds=poll_seconds)
    name = cluster_name(request.run_id)
    description = api.describe_cluster(name, region=region)
    if description is None:
        network = _network(record)
        storage = record.storage or StorageIds()
        if not config_bucket:
            raise ConfigurationMissing(
                "the cluster's config needs the stack's config bucket (CONFIG_BUCKET): the Neuron compile cache, "
                "the head node's checkpoint export and trainrun's Neuron install script are there"
            )
        # The nodes mount a file system the run creates, so the cluster need not wait for it.
        mounted_by_nodes = storage.created and storage.dns_name is not None
        if (neuron_install_script_uri is None or mounted_by_nodes) and s3 is None:
            raise ConfigurationMissing("uploading the nodes' scripts needs an S3 client")
        if neuron_install_script_uri is None:
            neuron_install_script_uri = upload_script(s3, config_bucket, spec.cluster.os)
        if mounted_by_nodes:
            upload_mount_script(s3, config_bucket)
        config = render_cluster_config(
            spec,
            ClusterIds(
                public_subnet_id=_required(network.public_subnet_id, "the public subnet"),
                private_subnet_id=_required(network.private_subnet_id, "the private subnet"),
                security_group_id=_required(network.security_group_id, "the cluster security group"),
                file_system_id=_required(storage.file_system_id, "the file system"),
                file_system_dns_name=storage.dns_name if mounted_by_nodes else None,
                file_system_mount_name=storage.mount_name if mounted_by_nodes else None,
            ),
            tags=run_tags(request.run_id, stack),
            neuron_install_script_uri=neuron_install_script_uri,
            config_bucket=config_bucket,
            capacity_block=any(finding.code == Code.CAPACITY_BLOCK for finding in record.findings),
            node_policy_arn=node_policy_arn,
            run_id=request.run_id,
        )
        # A retried attempt finds the cluster its first attempt created, and follows that one.
        with contextlib.suppress(ClusterAlreadyExists):
            api.create_cluster(name, to_yaml(config), region=region)
        description = api.describe_cluster(name, region=region)
    status = description.clusterStatus if description is not None else "CREATE_IN_PROGRESS"
    head_node = description.headNode if description is not None else None
    cluster = ClusterRef(
        name=name,
        region=region,
        status=status,
        head_node_instance_id=head_node.instanceId if head_node is not None else None,
    )
    store.set_cluster(request.run_id, cluster)
    if status == "CREATE_FAILED":
        failures = "; ".join(f"{f.failureCode}: {f.failureReason}" for f in (description.failures or []))
        message = f"cluster {name} is CREATE_FAILED: {failures or 'no failures reported'}"
        failed_resource = _first_failed_resource(api, name, region, request.run_id)
        if failed_resource:
            message = f"{message.rstrip('.')}. First failed resource: {failed_resource}"
        raise ClusterCreateFailed(message)
    if status == "CREATE_COMPLETE":
        if record.cluster is None or record.cluster.status != "CREATE_COMPLETE":
            run_events.publish(
                record, RunState.PROVISIONED, f"cluster {name} is ready (head node {cluster.head_node_instance_id})"
            )
        return Progress(done=True, retry_after_seconds=poll_seconds)
    # The cluster bills from its creation on (its instances launch during it): the budget holds here
    # too. The record read above lacks the cluster's start only at the first look, when it has billed nothing yet.
    hold_budget(store, record, run_events, now or utcnow(), f"cluster {name} was {status}")
    return Progress(done=False, waiting_on=[f"cluster {name} {status}"], retry_after_seconds=poll_seconds)


def _first_failed_resource(api: Any, name: str, region: str, run_id: str) -> str | None:
    """`<logical id>: <CloudFormation's reason>` of the resource whose failure failed the cluster's
    stack, from its events (describeCluster's failures are often only ParallelCluster's generic
    ClusterCreationFailure). Reading them is a diagnosis: whatever goes wrong with it, the step
    still fails with ParallelCluster's failures, and the log says why it has no more."""
    try:
        event = api.first_failed_resource(name, region=region)
    except Exception:  # the diagnosis must never hide the failure it explains
        logger.warning(
            "cannot read the stack events of cluster %s: the run's error has ParallelCluster's failures only",
            name,
            exc_info=True,
            extra={"run_id": run_id},
        )
        return None
    if event is None:
        return None
    return clip_text(f"{event.logicalResourceId}: {event.resourceStatusReason or ''}", MAX_FAILED_RESOURCE_BYTES)


# --- tear down ----------------------------------------------------------------------------------


def tear_down(
    ec2: Any,
    fsx: Any,
    api: Any | None,
    store: RunStore,
    request: TeardownInput,
    *,
    region: str,
    poll_seconds: int,
    run_events: RunEvents,
    metrics: Any,
    ssm: Any,
    config_bucket: str,
    eks: Any | None = None,
    kubernetes: GatewayFor | None = None,
) -> Progress:
    """One teardown pass: the checkpoints' export, then cluster, then data repository and file
    system, then network. An EKS run's cluster (`eks`) goes with its node group, add-ons and
    launch template (trainrun.steps.eks), where a ParallelCluster cluster would; before its export,
    a job of it still running is stopped through its Kubernetes API (`kubernetes`): the Job deleted,
    its pods given their grace period to save a checkpoint (trainrun.steps.kubernetes.stop_job).

    Before the cluster (and its head node) goes, the run's checkpoint directory is exported to
    S3 (trainrun.steps.checkpoints, through `ssm`, to `config_bucket` or the data repository);
    an export that fails is recorded and the pass goes on. The compute nodes are terminated (the
    fleet stopped first) before the export starts, its copy needing the head node only, and before
    the cluster's deletion is asked for, which would end their billing only with its stack's cleanup.

    `teardown.on_success`/`on_failure: keep` keeps everything (the cluster needs its file
    system and network) and records when. `keep_file_system` keeps the file system and so the
    network it lives in; the cluster is still deleted. `delete_kept` (`trainrun down`) deletes
    everything whatever the policy says. A run on a kept cluster (cluster.reuse) deletes none of
    it, and only stops its own jobs there (through `ssm`). The pass that finds nothing left records
    it, and announces it if the run has already ended (else FinishRun will).

    A cluster that cannot be deleted (DELETE_FAILED, the API refusing, no API) does not stop the
    rest: the file system goes (FSx deletes a file system its clients still mount; it asks that
    they unmount first, and the stuck cluster is past needing it), and the network as far as EC2
    lets it (the NAT gateway and its address go; subnets, security group and VPC in use by the
    cluster's instances stay, refused with DependencyViolation). Once nothing but those is left,
    the pass records `teardown_error`, counts the run in LeftoverRuns (the leftovers alarm) and
    raises TeardownFailed; the janitor tears the run down again later. An API error that may go
    away (TransientAwsError) is raised instead, for the workflow to retry with backoff.
    """
    from trainrun.adapters.fsx import delete_storage
    from trainrun.adapters.network import delete_network

    record = store.get(request.run_id)
    if record is not None and record.borrowed is not None:
        return _release_borrowed(ssm, store, record, run_events, poll_seconds)
    spec = record.spec if record is not None else None
    failed = request.state.error is not None
    if spec is not None and record is not None and not request.delete_kept:
        policy = spec.teardown.on_failure if failed else spec.teardown.on_success
        if policy == "keep":
            if record.kept_at is None:
                store.mark_kept(request.run_id)
            return Progress(done=True, waiting_on=[], retry_after_seconds=poll_seconds)

    if record is not None:
        _release_compute_nodes_before_export(api, record, region)
        _stop_kubernetes_jobs_before_export(kubernetes, record)
        export = _export_checkpoints(
            ssm, store, record, config_bucket=config_bucket, region=region, kubernetes=kubernetes
        )
        if not export.done:
            return _with_retry(export, poll_seconds)
    if record is not None and record.on_eks:
        cluster, cluster_failure = _delete_eks_cluster_or_failure(eks, ec2, store, request.run_id, record)
    else:
        cluster, cluster_failure = _delete_cluster_or_failure(api, store, request.run_id, record, region)
        if record is None and eks is not None:
            # A run no record knows (the janitor's): its cluster may be of either kind, found by name.
            eks_cluster, eks_failure = _delete_eks_cluster_or_failure(eks, ec2, store, request.run_id, None)
            cluster, cluster_failure = _merged(cluster, eks_cluster), cluster_failure or eks_failure
    if cluster_failure is None and not cluster.done:
        return _with_retry(cluster, poll_seconds)
    keep_file_system = spec.teardown.keep_file_system if spec is not None and not request.delete_kept else False
    storage = delete_storage(
        fsx,
        run_id=request.run_id,
        known=(record.storage if record is not None and record.storage is not None else StorageIds()),
        keep_file_system=keep_file_system,
    )
    network = Progress(done=True)
    if storage.done and not keep_file_system:
        network = delete_network(
            ec2,
            run_id=request.run_id,
            known=(record.network if record is not None and record.network is not None else NetworkIds()),
        )
    progress = _merged(cluster, storage, network)
    if cluster_failure is not None:
        under_way = [item for item in [*storage.waiting_on, *network.waiting_on] if item not in network.blocked]
        if under_way:
            return _with_retry(progress, poll_seconds)
        _give_up(store, record, request.run_id, cluster_failure, progress, metrics)
    if not storage.done:
        return _with_retry(progress, poll_seconds)
    if keep_file_system:
        # Kept on purpose, so the janitor leaves the file system (and its network) alone.
        if record is not None and record.kept_at is None:
            store.mark_kept(request.run_id)
        return _with_retry(progress, poll_seconds)
    if progress.done and record is not None and record.torn_down_at is None:
        marked = store.mark_torn_down(request.run_id)
        # Behind a run that has ended (the safety net, the janitor); otherwise FinishRun announces it.
        if marked and record.status in FINAL_STATUSES:
            run_events.publish(record, RunState.TORN_DOWN)
    return _with_retry(progress, poll_seconds)


# The stack states in which ParallelCluster takes a fleet stop (aws-parallelcluster 3.16.1, Cluster.stop:
# never while the stack is IN_PROGRESS).
_FLEET_STOPPABLE = ("CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE")
_FLEET_STOPPED = ("STOP_REQUESTED", "STOPPING", "STOPPED")


def _release_compute_nodes(api: Any, name: str, run_id: str, region: str) -> None:
    """End the compute nodes' billing now, once nothing needs them: updateComputeFleet
    STOP_REQUESTED (so that clustermgtd launches no replacement), then deleteClusterInstances (the
    API terminates them before it answers; a stopped fleet alone waits for clustermgtd's next loop,
    up to a minute, and a deleted cluster for its stack's cleanup). Whatever goes wrong, the export
    and the teardown go on: the cluster's deletion terminates the nodes anyway."""
    try:
        if api.stop_compute_fleet(name, region=region) is None:
            return
        api.delete_cluster_instances(name, region=region)
    except Exception:  # the release only saves money: it must not keep the export or the teardown from going on
        logger.warning(
            "cannot terminate the compute nodes of cluster %s now; they stop with the cluster",
            name,
            exc_info=True,
            extra={"run_id": run_id},
        )
        return
    logger.info("compute nodes of cluster %s terminated (fleet stopped)", name, extra={"run_id": run_id})


def _release_compute_nodes_before_export(api: Any | None, record: RunRecord, region: str) -> None:
    """The export's copy can take an hour and runs on the head node alone (it reads /fsx there):
    the compute nodes go before it starts. Only when no job may still run (a running job keeps its
    nodes until the cluster goes, as before)."""
    from trainrun.steps.checkpoints import export_starts
    from trainrun.steps.head_node import jobs_may_run

    if api is None or record.cluster is None or not export_starts(record) or jobs_may_run(record):
        return
    _release_compute_nodes(api, record.cluster.name, record.run_id, region)


def _stop_kubernetes_jobs_before_export(kubernetes: GatewayFor | None, record: RunRecord) -> None:
    """An EKS run's jobs still running (a cancel, a failed step) stop before the export copies their
    checkpoints; whatever goes wrong, the teardown goes on (deleting the nodes stops them anyway)."""
    from trainrun.steps.checkpoints import export_starts
    from trainrun.steps.head_node import jobs_may_run
    from trainrun.steps.kubernetes import stop_run_jobs

    if kubernetes is None or not record.on_eks or not export_starts(record) or not jobs_may_run(record):
        return
    try:
        for said in stop_run_jobs(kubernetes(record), record):
            logger.info(said, extra={"run_id": record.run_id})
    except Exception:  # stopping only saves a checkpoint: it must not keep the teardown from going on
        logger.warning(
            "cannot stop the run's Kubernetes Jobs; they stop with the nodes",
            exc_info=True,
            extra={"run_id": record.run_id},
        )


def _export_checkpoints(
    ssm: Any,
    store: RunStore,
    record: RunRecord,
    *,
    config_bucket: str,
    region: str,
    kubernetes: GatewayFor | None = None,
) -> Progress:
    """This pass of the export; whatever goes wrong with it, the teardown goes on (what bills
    comes first): the export's own failures are recorded by it, anything else is logged and
    recorded here, so that no later pass tries again on a head node that is going."""
    from trainrun.steps.checkpoints import export_checkpoints, unexpected_failure

    try:
        return export_checkpoints(ssm, store, record, config_bucket=config_bucket, region=region, kubernetes=kubernetes)
    except Exception as exc:  # nothing may keep the teardown from deleting billable resources
        logger.exception(
            "the checkpoint export failed unexpectedly; the teardown goes on", extra={"run_id": record.run_id}
        )
        with contextlib.suppress(Exception):  # the record may be what failed
            unexpected_failure(store, record, exc)
        return Progress(done=True)


def _release_borrowed(
    ssm: Any | None, store: RunStore, record: RunRecord, run_events: RunEvents, poll_seconds: int
) -> Progress:
    """A run on a kept cluster deletes nothing of it, nor of its file system or network: they are
    the owner's, for its own teardown (`trainrun down OWNER`). What is the run's own there goes:
    a job it may have left queued or running (cancelled, past max_runtime) is cancelled, as the
    cluster's deletion would have stopped it. The run's directory on the file system stays with
    them (its logs and checkpoints are what iterating on a cluster is for)."""
    from trainrun.steps.head_node import jobs_may_run, stop_jobs

    assert record.borrowed is not None
    owner = store.get(record.borrowed.run_id)
    # Once the owner's teardown has begun, the cluster's deletion stops the jobs (and its head node may be gone).
    cluster_up = owner is not None and owner.torn_down_at is None and owner.down_requested_at is None
    if cluster_up and jobs_may_run(record):
        if ssm is None:
            raise ConfigurationMissing(f"run {record.run_id}'s jobs on a kept cluster need an SSM client to stop")
        if not stop_jobs(ssm, record):
            return Progress(
                done=False,
                waiting_on=[f"the jobs of run {record.run_id} on its kept cluster"],
                retry_after_seconds=poll_seconds,
            )
    if record.torn_down_at is None:
        marked = store.mark_torn_down(record.run_id)
        if marked and record.status in FINAL_STATUSES:
            run_events.publish(record, RunState.TORN_DOWN)
    return Progress(done=True, retry_after_seconds=poll_seconds)


def _delete_eks_cluster_or_failure(
    eks: Any | None, ec2: Any, store: RunStore, run_id: str, record: RunRecord | None
) -> tuple[Progress, Exception | None]:
    """This pass of the EKS cluster's deletion, or why it cannot go on (the rest of the pass still runs)."""
    from trainrun.adapters.eks import EksFailed
    from trainrun.steps.eks import delete_eks_cluster

    if eks is None:
        failure = ConfigurationMissing(f"run {run_id} has an EKS cluster, and the teardown has no EKS client")
        return Progress(done=False, waiting_on=[str(failure)]), failure
    try:
        return delete_eks_cluster(eks, ec2, store, run_id, record), None
    except (EksFailed, TransientAwsError) as exc:
        return Progress(done=False, waiting_on=[str(exc)]), exc


def _delete_cluster_or_failure(
    api: Any | None, store: RunStore, run_id: str, record: RunRecord | None, region: str
) -> tuple[Progress, Exception | None]:
    """This pass of the cluster's deletion, or why it cannot go on (the rest of the pass still runs)."""
    from trainrun.adapters.pcluster import PclusterApiError

    try:
        return _delete_cluster(api, store, run_id, record, region), None
    except (TeardownFailed, ConfigurationMissing, PclusterApiError, TransientAwsError) as exc:
        return Progress(done=False, waiting_on=[str(exc)]), exc


def _give_up(
    store: RunStore,
    record: RunRecord | None,
    run_id: str,
    cause: Exception,
    progress: Progress,
    metrics: Any,
) -> NoReturn:
    """Everything that could go is gone; the rest waits on the cluster that cannot."""
    if isinstance(cause, TransientAwsError):
        raise cause
    left = "; ".join(progress.waiting_on)
    message = f"teardown left {left}"
    if record is not None:
        store.set_teardown_error(run_id, RunError(error="TeardownFailed", cause=message))
        if isinstance(cause, ClusterDeleteFailed) and record.cluster is not None:
            # The next teardown (the janitor's) asks ParallelCluster to delete it again.
            store.set_cluster(run_id, record.cluster.model_copy(update={"status": "DELETE_FAILED"}))
    # The leftovers alarm's metric: someone must look at what is left before the janitor's next try.
    metrics.add_metric(name=Metric.LEFTOVER_RUNS, unit="Count", value=1)
    raise TeardownFailed(message) from cause


def _delete_cluster(api: Any | None, store: RunStore, run_id: str, record: RunRecord | None, region: str) -> Progress:
    from trainrun.logic.cluster_config import cluster_name

    known = record.cluster if record is not None else None
    name = known.name if known is not None else cluster_name(run_id)
    if api is None:
        if known is not None:
            raise ConfigurationMissing(f"cluster {name} exists but the stack has no PclusterApiUrl to delete it with")
        return Progress(done=True)
    description = api.describe_cluster(name, region=region)
    if description is None:
        return Progress(done=True, deleted=[f"cluster {name}"] if known is not None else [])
    if description.clusterStatus == "DELETE_FAILED":
        if known is not None and known.status == "DELETE_FAILED":
            # An earlier teardown gave up on it; this one (the janitor's, later) asks ParallelCluster
            # to delete it again, as `pcluster delete-cluster` may for a DELETE_FAILED cluster.
            api.delete_cluster(name, region=region)
            store.set_cluster(run_id, known.model_copy(update={"status": "DELETE_IN_PROGRESS"}))
            return Progress(done=False, waiting_on=[f"cluster {name} DELETE_IN_PROGRESS (again, after DELETE_FAILED)"])
        failures = "; ".join(f"{f.failureCode}: {f.failureReason}" for f in (description.failures or []))
        raise ClusterDeleteFailed(f"cluster {name} is DELETE_FAILED: {failures or 'see its CloudFormation stack'}")
    if description.clusterStatus != "DELETE_IN_PROGRESS":
        # The cluster goes, and its jobs with it: its compute nodes first, at once.
        stoppable = description.cloudformationStackStatus in _FLEET_STOPPABLE
        if stoppable and description.computeFleetStatus not in _FLEET_STOPPED:
            _release_compute_nodes(api, name, run_id, region)
        api.delete_cluster(name, region=region)
    return Progress(done=False, waiting_on=[f"cluster {name} DELETE_IN_PROGRESS"])


# --- helpers ------------------------------------------------------------------------------------


def _network(record: RunRecord) -> NetworkIds:
    if record.network is None:
        raise TrainrunError(f"run {record.run_id} has no network recorded; was '{State.CREATE_NETWORK}' skipped?")
    return record.network


def _required(value: str | None, what: str) -> str:
    if value is None:
        raise TrainrunError(f"{what} is not recorded for this run yet")
    return value


def _with_retry(progress: Progress, poll_seconds: int) -> Progress:
    return progress.model_copy(update={"retry_after_seconds": poll_seconds})


def _merged(*passes: Progress) -> Progress:
    return Progress(
        done=all(p.done for p in passes),
        waiting_on=[item for p in passes for item in p.waiting_on],
        deleted=[item for p in passes for item in p.deleted],
        blocked=[item for p in passes for item in p.blocked],
    )
