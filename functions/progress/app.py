"""Progress: one batch of job output from the jobs log group -> the run record, metrics, the waiting task."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.adapters.clients import client
from trainrun.handlers import kubernetes_gateways, run_events
from trainrun.logic.kubernetes_objects import CONTAINER_LOG_GROUP
from trainrun.metrics import for_stack
from trainrun.model.run_record import RunStore, utcnow
from trainrun.settings import StepSettings
from trainrun.steps.progress import ContainerBatchOutcome, apply_batch, apply_container_batch, decode_awslogs
from trainrun.telemetry import Telemetry

telemetry = Telemetry()
logger, metrics = telemetry.logger, telemetry.metrics


@telemetry.handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = StepSettings.from_environ()
    batch = decode_awslogs(event)
    common = {
        "store": RunStore(client("dynamodb"), settings.runs_table),
        "sfn": client("stepfunctions"),
        "metrics": for_stack(metrics, settings.stack),
        "now": utcnow(),
        "heartbeat_every": timedelta(seconds=settings.heartbeat_every_seconds),
        "run_events": run_events(settings, metrics),
    }
    if CONTAINER_LOG_GROUP.match(batch.log_group):
        # An EKS run's cluster's container logs: one outcome per pod the batch holds lines of.
        outcomes = apply_container_batch(batch, kubernetes=kubernetes_gateways(settings), **common)
        answer = ContainerBatchOutcome(outcomes=outcomes).model_dump(mode="json")
        logger.info("container batch", extra=answer)
        return answer
    outcome = apply_batch(batch, **common)
    logger.info("batch", extra=outcome.model_dump(mode="json"))
    return outcome.model_dump(mode="json")
