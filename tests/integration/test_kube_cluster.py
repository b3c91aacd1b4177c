"""The local Kubernetes of an EKS run (trainrun.local.kube_cluster), driven through its API server over HTTP.

Each test gets a fresh API server and cluster with two trn1.32xlarge nodes tainted as a run's
node group is; principals from moto's STS (`mock_aws`, in this process), tokens as
`aws eks get-token` makes them. Tests that run pods need root and util-linux (the kubelet's mount
namespaces); they are skipped, with the reason, where the kubelet cannot run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from trainrun.local.kube_apiserver import LocalKubeApiServer
from trainrun.local.kube_cluster import LocalKubeCluster, NodeGroupNodes, kubelet_tools
from trainrun.logic.eks_node_group import NEURON_TAINT

from .test_kube_apiserver import ACCOUNT, ADMIN_POLICY, REGION, ROLE_ARN, call, eks_token

CLUSTER = "trainrun-test"
NS = "trainrun"
FS_ID = "fs-0123456789abcdef0"
NEURON, NEURON_CORE, EFA = "aws.amazon.com/neuron", "aws.amazon.com/neuroncore", "vpc.amazonaws.com/efa"
KUBELET_UNAVAILABLE = kubelet_tools()[1]
needs_kubelet = pytest.mark.skipif(
    KUBELET_UNAVAILABLE is not None, reason=f"the local kubelet cannot run here: {KUBELET_UNAVAILABLE}"
)
NODES = NodeGroupNodes(
    cluster_name=CLUSTER,
    nodegroup_name="trn1-32xlarge",
    count=2,
    instance_type="trn1.32xlarge",
    capacity_type="CAPACITY_BLOCK",
    zones=("us-west-2d",),
    taints=(NEURON_TAINT,),
)
INDEX_ANNOTATION = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
INSTANCE_TYPES = ["trn1.2xlarge", "trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge"]


class Shipped:
    """What the cluster shipped to CloudWatch Logs: (group, stream) -> records."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def __call__(self, group: str, stream: str, messages: list[str]) -> None:
        self.records.setdefault((group, stream), []).extend(json.loads(m) for m in messages)

    def lines(self) -> list[str]:
        return [record["log"] for records in list(self.records.values()) for record in records]


@pytest.fixture(scope="module")
def token() -> Iterator[str]:
    with mock_aws():
        boto3.client("iam", region_name=REGION).create_role(RoleName="KubernetesRole", AssumeRolePolicyDocument="{}")
        session = boto3.client("sts", region_name=REGION).assume_role(RoleArn=ROLE_ARN, RoleSessionName="run")
        credentials = session["Credentials"]
        yield eks_token(
            {
                "aws_access_key_id": credentials["AccessKeyId"],
                "aws_secret_access_key": credentials["SecretAccessKey"],
                "aws_session_token": credentials["SessionToken"],
            },
            cluster=CLUSTER,
        )


@pytest.fixture
def shipped() -> Shipped:
    return Shipped()


@pytest.fixture
def cluster(token: str, tmp_path: Path, shipped: Shipped) -> Iterator[LocalKubeCluster]:
    api = LocalKubeApiServer(CLUSTER, REGION, ACCOUNT, {ROLE_ARN: [ADMIN_POLICY]})
    api.start()
    local = LocalKubeCluster(
        api,
        sandbox=tmp_path / "cluster",
        ship=shipped,
        node_environment=lambda node, instance: {
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": f"AKIA{instance[-8:].upper()}",
            "AWS_SECRET_ACCESS_KEY": "secret",
        },
        file_system=lambda fs_id: tmp_path / "file-systems" / fs_id,
        time_scale=30,
    )
    local.start()
    local.register_nodes(NODES)
    yield local
    local.stop()
    api.stop()


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def get(cluster: LocalKubeCluster, token: str, path: str, **query: str) -> dict[str, Any]:
    code, body = call(cluster.api, "GET", path, token, **query)
    assert code == 200, body
    return body


def apply(cluster: LocalKubeCluster, token: str, path: str, body: dict[str, Any]) -> None:
    code, answer = call(cluster.api, "PATCH", path, token, body, force="true")
    assert code in (200, 201), answer


