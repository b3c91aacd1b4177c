"""Starting runs: from a run file uploaded to the config bucket, or from a schedule.

EventBridge delivers at least once and S3 may emit the same upload twice, so the execution
name is derived from the object's identity (bucket, key, version or ETag, and for schedules
the scheduled time). A duplicate event then asks for an execution that already exists, and
Step Functions refuses to start it a second time.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from trainrun.model.run_record import RunFileRef
from trainrun.model.tags import RUN_ID_PATTERN

RUN_FILE_PREFIX = "runs/"
RUN_FILE_SUFFIXES = (".yaml", ".yml")
# Run ids are execution names, stack-resource name parts and Slurm job names: keep them
# short, lower case and free of anything a shell or an ARN would treat specially.
_RUN_ID = re.compile(f"^{RUN_ID_PATTERN}$")
_STEM_MAX = 48
_DIGEST_CHARS = 12


class StartDecision(BaseModel):
    """What the start-run function did with one trigger event."""

    model_config = ConfigDict(frozen=True)

    run_id: str | None
    run_file: str
    started: bool
    reason: str
    execution_arn: str | None = None


def is_run_file(key: str) -> bool:
    return key.startswith(RUN_FILE_PREFIX) and key.endswith(RUN_FILE_SUFFIXES)


def looks_like_run_id(text: str) -> bool:
    """Whether `text` has the shape `run_id_for` gives run ids (a stem, then the digest)."""
    return bool(_RUN_ID.match(text)) and re.fullmatch(rf".+-[0-9a-f]{{{_DIGEST_CHARS}}}", text) is not None


def run_id_for(ref: RunFileRef, occurrence: str | None = None) -> str:
    """A deterministic run id: readable stem of the key plus a digest of the object's identity.

    `occurrence` distinguishes the runs a schedule starts from the same unchanged object.
    """
    stem = ref.key.rsplit("/", 1)[-1]
    for suffix in RUN_FILE_SUFFIXES:
        stem = stem.removesuffix(suffix)
    stem = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")
    if not stem or not stem[0].isalpha():
        stem = f"run-{stem}".rstrip("-")
    # In a versioned bucket (the config bucket is one) the version id names the object; the ETag
    # only tells contents apart in an unversioned one. Using one or the other lets a submitter
    # compute the run id from PutObject's answer alone (moto's S3 events also lack the etag).
    version = ref.version_id or ref.etag or ""
    identity = "\n".join([ref.bucket, ref.key, version, occurrence or ""])
    digest = hashlib.sha256(identity.encode()).hexdigest()[:_DIGEST_CHARS]
    run_id = f"{stem[:_STEM_MAX].rstrip('-')}-{digest}"
    assert _RUN_ID.match(run_id), run_id
    return run_id


def start_run(sfn: Any, state_machine_arn: str, ref: RunFileRef, occurrence: str | None = None) -> StartDecision:
    """Start the workflow for one run file; a second start of the same run is a no-op."""
    if not is_run_file(ref.key):
        return StartDecision(
            run_id=None,
            run_file=ref.uri,
            started=False,
            reason=f"ignored: not a run file (expected {RUN_FILE_PREFIX}*{'|'.join(RUN_FILE_SUFFIXES)})",
        )
    run_id = run_id_for(ref, occurrence)
    execution_arn = execution_arn_for(state_machine_arn, run_id)
    duplicate = StartDecision(
        run_id=run_id,
        run_file=ref.uri,
        started=False,
        reason="duplicate event: the execution already exists",
        execution_arn=execution_arn,
    )
    # Step Functions answers a repeated StartExecution with the same name and input as a
    # success while the first is running, so ask first to tell a duplicate from a start.
    try:
        sfn.describe_execution(executionArn=execution_arn)
        return duplicate
    except sfn.exceptions.ExecutionDoesNotExist:
        pass
    execution_input = {"run_id": run_id, "run_file": ref.model_dump(mode="json")}
    try:
        response = sfn.start_execution(
            stateMachineArn=state_machine_arn,
            name=run_id,
            input=json.dumps(execution_input, separators=(",", ":"), sort_keys=True),
        )
    except sfn.exceptions.ExecutionAlreadyExists:
        return duplicate
    return StartDecision(
        run_id=run_id, run_file=ref.uri, started=True, reason="started", execution_arn=response["executionArn"]
    )


def execution_arn_for(state_machine_arn: str, execution_name: str) -> str:
    return f"{state_machine_arn.replace(':stateMachine:', ':execution:', 1)}:{execution_name}"
