"""The AWS clock: how long each thing the workflow waits for takes on AWS, in one table, with sources.

What a Trainium user pays for is wall-clock on a reservation, and most of a run's first hour is
waiting: for a NAT gateway, a file system, a cluster, compute nodes. The local runtime makes every
resource ready on the second look, so it cannot say how long those waits are. This module is the
model it (`trainrun local --aws-clock`) and `trainrun plan` use instead: plain data, importable
anywhere (no local-only imports).

Each figure is a `Duration`: seconds, the public source it comes from and a note. Where AWS
publishes no figure, the source says "estimate" and what it rests on (`Duration.estimate` is then
True): treat those as the model's assumptions, not as measurements.

API (stable; `trainrun plan`'s predicted timeline builds on it):

- `Duration(seconds, source, note="")`, frozen; `.minutes`, `.estimate`, `.scaled(factor)`.
- Fixed durations, module constants (all of them, by name, in `TABLE`):
  `NAT_GATEWAY_AVAILABLE`, `NAT_GATEWAY_DELETED`, `DATA_REPOSITORY_ASSOCIATION_AVAILABLE`,
  `DATA_REPOSITORY_ASSOCIATION_DELETED`, `FSX_DELETED`, `CLUSTER_STACK_RESOURCES`,
  `HEAD_NODE_BOOT`, `HEAD_NODE_CUSTOM_ACTION`, `COMPUTE_NODE_BOOT`, `CLUSTERMGTD_LOOP`,
  `STATIC_FLEET_POLL`, `CLUSTER_DELETED`, `CLUSTER_DELETE_COMPUTE_TERMINATED`, `SSM_COMMAND_DELIVERY`,
  `CLOUDWATCH_AGENT_FLUSH`, `LOG_SUBSCRIPTION_DELIVERY`, `NEURON_COMPILE_COLD`, `NEURON_COMPILE_CACHED`.
- Size-dependent durations, functions (each monotone in its size):
  `fsx_created(deployment_type, storage_gib)`, `fsx_throughput_mb_s(storage_gib, throughput_per_tib)`,
  `copy(size_bytes, throughput_mb_s)`, `dataset_copy(size_bytes, storage_gib, throughput_per_tib)`,
  `cluster_created(compute_nodes, ...)` (CREATE_COMPLETE after the head node's custom action),
  `dataset_staged(size_bytes, storage_gib, throughput_per_tib)` (copied, then unpacked);
  `WORKLOAD_SETUP` (the workload fetched and set up on the head node).
- `log_delivery()`: CloudWatch agent flush plus subscription delivery, one Duration.
- `SOURCES_DOC`: where docs/architecture.md shows this table ("The AWS clock");
  `table_markdown()`: the rows it shows (a unit test keeps the two equal).

Docs: docs/architecture.md#the-aws-clock lists every figure and source; a unit test checks it
against this module, so the two cannot drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

__all__ = [
    "CLOUDWATCH_AGENT_FLUSH",
    "CLUSTERMGTD_LOOP",
    "CLUSTER_DELETED",
    "CLUSTER_DELETE_COMPUTE_TERMINATED",
    "CLUSTER_STACK_RESOURCES",
    "COMPUTE_NODE_BOOT",
    "DATA_REPOSITORY_ASSOCIATION_AVAILABLE",
    "DATA_REPOSITORY_ASSOCIATION_DELETED",
    "EKS_ADDON_ACTIVE",
    "EKS_ADDON_DELETED",
    "EKS_CLUSTER_ACTIVE",
    "EKS_CLUSTER_DELETED",
    "EKS_NODEGROUP_ACTIVE",
    "EKS_NODEGROUP_DELETED",
    "ESTIMATE",
    "FSX_DELETED",
    "HEAD_NODE_BOOT",
    "HEAD_NODE_CUSTOM_ACTION",
    "LOG_SUBSCRIPTION_DELIVERY",
    "NAT_GATEWAY_AVAILABLE",
    "NAT_GATEWAY_DELETED",
    "NEURON_COMPILE_CACHED",
    "NEURON_COMPILE_COLD",
    "NEURON_VENV_BUILD",
    "SOURCES_DOC",
    "SSM_COMMAND_DELIVERY",
    "STATIC_FLEET_POLL",
    "TABLE",
    "WORKLOAD_SETUP",
    "Duration",
    "cluster_created",
    "copy",
    "dataset_copy",
    "dataset_staged",
    "fsx_created",
    "fsx_throughput_mb_s",
    "log_delivery",
    "table_markdown",
]

# Sources whose figure is not published by AWS start with this word.
ESTIMATE = "estimate"
SOURCES_DOC = "docs/architecture.md#the-aws-clock"
_MB = 1_000_000  # FSx throughput is in MB/s (decimal megabytes)
_GIB_PER_TIB = 1024


@dataclass(frozen=True)
class Duration:
    """How long one thing takes on AWS, and why we think so."""

    seconds: float
    # The public source of the figure: a doc page's title and URL, a GitHub issue, ... or
    # "estimate: <what it rests on>" when AWS publishes no figure.
    source: str
    note: str = ""

    def __post_init__(self) -> None:
        if self.seconds < 0:
            raise ValueError(f"a duration cannot be negative: {self.seconds}")
        if not self.source.strip():
            raise ValueError("every duration names its source")

    @property
    def minutes(self) -> float:
        return self.seconds / 60

    @property
    def estimate(self) -> bool:
        return self.source.startswith(ESTIMATE)

    def scaled(self, factor: float) -> Duration:
        """The same duration on a clock `factor` times faster (the local runtime's compressed time)."""
        return replace(self, seconds=self.seconds / factor)


# --- network -------------------------------------------------------------------------------------

NAT_GATEWAY_AVAILABLE = Duration(
    150,
    f"{ESTIMATE}: Amazon VPC User Guide, 'NAT gateways' documents the pending -> available states but "
    "no duration; typically 1-3 minutes in practice",
    "CreateNatGateway to State available; the private subnet has no internet route before it",
)
NAT_GATEWAY_DELETED = Duration(
    60,
    f"{ESTIMATE}: Amazon VPC User Guide, 'Delete a NAT gateway' (deleting -> deleted) gives no duration",
    "DeleteNatGateway to State deleted; its Elastic IP and subnet can only go after it",
)

# --- storage -------------------------------------------------------------------------------------

# FSx for Lustre publishes no creation time ("within minutes": Amazon FSx for Lustre FAQs,
# https://aws.amazon.com/fsx/lustre/faqs/). Base times per deployment type for the smallest size,
# then a little more per further storage step: persistent file systems provision replicated
# servers, scratch ones do not.
_FSX_CREATE_BASE_SECONDS = {"SCRATCH_1": 300.0, "SCRATCH_2": 360.0, "PERSISTENT_1": 600.0, "PERSISTENT_2": 720.0}
_FSX_CREATE_SECONDS_PER_EXTRA_TIB = 25.0
_FSX_CREATE_SOURCE = (
    f"{ESTIMATE}: Amazon FSx for Lustre FAQs (https://aws.amazon.com/fsx/lustre/faqs/) say only "
    "'within minutes'; ~12 min for PERSISTENT_2 1.2 TiB as estimated for trainrun's BERT example "
    "(issue 'Time to first step and idle spend'), scratch types faster, +25 s per further TiB"
)


def fsx_created(deployment_type: str, storage_gib: int) -> Duration:
    """CreateFileSystem to Lifecycle AVAILABLE for an FSx for Lustre file system (an estimate)."""
    if deployment_type not in _FSX_CREATE_BASE_SECONDS:
        raise ValueError(
            f"deployment_type {deployment_type!r} is not an FSx for Lustre deployment type: "
            f"use one of {', '.join(_FSX_CREATE_BASE_SECONDS)}"
        )
    if storage_gib <= 0:
        raise ValueError(f"storage_gib must be positive, not {storage_gib}")
    extra_tib = max(0.0, storage_gib / _GIB_PER_TIB - 1.2)
    seconds = _FSX_CREATE_BASE_SECONDS[deployment_type] + _FSX_CREATE_SECONDS_PER_EXTRA_TIB * extra_tib
    return Duration(seconds, _FSX_CREATE_SOURCE, f"{deployment_type}, {storage_gib} GiB")


FSX_DELETED = Duration(
    300,
    f"{ESTIMATE}: Amazon FSx DeleteFileSystem API reference documents Lifecycle DELETING, not how long",
    "DeleteFileSystem to the file system gone from DescribeFileSystems",
)
DATA_REPOSITORY_ASSOCIATION_AVAILABLE = Duration(
    300,
    f"{ESTIMATE}: Amazon FSx for Lustre User Guide, 'Linking your file system to an Amazon S3 bucket' "
    "(Lifecycle CREATING -> AVAILABLE, no duration); ~5 min as estimated for trainrun's BERT example",
    "CreateDataRepositoryAssociation to Lifecycle AVAILABLE, with BatchImportMetaDataOnCreate of a small prefix",
)
DATA_REPOSITORY_ASSOCIATION_DELETED = Duration(
    120,
    f"{ESTIMATE}: Amazon FSx DeleteDataRepositoryAssociation API reference (Lifecycle DELETING, no duration)",
    "DeleteDataRepositoryAssociation to gone, without deleting the data in the file system",
)


def fsx_throughput_mb_s(storage_gib: float, throughput_per_tib: int) -> float:
    """A persistent file system's baseline throughput: storage (TiB) x throughput per TiB (MB/s/TiB).

    Source: Amazon FSx API reference, LustreFileSystemConfiguration.PerUnitStorageThroughput
    ("File system throughput capacity is equal to Storage capacity (TiB) * PerUnitStorageThroughput").
    """
    if storage_gib <= 0 or throughput_per_tib <= 0:
        raise ValueError(
            f"storage_gib and throughput_per_tib must be positive, not {storage_gib}, {throughput_per_tib}"
        )
    return storage_gib / _GIB_PER_TIB * throughput_per_tib


def copy(size_bytes: int, throughput_mb_s: float) -> Duration:
    """Moving `size_bytes` at `throughput_mb_s`: bytes / throughput (no burst credit counted)."""
    if size_bytes < 0 or throughput_mb_s <= 0:
        raise ValueError(f"size_bytes must be >= 0 and throughput_mb_s > 0, not {size_bytes}, {throughput_mb_s}")
    return Duration(
        size_bytes / (throughput_mb_s * _MB),
        "bytes / throughput: Amazon FSx for Lustre User Guide, 'Amazon FSx for Lustre performance' "
        "(baseline throughput per TiB provisioned; burst credits ignored)",
        f"{size_bytes / 1e9:.1f} GB at {throughput_mb_s:.0f} MB/s",
    )


def dataset_copy(size_bytes: int, storage_gib: float, throughput_per_tib: int) -> Duration:
    """The head node's dataset copy into the file system, bound by the file system's baseline throughput."""
    return copy(size_bytes, fsx_throughput_mb_s(storage_gib, throughput_per_tib))


# --- the cluster ---------------------------------------------------------------------------------

CLUSTER_STACK_RESOURCES = Duration(
    180,
    f"{ESTIMATE}: aws-parallelcluster issue #3322 'Does v3 improve cluster node provisioning time?' "
    "(maintainers' CloudFormation stack timings; roles, security groups, DynamoDB table, launch templates)",
    "CreateCluster to the head node instance launched",
)
HEAD_NODE_BOOT = Duration(
    480,
    "aws-parallelcluster issue #3654 'Reducing configuring time?' (~3 min configuring on alinux2) plus "
    "EC2 launch and the cookbook's shared storage mounts; estimate of ~8 min to the custom action",
    "head node launched to OnNodeConfigured starting (cloud-init, cookbook, FSx mount, Slurm controller)",
)
HEAD_NODE_CUSTOM_ACTION = Duration(
    60,
    f"{ESTIMATE}: trainrun's OnNodeConfigured on the head node with the PyTorch Neuron environment reused "
    "from the config bucket (an archive of a few GB downloaded and unpacked); AWS ParallelCluster User Guide, "
    "'Custom bootstrap actions' (OnNodeConfigured runs last)",
    "clustermgtd starts only after it (ParallelCluster's cookbook), so compute nodes launch after it",
)
NEURON_VENV_BUILD = Duration(
    360,
    f"{ESTIMATE}: the PyTorch Neuron environment's pip install on the head node (~6 min), as estimated for "
    "trainrun's BERT example",
    "added to HEAD_NODE_CUSTOM_ACTION by the first cluster of a pinned Neuron version set, which builds and saves it",
)
COMPUTE_NODE_BOOT = Duration(
    360,
    "aws-samples/aws-eda-slurm-cluster issue #148 ('at least 4-5 minutes to boot and start'), "
    "aws-parallelcluster issue #6479 (4:11-4:47 to a running job); +1 min estimated for trn1's EFA "
    "interfaces and the Neuron driver",
    "RunInstances to the Slurm node idle (cloud-init, cookbook, EFA, Neuron driver, slurmd registered)",
)
CLUSTERMGTD_LOOP = Duration(
    60,
    "aws-parallelcluster-node src/slurm_plugin/clustermgtd.py: ClustermgtdConfig default loop_time 60",
    "clustermgtd launches static nodes and checks their health once per loop",
)
STATIC_FLEET_POLL = Duration(
    15,
    "aws-parallelcluster issue #3373 (chef-client.log: 'Waiting for static fleet capacity provisioning' every 15 s)",
    "the head node's wait for every static node before it signals CREATE_COMPLETE",
)
CLUSTER_DELETED = Duration(
    600,
    f"{ESTIMATE}: AWS ParallelCluster User Guide, 'pcluster delete-cluster' (DELETE_IN_PROGRESS -> "
    "DELETE_COMPLETE, no duration); instances terminate first, then the stack's resources",
    "DeleteCluster to DELETE_COMPLETE; compute nodes stop billing when terminated (~2 min in)",
)
CLUSTER_DELETE_COMPUTE_TERMINATED = Duration(
    120,
    f"{ESTIMATE}: aws-parallelcluster, the cluster stack's cleanup custom resource terminates the compute "
    "instances when CloudFormation deletes it (no duration published)",
    "DeleteCluster to its compute nodes terminated, when nothing terminated them before (trainrun has "
    "ParallelCluster's deleteClusterInstances terminate them first)",
)


def cluster_created(compute_nodes: int) -> Duration:
    """CreateCluster to CREATE_COMPLETE with `compute_nodes` static nodes (an estimate).

    The head node boots and runs its custom action; only then does clustermgtd start (ParallelCluster's
    cookbook) and launch the static nodes on its next loop; they boot in parallel; the head node's wait
    sees the last one idle on its next poll. Node count matters only through the slowest node, which
    the model takes as one boot time: so the figure is flat in nodes (monotone, not increasing).
    """
    if compute_nodes < 0:
        raise ValueError(f"compute_nodes must be >= 0, not {compute_nodes}")
    parts = [CLUSTER_STACK_RESOURCES, HEAD_NODE_BOOT, HEAD_NODE_CUSTOM_ACTION]
    if compute_nodes:
        parts += [CLUSTERMGTD_LOOP, COMPUTE_NODE_BOOT, STATIC_FLEET_POLL]
    return Duration(
        sum(part.seconds for part in parts),
        "sum of " + ", ".join(name for name, value in _fixed().items() if value in parts),
        f"{compute_nodes} static compute nodes",
    )


# --- Amazon EKS ----------------------------------------------------------------------------------

EKS_CLUSTER_ACTIVE = Duration(
    900,
    "aws/containers-roadmap issue #1227 (AWS: 'EKS cluster control plane provisioning time currently averages "
    "15 minutes'); easontechtalk.com, 'Unofficial EKS Cluster Creation Performance' (us-west-2: 899.9 s)",
    "CreateCluster to status ACTIVE: the control plane only, no node group or add-on",
)
EKS_CLUSTER_DELETED = Duration(
    300,
    f"{ESTIMATE}: Amazon EKS API Reference, DeleteCluster (status DELETING, no duration); the control plane "
    "and its network interfaces go, its node groups were deleted before",
    "DeleteCluster to the cluster gone from DescribeCluster (ResourceNotFoundException)",
)
EKS_NODEGROUP_ACTIVE = Duration(
    300,
    f"{ESTIMATE}: Amazon EKS User Guide, 'Create a managed node group for your cluster' (CREATING -> ACTIVE, "
    "no duration); the Auto Scaling group launches the nodes and they join, typically 3-5 minutes in practice",
    "CreateNodegroup to status ACTIVE (or CREATE_FAILED)",
)
EKS_NODEGROUP_DELETED = Duration(
    600,
    "gruntwork-io/cloud-nuke issue #339 ('EKS ASG's can take upwards of 10 minutes to delete with 4 "
    "instances'); Amazon EKS User Guide, 'Delete a managed node group' (each node drained first, forced "
    "after 5 minutes)",
    "DeleteNodegroup to the node group gone; its instances stop billing on the way",
)
EKS_ADDON_ACTIVE = Duration(
    60,
    f"{ESTIMATE}: Amazon EKS API Reference, CreateAddon (status CREATING -> ACTIVE, no duration); an add-on "
    "is a kube-system Deployment or DaemonSet rolled out, about a minute",
    "CreateAddon to status ACTIVE (DEGRADED instead when its pods find no node to run on)",
)
EKS_ADDON_DELETED = Duration(
    30,
    f"{ESTIMATE}: Amazon EKS API Reference, DeleteAddon (status DELETING, no duration)",
    "DeleteAddon to the add-on gone from DescribeAddon",
)


# --- messages and logs ---------------------------------------------------------------------------

SSM_COMMAND_DELIVERY = Duration(
    2,
    f"{ESTIMATE}: AWS Systems Manager User Guide, 'Running commands using Systems Manager Run Command' "
    "(the agent polls the ec2messages service; delivery in seconds, no figure)",
    "SendCommand to the command running on the instance",
)
CLOUDWATCH_AGENT_FLUSH = Duration(
    5,
    "Amazon CloudWatch User Guide, 'Setting alarms on metrics created with the embedded metric format': "
    "the agent's force_flush_interval 'defaults to 5 seconds'",
    "a log line written on a node to it being in CloudWatch Logs",
)
LOG_SUBSCRIPTION_DELIVERY = Duration(
    5,
    f"{ESTIMATE}: Amazon CloudWatch Logs User Guide, 'Real-time processing of log data with subscriptions' "
    "(near real time, no figure)",
    "a log event in CloudWatch Logs to the subscribed Lambda function invoked with it",
)


def log_delivery() -> Duration:
    """A log line on a node to the subscribed function: the agent's flush plus the subscription."""
    return Duration(
        CLOUDWATCH_AGENT_FLUSH.seconds + LOG_SUBSCRIPTION_DELIVERY.seconds,
        "sum of CLOUDWATCH_AGENT_FLUSH, LOG_SUBSCRIPTION_DELIVERY",
    )


# --- the workload (the BERT example's) -----------------------------------------------------------

NEURON_COMPILE_COLD = Duration(
    780,
    f"{ESTIMATE}: AWS Neuron documentation, 'Hugging Face BERT Pretraining Tutorial (Data-Parallel)' "
    "(neuron_parallel_compile of phase 1 takes minutes; ~13 min as estimated for trainrun's BERT example)",
    "examples/bert-large-phase1.yaml's compile job with an empty Neuron compile cache",
)
NEURON_COMPILE_CACHED = Duration(
    180,
    f"{ESTIMATE}: AWS Neuron documentation, 'Neuron Persistent Cache' (a cache hit skips compilation); "
    "~3 min with trainrun's S3 compile cache, as estimated for the BERT example",
    "examples/bert-large-phase1.yaml's compile job when every graph is in the compile cache",
)


# --- staging on the head node (the BERT example's) -----------------------------------------------

WORKLOAD_SETUP = Duration(
    300,
    f"{ESTIMATE}: the BERT example's staging: git clone of aws-neuron-samples and its "
    "requirements.txt's pip install into the Neuron venv (AWS Neuron documentation, 'Hugging Face BERT "
    "Pretraining Tutorial (Data-Parallel)' lists the steps, not their duration)",
    "Prepare head node without the dataset: fetch the workload, run its setup",
)


def dataset_staged(size_bytes: int, storage_gib: float, throughput_per_tib: int) -> Duration:
    """The head node's staging of a dataset archive: copied onto the file system, then unpacked there
    (the archive is read and its files written: twice its size through the file system)."""
    once = dataset_copy(size_bytes, storage_gib, throughput_per_tib)
    return Duration(2 * once.seconds, once.source, f"{once.note}, copied then unpacked")


def _fixed() -> dict[str, Duration]:
    return {name: value for name, value in globals().items() if isinstance(value, Duration) and name.isupper()}


# Every fixed duration by its constant's name (docs/architecture.md shows them all).
TABLE: Mapping[str, Duration] = MappingProxyType(dict(sorted(_fixed().items())))


def table_markdown() -> str:
    """The table as docs/architecture.md shows it: every fixed duration, then the size-dependent
    ones at the BERT example's sizes (examples/bert-large-phase1.yaml: 16 nodes, PERSISTENT_2,
    1,200 GiB at 125 MB/s/TiB, a 48 GB dataset)."""
    examples = {
        "fsx_created('PERSISTENT_2', 1200)": fsx_created("PERSISTENT_2", 1200),
        "fsx_created('SCRATCH_2', 1200)": fsx_created("SCRATCH_2", 1200),
        "dataset_copy(48 GB, 1200, 125)": dataset_copy(48_000_000_000, 1200, 125),
        "cluster_created(16)": cluster_created(16),
        "log_delivery()": log_delivery(),
    }
    rows = ["| duration | seconds | source |", "|---|---:|---|"]
    for name, duration in [*TABLE.items(), *examples.items()]:
        rows.append(f"| `{name}` | {duration.seconds:,.0f} | {duration.source.replace('|', '/')} |")
    return "\n".join(rows) + "\n"
