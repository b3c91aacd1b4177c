"""Tear down: one pass over what the run created (cluster or EKS cluster, file system, network), by record and tag;
a run on a kept cluster stops its own jobs there instead."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.adapters.clients import client
from trainrun.handlers import cluster_api, kubernetes_gateways, run_events
from trainrun.metrics import for_stack
from trainrun.model.run_record import RunStore
from trainrun.settings import ClusterSettings
from trainrun.steps.provisioning import TeardownInput, tear_down
from trainrun.telemetry import Telemetry

telemetry = Telemetry()
logger, metrics = telemetry.logger, telemetry.metrics


@telemetry.handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = ClusterSettings.from_environ()
    request = TeardownInput.model_validate(event)
    logger.append_keys(run_id=request.run_id)
    progress = tear_down(
        client("ec2"),
        client("fsx"),
        cluster_api(settings),
        RunStore(client("dynamodb"), settings.runs_table),
        request,
        region=settings.region,
        poll_seconds=settings.poll_seconds,
        run_events=run_events(settings, metrics),
        metrics=for_stack(metrics, settings.stack),
        ssm=client("ssm"),
        config_bucket=settings.config_bucket,
        eks=client("eks"),
        kubernetes=kubernetes_gateways(settings),
    )
    logger.info("teardown pass", extra=progress.model_dump(mode="json"))
    return progress.model_dump(mode="json")
