"""Link data repository: the S3 data repository association at /data; report when AVAILABLE."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.aws import client
from trainrun.provisioning import RunRef, link_data_repository
from trainrun.records import RunStore
from trainrun.settings import StepSettings

logger = Logger()


@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = StepSettings.from_environ()
    request = RunRef.model_validate(event)
    logger.append_keys(run_id=request.run_id)
    progress = link_data_repository(
        client("fsx"),
        RunStore(client("dynamodb"), settings.runs_table),
        request,
        stack=settings.stack,
        poll_seconds=settings.poll_seconds,
    )
    logger.info("progress", extra=progress.model_dump(mode="json"))
    return progress.model_dump(mode="json")
