"""Environment variables, validated once at the edge: a missing or malformed one is named."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from trainrun.settings import SETTINGS, StartRunSettings, StepSettings

pytestmark = pytest.mark.usefixtures("no_network")

STATE_MACHINE_ARN = "arn:aws:states:us-west-2:123456789012:stateMachine:trainrun-run"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RUNS_TABLE", "AWS_REGION", "STATE_MACHINE_ARN", "CONFIG_BUCKET"):
        monkeypatch.delenv(name, raising=False)


def missing_fields(raised: pytest.ExceptionInfo[ValidationError]) -> set[str]:
    return {str(error["loc"][0]) for error in raised.value.errors() if error["type"] == "missing"}


def test_step_settings_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the variables template.yaml and the Lambda runtime set
    monkeypatch.setenv("RUNS_TABLE", "trainrun-RunsTable-ABC")
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    # When a step reads its settings
    settings = StepSettings.from_environ()
    # Then they hold those values
    assert (settings.runs_table, settings.region) == ("trainrun-RunsTable-ABC", "us-west-2")


def test_a_missing_runs_table_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    with pytest.raises(ValidationError) as raised:
        StepSettings.from_environ()
    assert missing_fields(raised) == {"RUNS_TABLE"}
    assert "RUNS_TABLE" in str(raised.value)


def test_a_missing_region_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNS_TABLE", "runs")
    with pytest.raises(ValidationError) as raised:
        StepSettings.from_environ()
    assert missing_fields(raised) == {"AWS_REGION"}


def test_an_empty_runs_table_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNS_TABLE", "")
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    with pytest.raises(ValidationError, match="RUNS_TABLE"):
        StepSettings.from_environ()


def test_start_run_settings_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATE_MACHINE_ARN", STATE_MACHINE_ARN)
    monkeypatch.setenv("CONFIG_BUCKET", "trainrun-config")
    settings = StartRunSettings.from_environ()
    assert (settings.state_machine_arn, settings.config_bucket) == (STATE_MACHINE_ARN, "trainrun-config")


def test_start_run_settings_name_every_missing_variable() -> None:
    with pytest.raises(ValidationError) as raised:
        StartRunSettings.from_environ()
    assert missing_fields(raised) == {"STATE_MACHINE_ARN", "CONFIG_BUCKET"}


@pytest.mark.parametrize(
    "arn",
    ["trainrun-run", "arn:aws:lambda:us-west-2:123456789012:function:x", ""],
    ids=["a-name", "another-service", "empty"],
)
def test_a_state_machine_arn_that_is_not_one_is_refused(monkeypatch: pytest.MonkeyPatch, arn: str) -> None:
    monkeypatch.setenv("STATE_MACHINE_ARN", arn)
    monkeypatch.setenv("CONFIG_BUCKET", "trainrun-config")
    with pytest.raises(ValidationError, match="STATE_MACHINE_ARN"):
        StartRunSettings.from_environ()


def test_a_state_machine_arn_in_another_partition_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATE_MACHINE_ARN", "arn:aws-us-gov:states:us-gov-west-1:123456789012:stateMachine:run")
    monkeypatch.setenv("CONFIG_BUCKET", "trainrun-config")
    assert StartRunSettings.from_environ().state_machine_arn.startswith("arn:aws-us-gov:states:")


@pytest.mark.parametrize(("heartbeat", "every"), [(600, 60), (3600, 60), (120, 30), (60, 15)])
def test_progress_heartbeats_come_at_most_once_a_minute_and_four_times_a_heartbeat(
    monkeypatch: pytest.MonkeyPatch, heartbeat: int, every: int
) -> None:
    monkeypatch.setenv("RUNS_TABLE", "t")
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    monkeypatch.setenv("JOB_HEARTBEAT_SECONDS", str(heartbeat))
    assert StepSettings.from_environ().heartbeat_every_seconds == every


def test_a_heartbeat_below_a_minute_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNS_TABLE", "t")
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    monkeypatch.setenv("JOB_HEARTBEAT_SECONDS", "59")
    with pytest.raises(ValidationError, match="JOB_HEARTBEAT_SECONDS"):
        StepSettings.from_environ()


def test_a_poll_interval_below_five_seconds_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNS_TABLE", "t")
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    monkeypatch.setenv("POLL_SECONDS", "0")
    with pytest.raises(ValidationError, match="POLL_SECONDS"):
        StepSettings.from_environ()


def test_in_compressed_local_time_progress_heartbeats_come_as_often_in_nominal_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the local runtime's Step Functions running 30 nominal seconds a real second
    monkeypatch.setenv("RUNS_TABLE", "t")
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    monkeypatch.setenv("JOB_HEARTBEAT_SECONDS", "600")
    monkeypatch.setenv("TRAINRUN_LOCAL_TIME_SCALE", "30")
    # Then a heartbeat goes every 60 nominal seconds: 2 real ones
    assert StepSettings.from_environ().heartbeat_every_seconds == 2


def _numeric_parameters_read_by_settings(template: dict[str, Any]) -> list[tuple[str, str, type[BaseModel], str]]:
    """(parameter, environment variable, settings class, field) for every Number parameter of the
    template that a function's environment passes on: where each bound lives twice."""
    environments = [template["Globals"]["Function"]["Environment"]["Variables"]] + [
        resource["Properties"].get("Environment", {}).get("Variables", {})
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::Serverless::Function"
    ]
    passed = {
        value["Ref"]: name
        for env in environments
        for name, value in env.items()
        if isinstance(value, dict) and "Ref" in value
    }
    found = []
    for parameter, spec in template["Parameters"].items():
        if spec["Type"] != "Number" or parameter not in passed:
            continue
        variable = passed[parameter]
        for settings in SETTINGS:
            field = next((n for n, f in settings.model_fields.items() if f.alias == variable), None)
            if field is not None:
                found.append((parameter, variable, settings, field))
                break
        else:
            raise AssertionError(f"{parameter} reaches {variable}, which no settings class reads")
    return found


def test_the_settings_accept_exactly_the_values_the_template_accepts(template: dict[str, Any]) -> None:
    # Given every numeric stack parameter and the setting its functions read it into
    pairs = _numeric_parameters_read_by_settings(template)
    assert {p for p, *_ in pairs} >= {"PollIntervalSeconds", "JobHeartbeatSeconds", "JanitorGraceMinutes"}
    for parameter, variable, settings, field in pairs:
        spec = template["Parameters"][parameter]
        info = settings.model_fields[field]
        bounds = {type(m).__name__: getattr(m, type(m).__name__.lower()) for m in info.metadata}
        # Then their bounds and default are the same
        assert (bounds.get("Ge"), bounds.get("Le")) == (spec.get("MinValue"), spec.get("MaxValue")), variable
        assert info.default == spec["Default"], variable
