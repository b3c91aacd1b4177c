"""The workflow's critical path through the real state machine: what does not depend on each other overlaps.

The file system is created while the network's NAT gateway comes up; the head node is prepared
(workload, dataset) while the compute nodes boot, and the data repository is linked meanwhile;
a failure of any of them fails the run, and its teardown leaves nothing. The compute nodes stop
before the checkpoint export, which needs the head node only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainrun.local.pcluster_api import COMPUTE, TAG_NODE_TYPE
from trainrun.local.runtime import LocalRuntime
from trainrun.model.tags import RUN_ID
from trainrun.workflow import State

from .conftest import example, remaining, run_to_end
from .scripted_head_node import ScriptedCluster
from .test_provisioning import record_of, wrap


def test_the_head_node_is_prepared_while_its_compute_nodes_boot(
    runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    # Given compute nodes that boot until the head node has been prepared (or BOOT_PATIENCE_SECONDS)
    cluster.boot_until_prepared = True
    # When a run goes through
    started, summary = run_to_end(runtime, example("single-node.yaml"))
    # Then it succeeded, and its preparation ran while the cluster was still being created
    assert summary.status == "SUCCEEDED", summary.error
    (head_node,) = cluster.head_nodes
    assert head_node.prepared_while_booting is True
    # And the states say so: Prepare head node was entered before the cluster's creation ended
    states = summary.states
    assert states.index(State.PREPARE_HEAD_NODE) < states.index(State.CLUSTER_CREATED)
    # (which branch of the Parallel state is entered first is the interpreter's: not asserted)
    assert remaining(runtime, started.run_id) == []


def test_a_preparation_that_fails_while_the_cluster_is_created_fails_the_run_and_deletes_the_cluster(
    runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    # Given a head node whose preparation fails, sent while its compute nodes boot
    cluster.boot_until_prepared = True
    cluster.prepare_failure = "TRAINRUN-ERROR step dataset failed with exit code 1"
    # When the run goes through
    started, summary = run_to_end(runtime, example("single-node.yaml"))
    # Then it failed with the preparation's error, which came before the cluster was complete
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "HeadNodePreparationFailed"
    assert "step dataset failed" in summary.error["cause"]
    (head_node,) = cluster.head_nodes
    assert head_node.prepared_while_booting is True
    assert State.CLUSTER_CREATED not in summary.states
    # And the teardown deleted the cluster with everything else
    assert runtime.pcluster.cluster_names() == []
    assert record_of(runtime, started.run_id).torn_down_at is not None
    assert remaining(runtime, started.run_id) == []


def test_a_head_node_terminated_under_its_preparation_fails_the_run_with_the_clusters_failure(
    runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    # Given a head node whose OnNodeConfigured fails while its preparation runs: the creation ends
    # CREATE_FAILED, its rollback terminates the head node, and the preparation dies with it
    cluster.node_configured_failure = "Failed to execute OnNodeConfigured script."
    prepare_errors: list[str] = []

    def record_errors(handler: Callable[..., Any], event: Any, context: Any) -> Any:
        try:
            return handler(event, context)
        except Exception as exc:
            prepare_errors.append(type(exc).__name__)
            raise

    def create_failed_reported_after_the_preparation(handler: Callable[..., Any], event: Any, context: Any) -> Any:
        # The order a loaded machine (or AWS) may give: Create cluster sees CREATE_FAILED only after
        # the preparation's end has been reported
        try:
            return handler(event, context)
        except Exception:
            if "HeadNodeLost" in prepare_errors:
                raise
            return {"done": False, "retry_after_seconds": 5, "waiting_on": ["held by the test"]}

    wrap(runtime, State.PREPARE_HEAD_NODE, record_errors)
    wrap(runtime, State.CREATE_CLUSTER, create_failed_reported_after_the_preparation)
    # When the run goes through
    started, summary = run_to_end(runtime, example("single-node.yaml"))
    # Then the preparation's failure came first, as HeadNodeLost (retried: not a verdict of its own)...
    assert "HeadNodeLost" in prepare_errors, (prepare_errors, summary.error)
    # ...and the run failed with the root cause: the cluster's creation, ParallelCluster's failure code
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "ClusterCreateFailed", summary.error
    assert "OnNodeConfiguredExecutionFailure" in summary.error["cause"]
    assert State.COMPILE not in summary.states
    assert remaining(runtime, started.run_id) == []


def test_the_file_system_is_created_before_the_network_is_ready(runtime: LocalRuntime) -> None:
    # Given a network whose NAT gateway is still pending at Create network's first two calls
    calls: list[str] = []
    network_calls = iter(range(1, 10**6))

    def nat_pending_at_first(handler: Callable[..., Any], event: Any, context: Any) -> Any:
        progress = handler(event, context)
        if next(network_calls) <= 2:
            progress = {**progress, "done": False}
        calls.append("network ready" if progress["done"] else "network pending")
        return progress

    def recorded(what: str) -> Callable[[Callable[..., Any], Any, Any], Any]:
        def record(handler: Callable[..., Any], event: Any, context: Any) -> Any:
            calls.append(what)
            return handler(event, context)

        return record

    wrap(runtime, State.CREATE_NETWORK, nat_pending_at_first)
    wrap(runtime, State.CREATE_FILE_SYSTEM, recorded("file system"))
    wrap(runtime, State.CREATE_CLUSTER, recorded("cluster"))
    # When a run goes through
    started, summary = run_to_end(runtime, example("single-node.yaml"))
    # Then the file system was asked for right after the network's first call, before it was ready
    assert summary.status == "SUCCEEDED", summary.error
    assert calls[:2] == ["network pending", "file system"]
    # And the cluster was asked for only once the network was ready (its nodes need the NAT gateway)
    assert calls.index("file system") < calls.index("network ready") < calls.index("cluster")
    assert remaining(runtime, started.run_id) == []


def test_a_data_repository_that_fails_to_link_fails_the_run_and_deletes_the_cluster(runtime: LocalRuntime) -> None:
    # Given the BERT example (it links an S3 data repository), whose link fails while its cluster is created
    runtime.fail_at(State.LINK_DATA_REPOSITORY)
    # When it runs
    started, summary = run_to_end(runtime, example("bert-large-phase1.yaml"))
    # Then it failed there, no job ran, and the teardown deleted the cluster it had begun with everything else
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "InjectedFailure"
    assert State.LINK_DATA_REPOSITORY in summary.error["cause"]
    assert State.CREATE_CLUSTER in summary.states
    assert State.TRAIN not in summary.states
    assert runtime.pcluster.cluster_names() == []
    assert remaining(runtime, started.run_id) == []


def compute_node_states(runtime: LocalRuntime, run_id: str) -> list[str]:
    """The EC2 states of the run's compute nodes, as ParallelCluster tags them."""
    filters = [{"Name": f"tag:{TAG_NODE_TYPE}", "Values": [COMPUTE]}, {"Name": f"tag:{RUN_ID}", "Values": [run_id]}]
    reservations = runtime.client("ec2").describe_instances(Filters=filters)["Reservations"]
    return [instance["State"]["Name"] for reservation in reservations for instance in reservation["Instances"]]


def test_the_compute_nodes_stop_before_the_checkpoint_export(runtime: LocalRuntime, cluster: ScriptedCluster) -> None:
    # Given a head node that notes the compute nodes' states when it is asked to export the checkpoints
    seen: list[list[str]] = []
    runs: list[str] = []
    cluster.on_export = lambda: seen.append(compute_node_states(runtime, runs[0]))
    # When a run trains, then tears down
    started = runtime.submit(example("bert-large-phase1.yaml"), "runs/test-run.yaml")
    runs.append(started.run_id)
    runtime.wait(started.execution_arn, timeout=120)
    # Then by the time the export began, every compute node (16) had been stopped through the API
    assert len(seen) == 1
    (states,) = seen
    assert len(states) == 16
    assert set(states) <= {"shutting-down", "terminated"}, states
    assert record_of(runtime, started.run_id).status.value == "SUCCEEDED"
    assert remaining(runtime, started.run_id) == []
