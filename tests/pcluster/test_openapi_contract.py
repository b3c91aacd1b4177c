"""The client's requests and the local API's answers, checked against ParallelCluster 3.16's OpenAPI spec.

Run in the schema-check venv, where aws-parallelcluster ships its spec
(`pcluster/api/openapi/openapi.yaml`); elsewhere the module skips itself:
    .venv-pcluster/bin/pytest tests/pcluster

The client (`trainrun.adapters.pcluster.PclusterApi`) talks to the local API
(`trainrun.local.pcluster_api.LocalPclusterApi`) through a transport that calls the WSGI app in
process (no sockets) and checks both directions on the way:
- the request: a path template and method of the spec, only declared query parameters with
  valid values, the required ones present, the body's content type and JSON schema, and the
  Authorization header of the spec's security scheme;
- the answer: a status the operation declares, and a body valid against that status's schema.
Schemas are the spec's own, `$ref`s resolved by `referencing`, validated by jsonschema (OpenAPI
3.0 schema objects are JSON Schema draft 4 plus keywords jsonschema ignores). Every object schema
is made closed (`additionalProperties: false`) here, so a misspelt field fails instead of passing
as an extra one. Nodes come from a stub launcher: no moto, no EC2.

One schema is widened, where the running API answers outside its spec: a StackEvent's
`resourceStatus` is CloudFormation's own (getClusterStackEvents passes DescribeStackEvents on,
unvalidated), and a stack's own events carry stack statuses (ROLLBACK_IN_PROGRESS, ...) that
CloudFormation's ResourceStatus has and the spec's CloudFormationResourceStatus lacks.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

pytest.importorskip("pcluster.api", reason="needs requirements-pcluster.txt")

import boto3
import botocore.session
import pcluster
from botocore.awsrequest import AWSPreparedRequest, AWSRequest
from jsonschema import Draft4Validator, FormatChecker
from referencing import Registry
from referencing.jsonschema import DRAFT4
from werkzeug.test import Client

from trainrun.adapters.pcluster import (
    ClusterAlreadyExists,
    ClusterStatus,
    HttpResponse,
    PclusterApi,
    PclusterApiError,
    PclusterBadRequest,
    sign,
)
from trainrun.local import stack_events
from trainrun.local.pcluster_api import LocalPclusterApi, Node
from trainrun.local.stack_events import ResourceEvent, StackResource
from trainrun.logic.cluster_config import ClusterIds, render_cluster_config, to_yaml
from trainrun.model.run_file import parse_run_file
from trainrun.model.tags import run_tags

SPEC_PATH = Path(pcluster.__file__).parent / "api" / "openapi" / "openapi.yaml"
SPEC_URI = "urn:pcluster:openapi"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "single-node.yaml"
BASE_URL = "http://pcluster.local/prod"
REGION = "us-west-2"
NAME = "trainrun-contract"
SPEC = parse_run_file(EXAMPLE.read_bytes())
CONFIG = to_yaml(render_cluster_config(SPEC, ClusterIds.placeholders(SPEC), tags=run_tags("contract", "trainrun")))
FORMATS = FormatChecker()


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    # jsonschema checks date-time only with an optional package; RFC 3339 needs the zone.
    return not isinstance(value, str) or datetime.fromisoformat(value).tzinfo is not None


# --- the spec ---------------------------------------------------------------------------------------
@cache
def spec() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(SPEC_PATH.read_text())
    return document


@cache
def registry() -> Registry:
    closed = _closed(copy.deepcopy(spec()))
    statuses = closed["components"]["schemas"]["CloudFormationResourceStatus"]
    cloudformation = botocore.session.get_session().get_service_model("cloudformation")
    statuses["enum"] = sorted({*statuses["enum"], *cloudformation.shape_for("ResourceStatus").enum})
    # The spec's YAML has timestamps in its examples; as JSON, they are strings.
    closed = json.loads(json.dumps(closed, default=str))
    return Registry().with_resource(SPEC_URI, DRAFT4.create_resource(closed))


def _closed(node: Any) -> Any:
    if isinstance(node, dict):
        if node.get("type") == "object" and "properties" in node:
            node.setdefault("additionalProperties", False)
        for value in node.values():
            _closed(value)
    elif isinstance(node, list):
        for item in node:
            _closed(item)
    return node


def validate(schema: dict[str, Any], instance: Any) -> None:
    """Validate against a schema of the spec (resolving its $refs), or fail the test with the errors."""
    validator = Draft4Validator({"$ref": _pointer(schema)}, registry=registry(), format_checker=FORMATS)
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    if errors:
        pytest.fail("\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors) + f"\n{instance!r}")


def _pointer(schema: dict[str, Any]) -> str:
    # Each schema is addressed in the spec document itself, so its own $refs resolve there too.
    return f"{SPEC_URI}#{_locations()[id(schema)]}"


@cache
def _locations() -> dict[int, str]:
    found: dict[int, str] = {}

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            found[id(node)] = path
            for key, value in node.items():
                walk(value, f"{path}/{str(key).replace('~', '~0').replace('/', '~1')}")
        elif isinstance(node, list):
            for index, item in enumerate(node):
                walk(item, f"{path}/{index}")

    walk(spec(), "")
    return found


@dataclass(frozen=True)
class Operation:
    template: str
    method: str
    definition: dict[str, Any]


def operation_for(method: str, path: str) -> tuple[Operation, dict[str, str]]:
    """The spec's operation for a request path (the base URL's stage removed) and its path parameters."""
    for template, item in spec()["paths"].items():
        pattern = "^" + re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template)) + "$"
        match = re.match(pattern, path)
        if match and method.lower() in item:
            return Operation(template, method.lower(), item[method.lower()]), match.groupdict()
    pytest.fail(f"{method} {path} is no operation of the ParallelCluster API")


# --- the checks ------------------------------------------------------------------------------------
def check_request(request: AWSPreparedRequest) -> Operation:
    url = urlsplit(request.url)
    assert url.path.startswith(urlsplit(BASE_URL).path + "/")
    operation, path_params = operation_for(request.method or "", url.path.removeprefix(urlsplit(BASE_URL).path))
    parameters = operation.definition.get("parameters", [])

    for parameter in (p for p in parameters if p["in"] == "path"):
        validate(parameter["schema"], path_params[parameter["name"]])
    query = parse_qs(url.query, keep_blank_values=True)
    declared = {p["name"]: p for p in parameters if p["in"] == "query"}
    assert set(query) <= set(declared), f"undeclared query parameters: {set(query) - set(declared)}"
    for name, parameter in declared.items():
        if parameter.get("required"):
            assert name in query, f"missing required query parameter {name}"
        if name in query:
            validate(parameter["schema"], _query_value(parameter["schema"], query[name]))

    body = operation.definition.get("requestBody")
    if body is None:
        assert not request.body, f"{operation.method} {operation.template} takes no body"
    else:
        content_type = str(request.headers.get("Content-Type", "")).split(";")[0]
        assert content_type in body["content"], f"Content-Type {content_type!r} not in {list(body['content'])}"
        assert request.body or not body.get("required"), "the request body is required"
        validate(body["content"][content_type]["schema"], json.loads(request.body))

    # securitySchemes: aws.auth.sigv4, an apiKey in the Authorization header (SigV4 for API Gateway).
    scheme = spec()["components"]["securitySchemes"]["aws.auth.sigv4"]
    authorization = request.headers.get(scheme["name"])
    assert authorization is not None and str(authorization).startswith("AWS4-HMAC-SHA256 ")
    return operation


def _query_value(schema: dict[str, Any], values: list[str]) -> Any:
    # form style, explode: true (the spec's only style for query parameters).
    if schema.get("type") == "array":
        return values
    (value,) = values
    if schema.get("type") == "boolean":
        assert value in ("true", "false"), f"{value!r} is not a boolean"
        return value == "true"
    return value


def check_response(operation: Operation, status: int, headers: dict[str, str], body: bytes) -> None:
    responses = operation.definition["responses"]
    assert str(status) in responses, f"{operation.method} {operation.template} declares no {status}: {body!r}"
    if status == 204 and not body:
        return  # the spec gives updateComputeFleet's 204 a body; HTTP gives a 204 none (RFC 9110, 15.3.5)
    content = responses[str(status)].get("content", {})
    if not content:  # declared without a body (deleteClusterInstances' 202)
        assert not body, f"{operation.method} {operation.template} {status} declares no body: {body!r}"
        return
    content_type = headers.get("Content-Type", "").split(";")[0]
    assert content_type in content, f"Content-Type {content_type!r} not in {list(content)}"
    validate(content[content_type]["schema"], json.loads(body))


# --- the service, in process ------------------------------------------------------------------------
@dataclass
class StubLauncher:
    """Instances in a dict: the contract does not depend on EC2."""

    nodes: dict[str, Node] = field(default_factory=dict)
    launched: list[dict[str, Any]] = field(default_factory=list)

    def launch(
        self,
        *,
        region: str,
        subnet_id: str,
        instance_type: str,
        count: int,
        tags: Any,
        capacity_reservation_target: Any = None,
    ) -> list[str]:
        ids = [f"i-{len(self.nodes) + n:017x}" for n in range(count)]
        for index, instance_id in enumerate(ids):
            self.nodes[instance_id] = Node(
                instance_id=instance_id,
                instance_type=instance_type,
                state="running",
                launch_time=datetime.now(UTC),
                private_ip=f"10.0.0.{len(self.nodes) + index + 10}",
            )
        self.launched.append({"subnet_id": subnet_id, "count": count, "tags": dict(tags)})
        return ids

    def describe(self, *, region: str, instance_ids: list[str]) -> list[Node]:
        return [self.nodes[i] for i in instance_ids if i in self.nodes]

    def terminate(self, *, region: str, instance_ids: list[str]) -> None:
        for instance_id in instance_ids:
            node = self.nodes[instance_id]
            self.nodes[instance_id] = Node(**{**node.__dict__, "state": "terminated"})


@dataclass
class CheckingTransport:
    """Checks each request, hands it to the service's WSGI app, checks the answer."""

    service: LocalPclusterApi
    checked: list[tuple[str, str, int]] = field(default_factory=list)

    def __call__(self, request: AWSPreparedRequest) -> HttpResponse:
        operation = check_request(request)
        url = urlsplit(request.url)
        answer = Client(self.service.wsgi_app).open(
            url.path.removeprefix(urlsplit(BASE_URL).path),
            method=request.method,
            query_string=url.query,
            headers={k: str(v) for k, v in request.headers.items()},
            data=request.body or b"",
            base_url="http://pcluster.local/",
        )
        headers = dict(answer.headers.items())
        check_response(operation, answer.status_code, headers, answer.data)
        self.checked.append((operation.method, operation.template, answer.status_code))
        return HttpResponse(status=answer.status_code, body=answer.data, headers=headers)


