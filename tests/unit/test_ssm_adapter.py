"""The SSM adapter: what SendCommand is asked, and how an invocation's state is read.

moto records SendCommand and answers GetCommandInvocation (always Success with empty output, and
InvocationDoesNotExist for an instance the command was not sent to); botocore's Stubber plays the
other statuses and the errors.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from tests.unit.conftest import REGION
from trainrun.adapters import ssm as ssm_adapter
from trainrun.adapters.ssm import CommandResult, command_result, send_script, stderr_tail
from trainrun.errors import InstanceNotReachable, TransientAwsError

INSTANCE = "i-0123456789abcdef0"
COMMAND_ID = "0b7f1c2e-1111-2222-3333-444455556666"
SCRIPT = "set -eu\nrunuser -l ubuntu -c 'bash -s' <<'TRAINRUN_EOF'\necho hi\nTRAINRUN_EOF\n"


@pytest.fixture
def ssm(aws: None) -> Any:
    return boto3.client("ssm", region_name=REGION)


@pytest.fixture
def offline_ssm(aws_env: None) -> Any:
    return boto3.client("ssm", region_name=REGION)


def test_send_script_runs_the_whole_script_with_aws_run_shell_script(ssm: Any):
    command_id = send_script(
        ssm, instance_id=INSTANCE, script=SCRIPT, comment="trainrun r: prepare", timeout_seconds=3600
    )
    [command] = ssm.list_commands(CommandId=command_id)["Commands"]
    assert command["DocumentName"] == "AWS-RunShellScript"
    assert command["InstanceIds"] == [INSTANCE]
    assert command["Comment"] == "trainrun r: prepare"
    assert command["Parameters"] == {"commands": [SCRIPT], "executionTimeout": ["3600"]}
    assert "CloudWatchOutputConfig" not in command or not command["CloudWatchOutputConfig"].get(
        "CloudWatchOutputEnabled"
    )


def test_a_long_comment_is_cut_to_what_ssm_accepts(ssm: Any):
    command_id = send_script(ssm, instance_id=INSTANCE, script=SCRIPT, comment="x" * 300, timeout_seconds=60)
    [command] = ssm.list_commands(CommandId=command_id)["Commands"]
    assert command["Comment"] == "x" * 100


@pytest.mark.parametrize("timeout", [0, -1, 172_801, True])
def test_send_script_refuses_a_timeout_ssm_would_refuse(ssm: Any, timeout: int):
    with pytest.raises(ValueError, match="timeout_seconds"):
        send_script(ssm, instance_id=INSTANCE, script=SCRIPT, comment="c", timeout_seconds=timeout)


def test_send_script_refuses_an_empty_script(ssm: Any):
    with pytest.raises(ValueError, match="empty"):
        send_script(ssm, instance_id=INSTANCE, script=" \n", comment="c", timeout_seconds=60)


def test_command_result_reads_the_invocation(ssm: Any):
    command_id = send_script(ssm, instance_id=INSTANCE, script=SCRIPT, comment="c", timeout_seconds=60)
    result = command_result(ssm, command_id=command_id, instance_id=INSTANCE)
    assert result == CommandResult(
        status="Success", stdout="", stderr="", finished=True, succeeded=True, status_details="Success", response_code=0
    )


def test_an_invocation_not_visible_yet_is_pending(ssm: Any):
    command_id = send_script(ssm, instance_id=INSTANCE, script=SCRIPT, comment="c", timeout_seconds=60)
    result = command_result(ssm, command_id=command_id, instance_id="i-0fedcba9876543210")
    assert result == CommandResult(status="Pending", stdout="", stderr="", finished=False, succeeded=False)


def test_an_unknown_command_is_an_error(ssm: Any):
    with pytest.raises(ClientError):
        command_result(ssm, command_id=COMMAND_ID, instance_id=INSTANCE)


# --- statuses and errors moto does not produce ----------------------------------------------------


def invocation(status: str, *, stdout: str = "", stderr: str = "", code: int = -1, details: str = "") -> dict[str, Any]:
    return {
        "CommandId": COMMAND_ID,
        "InstanceId": INSTANCE,
        "DocumentName": "AWS-RunShellScript",
        "PluginName": "aws:runShellScript",
        "ResponseCode": code,
        "Status": status,
        "StatusDetails": details or status,
        "StandardOutputContent": stdout,
        "StandardErrorContent": stderr,
    }


@pytest.mark.parametrize(
    ("status", "code", "finished", "succeeded", "response_code"),
    [
        ("Pending", -1, False, False, None),
        ("InProgress", -1, False, False, None),
        ("Delayed", -1, False, False, None),
        ("Cancelling", -1, False, False, None),
        ("Success", 0, True, True, 0),
        ("Failed", 3, True, False, 3),
        ("TimedOut", -1, True, False, None),
        ("Cancelled", -1, True, False, None),
    ],
)
def test_every_status(
    offline_ssm: Any, status: str, code: int, finished: bool, succeeded: bool, response_code: int | None
):
    with Stubber(offline_ssm) as stub:
        stub.add_response(
            "get_command_invocation",
            invocation(status, stdout="out\n", stderr="err\n", code=code),
            {"CommandId": COMMAND_ID, "InstanceId": INSTANCE},
        )
        result = command_result(offline_ssm, command_id=COMMAND_ID, instance_id=INSTANCE)
    assert result == CommandResult(
        status=status,  # type: ignore[arg-type]
        stdout="out\n",
        stderr="err\n",
        finished=finished,
        succeeded=succeeded,
        status_details=status,
        response_code=response_code,
    )


@pytest.mark.parametrize(
    ("code", "http_status"),
    [("ThrottlingException", 400), ("InternalServerError", 500), ("ServiceUnavailable", 503)],
)
def test_throttling_and_server_errors_are_transient(offline_ssm: Any, code: str, http_status: int):
    with Stubber(offline_ssm) as stub:
        stub.add_client_error("get_command_invocation", service_error_code=code, http_status_code=http_status)
        stub.add_client_error("send_command", service_error_code=code, http_status_code=http_status)
        with pytest.raises(TransientAwsError, match="GetCommandInvocation"):
            command_result(offline_ssm, command_id=COMMAND_ID, instance_id=INSTANCE)
        with pytest.raises(TransientAwsError, match="SendCommand"):
            send_script(offline_ssm, instance_id=INSTANCE, script=SCRIPT, comment="c", timeout_seconds=60)


def test_invocation_does_not_exist_is_pending(offline_ssm: Any):
    with Stubber(offline_ssm) as stub:
        stub.add_client_error("get_command_invocation", service_error_code="InvocationDoesNotExist")
        result = command_result(offline_ssm, command_id=COMMAND_ID, instance_id=INSTANCE)
    assert (result.status, result.finished, result.succeeded) == ("Pending", False, False)


def test_an_instance_ssm_cannot_reach_is_named(offline_ssm: Any):
    with Stubber(offline_ssm) as stub:
        stub.add_client_error("send_command", service_error_code="InvalidInstanceId", http_status_code=400)
        with pytest.raises(InstanceNotReachable, match=INSTANCE):
            send_script(offline_ssm, instance_id=INSTANCE, script=SCRIPT, comment="c", timeout_seconds=60)


def test_access_denied_is_not_transient(offline_ssm: Any):
    with Stubber(offline_ssm) as stub:
        stub.add_client_error("send_command", service_error_code="AccessDeniedException", http_status_code=400)
        with pytest.raises(ClientError) as raised:
            send_script(offline_ssm, instance_id=INSTANCE, script=SCRIPT, comment="c", timeout_seconds=60)
    assert not isinstance(raised.value, TransientAwsError)


def test_an_unexpected_status_is_not_guessed(offline_ssm: Any):
    with Stubber(offline_ssm) as stub:
        stub.add_response("get_command_invocation", invocation("Exploded"))
        with pytest.raises(ValueError, match="Exploded"):
            command_result(offline_ssm, command_id=COMMAND_ID, instance_id=INSTANCE)


def test_finished_statuses_are_the_terminal_ones():
    assert frozenset({"Success", "Cancelled", "TimedOut", "Failed"}) == ssm_adapter.FINISHED_STATUSES


# --- stderr_tail -----------------------------------------------------------------------------------


def test_stderr_tail_keeps_the_last_non_blank_lines():
    text = "\n".join(f"line {n}" for n in range(30)) + "\n\n"
    assert stderr_tail(text, lines=3) == "line 27\nline 28\nline 29"
    assert stderr_tail(text).splitlines()[0] == "line 10"
    assert stderr_tail("a\r\nb\r\n") == "a\nb"
    assert stderr_tail("") == ""
    assert stderr_tail("x", lines=0) == ""
