"""Every AWS operation the code calls has an IAM mapping, and the mappings ask what AWS asks."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import boto3
import botocore.session
import pytest
from botocore import xform_name
from moto import mock_aws

from trainrun.local.iam.enforcement import Enforcer
from trainrun.local.iam.operations import MAPPERS, PERMISSION_ONLY, Call, UnmappedOperation, describe
from trainrun.local.iam.policy import PolicySet
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
