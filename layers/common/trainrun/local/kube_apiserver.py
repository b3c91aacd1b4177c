"""A local Kubernetes API server for one EKS cluster: narrow, strict, in memory, on loopback.

No kube-apiserver runs on a machine without containers, so the local runtime stands this in for
the API of an EKS cluster that trainrun.local.eks_emulator created. It serves only the calls
trainrun makes, refuses what a real API server (and EKS's authenticator in front of it) refuses
on the points that bite, and says below what it does not check.

What it serves (standard URL layout, JSON answers, YAML or JSON bodies):
- core/v1 Namespaces, PersistentVolumes and Nodes, rbac.authorization.k8s.io/v1 ClusterRoles and
  ClusterRoleBindings (cluster-scoped; what the device plugins' Helm charts render beside their
  DaemonSets); Services, PersistentVolumeClaims, ServiceAccounts and Pods (namespaced); apps/v1
  DaemonSets; batch/v1 Jobs. Pods and Nodes are read, listed and deleted only: Jobs create Pods
  and node groups Nodes (trainrun.local.kube_cluster), not clients.
- GET one object, GET a list (`labelSelector`: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (..)`,
  `k notin (..)`), and a list across namespaces (`/api/v1/pods`, `/apis/batch/v1/jobs`, ...).
- Server-side apply: PATCH with Content-Type `application/apply-patch+yaml`, `fieldManager`
  required, `force` honoured; create or update. Ownership is tracked per object and manager, not
  per field: a second manager changing a value another manager set is a 409 Conflict unless
  `force=true`. An apply that changes nothing bumps no resourceVersion.
- DELETE, its options from the query or from a DeleteOptions body (propagationPolicy: Foreground,
  Background, Orphan; dryRun; gracePeriodSeconds): an object with dependents deleted Foreground
  stays, with deletionTimestamp and the foregroundDeletion finalizer, until they are gone (202);
  Orphan strips their ownerReferences; a bound, unfinished Pod stays for its grace period until its
  kubelet has ended it; a Job without propagationPolicy orphans its pods, with the API server's
  Warning header (see `_mark_deleted`). A Namespace takes its objects with it at once (a real one
  is Terminating first).
- `dryRun=All` on apply and delete: checked in full, stored nowhere.
- Answers carry metadata.uid, resourceVersion, creationTimestamp, generation and managedFields
  (manager, operation Apply, apiVersion, time: no fieldsV1). Errors are Kubernetes' Status.
  The namespaces default, kube-system, kube-public and kube-node-lease exist from the start.

Validation, in the API server's order: authentication (401), authorization (403), the object
matching its URL (400), the namespace existing (404), then the object's validity (422, every
cause at once, each with its field):
- Schemas: every applied object against Kubernetes' own OpenAPI schema of its kind, strict
  (unknown fields refused), as the `kubernetes-validate` package (1.37.0) bundles them, for
  Kubernetes 1.35: the version trainrun.logic.eks_versions pins (`DEFAULT_KUBERNETES_VERSION`);
  the package bundles 1.25 to 1.37, so 1.35 is there exactly (`SCHEMA_VERSION`). A real API
  server answers an unknown field in an apply with "failed to create typed patch object ...:
  field not declared in schema" and, as of 1.35, code 500 (kubernetes/kubernetes issues #122480
  and #139253); here it is a 422 Invalid naming the field, with the same words.
- Names: DNS-1123 subdomains (at most 253 characters); Namespaces DNS-1123 labels (at most 63);
  Services RFC 1035 labels (a letter first); Jobs at most 63 characters, as their name becomes
  the `job-name` label (Kubernetes docs, "Object Names and IDs"; "Jobs", "Writing a Job spec").
  Container names are DNS-1123 labels (Pod API reference, Container `name`).
- Labels: keys an optional DNS-1123 subdomain prefix and `/`, and a name of at most 63
  characters of alphanumerics, `-`, `_`, `.`, alphanumeric at both ends; values the same
  characters, at most 63, or empty (Kubernetes docs, "Labels and Selectors", "Syntax and
  character set"). On objects, pod templates and selectors' matchLabels.
- Jobs: the pod template's restartPolicy is Never or OnFailure; none given is refused too, as it
  defaults to Always ("Only a RestartPolicy equal to Never or OnFailure is allowed": Kubernetes
  docs, "Jobs", "Pod Template"). completionMode Indexed requires `completions`, and parallelism
  at most 10^5 ("When value is `Indexed`, .spec.completions must be specified and
  `.spec.parallelism` must be less than or equal to 10^5": Job API reference, completionMode).
  spec.template, spec.selector and spec.completionMode are immutable (an apply changing them is
  a 422: "field is immutable"; Job API reference and "Jobs"). A selector given must match the
  template's labels.
- DaemonSets: spec.selector must match the template's labels and is immutable; the template's
  restartPolicy, if given, is Always (Kubernetes docs, "DaemonSet", "Pod Selector", "Pod Template").
- PersistentVolumeClaims: spec is immutable after creation except resources.requests and
  volumeAttributesClassName (Kubernetes docs, "Persistent Volumes", "Expanding Persistent Volumes
  Claims").
- Resources (containers and init containers of Pods and of templates): quantities parse as
  Kubernetes quantities (Kubernetes docs, "Resource Management for Pods and Containers", and the
  Quantity API reference: `<signedNumber><suffix>`); extended resources - a name with a `/`
  outside `kubernetes.io` and `*.kubernetes.io`, as `aws.amazon.com/neuron`,
  `aws.amazon.com/neuroncore` and `vpc.amazonaws.com/efa` - are whole numbers, a request equals
  its limit when both are given, a request without a limit is refused, and a limit alone sets the
  request ("Extended resources cannot be overcommitted, so request and limit must be equal if both
  are present", "only supported as integer resources", "Resource Management for Pods and
  Containers", "Extended resources"; "If you specify a limit for a resource, but do not specify
  any request ... Kubernetes copies the limit you specified and uses it as the requested value",
  same page). A request is also at most its limit for every resource.
- The object's apiVersion and kind are the URL's (a 400 BadRequest, as the API server's "the API
  version in the data (...) does not match the expected API version (...)"), so are its name and
  namespace; a namespaced object needs its namespace to exist (404 NotFound, as the
  NamespaceLifecycle admission plugin answers).

Authentication, as EKS does it (aws-iam-authenticator, pkg/token/token.go, whose verifier EKS
runs; the AWS CLI's `aws eks get-token`, awscli/customizations/eks/get_token.py, makes the same
token): `Authorization: Bearer k8s-aws-v1.<base64url, no padding, of a presigned STS URL>`, at
most 4 KiB; the URL `https://sts[.<region>].amazonaws.com/` with only the whitelisted query
parameters, each once: Action=GetCallerIdentity, Version=2011-06-15 and the X-Amz-* presigning
ones; `x-k8s-aws-id` among the signed headers; X-Amz-Expires at most 60 (what every client
sends: the authenticator's verifier admits up to 900 since it ignores the value, so this is
stricter); not expired: X-Amz-Date plus 15 minutes ("presigned STS urls are valid for 15 minutes
after timestamp in x-amz-date", token.go). STS's own check is then done here instead of calling
STS: the SigV4 signature is recomputed with the access key's secret from moto (an assumed-role
session from `moto.sts.models.sts_backends`, whose session token must be the URL's
X-Amz-Security-Token and which must not have expired; or an IAM user's active key from
`moto.iam.models.iam_backends`), with `x-k8s-aws-id` set to this cluster's name, as the
authenticator sets it when it forwards the URL: a token signed for another cluster does not
verify. An assumed-role session maps to its role's ARN (the authenticator's canonical ARN), a
user to the user's. Every failure is 401 Unauthorized.

Authorization, as EKS access entries do it (Amazon EKS User Guide, "Grant IAM users access to
Kubernetes with EKS access entries"; "Review access policy permissions"): the principal needs an
access entry - none is a 401, as EKS answers a principal it cannot map ("You must be logged in
to the server (Unauthorized)": AWS re:Post Knowledge Center, "eks-troubleshoot-iam-issues") -
and an associated access policy allowing the verb (get, list; create or patch for an apply, as
RBAC asks of server-side apply; delete). Access policies, cluster-scoped (`POLICY_PERMISSIONS`;
the User Guide page above, which says they are like Kubernetes' user-facing ClusterRoles:
Kubernetes docs, "Using RBAC Authorization", "User-facing roles"):
- AmazonEKSClusterAdminPolicy (cluster-admin): everything.
- AmazonEKSAdminPolicy (admin) and AmazonEKSEditPolicy (edit): every verb on the namespaced
  kinds here; Namespaces get and list only; PersistentVolumes, Nodes, ClusterRoles and
  ClusterRoleBindings nothing.
- AmazonEKSViewPolicy (view): get and list on the namespaced kinds and Namespaces only.
A denial is 403 Forbidden with the API server's message.

What only a real API server checks (not here):
- admission webhooks, ValidatingAdmissionPolicies, Pod Security admission, LimitRanges and
  ResourceQuotas, and defaulting (beyond a limit setting its request; no selectors, clusterIPs,
  job-name labels or controller-uids are generated);
- scheduling, controllers and kubelets: trainrun.local.kube_cluster plays them, through this
  server's in-process side (`objects`, `read`, `create`, `update`, `delete`, `remove`, listeners);
  no Service gets endpoints or a clusterIP;
- RBAC beyond the EKS access policies above (Kubernetes groups of access entries, Roles and
  bindings), namespace-scoped access policy associations, impersonation;
- per-field ownership of server-side apply (ownership here is per object and manager), strategic
  merge of lists by key, `fieldValidation`, and every other verb (create, update, merge or JSON
  patch, watch, deletecollection), subresource (status, log, exec, scale) and resource kind;
- validation rules outside the list above (for instance ports, probes, volumes and affinity
  beyond their schemas, immutable fields of other kinds, Service type rules);
- principals of other accounts, token caching, and STS itself (the signature is checked here).

Tests of the contract: tests/integration/test_kube_apiserver.py.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import jsonschema
import yaml
from kubernetes_validate.utils import schema_contents
from referencing import Registry, Resource
from werkzeug.wrappers import Request, Response

from trainrun.local.loopback_server import LoopbackServer

__all__ = ["POLICY_PERMISSIONS", "SCHEMA_VERSION", "AccessPolicies", "LocalKubeApiServer", "quantity"]

# The schemas of kubernetes-validate 1.37.0 for trainrun.logic.eks_versions' DEFAULT_KUBERNETES_VERSION.
SCHEMA_VERSION = "1.35"
_SCHEMA_DIR = f"kubernetes-json-schema/v{SCHEMA_VERSION}.0-local-strict"

# principal ARN -> the ARNs (or names) of the access policies associated with its access entry;
# None (or absent from a mapping): no access entry.
AccessPolicies = Callable[[str], Iterable[str] | None] | Mapping[str, Iterable[str]]

_READ = frozenset({"get", "list"})
_ALL = frozenset({"get", "list", "create", "patch", "delete"})
# Access policy -> (verbs on the namespaced kinds, verbs per cluster-scoped plural): Amazon EKS User
# Guide, "Review access policy permissions", and the Kubernetes ClusterRoles it likens them to.
POLICY_PERMISSIONS: dict[str, tuple[frozenset[str], dict[str, frozenset[str]]]] = {
    "AmazonEKSClusterAdminPolicy": (
        _ALL,
        {
            "namespaces": _ALL,
            "persistentvolumes": _ALL,
            "nodes": _ALL,
            "clusterroles": _ALL,
            "clusterrolebindings": _ALL,
        },
    ),
    "AmazonEKSAdminPolicy": (_ALL, {"namespaces": _READ}),
    "AmazonEKSEditPolicy": (_ALL, {"namespaces": _READ}),
    "AmazonEKSViewPolicy": (_READ, {"namespaces": _READ}),
}


@dataclass(frozen=True)
class _Kind:
    group: str  # "" is the core group
    version: str
    kind: str
    plural: str
    namespaced: bool
    appliable: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """What the API server's messages name a resource by: `jobs.batch`, `services`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


