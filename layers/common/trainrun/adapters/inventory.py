"""Everything that carries a trainrun tag, whatever step created it (or failed to record it).

Used by the janitor (by stack) and by `trainrun local` to show what a run left behind (by run).
Resources that are already on their way out (deleted NAT gateways, terminated instances) do
not count: they cost nothing and vanish by themselves.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict

from trainrun.model.tags import RUN_ID


class TaggedResource(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: str
    id: str
    run_id: str | None


def tagged_resources(ec2: Any, fsx: Any, *, key: str, value: str, eks: Any | None = None) -> list[TaggedResource]:
    """With `eks`, the EKS clusters too (a cluster's node groups and add-ons go with it)."""
    found = [*_ec2_resources(ec2, key, value), *_fsx_resources(fsx, key, value)]
    if eks is not None:
        found += _eks_clusters(eks, key, value)
    return found


# (kind, describe call, response key, id field, states that no longer count)
_EC2_KINDS = (
    ("vpc", "describe_vpcs", "Vpcs", "VpcId", ()),
    ("subnet", "describe_subnets", "Subnets", "SubnetId", ()),
    ("internet-gateway", "describe_internet_gateways", "InternetGateways", "InternetGatewayId", ()),
    ("route-table", "describe_route_tables", "RouteTables", "RouteTableId", ()),
    ("security-group", "describe_security_groups", "SecurityGroups", "GroupId", ()),
    ("nat-gateway", "describe_nat_gateways", "NatGateways", "NatGatewayId", ("deleted", "failed")),
    ("vpc-endpoint", "describe_vpc_endpoints", "VpcEndpoints", "VpcEndpointId", ("deleted",)),
    ("elastic-ip", "describe_addresses", "Addresses", "AllocationId", ()),
    ("launch-template", "describe_launch_templates", "LaunchTemplates", "LaunchTemplateId", ()),
)


def _ec2_resources(ec2: Any, key: str, value: str) -> Iterator[TaggedResource]:
    tag_filter = [{"Name": f"tag:{key}", "Values": [value]}]
    for kind, method, items_key, id_key, gone in _EC2_KINDS:
        for item in getattr(ec2, method)(Filters=tag_filter)[items_key]:
            # Checked here as well: some describe calls ignore tag filters (moto's NAT gateways).
            if _tag(item.get("Tags"), key) == value and _state(item) not in gone:
                yield TaggedResource(kind=kind, id=item[id_key], run_id=_tag(item.get("Tags"), RUN_ID))
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[*tag_filter, {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}]
    )
    for page in pages:
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                run_id = _tag(instance.get("Tags"), RUN_ID)
                yield TaggedResource(kind="instance", id=instance["InstanceId"], run_id=run_id)


def _fsx_resources(fsx: Any, key: str, value: str) -> Iterator[TaggedResource]:
    for page in fsx.get_paginator("describe_file_systems").paginate():
        for file_system in page["FileSystems"]:
            if _tag(file_system.get("Tags"), key) == value and file_system.get("Lifecycle") != "DELETED":
                yield TaggedResource(
                    kind="file-system", id=file_system["FileSystemId"], run_id=_tag(file_system.get("Tags"), RUN_ID)
                )
    # botocore has no paginator for this call.
    kwargs: dict[str, Any] = {}
    while True:
        page = fsx.describe_data_repository_associations(**kwargs)
        for association in page["Associations"]:
            if _tag(association.get("Tags"), key) == value:
                yield TaggedResource(
                    kind="data-repository-association",
                    id=association["AssociationId"],
                    run_id=_tag(association.get("Tags"), RUN_ID),
                )
        if not page.get("NextToken"):
            return
        kwargs["NextToken"] = page["NextToken"]


def _eks_clusters(eks: Any, key: str, value: str) -> list[TaggedResource]:
    found = []
    for page in eks.get_paginator("list_clusters").paginate():
        for name in page["clusters"]:
            try:
                cluster = eks.describe_cluster(name=name)["cluster"]
            except eks.exceptions.ResourceNotFoundException:
                continue  # deleted between the list and the describe
            tags = cluster.get("tags") or {}
            if tags.get(key) == value:
                found.append(TaggedResource(kind="eks-cluster", id=name, run_id=tags.get(RUN_ID)))
    return found


def _tag(tags: list[dict[str, str]] | None, key: str) -> str | None:
    return next((tag["Value"] for tag in tags or [] if tag["Key"] == key), None)


def _state(item: dict[str, Any]) -> str | None:
    state = item.get("State")
    return state.lower() if isinstance(state, str) else None
