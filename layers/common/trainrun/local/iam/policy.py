"""Identity-policy evaluation as AWS does it, for the local runtime's roles.

Follows the IAM User Guide ("Policy evaluation logic", "IAM JSON policy elements: Condition
operators", "Policy variables"): an explicit Deny wins, an Allow is needed, and every resource a
call touches is authorized on its own with the condition keys AWS fills for that resource:
`aws:RequestTag/*` and `aws:TagKeys` only on the resource being created, `aws:ResourceTag/*` (and
e.g. `ec2:ResourceTag/*`) from the resource's own tags. Which resource types an action has comes
from the Service Authorization Reference (`service_authorization`): an action with none is
authorized against "*" alone.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainrun.local.iam import service_authorization as sar

ContextValue = str | Sequence[str]


@dataclass(frozen=True)
class Resource:
    arn: str  # the ARN of a resource the call touches
    tags: Mapping[str, str] = field(default_factory=dict)  # an existing resource's tags
    request_tags: Mapping[str, str] | None = None  # only on the resource being created


@dataclass(frozen=True)
class Request:
    action: str  # "ec2:CreateSubnet"
    resources: tuple[Resource, ...] = ()  # () = the action has no resource type ("*")
    context: Mapping[str, ContextValue] = field(default_factory=dict)  # other condition keys the call sets


@dataclass(frozen=True)
class Decision:
    allowed: bool
    action: str
    resource: str  # the resource that was denied ("*" when none)
    reason: str


@dataclass(frozen=True)
class StatementRef:
    """One statement of one policy of a principal; `id` is stable across runs."""

    id: str  # "<principal>/<policy>/<index>"
    principal: str
    policy: str
    index: int
    statement: Mapping[str, Any]

    @property
    def actions(self) -> list[str]:
        return _as_list(self.statement.get("Action", self.statement.get("NotAction", [])))


class PolicyError(ValueError):
    """A policy document AWS would reject or that this evaluator cannot read faithfully."""


# --- matching ----------------------------------------------------------------------------
def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


# A request value substituted into a pattern is matched literally: its wildcard characters are
# carried as these private-use stand-ins.
_LITERAL_STAR, _LITERAL_QUESTION = "\ue000", "\ue001"


@functools.lru_cache(maxsize=4096)
def _glob_regex(pattern: str, *, ignore_case: bool = False) -> re.Pattern[str]:
    pieces = {"*": ".*", "?": ".", _LITERAL_STAR: re.escape("*"), _LITERAL_QUESTION: re.escape("?")}
    regex = "".join(pieces.get(c) or re.escape(c) for c in pattern)
    return re.compile(regex + r"\Z", re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def glob_match(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    """StringLike matching: `*` any run of characters (none included), `?` exactly one."""
    return _glob_regex(pattern, ignore_case=ignore_case).match(value) is not None


def action_matches(pattern: str, action: str) -> bool:
    """Action names match case-insensitively, with wildcards."""
    return glob_match(pattern, action, ignore_case=True)


def arn_matches(pattern: str, arn: str) -> bool:
    """ARN matching as IAM does it: each of the six colon-separated parts is matched on its own
    (the resource part keeps its colons), case-sensitively; "*" alone matches anything."""
    if pattern == "*":
        return True
    pattern_parts = pattern.split(":", 5)
    arn_parts = arn.split(":", 5)
    if len(pattern_parts) != len(arn_parts):
        return False
    return all(glob_match(p, a) for p, a in zip(pattern_parts, arn_parts, strict=True))


# --- policy variables ---------------------------------------------------------------------
_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_SPECIAL = {"*": _LITERAL_STAR, "?": _LITERAL_QUESTION, "$": "$"}


class _Unresolved(Exception):
    pass


def _substitute(text: str, context: Mapping[str, ContextValue]) -> str:
    """Replace ${key} (and ${key, 'default'}) from the request context; a missing key without
    a default makes the element not match (IAM User Guide, "Policy variables")."""

    def replace(match: re.Match[str]) -> str:
        body = match.group(1)
        if body in _SPECIAL:
            return _SPECIAL[body]
        key, _, default = body.partition(",")
        value = context.get(key.strip().lower())
        if not isinstance(value, str):
            default = default.strip()
            if len(default) >= 2 and default[0] == default[-1] == "'":
                return default[1:-1]
            raise _Unresolved(key)
        return value.replace("*", _LITERAL_STAR).replace("?", _LITERAL_QUESTION)

    return _VARIABLE.sub(replace, text)


def _pattern_matches(
    pattern: str, value: str, context: Mapping[str, ContextValue], matcher: Callable[[str, str], bool]
) -> bool:
    if "${" in pattern:
        try:
            pattern = _substitute(pattern, context)
        except _Unresolved:
            return False
        if matcher not in (glob_match, arn_matches):
            # Exact operators compare the request's value as it is.
            pattern = pattern.replace(_LITERAL_STAR, "*").replace(_LITERAL_QUESTION, "?")
    return matcher(pattern, value)


# --- conditions ---------------------------------------------------------------------------
def _string_equals(p: str, v: str) -> bool:
    return p == v


def _string_equals_ignore_case(p: str, v: str) -> bool:
    return p.lower() == v.lower()


def _numeric(compare: Callable[[float, float], bool]) -> Callable[[str, str], bool]:
    def match(p: str, v: str) -> bool:
        try:
            return compare(float(v), float(p))
        except ValueError:
            return False

    return match


def _bool(p: str, v: str) -> bool:
    return p.lower() == v.lower()


# name -> (matcher(policy_value, context_value), negated)
_OPERATORS: dict[str, tuple[Callable[[str, str], bool], bool]] = {
    "stringequals": (_string_equals, False),
    "stringnotequals": (_string_equals, True),
    "stringequalsignorecase": (_string_equals_ignore_case, False),
    "stringnotequalsignorecase": (_string_equals_ignore_case, True),
    "stringlike": (glob_match, False),
    "stringnotlike": (glob_match, True),
    "arnequals": (arn_matches, False),
    "arnlike": (arn_matches, False),
    "arnnotequals": (arn_matches, True),
    "arnnotlike": (arn_matches, True),
    "numericequals": (_numeric(lambda v, p: v == p), False),
    "numericnotequals": (_numeric(lambda v, p: v == p), True),
    "numericlessthan": (_numeric(lambda v, p: v < p), False),
    "numericlessthanequals": (_numeric(lambda v, p: v <= p), False),
    "numericgreaterthan": (_numeric(lambda v, p: v > p), False),
    "numericgreaterthanequals": (_numeric(lambda v, p: v >= p), False),
    "bool": (_bool, False),
}
# Operators whose values may hold policy variables (IAM User Guide, "Policy variables").
_VARIABLE_OPERATORS = {"string", "arn"}


def _condition_holds(operator: str, key: str, policy_values: list[str], context: Mapping[str, ContextValue]) -> bool:
    name = operator.lower()
    qualifier = ""
    if ":" in name:
        qualifier, name = name.split(":", 1)
        if qualifier not in ("foranyvalue", "forallvalues"):
            raise PolicyError(f"unknown condition set operator {operator!r}")
    if_exists = name.endswith("ifexists")
    if if_exists:
        name = name[: -len("ifexists")]
    raw = context.get(key.lower())
    if name == "null":
        absent = raw is None or (not isinstance(raw, str) and len(raw) == 0)
        return any(str(p).lower() == ("true" if absent else "false") for p in policy_values)
    if name not in _OPERATORS:
        raise PolicyError(f"condition operator {operator!r} is not supported by the local IAM evaluator")
    matcher, negated = _OPERATORS[name]
    substitute = any(name.startswith(kind) for kind in _VARIABLE_OPERATORS)

    def value_matches(value: str) -> bool:
        for pattern in policy_values:
            if _pattern_matches(pattern, value, context, matcher) if substitute else matcher(pattern, value):
                return True
        return False

    if raw is None:
        if qualifier == "forallvalues":
            return True
        if qualifier == "foranyvalue":
            return False
        # A missing key: IfExists passes; negated operators hold (nothing equals), others fail.
        return if_exists or negated
    values = [raw] if isinstance(raw, str) else list(raw)
    if qualifier == "forallvalues":
        return all(value_matches(v) != negated for v in values)
    if qualifier == "foranyvalue":
        return any(value_matches(v) != negated for v in values)
    if negated:
        return not any(value_matches(v) for v in values)
    return any(value_matches(v) for v in values)


def _conditions_hold(conditions: Mapping[str, Any], context: Mapping[str, ContextValue]) -> bool:
    # Operators AND, keys AND, values OR.
    for operator, keys in conditions.items():
        if not isinstance(keys, Mapping):
            raise PolicyError(f"condition {operator!r} must map condition keys to values")
        for key, values in keys.items():
            if not _condition_holds(operator, str(key), _as_list(values), context):
                return False
    return True


# --- evaluation ---------------------------------------------------------------------------
def _statement_matches_action(statement: Mapping[str, Any], action: str) -> bool:
    if "Action" in statement:
        return any(action_matches(p, action) for p in _as_list(statement["Action"]))
    if "NotAction" in statement:
        return not any(action_matches(p, action) for p in _as_list(statement["NotAction"]))
    raise PolicyError("a statement needs Action or NotAction")


def _statement_matches_resource(statement: Mapping[str, Any], arn: str, context: Mapping[str, ContextValue]) -> bool:
    if "Resource" in statement:
        return any(_pattern_matches(p, arn, context, arn_matches) for p in _as_list(statement["Resource"]))
    if "NotResource" in statement:
        return not any(_pattern_matches(p, arn, context, arn_matches) for p in _as_list(statement["NotResource"]))
    raise PolicyError("an identity-policy statement needs Resource or NotResource")


def resource_context(request: Request, resource: Resource | None) -> dict[str, ContextValue]:
    """The condition keys AWS fills when it authorizes `request` against `resource`, lower-cased."""
    context: dict[str, ContextValue] = {str(k).lower(): v for k, v in request.context.items()}
    if resource is None:
        return context
    prefix, _ = sar.split_action(request.action)
    resource_type = sar.resource_type_of(request.action, resource.arn)
    # Tag keys only where the reference lists them for this resource type (unknown type: AWS
    # would not fill them either).
    supported = resource_type.condition_keys if resource_type else frozenset()
    if "aws:resourcetag/${tagkey}" in supported:
        for key, value in resource.tags.items():
            context[f"aws:resourcetag/{key}".lower()] = value
            if sar.service_has_resource_tag_key(prefix):
                context[f"{prefix}:resourcetag/{key}".lower()] = value
    if resource.request_tags is not None and "aws:requesttag/${tagkey}" in supported | sar.action_condition_keys(
        request.action
    ):
        for key, value in resource.request_tags.items():
            context[f"aws:requesttag/{key}".lower()] = value
        context["aws:tagkeys"] = list(resource.request_tags)
    return context


class PolicySet:
    """One principal's identity policies."""

    def __init__(self, name: str, documents: Sequence[Mapping[str, Any]], *, policy_names: Sequence[str] = ()):
        self.name = name
        self.documents = [dict(d) for d in documents]
        self.policy_names = list(policy_names) or [f"policy{i}" for i in range(len(self.documents))]
        if len(self.policy_names) != len(self.documents):
            raise ValueError("one policy name per document")
        if len(set(self.policy_names)) != len(self.policy_names):
            raise ValueError(f"{name}: policy names repeat: {self.policy_names}")
        self._refs = [
            StatementRef(id=f"{name}/{policy}/{index}", principal=name, policy=policy, index=index, statement=statement)
            for policy, document in zip(self.policy_names, self.documents, strict=True)
            for index, statement in enumerate(_statements_of(document))
        ]

    def __repr__(self) -> str:
        return f"PolicySet({self.name!r}, {len(self._refs)} statements)"

    def statements(self) -> list[StatementRef]:
        return list(self._refs)

    def without(self, statement_id: str) -> PolicySet:
        if statement_id not in {ref.id for ref in self._refs}:
            raise KeyError(statement_id)
        clone = PolicySet.__new__(PolicySet)
        clone.name = self.name
        clone.documents = self.documents
        clone.policy_names = self.policy_names
        clone._refs = [ref for ref in self._refs if ref.id != statement_id]
        return clone

    def evaluate(self, request: Request) -> Decision:
        action = request.action
        if not sar.action_exists(action):
            return Decision(False, action, "*", f"{action} is not an action in the Service Authorization Reference")
        candidates = [ref for ref in self._refs if _statement_matches_action(ref.statement, action)]
        # An action without resource types is authorized against "*" alone, whatever it touches.
        targets: list[Resource | None] = list(request.resources) if sar.has_resource_types(action) else []
        if not targets:
            targets = [None]
        denied: Decision | None = None
        for resource in targets:
            arn = resource.arn if resource is not None else "*"
            context = resource_context(request, resource)
            allowed_by: StatementRef | None = None
            for ref in candidates:
                if not _statement_matches_resource(ref.statement, arn, context):
                    continue
                if not _conditions_hold(ref.statement.get("Condition", {}), context):
                    continue
                if ref.statement.get("Effect") == "Deny":
                    return Decision(False, action, arn, f"explicit deny in {ref.id}")
                allowed_by = allowed_by or ref
            if allowed_by is None and denied is None:
                denied = Decision(False, action, arn, f"no statement of {self.name} allows {action} on {arn}")
        if denied is not None:
            return denied
        return Decision(True, action, "*", "allowed")


