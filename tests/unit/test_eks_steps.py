"""The EKS branch (`cluster.kind: eks`) against moto and the strict local EKS: Create EKS cluster,
Create node group and the EKS cluster's teardown (trainrun.steps.eks over trainrun.adapters.eks),
alone and within Tear down.

The network is moto's, built by trainrun.adapters.network with the control plane's second subnet;
the reservation the run file names is the capacity emulator's; EKS is moto's, patched by
trainrun.local.eks_emulator, whose resources settle on their second look: a step's first pass
sees them CREATING (or DELETING), its second ACTIVE (or gone).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends
from moto.eks.models import eks_backends

from trainrun.adapters.eks import EksFailed, ensure_addons, ensure_launch_template
from trainrun.adapters.kubernetes import KubernetesRefused
from trainrun.adapters.network import ensure_network
from trainrun.errors import TrainrunError, TransientAwsError
from trainrun.local import capacity_emulator, clock, eks_emulator
from trainrun.local.fixture import AccountFixture
from trainrun.logic import eks_node_group
from trainrun.logic.eks_node_group import ADD_ONS, EksIds, launch_template_name, render_eks_requests
from trainrun.model.resources import EksClusterRef, NetworkIds, Progress
from trainrun.model.run_record import RunRecord, RunStore
from trainrun.model.tags import run_tags
from trainrun.steps import eks as steps_eks
from trainrun.steps.budget import BudgetExceeded
from trainrun.steps.eks import (
    ADDON_CONFIGURATION,
    ADDON_START_GRACE,
    CLUSTER_ADMIN_POLICY,
    EksSettingsMissing,
    create_eks_cluster,
    create_eks_nodes,
    delete_eks_cluster,
)
from trainrun.steps.provisioning import TeardownInput, create_file_system, tear_down
from trainrun.steps.run import RunRef
from trainrun.steps.run_events import RunEvents

from .conftest import CONFIG_BUCKET, REGION, RecordedMetrics, moto_run_events
from .test_provisioning import CLUSTER, POLL, RUN, STACK_NAME, ZONE, given_run, network_of, record, spec_of, until_done
from .test_run_events import CapturedBus, publisher

CONTROL_PLANE_ZONE = "us-west-2a"
RESERVATION = "cr-0123456789abcdef0"  # the run file's (test_provisioning.RUN_FILE): 2 trn1.32xlarge nodes
EKS = {"kind": "eks"}
SPEC = spec_of(cluster=EKS)
NODEGROUP = "trn1-32xlarge"
TEMPLATE = launch_template_name(CLUSTER, SPEC)
TAGS = run_tags(RUN, STACK_NAME)


@dataclass(frozen=True)
class Roles:
    """The stack's EKS roles, in moto's IAM: the cluster's, the nodes' and the Kubernetes access role."""

    cluster: str
    node: str
    access: str


def trust(service: str) -> str:
    statement = {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


@pytest.fixture
def eks(aws: None) -> Iterator[Any]:
    """moto's EKS, as strict as EKS (the local runtime's stand-in), with nothing emulated left over."""
    eks_emulator.install()
    eks_emulator.reset()
    yield boto3.client("eks", region_name=REGION)
    eks_emulator.reset()


@pytest.fixture
def roles(aws: None) -> Roles:
    iam = boto3.client("iam", region_name=REGION)

    def role(name: str, service: str) -> str:
        arn: str = iam.create_role(RoleName=name, AssumeRolePolicyDocument=trust(service))["Role"]["Arn"]
        return arn

    return Roles(
        cluster=role("trainrun-eks-cluster", "eks.amazonaws.com"),
        node=role("trainrun-eks-node", "ec2.amazonaws.com"),
        access=role("trainrun-kubernetes", "lambda.amazonaws.com"),
    )


def seed_reservation(available: int = 2) -> None:
    """The run file's reservation in the run's zone, as the capacity emulator describes it: active,
    2 trn1.32xlarge of which `available` are free."""
    reservation = {
        "id": RESERVATION,
        "instance_type": "trn1.32xlarge",
        "availability_zone": ZONE,
        "total_instance_count": 2,
        "available_instance_count": available,
    }
    capacity_emulator.seed(AccountFixture.model_validate({"region": REGION, "capacity_reservations": [reservation]}))


def given_eks_run(ec2: Any, store: RunStore, *, available: int = 2, budget: dict[str, Any] | None = None) -> NetworkIds:
    """An EKS run (with `budget`, if given) past Create network: its record with the spec, the zone
    and the network (the private subnet in the reservation's zone, the control plane's in another);
    its reservation, with `available` instances free."""
    given_run(store, cluster=EKS, **({"budget": budget} if budget is not None else {}))
    network = ensure_network(
        ec2,
        run_id=RUN,
        stack=STACK_NAME,
        cidr="10.0.0.0/16",
        availability_zone=ZONE,
        control_plane_zone=CONTROL_PLANE_ZONE,
    )
    store.set_network(RUN, network)
    seed_reservation(available)
    return network


def cluster_step(
    eks: Any,
    store: RunStore,
    roles: Roles,
    run_events: RunEvents | None = None,
    now: datetime | None = None,
) -> Progress:
    """Create EKS cluster, with the stack's roles."""
    return create_eks_cluster(
        eks,
        store,
        RunRef(run_id=RUN),
        stack=STACK_NAME,
        region=REGION,
        poll_seconds=POLL,
        run_events=run_events or moto_run_events(),
        now=now,
        cluster_role_arn=roles.cluster,
        node_role_arn=roles.node,
        access_role_arn=roles.access,
    )


