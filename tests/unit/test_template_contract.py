"""template.yaml's contract with AWS quotas and retention: checked on the template itself."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import boto3
import pytest

from trainrun import settings
from trainrun.local.runtime import LOCAL_PARAMETERS
from trainrun.local.template import Resolver, TemplateError
from trainrun.local.template_deployer import StackDeployer

ROOT = Path(__file__).resolve().parents[2]


def functions(template: dict[str, Any]) -> list[str]:
    return [name for name, r in template["Resources"].items() if r["Type"] == "AWS::Serverless::Function"]


def log_groups(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: r["Properties"] for name, r in template["Resources"].items() if r["Type"] == "AWS::Logs::LogGroup"}


def test_every_function_logs_to_a_log_group_of_the_stack_that_expires(template: dict[str, Any]) -> None:
    # Given the template's functions and log groups
    groups = log_groups(template)
    names = {str(p["LogGroupName"]): p for p in groups.values()}
    for function in functions(template):
        # Then each function's own log group (/aws/lambda/<its name>, where Lambda writes) is a
        # resource of the stack, with the stack's retention
        group = names.get(str({"Fn::Sub": f"/aws/lambda/${{{function}}}"}))
        assert group is not None, f"{function} has no AWS::Logs::LogGroup /aws/lambda/${{{function}}}"
        assert group["RetentionInDays"] == {"Ref": "LogRetentionDays"}, function


def test_every_log_group_of_the_stack_has_the_stack_retention(template: dict[str, Any]) -> None:
    for name, properties in log_groups(template).items():
        assert properties.get("RetentionInDays") == {"Ref": "LogRetentionDays"}, name


def test_log_retention_days_allows_only_values_cloudwatch_accepts(template: dict[str, Any]) -> None:
    # The values PutRetentionPolicy accepts (CloudWatch Logs API reference, retentionInDays)
    accepted = {1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653}
    parameter = template["Parameters"]["LogRetentionDays"]
    assert set(parameter["AllowedValues"]) <= accepted
    assert parameter["Default"] in parameter["AllowedValues"]


@pytest.mark.usefixtures("aws")
def test_the_local_stack_creates_every_function_log_group_with_its_retention(template: dict[str, Any]) -> None:
    # Given template.yaml deployed onto moto with a retention of 7 days
    deployer = StackDeployer(
        lambda service: boto3.client(service, region_name="us-west-2"),
        ROOT,
        "retention",
        "us-west-2",
        {"LogRetentionDays": "7"},
    )
    stack = deployer.deploy()
    # Then every function has its log group, expiring after 7 days
    logs = boto3.client("logs", region_name="us-west-2")
    retention = {
        group["logGroupName"]: group.get("retentionInDays")
        for page in logs.get_paginator("describe_log_groups").paginate()
        for group in page["logGroups"]
    }
    for function in functions(template):
        assert retention.get(f"/aws/lambda/{stack.function_name(function)}") == 7, function


@pytest.mark.parametrize(
    ("parameter", "value"),
    [
        ("JobHeartbeatSeconds", "2"),
        ("PollIntervalSeconds", "0"),
        ("JobHeartbeatSeconds", "3601"),
        ("LogRetentionDays", "2"),
    ],
)
def test_the_local_deployer_refuses_a_parameter_cloudformation_refuses(
    template: dict[str, Any], parameter: str, value: str
) -> None:
    # Given a parameter value outside its MinValue/MaxValue/AllowedValues
    # When the local stack is resolved with it
    with pytest.raises(TemplateError, match=parameter):
        Resolver(template, parameters={parameter: value}, pseudo={}, ref=str, get_att=lambda *_: "")


def test_the_local_stack_parameters_are_deployable(template: dict[str, Any]) -> None:
    # The local runtime compresses time instead of going below the template's minimums
    Resolver(template, parameters=LOCAL_PARAMETERS, pseudo={}, ref=str, get_att=lambda *_: "")


# What a function does around its wait for a head-node command: SendCommand before it, the
# last GetCommandInvocation and the run record's write after it.
COMMAND_WAIT_MARGIN_SECONDS = 10


def test_every_function_that_waits_for_a_head_node_command_outlives_the_wait(template: dict[str, Any]) -> None:
    # Given the functions whose handler runs a head-node step (each waits up to SHORT_COMMAND_SECONDS)
    from trainrun.steps.head_node import SHORT_COMMAND_SECONDS

    apps = (ROOT / "functions").glob("*/app.py")
    waiting = {app.parent.name for app in apps if "trainrun.steps.head_node" in app.read_text()}
    assert {"prepare_head_node", "submit_job", "check_job"} <= waiting
    default = template["Globals"]["Function"]["Timeout"]
    timeouts = {
        resource["Properties"]["CodeUri"].strip("/").removeprefix("functions/"): resource["Properties"].get(
            "Timeout", default
        )
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::Serverless::Function"
    }
    # Then Lambda does not stop any of them before its wait has ended and been recorded
    short = {
        name: timeouts[name] for name in waiting if timeouts[name] < SHORT_COMMAND_SECONDS + COMMAND_WAIT_MARGIN_SECONDS
    }
    assert short == {}


def test_check_job_outlives_a_status_check_then_a_budget_stop(template: dict[str, Any]) -> None:
    # Given Check's two waits when the budget is spent: the job's state, then its stop (KillWait)
    from trainrun.steps.head_node import SHORT_COMMAND_SECONDS, STOP_COMMAND_SECONDS

    (check,) = [
        resource["Properties"]
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::Serverless::Function"
        and resource["Properties"]["CodeUri"].strip("/") == "functions/check_job"
    ]
    # Then Lambda does not stop it before both have ended and been recorded
    assert check["Timeout"] >= SHORT_COMMAND_SECONDS + STOP_COMMAND_SECONDS + 2 * COMMAND_WAIT_MARGIN_SECONDS


# --- what the stack keeps when it is deleted or replaced ------------------------------------
@pytest.mark.parametrize("logical_id", ["RunsTable", "ConfigBucket"])
def test_the_run_records_and_run_files_outlive_the_stack(template: dict[str, Any], logical_id: str) -> None:
    # Given the runs table (every run's record) and the config bucket (every run file's versions)
    resource = template["Resources"][logical_id]

    # Then deleting the stack, or an update that replaces them, keeps them (docs/deploying.md
    # says how to remove them on purpose)
    assert resource.get("DeletionPolicy") == "Retain"
    assert resource.get("UpdateReplacePolicy") == "Retain"


def _settings_read(function: dict[str, Any]) -> tuple[type[settings._Environment], set[str]] | None:
    """The settings class the function's handler reads its environment with, and the fields it uses."""
    source = (ROOT / function["Properties"]["CodeUri"] / "app.py").read_text()
    match = re.search(r"\b(\w+Settings)\.from_environ\(", source)
    if match is None:
        return None
    return getattr(settings, match[1]), set(re.findall(r"\bsettings\.(\w+)", source))


