"""Every AWS operation the code calls has an IAM mapping, and the mappings ask what AWS asks."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import boto3
import botocore.session
import pytest
from botocore import xform_name
from moto import mock_aws

from trainrun.local import eks_emulator
from trainrun.local.iam.enforcement import Enforcer
from trainrun.local.iam.operations import MAPPERS, PERMISSION_ONLY, Call, UnmappedOperation, describe
from trainrun.local.iam.policy import PolicySet, Request
from trainrun.local.iam.principals import Principal, Principals

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "layers" / "common" / "trainrun"
# IAM prefix -> botocore service, for every service the code reaches.
SERVICES = {
    "ec2": "ec2",
    "s3": "s3",
    "lambda": "lambda",
    "dynamodb": "dynamodb",
    "logs": "logs",
    "states": "stepfunctions",
    "ssm": "ssm",
    "fsx": "fsx",
    "events": "events",
    "sns": "sns",
    "sqs": "sqs",
    "sts": "sts",
    "cloudformation": "cloudformation",
    "resource-groups": "resource-groups",
    "tag": "resourcegroupstaggingapi",
    "cloudwatch": "cloudwatch",
    "xray": "xray",
    "eks": "eks",
}
REGION, ACCOUNT = "us-west-2", "123456789012"


def _operations() -> dict[str, set[str]]:
    """snake_case method name -> the "<prefix>:<Operation>" names it may be."""
    session = botocore.session.get_session()
    names: dict[str, set[str]] = {}
    for prefix, service in SERVICES.items():
        for operation in session.get_service_model(service).operation_names:
            names.setdefault(xform_name(operation), set()).add(f"{prefix}:{operation}")
    return names


def _sources() -> Iterator[Path]:
    # What runs as a principal: the handlers' package, the operator commands and the local
    # ParallelCluster API (not the runtime's own setup, which is the admin's).
    for path in SOURCES.rglob("*.py"):
        if "local" not in path.relative_to(SOURCES).parts or path.name == "pcluster_api.py":
            yield path
    yield from (ROOT / "functions").rglob("*.py")


def test_every_aws_operation_the_code_calls_has_an_iam_mapping() -> None:
    # Given every client method the code names (a call, a method passed to aws_errors.call, a
    # paginator's or inventory table's operation name)
    operations = _operations()
    called: dict[str, set[str]] = {}
    for path in _sources():
        text = path.read_text()
        for name in re.findall(r"\.([a-z][a-z0-9_]+)\b", text) + re.findall(r'"([a-z][a-z_0-9]+)"', text):
            if name in operations:
                called.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert "describe_subnets" in called and "send_command" in called  # the scan sees the adapters
    # Then each is mapped for at least one of the services that has an operation of that name
    unmapped = {name: sorted(files) for name, files in called.items() if not operations[name] & set(MAPPERS)}
    assert unmapped == {}


def test_the_head_node_scripts_aws_cli_commands_have_iam_mappings() -> None:
    commands = set()
    for path in [SOURCES / "logic" / "head_node_scripts.py", *ROOT.rglob("layers/**/*.sh")]:
        commands |= set(re.findall(r"\baws (s3|logs|ssm|ec2|sts) ([a-z0-9-]+)", path.read_text()))
    # `aws s3 cp` and `aws s3 sync` are S3's object and listing calls, mapped under their API names.
    for service, command in commands:
        if service == "s3":
            assert {"s3:GetObject", "s3:HeadObject", "s3:ListObjectsV2", "s3:PutObject"} <= set(MAPPERS)
        else:
            operation = "".join(part.capitalize() for part in command.split("-"))
            assert f"{service}:{operation}" in MAPPERS, f"aws {service} {command}"


def test_every_mapping_names_a_real_operation() -> None:
    session = botocore.session.get_session()
    for name in set(MAPPERS) - set(PERMISSION_ONLY):
        prefix, operation = name.split(":")
        assert operation in session.get_service_model(SERVICES[prefix]).operation_names, name


@pytest.mark.parametrize("operation", ["SendMessage", "ReceiveMessage", "GetQueueAttributes"])
def test_a_queue_call_is_authorized_on_the_queue_its_url_names(operation: str) -> None:
    # Given a call on a queue, named by its URL (any endpoint: the local server's or SQS's)
    url = f"http://127.0.0.1:5000/{ACCOUNT}/undelivered"
    # Then IAM is asked about that queue's ARN
    (request,) = describe(Call("sqs", operation, {"QueueUrl": url}, REGION, ACCOUNT))
    assert request.action == f"sqs:{operation}"
    assert [resource.arn for resource in request.resources] == [f"arn:aws:sqs:{REGION}:{ACCOUNT}:undelivered"]


def test_an_operation_without_a_mapping_is_refused_not_passed() -> None:
    with pytest.raises(UnmappedOperation, match=r"ec2:CreateKeyPair has no IAM mapping"):
        describe(Call("ec2", "CreateKeyPair", {"KeyName": "k"}, REGION, ACCOUNT))


@mock_aws
def test_a_create_carries_request_tags_on_the_new_resource_only_and_the_parents_own_tags() -> None:
    # Given a VPC tagged with a run id
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(
        CidrBlock="10.0.0.0/16",
        TagSpecifications=[{"ResourceType": "vpc", "Tags": [{"Key": "trainrun:run-id", "Value": "r1"}]}],
    )["Vpc"]["VpcId"]
    tags = [{"ResourceType": "subnet", "Tags": [{"Key": "trainrun:run-id", "Value": "r1"}]}]
    # When CreateSubnet in it is described for IAM
    create, tag_on_create = describe(
        Call("ec2", "CreateSubnet", {"VpcId": vpc, "TagSpecifications": tags}, REGION, ACCOUNT)
    )
    # Then the new subnet carries the request's tags, the VPC its own tags and no request tags
    subnet, parent = create.resources
    assert subnet.arn == f"arn:aws:ec2:{REGION}:{ACCOUNT}:subnet/*"
    assert subnet.request_tags == {"trainrun:run-id": "r1"}
    assert parent.arn == f"arn:aws:ec2:{REGION}:{ACCOUNT}:vpc/{vpc}"
    assert parent.tags == {"trainrun:run-id": "r1"} and parent.request_tags is None
    # And tagging on create is asked apart, as EC2 asks it
    assert tag_on_create.action == "ec2:CreateTags"
    assert tag_on_create.context == {"ec2:CreateAction": "CreateSubnet"}


def test_an_action_without_resource_types_is_asked_against_star() -> None:
    (request,) = describe(Call("states", "SendTaskSuccess", {"taskToken": "t"}, REGION, ACCOUNT))
    assert request.action == "states:SendTaskSuccess" and request.resources == ()


def test_reading_a_named_version_asks_get_object_version() -> None:
    params = {"Bucket": "b", "Key": "runs/a.yaml", "VersionId": "v1"}
    (request,) = describe(Call("s3", "GetObject", params, REGION, ACCOUNT))
    assert request.action == "s3:GetObjectVersion"
    assert [r.arn for r in request.resources] == ["arn:aws:s3:::b/runs/a.yaml"]


def test_a_permission_only_action_is_mapped_and_names_no_api_operation() -> None:
    # Given the actions AWS checks with no API call of their own
    session = botocore.session.get_session()
    for name in PERMISSION_ONLY:
        prefix, operation = name.split(":")
        # Then each is mapped (the enforcer can authorize it) and no API operation carries its name
        assert name in MAPPERS
        assert operation not in session.get_service_model(SERVICES[prefix]).operation_names, name


def test_linking_an_s3_bucket_asks_the_service_linked_role_and_the_callers_list_bucket() -> None:
    params = {
        "FileSystemId": "fs-0123456789abcdef0",
        "DataRepositoryPath": "s3://datasets/bert/",
        "FileSystemPath": "/data",
    }
    requests = describe(Call("fsx", "CreateDataRepositoryAssociation", params, REGION, ACCOUNT))
    asked = {request.action: [r.arn for r in request.resources] for request in requests}
    # FSx checks the caller may list the linked bucket, and makes a role for the link per file system.
    assert asked["s3:ListBucket"] == ["arn:aws:s3:::datasets"]
    assert asked["iam:CreateServiceLinkedRole"] == [
        f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/"
        "AWSServiceRoleForFSxS3Access_fs-0123456789abcdef0"
    ]


# --- dependent actions (the Service Authorization Reference's "Dependent actions" column) -------


@mock_aws
def test_creating_a_file_system_asks_its_dependent_action_on_the_vpc_of_its_subnet() -> None:
    # Given a subnet in a VPC
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    params = {"FileSystemType": "LUSTRE", "StorageCapacity": 1200, "SubnetIds": [subnet]}
    # When CreateFileSystem in it is described for IAM
    requests = describe(Call("fsx", "CreateFileSystem", params, REGION, ACCOUNT))
    asked = {request.action: [r.arn for r in request.resources] for request in requests}
    # Then the reference's dependent action is asked too, on the file system's VPC
    assert asked["ec2:GetSecurityGroupsForVpc"] == [f"arn:aws:ec2:{REGION}:{ACCOUNT}:vpc/{vpc}"]
    # And tagging, a dependent action only when the call sets tags, is not asked without tags
    assert "fsx:TagResource" not in asked


def test_describing_a_stack_asks_its_dependent_action_against_star() -> None:
    requests = describe(Call("cloudformation", "DescribeStacks", {"StackName": "trainrun"}, REGION, ACCOUNT))
    assert [(r.action, r.resources) for r in requests[1:]] == [("cloudformation:ListStacks", ())]


def test_a_dependent_action_aws_checks_only_for_a_final_backup_is_not_asked_without_one() -> None:
    without = describe(Call("fsx", "DeleteFileSystem", {"FileSystemId": "fs-1"}, REGION, ACCOUNT))
    with_backup = describe(
        Call(
            "fsx",
            "DeleteFileSystem",
            {"FileSystemId": "fs-1", "LustreConfiguration": {"SkipFinalBackup": False}},
            REGION,
            ACCOUNT,
        )
    )
    assert [r.action for r in without] == ["fsx:DeleteFileSystem"]
    assert [r.action for r in with_backup] == ["fsx:DeleteFileSystem", "fsx:CreateBackup"]


@mock_aws
def test_a_gateway_endpoint_asks_no_private_dns_association_an_interface_endpoint_does() -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    service = f"com.amazonaws.{REGION}.s3"

    def asked(params: dict[str, object]) -> list[str]:
        return [r.action for r in describe(Call("ec2", "CreateVpcEndpoint", params, REGION, ACCOUNT))]

    gateway = asked({"VpcId": vpc, "ServiceName": service, "VpcEndpointType": "Gateway"})
    interface = asked({"VpcId": vpc, "ServiceName": service, "VpcEndpointType": "Interface"})
    assert "route53:AssociateVPCWithHostedZone" not in gateway
    assert "route53:AssociateVPCWithHostedZone" in interface
    # The describe calls the reference lists are asked either way
    assert {"ec2:DescribeSecurityGroups", "ec2:DescribeSubnets", "ec2:DescribeVpcs"} <= set(gateway)


@mock_aws
def test_a_launch_asks_to_pass_a_role_only_when_it_names_an_instance_profile() -> None:
    # Given an instance profile with a role, and an AMI
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName="node", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    iam.create_instance_profile(InstanceProfileName="node")
    iam.add_role_to_instance_profile(InstanceProfileName="node", RoleName="node")
    ec2 = boto3.client("ec2", region_name=REGION)
    image = ec2.register_image(Name="node", RootDeviceName="/dev/sda1")["ImageId"]
    plain = {"ImageId": image, "MinCount": 1, "MaxCount": 1}

    def asked(params: dict[str, object]) -> dict[str, list[str]]:
        requests = describe(Call("ec2", "RunInstances", params, REGION, ACCOUNT))
        return {r.action: [resource.arn for resource in r.resources] for r in requests}

    # When a launch without, then with the profile is described for IAM
    # Then only the second passes a role: the profile's
    assert "iam:PassRole" not in asked(plain)
    assert asked({**plain, "IamInstanceProfile": {"Name": "node"}})["iam:PassRole"] == [role]


@mock_aws
def test_a_denied_dependent_action_refuses_the_call_naming_that_action(tmp_path: Path) -> None:
    # Given a role allowed fsx:CreateFileSystem (and tagging it) but not the dependent action
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    statement = {"Effect": "Allow", "Action": ["fsx:CreateFileSystem", "iam:CreateServiceLinkedRole"], "Resource": "*"}
    policies = PolicySet("Fn", [{"Version": "2012-10-17", "Statement": [statement]}])
    role = Principal("Fn", f"arn:aws:iam::{ACCOUNT}:role/Fn", policies)
    enforcer = Enforcer(Principals(ACCOUNT), tmp_path / "calls.jsonl")
    # When it creates a file system in the subnet
    call = Call("fsx", "CreateFileSystem", {"FileSystemType": "LUSTRE", "SubnetIds": [subnet]}, REGION, ACCOUNT)
    denial = enforcer.authorize(role, call)
    # Then the call is refused on the dependent action, on the file system's VPC, and that is recorded
    assert denial is not None and not denial.allowed
    assert (denial.action, denial.resource) == (
        "ec2:GetSecurityGroupsForVpc",
        f"arn:aws:ec2:{REGION}:{ACCOUNT}:vpc/{vpc}",
    )
    assert [(r.action, r.allowed) for r in enforcer.calls][-1] == ("ec2:GetSecurityGroupsForVpc", False)


# --- Amazon EKS and EC2 launch templates --------------------------------------------------------
EKS = f"arn:aws:eks:{REGION}:{ACCOUNT}"
EC2 = f"arn:aws:ec2:{REGION}:{ACCOUNT}"
RUN_TAGS = {"trainrun:run-id": "r1"}
EKS_ROLE = f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/eks.amazonaws.com/AWSServiceRoleForAmazonEKS"
NODEGROUP_ROLE = (
    f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/eks-nodegroup.amazonaws.com/AWSServiceRoleForAmazonEKSNodegroup"
)
ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"


def by_action(requests: list[Request]) -> dict[str, Request]:
    return {request.action: request for request in requests}


def arns(request: Request) -> list[str]:
    return [resource.arn for resource in request.resources]


def _trust(service: str) -> str:
    statement = {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


@dataclass
class EksRun:
    """A run's EKS cluster as the emulator holds it, with what hangs on it, each tagged with the run."""

    cluster: str
    cluster_role: str
    node_role: str
    kubernetes_role: str
    subnet: str
    group: str
    template_id: str
    template_name: str
    nodegroup: str


