"""The ParallelCluster 3.16 cluster configuration for a run, rendered from its run file.

Pure: no AWS calls. The ids of the network, security group and file system come in as
`ClusterIds` (the workflow creates or looks them up first); facts known only from the account
(is the reservation a Capacity Block?) come in as keyword arguments. Keys and value formats
follow the ParallelCluster 3 cluster schema (`pcluster.schemas.cluster_schema.ClusterSchema`),
which tests/pcluster/ loads every rendered config through. See docs/cluster-config.md.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, StringConstraints, model_validator

from trainrun.logic.cluster_reuse import lent_sources_prefix
from trainrun.logic.compile_cache import cache_url
from trainrun.logic.file_system_mount import mount_args, mount_script_uri
from trainrun.logic.neuron_install import COMPUTE_NODE_ARGS, HEAD_NODE_ARGS, script_uri, supported_os, venv_prefix
from trainrun.logic.prices import DEFAULT_REGION
from trainrun.model.checkpoints import export_destination
from trainrun.model.jobs import FSX_MOUNT_DIR
from trainrun.model.run_file import FILE_SYSTEM_ID, S3_URI, SUBNET_ID, RunSpec

CLUSTER_NAME = r"^[a-zA-Z][a-zA-Z0-9-]{0,59}$"
CLUSTER_NAME_PREFIX = "trainrun-"
QUEUE_NAME = "compute"
# Trainium sizes with EFA network interfaces; trn1.2xlarge has none.
EFA_INSTANCE_TYPES = frozenset({"trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge"})
# /home is exported to the compute nodes from the head node's root volume, and the workload,
# its virtualenv and the Neuron SDK live there; compute roots hold the Neuron SDK and caches.
HEAD_NODE_ROOT_GIB = 200
# What Neuron's ParallelCluster samples give each Trn1 compute node (aws-neuron-parallelcluster-samples,
# examples/cluster-configs/trn1-16-nodes-pcluster.md: ComputeSettings.LocalStorage.RootVolume.Size 1024):
# room for the Neuron SDK, the compiler's work files and the neuron caches of long runs.
COMPUTE_ROOT_GIB = 1024
# One of the values CloudWatch Logs accepts (ClusterSchema checks the list).
LOG_RETENTION_DAYS = 14
# The config bucket a preview (`trainrun cluster-config`, `trainrun plan`) shows the shipped
# Neuron script in when it is not told the stack's (its ConfigBucketName output).
PREVIEW_CONFIG_BUCKET = "trainrun-config-preview"
HTTPS_URL = r"^https://[A-Za-z0-9.-]+(:[0-9]{1,5})?/[A-Za-z0-9!_.*'()/=+~-]*$"
# Keys that ParallelCluster or AWS reserve. ParallelCluster also tags every instance `Name`
# itself (HeadNode, Compute), and a second Name in the list it builds is a duplicate key.
RESERVED_TAG_PREFIXES = ("parallelcluster:", "aws:")
DROPPED_TAG_KEYS = frozenset({"Name"})

# ParallelCluster's own patterns: 8 or 17 characters for subnets and security groups, but
# FsxLustreSettings/FileSystemId takes only the 17-character form (runfile.FILE_SYSTEM_ID).
SECURITY_GROUP_ID = r"^sg-[0-9a-f]{8}([0-9a-f]{9})?$"
# FSx's DNSName (fs-<id>.fsx.<region>.amazonaws.com, .com.cn in China) and LustreConfiguration's
# MountName (the API reference's pattern: 1 to 8 of [A-Za-z0-9_-]).
FILE_SYSTEM_DNS_NAME = r"^fs-[0-9a-f]{17}\.fsx\.[a-z0-9-]{1,30}\.amazonaws\.com(\.cn)?$"
FILE_SYSTEM_MOUNT_NAME = r"^[A-Za-z0-9_-]{1,8}$"


class ClusterIds(BaseModel):
    """The AWS resources a cluster is built into; they exist before the cluster does."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    public_subnet_id: Annotated[str, StringConstraints(pattern=SUBNET_ID)]
    private_subnet_id: Annotated[str, StringConstraints(pattern=SUBNET_ID)]
    # Allows all traffic from itself: EFA between compute nodes, and Lustre (988) to the file system.
    security_group_id: Annotated[str, StringConstraints(pattern=SECURITY_GROUP_ID)]
    file_system_id: Annotated[str, StringConstraints(pattern=FILE_SYSTEM_ID)]
    # A file system the run creates is mounted by the nodes themselves (trainrun.logic.file_system_mount),
    # so that the cluster is created while it is: its DNS and mount names, both or neither. Without
    # them (a file system the run names, AVAILABLE already) ParallelCluster mounts it, and its
    # validators check that the file system's network admits the cluster first.
    file_system_dns_name: Annotated[str, StringConstraints(pattern=FILE_SYSTEM_DNS_NAME)] | None = None
    file_system_mount_name: Annotated[str, StringConstraints(pattern=FILE_SYSTEM_MOUNT_NAME)] | None = None

    @model_validator(mode="after")
    def _mount_names_together(self) -> ClusterIds:
        if (self.file_system_dns_name is None) != (self.file_system_mount_name is None):
            raise ValueError("file_system_dns_name and file_system_mount_name go together")
        return self

    @classmethod
    def placeholders(cls, spec: RunSpec) -> ClusterIds:
        """Ids that pass the schema but name nothing, for showing `spec`'s config before provisioning."""
        named = spec.storage.fsx.file_system_id
        file_system_id = named or "fs-00000000000000000"
        # A file system the run creates is mounted by the nodes: its names, as CreateFileSystem gives them.
        dns_name = f"{file_system_id}.fsx.{_region(spec) or DEFAULT_REGION}.amazonaws.com"
        return cls(
            public_subnet_id="subnet-0000000000000000a",
            private_subnet_id="subnet-0000000000000000b",
            security_group_id="sg-00000000000000000",
            file_system_id=file_system_id,
            file_system_dns_name=None if named else dns_name,
            file_system_mount_name=None if named else "abcdefgh",
        )