def nodes_step(
    eks: Any,
    ec2: Any,
    store: RunStore,
    roles: Roles,
    run_events: RunEvents | None = None,
    now: datetime | None = None,
    check_objects: Any = None,
) -> Progress:
    """Create node group (its Kubernetes objects' dry run: `check_objects`, by default one that
    accepts everything and counts the runs it checked)."""
    return create_eks_nodes(
        eks,
        ec2,
        store,
        RunRef(run_id=RUN),
        stack=STACK_NAME,
        cluster_role_arn=roles.cluster,
        node_role_arn=roles.node,
        poll_seconds=POLL,
        run_events=run_events or moto_run_events(),
        now=now,
        check_objects=check_objects or (lambda record, spec: None),
    )


def teardown_step(eks: Any, ec2: Any, store: RunStore, run_record: RunRecord | None = None) -> Progress:
    """One pass of the EKS cluster's teardown, with the run's record as it is now (or the one given)."""
    return delete_eks_cluster(eks, ec2, store, RUN, run_record if run_record is not None else record(store))


def eks_of(store: RunStore) -> EksClusterRef:
    known = record(store).eks
    assert known is not None
    return known


def active_cluster(
    ec2: Any, eks: Any, store: RunStore, roles: Roles, budget: dict[str, Any] | None = None
) -> NetworkIds:
    """An EKS run whose cluster is ACTIVE, with its access entry, all recorded."""
    network = given_eks_run(ec2, store, budget=budget)
    until_done(lambda: cluster_step(eks, store, roles))
    return network


def provisioned(ec2: Any, eks: Any, store: RunStore, roles: Roles) -> None:
    """An EKS run with its cluster, launch template, node group and add-ons, all ACTIVE and recorded."""
    active_cluster(ec2, eks, store, roles)
    until_done(lambda: nodes_step(eks, ec2, store, roles))


def backend() -> Any:
    """moto's EKS backend: what exists, read without a Describe or a List (which the emulator counts as looks)."""
    return eks_backends[DEFAULT_ACCOUNT_ID][REGION]


def launch_templates() -> list[str]:
    """The launch templates' names, read from moto's EC2 backend."""
    return [template.name for template in ec2_backends[DEFAULT_ACCOUNT_ID][REGION].launch_templates.values()]


def tags_of(tag_list: list[dict[str, str]]) -> dict[str, str]:
    return {tag["Key"]: tag["Value"] for tag in tag_list}


@dataclass
class ThrottledOnce:
    """An EKS client whose first call of `operation` is throttled (ThrottlingException), as EKS does
    under load; every other call goes to `eks`."""

    eks: Any
    operation: str
    throttled: list[str] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.eks, name)
        if name != self.operation or self.throttled:
            return method

        def throttled(**params: Any) -> Any:
            self.throttled.append(name)
            error = {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}
            raise ClientError(error, name)

        return throttled


# --- Create EKS cluster ------------------------------------------------------------------------