@pytest.fixture
def eks_run() -> Iterator[EksRun]:
    with mock_aws():
        eks_emulator.install()
        ec2, iam, eks = (boto3.client(s, region_name=REGION) for s in ("ec2", "iam", "eks"))
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnets = [
            ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{n}.0/24", AvailabilityZone=zone)["Subnet"]["SubnetId"]
            for n, zone in enumerate(("us-west-2a", "us-west-2b"))
        ]
        group = ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc)["GroupId"]
        roles = [
            iam.create_role(RoleName=name, AssumeRolePolicyDocument=_trust(service))["Role"]["Arn"]
            for name, service in (("cluster", "eks.amazonaws.com"), ("node", "ec2.amazonaws.com"), ("k8s", "x"))
        ]
        cluster = "trainrun-r1"
        eks.create_cluster(
            name=cluster,
            roleArn=roles[0],
            resourcesVpcConfig={"subnetIds": subnets},
            accessConfig={"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": False},
            tags=RUN_TAGS,
        )
        while eks.describe_cluster(name=cluster)["cluster"]["status"] != "ACTIVE":
            pass
        eks.create_access_entry(clusterName=cluster, principalArn=roles[2], tags=RUN_TAGS)
        eks.create_addon(clusterName=cluster, addonName="vpc-cni", tags=RUN_TAGS)
        instance_tags = [{"Key": "trainrun:run-id", "Value": "r1"}]
        template = ec2.create_launch_template(
            LaunchTemplateName=f"{cluster}-nodes",
            LaunchTemplateData={
                "InstanceType": "trn1.32xlarge",
                "NetworkInterfaces": [{"DeviceIndex": 0, "Groups": [group]}],
                "CapacityReservationSpecification": {"CapacityReservationTarget": {"CapacityReservationId": "cr-1"}},
                "TagSpecifications": [
                    {"ResourceType": "instance", "Tags": instance_tags},
                    {"ResourceType": "volume", "Tags": instance_tags},
                ],
            },
            TagSpecifications=[{"ResourceType": "launch-template", "Tags": instance_tags}],
        )["LaunchTemplate"]
        eks.create_nodegroup(
            clusterName=cluster,
            nodegroupName="nodes",
            nodeRole=roles[1],
            subnets=[subnets[1]],
            launchTemplate={"name": template["LaunchTemplateName"], "version": "1"},
            scalingConfig={"minSize": 1, "maxSize": 1, "desiredSize": 1},
            tags=RUN_TAGS,
        )
        yield EksRun(
            cluster=cluster,
            cluster_role=roles[0],
            node_role=roles[1],
            kubernetes_role=roles[2],
            subnet=subnets[1],
            group=group,
            template_id=template["LaunchTemplateId"],
            template_name=template["LaunchTemplateName"],
            nodegroup="nodes",
        )
        eks_emulator.reset()


