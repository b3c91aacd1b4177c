"""SSM Run Command on the local head node (moto 5.2.5, pinned).

moto records SendCommand and answers every GetCommandInvocation with an instant, empty
Success. Here a command sent to an instance registered as a head node really runs its
AWS-RunShellScript `commands` (one script, a line each, run by `sh` as root, as the agent
runs it) on the local head node, in a thread, and GetCommandInvocation reports InProgress
until it ends, then its status, exit code, stdout and stderr (a runner that raises reports
Failed). Other instances keep moto's behaviour. A command runs on the instances it names only
(moto 5.2.5 adds every instance of the region when Targets is empty). The patches are idempotent.

Two things SSM does that a step must live with are reproduced:
- an instance's agent registers with SSM some time after the instance starts; until then
  SendCommand answers InvalidInstanceId (the SendCommand API reference: the instance is not in a
  valid state, or "SSM Agent isn't running" / not registered). A head node's agent comes online
  `AGENT_REGISTRATION_SECONDS` after it is registered here (short, for local runs). A head node
  the local ParallelCluster API launched (tagged as ParallelCluster tags one) has no agent until
  its local head node is registered: while its cluster is created, and once it is gone, SendCommand
  answers InvalidInstanceId (moto's instant empty Success would pass for a command that ran);
- a command runs as long as it runs, and may outlast the sending function's wait: with
  `command_seconds` set, every command stays InProgress that much longer than its script runs.

Session Manager's control plane, which moto lacks, is here too: StartSession on a head node
whose agent is online (TargetNotConnected otherwise, as AWS answers for an instance it cannot
reach), with a session id of the caller's name and the tags AWS gives a session (who started it,
`aws:ssmmessages:session-id`, and on what, `aws:ssmmessages:target-id`), which authorize
TerminateSession and ResumeSession. The session's data channel (a websocket to the agent on AWS)
is not emulated: `trainrun shell` opens the shell in the head node's sandbox itself once the
session is granted.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from typing import Any, Protocol

from moto.core.exceptions import JsonRESTError
from moto.core.responses import ActionResult
from moto.ssm.models import Command, SimpleSystemManagerBackend
from moto.ssm.responses import SimpleSystemManagerResponse

from trainrun.local import clock
from trainrun.local.iam.enforcement import current_caller
from trainrun.local.pcluster_api import HEAD_NODE, TAG_NODE_TYPE
from trainrun.local.slurm_head_node import CommandRun
from trainrun.logic import aws_clock
from trainrun.ops.shell import COMMAND_DOCUMENT, SHELL_DOCUMENT

logger = logging.getLogger(__name__)

# SSM truncates the output it returns inline to 24,000 characters.
OUTPUT_LIMIT = 24_000
# How long after a head node boots its SSM agent is online (SendCommand's InvalidInstanceId until then).
AGENT_REGISTRATION_SECONDS = 1.0


class ScriptRunner(Protocol):
    def run_script(self, script: str, run: CommandRun) -> None: ...


_head_nodes: dict[str, ScriptRunner] = {}
# When each head node's agent is online (time.monotonic()).
_online_at: dict[str, float] = {}
_runs: dict[tuple[str, str], CommandRun] = {}
# Session Manager sessions by id: the tags AWS gives each (SESSION_ID_TAG, SESSION_TARGET_TAG).
_sessions: dict[str, dict[str, str]] = {}
SESSION_ID_TAG = "aws:ssmmessages:session-id"
SESSION_TARGET_TAG = "aws:ssmmessages:target-id"
# The documents a session may run here: the shell, and one command instead of it.
SESSION_DOCUMENTS = (SHELL_DOCUMENT, COMMAND_DOCUMENT)
_lock = threading.Lock()
# Every command stays InProgress this much longer than its script runs (0: as long as it runs).
command_seconds = 0.0
_original_send_command = SimpleSystemManagerBackend.send_command
_original_get_invocation = Command.get_invocation


def register_head_node(instance_id: str, runner: ScriptRunner, *, agent_registers_in: float | None = None) -> None:
    with _lock:
        _head_nodes[instance_id] = runner
        delay = AGENT_REGISTRATION_SECONDS if agent_registers_in is None else agent_registers_in
        _online_at[instance_id] = time.monotonic() + delay


def unregister_head_node(instance_id: str) -> None:
    with _lock:
        _head_nodes.pop(instance_id, None)
        _online_at.pop(instance_id, None)


def reset() -> None:
    global command_seconds
    with _lock:
        _head_nodes.clear()
        _online_at.clear()
        _runs.clear()
        _sessions.clear()
        command_seconds = 0.0


def _send_command(self: SimpleSystemManagerBackend, *args: Any, **kwargs: Any) -> Command:
    now = time.monotonic()
    instance_ids = kwargs.get("instance_ids") or []
    with _lock:
        offline = [i for i in instance_ids if _online_at.get(i, now) > now]
        unregistered = [i for i in instance_ids if i not in _online_at]
    offline += [i for i in unregistered if _is_head_node(self.account_id, self.region_name, i)]
    if offline:
        # SendCommand's answer for an instance whose agent has not registered (yet).
        raise JsonRESTError(
            "InvalidInstanceId",
            f"Instances [[{', '.join(offline)}]] not in a valid state for account {self.account_id}",
        )
    named = list(dict.fromkeys(kwargs.get("instance_ids") or []))
    command = _original_send_command(self, *args, **kwargs)
    if not kwargs.get("targets"):
        # Only the instances named (SendCommand's InstanceIds: "The IDs of the managed nodes where
        # the command should run"): moto adds every instance of the region when Targets is empty
        # (in place, to the list it is given), so concurrent runs' commands ran on every run's head node.
        command.instance_ids = named
    script = "\n".join(command.parameters.get("commands", []))
    for instance_id in command.instance_ids:
        with _lock:
            runner = _head_nodes.get(instance_id)
            if runner is None:
                continue
            run = _runs[(command.command_id, instance_id)] = CommandRun()
        threading.Thread(
            target=_run_script, args=(runner, script, run), name=f"ssm-{command.command_id[:8]}", daemon=True
        ).start()
    return command


def _is_head_node(account_id: str, region: str, instance_id: str) -> bool:
    """Whether ParallelCluster (the local API) launched the instance as a cluster's head node."""
    from moto.ec2.models import ec2_backends

    tags = ec2_backends[account_id][region].tags.get(instance_id, {})
    return tags.get(TAG_NODE_TYPE) == HEAD_NODE


