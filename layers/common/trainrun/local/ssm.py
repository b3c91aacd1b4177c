"""SSM Run Command on the local head node (moto 5.2.5, pinned).

moto records SendCommand and answers every GetCommandInvocation with an instant, empty
Success. Here a command sent to an instance registered as a head node really runs its
AWS-RunShellScript `commands` (one script, a line each, run by `sh` as root, as the agent
runs it) on the local head node, in a thread, and GetCommandInvocation reports InProgress
until it ends, then its status, exit code, stdout and stderr (a runner that raises reports
Failed). Other instances keep moto's behaviour. The patches are idempotent.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from moto.ssm.models import Command, SimpleSystemManagerBackend

from trainrun.local.head_node import CommandRun

logger = logging.getLogger(__name__)

# SSM truncates the output it returns inline to 24,000 characters.
OUTPUT_LIMIT = 24_000


class ScriptRunner(Protocol):
    def run_script(self, script: str, run: CommandRun) -> None: ...


_head_nodes: dict[str, ScriptRunner] = {}
_runs: dict[tuple[str, str], CommandRun] = {}
_lock = threading.Lock()
_original_send_command = SimpleSystemManagerBackend.send_command
_original_get_invocation = Command.get_invocation


def register_head_node(instance_id: str, runner: ScriptRunner) -> None:
    with _lock:
        _head_nodes[instance_id] = runner


def unregister_head_node(instance_id: str) -> None:
    with _lock:
        _head_nodes.pop(instance_id, None)


def reset() -> None:
    with _lock:
        _head_nodes.clear()
        _runs.clear()


def _send_command(self: SimpleSystemManagerBackend, *args: Any, **kwargs: Any) -> Command:
    command = _original_send_command(self, *args, **kwargs)
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


def _run_script(runner: ScriptRunner, script: str, run: CommandRun) -> None:
    # A runner that raises must not leave the invocation InProgress for ever: the agent reports
    # a command it could not run as Failed.
    try:
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


def install() -> None:
    SimpleSystemManagerBackend.send_command = _send_command  # type: ignore[method-assign]
    Command.get_invocation = _get_invocation  # type: ignore[method-assign]
