"""An EKS run's container logs: the Observability add-on's application log group of its cluster,
made by trainrun before the first pod logs (tagged with the run, kept for the stack's retention),
and subscribed to the progress function, as the stack's jobs log group is for ParallelCluster.

The group outlives the cluster: `trainrun logs` reads a run's output from it after the teardown,
as it reads a ParallelCluster run's from the jobs log group; its retention deletes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

from trainrun.adapters.aws_errors import call, error_code, raise_if_transient
from trainrun.logic.kubernetes_objects import container_log_group, progress_subscription


def ensure_container_logs(
    logs: Any, *, cluster: str, run_id: str, progress_function_arn: str, retention_days: int, tags: Mapping[str, str]
) -> str:
    """Create the cluster's application log group (once), its retention and the progress
    subscription, named after the run (PutSubscriptionFilter with the same name replaces, so again
    is once); its name."""
    group = container_log_group(cluster)
    try:
        logs.create_log_group(logGroupName=group, tags=dict(tags))
    except ClientError as exc:
        if error_code(exc) != "ResourceAlreadyExistsException":
            raise_if_transient(exc, "logs:CreateLogGroup")
            raise
        # Made first by the add-on's Fluent Bit (auto_create_group), from the add-ons' own pods on
        # the nodes, without the run's tags: tagged here (again is the same).
        # Its ARN from the progress function's: the same partition, region and account (the stack's).
        _, partition, _, region, account, *_ = progress_function_arn.split(":")
        arn = f"arn:{partition}:logs:{region}:{account}:log-group:{group}"
        call(logs.tag_resource, "logs:TagResource", resourceArn=arn, tags=dict(tags))
    call(logs.put_retention_policy, "logs:PutRetentionPolicy", logGroupName=group, retentionInDays=retention_days)
    call(
        logs.put_subscription_filter,
        "logs:PutSubscriptionFilter",
        logGroupName=group,
        filterName=progress_subscription(run_id),
        filterPattern="",
        destinationArn=progress_function_arn,
    )
    return group
