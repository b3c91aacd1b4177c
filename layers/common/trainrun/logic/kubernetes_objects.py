"""The Kubernetes objects of a `cluster.kind: eks` run (pure): what the gateway applies, in order.

Bootstrap (trainrun.steps.kubernetes, once the node group is ACTIVE):
- the run's namespace (`NAMESPACE`: one cluster per run, so one fixed name);
- the Neuron and EFA device plugins (trainrun.logic.device_plugins: the official Helm charts'
  manifests, pinned), without which a node advertises no `aws.amazon.com/neuron` nor
  `vpc.amazonaws.com/efa` and every job pod stays Pending;
- the run's FSx for Lustre file system as a static PersistentVolume of the FSx CSI driver (the
  aws-fsx-csi-driver add-on) and a claim bound to it by name: the file system stays trainrun's
  (created and deleted by the run, as on ParallelCluster), Kubernetes only mounts it. Amazon EKS
  User Guide, "Use high-performance app storage with Amazon FSx for Lustre" (static provisioning:
  `csi.driver: fsx.csi.aws.com`, `volumeHandle` the file system id, `volumeAttributes` its
  `dnsname` and `mountname`);
- a headless Service (`WORKERS_SERVICE`) whose DNS names the jobs' pods by hostname: pod
  `<job>-<index>` of an Indexed Job with `subdomain: workers` is `<job>-<index>.workers` (Kubernetes
  docs, "DNS for Services and Pods", "A/AAAA records" and "Pod's hostname and subdomain fields";
  "Jobs", "Completion mode": an Indexed Job's pod hostname is `$(job-name)-$(index)`).

Jobs: `stage` (one pod: the workload, the dataset and workload.resume_from onto /fsx, the same
script a head node runs), then `compile` and `train-<attempt>`: Indexed Jobs, completions =
parallelism = capacity.nodes, one pod per node holding every Neuron device and EFA interface of
it (requests = limits: extended resources are not overcommitted), tolerating the node group's
taint, backoffLimit 0 (trainrun decides a resubmission itself: workload.retries). torchrun takes
its distributed settings from `PET_*` variables (torch.distributed.run reads each `--<option>`
from `PET_<OPTION>`), so `torchrun --nproc_per_node=32 train.py` gets a fixed node rank from
the completion index and rank 0's address at index 0 (`<job>-0.workers`): no "find the rank 0
pod" step. The pods mount no service account token: the workload cannot reach the Kubernetes API,
so it cannot write the Job status trainrun trusts.

Each pod's last line is `POD_END_LINE` with its exit code: it only prompts the progress function to
ask the API how the Job ended (trainrun.steps.kubernetes); printed by the container like any line,
it proves nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainrun.logic.eks_node_group import NEURON_TAINT, efa_interface_count, neuron_device_count
from trainrun.logic.head_node_scripts import export_body, pod_job_script, staging_script
from trainrun.model.jobs import FSX_MOUNT_DIR, JobKind
from trainrun.model.resources import StorageIds
from trainrun.model.run_file import RunSpec

NAMESPACE = "trainrun"
WORKERS_SERVICE = "workers"
FSX_VOLUME = "trainrun-fsx"
FSX_CLAIM = "fsx"
FSX_CSI_DRIVER = "fsx.csi.aws.com"
CONTAINER = "workload"
STAGE_JOB = "stage"
EXPORT_JOB = "export-checkpoints"
# Where a container's last words go: the kubelet puts the file's content in the container's
# terminated state (`message`), which the API serves (Kubernetes docs, "Determine the Reason for
# Pod Failure", "Customizing the termination message"). The export Job's says what it copied.
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
MASTER_PORT = 29500
# The labels trainrun puts on what it creates (label keys may carry a DNS prefix: "trainrun").
RUN_LABEL = "trainrun/run-id"
JOB_LABEL = "trainrun/job"
ATTEMPT_LABEL = "trainrun/attempt"
POD_GROUP_LABEL = "trainrun/pod-group"
# The annotation (and label) Kubernetes gives each pod of an Indexed Job with its index.
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
POD_END_LINE = "TRAINRUN-POD-END"
# Shared memory in the container: a memory-backed volume, not the 64 MiB a container gets by default.
SHM_DIR = "/dev/shm"  # noqa: S108 (a mount point, not a temporary file)
# The application log group of the Amazon CloudWatch Observability add-on (Container Insights'
# Fluent Bit): one per cluster, one stream per container (Amazon CloudWatch User Guide, "Send logs
# to CloudWatch Logs" for Container Insights on EKS: /aws/containerinsights/<cluster>/application).
CONTAINER_LOG_GROUP = re.compile(r"^/aws/containerinsights/(?P<cluster>[0-9A-Za-z][A-Za-z0-9_-]{0,99})/application$")
# The subscription that sends the group to the progress function is named after the run: a record
# of the add-on carries no labels (its Fluent Bit filter sets `Labels Off`), so the run comes with
# the delivery (its `subscriptionFilters`), the job and the rank with the pod's name.
PROGRESS_SUBSCRIPTION = "trainrun-progress/"
# An Indexed Job's pod: `<job>-<index>-<5 random characters>` (Kubernetes' job controller).
JOB_POD_NAME = re.compile(
    r"^(?P<job_name>compile|train-(?P<attempt>[1-9][0-9]{0,3}))-(?P<index>0|[1-9][0-9]{0,4})-[a-z0-9]{5}$"
)


def is_pod_end_line(text: str) -> bool:
    """Whether a pod's line (its rank's prefix taken off) is its last, `POD_END_LINE index=.. exit=..`."""
    return text == POD_END_LINE or text.startswith(f"{POD_END_LINE} ")


def container_log_group(cluster: str) -> str:
    return f"/aws/containerinsights/{cluster}/application"


def progress_subscription(run_id: str) -> str:
    return PROGRESS_SUBSCRIPTION + run_id


@dataclass(frozen=True)
class ContainerLine:
    """A line a pod of a run's compile or train Job printed."""

    job: JobKind
    job_name: str  # the Kubernetes Job: compile, train-<attempt>
    index: str  # the pod's completion index: its rank
    text: str

    @property
    def pod(self) -> str:
        """The pod's place in its Job (`<Job>/<index>`): one log stream, one rank."""
        return f"{self.job_name}/{self.index}"


