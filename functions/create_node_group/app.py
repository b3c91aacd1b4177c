"""Create node group: the launch template on the reservation, the EKS managed node group, the add-ons (kind: eks)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.adapters.clients import client
from trainrun.handlers import kubernetes_gateways, run_events
from trainrun.model.run_record import RunStore
from trainrun.settings import EksSettings
from trainrun.steps.eks import create_eks_nodes
from trainrun.steps.kubernetes import dry_run
from trainrun.steps.run import RunRef
from trainrun.telemetry import Telemetry

telemetry = Telemetry()
logger, metrics = telemetry.logger, telemetry.metrics


@telemetry.handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = EksSettings.from_environ()
    request = RunRef.model_validate(event)
    logger.append_keys(run_id=request.run_id)
    gateways = kubernetes_gateways(settings)
    progress = create_eks_nodes(
        client("eks"),
        client("ec2"),
        RunStore(client("dynamodb"), settings.runs_table),
        request,
        stack=settings.stack,
        cluster_role_arn=settings.eks_cluster_role_arn,
        node_role_arn=settings.eks_node_role_arn,
        poll_seconds=settings.poll_seconds,
        run_events=run_events(settings, metrics),
        check_objects=lambda record, spec: dry_run(
            gateways(record), record, spec, config_bucket=settings.config_bucket
        ),
    )
    logger.info("progress", extra=progress.model_dump(mode="json"))
    return progress.model_dump(mode="json")
