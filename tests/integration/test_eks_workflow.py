"""An EKS run file (`cluster.kind: eks`) through the real state machine, against the strict local EKS.

The workflow builds the AWS side of an EKS run (network with the control plane's second subnet,
file system and data repository, the EKS cluster, its access entry, the launch template on the
reservation, the node group and the add-ons), prepares its Kubernetes, runs its jobs as Kubernetes
Jobs on the local Kubernetes and tears all of it down (tests/e2e/test_eks_run.py follows the jobs
themselves). Every test shares the module's runtime (`shared_runtime`), puts back what it changes,
and reads its own run.
"""

from __future__ import annotations

from typing import Any

import pytest

from trainrun.local.runtime import LocalRuntime
from trainrun.logic.cluster_config import cluster_name
from trainrun.logic.eks_node_group import ADD_ONS
from trainrun.model.run_record import RunStatus
from trainrun.workflow import State

from .conftest import example, remaining, run_to_end

# The small EKS example: one node, one pod a job (the BERT example's 16-node run is the IAM
# enforcement's recorded run, tests/integration/test_iam_enforcement.py).
EKS_EXAMPLE = "single-node-eks.yaml"
EKS_BRANCH = [
    State.CLUSTER_KIND,
    State.CREATE_EKS_CLUSTER,
    State.EKS_CLUSTER_READY,
    State.CREATE_NODE_GROUP,
    State.NODE_GROUP_READY,
    State.EKS_CLUSTER_CREATED,
]


def eks_clusters(runtime: LocalRuntime) -> list[str]:
    return list(runtime.client("eks").list_clusters()["clusters"])


def launch_templates(runtime: LocalRuntime) -> list[dict[str, Any]]:
    return list(runtime.client("ec2").describe_launch_templates()["LaunchTemplates"])


def test_an_eks_run_builds_its_cluster_node_group_and_add_ons_then_tears_everything_down(
    shared_runtime: LocalRuntime,
) -> None:
    runtime = shared_runtime
    # Given the small example on EKS, on the default account whose reservation fits it
    # When it is uploaded
    started, summary = run_to_end(runtime, example(EKS_EXAMPLE))
    # Then the EKS branch built the cluster, the node group and the add-ons: no ParallelCluster
    # cluster, no head node
    visited = set(summary.states)
    assert set(EKS_BRANCH) <= visited
    assert {State.CREATE_CLUSTER, State.PREPARE_HEAD_NODE}.isdisjoint(visited)
    assert State.NO_HEAD_NODE in visited and State.DATA_REPOSITORY_LINKED in visited
    record = runtime.store().get(started.run_id)
    assert record is not None and record.eks is not None
    assert record.eks.name == cluster_name(started.run_id)
    assert record.eks.nodegroup_status == "ACTIVE"
    assert set(record.eks.addons) == set(ADD_ONS) and set(record.eks.addons.values()) == {"ACTIVE"}
    # And it prepared Kubernetes, then compiled and trained there, and succeeded
    assert summary.status == RunStatus.SUCCEEDED, summary.error
    assert summary.states[summary.states.index(State.JOBS_ON_EKS) + 1] == State.PREPARE_KUBERNETES
    assert {State.COMPILE, State.TRAIN} <= visited
    # And nothing is left: no cluster, no launch template, no network, no file system
    assert cluster_name(started.run_id) not in eks_clusters(runtime)
    assert not [t for t in launch_templates(runtime) if started.run_id in t["LaunchTemplateName"]]
    assert remaining(runtime, started.run_id) == []


@pytest.mark.parametrize("state", [State.CREATE_EKS_CLUSTER, State.CREATE_NODE_GROUP, State.PREPARE_KUBERNETES])
def test_a_failure_at_an_eks_state_ends_failed_with_its_error_and_leaves_nothing(
    shared_runtime: LocalRuntime, state: str
) -> None:
    runtime = shared_runtime
    # Given a failure injected at one of the EKS branch's states
    runtime.fail_at(state)
    # When an EKS run file is uploaded
    started, summary = run_to_end(runtime, example(EKS_EXAMPLE))
    # Then the run ends FAILED carrying the injected error, and its teardown left nothing
    assert summary.status == RunStatus.FAILED
    assert summary.error is not None and summary.error["error"] == "InjectedFailure"
    assert state in summary.error["cause"]
    assert cluster_name(started.run_id) not in eks_clusters(runtime)
    assert remaining(runtime, started.run_id) == []
