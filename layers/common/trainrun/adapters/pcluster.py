"""A client of the ParallelCluster API: the official REST API behind API Gateway with IAM auth.

Only what a Lambda function has: botocore signs each request with SigV4 (service `execute-api`,
the region the API is deployed in) and sends it with its own urllib3 session; no `requests`.
The official API stack's resource policy lets only the IAM role it creates invoke the API
(its `ParallelClusterApiUserRole` output; "API invoke permissions are only granted to the
default IAM user created with the API"), so the functions sign with that role's temporary
credentials (`AssumedRoleCredentials`), not with their own.
Paths, query parameters and bodies follow ParallelCluster 3.16's OpenAPI spec
(`pcluster/api/openapi/openapi.yaml`; tests/pcluster checks every request against it).

Answers become models or typed errors:
- 404 from describe or delete means the cluster does not exist (`None`);
- an existing name on create is `ClusterAlreadyExists`. The spec lists 409 for it, but
  ParallelCluster 3.16 answers 400 "Cluster <name> already exists." (`Cluster.create` raises
  `BadRequestClusterActionError`), so both are recognised;
- any other 400 is `PclusterBadRequest`, with the configuration's validation errors if any;
- 429, 5xx (API Gateway's 502/504 included) and connection failures are `TransientAwsError`.

describeCluster says why a create failed only as ParallelCluster's `failures[]`, which for most
causes is the generic ClusterCreationFailure (it reads a failed head node wait condition only);
the cause is in the cluster stack's events, which getClusterStackEvents pages through, newest
first, and `first_failed_resource` picks the root cause from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSPreparedRequest, AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotocoreConnectionError
from botocore.httpsession import URLLib3Session
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from trainrun.adapters.aws_errors import call, error_code
from trainrun.errors import TrainrunError, TransientAwsError
from trainrun.telemetry import tracer

SIGNING_SERVICE = "execute-api"
# What CloudFormation says of the resources that failed only because another one did: the stack's
# own "The following resource(s) failed to create: [...]" and the resources whose creation was
# under way ("Resource creation cancelled"). ParallelCluster's troubleshooting guide ("Troubleshooting
# cluster deployment issues") filters the events on CREATE_FAILED and reads past these to the
# resource that failed.
CASCADE_REASONS = ("The following resource(s) failed to create", "Resource creation cancelled")
# getClusterStackEvents pages read for a failure's root cause, at most: a cluster's main stack has
# about a hundred resources, so its creation and rollback are a few hundred events (a few pages).
MAX_STACK_EVENT_PAGES = 10
# The spec's pattern for clusterName (path parameter and request body).
CLUSTER_NAME = r"^[a-zA-Z][a-zA-Z0-9-]+$"
_ALREADY_EXISTS = re.compile(r"^Cluster \S+ already exists\.?$")


class PclusterApiError(TrainrunError):
    """The ParallelCluster API refused a request for a reason retrying will not fix."""

    def __init__(self, message: str, *, status: int | None = None):
        self.status = status
        self.message = message
        super().__init__(f"ParallelCluster API ({status}): {message}" if status else f"ParallelCluster API: {message}")


class PclusterBadRequest(PclusterApiError):
    """400: the request or the cluster configuration is invalid (see `validation_errors`)."""

    def __init__(self, message: str, validation_errors: list[ValidationMessage] | None = None):
        self.validation_errors = validation_errors or []
        details = "; ".join(f"{e.type or 'validation'}: {e.message}" for e in self.validation_errors)
        super().__init__(f"{message} {details}" if details else message, status=400)
        self.message = message


class ClusterAlreadyExists(PclusterApiError):
    """A cluster of that name exists already: the caller describes and adopts it."""


class PclusterAccessDenied(PclusterApiError):
    """401/403: the request was not signed, or the role may not invoke the API."""


class ClusterStatus(StrEnum):
    """The spec's ClusterStatus values. Fields hold plain strings, so a new value parses too."""

    CREATE_IN_PROGRESS = "CREATE_IN_PROGRESS"
    CREATE_FAILED = "CREATE_FAILED"
    CREATE_COMPLETE = "CREATE_COMPLETE"
    DELETE_IN_PROGRESS = "DELETE_IN_PROGRESS"
    DELETE_FAILED = "DELETE_FAILED"
    DELETE_COMPLETE = "DELETE_COMPLETE"
    UPDATE_IN_PROGRESS = "UPDATE_IN_PROGRESS"
    UPDATE_COMPLETE = "UPDATE_COMPLETE"
    UPDATE_FAILED = "UPDATE_FAILED"


