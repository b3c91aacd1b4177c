"""The ParallelCluster API client against the local ParallelCluster API, launching nodes in moto.

Everything goes over loopback HTTP: the client signs with SigV4 and sends through botocore's
urllib3 session; the local API launches the head and compute nodes as EC2 instances in a
moto server, where these tests look at them.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import boto3
import pytest
import yaml
from botocore.awsrequest import AWSRequest
from moto.moto_server.threaded_moto_server import ThreadedMotoServer

from trainrun.adapters.pcluster import (
    AssumedRoleCredentials,
    ClusterAlreadyExists,
    ClusterDescription,
    ClusterStatus,
    CredentialSource,
    PclusterAccessDenied,
    PclusterApi,
    PclusterBadRequest,
    build_request,
    sign,
)
from trainrun.local import clock
from trainrun.local.iam.access import PCLUSTER_API, pcluster_api_policies
from trainrun.local.iam.cluster_stack import CREATION_FAILURE, ClusterStackIam
from trainrun.local.iam.enforcement import Enforcer
from trainrun.local.iam.principals import Principal, Principals
from trainrun.local.pcluster_api import BootedCluster, ClusterTiming, HeadNodeBootFailed, LocalPclusterApi
from trainrun.logic.cluster_config import ClusterIds, cluster_name, render_cluster_config, to_yaml
from trainrun.model.run_file import parse_run_file
from trainrun.model.tags import run_tags

REGION = "us-west-2"
ACCOUNT = "123456789012"  # moto's default account
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "single-node.yaml"
FILE_SYSTEM_ID = "fs-0123456789abcdef0"  # never looked up: the local API does not mount storage
RUN_ID = "single-node-20250101t000000z"
COMPUTE_NODES = 2


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def aws_session() -> boto3.Session:
    return boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION)


def create_role(iam: Any, name: str) -> str:
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}, "Action": "sts:AssumeRole"}
        ],
    }
    return str(iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"])


@pytest.fixture(scope="module")
def api_user_role(aws_session: boto3.Session, moto_endpoint: str) -> str:
    """The role the official API stack creates: the only principal its resource policy lets invoke it."""
    return create_role(aws_session.client("iam", endpoint_url=moto_endpoint), "ParallelClusterApiUserRole-test")


@pytest.fixture(scope="module")
def as_api_user(aws_session: boto3.Session, moto_endpoint: str, api_user_role: str) -> AssumedRoleCredentials:
    sts = aws_session.client("sts", endpoint_url=moto_endpoint)
    return AssumedRoleCredentials(sts, api_user_role, session_name="test")


@pytest.fixture(scope="module")
def ec2(aws_session: boto3.Session, moto_endpoint: str) -> Any:
    return aws_session.client("ec2", endpoint_url=moto_endpoint)


@pytest.fixture(scope="module")
def ids(ec2: Any) -> ClusterIds:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    public = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24", AvailabilityZone="us-west-2d")
    private = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone="us-west-2d")
    group = ec2.create_security_group(GroupName="efa", Description="all traffic to itself", VpcId=vpc)
    return ClusterIds(
        public_subnet_id=public["Subnet"]["SubnetId"],
        private_subnet_id=private["Subnet"]["SubnetId"],
        security_group_id=group["GroupId"],
        file_system_id=FILE_SYSTEM_ID,
    )


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A cluster name of this test's own: the moto server, and its instances, serve the whole module."""
    return cluster_name(f"{RUN_ID}-{request.node.name[5:]}")[:50].rstrip("-")


@pytest.fixture
def service(moto_endpoint: str, api_user_role: str) -> Iterator[LocalPclusterApi]:
    with LocalPclusterApi(
        moto_endpoint, REGION, api_user_role_arn=api_user_role, seconds_to_complete=60, seconds_to_delete=60
    ) as local:
        yield local


@pytest.fixture
def api(service: LocalPclusterApi, as_api_user: AssumedRoleCredentials) -> PclusterApi:
    return PclusterApi(service.url, session=as_api_user, region=REGION, timeout=5)


