"""Provisioning and teardown steps against moto, the FSx emulator and a fake ParallelCluster API.

The network and the file system are real moto resources, built by the steps themselves. The
ParallelCluster API is `FakePclusterApi` below: the three calls the steps make, answering with
the client's own models, so no socket is opened.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends

from trainrun.adapters.fsx import StorageFailed, ensure_file_system
from trainrun.adapters.network import ensure_network
from trainrun.adapters.pcluster import (
    ClusterAlreadyExists,
    ClusterDescription,
    ClusterSummary,
    Ec2Instance,
    Failure,
    PclusterAccessDenied,
    PclusterApiError,
    StackEvent,
    root_cause,
)
from trainrun.errors import TransientAwsError
from trainrun.local import ec2_dependencies, fsx_emulator
from trainrun.logic.cluster_config import cluster_name
from trainrun.logic.file_system_mount import MOUNT_SCRIPT_NAME, mount_script
from trainrun.logic.neuron_install import render_script, script_key
from trainrun.metrics import Metric
from trainrun.model.findings import Code, Finding, Severity
from trainrun.model.resources import ClusterRef, NetworkIds, Progress, StorageIds
from trainrun.model.run_file import Fsx, RunSpec, parse_run_file
from trainrun.model.run_record import RunError, RunFileRef, RunRecord, RunStore
from trainrun.steps.provisioning import (
    MAX_FAILED_RESOURCE_BYTES,
    ClusterCreateFailed,
    ConfigurationMissing,
    TeardownFailed,
    TeardownInput,
    WorkflowState,
    create_cluster,
    create_file_system,
    create_network,
    link_data_repository,
    tear_down,
)
from trainrun.steps.run import RunRef
from trainrun.steps.run_events import RunEvents

from .conftest import CONFIG_BUCKET, REGION, RecordedMetrics, moto_run_events

ZONE = "us-west-2b"
STACK_NAME = "trainrun-test"
RUN = "bert-large-0123456789ab"
CLUSTER = cluster_name(RUN)
POLL = 7
NEURON_SCRIPT = "s3://trainrun-artifacts/neuron/install-neuron.sh"
BUCKET = "s3://trainrun-data-123456789012/wiki"
CREATED_AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RUN_FILE = f"""\
name: bert-large
region: {REGION}
capacity:
  reservation_id: cr-0123456789abcdef0
  instance_type: trn1.32xlarge
  nodes: 2
  availability_zone: {ZONE}
workload:
  source:
    s3: s3://trainrun-examples/bert.tar.gz
  train: python3 train.py
"""
SUCCEEDED = TeardownInput(run_id=RUN)
FAILED = TeardownInput(run_id=RUN, state=WorkflowState(error=RunError(error="States.TaskFailed", cause="boom")))


@dataclass
class FakePclusterApi:
    """describe/create/delete_cluster, stop_compute_fleet, delete_cluster_instances and first_failed_resource as
    `PclusterApi` answers them,
    over a dict of clusters and one list of stack events (newest first; `events_error` raised instead).

    A deleted cluster is DELETE_IN_PROGRESS for `describes_while_deleting` describes, then gone.
    `missed_describes` describes answer "no such cluster" whatever exists: a second attempt that
    looked just before the first one created it.
    """

    clusters: dict[str, ClusterDescription] = field(default_factory=dict)
    created: list[tuple[str, str]] = field(default_factory=list)  # (name, config YAML)
    deleted: list[str] = field(default_factory=list)
    describes_while_deleting: int = 2
    missed_describes: int = 0
    stack_events: list[StackEvent] = field(default_factory=list)
    events_error: Exception | None = None
    fleet_stopped: list[str] = field(default_factory=list)  # updateComputeFleet STOP_REQUESTED, by cluster
    stop_error: Exception | None = None
    # deleteClusterInstances, by cluster, with the fleet's status when it was asked
    instances_deleted: list[tuple[str, str | None]] = field(default_factory=list)

    def describe_cluster(self, name: str, *, region: str) -> ClusterDescription | None:
        if self.missed_describes:
            self.missed_describes -= 1
            return None
        cluster = self.clusters.get(name)
        if cluster is not None and cluster.clusterStatus == "DELETE_IN_PROGRESS":
            if self.describes_while_deleting <= 0:
                del self.clusters[name]
                return None
            self.describes_while_deleting -= 1
        if cluster is not None and cluster.cloudformationStackStatus is None:
            # ParallelCluster's cluster statuses are its stack's, but for the stack's own *_ROLLBACK_*.
            return cluster.model_copy(update={"cloudformationStackStatus": cluster.clusterStatus})
        return cluster

    def create_cluster(self, name: str, config_yaml: str, *, region: str) -> ClusterSummary:
        self.created.append((name, config_yaml))
        if name in self.clusters:
            raise ClusterAlreadyExists(f"Cluster {name} already exists.", status=400)
        self.clusters[name] = ClusterDescription(clusterName=name, clusterStatus="CREATE_IN_PROGRESS", region=region)
        return ClusterSummary(clusterName=name, clusterStatus="CREATE_IN_PROGRESS", region=region)

    def delete_cluster(self, name: str, *, region: str) -> ClusterSummary | None:
        self.deleted.append(name)
        if name not in self.clusters:
            return None
        self.set(name, "DELETE_IN_PROGRESS")
        return ClusterSummary(clusterName=name, clusterStatus="DELETE_IN_PROGRESS", region=region)

    def stop_compute_fleet(self, name: str, *, region: str) -> str | None:
        if self.stop_error is not None:
            raise self.stop_error
        self.fleet_stopped.append(name)
        if name not in self.clusters:
            return None
        self.clusters[name] = self.clusters[name].model_copy(update={"computeFleetStatus": "STOP_REQUESTED"})
        return "STOP_REQUESTED"

    def delete_cluster_instances(self, name: str, *, region: str) -> bool:
        cluster = self.clusters.get(name)
        self.instances_deleted.append((name, cluster.computeFleetStatus if cluster is not None else None))
        return cluster is not None

    def first_failed_resource(self, name: str, *, region: str) -> StackEvent | None:
        if self.events_error is not None:
            raise self.events_error
        return root_cause(self.stack_events)

    def set(self, name: str, status: str, **fields: Any) -> None:
        self.clusters[name] = self.clusters[name].model_copy(update={"clusterStatus": status, **fields})


# --- fixtures and helpers -----------------------------------------------------------------------


@pytest.fixture
def api() -> FakePclusterApi:
    return FakePclusterApi()


def spec_of(**sections: dict[str, Any]) -> RunSpec:
    """The run file above with whole sections added or replaced, validated as Load run spec does."""
    document = yaml.safe_load(RUN_FILE) | sections
    return parse_run_file(yaml.safe_dump(document))


def given_run(store: RunStore, **sections: dict[str, Any]) -> None:
    """A run past Load run spec and Validate capacity: its record with the spec and the zone."""
    store.create(
        RunRecord(
            run_id=RUN,
            run_file=RunFileRef(bucket="trainrun-config-test", key="runs/bert-large.yaml"),
            execution_arn=f"arn:aws:states:{REGION}:123456789012:execution:trainrun-run:{RUN}",
            created_at=CREATED_AT,
            updated_at=CREATED_AT,
        )
    )
    store.set_spec(RUN, spec_of(**sections))
    store.set_availability_zone(RUN, ZONE)


def record(store: RunStore) -> RunRecord:
    found = store.get(RUN)
    assert found is not None
    return found


def network_of(store: RunStore) -> NetworkIds:
    network = record(store).network
    assert network is not None
    return network


def storage_of(store: RunStore) -> StorageIds:
    storage = record(store).storage
    assert storage is not None
    return storage


def cluster_of(store: RunStore) -> ClusterRef:
    cluster = record(store).cluster
    assert cluster is not None
    return cluster


def until_done(step: Callable[[], Progress], passes: int = 10) -> list[Progress]:
    """The step's wait loop, without the waiting: every Progress until one is done."""
    seen = [step()]
    while not seen[-1].done:
        assert len(seen) < passes, seen
        seen.append(step())
    return seen