def _create_cluster(**changes: object) -> Call:
    params = {
        "name": "trainrun-r1",
        "roleArn": f"arn:aws:iam::{ACCOUNT}:role/cluster",
        "accessConfig": {"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": False},
        "tags": RUN_TAGS,
    }
    return Call("eks", "CreateCluster", {**params, **changes}, REGION, ACCOUNT)


@mock_aws
def test_creating_a_cluster_is_asked_against_star_with_its_tags_its_tagging_and_the_role_it_passes() -> None:
    asked = by_action(describe(_create_cluster()))
    # The reference gives eks:CreateCluster no resource type: "*", the request's tags its condition keys
    create = asked["eks:CreateCluster"]
    assert create.resources == ()
    assert create.context == {"aws:RequestTag/trainrun:run-id": "r1", "aws:TagKeys": ["trainrun:run-id"]}
    # Tagging on create, on the cluster's ARN (its name makes it), with the tags being set
    (tagged,) = asked["eks:TagResource"].resources
    assert (tagged.arn, tagged.request_tags) == (f"{EKS}:cluster/trainrun-r1", RUN_TAGS)
    # The cluster role is passed to EKS
    assert arns(asked["iam:PassRole"]) == [f"arn:aws:iam::{ACCOUNT}:role/cluster"]
    assert asked["iam:PassRole"].context == {"iam:PassedToService": "eks.amazonaws.com"}
    # EKS's service-linked role, absent from the account, is created with the caller's permission
    assert arns(asked["iam:CreateServiceLinkedRole"]) == [EKS_ROLE]
    assert asked["iam:CreateServiceLinkedRole"].context == {"iam:AWSServiceName": "eks.amazonaws.com"}
    # No creator admin entry: the request turns it off
    assert "eks:CreateAccessEntry" not in asked


