"""The local Kubernetes of an EKS run: nodes, controllers, a scheduler and kubelets behind one LocalKubeApiServer.

trainrun.local.kube_apiserver stores and checks objects; this module makes them do what a real
cluster makes them do, on this machine: nodes register when the managed node group is ACTIVE,
device plugins advertise Trainium and EFA devices, Jobs create Pods, the scheduler binds them or
says why not, and each bound Pod's container runs as a process in a sandbox like the local head
node's (trainrun.local.slurm_head_node), its output shipped to CloudWatch Logs as the Amazon
CloudWatch Observability add-on ships it. One control loop (`_reconcile`) plays the controllers,
woken by every change the API server stores, and at least every RECONCILE_SECONDS.

Nodes (`register_nodes`, called by the EKS emulator when a node group becomes ACTIVE): `desiredSize`
Node objects named as EC2 names instances (ip-10-0-x-y.<region>.compute.internal, ec2.internal in
us-east-1), labelled as EKS labels a managed node group's nodes (eks.amazonaws.com/nodegroup,
eks.amazonaws.com/capacityType, node.kubernetes.io/instance-type, topology.kubernetes.io/zone and
region, kubernetes.io/hostname = the node's name, kubernetes.io/arch and os, and the node group's
own labels), tainted with the node group's taints (EKS's NO_SCHEDULE, NO_EXECUTE, PREFER_NO_SCHEDULE
become NoSchedule, NoExecute, PreferNoSchedule), Ready. Capacity from EC2's own description of the
instance type (the emulated account's DescribeInstanceTypes: moto's table) - vCPUs, memory, and
the maximum pods EKS sets, `interfaces of network card 0 x (IPv4 addresses per interface - 1) + 2`
(Amazon EKS User Guide, "Amazon EKS recommended maximum Pods for each Amazon EC2 instance type";
247 on a trn1.32xlarge, as eni-max-pods.txt says). Allocatable is capacity less what the EKS AL2023
AMI's nodeadm reserves (amazon-eks-ami, nodeadm/internal/kubelet/config.go): kube-reserved memory
11 MiB per pod + 255 MiB, kube-reserved CPU 6% of the first core, 1% of the second, 0.5% of the next
two and 0.25% of the rest, and the hard eviction threshold memory.available 100Mi. Extended resources
appear in a node's capacity and allocatable only while a device plugin's pod runs on it ("Device
Plugins": the kubelet advertises what a registered plugin reports): the Neuron device plugin's
(a DaemonSet whose image is `neuron-device-plugin`) gives aws.amazon.com/neuron and
aws.amazon.com/neurondevice (the instance's Neuron devices) and aws.amazon.com/neuroncore (their
cores), from EC2's NeuronInfo; the EFA device plugin's (`aws-efa-k8s-device-plugin`)
vpc.amazonaws.com/efa, one per EFA interface the node's launch template attaches
(trainrun.logic.eks_node_group.efa_interface_count). A node group being deleted takes its nodes at once.

DaemonSet controller: a pod of a device plugin DaemonSet on every Ready node it should run on -
the template's nodeSelector and required node affinity select the node and its tolerations
tolerate the node's NoSchedule and NoExecute taints ("DaemonSet", "How Daemon Pods are scheduled");
each pod carries the node affinity on metadata.name the controller sets, so the scheduler binds it
to its node. Its "container" is the plugin this module plays: Running once bound. DaemonSets of
other images get no pods (nothing of theirs can run here). status: desiredNumberScheduled,
currentNumberScheduled, numberReady, numberAvailable, updatedNumberScheduled.

Job controller (Kubernetes docs, "Jobs"; Job API reference; pkg/controller/job): pods from the
template, owned by the Job (controller ownerReference, blockOwnerDeletion), with the labels
batch.kubernetes.io/controller-uid, batch.kubernetes.io/job-name, controller-uid and job-name
beside the template's, and the batch.kubernetes.io/job-tracking finalizer, which the controller
removes once it has counted the finished pod. Indexed: one pod per index not yet completed, at most
`parallelism` at once, named `<job>-<index>-<5 random>`, hostname `<job>-<index>`, the index in the
label and annotation batch.kubernetes.io/job-completion-index and in JOB_COMPLETION_INDEX (an env
entry whose fieldRef is that label); NonIndexed: `<job>-<5 random>`, up to
min(parallelism, completions - succeeded) at once. A pod being deleted is replaced at once
(podReplacementPolicy TerminatingOrFailed) unless the Job has a podFailurePolicy (then Failed only).
status: startTime, active, ready, terminating, succeeded, failed, completedIndexes (`0-2,4`, two
neighbours as `0,1`, as the controller formats them), uncountedTerminatedPods, completionTime, and
the conditions as Kubernetes 1.31+ writes them: success first SuccessCriteriaMet, then once no pod
is left running Complete (both reason CompletionsReached, "Reached expected number of succeeded
pods"); failure first FailureTarget, the running pods deleted, then Failed, both reason
BackoffLimitExceeded "Job has reached the specified backoff limit" once more pods failed than
backoffLimit (6 by default), or reason PodFailurePolicy, "Container <c> for pod <ns>/<pod> failed
with exit code <n> matching FailJob rule at index <i>" / "Pod <ns>/<pod> has condition <type>
matching FailJob rule at index <i>", when a podFailurePolicy rule with action FailJob matches
(Ignore: the failure is not counted; Count: counted). A Job being deleted gets no new pods.

Scheduler (kube-scheduler's filters, in its order: TaintToleration, NodeAffinity, NodeResourcesFit;
and VolumeBinding's PreFilter): a pod binds to a Ready node whose NoSchedule and NoExecute taints
it tolerates, that its nodeSelector and required node affinity select, with room for every
resource it requests (the sum of its containers' requests, or its largest init container's if more;
extended resources whole) in allocatable less what the node's unfinished pods request, and fewer
pods than allocatable pods; its PersistentVolumeClaims must exist and be Bound. Among the nodes that
fit, the one with the fewest pods (then by name). A pod that fits nowhere stays Pending with
PodScheduled False, reason Unschedulable, and the scheduler's message: `0/<nodes> nodes are
available: <count> <reason>, ... preemption: 0/<nodes> nodes are available: <count> <why>, ...`
(framework.FitError: the reasons counted and sorted; a resource shortage `Insufficient <resource>`,
`Too many pods`, `node(s) had untolerated taint {<key>: <value>}`, `node(s) didn't match Pod's node
affinity/selector`; preemption `No preemption victims found for incoming pod` for a shortage,
`Preemption is not helpful for scheduling` otherwise), `no nodes available to schedule pods` with
no node at all.

PersistentVolume binder: a claim naming its volume (volumeName, storageClassName "") binds to that
PersistentVolume when the volume exists, is not bound to another claim, has the claim's
storageClassName, its access modes and at least its requested storage; both become Bound.

Kubelet: a pod bound to a node runs its container as a process of this machine: `command` + `args`
(the image's entrypoint and the image itself cannot run here: a container without a command fails
with CreateContainerError), $(VAR) references expanded as Kubernetes expands them, in a private
mount namespace (`unshare --mount`) where
- each PersistentVolumeClaim volume bound to an FSx for Lustre volume (CSI driver fsx.csi.aws.com)
  is the local directory of that file system (the volumeHandle, `fs-...`: the same directory for
  every pod and Job of every cluster of the runtime, so what one Job stages the next one reads) at
  its volumeMount's mountPath; its root belongs to the workload user (below);
- an emptyDir is a fresh directory of the pod, a tmpfs for medium Memory (its sizeLimit the tmpfs's);
- /usr/local/bin holds the local head node's stand-ins (examples/local-head-node: python3,
  neuron_parallel_compile, ...), the aws CLI wrapper and the instance metadata's
  credentials stand-in of the node (its instance role's key: the node group's node role, as on
  AWS a pod without Pod Identity gets it from the instance metadata);
- /etc/hosts names the pod's hostname and, for a pod of a subdomain whose headless Service selects
  it, `<hostname>.<subdomain>[.<namespace>[.svc.cluster.local]]` of every Running pod that Service
  selects, all 127.0.0.1 (every pod runs on this machine; there is no CoreDNS: the file stands for
  the DNS records of a headless Service, "DNS for Services and Pods"), rewritten as pods come and go.
The process runs as this machine's unprivileged WORKLOAD_USER, as the head node's jobs do (a
container runs as root on AWS: here nothing of a pod may touch this machine's files as root), with
the container's env (value, fieldRef of metadata.name, namespace, uid, labels['...'],
annotations['...'], spec.nodeName, spec.serviceAccountName, status.hostIP, status.podIP) and what
Kubernetes adds: HOSTNAME (the pod's hostname), KUBERNETES_SERVICE_HOST/PORT (this API server),
and for the local AWS: AWS_CONFIG_FILE (the node's config: region, endpoint, the credentials
stand-in). HOME is a directory of the pod's own. Status as the kubelet reports it: phase Pending,
Running, Succeeded or Failed; hostIP, podIP, startTime; conditions PodReadyToStartContainers,
Initialized, ContainersReady, Ready, PodScheduled; containerStatuses[0] with state running or
terminated {exitCode, reason Completed or Error, startedAt, finishedAt, containerID, message}: the
message is what the container wrote to its terminationMessagePath (/dev/termination-log by default:
a file of the pod bound there, its mount point made on this machine if missing, as /fsx is), or
with terminationMessagePolicy FallbackToLogsOnError the end of a failed container's output.
Deletion: a Pod deleted gracefully gets SIGTERM, SIGKILL once its grace period (compressed by
`time_scale`) has passed, then goes (Kubernetes docs, "Termination of Pods"); the signals go to
every process of the container (in a container only its PID 1 gets the SIGTERM).

Garbage collector ("Garbage Collection"): an owner deleted with propagationPolicy Foreground stays
(deletionTimestamp, finalizer foregroundDeletion) while its dependents are deleted, and goes when
the last is gone; Background removes the owner at once and the collector its dependents then. Pod
garbage collector: a pod of a node that no longer exists is marked Failed with the condition
DisruptionTarget, reason DeletionByPodGC, message "PodGC: node no longer exists" ("Pod disruption
conditions"; pkg/controller/podgc), and force deleted.

Logs: every line a container prints, stdout and stderr, goes to CloudWatch Logs as the Amazon
CloudWatch Observability add-on's Fluent Bit ships it (its application-log.conf, as in
aws-samples/amazon-cloudwatch-container-insights, k8s-deployment-manifest-templates/.../fluent-bit.yaml):
log group `/aws/containerinsights/<cluster>/application`, stream `<node>-application.var.log.containers.
<pod>_<namespace>_<container>-<container id>.log` (log_stream_prefix ${HOST_NAME}- and the tail
input's tag of the kubelet's log file), each event a JSON record: `time`, `stream`, `_p` "F" (the
cri parser's full line), `log`, `log_processed` when the line is a JSON object (Merge_Log On,
Merge_Log_Key log_processed), and `kubernetes` {pod_name, namespace_name, pod_id, host,
container_name, docker_id, container_hash, container_image} (the kubernetes filter; Labels Off and
Annotations Off, so neither). Shipped every SHIP_SECONDS and when the container ends.

Rehearsals: `fail_job(kind)` makes the container of that Job (`kind`, or `kind-<n>`: train-1) exit
1 after its command ran; `lose_node_at_step(step)` takes away the node of the train pod whose output
first logs that step (parsed as trainrun.logic.job_log reads training lines): its processes are
killed, its Node deleted, its pods failed by the pod garbage collector (above), and after
`back_after` seconds (slurm_head_node.NODE_REPLACEMENT_SECONDS, the Auto Scaling group replacing the
instance, compressed) a node of a new name registers in its place.

What this does NOT emulate (a real cluster does):
- containers and images: no image is pulled or checked (a wrong image runs here and fails there),
  no cgroups (no CPU or memory limit is enforced, no OOMKilled), no container user or filesystem:
  the host's, with the mounts above; pods of more than one container, init containers, probes,
  lifecycle hooks, restartPolicy OnFailure restarts, ephemeral storage;
- networking: every pod is this machine (127.0.0.1); no kube-proxy, no CoreDNS (no Service DNS
  beyond /etc/hosts above, no ClusterIP), no network policy, no real EFA or Neuron devices
  (NEURON_RT_VISIBLE_CORES and the like are not set);
- the Job controller's exponential back-off between retries, activeDeadlineSeconds,
  backoffLimitPerIndex, successPolicy, suspend, ttlSecondsAfterFinished, podFailurePolicy's
  FailIndex; CronJobs, Deployments, StatefulSets; DaemonSets other than the device plugins;
  preemption and priorities; pod topology spread, inter-pod affinity, preferred affinities,
  scoring beyond the fewest pods; node conditions other than Ready; a node group's scaling after
  it is ACTIVE; EKS draining nodes before a node group's deletion; Pod Identity and IRSA (pods get
  the node role's credentials); the Namespace's Terminating phase (its objects go at once and their
  processes get SIGTERM as deleted pods do); Events.
Server-side dry runs of the control plane's objects (dryRun=All) check the objects against a real
API server on AWS; this stands in for the cluster behind it.

Needs root and util-linux (unshare, mount, setpriv), like the local head node.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from trainrun.local.kube_apiserver import (
    DEFAULT_GRACE_SECONDS,
    FOREGROUND_FINALIZER,
    LocalKubeApiServer,
    quantity,
    timestamp,
)
from trainrun.local.slurm_head_node import (
    CREDENTIAL_VARIABLES,
    INSTANCE_CREDENTIALS,
    NODE_REPLACEMENT_SECONDS,
    STANDIN_BIN,
    SYSTEM_PATH,
    aws_standin,
    closed_above,
    default_aws_cli,
    default_standins,
    instance_credentials_standin,
    user_paths,
    workload_account,
    write_executable,
)
from trainrun.logic.eks_node_group import efa_interface_count
from trainrun.logic.job_log import TrainEvent, parse_line

logger = logging.getLogger(__name__)

__all__ = [
    "DEVICE_PLUGINS",
    "LocalKubeCluster",
    "LocalKubernetes",
    "NodeGroupNodes",
    "Ship",
    "certificate_authority",
    "instance_capacity",
    "kubelet_tools",
    "unschedulable_message",
]

# ship(log group, log stream, messages): what the CloudWatch Observability add-on's Fluent Bit puts.
Ship = Callable[[str, str, list[str]], None]

NEURON, NEURON_DEVICE, NEURON_CORE = "aws.amazon.com/neuron", "aws.amazon.com/neurondevice", "aws.amazon.com/neuroncore"
EFA = "vpc.amazonaws.com/efa"
# A device plugin DaemonSet, known by its image's repository name, and what it advertises.
DEVICE_PLUGINS = {"neuron-device-plugin": (NEURON, NEURON_DEVICE, NEURON_CORE), "aws-efa-k8s-device-plugin": (EFA,)}
JOB_NAME, CONTROLLER_UID = "batch.kubernetes.io/job-name", "batch.kubernetes.io/controller-uid"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
# The characters of generated name suffixes (apimachinery's util/rand: no vowels, no 0/1/3).
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
# EKS's taint effects as Kubernetes spells them.
TAINT_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}
BACKOFF_LIMIT_EXCEEDED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
COMPLETIONS_REACHED = ("CompletionsReached", "Reached expected number of succeeded pods")
POD_GC_CONDITION = ("DeletionByPodGC", "PodGC: node no longer exists")
DEFAULT_BACKOFF_LIMIT = 6
KUBELET_VERSION = "v1.35.0-eks-local"
# Where a container writes its termination message unless its spec says otherwise (Container API reference).
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RECONCILE_SECONDS = 0.1
SHIP_SECONDS = 0.2
# What the tools the kubelet needs are; like the head node, it looks beyond PATH for them.
KUBELET_TOOLS = ("unshare", "mount", "setpriv", "sh")


# --- nodes --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class InstanceCapacity:
    cpu: int
    memory_mib: int
    pods: int
    neuron_devices: int
    neuron_cores: int
    efa: int


def instance_capacity(instance_type: str) -> InstanceCapacity:
    """A node's capacity from EC2's description of its instance type (moto's DescribeInstanceTypes
    data) and the EFA interfaces its launch template attaches (see the module docstring)."""
    from moto.ec2.models.instance_types import INSTANCE_TYPES

    info = INSTANCE_TYPES.get(instance_type)
    if info is None:
        raise ValueError(f"{instance_type}: EC2 describes no such instance type")
    network = info["NetworkInfo"]
    card = network["NetworkCards"][network.get("DefaultNetworkCardIndex", 0)]
    devices = info.get("NeuronInfo", {}).get("NeuronDevices", [])
    return InstanceCapacity(
        cpu=int(info["VCpuInfo"]["DefaultVCpus"]),
        memory_mib=int(info["MemoryInfo"]["SizeInMiB"]),
        pods=int(card["MaximumNetworkInterfaces"]) * (int(network["Ipv4AddressesPerInterface"]) - 1) + 2,
        neuron_devices=sum(int(d["Count"]) for d in devices),
        neuron_cores=sum(int(d["Count"]) * int(d["CoreInfo"]["Count"]) for d in devices),
        efa=efa_interface_count(instance_type),
    )


def _reserved_cpu_millicores(cpus: int) -> int:
    """nodeadm's kube-reserved CPU: 6% of the first core, 1% of the second, 0.5% of the next two, 0.25% beyond."""
    shares = [(1, Decimal("0.06")), (1, Decimal("0.01")), (2, Decimal("0.005")), (cpus, Decimal("0.0025"))]
    left, reserved = cpus, Decimal(0)
    for cores, share in shares:
        taken = min(left, cores)
        reserved += taken * 1000 * share
        left -= taken
    return int(reserved)


