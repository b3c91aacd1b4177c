"""The Lambda layer holds exactly the trainrun modules the functions import: no CLI, no operator
commands, no local runtime, nothing that imports moto (layers/common/layer_contents.py)."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LAYER_SOURCE = ROOT / "layers" / "common"
BUILT_LAYER = ROOT / ".aws-sam" / "build" / "CommonLayer" / "python"


def _layer_contents() -> ModuleType:
    spec = importlib.util.spec_from_file_location("layer_contents", LAYER_SOURCE / "layer_contents.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _module_file(name: str) -> Path | None:
    path = LAYER_SOURCE.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imported_names(path: Path, package: str) -> set[str]:
    """Every module name `path` imports, at any depth of its code (lazy imports included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*parts, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _handlers_closure() -> set[str]:
    """The trainrun modules reachable from the functions' handlers, their packages included."""
    todo = [n for app in (ROOT / "functions").glob("*/app.py") for n in _imported_names(app, "")]
    reached: set[str] = set()
    while todo:
        parts = todo.pop().split(".")
        if parts[0] != "trainrun":
            continue
        for depth in range(1, len(parts) + 1):
            name = ".".join(parts[:depth])
            path = _module_file(name)
            if path is None or name in reached:
                continue
            reached.add(name)
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            todo.extend(_imported_names(path, package))
    return reached


def _module_names(files: list[Path]) -> set[str]:
    names = set()
    for file in files:
        if file.suffix == ".py":
            parts = file.with_suffix("").parts
            names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_the_layer_holds_exactly_the_modules_the_handlers_import() -> None:
    closure = _handlers_closure()
    assert {
        "trainrun.steps.run",
        "trainrun.steps.progress",
        "trainrun.adapters.fsx",
    } <= closure  # the walk sees the steps
    shipped = _module_names(list(_layer_contents().layer_files()))
    # Nothing a handler needs is missing (an ImportError in Lambda), nothing else is shipped.
    assert sorted(closure - shipped) == []
    assert sorted(shipped - closure) == []


def test_no_module_of_the_layer_imports_the_cli_the_local_runtime_or_moto() -> None:
    forbidden = ("moto", "trainrun.cli", "trainrun.ops", "trainrun.local", "typer", "rich", "matplotlib")
    offenders = {}
    for relative in _layer_contents().layer_files():
        if relative.suffix == ".py":
            package = ".".join(relative.parent.parts)
            names = _imported_names(LAYER_SOURCE / relative, package)
            bad = sorted(n for n in names if n.split(".")[0] in forbidden or n.startswith(forbidden))
            if bad:
                offenders[str(relative)] = bad
    assert offenders == {}


def test_the_layer_keeps_the_package_data_the_steps_read() -> None:
    files = {str(f) for f in _layer_contents().layer_files()}
    assert "trainrun/scripts/node-configured.sh" in files


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (LAYER_SOURCE / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            [specifier] = requirement.specifier
            assert specifier.operator == "==", f"{line}: not pinned exactly"
            pins[canonicalize_name(requirement.name)] = specifier.version
    return pins


def test_the_layer_requirements_hold_everything_they_need_but_the_lambda_runtime() -> None:
    # The Makefile installs requirements.txt without resolving dependencies (so that the X-Ray
    # SDK's botocore stays out): whatever a listed package needs must be listed too, at a version
    # it accepts, unless the Lambda runtime has it. What each needs is read from this venv, which
    # `make venv` installs with the same pins.
    pins = _pins()
    runtime = {canonicalize_name(name) for name in _layer_contents().LAMBDA_RUNTIME_PACKAGES}
    assert {"aws-lambda-powertools", "aws-xray-sdk", "pydantic", "pyyaml"} <= set(pins)
    assert not set(pins) & runtime
    missing = []
    for name, version in sorted(pins.items()):
        assert importlib.metadata.version(name) == version, f"the venv has another {name}: make venv"
        for needed in map(Requirement, importlib.metadata.requires(name) or []):
            if needed.marker is not None and not needed.marker.evaluate({"extra": ""}):
                continue  # an extra the layer does not ask for, or another platform's
            needed_name = canonicalize_name(needed.name)
            if needed_name in runtime:
                continue
            if needed_name not in pins or not needed.specifier.contains(pins[needed_name], prereleases=True):
                missing.append(f"{name} needs {needed}")
    assert missing == []


@pytest.mark.skipif(not BUILT_LAYER.is_dir(), reason="no sam build output: `make build` builds the layer (CI does)")
def test_sam_builds_the_layer_with_the_handlers_modules_and_without_moto() -> None:
    # What `make build` last built (CI builds right before the tests; a local build may be older
    # than the checkout, so only what no build may ever hold is checked here).
    built = {p.relative_to(BUILT_LAYER).parts[1] for p in (BUILT_LAYER / "trainrun").rglob("*.py")}
    assert {"steps", "model", "adapters", "handlers.py"} & built
    assert not built & {"cli", "ops", "local", "__main__.py", "project_files.py"}, sorted(built)
    top_level = {p.name for p in BUILT_LAYER.iterdir()}
    assert {"pydantic", "aws_lambda_powertools", "yaml", "aws_xray_sdk", "wrapt"} <= top_level
    never = {"moto", "typer", "rich", "matplotlib", *_layer_contents().LAMBDA_RUNTIME_PACKAGES}
    assert not top_level & never, top_level
