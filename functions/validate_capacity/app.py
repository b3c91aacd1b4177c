"""Validate capacity: check the reservation against the run and record the findings."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.adapters.clients import client
from trainrun.logic.capacity import DEFAULT_STARTUP_ALLOWANCE
from trainrun.logic.head_node_scripts import JOB_STOP_WAIT_SECONDS
from trainrun.model.run_record import RunStore, utcnow
from trainrun.settings import StepSettings
from trainrun.steps.run import ReservationLeads, RunRef, validate_capacity
from trainrun.telemetry import Telemetry

telemetry = Telemetry()
logger = telemetry.logger


@telemetry.handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = StepSettings.from_environ()
    request = RunRef.model_validate(event)
    logger.append_keys(run_id=request.run_id)
    verdict = validate_capacity(
        client("ec2"),
        client("resource-groups"),
        RunStore(client("dynamodb"), settings.runs_table),
        request,
        stack_region=settings.region,
        now=utcnow(),
        leads=ReservationLeads(
            provisioning=timedelta(seconds=settings.reservation_provisioning_lead_seconds),
            termination=timedelta(seconds=settings.reservation_termination_lead_seconds),
            # How late the check that stops the job may come (a heartbeat period, nominal: run
            # faster by the local runtime's compressed time), and how long the stop then takes at
            # most (Slurm's KillWait and more, real seconds on the head node).
            stop_margin=timedelta(
                seconds=settings.job_heartbeat_seconds / settings.local_time_scale + JOB_STOP_WAIT_SECONDS
            ),
            startup_allowance=DEFAULT_STARTUP_ALLOWANCE / settings.local_time_scale,
        ),
    )
    logger.info("capacity verdict", extra={"accepted": verdict.accepted, "codes": [f.code for f in verdict.findings]})
    # No wait: no wait_until key at all (the workflow's choice asks whether it is present).
    return verdict.model_dump(mode="json", exclude_none=True)
