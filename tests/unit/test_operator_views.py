"""template.yaml's operator views against the code: the dashboard, the alarms, the run events' IAM.

The metric names, dimensions and event names are taken from trainrun.metrics and
trainrun.steps.run_events, so a renamed metric shows up here rather than as an empty graph.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from trainrun.local.template import Resolver
from trainrun.metrics import Dimension, Metric
from trainrun.steps.run_events import COUNTED_STATES, DETAIL_TYPE, SOURCE

from .conftest import resource_properties

pytestmark = pytest.mark.usefixtures("no_network")

ROOT = Path(__file__).resolve().parents[2]
STACK = "trainrun"
PSEUDO = {
    "AWS::Region": "us-west-2",
    "AWS::AccountId": "123456789012",
    "AWS::Partition": "aws",
    "AWS::StackName": STACK,
}
# Every per-run graph: one line per run of this stack.
SEARCH = re.compile(r"^SEARCH\('\{(?P<schema>[^}]*)\} (?P<query>[^']*)', '(?P<statistic>\w+)', (?P<period>\d+)\)$")
PER_RUN_METRICS = {
    Metric.TRAINING_STEP,
    Metric.LOSS,
    Metric.THROUGHPUT,
    Metric.COMPILE_GRAPHS,
    Metric.COMPILE_SUCCEEDED,
    Metric.COMPILE_FAILED,
}


def name_of(logical_id: str) -> str:
    return f"{STACK}-{logical_id}"


def attribute_of(logical_id: str, attribute: str) -> str:
    return f"arn:{logical_id}:{attribute}"


def resolve(template: dict[str, Any], value: Any, **parameters: str) -> Any:
    resolver = Resolver(template, parameters=parameters, pseudo=PSEUDO, ref=name_of, get_att=attribute_of)
    return resolver.resolve(value)


def powertools(template: dict[str, Any], variable: str) -> str:
    value: str = template["Globals"]["Function"]["Environment"]["Variables"][variable]
    return value


@pytest.fixture(scope="module")
def dashboard(template: dict[str, Any]) -> dict[str, Any]:
    body = resolve(template, resource_properties(template, "RunsDashboard")["DashboardBody"])
    parsed: dict[str, Any] = json.loads(body)
    return parsed


def graphed(dashboard: dict[str, Any]) -> list[list[Any]]:
    """Every metric line of the dashboard: [namespace, name, dimension, value, ..., {options}]."""
    return [
        [part for part in line if not isinstance(part, dict)]
        for widget in dashboard["widgets"]
        for line in widget["properties"].get("metrics", [])
        if isinstance(line[0], str)
    ]


def searches(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        line[0]
        for widget in dashboard["widgets"]
        for line in widget["properties"].get("metrics", [])
        if isinstance(line[0], dict) and "expression" in line[0]
    ]


def dimensions_of(line: list[Any]) -> dict[str, str]:
    return dict(zip(line[2::2], line[3::2], strict=True))


def functions(template: dict[str, Any]) -> set[str]:
    return {name for name, r in template["Resources"].items() if r["Type"] == "AWS::Serverless::Function"}


# --- the dashboard ----------------------------------------------------------------------------------


def test_the_dashboard_body_is_json_once_substituted(dashboard: dict[str, Any]) -> None:
    assert dashboard["widgets"]
    text = json.dumps(dashboard)
    # Only CloudWatch's own dynamic labels are left in ${...}: everything else was substituted.
    assert set(re.findall(r"\$\{[^}]*\}", text)) <= {"${PROP('Dim.RunId')}", "${PROP('MetricName')}"}
    assert all(w["properties"].get("region", "us-west-2") == "us-west-2" for w in dashboard["widgets"])


def test_the_dashboard_names_only_metrics_the_code_emits_with_their_dimensions(
    template: dict[str, Any], dashboard: dict[str, Any]
) -> None:
    namespace = powertools(template, "POWERTOOLS_METRICS_NAMESPACE")
    ours = [line for line in graphed(dashboard) if line[0] == namespace]
    assert ours
    for line in ours:
        assert line[1] in set(Metric), line
        assert dimensions_of(line) == {
            Dimension.STACK: STACK,
            Dimension.SERVICE: powertools(template, "POWERTOOLS_SERVICE_NAME"),
        }


def test_the_dashboard_graphs_the_run_counts_the_janitors_leftovers_and_failed_notifications(
    template: dict[str, Any], dashboard: dict[str, Any]
) -> None:
    namespace = powertools(template, "POWERTOOLS_METRICS_NAMESPACE")
    names = {line[1] for line in graphed(dashboard) if line[0] == namespace}
    assert names == set(COUNTED_STATES.values()) | {Metric.LEFTOVER_RUNS, Metric.NOTIFICATIONS_FAILED}


def test_the_per_run_graphs_search_the_progress_metrics_one_line_per_run(
    template: dict[str, Any], dashboard: dict[str, Any]
) -> None:
    searched: set[str] = set()
    for search in searches(dashboard):
        match = SEARCH.match(search["expression"])
        assert match, search["expression"]
        namespace, *schema = match["schema"].split(",")
        # The progress function's metrics carry RunId and Job (trainrun.steps.progress), Stack (the
        # handler) and service (Powertools): a schema is matched only with every dimension name.
        assert namespace == powertools(template, "POWERTOOLS_METRICS_NAMESPACE")
        assert set(schema) == set(Dimension)
        assert f'Stack="{STACK}"' in match["query"]
        searched |= set(re.findall(r'MetricName="(\w+)"', match["query"]))
        assert "${PROP('Dim.RunId')}" in search["label"]
    assert searched == PER_RUN_METRICS


def test_the_dashboard_shows_the_errors_of_every_function_of_the_stack(
    template: dict[str, Any], dashboard: dict[str, Any]
) -> None:
    errors = [line for line in graphed(dashboard) if line[:2] == ["AWS/Lambda", "Errors"]]
    assert {dimensions_of(line)["FunctionName"] for line in errors} == {name_of(f) for f in functions(template)}


def test_the_dashboard_shows_failed_timed_out_and_aborted_executions_of_both_state_machines(
    dashboard: dict[str, Any],
) -> None:
    executions = [line for line in graphed(dashboard) if line[0] == "AWS/States"]
    assert {(line[1], dimensions_of(line)["StateMachineArn"]) for line in executions} == {
        (metric, name_of(machine))
        for metric in ("ExecutionsFailed", "ExecutionsTimedOut", "ExecutionsAborted")
        for machine in ("RunStateMachine", "TeardownStateMachine")
    }


def test_the_dashboard_shows_every_alarm(dashboard: dict[str, Any]) -> None:
    [alarms] = [w for w in dashboard["widgets"] if w["type"] == "alarm"]
    assert alarms["properties"]["alarms"] == [
        attribute_of("RunFailedAlarm", "Arn"),
        attribute_of("LeftoverRunsAlarm", "Arn"),
        attribute_of("UndeliveredRunsAlarm", "Arn"),
    ]


# --- the alarms ------------------------------------------------------------------------------------


def test_the_run_failed_alarm_watches_the_run_state_machines_failed_executions(template: dict[str, Any]) -> None:
    alarm = resolve(template, resource_properties(template, "RunFailedAlarm"))
    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/States", "ExecutionsFailed")
    assert alarm["Dimensions"] == [{"Name": "StateMachineArn", "Value": name_of("RunStateMachine")}]
    assert (alarm["Statistic"], alarm["Period"], alarm["EvaluationPeriods"]) == ("Sum", 300, 1)
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanOrEqualToThreshold", 1)
    assert alarm["TreatMissingData"] == "notBreaching"


def test_the_leftovers_alarm_watches_the_janitors_count_for_this_stack(template: dict[str, Any]) -> None:
    alarm = resolve(template, resource_properties(template, "LeftoverRunsAlarm"))
    assert alarm["Namespace"] == powertools(template, "POWERTOOLS_METRICS_NAMESPACE")
    assert alarm["MetricName"] == Metric.LEFTOVER_RUNS
    assert {d["Name"]: d["Value"] for d in alarm["Dimensions"]} == {
        Dimension.STACK: STACK,
        Dimension.SERVICE: powertools(template, "POWERTOOLS_SERVICE_NAME"),
    }
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanOrEqualToThreshold", 1)


@pytest.mark.parametrize("alarm", ["RunFailedAlarm", "LeftoverRunsAlarm", "UndeliveredRunsAlarm"])
def test_an_alarm_notifies_the_alarm_topic_only_when_one_is_given(template: dict[str, Any], alarm: str) -> None:
    topic = "arn:aws:sns:us-west-2:123456789012:oncall"
    actions = resource_properties(template, alarm)["AlarmActions"]
    assert resolve(template, actions) == []
    assert resolve(template, actions, AlarmTopicArn=topic) == [topic]


# --- who may publish run events ---------------------------------------------------------------------


def handler_source(template: dict[str, Any], function: str) -> str:
    return (ROOT / resource_properties(template, function)["CodeUri"] / "app.py").read_text()


def publishers(template: dict[str, Any]) -> set[str]:
    """The functions whose handler builds a run-event publisher (trainrun.handlers.run_events)."""
    return {name for name in functions(template) if "run_events(settings, metrics)" in handler_source(template, name)}


def test_exactly_the_functions_that_publish_run_events_may_publish_them(template: dict[str, Any]) -> None:
    assert publishers(template) == {
        "LoadRunSpecFunction",
        "CreateClusterFunction",
        "CreateEksClusterFunction",
        "CreateNodeGroupFunction",
        "PrepareKubernetesFunction",
        "SubmitJobFunction",
        "CheckJobFunction",
        "ResumeJobFunction",
        "ProgressFunction",
        "FinishRunFunction",
        "TearDownFunction",
    }
    for name in functions(template):
        allowed = {"Ref": "RunEventsPolicy"} in resource_properties(template, name)["Policies"]
        assert allowed == (name in publishers(template)), name


def test_the_run_events_policy_allows_the_default_bus_and_no_topic_unless_the_stack_lists_one(
    template: dict[str, Any],
) -> None:
    # RunTopicArns is empty by default: run files may name no topic (trainrun.logic.allowlists).
    document = resolve(template, resource_properties(template, "RunEventsPolicy")["PolicyDocument"])
    grants = {statement["Action"]: statement["Resource"] for statement in document["Statement"]}
    assert grants == {"events:PutEvents": "arn:aws:events:us-west-2:123456789012:event-bus/default"}
    assert all(statement["Effect"] == "Allow" and "Condition" not in statement for statement in document["Statement"])


# --- outputs -------------------------------------------------------------------------------------------


def test_the_outputs_name_the_dashboard_the_alarms_and_the_run_event_pattern(template: dict[str, Any]) -> None:
    outputs = {name: resolve(template, output["Value"]) for name, output in template["Outputs"].items()}
    assert outputs["DashboardName"] == name_of("RunsDashboard")
    assert outputs["DashboardUrl"] == (
        "https://us-west-2.console.aws.amazon.com/cloudwatch/home?region=us-west-2"
        f"#dashboards/dashboard/{name_of('RunsDashboard')}"
    )
    assert (outputs["RunFailedAlarmName"], outputs["LeftoverRunsAlarmName"], outputs["UndeliveredRunsAlarmName"]) == (
        name_of("RunFailedAlarm"),
        name_of("LeftoverRunsAlarm"),
        name_of("UndeliveredRunsAlarm"),
    )
    assert json.loads(outputs["RunEventPattern"]) == {
        "source": [SOURCE],
        "detail-type": [DETAIL_TYPE],
        "detail": {"stack": [STACK]},
    }
