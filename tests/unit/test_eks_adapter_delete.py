"""The EKS teardown's deletions (trainrun.adapters.eks.delete_eks) when a resource's deletion ends
between the pass's look and its Delete call: a role whose delete permissions are conditioned on the
resource's tags then gets AccessDenied, not ResourceNotFound (a deleted resource has no tags)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from trainrun.adapters.eks import delete_eks

CLUSTER = "trainrun-r1-0123456789ab"


def refusal(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, "Operation")


class Paginator:
    def __init__(self, pages: list[dict[str, Any]]):
        self.pages = pages

    def paginate(self, **params: Any) -> list[dict[str, Any]]:
        return self.pages


class Eks:
    """A cluster with nothing left on it, whose deletion ends just before DeleteCluster arrives
    (`gone_by_then`), or which is still there and denied for another reason."""

    def __init__(self, *, gone_by_then: bool, status: str = "ACTIVE"):
        self.gone_by_then, self.status = gone_by_then, status
        self.described = 0
        self.deletes = 0

    def describe_cluster(self, name: str) -> dict[str, Any]:
        self.described += 1
        if self.described > 1 and self.gone_by_then:
            raise refusal("ResourceNotFoundException")
        return {"cluster": {"name": name, "status": self.status}}

    def get_paginator(self, operation: str) -> Paginator:
        return Paginator([{"nodegroups": [], "addons": []}])

    def delete_cluster(self, name: str) -> dict[str, Any]:
        self.deletes += 1
        raise refusal("AccessDeniedException")


class Ec2:
    def describe_launch_templates(self, **kwargs: Any) -> dict[str, Any]:
        raise refusal("InvalidLaunchTemplateName.NotFoundException")


def test_a_denied_delete_of_a_cluster_gone_meanwhile_is_its_deletion_done() -> None:
    progress = delete_eks(Eks(gone_by_then=True), Ec2(), cluster=CLUSTER, launch_template=None)
    assert progress.deleted == [f"eks cluster {CLUSTER}"] and progress.waiting_on == []


def test_a_denied_delete_of_a_cluster_still_there_is_a_denial() -> None:
    with pytest.raises(ClientError, match="AccessDeniedException"):
        delete_eks(Eks(gone_by_then=False), Ec2(), cluster=CLUSTER, launch_template=None)


def test_a_cluster_already_deleting_is_waited_on_without_asking_again() -> None:
    eks = Eks(gone_by_then=True, status="DELETING")
    progress = delete_eks(eks, Ec2(), cluster=CLUSTER, launch_template=None)
    assert progress.waiting_on == [f"eks cluster {CLUSTER} (DELETING)"] and eks.deletes == 0
