"""The local ParallelCluster API under concurrent runs: one cluster's head node booting or stopping
(seconds of real Slurm) never holds up the answers about another cluster."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import boto3
import pytest

from trainrun.adapters.pcluster import PclusterApi
from trainrun.local.pcluster_api import BootedCluster, LocalPclusterApi
from trainrun.logic.cluster_config import ClusterIds

from .test_pcluster_api import REGION, aws_session, config_yaml, ec2, ids, moto_endpoint, signed_call, wait_for

__all__ = ["aws_session", "ec2", "ids", "moto_endpoint"]  # module fixtures shared with test_pcluster_api


class SlowHeadNodes:
    """A ClusterLifecycle whose boot and stop of the cluster named `slow` wait until released."""

    def __init__(self, slow: str):
        self.slow = slow
        self.release = threading.Event()
        self.in_boot = threading.Event()
        self.in_stop = threading.Event()

    def cluster_booted(self, cluster: BootedCluster) -> None:
        if cluster.name == self.slow:
            self.in_boot.set()
            self.release.wait(30)

    def cluster_gone(self, name: str, region: str) -> None:
        if name == self.slow:
            self.in_stop.set()
            self.release.wait(30)


@pytest.fixture
def service(moto_endpoint: str) -> Iterator[LocalPclusterApi]:
    with LocalPclusterApi(
        moto_endpoint, REGION, seconds_to_complete=60, seconds_to_delete=60, api_user_role_arn=None
    ) as local:
        yield local


def client(service: LocalPclusterApi, session: boto3.Session) -> PclusterApi:
    return PclusterApi(service.url, session=session, region=REGION, timeout=5)


def in_background(call: object) -> threading.Thread:
    thread = threading.Thread(target=call, daemon=True)  # type: ignore[arg-type]
    thread.start()
    return thread


def test_a_cluster_is_described_while_another_clusters_head_node_boots(
    service: LocalPclusterApi, aws_session: boto3.Session, ids: ClusterIds
) -> None:
    # Given two clusters, the head node of the first taking its time to boot
    lifecycle = service.lifecycle = SlowHeadNodes("slow-boot")
    api = client(service, aws_session)
    api.create_cluster("slow-boot", config_yaml(ids), region=REGION)
    api.create_cluster("quick-boot", config_yaml(ids), region=REGION)
    booting = in_background(lambda: wait_for(api, "slow-boot", "CREATE_COMPLETE"))
    assert lifecycle.in_boot.wait(10)
    try:
        # When the second is described (a poll of another run's workflow) during that boot
        started = time.monotonic()
        described = wait_for(api, "quick-boot", "CREATE_COMPLETE")
        # Then it answers at once, and completes on its own; the first is still creating
        assert described is not None and time.monotonic() - started < 5
        slow = client(service, aws_session).describe_cluster("slow-boot", region=REGION)
        assert slow is not None and slow.clusterStatus == "CREATE_IN_PROGRESS"
    finally:
        lifecycle.release.set()
    booting.join(10)
    assert client(service, aws_session).describe_cluster("slow-boot", region=REGION).clusterStatus == "CREATE_COMPLETE"


def test_a_cluster_is_described_while_another_clusters_head_node_stops(
    service: LocalPclusterApi, aws_session: boto3.Session, ids: ClusterIds
) -> None:
    # Given two created clusters, the head node of the first taking its time to stop
    lifecycle = SlowHeadNodes("slow-stop")
    api = client(service, aws_session)
    for name in ("slow-stop", "quick-stop"):
        api.create_cluster(name, config_yaml(ids), region=REGION)
        wait_for(api, name, "CREATE_COMPLETE")
    service.lifecycle = lifecycle
    deleting = in_background(lambda: client(service, aws_session).delete_cluster("slow-stop", region=REGION))
    assert lifecycle.in_stop.wait(10)
    try:
        # When the second is described and listed while the first one's head node stops
        started = time.monotonic()
        described = api.describe_cluster("quick-stop", region=REGION)
        status, listed = signed_call(service, aws_session, "GET", "/v3/clusters")
        # Then both answer at once
        assert described is not None and described.clusterStatus == "CREATE_COMPLETE"
        assert status == 200 and "quick-stop" in [cluster["clusterName"] for cluster in listed["clusters"]]
        assert time.monotonic() - started < 5
    finally:
        lifecycle.release.set()
    deleting.join(10)
