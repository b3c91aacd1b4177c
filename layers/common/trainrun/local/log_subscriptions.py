"""CloudWatch Logs subscription deliveries shaped as AWS sends them (moto 5.2.5, pinned).

moto delivers a log group's new events to a subscribed function inside PutLogEvents, but
gives each event a small integer id; CloudWatch Logs sends ids as 56-digit numeric strings,
which the progress function relies on (it compares them to de-duplicate). The patch turns
moto's ids into such strings before delivery. It is idempotent.

On the AWS clock (trainrun.local.clock) a delivery comes LOG_SUBSCRIPTION_DELIVERY later
(trainrun.logic.aws_clock), compressed: the shipper (the CloudWatch agent's stand-in) waits for it.
"""

from __future__ import annotations

import time
from typing import Any

from moto.logs.models import LogStream

from trainrun.local import clock
from trainrun.logic import aws_clock

EVENT_ID_DIGITS = 56
_original_send_log_events = LogStream._send_log_events


def _send_log_events(
    self: LogStream, service: str, destination_arn: str, filter_name: str, log_events: list[dict[str, Any]]
) -> None:
    time.sleep(clock.real_seconds(aws_clock.LOG_SUBSCRIPTION_DELIVERY) or 0.0)
    shaped = [{**event, "id": str(event["id"]).zfill(EVENT_ID_DIGITS)} for event in log_events]
    _original_send_log_events(self, service, destination_arn, filter_name, shaped)


def install() -> None:
    LogStream._send_log_events = _send_log_events  # type: ignore[method-assign]
