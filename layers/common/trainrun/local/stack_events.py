"""The events of a local cluster's CloudFormation stack, as getClusterStackEvents answers them.

ParallelCluster's getClusterStackEvents passes CloudFormation's DescribeStackEvents on
(aws-parallelcluster 3.16.1, pcluster.api.controllers.cluster_logs_controller): the stack's events
newest first, a page at a time with a `nextToken` for the older ones, each field camelCased and
each timestamp in ISO 8601. Only the main stack's: since ParallelCluster 3.6 the queues' resources
are in a nested stack, which the main stack's events show as one AWS::CloudFormation::Stack
resource (ParallelCluster's getClusterStackEvents docs).

A stack's own events name the stack as their resource. On a failed create, CloudFormation cancels
the resources still being created ("Resource creation cancelled"), says which failed in the
stack's own event ("The following resource(s) failed to create: [...]"), and, rolling back
(ParallelCluster's default, `rollbackOnFailure`), deletes what it created.
"""

from __future__ import annotations

import base64
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# Events per page: ours (CloudFormation does not document the size of its pages).
PAGE_SIZE = 100
# The head node's wait condition (pcluster.templates.cluster_stack: "HeadNodeWaitCondition" and the
# stack's creation time): ParallelCluster's describeCluster reads its failure for failures[].
WAIT_CONDITION = "HeadNodeWaitCondition"


@dataclass(frozen=True)
class StackResource:
    """A resource of the stack, as its events name it."""

    logical_id: str
    type: str
    physical_id: str = ""


@dataclass(frozen=True)
class ResourceEvent:
    """What happened to a resource: a CloudFormation resource status, and its reason if any."""

    resource: StackResource
    status: str
    reason: str | None = None


class InvalidNextToken(ValueError):
    """A nextToken no page of this stack gave."""


class StackEvents:
    """One stack's events, oldest first as they happen; `page` answers them newest first."""

    def __init__(self, stack_name: str, stack_id: str, *, now: Callable[[], datetime] = lambda: datetime.now(UTC)):
        self._stack = StackResource(stack_name, "AWS::CloudFormation::Stack", stack_id)
        self._now = now
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._created = now()

    # --- what happens -------------------------------------------------------------------------
    def stack(self, status: str, reason: str | None = None) -> None:
        """An event of the stack itself (CREATE_IN_PROGRESS "User Initiated", CREATE_COMPLETE, ...)."""
        self._add(ResourceEvent(self._stack, status, reason))

    def resources(self, events: Iterable[ResourceEvent]) -> None:
        self._add(*events)

    def create_failed(self, reason: str, *, rollback: bool) -> None:
        """The create has failed: the failed resources named in the stack's event, then the rollback.

        `reason` is the failure's own when no resource has failed yet (a failure of the head node's
        bootstrap): its wait condition fails with it."""
        if not self._failed():
            when = self._created.strftime("%Y%m%d%H%M%S")
            waited = StackResource(f"{WAIT_CONDITION}{when}", "AWS::CloudFormation::WaitCondition")
            self._add(ResourceEvent(waited, "CREATE_FAILED", reason))
        failed = f"The following resource(s) failed to create: [{', '.join(sorted(self._failed()))}]. "
        if not rollback:
            self.stack("CREATE_FAILED", failed)
            return
        self.stack("ROLLBACK_IN_PROGRESS", f"{failed}Rollback requested by user.")
        for resource in reversed(self._created_resources()):
            self._add(ResourceEvent(resource, "DELETE_IN_PROGRESS"), ResourceEvent(resource, "DELETE_COMPLETE"))
        self.stack("ROLLBACK_COMPLETE")

    # --- what getClusterStackEvents answers ---------------------------------------------------------
    def page(self, next_token: str | None) -> dict[str, Any]:
        """GetClusterStackEventsResponseContent: newest first from `next_token` (the newest without)."""
        with self._lock:
            end = _offset(next_token, len(self._events)) if next_token else len(self._events)
            start = max(0, end - PAGE_SIZE)
            document: dict[str, Any] = {"events": self._events[start:end][::-1]}
        if start > 0:
            # The number of older events: a token that stays valid as newer events come.
            document["nextToken"] = base64.urlsafe_b64encode(f"events:{start}".encode()).decode()
        return document

    # --- helpers ------------------------------------------------------------------------------------
    def _add(self, *events: ResourceEvent) -> None:
        with self._lock:
            for event in events:
                at = self._now()
                document = {
                    "stackId": self._stack.physical_id,
                    # A resource's event id as CloudFormation gives it; the stack's own are UUIDs.
                    "eventId": str(uuid.uuid4())
                    if event.resource == self._stack
                    else f"{event.resource.logical_id}-{event.status}-{_timestamp(at)}",
                    "stackName": self._stack.logical_id,
                    "logicalResourceId": event.resource.logical_id,
                    "physicalResourceId": event.resource.physical_id,
                    "resourceType": event.resource.type,
                    "timestamp": _timestamp(at),
                    "resourceStatus": event.status,
                }
                if event.reason is not None:
                    document["resourceStatusReason"] = event.reason
                self._events.append(document)

    def _failed(self) -> list[str]:
        with self._lock:
            return [
                e["logicalResourceId"]
                for e in self._events
                if e["resourceStatus"] == "CREATE_FAILED" and e["logicalResourceId"] != self._stack.logical_id
            ]

    def _created_resources(self) -> list[StackResource]:
        """The resources whose creation began (each once, in order), which a rollback deletes."""
        with self._lock:
            started = {
                (e["logicalResourceId"], e["resourceType"], e["physicalResourceId"]): None
                for e in self._events
                if e["resourceStatus"] == "CREATE_IN_PROGRESS" and e["logicalResourceId"] != self._stack.logical_id
            }
        return [StackResource(*key) for key in started]


def _offset(token: str, count: int) -> int:
    try:
        kind, _, offset = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
        end = int(offset)
    except ValueError as exc:
        raise InvalidNextToken(token) from exc
    if kind != "events" or not 0 < end <= count:
        raise InvalidNextToken(token)
    return end


def _timestamp(moment: datetime) -> str:
    # As ParallelCluster gives them (pcluster.utils.to_iso_timestr): UTC, milliseconds, "Z".
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