def neuron_plugin() -> dict[str, Any]:
    """The Neuron device plugin's DaemonSet, as its Helm chart renders it (in short)."""
    return daemonset(
        "neuron-device-plugin",
        "public.ecr.aws/neuron/neuron-device-plugin:2.22.4.0",
        [
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
            {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"},
        ],
    )


def efa_plugin(*, tolerate_neuron: bool = True) -> dict[str, Any]:
    tolerations = [{"key": "vpc.amazonaws.com/efa", "operator": "Exists", "effect": "NoSchedule"}]
    if tolerate_neuron:
        tolerations.append({"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"})
    return daemonset(
        "aws-efa-k8s-device-plugin",
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.6",
        tolerations,
    )


def daemonset(name: str, image: str, tolerations: list[dict[str, str]]) -> dict[str, Any]:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": INSTANCE_TYPES}
                        ]
                    }
                ]
            }
        }
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"name": name}},
            "template": {
                "metadata": {"labels": {"name": name}},
                "spec": {
                    "tolerations": tolerations,
                    "affinity": affinity,
                    "containers": [
                        {"name": name, "image": image, "resources": {"requests": {"cpu": "10m", "memory": "20Mi"}}}
                    ],
                },
            },
        },
    }


def install_plugins(cluster: LocalKubeCluster, token: str, *plugins: dict[str, Any]) -> None:
    for plugin in plugins:
        apply(cluster, token, f"/apis/apps/v1/namespaces/kube-system/daemonsets/{plugin['metadata']['name']}", plugin)


def base_objects(cluster: LocalKubeCluster, token: str) -> None:
    """What a run applies before its Jobs: the namespace, the FSx volume and claim, the headless Service."""
    apply(
        cluster, token, f"/api/v1/namespaces/{NS}", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    )
    apply(
        cluster,
        token,
        "/api/v1/persistentvolumes/trainrun-fsx",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "trainrun-fsx"},
            "spec": {
                "capacity": {"storage": "1200Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "csi": {
                    "driver": "fsx.csi.aws.com",
                    "volumeHandle": FS_ID,
                    "volumeAttributes": {"dnsname": f"{FS_ID}.fsx.us-west-2.amazonaws.com", "mountname": "abcdefgh"},
                },
            },
        },
    )
    apply(
        cluster,
        token,
        f"/api/v1/namespaces/{NS}/persistentvolumeclaims/fsx",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "fsx", "namespace": NS},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": "trainrun-fsx",
                "resources": {"requests": {"storage": "1200Gi"}},
            },
        },
    )
    apply(
        cluster,
        token,
        f"/api/v1/namespaces/{NS}/services/workers",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "workers", "namespace": NS},
            "spec": {"clusterIP": "None", "selector": {"trainrun.aws/pod-group": "workers"}},
        },
    )


