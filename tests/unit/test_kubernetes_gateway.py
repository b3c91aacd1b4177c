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
