"""The local IAM evaluator: AWS's policy evaluation logic, one rule per test."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainrun.local.iam import service_authorization as sar
from trainrun.local.iam.policy import (
    PolicySet,
    Request,
    Resource,
    arn_matches,
    glob_match,
    resource_policy_denial,
)

pytestmark = pytest.mark.usefixtures("no_network")

ACCOUNT = "123456789012"
VPC = f"arn:aws:ec2:us-west-2:{ACCOUNT}:vpc/vpc-0123456789abcdef0"
NEW_SUBNET = f"arn:aws:ec2:us-west-2:{ACCOUNT}:subnet/*"
RUN_TAG = {"trainrun:run-id": "r1"}


def allow(action: Any, resource: Any = "*", condition: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    statement: dict[str, Any] = {"Effect": "Allow", "Action": action, "Resource": resource, **extra}
    if condition:
        statement["Condition"] = condition
    return statement


def policies(*statements: dict[str, Any]) -> PolicySet:
    return PolicySet("Fn", [{"Version": "2012-10-17", "Statement": list(statements)}])


# --- actions ------------------------------------------------------------------------------
def test_an_action_no_statement_names_is_denied() -> None:
    # Given a role that may only describe VPCs
    role = policies(allow("ec2:DescribeVpcs"))
    # When it deletes a VPC
    decision = role.evaluate(Request("ec2:DeleteVpc", (Resource(VPC),)))
    # Then it is denied (implicitly), naming the action and the resource
    assert not decision.allowed
    assert decision.resource == VPC
    assert "no statement" in decision.reason


def test_action_names_match_case_insensitively_and_with_wildcards() -> None:
    # Given a role granted "EC2:describe*"
    role = policies(allow("EC2:describe*"))
    # When it calls ec2:DescribeSubnets
    # Then it is allowed
    assert role.evaluate(Request("ec2:DescribeSubnets")).allowed


def test_not_action_grants_every_other_action() -> None:
    # Given a statement allowing everything except ec2:DeleteVpc
    role = policies({"Effect": "Allow", "NotAction": "ec2:DeleteVpc", "Resource": "*"})
    # When the role deletes a VPC and creates one
    # Then only the creation is allowed
    assert not role.evaluate(Request("ec2:DeleteVpc", (Resource(VPC),))).allowed
    assert role.evaluate(Request("ec2:CreateVpc", (Resource(VPC, request_tags={}),))).allowed


def test_an_action_the_reference_does_not_list_is_denied() -> None:
    # Given a role allowed everything
    role = policies(allow("*"))
    # When a call names an action AWS does not have
    decision = role.evaluate(Request("ec2:CreateVpcs"))
    # Then it is denied, saying so
    assert not decision.allowed
    assert "Service Authorization Reference" in decision.reason


# --- explicit deny --------------------------------------------------------------------------
def test_an_explicit_deny_wins_over_any_allow() -> None:
    # Given a role allowed everything and denied ec2:DeleteVpc
    role = policies(allow("*"), {"Effect": "Deny", "Action": "ec2:DeleteVpc", "Resource": "*"})
    # When it deletes a VPC
    decision = role.evaluate(Request("ec2:DeleteVpc", (Resource(VPC),)))
    # Then the deny wins and is named
    assert not decision.allowed
    assert decision.reason == "explicit deny in Fn/policy0/1"


# --- resources ------------------------------------------------------------------------------
def test_an_action_without_resource_types_is_granted_only_by_star() -> None:
    # Given SendTaskSuccess granted on the state machine's ARN (it has no resource type)
    machine = f"arn:aws:states:us-west-2:{ACCOUNT}:stateMachine:run"
    narrow = policies(allow("states:SendTaskSuccess", machine))
    # When the role sends a task success
    # Then it is denied; only Resource "*" grants it
    assert not narrow.evaluate(Request("states:SendTaskSuccess")).allowed
    assert policies(allow("states:SendTaskSuccess")).evaluate(Request("states:SendTaskSuccess")).allowed


def test_every_resource_a_call_touches_must_be_allowed() -> None:
    # Given CreateSubnet allowed on subnets only
    role = policies(allow("ec2:CreateSubnet", f"arn:aws:ec2:*:{ACCOUNT}:subnet/*"))
    # When the call touches the new subnet and its VPC
    decision = role.evaluate(Request("ec2:CreateSubnet", (Resource(NEW_SUBNET, request_tags=RUN_TAG), Resource(VPC))))
    # Then the VPC is the resource denied
    assert not decision.allowed
    assert decision.resource == VPC


def test_not_resource_grants_every_other_resource() -> None:
    # Given DeleteVpc allowed on everything but one VPC
    role = policies({"Effect": "Allow", "Action": "ec2:DeleteVpc", "NotResource": VPC})
    # When the role deletes that VPC and another
    # Then only the other is allowed
    assert not role.evaluate(Request("ec2:DeleteVpc", (Resource(VPC),))).allowed
    assert role.evaluate(Request("ec2:DeleteVpc", (Resource(VPC[:-1] + "1"),))).allowed


def test_arn_wildcards_do_not_cross_the_colon_separated_parts() -> None:
    # Given a pattern whose region part is a wildcard
    # When it is matched against ARNs
    # Then "*" stays within the region part, and the resource part keeps its colons
    assert arn_matches("arn:aws:logs:*:1:log-group:g:*", "arn:aws:logs:us-west-2:1:log-group:g:log-stream:s")
    assert not arn_matches("arn:aws:logs:*", "arn:aws:logs:us-west-2:1:log-group:g")
    assert not arn_matches("arn:aws:s3:::Bucket/*", "arn:aws:s3:::bucket/key")


_ARN_PART = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-/.", min_size=1, max_size=12)


@given(parts=st.lists(_ARN_PART, min_size=3, max_size=3), star=st.integers(0, 2), cut=st.integers(0, 12))
def test_a_star_for_any_tail_of_a_part_matches_the_arn(parts: list[str], star: int, cut: int) -> None:
    # Given an ARN and a pattern that keeps a prefix of one part and ends it with "*"
    service, region, resource = parts
    arn = f"arn:aws:{service}:{region}:{ACCOUNT}:{resource}"
    pattern_parts = [service, region, resource]
    pattern_parts[star] = pattern_parts[star][:cut] + "*"
    pattern = f"arn:aws:{pattern_parts[0]}:{pattern_parts[1]}:{ACCOUNT}:{pattern_parts[2]}"
    # When matched
    # Then it matches
    assert arn_matches(pattern, arn)


@given(value=st.text(min_size=1, max_size=20), index=st.integers(0, 19))
def test_a_question_mark_matches_exactly_one_character(value: str, index: int) -> None:
    # Given a value with one character replaced by "?"
    index %= len(value)
    pattern = value[:index] + "?" + value[index + 1 :]
    escaped = pattern.replace("*", "?")
    # When matched against the value and the value one character longer
    # Then only the same length matches
    assert glob_match(escaped, value)
    assert not glob_match(escaped, value + "x")


# --- condition keys per resource ------------------------------------------------------------
CREATE_WITH_RUN_TAG = allow(
    "ec2:CreateSubnet",
    f"arn:aws:ec2:*:{ACCOUNT}:subnet/*",
    {"Null": {"aws:RequestTag/trainrun:run-id": "false"}},
)
IN_ANY_VPC = allow("ec2:CreateSubnet", f"arn:aws:ec2:*:{ACCOUNT}:vpc/*")


def test_request_tags_are_filled_only_on_the_resource_being_created() -> None:
    # Given a request-tag condition on "*" (as template.yaml had it)
    role = policies(allow("ec2:CreateSubnet", "*", {"Null": {"aws:RequestTag/trainrun:run-id": "false"}}))
    # When the subnet is created with the run tag in an existing, untagged VPC
    decision = role.evaluate(Request("ec2:CreateSubnet", (Resource(NEW_SUBNET, request_tags=RUN_TAG), Resource(VPC))))
    # Then the VPC carries no request tag and is denied
    assert not decision.allowed
    assert decision.resource == VPC


def test_request_tag_condition_on_the_new_resource_type_allows_the_create() -> None:
    # Given the request-tag condition on subnets and the VPC granted on its own
    role = policies(CREATE_WITH_RUN_TAG, IN_ANY_VPC)
    # When the subnet is created with the run tag
    request = Request("ec2:CreateSubnet", (Resource(NEW_SUBNET, request_tags=RUN_TAG), Resource(VPC)))
    # Then it is allowed; without the tag it is denied
    assert role.evaluate(request).allowed
    untagged = Request("ec2:CreateSubnet", (Resource(NEW_SUBNET, request_tags={}), Resource(VPC)))
    assert not role.evaluate(untagged).allowed


def test_tag_keys_lists_the_request_tags() -> None:
    # Given a condition that every request tag key is one of two
    role = policies(
        allow(
            "ec2:CreateSubnet",
            "*",
            {"ForAllValues:StringEquals": {"aws:TagKeys": ["Name", "trainrun:run-id"]}},
        )
    )
    # When the subnet is created with a third key
    # Then it is denied; with the two keys it is allowed
    bad = Request("ec2:CreateSubnet", (Resource(NEW_SUBNET, request_tags={**RUN_TAG, "Owner": "x"}),))
    good = Request("ec2:CreateSubnet", (Resource(NEW_SUBNET, request_tags={**RUN_TAG, "Name": "n"}),))
    assert not role.evaluate(bad).allowed
    assert role.evaluate(good).allowed


def test_resource_tags_come_from_the_resource_and_the_service_key_too() -> None:
    # Given deletes allowed only on resources tagged with a run, by aws: and by ec2: key
    aws_key = policies(allow("ec2:DeleteVpc", "*", {"Null": {"aws:ResourceTag/trainrun:run-id": "false"}}))
    ec2_key = policies(allow("ec2:DeleteVpc", "*", {"StringEquals": {"ec2:ResourceTag/trainrun:run-id": "r1"}}))
    # When a tagged and an untagged VPC are deleted
    tagged = Request("ec2:DeleteVpc", (Resource(VPC, tags=RUN_TAG),))
    untagged = Request("ec2:DeleteVpc", (Resource(VPC),))
    # Then only the tagged one is allowed, under either key
    assert aws_key.evaluate(tagged).allowed and ec2_key.evaluate(tagged).allowed
    assert not aws_key.evaluate(untagged).allowed and not ec2_key.evaluate(untagged).allowed


def test_request_context_keys_are_matched_case_insensitively_by_name() -> None:
    # Given CreateTags allowed only as part of a create action
    role = policies(allow("ec2:CreateTags", "*", {"StringEquals": {"ec2:CreateAction": ["CreateVpc"]}}))
    # When tags are put on as part of CreateVpc, and on their own
    on_create = Request("ec2:CreateTags", (Resource(VPC, request_tags=RUN_TAG),), {"EC2:createAction": "CreateVpc"})
    alone = Request("ec2:CreateTags", (Resource(VPC, request_tags=RUN_TAG),))
    # Then only the first is allowed
    assert role.evaluate(on_create).allowed
    assert not role.evaluate(alone).allowed


# --- condition operators ----------------------------------------------------------------------
SERVICE_NAME = "iam:AWSServiceName"
SLR = f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/fsx.amazonaws.com/AWSServiceRoleForAmazonFSx"


def slr(condition: dict[str, Any]) -> PolicySet:
    return policies(allow("iam:CreateServiceLinkedRole", "*", condition))


def create_slr(**context: Any) -> Request:
    return Request("iam:CreateServiceLinkedRole", (Resource(SLR),), context)


def test_multiple_values_of_one_key_are_ored() -> None:
    # Given two service names allowed
    role = slr({"StringEquals": {SERVICE_NAME: ["fsx.amazonaws.com", "s3.data-source.lustre.fsx.amazonaws.com"]}})
    # When either is requested
    # Then both are allowed, a third is not
    assert role.evaluate(create_slr(**{SERVICE_NAME: "fsx.amazonaws.com"})).allowed
    assert role.evaluate(create_slr(**{SERVICE_NAME: "s3.data-source.lustre.fsx.amazonaws.com"})).allowed
    assert not role.evaluate(create_slr(**{SERVICE_NAME: "ec2.amazonaws.com"})).allowed


def test_multiple_keys_and_operators_are_anded() -> None:
    # Given a service name and a region required together
    role = slr(
        {
            "StringEquals": {SERVICE_NAME: "fsx.amazonaws.com"},
            "StringLike": {"aws:RequestedRegion": "us-*"},
        }
    )
    # When only one holds
    # Then it is denied; both: allowed
    assert not role.evaluate(
        create_slr(**{SERVICE_NAME: "fsx.amazonaws.com", "aws:RequestedRegion": "eu-west-1"})
    ).allowed
    assert role.evaluate(create_slr(**{SERVICE_NAME: "fsx.amazonaws.com", "aws:RequestedRegion": "us-west-2"})).allowed


def test_negated_operators_hold_when_the_key_is_missing() -> None:
    # Given StringNotEquals on the service name
    role = slr({"StringNotEquals": {SERVICE_NAME: "ec2.amazonaws.com"}})
    # When the key is absent, another value, or the excluded value
    # Then absent and other are allowed, the excluded value denied
    assert role.evaluate(create_slr()).allowed
    assert role.evaluate(create_slr(**{SERVICE_NAME: "fsx.amazonaws.com"})).allowed
    assert not role.evaluate(create_slr(**{SERVICE_NAME: "ec2.amazonaws.com"})).allowed


def test_positive_operators_fail_when_the_key_is_missing_unless_if_exists() -> None:
    # Given StringEquals and StringEqualsIfExists on the service name
    strict = slr({"StringEquals": {SERVICE_NAME: "fsx.amazonaws.com"}})
    lenient = slr({"StringEqualsIfExists": {SERVICE_NAME: "fsx.amazonaws.com"}})
    # When the key is absent
    # Then only IfExists allows it; with a wrong value both deny
    assert not strict.evaluate(create_slr()).allowed
    assert lenient.evaluate(create_slr()).allowed
    assert not lenient.evaluate(create_slr(**{SERVICE_NAME: "ec2.amazonaws.com"})).allowed


def test_null_tests_presence() -> None:
    # Given Null true (the key must be absent)
    role = slr({"Null": {SERVICE_NAME: "true"}})
    # When present and absent
    # Then only absent is allowed
    assert role.evaluate(create_slr()).allowed
    assert not role.evaluate(create_slr(**{SERVICE_NAME: "fsx.amazonaws.com"})).allowed


def test_for_any_value_needs_one_match_and_fails_on_an_empty_set() -> None:
    # Given ForAnyValue over tag keys
    role = policies(allow("ec2:CreateSubnet", "*", {"ForAnyValue:StringEquals": {"aws:TagKeys": "trainrun:run-id"}}))
    # When the request has that key among others, and no tags at all
    # Then the first is allowed, the empty set denied
    with_key = Request("ec2:CreateSubnet", (Resource(NEW_SUBNET, request_tags={**RUN_TAG, "Name": "x"}),))
    assert role.evaluate(with_key).allowed
    assert not role.evaluate(Request("ec2:CreateSubnet", (Resource(NEW_SUBNET, request_tags={}),))).allowed


def test_bool_and_numeric_operators_compare_values() -> None:
    # Given MFA required and a maximum session age
    role = slr({"Bool": {"aws:MultiFactorAuthPresent": "true"}, "NumericLessThan": {"aws:MultiFactorAuthAge": "3600"}})
    # When both hold, and when the age is too large
    ok = create_slr(**{"aws:MultiFactorAuthPresent": "TRUE", "aws:MultiFactorAuthAge": "60"})
    old = create_slr(**{"aws:MultiFactorAuthPresent": "true", "aws:MultiFactorAuthAge": "7200"})
    # Then only the first is allowed
    assert role.evaluate(ok).allowed
    assert not role.evaluate(old).allowed


def test_arn_like_matches_per_part() -> None:
    # Given a source ARN condition
    role = slr({"ArnLike": {"aws:SourceArn": f"arn:aws:fsx:*:{ACCOUNT}:file-system/*"}})
    # When the source is a file system of the account, or of another account
    # Then only the account's is allowed
    assert role.evaluate(create_slr(**{"aws:SourceArn": f"arn:aws:fsx:us-west-2:{ACCOUNT}:file-system/fs-1"})).allowed
    assert not role.evaluate(
        create_slr(**{"aws:SourceArn": "arn:aws:fsx:us-west-2:999999999999:file-system/fs-1"})
    ).allowed


def test_an_unknown_operator_is_an_error_not_a_silent_allow() -> None:
    # Given a condition operator the evaluator does not implement
    role = slr({"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}})
    # When evaluated
    # Then it raises instead of guessing
    with pytest.raises(ValueError, match="IpAddress"):
        role.evaluate(create_slr(**{"aws:SourceIp": "10.1.2.3"}))


# --- policy variables -------------------------------------------------------------------------
LOG_GROUP = f"arn:aws:logs:us-west-2:{ACCOUNT}:log-group:/trainrun/s/jobs"


def put_events(stream: str, **context: str) -> Request:
    return Request("logs:PutLogEvents", (Resource(f"{LOG_GROUP}:log-stream:{stream}"),), context)


def test_a_policy_variable_in_the_resource_is_filled_from_the_request() -> None:
    # Given log streams allowed under the principal's run-id tag
    role = policies(allow("logs:PutLogEvents", LOG_GROUP + ":log-stream:${aws:PrincipalTag/trainrun:run-id}/*"))
    # When the principal tagged r1 writes to r1's and to r2's stream
    # Then only its own is allowed
    assert role.evaluate(put_events("r1/train", **{"aws:PrincipalTag/trainrun:run-id": "r1"})).allowed
    assert not role.evaluate(put_events("r2/train", **{"aws:PrincipalTag/trainrun:run-id": "r1"})).allowed


def test_a_policy_variable_without_a_value_matches_nothing() -> None:
    # Given the same policy and a principal without the tag
    role = policies(allow("logs:PutLogEvents", LOG_GROUP + ":log-stream:${aws:PrincipalTag/trainrun:run-id}/*"))
    # When it writes anywhere
    # Then it is denied
    assert not role.evaluate(put_events("r1/train")).allowed


def test_a_wildcard_in_a_variable_value_is_matched_literally() -> None:
    # Given the same policy and a principal whose tag value is "*"
    role = policies(allow("logs:PutLogEvents", LOG_GROUP + ":log-stream:${aws:PrincipalTag/trainrun:run-id}/*"))
    # When it writes to another run's stream
    # Then "*" does not act as a wildcard
    assert not role.evaluate(put_events("r2/train", **{"aws:PrincipalTag/trainrun:run-id": "*"})).allowed


# --- statements -------------------------------------------------------------------------------
def test_statements_have_stable_ids_and_can_be_removed_one_at_a_time() -> None:
    # Given a role of two policies
    role = PolicySet(
        "Fn",
        [
            {"Statement": [allow("ec2:DescribeVpcs"), allow("ec2:DescribeSubnets")]},
            {"Statement": allow("s3:ListBucket")},
        ],
        policy_names=["inline", "managed"],
    )
    # When its statements are listed and one removed
    ids = [ref.id for ref in role.statements()]
    smaller = role.without("Fn/inline/1")
    # Then the ids name principal, policy and index, and only that statement is gone
    assert ids == ["Fn/inline/0", "Fn/inline/1", "Fn/managed/0"]
    assert not smaller.evaluate(Request("ec2:DescribeSubnets")).allowed
    assert smaller.evaluate(Request("ec2:DescribeVpcs")).allowed
    assert [ref.id for ref in smaller.statements()] == ["Fn/inline/0", "Fn/managed/0"]


# --- the authorization data ---------------------------------------------------------------------
def test_resource_types_come_from_the_service_authorization_reference() -> None:
    # Given the published data
    # When asked about CreateSubnet and SendTaskSuccess
    # Then CreateSubnet touches a subnet and a VPC; SendTaskSuccess has no resource type
    names = {entry.name for entry in sar.action_resource_types("ec2:CreateSubnet") if entry.required}
    assert {"subnet", "vpc"} <= names
    assert not sar.has_resource_types("states:SendTaskSuccess")


def test_the_most_specific_arn_format_names_the_resource_type() -> None:
    # Given a log stream's ARN (it also matches the log group's format)
    # When its type is looked up for DescribeLogStreams and PutLogEvents
    stream = f"{LOG_GROUP}:log-stream:r1/train"
    # Then PutLogEvents sees a log stream
    entry = sar.resource_type_of("logs:PutLogEvents", stream)
    assert entry is not None and entry.name == "log-stream"


def test_a_variable_in_string_equals_compares_the_value_exactly() -> None:
    # Given a condition that the requested tag equals the principal's own tag
    role = policies(
        allow(
            "ec2:CreateSubnet",
            "*",
            {"StringEquals": {"aws:RequestTag/trainrun:run-id": "${aws:PrincipalTag/trainrun:run-id}"}},
        )
    )
    # When the principal tagged "a*" tags a subnet "a*", and one tagged "ab"
    context = {"aws:PrincipalTag/trainrun:run-id": "a*"}

    def create(tag: str) -> Request:
        return Request("ec2:CreateSubnet", (Resource(NEW_SUBNET, request_tags={"trainrun:run-id": tag}),), context)

    # Then only the exact value is allowed
    assert role.evaluate(create("a*")).allowed
    assert not role.evaluate(create("ab")).allowed


# --- a bucket policy (a resource-based policy): its explicit Deny --------------------------------
ROLE = f"arn:aws:iam::{ACCOUNT}:role/reader"
LIST = Request("s3:ListBucket", (Resource("arn:aws:s3:::team-data"),), {"s3:prefix": "locked/a.tar"})


def bucket_policy(principal: Any, condition: dict[str, Any] | None = None) -> dict[str, Any]:
    statement = {
        "Effect": "Deny",
        "Principal": principal,
        "Action": "s3:ListBucket",
        "Resource": "arn:aws:s3:::team-data",
    }
    return {"Version": "2012-10-17", "Statement": [{**statement, **({"Condition": condition} if condition else {})}]}


@pytest.mark.parametrize("principal", ["*", {"AWS": "*"}, {"AWS": ROLE}, {"AWS": ACCOUNT}], ids=str)
def test_a_bucket_policys_deny_refuses_the_principals_it_names(principal: Any) -> None:
    denial = resource_policy_denial(bucket_policy(principal), ROLE, LIST)
    assert denial is not None and denial.reason == "explicit deny in a resource-based policy"


def test_a_bucket_policys_deny_of_another_principal_or_prefix_refuses_nothing() -> None:
    other = f"arn:aws:iam::{ACCOUNT}:role/someone-else"
    assert resource_policy_denial(bucket_policy({"AWS": other}), ROLE, LIST) is None
    elsewhere = bucket_policy("*", {"StringLike": {"s3:prefix": "open/*"}})
    assert resource_policy_denial(elsewhere, ROLE, LIST) is None


def test_a_bucket_policys_deny_may_spare_principals_by_their_arn() -> None:
    # Given a policy denying everyone but the reader role (aws:PrincipalArn)
    policy = bucket_policy("*", {"StringNotEquals": {"aws:PrincipalArn": ROLE}})
    # Then the reader may list, anyone else may not
    assert resource_policy_denial(policy, ROLE, LIST) is None
    assert resource_policy_denial(policy, f"arn:aws:iam::{ACCOUNT}:role/other", LIST) is not None
