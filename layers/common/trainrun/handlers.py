"""The shape shared by the provisioning steps' handlers, written once.

Create network, Create file system and Link data repository each parse a run id, call one
step with one AWS client, the run store and the stack's settings, and return its progress.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.aws import client
from trainrun.provisioning import RunRef
from trainrun.records import RunStore
from trainrun.resources import Progress
from trainrun.settings import StepSettings

ProvisioningStep = Callable[..., Progress]
Handler = Callable[[dict[str, Any], LambdaContext], dict[str, Any]]


def provisioning_handler(step: ProvisioningStep, service: str) -> Handler:
    logger = Logger()

    @logger.inject_lambda_context
    def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        settings = StepSettings.from_environ()
        request = RunRef.model_validate(event)
        logger.append_keys(run_id=request.run_id)
        progress = step(
            client(service),
            RunStore(client("dynamodb"), settings.runs_table),
            request,
            stack=settings.stack,
            poll_seconds=settings.poll_seconds,
        )
        logger.info("progress", extra=progress.model_dump(mode="json"))
        return progress.model_dump(mode="json")

    return lambda_handler