_KINDS = [
    _Kind("", "v1", "Namespace", "namespaces", namespaced=False),
    _Kind("", "v1", "PersistentVolume", "persistentvolumes", namespaced=False),
    _Kind("", "v1", "Node", "nodes", namespaced=False, appliable=False),
    _Kind("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False),
    _Kind("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False),
    _Kind("", "v1", "Service", "services", namespaced=True),
    _Kind("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", namespaced=True),
    _Kind("", "v1", "ServiceAccount", "serviceaccounts", namespaced=True),
    _Kind("", "v1", "Pod", "pods", namespaced=True, appliable=False),
    _Kind("apps", "v1", "DaemonSet", "daemonsets", namespaced=True),
    _Kind("batch", "v1", "Job", "jobs", namespaced=True),
]
_BY_ROUTE = {(k.group, k.version, k.plural): k for k in _KINDS}
_INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# The NamespaceLifecycle admission plugin refuses deleting these (Kubernetes docs, "Admission Control").
_UNDELETABLE_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})

# --- Kubernetes' name, label and quantity syntax ("Object Names and IDs", "Labels and Selectors") ---
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_RE = re.compile(rf"^{_DNS1123_LABEL}$")
_DNS1123_SUBDOMAIN_RE = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_DNS1035_LABEL_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_QUANTITY_RE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_SUFFIXES = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    **{f"{p}i": Decimal(2) ** (10 * (i + 1)) for i, p in enumerate("KMGTPE")},
}
_MAX_INDEXED_PARALLELISM = 10**5

