"""The roles ParallelCluster gives a cluster's nodes, from the cluster configuration, as
aws-parallelcluster's own CDK code builds them (pcluster.templates.cdk_builder_utils): the
`AdditionalIamPolicies`, CloudWatchAgentServerPolicy when the cluster's CloudWatch logs are on,
and `S3Access` as its "S3Read"/"S3ReadWrite" statements (aws-parallelcluster 3.12.0,
cli/src/pcluster/templates/cdk_builder_utils.py `_add_s3_access_policies_to_role`, with the
resources of cli/src/pcluster/config/cluster_config.py `S3Access.resource_regex`: with a KeyName
only the object ARN `bucket/key`, so no s3:ListBucket, which acts on the bucket's ARN; without
one the bucket and `bucket/*`). ParallelCluster's own inline policy
(its DynamoDB table, describes for the cookbook) is not modelled: it covers no call the run's
workload makes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainrun.local.iam.policy import PolicySet
from trainrun.local.iam.template_roles import aws_managed_policy

CLUSTER_NAME_TAG = "parallelcluster:cluster-name"


def partition(region: str) -> str:
    return "aws-cn" if region.startswith("cn-") else "aws-us-gov" if region.startswith("us-gov-") else "aws"


def node_principal(
    config: Mapping[str, Any],
    *,
    name: str,
    node: Mapping[str, Any],
    region: str,
    stack_policies: Mapping[str, Mapping[str, Any]],
) -> PolicySet:
    """The role of `node` (config["HeadNode"] or a queue of config["Scheduling"]) as a PolicySet.

    `stack_policies`: the documents of the stack's managed policies by ARN
    (template_roles.stack_managed_policies)."""
    partition_name = partition(region)
    iam = node.get("Iam", {})
    named: list[tuple[str, Mapping[str, Any]]] = []
    for arn in managed_policy_arns(config, node, region):
        document = stack_policies.get(arn) or aws_managed_policy(arn)
        named.append((arn.rsplit("/", 1)[-1], document))
    read: list[str] = []
    write: list[str] = []
    for access in iam.get("S3Access", []):
        bucket = access["BucketName"]
        resources = [f"{bucket}/{access['KeyName']}"] if access.get("KeyName") else [bucket, f"{bucket}/*"]
        (write if access.get("EnableWriteAccess") else read).extend(
            f"arn:{partition_name}:s3:::{resource}" for resource in resources
        )
    statements = []
    if read:
        statements.append({"Sid": "S3Read", "Effect": "Allow", "Action": ["s3:Get*", "s3:List*"], "Resource": read})
    if write:
        statements.append({"Sid": "S3ReadWrite", "Effect": "Allow", "Action": ["s3:*"], "Resource": write})
    if statements:
        named.append(("S3Access", {"Version": "2012-10-17", "Statement": statements}))
    return PolicySet(name, [d for _, d in named], policy_names=[n for n, _ in named])


def managed_policy_arns(config: Mapping[str, Any], node: Mapping[str, Any], region: str) -> list[str]:
    """The managed policies the node's role attaches: its `AdditionalIamPolicies`, and
    CloudWatchAgentServerPolicy when the cluster's CloudWatch logs are on."""
    arns = [str(entry["Policy"]) for entry in node.get("Iam", {}).get("AdditionalIamPolicies", [])]
    cloudwatch = config.get("Monitoring", {}).get("Logs", {}).get("CloudWatch", {})
    if cloudwatch.get("Enabled", True):  # ParallelCluster's default
        arns.append(f"arn:{partition(region)}:iam::aws:policy/CloudWatchAgentServerPolicy")
    return list(dict.fromkeys(arns))


def principal_tags(config: Mapping[str, Any], cluster_name: str) -> dict[str, str]:
    """The tags of a node's role: the cluster's tags (CloudFormation propagates the cluster
    stack's tags to its roles) and the one ParallelCluster adds with the cluster's name."""
    tags = {str(tag["Key"]): str(tag["Value"]) for tag in config.get("Tags", [])}
    tags[CLUSTER_NAME_TAG] = cluster_name
    return tags


def principal_context(config: Mapping[str, Any], cluster_name: str) -> dict[str, str]:
    """The request-context keys every call of a node's role carries (aws:PrincipalTag/*)."""
    return {f"aws:PrincipalTag/{key}": value for key, value in principal_tags(config, cluster_name).items()}
