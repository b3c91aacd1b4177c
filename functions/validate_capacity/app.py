"""Validate capacity: check the reservation against the run and record the findings."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.adapters.clients import client
from trainrun.model.run_record import RunStore, utcnow
from trainrun.settings import StepSettings
from trainrun.steps.run import RunRef, validate_capacity
from trainrun.telemetry import Telemetry

telemetry = Telemetry()
logger = telemetry.logger


@telemetry.handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = StepSettings.from_environ()
    request = RunRef.model_validate(event)
    logger.append_keys(run_id=request.run_id)
    verdict = validate_capacity(
        client("ec2"),
        client("resource-groups"),
        RunStore(client("dynamodb"), settings.runs_table),
        request,
        stack_region=settings.region,
        now=utcnow(),
    )
    logger.info("capacity verdict", extra={"accepted": verdict.accepted, "codes": [f.code for f in verdict.findings]})
    return verdict.model_dump(mode="json")