def aws_session() -> boto3.Session:
    return boto3.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret", region_name=REGION)


@pytest.fixture
def service() -> LocalPclusterApi:
    return LocalPclusterApi(
        None, REGION, launcher=StubLauncher(), api_user_role_arn=None, seconds_to_complete=600, seconds_to_delete=600
    )


@pytest.fixture
def transport(service: LocalPclusterApi) -> CheckingTransport:
    return CheckingTransport(service)


@pytest.fixture
def api(transport: CheckingTransport) -> PclusterApi:
    return PclusterApi(BASE_URL, session=aws_session(), region=REGION, transport=transport)


def signed(method: str, path: str, **query: str) -> AWSPreparedRequest:
    request = AWSRequest(method=method, url=f"{BASE_URL}{path}?" + "&".join(f"{k}={v}" for k, v in query.items()))
    sign(request, aws_session(), REGION)
    return request.prepare()


# --- the spec itself ----------------------------------------------------------------------------------
def test_the_spec_is_parallelcluster_3_16s() -> None:
    assert spec()["info"]["version"].startswith("3.16")


def test_a_misspelt_field_fails_the_closed_schemas() -> None:
    describe = spec()["components"]["schemas"]["ClusterInfoSummary"]
    summary = {
        "clusterName": NAME,
        "region": REGION,
        "version": "3.16.1",
        "cloudformationStackArn": "arn",
        "cloudFormationStackStatus": "CREATE_COMPLETE",  # ClusterInfoSummary spells it cloudformation...
        "clusterStatus": "CREATE_COMPLETE",
    }

    with pytest.raises(pytest.fail.Exception, match="cloudFormationStackStatus"):
        validate(describe, summary)


