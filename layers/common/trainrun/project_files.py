"""Where the CLI and the local runtime find the project's own files: the example run files and
account fixture (examples/), and what the local runtime deploys as CloudFormation would (the SAM
template, the state machines' ASL, the functions' handlers).

In a checkout (the editable install of `make venv`, or PYTHONPATH=layers/common) they are at the
repository's root. In an installed wheel they are package data under trainrun/_project/, in the
same layout: setup.py copies them there when it builds the wheel, so git holds each file once.
Standard library only: setup.py loads this module from the source tree to learn what to copy.
The Lambda layer never holds it (layers/common/layer_contents.py).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

TEMPLATE = "template.yaml"
# What a wheel carries of the repository, relative to its root (and to PACKAGED).
SHIPPED = (TEMPLATE, "statemachines", "functions", "examples")
# The directory of the installed package that holds them.
PACKAGED = "_project"
# Where the package sits in a checkout, relative to the repository's root.
CHECKOUT_PACKAGE = ("layers", "common", "trainrun")


def _package() -> Path:
    return Path(str(files("trainrun"))).resolve()


def checkout_root() -> Path | None:
    """The repository's root when trainrun is imported from a checkout; None when it is installed
    from a wheel. Development-only things live there (.venv-awscli, .local-runs)."""
    package = _package()
    if package.parts[-len(CHECKOUT_PACKAGE) :] != CHECKOUT_PACKAGE:
        return None
    root = package.parents[len(CHECKOUT_PACKAGE) - 1]
    return root if (root / TEMPLATE).is_file() else None


def project_root() -> Path:
    """The directory that holds SHIPPED: the installed package's copy, or the checkout's root."""
    packaged = _package() / PACKAGED
    if packaged.is_dir():
        return packaged
    root = checkout_root()
    if root is None:
        raise FileNotFoundError(
            f"trainrun's project files are neither installed ({packaged}) nor in a checkout around {_package()}"
        )
    return root


def examples() -> Path:
    """The example run files, the account fixtures and the local runtime's stand-ins."""
    return project_root() / "examples"


def local_runs() -> Path:
    """Where the local runtime keeps what outlives a run (the IAM calls file): the checkout's
    .local-runs (`make iam-report` reads it), or ~/.trainrun/local-runs when installed (never
    inside the installed package)."""
    root = checkout_root()
    return root / ".local-runs" if root is not None else Path.home() / ".trainrun" / "local-runs"