def resource_policy_denial(document: Mapping[str, Any], principal_arn: str, request: Request) -> Decision | None:
    """The explicit Deny of a resource-based policy (an S3 bucket policy) that applies to the
    request of `principal_arn`, if any: an explicit deny in any policy wins over every allow (IAM
    User Guide, "Policy evaluation logic"). The policy's Allow statements are left out: within one
    account an identity policy's Allow is enough, so this is never laxer than AWS, only stricter
    where a bucket policy alone would grant."""
    context_of_principal = {"aws:principalarn": principal_arn, "aws:principalaccount": principal_arn.split(":")[4]}
    for statement in _statements_of(document):
        if statement.get("Effect") != "Deny" or not _principal_matches(statement, principal_arn):
            continue
        arn = _applies_to(statement, request, context_of_principal)
        if arn is not None:
            return Decision(False, request.action, arn, "explicit deny in a resource-based policy")
    return None


def service_allowed(document: Mapping[str, Any], services: Iterable[str], request: Request) -> bool:
    """Whether a resource-based policy (a Lambda function's) lets an AWS service make `request`:
    a statement naming one of `services` (its principal's global and regional names,
    "logs.amazonaws.com", "logs.us-west-2.amazonaws.com") whose action, resource and conditions
    hold, and none of them a Deny (IAM User Guide, "Policy evaluation logic"). The request's
    context carries what the service says of itself (aws:SourceArn, aws:SourceAccount)."""
    names = set(services)
    allowed = False
    for statement in _statements_of(document):
        principal = statement.get("Principal")
        named = _as_list(principal.get("Service")) if isinstance(principal, Mapping) else []
        if principal != "*" and not names & set(named):
            continue
        if _applies_to(statement, request) is not None:
            if statement.get("Effect") == "Deny":
                return False
            allowed = True
    return allowed


