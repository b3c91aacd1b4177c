"""The local Kubernetes API server (trainrun.local.kube_apiserver) refuses what a real one refuses, over HTTP.

One server for the module, principals from moto's IAM and STS (`mock_aws`, in this process, where
the server looks their secrets up), EKS tokens made as `aws eks get-token` makes them.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import boto3
import pytest
import yaml
from moto import mock_aws

from trainrun.local.kube_apiserver import LocalKubeApiServer

CLUSTER = "trainrun-test"
REGION = "us-west-2"
ACCOUNT = "123456789012"  # moto's default account
ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
VIEW_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"
EDIT_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSEditPolicy"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/KubernetesRole"
JOBS = "/apis/batch/v1/namespaces/{ns}/jobs/{name}"
# What the server's clock is ahead of the real one, for the expired-token test.
_skew = [timedelta(0)]

Credentials = dict[str, str]


def eks_token(credentials: Credentials, cluster: str = CLUSTER) -> str:
    """An EKS token, as the AWS CLI's `eks get-token` and aws-iam-authenticator make it: a presigned
    STS GetCallerIdentity URL with the cluster's name in the signed `x-k8s-aws-id` header."""
    sts = boto3.client("sts", region_name=REGION, **credentials)

    def add_cluster_id(request: Any, **_: Any) -> None:
        request.headers["x-k8s-aws-id"] = cluster

    sts.meta.events.register("before-sign.sts.GetCallerIdentity", add_cluster_id)
    url = sts.generate_presigned_url("get_caller_identity", Params={}, ExpiresIn=60, HttpMethod="GET")
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def call(
    server: LocalKubeApiServer,
    method: str,
    path: str,
    token: str | None,
    body: dict[str, Any] | None = None,
    **query: str,
) -> tuple[int, dict[str, Any]]:
    if method == "PATCH":
        query.setdefault("fieldManager", "trainrun")
    url = server.url + path + (f"?{urlencode(query)}" if query else "")
    request = urllib.request.Request(url, method=method, data=yaml.safe_dump(body).encode() if body else None)
    if body is not None:
        request.add_header("Content-Type", "application/apply-patch+yaml")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def principals() -> Iterator[dict[str, Credentials]]:
    with mock_aws():
        iam = boto3.client("iam", region_name=REGION)
        credentials = {}
        for user in ("admin", "viewer", "stranger"):
            iam.create_user(UserName=user)
            key = iam.create_access_key(UserName=user)["AccessKey"]
            credentials[user] = {
                "aws_access_key_id": key["AccessKeyId"],
                "aws_secret_access_key": key["SecretAccessKey"],
            }
        iam.create_role(RoleName="KubernetesRole", AssumeRolePolicyDocument="{}")
        session = boto3.client("sts", region_name=REGION).assume_role(RoleArn=ROLE_ARN, RoleSessionName="run")
        credentials["role"] = {
            "aws_access_key_id": session["Credentials"]["AccessKeyId"],
            "aws_secret_access_key": session["Credentials"]["SecretAccessKey"],
            "aws_session_token": session["Credentials"]["SessionToken"],
        }
        yield credentials


@pytest.fixture(scope="module")
def server(principals: dict[str, Credentials]) -> Iterator[LocalKubeApiServer]:
    access = {
        f"arn:aws:iam::{ACCOUNT}:user/admin": [ADMIN_POLICY],
        f"arn:aws:iam::{ACCOUNT}:user/viewer": [VIEW_POLICY],
        ROLE_ARN: [ADMIN_POLICY],
    }
    with LocalKubeApiServer(CLUSTER, REGION, ACCOUNT, access, clock=lambda: datetime.now(UTC) + _skew[0]) as local:
        yield local


@pytest.fixture(scope="module")
def token(principals: dict[str, Credentials]) -> str:
    """The stack's KubernetesRole session, as the control plane calls the cluster."""
    return eks_token(principals["role"])


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def job(name: str, **spec: Any) -> dict[str, Any]:
    container = {
        "name": "worker",
        "image": "public.ecr.aws/neuron/pytorch-training-neuronx:latest",
        "resources": {
            "requests": {"aws.amazon.com/neuron": 16, "vpc.amazonaws.com/efa": 8, "cpu": "100", "memory": "1000Gi"},
            "limits": {"aws.amazon.com/neuron": 16, "vpc.amazonaws.com/efa": 8, "memory": "1000Gi"},
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"trainrun.io/run-id": "run-1"}},
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"restartPolicy": "Never", "subdomain": name, "containers": [container]},
            },
            **spec,
        },
    }