@dataclass(frozen=True)
class NodeGroupNodes:
    """What a managed node group's nodes are made of (the EKS emulator gives it when the group is ACTIVE)."""

    cluster_name: str
    nodegroup_name: str
    count: int
    instance_type: str
    capacity_type: str
    zones: tuple[str, ...]
    taints: tuple[Mapping[str, str], ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass
class _Node:
    name: str
    group: NodeGroupNodes
    zone: str
    ip: str
    instance_id: str
    capacity: InstanceCapacity
    # The node's instance role's credentials (its instance metadata's), and its /usr/local/bin.
    environment: dict[str, str] = field(default_factory=dict)
    bin: Path | None = None


# --- pods as processes ------------------------------------------------------------------------------------
@dataclass
class _Container:
    pod_uid: str
    namespace: str
    pod: str
    node: str
    container: str
    container_id: str
    stream: str
    record: dict[str, Any]
    process: subprocess.Popen[bytes]
    hosts: Path
    # The file bound at the container's terminationMessagePath, and its terminationMessagePolicy.
    termination: Path
    fallback_to_logs: bool
    train: bool
    started: str
    lines: list[str] = field(default_factory=list)
    # The last lines it printed, for a termination message taken from its output.
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=80))
    lock: threading.Lock = field(default_factory=threading.Lock)
    term_sent: float | None = None
    readers: list[threading.Thread] = field(default_factory=list)
    exit_code: int | None = None