def container_line(message: str) -> ContainerLine | None:
    """The line of one record of the Observability add-on's Fluent Bit in a cluster's application
    log group (CONTAINER_LOG_GROUP: JSON, `log` the line, `kubernetes` the pod's metadata, which
    Fluent Bit takes from the container's log file and the API, never from the workload) when a pod
    of a compile or train Job printed it; None for any other container's (the stage or export Job's,
    the device plugins', the add-ons'). The record has no labels (`Labels Off`): the job and the
    rank are in the pod's name (JOB_POD_NAME). The group is the run's cluster's, so the run's."""
    try:
        record = json.loads(message)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("log"), str):
        return None
    pod = record.get("kubernetes")
    if not isinstance(pod, dict) or pod.get("namespace_name") != NAMESPACE:
        return None
    named = JOB_POD_NAME.match(str(pod.get("pod_name", "")))
    if named is None:
        return None
    job: JobKind = "train" if named["attempt"] else "compile"
    return ContainerLine(job, named["job_name"], named["index"], record["log"].rstrip("\n"))


# A pod the Job stops gets SIGTERM, then SIGKILL after this: the time a train job has to save a
# checkpoint, as Slurm's KillWait gives it on ParallelCluster.
TERMINATION_GRACE_SECONDS = 120
# An FSx for Lustre claim asks for what the file system has; Kubernetes checks only that the
# volume's capacity covers the claim's request.
_TOLERATIONS = [{"key": NEURON_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}]


def job_name(job: JobKind, attempt: int = 1) -> str:
    """The Kubernetes Job of a job's attempt: `compile`, `train-1`, `train-2`, ..."""
    return "compile" if job == "compile" else f"train-{attempt}"


def labels(run_id: str, **more: str) -> dict[str, str]:
    return {RUN_LABEL: run_id, **more}


