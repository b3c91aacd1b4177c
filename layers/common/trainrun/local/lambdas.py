"""Run the stack's Lambda functions in this process, inside moto.

moto runs Lambda code in Docker, which this runtime does not need or have. Written against
moto 5.2.5 (pinned): `LambdaFunction._invoke_lambda(event) -> (result, errored, logs)` is
replaced for the functions registered here (the patch is idempotent). EventBridge delivery to
functions is in trainrun.local.events; it invokes them asynchronously (`invoke_asynchronously`:
Lambda's retries, then the function's on-failure destination).

Invocations run concurrently, each in the thread that asked for it, as Lambda runs each in its
own execution environment. Each sees its own function's environment: while functions run here,
`os.environ` is an `OverlaidEnvironment`, the process environment overlaid in each invoking
thread with the function's variables (its credentials included). boto3 and botocore look
`os.environ` up when a session resolves its credentials, region and endpoint, and Powertools
when a handler module creates its logger and metrics, so what a handler creates sees its own
function's values. Threads a handler starts, subprocesses and `os.environb` see the process
environment only (no handler of ours does either).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import os
import sys
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from moto.awslambda.models import LambdaFunction

logger = logging.getLogger(__name__)


@dataclass
class LocalFunction:
    """A deployed function: where its code is and what its environment holds."""

    name: str
    arn: str
    code_dir: Path
    handler: str
    environment: dict[str, str]
    memory_mb: int = 512
    invocations: int = 0
    _module: ModuleType | None = field(default=None, repr=False)
    # Two first invocations at once import the module once.
    _loading: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # One invocation at a time: Lambda runs one per execution environment, and here every
    # invocation shares one module (its Logger's keys, its Metrics' dimensions), which concurrent
    # invocations would mix (Powertools warned "Dimension 'RunId' has already been added" under
    # the load test). Other functions still run side by side.
    serial: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def load(self) -> Any:
        module_name, _, function_name = self.handler.rpartition(".")
        with self._loading:
            return getattr(self._load_module(module_name), function_name)

    def _load_module(self, module_name: str) -> ModuleType:
        if self._module is None:
            path = self.code_dir / f"{module_name}.py"
            spec = importlib.util.spec_from_file_location(f"trainrun_function_{self.code_dir.name}", path)
            if spec is None or spec.loader is None:
                raise FileNotFoundError(path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            self._module = module
        return self._module


@dataclass
class _Context:
    """The parts of the Lambda context object that Powertools reads."""

    function_name: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = ""

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


class _InvocationOutput(io.TextIOBase):
    """sys.stdout that keeps what a function prints, as Lambda sends it to CloudWatch Logs.

    Powertools' logger binds to sys.stdout when a handler module is imported, so this must be
    sys.stdout before any handler is loaded; output from other threads passes through.
    """

    def __init__(self, passthrough: Any):
        self.passthrough = passthrough
        self._local = threading.local()

    def capture(self) -> None:
        self._local.buffer = io.StringIO()

    def release(self) -> str:
        buffer = getattr(self._local, "buffer", None)
        self._local.buffer = None
        return buffer.getvalue() if buffer is not None else ""

    def write(self, text: str) -> int:
        buffer = getattr(self._local, "buffer", None)
        return (buffer if buffer is not None else self.passthrough).write(text)

    def flush(self) -> None:
        self.passthrough.flush()

    def writable(self) -> bool:
        return True


_DELETED = None


class OverlaidEnvironment(MutableMapping[str, str]):
    """os.environ while functions run here: the process environment, overlaid per thread.

    Outside an invocation it reads and writes the process environment (`base`, the real
    os.environ). In an invocation (`overlaid(values)`), the thread sees `values` over it, and
    what the handler sets or deletes stays in that invocation's overlay.
    """

    def __init__(self, base: MutableMapping[str, str]):
        self.base = base
        self._local = threading.local()

    def _overlay(self) -> dict[str, str | None] | None:
        overlay: dict[str, str | None] | None = getattr(self._local, "overlay", None)
        return overlay

    @contextlib.contextmanager
    def overlaid(self, values: Mapping[str, str]) -> Iterator[None]:
        """Within the block, this thread sees `values` over the environment (nested: over the outer one)."""
        outer = self._overlay()
        self._local.overlay = {**(outer or {}), **values}
        try:
            yield
        finally:
            self._local.overlay = outer

    def __getitem__(self, key: str) -> str:
        overlay = self._overlay()
        if overlay is not None and key in overlay:
            value = overlay[key]
            if value is _DELETED:
                raise KeyError(key)
            return value
        return self.base[key]

    def __setitem__(self, key: str, value: str) -> None:
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"str expected, not {type(key).__name__}: {type(value).__name__}")
        overlay = self._overlay()
        if overlay is None:
            self.base[key] = value
        else:
            overlay[key] = value

    def __delitem__(self, key: str) -> None:
        overlay = self._overlay()
        if overlay is None:
            del self.base[key]
            return
        if key not in self:
            raise KeyError(key)
        overlay[key] = _DELETED

    def _keys(self) -> list[str]:
        overlay = self._overlay() or {}
        keys = [key for key in self.base if key not in overlay]
        return keys + [key for key, value in overlay.items() if value is not _DELETED]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def copy(self) -> dict[str, str]:
        return dict(self)

    def __repr__(self) -> str:
        return f"OverlaidEnvironment({dict(self)!r})"


def install_environment() -> OverlaidEnvironment:
    """Make os.environ an OverlaidEnvironment (once; it stays for the life of the process)."""
    if not isinstance(os.environ, OverlaidEnvironment):
        # Replaced on purpose, not cleared: every later lookup of os.environ goes through the overlay.
        os.environ = OverlaidEnvironment(os.environ)  # type: ignore[assignment]  # noqa: B003
    return os.environ  # type: ignore[return-value]


class FunctionRegistry:
    """Functions by name; invocations of different functions run concurrently, each in its own
    function's environment; a function's own invocations one at a time (LocalFunction.serial)."""

    def __init__(self) -> None:
        self._functions: dict[str, LocalFunction] = {}
        # Guards the counters and the swap of sys.stdout only: never held while a handler runs.
        self._lock = threading.Lock()
        self.base_environment: dict[str, str] = {}
        # Where a function's printed output goes (the runtime writes it to the function's log group).
        self.on_output: Callable[[LocalFunction, str], None] = lambda function, text: None

    def register(self, function: LocalFunction) -> None:
        self._functions[function.name] = function

    def clear(self) -> None:
        self._functions.clear()

    def get(self, name: str) -> LocalFunction | None:
        return self._functions.get(name)

    def __iter__(self) -> Iterator[LocalFunction]:
        return iter(self._functions.values())

    def invoke(self, function: LocalFunction, event: Any) -> tuple[str, bool, str]:
        environment = install_environment()
        output = _stdout
        with self._lock:
            if sys.stdout is not output:
                # One instance for the life of the process: loggers stay bound to it.
                output.passthrough = sys.stdout
                sys.stdout = output
            function.invocations += 1
        output.capture()
        context: _Context | None = None
        try:
            lambda_environment = {
                # Lambda sets the function's name (trainrun.adapters.clients keys clients by it).
                "AWS_LAMBDA_FUNCTION_NAME": function.name,
                # No X-Ray daemon listens here: the Tracer records nothing (the runtime sends each
                # invocation's trace itself, as Lambda does). Powertools would also turn it off for
                # want of LAMBDA_TASK_ROOT; said here so that it holds whatever the environment has.
                "POWERTOOLS_TRACE_DISABLED": "true",
            }
            with (
                function.serial,
                environment.overlaid({**self.base_environment, **lambda_environment, **function.environment}),
            ):
                handler = function.load()
                context = _Context(function.name, function.arn, function.memory_mb)
                result = handler(event, context)
            return json.dumps(result), False, ""
        except Exception as exc:
            payload = {
                "errorMessage": str(exc),
                "errorType": type(exc).__name__,
                "requestId": context.aws_request_id if context is not None else "",
                "stackTrace": traceback.format_exception(exc)[-6:],
            }
            return json.dumps(payload), True, "".join(traceback.format_exception(exc))
        finally:
            printed = output.release()
            if printed:
                try:
                    self.on_output(function, printed)
                except Exception as exc:
                    # Lambda's own logging never fails an invocation; say in one line that the output
                    # is lost (typically: the runtime stopped while the invocation ended).
                    logger.warning("the output of an invocation of %s was not logged: %s", function.name, exc)


registry = FunctionRegistry()
_stdout = _InvocationOutput(sys.stdout)
# Lambda's asynchronous retries when the function's configuration names none (Lambda developer
# guide, "Configuring error handling for asynchronous invocation": two, the most it allows).
_DEFAULT_ASYNC_RETRIES = 2


def invoke_asynchronously(function: LambdaFunction, event: Any) -> None:
    """Lambda's asynchronous invocation (Lambda developer guide, "Error handling and automatic
    retries"): a function error is retried MaximumRetryAttempts times (at once here, not a minute
    and two apart), then the invocation record goes to the OnFailure destination, sent as the
    function's execution role; without a destination the event is discarded."""
    config = function.event_invoke_config[0].config if function.event_invoke_config else {}
    attempts = 1 + int(config.get("MaximumRetryAttempts", _DEFAULT_ASYNC_RETRIES))
    body = json.dumps(event)
    for _ in range(attempts):
        response, errored, _logs = function._invoke_lambda(event=body)
        if not errored:
            return
    destination = config.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
    if not destination:
        logger.warning("%s: asynchronous invocation failed %d times, event discarded", function.function_name, attempts)
        return
    record = _invocation_record(function, event, json.loads(response), attempts)
    _send_as_function(function, destination, record)


