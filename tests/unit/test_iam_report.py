"""`make iam-report` lists the dependent actions the recorded calls needed, beside the calls."""

from __future__ import annotations

from trainrun.local.iam.calls import CallRecord
from trainrun.local.iam.policy import Request, Resource
from trainrun.local.iam.report import render

VPC = "arn:aws:ec2:us-west-2:123456789012:vpc/vpc-1"
FILE_SYSTEMS = "arn:aws:fsx:us-west-2:123456789012:file-system/*"


def record(action: str, arn: str, *, allowed: bool = True) -> CallRecord:
    return CallRecord(
        principal="CreateFileSystemFunctionRole",
        principal_arn="arn:aws:iam::123456789012:role/CreateFileSystemFunctionRole",
        operation="fsx:CreateFileSystem",
        request=Request(action, (Resource(arn),)),
        allowed=allowed,
        reason="allowed" if allowed else "denied",
    )


def test_the_report_lists_a_dependent_action_with_the_operation_that_needed_it() -> None:
    # Given a CreateFileSystem call and the dependent action it asked, denied
    records = [record("fsx:CreateFileSystem", FILE_SYSTEMS), record("ec2:GetSecurityGroupsForVpc", VPC, allowed=False)]
    # When the report is rendered
    text = render(records, [])
    # Then its dependent actions section names the operation, the action and the resource, denied
    section = text.split("Dependent actions the calls needed (1):\n", 1)[1].split("\n\n", 1)[0]
    assert section.split() == [
        "CreateFileSystemFunctionRole",
        "fsx:CreateFileSystem",
        "->",
        "ec2:GetSecurityGroupsForVpc",
        VPC,
        "DENIED",
    ]
