"""Create cluster: render the ParallelCluster configuration, create it through the API, report when CREATE_COMPLETE."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.adapters.clients import client
from trainrun.handlers import cluster_api, run_events
from trainrun.model.run_record import RunStore
from trainrun.settings import ClusterSettings
from trainrun.steps.provisioning import ConfigurationMissing, create_cluster
from trainrun.steps.run import RunRef
from trainrun.telemetry import Telemetry

telemetry = Telemetry()
logger, metrics = telemetry.logger, telemetry.metrics


@telemetry.handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = ClusterSettings.from_environ()
    request = RunRef.model_validate(event)
    logger.append_keys(run_id=request.run_id)
    api = cluster_api(settings)
    if api is None:
        raise ConfigurationMissing("the stack has no PclusterApiUrl: deploy the ParallelCluster API and set it")
    progress = create_cluster(
        api,
        RunStore(client("dynamodb"), settings.runs_table),
        request,
        stack=settings.stack,
        region=settings.region,
        neuron_install_script_uri=settings.neuron_install_script_uri or None,
        node_policy_arn=settings.cluster_node_policy_arn or None,
        s3=client("s3"),
        config_bucket=settings.config_bucket,
        poll_seconds=settings.poll_seconds,
        run_events=run_events(settings, metrics),
    )
    logger.info("progress", extra=progress.model_dump(mode="json"))
    return progress.model_dump(mode="json")