def indexed_job(name: str, script: str, *, nodes: int = 2, **spec: Any) -> dict[str, Any]:
    """A Job as the control plane applies its compile and train Jobs: Indexed, one pod per node."""
    resources = {
        "limits": {NEURON: "16", EFA: "8"},
        "requests": {NEURON: "16", EFA: "8", "cpu": "100", "memory": "400Gi"},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "completionMode": "Indexed",
            "completions": nodes,
            "parallelism": nodes,
            "backoffLimit": 0,
            **spec,
            "template": {
                "metadata": {"labels": {"trainrun.aws/pod-group": "workers"}},
                "spec": {
                    "restartPolicy": "Never",
                    "subdomain": "workers",
                    "tolerations": [{"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [
                        {
                            "name": "workload",
                            "image": "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training-neuronx:2.1.2",
                            "command": ["/bin/bash", "-c", script],
                            "env": [
                                {
                                    "name": "NODE_RANK",
                                    "valueFrom": {"fieldRef": {"fieldPath": INDEX_ANNOTATION}},
                                },
                                {"name": "MASTER_ADDR", "value": f"{name}-0.workers"},
                            ],
                            "resources": resources,
                            "volumeMounts": [
                                {"name": "fsx", "mountPath": "/fsx"},
                                {"name": "shm", "mountPath": "/dev/shm"},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx"}},
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
                    ],
                },
            },
        },
    }


def job_reaching(cluster: LocalKubeCluster, token: str, name: str, kind: str) -> dict[str, Any]:
    """The Job, once it has the condition `kind`."""

    def reached() -> dict[str, Any] | None:
        job = get(cluster, token, job_path(name))
        return job if condition(job, kind) else None

    return wait_for(reached, f"{name} {kind}")


def job_path(name: str) -> str:
    return f"/apis/batch/v1/namespaces/{NS}/jobs/{name}"


def condition(job: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (job.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def pods_of(cluster: LocalKubeCluster, token: str, job: str) -> list[dict[str, Any]]:
    return get(cluster, token, f"/api/v1/namespaces/{NS}/pods", labelSelector=f"job-name={job}")["items"]


# --- nodes and device plugins ---------------------------------------------------------------------------
def test_nodes_register_with_devices_only_once_their_plugins_run(cluster: LocalKubeCluster, token: str) -> None:
    nodes = get(cluster, token, "/api/v1/nodes")
    assert nodes["kind"] == "NodeList" and len(nodes["items"]) == 2
    node = nodes["items"][0]
    name = node["metadata"]["name"]
    assert name.startswith("ip-10-0-") and name.endswith(".us-west-2.compute.internal")
    labels = node["metadata"]["labels"]
    assert labels["eks.amazonaws.com/nodegroup"] == "trn1-32xlarge"
    assert labels["node.kubernetes.io/instance-type"] == "trn1.32xlarge"
    assert labels["topology.kubernetes.io/zone"] == "us-west-2d"
    assert labels["kubernetes.io/hostname"] == name
    assert node["spec"]["taints"] == [{"key": "aws.amazon.com/neuron", "value": "true", "effect": "NoSchedule"}]
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert node["status"]["capacity"]["cpu"] == "128" and node["status"]["capacity"]["pods"] == "247"
    assert node["status"]["allocatable"]["cpu"] == "127610m"
    assert NEURON not in node["status"]["allocatable"]
    assert get(cluster, token, f"/api/v1/nodes/{name}")["metadata"]["name"] == name

    # The EFA plugin as its chart has it tolerates no Neuron taint: it runs nowhere.
    install_plugins(cluster, token, neuron_plugin(), efa_plugin(tolerate_neuron=False))

    def devices() -> dict[str, str] | None:
        allocatable = get(cluster, token, f"/api/v1/nodes/{name}")["status"]["allocatable"]
        return allocatable if NEURON in allocatable else None

    allocatable = wait_for(devices, "the Neuron device plugin to advertise")
    assert (allocatable[NEURON], allocatable[NEURON_CORE]) == ("16", "32")
    assert EFA not in allocatable
    plugin_pods = get(cluster, token, "/api/v1/namespaces/kube-system/pods")["items"]
    assert len(plugin_pods) == 2 and {p["spec"]["nodeName"] for p in plugin_pods} == set(cluster.node_names)
    install_plugins(cluster, token, efa_plugin())
    assert (
        wait_for(lambda: get(cluster, token, f"/api/v1/nodes/{name}")["status"]["allocatable"].get(EFA), "EFA") == "8"
    )


def test_without_the_neuron_device_plugin_pods_stay_pending(cluster: LocalKubeCluster, token: str) -> None:
    base_objects(cluster, token)
    install_plugins(cluster, token, efa_plugin())
    apply(cluster, token, job_path("compile"), indexed_job("compile", "true"))

    def unschedulable() -> list[str]:
        pods = pods_of(cluster, token, "compile")
        messages = [(condition(p, "PodScheduled") or {}).get("message", "") for p in pods]
        return messages if len(messages) == 2 and all("Insufficient" in m for m in messages) else []

    messages = wait_for(unschedulable, "the pods to be unschedulable")
    assert messages[0] == (
        "0/2 nodes are available: 2 Insufficient aws.amazon.com/neuron. preemption: 0/2 nodes are available: "
        "2 No preemption victims found for incoming pod."
    )
    pod = pods_of(cluster, token, "compile")[0]
    assert pod["status"]["phase"] == "Pending" and condition(pod, "PodScheduled")["reason"] == "Unschedulable"
    job = get(cluster, token, job_path("compile"))
    assert job["status"]["active"] == 2 and job["status"].get("ready") == 0


def test_an_untolerated_taint_is_named(cluster: LocalKubeCluster, token: str) -> None:
    base_objects(cluster, token)
    job = indexed_job("stage", "true", nodes=1)
    job["spec"]["template"]["spec"]["tolerations"] = []
    apply(cluster, token, job_path("stage"), job)
    message = wait_for(
        lambda: [(condition(p, "PodScheduled") or {}).get("message") for p in pods_of(cluster, token, "stage")][0:1],
        "the pod to be unschedulable",
    )[0]
    assert message == (
        "0/2 nodes are available: 2 node(s) had untolerated taint {aws.amazon.com/neuron: true}. preemption: "
        "0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )


# --- Jobs run -----------------------------------------------------------------------------------------------
@needs_kubelet
def test_an_indexed_job_runs_its_pods_and_completes(
    cluster: LocalKubeCluster, token: str, shipped: Shipped, tmp_path: Path
) -> None:
    base_objects(cluster, token)
    install_plugins(cluster, token, neuron_plugin(), efa_plugin())
    script = (
        'echo "index=$JOB_COMPLETION_INDEX rank=$NODE_RANK host=$HOSTNAME user=$(id -un)"; '
        # As torchrun waits for its rendezvous host: a peer is in DNS once its pod is Running.
        'for try in $(seq 100); do getent hosts "$MASTER_ADDR" >/dev/null && break; sleep 0.05; done; '
        'getent hosts "$MASTER_ADDR" >/dev/null && echo "resolved $MASTER_ADDR"; '
        'echo "staged by $HOSTNAME" > "/fsx/staged-$JOB_COMPLETION_INDEX"; '
        "mountpoint -q /dev/shm && echo shm; echo to-stderr >&2; echo '{\"step\": 1}'"
    )
    apply(cluster, token, job_path("compile"), indexed_job("compile", script))
    job = job_reaching(cluster, token, "compile", "Complete")
    status = job["status"]
    assert (status["succeeded"], status["failed"], status["active"], status["completedIndexes"]) == (2, 0, 0, "0,1")
    assert condition(job, "SuccessCriteriaMet")["reason"] == "CompletionsReached"
    assert condition(job, "Complete")["message"] == "Reached expected number of succeeded pods"
    assert status["startTime"] and status["completionTime"]
    pods = sorted(
        pods_of(cluster, token, "compile"),
        key=lambda p: p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"],
    )
    assert [p["spec"]["hostname"] for p in pods] == ["compile-0", "compile-1"]
    assert (
        pods[1]["metadata"]["name"].startswith("compile-1-")
        and len(pods[1]["metadata"]["name"]) == len("compile-1-") + 5
    )
    assert pods[0]["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "0"
    assert pods[0]["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert {p["spec"]["nodeName"] for p in pods} == set(cluster.node_names)  # one Trainium node each
    terminated = pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (pods[0]["status"]["phase"], terminated["exitCode"], terminated["reason"]) == ("Succeeded", 0, "Completed")
    assert pods[0]["status"]["hostIP"].startswith("10.0.")
    staged = tmp_path / "file-systems" / FS_ID
    assert (staged / "staged-1").read_text() == "staged by compile-1\n"
    lines = shipped.lines()
    assert "index=1 rank=1 host=compile-1 user=trainrun-workload" in lines
    assert "resolved compile-0.workers" in lines and "shm" in lines and "to-stderr" in lines
    [(group, stream)] = [
        key
        for key, records in shipped.records.items()
        if records[0]["kubernetes"]["pod_name"] == pods[1]["metadata"]["name"]
    ]
    record = next(r for r in shipped.records[(group, stream)] if r["log"] == "to-stderr")
    assert group == f"/aws/containerinsights/{CLUSTER}/application"
    node, container_id = pods[1]["spec"]["nodeName"], record["kubernetes"]["docker_id"]
    assert (
        stream
        == f"{node}-application.var.log.containers.{pods[1]['metadata']['name']}_{NS}_workload-{container_id}.log"
    )
    assert record["stream"] == "stderr" and record["_p"] == "F" and record["time"].endswith("Z")
    assert record["kubernetes"] | {"docker_id": "", "container_hash": ""} == {
        "pod_name": pods[1]["metadata"]["name"],
        "namespace_name": NS,
        "pod_id": pods[1]["metadata"]["uid"],
        "host": node,
        "container_name": "workload",
        "docker_id": "",
        "container_hash": "",
        "container_image": "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training-neuronx:2.1.2",
    }
    structured = next(r for r in shipped.records[(group, stream)] if r["log"] == '{"step": 1}')
    assert structured["log_processed"] == {"step": 1}


@needs_kubelet
def test_the_termination_message_is_the_containers_file(cluster: LocalKubeCluster, token: str) -> None:
    base_objects(cluster, token)
    install_plugins(cluster, token, neuron_plugin(), efa_plugin())
    job = indexed_job("export", 'echo "TRAINRUN-CHECKPOINTS 3" > /tmp/trainrun-message; exit 0', nodes=1)
    job["spec"]["template"]["spec"]["containers"][0]["terminationMessagePath"] = "/tmp/trainrun-message"
    apply(cluster, token, job_path("export"), job)
    job_reaching(cluster, token, "export", "Complete")
    [pod] = pods_of(cluster, token, "export")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] == "TRAINRUN-CHECKPOINTS 3\n"


@needs_kubelet
def test_a_failing_pod_fails_the_job_and_ends_the_others(cluster: LocalKubeCluster, token: str) -> None:
    base_objects(cluster, token)
    install_plugins(cluster, token, neuron_plugin(), efa_plugin())
    script = 'if [ "$JOB_COMPLETION_INDEX" = 1 ]; then echo broken; exit 3; fi; exec sleep 60'
    apply(cluster, token, job_path("train-1"), indexed_job("train-1", script))
    job = job_reaching(cluster, token, "train-1", "Failed")
    failed = condition(job, "Failed")
    assert (failed["reason"], failed["message"]) == (
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    )
    assert condition(job, "FailureTarget")["reason"] == "BackoffLimitExceeded"
    assert job["status"]["failed"] >= 1 and job["status"]["active"] == 0 and "completionTime" not in job["status"]
    phases = wait_for(
        lambda: sorted(p["status"]["phase"] for p in pods_of(cluster, token, "train-1")) or None, "the pods' phases"
    )
    assert "Running" not in phases


@needs_kubelet
def test_fail_job_makes_that_jobs_container_exit_1(cluster: LocalKubeCluster, token: str, shipped: Shipped) -> None:
    base_objects(cluster, token)
    install_plugins(cluster, token, neuron_plugin(), efa_plugin())
    cluster.fail_job("train")
    apply(cluster, token, job_path("train-2"), indexed_job("train-2", "echo ran", nodes=1))
    job = job_reaching(cluster, token, "train-2", "Failed")
    assert condition(job, "Failed")["reason"] == "BackoffLimitExceeded"
    assert "ran" in shipped.lines()
    assert any("--fail-at" in line for line in shipped.lines())


# --- deletion ------------------------------------------------------------------------------------------------
@needs_kubelet
def test_foreground_deletion_keeps_the_job_until_its_pods_are_gone(
    cluster: LocalKubeCluster, token: str, shipped: Shipped
) -> None:
    base_objects(cluster, token)
    install_plugins(cluster, token, neuron_plugin(), efa_plugin())
    # The container ignores SIGTERM: only the SIGKILL after the grace period (30 s / 30) ends it.
    script = "trap '' TERM; echo SIGTERM-ignored; while true; do sleep 0.1; done"
    job = indexed_job("train-3", script)
    apply(cluster, token, job_path("train-3"), job)
    # Both containers past their trap (Running is said before a container's shell has read its first
    # line: a SIGTERM then would end it at once, on a loaded machine)
    wait_for(lambda: shipped.lines().count("SIGTERM-ignored") == 2, "both containers to ignore SIGTERM")
    # From before the DELETE: on a loaded machine the calls below may take most of the grace period.
    started = time.monotonic()
    code, body = delete_with_body(cluster, token, job_path("train-3"), "Foreground")
    assert code == 202 and body["metadata"]["finalizers"] == ["foregroundDeletion"]
    held = get(cluster, token, job_path("train-3"))
    assert held["metadata"]["deletionTimestamp"]
    wait_for(lambda: call(cluster.api, "GET", job_path("train-3"), token)[0] == 404, "the Job to go")
    assert time.monotonic() - started >= 0.95  # SIGTERM was ignored: the grace period (1 s) passed first
    assert pods_of(cluster, token, "train-3") == []


def delete_with_body(cluster: LocalKubeCluster, token: str, path: str, propagation: str) -> tuple[int, dict[str, Any]]:
    """A DELETE with DeleteOptions in its body, as client-go and kubectl send it."""
    import urllib.error
    import urllib.request

    options = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
    request = urllib.request.Request(cluster.api.url + path, method="DELETE", data=json.dumps(options).encode())
    request.add_header("Content-Type", "application/json")
    request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@needs_kubelet
def test_background_deletion_removes_the_job_at_once_and_its_pods_after(cluster: LocalKubeCluster, token: str) -> None:
    base_objects(cluster, token)
    install_plugins(cluster, token, neuron_plugin(), efa_plugin())
    apply(cluster, token, job_path("train-4"), indexed_job("train-4", "exec sleep 60"))
    wait_for(lambda: [p for p in pods_of(cluster, token, "train-4") if p["status"]["phase"] == "Running"][1:], "pods")
    code, _ = call(cluster.api, "DELETE", job_path("train-4"), token, propagationPolicy="Background")
    assert code == 200 and call(cluster.api, "GET", job_path("train-4"), token)[0] == 404
    wait_for(lambda: pods_of(cluster, token, "train-4") == [], "the pods to go")


# --- node failure -------------------------------------------------------------------------------------------
@needs_kubelet
def test_a_lost_node_fails_its_pods_and_is_replaced(cluster: LocalKubeCluster, token: str) -> None:
    base_objects(cluster, token)
    install_plugins(cluster, token, neuron_plugin(), efa_plugin())
    cluster.lose_node_at_step(3, back_after=0.5)
    before = set(cluster.node_names)
    script = (
        "for step in 1 2 3 4 5 6 7 8 9; do "
        'echo "LOG Mon Jan  1 00:00:00 2024 - (0, $step) step_loss : 1.0 learning_rate : 1e-4 throughput : 10.0"; '
        "sleep 0.3; done"
    )
    policy = {"rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    apply(cluster, token, job_path("train-5"), indexed_job("train-5", script, podFailurePolicy=policy))
    job = job_reaching(cluster, token, "train-5", "Failed")
    failed = condition(job, "Failed")
    assert failed["reason"] == "PodFailurePolicy"
    assert "has condition DisruptionTarget matching FailJob rule at index 0" in failed["message"]
    after = wait_for(lambda: set(cluster.node_names) if len(cluster.node_names) == 2 else None, "the replacement")
    assert len(after - before) == 1 and len(before - after) == 1
    replacement = (after - before).pop()
    allocatable = wait_for(
        lambda: get(cluster, token, f"/api/v1/nodes/{replacement}")["status"]["allocatable"].get(NEURON),
        "the replacement's devices",
    )
    assert allocatable == "16"


def test_lightkube_applies_reads_and_deletes(cluster: LocalKubeCluster, token: str) -> None:
    """What the control plane's gateway does, with its client (lightkube 1.0.1)."""
    lightkube = pytest.importorskip("lightkube")
    from lightkube import codecs
    from lightkube.config.kubeconfig import KubeConfig
    from lightkube.config.models import Cluster, User
    from lightkube.resources.batch_v1 import Job
    from lightkube.resources.core_v1 import Node
    from lightkube.types import CascadeType

    config = KubeConfig.from_one(cluster=Cluster(server=cluster.api.url), user=User(token=token), namespace=NS)
    client = lightkube.Client(config=config, field_manager="trainrun")
    base_objects(cluster, token)
    manifest = indexed_job("stage", "true", nodes=1)
    client.apply(codecs.from_dict(manifest), dry_run=True, force=True)
    with pytest.raises(lightkube.ApiError):
        client.get(Job, "stage")
    client.apply(codecs.from_dict(manifest), force=True)
    assert client.get(Job, "stage").spec.completions == 1
    assert len(list(client.list(Node))) == 2
    assert [j.metadata.name for j in client.list(Job, labels={"job-name": "nope"})] == []
    client.delete(Job, "stage", cascade=CascadeType.FOREGROUND)
    wait_for(lambda: call(cluster.api, "GET", job_path("stage"), token)[0] == 404, "the Job to go")
