"""The trainrun wheel outside the checkout: built from the checkout's tracked files, installed into
fresh virtualenvs, run from a directory that is not the checkout, with no PYTHONPATH.

Each virtualenv holds the wheel and exactly the distributions its metadata requires (the base
install's, or with the `local` extra), with what they require in turn: linked from this
interpreter's site-packages rather than downloaded, so the test needs no network beyond pip's
build of the wheel (setuptools, usually from pip's cache) and takes seconds. A package the CLI
imports but the metadata forgets is then missing, as it would be for `pip install trainrun`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from importlib.metadata import distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from .conftest import NEEDS_LOCAL_HEAD_NODE, ROOT

# The local runtime's packages: never required by the base install.
LOCAL_ONLY = {"moto", "cfn-lint", "policy-sentry", "aws-sam-translator", "werkzeug", "flask"}


# Run by the base install's interpreter: import every trainrun module outside trainrun.local, and
# every third-party package any of them imports anywhere in its code; print the counts.
IMPORT_EVERYTHING_BUT_THE_LOCAL_RUNTIME = """
import ast, importlib, pkgutil, sys
import trainrun

names = [m.name for m in pkgutil.walk_packages(trainrun.__path__, "trainrun.")]
names = [n for n in names if n != "trainrun.__main__" and not n.startswith("trainrun.local")]
packages = set()
for name in names:
    module = importlib.import_module(name)
    for node in ast.walk(ast.parse(open(module.__file__).read())):
        if isinstance(node, ast.Import):
            packages.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            packages.add(node.module.split(".")[0])
packages -= {"trainrun", "__future__", *sys.stdlib_module_names}
for package in sorted(packages):
    importlib.import_module(package)
print(len(names), ",".join(sorted(packages)))
"""


def _run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300):
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout, check=False
    )


def _tracked_copy(destination: Path) -> Path:
    """The checkout's tracked files (as they are in the working tree), as a fresh clone has them."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for relative in filter(None, listed.decode().split("\0")):
        source = ROOT / relative
        if source.is_file():
            (destination / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / relative)
    return destination


def _requirements(wheel: Path, extra: str | None) -> list[Requirement]:
    """The Requires-Dist lines of the wheel's metadata that apply to the base install (or with `extra`)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    lines = [
        line.removeprefix("Requires-Dist: ") for line in metadata.splitlines() if line.startswith("Requires-Dist:")
    ]
    requirements = [Requirement(line) for line in lines]
    return [r for r in requirements if r.marker is None or r.marker.evaluate({"extra": extra or ""})]


def _link_distributions(requirements: Iterable[Requirement], site_packages: Path) -> None:
    """Make `requirements` and what they require importable from `site_packages`: each
    distribution's top-level files and metadata, linked from where this interpreter has them."""
    todo = [(r.name, frozenset(r.extras)) for r in requirements]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name.lower(), extras) in done:
            continue
        done.add((name.lower(), extras))
        installed = distribution(name)
        assert installed.files is not None, f"{name}: installed without a RECORD"
        for top in {f.parts[0] for f in installed.files if f.parts[0] != ".."}:
            link = site_packages / top
            if not link.exists():
                link.symlink_to(Path(str(installed.locate_file(top))))
        for line in installed.requires or []:
            requirement = Requirement(line)
            markers = [{"extra": e} for e in extras | {""}]
            if requirement.marker is None or any(requirement.marker.evaluate(m) for m in markers):
                todo.append((requirement.name, frozenset(requirement.extras)))


def _without_pythonpath() -> dict[str, str]:
    """This process's environment without PYTHONPATH, through which the tests import the checkout's trainrun."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _install(wheel: Path, venv: Path, extra: str | None) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", python]
    # Without PYTHONPATH: pip would find the checkout's trainrun there and call it installed already.
    unpathed = _without_pythonpath()
    subprocess.run([*pip, "install", "--quiet", "--no-deps", wheel], check=True, env=unpathed)
    site_packages = Path(
        _run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=venv).stdout.strip()
    )
    _link_distributions(_requirements(wheel, extra), site_packages)
    check = _run(*pip, "check", cwd=venv, env=unpathed)
    assert check.returncode == 0, check.stdout + check.stderr
    return venv


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = _tracked_copy(tmp_path_factory.mktemp("source"))
    dist = tmp_path_factory.mktemp("dist")
    built = _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", dist, source, cwd=dist)
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("trainrun-*.whl")
    return wheel


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory with nothing of the checkout in it."""
    return tmp_path_factory.mktemp("elsewhere")


@pytest.fixture(scope="module")
def environment(outside: Path) -> dict[str, str]:
    # No PYTHONPATH (the tests import the checkout's package through it), and a home of its own.
    return _without_pythonpath() | {"HOME": str(outside), "COLUMNS": "200"}


