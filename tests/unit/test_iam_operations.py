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

from trainrun.local.iam.operations import MAPPERS, PERMISSION_ONLY, Call, UnmappedOperation, describe

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
