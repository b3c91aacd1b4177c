"""What the rendered ParallelCluster config says, without ParallelCluster installed.

tests/pcluster/ checks the same configs against ParallelCluster's own schema.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from trainrun.logic.cluster_config import (
    CLUSTER_NAME,
    PREVIEW_CONFIG_BUCKET,
    ClusterIds,
    cluster_name,
    render_cluster_config,
    to_yaml,
)
from trainrun.logic.file_system_mount import MOUNT_SCRIPT_NAME, MOUNT_WAIT_SECONDS, mount_script
from trainrun.logic.neuron_install import render_script, script_key, supported_os, venv_address
from trainrun.model.run_file import RunSpec, parse_run_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GROUP_ARN = "arn:aws:resource-groups:us-west-2:123456789012:group/trn1-pool"
IDS = ClusterIds(
    public_subnet_id="subnet-0123456789abcdef0",
    private_subnet_id="subnet-0fedcba9876543210",
    security_group_id="sg-0123456789abcdef0",
    file_system_id="fs-0123456789abcdef0",
)
TAGS = {"trainrun:run-id": "demo-1", "trainrun:stack": "trainrun"}
NODE_POLICY = "arn:aws:iam::123456789012:policy/parallelcluster/trainrun-ClusterNodePolicy"


CUSTOM_AMI = "ami-0123456789abcdef0"


def spec_for(instance_type: str = "trn1.32xlarge", nodes: int = 4, *, group: bool = False, **fields: Any) -> RunSpec:
    target = {"reservation_group_arn": GROUP_ARN} if group else {"reservation_id": "cr-0123456789abcdef0"}
    document: dict[str, Any] = {
        "name": "demo",
        "region": "us-west-2",
        "capacity": {**target, "instance_type": instance_type, "nodes": nodes},
        "workload": {"source": {"git": "https://github.com/aws-neuron/aws-neuron-samples.git"}, "train": "true"},
    }
    document.update(fields)
    return RunSpec.model_validate(document)


def render(spec: RunSpec | None = None, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("tags", TAGS)
    return render_cluster_config(spec or spec_for(), IDS, **kwargs)


def queue_of(config: dict[str, Any]) -> dict[str, Any]:
    [queue] = config["Scheduling"]["SlurmQueues"]
    return queue


def compute_resource_of(config: dict[str, Any]) -> dict[str, Any]:
    [resource] = queue_of(config)["ComputeResources"]
    return resource


# --- compute --------------------------------------------------------------------------------


@pytest.mark.parametrize("nodes", [1, 16, 128])
def test_the_compute_nodes_are_static_and_as_many_as_the_run_asks(nodes: int):
    resource = compute_resource_of(render(spec_for(nodes=nodes)))
    assert resource["MinCount"] == resource["MaxCount"] == nodes


@pytest.mark.parametrize(
    ("instance_type", "efa"),
    [("trn1.32xlarge", True), ("trn1n.32xlarge", True), ("trn2.48xlarge", True), ("trn1.2xlarge", False)],
)
def test_efa_is_enabled_only_where_the_instance_type_has_it(instance_type: str, efa: bool):
    resource = compute_resource_of(render(spec_for(instance_type)))
    assert resource["InstanceType"] == instance_type
    assert resource["Efa"] == {"Enabled": efa}


def test_a_reservation_id_is_the_capacity_reservation_target():
    target = compute_resource_of(render(spec_for()))["CapacityReservationTarget"]
    assert target == {"CapacityReservationId": "cr-0123456789abcdef0"}


def test_a_reservation_group_is_the_capacity_reservation_target():
    target = compute_resource_of(render(spec_for(group=True)))["CapacityReservationTarget"]
    assert target == {"CapacityReservationResourceGroupArn": GROUP_ARN}


def test_the_placement_group_is_off_because_the_reservation_carries_its_own():
    assert queue_of(render())["Networking"]["PlacementGroup"] == {"Enabled": False}


def test_the_queue_is_on_demand_unless_the_reservation_is_a_capacity_block():
    assert queue_of(render())["CapacityType"] == "ONDEMAND"
    assert queue_of(render(capacity_block=True))["CapacityType"] == "CAPACITY_BLOCK"


def test_a_capacity_block_cannot_be_targeted_through_a_group():
    with pytest.raises(ValueError, match="Capacity Block"):
        render(spec_for(group=True), capacity_block=True)


def test_the_queue_has_a_name_slurm_and_parallelcluster_accept():
    queue = queue_of(render(spec_for("trn1n.32xlarge")))
    assert queue["Name"] == "compute"
    assert re.fullmatch(r"[a-z][a-z0-9-]{0,24}", compute_resource_of(render())["Name"])


# --- network --------------------------------------------------------------------------------


def test_the_head_node_is_in_the_public_subnet_and_compute_in_the_private_one():
    config = render()
    assert config["HeadNode"]["Networking"]["SubnetId"] == IDS.public_subnet_id
    assert queue_of(config)["Networking"]["SubnetIds"] == [IDS.private_subnet_id]


def test_the_efa_security_group_is_added_to_head_and_compute_nodes():
    config = render()
    assert config["HeadNode"]["Networking"]["AdditionalSecurityGroups"] == [IDS.security_group_id]
    assert queue_of(config)["Networking"]["AdditionalSecurityGroups"] == [IDS.security_group_id]


def test_the_head_node_has_no_key_pair_and_no_ssh_from_anywhere():
    ssh = render()["HeadNode"]["Ssh"]
    assert "KeyName" not in ssh
    assert ssh["AllowedIps"] == "127.0.0.1/32"


# --- access, storage, logs ------------------------------------------------------------------


def test_the_head_node_can_be_reached_through_ssm():
    policies = [policy["Policy"] for policy in render()["HeadNode"]["Iam"]["AdditionalIamPolicies"]]
    assert "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore" in policies


def test_the_cluster_config_attaches_no_policy_that_writes_any_log_stream():
    # Given a rendered cluster configuration
    config = render(node_policy_arn=NODE_POLICY)
    # When the head node's and the compute nodes' policies are listed
    head = [policy["Policy"] for policy in config["HeadNode"]["Iam"]["AdditionalIamPolicies"]]
    compute = [policy["Policy"] for policy in queue_of(config)["Iam"]["AdditionalIamPolicies"]]
    # Then CloudWatchAgentServerPolicy is not among them, and the stack's node policy is on both
    assert not any(policy.endswith("/CloudWatchAgentServerPolicy") for policy in head + compute)
    assert NODE_POLICY in head and compute == [NODE_POLICY]


def test_managed_policies_are_named_in_the_partition_of_the_region():
    spec = spec_for(region="cn-northwest-1")
    [ssm, *_] = render(spec)["HeadNode"]["Iam"]["AdditionalIamPolicies"]
    assert ssm["Policy"] == "arn:aws-cn:iam::aws:policy/AmazonSSMManagedInstanceCore"


def test_a_file_system_the_run_creates_is_mounted_by_the_nodes_first_script_not_by_parallelcluster():
    # Given the ids of a file system the run creates (still CREATING when the cluster is)
    dns_name = "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com"
    ids = IDS.model_copy(update={"file_system_dns_name": dns_name, "file_system_mount_name": "abcdefgh"})
    config = render_cluster_config(spec_for(), ids, tags=TAGS, config_bucket="stack-config")
    # Then ParallelCluster is not given it (its validators would refuse a file system not AVAILABLE)
    assert "SharedStorage" not in config
    # And every node mounts it first, with the script at its content address, then installs Neuron
    mount_uri = f"s3://stack-config/{script_key(mount_script(), MOUNT_SCRIPT_NAME)}"
    mount = {"Script": mount_uri, "Args": [dns_name, "abcdefgh", "/fsx", str(MOUNT_WAIT_SECONDS)]}
    for node, kind in ((config["HeadNode"], "HeadNode"), (queue_of(config), "ComputeFleet")):
        first, then = node["CustomActions"]["OnNodeConfigured"]["Sequence"]
        assert first == mount
        assert then["Args"] == [kind] and then["Script"].endswith("/on-node-configured.sh")
        # And may read that one object of the config bucket to fetch it
        assert {"BucketName": "stack-config", "KeyName": mount_uri.removeprefix("s3://stack-config/")} in node["Iam"][
            "S3Access"
        ]


def test_the_mount_names_come_together():
    with pytest.raises(ValidationError, match="go together"):
        dns_name_alone = {"file_system_dns_name": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com"}
        IDS.model_validate({**IDS.model_dump(), **dns_name_alone})


def test_a_file_system_the_run_names_is_mounted_at_fsx_by_parallelcluster():
    assert render()["SharedStorage"] == [
        {
            "Name": "fsx",
            "StorageType": "FsxLustre",
            "MountDir": "/fsx",
            "FsxLustreSettings": {"FileSystemId": IDS.file_system_id},
        }
    ]


def test_cluster_logs_go_to_cloudwatch_with_a_retention():
    cloudwatch = render()["Monitoring"]["Logs"]["CloudWatch"]
    assert cloudwatch["Enabled"] is True
    assert cloudwatch["RetentionInDays"] == 14


def test_cluster_logs_are_deleted_with_the_cluster():
    # A retained log group would outlive the run (one per cluster, never deleted)
    assert render()["Monitoring"]["Logs"]["CloudWatch"]["DeletionPolicy"] == "Delete"


def test_the_root_volumes_are_sized_and_encrypted():
    config = render()
    head = config["HeadNode"]["LocalStorage"]["RootVolume"]
    compute = queue_of(config)["ComputeSettings"]["LocalStorage"]["RootVolume"]
    for volume in (head, compute):
        assert volume["Size"] >= 100
        assert volume["Encrypted"] is True


def test_compute_nodes_get_the_root_volume_neuron_recommends_for_trn1():
    # aws-neuron-parallelcluster-samples, examples/cluster-configs/trn1-16-nodes-pcluster.md:
    # ComputeSettings.LocalStorage.RootVolume.Size 1024 for trn1.32xlarge compute nodes.
    compute = queue_of(render())["ComputeSettings"]["LocalStorage"]["RootVolume"]

    assert compute["Size"] == 1024
    assert compute["VolumeType"] == "gp3"


# --- Neuron SDK -----------------------------------------------------------------------------


@pytest.mark.parametrize("os", supported_os())
def test_every_node_runs_trainruns_neuron_script_for_the_os_at_its_content_address(os: str):
    config = render(spec_for(cluster={"os": os}), config_bucket="stack-config")

    key = script_key(render_script(os, "stack-config"))
    assert re.fullmatch(r"cluster-scripts/[0-9a-f]{64}/on-node-configured\.sh", key)
    assert config["Image"]["Os"] == os
    assert config["HeadNode"]["CustomActions"] == {
        "OnNodeConfigured": {"Script": f"s3://stack-config/{key}", "Args": ["HeadNode"]}
    }
    assert queue_of(config)["CustomActions"] == {
        "OnNodeConfigured": {"Script": f"s3://stack-config/{key}", "Args": ["ComputeFleet"]}
    }


def test_every_node_may_read_the_neuron_script_and_the_compute_nodes_write_only_the_compile_cache():
    # When a run's cluster config is rendered in a stack whose config bucket is stack-config
    config = render(config_bucket="stack-config")
    # Then every node may read the Neuron script, and the compute nodes, where the compile and
    # train jobs run, may read and write the compile cache: nothing else of the config bucket
    script = {"BucketName": "stack-config", "KeyName": script_key(render_script("ubuntu2204", "stack-config"))}
    cache = {"BucketName": "stack-config", "KeyName": "neuron-compile-cache/trn1.32xlarge/*", "EnableWriteAccess": True}
    assert queue_of(config)["Iam"]["S3Access"] == [script, cache]
    assert next(a for a in config["HeadNode"]["Iam"]["S3Access"] if a["BucketName"] == "stack-config") == script


@pytest.mark.parametrize("os", supported_os())
def test_the_head_node_alone_may_read_and_write_the_neuron_environment_at_its_content_address(os: str):
    # When a run's cluster config is rendered with trainrun's own Neuron script
    config = render(spec_for(cluster={"os": os}), config_bucket="stack-config")
    # Then the head node may read and write the objects of the environment's address, and no other
    # of the config bucket but the script; the compute nodes, which run it from /home, none of it
    venv = {"BucketName": "stack-config", "KeyName": f"neuron-venv/{venv_address(os)}/*", "EnableWriteAccess": True}
    script = {"BucketName": "stack-config", "KeyName": script_key(render_script(os, "stack-config"))}
    assert [a for a in config["HeadNode"]["Iam"]["S3Access"] if a["BucketName"] == "stack-config"] == [script, venv]
    assert venv not in queue_of(config)["Iam"]["S3Access"]


def test_a_neuron_script_the_stack_names_gets_no_access_to_the_neuron_environments():
    config = render(config_bucket="stack-config", neuron_install_script_uri="s3://my-artifacts/neuron/install.sh")

    access = config["HeadNode"]["Iam"]["S3Access"]
    assert [a for a in access if "neuron-venv/" in str(a.get("KeyName", ""))] == []


def test_a_preview_shows_the_script_in_the_preview_bucket_never_a_placeholder():
    script = render()["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Script"]

    assert script == f"s3://{PREVIEW_CONFIG_BUCKET}/{script_key(render_script('ubuntu2204', PREVIEW_CONFIG_BUCKET))}"


def test_a_cluster_boots_the_custom_ami_the_run_file_names():
    # Given a run file with an AMI its owner built
    spec = spec_for(cluster={"os": "ubuntu2404", "custom_ami": CUSTOM_AMI})
    # When its cluster config is rendered
    config = render(spec)
    # Then every node boots that AMI
    assert config["Image"] == {"Os": "ubuntu2404", "CustomAmi": CUSTOM_AMI}


def test_an_os_with_an_official_ami_gets_no_custom_ami():
    assert render(spec_for(cluster={"os": "ubuntu2404"}))["Image"] == {"Os": "ubuntu2404"}


def test_a_given_neuron_script_is_used_and_only_that_object_readable_by_every_node():
    config = render(neuron_install_script_uri="s3://my-artifacts/neuron/install.sh")
    assert config["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Script"] == "s3://my-artifacts/neuron/install.sh"
    access = {"BucketName": "my-artifacts", "KeyName": "neuron/install.sh"}
    assert [a for a in queue_of(config)["Iam"]["S3Access"] if a["BucketName"] == "my-artifacts"] == [access]
    assert access in config["HeadNode"]["Iam"]["S3Access"]


def test_an_https_neuron_script_needs_no_bucket_access_on_compute_nodes():
    # Given a run without the compile cache, the only other thing compute nodes reach in S3
    spec = spec_for(
        workload={
            "source": {"git": "https://github.com/aws-neuron/aws-neuron-samples.git"},
            "train": "true",
            "compile_cache": "off",
        }
    )
    config = render(spec, neuron_install_script_uri="https://example.com/install-neuron.sh")
    assert "Iam" not in queue_of(config)


@pytest.mark.parametrize("uri", ["http://example.com/x.sh", "file:///tmp/x.sh", "s3://x", "s3://bucket/a b.sh"])
def test_a_neuron_script_that_is_not_an_s3_or_https_url_is_refused(uri: str):
    with pytest.raises(ValueError, match="neuron_install_script_uri"):
        render(neuron_install_script_uri=uri)


def test_the_head_node_can_read_the_workload_and_dataset_buckets():
    spec = spec_for(
        workload={
            "source": {"s3": "s3://code-bucket/workload.tar.gz"},
            "dataset": {"source": "s3://data-bucket/wiki/", "path": "/fsx/data"},
            "train": "true",
        }
    )
    read = [a["BucketName"] for a in render(spec)["HeadNode"]["Iam"]["S3Access"] if not a.get("EnableWriteAccess")]
    assert read == ["code-bucket", "data-bucket", PREVIEW_CONFIG_BUCKET]


def test_the_head_node_reads_the_workload_archive_only_not_its_bucket():
    # Given a workload archive in the config bucket, beside other people's run files
    spec = spec_for(workload={"source": {"s3": "s3://config-bucket/workloads/w.tar.gz"}, "train": "true"})
    # When the cluster config is rendered
    access = render(spec)["HeadNode"]["Iam"]["S3Access"]
    # Then the head node may read that object, and nothing else of the bucket
    assert {"BucketName": "config-bucket", "KeyName": "workloads/w.tar.gz"} in access
    assert {"BucketName": "config-bucket"} not in access


def test_a_cluster_that_may_be_kept_reads_the_workloads_copied_for_it_and_no_other_clusters():
    # Given a run whose teardown keeps its cluster, to run later runs on it (cluster.reuse)
    spec = spec_for(teardown={"on_success": "keep"})
    # When its cluster config is rendered
    access = render(spec, config_bucket="stack-config", run_id="demo-1")["HeadNode"]["Iam"]["S3Access"]
    # Then the head node may read, not write, the archives Prepare head node copies for that cluster only
    assert {"BucketName": "stack-config", "KeyName": "cluster-sources/demo-1/*"} in access
    assert not any(entry.get("KeyName") == "cluster-sources/*" for entry in access)


def test_a_cluster_that_is_never_kept_reads_no_later_runs_workloads():
    access = render(config_bucket="stack-config", run_id="demo-1")["HeadNode"]["Iam"]["S3Access"]
    assert not any(str(entry.get("KeyName", "")).startswith("cluster-sources/") for entry in access)


# --- checkpoints that outlive teardown --------------------------------------------------------


def test_the_head_node_may_write_its_runs_checkpoint_prefix_and_no_other():
    # When the cluster config of run demo-1 is rendered in a stack whose config bucket is stack-config
    access = render(config_bucket="stack-config", run_id="demo-1")["HeadNode"]["Iam"]["S3Access"]
    # Then the head node may write exactly that run's prefix of checkpoints/ (the export at teardown),
    # besides its Neuron environment's address
    writable = [entry for entry in access if entry.get("EnableWriteAccess")]
    venv = f"neuron-venv/{venv_address('ubuntu2204')}/*"
    assert writable == [
        {"BucketName": "stack-config", "KeyName": venv, "EnableWriteAccess": True},
        {"BucketName": "stack-config", "KeyName": "checkpoints/demo-1/*", "EnableWriteAccess": True},
    ]
    # And the compute nodes may not write the checkpoints (only the compile cache)
    compute = queue_of(render(config_bucket="stack-config", run_id="demo-1"))["Iam"]["S3Access"]
    assert [entry["KeyName"] for entry in compute if entry.get("EnableWriteAccess")] == [
        "neuron-compile-cache/trn1.32xlarge/*"
    ]


def test_a_run_with_a_data_repository_writes_its_checkpoints_under_it():
    spec = spec_for(storage={"fsx": {"data_repository": "s3://data-bucket/wiki/"}})
    access = render(spec, config_bucket="stack-config", run_id="demo-1")["HeadNode"]["Iam"]["S3Access"]
    writable = [entry for entry in access if entry.get("EnableWriteAccess")]
    expected = {"BucketName": "data-bucket", "KeyName": "wiki/checkpoints/demo-1/*", "EnableWriteAccess": True}
    assert [entry for entry in writable if entry["BucketName"] == "data-bucket"] == [expected]


def test_resume_from_the_config_bucket_reads_that_prefix_only():
    # Given a run that resumes from an earlier run's exported checkpoints
    workload = {
        "source": {"git": "https://github.com/aws-neuron/aws-neuron-samples.git"},
        "train": "true",
        "resume_from": "s3://stack-config/checkpoints/demo-0/",
    }
    access = render(spec_for(workload=workload), config_bucket="stack-config")["HeadNode"]["Iam"]["S3Access"]
    # Then the head node may read the objects under that prefix, not the bucket
    assert {"BucketName": "stack-config", "KeyName": "checkpoints/demo-0/*"} in access
    assert {"BucketName": "stack-config"} not in access


def test_resume_from_another_bucket_reads_that_bucket_as_a_dataset_prefix_does():
    workload = {
        "source": {"git": "https://github.com/aws-neuron/aws-neuron-samples.git"},
        "train": "true",
        "resume_from": "s3://ckpt-bucket/bert/step-20/",
    }
    access = render(spec_for(workload=workload), config_bucket="stack-config")["HeadNode"]["Iam"]["S3Access"]
    assert {"BucketName": "ckpt-bucket"} in access


# --- region and tags ------------------------------------------------------------------------


def test_the_region_comes_from_the_run_or_else_its_reservation_group():
    assert render()["Region"] == "us-west-2"
    no_region = spec_for(group=True).model_copy(update={"region": None})
    assert render(no_region)["Region"] == "us-west-2"
    assert "Region" not in render(spec_for().model_copy(update={"region": None}))


def test_tags_become_a_key_value_list_without_name_which_parallelcluster_sets():
    tags = render(tags={"trainrun:stack": "trainrun", "Name": "trainrun-demo", "trainrun:run-id": "demo-1"})["Tags"]
    assert tags == [{"Key": "trainrun:run-id", "Value": "demo-1"}, {"Key": "trainrun:stack", "Value": "trainrun"}]


@pytest.mark.parametrize("key", ["parallelcluster:version", "aws:cloudformation:stack-name", "", "k" * 129])
def test_a_reserved_or_malformed_tag_key_is_refused(key: str):
    with pytest.raises(ValueError, match="tag"):
        render(tags={key: "x"})


# --- ids, names, YAML -----------------------------------------------------------------------


def test_placeholder_ids_are_valid_and_obviously_not_real():
    ids = ClusterIds.placeholders(parse_run_file((EXAMPLES / "single-node.yaml").read_text()))
    assert ClusterIds.model_validate(ids.model_dump()) == ids
    named = {key: value for key, value in ids.model_dump().items() if key.endswith("_id")}
    assert all(set(value.split("-", 1)[1]) <= set("0ab") for value in named.values())
    # A file system the run creates: the names its nodes mount it by, of the placeholder id
    assert ids.file_system_dns_name == f"{ids.file_system_id}.fsx.us-west-2.amazonaws.com"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("file_system_id", "fs-01234567"),  # ParallelCluster's Lustre pattern takes 17 characters only
        ("security_group_id", "sg-0123"),
        ("public_subnet_id", "subnet-0123456789abcdef0; true"),
    ],
)
def test_cluster_ids_refuse_what_parallelcluster_would(field: str, value: str):
    with pytest.raises(ValidationError):
        ClusterIds.model_validate({**IDS.model_dump(), field: value})


@pytest.mark.parametrize("run_id", ["demo", "bert-large-phase1-20250101t000000z"])
def test_a_plain_run_id_names_its_cluster_readably(run_id: str):
    assert cluster_name(run_id) == f"trainrun-{run_id}"


@given(st.text(max_size=200))
def test_any_run_id_gives_a_valid_deterministic_cluster_name(run_id: str):
    name = cluster_name(run_id)
    assert re.fullmatch(CLUSTER_NAME, name)
    assert cluster_name(run_id) == name


def test_run_ids_that_differ_only_where_names_cannot_still_name_different_clusters():
    long_prefix = "x" * 60
    assert cluster_name(long_prefix + "a") != cluster_name(long_prefix + "b")
    assert cluster_name("run_1") != cluster_name("run-1")
    assert cluster_name("run.1") != cluster_name("run_1")


def test_the_yaml_reads_back_to_the_same_config_with_no_aliases():
    config = render()
    text = to_yaml(config)
    assert yaml.safe_load(text) == config
    assert "&id" not in text and "*id" not in text
    assert text.startswith("Region: us-west-2\nImage:\n")


def test_every_example_run_file_renders():
    run_files = [path for path in EXAMPLES.glob("*.yaml") if "workload" in (yaml.safe_load(path.read_text()) or {})]
    assert run_files
    for path in run_files:
        spec = parse_run_file(path.read_text())
        config = render_cluster_config(spec, ClusterIds.placeholders(spec), tags=TAGS)
        assert compute_resource_of(config)["MaxCount"] == spec.capacity.nodes