@mock_aws
def test_a_cluster_without_tags_asks_no_tagging() -> None:
    asked = by_action(describe(_create_cluster(tags={})))
    assert "eks:TagResource" not in asked
    assert asked["eks:CreateCluster"].context == {"aws:TagKeys": []}


def test_a_request_tag_condition_holds_on_create_cluster_though_it_has_no_resource() -> None:
    # Given a grant of eks:CreateCluster on "*" only with the run tag
    statement = {
        "Effect": "Allow",
        "Action": "eks:CreateCluster",
        "Resource": "*",
        "Condition": {"Null": {"aws:RequestTag/trainrun:run-id": "false"}},
    }
    policy = PolicySet("Fn", [{"Version": "2012-10-17", "Statement": [statement]}])
    with mock_aws():
        tagged = by_action(describe(_create_cluster()))["eks:CreateCluster"]
        untagged = by_action(describe(_create_cluster(tags={})))["eks:CreateCluster"]
    # Then the tagged create is allowed and the untagged one denied
    assert policy.evaluate(tagged).allowed
    assert not policy.evaluate(untagged).allowed
    # And a grant on the cluster's ARN allows neither: the action takes no resource-level permission
    scoped = PolicySet("Fn", [{"Version": "2012-10-17", "Statement": [{**statement, "Resource": f"{EKS}:cluster/*"}]}])
    assert not scoped.evaluate(tagged).allowed


