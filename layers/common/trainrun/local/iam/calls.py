"""The record of every authorization decision, and its replay against other policies.

Each call a principal makes is kept as the engine's `Request`s with their decisions: in memory
on the runtime (`LocalRuntime.iam.enforcer.calls`) and one JSON object a line in the calls file
(`trainrun.local.iam.access.calls_log_path`). Replaying the recorded requests against a policy
set with one statement removed shows whether that statement is needed: a statement whose
removal denies no recorded call is an unused grant.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from trainrun.local.iam import service_authorization as sar
from trainrun.local.iam.policy import Decision, PolicySet, Request, Resource, StatementRef


@dataclass(frozen=True)
class CallRecord:
    """One authorization decision: who asked, which operation, the request, the answer."""

    principal: str
    principal_arn: str
    operation: str
    request: Request
    allowed: bool
    reason: str
    # Which local stack and region the call was made in (the report rebuilds its policies).
    stack: str = ""
    region: str = ""
    time: float = field(default_factory=time.time)

    @property
    def action(self) -> str:
        return self.request.action

    @property
    def resources(self) -> tuple[str, ...]:
        return tuple(r.arn for r in self.request.resources) or ("*",)

    def to_json(self) -> str:
        return json.dumps(
            {
                "principal": self.principal,
                "principal_arn": self.principal_arn,
                "operation": self.operation,
                "action": self.request.action,
                "resources": [
                    {"arn": r.arn, "tags": dict(r.tags), "request_tags": _maybe_dict(r.request_tags)}
                    for r in self.request.resources
                ],
                "context": {k: v if isinstance(v, str) else list(v) for k, v in self.request.context.items()},
                "allowed": self.allowed,
                "reason": self.reason,
                "stack": self.stack,
                "region": self.region,
                "time": round(self.time, 3),
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, line: str) -> CallRecord:
        data = json.loads(line)
        resources = tuple(
            Resource(r["arn"], tags=r.get("tags") or {}, request_tags=r.get("request_tags")) for r in data["resources"]
        )
        return cls(
            principal=data["principal"],
            principal_arn=data["principal_arn"],
            operation=data["operation"],
            request=Request(data["action"], resources, data.get("context") or {}),
            allowed=data["allowed"],
            reason=data["reason"],
            stack=data.get("stack", ""),
            region=data.get("region", ""),
            time=data.get("time", 0.0),
        )


def _maybe_dict(value: Mapping[str, str] | None) -> dict[str, str] | None:
    return None if value is None else dict(value)


def read(path: Path) -> Iterator[CallRecord]:
    if not path.exists():
        return
    with path.open() as lines:
        for line in lines:
            if line.strip():
                yield CallRecord.from_json(line)


def append(path: Path, records: Iterable[CallRecord]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as log:
        for record in records:
            log.write(record.to_json() + "\n")


def replay(policies: PolicySet, records: Iterable[CallRecord]) -> list[tuple[CallRecord, Decision]]:
    """The decisions `policies` gives the recorded requests that were allowed when made."""
    return [(record, policies.evaluate(record.request)) for record in records if record.allowed]


def denied_without(
    policies: PolicySet, statement: StatementRef, records: Iterable[CallRecord]
) -> list[tuple[CallRecord, Decision]]:
    """The recorded calls the principal could no longer make without `statement`."""
    return [
        (record, decision)
        for record, decision in replay(policies.without(statement.id), records)
        if not decision.allowed
    ]


def unused_statements(policies: PolicySet, records: Iterable[CallRecord]) -> list[StatementRef]:
    """The statements of `policies` whose removal denies none of the recorded calls."""
    mine = [record for record in records if record.principal == policies.name]
    return [statement for statement in policies.statements() if not denied_without(policies, statement, mine)]


def by_principal(records: Iterable[CallRecord]) -> dict[str, list[CallRecord]]:
    grouped: dict[str, list[CallRecord]] = {}
    for record in records:
        grouped.setdefault(record.principal, []).append(record)
    return grouped


def as_rows(records: Iterable[CallRecord]) -> list[tuple[str, str, str, bool]]:
    """(principal, action, resource, allowed), each once, sorted."""
    rows = {
        (record.principal, record.action, resource, record.allowed)
        for record in records
        for resource in record.resources
    }
    return sorted(rows)


def dependent_rows(records: Iterable[CallRecord]) -> list[tuple[str, str, str, str, bool]]:
    """(principal, operation, dependent action, resource, allowed), each once, sorted: the
    recorded requests for a dependent action of their operation (the Service Authorization
    Reference's "Dependent actions" column, trainrun.local.iam.operations.dependent_requests)."""
    rows = {
        (record.principal, record.operation, record.action, resource, record.allowed)
        for record in records
        if sar.action_exists(record.operation) and record.action in sar.dependent_actions(record.operation)
        for resource in record.resources
    }
    return sorted(rows)
