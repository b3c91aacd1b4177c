"""IAM enforcement on every request that reaches the local runtime's moto server.

Where it hooks (moto 5.2.5, pinned): moto authorizes a request in exactly two places, both on
`BaseResponse` (through `ActionAuthenticatorMixin`): `call_action`, which every service but S3
dispatches through once the request is parsed, and `_authenticate_and_authorize_s3_action`,
which S3's own dispatch calls for every bucket and object operation. Both are replaced here, and
a WSGI middleware around the moto server's app marks which server a request came to: a request
to a `LocalRuntime`'s server is authenticated and authorized against that runtime's principals;
any other (plain `mock_aws` in unit tests, in-process) is left to moto as before.

The middleware also makes the hook impossible to bypass silently: a request that reached moto
without passing either hook (a route that dispatches elsewhere) is answered with an error naming
it, as is an operation with no mapping in `trainrun.local.iam.operations` — so a new AWS call
without a mapping breaks the tests instead of passing unauthorized.

A denied call fails as AWS fails it: moto's own serializer writes the service's error shape
(EC2 `UnauthorizedOperation`, JSON services `AccessDeniedException`, S3 and query services
`AccessDenied`) naming the caller's session, the action and the resource, with HTTP 403. A key
this runtime did not issue gets the service's "invalid token" error, HTTP 403.
"""

from __future__ import annotations

import json
import re
import threading
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moto.core.responses import BaseResponse

from trainrun.local.iam import calls
from trainrun.local.iam.calls import CallRecord
from trainrun.local.iam.operations import Call, UnmappedOperation, describe
from trainrun.local.iam.policy import Decision, Request, resource_policy_denial
from trainrun.local.iam.principals import Principal, Principals

_CREDENTIAL = re.compile(r"Credential=([A-Z0-9]+)/")
# What the services answer for a key they do not know (HTTP 403), by protocol.
_INVALID_KEY = {
    "ec2": ("AuthFailure", "AWS was not able to validate the provided access credentials"),
    "query": ("InvalidClientTokenId", "The security token included in the request is invalid."),
    "json": ("UnrecognizedClientException", "The security token included in the request is invalid."),
    "rest-json": ("UnrecognizedClientException", "The security token included in the request is invalid."),
    "smithy-rpc-v2-cbor": ("UnrecognizedClientException", "The security token included in the request is invalid."),
    "rest-xml": ("InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."),
}
# IAM's prefix where it differs from the service's signing name.
_IAM_PREFIXES = {"monitoring": "cloudwatch", "tagging": "tag"}
_DENIED_CODE = {
    "ec2": "UnauthorizedOperation",
    "query": "AccessDenied",
    "rest-xml": "AccessDenied",
    "json": "AccessDeniedException",
    "rest-json": "AccessDeniedException",
    "smithy-rpc-v2-cbor": "AccessDeniedException",
}


class _ServiceError(Exception):
    """An error moto's serializer writes in the service's own shape."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class Enforcer:
    """The principals of one runtime, the decisions on their calls, and where they are written."""

    def __init__(self, principals: Principals, log_path: Path):
        self.principals = principals
        self.log_path = log_path
        self.calls: list[CallRecord] = []
        # Operations that reached moto with no mapping, or routes that passed no hook.
        self.unmapped: list[str] = []
        # The stack the calls are made in, written with each record (set once it is deployed).
        self.stack = ""
        self._lock = threading.Lock()

    def record(self, records: Iterable[CallRecord]) -> None:
        records = list(records)
        with self._lock:
            self.calls.extend(records)
            calls.append(self.log_path, records)

    def authorize(self, principal: Principal, call: Call) -> Decision | None:
        """Every request of the call, evaluated; the first denial (None when all are allowed).
        An S3 call is also refused by an explicit Deny in its bucket's policy."""
        if principal.admin:
            return None
        operation = f"{call.service}:{call.operation}"
        requests = describe(call)
        denial = self.decide(principal, operation, call.region, requests)
        if denial is None and call.service == "s3":
            denial = self._bucket_policy_denial(principal, operation, call.region, requests)
        return denial

    def _bucket_policy_denial(
        self, principal: Principal, operation: str, region: str, requests: list[Request]
    ) -> Decision | None:
        """S3 evaluates the bucket's policy with the caller's identity policies (Amazon S3 User
        Guide, "How Amazon S3 authorizes a request"): its explicit Deny refuses the call, recorded
        like an identity policy's."""
        for request in requests:
            if not request.resources:  # ListBuckets: no bucket
                continue
            bucket = request.resources[0].arn.removeprefix("arn:aws:s3:::").split("/", 1)[0]
            document = _bucket_policy(bucket)
            denial = resource_policy_denial(document, principal.arn, request) if document else None
            if denial is not None:
                reason = f"{denial.reason} (the policy of bucket {bucket})"
                self.record([self._call(principal, operation, region, request, allowed=False, reason=reason)])
                return denial
        return None

    def decide(self, principal: Principal, operation: str, region: str, requests: list[Request]) -> Decision | None:
        """Each request, evaluated and recorded as made by `operation`; the first denial (None when
        all are allowed). Also for what a service asks IAM on the caller's behalf with no call of
        its own to moto (CloudFormation creating a stack's resources as the caller)."""
        if principal.admin:
            return None
        if principal.context:
            requests = [Request(r.action, r.resources, {**principal.context, **r.context}) for r in requests]
        decisions = [(request, _evaluate(principal, request)) for request in requests]
        self.record(
            self._call(principal, operation, region, request, allowed=decision.allowed, reason=decision.reason)
            for request, decision in decisions
        )
        return next((decision for _, decision in decisions if not decision.allowed), None)

    def _call(
        self, principal: Principal, operation: str, region: str, request: Request, *, allowed: bool, reason: str
    ) -> CallRecord:
        """One request as the enforcer records it, whichever policy decided it."""
        return CallRecord(
            principal=principal.name,
            principal_arn=principal.arn,
            operation=operation,
            request=request,
            allowed=allowed,
            reason=reason,
            stack=self.stack,
            region=region,
        )