def namespace(run_id: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": labels(run_id)}}


def file_system_volume(run_id: str, storage: StorageIds, capacity_gib: int) -> list[dict[str, Any]]:
    """The static PersistentVolume of the run's FSx file system and the claim bound to it."""
    if not (storage.file_system_id and storage.dns_name and storage.mount_name):
        raise ValueError(f"run {run_id}'s file system is not recorded with its id, DNS name and mount name")
    capacity = f"{capacity_gib}Gi"
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": FSX_VOLUME, "labels": labels(run_id)},
        "spec": {
            "capacity": {"storage": capacity},
            "volumeMode": "Filesystem",
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "mountOptions": ["flock"],
            "csi": {
                "driver": FSX_CSI_DRIVER,
                "volumeHandle": storage.file_system_id,
                "volumeAttributes": {"dnsname": storage.dns_name, "mountname": storage.mount_name},
            },
        },
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": FSX_CLAIM, "namespace": NAMESPACE, "labels": labels(run_id)},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": FSX_VOLUME,
            "resources": {"requests": {"storage": capacity}},
        },
    }
    return [volume, claim]


def workers_service(run_id: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": WORKERS_SERVICE, "namespace": NAMESPACE, "labels": labels(run_id)},
        "spec": {
            "clusterIP": "None",
            "selector": {POD_GROUP_LABEL: WORKERS_SERVICE},
            # The rendezvous is reached before the pods are ready: their names resolve at once.
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT}],
        },
    }


def stage_job(spec: RunSpec, run_id: str, *, region: str) -> dict[str, Any]:
    """The Job that stages the run onto /fsx (one pod, any node of the group)."""
    script = staging_script(spec, run_id, region=region, for_head_node=False)
    pod = _pod_spec(spec, [_container(spec, script, env=[], devices=False, region=region)])
    return _job(run_id, STAGE_JOB, "stage", 1, pod, indexed=False, parallelism=1)


def export_job(spec: RunSpec, run_id: str, *, destination: str, region: str) -> dict[str, Any]:
    """The Job that copies the run's checkpoint directory to `destination` (one pod) at teardown; its
    container's termination message is the copy's last line (TRAINRUN-CHECKPOINTS ...)."""
    script = export_body(run_id, destination=destination, region=region)
    container = _container(spec, script, env=[], devices=False, region=region)
    container["command"] = [
        "/bin/bash",
        "-c",
        'out=$(bash -c "$1"); code=$?; printf "%s\\n" "$out"; '
        f'printf "%s" "$out" | tail -n 1 >{TERMINATION_MESSAGE_PATH}; exit "$code"',
        "export-checkpoints",
        script,
    ]
    container["terminationMessagePath"] = TERMINATION_MESSAGE_PATH
    return _job(run_id, EXPORT_JOB, "export", 1, _pod_spec(spec, [container]), indexed=False, parallelism=1)


def workload_job(
    spec: RunSpec, run_id: str, job: JobKind, attempt: int = 1, *, config_bucket: str, region: str
) -> dict[str, Any]:
    """The Indexed Job of the compile job or of an attempt of the train job."""
    name = job_name(job, attempt)
    nodes = spec.capacity.nodes
    env: list[dict[str, Any]] = [
        {"name": "PET_NNODES", "value": str(nodes)},
        {
            "name": "PET_NODE_RANK",
            "valueFrom": {"fieldRef": {"fieldPath": _annotation_path(COMPLETION_INDEX_ANNOTATION)}},
        },
        {"name": "PET_MASTER_ADDR", "value": f"{name}-0.{WORKERS_SERVICE}"},
        {"name": "PET_MASTER_PORT", "value": str(MASTER_PORT)},
        {"name": "TRAINRUN_NODES", "value": str(nodes)},
        {
            "name": "TRAINRUN_NODE_RANK",
            "valueFrom": {"fieldRef": {"fieldPath": _annotation_path(COMPLETION_INDEX_ANNOTATION)}},
        },
    ]
    script = pod_job_script(spec, run_id, job, attempt, config_bucket=config_bucket)
    pod = _pod_spec(spec, [_container(spec, script, env=env, devices=True, region=region)])
    pod["subdomain"] = WORKERS_SERVICE
    return _job(run_id, name, job, attempt, pod, indexed=True, parallelism=nodes)