def test_create_eks_cluster_waits_while_it_is_creating_and_records_it(
    ec2: Any, eks: Any, store: RunStore, roles: Roles
) -> None:
    # Given an EKS run past Create network
    given_eks_run(ec2, store)
    # When Create EKS cluster runs for the first time
    progress = cluster_step(eks, store, roles)
    # Then it waits for the cluster, which EKS is creating
    assert progress == Progress(done=False, waiting_on=[f"eks cluster {CLUSTER} CREATING"], retry_after_seconds=POLL)
    # And the record has the cluster, by its run-derived name, CREATING (the teardown finds it from now on)
    assert record(store).eks == EksClusterRef(name=CLUSTER, region=REGION, status="CREATING")
    # And no access entry yet: EKS takes none before the cluster is ACTIVE
    assert eks.list_access_entries(clusterName=CLUSTER)["accessEntries"] == []


def test_once_active_the_access_role_gets_cluster_admin_cluster_wide_and_nothing_else(
    ec2: Any, eks: Any, store: RunStore, roles: Roles
) -> None:
    # Given an EKS run whose cluster is being created
    given_eks_run(ec2, store)
    cluster_step(eks, store, roles)
    # When the step runs again, once the cluster is ACTIVE
    progress = cluster_step(eks, store, roles)
    # Then it is done, and the record has the cluster ACTIVE
    assert progress == Progress(done=True, retry_after_seconds=POLL)
    assert eks_of(store).status == "ACTIVE"
    # And the access role is the only principal with an access entry (the creator got none), a
    # STANDARD one with the run's tags
    assert eks.list_access_entries(clusterName=CLUSTER)["accessEntries"] == [roles.access]
    entry = eks.describe_access_entry(clusterName=CLUSTER, principalArn=roles.access)["accessEntry"]
    assert entry["type"] == "STANDARD" and entry["tags"] == TAGS
    # And its one policy is EKS's cluster admin policy, cluster-wide
    (policy,) = eks.list_associated_access_policies(clusterName=CLUSTER, principalArn=roles.access)[
        "associatedAccessPolicies"
    ]
    assert policy["policyArn"] == CLUSTER_ADMIN_POLICY
    assert policy["accessScope"]["type"] == "cluster" and not policy["accessScope"].get("namespaces")


def test_create_eks_cluster_called_again_creates_nothing_new(ec2: Any, eks: Any, store: RunStore, roles: Roles) -> None:
    # Given an EKS run whose cluster is ACTIVE with its access entry
    active_cluster(ec2, eks, store, roles)
    before = record(store).eks
    # When the step runs again (a retried state, or a redriven execution)
    progress = cluster_step(eks, store, roles)
    # Then it is done at once, with the one cluster, access entry and policy there were
    assert progress == Progress(done=True, retry_after_seconds=POLL)
    assert eks.list_clusters()["clusters"] == [CLUSTER]
    assert eks.list_access_entries(clusterName=CLUSTER)["accessEntries"] == [roles.access]
    policies = eks.list_associated_access_policies(clusterName=CLUSTER, principalArn=roles.access)
    assert [p["policyArn"] for p in policies["associatedAccessPolicies"]] == [CLUSTER_ADMIN_POLICY]
    # And the record is as it was
    assert record(store).eks == before


def test_the_eks_cluster_has_the_runs_tags_api_authentication_and_subnets_in_two_zones(
    ec2: Any, eks: Any, store: RunStore, roles: Roles
) -> None:
    # Given an EKS run whose cluster was created
    network = active_cluster(ec2, eks, store, roles)
    # When EKS describes it
    cluster = eks.describe_cluster(name=CLUSTER)["cluster"]
    # Then it carries the run's tags, the stack's cluster role and authentication by access entries only
    assert cluster["tags"] == TAGS
    assert cluster["roleArn"] == roles.cluster
    assert cluster["accessConfig"] == {"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": False}
    # And its control plane is in the run's private subnet and the control plane's, in two zones,
    # with the run's security group
    vpc = cluster["resourcesVpcConfig"]
    assert vpc["subnetIds"] == [network.private_subnet_id, network.control_plane_subnet_id]
    subnets = ec2.describe_subnets(SubnetIds=vpc["subnetIds"])["Subnets"]
    assert {subnet["AvailabilityZone"] for subnet in subnets} == {ZONE, CONTROL_PLANE_ZONE}
    assert vpc["securityGroupIds"] == [network.security_group_id] and vpc["vpcId"] == network.vpc_id