def _bucket_policy(bucket: str) -> dict[str, Any] | None:
    from moto.s3.models import s3_backends

    located = s3_backends.bucket_accounts.get(bucket)
    if located is None:
        return None
    partition, account = located
    found = s3_backends[account][partition].buckets.get(bucket)
    return json.loads(found.policy) if found is not None and found.policy else None


def _evaluate(principal: Principal, request: Request) -> Decision:
    if principal.policies is None:
        resource = request.resources[0].arn if request.resources else "*"
        return Decision(False, request.action, resource, "no identity-based policy (the role is unknown here)")
    return principal.policies.evaluate(request)


# --- which server a request came to ---------------------------------------------------------------
@dataclass
class _RequestState:
    enforcer: Enforcer
    checked: bool = False
    denied: bool = False
    principal: Principal | None = None  # who signed the request, once authenticated


_current = threading.local()
_state_lock = threading.Lock()


def _state() -> _RequestState | None:
    return getattr(_current, "state", None)


def current_caller() -> Principal | None:
    """Who signed the request this thread is answering (None outside an enforcing server): what a
    service that names things after its caller needs, e.g. Session Manager's session ids."""
    state = _state()
    return state.principal if state is not None else None


class EnforcingApp:
    """WSGI middleware: the request is this runtime's to authorize; its status becomes 403 when
    denied; a request that passed no authorization hook is refused after the fact."""

    def __init__(self, app: Callable[..., Any], enforcer: Enforcer):
        self._app = app
        self._enforcer = enforcer

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        state = _RequestState(self._enforcer)
        _current.state = state
        captured: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[..., Any]:
            captured["status"], captured["headers"] = status, headers
            return lambda data: None

        try:
            body = b"".join(self._app(environ, capture))
        finally:
            _current.state = None
        if not state.checked and not _exempt(environ):
            route = f"{environ.get('REQUEST_METHOD')} {environ.get('PATH_INFO')}"
            self._enforcer.unmapped.append(route)
            message = f"trainrun local IAM: {route} reached moto without authorization; hook its service"
            start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
            return [message.encode()]
        status = "403 Forbidden" if state.denied else captured["status"]
        headers = [(k, v) for k, v in captured["headers"] if k.lower() != "content-length"]
        headers.append(("Content-Length", str(len(body))))
        start_response(status, headers)
        return [body]


def _exempt(environ: dict[str, Any]) -> bool:
    # moto's own dashboard and reset API; nothing in trainrun calls them, AWS has no such thing.
    return str(environ.get("PATH_INFO", "")).startswith("/moto-api")


# --- the hooks --------------------------------------------------------------------------------------
def _access_key(response: BaseResponse) -> str | None:
    header = response.headers.get("Authorization") or ""
    match = _CREDENTIAL.search(header)
    if match:
        return match.group(1)
    credential = response.querystring.get("X-Amz-Credential")
    if credential:
        value = credential[0] if isinstance(credential, list) else credential
        return str(value).split("/", 1)[0]
    return None


def _protocol(response: BaseResponse) -> str:
    from moto.core.utils import get_service_model

    return str(get_service_model(response.boto3_service_name).protocol)