def network_step(ec2: Any, store: RunStore) -> Progress:
    return create_network(ec2, store, RunRef(run_id=RUN), stack=STACK_NAME, poll_seconds=POLL)


def file_system_step(fsx: Any, store: RunStore) -> Progress:
    return create_file_system(fsx, store, RunRef(run_id=RUN), stack=STACK_NAME, poll_seconds=POLL)


def link_step(fsx: Any, store: RunStore) -> Progress:
    return link_data_repository(fsx, store, RunRef(run_id=RUN), stack=STACK_NAME, poll_seconds=POLL)


def cluster_step(
    api: Any, store: RunStore, run_events: RunEvents | None = None, now: datetime | None = None, **settings: Any
) -> Progress:
    """Create cluster, with the stack's `settings` (the Neuron script, config bucket, S3 client) when given."""
    defaults: dict[str, Any] = {"neuron_install_script_uri": NEURON_SCRIPT, "config_bucket": CONFIG_BUCKET}
    return create_cluster(
        api,
        store,
        RunRef(run_id=RUN),
        stack=STACK_NAME,
        region=REGION,
        poll_seconds=POLL,
        run_events=run_events or moto_run_events(),
        now=now,
        **(defaults | settings),
    )


def teardown_step(
    ec2: Any,
    fsx: Any,
    api: Any,
    store: RunStore,
    request: TeardownInput = SUCCEEDED,
    run_events: RunEvents | None = None,
    metrics: RecordedMetrics | None = None,
    ssm: Any = None,
) -> Progress:
    """One teardown pass; `ssm` answers the checkpoints' export (a run whose jobs never ran has none)."""
    return tear_down(
        ec2,
        fsx,
        api,
        store,
        request,
        region=REGION,
        poll_seconds=POLL,
        run_events=run_events or moto_run_events(),
        metrics=metrics if metrics is not None else RecordedMetrics(),
        ssm=ssm,
        config_bucket=CONFIG_BUCKET,
    )


def until_it_gives_up(step: Callable[[], Progress], passes: int = 10) -> tuple[list[Progress], TeardownFailed]:
    """Teardown passes until one raises TeardownFailed (what it could delete is gone by then)."""
    seen: list[Progress] = []
    for _ in range(passes):
        try:
            seen.append(step())
        except TeardownFailed as exc:
            return seen, exc
        assert not seen[-1].done, seen
    raise AssertionError(f"teardown never gave up: {seen}")


def cluster_node_in(ec2: Any, store: RunStore) -> str:
    """An instance of the cluster in the run's private subnet and security group, as ParallelCluster launches it."""
    network = network_of(store)
    return str(
        ec2.run_instances(
            ImageId="ami-04681a1dbd79675a5",
            MinCount=1,
            MaxCount=1,
            SubnetId=str(network.private_subnet_id),
            SecurityGroupIds=[str(network.security_group_id)],
        )["Instances"][0]["InstanceId"]
    )


@pytest.fixture
def strict_ec2() -> Iterator[None]:
    """EC2's DependencyViolation, as the local runtime installs it."""
    ec2_dependencies.install()
    yield
    ec2_dependencies.uninstall()


@dataclass(frozen=True)
class Provisioned:
    vpc_id: str
    file_system_id: str


def provisioned(ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore, **sections: dict[str, Any]) -> Provisioned:
    """A run with its network, AVAILABLE file system and a CREATE_COMPLETE cluster, all recorded."""
    given_run(store, **sections)
    until_done(lambda: network_step(ec2, store))
    until_done(lambda: file_system_step(fsx, store))
    until_done(lambda: link_step(fsx, store))  # the workflow's wait for the file system (and its link)
    api.clusters[CLUSTER] = ClusterDescription(clusterName=CLUSTER, clusterStatus="CREATE_COMPLETE", region=REGION)
    store.set_cluster(RUN, ClusterRef(name=CLUSTER, region=REGION, status="CREATE_COMPLETE"))
    return Provisioned(vpc_id=str(network_of(store).vpc_id), file_system_id=str(storage_of(store).file_system_id))