def _applies_to(
    statement: Mapping[str, Any], request: Request, more_context: Mapping[str, ContextValue] | None = None
) -> str | None:
    """The first of the request's resources ("*" for none) that a resource-based policy's statement
    applies to (its action, resource and conditions), or None."""
    if not _statement_matches_action(statement, request.action):
        return None
    for resource in request.resources or (None,):
        arn = resource.arn if resource is not None else "*"
        context = {**resource_context(request, resource), **(more_context or {})}
        if _statement_matches_resource(statement, arn, context) and _conditions_hold(
            statement.get("Condition", {}), context
        ):
            return arn
    return None


def _principal_matches(statement: Mapping[str, Any], principal_arn: str) -> bool:
    if "Principal" in statement:
        return _names_principal(statement["Principal"], principal_arn)
    if "NotPrincipal" in statement:
        return not _names_principal(statement["NotPrincipal"], principal_arn)
    raise PolicyError("a resource-policy statement needs Principal or NotPrincipal")


def _names_principal(value: Any, principal_arn: str) -> bool:
    """Principal "*", {"AWS": "*"}, the principal's ARN, or its account (id or root ARN)."""
    if value == "*":
        return True
    named = _as_list(value.get("AWS")) if isinstance(value, Mapping) else []
    account = principal_arn.split(":")[4]
    return any(name in ("*", principal_arn, account) or name.endswith(f"::{account}:root") for name in named)