def cluster_name(run_id: str) -> str:
    """A ParallelCluster name for a run: the same every time, distinct for distinct run ids."""
    name = CLUSTER_NAME_PREFIX + run_id
    if re.fullmatch(CLUSTER_NAME, name):
        return name
    # Anything rewritten or cut gets a digest of the whole id, so two ids never share a name.
    slug = re.sub(r"[^A-Za-z0-9]+", "-", run_id).strip("-")[:40].rstrip("-")
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:10]
    return f"{CLUSTER_NAME_PREFIX}{slug}-{digest}" if slug else f"{CLUSTER_NAME_PREFIX}{digest}"


def render_cluster_config(
    spec: RunSpec,
    ids: ClusterIds,
    *,
    tags: Mapping[str, str],
    neuron_install_script_uri: str | None = None,
    config_bucket: str = PREVIEW_CONFIG_BUCKET,
    capacity_block: bool = False,
    node_policy_arn: str | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """The cluster configuration for `spec`, as the dict ParallelCluster's YAML loads into.

    The nodes run `neuron_install_script_uri`, or else trainrun's own Neuron script for the OS
    at its content address in `config_bucket` (Create cluster uploads it there first).
    `node_policy_arn` (the stack's ClusterNodePolicy) goes on every node: it keeps a run's
    workload out of other runs' log streams and metrics. The compute nodes may read and write the
    run's Neuron compile cache (trainrun.logic.compile_cache; by default in `config_bucket`). With
    `run_id`, the head node may write that run's checkpoint export prefix
    (trainrun.model.checkpoints.export_destination), and, when its teardown may keep the cluster,
    read the workload archives of the runs that reuse it (trainrun.logic.cluster_reuse.lent_sources_prefix).
    """
    capacity = spec.capacity
    if capacity_block and capacity.reservation_id is None:
        raise ValueError("a Capacity Block is targeted by its reservation id; ParallelCluster takes no group for it")
    region = _region(spec)
    partition = _partition(region)
    script = neuron_install_script_uri or script_uri(config_bucket, spec.cluster.os)
    if not (re.fullmatch(S3_URI, script) or re.fullmatch(HTTPS_URL, script)):
        raise ValueError(f"neuron_install_script_uri {script!r} is not an s3:// or https:// URL")
    # Every node fetches the script with its own role, and may read that one object only; the
    # head node also fetches the workload and stages the dataset.
    script_access = _object_access(script)
    mount = _file_system_mount(ids, config_bucket)
    if mount is not None:
        script_access = [*_object_access(mount["Script"]), *script_access]
    # The compile job runs on the compute nodes, and so does the train job, which reads the graphs
    # the compile job put there: the compute nodes' role uses the cache, the head node's never
    # (a local rehearsal enforces each node's role: tests/e2e/test_compile_cache.py).
    cache_access = cache_s3_access(spec, config_bucket)
    head_node_access = _head_node_s3_access(spec, script_access, config_bucket)
    # trainrun's own script has the head node reuse the Neuron environment at its content address
    # in the config bucket, or save it there: that prefix, objects only (the compute nodes run it
    # from /home and never fetch it). A script the stack names does what it does, with no access.
    if spec.cluster.os in supported_os() and script == script_uri(config_bucket, spec.cluster.os):
        head_node_access.append(_prefix_write_access(venv_prefix(config_bucket, spec.cluster.os)))
    if run_id is not None:
        head_node_access.append(_checkpoint_export_access(spec, run_id, config_bucket))
        if "keep" in (spec.teardown.on_success, spec.teardown.on_failure):
            # A kept cluster runs later runs' workloads (cluster.reuse), copied there for it.
            head_node_access.append({"BucketName": config_bucket, "KeyName": lent_sources_prefix(run_id) + "*"})

    # No CloudWatchAgentServerPolicy of ours: it writes any stream. ParallelCluster adds it for
    # its own logs; the node policy's denies confine it (template.yaml, ClusterNodePolicy).
    node_policies = [{"Policy": node_policy_arn}] if node_policy_arn else []
    head_node: dict[str, Any] = {
        "InstanceType": spec.cluster.head_node_instance_type,
        "Networking": {"SubnetId": ids.public_subnet_id, "AdditionalSecurityGroups": [ids.security_group_id]},
        # No key pair: people and the workflow reach the head node through SSM. Without an Ssh
        # section ParallelCluster opens port 22 to 0.0.0.0/0; loopback-only closes it.
        "Ssh": {"AllowedIps": "127.0.0.1/32"},
        "LocalStorage": {"RootVolume": {"Size": HEAD_NODE_ROOT_GIB, "VolumeType": "gp3", "Encrypted": True}},
        "Iam": {
            "AdditionalIamPolicies": [
                {"Policy": f"arn:{partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"},
                *node_policies,
            ],
            "S3Access": head_node_access,
        },
        "CustomActions": _on_node_configured(mount, script, HEAD_NODE_ARGS),
    }

    target = (
        {"CapacityReservationId": capacity.reservation_id}
        if capacity.reservation_id is not None
        else {"CapacityReservationResourceGroupArn": capacity.reservation_group_arn}
    )
    compute_resource = {
        "Name": capacity.instance_type.replace(".", "-"),
        "InstanceType": capacity.instance_type,
        # Static nodes: the reservation is paid for either way, and a job must not wait for a boot.
        "MinCount": capacity.nodes,
        "MaxCount": capacity.nodes,
        "Efa": {"Enabled": capacity.instance_type in EFA_INSTANCE_TYPES},
        "CapacityReservationTarget": target,
    }
    queue: dict[str, Any] = {
        "Name": QUEUE_NAME,
        "CapacityType": "CAPACITY_BLOCK" if capacity_block else "ONDEMAND",
        "Networking": {
            "SubnetIds": [ids.private_subnet_id],
            "AdditionalSecurityGroups": [ids.security_group_id],
            # A reservation carries its own placement; a cluster placement group on top of it
            # can make launches fail with InsufficientInstanceCapacity.
            "PlacementGroup": {"Enabled": False},
        },
        "ComputeSettings": {
            "LocalStorage": {"RootVolume": {"Size": COMPUTE_ROOT_GIB, "VolumeType": "gp3", "Encrypted": True}}
        },
        "Iam": {
            "S3Access": [*script_access, *cache_access],
            # The workload runs on the compute nodes too.
            "AdditionalIamPolicies": node_policies,
        },
        "CustomActions": _on_node_configured(mount, script, COMPUTE_NODE_ARGS),
        "ComputeResources": [compute_resource],
    }
    queue["Iam"] = {key: value for key, value in queue["Iam"].items() if value}
    if not queue["Iam"]:
        del queue["Iam"]
    if not head_node_access:
        del head_node["Iam"]["S3Access"]

    config: dict[str, Any] = {}
    if region is not None:
        config["Region"] = region
    config |= {
        "Image": {"Os": spec.cluster.os} | ({"CustomAmi": spec.cluster.custom_ami} if spec.cluster.custom_ami else {}),
        "HeadNode": head_node,
        "Scheduling": {"Scheduler": "slurm", "SlurmQueues": [queue]},
    }
    if mount is None:
        # An existing file system (the run names it), so that it can outlive the cluster
        # (teardown.keep_file_system): ParallelCluster mounts it on every node.
        config["SharedStorage"] = [
            {
                "Name": "fsx",
                "StorageType": "FsxLustre",
                "MountDir": FSX_MOUNT_DIR,
                "FsxLustreSettings": {"FileSystemId": ids.file_system_id},
            }
        ]
    config |= {
        "Monitoring": {
            # Deleted with the cluster: a retained group would outlive every run, one per cluster,
            # forever. Why a create failed is kept in the run record (pcluster's failures[]).
            "Logs": {"CloudWatch": {"Enabled": True, "RetentionInDays": LOG_RETENTION_DAYS, "DeletionPolicy": "Delete"}}
        },
        "Tags": _tags(tags),
    }
    return config


class _PlainDumper(yaml.SafeDumper):
    """No &anchors and *aliases: a person reads the config, and so does ParallelCluster."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(config: Mapping[str, Any]) -> str:
    """The config as ParallelCluster's YAML, keys in the order rendered."""
    return yaml.dump(dict(config), Dumper=_PlainDumper, sort_keys=False, default_flow_style=False, width=10_000)


def _region(spec: RunSpec) -> str | None:
    # A reservation group lives in one region; with neither, the ParallelCluster API's region applies.
    if spec.region is not None:
        return spec.region
    arn = spec.capacity.reservation_group_arn
    return arn.split(":")[3] if arn else None


def _partition(region: str | None) -> str:
    if region is None:
        return "aws"
    for prefix, partition in (("cn-", "aws-cn"), ("us-gov-", "aws-us-gov"), ("us-isob-", "aws-iso-b")):
        if region.startswith(prefix):
            return partition
    return "aws-iso" if region.startswith("us-iso-") else "aws"


def _file_system_mount(ids: ClusterIds, config_bucket: str) -> dict[str, Any] | None:
    """The OnNodeConfigured step that mounts a file system the run creates (None: ParallelCluster mounts it)."""
    if ids.file_system_dns_name is None or ids.file_system_mount_name is None:
        return None
    args = mount_args(ids.file_system_dns_name, ids.file_system_mount_name, FSX_MOUNT_DIR)
    return {"Script": mount_script_uri(config_bucket), "Args": args}


def _on_node_configured(mount: dict[str, Any] | None, script: str, args: list[str]) -> dict[str, Any]:
    # The node's kind as the argument: the head node builds the shared Python environment, the
    # compute nodes install the driver and runtime for their Neuron devices. The mount goes first
    # (ParallelCluster runs a Sequence in order, stopping at the first failure): the workload's
    # setup and jobs need /fsx, and the head node's Neuron script marks the node configured last.
    install = {"Script": script, "Args": list(args)}
    if mount is None:
        return {"OnNodeConfigured": install}
    return {"OnNodeConfigured": {"Sequence": [mount, install]}}


def _object_access(uri: str) -> list[dict[str, str | bool]]:
    """ParallelCluster's S3Access for reading exactly the object at `uri` (none for https://)."""
    if not uri.startswith("s3://"):
        return []
    bucket, key = uri.removeprefix("s3://").split("/", 1)
    return [{"BucketName": bucket, "KeyName": key}]


def _head_node_s3_access(
    spec: RunSpec, script_access: list[dict[str, str | bool]], config_bucket: str
) -> list[dict[str, str | bool]]:
    """What the head node reads: the workload archive and a one-file dataset as those objects
    only (KeyName), a dataset prefix as its bucket (`aws s3 sync` lists it). The run's buckets
    are ones the stack allows (trainrun.logic.allowlists, checked in Load run spec). The Neuron
    script (`script_access`) is one object too. `workload.resume_from` is a prefix: its bucket,
    like a dataset prefix, except in the config bucket, where it is the objects under it (its
    listing is the stack's ClusterNodePolicy's, limited to checkpoints/)."""
    whole: set[str] = set()
    objects = [(str(entry["BucketName"]), str(entry["KeyName"])) for entry in script_access]
    dataset = spec.workload.dataset.source if spec.workload.dataset else None
    for uri in (spec.workload.source.s3, dataset, spec.workload.resume_from):
        if uri is None:
            continue
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        if bucket == config_bucket and uri == spec.workload.resume_from:
            objects.append((bucket, key + "*"))
        elif not key or key.endswith("/"):
            whole.add(bucket)
        else:
            objects.append((bucket, key))
    access: list[dict[str, str | bool]] = [{"BucketName": bucket} for bucket in sorted(whole)]
    access += [{"BucketName": b, "KeyName": k} for b, k in sorted(set(objects)) if b not in whole]
    return sorted(access, key=lambda entry: (str(entry["BucketName"]), str(entry.get("KeyName", ""))))


def cache_s3_access(spec: RunSpec, config_bucket: str) -> list[dict[str, str | bool]]:
    """The S3Access entries that let a node list, read and write the run's Neuron compile cache
    (trainrun.logic.compile_cache); none when the cache is off. The compiler lists the cache
    (ListObjectsV2: s3:ListBucket on the bucket), which an entry with a KeyName does not grant: in
    the config bucket the listing is the stack's ClusterNodePolicy's, under neuron-compile-cache/
    only, and nothing else of the bucket is readable; in another bucket (one of RunBucketArns) it
    is that bucket, read only, as for a dataset prefix."""
    url = cache_url(spec, config_bucket)
    if url is None:
        return []
    bucket = url.removeprefix("s3://").split("/", 1)[0]
    listing: list[dict[str, str | bool]] = [] if bucket == config_bucket else [{"BucketName": bucket}]
    return [*listing, _prefix_write_access(url)]


def _checkpoint_export_access(spec: RunSpec, run_id: str, config_bucket: str) -> dict[str, str | bool]:
    """Write access to the run's checkpoint export prefix and nothing else of its bucket: the
    head node copies the checkpoints there at teardown (export-checkpoints.sh)."""
    return _prefix_write_access(export_destination(spec, run_id, config_bucket))


def _prefix_write_access(prefix: str) -> dict[str, str | bool]:
    """ParallelCluster's S3Access for reading and writing the objects under `prefix` (an s3://
    URI ending in `/`): KeyName `<key>*`. ParallelCluster turns an entry with EnableWriteAccess
    into s3:* on `arn:aws:s3:::<bucket>/<KeyName>` (its "S3ReadWrite" statement): object actions
    only, so no node can list or change the bucket."""
    bucket, _, key = prefix.removeprefix("s3://").partition("/")
    return {"BucketName": bucket, "KeyName": f"{key}*", "EnableWriteAccess": True}


def _tags(tags: Mapping[str, str]) -> list[dict[str, str]]:
    for key, value in tags.items():
        if key.startswith(RESERVED_TAG_PREFIXES):
            raise ValueError(f"tag key {key!r} uses a reserved prefix ({', '.join(RESERVED_TAG_PREFIXES)})")
        if not 1 <= len(key) <= 128 or len(value) > 256:
            raise ValueError(f"tag {key!r}: keys are 1 to 128 characters and values at most 256")
    return [{"Key": key, "Value": tags[key]} for key in sorted(tags) if key not in DROPPED_TAG_KEYS]