# --- a cluster's whole life, both directions checked --------------------------------------------------
def test_create_describe_and_delete_follow_the_contract(api: PclusterApi, transport: CheckingTransport) -> None:
    created = api.create_cluster(NAME, CONFIG, region=REGION)
    in_progress = api.describe_cluster(NAME, region=REGION)
    complete = api.describe_cluster(NAME, region=REGION)
    deleting = api.delete_cluster(NAME, region=REGION)
    still_deleting = api.describe_cluster(NAME, region=REGION)
    deleting_again = api.delete_cluster(NAME, region=REGION)
    gone = api.describe_cluster(NAME, region=REGION)
    deleted_twice = api.delete_cluster(NAME, region=REGION)

    assert created.clusterStatus == ClusterStatus.CREATE_IN_PROGRESS
    assert in_progress is not None and in_progress.clusterStatus == ClusterStatus.CREATE_IN_PROGRESS
    assert complete is not None and complete.clusterStatus == ClusterStatus.CREATE_COMPLETE
    assert complete.headNode is not None and complete.headNode.state == "running"
    assert deleting is not None and deleting.clusterStatus == ClusterStatus.DELETE_IN_PROGRESS
    assert still_deleting is not None and still_deleting.clusterStatus == ClusterStatus.DELETE_IN_PROGRESS
    assert deleting_again is not None
    assert gone is None and deleted_twice is None
    assert [status for *_, status in transport.checked] == [202, 200, 200, 202, 200, 202, 404, 404]


