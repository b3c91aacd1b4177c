"""The Amazon EKS side of a `cluster.kind: eks` run: its cluster, access entry, launch template,
managed node group and add-ons; built idempotently, waited on, and torn down in reverse.

What each request holds is rendered by trainrun.logic.eks_node_group (pure); this module makes the
calls. Every `ensure_*` may run any number of times and after a crash at any point: a create that
meets the resource already there (EKS's ResourceInUseException, EC2's AlreadyExists) goes on with
the one that exists, which is the run's (the names derive from the run id). Each returns the
resource's status, and a resource that failed raises `EksFailed` with EKS's own reason (its health
issues), for the run's error.

`delete_eks` makes one pass of the teardown in dependency order, as EKS requires it (Amazon EKS
API Reference, DeleteCluster: "If you have managed node groups attached to the cluster, you must
delete them first"): the node group and the add-ons, then the cluster once no node group is left
(its access entries go with it), then the launch template once nothing launches from it. The
workflow's wait loop calls it again until it reports done.

Throttling and 5xx become TransientAwsError (retried by the state machine); "not found" during
teardown counts as deleted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from botocore.exceptions import ClientError

from trainrun.adapters.aws_errors import call, error_code, raise_if_transient
from trainrun.errors import TrainrunError
from trainrun.model.resources import Progress

ACTIVE = "ACTIVE"
DEGRADED = "DEGRADED"
# A cluster, node group or add-on in one of these states will not become ACTIVE by waiting (but for
# an add-on DEGRADED while its nodes are still being created: see ensure_addons).
FAILED_STATUSES = frozenset({"FAILED", "CREATE_FAILED", DEGRADED, "DELETE_FAILED"})
IN_USE = "ResourceInUseException"
NOT_FOUND = "ResourceNotFoundException"
ACCESS_DENIED = "AccessDeniedException"
# An EKS access policy is granted cluster-wide or for named namespaces (Amazon EKS API Reference,
# AccessScope).
CLUSTER_SCOPE: Mapping[str, Any] = {"type": "cluster"}


class EksFailed(TrainrunError):
    """A cluster, node group or add-on of the run failed on EKS; the message is EKS's reason."""


# --- build ----------------------------------------------------------------------------------------


def ensure_cluster(eks: Any, request: Mapping[str, Any]) -> str:
    """Create the cluster unless it exists; its status (CREATING, ACTIVE, ...)."""
    name = str(request["name"])
    _create(eks.create_cluster, "eks:CreateCluster", clientRequestToken=_token(name, "cluster"), **request)
    cluster = call(eks.describe_cluster, "eks:DescribeCluster", name=name)["cluster"]
    return _checked("cluster", name, cluster)


def cluster_endpoint(eks: Any, name: str) -> dict[str, Any]:
    """The cluster's description (endpoint, certificate authority, status)."""
    return dict(call(eks.describe_cluster, "eks:DescribeCluster", name=name)["cluster"])


def ensure_access(eks: Any, *, cluster: str, principal_arn: str, policy_arn: str, tags: Mapping[str, str]) -> None:
    """An access entry for `principal_arn` with `policy_arn` associated cluster-wide: the way in for
    a principal when the cluster's authentication mode is API (Amazon EKS User Guide, "Grant IAM
    users access to Kubernetes with EKS access entries"). Associating again only updates it."""
    _create(
        eks.create_access_entry,
        "eks:CreateAccessEntry",
        clusterName=cluster,
        principalArn=principal_arn,
        type="STANDARD",
        clientRequestToken=_token(cluster, "access", principal_arn),
        tags=dict(tags),
    )
    call(
        eks.associate_access_policy,
        "eks:AssociateAccessPolicy",
        clusterName=cluster,
        principalArn=principal_arn,
        policyArn=policy_arn,
        accessScope=dict(CLUSTER_SCOPE),
    )


def ensure_launch_template(ec2: Any, request: Mapping[str, Any]) -> str:
    """Create the launch template unless one of that name exists; its id."""
    name = str(request["LaunchTemplateName"])
    found = _launch_template(ec2, name)
    if found is not None:
        return found
    try:
        created = ec2.create_launch_template(ClientToken=_token(name, "launch-template"), **request)
    except ClientError as exc:
        raise_if_transient(exc, "ec2:CreateLaunchTemplate")
        if "AlreadyExists" not in error_code(exc):
            raise
        found = _launch_template(ec2, name)
        if found is None:
            raise
        return found
    return str(created["LaunchTemplate"]["LaunchTemplateId"])