def _run_script(runner: ScriptRunner, script: str, run: CommandRun) -> None:
    # A runner that raises must not leave the invocation InProgress for ever: the agent reports
    # a command it could not run as Failed.
    try:
        # InProgress (the agent has it) for `command_seconds` before the script ends: a command
        # that outlasts its sender's wait. On the AWS clock, the agent also picks it up later.
        time.sleep(command_seconds + (clock.real_seconds(aws_clock.SSM_COMMAND_DELIVERY) or 0.0))
        runner.run_script(script, run)
    except Exception as exc:
        logger.exception("the local head node could not run an SSM command")
        run.stderr = f"{run.stderr}trainrun local: the head node could not run the command: {exc}\n"
        run.response_code, run.status = -1, "Failed"


def _get_invocation(self: Command, instance_id: str, plugin_name: str | None) -> dict[str, Any]:
    invocation = _original_get_invocation(self, instance_id, plugin_name)
    with _lock:
        run = _runs.get((self.command_id, instance_id))
    if run is None:
        return invocation
    return {
        **invocation,
        "Status": run.status,
        "StatusDetails": "ExecutionTimedOut" if run.status == "TimedOut" else run.status,
        "ResponseCode": run.response_code,
        "StandardOutputContent": run.stdout[-OUTPUT_LIMIT:],
        "StandardErrorContent": run.stderr[-OUTPUT_LIMIT:],
    }


def session_tags(session_id: str) -> dict[str, str]:
    """The tags Session Manager gave a session (none for a session it does not know)."""
    with _lock:
        return dict(_sessions.get(session_id, {}))


def _start_session(self: SimpleSystemManagerResponse) -> ActionResult:
    target = str(self._get_param("Target") or "")
    document = str(self._get_param("DocumentName") or SHELL_DOCUMENT)
    if document not in SESSION_DOCUMENTS:
        raise JsonRESTError("InvalidDocument", f"Document {document} is not a Session Manager document here")
    with _lock:
        online = target in _head_nodes and _online_at.get(target, float("inf")) <= time.monotonic()
    if not online:
        # AWS's answer for an instance whose agent it cannot reach (stopped, terminated, never registered).
        raise JsonRESTError("TargetNotConnected", f"{target} is not connected.")
    caller = current_caller()
    user_id = str(caller.context.get("aws:userid", "")) if caller is not None else ""
    # A session is named after its caller: an IAM user's name, a role session's name.
    name = caller.arn.rsplit("/", 1)[-1] if caller is not None else "local"
    session_id = f"{name}-{secrets.token_hex(9)[:17]}"
    with _lock:
        _sessions[session_id] = {SESSION_ID_TAG: user_id, SESSION_TARGET_TAG: target}
    return ActionResult(
        {
            "SessionId": session_id,
            "TokenValue": secrets.token_urlsafe(32),
            "StreamUrl": f"wss://ssmmessages.{self.region}.amazonaws.com/v1/data-channel/{session_id}"
            "?role=publish_subscribe",
        }
    )


def _terminate_session(self: SimpleSystemManagerResponse) -> ActionResult:
    # Ending a session that has ended already succeeds, as on AWS.
    session_id = str(self._get_param("SessionId") or "")
    with _lock:
        _sessions.pop(session_id, None)
    return ActionResult({"SessionId": session_id})


def install() -> None:
    SimpleSystemManagerBackend.send_command = _send_command  # type: ignore[method-assign]
    Command.get_invocation = _get_invocation  # type: ignore[method-assign]
    SimpleSystemManagerResponse.start_session = _start_session  # type: ignore[attr-defined]
    SimpleSystemManagerResponse.terminate_session = _terminate_session  # type: ignore[attr-defined]