@mock_aws
@pytest.mark.parametrize(
    ("access", "asked"),
    [
        ({"authenticationMode": "API"}, True),
        ({"authenticationMode": "API_AND_CONFIG_MAP", "bootstrapClusterCreatorAdminPermissions": True}, True),
        ({"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": False}, False),
        ({}, False),  # CONFIG_MAP: no access entries
    ],
)
def test_the_creators_admin_entry_is_asked_when_the_cluster_makes_one(access: dict[str, object], asked: bool) -> None:
    requests = by_action(describe(_create_cluster(accessConfig=access)))
    assert ("eks:CreateAccessEntry" in requests) is asked
    if asked:
        assert arns(requests["eks:CreateAccessEntry"]) == [f"{EKS}:cluster/trainrun-r1"]


@mock_aws
@pytest.mark.parametrize(
    ("call", "role_path", "role_name"),
    [
        (_create_cluster(), "/aws-service-role/eks.amazonaws.com/", "AWSServiceRoleForAmazonEKS"),
        (
            Call(
                "eks",
                "CreateNodegroup",
                {"clusterName": "c", "nodegroupName": "n", "nodeRole": f"arn:aws:iam::{ACCOUNT}:role/node"},
                REGION,
                ACCOUNT,
            ),
            "/aws-service-role/eks-nodegroup.amazonaws.com/",
            "AWSServiceRoleForAmazonEKSNodegroup",
        ),
    ],
)
def test_a_service_linked_role_is_asked_only_while_the_account_has_none(
    call: Call, role_path: str, role_name: str
) -> None:
    assert "iam:CreateServiceLinkedRole" in by_action(describe(call))
    # Once the role exists
    boto3.client("iam", region_name=REGION).create_role(
        RoleName=role_name, Path=role_path, AssumeRolePolicyDocument=_trust(role_path.split("/")[2])
    )
    # Then no create is asked
    assert "iam:CreateServiceLinkedRole" not in by_action(describe(call))