def test_a_compute_fleet_stop_follows_the_contract(
    service: LocalPclusterApi, api: PclusterApi, transport: CheckingTransport
) -> None:
    launcher = service._launcher
    assert isinstance(launcher, StubLauncher)
    api.create_cluster(NAME, CONFIG, region=REGION)
    # While the stack is created, ParallelCluster refuses the stop (Cluster.stop: not a working status)
    with pytest.raises(PclusterBadRequest, match="while stack is in CREATE_IN_PROGRESS status"):
        api.stop_compute_fleet(NAME, region=REGION)
    api.describe_cluster(NAME, region=REGION)
    api.describe_cluster(NAME, region=REGION)
    # Once created, the stop is accepted, the compute nodes go, and a second stop finds it stopped
    requested = api.stop_compute_fleet(NAME, region=REGION)
    again = api.stop_compute_fleet(NAME, region=REGION)
    described = api.describe_cluster(NAME, region=REGION)
    missing = api.stop_compute_fleet("trainrun-missing", region=REGION)

    assert (requested, again, missing) == ("STOP_REQUESTED", "STOP_REQUESTED", None)
    assert described is not None and described.computeFleetStatus == "STOPPED"
    assert described.headNode is not None and described.headNode.state == "running"
    assert sorted(node.state for node in launcher.nodes.values()) == ["running", "terminated"]
    assert [status for *_, status in transport.checked] == [202, 400, 200, 200, 204, 204, 200, 404]


def test_a_delete_of_the_cluster_instances_follows_the_contract(
    service: LocalPclusterApi, api: PclusterApi, transport: CheckingTransport
) -> None:
    launcher = service._launcher
    assert isinstance(launcher, StubLauncher)
    api.create_cluster(NAME, CONFIG, region=REGION)
    api.describe_cluster(NAME, region=REGION)
    api.describe_cluster(NAME, region=REGION)
    # The compute nodes go at once, the head node stays; twice is no error; an unknown cluster is 404
    api.stop_compute_fleet(NAME, region=REGION)
    deleted = api.delete_cluster_instances(NAME, region=REGION)
    again = api.delete_cluster_instances(NAME, region=REGION)
    missing = api.delete_cluster_instances("trainrun-missing", region=REGION)

    assert (deleted, again, missing) == (True, True, False)
    assert sorted(node.state for node in launcher.nodes.values()) == ["running", "terminated"]
    assert [status for *_, status in transport.checked] == [202, 200, 200, 204, 202, 202, 404]


def test_a_failed_create_describes_its_failures_by_the_contract(service: LocalPclusterApi, api: PclusterApi) -> None:
    service.fail_next_create([{"failureCode": "HeadNodeBootstrapFailure", "failureReason": "bootstrap failed"}])
    api.create_cluster(NAME, CONFIG, region=REGION)

    api.describe_cluster(NAME, region=REGION)
    failed = api.describe_cluster(NAME, region=REGION)

    assert failed is not None and failed.clusterStatus == ClusterStatus.CREATE_FAILED
    assert failed.cloudformationStackStatus == "ROLLBACK_COMPLETE"
    assert [f.failureCode for f in failed.failures] == ["HeadNodeBootstrapFailure"]


