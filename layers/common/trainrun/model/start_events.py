"""The two events that start a run, parsed into one model.

- An S3 "Object Created" event delivered by EventBridge (the run file was uploaded).
- The input of an EventBridge Scheduler schedule: {"run_file": "s3://bucket/runs/x.yaml" or
  "runs/x.yaml", "scheduled_time": "<aws.scheduler.scheduled-time>"}.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import S3EventNotificationEventBridgeModel
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainrun.errors import TrainrunError
from trainrun.model.run_record import RunFileRef


class StartEventInvalid(TrainrunError):
    """The start-run function was given an event it does not understand."""


class ScheduledRunInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run_file: str = Field(pattern=r"^(s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/)?runs/[A-Za-z0-9_./-]+\.ya?ml$")
    scheduled_time: str = Field(min_length=1, max_length=64)


class Trigger(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_file: RunFileRef
    # Distinguishes runs started from the same unchanged object (schedule occurrences).
    occurrence: str | None = None


def parse_start_event(event: dict[str, Any], *, default_bucket: str) -> Trigger:
    if "detail-type" in event:
        try:
            s3_event = parse(event=event, model=S3EventNotificationEventBridgeModel)
        except ValidationError as exc:
            raise StartEventInvalid(f"not an S3 Object Created event: {exc}") from exc
        if s3_event.source != "aws.s3" or s3_event.detail_type != "Object Created":
            raise StartEventInvalid(
                f"not an S3 Object Created event: source {s3_event.source!r}, detail-type {s3_event.detail_type!r}"
            )
        obj = s3_event.detail.object
        return Trigger(
            run_file=RunFileRef(
                bucket=s3_event.detail.bucket.name, key=obj.key, version_id=obj.version_id, etag=obj.etag
            )
        )
    try:
        scheduled = ScheduledRunInput.model_validate(event)
    except ValidationError as exc:
        raise StartEventInvalid(f"not a schedule input ({{run_file, scheduled_time}}): {exc}") from exc
    bucket, _, key = scheduled.run_file.removeprefix("s3://").partition("/")
    if not scheduled.run_file.startswith("s3://"):
        bucket, key = default_bucket, scheduled.run_file
    return Trigger(run_file=RunFileRef(bucket=bucket, key=key), occurrence=scheduled.scheduled_time)