def test_a_node_group_is_asked_on_its_cluster_with_its_tags_its_role_and_a_launch_from_its_template(
    eks_run: EksRun,
) -> None:
    params = {
        "clusterName": eks_run.cluster,
        "nodegroupName": "more-nodes",
        "nodeRole": eks_run.node_role,
        "subnets": [eks_run.subnet],
        "launchTemplate": {"name": eks_run.template_name, "version": "1"},
        "tags": RUN_TAGS,
    }
    requests = describe(Call("eks", "CreateNodegroup", params, REGION, ACCOUNT))
    asked = by_action(requests)
    # The cluster, with its own tags and the request's
    (cluster,) = asked["eks:CreateNodegroup"].resources
    assert (cluster.arn, cluster.tags, cluster.request_tags) == (f"{EKS}:cluster/{eks_run.cluster}", RUN_TAGS, RUN_TAGS)
    # Tagging the new node group, whose UUID EKS has yet to give it
    assert arns(asked["eks:TagResource"]) == [f"{EKS}:nodegroup/{eks_run.cluster}/more-nodes/*"]
    # The node role, passed to EKS; the node groups' service-linked role
    assert arns(asked["iam:PassRole"]) == [eks_run.node_role]
    assert asked["iam:PassRole"].context == {"iam:PassedToService": "eks.amazonaws.com"}
    assert arns(asked["iam:CreateServiceLinkedRole"]) == [NODEGROUP_ROLE]
    # Reading the template's version, and a launch from it: the template with its tags, what it
    # launches with the tags it gives them, the node group's subnet, what the template names
    assert asked["ec2:DescribeLaunchTemplateVersions"].resources == ()
    launch = asked["ec2:RunInstances"]
    assert arns(launch) == [
        f"{EC2}:launch-template/{eks_run.template_id}",
        f"{EC2}:instance/*",
        f"{EC2}:volume/*",
        f"{EC2}:network-interface/*",
        f"{EC2}:subnet/{eks_run.subnet}",
        f"{EC2}:security-group/{eks_run.group}",
        f"{EC2}:capacity-reservation/cr-1",
    ]
    assert launch.resources[0].tags == RUN_TAGS
    assert [r.request_tags for r in launch.resources[1:4]] == [RUN_TAGS, RUN_TAGS, {}]
    tag_on_launch = [r for r in requests if r.action == "ec2:CreateTags"]
    assert [(arns(r), r.context) for r in tag_on_launch] == [
        ([f"{EC2}:instance/*"], {"ec2:CreateAction": "RunInstances"}),
        ([f"{EC2}:volume/*"], {"ec2:CreateAction": "RunInstances"}),
    ]


def test_a_node_group_without_a_launch_template_asks_no_launch(eks_run: EksRun) -> None:
    params = {"clusterName": eks_run.cluster, "nodegroupName": "plain", "nodeRole": eks_run.node_role}
    asked = by_action(describe(Call("eks", "CreateNodegroup", params, REGION, ACCOUNT)))
    assert not {"ec2:RunInstances", "ec2:DescribeLaunchTemplateVersions", "eks:TagResource"} & set(asked)


def test_an_add_on_is_asked_on_its_cluster_and_passes_only_a_role_it_names(eks_run: EksRun) -> None:
    params = {"clusterName": eks_run.cluster, "addonName": "coredns", "tags": RUN_TAGS}
    asked = by_action(describe(Call("eks", "CreateAddon", params, REGION, ACCOUNT)))
    (cluster,) = asked["eks:CreateAddon"].resources
    assert (cluster.arn, cluster.tags, cluster.request_tags) == (f"{EKS}:cluster/{eks_run.cluster}", RUN_TAGS, RUN_TAGS)
    assert arns(asked["eks:TagResource"]) == [f"{EKS}:addon/{eks_run.cluster}/coredns/*"]
    assert "iam:PassRole" not in asked
    # With a service account role, that role is passed to EKS
    with_role = by_action(
        describe(Call("eks", "CreateAddon", {**params, "serviceAccountRoleArn": eks_run.node_role}, REGION, ACCOUNT))
    )
    assert arns(with_role["iam:PassRole"]) == [eks_run.node_role]
    assert with_role["iam:PassRole"].context == {"iam:PassedToService": "eks.amazonaws.com"}
    # Pod identity associations pass roles this mapping does not know: refused, not let through
    identities = {**params, "podIdentityAssociations": [{"serviceAccount": "s", "roleArn": eks_run.node_role}]}
    with pytest.raises(UnmappedOperation, match="podIdentityAssociations"):
        describe(Call("eks", "CreateAddon", identities, REGION, ACCOUNT))


