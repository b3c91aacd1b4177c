"""moto on the AWS clock (trainrun.local.clock): NAT gateways and registered dataset copies take their time.

Kept apart from trainrun.local.clock because it patches moto: the clock's ledger and scale are
used by the local ParallelCluster API, which also runs where moto is not installed (tests/pcluster).
"""

from __future__ import annotations

import time
from typing import Any

from moto.ec2.models.nat_gateways import NatGateway
from moto.s3.responses import S3Response

from trainrun.local.clock import copy_duration, real_seconds, scale
from trainrun.logic import aws_clock

__all__ = ["install"]

# --- the NAT gateway -----------------------------------------------------------------------------
# moto's NatGateway is "available" from its creation and "deleted" at once. On the AWS clock it is
# "pending" for NAT_GATEWAY_AVAILABLE and "deleting" for NAT_GATEWAY_DELETED (Amazon VPC User
# Guide, "NAT gateways": pending -> available, deleting -> deleted); while deleting, its network
# interface still holds the subnet (trainrun.local.ec2_dependencies), as on AWS.
_STATE_SINCE = "_trainrun_state_since"


def _nat_state(self: NatGateway) -> str:
    state, since = self.__dict__.get("_trainrun_state", "available"), self.__dict__.get(_STATE_SINCE)
    if since is None:
        return state
    settles = {
        "available": ("pending", aws_clock.NAT_GATEWAY_AVAILABLE),
        "deleted": ("deleting", aws_clock.NAT_GATEWAY_DELETED),
    }
    if state in settles:
        before, duration = settles[state]
        waited = real_seconds(duration)
        if waited is not None and time.monotonic() - since < waited:
            return before
    return state


def _set_nat_state(self: NatGateway, state: str) -> None:
    self.__dict__["_trainrun_state"] = state
    self.__dict__[_STATE_SINCE] = time.monotonic() if scale() is not None else None


# --- the dataset copy ----------------------------------------------------------------------------
_original_get_object = S3Response.get_object


def _get_object(self: S3Response) -> Any:
    answer = _original_get_object(self)
    duration = copy_duration(self.bucket_name, self.parse_key_name())
    waited = real_seconds(duration) if duration is not None else None
    if waited:
        time.sleep(waited)
    return answer


def install() -> None:
    """Let moto's NAT gateways and registered copies take their time while the clock is on (idempotent)."""
    NatGateway.state = property(_nat_state, _set_nat_state)  # type: ignore[assignment]
    S3Response.get_object = _get_object  # type: ignore[method-assign]