@pytest.mark.parametrize(
    ("setting", "role"), [("cluster_role_arn", "cluster"), ("node_role_arn", "node"), ("access_role_arn", "access")]
)
def test_a_missing_role_setting_is_eks_settings_missing_naming_it(
    ec2: Any, eks: Any, store: RunStore, roles: Roles, setting: str, role: str
) -> None:
    # Given an EKS run, on a stack deployed without one of the EKS roles
    given_eks_run(ec2, store)
    without = replace(roles, **{role: ""})
    # When Create EKS cluster runs, Then it fails saying which setting is missing and what to do
    with pytest.raises(EksSettingsMissing, match=rf"the stack gives no {setting}: deploy it with the EKS roles"):
        cluster_step(eks, store, without)
    # And it created and recorded nothing
    assert eks.list_clusters()["clusters"] == []
    assert record(store).eks is None


# --- Create node group -------------------------------------------------------------------------


def test_create_eks_nodes_creates_the_launch_template_node_group_and_add_ons_and_waits_until_all_are_active(
    ec2: Any, eks: Any, store: RunStore, roles: Roles
) -> None:
    # Given an EKS run whose cluster is ACTIVE
    active_cluster(ec2, eks, store, roles)
    bus = CapturedBus()
    checked: list[str] = []

    def dry_run(record: RunRecord, spec: Any) -> None:
        # What it checks is trainrun.steps.kubernetes.dry_run's (tests/integration/test_kubernetes_steps.py).
        assert ec2.describe_launch_templates()["LaunchTemplates"] == []  # before anything is created
        checked.append(record.run_id)

    # When Create node group runs for the first time
    first = nodes_step(eks, ec2, store, roles, run_events=publisher(bus), check_objects=dry_run)
    # Then it waits for the node group and each add-on, all CREATING, and announces nothing yet
    assert first == Progress(
        done=False,
        waiting_on=[f"node group {NODEGROUP} CREATING", *(f"add-on {name} CREATING" for name in ADD_ONS)],
        retry_after_seconds=POLL,
    )
    assert bus.states == []
    # And the record has the launch template (name and id), the node group and the add-ons, CREATING
    (template,) = ec2.describe_launch_templates(LaunchTemplateNames=[TEMPLATE])["LaunchTemplates"]
    assert eks_of(store) == EksClusterRef(
        name=CLUSTER,
        region=REGION,
        status="ACTIVE",
        launch_template_name=TEMPLATE,
        launch_template_id=template["LaunchTemplateId"],
        nodegroup=NODEGROUP,
        nodegroup_status="CREATING",
        addons=dict.fromkeys(ADD_ONS, "CREATING"),
        dry_run_at=eks_of(store).dry_run_at,
    )
    # And the run's Kubernetes objects were checked once, before anything was created
    assert checked == [RUN] and eks_of(store).dry_run_at is not None
    # When it runs again, once they are ACTIVE
    second = nodes_step(eks, ec2, store, roles, run_events=publisher(bus), check_objects=dry_run)
    # Then it is done, the record has them ACTIVE, and the run is announced PROVISIONED
    assert second == Progress(done=True, retry_after_seconds=POLL)
    known = eks_of(store)
    assert (known.nodegroup_status, known.addons) == ("ACTIVE", dict.fromkeys(ADD_ONS, "ACTIVE"))
    assert bus.states == ["provisioned"]
    # And a later call (a retried state) is done too, announcing nothing again
    assert nodes_step(eks, ec2, store, roles, run_events=publisher(bus), check_objects=dry_run).done is True
    assert bus.states == ["provisioned"]
    # And no later pass checked them again
    assert checked == [RUN]


def test_an_object_the_api_server_refuses_fails_create_node_group_before_any_node_is_paid_for(
    ec2: Any, eks: Any, store: RunStore, roles: Roles
) -> None:
    # Given an EKS run whose cluster is ACTIVE, and an API server that refuses one of its objects
    active_cluster(ec2, eks, store, roles)

    def refusing(record: RunRecord, spec: Any) -> None:
        raise KubernetesRefused('apply Job compile in trainrun: 422 Invalid: Job.batch "compile" is invalid')

    # When Create node group runs, Then it fails with the API server's answer
    with pytest.raises(KubernetesRefused, match="422 Invalid"):
        nodes_step(eks, ec2, store, roles, check_objects=refusing)
    # And no launch template nor node group was created, and the dry run is not recorded as passed
    assert ec2.describe_launch_templates()["LaunchTemplates"] == []
    assert eks.list_nodegroups(clusterName=CLUSTER)["nodegroups"] == []
    assert eks_of(store).dry_run_at is None


