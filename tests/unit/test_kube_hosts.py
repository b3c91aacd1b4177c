"""A local pod's /etc/hosts (trainrun.local.kube_cluster): the names Kubernetes' DNS gives the pods
of a headless Service, and only of a headless one."""

from __future__ import annotations

from typing import Any

from trainrun.local.kube_cluster import _hosts_for


def pod(index: int, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"train-1-{index}-abcde",
            "namespace": "trainrun",
            "uid": f"uid-{index}",
            "labels": {"app": "w"},
        },
        "spec": {"hostname": f"train-1-{index}", "subdomain": "workers"},
        "status": {"phase": phase},
    }


def service(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "workers", "namespace": "trainrun"}, "spec": {"selector": {"app": "w"}, **spec}}


def test_a_headless_services_running_pods_are_named_in_each_others_hosts() -> None:
    pods = [pod(0), pod(1), pod(2, phase="Pending")]
    hosts = _hosts_for(pods[1], pods, [service(clusterIP="None")])
    assert "train-1-0.workers.trainrun" in hosts and "train-1-1.workers.trainrun" in hosts
    assert "train-1-2.workers" not in hosts  # not Running: no address yet


def test_a_service_with_a_cluster_ip_gives_its_pods_no_names() -> None:
    pods = [pod(0), pod(1)]
    for spec in ({}, {"clusterIP": "10.100.0.12"}):
        hosts = _hosts_for(pods[1], pods, [service(**spec)])
        assert ".workers" not in hosts and "train-1-1" in hosts  # its own hostname only