@pytest.fixture(scope="module")
def train(server: LocalKubeApiServer, token: str) -> str:
    """A namespace for the module's objects."""
    code, _ = call(server, "PATCH", "/api/v1/namespaces/train", token, namespace("train"))
    assert code == 201
    return "train"


def causes(body: dict[str, Any]) -> list[str]:
    return [cause["field"] for cause in body["details"]["causes"]]


# --- authentication and authorization ---------------------------------------------------------------
def test_no_token_is_unauthorized(server: LocalKubeApiServer) -> None:
    code, body = call(server, "GET", "/api/v1/namespaces", None)
    assert (code, body["kind"], body["reason"], body["code"]) == (401, "Status", "Unauthorized", 401)


def test_a_token_for_another_cluster_is_unauthorized(
    server: LocalKubeApiServer, principals: dict[str, Credentials]
) -> None:
    code, body = call(server, "GET", "/api/v1/namespaces", eks_token(principals["role"], cluster="other"))
    assert (code, body["reason"]) == (401, "Unauthorized")
    assert "signature does not match" in body["message"]


def test_an_expired_token_is_unauthorized(server: LocalKubeApiServer, token: str) -> None:
    _skew[0] = timedelta(minutes=16)
    try:
        code, body = call(server, "GET", "/api/v1/namespaces", token)
    finally:
        _skew[0] = timedelta(0)
    assert (code, body["reason"]) == (401, "Unauthorized")
    assert "expired" in body["message"]


def test_a_bad_signature_is_unauthorized(server: LocalKubeApiServer, token: str) -> None:
    url = base64.urlsafe_b64decode(token.removeprefix("k8s-aws-v1.") + "==").decode()
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["X-Amz-Signature"] = "0" * 64
    forged = urlunsplit(parts._replace(query=urlencode(query)))
    forged_token = "k8s-aws-v1." + base64.urlsafe_b64encode(forged.encode()).decode().rstrip("=")
    code, body = call(server, "GET", "/api/v1/namespaces", forged_token)
    assert (code, body["reason"]) == (401, "Unauthorized")


def test_a_principal_without_access_entry_is_unauthorized(
    server: LocalKubeApiServer, principals: dict[str, Credentials]
) -> None:
    # EKS cannot map the principal to a Kubernetes user: "You must be logged in to the server (Unauthorized)".
    code, body = call(server, "GET", "/api/v1/namespaces", eks_token(principals["stranger"]))
    assert (code, body["reason"]) == (401, "Unauthorized")
    assert "no access entry" in body["message"]


def test_a_view_policy_principal_reads_but_cannot_apply(
    server: LocalKubeApiServer, principals: dict[str, Credentials], train: str
) -> None:
    viewer = eks_token(principals["viewer"])
    assert call(server, "GET", f"/apis/batch/v1/namespaces/{train}/jobs", viewer)[0] == 200
    code, body = call(server, "PATCH", JOBS.format(ns=train, name="viewed"), viewer, job("viewed"))
    assert (code, body["reason"]) == (403, "Forbidden")
    assert 'cannot create resource "jobs" in API group "batch"' in body["message"]
    code, _ = call(server, "GET", "/api/v1/persistentvolumes", viewer)
    assert code == 403


def test_an_iam_user_with_the_cluster_admin_policy_is_allowed(
    server: LocalKubeApiServer, principals: dict[str, Credentials]
) -> None:
    code, body = call(server, "GET", "/api/v1/namespaces/default", eks_token(principals["admin"]))
    assert (code, body["metadata"]["name"]) == (200, "default")


# --- validation --------------------------------------------------------------------------------------
def test_an_unknown_field_is_invalid_and_named(server: LocalKubeApiServer, token: str, train: str) -> None:
    bad = job("typo")
    bad["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    code, body = call(server, "PATCH", JOBS.format(ns=train, name="typo"), token, bad)
    assert (code, body["reason"]) == (422, "Invalid")
    assert causes(body) == ["spec.template.spec.containers[0].resource"]
    assert "field not declared in schema" in body["message"]


def test_a_bad_name_is_invalid(server: LocalKubeApiServer, token: str, train: str) -> None:
    code, body = call(server, "PATCH", JOBS.format(ns=train, name="Bad_Name"), token, job("Bad_Name"))
    assert (code, causes(body)) == (422, ["metadata.name"])
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "1workers"}, "spec": {}}
    code, body = call(server, "PATCH", f"/api/v1/namespaces/{train}/services/1workers", token, service)
    assert (code, causes(body)) == (422, ["metadata.name"])  # RFC 1035: a letter first


