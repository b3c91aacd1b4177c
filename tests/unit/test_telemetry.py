"""The handler toolkit: every handler's logs carry its invocation, its metrics are published when
it ends (and only if it added some, without a warning), and it is traced only in Lambda."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from aws_lambda_powertools import Metrics

from trainrun.metrics import Dimension, Metric
from trainrun.telemetry import Telemetry, tracer

# The parts of the Lambda context Powertools reads.
CONTEXT: Any = SimpleNamespace(
    function_name="trainrun-test-Progress",
    memory_limit_in_mb=512,
    invoked_function_arn="arn:aws:lambda:us-west-2:123456789012:function:trainrun-test-Progress",
    aws_request_id="request-1",
)


@pytest.fixture
def telemetry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Telemetry]:
    """A function's toolkit, made as its module is imported in Lambda: from the template's variables."""
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "trainrun")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Trainrun")
    # Powertools' metric set is shared by every Metrics of the process: empty before and after.
    Metrics().clear_metrics()
    yield Telemetry()
    Metrics().clear_metrics()


def printed(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


def emf_blobs(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if "_aws" in line]


def test_an_invocation_that_adds_no_metric_publishes_nothing_and_warns_nothing(
    telemetry: Telemetry, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a handler that adds no metric (most invocations of most steps)
    @telemetry.handler
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"ok": True}

    # When it runs, with every warning shown (no filter of pytest's or ours hides one)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert handler({}, CONTEXT) == {"ok": True}

    # Then no EMF blob is printed and Powertools' "No application metrics to publish" is not raised
    assert emf_blobs(printed(capsys)) == []
    assert [str(w.message) for w in caught] == []


def test_the_metrics_an_invocation_adds_are_published_once_even_when_it_raises(
    telemetry: Telemetry, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a handler that counts a run, then fails
    @telemetry.handler
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        telemetry.metrics.add_metric(name=Metric.RUNS_FAILED, unit="Count", value=1)
        raise RuntimeError("the step failed")

    # When it runs
    with pytest.raises(RuntimeError, match="the step failed"):
        handler({}, CONTEXT)

    # Then the count is published as one EMF blob in the template's namespace, and not again
    [blob] = emf_blobs(printed(capsys))
    assert blob["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Trainrun"
    assert blob[Metric.RUNS_FAILED] == [1.0]
    assert telemetry.metrics.metric_set == {}


def test_a_dimension_added_without_a_metric_does_not_reach_the_next_invocation(
    telemetry: Telemetry, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an invocation that adds a run's dimension but no metric
    @telemetry.handler
    def dimension_only(event: dict[str, Any], context: Any) -> dict[str, Any]:
        telemetry.metrics.add_dimension(name=Dimension.RUN_ID, value="run-1")
        return {}

    @telemetry.handler
    def counts_a_run(event: dict[str, Any], context: Any) -> dict[str, Any]:
        telemetry.metrics.add_metric(name=Metric.RUNS_STARTED, unit="Count", value=1)
        return {}

    # When the next invocation adds a metric
    dimension_only({}, CONTEXT)
    counts_a_run({}, CONTEXT)

    # Then its metric is not dimensioned by the earlier invocation's run
    [blob] = emf_blobs(printed(capsys))
    assert Dimension.RUN_ID not in blob
    assert Dimension.RUN_ID not in blob["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]


def test_a_handler_log_line_carries_the_invocation_and_the_keys_it_appended(
    telemetry: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    @telemetry.handler
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        telemetry.logger.append_keys(run_id=event["run_id"])
        telemetry.logger.info("progress")
        return {}

    handler({"run_id": "run-1"}, CONTEXT)

    # The line as Powertools writes it to stdout (bound to whichever stdout the logger first met).
    [record] = [record for record in caplog.records if record.getMessage() == "progress"]
    line = json.loads(telemetry.logger.registered_formatter.format(record))
    assert (line["function_name"], line["function_request_id"]) == (CONTEXT.function_name, CONTEXT.aws_request_id)
    assert (line["service"], line["run_id"]) == ("trainrun", "run-1")


def test_the_tracer_is_off_outside_lambda() -> None:
    # The tests, like the CLI, run without LAMBDA_TASK_ROOT: Powertools records nothing, and the
    # X-Ray SDK it configured is off (it would otherwise send segments to a daemon over UDP).
    from aws_xray_sdk import global_sdk_config

    assert tracer.disabled
    assert not global_sdk_config.sdk_enabled()
