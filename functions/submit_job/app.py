"""Compile / Train: keep the state's task token, then sbatch the job on the head node (once)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.adapters.clients import client
from trainrun.handlers import kubernetes_gateways, run_events
from trainrun.model.run_record import RunStore
from trainrun.settings import SubmitSettings
from trainrun.steps.head_node import SubmitRequest, submit_job
from trainrun.telemetry import Telemetry

telemetry = Telemetry()
logger, metrics = telemetry.logger, telemetry.metrics


@telemetry.handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = SubmitSettings.from_environ()
    request = SubmitRequest.model_validate(event)
    logger.append_keys(run_id=request.run_id, job=request.job)
    submitted = submit_job(
        client("ssm"),
        RunStore(client("dynamodb"), settings.runs_table),
        request,
        sfn=client("stepfunctions"),
        run_events=run_events(settings, metrics),
        config_bucket=settings.config_bucket,
        end_watcher_poll_seconds=settings.end_watcher_poll_seconds,
        kubernetes=kubernetes_gateways(settings),
    )
    logger.info("submitted", extra=submitted.model_dump(mode="json"))
    return submitted.model_dump(mode="json")
