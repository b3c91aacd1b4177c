"""Check compile / Check train: no heartbeat came (or the job state timed out), so ask Slurm whether
the job still runs or how it ended; enforce max_runtime and the run's budget."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.adapters.clients import client
from trainrun.handlers import kubernetes_gateways, run_events
from trainrun.model.run_record import RunStore
from trainrun.settings import StepSettings
from trainrun.steps.head_node import JobRequest, check_job
from trainrun.telemetry import Telemetry

telemetry = Telemetry()
logger, metrics = telemetry.logger, telemetry.metrics


@telemetry.handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = StepSettings.from_environ()
    request = JobRequest.model_validate(event)
    logger.append_keys(run_id=request.run_id, job=request.job)
    store = RunStore(client("dynamodb"), settings.runs_table)
    check = check_job(
        client("ssm"),
        store,
        request,
        run_events=run_events(settings, metrics),
        time_scale=settings.local_time_scale,
        kubernetes=kubernetes_gateways(settings),
    )
    logger.info("job state", extra=check.model_dump(mode="json"))
    # No continuation: no key at all (the workflow's choice asks whether it is present).
    return check.model_dump(mode="json", exclude_none=True)
