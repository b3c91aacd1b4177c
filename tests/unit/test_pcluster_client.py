"""The ParallelCluster API client against a fake transport: what it sends, and what it makes of answers.

No sockets: `PclusterApi(transport=...)` takes the signed request instead of sending it.
tests/integration/test_pcluster_api.py runs the same client against the local API over HTTP,
and tests/pcluster/test_openapi_contract.py checks these requests against the OpenAPI spec.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from botocore.awsrequest import AWSPreparedRequest
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

from trainrun.adapters.pcluster import (
    AssumedRoleCredentials,
    ClusterAlreadyExists,
    ClusterDescription,
    ClusterStatus,
    ClusterSummary,
    HttpResponse,
    PclusterAccessDenied,
    PclusterApi,
    PclusterApiError,
    PclusterBadRequest,
    Urllib3Transport,
)
from trainrun.errors import TransientAwsError

BASE_URL = "https://abc123.execute-api.us-east-1.amazonaws.com/prod"
API_REGION = "us-east-1"
CLUSTER_REGION = "us-west-2"
NAME = "trainrun-demo"
CONFIG = "Region: us-west-2\nImage:\n  Os: ubuntu2204\n"
STACK_ARN = f"arn:aws:cloudformation:{CLUSTER_REGION}:123456789012:stack/{NAME}/0b6e5f10-0000-0000-0000-000000000000"
SUMMARY = {
    "clusterName": NAME,
    "region": CLUSTER_REGION,
    "version": "3.16.1",
    "cloudformationStackArn": STACK_ARN,
    "cloudformationStackStatus": "CREATE_IN_PROGRESS",
    "clusterStatus": "CREATE_IN_PROGRESS",
    "scheduler": {"type": "slurm"},
}
DESCRIPTION = {
    "clusterName": NAME,
    "region": CLUSTER_REGION,
    "version": "3.16.1",
    "cloudFormationStackStatus": "CREATE_COMPLETE",
    "clusterStatus": "CREATE_COMPLETE",
    "scheduler": {"type": "slurm"},
    "cloudformationStackArn": STACK_ARN,
    "creationTime": "2025-01-01T00:00:00.000Z",
    "lastUpdatedTime": "2025-01-01T00:10:00.000Z",
    "clusterConfiguration": {"url": "https://bucket.s3.amazonaws.com/config.yaml?X-Amz-Signature=x"},
    "computeFleetStatus": "RUNNING",
    "tags": [{"key": "trainrun:run-id", "value": "demo"}, {"key": "parallelcluster:version", "value": "3.16.1"}],
    "headNode": {
        "instanceId": "i-0123456789abcdef0",
        "instanceType": "c5.4xlarge",
        "launchTime": "2025-01-01T00:02:00.000Z",
        "privateIpAddress": "10.0.0.10",
        "publicIpAddress": "54.1.2.3",
        "state": "running",
    },
    "loginNodes": [],
    "someFieldFromALaterVersion": {"ignored": True},
}


@dataclass
class FakeTransport:
    """Answers each request with the next canned (status, body) and keeps what was sent."""

    answers: list[tuple[int, Any]]
    sent: list[AWSPreparedRequest] = field(default_factory=list)

    def __call__(self, request: AWSPreparedRequest) -> HttpResponse:
        self.sent.append(request)
        status, body = self.answers.pop(0)
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return HttpResponse(status=status, body=raw, headers={"Content-Type": "application/json"})


def session(token: str | None = None) -> boto3.Session:
    return boto3.Session(
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        aws_session_token=token,
        region_name=API_REGION,
    )


def client(*answers: tuple[int, Any], token: str | None = None) -> tuple[PclusterApi, FakeTransport]:
    transport = FakeTransport(list(answers))
    return PclusterApi(BASE_URL, session=session(token), region=API_REGION, transport=transport), transport


def header(request: AWSPreparedRequest, name: str) -> str:
    value = request.headers.get(name)
    return value.decode() if isinstance(value, bytes) else str(value)


# --- requests -----------------------------------------------------------------------------------
def test_create_posts_the_name_and_yaml_as_json_with_the_cluster_region_in_the_query() -> None:
    api, transport = client((202, {"cluster": SUMMARY}))

    api.create_cluster(NAME, CONFIG, region=CLUSTER_REGION)

    (request,) = transport.sent
    url = urlsplit(request.url)
    assert request.method == "POST"
    assert (url.scheme, url.netloc, url.path) == (
        "https",
        "abc123.execute-api.us-east-1.amazonaws.com",
        "/prod/v3/clusters",
    )
    assert parse_qs(url.query) == {"region": [CLUSTER_REGION]}
    assert header(request, "Content-Type") == "application/json"
    assert json.loads(request.body) == {"clusterName": NAME, "clusterConfiguration": CONFIG}


@pytest.mark.parametrize(
    ("call", "method"),
    [
        (lambda api: api.describe_cluster(NAME, region=CLUSTER_REGION), "GET"),
        (lambda api: api.delete_cluster(NAME, region=CLUSTER_REGION), "DELETE"),
    ],
)
def test_describe_and_delete_name_the_cluster_in_the_path_and_send_no_body(call: Any, method: str) -> None:
    api, transport = client((404, {"message": "gone"}))

    call(api)

    (request,) = transport.sent
    url = urlsplit(request.url)
    assert request.method == method
    assert url.path == f"/prod/v3/clusters/{NAME}"
    assert parse_qs(url.query) == {"region": [CLUSTER_REGION]}
    assert not request.body
    assert "Content-Type" not in request.headers


def test_every_request_is_sigv4_signed_for_execute_api_in_the_apis_region() -> None:
    api, transport = client((404, {"message": "gone"}), token="session-token")

    api.describe_cluster(NAME, region=CLUSTER_REGION)

    request = transport.sent[0]
    authorization = header(request, "Authorization")
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert f"/{API_REGION}/execute-api/aws4_request" in authorization
    assert "SignedHeaders=" in authorization and "host" in authorization
    assert header(request, "X-Amz-Security-Token") == "session-token"
    assert header(request, "X-Amz-Date")


def test_a_base_url_with_a_trailing_slash_gives_the_same_path() -> None:
    transport = FakeTransport([(404, {"message": "gone"})])
    api = PclusterApi(BASE_URL + "/", session=session(), region=API_REGION, transport=transport)

    api.describe_cluster(NAME, region=CLUSTER_REGION)

    assert urlsplit(transport.sent[0].url).path == f"/prod/v3/clusters/{NAME}"


@pytest.mark.parametrize("name", ["", "1starts-with-digit", "has/slash", "dots.not.allowed", "../v3/images"])
def test_a_name_outside_the_specs_pattern_is_refused_before_sending(name: str) -> None:
    api, transport = client()

    with pytest.raises(ValueError, match="cluster name"):
        api.describe_cluster(name, region=CLUSTER_REGION)
    assert transport.sent == []


def test_without_credentials_nothing_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    transport = FakeTransport([])
    no_credentials = boto3.Session(region_name=API_REGION)
    monkeypatch.setattr(no_credentials, "get_credentials", lambda: None)
    api = PclusterApi(BASE_URL, session=no_credentials, region=API_REGION, transport=transport)

    with pytest.raises(PclusterApiError, match="credentials"):
        api.describe_cluster(NAME, region=CLUSTER_REGION)
    assert transport.sent == []


# --- answers --------------------------------------------------------------------------------------
def test_create_returns_the_cluster_summary() -> None:
    api, _ = client((202, {"cluster": SUMMARY, "validationMessages": [{"level": "WARNING", "message": "m"}]}))

    summary = api.create_cluster(NAME, CONFIG, region=CLUSTER_REGION)

    assert summary == ClusterSummary.model_validate(SUMMARY)
    assert summary.clusterStatus == ClusterStatus.CREATE_IN_PROGRESS
    assert summary.cloudformationStackArn == STACK_ARN


def test_describe_parses_the_description_and_ignores_unknown_fields() -> None:
    api, _ = client((200, DESCRIPTION))

    description = api.describe_cluster(NAME, region=CLUSTER_REGION)

    assert isinstance(description, ClusterDescription)
    assert description.clusterStatus == "CREATE_COMPLETE"
    # The spec's own spelling for describe: cloudFormationStackStatus.
    assert description.cloudformationStackStatus == "CREATE_COMPLETE"
    assert description.headNode is not None
    assert description.headNode.instanceId == "i-0123456789abcdef0"
    assert description.headNode.privateIpAddress == "10.0.0.10"
    assert description.headNode.state == "running"
    assert (description.tags[0].key, description.tags[0].value) == ("trainrun:run-id", "demo")
    assert description.failures == []


def test_describe_of_a_failed_create_carries_pclusters_failures() -> None:
    failed = {
        **DESCRIPTION,
        "clusterStatus": "CREATE_FAILED",
        "cloudFormationStackStatus": "ROLLBACK_COMPLETE",
        "failures": [{"failureCode": "HeadNodeBootstrapFailure", "failureReason": "bootstrap failed"}],
    }
    del failed["headNode"]
    api, _ = client((200, failed))

    description = api.describe_cluster(NAME, region=CLUSTER_REGION)

    assert description is not None
    assert description.clusterStatus == ClusterStatus.CREATE_FAILED
    assert description.headNode is None
    assert [(f.failureCode, f.failureReason) for f in description.failures] == [
        ("HeadNodeBootstrapFailure", "bootstrap failed")
    ]


def test_describe_of_an_unknown_cluster_is_none() -> None:
    api, _ = client((404, {"message": f"Cluster '{NAME}' does not exist or belongs to an incompatible version."}))

    assert api.describe_cluster(NAME, region=CLUSTER_REGION) is None


def test_delete_returns_the_summary_and_none_once_the_cluster_is_gone() -> None:
    deleting = {**SUMMARY, "clusterStatus": "DELETE_IN_PROGRESS", "cloudformationStackStatus": "DELETE_IN_PROGRESS"}
    api, _ = client((202, {"cluster": deleting}), (404, {"message": "does not exist"}))

    first = api.delete_cluster(NAME, region=CLUSTER_REGION)
    again = api.delete_cluster(NAME, region=CLUSTER_REGION)

    assert first is not None and first.clusterStatus == ClusterStatus.DELETE_IN_PROGRESS
    assert again is None


def test_a_compute_fleet_stop_patches_stop_requested_and_reads_the_status() -> None:
    # Given the API: a 204 with the spec's body, one without a body (HTTP's 204), then no such cluster
    api, transport = client(
        (204, {"status": "STOPPING", "lastStatusUpdatedTime": "2026-11-27T07:00:00Z"}),
        (204, b""),
        (404, {"message": "does not exist"}),
    )

    answers = [api.stop_compute_fleet(NAME, region=CLUSTER_REGION) for _ in range(3)]

    assert answers == ["STOPPING", "STOP_REQUESTED", None]
    request = transport.sent[0]
    url = urlsplit(request.url)
    assert (request.method, url.path) == ("PATCH", f"/prod/v3/clusters/{NAME}/computefleet")
    assert parse_qs(url.query) == {"region": [CLUSTER_REGION]}
    assert json.loads(request.body) == {"status": "STOP_REQUESTED"}


def test_a_refused_compute_fleet_stop_is_a_bad_request() -> None:
    message = "Cannot stop/disable compute fleet while stack is in UPDATE_IN_PROGRESS status."
    api, _ = client((400, {"message": message}))

    with pytest.raises(PclusterBadRequest, match="UPDATE_IN_PROGRESS"):
        api.stop_compute_fleet(NAME, region=CLUSTER_REGION)


def test_an_invalid_configuration_is_a_bad_request_with_the_validation_errors() -> None:
    errors = [
        {"level": "ERROR", "type": "ConfigSchemaValidator", "message": "[('HeadNode', ['Missing data'])]"},
        {"level": "ERROR", "type": "SubnetsValidator", "message": "subnet-1 does not exist"},
    ]
    api, _ = client((400, {"message": "Invalid cluster configuration.", "configurationValidationErrors": errors}))

    with pytest.raises(PclusterBadRequest) as raised:
        api.create_cluster(NAME, CONFIG, region=CLUSTER_REGION)

    assert raised.value.status == 400
    assert [e.type for e in raised.value.validation_errors] == ["ConfigSchemaValidator", "SubnetsValidator"]
    assert "Invalid cluster configuration." in str(raised.value)
    assert "subnet-1 does not exist" in str(raised.value)


@pytest.mark.parametrize(
    "answer",
    [
        (409, {"message": f"Cluster {NAME} already exists."}),
        # What ParallelCluster 3.16 actually answers (BadRequestClusterActionError), despite the spec.
        (400, {"message": f"Cluster {NAME} already exists."}),
    ],
)
def test_an_existing_name_on_create_is_cluster_already_exists(answer: tuple[int, Any]) -> None:
    api, _ = client(answer)

    with pytest.raises(ClusterAlreadyExists, match="already exists"):
        api.create_cluster(NAME, CONFIG, region=CLUSTER_REGION)


def test_a_bad_request_on_describe_is_not_none() -> None:
    api, _ = client((400, {"message": "Cluster 'x' belongs to an incompatible ParallelCluster major version."}))

    with pytest.raises(PclusterBadRequest, match="incompatible"):
        api.describe_cluster(NAME, region=CLUSTER_REGION)


@pytest.mark.parametrize("status", [401, 403])
def test_an_unauthorized_request_is_access_denied(status: int) -> None:
    api, _ = client((status, {"message": "Missing Authentication Token"}))

    with pytest.raises(PclusterAccessDenied, match="Missing Authentication Token"):
        api.describe_cluster(NAME, region=CLUSTER_REGION)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (429, {"message": "Rate exceeded"}),
        (500, {"message": "Failed when calling AWS service in create_stack_from_url"}),
        (502, b"<html>Bad Gateway</html>"),
        (503, {"message": "Service Unavailable"}),
        (504, {"message": "Endpoint request timed out"}),
    ],
)
def test_throttling_and_server_errors_are_transient(status: int, body: Any) -> None:
    api, _ = client((status, body))

    with pytest.raises(TransientAwsError):
        api.create_cluster(NAME, CONFIG, region=CLUSTER_REGION)


@pytest.mark.parametrize(
    "failure",
    [
        lambda url: EndpointConnectionError(endpoint_url=url),
        lambda url: ReadTimeoutError(endpoint_url=url),
        lambda url: ConnectionClosedError(endpoint_url=url),
    ],
)
def test_a_connection_failure_is_transient(monkeypatch: pytest.MonkeyPatch, failure: Any) -> None:
    transport = Urllib3Transport(timeout=1)

    def unreachable(request: AWSPreparedRequest) -> Any:
        raise failure(request.url)

    monkeypatch.setattr(transport._session, "send", unreachable)
    api = PclusterApi(BASE_URL, session=session(), region=API_REGION, transport=transport)

    with pytest.raises(TransientAwsError, match="unreachable"):
        api.describe_cluster(NAME, region=CLUSTER_REGION)


def test_an_unexpected_status_is_an_api_error_with_the_message() -> None:
    api, _ = client((404, {"message": "Not Found"}))

    # A 404 on create means the base URL names no ParallelCluster API.
    with pytest.raises(PclusterApiError, match="Not Found") as raised:
        api.create_cluster(NAME, CONFIG, region=CLUSTER_REGION)
    assert raised.value.status == 404


def test_a_success_without_the_expected_fields_is_an_api_error() -> None:
    api, _ = client((202, {"unexpected": True}))

    with pytest.raises(PclusterApiError, match="unexpected answer"):
        api.create_cluster(NAME, CONFIG, region=CLUSTER_REGION)


# --- the stack's events ------------------------------------------------------------------------------
DENIED = (
    'Resource handler returned message: "User: arn:aws:sts::123456789012:assumed-role/ParallelClusterLambdaRole/f '
    "is not authorized to perform: iam:AttachRolePolicy on resource: role trainrun-demo-RoleHeadNode-1A2B "
    'because no identity-based policy allows the iam:AttachRolePolicy action (Service: Iam, Status Code: 403)"'
)


def event(logical_id: str, status: str, reason: str | None = None, at: str = "2025-01-01T00:01:00.000Z") -> Any:
    """A StackEvent as getClusterStackEvents answers it (its required fields, and a reason if any)."""
    document = {
        "stackId": STACK_ARN,
        "eventId": f"{logical_id}-{status}-{at}",
        "stackName": NAME,
        "logicalResourceId": logical_id,
        "physicalResourceId": "",
        "resourceType": "AWS::CloudFormation::Stack" if logical_id == NAME else "AWS::IAM::Role",
        "timestamp": at,
        "resourceStatus": status,
    }
    return document if reason is None else {**document, "resourceStatusReason": reason}


# A failed create, newest first: the rollback, the stack's own cascade, a cancelled resource, the cause.
FAILED_CREATE = [
    event(NAME, "ROLLBACK_COMPLETE", at="2025-01-01T00:03:00.000Z"),
    event(NAME, "CREATE_FAILED", "The following resource(s) failed to create: [QueuesStack, RoleHeadNode]. "),
    event("QueuesStack", "CREATE_FAILED", "Resource creation cancelled", at="2025-01-01T00:01:30.000Z"),
    event("RoleHeadNode", "CREATE_FAILED", DENIED, at="2025-01-01T00:01:00.000Z"),
    event("RoleHeadNode", "CREATE_IN_PROGRESS", at="2025-01-01T00:00:30.000Z"),
    event(NAME, "CREATE_IN_PROGRESS", "User Initiated", at="2025-01-01T00:00:00.000Z"),
]


def test_stack_events_are_read_from_the_clusters_stackevents_path_with_the_next_token() -> None:
    api, transport = client((200, {"events": [], "nextToken": "page/2=="}), (200, {"events": []}))

    api.get_cluster_stack_events(NAME, region=CLUSTER_REGION)
    api.get_cluster_stack_events(NAME, region=CLUSTER_REGION, next_token="page/2==")

    first, second = (urlsplit(r.url) for r in transport.sent)
    assert [r.method for r in transport.sent] == ["GET", "GET"]
    assert first.path == second.path == f"/prod/v3/clusters/{NAME}/stackevents"
    assert parse_qs(first.query) == {"region": [CLUSTER_REGION]}
    assert parse_qs(second.query) == {"region": [CLUSTER_REGION], "nextToken": ["page/2=="]}
    assert not transport.sent[1].body


def test_the_first_failed_resource_is_the_oldest_create_failed_event_past_the_cascade() -> None:
    # Given a stack whose head node role was refused, cancelling the queues and failing the stack
    api, _ = client((200, {"events": FAILED_CREATE}))
    # When the root cause is asked for
    cause = api.first_failed_resource(NAME, region=CLUSTER_REGION)
    # Then it is the role's event, with CloudFormation's reason
    assert cause is not None
    assert (cause.logicalResourceId, cause.resourceStatusReason) == ("RoleHeadNode", DENIED)


def test_the_first_failed_resource_is_found_on_a_later_page() -> None:
    # Given the events over two pages, the cause on the second (older) one
    api, transport = client(
        (200, {"events": FAILED_CREATE[:3], "nextToken": "t2"}), (200, {"events": FAILED_CREATE[3:]})
    )
    # When the root cause is asked for, then both pages are read and the cause is the role's
    cause = api.first_failed_resource(NAME, region=CLUSTER_REGION)
    assert cause is not None and cause.logicalResourceId == "RoleHeadNode"
    assert [parse_qs(urlsplit(r.url).query).get("nextToken") for r in transport.sent] == [None, ["t2"]]


def test_the_first_failed_resource_reads_no_more_than_its_pages() -> None:
    # Given an API whose every page points to one more
    api, transport = client(*[(200, {"events": [FAILED_CREATE[3]], "nextToken": "again"})] * 3)
    # When the root cause is asked for with at most two pages, then two are read
    cause = api.first_failed_resource(NAME, region=CLUSTER_REGION, max_pages=2)
    assert cause is not None and cause.logicalResourceId == "RoleHeadNode"
    assert len(transport.sent) == 2


@pytest.mark.parametrize(
    "answer",
    [
        (200, {"events": [FAILED_CREATE[1], FAILED_CREATE[2], FAILED_CREATE[5]]}),  # cascades only
        (200, {"events": None}),
        (404, {"message": f"Cluster '{NAME}' does not exist or belongs to an incompatible major version."}),
    ],
)
def test_without_a_failed_resource_there_is_no_first_failed_resource(answer: tuple[int, Any]) -> None:
    api, _ = client(answer)

    assert api.first_failed_resource(NAME, region=CLUSTER_REGION) is None


# --- the API user role ------------------------------------------------------------------------------
ROLE_ARN = "arn:aws:iam::123456789012:role/parallelcluster/ParallelClusterApiUserRole-abc"


class FakeSts:
    """AssumeRole answers: credentials numbered by call, valid for an hour from `now`."""

    def __init__(self, now: list[datetime], refusal: ClientError | None = None):
        self.calls: list[dict[str, Any]] = []
        self._now = now
        self._refusal = refusal

    def assume_role(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if self._refusal is not None:
            raise self._refusal
        n = len(self.calls)
        return {
            "Credentials": {
                "AccessKeyId": f"ASIA{n}",
                "SecretAccessKey": f"secret{n}",
                "SessionToken": f"token{n}",
                "Expiration": self._now[0] + timedelta(seconds=kwargs["DurationSeconds"]),
            }
        }


def test_the_api_user_role_is_assumed_once_and_signs_every_request_until_shortly_before_expiry() -> None:
    # Given the role's credentials, assumed at the first request
    now = [datetime(2025, 1, 1, tzinfo=UTC)]
    sts = FakeSts(now)
    credentials = AssumedRoleCredentials(sts, ROLE_ARN, session_name="trainrun-create cluster", now=lambda: now[0])
    transport = FakeTransport([(404, {"message": "gone"})] * 4)
    api = PclusterApi(BASE_URL, session=credentials, region=API_REGION, transport=transport)

    # When a wait loop calls the API three times within the hour, then once 56 minutes later
    for _ in range(3):
        api.describe_cluster(NAME, region=CLUSTER_REGION)
    now[0] += timedelta(minutes=56)
    api.describe_cluster(NAME, region=CLUSTER_REGION)

    # Then the role was assumed twice: at the start, and again 5 minutes before the first expired
    assert [(c["RoleArn"], c["RoleSessionName"]) for c in sts.calls] == [(ROLE_ARN, "trainrun-create-cluster")] * 2
    signed_with = [header(r, "Authorization").split("Credential=")[1].split("/")[0] for r in transport.sent]
    assert signed_with == ["ASIA1", "ASIA1", "ASIA1", "ASIA2"]
    assert [header(r, "X-Amz-Security-Token") for r in transport.sent] == ["token1"] * 3 + ["token2"]


def test_a_refused_assume_role_is_access_denied_naming_the_parameter_to_fix() -> None:
    refusal = ClientError(
        {"Error": {"Code": "AccessDenied", "Message": "not authorized to perform: sts:AssumeRole"}}, "AssumeRole"
    )
    credentials = AssumedRoleCredentials(FakeSts([datetime.now(UTC)], refusal), ROLE_ARN, session_name="x")
    api = PclusterApi(BASE_URL, session=credentials, region=API_REGION, transport=FakeTransport([]))

    with pytest.raises(PclusterAccessDenied) as raised:
        api.describe_cluster(NAME, region=CLUSTER_REGION)

    assert ROLE_ARN in str(raised.value) and "PclusterApiRoleArn" in str(raised.value)