def test_an_invalid_configuration_answers_the_create_bad_request_schema(api: PclusterApi) -> None:
    document = yaml.safe_load(CONFIG)
    del document["HeadNode"]["Networking"]["SubnetId"]

    with pytest.raises(PclusterBadRequest) as raised:
        api.create_cluster(NAME, yaml.safe_dump(document), region=REGION)

    assert raised.value.validation_errors


@pytest.mark.parametrize("status", [400, 409])
def test_an_existing_name_answers_a_declared_status(status: int) -> None:
    service = LocalPclusterApi(
        None, REGION, launcher=StubLauncher(), api_user_role_arn=None, existing_cluster_status=status
    )
    api = PclusterApi(BASE_URL, session=aws_session(), region=REGION, transport=CheckingTransport(service))
    api.create_cluster(NAME, CONFIG, region=REGION)

    with pytest.raises(ClusterAlreadyExists):
        api.create_cluster(NAME, CONFIG, region=REGION)


def test_list_clusters_answers_the_list_schema(service: LocalPclusterApi, transport: CheckingTransport) -> None:
    api = PclusterApi(BASE_URL, session=aws_session(), region=REGION, transport=transport)
    api.create_cluster(NAME, CONFIG, region=REGION)

    for request in (
        signed("GET", "/v3/clusters", region=REGION),
        signed("GET", "/v3/clusters", region=REGION, clusterStatus="CREATE_IN_PROGRESS"),
    ):
        response = transport(request)
        assert response.status == 200
        assert [c["clusterName"] for c in json.loads(response.body)["clusters"]] == [NAME]


def test_a_bad_cluster_name_in_the_path_answers_the_bad_request_schema(transport: CheckingTransport) -> None:
    # Our client refuses such a name itself; the service still answers it by the contract.
    request = signed("GET", "/v3/clusters/1-not-a-name", region=REGION)
    # The request itself breaks the path pattern, so it is sent past the request check.
    answer = Client(transport.service.wsgi_app).get(
        "/v3/clusters/1-not-a-name",
        query_string={"region": REGION},
        headers={k: str(v) for k, v in request.headers.items()},
    )
    operation, _ = operation_for("GET", "/v3/clusters/{clusterName}")
    check_response(operation, answer.status_code, dict(answer.headers.items()), answer.data)
    assert answer.status_code == 400


def test_an_unsigned_request_gets_api_gateways_403_which_the_spec_does_not_describe(
    service: LocalPclusterApi,
) -> None:
    # API Gateway's IAM authorizer answers before ParallelCluster's Lambda sees the request, so the
    # spec (the Lambda's contract) has no 403; its body has the spec's error shape all the same.
    answer = Client(service.wsgi_app).get(f"/v3/clusters/{NAME}", query_string={"region": REGION})

    assert answer.status_code == 403
    validate(spec()["components"]["schemas"]["UnauthorizedClientErrorResponseContent"], answer.json)


# --- the stack's events ----------------------------------------------------------------------------
REFUSED = "User: arn:aws:sts::123456789012:assumed-role/ParallelClusterLambdaRole/f is not authorized to perform: x"


@dataclass
class RefusedRole:
    """A stack whose head node role is refused (trainrun.local.iam.cluster_stack needs policy_sentry)."""

    events: list[ResourceEvent]
    failure: dict[str, str] | None


class RefusingStack:
    def create(self, cluster_name: str, region: str, config: Any, stack_arn: str) -> RefusedRole:
        role = StackResource("RoleHeadNode", "AWS::IAM::Role", f"{cluster_name}-RoleHeadNode-1A2B3C4D5E6F")
        failure = {"failureCode": "ClusterCreationFailure", "failureReason": "Failed to create the cluster."}
        return RefusedRole(
            [ResourceEvent(role, "CREATE_IN_PROGRESS"), ResourceEvent(role, "CREATE_FAILED", REFUSED)], failure
        )