def test_an_access_entry_is_asked_on_its_cluster_with_its_principal(eks_run: EksRun) -> None:
    principal = f"arn:aws:iam::{ACCOUNT}:role/team/ml/reader"
    params = {"clusterName": eks_run.cluster, "principalArn": principal, "tags": RUN_TAGS}
    asked = by_action(describe(Call("eks", "CreateAccessEntry", params, REGION, ACCOUNT)))
    create = asked["eks:CreateAccessEntry"]
    assert arns(create) == [f"{EKS}:cluster/{eks_run.cluster}"] and create.resources[0].request_tags == RUN_TAGS
    assert create.context == {"eks:principalArn": principal, "eks:accessEntryType": "STANDARD"}
    # The new entry's ARN: the cluster, the principal's type, account and name (no path), a UUID to come
    assert arns(asked["eks:TagResource"]) == [f"{EKS}:access-entry/{eks_run.cluster}/role/{ACCOUNT}/reader/*"]
    with pytest.raises(UnmappedOperation, match="EC2_LINUX"):
        describe(Call("eks", "CreateAccessEntry", {**params, "type": "EC2_LINUX"}, REGION, ACCOUNT))


def test_associating_an_access_policy_is_asked_on_the_entry_as_the_emulator_holds_it(eks_run: EksRun) -> None:
    entry = boto3.client("eks", region_name=REGION).describe_access_entry(
        clusterName=eks_run.cluster, principalArn=eks_run.kubernetes_role
    )["accessEntry"]
    # The principal's ARN arrives percent-encoded, as a URI label
    params = {
        "clusterName": eks_run.cluster,
        "principalArn": quote(eks_run.kubernetes_role, safe=""),
        "policyArn": ADMIN_POLICY,
        "accessScope": {"type": "cluster"},
    }
    (request,) = describe(Call("eks", "AssociateAccessPolicy", params, REGION, ACCOUNT))
    assert request.action == "eks:AssociateAccessPolicy"
    (resource,) = request.resources
    assert (resource.arn, resource.tags) == (entry["accessEntryArn"], RUN_TAGS)
    assert request.context == {"eks:policyArn": ADMIN_POLICY, "eks:accessScope": "cluster"}


@pytest.mark.parametrize(
    ("operation", "params", "kind"),
    [
        ("DescribeCluster", {"name": "trainrun-r1"}, "cluster"),
        ("DeleteCluster", {"name": "trainrun-r1"}, "cluster"),
        ("ListNodegroups", {"clusterName": "trainrun-r1"}, "cluster"),
        ("ListAddons", {"clusterName": "trainrun-r1"}, "cluster"),
        ("DescribeNodegroup", {"clusterName": "trainrun-r1", "nodegroupName": "nodes"}, "nodegroup"),
        ("DeleteNodegroup", {"clusterName": "trainrun-r1", "nodegroupName": "nodes"}, "nodegroup"),
        ("DescribeAddon", {"clusterName": "trainrun-r1", "addonName": "vpc-cni"}, "addon"),
        ("DeleteAddon", {"clusterName": "trainrun-r1", "addonName": "vpc-cni"}, "addon"),
    ],
)
def test_a_call_on_an_eks_resource_is_asked_on_its_arn_with_its_tags(
    eks_run: EksRun, operation: str, params: dict[str, str], kind: str
) -> None:
    eks = boto3.client("eks", region_name=REGION)
    arn = {
        "cluster": lambda: eks.describe_cluster(name="trainrun-r1")["cluster"]["arn"],
        "nodegroup": lambda: eks.describe_nodegroup(clusterName="trainrun-r1", nodegroupName="nodes")["nodegroup"][
            "nodegroupArn"
        ],
        "addon": lambda: eks.describe_addon(clusterName="trainrun-r1", addonName="vpc-cni")["addon"]["addonArn"],
    }[kind]()
    (request,) = describe(Call("eks", operation, params, REGION, ACCOUNT))
    assert request.action == f"eks:{operation}"
    assert [(r.arn, r.tags) for r in request.resources] == [(arn, RUN_TAGS)]


@mock_aws
@pytest.mark.parametrize(
    ("operation", "params", "arn"),
    [
        ("DescribeCluster", {"name": "gone"}, f"{EKS}:cluster/gone"),
        ("DescribeNodegroup", {"clusterName": "gone", "nodegroupName": "n"}, f"{EKS}:nodegroup/gone/n/*"),
        ("DeleteAddon", {"clusterName": "gone", "addonName": "a"}, f"{EKS}:addon/gone/a/*"),
    ],
)
def test_a_call_on_an_eks_resource_that_is_gone_is_asked_on_the_arn_it_had_without_tags(
    operation: str, params: dict[str, str], arn: str
) -> None:
    (request,) = describe(Call("eks", operation, params, REGION, ACCOUNT))
    assert [(r.arn, r.tags) for r in request.resources] == [(arn, {})]


