"""Start run: an S3 "Object Created" event (via EventBridge) or a Scheduler input -> one execution."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.adapters.clients import client
from trainrun.model.start_events import parse_start_event
from trainrun.settings import StartRunSettings
from trainrun.steps.start_run import start_run
from trainrun.telemetry import Telemetry

telemetry = Telemetry()
logger = telemetry.logger


@telemetry.handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = StartRunSettings.from_environ()
    trigger = parse_start_event(event, default_bucket=settings.config_bucket)
    decision = start_run(client("stepfunctions"), settings.state_machine_arn, trigger.run_file, trigger.occurrence)
    logger.info(decision.reason, extra=decision.model_dump(mode="json"))
    return decision.model_dump(mode="json")
