"""The EKS emulator on moto: refuses what EKS refuses, lifecycles, access entries, add-ons, node groups.

Real boto3 clients talk to one `moto.mock_aws` for the whole module (in process): a VPC, its
subnets and the roles are made once, and each test makes its own cluster, so none depends on
another. Where cheap, a test shows that plain moto accepted what the emulator refuses, by calling
moto's own method (`eks_emulator.original`, or the backend method the emulator leaves alone).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import boto3
import moto
import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.core.botocore_stubber import MockRawResponse
from moto.eks import urls as eks_urls
from moto.eks.models import eks_backends
from moto.eks.responses import EKSResponse
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.test import Client

from trainrun.local import capacity_emulator, clock, eks_emulator
from trainrun.local.fixture import AccountFixture
from trainrun.logic import eks_versions

REGION = "us-west-2"
ACCOUNT = "123456789012"
RESERVATION_ID = "cr-0123456789abcdef0"
ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
VIEW_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"
_names = itertools.count()


def trust(service: str) -> str:
    statement = {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


@dataclass
class World:
    session: boto3.Session
    eks: Any
    ec2: Any
    iam: Any
    vpc: str
    subnets: dict[str, str]  # Availability Zone -> subnet in the VPC
    other_vpc_subnet: str
    group: str
    cluster_role: str
    node_role: str
    untrusted_role: str

    def name(self, prefix: str = "c") -> str:
        return f"{prefix}{next(_names)}"

    def cluster(self, *, mode: str = "API", settle: bool = True, **extra: Any) -> str:
        """A new cluster (ACTIVE unless `settle` is False) with the API authentication mode."""
        name = self.name()
        request: dict[str, Any] = {
            "name": name,
            "roleArn": self.cluster_role,
            "resourcesVpcConfig": {"subnetIds": [self.subnets["us-west-2a"], self.subnets["us-west-2d"]]},
            "accessConfig": {"authenticationMode": mode, "bootstrapClusterCreatorAdminPermissions": False},
        }
        self.eks.create_cluster(**(request | extra))
        while settle and self.eks.describe_cluster(name=name)["cluster"]["status"] != "ACTIVE":
            pass
        return name

    def launch_template(self, **data: Any) -> str:
        template_id: str = self.ec2.create_launch_template(LaunchTemplateName=self.name("lt"), LaunchTemplateData=data)[
            "LaunchTemplate"
        ]["LaunchTemplateId"]
        return template_id

    def capacity_block_template(self, **extra: Any) -> str:
        return self.launch_template(
            InstanceType="trn1.32xlarge",
            InstanceMarketOptions={"MarketType": "capacity-block"},
            CapacityReservationSpecification={"CapacityReservationTarget": {"CapacityReservationId": RESERVATION_ID}},
            **extra,
        )

    def nodegroup(self, cluster: str, **extra: Any) -> dict[str, Any]:
        request: dict[str, Any] = {
            "clusterName": cluster,
            "nodegroupName": self.name("ng"),
            "nodeRole": self.node_role,
            "subnets": [self.subnets["us-west-2d"]],
            "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": 1},
        }
        nodegroup: dict[str, Any] = self.eks.create_nodegroup(**(request | extra))["nodegroup"]
        return nodegroup

    def role(self, service: str = "ec2.amazonaws.com", path: str = "/") -> str:
        arn: str = self.iam.create_role(RoleName=self.name("role"), Path=path, AssumeRolePolicyDocument=trust(service))[
            "Role"
        ]["Arn"]
        return arn


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with pytest.MonkeyPatch.context() as env:
        for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
            env.delenv(name, raising=False)
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        env.setenv("AWS_DEFAULT_REGION", REGION)
        with mock_aws():
            eks_emulator.install()
            session = boto3.Session(region_name=REGION)
            ec2, iam = session.client("ec2"), session.client("iam")
            vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
            subnets = {
                zone: ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{n}.0/24", AvailabilityZone=zone)["Subnet"][
                    "SubnetId"
                ]
                for n, zone in enumerate(("us-west-2a", "us-west-2b", "us-west-2d"))
            }
            other_vpc = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
            world = World(
                session=session,
                eks=session.client("eks"),
                ec2=ec2,
                iam=iam,
                vpc=vpc,
                subnets=subnets,
                other_vpc_subnet=ec2.create_subnet(VpcId=other_vpc, CidrBlock="10.1.0.0/24")["Subnet"]["SubnetId"],
                group=ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc)["GroupId"],
                cluster_role="",
                node_role="",
                untrusted_role="",
            )
            world.cluster_role = world.role("eks.amazonaws.com")
            world.node_role = world.role("ec2.amazonaws.com")
            world.untrusted_role = world.role("lambda.amazonaws.com")
            yield world
            eks_emulator.reset()


@pytest.fixture
def reservation(world: World) -> Iterator[dict[str, Any]]:
    """A trn1 Capacity Block in us-west-2d, active, 2 instances available (the capacity emulator's)."""
    fields: dict[str, Any] = {
        "id": RESERVATION_ID,
        "instance_type": "trn1.32xlarge",
        "availability_zone": "us-west-2d",
        "total_instance_count": 2,
        "available_instance_count": 2,
        "reservation_type": "capacity-block",
    }
    capacity_emulator.seed(AccountFixture.model_validate({"region": REGION, "capacity_reservations": [fields]}))
    yield fields
    capacity_emulator.reset()


def refused(call: Any, **request: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as raised:
        call(**request)
    error = raised.value.response["Error"]
    return error["Code"], error["Message"]


def status_of(world: World, cluster: str) -> str | None:
    try:
        found: str = world.eks.describe_cluster(name=cluster)["cluster"]["status"]
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "ResourceNotFoundException"
        return None
    return found


def nodegroup_of(world: World, cluster: str, nodegroup: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = world.eks.describe_nodegroup(clusterName=cluster, nodegroupName=nodegroup)["nodegroup"]
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "ResourceNotFoundException"
        return None
    return found


def addon_of(world: World, cluster: str, addon: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = world.eks.describe_addon(clusterName=cluster, addonName=addon)["addon"]
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "ResourceNotFoundException"
        return None
    return found


def active_nodegroup(world: World, cluster: str, **extra: Any) -> str:
    name: str = world.nodegroup(cluster, **extra)["nodegroupName"]
    while (nodegroup_of(world, cluster, name) or {}).get("status") != "ACTIVE":
        pass
    return name


# --- install -------------------------------------------------------------------------------------


def test_install_twice_patches_once(world: World) -> None:
    patched = EKSResponse.create_cluster
    eks_emulator.install()
    assert EKSResponse.create_cluster is patched
    assert sum(path.startswith("{0}/clusters/(?P<name>[^/]+)/addons") for path in eks_urls.url_paths) == 2


def test_install_refuses_another_moto_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eks_emulator, "_installed", False)
    monkeypatch.setattr(moto, "__version__", "9.9.9")
    with pytest.raises(RuntimeError, match=r"moto 5\.2\.5 internals, but moto 9\.9\.9"):
        eks_emulator.install()


def test_plain_moto_takes_what_the_emulator_refuses(world: World) -> None:
    # moto's own backend methods (CreateCluster's, the node group's the emulator wrapped) take a
    # missing role and subnet, give Kubernetes 1.19, and a Capacity Block node group without a
    # launch template, all ACTIVE at once
    backend = eks_backends[ACCOUNT][REGION]
    cluster = backend.create_cluster(
        name="moto-only",
        role_arn=f"arn:aws:iam::{ACCOUNT}:role/missing",
        resources_vpc_config={"subnetIds": ["subnet-0123456789abcdef0"]},
    )
    nodegroup = eks_emulator.original("create_nodegroup")(
        backend,
        cluster_name="moto-only",
        nodegroup_name="ng",
        node_role=f"arn:aws:iam::{ACCOUNT}:role/missing",
        subnets=["subnet-0123456789abcdef0"],
        capacity_type="CAPACITY_BLOCK",
    )
    try:
        assert (cluster.status, cluster.version, nodegroup.status) == ("ACTIVE", "1.19", "ACTIVE")
        assert (nodegroup.ami_type, nodegroup.instance_types) == ("AL2_x86_64", ["t3.medium"])
    finally:
        del backend.clusters["moto-only"]
        backend.cluster_count -= 1


# --- CreateCluster -------------------------------------------------------------------------------


def vpc_config(world: World, *subnets: str, **extra: Any) -> dict[str, Any]:
    return {"subnetIds": list(subnets), **extra}


CLUSTER_REFUSALS: dict[str, tuple[Any, str, str]] = {
    "an unsupported version": (lambda w: {"version": "1.19"}, "InvalidParameterException", "version 1.19"),
    "a role that does not exist": (
        lambda w: {"roleArn": f"arn:aws:iam::{ACCOUNT}:role/missing"},
        "InvalidParameterException",
        "does not exist",
    ),
    "a role EKS cannot assume": (
        lambda w: {"roleArn": w.untrusted_role},
        "InvalidParameterException",
        "[eks.amazonaws.com] were not found in the trust relationships of clusterRole",
    ),
    "a subnet that does not exist": (
        lambda w: {"resourcesVpcConfig": vpc_config(w, w.subnets["us-west-2a"], "subnet-0123456789abcdef0")},
        "InvalidParameterException",
        "subnetIds: the subnet ID 'subnet-0123456789abcdef0' does not exist",
    ),
    "one subnet": (
        lambda w: {"resourcesVpcConfig": vpc_config(w, w.subnets["us-west-2a"])},
        "InvalidParameterException",
        "subnetIds: subnets specified must be in at least two different AZs",
    ),
    "subnets in different VPCs": (
        lambda w: {"resourcesVpcConfig": vpc_config(w, w.subnets["us-west-2a"], w.other_vpc_subnet)},
        "InvalidParameterException",
        "subnetIds: subnets are in different VPCs",
    ),
    "a security group that does not exist": (
        lambda w: {
            "resourcesVpcConfig": vpc_config(
                w, w.subnets["us-west-2a"], w.subnets["us-west-2b"], securityGroupIds=["sg-0123456789abcdef0"]
            )
        },
        "InvalidParameterException",
        "securityGroupIds: the security group 'sg-0123456789abcdef0' does not exist",
    ),
    "six security groups": (
        lambda w: {
            "resourcesVpcConfig": vpc_config(
                w, w.subnets["us-west-2a"], w.subnets["us-west-2b"], securityGroupIds=[w.group] * 6
            )
        },
        "InvalidParameterException",
        "securityGroupIds: at most 5",
    ),
    "an authentication mode EKS does not have": (
        lambda w: {"accessConfig": {"authenticationMode": "IAM"}},
        "InvalidParameterException",
        "accessConfig.authenticationMode IAM",
    ),
}


@pytest.mark.parametrize("case", CLUSTER_REFUSALS)
def test_create_cluster_refuses(world: World, case: str) -> None:
    change, code, message = CLUSTER_REFUSALS[case]
    request = {
        "name": world.name(),
        "roleArn": world.cluster_role,
        "resourcesVpcConfig": vpc_config(world, world.subnets["us-west-2a"], world.subnets["us-west-2d"]),
    }
    answer_code, answer = refused(world.eks.create_cluster, **(request | change(world)))
    assert answer_code == code, answer
    assert message in answer


def test_create_cluster_refuses_subnets_in_one_zone(world: World) -> None:
    second = world.ec2.create_subnet(VpcId=world.vpc, CidrBlock="10.0.9.0/24", AvailabilityZone="us-west-2a")
    code, message = refused(
        world.eks.create_cluster,
        name=world.name(),
        roleArn=world.cluster_role,
        resourcesVpcConfig=vpc_config(world, world.subnets["us-west-2a"], second["Subnet"]["SubnetId"]),
    )
    assert (code, "at least two different AZs" in message) == ("InvalidParameterException", True)


def test_create_cluster_refuses_a_zone_eks_does_not_support(world: World) -> None:
    # us-east-1e is use1-az3 in moto, a zone EKS disallows
    ec2, eks = (
        world.session.client("ec2", region_name="us-east-1"),
        world.session.client("eks", region_name="us-east-1"),
    )
    vpc = ec2.create_vpc(CidrBlock="10.2.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.2.{n}.0/24", AvailabilityZone=zone)["Subnet"]["SubnetId"]
        for n, zone in enumerate(("us-east-1a", "us-east-1e"))
    ]
    with pytest.raises(ClientError) as raised:
        eks.create_cluster(name=world.name(), roleArn=world.cluster_role, resourcesVpcConfig={"subnetIds": subnets})
    response = raised.value.response
    assert response["Error"]["Code"] == "UnsupportedAvailabilityZoneException"
    assert "us-east-1e, the targeted availability zone" in response["Error"]["Message"]
    assert "us-east-1e" not in response["validZones"]


def test_a_cluster_is_creating_once_then_active_with_what_eks_answers(world: World) -> None:
    name = world.name()
    created = world.eks.create_cluster(
        name=name,
        roleArn=world.cluster_role,
        resourcesVpcConfig=vpc_config(world, world.subnets["us-west-2a"], world.subnets["us-west-2d"]),
    )["cluster"]
    assert created["status"] == "CREATING"
    assert created["version"] == eks_versions.DEFAULT_KUBERNETES_VERSION
    # accessConfig as the API Reference documents its defaults for a CreateCluster call
    assert created["accessConfig"] == {
        "authenticationMode": "CONFIG_MAP",
        "bootstrapClusterCreatorAdminPermissions": True,
    }
    network = created["resourcesVpcConfig"]
    assert (network["vpcId"], network["endpointPublicAccess"], network["endpointPrivateAccess"]) == (
        world.vpc,
        True,
        False,
    )
    group = world.ec2.describe_security_groups(GroupIds=[network["clusterSecurityGroupId"]])["SecurityGroups"][0]
    assert group["VpcId"] == world.vpc
    assert [status_of(world, name) for _ in range(3)] == ["CREATING", "ACTIVE", "ACTIVE"]


def test_access_config_is_kept(world: World) -> None:
    name = world.cluster(mode="API_AND_CONFIG_MAP")
    assert world.eks.describe_cluster(name=name)["cluster"]["accessConfig"] == {
        "authenticationMode": "API_AND_CONFIG_MAP",
        "bootstrapClusterCreatorAdminPermissions": False,
    }


def test_time_settles_a_cluster_too(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eks_emulator, "DESCRIBES_UNTIL_SETTLED", 100)
    monkeypatch.setattr(eks_emulator, "SECONDS_UNTIL_SETTLED", 0.0)
    name = world.cluster(settle=False)
    assert status_of(world, name) == "ACTIVE"


def test_on_the_aws_clock_a_cluster_takes_its_tabled_time(world: World) -> None:
    # At real time (scale 1) EKS_CLUSTER_ACTIVE is 15 minutes: however often it is described, it stays CREATING
    clock.enable(1)
    try:
        name = world.cluster(settle=False)
    finally:
        clock.disable()
    assert {status_of(world, name) for _ in range(5)} == {"CREATING"}


def test_a_deleted_cluster_is_deleting_then_gone_with_its_security_group(world: World) -> None:
    name = world.cluster()
    group = world.eks.describe_cluster(name=name)["cluster"]["resourcesVpcConfig"]["clusterSecurityGroupId"]
    assert world.eks.delete_cluster(name=name)["cluster"]["status"] == "DELETING"
    assert [status_of(world, name) for _ in range(3)] == ["DELETING", None, None]
    assert refused(world.ec2.describe_security_groups, GroupIds=[group])[0] == "InvalidGroup.NotFound"


def test_a_cluster_with_node_groups_is_not_deleted(world: World) -> None:
    name = world.cluster()
    nodegroup = world.nodegroup(name)["nodegroupName"]
    world.eks.delete_nodegroup(clusterName=name, nodegroupName=nodegroup)
    # a DELETING node group is still there: EKS refuses until it is gone
    code, message = refused(world.eks.delete_cluster, name=name)
    assert (code, message) == ("ResourceInUseException", "Cluster has nodegroups attached")
    while nodegroup_of(world, name, nodegroup) is not None:
        pass
    assert world.eks.delete_cluster(name=name)["cluster"]["status"] == "DELETING"


# --- access entries ------------------------------------------------------------------------------


def test_access_entries_need_the_api_authentication_mode(world: World) -> None:
    name = world.cluster(mode="CONFIG_MAP")
    code, message = refused(world.eks.create_access_entry, clusterName=name, principalArn=world.node_role)
    assert code == "InvalidRequestException"
    assert "authentication mode must be set to one of [API, API_AND_CONFIG_MAP]" in message


def test_an_access_entry_lives_and_goes(world: World) -> None:
    name = world.cluster()
    # a role with a path: its ARN travels in the URL
    principal = world.role(path="/team/ml/")
    entry = world.eks.create_access_entry(clusterName=name, principalArn=principal, kubernetesGroups=["ml"])[
        "accessEntry"
    ]
    assert (entry["type"], entry["kubernetesGroups"]) == ("STANDARD", ["ml"])
    assert entry["username"].endswith(f":assumed-role/{principal.rsplit('/', 1)[1]}/{{{{SessionName}}}}")
    assert world.eks.describe_access_entry(clusterName=name, principalArn=principal)["accessEntry"] == entry
    associated = world.eks.associate_access_policy(
        clusterName=name,
        principalArn=principal,
        policyArn=VIEW_POLICY,
        accessScope={"type": "namespace", "namespaces": ["training"]},
    )["associatedAccessPolicy"]
    assert associated["accessScope"] == {"type": "namespace", "namespaces": ["training"]}
    listed = world.eks.list_associated_access_policies(clusterName=name, principalArn=principal)
    assert [p["policyArn"] for p in listed["associatedAccessPolicies"]] == [VIEW_POLICY]
    assert world.eks.list_access_entries(clusterName=name, associatedPolicyArn=VIEW_POLICY)["accessEntries"] == [
        principal
    ]
    assert world.eks.list_access_entries(clusterName=name, associatedPolicyArn=ADMIN_POLICY)["accessEntries"] == []
    world.eks.disassociate_access_policy(clusterName=name, principalArn=principal, policyArn=VIEW_POLICY)
    world.eks.delete_access_entry(clusterName=name, principalArn=principal)
    code, _ = refused(world.eks.describe_access_entry, clusterName=name, principalArn=principal)
    assert code == "ResourceNotFoundException"


def test_an_iam_principal_takes_one_access_entry(world: World) -> None:
    name = world.cluster()
    world.eks.create_access_entry(clusterName=name, principalArn=world.node_role)
    assert refused(world.eks.create_access_entry, clusterName=name, principalArn=world.node_role)[0] == (
        "ResourceInUseException"
    )


ENTRY_REFUSALS: dict[str, tuple[Any, str]] = {
    "a principal that does not exist": (
        lambda w: {"principalArn": f"arn:aws:iam::{ACCOUNT}:role/missing"},
        "principalArn arn:aws:iam::123456789012:role/missing is not an existing IAM role or user",
    ),
    "a service-linked role": (
        lambda w: {
            "principalArn": f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/eks.amazonaws.com/AWSServiceRoleForAmazonEKS"
        },
        "service-linked roles",
    ),
    "a type EKS does not have": (lambda w: {"principalArn": w.node_role, "type": "ADMIN"}, "type ADMIN"),
    "groups on an EC2_LINUX entry": (
        lambda w: {"principalArn": w.node_role, "type": "EC2_LINUX", "kubernetesGroups": ["ml"]},
        "type EC2_LINUX takes no kubernetesGroups",
    ),
    "a reserved username": (
        lambda w: {"principalArn": w.node_role, "username": "system:admin"},
        "username system:admin",
    ),
}


@pytest.mark.parametrize("case", ENTRY_REFUSALS)
def test_create_access_entry_refuses(world: World, case: str) -> None:
    change, message = ENTRY_REFUSALS[case]
    code, answer = refused(world.eks.create_access_entry, clusterName=world.cluster(), **change(world))
    assert (code, message in answer) == ("InvalidParameterException", True)


POLICY_REFUSALS: dict[str, tuple[dict[str, Any], str]] = {
    "an unknown policy": (
        {"policyArn": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSRootPolicy", "accessScope": {"type": "cluster"}},
        "is not an Amazon EKS access policy",
    ),
    "an IAM policy": (
        {"policyArn": "arn:aws:iam::aws:policy/AdministratorAccess", "accessScope": {"type": "cluster"}},
        "is not an Amazon EKS access policy",
    ),
    "a policy for service-linked roles only": (
        {
            "policyArn": "arn:aws:eks::aws:cluster-access-policy/AmazonEKSComputePolicy",
            "accessScope": {"type": "cluster"},
        },
        "service-linked roles only",
    ),
    "a namespace scope without namespaces": (
        {"policyArn": VIEW_POLICY, "accessScope": {"type": "namespace"}},
        "accessScope.namespaces",
    ),
    "a cluster scope with namespaces": (
        {"policyArn": VIEW_POLICY, "accessScope": {"type": "cluster", "namespaces": ["a"]}},
        "accessScope.namespaces",
    ),
    "a scope type EKS does not have": ({"policyArn": VIEW_POLICY, "accessScope": {"type": "node"}}, "accessScope.type"),
}


@pytest.mark.parametrize("case", POLICY_REFUSALS)
def test_associate_access_policy_refuses(world: World, case: str) -> None:
    request, message = POLICY_REFUSALS[case]
    name = world.cluster()
    world.eks.create_access_entry(clusterName=name, principalArn=world.node_role)
    code, answer = refused(world.eks.associate_access_policy, clusterName=name, principalArn=world.node_role, **request)
    assert (code, message in answer) == ("InvalidParameterException", True)


def test_access_policies_go_only_to_standard_entries(world: World) -> None:
    name = world.cluster()
    world.eks.create_access_entry(clusterName=name, principalArn=world.node_role, type="EC2_LINUX")
    code, answer = refused(
        world.eks.associate_access_policy,
        clusterName=name,
        principalArn=world.node_role,
        policyArn=VIEW_POLICY,
        accessScope={"type": "cluster"},
    )
    assert (code, "STANDARD" in answer) == ("InvalidParameterException", True)


def test_the_cluster_creator_gets_an_admin_entry(world: World) -> None:
    # Given an IAM user moto's IAM knows, calling EKS with its own key
    user = world.iam.create_user(UserName=world.name("user"))["User"]
    key = world.iam.create_access_key(UserName=user["UserName"])["AccessKey"]
    eks = boto3.Session(
        aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"], region_name=REGION
    ).client("eks")
    name = world.name()
    eks.create_cluster(
        name=name,
        roleArn=world.cluster_role,
        resourcesVpcConfig=vpc_config(world, world.subnets["us-west-2a"], world.subnets["us-west-2d"]),
        accessConfig={"authenticationMode": "API"},
    )
    assert world.eks.list_access_entries(clusterName=name)["accessEntries"] == [user["Arn"]]
    policies = world.eks.list_associated_access_policies(clusterName=name, principalArn=user["Arn"])
    assert [(p["policyArn"], p["accessScope"]["type"]) for p in policies["associatedAccessPolicies"]] == [
        (ADMIN_POLICY, "cluster")
    ]
    # and creating that entry again is what EKS refuses
    assert refused(world.eks.create_access_entry, clusterName=name, principalArn=user["Arn"])[0] == (
        "ResourceInUseException"
    )


def test_access_policies_are_listed(world: World) -> None:
    names = {p["name"] for p in world.eks.list_access_policies()["accessPolicies"]}
    assert {
        "AmazonEKSClusterAdminPolicy",
        "AmazonEKSAdminPolicy",
        "AmazonEKSEditPolicy",
        "AmazonEKSViewPolicy",
    } <= names


# --- add-ons -------------------------------------------------------------------------------------


def test_describe_addon_versions_lists_the_jobs_add_ons(world: World) -> None:
    addons = world.eks.describe_addon_versions(kubernetesVersion=eks_versions.DEFAULT_KUBERNETES_VERSION)["addons"]
    assert {a["addonName"] for a in addons} == set(eks_emulator.ADDONS)
    storage = world.eks.describe_addon_versions(types=["storage"])["addons"]
    assert [a["addonName"] for a in storage] == ["aws-fsx-csi-driver"]
    assert refused(world.eks.describe_addon_versions, addonName="aws-ebs-csi-driverx")[0] == "ResourceNotFoundException"


ADDON_REFUSALS: dict[str, tuple[dict[str, Any], str]] = {
    "an unknown add-on": ({"addonName": "istio"}, "Addon istio specified is not supported"),
    "an unknown version": ({"addonName": "vpc-cni", "addonVersion": "v0.0.1-eksbuild.1"}, "Addon version v0.0.1"),
    "a role that does not exist": (
        {"addonName": "aws-fsx-csi-driver", "serviceAccountRoleArn": f"arn:aws:iam::{ACCOUNT}:role/missing"},
        "does not exist",
    ),
}


@pytest.mark.parametrize("case", ADDON_REFUSALS)
def test_create_addon_refuses(world: World, case: str) -> None:
    request, message = ADDON_REFUSALS[case]
    code, answer = refused(world.eks.create_addon, clusterName=world.cluster(), **request)
    assert (code, message in answer) == ("InvalidParameterException", True)


def test_an_add_on_needs_an_active_cluster_and_is_made_once(world: World) -> None:
    creating = world.cluster(settle=False)
    assert refused(world.eks.create_addon, clusterName=creating, addonName="vpc-cni")[0] == "InvalidRequestException"
    name = world.cluster()
    world.eks.create_addon(clusterName=name, addonName="vpc-cni")
    assert refused(world.eks.create_addon, clusterName=name, addonName="vpc-cni")[0] == "ResourceInUseException"


def test_an_add_on_is_creating_then_active_then_deleting_then_gone(world: World) -> None:
    name = world.cluster()
    created = world.eks.create_addon(clusterName=name, addonName="eks-pod-identity-agent")["addon"]
    assert (created["status"], created["addonVersion"]) == (
        "CREATING",
        eks_emulator.ADDONS["eks-pod-identity-agent"].version,
    )
    assert [addon_of(world, name, "eks-pod-identity-agent")["status"] for _ in range(2)] == ["CREATING", "ACTIVE"]  # type: ignore[index]
    assert world.eks.list_addons(clusterName=name)["addons"] == ["eks-pod-identity-agent"]
    assert world.eks.delete_addon(clusterName=name, addonName="eks-pod-identity-agent")["addon"]["status"] == "DELETING"
    assert [(addon_of(world, name, "eks-pod-identity-agent") or {}).get("status") for _ in range(2)] == [
        "DELETING",
        None,
    ]


def test_an_add_on_that_needs_nodes_is_degraded_until_it_has_some(world: World) -> None:
    name = world.cluster()
    world.eks.create_addon(clusterName=name, addonName="coredns")
    addon_of(world, name, "coredns")
    degraded = addon_of(world, name, "coredns")
    assert degraded is not None and degraded["status"] == "DEGRADED"
    assert [issue["code"] for issue in degraded["health"]["issues"]] == ["InsufficientNumberOfReplicas"]
    # nodes whose taint coredns does not tolerate do not help
    active_nodegroup(world, name, taints=[{"key": "aws.amazon.com/neuron", "effect": "NO_SCHEDULE"}])
    assert (addon_of(world, name, "coredns") or {}).get("status") == "DEGRADED"
    active_nodegroup(world, name)
    healthy = addon_of(world, name, "coredns")
    assert healthy is not None and (healthy["status"], healthy["health"]["issues"]) == ("ACTIVE", [])


def test_an_add_on_given_tolerations_runs_on_tainted_nodes(world: World) -> None:
    name = world.cluster()
    active_nodegroup(world, name, taints=[{"key": "aws.amazon.com/neuron", "effect": "NO_SCHEDULE"}])
    tolerations = [{"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"}]
    world.eks.create_addon(
        clusterName=name,
        addonName="aws-fsx-csi-driver",
        configurationValues=json.dumps({"controller": {"tolerations": tolerations}}),
    )
    assert [(addon_of(world, name, "aws-fsx-csi-driver") or {}).get("status") for _ in range(2)] == [
        "CREATING",
        "ACTIVE",
    ]


# --- node groups ---------------------------------------------------------------------------------


def test_a_node_group_is_creating_once_then_active_with_what_eks_answers(world: World) -> None:
    name = world.cluster()
    created = world.nodegroup(name, amiType="AL2023_x86_64_NEURON", instanceTypes=["trn1.32xlarge"])
    assert (created["status"], created["version"], created["amiType"]) == (
        "CREATING",
        eks_versions.DEFAULT_KUBERNETES_VERSION,
        "AL2023_x86_64_NEURON",
    )
    assert "remoteAccess" not in created and "releaseVersion" not in created
    assert [(nodegroup_of(world, name, created["nodegroupName"]) or {}).get("status") for _ in range(2)] == [
        "CREATING",
        "ACTIVE",
    ]


def test_a_deleted_node_group_is_deleting_then_gone(world: World) -> None:
    name = world.cluster()
    nodegroup = active_nodegroup(world, name)
    assert world.eks.delete_nodegroup(clusterName=name, nodegroupName=nodegroup)["nodegroup"]["status"] == "DELETING"
    assert world.eks.list_nodegroups(clusterName=name)["nodegroups"] == [nodegroup]
    assert world.eks.list_nodegroups(clusterName=name)["nodegroups"] == []
    assert nodegroup_of(world, name, nodegroup) is None


def test_a_launch_template_instance_type_is_the_node_groups(world: World) -> None:
    template = world.launch_template(InstanceType="trn1.32xlarge")
    created = world.nodegroup(world.cluster(), launchTemplate={"id": template})
    assert (created.get("instanceTypes"), created.get("diskSize"), created["amiType"]) == (
        None,
        None,
        "AL2023_x86_64_STANDARD",
    )


NODEGROUP_REFUSALS: dict[str, tuple[Any, str]] = {
    "CAPACITY_BLOCK without a launch template": (
        lambda w: {"capacityType": "CAPACITY_BLOCK"},
        "capacityType CAPACITY_BLOCK: managed node groups with Capacity Blocks need a launch template",
    ),
    "CAPACITY_BLOCK whose launch template is not a capacity block's": (
        lambda w: {
            "capacityType": "CAPACITY_BLOCK",
            "launchTemplate": {"id": w.launch_template(InstanceType="trn1.32xlarge")},
        },
        "lacks InstanceMarketOptions.MarketType capacity-block, "
        "CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId",
    ),
    "a capacity block launch template without CAPACITY_BLOCK": (
        lambda w: {"launchTemplate": {"id": w.capacity_block_template()}},
        "needs capacityType CAPACITY_BLOCK, not ON_DEMAND (the default)",
    ),
    "a launch template by id and by name": (
        lambda w: {"launchTemplate": {"id": "lt-0123456789abcdef0", "name": "nodes"}},
        "launchTemplate: you must specify either the launch template ID or the launch template name",
    ),
    "a launch template that does not exist": (
        lambda w: {"launchTemplate": {"id": "lt-0123456789abcdef0"}},
        "launchTemplate: launch template lt-0123456789abcdef0 does not exist",
    ),
    "a launch template version that does not exist": (
        lambda w: {"launchTemplate": {"id": w.launch_template(InstanceType="m5.large"), "version": "7"}},
        "has no version 7",
    ),
    "an IAM instance profile in the launch template": (
        lambda w: {"launchTemplate": {"id": w.launch_template(IamInstanceProfile={"Name": "nodes"})}},
        "prohibit IamInstanceProfile",
    ),
    "a shutdown behavior in the launch template": (
        lambda w: {"launchTemplate": {"id": w.launch_template(InstanceInitiatedShutdownBehavior="terminate")}},
        "prohibit InstanceInitiatedShutdownBehavior",
    ),
    "hibernation in the launch template": (
        lambda w: {"launchTemplate": {"id": w.launch_template(HibernationOptions={"Configured": True})}},
        "prohibit HibernationOptions",
    ),
    "a subnet in the launch template": (
        lambda w: {
            "launchTemplate": {
                "id": w.launch_template(NetworkInterfaces=[{"DeviceIndex": 0, "SubnetId": w.subnets["us-west-2d"]}])
            }
        },
        "prohibit NetworkInterfaces.SubnetId",
    ),
    "a Spot request in the launch template": (
        lambda w: {"launchTemplate": {"id": w.launch_template(InstanceMarketOptions={"MarketType": "spot"})}},
        "prohibit InstanceMarketOptions.MarketType=spot",
    ),
    "security groups for the instance and its interfaces": (
        lambda w: {
            "launchTemplate": {
                "id": w.launch_template(
                    SecurityGroupIds=[w.group], NetworkInterfaces=[{"DeviceIndex": 0, "Groups": [w.group]}]
                )
            }
        },
        "security groups both for the instance",
    ),
    "instance types in the request and the launch template": (
        lambda w: {
            "instanceTypes": ["trn1.32xlarge"],
            "launchTemplate": {"id": w.launch_template(InstanceType="trn1.32xlarge")},
        },
        "instanceTypes: the launch template has an InstanceType",
    ),
    "an AMI type with a custom AMI": (
        lambda w: {
            "amiType": "AL2023_x86_64_NEURON",
            "launchTemplate": {"id": w.launch_template(ImageId="ami-0123456789abcdef0")},
        },
        "amiType: the launch template has a custom AMI",
    ),
    "an AMI type EKS does not have": (lambda w: {"amiType": "UBUNTU_x86_64"}, "amiType UBUNTU_x86_64 is not one of"),
    "an AL2 AMI type on a Kubernetes version without AL2": (
        lambda w: {"amiType": "AL2_x86_64"},
        f"EKS releases no AL2 AMIs for Kubernetes {eks_versions.DEFAULT_KUBERNETES_VERSION}",
    ),
    "a desired size under the minimum": (
        lambda w: {"scalingConfig": {"minSize": 2, "maxSize": 4, "desiredSize": 1}},
        "scalingConfig: desiredSize 1 is less than minSize 2",
    ),
    "a desired size over the maximum": (
        lambda w: {"scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": 3}},
        "scalingConfig: desiredSize 3 is greater than maxSize 2",
    ),
    "a subnet that does not exist": (
        lambda w: {"subnets": ["subnet-0123456789abcdef0"]},
        "subnets: the subnet ID 'subnet-0123456789abcdef0' does not exist",
    ),
    "a subnet of another VPC": (lambda w: {"subnets": [w.other_vpc_subnet]}, "not the cluster's VPC"),
    "another Kubernetes version": (lambda w: {"version": "1.34"}, "version 1.34 is not the cluster's"),
    "a node role EC2 cannot assume": (
        lambda w: {"nodeRole": w.cluster_role},
        "[ec2.amazonaws.com] were not found in the trust relationships of nodeRole",
    ),
}


@pytest.mark.parametrize("case", NODEGROUP_REFUSALS)
def test_create_nodegroup_refuses(world: World, case: str) -> None:
    change, message = NODEGROUP_REFUSALS[case]
    name = world.cluster()
    code, answer = refused(world.eks.create_nodegroup, **(node_request(world, name) | change(world)))
    assert code == "InvalidParameterException", answer
    assert message in answer


def node_request(world: World, cluster: str) -> dict[str, Any]:
    return {
        "clusterName": cluster,
        "nodegroupName": world.name("ng"),
        "nodeRole": world.node_role,
        "subnets": [world.subnets["us-west-2d"]],
        "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": 1},
    }


def test_update_nodegroup_config_keeps_the_scaling_order(world: World) -> None:
    name = world.cluster()
    nodegroup = active_nodegroup(world, name)
    code, answer = refused(
        world.eks.update_nodegroup_config,
        clusterName=name,
        nodegroupName=nodegroup,
        scalingConfig={"desiredSize": 3},
    )
    assert (code, "desiredSize 3 is greater than maxSize 2" in answer) == ("InvalidParameterException", True)
    world.eks.update_nodegroup_config(clusterName=name, nodegroupName=nodegroup, scalingConfig={"desiredSize": 2})
    scaling = world.eks.describe_nodegroup(clusterName=name, nodegroupName=nodegroup)["nodegroup"]["scalingConfig"]
    assert scaling == {"minSize": 0, "maxSize": 2, "desiredSize": 2}


def test_a_node_group_needs_an_active_cluster(world: World) -> None:
    code, _ = refused(world.eks.create_nodegroup, **node_request(world, world.cluster(settle=False)))
    assert code == "InvalidRequestException"


def settled(world: World, cluster: str, nodegroup: str) -> dict[str, Any]:
    while (found := nodegroup_of(world, cluster, nodegroup)) is not None and found["status"] == "CREATING":
        pass
    assert found is not None
    return found


def capacity_block_nodegroup(world: World, zone: str = "us-west-2d", desired: int = 2) -> dict[str, Any]:
    name = world.cluster()
    created = world.nodegroup(
        name,
        capacityType="CAPACITY_BLOCK",
        launchTemplate={"id": world.capacity_block_template()},
        subnets=[world.subnets[zone]],
        scalingConfig={"minSize": 0, "maxSize": 4, "desiredSize": desired},
        amiType="AL2023_x86_64_NEURON",
    )
    return settled(world, name, created["nodegroupName"])


@pytest.mark.usefixtures("reservation")
def test_a_capacity_block_node_group_that_fits_its_reservation_is_active(world: World) -> None:
    assert capacity_block_nodegroup(world)["status"] == "ACTIVE"


@pytest.mark.usefixtures("reservation")
def test_a_node_group_outside_its_reservations_zone_fails(world: World) -> None:
    failed = capacity_block_nodegroup(world, zone="us-west-2a")
    assert failed["status"] == "CREATE_FAILED"
    [issue] = failed["health"]["issues"]
    assert issue["code"] == "AsgInstanceLaunchFailures"
    assert "is in us-west-2d, and none of the node group's subnets is (us-west-2a)" in issue["message"]


@pytest.mark.usefixtures("reservation")
def test_a_node_group_larger_than_its_reservation_fails(world: World) -> None:
    failed = capacity_block_nodegroup(world, desired=3)
    assert failed["status"] == "CREATE_FAILED"
    assert "ReservationCapacityExceeded" in failed["health"]["issues"][0]["message"]


def test_a_capacity_block_node_group_made_before_its_block_starts_is_active(
    world: World, reservation: dict[str, Any]
) -> None:
    later = datetime.now(UTC) + timedelta(hours=2)
    capacity_emulator.seed(
        AccountFixture.model_validate(
            {"region": REGION, "capacity_reservations": [reservation | {"start_date": later.isoformat()}]}
        )
    )
    assert capacity_block_nodegroup(world)["status"] == "ACTIVE"


# --- reset and the server ------------------------------------------------------------------------


def test_reset_forgets_lifecycles_and_add_ons(world: World) -> None:
    name = world.cluster(settle=False)
    eks_emulator.reset()
    assert status_of(world, name) == "ACTIVE"
    # a cluster the emulator did not see created is CONFIG_MAP, as before access entries
    assert refused(world.eks.list_access_entries, clusterName=name)[0] == "InvalidRequestException"


def through_server_app(client: Any) -> Any:
    """Send the client's requests to the WSGI application ThreadedMotoServer serves
    (DomainDispatcherApplication over create_backend_app), in this process: the server's own URL
    routing, without a socket (unit tests open none, see conftest.no_network)."""
    http = Client(DomainDispatcherApplication(create_backend_app))

    def send(request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        url = urlsplit(request.url)
        answer = http.open(
            url.path,
            query_string=url.query,
            method=request.method,
            headers=list(request.headers.items()),
            data=request.body or b"",
            base_url=f"{url.scheme}://{url.netloc}",
        )
        return AWSResponse(request.url, answer.status_code, dict(answer.headers), MockRawResponse(answer.get_data()))

    # first: before moto's own in-process stubber, which would answer instead of the server's app
    client.meta.events.register_first("before-send", send)
    return client


def test_the_new_actions_route_through_the_servers_url_map(world: World) -> None:
    eks = through_server_app(world.session.client("eks"))
    name = world.cluster()
    principal = world.role(path="/team/ml/")
    eks.create_access_entry(clusterName=name, principalArn=principal)
    eks.associate_access_policy(
        clusterName=name, principalArn=principal, policyArn=ADMIN_POLICY, accessScope={"type": "cluster"}
    )
    listed = eks.list_associated_access_policies(clusterName=name, principalArn=principal)
    assert [p["policyArn"] for p in listed["associatedAccessPolicies"]] == [ADMIN_POLICY]
    eks.disassociate_access_policy(clusterName=name, principalArn=principal, policyArn=ADMIN_POLICY)
    assert (
        eks.describe_access_entry(clusterName=name, principalArn=principal)["accessEntry"]["principalArn"] == principal
    )
    eks.delete_access_entry(clusterName=name, principalArn=principal)
    assert eks.create_addon(clusterName=name, addonName="vpc-cni")["addon"]["status"] == "CREATING"
    assert eks.list_addons(clusterName=name)["addons"] == ["vpc-cni"]
    assert eks.describe_addon_versions(addonName="coredns")["addons"][0]["defaultNamespace"] == "kube-system"
    assert len(eks.list_access_policies()["accessPolicies"]) == len(eks_emulator.ACCESS_POLICIES)
    assert eks.describe_cluster(name=name)["cluster"]["accessConfig"]["authenticationMode"] == "API"