def test_a_created_clusters_stack_events_follow_the_contract_newest_first(
    api: PclusterApi, transport: CheckingTransport
) -> None:
    api.create_cluster(NAME, CONFIG, region=REGION)
    api.describe_cluster(NAME, region=REGION)
    api.describe_cluster(NAME, region=REGION)

    page = api.get_cluster_stack_events(NAME, region=REGION)

    assert page is not None and page.nextToken is None
    assert [(e.logicalResourceId, e.resourceStatus, e.resourceStatusReason) for e in page.events] == [
        (NAME, "CREATE_COMPLETE", None),
        (NAME, "CREATE_IN_PROGRESS", "User Initiated"),
    ]
    assert transport.checked[-1] == ("get", "/v3/clusters/{clusterName}/stackevents", 200)


def test_a_refused_stacks_events_follow_the_contract_with_cloudformations_rollback(
    service: LocalPclusterApi, api: PclusterApi
) -> None:
    service.cluster_stack = RefusingStack()
    api.create_cluster(NAME, CONFIG, region=REGION)
    api.describe_cluster(NAME, region=REGION)
    api.describe_cluster(NAME, region=REGION)

    page = api.get_cluster_stack_events(NAME, region=REGION)

    assert page is not None
    assert [(e.logicalResourceId, e.resourceStatus) for e in page.events] == [
        (NAME, "ROLLBACK_COMPLETE"),
        ("RoleHeadNode", "DELETE_COMPLETE"),
        ("RoleHeadNode", "DELETE_IN_PROGRESS"),
        (NAME, "ROLLBACK_IN_PROGRESS"),
        ("RoleHeadNode", "CREATE_FAILED"),
        ("RoleHeadNode", "CREATE_IN_PROGRESS"),
        (NAME, "CREATE_IN_PROGRESS"),
    ]
    assert page.events[3].resourceStatusReason == (
        "The following resource(s) failed to create: [RoleHeadNode]. Rollback requested by user."
    )
    cause = api.first_failed_resource(NAME, region=REGION)
    assert cause is not None and (cause.logicalResourceId, cause.resourceStatusReason) == ("RoleHeadNode", REFUSED)


def test_a_failed_bootstraps_stack_events_name_the_head_nodes_wait_condition(
    service: LocalPclusterApi, api: PclusterApi
) -> None:
    service.fail_next_create([{"failureCode": "HeadNodeBootstrapFailure", "failureReason": "bootstrap failed"}])
    api.create_cluster(NAME, CONFIG, region=REGION)
    api.describe_cluster(NAME, region=REGION)
    api.describe_cluster(NAME, region=REGION)

    cause = api.first_failed_resource(NAME, region=REGION)

    assert cause is not None
    assert cause.logicalResourceId.startswith("HeadNodeWaitCondition")
    assert (cause.resourceType, cause.resourceStatusReason) == (
        "AWS::CloudFormation::WaitCondition",
        "bootstrap failed",
    )


def test_stack_events_are_paged_by_the_contract_oldest_last(
    service: LocalPclusterApi, api: PclusterApi, transport: CheckingTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stack_events, "PAGE_SIZE", 2)
    service.cluster_stack = RefusingStack()
    api.create_cluster(NAME, CONFIG, region=REGION)
    api.describe_cluster(NAME, region=REGION)
    api.describe_cluster(NAME, region=REGION)

    cause = api.first_failed_resource(NAME, region=REGION)

    assert cause is not None and cause.logicalResourceId == "RoleHeadNode"
    pages = [c for c in transport.checked if c[1].endswith("/stackevents")]
    assert pages == [("get", "/v3/clusters/{clusterName}/stackevents", 200)] * 4


def test_the_stack_events_of_an_unknown_cluster_answer_the_not_found_schema(
    api: PclusterApi, transport: CheckingTransport
) -> None:
    assert api.get_cluster_stack_events(NAME, region=REGION) is None
    assert transport.checked == [("get", "/v3/clusters/{clusterName}/stackevents", 404)]


def test_a_next_token_no_page_gave_answers_the_bad_request_schema(
    api: PclusterApi, transport: CheckingTransport
) -> None:
    api.create_cluster(NAME, CONFIG, region=REGION)

    with pytest.raises(PclusterApiError, match="NextToken"):
        api.get_cluster_stack_events(NAME, region=REGION, next_token="not-a-token")
    assert transport.checked[-1] == ("get", "/v3/clusters/{clusterName}/stackevents", 400)