def test_the_launch_template_has_the_runs_tags_and_a_retry_finds_it_rather_than_making_another(
    ec2: Any, eks: Any, store: RunStore, roles: Roles
) -> None:
    # Given an EKS run whose nodes were created, over two passes of the step
    provisioned(ec2, eks, store, roles)
    # When the launch template is asked for again, as a retry after a crash would
    network = network_of(store)
    ids = EksIds(
        private_subnet_id=str(network.private_subnet_id),
        control_plane_subnet_id=str(network.control_plane_subnet_id),
        security_group_id=str(network.security_group_id),
        cluster_role_arn=roles.cluster,
        node_role_arn=roles.node,
    )
    request = render_eks_requests(SPEC, ids, cluster_name=CLUSTER, tags=TAGS)["launch_template"]
    again = ensure_launch_template(ec2, request)
    # Then it is the one recorded: there is one launch template, with the run's tags
    (template,) = ec2.describe_launch_templates()["LaunchTemplates"]
    assert again == template["LaunchTemplateId"] == eks_of(store).launch_template_id
    assert template["LaunchTemplateName"] == TEMPLATE
    assert tags_of(template["Tags"]) == TAGS
    # And it targets the run's reservation, its nodes tagged as the run's too
    data = ec2.describe_launch_template_versions(LaunchTemplateId=again)["LaunchTemplateVersions"][0][
        "LaunchTemplateData"
    ]
    assert data["CapacityReservationSpecification"]["CapacityReservationTarget"] == {
        "CapacityReservationId": RESERVATION
    }
    tagged = {spec["ResourceType"]: tags_of(spec["Tags"]) for spec in data["TagSpecifications"]}
    assert (tagged["instance"], tagged["volume"]) == (TAGS, TAGS)


def test_the_node_group_launches_from_the_launch_template_in_the_private_subnet_with_the_node_role(
    ec2: Any, eks: Any, store: RunStore, roles: Roles
) -> None:
    # Given an EKS run whose nodes were created
    provisioned(ec2, eks, store, roles)
    # When EKS describes the node group and the add-ons
    nodegroup = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName=NODEGROUP)["nodegroup"]
    # Then it has the run's nodes, from the launch template, in the reservation's zone, tagged as the run's
    assert nodegroup["launchTemplate"]["name"] == TEMPLATE
    assert nodegroup["nodeRole"] == roles.node
    assert nodegroup["subnets"] == [network_of(store).private_subnet_id]
    assert nodegroup["scalingConfig"] == {"minSize": 2, "maxSize": 2, "desiredSize": 2}
    assert nodegroup["tags"] == TAGS
    # And the cluster has the run's add-ons, those with a Deployment tolerating the nodes' taint
    assert sorted(eks.list_addons(clusterName=CLUSTER)["addons"]) == sorted(ADD_ONS)
    for name, configuration in ADDON_CONFIGURATION.items():
        addon = eks.describe_addon(clusterName=CLUSTER, addonName=name)["addon"]
        assert addon["configurationValues"] == configuration and addon["tags"] == TAGS


def test_create_eks_nodes_needs_the_cluster_active(ec2: Any, eks: Any, store: RunStore, roles: Roles) -> None:
    # Given an EKS run whose cluster is still being created
    given_eks_run(ec2, store)
    cluster_step(eks, store, roles)
    # When Create node group runs, Then it says the cluster step did not finish, and creates nothing
    with pytest.raises(TrainrunError, match="has no ACTIVE EKS cluster recorded"):
        nodes_step(eks, ec2, store, roles)
    assert launch_templates() == []


def test_a_node_group_the_reservation_cannot_hold_fails_the_step_with_eks_health_issue(
    ec2: Any, eks: Any, store: RunStore, roles: Roles
) -> None:
    # Given an EKS run for 2 nodes whose reservation has 1 instance available
    active_cluster(ec2, eks, store, roles)
    seed_reservation(available=1)
    # When Create node group runs, and runs again once EKS has tried to launch the nodes
    assert nodes_step(eks, ec2, store, roles).done is False
    with pytest.raises(EksFailed) as failed:
        nodes_step(eks, ec2, store, roles)
    # Then the step fails with EKS's reason: the health issue's code, its message, the Auto Scaling group
    message = str(failed.value)
    assert message.startswith(f"node group {NODEGROUP} is CREATE_FAILED: AsgInstanceLaunchFailures: ")
    assert (
        f"Could not launch instances: ReservationCapacityExceeded: the capacity reservation {RESERVATION} (active) "
        "has 1 instances available, not 2. Launching EC2 instance failed." in message
    )
    (issue,) = eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName=NODEGROUP)["nodegroup"]["health"]["issues"]
    assert message.endswith(f"({', '.join(issue['resourceIds'])})") and issue["resourceIds"]


