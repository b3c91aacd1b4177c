"""Load run spec: create the run record, read the run file and validate it."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.adapters.clients import client
from trainrun.handlers import run_events
from trainrun.logic.allowlists import RunAllowLists
from trainrun.model.run_record import RunStore
from trainrun.settings import LoadRunSpecSettings
from trainrun.steps.run import LoadRunSpecInput, load_run_spec
from trainrun.telemetry import Telemetry

telemetry = Telemetry()
logger, metrics = telemetry.logger, telemetry.metrics


@telemetry.handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = LoadRunSpecSettings.from_environ()
    request = LoadRunSpecInput.model_validate(event)
    allowed = RunAllowLists.from_parameters(
        config_bucket=request.run_file.bucket, bucket_arns=settings.run_bucket_arns, topic_arns=settings.run_topic_arns
    )
    logger.append_keys(run_id=request.run_id)
    summary = load_run_spec(
        client("s3"),
        RunStore(client("dynamodb"), settings.runs_table),
        request,
        job_heartbeat_seconds=settings.job_heartbeat_seconds,
        allowed=allowed,
        run_events=run_events(settings, metrics),
    )
    return summary.model_dump(mode="json")