def _check(response: BaseResponse, state: _RequestState, call_of: Callable[[], Call]) -> _ServiceError | None:
    """Authenticate and authorize the request; the error to answer with, if any."""
    state.checked = True
    protocol = _protocol(response)
    key = _access_key(response)
    principal = state.principal = state.enforcer.principals.lookup(key) if key else None
    if principal is None:
        code, message = _INVALID_KEY.get(protocol, _INVALID_KEY["query"])
        state.denied = True
        return _ServiceError(code, message)
    try:
        call = call_of()
        denial = state.enforcer.authorize(principal, call)
    except UnmappedOperation as exc:
        state.enforcer.unmapped.append(str(exc.operation))
        return _ServiceError("LocalIamUnmappedOperation", str(exc))
    except Exception as exc:  # a mapper that cannot read the request: refused, never let through
        operation = f"{response.service_name}:{response._get_action()}"
        state.enforcer.unmapped.append(operation)
        return _ServiceError("LocalIamUnmappedOperation", f"trainrun local IAM: mapping {operation} failed: {exc!r}")
    if denial is None:
        return None
    state.denied = True
    return _ServiceError(_DENIED_CODE.get(protocol, "AccessDenied"), _denial_message(principal, denial, protocol))


def _denial_message(principal: Principal, denial: Decision, protocol: str) -> str:
    # AWS's wording: which kind of policy made the decision ends the message.
    if denial.reason.startswith("explicit deny in a resource-based policy"):
        why = "with an explicit deny in a resource-based policy"
    elif denial.reason.startswith("explicit deny"):
        why = "with an explicit deny in an identity-based policy"
    else:
        why = f"because no identity-based policy allows the {denial.action} action"
    message = (
        f"User: {principal.arn} is not authorized to perform: {denial.action} on resource: {denial.resource} {why}"
    )
    # EC2 puts its own sentence first (its encoded authorization message is left out here).
    return f"You are not authorized to perform this operation. {message}" if protocol == "ec2" else message


_original_call_action = BaseResponse.call_action
_original_s3_auth = BaseResponse._authenticate_and_authorize_s3_action


def _call_action(self: BaseResponse) -> Any:
    state = _state()
    if state is None or self.service_name == "s3":
        return _original_call_action(self)
    error = _check(self, state, lambda: _call_of(self))
    if error is None:
        return _original_call_action(self)
    from moto.core.responses import ActionResult

    with warnings.catch_warnings():
        # moto warns that an error code is not in the service's model (EC2's never are).
        warnings.simplefilter("ignore")
        _, headers, body = self.serialized(ActionResult(error))
    return 403 if error.code != "LocalIamUnmappedOperation" else 400, headers, body


def _s3_auth(self: BaseResponse, bucket_name: str | None = None, key_name: str | None = None) -> None:
    state = _state()
    if state is None:
        return _original_s3_auth(self, bucket_name, key_name)
    error = _check(self, state, lambda: _s3_call_of(self, bucket_name, key_name))
    if error is not None:
        from moto.s3.exceptions import S3ClientError

        raise S3ClientError(error.code, error.message)
    return None


def _call_of(response: BaseResponse) -> Call:
    from moto.core.parse import PROTOCOL_PARSERS
    from moto.core.request import determine_request_protocol
    from moto.core.utils import get_service_model

    service_model = get_service_model(response.boto3_service_name)
    request = response.normalized_request
    # REST services: the operation is the route the request matches (some moto responses name
    # their actions otherwise, e.g. X-Ray's "TraceSegments").
    operation = (
        response._get_action_from_method_and_request_uri(request)
        if service_model.protocol in ("rest-json", "rest-xml")
        else response._get_action()
    )
    protocol = determine_request_protocol(service_model, request.content_type)
    parser = PROTOCOL_PARSERS[protocol](service_model.operation_model(operation), map_type=dict)
    params = parser.parse(
        {
            "method": request.method,
            "values": request.values,
            "headers": request.headers,
            "body": request.data,
            "url_path": request.path,
            "url_params": response.uri_match,
        }
    )
    return Call(
        service=_IAM_PREFIXES.get(str(service_model.signing_name), str(service_model.signing_name)),
        operation=operation,
        params=dict(params),
        region=response.region,
        account=response.current_account,
    )


def _s3_call_of(response: BaseResponse, bucket: str | None, key: str | None) -> Call:
    from moto.core.routing import get_service_router

    request = response.normalized_request
    operation, _ = get_service_router("s3").match(request)
    params: dict[str, Any] = {"Bucket": bucket, "Key": key}
    for name, query in (("VersionId", "versionId"), ("Prefix", "prefix")):
        if query in request.args:
            params[name] = request.args[query]
    copy_source = request.headers.get("x-amz-copy-source")
    if copy_source:
        params["CopySource"] = copy_source
    if operation.name == "DeleteObjects":
        params["Keys"] = re.findall(r"<Key>([^<]+)</Key>", request.data.decode() if request.data else "")
    return Call(
        service="s3",
        operation=str(operation.name),
        params=params,
        region=response.region,
        account=response.current_account,
    )


def install() -> None:
    """Replace moto's two authorization entry points (idempotent; inert outside a runtime's server)."""
    BaseResponse.call_action = _call_action  # type: ignore[method-assign]
    BaseResponse._authenticate_and_authorize_s3_action = _s3_auth  # type: ignore[method-assign,assignment]