# --- EKS tokens (aws-iam-authenticator, pkg/token/token.go) -------------------------------------------
_TOKEN_PREFIX = "k8s-aws-v1."  # noqa: S105 - the token format's prefix, not a secret
_MAX_TOKEN_BYTES = 4096
_TOKEN_LIFETIME = timedelta(minutes=15)
_MAX_EXPIRES = 60
# STS refuses a request signed too far in its future ("Signature not yet current").
_CLOCK_SKEW = timedelta(minutes=5)
_CLUSTER_ID_HEADER = "x-k8s-aws-id"
_STS_HOST_RE = re.compile(r"^sts(?:\.(?P<region>[a-z]{2}(?:-[a-z]+)+-[0-9]))?\.amazonaws\.com$")
_TOKEN_PARAMETERS = frozenset(
    {
        "action",
        "version",
        "x-amz-algorithm",
        "x-amz-credential",
        "x-amz-date",
        "x-amz-expires",
        "x-amz-security-token",
        "x-amz-signature",
        "x-amz-signedheaders",
    }
)
# botocore presigns with an unsigned payload, the Go SDK with the empty body's hash: STS takes both.
_PAYLOAD_HASHES = ("UNSIGNED-PAYLOAD", hashlib.sha256(b"").hexdigest())
_APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
FOREGROUND_FINALIZER = "foregroundDeletion"
# A Pod's terminationGracePeriodSeconds when its spec has none (Pod API reference).
DEFAULT_GRACE_SECONDS = 30
_JOB_ORPHAN_WARNING = (
    "child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them "
    "or set propagationPolicy=Orphan to suppress this warning"
)