def _invocation_record(function: LambdaFunction, event: Any, response: Any, attempts: int) -> dict[str, Any]:
    """What Lambda sends to an on-failure destination (Lambda developer guide, "Capturing records
    of Lambda asynchronous invocations")."""
    return {
        "version": "1.0",
        "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "requestContext": {
            "requestId": response.get("requestId", "") if isinstance(response, dict) else "",
            "functionArn": f"{function.function_arn}:$LATEST",
            "condition": "RetriesExhausted",
            "approximateInvokeCount": attempts,
        },
        "requestPayload": event,
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
        "responsePayload": response,
    }


def _send_as_function(function: LambdaFunction, destination: str, record: dict[str, Any]) -> None:
    """Lambda sends the record with the function's execution role: through the local server, so a
    role without sqs:SendMessage on the queue is refused (and the record lost, as in Lambda)."""
    import boto3
    from botocore.exceptions import ClientError

    local = registry.get(function.function_name)
    if local is None or not destination.startswith("arn:aws:sqs:"):
        logger.warning("%s: on-failure destination %s is not supported locally", function.function_name, destination)
        return
    region, account, queue_name = destination.split(":")[3:6]
    environment = {**registry.base_environment, **local.environment}
    sqs = boto3.client(
        "sqs",
        region_name=region,
        endpoint_url=environment["AWS_ENDPOINT_URL"],
        aws_access_key_id=environment["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=environment["AWS_SECRET_ACCESS_KEY"],
    )
    try:
        sqs.send_message(
            QueueUrl=f"{environment['AWS_ENDPOINT_URL']}/{account}/{queue_name}", MessageBody=json.dumps(record)
        )
    except ClientError as exc:
        logger.warning("%s: invocation record not sent to %s: %s", function.function_name, destination, exc)


_original_invoke_lambda = LambdaFunction._invoke_lambda


def _invoke_lambda(self: LambdaFunction, event: str | None = None) -> tuple[str, bool, str]:
    function = registry.get(self.function_name)
    if function is None:
        return _original_invoke_lambda(self, event)
    payload = json.loads(event) if isinstance(event, str | bytes) else event
    return registry.invoke(function, payload)


def install() -> None:
    install_environment()
    LambdaFunction._invoke_lambda = _invoke_lambda  # type: ignore[method-assign]