# --- the add-ons and the nodes --------------------------------------------------------------------


@dataclass
class AwsClock:
    """The emulator on the AWS clock at real time (an add-on ACTIVE in a minute, a node group in
    five), from `start()` on; its time moved on by the test (`advance`) rather than waited for."""

    moved: float = 0.0

    def start(self) -> None:
        clock.enable(1)

    def advance(self, seconds: float) -> None:
        self.moved += seconds


@pytest.fixture
def aws_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsClock]:
    """The emulator's own time source replaced (nothing else's), the clock turned off after."""
    started = time.monotonic()
    fake = AwsClock()
    monkeypatch.setattr(eks_emulator, "time", SimpleNamespace(monotonic=lambda: started + fake.moved))
    yield fake
    clock.disable()


def test_add_ons_without_a_node_to_run_on_are_waited_for_while_the_node_group_is_created(
    ec2: Any, eks: Any, store: RunStore, roles: Roles, aws_clock: AwsClock
) -> None:
    # Given an EKS run whose cluster is ACTIVE, on a clock where add-ons settle in a minute and the
    # node group in five
    active_cluster(ec2, eks, store, roles)
    aws_clock.start()
    bus = CapturedBus()
    assert nodes_step(eks, ec2, store, roles, run_events=publisher(bus)).done is False
    # When the step runs two minutes later: the add-ons whose Deployment has no node yet are
    # DEGRADED (InsufficientNumberOfReplicas), as EKS reports them before the nodes join
    aws_clock.advance(120)
    progress = nodes_step(eks, ec2, store, roles, run_events=publisher(bus))
    # Then it waits for the node group, and for those add-ons, rather than failing the run
    assert progress.done is False
    assert progress.waiting_on == [
        f"node group {NODEGROUP} CREATING",
        "add-on coredns DEGRADED",
        "add-on aws-fsx-csi-driver DEGRADED",
        "add-on amazon-cloudwatch-observability DEGRADED",
    ]
    # When it runs once the node group is ACTIVE, Then the add-ons are scheduled and ACTIVE: done, announced once
    aws_clock.advance(240)
    assert nodes_step(eks, ec2, store, roles, run_events=publisher(bus)).done is True
    assert set(eks_of(store).addons.values()) == {"ACTIVE"} and bus.states == ["provisioned"]


