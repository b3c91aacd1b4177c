"""The deployer's policies (tools/deployer_policy.py): worked out from the template as SAM expands
it and the CloudFormation registry schemas' handler permissions, within IAM's size limit."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tools import deployer_policy
from trainrun.local.iam.policy import PolicySet, Request, Resource
from trainrun.local.iam.service_authorization import action_exists

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def types() -> set[str]:
    return deployer_policy.template_resource_types("us-west-2")


@pytest.fixture(scope="module")
def handlers() -> dict:
    return deployer_policy.registry_handlers()


def actions_of(documents: list[dict]) -> list[str]:
    found = []
    for document in documents:
        for statement in document["Statement"]:
            action = statement["Action"]
            found += [action] if isinstance(action, str) else action
    return found


def test_every_resource_type_of_the_expanded_template_has_its_handlers_permissions(types, handlers) -> None:
    # SAM's expansion is what CloudFormation creates: functions become roles, permissions, rules
    assert {"AWS::Lambda::Function", "AWS::IAM::Role", "AWS::StepFunctions::StateMachine"} <= types
    assert "AWS::Serverless::Function" not in types
    _, missing = deployer_policy.handler_actions(types, handlers)
    assert missing == []


def test_the_policies_grant_every_handler_action_once_and_each_fits_a_managed_policy(types, handlers) -> None:
    actions, _ = deployer_policy.handler_actions(types, handlers)
    managed = deployer_policy.managed_stack_actions(actions, handlers)
    documents = deployer_policy.policies("trainrun", "us-west-2", "123456789012", actions, managed)
    assert len(documents) >= 2  # together they are over one policy's limit
    assert all(deployer_policy.size(d) <= deployer_policy.MANAGED_POLICY_LIMIT for d in documents)
    granted = actions_of(documents)
    handler_granted = [a for d in documents for s in d["Statement"] if s["Resource"] == "*" for a in s["Action"]]
    assert sorted(handler_granted) == sorted(actions)  # each exactly once
    for needed in (
        "iam:PassRole",
        "lambda:CreateFunction",
        "lambda:PublishLayerVersion",
        "dynamodb:CreateTable",
        "states:CreateStateMachine",
        "scheduler:CreateSchedule",
        "logs:PutSubscriptionFilter",
    ):
        assert needed in granted


def test_a_type_without_a_schema_is_named(handlers) -> None:
    _, missing = deployer_policy.handler_actions({"AWS::Lambda::Function", "AWS::Made::Up"}, handlers)
    assert missing == ["AWS::Made::Up"]


def test_the_stacks_own_calls_are_scoped_to_the_stack_and_sams_managed_stack() -> None:
    statements = deployer_policy.sam_statements("my-stack", "eu-west-1", "111122223333", ["s3:PutBucketPolicy"])
    change_sets = next(s for s in statements if s["Sid"] == "StackChangeSets")
    assert change_sets["Resource"] == [
        "arn:aws:cloudformation:eu-west-1:111122223333:stack/my-stack/*",
        "arn:aws:cloudformation:eu-west-1:111122223333:stack/aws-sam-cli-managed-default/*",
    ]


def test_out_writes_one_file_per_policy(tmp_path: Path) -> None:
    assert deployer_policy.main(["--out", str(tmp_path), "--stack", "s"]) == 0
    files = sorted(tmp_path.glob("deployer-*.json"))
    assert [f.name for f in files][:2] == ["deployer-1.json", "deployer-2.json"]
    assert json.loads(files[0].read_text())["Statement"][0]["Sid"] == "StackChangeSets"


def test_the_first_real_run_guide_gives_the_command() -> None:
    assert "make deployer-policy" in (ROOT / "docs" / "deploying.md").read_text()


# --- the calls a first deployment makes ------------------------------------------------------------
# `sam deploy --resolve-s3` the first time in a region, then our own stack, as SAM CLI 1.170.0 calls
# them (samcli/lib/utils/managed_cloudformation_stack.py `_create_stack`, samcli/lib/deploy/deployer.py,
# samcli/lib/package/s3_uploader.py) and CloudFormation's handlers call them for each resource.
REGION, ACCOUNT, STACK = "us-west-2", "123456789012", "trainrun"
MANAGED_STACK_ARN = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/aws-sam-cli-managed-default/0a1b2c3d"
# CloudFormation names the bucket <stack>-<logical id, lower-cased>-<random>.
MANAGED_BUCKET_ARN = "arn:aws:s3:::aws-sam-cli-managed-default-samclisourcebucket-1x2y3z4w5v6u"
OUR_STACK_ARN = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{STACK}/4e5f6a7b"
SAM_TRANSFORM_ARN = f"arn:aws:cloudformation:{REGION}:aws:transform/Serverless-2016-10-31"


def call(action: str, *arns: str, **context: str) -> Request:
    return Request(action, tuple(Resource(arn) for arn in arns), context)


def stack_calls(stack_arn: str) -> list[Request]:
    """A stack created through a change set of a template with SAM's transform (both templates have it)."""
    return [
        call("cloudformation:DescribeStacks", stack_arn),
        call("cloudformation:CreateChangeSet", stack_arn),
        call("cloudformation:CreateChangeSet", SAM_TRANSFORM_ARN),
        call("cloudformation:DescribeChangeSet", stack_arn),
        call("cloudformation:ExecuteChangeSet", stack_arn),
        call("cloudformation:DescribeStackEvents", stack_arn),
    ]