class _ApiError(Exception):
    """An answer in Kubernetes' Status shape."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _unauthorized(why: str) -> _ApiError:
    return _ApiError(401, "Unauthorized", f"Unauthorized: {why}")


def _not_found(kind: _Kind, name: str) -> _ApiError:
    return _ApiError(
        404,
        "NotFound",
        f'{kind.qualified} "{name}" not found',
        details={"name": name, "group": kind.group, "kind": kind.plural},
    )


def _bad_request(message: str) -> _ApiError:
    return _ApiError(400, "BadRequest", message)


def _invalid(kind: _Kind, name: str, causes: list[tuple[str, str]]) -> _ApiError:
    summary = ", ".join(f"{field}: {message}" for field, message in causes)
    return _ApiError(
        422,
        "Invalid",
        f'{kind.kind} "{name}" is invalid: [{summary}]',
        details={
            "name": name,
            "group": kind.group,
            "kind": kind.kind,
            "causes": [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in causes],
        },
    )


@dataclass(frozen=True)
class _Route:
    kind: _Kind
    namespace: str | None  # None: cluster-scoped, or a list across namespaces
    name: str | None  # None: the collection


class LocalKubeApiServer:
    """The Kubernetes API of one EKS cluster on loopback, one thread; objects in memory, per instance."""

    def __init__(
        self,
        cluster_name: str,
        region: str,
        account: str,
        access_policies: AccessPolicies,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        """`access_policies` answers which access policies a principal ARN has on this cluster
        (the local runtime: the EKS emulator's access entries; tests: a dict)."""
        self.cluster_name = cluster_name
        self.region = region
        self.account = account
        self._access_policies = access_policies
        self._clock = clock
        self._lock = threading.RLock()
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._resource_version = 0
        self._http = LoopbackServer(self.wsgi_app, what="Kubernetes API server", host=host, port=port)
        # Called after every change of the stored objects (the cluster's controllers watch through it).
        self._listeners: list[Callable[[], None]] = []
        for name in _INITIAL_NAMESPACES:
            self._store(_BY_ROUTE[("", "v1", "namespaces")], "", self._fresh({"metadata": {"name": name}}, None))

    # --- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> LocalKubeApiServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._http.start()

    def stop(self) -> None:
        self._http.stop()

    @property
    def url(self) -> str:
        return self._http.url

    # --- HTTP --------------------------------------------------------------------------------------
    def wsgi_app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        request = Request(environ)
        headers: dict[str, str] = {}
        try:
            status, body = self._handle(request, headers)
        except _ApiError as error:
            status, body = error.code, error.status()
        if request.method != "GET" and status < 300:
            self._notify()
        response = Response(json.dumps(body), status=status, mimetype="application/json", headers=headers)
        return response(environ, start_response)

    def _handle(self, request: Request, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        principal = self._authenticate(request.headers.get("Authorization", ""))
        policies = self._policies_of(principal)
        route = _route(request.path)
        method = request.method
        if method == "GET":
            if route.name is None:
                self._authorize(principal, policies, "list", route)
                return 200, self._list(route, request.args.get("labelSelector", ""))
            self._authorize(principal, policies, "get", route)
            return 200, self._get(route)
        if route.name is None:
            raise _ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if method == "PATCH":
            if not route.kind.appliable:
                raise _ApiError(
                    405, "MethodNotAllowed", f"{route.kind.plural} are created by their controllers, not applied"
                )
            verb = "patch" if self._exists(route) else "create"
            self._authorize(principal, policies, verb, route)
            return self._apply(route, request, _dry_run(request.args.getlist("dryRun")))
        if method == "DELETE":
            self._authorize(principal, policies, "delete", route)
            options = _delete_options(request)
            if route.kind.kind == "Job" and options.propagation is None:
                # batch/v1 Jobs orphan their pods by default, and the API server says so (the warning
                # kubectl prints): Kubernetes docs, "Jobs", "Job termination and cleanup".
                headers["Warning"] = f'299 - "{_JOB_ORPHAN_WARNING}"'
            return self._delete(route, options)
        raise _ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    # --- authentication and authorization ---------------------------------------------------------
    def _authenticate(self, authorization: str) -> str:
        """The principal ARN of a valid EKS token for this cluster (aws-iam-authenticator's checks)."""
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthorized("no bearer token")
        token = token.strip()
        if len(token) > _MAX_TOKEN_BYTES:
            raise _unauthorized("token is too large")
        if not token.startswith(_TOKEN_PREFIX):
            raise _unauthorized(f"token is missing expected {_TOKEN_PREFIX!r} prefix")
        encoded = token.removeprefix(_TOKEN_PREFIX)
        try:
            if "=" in encoded:  # RawURLEncoding: unpadded
                raise ValueError("padded")
            url = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
        except (ValueError, UnicodeDecodeError):
            raise _unauthorized("token is not base64url of a URL") from None
        parts = urlsplit(url)
        host = _STS_HOST_RE.match(parts.netloc)
        if parts.scheme != "https" or host is None or parts.path != "/":
            raise _unauthorized("token is not a presigned STS URL")
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        params = {key.lower(): value for key, value in pairs}
        if len(params) != len(pairs) or not set(params) <= _TOKEN_PARAMETERS:
            raise _unauthorized("unexpected or repeated query parameters in pre-signed URL")
        if params.get("action") != "GetCallerIdentity" or params.get("version") != "2011-06-15":
            raise _unauthorized("unexpected action parameter in pre-signed URL")
        signed_headers = params.get("x-amz-signedheaders", "").lower().split(";")
        if _CLUSTER_ID_HEADER not in signed_headers:
            raise _unauthorized(f"client did not sign the {_CLUSTER_ID_HEADER} header in the pre-signed URL")
        if not set(signed_headers) <= {"host", _CLUSTER_ID_HEADER}:
            raise _unauthorized("headers signed that a token cannot carry")
        expires = params.get("x-amz-expires", "")
        if not expires.isdigit() or int(expires) > _MAX_EXPIRES:
            raise _unauthorized(f"invalid X-Amz-Expires parameter in pre-signed URL: {expires}")
        try:
            signed_at = datetime.strptime(params.get("x-amz-date", ""), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        except ValueError:
            raise _unauthorized("X-Amz-Date parameter must be present in pre-signed URL") from None
        now = self._clock()
        if now > signed_at + _TOKEN_LIFETIME:
            raise _unauthorized("X-Amz-Date parameter is expired (15 minute expiration)")
        if signed_at > now + _CLOCK_SKEW:
            raise _unauthorized("X-Amz-Date parameter is in the future")
        credential = params.get("x-amz-credential", "").split("/")
        sts_region = host["region"] or "us-east-1"
        if (
            params.get("x-amz-algorithm") != "AWS4-HMAC-SHA256"
            or len(credential) != 5
            or credential[1:] != [signed_at.strftime("%Y%m%d"), sts_region, "sts", "aws4_request"]
        ):
            raise _unauthorized("malformed credential scope in pre-signed URL")
        principal, secret = self._credentials(credential[0], params.get("x-amz-security-token"))
        headers = {"host": parts.netloc, _CLUSTER_ID_HEADER: self.cluster_name}
        canonical_query = "&".join(
            f"{_uri_encode(key)}={_uri_encode(value)}" for key, value in sorted(pairs) if key != "X-Amz-Signature"
        )
        canonical_headers = "".join(f"{name}:{headers[name]}\n" for name in signed_headers)
        scope = "/".join(credential[1:])
        signing_key = _signing_key(secret, credential[1], sts_region)
        expected = [
            hmac.new(
                signing_key,
                "\n".join(
                    [
                        "AWS4-HMAC-SHA256",
                        params["x-amz-date"],
                        scope,
                        hashlib.sha256(
                            "\n".join(
                                ["GET", "/", canonical_query, canonical_headers, ";".join(signed_headers), payload]
                            ).encode()
                        ).hexdigest(),
                    ]
                ).encode(),
                hashlib.sha256,
            ).hexdigest()
            for payload in _PAYLOAD_HASHES
        ]
        if not any(hmac.compare_digest(signature, params.get("x-amz-signature", "")) for signature in expected):
            raise _unauthorized(
                f"the signature does not match (signed with another secret, or for another cluster than "
                f"{self.cluster_name})"
            )
        return principal

    def _credentials(self, access_key: str, session_token: str | None) -> tuple[str, str]:
        """The principal and secret behind an access key, as moto's STS and IAM know them."""
        from moto.iam.models import iam_backends
        from moto.sts.models import sts_backends

        session = sts_backends[self.account]["aws"].get_assumed_role_from_access_key(access_key)
        if session is not None:
            if session.session_token != session_token:
                raise _unauthorized("the security token included in the request is invalid")
            if session.expiration <= self._clock().astimezone(UTC).replace(tzinfo=None):
                raise _unauthorized("the security token included in the request is expired")
            return session.role_arn, session.secret_access_key
        iam = iam_backends[self.account]["aws"]
        key = iam.access_keys.get(access_key)
        user = iam.get_user_from_access_key_id(access_key)
        if key is None or user is None or key.status != "Active":
            raise _unauthorized("the access key ID does not exist in our records")
        return user.arn, key.secret_access_key

    def _policies_of(self, principal: str) -> frozenset[str]:
        """The principal's access policies by name; 401 without an access entry (EKS cannot map it)."""
        if isinstance(self._access_policies, Mapping):
            policies = self._access_policies.get(principal)
        else:
            policies = self._access_policies(principal)
        if policies is None:
            raise _unauthorized(f"{principal} has no access entry on cluster {self.cluster_name}")
        return frozenset(policy.rsplit("/", 1)[-1] for policy in policies)

    def _authorize(self, principal: str, policies: frozenset[str], verb: str, route: _Route) -> None:
        kind = route.kind
        for policy in policies:
            namespaced, cluster_scoped = POLICY_PERMISSIONS.get(policy, (frozenset(), {}))
            allowed = namespaced if kind.namespaced else cluster_scoped.get(kind.plural, frozenset())
            if verb in allowed:
                return
        subject = f'{kind.qualified} "{route.name}"' if route.name else kind.qualified
        where = f' in the namespace "{route.namespace}"' if route.namespace else " at the cluster scope"
        raise _ApiError(
            403,
            "Forbidden",
            f'{subject} is forbidden: User "{principal}" cannot {verb} resource "{kind.plural}" in API group '
            f'"{kind.group}"{where}',
            details={"name": route.name or "", "group": kind.group, "kind": kind.plural},
        )

    # --- reads -------------------------------------------------------------------------------------
    def _exists(self, route: _Route) -> bool:
        with self._lock:
            return _key(route) in self._objects

    def _get(self, route: _Route) -> dict[str, Any]:
        assert route.name is not None
        with self._lock:
            stored = self._objects.get(_key(route))
            if stored is None:
                raise _not_found(route.kind, route.name)
            return copy.deepcopy(stored)

    def _list(self, route: _Route, selector: str) -> dict[str, Any]:
        matches = _selector(selector)
        with self._lock:
            items = [
                copy.deepcopy(obj)
                for (plural, namespace, _name), obj in sorted(self._objects.items())
                if plural == route.kind.plural
                and (route.namespace is None or namespace == route.namespace)
                and matches(obj["metadata"].get("labels") or {})
            ]
            version = str(self._resource_version)
        return {
            "kind": f"{route.kind.kind}List",
            "apiVersion": route.kind.api_version,
            "metadata": {"resourceVersion": version},
            "items": items,
        }

    # --- apply -------------------------------------------------------------------------------------
    def _apply(self, route: _Route, request: Request, dry_run: bool) -> tuple[int, dict[str, Any]]:
        kind, name = route.kind, route.name
        assert name is not None
        if request.mimetype != _APPLY_CONTENT_TYPE:
            raise _ApiError(
                415, "UnsupportedMediaType", f"the body of the request was in an unknown format - {request.mimetype}"
            )
        manager = request.args.get("fieldManager", "")
        if not manager:
            raise _bad_request("PATCH /apply requests require a fieldManager to be set")
        force = _boolean(request.args.get("force"), "force")
        try:
            applied = yaml.safe_load(request.get_data(as_text=True))
        except yaml.YAMLError as error:
            raise _bad_request(f"error decoding YAML: {error}") from None
        if not isinstance(applied, dict):
            raise _bad_request("the body of an apply must be an object")
        _check_matches_route(applied, route)
        if kind.namespaced:
            with self._lock:
                if ("namespaces", "", route.namespace) not in self._objects:
                    raise _not_found(_BY_ROUTE[("", "v1", "namespaces")], route.namespace or "")
        if kind.namespaced:
            applied["metadata"]["namespace"] = route.namespace
        causes = _schema_causes(applied) + _rule_causes(kind, applied)
        if causes:
            raise _invalid(kind, name, causes)
        desired = _defaulted(applied)
        with self._lock:
            stored = self._objects.get(_key(route))
            if stored is None:
                result = self._fresh(desired, manager)
                if not dry_run:
                    self._store(kind, route.namespace or "", result)
                return 201, copy.deepcopy(result)
            immutable = _immutable_causes(kind, stored, desired)
            if immutable:
                raise _invalid(kind, name, immutable)
            managers = [entry["manager"] for entry in stored["metadata"].get("managedFields", [])]
            others = [m for m in managers if m != manager]
            body = _body(stored)
            if others:
                conflicts = sorted(_conflicts(body, desired))
                if conflicts and not force:
                    fields = "; ".join(f"conflict with {others[0]!r}: {field}" for field in conflicts)
                    raise _ApiError(
                        409,
                        "Conflict",
                        f"Apply failed with {len(conflicts)} conflict(s): {fields}",
                        details={
                            "name": name,
                            "group": kind.group,
                            "kind": kind.plural,
                            "causes": [
                                {
                                    "reason": "FieldManagerConflict",
                                    "message": f"conflict with {others[0]!r}",
                                    "field": f,
                                }
                                for f in conflicts
                            ],
                        },
                    )
                new_body = _merged(body, desired)
            else:
                new_body = desired
            result = copy.deepcopy(stored)
            if new_body != body or manager not in managers:
                metadata = {**_server_metadata(stored["metadata"]), **new_body.get("metadata", {})}
                result = {**new_body, "metadata": metadata}
                if "status" in stored:
                    result["status"] = stored["status"]
                if new_body.get("spec") != body.get("spec"):
                    metadata["generation"] = stored["metadata"].get("generation", 1) + 1
                metadata["managedFields"] = [
                    *(e for e in stored["metadata"].get("managedFields", []) if e["manager"] != manager),
                    self._managed_entry(manager, kind),
                ]
                metadata["resourceVersion"] = self._next_resource_version()
                if not dry_run:
                    self._objects[_key(route)] = result
            return 200, copy.deepcopy(result)

    def _fresh(self, desired: dict[str, Any], manager: str | None) -> dict[str, Any]:
        """A new object: the server's metadata added to what was applied."""
        obj = copy.deepcopy(desired)
        metadata = obj.setdefault("metadata", {})
        metadata.update(
            uid=str(uuid.uuid4()),
            resourceVersion=self._next_resource_version(),
            creationTimestamp=timestamp(self._clock()),
        )
        if "spec" in obj:
            metadata["generation"] = 1
        kind = obj.get("kind")
        if manager is not None and kind is not None:
            metadata["managedFields"] = [self._managed_entry(manager, _kind_named(kind))]
        return obj

    def _next_resource_version(self) -> str:
        with self._lock:
            self._resource_version += 1
            return str(self._resource_version)

    def _managed_entry(self, manager: str, kind: _Kind) -> dict[str, Any]:
        return {
            "manager": manager,
            "operation": "Apply",
            "apiVersion": kind.api_version,
            "time": timestamp(self._clock()),
            "fieldsType": "FieldsV1",
        }

    def _store(self, kind: _Kind, namespace: str, obj: dict[str, Any]) -> None:
        obj.setdefault("apiVersion", kind.api_version)
        obj.setdefault("kind", kind.kind)
        self._objects[(kind.plural, namespace, obj["metadata"]["name"])] = obj

    # --- delete ------------------------------------------------------------------------------------
    def _delete(self, route: _Route, options: _DeleteOptions) -> tuple[int, dict[str, Any]]:
        """200 and the object when it is gone at once; 202 and the object (deletionTimestamp set)
        while it waits for its finalizers or, a Pod, for its kubelet to end its containers."""
        if route.kind.plural == "namespaces" and route.name in _UNDELETABLE_NAMESPACES:
            raise _ApiError(
                403,
                "Forbidden",
                f'namespaces "{route.name}" is forbidden: this namespace may not be deleted',
                details={"name": route.name, "kind": "namespaces"},
            )
        with self._lock:
            stored = self._get(route)
            if options.dry_run:
                return 200, stored
            gone = self._mark_deleted(
                _key(route), options.propagation or _default_propagation(route.kind), options.grace
            )
            return (200, stored) if gone else (202, self._get(route))

    def _mark_deleted(self, key: tuple[str, str, str], propagation: str, grace: int | None) -> bool:
        """Delete the stored object at `key` as the API server and its garbage collector's contract
        say (Kubernetes docs, "Garbage Collection", "Cascading deletion"): Foreground keeps the owner,
        with deletionTimestamp and the foregroundDeletion finalizer, until its dependents are gone
        (the garbage collector, trainrun.local.kube_cluster, removes them and then the finalizer);
        Background removes the owner at once, the collector its dependents after; Orphan removes the
        owner and the dependents' ownerReferences to it. A Pod bound to a node and not finished is
        deleted gracefully: it stays, with deletionTimestamp now + its grace period (the request's
        gracePeriodSeconds, else its terminationGracePeriodSeconds, 30 by default), until its kubelet
        has ended its containers ("Pod Lifecycle", "Termination of Pods"). Whether it is gone."""
        obj = self._objects[key]
        metadata = obj["metadata"]
        if metadata.get("deletionTimestamp") is not None:
            return False  # being deleted already: the first deletion's terms hold
        dependents = [k for k, o in self._objects.items() if _owned_by(o, metadata["uid"])]
        finalizers = list(metadata.get("finalizers") or [])
        if propagation == "Foreground" and dependents:
            finalizers.append(FOREGROUND_FINALIZER)
        if propagation == "Orphan":
            for dependent in dependents:
                references = self._objects[dependent]["metadata"]["ownerReferences"]
                references[:] = [r for r in references if r.get("uid") != metadata["uid"]]
        seconds = _grace_seconds(obj, grace)
        if finalizers or seconds:
            metadata.update(
                deletionTimestamp=timestamp(self._clock() + timedelta(seconds=seconds)),
                deletionGracePeriodSeconds=seconds,
                finalizers=finalizers,
                resourceVersion=self._next_resource_version(),
            )
            return False
        del self._objects[key]
        if key[0] == "namespaces":
            for contained in [k for k in self._objects if k[1] == key[2]]:
                del self._objects[contained]
        return True

    # --- the cluster's own side: what its controllers, scheduler and kubelets read and write ------
    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener` (without the server's lock) after each change of the stored objects."""
        self._listeners.append(listener)

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    def now(self) -> datetime:
        return self._clock()

    def objects(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Copies of the stored objects of a kind (`namespace` None: in every namespace), by key."""
        with self._lock:
            return [
                copy.deepcopy(obj)
                for (kind, ns, _), obj in sorted(self._objects.items())
                if kind == plural and (namespace is None or ns == namespace)
            ]

    def read(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self._objects.get((plural, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Store a new object a controller made (metadata.uid, resourceVersion, creationTimestamp
        added); None if one of its name exists, or its namespace does not (or is going)."""
        kind = _kind_named(obj["kind"])
        namespace = obj["metadata"].get("namespace", "") if kind.namespaced else ""
        key = (kind.plural, namespace, obj["metadata"]["name"])
        with self._lock:
            if key in self._objects or (kind.namespaced and ("namespaces", "", namespace) not in self._objects):
                return None
            fresh = self._fresh(obj, None)
            self._store(kind, namespace, fresh)
            created = copy.deepcopy(fresh)
        self._notify()
        return created

    def update(
        self, plural: str, namespace: str, name: str, change: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any] | None:
        """Change a stored object in place (`change` gets a copy), as a controller's update or status
        update; a new resourceVersion if it changed. An object being deleted whose last finalizer
        this removes is gone. The object as stored, or None if there is none."""
        key = (plural, namespace, name)
        with self._lock:
            stored = self._objects.get(key)
            if stored is None:
                return None
            changed = copy.deepcopy(stored)
            change(changed)
            if changed == stored:
                return copy.deepcopy(stored)
            changed["metadata"]["resourceVersion"] = self._next_resource_version()
            metadata = changed["metadata"]
            if metadata.get("deletionTimestamp") is not None and not metadata.get("finalizers"):
                del self._objects[key]
            else:
                self._objects[key] = changed
        self._notify()
        return copy.deepcopy(changed)

    def delete(self, plural: str, namespace: str, name: str, *, propagation: str, grace: int | None = None) -> None:
        """What a controller's DELETE does (see `_mark_deleted`); nothing if the object is gone."""
        with self._lock:
            if (plural, namespace, name) not in self._objects:
                return
            self._mark_deleted((plural, namespace, name), propagation, grace)
        self._notify()

    def remove(self, plural: str, namespace: str, name: str) -> None:
        """The object is gone at once, finalizers or not: a kubelet's last delete of a Pod whose
        containers have ended, a force delete (grace period 0)."""
        with self._lock:
            if self._objects.pop((plural, namespace, name), None) is None:
                return
        self._notify()


# --- routes ---------------------------------------------------------------------------------------
def _route(path: str) -> _Route:
    segments = [segment for segment in path.split("/") if segment]
    if segments[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", segments[2:]
    elif len(segments) >= 3 and segments[0] == "apis":
        group, version, rest = segments[1], segments[2], segments[3:]
    else:
        raise _ApiError(404, "NotFound", "the server could not find the requested resource")
    namespace: str | None = None
    if len(rest) in (3, 4) and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    kind = _BY_ROUTE.get((group, version, rest[0])) if rest and len(rest) <= 2 else None
    if (
        kind is None
        or (namespace is not None and not kind.namespaced)
        or (kind.namespaced and namespace is None and len(rest) == 2)
    ):
        raise _ApiError(404, "NotFound", "the server could not find the requested resource")
    return _Route(kind, namespace, rest[1] if len(rest) == 2 else None)


def _key(route: _Route) -> tuple[str, str, str]:
    return (route.kind.plural, route.namespace or "", route.name or "")


def _kind_named(kind: str) -> _Kind:
    return next(k for k in _KINDS if k.kind == kind)


def _check_matches_route(applied: dict[str, Any], route: _Route) -> None:
    kind = route.kind
    if not applied.get("apiVersion") or not applied.get("kind"):
        raise _bad_request("Object 'apiVersion' and 'Kind' must be set in the applied configuration")
    if applied["apiVersion"] != kind.api_version:
        raise _bad_request(
            f"the API version in the data ({applied['apiVersion']}) does not match the expected API version "
            f"({kind.api_version})"
        )
    if applied["kind"] != kind.kind:
        raise _bad_request(f"the kind in the data ({applied['kind']}) does not match the expected kind ({kind.kind})")
    metadata = applied.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("name") != route.name:
        raise _bad_request(f"the name of the object does not match the name on the URL ({route.name})")
    if kind.namespaced and metadata.get("namespace", route.namespace) != route.namespace:
        raise _bad_request("the namespace of the provided object does not match the namespace sent on the request")
    for server_field in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"):
        if server_field in metadata:
            raise _bad_request(f"metadata.{server_field} must not be set in an apply")


@dataclass(frozen=True)
class _DeleteOptions:
    propagation: str | None
    dry_run: bool
    grace: int | None


def _delete_options(request: Request) -> _DeleteOptions:
    """A DELETE's options: its body's DeleteOptions if it has a body, else its query parameters
    (the API server decodes one or the other: apiserver's handlers/delete.go). lightkube 1.0.1
    sends query parameters; kubectl and client-go a body."""
    text = request.get_data(as_text=True)
    if text.strip():
        try:
            body = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise _bad_request(f"error decoding DeleteOptions: {error}") from None
        if not isinstance(body, dict) or body.get("kind", "DeleteOptions") != "DeleteOptions":
            raise _bad_request("the body of a DELETE must be a DeleteOptions")
        dry = body.get("dryRun") or []
        propagation, dry_values, grace = (
            body.get("propagationPolicy"),
            dry if isinstance(dry, list) else [dry],
            body.get("gracePeriodSeconds"),
        )
    else:
        propagation = request.args.get("propagationPolicy")
        dry_values = request.args.getlist("dryRun")
        grace = request.args.get("gracePeriodSeconds")
    if propagation is not None and propagation not in ("Foreground", "Background", "Orphan"):
        raise _bad_request(f"propagationPolicy: Unsupported value: {propagation!r}")
    if grace is not None:
        try:
            grace = int(grace)
        except (TypeError, ValueError):
            raise _bad_request(f"gracePeriodSeconds: invalid value {grace!r}") from None
        if grace < 0:
            raise _bad_request(f"gracePeriodSeconds: Invalid value: {grace}: must be greater than or equal to 0")
    return _DeleteOptions(propagation, _dry_run([str(v) for v in dry_values]), grace)


def _default_propagation(kind: _Kind) -> str:
    """What a DELETE without propagationPolicy does: batch/v1 Jobs orphan their pods (the Job's
    REST strategy's default, kept for compatibility: Kubernetes docs, "Jobs"); the rest Background."""
    return "Orphan" if kind.kind == "Job" else "Background"


def _owned_by(obj: dict[str, Any], uid: str) -> bool:
    return any(reference.get("uid") == uid for reference in obj["metadata"].get("ownerReferences") or [])


def _grace_seconds(obj: dict[str, Any], requested: int | None) -> int:
    """A deletion's grace period: a Pod's that is bound and not finished (others go at once: the
    Pod REST strategy's CheckGracefulDelete); 0 for every other kind."""
    if obj.get("kind") != "Pod":
        return 0
    spec, phase = obj.get("spec") or {}, (obj.get("status") or {}).get("phase")
    if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
        return 0
    if requested is not None:
        return requested
    return int(spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))


def _dry_run(values: list[str]) -> bool:
    if any(value != "All" for value in values):
        raise _bad_request(f'dryRun: Unsupported value: {values!r}: supported values: "All"')
    return bool(values)


def _boolean(value: str | None, name: str) -> bool:
    if value in (None, "false"):
        return False
    if value == "true":
        return True
    raise _bad_request(f"{name}: invalid value {value!r}")


# --- label selectors ("Labels and Selectors", "Label selectors") ----------------------------------
@dataclass(frozen=True)
class _Requirement:
    key: str
    operator: str  # =, !=, in, notin, exists, !exists
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator in ("=", "in"):
            return value in self.values
        if self.operator in ("!=", "notin"):
            return value not in self.values
        return (value is not None) == (self.operator == "exists")


def _selector(text: str) -> Callable[[Mapping[str, str]], bool]:
    requirements = []
    for term in (t.strip() for t in re.split(r",(?![^()]*\))", text) if t.strip()):
        if match := re.fullmatch(r"(\S+?)\s+(in|notin)\s+\(([^)]*)\)", term):
            values = frozenset(v.strip() for v in match[3].split(",") if v.strip())
            requirement = _Requirement(match[1], match[2], values)
        elif match := re.fullmatch(r"(\S+?)\s*(!=|==|=)\s*(\S*)", term):
            requirement = _Requirement(match[1], "!=" if match[2] == "!=" else "=", frozenset({match[3]}))
        elif match := re.fullmatch(r"!(\S+)", term):
            requirement = _Requirement(match[1], "!exists", frozenset())
        elif re.fullmatch(r"\S+", term):
            requirement = _Requirement(term, "exists", frozenset())
        else:
            raise _bad_request(f"unable to parse requirement: {term!r}")
        if _label_key_error(requirement.key):
            raise _bad_request(f"unable to parse requirement: invalid label key {requirement.key!r}")
        requirements.append(requirement)
    return lambda labels: all(requirement.matches(labels) for requirement in requirements)


# --- validation -----------------------------------------------------------------------------------
@cache
def _registry() -> Registry:
    return Resource.from_contents(schema_contents(f"{_SCHEMA_DIR}/_definitions.json", SCHEMA_VERSION)) @ Registry()


@cache
def _validator(api_version: str, kind: str) -> jsonschema.Draft202012Validator:
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = schema_contents(f"{_SCHEMA_DIR}/{kind.lower()}-{group_version}.json", SCHEMA_VERSION)
    return jsonschema.Draft202012Validator(schema, registry=Resource.from_contents(schema) @ _registry())


def _schema_causes(obj: dict[str, Any]) -> list[tuple[str, str]]:
    causes = []
    for error in _validator(obj["apiVersion"], obj["kind"]).iter_errors(obj):
        path = _field_path(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            declared = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
            for field in sorted(set(error.instance) - set(declared)):
                causes.append((f"{path}.{field}" if path else field, "field not declared in schema"))
        else:
            causes.append((path or "<root>", error.message))
    return causes


def _field_path(path: Iterable[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _rule_causes(kind: _Kind, obj: dict[str, Any]) -> list[tuple[str, str]]:
    causes: list[tuple[str, str]] = []
    metadata = obj.get("metadata") or {}
    name = str(metadata.get("name", ""))
    if kind.kind == "Namespace":
        causes += _name_causes("metadata.name", name, _DNS1123_LABEL_RE, 63, "a lowercase RFC 1123 label")
    elif kind.kind == "Service":
        causes += _name_causes("metadata.name", name, _DNS1035_LABEL_RE, 63, "a DNS-1035 label")
    else:
        causes += _name_causes("metadata.name", name, _DNS1123_SUBDOMAIN_RE, 253, "a lowercase RFC 1123 subdomain")
    if kind.kind == "Job" and len(name) > 63:
        causes.append(("metadata.name", "must be no more than 63 characters (it becomes the job-name label)"))
    causes += _labels_causes("metadata.labels", metadata.get("labels"))
    spec = obj.get("spec") or {}
    if kind.kind in ("Job", "DaemonSet"):
        template = spec.get("template") or {}
        template_labels = (template.get("metadata") or {}).get("labels") or {}
        causes += _labels_causes("spec.template.metadata.labels", template_labels)
        selector = spec.get("selector")
        if selector is not None:
            causes += _labels_causes("spec.selector.matchLabels", selector.get("matchLabels"))
            if not _selector_matches(selector, template_labels):
                causes.append(("spec.template.metadata.labels", "`selector` does not match template `labels`"))
        pod = template.get("spec") or {}
        causes += _pod_causes("spec.template.spec", pod)
        restart = pod.get("restartPolicy")
        if kind.kind == "Job" and restart not in ("Never", "OnFailure"):
            causes.append(
                (
                    "spec.template.spec.restartPolicy",
                    f'Unsupported value: "{restart or "Always"}": supported values: "OnFailure", "Never"',
                )
            )
        if kind.kind == "DaemonSet" and restart not in (None, "Always"):
            causes.append(
                ("spec.template.spec.restartPolicy", f'Unsupported value: "{restart}": supported values: "Always"')
            )
    if kind.kind == "Job" and spec.get("completionMode") == "Indexed":
        if spec.get("completions") is None:
            causes.append(("spec.completions", "Required value: when completion mode is Indexed"))
        if (spec.get("parallelism") or 0) > _MAX_INDEXED_PARALLELISM:
            causes.append(
                (
                    "spec.parallelism",
                    f"must be less than or equal to {_MAX_INDEXED_PARALLELISM} when completion mode is Indexed",
                )
            )
    if kind.kind == "Pod":
        causes += _pod_causes("spec", spec)
    if kind.kind == "PersistentVolumeClaim":
        causes += _quantity_map_causes("spec.resources.requests", (spec.get("resources") or {}).get("requests"))
    if kind.kind == "PersistentVolume":
        causes += _quantity_map_causes("spec.capacity", spec.get("capacity"))
    return causes


def _name_causes(field: str, value: str, pattern: re.Pattern[str], limit: int, what: str) -> list[tuple[str, str]]:
    if len(value) > limit:
        return [(field, f"Invalid value: {value!r}: must be no more than {limit} characters")]
    if not pattern.match(value):
        return [(field, f"Invalid value: {value!r}: a valid name must be {what}")]
    return []


def _label_key_error(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if len(name) > 63 or not _LABEL_NAME_RE.match(name):
        return "name part must be at most 63 alphanumeric characters, '-', '_' or '.', alphanumeric at both ends"
    return None


def _labels_causes(field: str, labels: Any) -> list[tuple[str, str]]:
    causes = []
    for key, value in (labels or {}).items() if isinstance(labels, dict) else ():
        if (error := _label_key_error(str(key))) is not None:
            causes.append((f"{field}", f"Invalid value: {key!r}: {error}"))
        text = "" if value is None else str(value)
        if text and (len(text) > 63 or not _LABEL_NAME_RE.match(text)):
            causes.append(
                (
                    f"{field}",
                    f"Invalid value: {text!r}: a valid label must be an empty string or at most 63 alphanumeric "
                    "characters, '-', '_' or '.', alphanumeric at both ends",
                )
            )
    return causes


def _selector_matches(selector: dict[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a LabelSelector selects these labels; one selecting nothing matches nothing (as the API server)."""
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    for expression in expressions:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def _pod_causes(field: str, pod: dict[str, Any]) -> list[tuple[str, str]]:
    causes = []
    for list_name in ("initContainers", "containers"):
        for index, container in enumerate(pod.get(list_name) or []):
            if not isinstance(container, dict):
                continue
            at = f"{field}.{list_name}[{index}]"
            causes += _name_causes(
                f"{at}.name", str(container.get("name", "")), _DNS1123_LABEL_RE, 63, "a DNS-1123 label"
            )
            causes += _resources_causes(f"{at}.resources", container.get("resources") or {})
    return causes


def _resources_causes(field: str, resources: dict[str, Any]) -> list[tuple[str, str]]:
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    causes = _quantity_map_causes(f"{field}.limits", limits) + _quantity_map_causes(f"{field}.requests", requests)
    if causes:
        return causes
    for name in sorted(set(limits) | set(requests)):
        limit = quantity(limits[name]) if name in limits else None
        request = quantity(requests[name]) if name in requests else None
        if _extended(name):
            for where, value in (("limits", limit), ("requests", request)):
                if value is not None and value != value.to_integral_value():
                    causes.append((f"{field}.{where}[{name}]", "must be an integer"))
            if request is not None and limit is None:
                causes.append(
                    (f"{field}.limits", f"Required value: Limit must be set for non overcommitable resources ({name})")
                )
            elif request is not None and limit is not None and request != limit:
                causes.append((f"{field}.requests[{name}]", f"must be equal to {name} limit of {limits[name]}"))
        elif request is not None and limit is not None and request > limit:
            causes.append(
                (
                    f"{field}.requests[{name}]",
                    f"Invalid value: {requests[name]!r}: must be less than or equal to {name} limit of {limits[name]}",
                )
            )
    return causes


def _quantity_map_causes(field: str, quantities: Any) -> list[tuple[str, str]]:
    causes = []
    for name, value in (quantities or {}).items() if isinstance(quantities, dict) else ():
        if quantity(value) is None:
            causes.append(
                (
                    f"{field}[{name}]",
                    f"Invalid value: {value!r}: quantities must match the regular expression {_QUANTITY_RE.pattern!r}",
                )
            )
    return causes


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity's value; None if it does not parse (Quantity API reference)."""
    if isinstance(value, bool):
        return None
    match = _QUANTITY_RE.match(str(value))
    if match is None:
        return None
    try:
        number = Decimal(match[1])
    except InvalidOperation:
        return None
    suffix = match[2] or ""
    if suffix[:1] in ("e", "E"):
        return number * Decimal(10) ** int(suffix[1:])
    return number * _SUFFIXES[suffix]


def _extended(name: str) -> bool:
    """An extended resource: a domain-qualified name outside kubernetes.io ("Extended resources")."""
    domain, slash, _ = name.partition("/")
    return bool(slash) and domain != "kubernetes.io" and not domain.endswith(".kubernetes.io")


def _defaulted(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as stored: a limit with no request sets the request (Resource Management for Pods)."""
    result = copy.deepcopy(obj)
    for containers in _container_lists(result):
        for container in containers:
            resources = container.get("resources") or {}
            limits = resources.get("limits") or {}
            if limits:
                requests = resources.setdefault("requests", {})
                for name, value in limits.items():
                    requests.setdefault(name, value)
    return result


def _container_lists(obj: dict[str, Any]) -> Iterator[list[dict[str, Any]]]:
    spec = obj.get("spec") or {}
    pod = spec if obj.get("kind") == "Pod" else (spec.get("template") or {}).get("spec") or {}
    for list_name in ("initContainers", "containers"):
        containers = pod.get(list_name)
        if isinstance(containers, list):
            yield [c for c in containers if isinstance(c, dict)]


_IMMUTABLE: dict[str, tuple[str, ...]] = {
    "Job": ("template", "selector", "completionMode"),
    "DaemonSet": ("selector",),
}
# What of a PVC's spec may change ("Expanding Persistent Volumes Claims"; PVC API reference).
_PVC_MUTABLE = ("resources", "volumeAttributesClassName")


def _immutable_causes(kind: _Kind, stored: dict[str, Any], desired: dict[str, Any]) -> list[tuple[str, str]]:
    before, after = stored.get("spec") or {}, desired.get("spec") or {}
    if kind.kind == "PersistentVolumeClaim":
        fixed = [key for key in set(before) | set(after) if key not in _PVC_MUTABLE]
        if any(before.get(key) != after.get(key) for key in fixed):
            return [
                (
                    "spec",
                    "Forbidden: spec is immutable after creation except resources.requests and "
                    "volumeAttributesClassName",
                )
            ]
        return []
    return [
        (f"spec.{field}", "Invalid value: field is immutable")
        for field in _IMMUTABLE.get(kind.kind, ())
        if before.get(field) != after.get(field)
    ]


def _body(stored: dict[str, Any]) -> dict[str, Any]:
    """What an apply sets of a stored object: all but the server's metadata and the status."""
    body = {key: copy.deepcopy(value) for key, value in stored.items() if key != "status"}
    body["metadata"] = {
        key: value
        for key, value in stored["metadata"].items()
        if key not in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields")
    }
    return body


def _server_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    return {key: metadata[key] for key in ("uid", "creationTimestamp", "generation") if key in metadata}


def _conflicts(stored: Any, applied: Any, path: str = "") -> Iterator[str]:
    """The fields an apply would change that hold another value already (per-object ownership)."""
    if isinstance(stored, dict) and isinstance(applied, dict):
        for key, value in applied.items():
            if key in stored:
                yield from _conflicts(stored[key], value, f"{path}.{key}")
    elif stored != applied:
        yield path


def _merged(stored: Any, applied: Any) -> Any:
    if isinstance(stored, dict) and isinstance(applied, dict):
        return {**stored, **{key: _merged(stored.get(key), value) for key, value in applied.items()}}
    return copy.deepcopy(applied)


def _uri_encode(text: str) -> str:
    return quote(text, safe="-_.~")


def _signing_key(secret: str, date: str, region: str) -> bytes:
    key = f"AWS4{secret}".encode()
    for part in (date, region, "sts", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
