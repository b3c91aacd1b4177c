"""An EKS run's container log group (trainrun.adapters.container_logs): the run's tags whether
trainrun makes the group or the Observability add-on's Fluent Bit made it first."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from trainrun.adapters.container_logs import ensure_container_logs
from trainrun.local import log_subscriptions

from .conftest import ACCOUNT, REGION

CLUSTER = "trainrun-r1-0123456789ab"
GROUP = f"/aws/containerinsights/{CLUSTER}/application"
TAGS = {"trainrun:run-id": "r1-0123456789ab", "trainrun:stack": "trainrun"}


@pytest.fixture
def logs(aws: None) -> Any:
    return boto3.client("logs", region_name=REGION)


@pytest.fixture
def progress_function(aws: None) -> str:
    """The progress function, with the permission the template gives CloudWatch Logs on these groups."""
    role = boto3.client("iam", region_name=REGION).create_role(RoleName="fn", AssumeRolePolicyDocument="{}")
    functions = boto3.client("lambda", region_name=REGION)
    arn: str = functions.create_function(
        FunctionName="trainrun-ProgressFunction",
        Runtime="python3.12",
        Role=role["Role"]["Arn"],
        Handler="app.handler",
        Code={"ZipFile": b"PK"},
    )["FunctionArn"]
    functions.add_permission(
        FunctionName=arn,
        StatementId="logs",
        Action="lambda:InvokeFunction",
        Principal="logs.amazonaws.com",
        SourceArn=f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/containerinsights/trainrun-*/application:*",
    )
    return arn


def ensure(logs: Any, progress_function: str) -> str:
    return ensure_container_logs(
        logs,
        cluster=CLUSTER,
        run_id="r1-0123456789ab",
        progress_function_arn=progress_function,
        retention_days=30,
        tags=TAGS,
    )


@pytest.mark.parametrize("made_by_fluent_bit_first", [False, True])
def test_the_group_has_the_runs_tags_retention_and_subscription(
    logs: Any, progress_function: str, made_by_fluent_bit_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        log_subscriptions.LogsBackend, "put_subscription_filter", log_subscriptions._put_subscription_filter
    )
    if made_by_fluent_bit_first:
        logs.create_log_group(logGroupName=GROUP)  # auto_create_group: no tags
    assert ensure(logs, progress_function) == GROUP
    assert ensure(logs, progress_function) == GROUP  # again is the same
    arn = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{GROUP}"
    assert logs.list_tags_for_resource(resourceArn=arn)["tags"] == TAGS
    [group] = logs.describe_log_groups(logGroupNamePrefix=GROUP)["logGroups"]
    assert group["retentionInDays"] == 30
    [subscription] = logs.describe_subscription_filters(logGroupName=GROUP)["subscriptionFilters"]
    assert subscription["destinationArn"] == progress_function
