"""The Kubernetes gateway's credentials: the stack's Kubernetes role, assumed through the project's
AWS call wrapper (trainrun.adapters.aws_errors.call)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from trainrun.adapters import kubernetes
from trainrun.errors import TransientAwsError


class Eks:
    def describe_cluster(self, name: str) -> dict[str, Any]:
        return {"cluster": {"endpoint": "https://ABC.gr7.us-west-2.eks.amazonaws.com", "certificateAuthority": {}}}


class ThrottledSts:
    def assume_role(self, **kwargs: Any) -> dict[str, Any]:
        raise ClientError({"Error": {"Code": "Throttling", "Message": "Rate exceeded"}}, "AssumeRole")


def test_a_throttled_assume_role_is_transient_for_the_workflow_to_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubernetes, "client", lambda service: ThrottledSts())
    gateway = kubernetes.KubernetesGateway.for_cluster(
        Eks(),
        cluster="trainrun-r1",
        role_arn="arn:aws:iam::123456789012:role/trainrun-KubernetesRole",
        region="us-west-2",
        session_name="trainrun-r1",
    )
    with pytest.raises(TransientAwsError, match="sts:AssumeRole failed and may succeed if retried"):
        gateway.get("Namespace", "trainrun")


def test_a_steps_gateways_make_one_gateway_per_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a step's gateways (a teardown pass asks for its run's up to three times)
    from types import SimpleNamespace

    from trainrun import handlers
    from trainrun.model.resources import EksClusterRef

    described: list[str] = []

    class CountingEks(Eks):
        def describe_cluster(self, name: str) -> dict[str, Any]:
            described.append(name)
            return super().describe_cluster(name)

    monkeypatch.setattr(handlers, "client", lambda service: CountingEks())
    settings = SimpleNamespace(kubernetes_role_arn="arn:aws:iam::123456789012:role/k", region="us-west-2")
    gateways = handlers.kubernetes_gateways(settings)  # type: ignore[arg-type]
    record = SimpleNamespace(run_id="r1", eks=EksClusterRef(name="trainrun-r1", region="us-west-2"))
    # When it asks twice
    first, second = gateways(record), gateways(record)  # type: ignore[arg-type]
    # Then the cluster was described once and the gateway (its role session and token) is the same
    assert first is second and described == ["trainrun-r1"]