class _ApiModel(BaseModel):
    # Field names are the spec's own (camelCase); fields we do not use are ignored.
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class ValidationMessage(_ApiModel):
    """ConfigValidationMessage."""

    id: str | None = None
    type: str | None = None
    level: str | None = None
    message: str | None = None


class Failure(_ApiModel):
    failureCode: str | None = None
    failureReason: str | None = None


class Ec2Instance(_ApiModel):
    """EC2Instance: the head node in describeCluster."""

    instanceId: str
    instanceType: str | None = None
    launchTime: datetime | None = None
    privateIpAddress: str | None = None
    publicIpAddress: str | None = None
    state: str | None = None


class Tag(_ApiModel):
    key: str = ""
    value: str = ""


class Scheduler(_ApiModel):
    type: str


class ClusterConfigurationStructure(_ApiModel):
    url: str | None = None


class ClusterSummary(_ApiModel):
    """ClusterInfoSummary: what create, delete and list answer."""

    clusterName: str
    clusterStatus: str
    cloudformationStackStatus: str | None = None
    cloudformationStackArn: str | None = None
    region: str | None = None
    version: str | None = None
    scheduler: Scheduler | None = None


class ClusterDescription(_ApiModel):
    """DescribeClusterResponseContent."""

    clusterName: str
    clusterStatus: str
    # The spec spells it `cloudFormationStackStatus` here and `cloudformationStackStatus` in
    # ClusterInfoSummary; ParallelCluster 3.16 answers as its spec says. Either is accepted.
    cloudformationStackStatus: str | None = Field(
        default=None, validation_alias=AliasChoices("cloudFormationStackStatus", "cloudformationStackStatus")
    )
    cloudformationStackArn: str | None = None
    region: str | None = None
    version: str | None = None
    creationTime: datetime | None = None
    lastUpdatedTime: datetime | None = None
    computeFleetStatus: str | None = None
    clusterConfiguration: ClusterConfigurationStructure | None = None
    scheduler: Scheduler | None = None
    headNode: Ec2Instance | None = None
    tags: list[Tag] = Field(default_factory=list)
    # Present (one entry) only when clusterStatus is CREATE_FAILED.
    failures: list[Failure] = Field(default_factory=list)

    @field_validator("tags", "failures", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value


class StackEvent(_ApiModel):
    """StackEvent: one event of the cluster's (main) CloudFormation stack."""

    eventId: str = ""
    logicalResourceId: str = ""
    physicalResourceId: str = ""
    resourceType: str = ""
    resourceStatus: str = ""
    resourceStatusReason: str | None = None
    timestamp: datetime | None = None


class StackEventsPage(_ApiModel):
    """GetClusterStackEventsResponseContent: events newest first; `nextToken` for the older ones."""

    events: list[StackEvent] = Field(default_factory=list)
    nextToken: str | None = None

    @field_validator("events", mode="before")
    @classmethod
    def _null_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value


def root_cause(events: Iterable[StackEvent]) -> StackEvent | None:
    """The resource whose failure failed the stack's creation, among its events given newest first:
    the oldest CREATE_FAILED event that is not a cascade of another (CASCADE_REASONS)."""
    cause = None
    for event in events:
        reason = event.resourceStatusReason or ""
        if event.resourceStatus == "CREATE_FAILED" and not reason.startswith(CASCADE_REASONS):
            cause = event  # an older one, as the events come newest first
    return cause


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


class CredentialSource(Protocol):
    """What signs the requests: a boto3 Session, or the API user role's `AssumedRoleCredentials`."""

    def get_credentials(self) -> Any: ...


class AssumedRoleCredentials:
    """The ParallelCluster API user role's temporary credentials, from sts:AssumeRole.

    Assumed at the first request and kept (across a warm function's invocations too) until
    `refresh_before` ahead of their expiry, so a wait loop calling the API every few seconds
    assumes the role at most once per invocation, and usually once an hour. `sts` is a boto3 STS
    client with the function's own credentials; the role's trust policy must let them assume it.
    """

    def __init__(
        self,
        sts: Any,
        role_arn: str,
        *,
        session_name: str,
        duration_seconds: int = 3600,
        refresh_before: timedelta = timedelta(minutes=5),
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        self._sts = sts
        self.role_arn = role_arn
        # RoleSessionName: 2 to 64 characters of [\w+=,.@-].
        self._session_name = re.sub(r"[^\w+=,.@-]", "-", session_name)[:64]
        self._duration_seconds = duration_seconds
        self._refresh_before = refresh_before
        self._now = now
        self._credentials: Credentials | None = None
        self._expires: datetime | None = None

    def get_credentials(self) -> Credentials:
        if self._credentials is None or self._expires is None or self._now() >= self._expires - self._refresh_before:
            self._credentials, self._expires = self._assume()
        return self._credentials

    def _assume(self) -> tuple[Credentials, datetime]:
        try:
            answer = call(
                self._sts.assume_role,
                "AssumeRole",
                RoleArn=self.role_arn,
                RoleSessionName=self._session_name,
                DurationSeconds=self._duration_seconds,
            )
        except ClientError as exc:
            raise PclusterAccessDenied(
                f"cannot assume the ParallelCluster API user role {self.role_arn} ({error_code(exc)}): {exc}. "
                "Check the PclusterApiRoleArn parameter (the API stack's ParallelClusterApiUserRole output) "
                "and that the role's trust policy lets this account assume it."
            ) from exc
        issued = answer["Credentials"]
        expiration = issued["Expiration"]
        return (
            Credentials(issued["AccessKeyId"], issued["SecretAccessKey"], issued["SessionToken"]),
            expiration if expiration.tzinfo else expiration.replace(tzinfo=UTC),
        )


# Sends one signed request. The default is botocore's urllib3 session; tests pass a fake.
Transport = Callable[[AWSPreparedRequest], HttpResponse]


class Urllib3Transport:
    """botocore's own HTTP session (the one boto3 clients use), without its retries."""

    def __init__(self, timeout: float):
        self._session = URLLib3Session(timeout=timeout)

    def __call__(self, request: AWSPreparedRequest) -> HttpResponse:
        try:
            response = self._session.send(request)
        except (BotocoreConnectionError, HTTPClientError) as exc:
            # Connection refused or reset, timeouts, proxy and TLS failures.
            raise TransientAwsError(f"ParallelCluster API unreachable: {exc}") from exc
        return HttpResponse(status=response.status_code, body=response.content, headers=dict(response.headers))


class PclusterApi:
    """createCluster, describeCluster, updateComputeFleet, deleteCluster and getClusterStackEvents of the
    ParallelCluster API.

    `base_url` is the API stack's invoke URL, stage included
    (`https://<id>.execute-api.<region>.amazonaws.com/prod`); `region` is the region the API is
    deployed in, which signs the requests. Each call's `region` is where the cluster lives.
    `session` gives the credentials to sign with (the API user role's, on AWS).

    Each call is a subsegment of the function's trace, named for its operation: the Tracer
    records botocore's API calls by itself, but not these HTTP requests, which botocore only
    signs and urllib3 sends.
    """

    def __init__(
        self,
        base_url: str,
        *,
        session: CredentialSource,
        region: str,
        timeout: float = 30,
        transport: Transport | None = None,
    ):
        self._base_url = base_url.rstrip("/")
        self._session = session
        self._signing_region = region
        self._transport = transport or Urllib3Transport(timeout)

    @tracer.capture_method
    def create_cluster(self, name: str, config_yaml: str, *, region: str) -> ClusterSummary:
        """Start creating a cluster; ClusterAlreadyExists if the name is taken."""
        body = {"clusterName": _checked_name(name), "clusterConfiguration": config_yaml}
        response = self._send("POST", "/v3/clusters", region, body)
        if response.status == 409 or (response.status == 400 and _ALREADY_EXISTS.match(_message(response))):
            raise ClusterAlreadyExists(_message(response), status=response.status)
        return _parse(ClusterSummary, _expect(response, 202), key="cluster")

    @tracer.capture_method
    def describe_cluster(self, name: str, *, region: str) -> ClusterDescription | None:
        """The cluster as ParallelCluster sees it, or None if it does not exist (any more)."""
        response = self._send("GET", f"/v3/clusters/{quote(_checked_name(name))}", region)
        if response.status == 404:
            return None
        return _parse(ClusterDescription, _expect(response, 200))

    @tracer.capture_method
    def get_cluster_stack_events(
        self, name: str, *, region: str, next_token: str | None = None
    ) -> StackEventsPage | None:
        """One page of the cluster stack's events, newest first; None if the cluster does not exist."""
        query = {"nextToken": next_token} if next_token else {}
        path = f"/v3/clusters/{quote(_checked_name(name))}/stackevents"
        response = self._send("GET", path, region, query=query)
        if response.status == 404:
            return None
        return _parse(StackEventsPage, _expect(response, 200))

    def first_failed_resource(
        self, name: str, *, region: str, max_pages: int = MAX_STACK_EVENT_PAGES
    ) -> StackEvent | None:
        """Why the cluster's creation failed, from its stack's events (`root_cause`); None if no
        event says. Reads at most `max_pages` pages: past them, the oldest failure read is the answer."""
        return root_cause(self._stack_events(name, region, max_pages))

    def _stack_events(self, name: str, region: str, max_pages: int) -> Iterator[StackEvent]:
        token = None
        for _ in range(max_pages):
            page = self.get_cluster_stack_events(name, region=region, next_token=token)
            if page is None:
                return
            yield from page.events
            token = page.nextToken
            if not token:
                return

    @tracer.capture_method
    def stop_compute_fleet(self, name: str, *, region: str) -> str | None:
        """Ask for the cluster's compute fleet to stop (updateComputeFleet STOP_REQUESTED): its
        clustermgtd terminates the compute nodes, and jobs still running on them end. The fleet's
        status as the answer gives it; None if the cluster does not exist (any more)."""
        path = f"/v3/clusters/{quote(_checked_name(name))}/computefleet"
        response = self._send("PATCH", path, region, {"status": "STOP_REQUESTED"})
        if response.status == 404:
            return None
        if response.status == 204 and not response.body.strip():
            # The spec gives the 204 a body, which HTTP does not let a 204 carry (RFC 9110, 15.3.5).
            return "STOP_REQUESTED"
        status: str = _expect(response, 204)["status"]
        return status

    @tracer.capture_method
    def delete_cluster_instances(self, name: str, *, region: str) -> bool:
        """Terminate the cluster's compute nodes now (deleteClusterInstances): the API's own role
        calls EC2 TerminateInstances on every compute instance of the cluster before it answers 202
        (aws-parallelcluster, cluster_instances_controller.py and Cluster.terminate_nodes), so they
        stop billing at once rather than on clustermgtd's next loop or during the stack's deletion.
        Only after the fleet is stopped: with a running fleet clustermgtd would replace them.
        False if the cluster does not exist (any more)."""
        response = self._send("DELETE", f"/v3/clusters/{quote(_checked_name(name))}/instances", region)
        if response.status == 404:
            return False
        if response.status != 202:
            _expect(response, 202)  # raises the answer's typed error
        return True

    @tracer.capture_method
    def delete_cluster(self, name: str, *, region: str) -> ClusterSummary | None:
        """Start deleting a cluster (again, if it is being deleted); None if it is already gone."""
        response = self._send("DELETE", f"/v3/clusters/{quote(_checked_name(name))}", region)
        if response.status == 404:
            return None
        return _parse(ClusterSummary, _expect(response, 202), key="cluster")

    def _send(
        self,
        method: str,
        path: str,
        region: str,
        body: dict[str, Any] | None = None,
        query: Mapping[str, str] | None = None,
    ) -> HttpResponse:
        request = build_request(self._base_url, method, path, region=region, body=body, query=query)
        sign(request, self._session, self._signing_region)
        return self._transport(request.prepare())


def build_request(
    base_url: str,
    method: str,
    path: str,
    *,
    region: str,
    body: dict[str, Any] | None = None,
    query: Mapping[str, str] | None = None,
) -> AWSRequest:
    """The unsigned request: `region` (and any other `query`) as query parameters and a JSON body,
    as the spec has them."""
    headers = {"Accept": "application/json"}
    data = b""
    if body is not None:
        headers["Content-Type"] = "application/json"
        data = json.dumps(body).encode()
    url = f"{base_url.rstrip('/')}{path}?{urlencode({'region': region, **(query or {})})}"
    return AWSRequest(method=method, url=url, data=data, headers=headers)


def sign(request: AWSRequest, session: CredentialSource, region: str) -> None:
    """SigV4 for API Gateway's IAM auth, with the session's current (refreshed) credentials."""
    credentials = session.get_credentials()
    if credentials is None:
        raise PclusterApiError("no AWS credentials to sign the request with")
    SigV4Auth(credentials.get_frozen_credentials(), SIGNING_SERVICE, region).add_auth(request)


def _checked_name(name: str) -> str:
    # The name becomes a path segment; a name outside the spec's pattern must not change the path.
    if not re.fullmatch(CLUSTER_NAME, name):
        raise ValueError(f"cluster name {name!r} does not match {CLUSTER_NAME}")
    return name


def _expect(response: HttpResponse, success: int) -> dict[str, Any]:
    """The JSON body of a successful answer; any other status becomes its typed error."""
    status = response.status
    if status == success:
        document = _json(response)
        if not isinstance(document, dict):
            raise PclusterApiError(f"expected a JSON object, got {response.body[:200]!r}", status=status)
        return document
    message = _message(response)
    if status == 429 or status >= 500:
        raise TransientAwsError(f"ParallelCluster API ({status}) may succeed if retried: {message}")
    if status == 400:
        document = _json(response)
        errors = document.get("configurationValidationErrors") if isinstance(document, dict) else None
        raise PclusterBadRequest(message, [ValidationMessage.model_validate(e) for e in errors or []])
    if status in (401, 403):
        raise PclusterAccessDenied(message, status=status)
    raise PclusterApiError(message, status=status)


def _parse[M: BaseModel](model: type[M], document: dict[str, Any], *, key: str | None = None) -> M:
    try:
        return model.model_validate(document[key] if key else document)
    except (KeyError, ValidationError) as exc:
        raise PclusterApiError(f"unexpected answer: {exc}") from exc


def _json(response: HttpResponse) -> Any:
    try:
        return json.loads(response.body or b"null")
    except ValueError:
        return None


def _message(response: HttpResponse) -> str:
    """The error body's `message` (API Gateway's own errors have the same shape)."""
    document = _json(response)
    if isinstance(document, dict) and isinstance(document.get("message"), str):
        return str(document["message"])
    return response.body[:500].decode(errors="replace") or f"HTTP {response.status}"