def vpc_exists(ec2: Any, vpc_id: str) -> bool:
    return bool(ec2.describe_vpcs(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["Vpcs"])


def file_system_lifecycle(fsx: Any, file_system_id: str) -> str | None:
    """The file system's lifecycle, or None when it is gone."""
    found = [fs for fs in fsx.describe_file_systems()["FileSystems"] if fs["FileSystemId"] == file_system_id]
    return str(found[0]["Lifecycle"]) if found else None


def cluster_ids(store: RunStore, file_system_id: str = "fs-0123456789abcdef0") -> None:
    """Made-up network and file system ids in the record: all Create cluster reads of them."""
    store.set_network(
        RUN,
        NetworkIds(
            vpc_id="vpc-0123456789abcdef0",
            public_subnet_id="subnet-0123456789abcdef0",
            private_subnet_id="subnet-0123456789abcdef1",
            security_group_id="sg-0123456789abcdef0",
        ),
    )
    store.set_storage(RUN, StorageIds(file_system_id=file_system_id))


# --- Create network -----------------------------------------------------------------------------


def test_create_network_records_the_new_network_and_is_done_once_the_nat_gateway_is_available(
    ec2: Any, store: RunStore
) -> None:
    # Given a run that asks for a new network
    given_run(store)
    # When the network is created (moto's NAT gateway is available at once)
    progress = network_step(ec2, store)
    # Then the step is done
    assert progress == Progress(done=True, retry_after_seconds=POLL)
    # And every id is recorded, of a network the run created, in the run's zone
    network = network_of(store)
    assert network.created is True
    assert all(value for name, value in network.model_dump().items() if name != "control_plane_subnet_id")
    (subnet,) = ec2.describe_subnets(SubnetIds=[network.private_subnet_id])["Subnets"]
    assert subnet["AvailabilityZone"] == ZONE
    # And no control plane subnet: that is an EKS run's
    assert network.control_plane_subnet_id is None


def test_create_network_of_an_eks_run_adds_the_control_plane_subnet_in_another_zone(ec2: Any, store: RunStore) -> None:
    # Given an EKS run that asks for a new network
    given_run(store, cluster={"kind": "eks"})
    # When the network is created, twice (a retried step)
    network_step(ec2, store)
    first = network_of(store)
    network_step(ec2, store)
    # Then its control plane has a subnet of its own in another zone, the same one both times
    network = network_of(store)
    assert network == first and network.control_plane_subnet_id is not None
    (subnet,) = ec2.describe_subnets(SubnetIds=[network.control_plane_subnet_id])["Subnets"]
    assert subnet["AvailabilityZone"] != ZONE and subnet["VpcId"] == network.vpc_id


def test_create_network_is_not_done_while_the_nat_gateway_is_pending(ec2: Any, store: RunStore) -> None:
    # Given a run whose network was created, with its NAT gateway still pending
    given_run(store)
    network_step(ec2, store)
    nat_id = str(network_of(store).nat_gateway_id)
    ec2_backends[DEFAULT_ACCOUNT_ID][REGION].nat_gateways[nat_id].state = "pending"
    # When the step checks again
    progress = network_step(ec2, store)
    # Then it waits for the NAT gateway, and created nothing new
    assert progress.done is False
    assert progress.waiting_on == [f"nat-gateway {nat_id} (pending)"]
    assert network_of(store).nat_gateway_id == nat_id


def test_create_network_on_an_existing_vpc_records_it_as_not_created(ec2: Any, store: RunStore) -> None:
    # Given someone's VPC with two subnets, named by the run
    vpc_id = ec2.create_vpc(CidrBlock="10.50.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": True})
    public, private = (
        ec2.create_subnet(VpcId=vpc_id, CidrBlock=cidr, AvailabilityZone=ZONE)["Subnet"]["SubnetId"]
        for cidr in ("10.50.0.0/24", "10.50.1.0/24")
    )
    given_run(store, network={"vpc_id": vpc_id, "public_subnet_id": public, "private_subnet_id": private})
    # When the network is "created"
    progress = network_step(ec2, store)
    # Then it is done at once, recorded as not the run's, with the run's own security group
    assert progress == Progress(done=True, retry_after_seconds=POLL)
    network = network_of(store)
    assert (network.created, network.vpc_id, network.public_subnet_id, network.private_subnet_id) == (
        False,
        vpc_id,
        public,
        private,
    )
    assert network.security_group_id is not None and network.nat_gateway_id is None


# --- Create file system and Link data repository -------------------------------------------------


def test_create_file_system_is_done_once_requested_and_records_what_the_nodes_mount(
    ec2: Any, fsx: Any, store: RunStore
) -> None:
    # Given a run with its network
    given_run(store)
    network_step(ec2, store)
    # When the file system step runs, twice (a retried call)
    first = file_system_step(fsx, store)
    second = file_system_step(fsx, store)
    # Then it is done at once, the file system still CREATING (the next test waits for it): the
    # cluster need not wait for it
    assert first == second == Progress(done=True, retry_after_seconds=POLL)
    (described,) = fsx.describe_file_systems()["FileSystems"]
    # And the record has the one file system, with the names its nodes mount it by
    assert record(store).storage == StorageIds(
        created=True,
        file_system_id=described["FileSystemId"],
        dns_name=described["DNSName"],
        mount_name=described["LustreConfiguration"]["MountName"],
    )


def test_create_file_system_waits_for_the_networks_subnet_and_security_group(fsx: Any, store: RunStore) -> None:
    # Given a run whose network is not recorded yet
    given_run(store)
    # When the file system step runs
    progress = file_system_step(fsx, store)
    # Then it waits for what it needs of the network, and creates nothing
    assert progress == Progress(
        done=False, waiting_on=["the network's private subnet and security group"], retry_after_seconds=POLL
    )
    assert fsx.describe_file_systems()["FileSystems"] == []