def handler_calls(types: set[str], handlers: dict, arn: str | None) -> list[Request]:
    """What CloudFormation calls, with the deployer's credentials, to create, read, update and delete each resource."""
    actions, missing = deployer_policy.handler_actions(types, handlers)
    assert missing == []
    # The schemas also list API names that are no IAM action (s3:DeleteBucketCors): AWS never authorizes those.
    return [call(action, *([arn] if arn else [])) for action in actions if action_exists(action)]


def first_deployment_calls(types: set[str], handlers: dict) -> list[Request]:
    managed = [
        *stack_calls(MANAGED_STACK_ARN),
        # The change set carries the stack tag ManagedStackSource=AwsSamCli: tagging on create is
        # authorized as cloudformation:TagResource too (its condition key cloudformation:CreateAction).
        call("cloudformation:TagResource", MANAGED_STACK_ARN),
        # The managed template's bucket (versioned, encrypted, tagged) and its bucket policy.
        *handler_calls(set(deployer_policy.SAM_MANAGED_TEMPLATE_TYPES), handlers, MANAGED_BUCKET_ARN),
    ]
    artifacts = [
        call("s3:ListBucket", MANAGED_BUCKET_ARN),  # head_object's 404 needs it
        call("s3:GetObject", f"{MANAGED_BUCKET_ARN}/0f1e2d3c.template"),  # head_object; CloudFormation's TemplateURL
        call("s3:PutObject", f"{MANAGED_BUCKET_ARN}/0f1e2d3c.template"),
    ]
    ours = [*stack_calls(OUR_STACK_ARN), *handler_calls(types, handlers, None)]
    return [*managed, *artifacts, *ours]


def deployer() -> PolicySet:
    handlers = deployer_policy.registry_handlers()
    actions, _ = deployer_policy.handler_actions(deployer_policy.template_resource_types(REGION), handlers)
    managed = deployer_policy.managed_stack_actions(actions, handlers)
    documents = deployer_policy.policies(STACK, REGION, ACCOUNT, actions, managed)
    return PolicySet("Deployer", documents, policy_names=[f"deployer-{n}" for n in range(1, len(documents) + 1)])


def test_the_deployer_policies_allow_every_call_of_a_first_sam_deploy_with_resolve_s3(types, handlers) -> None:
    # Given the deployer's policies, evaluated as the local IAM enforcement evaluates a role's
    policy = deployer()
    # When a first deployment in the region makes its calls: SAM's managed stack, the artifacts, our stack
    denied = [policy.evaluate(request) for request in first_deployment_calls(types, handlers)]
    # Then every one is allowed
    assert [d.reason for d in denied if not d.allowed] == []


def test_the_managed_buckets_policy_rights_are_the_managed_buckets_only() -> None:
    # Given the deployer's policies
    policy = deployer()
    # Then it may put a bucket policy on SAM's managed bucket, and on no other bucket
    assert policy.evaluate(call("s3:PutBucketPolicy", MANAGED_BUCKET_ARN)).allowed
    assert not policy.evaluate(call("s3:PutBucketPolicy", "arn:aws:s3:::someone-elses-bucket")).allowed
    assert not policy.evaluate(call("cloudformation:TagResource", OUR_STACK_ARN.replace(STACK, "other"))).allowed


def test_the_managed_templates_resource_types_are_sam_clis() -> None:
    # Given the SAM CLI the project installs (.tools), its bootstrap template
    sam_python = ROOT / ".tools" / "bin" / "python"
    if not sam_python.exists():
        pytest.skip("no SAM CLI in .tools (make lint and make build install it)")
    script = (
        "import json; from samcli.lib.bootstrap.bootstrap import _get_stack_template; "
        "print(json.dumps(sorted({r['Type'] for r in json.loads(_get_stack_template())['Resources'].values()})))"
    )
    found = subprocess.run([sam_python, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    # Then the deployer policy knows exactly its resource types
    assert json.loads(found.stdout) == sorted(deployer_policy.SAM_MANAGED_TEMPLATE_TYPES)
