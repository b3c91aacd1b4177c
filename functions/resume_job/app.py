"""Resume train: resubmit a train job the infrastructure failed, once the cluster has its nodes back
(the run's budget holding while it waits)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.adapters.clients import client
from trainrun.handlers import kubernetes_gateways, run_events
from trainrun.model.run_record import RunStore
from trainrun.settings import StepSettings
from trainrun.steps.resume import ResumeRequest, resume_job
from trainrun.telemetry import Telemetry

telemetry = Telemetry()
logger, metrics = telemetry.logger, telemetry.metrics


@telemetry.handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = StepSettings.from_environ()
    request = ResumeRequest.model_validate(event)
    logger.append_keys(run_id=request.run_id, job=request.job)
    store = RunStore(client("dynamodb"), settings.runs_table)
    decision = resume_job(
        client("ssm"),
        store,
        request,
        poll_seconds=settings.poll_seconds,
        run_events=run_events(settings, metrics),
        time_scale=settings.local_time_scale,
        kubernetes=kubernetes_gateways(settings),
    )
    logger.info("resume decision", extra=decision.model_dump(mode="json"))
    return decision.model_dump(mode="json")
