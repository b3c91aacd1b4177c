"""Reading template.yaml the way CloudFormation would, for the local runtime."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from trainrun.local.template import Resolver, TemplateError, load_template

pytestmark = pytest.mark.usefixtures("no_network")

ROOT = Path(__file__).resolve().parents[2]
PSEUDO = {
    "AWS::Region": "us-west-2",
    "AWS::AccountId": "123456789012",
    "AWS::Partition": "aws",
    "AWS::StackName": "trainrun",
}
TEMPLATE: dict[str, Any] = {
    "Parameters": {
        "Stage": {"Type": "String", "Default": "dev"},
        "Schedule": {"Type": "String", "Default": ""},
        "Retention": {"Type": "Number", "Default": 30},
    },
    "Conditions": {
        "IsProd": {"Fn::Equals": [{"Ref": "Stage"}, "prod"]},
        "HasSchedule": {"Fn::Not": [{"Fn::Equals": [{"Ref": "Schedule"}, ""]}]},
    },
    "Resources": {"Bucket": {"Type": "AWS::S3::Bucket"}, "Table": {"Type": "AWS::DynamoDB::Table"}},
}


def physical_id(logical: str) -> str:
    return f"trainrun-{logical.lower()}-1a2b3c"


def attribute(logical: str, name: str) -> str:
    return f"{physical_id(logical)}/{name}"


def resolver(template: dict[str, Any] = TEMPLATE, **parameters: str) -> Resolver:
    return Resolver(template, parameters=parameters, pseudo=PSEUDO, ref=physical_id, get_att=attribute)


# --- Ref ------------------------------------------------------------------------------------------


def test_ref_no_value_removes_the_property_or_list_item() -> None:
    # Given a property and a list item that are AWS::NoValue when the condition is false
    value = {
        "Kept": "x",
        "Dropped": {"Fn::If": ["IsProd", "y", {"Ref": "AWS::NoValue"}]},
        "List": ["a", {"Fn::If": ["IsProd", "b", {"Ref": "AWS::NoValue"}]}],
    }
    # When resolved outside prod
    # Then both are gone, as CloudFormation removes them
    assert resolver().resolve(value) == {"Kept": "x", "List": ["a"]}


def test_split_makes_a_list_of_a_comma_separated_parameter() -> None:
    # Given a comma-separated parameter
    template = {**TEMPLATE, "Parameters": {**TEMPLATE["Parameters"], "Arns": {"Type": "String", "Default": ""}}}
    # When split
    # Then each item is an element
    assert resolver(template, Arns="a,b").resolve({"Fn::Split": [",", {"Ref": "Arns"}]}) == ["a", "b"]


def test_join_of_a_split_list_suffixes_every_item_of_a_comma_separated_parameter() -> None:
    # Given a comma-separated parameter of bucket ARNs
    template = {**TEMPLATE, "Parameters": {**TEMPLATE["Parameters"], "Arns": {"Type": "String", "Default": ""}}}
    # When each item gets /* (Join of its split, then Split again), as template.yaml grants objects
    each = {"Fn::Join": ["/*,", {"Fn::Split": [",", {"Ref": "Arns"}]}]}
    objects = {"Fn::Split": [",", {"Fn::Join": ["", [each, "/*"]]}]}
    # Then each bucket's objects are one element
    assert resolver(template, Arns="a,b").resolve(objects) == ["a/*", "b/*"]


def test_a_parameter_resolves_to_its_default() -> None:
    assert resolver().resolve({"Ref": "Stage"}) == "dev"


def test_a_parameter_resolves_to_its_override() -> None:
    assert resolver(Stage="prod").resolve({"Ref": "Stage"}) == "prod"


def test_a_number_parameter_resolves_to_a_string_as_in_cloudformation() -> None:
    assert resolver().resolve({"Ref": "Retention"}) == "30"


@pytest.mark.parametrize(("name", "value"), PSEUDO.items())
def test_a_pseudo_parameter_resolves_to_its_value(name: str, value: str) -> None:
    assert resolver().resolve({"Ref": name}) == value


def test_a_resource_resolves_to_its_physical_id() -> None:
    assert resolver().resolve({"Ref": "Bucket"}) == "trainrun-bucket-1a2b3c"


# --- Fn::Sub --------------------------------------------------------------------------------------


def test_sub_replaces_pseudo_parameters_parameters_and_resources() -> None:
    text = "arn:${AWS::Partition}:s3:::${Bucket}/${Stage}/${AWS::Region}"
    assert resolver().resolve({"Fn::Sub": text}) == "arn:aws:s3:::trainrun-bucket-1a2b3c/dev/us-west-2"


def test_sub_replaces_a_resource_attribute() -> None:
    assert resolver().resolve({"Fn::Sub": "${Bucket.Arn}/runs/*"}) == "trainrun-bucket-1a2b3c/Arn/runs/*"


def test_sub_with_a_variables_map_uses_the_resolved_variables_first() -> None:
    value = {"Fn::Sub": ["${Name}-${Stage}-${Table}", {"Name": {"Ref": "Bucket"}, "Stage": "overridden"}]}
    assert resolver().resolve(value) == "trainrun-bucket-1a2b3c-overridden-trainrun-table-1a2b3c"


def test_sub_renders_an_escaped_variable_literally() -> None:
    assert resolver().resolve({"Fn::Sub": "${!Stage}-${Stage}"}) == "${Stage}-dev"


# --- Fn::GetAtt -----------------------------------------------------------------------------------


def test_get_att_in_list_form() -> None:
    assert resolver().resolve({"Fn::GetAtt": ["Table", "Arn"]}) == "trainrun-table-1a2b3c/Arn"


def test_get_att_in_dotted_form_splits_at_the_first_dot() -> None:
    assert resolver().resolve({"Fn::GetAtt": "Table.StreamSpecification.StreamArn"}) == (
        "trainrun-table-1a2b3c/StreamSpecification.StreamArn"
    )


# --- conditions -----------------------------------------------------------------------------------


def test_conditions_are_evaluated_with_the_default_parameters() -> None:
    assert resolver().conditions == {"IsProd": False, "HasSchedule": False}


def test_conditions_are_evaluated_with_the_overrides() -> None:
    assert resolver(Stage="prod", Schedule="rate(1 day)").conditions == {"IsProd": True, "HasSchedule": True}


@pytest.mark.parametrize(("stage", "expected"), [("prod", "big"), ("dev", "small")])
def test_if_picks_the_branch_of_its_condition(stage: str, expected: str) -> None:
    assert resolver(Stage=stage).resolve({"Fn::If": ["IsProd", "big", "small"]}) == expected


def test_if_resolves_the_branch_it_picks() -> None:
    assert resolver().resolve({"Fn::If": ["IsProd", "x", {"Ref": "Stage"}]}) == "dev"


def test_nested_values_are_resolved_everywhere() -> None:
    value = {"Env": {"Variables": {"TABLE": {"Ref": "Table"}}}, "List": [{"Ref": "Stage"}, 1, None]}
    assert resolver().resolve(value) == {
        "Env": {"Variables": {"TABLE": "trainrun-table-1a2b3c"}},
        "List": ["dev", 1, None],
    }


@pytest.mark.parametrize(
    "value",
    [
        {"Fn::Select": [0, ["a"]]},
        {"Fn::ImportValue": "shared"},
        {"Properties": {"Name": {"Fn::Base64": "x"}}},
    ],
    ids=["select", "import-value", "nested"],
)
def test_an_unsupported_intrinsic_is_an_error(value: dict[str, Any]) -> None:
    with pytest.raises(TemplateError, match="Fn::"):
        resolver().resolve(value)


def test_an_unsupported_intrinsic_in_a_condition_is_an_error() -> None:
    template = {**TEMPLATE, "Conditions": {"Either": {"Fn::Or": [{"Fn::Equals": ["a", "a"]}]}}}
    with pytest.raises(TemplateError, match="Fn::Or"):
        resolver(template)


# --- template.yaml --------------------------------------------------------------------------------


def plain_types(value: Any) -> set[type]:
    if isinstance(value, dict):
        return {dict}.union(*(plain_types(k) | plain_types(v) for k, v in value.items()))
    if isinstance(value, list):
        return {list}.union(*(plain_types(v) for v in value))
    return {type(value)}


def test_the_template_loads_as_plain_python_values() -> None:
    # When template.yaml is loaded (cfn-lint's loader gives its own str and dict subclasses)
    template = load_template(ROOT / "template.yaml")
    # Then only plain Python types are left, with the short-form intrinsics in their long form
    assert plain_types(template) <= {dict, list, str, int, float, bool, type(None)}
    assert template["Outputs"]["RunsTableName"]["Value"] == {"Ref": "RunsTable"}


def test_the_template_resolves_with_the_intrinsics_the_resolver_knows(template: dict[str, Any]) -> None:
    # Given template.yaml, with and without its optional schedule, alarm topic, allow-lists and ParallelCluster API role
    optional = {
        "ScheduleExpression": "cron(0 2 * * ? *)",
        "AlarmTopicArn": "arn:aws:sns:us-west-2:123456789012:oncall",
        "RunBucketArns": "arn:aws:s3:::team-data,arn:aws:s3:::team-code",
        "RunTopicArns": "arn:aws:sns:us-west-2:123456789012:runs",
        "PclusterApiRoleArn": "arn:aws:iam::123456789012:role/ParallelClusterApiUserRole-abc",
    }
    for parameters in ({}, optional):
        # When every resource and output is resolved
        resolved = resolver(template, **parameters)
        # Then nothing is left that the local runtime cannot deploy
        resolved.resolve(template["Resources"])
        resolved.resolve(template["Outputs"])
        assert set(resolved.conditions.values()) == {bool(parameters)}


def serverless_functions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: resource["Properties"]
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }


def test_every_function_has_a_handler_in_its_code_uri(template: dict[str, Any]) -> None:
    # Given the functions of template.yaml (Globals give each the handler app.lambda_handler)
    functions = serverless_functions(template)
    assert functions
    assert template["Globals"]["Function"]["Handler"] == "app.lambda_handler"
    for name, properties in functions.items():
        # Then each CodeUri is a directory whose app.py defines lambda_handler
        app = ROOT / properties["CodeUri"] / "app.py"
        assert app.is_file(), f"{name}: {app} is missing"
        spec = importlib.util.spec_from_file_location(f"handler_of_{name}", app)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert callable(getattr(module, "lambda_handler", None)), f"{name}: {app} defines no lambda_handler"