def _environment(template: dict[str, Any], function: dict[str, Any]) -> set[str]:
    variables = dict(template["Globals"]["Function"]["Environment"]["Variables"])
    variables.update(function["Properties"].get("Environment", {}).get("Variables", {}))
    return set(variables)


# Set by Lambda itself, or only by the local runtime (its compressed clock and reservation leads).
_NOT_THE_TEMPLATES = {"AWS_REGION"} | {
    field.alias
    for field in settings.StepSettings.model_fields.values()
    if field.alias is not None and field.alias.startswith("TRAINRUN_")
}


def test_every_function_is_given_each_setting_the_stack_sets_for_any_function(template: dict[str, Any]) -> None:
    # Given every function's handler and the settings class it reads
    resources = {name: r for name, r in template["Resources"].items() if r["Type"] == "AWS::Serverless::Function"}
    readers = {name: read for name, r in resources.items() if (read := _settings_read(r)) is not None}
    assert len(readers) >= 10, "no handler found reading its settings: the pattern above is stale"
    configured = set().union(*(_environment(template, r) for r in resources.values()))
    for name, (cls, used) in readers.items():
        given = _environment(template, resources[name])
        for field_name, field in cls.model_fields.items():
            alias = field.alias
            if alias is None or alias in _NOT_THE_TEMPLATES:
                continue
            # Then a required setting is set, and so is one with a default that the handler uses and
            # the stack sets for another function (a stack parameter it would otherwise silently ignore)
            if field.is_required() or (field_name in used and alias in configured):
                assert alias in given, f"{name} reads {alias} ({cls.__name__}) but the template does not set it"
