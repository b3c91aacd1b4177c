"""Every config trainrun renders loads through ParallelCluster 3.16's own cluster schema.

Run in the schema-check venv (see conftest.py and docs/cluster-config.md):
    .venv-pcluster/bin/pytest tests/pcluster
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError as PydanticValidationError

pytest.importorskip("pcluster.schemas.cluster_schema", reason="needs requirements-pcluster.txt")

from marshmallow import ValidationError
from pcluster.schemas.cluster_schema import ClusterSchema

from trainrun.logic.cluster_config import ClusterIds, render_cluster_config
from trainrun.logic.neuron_install import supported_os
from trainrun.model.run_file import (
    AMI_ID,
    RESERVATION_ID,
    RUN_NAME,
    TRAINIUM_INSTANCE_TYPES,
    RunSpec,
    parse_run_file,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# Every YAML file directly in examples/ is a run file (account fixtures live in examples/accounts/).
RUN_FILES = sorted(EXAMPLES.glob("*.yaml"))
GROUP_ARN = "arn:aws:resource-groups:us-west-2:123456789012:group/trn1-pool"
TAGS = {"trainrun:run-id": "demo-20250101t000000z", "trainrun:stack": "trainrun", "Name": "trainrun-demo"}
REAL_LOOKING_IDS = ClusterIds(
    public_subnet_id="subnet-0123456789abcdef0",
    private_subnet_id="subnet-0fedcba9",
    security_group_id="sg-0123456789abcdef0",
    file_system_id="fs-0123456789abcdef0",
)

Load = Callable[[dict[str, Any]], Any]
CUSTOM_AMI = "ami-0123456789abcdef0"


def sample_spec(**overrides: Any) -> RunSpec:
    document: dict[str, Any] = {
        "name": "demo",
        "region": "us-west-2",
        "capacity": {"reservation_id": "cr-0123456789abcdef0", "instance_type": "trn1.32xlarge", "nodes": 4},
        "workload": {"source": {"git": "https://github.com/aws-neuron/aws-neuron-samples.git"}, "train": "true"},
    }
    for dotted, value in overrides.items():
        *parents, leaf = dotted.split("__")
        node = document
        for parent in parents:
            node = node.setdefault(parent, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return RunSpec.model_validate(document)


def with_group(spec: RunSpec) -> RunSpec:
    capacity = spec.capacity.model_copy(update={"reservation_id": None, "reservation_group_arn": GROUP_ARN})
    return spec.model_copy(update={"capacity": capacity, "region": "us-west-2"})


def test_the_example_run_files_are_found():
    assert RUN_FILES, f"no run file in {EXAMPLES}"


@pytest.mark.parametrize("path", RUN_FILES, ids=lambda path: path.name)
@pytest.mark.parametrize("target", ["reservation_id", "reservation_group_arn"])
def test_every_example_renders_a_config_parallelcluster_accepts(path: Path, target: str, load_with_pcluster: Load):
    # Given an example run file, with its reservation named either way
    spec = parse_run_file(path.read_text())
    if target == "reservation_group_arn":
        spec = with_group(spec)
    # When its cluster config is rendered before provisioning
    config = render_cluster_config(spec, ClusterIds.placeholders(spec), tags=TAGS)
    # Then ParallelCluster loads it, and reads back what trainrun meant
    cluster = load_with_pcluster(config)
    resource = cluster.scheduling.queues[0].compute_resources[0]
    assert (resource.min_count, resource.max_count) == (spec.capacity.nodes, spec.capacity.nodes)
    assert resource.instance_type == spec.capacity.instance_type


def test_the_cluster_logs_expire_and_are_deleted_with_the_cluster(load_with_pcluster: Load):
    # When ParallelCluster loads a rendered config
    cluster = load_with_pcluster(render_cluster_config(sample_spec(), REAL_LOOKING_IDS, tags=TAGS))
    # Then its CloudWatch log group has a retention and goes with the cluster
    cloudwatch = cluster.monitoring.logs.cloud_watch
    assert (cloudwatch.enabled, cloudwatch.retention_in_days, cloudwatch.deletion_policy) == (True, 14, "Delete")


@pytest.mark.parametrize("os", supported_os())
@pytest.mark.parametrize("custom_ami", [None, CUSTOM_AMI], ids=["official_ami", "custom_ami"])
@pytest.mark.parametrize("group", [False, True], ids=["reservation_id", "reservation_group_arn"])
def test_every_os_renders_a_config_parallelcluster_accepts(
    os: str, custom_ami: str | None, group: bool, load_with_pcluster: Load
):
    spec = sample_spec(cluster__os=os, cluster__custom_ami=custom_ami)
    spec = with_group(spec) if group else spec
    cluster = load_with_pcluster(render_cluster_config(spec, REAL_LOOKING_IDS, tags=TAGS))
    assert (cluster.image.os, cluster.image.custom_ami) == (os, custom_ami)


@pytest.mark.parametrize("instance_type", TRAINIUM_INSTANCE_TYPES)
def test_every_trainium_type_renders_a_config_parallelcluster_accepts(instance_type: str, load_with_pcluster: Load):
    spec = sample_spec(capacity__instance_type=instance_type)
    cluster = load_with_pcluster(render_cluster_config(spec, REAL_LOOKING_IDS, tags=TAGS))
    assert cluster.scheduling.queues[0].compute_resources[0].efa.enabled == (instance_type != "trn1.2xlarge")


def test_a_capacity_block_renders_a_config_parallelcluster_accepts(load_with_pcluster: Load):
    cluster = load_with_pcluster(render_cluster_config(sample_spec(), REAL_LOOKING_IDS, tags=TAGS, capacity_block=True))
    assert cluster.scheduling.queues[0].is_capacity_block()


@pytest.mark.parametrize(
    "script", ["s3://my-artifacts/neuron/install.sh", "https://example.com/install-neuron.sh"], ids=["s3", "https"]
)
def test_a_given_neuron_script_renders_a_config_parallelcluster_accepts(script: str, load_with_pcluster: Load):
    config = render_cluster_config(sample_spec(), REAL_LOOKING_IDS, tags=TAGS, neuron_install_script_uri=script)
    cluster = load_with_pcluster(config)
    assert cluster.head_node.custom_actions.on_node_configured.script == script


def test_a_run_in_no_named_region_renders_a_config_parallelcluster_accepts(load_with_pcluster: Load):
    config = render_cluster_config(sample_spec(region=None), REAL_LOOKING_IDS, tags={})
    assert "Region" not in config
    load_with_pcluster(config)


# --- any valid run file ---------------------------------------------------------------------

_regions = st.sampled_from(["us-west-2", "us-east-1", "eu-north-1", "ap-northeast-1", "cn-north-1", "us-gov-west-1"])
_buckets = st.from_regex(r"[a-z0-9][a-z0-9-]{1,20}[a-z0-9]", fullmatch=True)
_s3_keys = st.from_regex(r"[A-Za-z0-9_.-]{1,20}(/[A-Za-z0-9_.-]{1,20}){0,2}", fullmatch=True)
_tag_keys = st.from_regex(r"[A-Za-z][A-Za-z0-9_.:/=+@-]{0,40}", fullmatch=True).filter(
    lambda key: not key.startswith(("parallelcluster:", "aws:"))
)
_tag_values = st.from_regex(r"[A-Za-z0-9_.:/=+@ -]{0,60}", fullmatch=True)


@st.composite
def run_specs(draw: st.DrawFn) -> RunSpec:
    """Valid RunSpecs, varied in what reaches the cluster config."""
    region = draw(st.one_of(st.none(), _regions))
    capacity: dict[str, Any] = {
        "instance_type": draw(st.sampled_from(TRAINIUM_INSTANCE_TYPES)),
        "nodes": draw(st.integers(1, 128)),
    }
    if draw(st.booleans()):
        capacity["reservation_id"] = draw(st.from_regex(RESERVATION_ID, fullmatch=True))
    else:
        group_region = region or draw(_regions)
        partition = {"cn": "aws-cn", "us-gov": "aws-us-gov"}.get(group_region.rsplit("-", 2)[0], "aws")
        group = draw(st.from_regex(r"[A-Za-z0-9_.-]{1,64}", fullmatch=True))
        capacity["reservation_group_arn"] = f"arn:{partition}:resource-groups:{group_region}:123456789012:group/{group}"
    source = draw(
        st.one_of(
            st.builds(lambda bucket, key: {"s3": f"s3://{bucket}/{key}.tar.gz"}, _buckets, _s3_keys),
            st.just({"git": "https://github.com/aws-neuron/aws-neuron-samples.git", "ref": "master"}),
        )
    )
    workload: dict[str, Any] = {"source": source, "train": "python3 train.py"}
    if draw(st.booleans()):
        dataset_source = draw(st.builds(lambda bucket, key: f"s3://{bucket}/{key}", _buckets, _s3_keys))
        workload["dataset"] = {"source": dataset_source, "path": "/fsx/data"}
    cluster = {
        "os": draw(st.sampled_from(supported_os())),
        "head_node_instance_type": draw(st.sampled_from(["c5.4xlarge", "m5.8xlarge", "trn1.2xlarge"])),
    }
    if draw(st.booleans()):
        cluster["custom_ami"] = draw(st.from_regex(AMI_ID, fullmatch=True))
    document: dict[str, Any] = {
        "name": draw(st.from_regex(RUN_NAME, fullmatch=True)),
        "capacity": capacity,
        "cluster": cluster,
        "workload": workload,
    }
    if region is not None:
        document["region"] = region
    return RunSpec.model_validate(document)


@st.composite
def cluster_ids(draw: st.DrawFn) -> ClusterIds:
    def hex_id(prefix: str, lengths: tuple[int, ...] = (8, 17)) -> str:
        length = draw(st.sampled_from(lengths))
        return prefix + draw(st.text("0123456789abcdef", min_size=length, max_size=length))

    return ClusterIds(
        public_subnet_id=hex_id("subnet-"),
        private_subnet_id=hex_id("subnet-"),
        security_group_id=hex_id("sg-"),
        file_system_id=hex_id("fs-", (17,)),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=run_specs(),
    ids=cluster_ids(),
    tags=st.dictionaries(_tag_keys, _tag_values, max_size=8),
    script=st.one_of(
        st.none(),
        st.builds(lambda bucket, key: f"s3://{bucket}/{key}.sh", _buckets, _s3_keys),
        st.just("https://example.com/neuron/install.sh"),
    ),
    capacity_block=st.booleans(),
)
def test_any_valid_run_renders_a_config_parallelcluster_accepts(
    spec: RunSpec,
    ids: ClusterIds,
    tags: dict[str, str],
    script: str | None,
    capacity_block: bool,
    load_with_pcluster: Load,
):
    capacity_block = capacity_block and spec.capacity.reservation_id is not None
    config = render_cluster_config(
        spec, ids, tags=tags, neuron_install_script_uri=script, capacity_block=capacity_block
    )
    cluster = load_with_pcluster(config)
    assert cluster.scheduling.queues[0].networking.subnet_ids == [ids.private_subnet_id]
    assert cluster.head_node.networking.subnet_id == ids.public_subnet_id


def test_parallelcluster_takes_only_17_character_lustre_ids_and_so_does_cluster_ids(load_with_pcluster: Load):
    # The check has teeth: ParallelCluster's FsxLustreSettings/FileSystemId pattern is fs-<17>,
    # although EC2-style ids (and the run file's pattern) also allow fs-<8>.
    # (a file system the run names: ParallelCluster mounts it, from SharedStorage)
    spec = sample_spec()
    mounted_by_parallelcluster = {"file_system_dns_name": None, "file_system_mount_name": None}
    ids = ClusterIds.placeholders(spec).model_copy(update=mounted_by_parallelcluster)
    config = render_cluster_config(spec, ids, tags={})
    config["SharedStorage"][0]["FsxLustreSettings"]["FileSystemId"] = "fs-01234567"
    with pytest.raises(ValidationError, match="FileSystemId"):
        ClusterSchema(cluster_name="trainrun-schema-check").load(config)
    with pytest.raises(PydanticValidationError):
        ClusterIds.model_validate({**ClusterIds.placeholders(spec).model_dump(), "file_system_id": "fs-01234567"})


def test_the_stacks_node_policy_renders_a_config_parallelcluster_accepts(load_with_pcluster: Load):
    # Given the stack's ClusterNodePolicy ARN
    arn = "arn:aws:iam::123456789012:policy/parallelcluster/trainrun-ClusterNodePolicy-1A2B3C"
    # When a config is rendered with it
    cluster = load_with_pcluster(render_cluster_config(sample_spec(), REAL_LOOKING_IDS, tags=TAGS, node_policy_arn=arn))
    # Then ParallelCluster puts it on the head node and on the compute nodes
    assert arn in cluster.head_node.iam.additional_iam_policy_arns
    assert arn in cluster.scheduling.queues[0].iam.additional_iam_policy_arns
