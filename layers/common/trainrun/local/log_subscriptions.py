"""CloudWatch Logs subscriptions as AWS makes and delivers them (moto 5.2.5, pinned).

PutSubscriptionFilter to a Lambda function: CloudWatch Logs tries the function first, as
logs.amazonaws.com for that log group, and refuses the filter unless the function's resource
policy lets it ("Could not execute the lambda function. Make sure you have given CloudWatch Logs
permission to execute your function.", InvalidParameterException; the CloudWatch Logs User
Guide, "Subscription filters with AWS Lambda"). moto only checks that the function exists; the
patch refuses as AWS does, from the policy the local deployer gave the function (the template's
AWS::Lambda::Permission resources, and the one SAM adds for a CloudWatchLogs event).

moto delivers a log group's new events to a subscribed function inside PutLogEvents, but
gives each event a small integer id; CloudWatch Logs sends ids as 56-digit numeric strings,
which the progress function relies on (it compares them to de-duplicate). The patch turns
moto's ids into such strings before delivery. Both patches are idempotent.

On the AWS clock (trainrun.local.clock) a delivery comes LOG_SUBSCRIPTION_DELIVERY later
(trainrun.logic.aws_clock), compressed: the shipper (the CloudWatch agent's stand-in) waits for it.
"""

from __future__ import annotations

import json
import time
from typing import Any

from moto.awslambda.utils import get_backend as lambda_backend
from moto.logs.exceptions import InvalidParameterException
from moto.logs.models import LogsBackend, LogStream
from moto.utilities.utils import get_partition

from trainrun.local import clock
from trainrun.local.iam.policy import Request, Resource, service_allowed
from trainrun.logic import aws_clock

EVENT_ID_DIGITS = 56
_original_send_log_events = LogStream._send_log_events
_original_put_subscription_filter = LogsBackend.put_subscription_filter
CANNOT_INVOKE = (
    "Could not execute the lambda function. "
    "Make sure you have given CloudWatch Logs permission to execute your function."
)


def _put_subscription_filter(
    self: LogsBackend, log_group_name: str, filter_name: str, filter_pattern: str, destination_arn: str, role_arn: str
) -> None:
    # A missing group or function: moto's own answers (ResourceNotFound, the same InvalidParameter).
    to_function = destination_arn.split(":")[2:3] == ["lambda"]
    if log_group_name in self.groups and to_function and not logs_may_invoke(self, log_group_name, destination_arn):
        raise InvalidParameterException(CANNOT_INVOKE)
    _original_put_subscription_filter(self, log_group_name, filter_name, filter_pattern, destination_arn, role_arn)


def logs_may_invoke(logs: LogsBackend, log_group_name: str, function_arn: str) -> bool:
    """Whether the function's resource policy lets CloudWatch Logs invoke it for the log group."""
    functions = lambda_backend(logs.account_id, logs.region_name)
    try:
        function = functions.get_function(function_arn)
        document = json.loads(json.loads(functions.get_policy(function_arn))["Policy"])
    except Exception:
        return False  # no such function, or no resource policy at all
    partition = get_partition(logs.region_name)
    group_arn = f"arn:{partition}:logs:{logs.region_name}:{logs.account_id}:log-group:{log_group_name}:*"
    request = Request(
        action="lambda:InvokeFunction",
        resources=(Resource(function.function_arn),),
        context={"aws:SourceArn": group_arn, "aws:SourceAccount": logs.account_id},
    )
    return service_allowed(document, ("logs.amazonaws.com", f"logs.{logs.region_name}.amazonaws.com"), request)


def _send_log_events(
    self: LogStream, service: str, destination_arn: str, filter_name: str, log_events: list[dict[str, Any]]
) -> None:
    time.sleep(clock.real_seconds(aws_clock.LOG_SUBSCRIPTION_DELIVERY) or 0.0)
    shaped = [{**event, "id": str(event["id"]).zfill(EVENT_ID_DIGITS)} for event in log_events]
    _original_send_log_events(self, service, destination_arn, filter_name, shaped)


def install() -> None:
    LogStream._send_log_events = _send_log_events  # type: ignore[method-assign]
    LogsBackend.put_subscription_filter = _put_subscription_filter  # type: ignore[method-assign]
