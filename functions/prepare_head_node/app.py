"""Prepare head node: one SSM command that sets up log shipping, the workload and the dataset; reports when it ends."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.adapters.clients import client
from trainrun.model.run_record import RunStore
from trainrun.settings import HeadNodeSettings
from trainrun.steps.head_node import prepare_head_node
from trainrun.steps.run import RunRef
from trainrun.telemetry import Telemetry

telemetry = Telemetry()
logger = telemetry.logger


@telemetry.handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = HeadNodeSettings.from_environ()
    request = RunRef.model_validate(event)
    logger.append_keys(run_id=request.run_id)
    progress = prepare_head_node(
        client("ssm"),
        client("s3"),
        client("ec2"),
        RunStore(client("dynamodb"), settings.runs_table),
        request.run_id,
        jobs_log_group=settings.jobs_log_group,
        region=settings.region,
        config_bucket=settings.config_bucket,
        poll_seconds=settings.poll_seconds,
        wait_for_node_configured=not settings.neuron_install_script_uri,
    )
    logger.info("progress", extra=progress.model_dump(mode="json"))
    return progress.model_dump(mode="json")