def test_the_file_system_needs_only_the_networks_first_call_not_its_nat_gateway(
    ec2: Any, fsx: Any, store: RunStore
) -> None:
    # Given a run whose network's first call is made, its NAT gateway not yet known to be available
    given_run(store)
    network_step(ec2, store)
    assert network_of(store).private_subnet_id and network_of(store).security_group_id
    # When the file system step runs
    file_system_step(fsx, store)
    # Then the file system is created in the private subnet, with the cluster's security group
    (created,) = fsx.describe_file_systems()["FileSystems"]
    assert created["SubnetIds"] == [network_of(store).private_subnet_id]


def requested_file_system(ec2: Any, fsx: Any, store: RunStore) -> str:
    """A run whose network and file system steps ran: its file system requested, still CREATING; its id."""
    given_run(store)
    network_step(ec2, store)
    until_done(lambda: file_system_step(fsx, store))
    return str(storage_of(store).file_system_id)


def test_link_data_repository_waits_for_the_file_system_and_links_nothing_without_a_data_repository(
    ec2: Any, fsx: Any, store: RunStore
) -> None:
    # Given a run with a file system of its own, just requested, and no data repository
    file_system_id = requested_file_system(ec2, fsx, store)
    # When the link step runs until done (the emulator's file system is CREATING once)
    passes = until_done(lambda: link_step(fsx, store))
    # Then it waited on the CREATING file system, then was done, and nothing was linked
    assert passes == [
        Progress(done=False, waiting_on=[f"file system {file_system_id} (CREATING)"], retry_after_seconds=POLL),
        Progress(done=True, retry_after_seconds=POLL),
    ]
    assert fsx.describe_data_repository_associations()["Associations"] == []
    assert storage_of(store).data_repository_association_id is None


def test_a_file_system_that_fsx_fails_to_create_fails_link_data_repository_with_its_reason(
    ec2: Any, fsx: Any, store: RunStore
) -> None:
    # Given a run whose file system was requested (and the cluster's creation started beside it)
    file_system_id = requested_file_system(ec2, fsx, store)
    # When FSx fails to create it
    fsx_emulator.fail(file_system_id, "no free IP addresses in the subnet", region=REGION)
    # Then the step that waits for it fails with FSx's reason (the workflow tears the run down)
    with pytest.raises(StorageFailed, match=f"file system {file_system_id} is FAILED: no free IP addresses"):
        link_step(fsx, store)


def test_link_data_repository_is_skipped_for_a_reused_file_system(fsx: Any, store: RunStore) -> None:
    # Given someone's AVAILABLE file system, named by the run and recorded by Create file system
    file_system_id = ensure_file_system(
        fsx,
        run_id="someone-else",
        stack="another-stack",
        spec=Fsx(),
        subnet_id="subnet-0123456789abcdef0",
        security_group_id="sg-0123456789abcdef0",
    ).file_system_id
    fsx.describe_file_systems(FileSystemIds=[file_system_id])  # CREATING -> AVAILABLE on the 2nd describe
    given_run(store, storage={"fsx": {"file_system_id": file_system_id}})
    until_done(lambda: file_system_step(fsx, store))
    # When the link step runs
    progress = link_step(fsx, store)
    # Then it is done at once, and nothing was linked to their file system
    storage = record(store).storage
    assert storage is not None and (storage.created, storage.file_system_id) == (False, file_system_id)
    assert progress == Progress(done=True, retry_after_seconds=POLL)
    assert fsx.describe_data_repository_associations()["Associations"] == []


def test_link_data_repository_links_the_bucket_and_records_the_association(ec2: Any, fsx: Any, store: RunStore) -> None:
    # Given a run with a file system of its own and a data repository
    given_run(store, storage={"fsx": {"data_repository": BUCKET}})
    network_step(ec2, store)
    until_done(lambda: file_system_step(fsx, store))
    # When the link step runs until done
    until_done(lambda: link_step(fsx, store))
    # Then the one association links the bucket at /data, and is recorded
    (association,) = fsx.describe_data_repository_associations()["Associations"]
    assert (association["DataRepositoryPath"], association["FileSystemPath"]) == (BUCKET, "/data")
    assert storage_of(store).data_repository_association_id == association["AssociationId"]


# --- Create cluster -----------------------------------------------------------------------------


def test_create_cluster_creates_the_cluster_once_over_repeated_calls(api: FakePclusterApi, store: RunStore) -> None:
    # Given a run with its network and file system recorded
    given_run(store)
    cluster_ids(store)
    # When the step runs three times while the cluster is being created
    passes = [cluster_step(api, store) for _ in range(3)]
    # Then one cluster was created, and every pass waits on it
    assert [name for name, _ in api.created] == [CLUSTER]
    assert {(p.done, p.retry_after_seconds) for p in passes} == {(False, POLL)}
    assert passes[-1].waiting_on == [f"cluster {CLUSTER} CREATE_IN_PROGRESS"]


def test_create_cluster_uploads_trainruns_neuron_script_and_points_every_node_at_it(
    api: FakePclusterApi, store: RunStore, s3: Any, config_bucket: str
) -> None:
    # Given a run on ubuntu2404 and a stack with no NeuronInstallScriptUri of its own
    given_run(store, cluster={"os": "ubuntu2404"})
    cluster_ids(store)
    # When the step runs
    cluster_step(api, store, neuron_install_script_uri=None, s3=s3, config_bucket=config_bucket)
    # Then the script for ubuntu2404 is in the config bucket under its content address, and both node kinds run it
    script = render_script("ubuntu2404", config_bucket)
    key = script_key(script)
    assert s3.get_object(Bucket=config_bucket, Key=key)["Body"].read().decode() == script
    [(_, config_yaml)] = api.created
    config = yaml.safe_load(config_yaml)
    script = f"s3://{config_bucket}/{key}"
    assert config["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Script"] == script
    assert config["Scheduling"]["SlurmQueues"][0]["CustomActions"]["OnNodeConfigured"]["Script"] == script


