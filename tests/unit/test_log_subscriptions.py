"""CloudWatch Logs refuses a subscription to a Lambda function that may not be invoked for the log
group (trainrun.local.log_subscriptions), as AWS does; moto alone accepts it."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.logs.models import LogsBackend

from trainrun.local import log_subscriptions

from .conftest import ACCOUNT, REGION, resource_properties

GROUP = "/aws/containerinsights/trainrun-r1/application"
FUNCTION = "trainrun-ProgressFunction"


@pytest.fixture
def logs(aws: None, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(LogsBackend, "put_subscription_filter", log_subscriptions._put_subscription_filter)
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName="fn", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    boto3.client("lambda", region_name=REGION).create_function(
        FunctionName=FUNCTION, Runtime="python3.12", Role=role, Handler="app.handler", Code={"ZipFile": b"PK"}
    )
    client = boto3.client("logs", region_name=REGION)
    client.create_log_group(logGroupName=GROUP)
    return client


def function_arn() -> str:
    return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{FUNCTION}"


def subscribe(logs: Any) -> None:
    logs.put_subscription_filter(
        logGroupName=GROUP, filterName="trainrun-progress/r1", filterPattern="", destinationArn=function_arn()
    )


def permit(**permission: str) -> None:
    boto3.client("lambda", region_name=REGION).add_permission(
        FunctionName=FUNCTION, StatementId="logs", Action="lambda:InvokeFunction", **permission
    )


def test_a_function_without_a_resource_policy_cannot_be_subscribed(logs: Any) -> None:
    with pytest.raises(ClientError) as refused:
        subscribe(logs)
    assert refused.value.response["Error"]["Code"] == "InvalidParameterException"
    assert "Make sure you have given CloudWatch Logs permission to execute your function" in str(refused.value)
    assert logs.describe_subscription_filters(logGroupName=GROUP)["subscriptionFilters"] == []


def test_the_templates_permission_lets_cloudwatch_logs_subscribe_the_progress_function(
    logs: Any, template: dict[str, Any]
) -> None:
    # The template's own permission, its intrinsic functions resolved as CloudFormation would
    properties = resource_properties(template, "ProgressFromContainerLogsPermission")
    source_arn = properties["SourceArn"]["Fn::Sub"].replace("${AWS::Partition}", "aws")
    source_arn = source_arn.replace("${AWS::Region}", REGION).replace("${AWS::AccountId}", ACCOUNT)
    permit(Principal=properties["Principal"], SourceAccount=ACCOUNT, SourceArn=source_arn)
    subscribe(logs)
    assert [f["filterName"] for f in logs.describe_subscription_filters(logGroupName=GROUP)["subscriptionFilters"]] == [
        "trainrun-progress/r1"
    ]


@pytest.mark.parametrize(
    "permission",
    [
        # Another log group's
        {"Principal": "logs.amazonaws.com", "SourceArn": f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/other:*"},
        # The group's ARN without the `:*` CloudWatch Logs presents
        {"Principal": "logs.amazonaws.com", "SourceArn": f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{GROUP}"},
        # Another account's
        {"Principal": "logs.amazonaws.com", "SourceAccount": "210987654321"},
        # Another service's
        {"Principal": "events.amazonaws.com"},
    ],
    ids=["other group", "no :*", "other account", "other service"],
)
def test_a_permission_for_something_else_does_not_let_it(logs: Any, permission: dict[str, str]) -> None:
    permit(**permission)
    with pytest.raises(ClientError, match="Could not execute the lambda function"):
        subscribe(logs)


@pytest.mark.parametrize("principal", ["logs.amazonaws.com", f"logs.{REGION}.amazonaws.com"])
def test_cloudwatch_logs_by_its_global_or_regional_name_may_be_permitted(logs: Any, principal: str) -> None:
    permit(Principal=principal, SourceArn=f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{GROUP}:*")
    subscribe(logs)
