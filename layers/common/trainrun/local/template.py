"""Read template.yaml the way CloudFormation would, for the local runtime.

Only the intrinsic functions the template uses are resolved (Ref, Fn::GetAtt, Fn::Sub,
Fn::Split, Fn::If/Equals/Not in conditions, AWS::NoValue). Anything else is an error here rather than a silently
wrong deployment, so adding a new intrinsic to the template means teaching it to this file.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cfnlint.decode import cfn_yaml

# ${Name} is replaced; ${!Name} is CloudFormation's escape for a literal ${Name}.
_SUB_VARIABLE = re.compile(r"\$\{(!?)([^}]*)\}")


# Ref AWS::NoValue: the property (or list item) is removed, as CloudFormation does.
_NO_VALUE = object()


class TemplateError(Exception):
    """template.yaml uses something the local runtime cannot deploy."""


def load_template(path: Path) -> dict[str, Any]:
    """The template as plain dicts and lists: a copy of its one parse while the file is unchanged
    (a runtime reads it three times as it starts, and the tests start hundreds of runtimes)."""
    stat = path.stat()
    return copy.deepcopy(_parsed(str(path.resolve()), stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=4)
def _parsed(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    # cfn-lint returns its own dict/str subclasses carrying line marks; plain types are simpler.
    template: dict[str, Any] = _plain(cfn_yaml.load(path))
    return template


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


class Resolver:
    """Resolves intrinsic functions against parameters, pseudo parameters and deployed resources."""

    def __init__(
        self,
        template: dict[str, Any],
        *,
        parameters: Mapping[str, str],
        pseudo: Mapping[str, str],
        ref: Callable[[str], str],
        get_att: Callable[[str, str], str],
    ):
        self._template = template
        self._parameters = {
            name: str(parameters.get(name, spec.get("Default", "")))
            for name, spec in template.get("Parameters", {}).items()
        }
        for name, value in self._parameters.items():
            _check_parameter(name, value, template["Parameters"][name])
        self._pseudo = pseudo
        self._ref = ref
        self._get_att = get_att
        self.conditions = {name: bool(self.resolve(expr)) for name, expr in template.get("Conditions", {}).items()}

    @property
    def parameters(self) -> dict[str, str]:
        """Every template parameter's value: the given one, else its default."""
        return dict(self._parameters)

    def resolve(self, value: Any) -> Any:
        resolved = self._resolve(value)
        return None if resolved is _NO_VALUE else resolved

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [item for item in (self._resolve(v) for v in value) if item is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return _NO_VALUE if arg == "AWS::NoValue" else self._resolve_ref(arg)
            if key == "Fn::GetAtt":
                logical, attribute = arg if isinstance(arg, list) else arg.split(".", 1)
                return self._get_att(logical, attribute)
            if key == "Fn::Sub":
                return self._sub(arg)
            if key == "Fn::Equals":
                left, right = (self.resolve(v) for v in arg)
                return left == right
            if key == "Fn::Not":
                return not self.resolve(arg[0])
            if key == "Fn::If":
                condition, when_true, when_false = arg
                return self._resolve(when_true if self.conditions[condition] else when_false)
            if key == "Fn::Split":
                delimiter, source = arg
                return str(self.resolve(source)).split(delimiter)
            if key == "Fn::Join":
                delimiter, values = arg
                return delimiter.join(str(item) for item in self.resolve(values))
            if key.startswith("Fn::"):
                raise TemplateError(f"the local runtime does not resolve {key}")
        entries = ((k, self._resolve(v)) for k, v in value.items())
        return {k: v for k, v in entries if v is not _NO_VALUE}

    def _resolve_ref(self, name: str) -> str:
        if name in self._pseudo:
            return self._pseudo[name]
        if name in self._parameters:
            return self._parameters[name]
        return self._ref(name)

    def _sub(self, arg: Any) -> str:
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(arg[1]))

        def replace(match: re.Match[str]) -> str:
            escaped, name = match.groups()
            if escaped:
                return "${" + name + "}"
            if name in variables:
                return str(variables[name])
            if "." in name and name.split(".", 1)[0] in self._template.get("Resources", {}):
                logical, attribute = name.split(".", 1)
                return self._get_att(logical, attribute)
            return self._resolve_ref(name)

        return _SUB_VARIABLE.sub(replace, text)


def _check_parameter(name: str, value: str, spec: Mapping[str, Any]) -> None:
    """Refuse a parameter value CloudFormation refuses (MinValue, MaxValue, AllowedValues)."""
    allowed = spec.get("AllowedValues")
    if allowed is not None and value not in {str(v) for v in allowed}:
        raise TemplateError(f"parameter {name}={value!r} is not one of its AllowedValues {allowed}")
    if spec.get("Type") != "Number" or ("MinValue" not in spec and "MaxValue" not in spec):
        return
    try:
        number = float(value)
    except ValueError:
        raise TemplateError(f"parameter {name}={value!r} is not a Number") from None
    if "MinValue" in spec and number < float(spec["MinValue"]):
        raise TemplateError(f"parameter {name}={value} is below its MinValue {spec['MinValue']}")
    if "MaxValue" in spec and number > float(spec["MaxValue"]):
        raise TemplateError(f"parameter {name}={value} is above its MaxValue {spec['MaxValue']}")