def test_create_cluster_has_the_nodes_mount_a_file_system_the_run_creates_while_fsx_still_creates_it(
    api: FakePclusterApi, store: RunStore, s3: Any, config_bucket: str
) -> None:
    # Given a run whose file system was just requested (its DNS and mount names recorded, not AVAILABLE)
    given_run(store)
    cluster_ids(store)
    dns_name = "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com"
    store.set_storage(RUN, StorageIds(file_system_id="fs-0123456789abcdef0", dns_name=dns_name, mount_name="abcdefgh"))
    # When the step runs
    stacks_own_script = "s3://my-artifacts/install.sh"
    cluster_step(api, store, neuron_install_script_uri=stacks_own_script, s3=s3, config_bucket=config_bucket)
    # Then the mount script is in the config bucket under its content address (the stack's own
    # Neuron script does not mount it), and every node runs it first, then the Neuron script
    key = script_key(mount_script(), MOUNT_SCRIPT_NAME)
    assert s3.get_object(Bucket=config_bucket, Key=key)["Body"].read().decode() == mount_script()
    [(_, config_yaml)] = api.created
    config = yaml.safe_load(config_yaml)
    assert "SharedStorage" not in config
    for node in (config["HeadNode"], config["Scheduling"]["SlurmQueues"][0]):
        mount, install = node["CustomActions"]["OnNodeConfigured"]["Sequence"]
        assert mount["Script"] == f"s3://{config_bucket}/{key}" and mount["Args"][:3] == [dns_name, "abcdefgh", "/fsx"]
        assert install["Script"] == stacks_own_script


def test_create_cluster_without_a_config_bucket_is_configuration_missing(api: FakePclusterApi, store: RunStore) -> None:
    given_run(store)
    cluster_ids(store)
    with pytest.raises(ConfigurationMissing, match="CONFIG_BUCKET"):
        create_cluster(
            api,
            store,
            RunRef(run_id=RUN),
            stack=STACK_NAME,
            region=REGION,
            neuron_install_script_uri=NEURON_SCRIPT,
            poll_seconds=POLL,
            run_events=moto_run_events(),
        )
    assert api.created == []


def test_create_cluster_adopts_a_cluster_that_already_exists(api: FakePclusterApi, store: RunStore) -> None:
    # Given a cluster of the run's name, created by an attempt this one did not see
    given_run(store)
    cluster_ids(store)
    api.clusters[CLUSTER] = ClusterDescription(clusterName=CLUSTER, clusterStatus="CREATE_IN_PROGRESS")
    api.missed_describes = 1
    # When the step runs and its create is refused with ClusterAlreadyExists
    progress = cluster_step(api, store)
    # Then it follows the existing cluster
    assert len(api.created) == 1
    assert progress.waiting_on == [f"cluster {CLUSTER} CREATE_IN_PROGRESS"]
    assert record(store).cluster == ClusterRef(name=CLUSTER, region=REGION, status="CREATE_IN_PROGRESS")


def test_create_cluster_records_the_cluster_and_is_done_once_it_is_complete(
    api: FakePclusterApi, store: RunStore
) -> None:
    # Given a run whose cluster has been created, with its head node up
    given_run(store)
    cluster_ids(store)
    cluster_step(api, store)
    api.set(CLUSTER, "CREATE_COMPLETE", headNode=Ec2Instance(instanceId="i-0123456789abcdef0"))
    # When the step checks again
    progress = cluster_step(api, store)
    # Then it is done, with the cluster and its head node recorded
    assert progress == Progress(done=True, retry_after_seconds=POLL)
    assert record(store).cluster == ClusterRef(
        name=CLUSTER, region=REGION, status="CREATE_COMPLETE", head_node_instance_id="i-0123456789abcdef0"
    )


def test_create_cluster_raises_create_failed_with_the_failure_code_and_reason(
    api: FakePclusterApi, store: RunStore
) -> None:
    # Given a run whose cluster ended CREATE_FAILED
    given_run(store)
    cluster_ids(store)
    cluster_step(api, store)
    failure = Failure(failureCode="HeadNodeBootstrapFailure", failureReason="Cluster creation timed out.")
    api.set(CLUSTER, "CREATE_FAILED", failures=[failure])
    # When the step checks again, then it raises with ParallelCluster's code and reason
    with pytest.raises(ClusterCreateFailed, match=re.escape("HeadNodeBootstrapFailure: Cluster creation timed out.")):
        cluster_step(api, store)
    # And the status is recorded
    assert cluster_of(store).status == "CREATE_FAILED"


GENERIC_FAILURE = Failure(failureCode="ClusterCreationFailure", failureReason="Failed to create the cluster.")
REFUSED = (
    "User: arn:aws:sts::123456789012:assumed-role/ParallelClusterLambdaRole/f is not authorized to perform: "
    "iam:AttachRolePolicy on resource: role x because no identity-based policy allows the iam:AttachRolePolicy action"
)


def failed_role_events(reason: str = REFUSED) -> list[StackEvent]:
    """A stack whose head node role failed, newest first: the stack's cascade, then the role."""
    return [
        StackEvent(
            logicalResourceId=CLUSTER,
            resourceStatus="CREATE_FAILED",
            resourceStatusReason="The following resource(s) failed to create: [RoleHeadNode]. ",
        ),
        StackEvent(logicalResourceId="RoleHeadNode", resourceStatus="CREATE_FAILED", resourceStatusReason=reason),
    ]


def test_create_cluster_names_the_first_failed_resource_of_the_clusters_stack(
    api: FakePclusterApi, store: RunStore
) -> None:
    # Given a run whose cluster ended CREATE_FAILED with ParallelCluster's generic failure, its
    # stack's events naming the resource that failed
    given_run(store)
    cluster_ids(store)
    cluster_step(api, store)
    api.set(CLUSTER, "CREATE_FAILED", failures=[GENERIC_FAILURE])
    api.stack_events = failed_role_events()
    # When the step checks again
    with pytest.raises(ClusterCreateFailed) as raised:
        cluster_step(api, store)
    # Then the error carries ParallelCluster's failure and the resource that failed, with CloudFormation's reason
    assert str(raised.value) == (
        f"cluster {CLUSTER} is CREATE_FAILED: ClusterCreationFailure: Failed to create the cluster. "
        f"First failed resource: RoleHeadNode: {REFUSED}"
    )


