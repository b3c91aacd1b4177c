"""Janitor: tear down whatever is tagged with a finished or unknown run and past its grace period,
and kept clusters idle for longer than their teardown.keep_for."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.adapters.clients import client
from trainrun.metrics import for_stack
from trainrun.model.run_record import RunStore, utcnow
from trainrun.settings import JanitorSettings
from trainrun.steps.janitor import count_leftovers, sweep
from trainrun.telemetry import Telemetry

telemetry = Telemetry()
logger, metrics = telemetry.logger, telemetry.metrics


@telemetry.handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = JanitorSettings.from_environ()
    report = sweep(
        client("ec2"),
        client("fsx"),
        client("stepfunctions"),
        RunStore(client("dynamodb"), settings.runs_table),
        stack=settings.stack,
        teardown_state_machine_arn=settings.teardown_state_machine_arn,
        grace=timedelta(minutes=settings.grace_minutes),
        now=utcnow(),
        time_scale=settings.local_time_scale,
        eks=client("eks"),
    )
    count_leftovers(for_stack(metrics, settings.stack), report)
    if report.torn_down:
        logger.warning("leftovers found; tearing them down", extra=report.model_dump(mode="json"))
    else:
        logger.info("nothing to tear down", extra=report.model_dump(mode="json"))
    return report.model_dump(mode="json")
