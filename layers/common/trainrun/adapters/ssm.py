"""Run Command (SSM) calls behind Prepare head node, Compile and Train: send a script, read its result.

Functions take their boto3 SSM client as an argument. Scripts are sent with the AWS-RunShellScript
document, as one `commands` element (the agent writes it to a file and runs it with sh), to one
instance. Throttling and service-side failures become `TransientAwsError` (the state machine
retries it by name). An invocation that does not exist yet (GetCommandInvocation right after
SendCommand) is reported as Pending.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from botocore.exceptions import ClientError

from trainrun.adapters.aws_errors import call, error_code
from trainrun.errors import InstanceNotReachable

logger = logging.getLogger(__name__)

__all__ = [
    "DOCUMENT_NAME",
    "FINISHED_STATUSES",
    "CommandResult",
    "CommandStatus",
    "command_result",
    "send_script",
    "stderr_tail",
    "wait_for_command",
]

DOCUMENT_NAME = "AWS-RunShellScript"
CommandStatus = Literal["Pending", "InProgress", "Delayed", "Success", "Cancelled", "TimedOut", "Failed", "Cancelling"]
FINISHED_STATUSES = frozenset({"Success", "Cancelled", "TimedOut", "Failed"})
# AWS-RunShellScript's executionTimeout: 1 second to 48 hours.
MAX_EXECUTION_TIMEOUT_SECONDS = 172_800
# SendCommand's Comment is at most 100 characters.
MAX_COMMENT_CHARS = 100
INVOCATION_DOES_NOT_EXIST = "InvocationDoesNotExist"
# SendCommand to an instance that is not (yet) a managed instance: stopped, or its agent is not registered.
INVALID_INSTANCE = ("InvalidInstanceId",)


@dataclass(frozen=True, slots=True)
class CommandResult:
    """One command invocation on one instance. stdout/stderr are what SSM keeps (the first 24,000
    and 8,000 characters); `response_code` is the script's exit code once it ran, else None."""

    status: CommandStatus
    stdout: str
    stderr: str
    finished: bool
    succeeded: bool
    status_details: str = ""
    response_code: int | None = None


def send_script(ssm: Any, *, instance_id: str, script: str, comment: str, timeout_seconds: int) -> str:
    """Run `script` as root on `instance_id` with AWS-RunShellScript; the command id.

    `timeout_seconds` is the script's execution timeout (the agent stops it after that long).
    """
    if isinstance(timeout_seconds, bool) or not 1 <= timeout_seconds <= MAX_EXECUTION_TIMEOUT_SECONDS:
        raise ValueError(f"timeout_seconds must be 1 to {MAX_EXECUTION_TIMEOUT_SECONDS}, not {timeout_seconds!r}")
    if not script.strip():
        raise ValueError("the script is empty")
    try:
        sent = call(
            ssm.send_command,
            "SendCommand",
            InstanceIds=[instance_id],
            DocumentName=DOCUMENT_NAME,
            Comment=comment[:MAX_COMMENT_CHARS],
            Parameters={"commands": [script], "executionTimeout": [str(timeout_seconds)]},
        )
    except ClientError as exc:
        if error_code(exc) in INVALID_INSTANCE:
            raise InstanceNotReachable(
                f"SSM cannot run commands on {instance_id}: it is not running or its SSM agent is not registered "
                f"({exc})"
            ) from exc
        raise
    command_id = str(sent["Command"]["CommandId"])
    logger.info("sent SSM command %s to %s: %s", command_id, instance_id, comment)
    return command_id


def command_result(ssm: Any, *, command_id: str, instance_id: str) -> CommandResult:
    """Where the command stands on the instance, with what it printed so far."""
    try:
        invocation = call(
            ssm.get_command_invocation, "GetCommandInvocation", CommandId=command_id, InstanceId=instance_id
        )
    except ClientError as exc:
        # Right after SendCommand the invocation may not be visible yet.
        if error_code(exc) == INVOCATION_DOES_NOT_EXIST:
            return CommandResult(status="Pending", stdout="", stderr="", finished=False, succeeded=False)
        raise
    status = str(invocation.get("Status", ""))
    if status not in get_args(CommandStatus):
        raise ValueError(f"SSM command {command_id} on {instance_id} has an unknown status {status!r}")
    code = invocation.get("ResponseCode")
    finished = status in FINISHED_STATUSES
    return CommandResult(
        status=cast(CommandStatus, status),
        stdout=str(invocation.get("StandardOutputContent") or ""),
        stderr=str(invocation.get("StandardErrorContent") or ""),
        finished=finished,
        succeeded=status == "Success",
        status_details=str(invocation.get("StatusDetails") or ""),
        # SSM reports -1 until the script has run.
        response_code=int(code) if finished and isinstance(code, int) and code >= 0 else None,
    )


def wait_for_command(
    ssm: Any,
    *,
    command_id: str,
    instance_id: str,
    seconds: float,
    poll_seconds: float,
    sleep: Callable[[float], None] = time.sleep,
) -> CommandResult:
    """The command's result once it ends, or as it stands after `seconds`: a step waits this
    long in one call for a command that ends quickly, and its workflow's wait loop for the rest."""
    deadline = time.monotonic() + seconds
    while True:
        result = command_result(ssm, command_id=command_id, instance_id=instance_id)
        if result.finished or time.monotonic() > deadline:
            return result
        sleep(poll_seconds)


def stderr_tail(text: str, lines: int = 20) -> str:
    """The last `lines` non-blank lines of `text` (a script's stderr), for an error message."""
    if lines <= 0:
        return ""
    kept = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n") if line.strip()]
    return "\n".join(kept[-lines:])