class LocalKubeCluster:
    """The cluster behind one LocalKubeApiServer: `start()`, `register_nodes(...)`; `stop()` kills every pod.

    `sandbox`: a directory of this machine for the nodes' and pods' files; `ship`: puts container
    log records (see Ship); `node_environment(node_name, instance_id)`: AWS_ENDPOINT_URL, the region
    and the node's instance role's key (AWS_ACCESS_KEY_ID, ...); `file_system(fs_id)`: the local
    directory of an FSx file system; `time_scale`: nominal seconds of the cluster's waits (grace
    periods) per real second; `region`: the cluster's (node names, labels)."""

    def __init__(
        self,
        api: LocalKubeApiServer,
        *,
        sandbox: Path,
        ship: Ship,
        node_environment: Callable[[str, str], dict[str, str]],
        file_system: Callable[[str], Path],
        time_scale: float = 1.0,
        outside_world: Mapping[str, str] | None = None,
    ):
        self.api = api
        # Every container's stand-ins of the world outside the account (the fixture's git
        # repositories instead of their URLs: GIT_CONFIG_GLOBAL), as the head node's .gitconfig.
        self._outside_world = dict(outside_world or {})
        self.cluster_name = api.cluster_name
        self.region = api.region
        self.sandbox = sandbox
        self._ship = ship
        self._node_environment = node_environment
        self._file_system = file_system
        self.time_scale = time_scale
        self._aws_cli = default_aws_cli()
        self._standins = default_standins()
        # Jobs (by kind: compile, train) whose container exits 1 after its command (`fail_job`).
        self.failing_jobs: set[str] = set()
        self._lose_at_step: int | None = None
        self._lose_after = NODE_REPLACEMENT_SECONDS
        self._lost: str | None = None  # the node a train pod logged the step on
        self._nodes: dict[str, _Node] = {}
        self._containers: dict[str, _Container] = {}
        self._counted: dict[str, set[str]] = {}  # job uid -> pod uids counted in its status
        self._failed_plugins: set[str] = set()
        self._replacements: list[tuple[float, NodeGroupNodes, str]] = []
        self._lock = threading.RLock()
        self._ship_lock = threading.Lock()  # one shipper at a time: a stream's lines stay in order
        self._ship_failing: set[str] = set()  # pods whose output could not be shipped
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._kubelet_problem: str | None = None
        self._tools: dict[str, str] = {}
        api.add_listener(self._wake.set)

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self.sandbox.mkdir(parents=True, exist_ok=True)
        self.sandbox.chmod(0o755)  # the workload user reads the nodes' stand-ins and the pods' hosts files
        self._kubelet_problem = self._check_kubelet()
        for target, name in ((self._loop, "controllers"), (self._ship_loop, "log-shipper")):
            thread = threading.Thread(target=target, name=f"trainrun-kube-{name}-{self.cluster_name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Kill every pod's processes, ship their last lines; the controllers stop. Idempotent."""
        self._stopping.set()
        self._wake.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=10)
        self._threads.clear()
        with self._lock:
            containers = list(self._containers.values())
        for container in containers:
            _signal_group(container.process, signal.SIGKILL)
        for container in containers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                container.process.wait(timeout=10)
            for reader in container.readers:
                reader.join(timeout=5)
        self._flush_logs()

    # --- nodes ----------------------------------------------------------------------------------
    def register_nodes(self, group: NodeGroupNodes) -> list[str]:
        """Register the node group's nodes (Ready; see the module docstring); their names."""
        return [self._register_node(group, group.zones[n % len(group.zones)]) for n in range(group.count)]

    def remove_nodegroup(self, nodegroup_name: str) -> None:
        """The node group's instances are gone: its Node objects are deleted (their pods then fail)."""
        with self._lock:
            names = [name for name, node in self._nodes.items() if node.group.nodegroup_name == nodegroup_name]
            self._replacements = [r for r in self._replacements if r[1].nodegroup_name != nodegroup_name]
        for name in names:
            self._remove_node(name)

    @property
    def node_names(self) -> list[str]:
        with self._lock:
            return sorted(self._nodes)

    def _register_node(self, group: NodeGroupNodes, zone: str) -> str:
        capacity = instance_capacity(group.instance_type)
        with self._lock:
            ip = _free_address({node.ip for node in self._nodes.values()})
            domain = "ec2.internal" if self.region == "us-east-1" else f"{self.region}.compute.internal"
            name = f"ip-{ip.replace('.', '-')}.{domain}"
            node = _Node(name, group, zone, ip, f"i-{uuid.uuid4().hex[:17]}", capacity)
            node.environment = self._node_environment(name, node.instance_id)
            node.bin = self._node_bin(node)
            self._nodes[name] = node
        labels = {
            **group.labels,
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "kubernetes.io/hostname": name,
            "node.kubernetes.io/instance-type": group.instance_type,
            "topology.kubernetes.io/region": self.region,
            "topology.kubernetes.io/zone": zone,
            "eks.amazonaws.com/nodegroup": group.nodegroup_name,
            "eks.amazonaws.com/capacityType": group.capacity_type,
        }
        taints = [
            {
                "key": t["key"],
                **({"value": t["value"]} if t.get("value") else {}),
                "effect": TAINT_EFFECTS[t["effect"]],
            }
            for t in group.taints
        ]
        now = self._now()
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        pressures = [
            {
                "type": kind,
                "status": "False",
                "reason": f"KubeletHasSufficient{what}",
                "message": f"kubelet has sufficient {what.lower()} available",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
            for kind, what in (("MemoryPressure", "Memory"), ("DiskPressure", "Disk"), ("PIDPressure", "PID"))
        ]
        self.api.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": {"providerID": f"aws:///{zone}/{node.instance_id}", **({"taints": taints} if taints else {})},
                "status": {
                    "capacity": _resources(capacity, allocatable=False, devices=()),
                    "allocatable": _resources(capacity, allocatable=True, devices=()),
                    "conditions": [*pressures, ready],
                    "addresses": [
                        {"type": "InternalIP", "address": ip},
                        {"type": "InternalDNS", "address": name},
                        {"type": "Hostname", "address": name},
                    ],
                    # Every field NodeSystemInfo requires (clients such as lightkube refuse a Node without).
                    "nodeInfo": {
                        "architecture": "amd64",
                        "bootID": str(uuid.uuid4()),
                        "containerRuntimeVersion": "containerd://local",
                        "kernelVersion": os.uname().release,
                        "kubeProxyVersion": "",
                        "kubeletVersion": KUBELET_VERSION,
                        "machineID": uuid.uuid4().hex,
                        "operatingSystem": "linux",
                        "osImage": "Amazon Linux 2023 (trainrun local)",
                        "systemUUID": str(uuid.uuid4()),
                    },
                },
            }
        )
        return name

    def _remove_node(self, name: str) -> None:
        with self._lock:
            node = self._nodes.pop(name, None)
            doomed = [c for c in self._containers.values() if c.node == name]
        for container in doomed:  # the instance is gone: its processes with it, at once
            _signal_group(container.process, signal.SIGKILL)
        if node is not None:
            self.api.remove("nodes", "", name)

    def _node_bin(self, node: _Node) -> Path:
        """The node's /usr/local/bin: the head node's stand-ins, the aws CLI wrapper, and the
        instance metadata's credentials stand-in with the node's instance role's key."""
        directory = self.sandbox / "nodes" / node.name
        bin_dir = directory / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o755)
        if self._standins is not None:
            for standin in sorted(self._standins.iterdir()):
                if standin.is_file():
                    (bin_dir / standin.name).unlink(missing_ok=True)  # never write through a symlink
                    shutil.copy2(standin, bin_dir / standin.name)
        env = node.environment
        region = env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION") or self.region
        endpoint = f"endpoint_url = {env['AWS_ENDPOINT_URL']}\n" if env.get("AWS_ENDPOINT_URL") else ""
        config = directory / "aws-config"
        config.write_text(
            f"[default]\nregion = {region}\n{endpoint}credential_process = {STANDIN_BIN}/{INSTANCE_CREDENTIALS}\n"
        )
        config.chmod(0o644)
        wrapper_env = {k: v for k, v in env.items() if k not in CREDENTIAL_VARIABLES}
        wrapper_env.update(AWS_DEFAULT_REGION=region, AWS_CONFIG_FILE=str(config))
        cli = os.path.abspath(self._aws_cli) if self._aws_cli is not None else None
        write_executable(bin_dir / "aws", aws_standin(cli, wrapper_env))
        write_executable(bin_dir / INSTANCE_CREDENTIALS, instance_credentials_standin(env, {}))
        return bin_dir

    # --- rehearsals -------------------------------------------------------------------------------
    def fail_job(self, kind: str) -> None:
        """The container of the Job `kind` (or `kind-<n>`) exits 1 after its command ran."""
        self.failing_jobs.add(kind)

    def lose_node_at_step(self, step: int, *, back_after: float = NODE_REPLACEMENT_SECONDS) -> None:
        """The node of the train pod whose output first logs `step` goes away; a replacement
        registers `back_after` seconds later. Once."""
        if step < 1:
            raise ValueError(f"step {step}: steps are numbered from 1")
        self._lose_at_step, self._lose_after = step, back_after

    # --- the control loop --------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(RECONCILE_SECONDS)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                self._reconcile()
            except Exception:
                logger.warning("the local Kubernetes of %s failed a reconcile", self.cluster_name, exc_info=True)

    def _reconcile(self) -> None:
        self._node_failures()
        self._daemonsets()
        self._node_devices()
        self._bind_volumes()
        self._collect_garbage()
        self._jobs()
        self._schedule()
        self._kubelets()

    def _node_failures(self) -> None:
        with self._lock:
            lost, self._lost = self._lost, None
            due = [r for r in self._replacements if r[0] <= time.monotonic()]
            self._replacements = [r for r in self._replacements if r[0] > time.monotonic()]
        if lost is not None and lost in self._nodes:
            group = self._nodes[lost].group
            logger.debug("node %s lost at step %s; replaced in %.1f s", lost, self._lose_at_step, self._lose_after)
            zone = self._nodes[lost].zone
            self._remove_node(lost)
            with self._lock:
                self._replacements.append((time.monotonic() + self._lose_after, group, zone))
        for _, group, zone in due:
            self._register_node(group, zone)

    # --- DaemonSets and device plugins -------------------------------------------------------------
    def _daemonsets(self) -> None:
        nodes = self.api.objects("nodes")
        pods = self.api.objects("pods")
        for ds in self.api.objects("daemonsets"):
            meta = ds["metadata"]
            if meta.get("deletionTimestamp") or _device_plugin(ds) is None:
                continue
            template = ds["spec"]["template"]
            owned = [p for p in pods if _owner_uid(p) == meta["uid"]]
            on = {_daemon_node(p): p for p in owned}
            wanted = [n for n in nodes if _ready(n) and _daemon_fits(template.get("spec") or {}, n)]
            for node in wanted:
                name = node["metadata"]["name"]
                if name not in on:
                    self.api.create(self._daemon_pod(ds, name))
            wanted_names = {n["metadata"]["name"] for n in wanted}
            for name, pod in on.items():
                if name not in wanted_names and not pod["metadata"].get("deletionTimestamp"):
                    self.api.delete(
                        "pods", pod["metadata"]["namespace"], pod["metadata"]["name"], propagation="Background"
                    )
            running = [p for p in owned if (p.get("status") or {}).get("phase") == "Running"]
            status = {
                "desiredNumberScheduled": len(wanted),
                "currentNumberScheduled": len([p for p in owned if p["spec"].get("nodeName")]),
                "numberMisscheduled": 0,
                "numberReady": len(running),
                "numberAvailable": len(running),
                "updatedNumberScheduled": len(owned),
                "observedGeneration": meta.get("generation", 1),
            }
            self.api.update("daemonsets", meta["namespace"], meta["name"], _with_status(status))

    def _daemon_pod(self, ds: dict[str, Any], node: str) -> dict[str, Any]:
        meta, template = ds["metadata"], ds["spec"]["template"]
        spec = json.loads(json.dumps(template.get("spec") or {}))
        # The DaemonSet controller pins each pod to its node with required node affinity on the
        # node's name ("How Daemon Pods are scheduled").
        spec["affinity"] = {
            **(spec.get("affinity") or {}),
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                }
            },
        }
        spec["tolerations"] = [*(spec.get("tolerations") or []), *_DAEMON_TOLERATIONS]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{meta['name']}-{_suffix()}",
                "namespace": meta["namespace"],
                "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                "ownerReferences": [_owner(ds)],
            },
            "spec": spec,
            "status": {"phase": "Pending"},
        }

    def _node_devices(self) -> None:
        """Each node's capacity and allocatable: its instance's, with the extended resources of the
        device plugins running on it."""
        running: dict[str, set[str]] = {}
        daemonsets = {d["metadata"]["uid"]: d for d in self.api.objects("daemonsets")}
        for pod in self.api.objects("pods"):
            owner = daemonsets.get(_owner_uid(pod) or "")
            plugin = _device_plugin(owner) if owner is not None else None
            if plugin is not None and (pod.get("status") or {}).get("phase") == "Running":
                running.setdefault(pod["spec"].get("nodeName", ""), set()).update(DEVICE_PLUGINS[plugin])
        with self._lock:
            nodes = dict(self._nodes)
        for name, node in nodes.items():
            devices = tuple(sorted(running.get(name, set())))

            def advertise(obj: dict[str, Any], node: _Node = node, devices: tuple[str, ...] = devices) -> None:
                obj["status"]["capacity"] = _resources(node.capacity, allocatable=False, devices=devices)
                obj["status"]["allocatable"] = _resources(node.capacity, allocatable=True, devices=devices)

            self.api.update("nodes", "", name, advertise)

    # --- PersistentVolumes ------------------------------------------------------------------------
    def _bind_volumes(self) -> None:
        volumes = {v["metadata"]["name"]: v for v in self.api.objects("persistentvolumes")}
        for claim in self.api.objects("persistentvolumeclaims"):
            meta, spec = claim["metadata"], claim.get("spec") or {}
            if (claim.get("status") or {}).get("phase") == "Bound" or not spec.get("volumeName"):
                continue
            volume = volumes.get(spec["volumeName"])
            if volume is None or not _volume_fits(volume, claim):
                continue
            reference = {
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
                "apiVersion": "v1",
            }
            vspec = volume.get("spec") or {}

            def bind_volume(obj: dict[str, Any], reference: dict[str, Any] = reference) -> None:
                obj["spec"]["claimRef"] = reference
                obj["status"] = {"phase": "Bound"}

            self.api.update("persistentvolumes", "", volume["metadata"]["name"], bind_volume)
            status = {
                "phase": "Bound",
                "accessModes": vspec.get("accessModes") or [],
                "capacity": vspec.get("capacity") or {},
            }
            self.api.update("persistentvolumeclaims", meta["namespace"], meta["name"], _with_status(status))

    # --- garbage collection ------------------------------------------------------------------------
    def _collect_garbage(self) -> None:
        nodes = {n["metadata"]["name"] for n in self.api.objects("nodes")}
        owners: dict[str, tuple[str, dict[str, Any]]] = {}
        for plural in ("jobs", "daemonsets"):
            for obj in self.api.objects(plural):
                owners[obj["metadata"]["uid"]] = (plural, obj)
        pods = self.api.objects("pods")
        for pod in pods:
            meta, spec = pod["metadata"], pod["spec"]
            owner = _owner_uid(pod)
            if owner is not None and owner not in owners and not meta.get("deletionTimestamp"):
                self.api.delete("pods", meta["namespace"], meta["name"], propagation="Background")
            if spec.get("nodeName") and spec["nodeName"] not in nodes:
                self._pod_gc(pod)
        for uid, (plural, obj) in owners.items():
            meta = obj["metadata"]
            if FOREGROUND_FINALIZER not in (meta.get("finalizers") or []):
                continue
            dependents = [p for p in pods if _owner_uid(p) == uid]
            for pod in dependents:
                if not pod["metadata"].get("deletionTimestamp"):
                    self.api.delete(
                        "pods", pod["metadata"]["namespace"], pod["metadata"]["name"], propagation="Background"
                    )
            if not dependents:
                self.api.update(
                    plural,
                    meta["namespace"],
                    meta["name"],
                    lambda o: o["metadata"].update(
                        finalizers=[f for f in o["metadata"].get("finalizers") or [] if f != FOREGROUND_FINALIZER]
                    ),
                )

    def _pod_gc(self, pod: dict[str, Any]) -> None:
        """The pod garbage collector's orphan: Failed with DisruptionTarget, then force deleted."""
        meta = pod["metadata"]
        reason, message = POD_GC_CONDITION

        def mark(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            if status.get("phase") not in ("Succeeded", "Failed"):
                status["phase"] = "Failed"
            if not any(c.get("type") == "DisruptionTarget" for c in status.get("conditions") or []):
                condition = _condition("DisruptionTarget", "True", reason, message, self._now())
                status["conditions"] = [*(status.get("conditions") or []), condition]

        if not meta.get("deletionTimestamp"):
            self.api.update("pods", meta["namespace"], meta["name"], mark)
            self.api.delete("pods", meta["namespace"], meta["name"], propagation="Background", grace=0)

    # --- the Job controller ----------------------------------------------------------------------------
    def _jobs(self) -> None:
        pods = self.api.objects("pods")
        jobs = self.api.objects("jobs")
        for job in jobs:
            uid = job["metadata"]["uid"]
            self._sync_job(job, [p for p in pods if _owner_uid(p) == uid])
        # The pods of a Job that is gone lose their job-tracking finalizer (the controller's orphan cleanup).
        uids = {job["metadata"]["uid"] for job in jobs}
        self._release_tracked([p for p in pods if _owner_uid(p) not in uids], {p["metadata"]["uid"] for p in pods})

    def _sync_job(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        meta, spec = job["metadata"], job["spec"]
        status = dict(job.get("status") or {})
        counted = self._counted.setdefault(meta["uid"], set())
        indexed = spec.get("completionMode") == "Indexed"
        completions = spec.get("completions")
        parallelism = spec.get("parallelism", 1)
        backoff_limit = spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
        policy = spec.get("podFailurePolicy")
        now = self._now()
        conditions = list(status.get("conditions") or [])
        done = _condition_true(conditions, "Complete") or _condition_true(conditions, "Failed")
        status.setdefault("startTime", now)
        completed = _parse_indexes(status.get("completedIndexes", ""))
        fail_job: tuple[str, str] | None = None
        for pod in pods:
            pod_uid, phase = pod["metadata"]["uid"], (pod.get("status") or {}).get("phase")
            if pod["metadata"].get("deletionTimestamp") and not pod["spec"].get("nodeName"):
                phase = "Failed"  # deleted before it was scheduled: it never runs, and counts as failed
            if pod_uid in counted or phase not in ("Succeeded", "Failed"):
                continue
            counted.add(pod_uid)
            if phase == "Succeeded":
                status["succeeded"] = status.get("succeeded", 0) + 1
                if indexed:
                    completed.add(int(pod["metadata"]["labels"][COMPLETION_INDEX]))
                continue
            action, message = _failure_policy(policy, pod)
            if action == "FailJob":
                fail_job = ("PodFailurePolicy", message)
            if action != "Ignore":
                status["failed"] = status.get("failed", 0) + 1
        self._release_tracked(pods, counted)
        live = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        active = [p for p in live if not p["metadata"].get("deletionTimestamp")]
        terminating = [p for p in live if p["metadata"].get("deletionTimestamp")]
        # A Job whose success criteria are met ends Complete: its pods deleted since do not fail it.
        if (
            not done
            and not _condition_true(conditions, "FailureTarget")
            and not _condition_true(conditions, "SuccessCriteriaMet")
        ):
            if fail_job is None and status.get("failed", 0) > backoff_limit:
                fail_job = BACKOFF_LIMIT_EXCEEDED
            if fail_job is not None:
                conditions.append(_condition("FailureTarget", "True", *fail_job, now))
        failing = next((c for c in conditions if c["type"] == "FailureTarget" and c["status"] == "True"), None)
        succeeded = len(completed) if indexed else status.get("succeeded", 0)
        finished = (
            (indexed and succeeded >= completions)
            or (not indexed and completions is not None and succeeded >= completions)
            or (not indexed and completions is None and succeeded > 0 and not active)
        )
        if not done and failing is None and finished and not _condition_true(conditions, "SuccessCriteriaMet"):
            conditions.append(_condition("SuccessCriteriaMet", "True", *COMPLETIONS_REACHED, now))
        ending = failing is not None or _condition_true(conditions, "SuccessCriteriaMet")
        if ending or done:
            for pod in active:  # a finished Job's pods still running are deleted
                self.api.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"], propagation="Background")
            if not done and not live:
                if failing is not None:
                    conditions.append(_condition("Failed", "True", failing["reason"], failing["message"], now))
                else:
                    conditions.append(_condition("Complete", "True", *COMPLETIONS_REACHED, now))
                    status["completionTime"] = now
        elif not meta.get("deletionTimestamp"):
            self._create_job_pods(job, active, completed, parallelism, completions, indexed, bool(policy))
        pods_now = [] if ending or done else active
        status.update(
            active=len(pods_now),
            ready=sum(1 for p in active if _ready(p)),
            terminating=len(terminating),
            succeeded=status.get("succeeded", 0),
            failed=status.get("failed", 0),
            uncountedTerminatedPods={},
            conditions=conditions,
        )
        if indexed:
            status["completedIndexes"] = _format_indexes(completed)
        if not conditions:
            del status["conditions"]
        self.api.update("jobs", meta["namespace"], meta["name"], _with_status(status))

    def _release_tracked(self, pods: list[dict[str, Any]], counted: set[str]) -> None:
        """Counted pods lose the job-tracking finalizer (a deleted one then goes)."""
        for pod in pods:
            meta = pod["metadata"]
            if meta["uid"] in counted and JOB_TRACKING_FINALIZER in (meta.get("finalizers") or []):
                self.api.update(
                    "pods",
                    meta["namespace"],
                    meta["name"],
                    lambda o: o["metadata"].update(
                        finalizers=[f for f in o["metadata"]["finalizers"] if f != JOB_TRACKING_FINALIZER]
                    ),
                )

    def _create_job_pods(
        self,
        job: dict[str, Any],
        active: list[dict[str, Any]],
        completed: set[int],
        parallelism: int,
        completions: int | None,
        indexed: bool,
        has_policy: bool,
    ) -> None:
        # podReplacementPolicy: TerminatingOrFailed replaces a terminating pod at once; with a
        # podFailurePolicy only Failed (the default then), so a terminating pod still holds its place.
        holding = active
        if has_policy:
            # Listed again, after this sync counted its snapshot's ended pods: a pod that succeeded
            # since still holds its place (its success is counted by the next sync), or its index
            # would get a second pod.
            counted = self._counted.get(job["metadata"]["uid"], set())
            holding = [
                p
                for p in self.api.objects("pods")
                if _owner_uid(p) == job["metadata"]["uid"]
                and (p.get("status") or {}).get("phase") != "Failed"
                and not ((p.get("status") or {}).get("phase") == "Succeeded" and p["metadata"]["uid"] in counted)
            ]
        if indexed:
            assert completions is not None
            running = {int(p["metadata"]["labels"][COMPLETION_INDEX]) for p in holding}
            for index in range(completions):
                if len(running) >= parallelism:
                    break
                if index not in completed and index not in running:
                    self.api.create(self._job_pod(job, index))
                    running.add(index)
            return
        succeeded = job.get("status", {}).get("succeeded", 0)
        wanted = parallelism if completions is None else min(parallelism, completions - succeeded)
        for _ in range(max(0, wanted - len(holding))):
            self.api.create(self._job_pod(job, None))

    def _job_pod(self, job: dict[str, Any], index: int | None) -> dict[str, Any]:
        meta, template = job["metadata"], job["spec"]["template"]
        spec = json.loads(json.dumps(template.get("spec") or {}))
        labels = {
            **((template.get("metadata") or {}).get("labels") or {}),
            CONTROLLER_UID: meta["uid"],
            JOB_NAME: meta["name"],
            "controller-uid": meta["uid"],
            "job-name": meta["name"],
        }
        annotations = dict((template.get("metadata") or {}).get("annotations") or {})
        name = f"{meta['name']}-{_suffix()}"
        if index is not None:
            labels[COMPLETION_INDEX] = annotations[COMPLETION_INDEX] = str(index)
            name = f"{meta['name']}-{index}-{_suffix()}"
            spec["hostname"] = f"{meta['name']}-{index}"
            index_env = {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{COMPLETION_INDEX}']"}},
            }
            for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
                container["env"] = [*(container.get("env") or []), index_env]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [_owner(job)],
                "finalizers": [JOB_TRACKING_FINALIZER],
            },
            "spec": spec,
            "status": {"phase": "Pending"},
        }

    # --- the scheduler -----------------------------------------------------------------------------------
    def _schedule(self) -> None:
        pods = self.api.objects("pods")
        nodes = [n for n in self.api.objects("nodes") if not n["metadata"].get("deletionTimestamp")]
        claims = {
            (c["metadata"]["namespace"], c["metadata"]["name"]): c for c in self.api.objects("persistentvolumeclaims")
        }
        bound = [
            p
            for p in pods
            if p["spec"].get("nodeName") and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        pending = [p for p in pods if not p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]
        for pod in sorted(pending, key=lambda p: p["metadata"]["creationTimestamp"]):
            node, message = _choose_node(pod, nodes, bound, claims)
            meta = pod["metadata"]
            if node is None:
                condition = _condition("PodScheduled", "False", "Unschedulable", message, self._now())

                def unschedulable(obj: dict[str, Any], condition: dict[str, Any] = condition) -> None:
                    status = obj.setdefault("status", {})
                    current = [c for c in status.get("conditions") or [] if c["type"] == "PodScheduled"]
                    if current and current[0].get("message") == condition["message"]:
                        return
                    status["phase"] = "Pending"
                    status["conditions"] = [condition]

                self.api.update("pods", meta["namespace"], meta["name"], unschedulable)
                continue
            name = node["metadata"]["name"]
            scheduled = _condition("PodScheduled", "True", None, None, self._now())

            def bind(obj: dict[str, Any], name: str = name, scheduled: dict[str, Any] = scheduled) -> None:
                obj["spec"]["nodeName"] = name
                status = obj.setdefault("status", {})
                status["conditions"] = [scheduled]

            result = self.api.update("pods", meta["namespace"], meta["name"], bind)
            if result is not None:
                bound.append(result)

    # --- the kubelets ----------------------------------------------------------------------------------------
    def _kubelets(self) -> None:
        pods = {p["metadata"]["uid"]: p for p in self.api.objects("pods")}
        with self._lock:
            nodes = dict(self._nodes)
            containers = dict(self._containers)
        for uid, container in containers.items():
            pod = pods.get(uid)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                self._terminate(container, pod)
        daemonsets = {d["metadata"]["uid"]: d for d in self.api.objects("daemonsets")}
        for uid, pod in pods.items():
            node = nodes.get(pod["spec"].get("nodeName", ""))
            meta = pod["metadata"]
            phase = (pod.get("status") or {}).get("phase")
            if node is None:
                continue
            if meta.get("deletionTimestamp") and uid not in containers:
                self._finish_deletion(pod)
                continue
            if phase != "Pending" or uid in containers or meta.get("deletionTimestamp"):
                continue
            owner = daemonsets.get(_owner_uid(pod) or "")
            if owner is not None and _device_plugin(owner) is not None:
                self._run_plugin(pod, node)
            else:
                self._start_container(pod, node)
        self._update_hosts(pods)

    def _run_plugin(self, pod: dict[str, Any], node: _Node) -> None:
        """A device plugin's pod: played here, Running at once (its container cannot run)."""
        container = pod["spec"]["containers"][0]
        status = _running_status(
            node,
            self._now(),
            name=container["name"],
            image=container.get("image", ""),
            image_id="",
            container_id=f"{uuid.uuid4().hex}{uuid.uuid4().hex}",
        )
        self.api.update("pods", pod["metadata"]["namespace"], pod["metadata"]["name"], _with_status(status))

    def _start_container(self, pod: dict[str, Any], node: _Node) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        containers = spec.get("containers") or []
        problem = self._kubelet_problem
        if problem is None and (len(containers) != 1 or spec.get("initContainers")):
            problem = "the local kubelet runs pods of exactly one container and no init containers"
        if problem is None and not containers[0].get("command"):
            problem = "the container has no command: its image's entrypoint cannot run locally"
        if problem is not None:
            self._container_error("CreateContainerError", problem, pod)
            return
        container = containers[0]
        try:
            env = _container_env(pod, container, node.ip)
        except _ConfigError as exc:
            self._container_error("CreateContainerConfigError", str(exc), pod)
            return
        try:
            mounts = self._volume_mounts(pod, container)
        except _ConfigError as exc:
            self._container_error("CreateContainerConfigError", str(exc), pod)
            return
        host = spec.get("hostname") or meta["name"]
        env.update(
            HOSTNAME=host,
            KUBERNETES_SERVICE_HOST="127.0.0.1",
            KUBERNETES_SERVICE_PORT=self.api.url.rsplit(":", 1)[1],
            KUBERNETES_SERVICE_PORT_HTTPS=self.api.url.rsplit(":", 1)[1],
        )
        directory = self.sandbox / "pods" / meta["uid"]
        home = directory / "home"
        home.mkdir(parents=True, exist_ok=True)
        uid, gid = workload_account()
        os.chown(home, uid, gid)
        base = {
            "PATH": CONTAINER_PATH,
            "HOME": str(home),
            "AWS_CONFIG_FILE": str(self.sandbox / "nodes" / node.name / "aws-config"),
            # The image this process stands in for (no image runs here): the stand-ins of
            # examples/local-head-node behave as in it (the Neuron training DLC has PyTorch
            # Neuron installed system-wide: no virtual environment to activate).
            "TRAINRUN_LOCAL_CONTAINER_IMAGE": str(container.get("image", "")),
            **self._outside_world,
        }
        env = {**base, **env}
        argv = [_expand(a, env) for a in [*container["command"], *(container.get("args") or [])]]
        job_name = meta.get("labels", {}).get(JOB_NAME, "")
        fail_after = any(job_name == kind or job_name.startswith(f"{kind}-") for kind in self.failing_jobs)
        if fail_after:
            message = f"trainrun local --fail-at: the {job_name} job's container exits 1 (injected)"
            argv = ["/bin/sh", "-c", f'"$@"; echo {shlex.quote(message)} >&2; exit 1', "sh", *argv]
        hosts = directory / "hosts"
        hosts.write_text(_hosts_for(pod, self.api.objects("pods"), self.api.objects("services")))
        hosts.chmod(0o644)
        termination = directory / "termination-log"
        termination.write_text("")
        os.chown(termination, uid, gid)
        mounts.append(("bind", str(termination), container.get("terminationMessagePath", TERMINATION_MESSAGE_PATH)))
        script = self._sandbox_script(node, mounts, hosts, container.get("workingDir") or "/", uid, gid, directory)
        container_id = uuid.uuid4().hex + uuid.uuid4().hex
        process = subprocess.Popen(  # noqa: S603 - argv of resolved tools and the pod's own command
            [
                self._tools["unshare"],
                "--mount",
                "--propagation",
                "private",
                "--",
                self._tools["sh"],
                "-c",
                script,
                "sh",
                *argv,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd="/",
            start_new_session=True,
        )
        now = self._now()
        image = container.get("image", "")
        record = {
            "pod_name": meta["name"],
            "namespace_name": meta["namespace"],
            "pod_id": meta["uid"],
            "host": node.name,
            "container_name": container["name"],
            "docker_id": container_id,
            "container_hash": _image_digest(image),
            "container_image": image,
        }
        running = _Container(
            pod_uid=meta["uid"],
            namespace=meta["namespace"],
            pod=meta["name"],
            node=node.name,
            container=container["name"],
            container_id=container_id,
            stream=f"{node.name}-application.var.log.containers.{meta['name']}_{meta['namespace']}_"
            f"{container['name']}-{container_id}.log",
            record=record,
            process=process,
            hosts=hosts,
            termination=termination,
            fallback_to_logs=container.get("terminationMessagePolicy") == "FallbackToLogsOnError",
            train=job_name == "train" or job_name.startswith("train-"),
            started=now,
        )
        with self._lock:
            self._containers[meta["uid"]] = running
        for pipe, stream in ((process.stdout, "stdout"), (process.stderr, "stderr")):
            reader = threading.Thread(target=self._read, args=(running, pipe, stream), daemon=True)
            reader.start()
            running.readers.append(reader)
        threading.Thread(target=self._wait, args=(running,), daemon=True).start()
        status = _running_status(
            node,
            now,
            name=container["name"],
            image=image,
            image_id=record["container_hash"],
            container_id=container_id,
        )
        self.api.update("pods", meta["namespace"], meta["name"], _with_status(status))

    def _container_error(self, reason: str, message: str, pod: dict[str, Any]) -> None:
        container = (pod["spec"].get("containers") or [{"name": ""}])[0]
        waiting = {
            "name": container.get("name", ""),
            "image": container.get("image", ""),
            "imageID": "",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {"waiting": {"reason": reason, "message": message}},
        }

        def waiting_status(obj: dict[str, Any]) -> None:
            obj.setdefault("status", {})["containerStatuses"] = [waiting]

        self.api.update("pods", pod["metadata"]["namespace"], pod["metadata"]["name"], waiting_status)

    def _volume_mounts(self, pod: dict[str, Any], container: dict[str, Any]) -> list[tuple[str, str, str]]:
        """(kind, source, mount path) for each of the container's volumeMounts: kind `bind` (a
        directory), `tmpfs` (source: its size) - see the module docstring."""
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        namespace = pod["metadata"]["namespace"]
        mounts = []
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"])
            path = mount["mountPath"]
            if volume is None:
                raise _ConfigError(f"volumeMount {mount['name']}: the pod has no volume of that name")
            if "persistentVolumeClaim" in volume:
                claim_name = volume["persistentVolumeClaim"]["claimName"]
                claim = self.api.read("persistentvolumeclaims", namespace, claim_name)
                volume_name = ((claim or {}).get("spec") or {}).get("volumeName", "")
                pv = self.api.read("persistentvolumes", "", volume_name) if volume_name else None
                csi = ((pv or {}).get("spec") or {}).get("csi") or {}
                if csi.get("driver") != "fsx.csi.aws.com" or not csi.get("volumeHandle"):
                    raise _ConfigError(
                        f"volume {mount['name']}: the local kubelet mounts FSx for Lustre CSI volumes only"
                    )
                source = self._file_system(str(csi["volumeHandle"]))
                if not source.exists():
                    source.mkdir(parents=True)
                    uid, gid = workload_account()
                    os.chown(source, uid, gid)
                mounts.append(("bind", str(source / mount.get("subPath", "")), path))
            elif "emptyDir" in volume:
                empty = volume["emptyDir"] or {}
                if empty.get("medium") == "Memory":
                    mounts.append(("tmpfs", str(empty.get("sizeLimit") or "50%"), path))
                else:
                    directory = self.sandbox / "pods" / pod["metadata"]["uid"] / "volumes" / mount["name"]
                    directory.mkdir(parents=True, exist_ok=True)
                    uid, gid = workload_account()
                    os.chown(directory, uid, gid)
                    mounts.append(("bind", str(directory), path))
            else:
                raise _ConfigError(f"volume {mount['name']}: the local kubelet mounts PVCs and emptyDirs only")
        return mounts

    def _sandbox_script(
        self,
        node: _Node,
        mounts: list[tuple[str, str, str]],
        hosts: Path,
        working_dir: str,
        uid: int,
        gid: int,
        directory: Path,
    ) -> str:
        """The shell script that builds the pod's mount namespace (as root), then runs the
        container's command as the workload user."""
        q = shlex.quote
        mount = self._tools["mount"]
        lines = [
            "set -e",
            f"{mount} --bind {q(str(hosts))} /etc/hosts",
            f"{mount} --rbind {q(str(node.bin))} {STANDIN_BIN}",
        ]
        for kind, source, path in mounts:
            if Path(source).is_file():  # a file onto a file (the termination log)
                lines.append(f"mkdir -p {q(str(Path(path).parent))} && touch {q(path)}")
            else:
                lines.append(f"mkdir -p {q(path)}")
            if kind == "tmpfs":
                lines.append(f"{mount} -t tmpfs -o size={q(_tmpfs_size(source))},mode=1777 tmpfs {q(path)}")
            else:
                lines.append(f"{mount} --bind {q(source)} {q(path)}")
        # A directory above the aws CLI's interpreter that other users may not enter (a pyenv
        # Python under root's 0700 /root): an empty tmpfs over it, with only that path bound back
        # (as the head node's _expose does).
        targets = [Path(path) for _, _, path in mounts]
        for n, (closed, paths) in enumerate(sorted(closed_above(user_paths(self._aws_cli), targets).items())):
            stages = []
            for m, exposed in enumerate(paths):
                stage = directory / "expose" / f"{n}-{m}"
                stage.mkdir(parents=True, exist_ok=True)
                lines.append(f"{mount} --bind {q(str(exposed))} {q(str(stage))}")
                stages.append((stage, exposed))
            lines.append(f"{mount} -t tmpfs -o mode=0711,size=1m trainrun-expose {q(str(closed))}")
            for stage, exposed in stages:
                lines.append(f"(umask 022 && mkdir -p {q(str(exposed))})")
                lines.append(f"{mount} --move {q(str(stage))} {q(str(exposed))}")
        lines.append(f"cd {q(working_dir)}")
        lines.append(f'exec {self._tools["setpriv"]} --reuid={uid} --regid={gid} --clear-groups -- "$@"')
        return "\n".join(lines)

    def _read(self, container: _Container, pipe: Any, stream: str) -> None:
        for raw in iter(pipe.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            record = {"time": _precise_now(), "stream": stream, "_p": "F", "log": line}
            with contextlib.suppress(ValueError):
                parsed = json.loads(line)
                if isinstance(parsed, dict):
                    record["log_processed"] = parsed
            record["kubernetes"] = container.record
            with container.lock:
                container.lines.append(json.dumps(record))
                container.tail.append(line)
            if container.train and self._lose_at_step is not None:
                event = parse_line(line)
                if isinstance(event, TrainEvent) and event.step == self._lose_at_step:
                    with self._lock:
                        if self._lose_at_step is not None:
                            self._lose_at_step, self._lost = None, container.node
                    self._wake.set()
        pipe.close()

    def _wait(self, container: _Container) -> None:
        code = container.process.wait()
        for reader in container.readers:
            reader.join()
        container.exit_code = 128 - code if code < 0 else code
        message = _termination_message(container)
        now = self._now()
        exit_code = container.exit_code

        def terminated(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            if status.get("phase") not in ("Succeeded", "Failed"):
                status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            reason = "PodCompleted" if status["phase"] == "Succeeded" else "PodFailed"
            for condition in status.get("conditions") or []:
                if condition["type"] in ("Ready", "ContainersReady"):
                    condition.update(status="False", reason=reason, lastTransitionTime=now)
            for entry in status.get("containerStatuses") or []:
                entry.update(ready=False, started=False)
                entry["state"] = {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": "Completed" if exit_code == 0 else "Error",
                        "startedAt": container.started,
                        "finishedAt": now,
                        "containerID": f"containerd://{container.container_id}",
                        **({"message": message} if message else {}),
                    }
                }

        pod = self.api.update("pods", container.namespace, container.pod, terminated)
        self._wake.set()
        # The container's last lines ship after its status is written, as on a node: the kubelet
        # does not wait for Fluent Bit, and a reader of the logs (the progress function, which
        # here runs in the shipping call) may already ask the API how the pod ended.
        self._flush_logs()
        with self._lock:
            self._containers.pop(container.pod_uid, None)
        if pod is not None and pod["metadata"].get("deletionTimestamp"):
            self._finish_deletion(pod)
        self._wake.set()

    def _terminate(self, container: _Container, pod: dict[str, Any] | None) -> None:
        """SIGTERM once, SIGKILL when the pod's grace period (compressed) has passed."""
        if container.term_sent is None:
            container.term_sent = time.monotonic()
            _signal_group(container.process, signal.SIGTERM)
            return
        grace = (pod or {}).get("metadata", {}).get("deletionGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
        if time.monotonic() - container.term_sent >= grace / self.time_scale:
            _signal_group(container.process, signal.SIGKILL)

    def _finish_deletion(self, pod: dict[str, Any]) -> None:
        """The kubelet's last delete of a pod whose containers have ended: gone, unless finalizers hold it."""
        meta = pod["metadata"]
        if meta.get("finalizers"):
            self.api.update(
                "pods", meta["namespace"], meta["name"], lambda o: o["metadata"].update(deletionGracePeriodSeconds=0)
            )
        else:
            self.api.remove("pods", meta["namespace"], meta["name"])

    def _update_hosts(self, pods: dict[str, dict[str, Any]]) -> None:
        """Each running container's /etc/hosts, as its subdomain's Running pods come and go."""
        with self._lock:
            containers = list(self._containers.values())
        services = self.api.objects("services")
        for container in containers:
            pod = pods.get(container.pod_uid)
            if pod is None:
                continue
            text = _hosts_for(pod, pods.values(), services)
            with contextlib.suppress(OSError):
                if container.hosts.read_text() != text:
                    with container.hosts.open("r+") as handle:  # in place: the bind mount keeps the inode
                        handle.write(text)
                        handle.truncate()

    # --- logs ---------------------------------------------------------------------------------------------
    def _ship_loop(self) -> None:
        while not self._stopping.wait(SHIP_SECONDS):
            self._flush_logs()

    def _flush_logs(self) -> None:
        with self._ship_lock:
            with self._lock:
                containers = list(self._containers.values())
            for container in containers:
                self._ship_lines(container)

    def _ship_lines(self, container: _Container) -> None:
        with container.lock:
            lines, container.lines = container.lines, []
        if not lines:
            return
        try:
            self._ship(f"/aws/containerinsights/{self.cluster_name}/application", container.stream, lines)
        except Exception:
            # As Fluent Bit does, drop them and keep going; say it once a pod.
            if container.pod_uid not in self._ship_failing:
                logger.warning("could not ship the output of pod %s", container.pod, exc_info=True)
            self._ship_failing.add(container.pod_uid)

    # --- helpers -------------------------------------------------------------------------------------------
    def _now(self) -> str:
        return timestamp(self.api.now())

    def _check_kubelet(self) -> str | None:
        self._tools, problem = kubelet_tools()
        return problem


def kubelet_tools() -> tuple[dict[str, str], str | None]:
    """The tools the local kubelet runs pods with, and why pods cannot run here (None: they can):
    root and util-linux are needed."""
    search = os.pathsep.join([os.environ.get("PATH", ""), *SYSTEM_PATH])
    found = {name: shutil.which(name, path=search) for name in KUBELET_TOOLS}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        return {}, f"the local kubelet needs {', '.join(missing)} (util-linux)"
    if os.geteuid() != 0:
        return {}, "the local kubelet needs root: it runs each pod in a private mount namespace"
    return {name: str(path) for name, path in found.items()}, None


class LocalKubernetes:
    """The Kubernetes of the local runtime's EKS clusters (trainrun.local.eks_emulator's `kubernetes`
    hook): one LocalKubeApiServer and LocalKubeCluster per cluster, started when EKS first shows the
    cluster ACTIVE, stopped (every pod's processes ended) when it is gone or at `stop_all`.

    `ship_for(cluster)`: the cluster's Ship; `node_environment(cluster, node, instance id)`: a node's
    AWS environment (its instance role's key); `access_policies(cluster, principal)`: the principal's
    access policies on the cluster (EKS access entries); `sandbox`: where the clusters' files and the
    FSx file systems' directories (`file_system`) live."""

    def __init__(
        self,
        *,
        account: str,
        region: str,
        sandbox: Path,
        ship_for: Callable[[str], Ship],
        node_environment: Callable[[str, str, str], dict[str, str]],
        access_policies: Callable[[str, str], Iterable[str] | None],
        time_scale: float = 1.0,
        outside_world: Mapping[str, str] | None = None,
    ):
        self.account, self.region, self.sandbox = account, region, sandbox
        self.outside_world = dict(outside_world or {})
        self._ship_for = ship_for
        self._node_environment = node_environment
        self._access_policies = access_policies
        self.time_scale = time_scale
        self.clusters: dict[str, LocalKubeCluster] = {}
        # Rehearsals, for every cluster (`trainrun local --fail-at`, `--node-failure-at-step`).
        self.failing_jobs: set[str] = set()
        self.node_failure_at_step: int | None = None
        self._authorities: dict[str, str] = {}
        self._lock = threading.Lock()

    def cluster(self, name: str) -> LocalKubeCluster:
        """The running cluster of that name (KeyError when EKS has not shown it ACTIVE)."""
        with self._lock:
            return self.clusters[name]

    def file_system(self, fs_id: str) -> Path:
        """An FSx file system's directory: one per file system id, shared by every cluster."""
        return self.sandbox / "file-systems" / fs_id

    def cluster_active(self, cluster_name: str) -> tuple[str, str]:
        with self._lock:
            cluster = self.clusters.get(cluster_name)
            if cluster is None:
                api = LocalKubeApiServer(
                    cluster_name,
                    self.region,
                    self.account,
                    lambda principal: self._access_policies(cluster_name, principal),
                )
                api.start()
                cluster = LocalKubeCluster(
                    api,
                    sandbox=self.sandbox / "clusters" / cluster_name,
                    ship=self._ship_for(cluster_name),
                    node_environment=lambda node, instance: self._node_environment(cluster_name, node, instance),
                    file_system=self.file_system,
                    time_scale=self.time_scale,
                    outside_world=self.outside_world,
                )
                cluster.failing_jobs = self.failing_jobs  # shared: a later --fail-at reaches it too
                if self.node_failure_at_step is not None:
                    cluster.lose_node_at_step(self.node_failure_at_step)
                self._authorities[cluster_name] = certificate_authority()
                cluster.start()
                self.clusters[cluster_name] = cluster
            return cluster.api.url, self._authorities[cluster_name]

    def nodegroup_active(self, nodes: NodeGroupNodes) -> None:
        self.cluster_active(nodes.cluster_name)
        self.cluster(nodes.cluster_name).register_nodes(nodes)

    def nodegroup_deleting(self, cluster_name: str, nodegroup_name: str) -> None:
        with self._lock:
            cluster = self.clusters.get(cluster_name)
        if cluster is not None:
            cluster.remove_nodegroup(nodegroup_name)

    def cluster_deleted(self, cluster_name: str) -> None:
        with self._lock:
            cluster = self.clusters.pop(cluster_name, None)
        if cluster is not None:
            cluster.stop()
            cluster.api.stop()

    def stop_all(self) -> None:
        for name in list(self.clusters):
            self.cluster_deleted(name)


def certificate_authority() -> str:
    """Base64 of a self-signed CA certificate (PEM) for a cluster: what DescribeCluster's
    certificateAuthority.data holds. The local API server speaks HTTP and serves no certificate;
    a real one lets clients (lightkube, httpx) build their TLS context from it without error."""
    import base64

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    # EKS's cluster CA is subject CN=kubernetes; a CN holds at most 64 characters (RFC 5280), which
    # a cluster's name (up to 100) would not fit.
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now.replace(year=now.year + 10))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return base64.b64encode(certificate.public_bytes(serialization.Encoding.PEM)).decode()


class _ConfigError(Exception):
    """A container the kubelet cannot create from its configuration (CreateContainerConfigError)."""


# The tolerations the DaemonSet controller adds to its pods ("DaemonSet", "Taints and tolerations").
_DAEMON_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


def _resources(capacity: InstanceCapacity, *, allocatable: bool, devices: Iterable[str]) -> dict[str, str]:
    cpu_m = capacity.cpu * 1000
    memory_mib = capacity.memory_mib
    if allocatable:
        cpu_m -= _reserved_cpu_millicores(capacity.cpu)
        memory_mib -= 11 * capacity.pods + 255 + 100  # kube-reserved, and the eviction threshold
    resources = {
        "cpu": f"{cpu_m // 1000}" if cpu_m % 1000 == 0 else f"{cpu_m}m",
        "memory": f"{memory_mib * 1024}Ki",
        "pods": str(capacity.pods),
        "ephemeral-storage": "104845292Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    }
    counts = {NEURON: capacity.neuron_devices, NEURON_DEVICE: capacity.neuron_devices}
    counts |= {NEURON_CORE: capacity.neuron_cores, EFA: capacity.efa}
    for device in devices:
        resources[device] = str(counts[device])
    return resources


def _device_plugin(ds: dict[str, Any]) -> str | None:
    """Which device plugin a DaemonSet runs (by its first container's image repository), if one."""
    for container in ((ds.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []:
        repository = str(container.get("image", "")).split("@")[0].rsplit(":", 1)[0].rsplit("/", 1)[-1]
        if repository in DEVICE_PLUGINS:
            return repository
    return None


def _owner(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _owner_uid(obj: dict[str, Any]) -> str | None:
    for reference in obj["metadata"].get("ownerReferences") or []:
        if reference.get("controller"):
            return str(reference.get("uid"))
    return None


def _daemon_node(pod: dict[str, Any]) -> str:
    """The node a DaemonSet pod is pinned to (its matchFields metadata.name)."""
    terms = (
        (
            ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
        )
        or {}
    ).get("nodeSelectorTerms") or []
    for term in terms:
        for field_ in term.get("matchFields") or []:
            if field_.get("key") == "metadata.name" and field_.get("values"):
                return str(field_["values"][0])
    return str(pod["spec"].get("nodeName", ""))


def _ready(node_or_pod: dict[str, Any]) -> bool:
    return _condition_true((node_or_pod.get("status") or {}).get("conditions") or [], "Ready")


def _daemon_fits(spec: dict[str, Any], node: dict[str, Any]) -> bool:
    return _untolerated(spec, node) is None and _selects(spec, node)


def _untolerated(spec: dict[str, Any], node: dict[str, Any]) -> dict[str, Any] | None:
    """The node's first NoSchedule or NoExecute taint the pod does not tolerate ("Taints and Tolerations")."""
    tolerations = spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return dict(taint)
    return None


def _tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if not toleration.get("key"):  # an empty key with Exists tolerates every taint
        return toleration.get("operator") == "Exists"
    if toleration["key"] != taint.get("key"):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return str(toleration.get("value", "")) == str(taint.get("value", ""))


def _selects(spec: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether the pod's nodeSelector and required node affinity select the node."""
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not required:
        return True
    fields = {"metadata.name": node["metadata"]["name"]}
    return any(
        all(_requirement(e, labels) for e in term.get("matchExpressions") or [])
        and all(_requirement(e, fields) for e in term.get("matchFields") or [])
        and (term.get("matchExpressions") or term.get("matchFields"))
        for term in required.get("nodeSelectorTerms") or []
    )


def _requirement(expression: dict[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
    value = labels.get(key)
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and value.lstrip("-").isdigit():
        return int(value) > int(values[0]) if operator == "Gt" else int(value) < int(values[0])
    return False


def _volume_fits(volume: dict[str, Any], claim: dict[str, Any]) -> bool:
    vspec, cspec = volume.get("spec") or {}, claim.get("spec") or {}
    reference = vspec.get("claimRef")
    if reference and reference.get("uid") not in (None, claim["metadata"]["uid"]):
        return False
    if (vspec.get("storageClassName") or "") != (cspec.get("storageClassName") or ""):
        return False
    if not set(cspec.get("accessModes") or []) <= set(vspec.get("accessModes") or []):
        return False
    wanted = quantity(((cspec.get("resources") or {}).get("requests") or {}).get("storage", "0")) or Decimal(0)
    has = quantity((vspec.get("capacity") or {}).get("storage", "0")) or Decimal(0)
    return has >= wanted


def _requests(spec: dict[str, Any]) -> dict[str, Decimal]:
    """A pod's effective requests: its containers' summed, or its largest init container's if more."""
    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = total.get(name, Decimal(0)) + (quantity(value) or Decimal(0))
    for container in spec.get("initContainers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total.get(name, Decimal(0)), quantity(value) or Decimal(0))
    return total


def _choose_node(
    pod: dict[str, Any],
    nodes: list[dict[str, Any]],
    bound: list[dict[str, Any]],
    claims: Mapping[tuple[str, str], dict[str, Any]],
) -> tuple[dict[str, Any] | None, str]:
    """The node the scheduler binds the pod to, or None and why (see unschedulable_message)."""
    spec, namespace = pod["spec"], pod["metadata"]["namespace"]
    for volume in spec.get("volumes") or []:
        if "persistentVolumeClaim" in volume:
            name = volume["persistentVolumeClaim"]["claimName"]
            claim = claims.get((namespace, name))
            if claim is None:
                return None, unschedulable_message(
                    len(nodes), {}, {}, prefilter=f'persistentvolumeclaim "{name}" not found'
                )
            if (claim.get("status") or {}).get("phase") != "Bound":
                return None, unschedulable_message(
                    len(nodes), {}, {}, prefilter="pod has unbound immediate PersistentVolumeClaims"
                )
    if not nodes:
        return None, "no nodes available to schedule pods"
    wanted = _requests(spec)
    reasons: dict[str, int] = {}
    preemption: dict[str, int] = {}
    fitting = []
    for node in nodes:
        failed = _node_failures(
            spec, node, wanted, [p for p in bound if p["spec"]["nodeName"] == node["metadata"]["name"]]
        )
        if not failed:
            fitting.append(node)
            continue
        for reason in failed:
            reasons[reason] = reasons.get(reason, 0) + 1
        why = (
            "No preemption victims found for incoming pod"
            if failed[0].startswith(("Insufficient", "Too many pods"))
            else "Preemption is not helpful for scheduling"
        )
        preemption[why] = preemption.get(why, 0) + 1
    if not fitting:
        return None, unschedulable_message(len(nodes), reasons, preemption)
    pods_on = {
        n["metadata"]["name"]: sum(1 for p in bound if p["spec"]["nodeName"] == n["metadata"]["name"]) for n in fitting
    }
    return min(fitting, key=lambda n: (pods_on[n["metadata"]["name"]], n["metadata"]["name"])), ""


def _node_failures(
    spec: dict[str, Any], node: dict[str, Any], wanted: Mapping[str, Decimal], on_node: list[dict[str, Any]]
) -> list[str]:
    """Why the node does not fit the pod, as the first failing filter says it (none: it fits)."""
    if not _ready(node):
        return ["node(s) had untolerated taint {node.kubernetes.io/not-ready: }"]
    taint = _untolerated(spec, node)
    if taint is not None:
        return [f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"]
    if not _selects(spec, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    used: dict[str, Decimal] = {}
    for pod in on_node:
        for name, value in _requests(pod["spec"]).items():
            used[name] = used.get(name, Decimal(0)) + value
    failures = []
    if len(on_node) + 1 > int(allocatable.get("pods", "0")):
        failures.append("Too many pods")
    for name in sorted(wanted):
        if wanted[name] <= 0:
            continue
        free = (quantity(allocatable.get(name, "0")) or Decimal(0)) - used.get(name, Decimal(0))
        if wanted[name] > free:
            failures.append(f"Insufficient {name}")
    return failures


def unschedulable_message(
    nodes: int, reasons: Mapping[str, int], preemption: Mapping[str, int], *, prefilter: str | None = None
) -> str:
    """kube-scheduler's FitError message (framework/types.go): the reasons counted and sorted, then
    what preemption found."""
    if prefilter is not None:
        return (
            f"0/{nodes} nodes are available: {prefilter}. preemption: 0/{nodes} nodes are available: "
            f"{nodes} Preemption is not helpful for scheduling."
        )
    listed = ", ".join(sorted(f"{count} {reason}" for reason, count in reasons.items()))
    after = ", ".join(sorted(f"{count} {why}" for why, count in preemption.items()))
    return f"0/{nodes} nodes are available: {listed}. preemption: 0/{nodes} nodes are available: {after}."


def _failure_policy(policy: dict[str, Any] | None, pod: dict[str, Any]) -> tuple[str, str]:
    """The action of the first podFailurePolicy rule a failed pod matches, and the Job's message
    if it is FailJob (Job API reference, podFailurePolicy); Count without a match."""
    meta = pod["metadata"]
    status = pod.get("status") or {}
    for index, rule in enumerate((policy or {}).get("rules") or []):
        codes = rule.get("onExitCodes")
        if codes is not None:
            for entry in status.get("containerStatuses") or []:
                terminated = (entry.get("state") or {}).get("terminated") or {}
                code = terminated.get("exitCode")
                if code in (None, 0) or (codes.get("containerName") not in (None, entry["name"])):
                    continue
                if (code in codes.get("values", [])) == (codes.get("operator") == "In"):
                    message = (
                        f"Container {entry['name']} for pod {meta['namespace']}/{meta['name']} failed with exit code "
                        f"{code} matching {rule['action']} rule at index {index}"
                    )
                    return rule["action"], message
        for wanted in rule.get("onPodConditions") or []:
            for condition in status.get("conditions") or []:
                if condition["type"] == wanted["type"] and condition["status"] == wanted.get("status", "True"):
                    message = (
                        f"Pod {meta['namespace']}/{meta['name']} has condition {condition['type']} matching "
                        f"{rule['action']} rule at index {index}"
                    )
                    return rule["action"], message
    return "Count", ""


def _container_env(pod: dict[str, Any], container: dict[str, Any], host_ip: str) -> dict[str, str]:
    """The container's env, its fieldRefs resolved and $(VAR) references expanded, in order."""
    env: dict[str, str] = {}
    meta = pod["metadata"]
    fields = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
        "status.hostIP": host_ip,
        "status.podIP": host_ip,
    }
    for entry in container.get("env") or []:
        name = entry["name"]
        if "value" in entry or "valueFrom" not in entry:
            env[name] = _expand(str(entry.get("value", "")), env)
            continue
        source = entry["valueFrom"]
        if "fieldRef" not in source:
            raise _ConfigError(f"env {name}: the local kubelet resolves value and fieldRef only, not {sorted(source)}")
        path = source["fieldRef"]["fieldPath"]
        match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
        if match:
            env[name] = str((meta.get(match[1]) or {}).get(match[2], ""))
        elif path in fields:
            env[name] = fields[path]
        else:
            raise _ConfigError(f"env {name}: unsupported fieldPath {path}")
    return env


def _expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: a defined variable's value, `$$(VAR)` the literal, an undefined one kept."""

    def replace(match: re.Match[str]) -> str:
        if match[0].startswith("$$"):
            return match[0][1:]
        return env.get(match[1], match[0])

    return re.sub(r"\$?\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", replace, text)


def _termination_message(container: _Container) -> str:
    """What the kubelet reports as state.terminated.message: the container's terminationMessagePath
    file (at most 4096 bytes), or with FallbackToLogsOnError and a failed container whose file is
    empty, the end of its output (at most 80 lines, 2048 bytes): Kubernetes docs, "Determine the
    Reason for Pod Failure", "Customizing the termination message"."""
    with contextlib.suppress(OSError):
        text = container.termination.read_bytes()[:4096].decode("utf-8", errors="replace")
        if text:
            return text
    if not container.fallback_to_logs or container.exit_code == 0:
        return ""
    with container.lock:
        return "\n".join(container.tail)[-2048:]


def _hosts_for(pod: dict[str, Any], pods: Iterable[dict[str, Any]], services: list[dict[str, Any]]) -> str:
    """A pod's /etc/hosts: its hostname, and for a pod of a subdomain whose headless Service
    selects it, `<hostname>.<subdomain>...` of each pod that Service selects that is Running (and its own).
    Only a headless Service (clusterIP None) gives pods such names (Kubernetes' "DNS for Services and
    Pods": a Service with a cluster IP has one name, its own)."""
    spec, namespace = pod["spec"], pod["metadata"]["namespace"]
    host, subdomain = spec.get("hostname") or pod["metadata"]["name"], spec.get("subdomain")
    service = next(
        (s for s in services if (s["metadata"]["namespace"], s["metadata"]["name"]) == (namespace, subdomain)), None
    )
    service_spec = (service or {}).get("spec") or {}
    headless = service_spec.get("clusterIP") == "None"
    selector = (service_spec.get("selector") or {}) if headless else {}
    peers = []
    for peer in pods if subdomain and selector else ():
        labels = peer["metadata"].get("labels") or {}
        if (
            peer["metadata"]["namespace"] == namespace
            and peer["spec"].get("subdomain") == subdomain
            and peer["spec"].get("hostname")
            and all(labels.get(k) == v for k, v in selector.items())
            and (
                (peer.get("status") or {}).get("phase") == "Running"
                or peer["metadata"]["uid"] == pod["metadata"]["uid"]
            )
        ):
            peers.append(f"{peer['spec']['hostname']}.{subdomain}.{namespace}")
    return _hosts_file(host, sorted(peers))


def _hosts_file(host: str, peers: list[str]) -> str:
    names = [f"127.0.0.1\t{peer} {peer}.svc.cluster.local {peer.rsplit('.', 1)[0]}" for peer in peers]
    return (
        "\n".join(["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback", f"127.0.0.1\t{host}", *names])
        + "\n"
    )


def _tmpfs_size(size_limit: str) -> str:
    """A sizeLimit as tmpfs takes it (bytes), or a share of memory."""
    if size_limit.endswith("%"):
        return size_limit
    value = quantity(size_limit)
    return str(int(value)) if value is not None else "50%"


def _image_digest(image: str) -> str:
    """What Fluent Bit reports as container_hash: the image's repository@digest (a stand-in digest:
    nothing is pulled here)."""
    repository = image.split("@")[0].rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image.split("@")[0]
    return f"{repository}@sha256:{uuid.uuid5(uuid.NAMESPACE_URL, image).hex * 2}"


def _with_status(status: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """An update that sets the object's status."""

    def change(obj: dict[str, Any]) -> None:
        obj["status"] = status

    return change


def _running_status(
    node: _Node, now: str, *, name: str, image: str, image_id: str, container_id: str
) -> dict[str, Any]:
    """A pod's status once its one container runs on `node`, as the kubelet writes it."""
    return {
        "phase": "Running",
        "hostIP": node.ip,
        "podIP": node.ip,
        "startTime": now,
        "conditions": _running_conditions(now),
        "containerStatuses": [
            {
                "name": name,
                "image": image,
                "imageID": image_id,
                "containerID": f"containerd://{container_id}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }
        ],
    }


def _running_conditions(now: str) -> list[dict[str, Any]]:
    return [
        _condition(kind, "True", None, None, now)
        for kind in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled")
    ]


def _condition(kind: str, status: str, reason: str | None, message: str | None, now: str) -> dict[str, Any]:
    condition: dict[str, Any] = {"type": kind, "status": status, "lastProbeTime": None, "lastTransitionTime": now}
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def _condition_true(conditions: list[dict[str, Any]], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


def _parse_indexes(text: str) -> set[int]:
    indexes: set[int] = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        indexes.update(range(int(first), int(last or first) + 1))
    return indexes


def _format_indexes(indexes: set[int]) -> str:
    """As the Job controller writes completedIndexes: intervals, `a-b`, or `a,b` for two neighbours."""
    parts: list[str] = []
    ordered = sorted(indexes)
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        first, last = ordered[start], ordered[end]
        parts.append(str(first) if first == last else f"{first}{',' if last == first + 1 else '-'}{last}")
        start = end + 1
    return ",".join(parts)


def _free_address(taken: set[str]) -> str:
    """A private address of the VPC's 10.0.0.0/16 no node has (the node's InternalIP, in its name)."""
    while True:
        address = str(ipaddress.ip_address("10.0.0.0") + random.randrange(256, 65534))  # noqa: S311 - not a secret
        if address not in taken:
            return address


def _suffix() -> str:
    return "".join(random.choices(NAME_ALPHABET, k=5))  # noqa: S311 - a name, not a secret


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _precise_now() -> str:
    """The CRI log line's time: RFC 3339 with nanoseconds."""
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond * 1000:09d}Z"
