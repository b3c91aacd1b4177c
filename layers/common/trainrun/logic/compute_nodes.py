"""Whether a pending job waits for compute nodes that will not come up: the run then fails fast.

Pure: it reads what the head node's status script said of the queue while the job was PENDING
(trainrun.logic.head_node_scripts.QueueState). On AWS a compute node whose bootstrap fails (its
OnNodeConfigured script, say) does not fail the cluster: ParallelCluster's clustermgtd marks
the static node down and replaces it, again and again, and after `protected_failure_count` (10)
bootstrap failures in a queue it sets the queue's partition INACTIVE and the compute fleet
PROTECTED ("protected mode": aws-parallelcluster-node, src/slurm_plugin/clustermgtd.py,
`_handle_protected_mode_process`, `_enter_protected_mode`). A job queued there stays PENDING
until max_runtime, the nodes billing all along. So:

- a partition INACTIVE: nothing will run; the run fails at once;
- fewer nodes up than the run needs, `workload.node_bootstrap_timeout` after the job's
  submission: the nodes did not bootstrap in the time ParallelCluster itself allows them
  (node_replacement_timeout, 30 minutes); the run fails.

Either way the failure names the nodes that are not up, each with Slurm's reason for it. The wait
for a failed node's replacement (trainrun.steps.resume) fails on protected mode too.
"""

from __future__ import annotations

from trainrun.logic.head_node_scripts import QueueState


def compute_nodes_failure(
    queue: QueueState | None, *, needed: int, waited_seconds: float, timeout_seconds: int
) -> str | None:
    """Why the pending job will not get its `needed` nodes, or None while it may still get them.
    `waited_seconds`: since the job's submission; `timeout_seconds`: workload.node_bootstrap_timeout."""
    if queue is None:
        return None
    protected = protected_mode(queue)
    if protected is not None:
        return protected
    if queue.up < needed and waited_seconds > timeout_seconds:
        why = (
            f"{queue.up} of the {needed} compute nodes the run needs are up {_minutes(waited_seconds)} after "
            f"the job's submission (workload.node_bootstrap_timeout: {_minutes(timeout_seconds)})"
        )
        return f"{why}; {_down_nodes(queue)}"
    return None


def protected_mode(queue: QueueState | None) -> str | None:
    """Why no job will start on the queue, when ParallelCluster has put it in protected mode."""
    if queue is None or not queue.inactive_partitions:
        return None
    why = (
        "the queue is in ParallelCluster's protected mode (its partition INACTIVE after repeated "
        "compute node bootstrap failures): no job will start on it"
    )
    return f"{why}; {_down_nodes(queue)}"


def _down_nodes(queue: QueueState) -> str:
    if not queue.down:
        return "Slurm names no node that is down"
    shown = "; ".join(f"{node.name} ({node.state}): {node.reason or 'no reason given'}" for node in queue.down)
    more = queue.nodes - queue.up - len(queue.down)
    return f"not up: {shown}" + (f"; and {more} more" if more > 0 else "")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"