@pytest.fixture(scope="module")
def base_install(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _install(wheel, tmp_path_factory.mktemp("base") / "venv", extra=None)


def test_the_base_install_requires_the_clis_packages_and_the_local_extra_the_local_runtimes(wheel: Path) -> None:
    base = {r.name.lower() for r in _requirements(wheel, None)}
    local = {r.name.lower() for r in _requirements(wheel, "local")}
    assert {"boto3", "typer", "rich", "pydantic", "pyyaml", "aws-lambda-powertools"} <= base
    assert base & LOCAL_ONLY == set()
    assert {"moto", "cfn-lint", "policy-sentry", "aws-sam-translator"} <= local - base


def test_the_wheel_holds_the_package_data_and_the_project_files(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = _run("git", "ls-files", cwd=ROOT).stdout.split()
    # Every file of the package beside its modules (the head node's scripts, the IAM policies).
    data = {
        path.removeprefix("layers/common/")
        for path in tracked
        if path.startswith("layers/common/trainrun/") and not path.endswith(".py")
    }
    assert data and data <= names, sorted(data - names)
    # What the local runtime deploys, and every example, as the checkout has them.
    shipped = {n.removeprefix("trainrun/_project/") for n in names if n.startswith("trainrun/_project/")}
    project = {
        p for p in tracked if p == "template.yaml" or p.startswith(("statemachines/", "functions/", "examples/"))
    }
    assert "functions/start_run/app.py" in shipped
    assert shipped == project


def test_the_installed_cli_validates_and_plans_an_example_it_ships(
    base_install: Path, outside: Path, environment: dict[str, str]
) -> None:
    trainrun = base_install / "bin" / "trainrun"
    helped = _run(trainrun, "--help", cwd=outside, env=environment)
    assert helped.returncode == 0, helped.stderr
    assert "validate" in helped.stdout and "local" in helped.stdout

    found = _run(trainrun, "examples", cwd=outside, env=environment)
    assert found.returncode == 0, found.stderr
    examples = Path(found.stdout.strip())
    assert examples.is_relative_to(base_install) and (examples / "single-node.yaml").is_file()

    validated = _run(trainrun, "validate", examples / "single-node.yaml", cwd=outside, env=environment)
    assert validated.returncode == 0, validated.stderr
    assert "is valid" in validated.stdout
    planned = _run(trainrun, "plan", examples / "bert-large-phase1.yaml", "--json", cwd=outside, env=environment)
    assert planned.returncode == 0, planned.stderr
    assert json.loads(planned.stdout)["name"] == "bert-large-phase1"


def test_the_base_install_has_no_local_runtime_packages_and_reads_its_files_from_itself(
    base_install: Path, outside: Path, environment: dict[str, str]
) -> None:
    python = base_install / "bin" / "python"
    moto = _run(python, "-c", "import moto", cwd=outside, env=environment)
    assert "No module named 'moto'" in moto.stderr
    # Every module but the local runtime's imports, and so does every package they import,
    # lazily or not (boto3 for the run commands, matplotlib for plot): the base install is enough.
    script = outside / "import_everything.py"
    script.write_text(IMPORT_EVERYTHING_BUT_THE_LOCAL_RUNTIME)
    imported = _run(python, script, cwd=outside, env=environment)
    assert imported.returncode == 0, imported.stderr
    modules, packages = imported.stdout.split()
    assert int(modules) > 50 and {"boto3", "typer", "rich", "matplotlib", "pydantic"} <= set(packages.split(","))
    where = _run(
        python,
        "-c",
        "from trainrun.project_files import checkout_root, local_runs, project_root; "
        "print(project_root()); print(checkout_root()); print(local_runs())",
        cwd=outside,
        env=environment,
    )
    assert where.returncode == 0, where.stderr
    project_root, checkout_root, local_runs = where.stdout.split()
    assert Path(project_root).is_relative_to(base_install) and (Path(project_root) / "template.yaml").is_file()
    assert checkout_root == "None"
    assert Path(local_runs) == outside / ".trainrun" / "local-runs"  # in the home, not in the package


def test_the_local_extra_runs_the_smallest_example_outside_the_checkout(
    wheel: Path, tmp_path_factory: pytest.TempPathFactory, outside: Path, environment: dict[str, str]
) -> None:
    aws_cli = ROOT / ".venv-awscli" / "bin" / "aws"
    if not aws_cli.is_file():
        pytest.skip("no .venv-awscli for the head node's aws CLI (`make demo` or `make test` builds it)")
    venv = _install(wheel, tmp_path_factory.mktemp("local") / "venv", extra="local")
    examples = Path(_run(venv / "bin" / "trainrun", "examples", cwd=outside, env=environment).stdout.strip())
    calls = outside / "iam-calls.jsonl"
    run = _run(
        venv / "bin" / "trainrun",
        "local",
        examples / "single-node.yaml",
        "--json",
        cwd=outside,
        env=environment | {"TRAINRUN_AWS_CLI": str(aws_cli), "TRAINRUN_IAM_CALLS": str(calls)},
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    # The JSON summary a script reads (tests/e2e/test_cli.py has the view a person reads)
    summary = json.loads(run.stdout)
    assert summary["status"] == "SUCCEEDED"
    assert summary["states"][:2] == ["Continued run?", "Load run spec"]
    assert summary["states"][-1] == "Run succeeded"
    assert summary["state_transitions"] == len(summary["states"])
    assert summary["error"] is None
    assert {"code", "severity", "message"} <= set(summary["findings"][0])
    created = " ".join(summary["resources"]["created"])
    assert "vpc " in created and "file-system " in created and "cluster " in created
    assert summary["resources"]["remaining"] == []
    # The stand-in workload the wheel ships ran on the local Slurm: compile totals and the last step
    assert summary["progress"]["compile"] == {
        "graphs": 2,
        "succeeded": 2,
        "failed": 0,
        "cache_hits": 0,
        "cached_failures": 0,
        "compiled": 2,
    }
    train = summary["progress"]["train"]
    assert train["step"] == 40 and train["loss"] > 0 and train["throughput"] > 0 and train["learning_rate"] > 0
    assert calls.stat().st_size > 0


# Only this test needs the local head node (real Slurm, root): the others run anywhere.
for mark in NEEDS_LOCAL_HEAD_NODE:
    test_the_local_extra_runs_the_smallest_example_outside_the_checkout = mark(
        test_the_local_extra_runs_the_smallest_example_outside_the_checkout
    )
