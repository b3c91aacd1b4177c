"""The IAM policy a deployer needs for `sam deploy` and `sam delete` of this stack:
`python -m tools.deployer_policy [--stack NAME] [--region R] [--account ID] [--out DIR] [--check]`.

CloudFormation creates, updates and deletes each resource of the template with the caller's
credentials, and what each resource type's handler calls is AWS's own data: the CloudFormation
registry schema of the type lists, per handler (create, read, update, delete), the IAM actions
it needs. cfn-lint ships those schemas, so the policy is worked out, not written by hand:
the template as SAM expands it (the same translation the local IAM model uses) gives the
resource types, their schemas give the actions. Added to those: what `sam deploy` itself does
(change sets on this stack, the SAM transform, the artifacts bucket of `--resolve-s3`), and the
first time in a region, SAM CLI's managed stack that holds that bucket: a change set tagged
ManagedStackSource=AwsSamCli, and its template's handlers where ours call less (its bucket policy).

Resource-type handlers name no resources, so their actions are granted on "*"; the stack's own
CloudFormation actions are scoped to the stack and SAM's managed stack. Together they are more
than one managed policy holds (6,144 characters), so they come as several policies, a service's
actions never split across two; `--out DIR` writes them as deployer-1.json, deployer-2.json, ...
`--check` fails when a resource type of the template has no schema (a new type needs a look).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

HANDLERS = ("create", "read", "update", "delete")
# A managed policy's size limit, in characters without whitespace (IAM and STS quotas).
MANAGED_POLICY_LIMIT = 6_144
# `sam deploy --resolve-s3` keeps its artifacts in a bucket of this stack (SAM CLI's managed stack).
SAM_MANAGED_STACK = "aws-sam-cli-managed-default"
# Its template's resource types (aws-sam-cli samcli/lib/bootstrap/bootstrap.py, `_get_stack_template`,
# 1.170.0): a versioned, encrypted, tagged bucket with a bucket policy.
SAM_MANAGED_TEMPLATE_TYPES = ("AWS::S3::Bucket", "AWS::S3::BucketPolicy")
# CloudFormation names that bucket <stack>-<logical id, lower-cased>-<random>.
SAM_MANAGED_BUCKETS = f"arn:aws:s3:::{SAM_MANAGED_STACK}-samclisourcebucket-*"
ROOT = Path(__file__).resolve().parents[1]


def template_resource_types(region: str) -> set[str]:
    """The resource types of template.yaml once SAM has expanded it."""
    from trainrun.local.iam.template_roles import translate
    from trainrun.local.template import load_template

    translated = translate(load_template(ROOT / "template.yaml"), region=region)
    return {resource["Type"] for resource in translated["Resources"].values()}


def registry_handlers() -> dict[str, dict[str, Any]]:
    """Each resource type's handlers, from the CloudFormation registry schemas cfn-lint ships."""
    import cfnlint

    schemas = Path(cfnlint.__file__).parent / "data" / "schemas" / "resources"
    handlers: dict[str, dict[str, Any]] = {}
    for path in schemas.glob("*.json"):
        schema = json.loads(path.read_text())
        if "handlers" in schema:
            handlers[schema["typeName"]] = schema["handlers"]
    return handlers