def test_an_add_on_still_degraded_after_its_grace_on_active_nodes_fails_the_run(
    ec2: Any, eks: Any, store: RunStore, roles: Roles, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an EKS run whose add-ons' controllers do not tolerate the nodes' taint
    monkeypatch.setattr(steps_eks, "ADDON_CONFIGURATION", {})
    active_cluster(ec2, eks, store, roles)
    start = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    assert nodes_step(eks, ec2, store, roles, now=start).done is False
    # When the node group is ACTIVE and the add-ons DEGRADED: waited on while their pods may start
    waiting = nodes_step(eks, ec2, store, roles, now=start)
    assert eks_of(store).nodegroup_status == "ACTIVE" and "add-on aws-fsx-csi-driver DEGRADED" in waiting.waiting_on
    assert nodes_step(eks, ec2, store, roles, now=start + ADDON_START_GRACE - timedelta(seconds=1)).done is False
    # Then, once the grace has passed on ACTIVE nodes, the run fails with EKS's reason
    with pytest.raises(EksFailed, match="DEGRADED: InsufficientNumberOfReplicas"):
        nodes_step(eks, ec2, store, roles, now=start + ADDON_START_GRACE)


def test_an_add_on_degraded_once_the_nodes_are_active_fails_with_eks_health_issue(
    ec2: Any, eks: Any, store: RunStore, roles: Roles, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an EKS run whose nodes are ACTIVE (and tainted for Neuron pods only), provisioned
    # without the CoreDNS add-on
    monkeypatch.setattr(eks_node_group, "ADD_ONS", {k: v for k, v in ADD_ONS.items() if k != "coredns"})
    provisioned(ec2, eks, store, roles)

    # When an add-on whose Deployment does not tolerate the taint is created and followed
    def coredns() -> dict[str, str]:
        return ensure_addons(eks, cluster=CLUSTER, names=["coredns"], tags=TAGS, configuration={})

    assert coredns() == {"coredns": "CREATING"}
    # Then, once EKS finds its pods unschedulable, it fails with EKS's reason
    with pytest.raises(EksFailed, match=r"^add-on coredns is DEGRADED: InsufficientNumberOfReplicas: The add-on is"):
        coredns()


def test_provisioned_is_announced_when_the_add_ons_become_active_after_the_node_group(
    ec2: Any, eks: Any, store: RunStore, roles: Roles
) -> None:
    # Given an EKS run whose cluster is ACTIVE, and whose first Create node group pass was throttled
    # by EKS at its first add-on (the node group was created; the state machine retries the step)
    active_cluster(ec2, eks, store, roles)
    bus = CapturedBus()
    throttled = ThrottledOnce(eks, "create_addon")
    with pytest.raises(TransientAwsError):
        nodes_step(throttled, ec2, store, roles, run_events=publisher(bus))
    # When the retries run: the node group is ACTIVE (and recorded so) a pass before the add-ons are
    passes = until_done(lambda: nodes_step(throttled, ec2, store, roles, run_events=publisher(bus)))
    assert passes[0].waiting_on == [f"add-on {name} CREATING" for name in ADD_ONS]
    # Then the run is announced PROVISIONED, once, when all of it is ACTIVE
    assert bus.states == ["provisioned"]
    # And nothing was made twice
    assert launch_templates() == [TEMPLATE] and list(backend().clusters[CLUSTER].nodegroups) == [NODEGROUP]


# --- the budget ---------------------------------------------------------------------------------


def test_create_eks_cluster_holds_the_budget_while_the_cluster_is_creating(
    ec2: Any, eks: Any, store: RunStore, roles: Roles
) -> None:
    # Given an EKS run with a $1 budget, past Create network: its NAT gateway bills $0.045 an hour
    given_eks_run(ec2, store, budget={"max_cost_usd": 1})
    nat_since = record(store).nat_gateway_since
    assert nat_since is not None
    bus = CapturedBus()
    # When Create EKS cluster runs two days later (the budget spent by the NAT gateway alone: the
    # cluster bills from the record's first write of it, after this look), the cluster CREATING
    # Then the run fails BudgetExceeded, saying so (and warns on the way)
    with pytest.raises(
        BudgetExceeded, match=rf"of budget.max_cost_usd \(\$1.00\), while EKS cluster {CLUSTER} was CREATING: no job"
    ):
        cluster_step(eks, store, roles, run_events=publisher(bus), now=nat_since + timedelta(days=2))
    assert bus.states == ["budget_warning"]
    # And the cluster it created is recorded, for the teardown to delete it
    assert eks_of(store).status == "CREATING"


def test_create_eks_nodes_holds_the_budget_while_the_nodes_are_created(
    ec2: Any, eks: Any, store: RunStore, roles: Roles
) -> None:
    # Given an EKS run with a $10 budget whose cluster is ACTIVE (it bills from its creation on)
    active_cluster(ec2, eks, store, roles, budget={"max_cost_usd": 10})
    cluster_since = record(store).cluster_since
    assert cluster_since is not None
    bus = CapturedBus()
    # When Create node group first runs an hour later, the nodes CREATING
    # Then the run fails BudgetExceeded, saying so
    with pytest.raises(BudgetExceeded, match=rf"while the nodes of EKS cluster {CLUSTER} were being created"):
        nodes_step(eks, ec2, store, roles, run_events=publisher(bus), now=cluster_since + timedelta(hours=1))
    # And what it created is recorded, for the teardown to delete it
    known = eks_of(store)
    assert (known.launch_template_name, known.nodegroup) == (TEMPLATE, NODEGROUP)


# --- the teardown -------------------------------------------------------------------------------


def test_delete_eks_cluster_deletes_the_node_group_then_the_cluster_then_the_launch_template(
    ec2: Any, eks: Any, store: RunStore, roles: Roles
) -> None:
    # Given an EKS run with its cluster, node group, add-ons and launch template
    provisioned(ec2, eks, store, roles)
    # When the teardown deletes the cluster, a pass at a time until done; after each pass, what is left
    left: list[tuple[bool, bool, bool]] = []

    def one_pass() -> Progress:
        progress = teardown_step(eks, ec2, store)
        cluster = backend().clusters.get(CLUSTER)
        left.append(
            (cluster is not None and bool(cluster.nodegroups), cluster is not None, TEMPLATE in launch_templates())
        )
        return progress

    passes = until_done(one_pass)
    # Then the node group went first, then the cluster, then the launch template
    assert sorted(set(left), reverse=True) == [(True, True, True), (False, True, True), (False, False, False)]
    assert left == sorted(left, reverse=True)
    # And it waited on the cluster only once no node group was left (EKS refuses to delete it before)
    for progress in passes:
        waiting_for_cluster = any(item.startswith(f"eks cluster {CLUSTER}") for item in progress.waiting_on)
        assert not (waiting_for_cluster and any(item.startswith("node group") for item in progress.waiting_on))
    assert passes[0].waiting_on[0] == f"node group {NODEGROUP} of cluster {CLUSTER} (DELETING)"
    assert passes[-1] == Progress(done=True, deleted=[f"launch template {TEMPLATE}"])
    # And nothing is left: no cluster, no launch template; the record says the cluster is deleted
    assert eks.list_clusters()["clusters"] == []
    assert ec2.describe_launch_templates()["LaunchTemplates"] == []
    assert eks_of(store).status == "DELETED"


def test_a_second_teardown_after_done_is_a_no_op(ec2: Any, eks: Any, store: RunStore, roles: Roles) -> None:
    # Given an EKS run whose cluster was torn down
    provisioned(ec2, eks, store, roles)
    until_done(lambda: teardown_step(eks, ec2, store))
    before = record(store)
    # When the teardown runs again (the janitor, or a retried state)
    progress = teardown_step(eks, ec2, store)
    # Then it is done at once, deleting nothing, and the record is as it was
    assert progress == Progress(done=True)
    assert record(store).eks == before.eks


def test_a_teardown_after_a_failed_node_group_deletes_everything(
    ec2: Any, eks: Any, store: RunStore, roles: Roles
) -> None:
    # Given an EKS run whose node group failed for capacity (its add-ons were created)
    active_cluster(ec2, eks, store, roles)
    seed_reservation(available=1)
    nodes_step(eks, ec2, store, roles)
    with pytest.raises(EksFailed):
        nodes_step(eks, ec2, store, roles)
    # When the teardown runs until done
    until_done(lambda: teardown_step(eks, ec2, store))
    # Then nothing is left
    assert eks.list_clusters()["clusters"] == [] and launch_templates() == []


@pytest.mark.parametrize("recorded", ["record without eks", "no record"])
def test_a_cluster_never_recorded_is_found_by_its_run_derived_name_and_deleted(
    ec2: Any, eks: Any, store: RunStore, roles: Roles, recorded: str
) -> None:
    # Given an EKS run whose cluster EKS created, but whose record has none (a crash before it was
    # recorded), or no record at all
    active_cluster(ec2, eks, store, roles)
    given = record(store).model_copy(update={"eks": None}) if recorded == "record without eks" else None
    # When the teardown runs until done
    passes = until_done(lambda: delete_eks_cluster(eks, ec2, store, RUN, given))
    # Then it found the cluster by its run-derived name and deleted it
    assert any(f"eks cluster {CLUSTER}" in item for item in passes[0].waiting_on)
    assert eks.list_clusters()["clusters"] == []


def test_tear_down_of_an_eks_run_deletes_the_cluster_then_its_file_system_and_network(
    ec2: Any, fsx: Any, eks: Any, store: RunStore, roles: Roles
) -> None:
    # Given an EKS run with its cluster, nodes, network and file system (FSx takes passes to delete it)
    provisioned(ec2, eks, store, roles)
    create_file_system(fsx, store, RunRef(run_id=RUN), stack=STACK_NAME, poll_seconds=POLL)
    assert record(store).storage is not None

    def one_pass() -> Progress:
        return tear_down(
            ec2,
            fsx,
            None,
            store,
            TeardownInput(run_id=RUN),
            region=REGION,
            poll_seconds=POLL,
            run_events=moto_run_events(),
            metrics=RecordedMetrics(),
            ssm=None,
            config_bucket=CONFIG_BUCKET,
            eks=eks,
        )

    # When Tear down runs until done: the EKS cluster's part is called on every pass, after it is done too
    until_done(one_pass, passes=20)
    # Then nothing of the run is left, and the record says so
    assert eks.list_clusters()["clusters"] == [] and launch_templates() == []
    assert fsx.describe_file_systems()["FileSystems"] == []
    assert ec2.describe_vpcs(Filters=[{"Name": "tag:trainrun:run-id", "Values": [RUN]}])["Vpcs"] == []
    assert record(store).torn_down_at is not None