def test_neuron_requests_must_equal_limits(server: LocalKubeApiServer, token: str, train: str) -> None:
    bad = job("unequal")
    bad["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["aws.amazon.com/neuron"] = 8
    code, body = call(server, "PATCH", JOBS.format(ns=train, name="unequal"), token, bad)
    assert (code, causes(body)) == (422, ["spec.template.spec.containers[0].resources.requests[aws.amazon.com/neuron]"])


def test_an_extended_resource_request_without_limit_or_whole_number_is_invalid(
    server: LocalKubeApiServer, token: str, train: str
) -> None:
    bad = job("partial")
    resources = bad["spec"]["template"]["spec"]["containers"][0]["resources"]
    del resources["limits"]["vpc.amazonaws.com/efa"]
    resources["requests"]["aws.amazon.com/neuron"] = resources["limits"]["aws.amazon.com/neuron"] = "1500m"
    code, body = call(server, "PATCH", JOBS.format(ns=train, name="partial"), token, bad)
    assert code == 422
    assert "spec.template.spec.containers[0].resources.limits" in causes(body)
    assert "spec.template.spec.containers[0].resources.limits[aws.amazon.com/neuron]" in causes(body)


def test_a_bad_quantity_is_invalid(server: LocalKubeApiServer, token: str, train: str) -> None:
    bad = job("quantity")
    bad["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1 core"
    code, body = call(server, "PATCH", JOBS.format(ns=train, name="quantity"), token, bad)
    assert (code, causes(body)) == (422, ["spec.template.spec.containers[0].resources.requests[cpu]"])


def test_a_job_pod_restarting_always_is_invalid(server: LocalKubeApiServer, token: str, train: str) -> None:
    bad = job("always")
    bad["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    code, body = call(server, "PATCH", JOBS.format(ns=train, name="always"), token, bad)
    assert (code, causes(body)) == (422, ["spec.template.spec.restartPolicy"])


def test_an_indexed_job_needs_completions(server: LocalKubeApiServer, token: str, train: str) -> None:
    bad = job("uncounted")
    del bad["spec"]["completions"]
    code, body = call(server, "PATCH", JOBS.format(ns=train, name="uncounted"), token, bad)
    assert (code, causes(body)) == (422, ["spec.completions"])


def test_a_job_template_is_immutable(server: LocalKubeApiServer, token: str, train: str) -> None:
    path = JOBS.format(ns=train, name="fixed")
    assert call(server, "PATCH", path, token, job("fixed"))[0] == 201
    changed = job("fixed")
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "other:latest"
    code, body = call(server, "PATCH", path, token, changed)
    assert (code, causes(body)) == (422, ["spec.template"])


def test_an_object_in_a_missing_namespace_is_not_found(server: LocalKubeApiServer, token: str) -> None:
    code, body = call(server, "PATCH", JOBS.format(ns="nowhere", name="lost"), token, job("lost"))
    assert (code, body["reason"], body["message"]) == (404, "NotFound", 'namespaces "nowhere" not found')


def test_the_kind_must_match_the_url(server: LocalKubeApiServer, token: str, train: str) -> None:
    code, body = call(server, "PATCH", f"/apis/apps/v1/namespaces/{train}/daemonsets/x", token, job("x"))
    assert (code, body["reason"]) == (400, "BadRequest")


def test_apply_needs_a_field_manager(server: LocalKubeApiServer, token: str, train: str) -> None:
    code, body = call(server, "PATCH", JOBS.format(ns=train, name="nobody"), token, job("nobody"), fieldManager="")
    assert (code, body["reason"]) == (400, "BadRequest")


# --- what it accepts -----------------------------------------------------------------------------------
def test_a_namespace_pv_pvc_headless_service_and_daemonset(server: LocalKubeApiServer, token: str) -> None:
    assert call(server, "PATCH", "/api/v1/namespaces/shared", token, namespace("shared"))[0] == 201
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "fsx-data"},
        "spec": {
            "capacity": {"storage": "1200Gi"},
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "csi": {"driver": "fsx.csi.aws.com", "volumeHandle": "fs-0123456789abcdef0"},
        },
    }
    code, stored = call(server, "PATCH", "/api/v1/persistentvolumes/fsx-data", token, pv)
    assert (code, stored["spec"]["capacity"]) == (201, {"storage": "1200Gi"})
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "fsx-data"},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": "fsx-data",
            "resources": {"requests": {"storage": "1200Gi"}},
        },
    }
    assert call(server, "PATCH", "/api/v1/namespaces/shared/persistentvolumeclaims/fsx-data", token, pvc)[0] == 201
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "workers"},
        "spec": {"clusterIP": "None", "selector": {"app": "workers"}, "ports": [{"port": 29500}]},
    }
    code, stored = call(server, "PATCH", "/api/v1/namespaces/shared/services/workers", token, service)
    assert (code, stored["metadata"]["namespace"]) == (201, "shared")
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "neuron-monitor", "labels": {"app": "neuron-monitor"}},
        "spec": {
            "selector": {"matchLabels": {"app": "neuron-monitor"}},
            "template": {
                "metadata": {"labels": {"app": "neuron-monitor"}},
                "spec": {"containers": [{"name": "monitor", "image": "neuron-monitor:latest"}]},
            },
        },
    }
    assert (
        call(server, "PATCH", "/apis/apps/v1/namespaces/shared/daemonsets/neuron-monitor", token, daemonset)[0] == 201
    )


