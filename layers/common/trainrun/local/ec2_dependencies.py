"""EC2's DependencyViolation in moto (5.2.5, pinned): a network in use cannot be deleted.

moto deletes a subnet, a security group or a VPC with instances in it, and detaches an internet
gateway from a VPC whose instances have public addresses. EC2 refuses each with
DependencyViolation while a network interface depends on it (EC2 API reference: DeleteSubnet
"You must terminate all running instances in the subnet before you can delete the subnet";
DeleteSecurityGroup "If you attempt to delete a security group that is associated with an
instance or network interface ... the operation fails with DependencyViolation";
DetachInternetGateway "The VPC must not contain any running instances with Elastic IP addresses
or public IPv4 addresses"). So does this patch: a teardown that deletes the network under a
cluster that could not be deleted fails here as it would on AWS.

A network interface counts while it is live: not one of a terminated instance (EC2 releases
those), nor of a deleted NAT gateway (moto keeps that one; EC2 deletes it with the gateway).
The patches are idempotent.
"""

from __future__ import annotations

from typing import Any

from moto.ec2.exceptions import DependencyViolationError
from moto.ec2.models import EC2Backend

_original_delete_subnet = EC2Backend.delete_subnet
_original_delete_security_group = EC2Backend.delete_security_group
_original_detach_internet_gateway = EC2Backend.detach_internet_gateway
_original_delete_vpc = EC2Backend.delete_vpc


def _live_interfaces(backend: Any) -> list[Any]:
    gone_nat_interfaces = {nat._eni.id for nat in backend.nat_gateways.values() if nat.state == "deleted"}
    return [
        eni
        for eni in list(backend.enis.values())
        if eni.id not in gone_nat_interfaces and not (eni.instance is not None and eni.instance.state == "terminated")
    ]


def _vpc_of(eni: Any) -> str | None:
    return getattr(eni.subnet, "vpc_id", None)


def _delete_subnet(self: Any, subnet_id: str) -> Any:
    if any(getattr(eni.subnet, "id", None) == subnet_id for eni in _live_interfaces(self)):
        raise DependencyViolationError(f"The subnet '{subnet_id}' has dependencies and cannot be deleted.")
    return _original_delete_subnet(self, subnet_id)


def _delete_security_group(self: Any, name: str | None = None, group_id: str | None = None) -> Any:
    if group_id and any(group_id in {group.id for group in eni.group_set} for eni in _live_interfaces(self)):
        raise DependencyViolationError(f"resource {group_id} has a dependent object")
    return _original_delete_security_group(self, name=name, group_id=group_id)


def _detach_internet_gateway(self: Any, internet_gateway_id: str, vpc_id: str) -> Any:
    if any(_vpc_of(eni) == vpc_id and eni.public_ip for eni in _live_interfaces(self)):
        raise DependencyViolationError(
            f"Network {vpc_id} has some mapped public address(es). Please unmap those public address(es) "
            "before detaching the gateway."
        )
    return _original_detach_internet_gateway(self, internet_gateway_id, vpc_id)


def _delete_vpc(self: Any, vpc_id: str) -> Any:
    if any(_vpc_of(eni) == vpc_id for eni in _live_interfaces(self)):
        raise DependencyViolationError(f"The vpc '{vpc_id}' has dependencies and cannot be deleted.")
    return _original_delete_vpc(self, vpc_id)


def install() -> None:
    EC2Backend.delete_subnet = _delete_subnet  # type: ignore[method-assign]
    EC2Backend.delete_security_group = _delete_security_group  # type: ignore[method-assign]
    EC2Backend.detach_internet_gateway = _detach_internet_gateway  # type: ignore[method-assign]
    EC2Backend.delete_vpc = _delete_vpc  # type: ignore[method-assign]


def uninstall() -> None:
    """moto's own behaviour again (for tests that install the patches around one test)."""
    EC2Backend.delete_subnet = _original_delete_subnet  # type: ignore[method-assign]
    EC2Backend.delete_security_group = _original_delete_security_group  # type: ignore[method-assign]
    EC2Backend.detach_internet_gateway = _original_detach_internet_gateway  # type: ignore[method-assign]
    EC2Backend.delete_vpc = _original_delete_vpc  # type: ignore[method-assign]
