"""Create EKS cluster: the run's EKS control plane (cluster.kind: eks), then the access entry of the Kubernetes role."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.adapters.clients import client
from trainrun.handlers import run_events
from trainrun.model.run_record import RunStore
from trainrun.settings import EksSettings
from trainrun.steps.eks import create_eks_cluster
from trainrun.steps.run import RunRef
from trainrun.telemetry import Telemetry

telemetry = Telemetry()
logger, metrics = telemetry.logger, telemetry.metrics


@telemetry.handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = EksSettings.from_environ()
    request = RunRef.model_validate(event)
    logger.append_keys(run_id=request.run_id)
    progress = create_eks_cluster(
        client("eks"),
        RunStore(client("dynamodb"), settings.runs_table),
        request,
        stack=settings.stack,
        region=settings.region,
        cluster_role_arn=settings.eks_cluster_role_arn,
        node_role_arn=settings.eks_node_role_arn,
        access_role_arn=settings.kubernetes_role_arn,
        poll_seconds=settings.poll_seconds,
        run_events=run_events(settings, metrics),
    )
    logger.info("progress", extra=progress.model_dump(mode="json"))
    return progress.model_dump(mode="json")
