"""Submitting a run: upload the run file to the config bucket and find the execution it starts.

The upload is the start: S3 tells EventBridge, EventBridge invokes the start-run function, and
that starts an execution named after the object's identity (trainrun.steps.start_run.run_id_for). So
the run id is known as soon as S3 answers the upload, and the execution is looked up by name.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from trainrun.errors import TrainrunError
from trainrun.model.run_record import RunFileRef, RunRecord, RunStatus
from trainrun.ops.stack import Stack
from trainrun.steps.start_run import RUN_FILE_PREFIX, execution_arn_for, run_id_for


class RunDidNotStart(TrainrunError):
    """The run file was uploaded, but no execution started for it."""


class SubmittedRun(BaseModel):
    run_id: str
    execution_arn: str
    run_file: RunFileRef


def run_file_key(name: str) -> str:
    return f"{RUN_FILE_PREFIX}{name}.yaml"


def running_runs(stack: Stack, key: str) -> list[RunRecord]:
    """The runs of the run file at `key` that are still running: another upload of it starts
    another run beside them (every upload is a run), which is seldom meant."""
    from trainrun.ops.runs import list_runs

    return [record for record in list_runs(stack) if record.status == RunStatus.RUNNING and record.run_file.key == key]


def upload(s3: Any, bucket: str, key: str, data: bytes, state_machine_arn: str) -> SubmittedRun:
    """Put the run file; the run it starts has a known id (the bucket is versioned: every upload is a new run)."""
    response = s3.put_object(Bucket=bucket, Key=key, Body=data, ContentType="application/yaml")
    ref = RunFileRef(
        bucket=bucket, key=key, version_id=response.get("VersionId"), etag=response["ETag"].strip('"') or None
    )
    run_id = run_id_for(ref)
    return SubmittedRun(run_id=run_id, execution_arn=execution_arn_for(state_machine_arn, run_id), run_file=ref)


def submit(
    stack: Stack,
    data: bytes,
    key: str,
    *,
    timeout: float = 60.0,
    poll: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> SubmittedRun:
    """Upload the run file and wait until its execution exists; RunDidNotStart past `timeout`."""
    run = upload(stack.client("s3"), stack.outputs["ConfigBucketName"], key, data, stack.outputs["StateMachineArn"])
    wait_for_execution(stack.client("stepfunctions"), run, timeout=timeout, poll=poll, sleep=sleep)
    return run


def wait_for_execution(
    sfn: Any,
    run: SubmittedRun,
    *,
    timeout: float,
    poll: float,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            sfn.describe_execution(executionArn=run.execution_arn)
            return
        except sfn.exceptions.ExecutionDoesNotExist:
            if time.monotonic() >= deadline:
                raise RunDidNotStart(
                    f"uploaded {run.run_file.uri} (version {run.run_file.version_id}), but run {run.run_id} "
                    f"did not start within {timeout:.0f}s: see the StartRunFunction's log"
                ) from None
        sleep(poll)
