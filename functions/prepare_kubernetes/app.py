"""Prepare Kubernetes (kind: eks): the device plugins, the file system's volume and the rendezvous
Service; every node ready with its devices; the workload staged onto /fsx by the stage Job."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.adapters.clients import client
from trainrun.handlers import kubernetes_gateways, run_events
from trainrun.model.run_record import RunStore
from trainrun.settings import KubernetesSettings
from trainrun.steps.kubernetes import prepare_kubernetes
from trainrun.steps.run import RunRef
from trainrun.telemetry import Telemetry

telemetry = Telemetry()
logger, metrics = telemetry.logger, telemetry.metrics


@telemetry.handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = KubernetesSettings.from_environ()
    request = RunRef.model_validate(event)
    logger.append_keys(run_id=request.run_id)
    progress = prepare_kubernetes(
        kubernetes_gateways(settings),
        client("logs"),
        RunStore(client("dynamodb"), settings.runs_table),
        request,
        stack=settings.stack,
        progress_function_arn=settings.progress_function_arn,
        log_retention_days=settings.log_retention_days,
        poll_seconds=settings.poll_seconds,
        run_events=run_events(settings, metrics),
        time_scale=settings.local_time_scale,
    )
    logger.info("progress", extra=progress.model_dump(mode="json"))
    return progress.model_dump(mode="json")