def ensure_nodegroup(eks: Any, request: Mapping[str, Any]) -> str:
    """Create the managed node group unless it exists; its status. A node group that failed (for
    capacity: CREATE_FAILED with EC2's insufficient-capacity reason in its health) raises EksFailed."""
    cluster, name = str(request["clusterName"]), str(request["nodegroupName"])
    _create(
        eks.create_nodegroup, "eks:CreateNodegroup", clientRequestToken=_token(cluster, "nodegroup", name), **request
    )
    nodegroup = call(eks.describe_nodegroup, "eks:DescribeNodegroup", clusterName=cluster, nodegroupName=name)
    return _checked("node group", name, nodegroup["nodegroup"])


def ensure_addons(
    eks: Any,
    *,
    cluster: str,
    names: Iterable[str],
    tags: Mapping[str, str],
    configuration: Mapping[str, str],
    nodes_ready: bool = True,
) -> dict[str, str]:
    """Create each add-on unless it exists (with its JSON configuration values, if any); their statuses.

    An add-on whose pods are a Deployment is DEGRADED (InsufficientNumberOfReplicas) until a node
    can run them: while the node group is not ACTIVE yet (`nodes_ready` False) that is waited on,
    not a failure (an add-on of DaemonSets only is ACTIVE without nodes)."""
    statuses: dict[str, str] = {}
    for name in names:
        extra = {"configurationValues": configuration[name]} if name in configuration else {}
        _create(
            eks.create_addon,
            "eks:CreateAddon",
            clusterName=cluster,
            addonName=name,
            clientRequestToken=_token(cluster, "addon", name),
            tags=dict(tags),
            # CoreDNS is already there, self-managed (EKS installs it with the cluster): the managed
            # add-on takes its objects over (Amazon EKS User Guide, "Manage CoreDNS": OVERWRITE).
            resolveConflicts="OVERWRITE",
            **extra,
        )
        addon = call(eks.describe_addon, "eks:DescribeAddon", clusterName=cluster, addonName=name)["addon"]
        if addon.get("status") == DEGRADED and not nodes_ready:
            statuses[name] = DEGRADED
        else:
            statuses[name] = _checked("add-on", name, addon)
    return statuses


# --- tear down --------------------------------------------------------------------------------------


def delete_eks(eks: Any, ec2: Any, *, cluster: str, launch_template: str | None) -> Progress:
    """One pass of deleting the cluster and what hangs on it, in the order EKS requires; call again
    until done. Only the named cluster (the run's) and its launch template are touched."""
    deleted: list[str] = []
    waiting: list[str] = []
    description = _describe_or_none(eks.describe_cluster, "eks:DescribeCluster", name=cluster)
    if description is not None:
        nodegroups = _list(eks, "list_nodegroups", "nodegroups", clusterName=cluster)
        for nodegroup in nodegroups:
            waiting.append(_delete_nodegroup(eks, cluster, nodegroup))
        for addon in _list(eks, "list_addons", "addons", clusterName=cluster):
            status = _delete_or_status(
                eks.delete_addon,
                "eks:DeleteAddon",
                "addon",
                gone=_unlisted(eks, "list_addons", "addons", addon, clusterName=cluster),
                clusterName=cluster,
                addonName=addon,
            )
            if status is not None:
                waiting.append(f"add-on {addon} of cluster {cluster} ({status})")
        if not nodegroups and description["cluster"].get("status") == "DELETING":
            # Asked for already: asked again, it could be gone by the time the call arrives.
            waiting.append(f"eks cluster {cluster} (DELETING)")
        elif not nodegroups:
            # The access entries go with the cluster; it waits on no add-on (EKS deletes them with it).
            status = _delete_or_status(
                eks.delete_cluster,
                "eks:DeleteCluster",
                "cluster",
                gone=lambda: _describe_or_none(eks.describe_cluster, "eks:DescribeCluster", name=cluster) is None,
                name=cluster,
            )
            if status is None:
                deleted.append(f"eks cluster {cluster}")
            else:
                waiting.append(f"eks cluster {cluster} ({status})")
    # The launch template once no node group can launch from it: the cluster is gone.
    if description is None and launch_template is not None and _delete_launch_template(ec2, launch_template):
        deleted.append(f"launch template {launch_template}")
    return Progress(done=not waiting and (description is None), waiting_on=waiting, deleted=deleted)


