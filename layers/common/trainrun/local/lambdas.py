"""Run the stack's Lambda functions in this process, inside moto.

moto runs Lambda code in Docker, which this runtime does not need or have. Written against
moto 5.2.5 (pinned): `LambdaFunction._invoke_lambda(event) -> (result, errored, logs)` is
replaced for the functions registered here (the patch is idempotent). EventBridge delivery to
functions is in trainrun.local.events.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import sys
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from moto.awslambda.models import LambdaFunction


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

    def load(self) -> Any:
        module_name, _, function_name = self.handler.rpartition(".")
        if self._module is None:
            path = self.code_dir / f"{module_name}.py"
            spec = importlib.util.spec_from_file_location(f"trainrun_function_{self.code_dir.name}", path)
            if spec is None or spec.loader is None:
                raise FileNotFoundError(path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            self._module = module
        return getattr(self._module, function_name)


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


class FunctionRegistry:
    """Functions by name; invocations run one at a time because each sets os.environ."""

    def __init__(self) -> None:
        self._functions: dict[str, LocalFunction] = {}
        self._lock = threading.RLock()
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
        with self._lock:
            output = _stdout
            if sys.stdout is not output:
                # One instance for the life of the process: loggers stay bound to it.
                output.passthrough = sys.stdout
                sys.stdout = output
            output.capture()
            saved = os.environ.copy()
            os.environ.update(self.base_environment)
            os.environ.update(function.environment)
            function.invocations += 1
            try:
                handler = function.load()
                context = _Context(function.name, function.arn, function.memory_mb)
                result = handler(event, context)
                return json.dumps(result), False, ""
            except Exception as exc:
                payload = {
                    "errorMessage": str(exc),
                    "errorType": type(exc).__name__,
                    "requestId": context.aws_request_id if "context" in locals() else "",
                    "stackTrace": traceback.format_exception(exc)[-6:],
                }
                return json.dumps(payload), True, "".join(traceback.format_exception(exc))
            finally:
                os.environ.clear()
                os.environ.update(saved)
                printed = output.release()
                if printed:
                    self.on_output(function, printed)


registry = FunctionRegistry()
_stdout = _InvocationOutput(sys.stdout)

_original_invoke_lambda = LambdaFunction._invoke_lambda


def _invoke_lambda(self: LambdaFunction, event: str | None = None) -> tuple[str, bool, str]:
    function = registry.get(self.function_name)
    if function is None:
        return _original_invoke_lambda(self, event)
    payload = json.loads(event) if isinstance(event, str | bytes) else event
    return registry.invoke(function, payload)


def install() -> None:
    LambdaFunction._invoke_lambda = _invoke_lambda  # type: ignore[method-assign]