def handler_actions(types: Iterable[str], handlers: dict[str, dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The actions the types' handlers need, and the types that have no schema."""
    actions: set[str] = set()
    missing = []
    for type_name in sorted(types):
        if type_name not in handlers:
            missing.append(type_name)
            continue
        for handler in HANDLERS:
            actions.update(handlers[type_name].get(handler, {}).get("permissions", []))
    return sorted(actions, key=str.lower), missing


def managed_stack_actions(actions: Iterable[str], handlers: dict[str, dict[str, Any]]) -> list[str]:
    """What the handlers of SAM CLI's managed template call beyond `actions` (our template's):
    granted on its bucket only."""
    managed, _ = handler_actions(SAM_MANAGED_TEMPLATE_TYPES, handlers)
    ours = set(actions)
    return [action for action in managed if action not in ours]


def sam_statements(stack: str, region: str, account: str, managed_actions: list[str]) -> list[dict[str, Any]]:
    """What `sam deploy` and `sam delete` themselves call, beside the resources' handlers."""
    managed_stack = f"arn:aws:cloudformation:{region}:{account}:stack/{SAM_MANAGED_STACK}/*"
    stacks = [f"arn:aws:cloudformation:{region}:{account}:stack/{stack}/*", managed_stack]
    return [
        {
            "Sid": "StackChangeSets",
            "Effect": "Allow",
            "Action": [
                "cloudformation:CreateChangeSet",
                "cloudformation:DeleteChangeSet",
                "cloudformation:DeleteStack",
                "cloudformation:DescribeChangeSet",
                "cloudformation:DescribeStackEvents",
                "cloudformation:DescribeStackResources",
                "cloudformation:DescribeStacks",
                "cloudformation:ExecuteChangeSet",
                "cloudformation:GetTemplate",
                "cloudformation:GetTemplateSummary",
                "cloudformation:ListStackResources",
            ],
            "Resource": stacks,
        },
        {
            # A change set of a SAM template is created against the transform too.
            "Sid": "SamTransform",
            "Effect": "Allow",
            "Action": "cloudformation:CreateChangeSet",
            "Resource": f"arn:aws:cloudformation:{region}:aws:transform/Serverless-2016-10-31",
        },
        {
            # SAM CLI creates its managed stack with the stack tag ManagedStackSource=AwsSamCli: tags
            # given on create are authorized as TagResource too (the Service Authorization
            # Reference's cloudformation:CreateAction key).
            "Sid": "SamManagedStackTags",
            "Effect": "Allow",
            "Action": "cloudformation:TagResource",
            "Resource": managed_stack,
        },
        {
            "Sid": "SamManagedBucket",
            "Effect": "Allow",
            "Action": managed_actions,
            "Resource": SAM_MANAGED_BUCKETS,
        },
        {
            "Sid": "SamArtifacts",
            "Effect": "Allow",
            "Action": ["s3:GetBucketLocation", "s3:GetObject", "s3:ListBucket", "s3:PutObject"],
            "Resource": [SAM_MANAGED_BUCKETS, f"{SAM_MANAGED_BUCKETS}/*"],
        },
    ]


def document(statements: list[dict[str, Any]]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": statements}


def size(policy: dict[str, Any]) -> int:
    """A policy's size as IAM counts it: characters, whitespace not counted."""
    return len(json.dumps(policy, separators=(",", ":")))


def policies(
    stack: str, region: str, account: str, actions: list[str], managed_actions: list[str]
) -> list[dict[str, Any]]:
    """The deployer's policies: SAM's own calls first, then the handlers' actions, one statement
    per service, packed into as few managed policies as fit IAM's size limit."""
    by_service: dict[str, list[str]] = {}
    for action in actions:
        by_service.setdefault(action.split(":")[0], []).append(action)
    statements = [
        # Resource-type handlers' actions: the registry schemas name actions, not resources.
        {"Sid": f"Handlers{service.title().replace('-', '')}", "Effect": "Allow", "Action": names, "Resource": "*"}
        for service, names in sorted(by_service.items())
    ]
    packed = [sam_statements(stack, region, account, managed_actions)]
    for statement in statements:
        if size(document([*packed[-1], statement])) > MANAGED_POLICY_LIMIT:
            packed.append([])
        packed[-1].append(statement)
    return [document(group) for group in packed]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="trainrun")
    parser.add_argument("--region", default="us-west-2")
    parser.add_argument("--account", default="123456789012")
    parser.add_argument("--out", type=Path, help="write deployer-N.json files here instead of printing")
    parser.add_argument("--check", action="store_true", help="fail when a resource type has no registry schema")
    options = parser.parse_args(argv)
    types = template_resource_types(options.region)
    handlers = registry_handlers()
    actions, missing = handler_actions(types, handlers)
    managed_actions = managed_stack_actions(actions, handlers)
    documents = policies(options.stack, options.region, options.account, actions, managed_actions)
    if options.check:
        for name in missing:
            print(f"{name}: no CloudFormation registry schema with handlers in cfn-lint", file=sys.stderr)
        sizes = ", ".join(str(size(d)) for d in documents)
        print(f"{len(types)} resource types, {len(actions)} actions, {len(documents)} policies ({sizes} characters)")
        return 1 if missing else 0
    if options.out is None:
        print(json.dumps(documents, indent=2))
        return 0
    options.out.mkdir(parents=True, exist_ok=True)
    for number, policy in enumerate(documents, start=1):
        (options.out / f"deployer-{number}.json").write_text(json.dumps(policy, indent=2) + "\n")
    print(f"{len(documents)} policies in {options.out}: attach each to the deployer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