def _delete_nodegroup(eks: Any, cluster: str, name: str) -> str:
    status = _delete_or_status(
        eks.delete_nodegroup,
        "eks:DeleteNodegroup",
        "nodegroup",
        gone=_unlisted(eks, "list_nodegroups", "nodegroups", name, clusterName=cluster),
        clusterName=cluster,
        nodegroupName=name,
    )
    if status == "DELETE_FAILED":
        nodegroup = call(eks.describe_nodegroup, "eks:DescribeNodegroup", clusterName=cluster, nodegroupName=name)
        raise EksFailed(f"node group {name} of cluster {cluster} is DELETE_FAILED: {_issues(nodegroup['nodegroup'])}")
    return f"node group {name} of cluster {cluster} ({status or 'DELETING'})"


def _delete_or_status(method: Any, operation: str, key: str, *, gone: Callable[[], bool], **params: Any) -> str | None:
    """Ask for the deletion (again: EKS answers ResourceInUse while it is under way); the resource's
    status afterwards, or None once it is gone. A resource whose deletion ended since this pass
    listed it has no tags left for the role's `aws:ResourceTag` condition: AWS answers AccessDenied,
    not ResourceNotFound (as aws/eks-hybrid's cleanup found, PR #450), so a denial is a deletion
    done when `gone` says so, and a denial otherwise."""
    try:
        answer = method(**params)
    except ClientError as exc:
        raise_if_transient(exc, operation)
        if error_code(exc) == NOT_FOUND or (error_code(exc) == ACCESS_DENIED and gone()):
            return None
        if error_code(exc) != IN_USE:
            raise
        return "DELETING"
    return str(answer.get(key, {}).get("status", "DELETING"))


def _delete_launch_template(ec2: Any, name: str) -> bool:
    # Found by name first, deleted by id: one already gone is not asked for again, on every later
    # pass (EC2 answers an unknown name NotFound, but moto, the local runtime's, MissingParameter).
    template_id = _launch_template(ec2, name)
    if template_id is None:
        return False
    try:
        ec2.delete_launch_template(LaunchTemplateId=template_id)
    except ClientError as exc:
        raise_if_transient(exc, "ec2:DeleteLaunchTemplate")
        if "NotFound" not in error_code(exc):
            raise
        return False
    return True


# --- helpers -----------------------------------------------------------------------------------------


def _create(method: Any, operation: str, **params: Any) -> None:
    """A create call that takes "it exists already" as done (a retried step, or a crash after it)."""
    try:
        method(**params)
    except ClientError as exc:
        raise_if_transient(exc, operation)
        if error_code(exc) != IN_USE:
            raise


def _checked(kind: str, name: str, resource: Mapping[str, Any]) -> str:
    status = str(resource.get("status", ""))
    if status in FAILED_STATUSES:
        raise EksFailed(f"{kind} {name} is {status}: {_issues(resource)}")
    return status


def _issues(resource: Mapping[str, Any]) -> str:
    """EKS's reasons, from the resource's health issues: code, message and the resources named."""
    issues = (resource.get("health") or {}).get("issues") or []
    if not issues:
        return "EKS gives no reason (see the resource in the EKS console)"
    return "; ".join(
        f"{issue.get('code', '?')}: {issue.get('message', '')}"
        + (f" ({', '.join(issue['resourceIds'])})" if issue.get("resourceIds") else "")
        for issue in issues
    )


def _describe_or_none(method: Any, operation: str, **params: Any) -> dict[str, Any] | None:
    try:
        return dict(method(**params))
    except ClientError as exc:
        raise_if_transient(exc, operation)
        if error_code(exc) == NOT_FOUND:
            return None
        raise


def _list(eks: Any, operation: str, key: str, **params: Any) -> list[str]:
    """Every name a List call pages through (boto3's paginator); none once the cluster is gone."""
    try:
        return [name for page in eks.get_paginator(operation).paginate(**params) for name in page.get(key, [])]
    except ClientError as exc:
        raise_if_transient(exc, f"eks:{operation}")
        if error_code(exc) == NOT_FOUND:
            return []
        raise


def _unlisted(eks: Any, operation: str, key: str, name: str, **params: Any) -> Callable[[], bool]:
    """Whether `name` is no longer among what the List call pages through, when asked."""
    return lambda: name not in _list(eks, operation, key, **params)


def _launch_template(ec2: Any, name: str) -> str | None:
    try:
        answer = ec2.describe_launch_templates(LaunchTemplateNames=[name])
    except ClientError as exc:
        raise_if_transient(exc, "ec2:DescribeLaunchTemplates")
        if "NotFound" in error_code(exc):
            return None
        raise
    templates = answer.get("LaunchTemplates", [])
    return str(templates[0]["LaunchTemplateId"]) if templates else None


def _token(*parts: str) -> str:
    """A client request token that is the same for the same resource of the same run (64 characters at most)."""
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:64]
