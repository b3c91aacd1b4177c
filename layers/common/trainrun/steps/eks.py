"""The workflow's Amazon EKS branch (`cluster.kind: eks`): the cluster, then its nodes and add-ons,
then, at the end, their teardown. The requests are rendered by trainrun.logic.eks_node_group and
made by trainrun.adapters.eks; this module follows them from the run record, as
trainrun.steps.provisioning does for a ParallelCluster cluster.

- Create EKS cluster: the control plane in the run's private subnet and its control-plane subnet
  (two Availability Zones), authentication mode API; once ACTIVE, an access entry for the role
  that will talk to Kubernetes (`access_role_arn`) with EKS's cluster admin access policy. It is
  the narrowest of EKS's access policies that lets that role do what a run needs cluster-wide: a
  namespace, a PersistentVolume for the file system and the device plugins' DaemonSets in
  kube-system (AmazonEKSAdminPolicy and the narrower ones are namespaced and create neither a
  namespace nor a PersistentVolume: Amazon EKS User Guide, "Review access policy permissions").
- Create node group: the launch template (the reservation as its capacity target, EFA
  interfaces), the managed node group on it, and the add-ons the jobs need; done once the node
  group and every add-on are ACTIVE. A node group that fails (for capacity: CREATE_FAILED with
  EC2's reason) fails the run with EKS's reason.

The budget holds while they are created, as for ParallelCluster (trainrun.steps.budget).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from trainrun.adapters.eks import (
    ACTIVE,
    delete_eks,
    ensure_access,
    ensure_addons,
    ensure_cluster,
    ensure_launch_template,
    ensure_nodegroup,
)
from trainrun.errors import TrainrunError
from trainrun.model.findings import Code
from trainrun.model.resources import EksClusterRef, Progress
from trainrun.model.run_file import RunSpec
from trainrun.model.run_record import RunRecord, RunStore, utcnow
from trainrun.model.tags import run_tags
from trainrun.steps.budget import hold_budget
from trainrun.steps.run import RunRef, load_run
from trainrun.steps.run_events import RunEvents, RunState

if TYPE_CHECKING:
    from trainrun.logic.eks_node_group import EksIds

CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
# The node group's taint keeps every pod off the Trainium nodes unless it tolerates it, and they are
# the cluster's only nodes: the add-ons' own controllers tolerate it (each add-on's configuration
# schema, DescribeAddonConfiguration; the FSx CSI driver's Helm chart: controller.tolerations; its
# node DaemonSet tolerates every taint by default).
NEURON_TOLERATION = {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}
ADDON_CONFIGURATION = {
    "coredns": json.dumps({"tolerations": [NEURON_TOLERATION]}),
    "aws-fsx-csi-driver": json.dumps({"controller": {"tolerations": [NEURON_TOLERATION]}}),
    "amazon-cloudwatch-observability": json.dumps({"tolerations": [NEURON_TOLERATION]}),
}


# An add-on whose Deployment has no ready replica is DEGRADED; on nodes that just joined its pods
# pull their images and start first, so DEGRADED fails the run only this long after the node group
# is ACTIVE (before that, and until then, it is waited on).
ADDON_START_GRACE = timedelta(minutes=10)


class EksSettingsMissing(TrainrunError):
    """The stack gave the step no role it needs (a deployment without the EKS roles)."""


def create_eks_cluster(
    eks: Any,
    store: RunStore,
    request: RunRef,
    *,
    stack: str,
    region: str,
    cluster_role_arn: str,
    node_role_arn: str,
    access_role_arn: str,
    poll_seconds: int,
    run_events: RunEvents,
    now: datetime | None = None,
) -> Progress:
    """Create the run's EKS cluster (adopting its own on a retry) and follow it; once ACTIVE, give
    `access_role_arn` its access entry."""
    from trainrun.logic.cluster_config import cluster_name
    from trainrun.logic.eks_node_group import render_cluster_request

    record, spec = load_run(store, request.run_id)
    name = cluster_name(request.run_id)
    tags = run_tags(request.run_id, stack)
    _check_roles(cluster_role_arn=cluster_role_arn, node_role_arn=node_role_arn, access_role_arn=access_role_arn)
    cluster_request = render_cluster_request(
        spec, _eks_ids(record, cluster_role_arn, node_role_arn), cluster_name=name, tags=tags
    )
    status = ensure_cluster(eks, cluster_request)
    known = record.eks or EksClusterRef(name=name, region=region)
    store.set_eks(request.run_id, known.model_copy(update={"status": status}))
    if status != ACTIVE:
        hold_budget(store, record, run_events, now or utcnow(), f"EKS cluster {name} was {status}")
        return Progress(done=False, waiting_on=[f"eks cluster {name} {status}"], retry_after_seconds=poll_seconds)
    ensure_access(eks, cluster=name, principal_arn=access_role_arn, policy_arn=CLUSTER_ADMIN_POLICY, tags=tags)
    return Progress(done=True, retry_after_seconds=poll_seconds)


def create_eks_nodes(
    eks: Any,
    ec2: Any,
    store: RunStore,
    request: RunRef,
    *,
    stack: str,
    cluster_role_arn: str,
    node_role_arn: str,
    poll_seconds: int,
    run_events: RunEvents,
    check_objects: Callable[[RunRecord, RunSpec], None],
    now: datetime | None = None,
) -> Progress:
    """The launch template, the node group on it and the add-ons; done once all are ACTIVE.
    Announces the run provisioned the first time they are. Before any of it (the first pass),
    `check_objects` has the cluster's API server check every Kubernetes object of the run
    (trainrun.steps.kubernetes.dry_run): a refused one fails the run before a node is paid for."""
    from trainrun.logic.eks_node_group import ADD_ONS, launch_template_name, render_eks_requests

    record, spec = load_run(store, request.run_id)
    known = record.eks
    if known is None or known.status != ACTIVE:
        raise TrainrunError(
            f"run {request.run_id} has no ACTIVE EKS cluster recorded; was 'Create EKS cluster' skipped?"
        )
    tags = run_tags(request.run_id, stack)
    requests = render_eks_requests(
        spec,
        _eks_ids(record, cluster_role_arn, node_role_arn),
        cluster_name=known.name,
        tags=tags,
        capacity_block=any(finding.code == Code.CAPACITY_BLOCK for finding in record.findings),
    )
    if known.dry_run_at is None:
        check_objects(record, spec)
        store.set_eks(request.run_id, known := known.model_copy(update={"dry_run_at": now or utcnow()}))
    template_name = launch_template_name(known.name, spec)
    # Recorded before it is created: a crash in between leaves a name the teardown deletes by.
    store.set_eks(request.run_id, known := known.model_copy(update={"launch_template_name": template_name}))
    template_id = ensure_launch_template(ec2, requests["launch_template"])
    nodegroup = requests["nodegroup"]["nodegroupName"]
    known = known.model_copy(update={"launch_template_id": template_id, "nodegroup": nodegroup})
    store.set_eks(request.run_id, known)
    nodegroup_status = ensure_nodegroup(eks, requests["nodegroup"])
    at = now or utcnow()
    nodes_active_at = known.nodes_active_at or (at if nodegroup_status == ACTIVE else None)
    addons = ensure_addons(
        eks,
        cluster=known.name,
        names=ADD_ONS,
        tags=tags,
        configuration=ADDON_CONFIGURATION,
        nodes_ready=nodes_active_at is not None and at - nodes_active_at >= ADDON_START_GRACE,
    )
    update = {"nodegroup_status": nodegroup_status, "nodes_active_at": nodes_active_at, "addons": addons}
    store.set_eks(request.run_id, known.model_copy(update=update))
    waiting = [f"node group {nodegroup} {nodegroup_status}"] if nodegroup_status != ACTIVE else []
    waiting += [f"add-on {name} {status}" for name, status in addons.items() if status != ACTIVE]
    if waiting:
        hold_budget(
            store, record, run_events, now or utcnow(), f"the nodes of EKS cluster {known.name} were being created"
        )
        return Progress(done=False, waiting_on=waiting, retry_after_seconds=poll_seconds)
    # Announced by the first pass that finds all of it ACTIVE, as recorded before this one: the node
    # group alone is not enough, being ACTIVE a pass before its add-ons when they were created later.
    if not (known.nodegroup_status == ACTIVE and known.addons == dict.fromkeys(ADD_ONS, ACTIVE)):
        run_events.publish(
            record, RunState.PROVISIONED, f"EKS cluster {known.name} is ready ({spec.capacity.nodes} nodes)"
        )
    return Progress(done=True, retry_after_seconds=poll_seconds)


def delete_eks_cluster(eks: Any, ec2: Any, store: RunStore, run_id: str, record: RunRecord | None) -> Progress:
    """One teardown pass over the run's EKS cluster (found by its run-derived name, recorded or not)."""
    from trainrun.logic.cluster_config import cluster_name

    known = record.eks if record is not None else None
    name = known.name if known is not None else cluster_name(run_id)
    progress = delete_eks(eks, ec2, cluster=name, launch_template=known.launch_template_name if known else None)
    if known is not None and progress.done and known.status != "DELETED":
        store.set_eks(run_id, known.model_copy(update={"status": "DELETED"}))
    return progress


def _eks_ids(record: RunRecord, cluster_role_arn: str, node_role_arn: str) -> EksIds:
    from trainrun.logic.eks_node_group import EksIds

    network = record.network
    if network is None or not (network.private_subnet_id and network.control_plane_subnet_id):
        raise TrainrunError(
            f"run {record.run_id} has no EKS network recorded (its private and control-plane subnets); "
            "was 'Create network' skipped?"
        )
    if network.security_group_id is None:
        raise TrainrunError(f"run {record.run_id} has no security group recorded")
    return EksIds(
        control_plane_subnet_id=network.control_plane_subnet_id,
        private_subnet_id=network.private_subnet_id,
        security_group_id=network.security_group_id,
        cluster_role_arn=cluster_role_arn,
        node_role_arn=node_role_arn,
    )


def _check_roles(**roles: str) -> None:
    missing = [name for name, arn in roles.items() if not arn]
    if missing:
        raise EksSettingsMissing(
            f"the stack gives no {', '.join(missing)}: deploy it with the EKS roles (template.yaml) "
            "to run cluster.kind: eks"
        )