def _statements_of(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    statements = document.get("Statement", [])
    statements = [statements] if isinstance(statements, Mapping) else list(statements)
    for statement in statements:
        if statement.get("Effect") not in ("Allow", "Deny"):
            raise PolicyError(f"statement {statement!r}: Effect must be Allow or Deny")
    return statements


# --- the stack's principals ---------------------------------------------------------------
def stack_principals(
    template_path: Path,
    parameters: Mapping[str, str],
    *,
    region: str,
    account: str,
    stack_name: str,
    resolve: Callable[[Any], Any] | None = None,
) -> dict[str, PolicySet]:
    """Every role template.yaml defines or implies, keyed by the logical id of the function or
    state machine that has it (SAM's implied role) or of the AWS::IAM::Role itself.

    SAM policy templates and managed-policy references are expanded by SAM's own translator;
    intrinsic functions are resolved with the deployed names (`resolve`, default: the names
    trainrun.local.template_deployer gives them)."""
    from trainrun.local.iam import template_roles

    return template_roles.stack_principals(
        template_path, parameters, region=region, account=account, stack_name=stack_name, resolve=resolve
    )


def principal_from_documents(name: str, named_documents: Iterable[tuple[str, Mapping[str, Any]]]) -> PolicySet:
    """A principal whose policies are given as (policy name, document) pairs (the local runtime's
    operator, ParallelCluster API and head-node roles, which template.yaml does not define)."""
    names, documents = [], []
    for policy_name, document in named_documents:
        names.append(policy_name)
        documents.append(document)
    return PolicySet(name, documents, policy_names=names)