def config_yaml(ids: ClusterIds, *, nodes: int = COMPUTE_NODES, **changes: Any) -> str:
    document = yaml.safe_load(EXAMPLE.read_text())
    document["capacity"]["nodes"] = nodes
    spec = parse_run_file(yaml.safe_dump(document))
    config = render_cluster_config(spec, ids, tags=run_tags(RUN_ID, "trainrun-test"))
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = config
        for parent in parents:
            node = node[parent]
        if value is None:
            del node[leaf]
        else:
            node[leaf] = value
    return to_yaml(config)


def wait_for(api: PclusterApi, name: str, *statuses: str, polls: int = 10) -> ClusterDescription | None:
    description = None
    for _ in range(polls):
        description = api.describe_cluster(name, region=REGION)
        if description is None or description.clusterStatus in statuses:
            return description
    raise AssertionError(f"{name} never reached {statuses}: {description}")


def instances_of(ec2: Any, name: str) -> list[dict[str, Any]]:
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "tag:parallelcluster:cluster-name", "Values": [name]}]
    )
    return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]


def tags_of(instance: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


def signed_call(
    service: LocalPclusterApi, session: CredentialSource, method: str, path: str, **query: str
) -> tuple[int, Any]:
    request = AWSRequest(method=method, url=f"{service.url}{path}?{urlencode({'region': REGION, **query})}")
    sign(request, session, REGION)
    return raw_call(request.url, method, dict(request.headers.items()))


def raw_call(url: str, method: str, headers: dict[str, str], body: bytes | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


# --- create --------------------------------------------------------------------------------------
def test_a_created_cluster_completes_with_its_head_node_described(
    name: str, api: PclusterApi, ec2: Any, ids: ClusterIds
) -> None:
    created = api.create_cluster(name, config_yaml(ids), region=REGION)

    assert created.clusterStatus == ClusterStatus.CREATE_IN_PROGRESS
    described = wait_for(api, name, ClusterStatus.CREATE_COMPLETE)
    assert described is not None
    assert described.cloudformationStackStatus == "CREATE_COMPLETE"
    (head,) = [i for i in instances_of(ec2, name) if tags_of(i)["parallelcluster:node-type"] == "HeadNode"]
    assert described.headNode is not None
    assert described.headNode.instanceId == head["InstanceId"]
    assert described.headNode.privateIpAddress == head["PrivateIpAddress"]
    assert described.headNode.state == "running"
    assert {"key": "trainrun:run-id", "value": RUN_ID} in [t.model_dump() for t in described.tags]


def test_the_nodes_are_instances_tagged_as_parallelcluster_tags_them(
    name: str, api: PclusterApi, ec2: Any, ids: ClusterIds
) -> None:
    api.create_cluster(name, config_yaml(ids), region=REGION)

    instances = instances_of(ec2, name)
    heads = [i for i in instances if tags_of(i)["parallelcluster:node-type"] == "HeadNode"]
    computes = [i for i in instances if tags_of(i)["parallelcluster:node-type"] == "Compute"]
    assert len(heads) == 1 and len(computes) == COMPUTE_NODES
    assert heads[0]["SubnetId"] == ids.public_subnet_id
    assert {i["SubnetId"] for i in computes} == {ids.private_subnet_id}
    assert {i["InstanceType"] for i in computes} == {"trn1.32xlarge"}
    for instance in computes:
        tags = tags_of(instance)
        assert tags["parallelcluster:queue-name"] == "compute"
        assert tags["parallelcluster:compute-resource-name"] == "trn1-32xlarge"
        assert tags["Name"] == "Compute"
    for instance in instances:
        tags = tags_of(instance)
        assert tags["parallelcluster:cluster-name"] == name
        # The config's Tags (trainrun's own, which teardown and the janitor look for).
        assert tags["trainrun:run-id"] == RUN_ID
        assert tags["trainrun:stack"] == "trainrun-test"


def test_creating_the_same_cluster_twice_is_cluster_already_exists(
    name: str, api: PclusterApi, ids: ClusterIds
) -> None:
    api.create_cluster(name, config_yaml(ids), region=REGION)

    with pytest.raises(ClusterAlreadyExists):
        api.create_cluster(name, config_yaml(ids), region=REGION)


def test_the_specs_409_for_an_existing_name_is_cluster_already_exists_too(
    name: str, moto_endpoint: str, api_user_role: str, as_api_user: AssumedRoleCredentials, ids: ClusterIds
) -> None:
    with LocalPclusterApi(
        moto_endpoint, REGION, api_user_role_arn=api_user_role, existing_cluster_status=409
    ) as service:
        api = PclusterApi(service.url, session=as_api_user, region=REGION)
        api.create_cluster(name, config_yaml(ids), region=REGION)

        with pytest.raises(ClusterAlreadyExists) as raised:
            api.create_cluster(name, config_yaml(ids), region=REGION)
    assert raised.value.status == 409


def test_an_injected_failure_ends_the_create_failed_with_its_failures_and_rolls_back(
    name: str, service: LocalPclusterApi, api: PclusterApi, ec2: Any, ids: ClusterIds
) -> None:
    failures = [{"failureCode": "OnNodeConfiguredExecutionFailure", "failureReason": "Failed to execute script."}]
    service.fail_next_create(failures=failures)

    api.create_cluster(name, config_yaml(ids), region=REGION)
    described = wait_for(api, name, ClusterStatus.CREATE_FAILED, ClusterStatus.CREATE_COMPLETE)

    assert described is not None and described.clusterStatus == ClusterStatus.CREATE_FAILED
    assert [f.model_dump() for f in described.failures] == failures
    assert described.headNode is None
    assert {i["State"]["Name"] for i in instances_of(ec2, name)} == {"terminated"}
    # Only the next create fails.
    api.create_cluster(f"{name}-2", config_yaml(ids), region=REGION)
    assert wait_for(api, f"{name}-2", ClusterStatus.CREATE_COMPLETE, ClusterStatus.CREATE_FAILED) is not None
    assert api.describe_cluster(f"{name}-2", region=REGION).clusterStatus == ClusterStatus.CREATE_COMPLETE  # type: ignore[union-attr]


class RefusingHeadNode:
    """A ClusterLifecycle whose head node's OnNodeConfigured script fails, as a broken install script would."""

    def __init__(self) -> None:
        self.booted: list[BootedCluster] = []

    def cluster_booted(self, cluster: BootedCluster) -> None:
        self.booted.append(cluster)
        raise HeadNodeBootFailed("Failed to execute OnNodeConfigured script.", "OnNodeConfiguredExecutionFailure")

    def cluster_gone(self, name: str, region: str) -> None:
        pass


def test_a_failing_on_node_configured_script_ends_the_create_failed_with_its_failure_code(
    name: str, service: LocalPclusterApi, api: PclusterApi, ids: ClusterIds
) -> None:
    service.lifecycle = lifecycle = RefusingHeadNode()

    api.create_cluster(name, config_yaml(ids), region=REGION)
    described = wait_for(api, name, ClusterStatus.CREATE_FAILED, ClusterStatus.CREATE_COMPLETE)

    assert described is not None and described.clusterStatus == ClusterStatus.CREATE_FAILED
    assert [(f.failureCode, f.failureReason) for f in described.failures] == [
        ("OnNodeConfiguredExecutionFailure", "Failed to execute OnNodeConfigured script.")
    ]
    [booted] = lifecycle.booted
    script = yaml.safe_load(config_yaml(ids))["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Script"]
    assert booted.on_node_configured == [(script, ["HeadNode"])]


def test_a_stack_the_apis_role_may_not_create_ends_create_failed_and_launches_nothing(
    name: str, service: LocalPclusterApi, api: PclusterApi, ec2: Any, ids: ClusterIds, tmp_path: Path
) -> None:
    # Given the API's role as ParallelCluster's template gives it without EnableIamAdminAccess
    principals = Principals(ACCOUNT)
    role = pcluster_api_policies({"EnableIamAdminAccess": "false"}, account=ACCOUNT)
    principals.issue(Principal(PCLUSTER_API, f"arn:aws:sts::{ACCOUNT}:assumed-role/ParallelClusterLambdaRole/f", role))
    enforcer = Enforcer(principals, tmp_path / "iam-calls.jsonl")
    service.cluster_stack = ClusterStackIam(enforcer, PCLUSTER_API, ACCOUNT)
    # When a cluster whose nodes need roles of their own is created
    api.create_cluster(name, config_yaml(ids), region=REGION)
    described = wait_for(api, name, ClusterStatus.CREATE_FAILED, ClusterStatus.CREATE_COMPLETE)
    # Then it ends CREATE_FAILED as ParallelCluster reports a failed resource, with no node launched
    assert described is not None and described.clusterStatus == ClusterStatus.CREATE_FAILED
    assert [f.model_dump() for f in described.failures] == [CREATION_FAILURE]
    assert described.headNode is None
    assert instances_of(ec2, name) == []
    assert next(r.action for r in enforcer.calls if not r.allowed) == "iam:CreateRole"
    # And its stack's events, which the API's user role may read, name the role and the refusal
    cause = api.first_failed_resource(name, region=REGION)
    assert cause is not None and cause.logicalResourceId == "RoleHeadNode"
    assert "is not authorized to perform: iam:CreateRole" in (cause.resourceStatusReason or "")


class ProtectingHeadNode:
    """A ClusterLifecycle whose compute nodes never bootstrap: its clustermgtd enters protected mode."""

    def __init__(self) -> None:
        self.booted: list[BootedCluster] = []

    def cluster_booted(self, cluster: BootedCluster) -> None:
        self.booted.append(cluster)
        cluster.set_compute_fleet_status("PROTECTED")

    def cluster_gone(self, name: str, region: str) -> None:
        pass


def test_a_queue_in_protected_mode_is_a_created_cluster_whose_compute_fleet_is_protected(
    name: str, service: LocalPclusterApi, api: PclusterApi, ids: ClusterIds
) -> None:
    # Given a head node whose clustermgtd puts the queue in protected mode (its compute nodes' bootstrap fails)
    service.lifecycle = lifecycle = ProtectingHeadNode()
    # When the cluster is created
    api.create_cluster(name, config_yaml(ids), region=REGION)
    described = wait_for(api, name, ClusterStatus.CREATE_COMPLETE, ClusterStatus.CREATE_FAILED)
    # Then its creation completes (a compute node's bootstrap does not fail it), its fleet PROTECTED
    assert described is not None and described.clusterStatus == ClusterStatus.CREATE_COMPLETE
    assert described.computeFleetStatus == "PROTECTED"
    [booted] = lifecycle.booted
    queue = yaml.safe_load(config_yaml(ids))["Scheduling"]["SlurmQueues"][0]
    script = queue["CustomActions"]["OnNodeConfigured"]["Script"]
    assert booted.compute_on_node_configured == [(script, ["ComputeFleet"])]


def test_a_create_completes_after_its_time_even_without_describes(
    name: str, moto_endpoint: str, api_user_role: str, as_api_user: AssumedRoleCredentials, ids: ClusterIds
) -> None:
    now = [0.0]
    with LocalPclusterApi(
        moto_endpoint,
        REGION,
        api_user_role_arn=api_user_role,
        describes_to_complete=100,
        seconds_to_complete=3,
        clock=lambda: now[0],
    ) as service:
        api = PclusterApi(service.url, session=as_api_user, region=REGION)
        api.create_cluster(name, config_yaml(ids), region=REGION)
        first = api.describe_cluster(name, region=REGION)
        now[0] = 3.0
        later = api.describe_cluster(name, region=REGION)

    assert first is not None and first.clusterStatus == ClusterStatus.CREATE_IN_PROGRESS
    assert later is not None and later.clusterStatus == ClusterStatus.CREATE_COMPLETE


@dataclass
class OnTheAwsClock:
    """The API on the AWS clock: 10 s head node boot, 5 s custom action, a 1 s clustermgtd loop,
    4 s compute node boot, on a clock the test moves (`now`); a cluster of two compute nodes
    being created."""

    api: PclusterApi
    name: str
    now: list[float]

    def look_at(self, *moments: float) -> dict[float, str]:
        """The cluster's status at each moment (the API's clock moves as it is looked at)."""
        statuses = {}
        for at in moments:
            self.now[0] = at
            described = self.api.describe_cluster(self.name, region=REGION)
            assert described is not None
            statuses[at] = described.clusterStatus
        return statuses


@pytest.fixture
def on_the_aws_clock(
    name: str, moto_endpoint: str, api_user_role: str, as_api_user: AssumedRoleCredentials, ids: ClusterIds
) -> Iterator[OnTheAwsClock]:
    now = [0.0]
    timing = ClusterTiming(
        head_node_boot=10,
        custom_action=5,
        clustermgtd_loop=1,
        fleet_boot=4,
        deletion=7,
        compute_terminated_in_deletion=2,
    )
    clock.enable(30)
    try:
        with LocalPclusterApi(
            moto_endpoint, REGION, api_user_role_arn=api_user_role, clock=lambda: now[0], timing=timing
        ) as service:
            api = PclusterApi(service.url, session=as_api_user, region=REGION)
            api.create_cluster(name, config_yaml(ids, nodes=2), region=REGION)
            yield OnTheAwsClock(api, name, now)
    finally:
        clock.disable()


def test_on_the_aws_clock_a_create_waits_for_the_custom_action_and_the_compute_nodes_boot(
    on_the_aws_clock: OnTheAwsClock, name: str
) -> None:
    # Given the API on the AWS clock, a cluster being created
    # When it is looked at as time passes
    statuses = on_the_aws_clock.look_at(0.0, 15.0, 19.9, 20.0)
    nodes, _ = clock.ledger().of_cluster(name)
    completed_at = time.time()

    # Then it is in progress until the compute nodes launched after the custom action have booted
    assert statuses == {
        0.0: ClusterStatus.CREATE_IN_PROGRESS,
        15.0: ClusterStatus.CREATE_IN_PROGRESS,
        19.9: ClusterStatus.CREATE_IN_PROGRESS,
        20.0: ClusterStatus.CREATE_COMPLETE,
    }
    # And its two compute nodes bill from clustermgtd's launch (4 s before completion), not from the create
    assert len(nodes) == 2
    assert all(node.ended is None for node in nodes)
    assert nodes[0].node.endswith("-1") and nodes[1].node.endswith("-2")
    assert all(3 <= completed_at - node.started <= 6 for node in nodes)


def test_on_the_aws_clock_a_fleet_stop_ends_the_compute_nodes_billing_on_clustermgtds_next_loop(
    on_the_aws_clock: OnTheAwsClock, name: str
) -> None:
    # Given a created cluster on the AWS clock, whose clustermgtd loops every real second
    api = on_the_aws_clock.api
    assert on_the_aws_clock.look_at(0.0, 15.0, 20.0)[20.0] == ClusterStatus.CREATE_COMPLETE
    # When its compute fleet is asked to stop
    api.stop_compute_fleet(name, region=REGION)
    stopping = api.describe_cluster(name, region=REGION)
    billing_at_once = [node.ended for node in clock.ledger().of_cluster(name)[0]]
    # Then the nodes bill until clustermgtd's next loop has terminated them, and the fleet is STOPPED
    deadline = time.monotonic() + 10
    while (
        stopped := api.describe_cluster(name, region=REGION)
    ) is not None and stopped.computeFleetStatus != "STOPPED":
        assert time.monotonic() < deadline, "the fleet never stopped"
        time.sleep(0.05)
    nodes, _ = clock.ledger().of_cluster(name)
    assert stopping is not None and stopping.computeFleetStatus == "STOP_REQUESTED"
    assert billing_at_once == [None, None]
    assert len(nodes) == 2 and all(node.ended is not None for node in nodes)


def test_on_the_aws_clock_delete_cluster_instances_ends_the_compute_nodes_billing_before_it_answers(
    on_the_aws_clock: OnTheAwsClock, name: str, ec2: Any
) -> None:
    # Given a created cluster on the AWS clock whose fleet is stopping (clustermgtd's loop not come yet)
    api = on_the_aws_clock.api
    assert on_the_aws_clock.look_at(0.0, 15.0, 20.0)[20.0] == ClusterStatus.CREATE_COMPLETE
    api.stop_compute_fleet(name, region=REGION)
    # When its instances are deleted
    deleted = api.delete_cluster_instances(name, region=REGION)
    # Then the compute nodes are terminated in EC2 and end billing before the answer; the head node runs on
    nodes, _ = clock.ledger().of_cluster(name)
    assert deleted is True
    assert len(nodes) == 2 and all(node.ended is not None for node in nodes)
    states: dict[str, set[str]] = {}
    for instance in instances_of(ec2, name):
        states.setdefault(tags_of(instance)["parallelcluster:node-type"], set()).add(instance["State"]["Name"])
    assert states == {"Compute": {"terminated"}, "HeadNode": {"running"}}
    # And a cluster that does not exist is ParallelCluster's 404, which the client answers False
    assert api.delete_cluster_instances(f"{name}-missing", region=REGION) is False


def test_on_the_aws_clock_a_deleted_cluster_s_compute_nodes_bill_until_its_stack_s_cleanup(
    on_the_aws_clock: OnTheAwsClock, name: str
) -> None:
    # Given a created cluster on the AWS clock, its stack's cleanup 2 real seconds into a deletion
    api = on_the_aws_clock.api
    assert on_the_aws_clock.look_at(0.0, 15.0, 20.0)[20.0] == ClusterStatus.CREATE_COMPLETE
    # When it is deleted without its instances deleted first
    api.delete_cluster(name, region=REGION)
    billing_at_once = [node.ended for node in clock.ledger().of_cluster(name)[0]]
    # Then its compute nodes bill on until the cleanup terminates them
    deadline = time.monotonic() + 10
    while any(node.ended is None for node in clock.ledger().of_cluster(name)[0]):
        assert time.monotonic() < deadline, "the compute nodes were never terminated"
        time.sleep(0.05)
    assert billing_at_once == [None, None]


# --- the API stack's resource policy -------------------------------------------------------------------
def test_a_request_signed_with_a_function_roles_own_credentials_is_refused_as_api_gateway_refuses_it(
    name: str, service: LocalPclusterApi, aws_session: boto3.Session, moto_endpoint: str
) -> None:
    # Given a function role, whose session is a valid principal of the account but not the API's user role
    role_name = f"fn-{name}"[:64]
    function_role = create_role(aws_session.client("iam", endpoint_url=moto_endpoint), role_name)
    as_function = AssumedRoleCredentials(
        aws_session.client("sts", endpoint_url=moto_endpoint), function_role, session_name="create-cluster"
    )
    api = PclusterApi(service.url, session=as_function, region=REGION)

    # When it calls the API with its own credentials
    with pytest.raises(PclusterAccessDenied) as raised:
        api.describe_cluster(name, region=REGION)

    # Then API Gateway's resource-policy denial comes back, naming the caller and the resource
    assert raised.value.status == 403
    assert raised.value.message == (
        f"User: arn:aws:sts::{ACCOUNT}:assumed-role/{role_name}/create-cluster is not authorized to perform: "
        "execute-api:Invoke "
        f"on resource: arn:aws:execute-api:{REGION}:{ACCOUNT}:pclocalapi0/prod/GET/v3/clusters/{name} "
        "with an explicit deny"
    )


def test_a_request_signed_with_the_api_user_roles_session_is_served(
    name: str, service: LocalPclusterApi, api: PclusterApi
) -> None:
    assert api.describe_cluster(name, region=REGION) is None


# --- invalid configurations ------------------------------------------------------------------------
def test_a_config_without_the_head_nodes_subnet_is_a_bad_request_that_launches_nothing(
    name: str, api: PclusterApi, ec2: Any, ids: ClusterIds
) -> None:
    config = config_yaml(ids, HeadNode__Networking__SubnetId=None)

    with pytest.raises(PclusterBadRequest) as raised:
        api.create_cluster(name, config, region=REGION)

    assert raised.value.message == "Invalid cluster configuration."
    assert [(e.level, e.type) for e in raised.value.validation_errors] == [("ERROR", "ConfigSchemaValidator")]
    assert "HeadNode/Networking/SubnetId" in (raised.value.validation_errors[0].message or "")
    assert instances_of(ec2, name) == []
    assert api.describe_cluster(name, region=REGION) is None


def test_a_queue_without_a_capacity_reservation_target_or_min_count_is_a_bad_request(
    name: str, api: PclusterApi, ids: ClusterIds
) -> None:
    document = yaml.safe_load(config_yaml(ids))
    resource = document["Scheduling"]["SlurmQueues"][0]["ComputeResources"][0]
    resource["CapacityReservationTarget"] = {}
    del resource["MinCount"]

    with pytest.raises(PclusterBadRequest) as raised:
        api.create_cluster(name, yaml.safe_dump(document), region=REGION)

    messages = " ".join(e.message or "" for e in raised.value.validation_errors)
    assert "MinCount" in messages and "CapacityReservationTarget" in messages


def test_a_subnet_that_does_not_exist_is_a_bad_request_and_leaves_no_instance(
    name: str, api: PclusterApi, ec2: Any, ids: ClusterIds
) -> None:
    missing = ids.model_copy(update={"private_subnet_id": "subnet-0000000000000000f"})

    with pytest.raises(PclusterBadRequest) as raised:
        api.create_cluster(name, config_yaml(missing), region=REGION)

    assert raised.value.validation_errors[0].type == "SubnetsValidator"
    assert {i["State"]["Name"] for i in instances_of(ec2, name)} <= {"terminated"}


def test_a_region_that_conflicts_with_the_configs_region_is_a_bad_request(
    name: str, api: PclusterApi, ids: ClusterIds
) -> None:
    with pytest.raises(PclusterBadRequest, match="conflicts"):
        api.create_cluster(name, config_yaml(ids), region="us-east-1")


# --- delete ------------------------------------------------------------------------------------------
def test_delete_terminates_the_instances_and_the_cluster_is_gone_after_a_while(
    name: str, api: PclusterApi, ec2: Any, ids: ClusterIds
) -> None:
    api.create_cluster(name, config_yaml(ids), region=REGION)
    wait_for(api, name, ClusterStatus.CREATE_COMPLETE)

    deleting = api.delete_cluster(name, region=REGION)

    assert deleting is not None and deleting.clusterStatus == ClusterStatus.DELETE_IN_PROGRESS
    assert {i["State"]["Name"] for i in instances_of(ec2, name)} == {"terminated"}
    assert wait_for(api, name, "never") is None
    assert api.delete_cluster(name, region=REGION) is None


def test_deleting_a_cluster_being_deleted_answers_delete_in_progress_again(
    name: str, api: PclusterApi, ids: ClusterIds
) -> None:
    api.create_cluster(name, config_yaml(ids), region=REGION)
    api.delete_cluster(name, region=REGION)

    again = api.delete_cluster(name, region=REGION)

    assert again is not None and again.clusterStatus == ClusterStatus.DELETE_IN_PROGRESS


def test_a_deleted_name_can_be_created_again(name: str, api: PclusterApi, ids: ClusterIds) -> None:
    api.create_cluster(name, config_yaml(ids), region=REGION)
    api.delete_cluster(name, region=REGION)
    wait_for(api, name, "never")

    created = api.create_cluster(name, config_yaml(ids), region=REGION)

    assert created.clusterStatus == ClusterStatus.CREATE_IN_PROGRESS


# --- listClusters and auth ------------------------------------------------------------------------------
def test_list_clusters_answers_the_summaries_filtered_by_status(
    name: str, service: LocalPclusterApi, api: PclusterApi, as_api_user: AssumedRoleCredentials, ids: ClusterIds
) -> None:
    api.create_cluster(name, config_yaml(ids), region=REGION)
    api.create_cluster(f"{name}-2", config_yaml(ids), region=REGION)
    wait_for(api, f"{name}-2", ClusterStatus.CREATE_COMPLETE)

    status, everything = signed_call(service, as_api_user, "GET", "/v3/clusters")
    _, complete = signed_call(service, as_api_user, "GET", "/v3/clusters", clusterStatus="CREATE_COMPLETE")

    assert status == 200
    assert sorted(c["clusterName"] for c in everything["clusters"]) == sorted([name, f"{name}-2"])
    assert [c["clusterName"] for c in complete["clusters"]] == [f"{name}-2"]


def test_an_unsigned_request_is_refused_as_api_gateway_refuses_it(
    name: str, service: LocalPclusterApi, ids: ClusterIds
) -> None:
    body = json.dumps({"clusterName": name, "clusterConfiguration": config_yaml(ids)}).encode()

    status, answer = raw_call(
        f"{service.url}/v3/clusters?region={REGION}", "POST", {"Content-Type": "application/json"}, body
    )

    assert (status, answer) == (403, {"message": "Missing Authentication Token"})
    assert service.cluster_names() == []


def test_a_request_signed_for_another_service_is_refused(
    name: str, service: LocalPclusterApi, aws_session: boto3.Session
) -> None:
    from botocore.auth import SigV4Auth

    request = build_request(service.url, "GET", f"/v3/clusters/{name}", region=REGION)
    SigV4Auth(aws_session.get_credentials(), "ec2", REGION).add_auth(request)

    status, answer = raw_call(request.url, "GET", dict(request.headers.items()))

    assert status == 403
    assert "execute-api" in answer["message"]
