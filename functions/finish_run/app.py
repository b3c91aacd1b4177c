"""Record a run's final status: SUCCEEDED, FAILED (with the original error) or REJECTED."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.adapters.clients import client
from trainrun.handlers import run_events
from trainrun.model.run_record import RunStore
from trainrun.settings import StepSettings
from trainrun.steps.run import FinishRunInput, finish_run
from trainrun.telemetry import Telemetry

telemetry = Telemetry()
logger, metrics = telemetry.logger, telemetry.metrics


@telemetry.handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = StepSettings.from_environ()
    request = FinishRunInput.model_validate(event)
    logger.append_keys(run_id=request.run_id)
    result = finish_run(
        RunStore(client("dynamodb"), settings.runs_table), request, run_events=run_events(settings, metrics)
    )
    if not result.recorded:
        logger.info("run had already ended; status left as it was")
    return result.model_dump(mode="json", by_alias=True)