def bootstrap_objects(
    spec: RunSpec, run_id: str, storage: StorageIds, device_plugins: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Everything a run's cluster gets before its first job, in apply order (the namespace first)."""
    fsx = spec.storage.fsx
    capacity = fsx.effective_storage_capacity_gib if fsx is not None else 1200
    return [namespace(run_id), *device_plugins, *file_system_volume(run_id, storage, capacity), workers_service(run_id)]


def run_objects(
    spec: RunSpec,
    run_id: str,
    storage: StorageIds,
    device_plugins: list[dict[str, Any]],
    *,
    config_bucket: str,
    region: str,
) -> list[dict[str, Any]]:
    """Every object of a run before its first resubmission, in apply order: the bootstrap, then the
    stage Job, the compile Job (a run without workload.compile has none) and the first train Job.
    What Create node group's dry run checks and `trainrun plan` lists."""
    jobs: list[JobKind] = ["compile", "train"] if spec.workload.compile is not None else ["train"]
    return [
        *bootstrap_objects(spec, run_id, storage, device_plugins),
        stage_job(spec, run_id, region=region),
        *(workload_job(spec, run_id, job, config_bucket=config_bucket, region=region) for job in jobs),
    ]


def _job(
    run_id: str, name: str, job: str, attempt: int, pod: dict[str, Any], *, indexed: bool, parallelism: int
) -> dict[str, Any]:
    pod_labels = labels(run_id, **{JOB_LABEL: job, ATTEMPT_LABEL: str(attempt), POD_GROUP_LABEL: WORKERS_SERVICE})
    spec: dict[str, Any] = {
        "completions": parallelism,
        "parallelism": parallelism,
        # trainrun resubmits a failed train job itself (workload.retries), as a new Job: the first
        # pod failure fails this one, and Kubernetes stops the others.
        "backoffLimit": 0,
        # A pod of a node that was lost is marked DisruptionTarget, then removed at once by the pod
        # garbage collector: the Job's own Failed condition keeps why (reason PodFailurePolicy, its
        # message naming the condition), which tells an infrastructure failure from the workload's
        # (Kubernetes docs, "Handling retriable and non-retriable pod failures with Pod failure policy").
        "podFailurePolicy": {
            "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
        },
        "template": {"metadata": {"labels": pod_labels}, "spec": pod},
    }
    if indexed:
        spec["completionMode"] = "Indexed"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": labels(run_id, **{JOB_LABEL: job, ATTEMPT_LABEL: str(attempt)}),
        },
        "spec": spec,
    }


def _pod_spec(spec: RunSpec, containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "tolerations": [dict(item) for item in _TOLERATIONS],
        "nodeSelector": {"node.kubernetes.io/instance-type": spec.capacity.instance_type},
        "containers": containers,
        "volumes": [
            {"name": "fsx", "persistentVolumeClaim": {"claimName": FSX_CLAIM}},
            # PyTorch's workers share tensors through /dev/shm: a container's default is 64 MiB.
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
        ],
    }


def _container(spec: RunSpec, script: str, *, env: list[dict[str, Any]], devices: bool, region: str) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.cluster.eks_settings.image,
        # The wrapper runs as a script of its own ($0); its exit code, then the end prompt.
        "command": ["/bin/bash", "-c", _with_end_line(), "job-wrapper", script],
        "env": [
            *env,
            {"name": "AWS_REGION", "value": region},
            {"name": "AWS_DEFAULT_REGION", "value": region},
        ],
        "volumeMounts": [{"name": "fsx", "mountPath": FSX_MOUNT_DIR}, {"name": "shm", "mountPath": SHM_DIR}],
    }
    if devices:
        container["resources"] = {"limits": _device_limits(spec.capacity.instance_type)}
        container["resources"]["requests"] = dict(container["resources"]["limits"])
    return container


def _with_end_line() -> str:
    # $1 is the wrapper script (command's 4th word): it runs as `bash -c "$1"`, and whatever it
    # did, the pod's last line says how it exited.
    return (
        'bash -c "$1"; code=$?; '
        f'printf "%s index=%s exit=%s\\n" {POD_END_LINE} "${{JOB_COMPLETION_INDEX:-0}}" "$code"; exit "$code"'
    )


def _device_limits(instance_type: str) -> dict[str, str]:
    limits = {"aws.amazon.com/neuron": str(neuron_device_count(instance_type))}
    efa = efa_interface_count(instance_type)
    if efa:
        limits["vpc.amazonaws.com/efa"] = str(efa)
    return limits


def _annotation_path(annotation: str) -> str:
    return f"metadata.annotations['{annotation}']"


def device_resources(instance_type: str) -> Mapping[str, int]:
    """What a node of `instance_type` advertises once its device plugins run: what a job pod asks."""
    return {name: int(value) for name, value in _device_limits(instance_type).items()}