@mock_aws
def test_creating_a_launch_template_is_asked_on_the_new_template_with_its_tags_and_tagging() -> None:
    tags = [{"Key": "trainrun:run-id", "Value": "r1"}]
    params = {
        "LaunchTemplateName": "trainrun-r1-nodes",
        "LaunchTemplateData": {"TagSpecifications": [{"ResourceType": "instance", "Tags": tags}]},
        "TagSpecifications": [{"ResourceType": "launch-template", "Tags": tags}],
    }
    create, tag_on_create = describe(Call("ec2", "CreateLaunchTemplate", params, REGION, ACCOUNT))
    (new,) = create.resources
    assert (create.action, new.arn, new.request_tags) == (
        "ec2:CreateLaunchTemplate",
        f"{EC2}:launch-template/*",
        RUN_TAGS,
    )
    assert (tag_on_create.action, arns(tag_on_create)) == ("ec2:CreateTags", [f"{EC2}:launch-template/*"])
    assert tag_on_create.context == {"ec2:CreateAction": "CreateLaunchTemplate"}
    # An AMI given as a Systems Manager parameter is read with the caller's permission
    ssm = {**params, "LaunchTemplateData": {"ImageId": "resolve:ssm:/aws/service/eks/optimized-ami/x"}}
    asked = by_action(describe(Call("ec2", "CreateLaunchTemplate", ssm, REGION, ACCOUNT)))
    assert arns(asked["ssm:GetParameters"]) == [f"arn:aws:ssm:{REGION}::parameter/aws/service/eks/optimized-ami/x"]


def test_a_launch_template_is_described_against_star_and_deleted_by_name_on_its_arn(eks_run: EksRun) -> None:
    (described,) = describe(
        Call("ec2", "DescribeLaunchTemplates", {"LaunchTemplateNames": [eks_run.template_name]}, REGION, ACCOUNT)
    )
    assert (described.action, described.resources) == ("ec2:DescribeLaunchTemplates", ())
    (deleted,) = describe(
        Call("ec2", "DeleteLaunchTemplate", {"LaunchTemplateName": eks_run.template_name}, REGION, ACCOUNT)
    )
    assert [(r.arn, r.tags) for r in deleted.resources] == [(f"{EC2}:launch-template/{eks_run.template_id}", RUN_TAGS)]
    # A name that names no template: EC2 answers it NotFound, nothing is asked
    assert describe(Call("ec2", "DeleteLaunchTemplate", {"LaunchTemplateName": "gone"}, REGION, ACCOUNT)) == []


def test_every_eks_and_launch_template_call_of_the_workflow_is_mapped() -> None:
    called = {
        *(
            f"eks:{name}"
            for name in (
                "CreateCluster",
                "DescribeCluster",
                "CreateAccessEntry",
                "AssociateAccessPolicy",
                "CreateNodegroup",
                "DescribeNodegroup",
                "CreateAddon",
                "DescribeAddon",
                "ListNodegroups",
                "ListAddons",
                "DeleteNodegroup",
                "DeleteAddon",
                "DeleteCluster",
                "ListClusters",
            )
        ),
        "ec2:CreateLaunchTemplate",
        "ec2:DescribeLaunchTemplates",
        "ec2:DeleteLaunchTemplate",
        "ec2:DescribeAvailabilityZones",
    }
    assert called - set(MAPPERS) == set()


def test_a_node_group_on_a_template_targeting_a_reservation_group_launches_on_that_group(eks_run: EksRun) -> None:
    group = f"arn:aws:resource-groups:{REGION}:{ACCOUNT}:group/trn1-pool"
    boto3.client("ec2", region_name=REGION).create_launch_template(
        LaunchTemplateName="grouped",
        LaunchTemplateData={
            "CapacityReservationSpecification": {
                "CapacityReservationTarget": {"CapacityReservationResourceGroupArn": group}
            }
        },
    )
    params = {"clusterName": eks_run.cluster, "nodegroupName": "n", "launchTemplate": {"name": "grouped"}}
    launch = by_action(describe(Call("eks", "CreateNodegroup", params, REGION, ACCOUNT)))["ec2:RunInstances"]
    assert arns(launch)[-1] == group