def test_create_cluster_fails_with_parallelclusters_failures_when_the_stack_events_cannot_be_read(
    api: FakePclusterApi, store: RunStore, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a CREATE_FAILED cluster whose stack events the API will not give
    given_run(store)
    cluster_ids(store)
    cluster_step(api, store)
    api.set(CLUSTER, "CREATE_FAILED", failures=[GENERIC_FAILURE])
    api.events_error = TransientAwsError("ParallelCluster API (502) may succeed if retried: Bad Gateway")
    # When the step checks again, then it fails with ParallelCluster's failures alone
    with pytest.raises(
        ClusterCreateFailed, match=re.escape("ClusterCreationFailure: Failed to create the cluster.") + "$"
    ):
        cluster_step(api, store)
    # And the log says why the error has no more
    assert f"cannot read the stack events of cluster {CLUSTER}" in caplog.text


def test_the_failed_resources_reason_in_the_error_is_bounded(api: FakePclusterApi, store: RunStore) -> None:
    # Given a CREATE_FAILED cluster whose failed resource has an enormous reason
    given_run(store)
    cluster_ids(store)
    cluster_step(api, store)
    api.set(CLUSTER, "CREATE_FAILED", failures=[GENERIC_FAILURE])
    api.stack_events = failed_role_events(reason="😀" * 100_000)
    # When the step fails
    with pytest.raises(ClusterCreateFailed) as raised:
        cluster_step(api, store)
    # Then the resource's part of the message stays within its budget, and says it was cut
    resource_part = str(raised.value).split("First failed resource: ")[1]
    assert len(resource_part.encode()) <= MAX_FAILED_RESOURCE_BYTES
    assert resource_part.startswith("RoleHeadNode: 😀") and resource_part.endswith("[cut]")


@pytest.mark.parametrize(
    ("finding_code", "capacity_type"),
    [(Code.CAPACITY_BLOCK, "CAPACITY_BLOCK"), (Code.TARGETED_RESERVATION, "ONDEMAND")],
)
def test_create_cluster_targets_a_capacity_block_when_validation_found_one(
    api: FakePclusterApi, store: RunStore, finding_code: Code, capacity_type: str
) -> None:
    # Given a run whose capacity validation found a Capacity Block, or an ordinary reservation
    given_run(store)
    cluster_ids(store)
    store.set_findings(RUN, [Finding(code=finding_code, severity=Severity.INFO, message="found")])
    # When the cluster is created
    cluster_step(api, store)
    # Then the queue's capacity type says so
    ((_, config_yaml),) = api.created
    (queue,) = yaml.safe_load(config_yaml)["Scheduling"]["SlurmQueues"]
    assert queue["CapacityType"] == capacity_type


# --- Tear down ----------------------------------------------------------------------------------


def test_tear_down_with_keep_on_success_keeps_everything_and_records_it(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given a provisioned run that asks to keep its cluster when it succeeds
    before = provisioned(ec2, fsx, api, store, teardown={"on_success": "keep"})
    # When a succeeded run is torn down
    progress = teardown_step(ec2, fsx, api, store, SUCCEEDED)
    # Then it is done at once, kept, and nothing was deleted
    assert progress == Progress(done=True, retry_after_seconds=POLL)
    after = record(store)
    assert after.kept_at is not None and after.torn_down_at is None
    assert api.deleted == []
    assert vpc_exists(ec2, before.vpc_id)
    assert file_system_lifecycle(fsx, before.file_system_id) == "AVAILABLE"


@pytest.mark.parametrize(
    ("teardown", "kept"),
    [({"on_failure": "keep"}, True), ({"on_success": "keep"}, False)],
    ids=["on_failure-keep", "on_success-keep"],
)
def test_tear_down_of_a_failed_run_follows_the_on_failure_policy(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore, teardown: dict[str, Any], kept: bool
) -> None:
    # Given a provisioned run with a keep policy for one outcome
    provisioned(ec2, fsx, api, store, teardown=teardown)
    # When a failed run is torn down
    progress = teardown_step(ec2, fsx, api, store, FAILED)
    # Then it is kept only when on_failure says keep; otherwise the cluster's deletion starts
    assert (record(store).kept_at is not None) is kept
    assert progress.done is kept
    assert api.deleted == ([] if kept else [CLUSTER])


def test_tear_down_deletes_the_cluster_first_and_waits_for_it(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given a provisioned run
    before = provisioned(ec2, fsx, api, store)
    # When teardown makes two passes while the cluster is DELETE_IN_PROGRESS
    passes = [teardown_step(ec2, fsx, api, store) for _ in range(2)]
    # Then the cluster's deletion was asked for once, and both passes wait on it alone
    assert api.deleted == [CLUSTER]
    waiting = Progress(done=False, waiting_on=[f"cluster {CLUSTER} DELETE_IN_PROGRESS"], retry_after_seconds=POLL)
    assert passes == [waiting, waiting]
    # And the file system and the network are untouched
    assert file_system_lifecycle(fsx, before.file_system_id) == "AVAILABLE"
    assert vpc_exists(ec2, before.vpc_id)


def test_tear_down_terminates_the_compute_nodes_before_it_asks_for_the_cluster_s_deletion(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given a provisioned run whose cluster is CREATE_COMPLETE (no checkpoints to export: no job ran)
    provisioned(ec2, fsx, api, store)
    calls: list[str] = []
    for name in ("stop_compute_fleet", "delete_cluster_instances", "delete_cluster"):
        method = getattr(api, name)
        setattr(api, name, lambda *a, _m=method, _n=name, **k: (calls.append(_n), _m(*a, **k))[1])
    # When teardown makes two passes
    for _ in range(2):
        teardown_step(ec2, fsx, api, store)
    # Then the fleet was stopped (no replacement launched), its nodes terminated while it was
    # stopping, and only then the cluster's deletion asked for; once
    assert calls == ["stop_compute_fleet", "delete_cluster_instances", "delete_cluster"]
    assert api.instances_deleted == [(CLUSTER, "STOP_REQUESTED")]


@pytest.mark.parametrize(
    ("stack_status", "fleet_status"),
    [("CREATE_IN_PROGRESS", None), ("CREATE_FAILED", None), ("CREATE_COMPLETE", "STOPPED")],
)
def test_tear_down_leaves_the_compute_nodes_to_the_deletion_when_the_fleet_cannot_or_need_not_stop(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore, stack_status: str, fleet_status: str | None
) -> None:
    # Given a cluster whose stack takes no fleet stop (ParallelCluster refuses it while IN_PROGRESS),
    # or whose fleet is already stopped
    provisioned(ec2, fsx, api, store)
    api.set(CLUSTER, stack_status, cloudformationStackStatus=stack_status, computeFleetStatus=fleet_status)
    # When teardown makes its first pass
    teardown_step(ec2, fsx, api, store)
    # Then the cluster's deletion was asked for without a stop or a termination first
    assert (api.fleet_stopped, api.instances_deleted, api.deleted) == ([], [], [CLUSTER])


def test_a_failed_termination_of_the_compute_nodes_does_not_keep_the_cluster_from_being_deleted(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given a ParallelCluster API that fails deleteClusterInstances
    provisioned(ec2, fsx, api, store)

    def refuse(name: str, *, region: str) -> bool:
        raise PclusterApiError("Failed when calling AWS service: throttled", status=500)

    api.delete_cluster_instances = refuse  # type: ignore[method-assign]
    # When teardown makes its first pass
    progress = teardown_step(ec2, fsx, api, store)
    # Then the cluster's deletion was asked for all the same (it terminates the nodes itself)
    assert api.deleted == [CLUSTER]
    assert progress.waiting_on == [f"cluster {CLUSTER} DELETE_IN_PROGRESS"]


def test_tear_down_deletes_the_file_system_before_the_network(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given a provisioned run whose cluster is gone
    before = provisioned(ec2, fsx, api, store)
    api.describes_while_deleting = 0
    file_system_id = before.file_system_id
    vpc_id = before.vpc_id
    # When teardown makes its next pass after the cluster's
    teardown_step(ec2, fsx, api, store)
    progress = teardown_step(ec2, fsx, api, store)
    # Then it waits on the file system's deletion, with the network still there
    assert progress.waiting_on == [f"file system {file_system_id} (DELETING)"]
    assert vpc_exists(ec2, vpc_id)
    # And once the file system is gone, the network goes too
    until_done(lambda: teardown_step(ec2, fsx, api, store))
    assert file_system_lifecycle(fsx, file_system_id) is None
    assert not vpc_exists(ec2, vpc_id)


def test_tear_down_with_keep_file_system_keeps_it_and_its_network_but_deletes_the_cluster(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given a provisioned run that asks to keep its file system
    before = provisioned(ec2, fsx, api, store, teardown={"keep_file_system": True})
    # When it is torn down until done
    until_done(lambda: teardown_step(ec2, fsx, api, store))
    # Then the cluster is gone, and the file system and the network it lives in are not
    assert api.deleted == [CLUSTER] and CLUSTER not in api.clusters
    assert file_system_lifecycle(fsx, before.file_system_id) == "AVAILABLE"
    assert vpc_exists(ec2, before.vpc_id)


@pytest.mark.parametrize(
    "teardown", [{"on_success": "keep"}, {"keep_file_system": True}], ids=["on_success-keep", "keep_file_system"]
)
def test_tear_down_asked_to_delete_what_was_kept_deletes_everything_and_records_it(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore, teardown: dict[str, Any]
) -> None:
    # Given a provisioned run whose teardown kept what its policy keeps
    before = provisioned(ec2, fsx, api, store, teardown=teardown)
    until_done(lambda: teardown_step(ec2, fsx, api, store))
    assert record(store).kept_at is not None
    # When it is torn down again with delete_kept (`trainrun down`)
    down = TeardownInput(run_id=RUN, delete_kept=True)
    until_done(lambda: teardown_step(ec2, fsx, api, store, down))
    # Then the cluster, the file system and the network are gone, and the run is recorded torn down
    assert CLUSTER not in api.clusters
    assert file_system_lifecycle(fsx, before.file_system_id) is None
    assert not vpc_exists(ec2, before.vpc_id)
    assert record(store).torn_down_at is not None


def test_a_delete_failed_cluster_leaves_only_what_its_nodes_hold_and_the_teardown_error_is_recorded(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore, strict_ec2: None
) -> None:
    # Given a provisioned run whose cluster ended DELETE_FAILED with its head node still running
    before = provisioned(ec2, fsx, api, store)
    cluster_node_in(ec2, store)
    failure = Failure(failureCode="ClusterDeletionFailure", failureReason="Failed to delete resources.")
    api.set(CLUSTER, "DELETE_FAILED", failures=[failure])
    metrics = RecordedMetrics()
    # When teardown passes run until it gives up
    _, raised = until_it_gives_up(lambda: teardown_step(ec2, fsx, api, store, metrics=metrics))
    # Then the file system, the NAT gateway and its address are gone; the subnet under the node is not
    network = network_of(store)
    assert file_system_lifecycle(fsx, before.file_system_id) is None
    (nat,) = ec2.describe_nat_gateways(NatGatewayIds=[str(network.nat_gateway_id)])["NatGateways"]
    assert nat["State"] == "deleted"
    assert ec2.describe_addresses(Filters=[{"Name": "tag:trainrun:run-id", "Values": [RUN]}])["Addresses"] == []
    assert vpc_exists(ec2, before.vpc_id)
    assert ec2.describe_subnets(SubnetIds=[str(network.private_subnet_id)])["Subnets"]
    # And the error names the cluster's failure and what is left; it is recorded, and counted for the alarm
    assert f"cluster {CLUSTER} is DELETE_FAILED: ClusterDeletionFailure" in str(raised)
    assert f"subnet {network.private_subnet_id} (DependencyViolation" in str(raised)
    teardown_error = record(store).teardown_error
    assert teardown_error is not None and teardown_error.error == "TeardownFailed"
    assert teardown_error.cause == str(raised)
    assert metrics.emitted == [(Metric.LEFTOVER_RUNS, 1)]
    assert record(store).torn_down_at is None


def test_the_next_teardown_asks_parallelcluster_to_delete_a_delete_failed_cluster_again(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given a run whose teardown gave up on its DELETE_FAILED cluster
    provisioned(ec2, fsx, api, store)
    api.set(CLUSTER, "DELETE_FAILED")
    until_it_gives_up(lambda: teardown_step(ec2, fsx, api, store))
    assert api.deleted == []
    # When a later teardown (the janitor's) runs
    progress = teardown_step(ec2, fsx, api, store)
    # Then it deletes the cluster again and waits for it
    assert api.deleted == [CLUSTER]
    assert progress.waiting_on == [f"cluster {CLUSTER} DELETE_IN_PROGRESS (again, after DELETE_FAILED)"]
    until_done(lambda: teardown_step(ec2, fsx, api, store))
    assert CLUSTER not in api.clusters


def test_an_api_that_refuses_the_teardown_still_lets_it_delete_the_file_system_and_the_network(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore, strict_ec2: None
) -> None:
    # Given a provisioned run, and a ParallelCluster API that answers 403 (the role may not invoke it)
    before = provisioned(ec2, fsx, api, store)

    def refuse(name: str, *, region: str) -> None:
        raise PclusterAccessDenied("User: ... is not authorized to perform: execute-api:Invoke", status=403)

    api.describe_cluster = refuse  # type: ignore[method-assign]
    # When teardown passes run until it gives up
    _, raised = until_it_gives_up(lambda: teardown_step(ec2, fsx, api, store))
    # Then the file system and the whole network are gone (no node holds them), and the 403 is recorded
    assert file_system_lifecycle(fsx, before.file_system_id) is None
    assert not vpc_exists(ec2, before.vpc_id)
    assert "execute-api:Invoke" in str(raised)
    assert record(store).teardown_error is not None


def test_a_transient_api_error_is_raised_for_the_workflow_to_retry_after_the_rest_is_deleted(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given a provisioned run, and a ParallelCluster API answering 502
    before = provisioned(ec2, fsx, api, store)

    def unavailable(name: str, *, region: str) -> None:
        raise TransientAwsError("ParallelCluster API (502) may succeed if retried: Bad Gateway")

    api.describe_cluster = unavailable  # type: ignore[method-assign]
    metrics = RecordedMetrics()
    # When teardown passes run until the only thing left is the cluster
    with pytest.raises(TransientAwsError):
        for _ in range(10):
            teardown_step(ec2, fsx, api, store, metrics=metrics)
    # Then the rest went, and nothing was recorded or counted yet: the retry may still delete the cluster
    assert file_system_lifecycle(fsx, before.file_system_id) is None
    assert not vpc_exists(ec2, before.vpc_id)
    assert record(store).teardown_error is None
    assert metrics.emitted == []


def test_tear_down_without_an_api_deletes_the_rest_and_says_what_is_missing_when_a_cluster_is_recorded(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given a provisioned run with its cluster recorded
    before = provisioned(ec2, fsx, api, store)
    # When teardown runs in a stack without a ParallelCluster API, then it says what is missing
    _, raised = until_it_gives_up(lambda: teardown_step(ec2, fsx, None, store))
    assert "PclusterApiUrl" in str(raised)
    assert file_system_lifecycle(fsx, before.file_system_id) is None


def test_tear_down_without_an_api_deletes_the_rest_when_no_cluster_is_recorded(
    ec2: Any, fsx: Any, store: RunStore
) -> None:
    # Given a run that failed before Create cluster: a network and a file system, no cluster
    given_run(store)
    network_step(ec2, store)
    until_done(lambda: file_system_step(fsx, store))
    vpc_id, file_system_id = str(network_of(store).vpc_id), str(storage_of(store).file_system_id)
    # When it is torn down in a stack without a ParallelCluster API
    until_done(lambda: teardown_step(ec2, fsx, None, store, FAILED))
    # Then the file system and the network are gone
    assert file_system_lifecycle(fsx, file_system_id) is None
    assert not vpc_exists(ec2, vpc_id)


def test_tear_down_of_a_run_without_a_record_deletes_what_carries_its_tag(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given a network and a file system tagged with a run that has no record (Load run spec never wrote it)
    network = ensure_network(ec2, run_id=RUN, stack=STACK_NAME, cidr="10.0.0.0/16", availability_zone=ZONE)
    file_system_id = ensure_file_system(
        fsx,
        run_id=RUN,
        stack=STACK_NAME,
        spec=Fsx(),
        subnet_id=str(network.private_subnet_id),
        security_group_id=str(network.security_group_id),
    ).file_system_id
    # When the run is torn down (as the janitor asks for an orphan)
    passes = until_done(lambda: teardown_step(ec2, fsx, api, store))
    # Then both are gone, found by their tags, and no record was made up
    deleted = [item for p in passes for item in p.deleted]
    assert f"vpc {network.vpc_id}" in deleted
    assert file_system_lifecycle(fsx, file_system_id) is None
    assert not vpc_exists(ec2, str(network.vpc_id))
    assert store.get(RUN) is None


def test_tear_down_records_torn_down_at_once_done(ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore) -> None:
    # Given a provisioned run
    provisioned(ec2, fsx, api, store)
    # When teardown makes its first pass, then nothing is recorded yet
    teardown_step(ec2, fsx, api, store)
    assert record(store).torn_down_at is None
    # When it is torn down until done, then when is recorded
    until_done(lambda: teardown_step(ec2, fsx, api, store))
    assert record(store).torn_down_at is not None


def test_every_teardown_pass_asks_to_be_called_again_after_the_poll_interval(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given a provisioned run
    provisioned(ec2, fsx, api, store)
    # When it is torn down until done
    passes = until_done(lambda: teardown_step(ec2, fsx, api, store))
    # Then it took several passes, and every one carries the poll interval
    assert len(passes) > 3
    assert {p.retry_after_seconds for p in passes} == {POLL}
