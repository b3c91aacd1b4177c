"""The roles of template.yaml as CloudFormation creates them: SAM's own translator turns each
function's and state machine's `Policies` (policy templates, managed policies, inline
statements) into its role, and the intrinsic functions are resolved with the deployed names."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import boto3
from samtranslator.internal.managed_policies import get_bundled_managed_policy_map
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator

from trainrun.local.iam.policy import PolicySet
from trainrun.local.template import load_template

_MANAGED_POLICIES = Path(__file__).parent / "data" / "aws_managed_policies.json"
# SAM reads code and definitions from S3 once packaged; the roles do not depend on where.
_ARTIFACT_PROPERTIES = ("CodeUri", "ContentUri", "DefinitionUri")
# The property of a resource SAM generated that names the role it runs as.
_ROLE_PROPERTIES = {"AWS::Lambda::Function": "Role", "AWS::StepFunctions::StateMachine": "RoleArn"}


class ManagedPolicyMissingError(KeyError):
    """A role references an AWS managed policy whose document is not vendored."""


@cache
def aws_managed_policies() -> dict[str, dict[str, Any]]:
    documents: dict[str, dict[str, Any]] = json.loads(_MANAGED_POLICIES.read_text())
    return {arn: document for arn, document in documents.items() if arn.startswith("arn:")}


def aws_managed_policy(arn: str) -> dict[str, Any]:
    # The same document in every partition.
    key = "arn:aws:" + arn.split(":", 2)[2] if arn.startswith("arn:") else arn
    try:
        return aws_managed_policies()[key]
    except KeyError:
        raise ManagedPolicyMissingError(
            f"{arn}: add its document to trainrun/local/iam/data/aws_managed_policies.json"
        ) from None


def translate(template: Mapping[str, Any], *, region: str) -> dict[str, Any]:
    """The CloudFormation template SAM makes of `template` (intrinsics left as they are)."""
    sam_template = copy.deepcopy(dict(template))
    for resource in sam_template.get("Resources", {}).values():
        properties = resource.get("Properties", {})
        for key in _ARTIFACT_PROPERTIES:
            if isinstance(properties.get(key), str):
                properties[key] = f"s3://trainrun-local-artifacts/{key}"
    translator = Translator(
        managed_policy_map=get_bundled_managed_policy_map("aws"),
        sam_parser=Parser(),
        boto_session=boto3.Session(region_name=region),
    )
    return translator.translate(sam_template=sam_template, parameter_values={})


def default_resolver(
    template_path: Path, parameters: Mapping[str, str], *, region: str, stack_name: str
) -> Callable[[Any], Any]:
    """Resolve intrinsics with the names trainrun.local.template_deployer deploys resources under."""
    from trainrun.local.template_deployer import StackDeployer

    deployer = StackDeployer(
        _no_client, template_path.parent, stack_name=stack_name, region=region, parameters=dict(parameters)
    )
    return deployer.resolve


def _no_client(service: str) -> Any:
    raise AssertionError(f"resolving names needs no {service} client")


def stack_principals(
    template_path: Path,
    parameters: Mapping[str, str],
    *,
    region: str,
    account: str,
    stack_name: str,
    resolve: Callable[[Any], Any] | None = None,
) -> dict[str, PolicySet]:
    template = load_template(template_path)
    resolve = resolve or default_resolver(template_path, parameters, region=region, stack_name=stack_name)
    translated = translate(template, region=region)
    resources: dict[str, Any] = translated["Resources"]
    conditions_true = _conditions(template, resolve)
    owners = {}
    for logical_id, resource in resources.items():
        role = resource.get("Properties", {}).get(_ROLE_PROPERTIES.get(resource["Type"], ""))
        if isinstance(role, dict) and "Fn::GetAtt" in role:
            owners[_get_att_target(role["Fn::GetAtt"])] = logical_id
    principals = {}
    for logical_id, resource in resources.items():
        if resource["Type"] != "AWS::IAM::Role":
            continue
        if resource.get("Condition") and not conditions_true.get(resource["Condition"], False):
            continue
        name = owners.get(logical_id, logical_id)
        properties = resource.get("Properties", {})
        named: list[tuple[str, dict[str, Any]]] = []
        # Resolved as a whole first: a policy under Fn::If (e.g. HasPclusterApiRole) is there or not.
        for policy in resolve(properties.get("Policies", [])):
            named.append((str(policy["PolicyName"]), policy["PolicyDocument"]))
        for reference in properties.get("ManagedPolicyArns", []):
            if isinstance(reference, dict) and set(reference) == {"Ref"} and reference["Ref"] in resources:
                managed = resources[reference["Ref"]]
                if managed["Type"] != "AWS::IAM::ManagedPolicy":
                    raise ValueError(f"{logical_id}: ManagedPolicyArns references {reference['Ref']}, not a policy")
                named.append((reference["Ref"], resolve(managed["Properties"]["PolicyDocument"])))
                continue
            arn = str(resolve(reference))
            named.append((arn.rsplit("/", 1)[-1], aws_managed_policy(arn)))
        principals[name] = PolicySet(name, [d for _, d in named], policy_names=[n for n, _ in named])
    return principals


def _conditions(template: Mapping[str, Any], resolve: Callable[[Any], Any]) -> dict[str, bool]:
    resolved = {}
    for name, expression in template.get("Conditions", {}).items():
        resolved[name] = bool(resolve(expression))
    return resolved


def _get_att_target(argument: Any) -> str:
    return str(argument[0] if isinstance(argument, list) else str(argument).split(".", 1)[0])


def stack_managed_policies(
    template_path: Path,
    parameters: Mapping[str, str],
    *,
    region: str,
    stack_name: str,
    resolve: Callable[[Any], Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """The documents of the template's AWS::IAM::ManagedPolicy resources, by their deployed ARN
    (those a cluster configuration attaches, such as ClusterNodePolicy)."""
    template = load_template(template_path)
    resolve = resolve or default_resolver(template_path, parameters, region=region, stack_name=stack_name)
    return {
        str(resolve({"Ref": logical_id})): resolve(resource["Properties"]["PolicyDocument"])
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == "AWS::IAM::ManagedPolicy"
    }