def test_an_indexed_neuron_job_applied_twice_is_idempotent(server: LocalKubeApiServer, token: str, train: str) -> None:
    path = JOBS.format(ns=train, name="train-run-1")
    code, first = call(server, "PATCH", path, token, job("train-run-1"))
    assert code == 201
    metadata = first["metadata"]
    assert metadata["managedFields"][0]["manager"] == "trainrun"
    assert metadata["managedFields"][0]["operation"] == "Apply"
    assert {"uid", "resourceVersion", "creationTimestamp"} <= set(metadata)
    # A limit alone sets the request.
    requests = first["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests["memory"] == "1000Gi"
    code, again = call(server, "PATCH", path, token, job("train-run-1"))
    assert code == 200
    assert again["metadata"]["uid"] == metadata["uid"]
    assert again["metadata"]["resourceVersion"] == metadata["resourceVersion"]
    code, changed = call(server, "PATCH", path, token, job("train-run-1", backoffLimit=1))
    assert code == 200
    assert changed["metadata"]["uid"] == metadata["uid"]
    assert int(changed["metadata"]["resourceVersion"]) > int(metadata["resourceVersion"])
    code, listed = call(
        server, "GET", f"/apis/batch/v1/namespaces/{train}/jobs", token, labelSelector="trainrun.io/run-id=run-1"
    )
    assert code == 200
    assert "train-run-1" in [item["metadata"]["name"] for item in listed["items"]]
    code, listed = call(
        server, "GET", f"/apis/batch/v1/namespaces/{train}/jobs", token, labelSelector="trainrun.io/run-id=run-2"
    )
    assert listed["items"] == []


def test_dry_run_stores_nothing(server: LocalKubeApiServer, token: str, train: str) -> None:
    path = JOBS.format(ns=train, name="rehearsal")
    code, body = call(server, "PATCH", path, token, job("rehearsal"), dryRun="All")
    assert (code, body["metadata"]["name"]) == (201, "rehearsal")
    assert call(server, "GET", path, token)[0] == 404
    bad = job("rehearsal")
    bad["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    assert call(server, "PATCH", path, token, bad, dryRun="All")[0] == 422


def test_delete(server: LocalKubeApiServer, token: str, train: str) -> None:
    path = JOBS.format(ns=train, name="short-lived")
    assert call(server, "PATCH", path, token, job("short-lived"))[0] == 201
    assert call(server, "DELETE", path, token, dryRun="All")[0] == 200
    assert call(server, "GET", path, token)[0] == 200
    assert call(server, "DELETE", path, token, propagationPolicy="Sideways")[0] == 400
    code, body = call(server, "DELETE", path, token, propagationPolicy="Background")
    assert (code, body["metadata"]["name"]) == (200, "short-lived")
    code, body = call(server, "GET", path, token)
    assert (code, body["reason"], body["message"]) == (404, "NotFound", 'jobs.batch "short-lived" not found')
