"""A function's logs, metrics and traces: Powertools' Logger, Metrics and Tracer, in one place.

Each handler module makes one `Telemetry` when it is imported (`telemetry = Telemetry()`) and
wraps its handler with `telemetry.handler`. Made then, and not once for the package: Powertools
reads its POWERTOOLS_* variables and binds the logger to stdout when they are made, and the local
runtime and the tests load every function into one process, each with its own environment
(trainrun.local.lambdas), where whatever imported this module first (the CLI, a test) has none.

`tracer` is the process's one Tracer: Powertools keeps a Tracer's configuration per process, so
there is nothing to make per function. It patches botocore when it is made, so every AWS call
is a subsegment of the function's trace; the adapters mark with `tracer.capture_method` the calls
it does not see (the ParallelCluster API is HTTP outside botocore). It traces only in Lambda:
Powertools turns it off where LAMBDA_TASK_ROOT is unset (the tests, the CLI) or
POWERTOOLS_TRACE_DISABLED is true (the local runtime sets it). In Lambda, `Tracing: Active` has
Lambda start each trace and SAM give each role AWSXrayWriteOnlyAccess, which the X-Ray daemon
uses to send what the Tracer records.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.typing import LambdaContext

Handler = Callable[[dict[str, Any], LambdaContext], dict[str, Any]]

tracer = Tracer()


class Telemetry:
    """One function's Logger and Metrics, with the process's Tracer."""

    def __init__(self) -> None:
        self.logger = Logger()
        self.metrics = Metrics()
        self.tracer = tracer

    def handler(self, function: Handler) -> Handler:
        """`function` as a Lambda handler: its log lines carry the invocation's context, it is
        traced, and the metrics it added are published when it returns or raises."""
        # The response is not put in the trace: it is in the handler's own log line, and an X-Ray
        # segment document holds 64 kB at most. An error is (with its stack), as Powertools does.
        traced = self.tracer.capture_lambda_handler(function, capture_response=False)
        logged = self.logger.inject_lambda_context(traced)

        @functools.wraps(function)
        def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
            try:
                return logged(event, context)
            finally:
                self._publish_metrics()

        return lambda_handler

    def _publish_metrics(self) -> None:
        # What Powertools' log_metrics does, but silent when the invocation added no metric: most
        # invocations of most steps add none (a step counts runs at a few of its calls only), and
        # Powertools would warn "No application metrics to publish" at each one.
        if self.metrics.metric_set:
            self.metrics.flush_metrics()
        else:
            # A dimension or metadata added without a metric does not carry over to the next invocation.
            self.metrics.clear_metrics()
