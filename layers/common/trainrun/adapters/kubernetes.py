"""The Kubernetes gateway of a `cluster.kind: eks` run: an EKS token, and the few calls trainrun
makes to the cluster's Kubernetes API, through lightkube (docs/development.md, "Kubernetes client:
why lightkube": the smallest layer and the quickest cold import of the clients compared).

Authentication, as `aws eks get-token` and aws-iam-authenticator do it: the stack's Kubernetes role
(the one principal with an access entry on a run's cluster, trainrun.steps.eks) is assumed, and
its session presigns an STS GetCallerIdentity URL with the cluster's name in the signed
`x-k8s-aws-id` header, valid 60 s for the signature's check and 15 minutes from its X-Amz-Date for
the authenticator; the bearer token is `k8s-aws-v1.` and the URL in unpadded base64url. Presigning
needs no call: the URL is STS's regional endpoint's, whatever endpoint the functions' clients use.
A token older than `TOKEN_REFRESH_SECONDS` is made again before the next call.

Writes are server-side applies with trainrun's field manager (`FIELD_MANAGER`), forced: trainrun
owns every object it applies. `apply(objects, dry_run=True)` sends each with `dryRun=All`: the API
server validates it in full (schema, admission, RBAC) and stores nothing; the steps dry-run every
object of a run before its first real apply (trainrun.steps.kubernetes).

Errors: an object the API server refuses (400, 422), a caller it does not know (401) or does not
allow (403), a conflict (409) raise `KubernetesRefused` with the server's message; 429, 5xx and an
unreachable endpoint raise TransientAwsError (the state machine retries); a GET of an object that is
not there answers None.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from trainrun.adapters.aws_errors import call
from trainrun.adapters.clients import client, new_client
from trainrun.errors import TrainrunError, TransientAwsError
from trainrun.model.run_record import RunRecord

__all__ = ["FIELD_MANAGER", "GatewayFor", "KubernetesGateway", "KubernetesRefused", "eks_token"]

FIELD_MANAGER = "trainrun"
TOKEN_PREFIX = "k8s-aws-v1."  # noqa: S105 (the EKS token format's prefix, no secret)
# What the presigned URL's signature is valid for (aws-iam-authenticator's own choice, 60 s)...
TOKEN_URL_EXPIRES = 60
# ... and how long a token is used: the authenticator takes one until 15 minutes after its
# X-Amz-Date; renewed well before, as aws-iam-authenticator's client renews at 14 minutes.
TOKEN_REFRESH_SECONDS = 10 * 60
CLUSTER_ID_HEADER = "x-k8s-aws-id"
# Kubernetes' own answer codes that waiting will not change.
_REFUSALS = frozenset({400, 401, 403, 404, 405, 409, 410, 422})
REQUEST_TIMEOUT_SECONDS = 20.0


class KubernetesRefused(TrainrunError):
    """The cluster's Kubernetes API refused a call; the message is the API server's."""


def eks_token(credentials: Mapping[str, str], cluster: str, region: str) -> str:
    """An EKS bearer token for `cluster`, signed with `credentials` (AccessKeyId, SecretAccessKey,
    SessionToken: an assumed role's)."""
    sts = new_client(
        "sts",
        region_name=region,
        endpoint_url=f"https://sts.{region}.amazonaws.com",
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials.get("SessionToken"),
    )

    def add_cluster_id(request: Any, **_: Any) -> None:
        request.headers[CLUSTER_ID_HEADER] = cluster

    sts.meta.events.register("before-sign.sts.GetCallerIdentity", add_cluster_id)
    url = sts.generate_presigned_url("get_caller_identity", Params={}, ExpiresIn=TOKEN_URL_EXPIRES, HttpMethod="GET")
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


class KubernetesGateway:
    """The Kubernetes API of one EKS cluster, reached as the stack's Kubernetes role."""

    def __init__(
        self,
        *,
        cluster: str,
        region: str,
        endpoint: str,
        certificate_authority: str | None,
        credentials: Callable[[], Mapping[str, str]],
        clock: Callable[[], float] = time.monotonic,
    ):
        scheme, host = urlsplit(endpoint).scheme, urlsplit(endpoint).hostname or ""
        # Plain HTTP only to this machine: the local runtime's API server. EKS serves HTTPS.
        if scheme != "https" and not (scheme == "http" and host in ("127.0.0.1", "localhost")):
            raise KubernetesRefused(f"the cluster {cluster}'s endpoint {endpoint!r} is not HTTPS")
        self.cluster = cluster
        self._region = region
        self._endpoint = endpoint
        self._certificate_authority = certificate_authority
        self._credentials = credentials
        self._clock = clock
        self._client: Any = None
        self._made_at = 0.0

    @classmethod
    def for_cluster(cls, eks: Any, *, cluster: str, role_arn: str, region: str, session_name: str) -> KubernetesGateway:
        """The gateway of an ACTIVE cluster (its endpoint and certificate authority from EKS)."""
        from trainrun.adapters.eks import cluster_endpoint

        described = cluster_endpoint(eks, cluster)

        def credentials() -> Mapping[str, str]:
            # Through call(): a throttled AssumeRole is a TransientAwsError, retried by the workflow.
            assumed = call(
                client("sts").assume_role, "sts:AssumeRole", RoleArn=role_arn, RoleSessionName=session_name[:64]
            )
            return assumed["Credentials"]

        return cls(
            cluster=cluster,
            region=region,
            endpoint=described["endpoint"],
            certificate_authority=(described.get("certificateAuthority") or {}).get("data"),
            credentials=credentials,
        )

    # --- calls -------------------------------------------------------------------------------------
    def apply(self, objects: Iterable[Mapping[str, Any]], *, dry_run: bool = False) -> list[dict[str, Any]]:
        """Server-side apply each object in order (forced, trainrun's field manager); what the server
        answers for each. With `dry_run`, each is checked in full and nothing is stored."""
        from lightkube import codecs

        applied = []
        for obj in objects:
            resource = codecs.from_dict(dict(obj))
            # lightkube's models drop a field they do not declare: sent as typed, such a field
            # would never reach the API server's strict check, so it is refused here.
            dropped = sorted(_dropped_fields(obj, resource.to_dict()))
            if dropped:
                raise KubernetesRefused(
                    f"{_describe(obj)}: field not declared in schema: {', '.join(dropped)} (lightkube's models of "
                    "Kubernetes would drop it)"
                )
            answer = self._call("apply", _applying(resource, dry_run), _describe(obj))
            applied.append(answer.to_dict())
        return applied

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or None when there is none."""
        resource = _resource(kind)
        try:
            answer = self._call("get", lambda c: c.get(resource, name, namespace=namespace), f"{kind} {name}")
        except _NotFound:
            return None
        return answer.to_dict()

    def list(
        self, kind: str, namespace: str | None = None, labels: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Every object of `kind` (in `namespace`; all namespaces when None) with the labels."""
        from lightkube.core.resource import NamespacedResource

        resource = _resource(kind)
        # lightkube reads no namespace as its client's default one, and "*" as all of them.
        where = (namespace or "*") if issubclass(resource, NamespacedResource) else None
        selector = dict(labels or {})
        return self._call(
            "list",
            lambda c: [item.to_dict() for item in c.list(resource, namespace=where, labels=selector)],
            f"{kind} list",
        )

    def delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        """Delete the object with foreground propagation (it stays, marked, until what it owns is
        gone); False when it was not there."""
        from lightkube.types import CascadeType

        resource = _resource(kind)
        try:
            self._call(
                "delete",
                lambda c: c.delete(resource, name, namespace=namespace, cascade=CascadeType.FOREGROUND),
                f"{kind} {name}",
            )
        except _NotFound:
            return False
        return True

    # --- plumbing ----------------------------------------------------------------------------------
    def _lightkube(self) -> Any:
        if self._client is None or self._clock() - self._made_at > TOKEN_REFRESH_SECONDS:
            import httpx2
            from lightkube import Client, KubeConfig
            from lightkube.config.models import Cluster, User

            token = eks_token(self._credentials(), self.cluster, self._region)
            config = KubeConfig.from_one(
                cluster=Cluster(server=self._endpoint, certificate_auth_data=self._certificate_authority),
                user=User(token=token),
            )
            self._client = Client(config=config, trust_env=False, timeout=httpx2.Timeout(REQUEST_TIMEOUT_SECONDS))
            self._made_at = self._clock()
        return self._client

    def _call(self, verb: str, call: Callable[[Any], Any], what: str) -> Any:
        import httpx2
        from lightkube import ApiError

        try:
            return call(self._lightkube())
        except ApiError as error:
            code = error.status.code or 0
            if code == 404 and verb != "apply":
                raise _NotFound(what) from None
            message = f"{verb} {what} on cluster {self.cluster}: {code} {error.status.reason}: {error.status.message}"
            if code in _REFUSALS:
                raise KubernetesRefused(message) from None
            raise TransientAwsError(message) from None
        except httpx2.TransportError as error:
            raise TransientAwsError(
                f"{verb} {what}: the Kubernetes API of cluster {self.cluster} did not answer ({error})"
            ) from None


def _applying(resource: Any, dry_run: bool) -> Callable[[Any], Any]:
    def apply(lightkube: Any) -> Any:
        return lightkube.apply(resource, field_manager=FIELD_MANAGER, force=True, dry_run=dry_run)

    return apply


class _NotFound(Exception):
    pass


def _resource(kind: str) -> Any:
    """lightkube's resource class of a kind trainrun reads or deletes."""
    from lightkube.resources import apps_v1, batch_v1, core_v1

    for module in (core_v1, batch_v1, apps_v1):
        if hasattr(module, kind):
            return getattr(module, kind)
    raise ValueError(f"no Kubernetes resource kind {kind!r} in core/v1, batch/v1 or apps/v1")


def _dropped_fields(sent: Any, kept: Any, path: str = "") -> list[str]:
    """The paths of `sent` that `kept` (its round trip through lightkube's models) lost."""
    if isinstance(sent, Mapping) and isinstance(kept, Mapping):
        return [
            lost
            for key, value in sent.items()
            for lost in (
                [f"{path}.{key}".lstrip(".")] if key not in kept else _dropped_fields(value, kept[key], f"{path}.{key}")
            )
        ]
    if isinstance(sent, list) and isinstance(kept, list):
        return [
            lost
            for index, (a, b) in enumerate(zip(sent, kept, strict=False))
            for lost in _dropped_fields(a, b, f"{path}[{index}]")
        ]
    return []


def _describe(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    where = f" in {metadata['namespace']}" if metadata.get("namespace") else ""
    return f"{obj.get('kind')} {metadata.get('name')}{where}"


# What a step is given to reach a run's cluster: the gateway of the run's EKS cluster, made when asked
# (trainrun.handlers.kubernetes_gateways).
GatewayFor = Callable[[RunRecord], KubernetesGateway]
