"""What the Lambda layer holds of the trainrun package: everything but what only runs on a
developer's or an operator's machine. `sam build` runs this (layers/common/Makefile) to copy the
package into the layer; tests/unit/test_layer.py checks that what it copies is exactly what the
functions import, so a new CLI or local-runtime module cannot ship to Lambda unnoticed.

Usage: python3 layer_contents.py DESTINATION   (copies trainrun/ into DESTINATION/trainrun/)
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent / "trainrun"
# The command line, the operator commands (the cost planner among them), the local runtime
# (moto, the local ParallelCluster API, the local head node) and where those two find the
# project's files (examples, template): never imported by a function.
NOT_IN_LAYER = frozenset({"__main__.py", "cli", "ops", "local", "project_files.py"})
# What the Lambda Python runtime has, so requirements.txt leaves out (the X-Ray SDK needs botocore).
LAMBDA_RUNTIME_PACKAGES = frozenset({"boto3", "botocore"})


def layer_files() -> Iterator[Path]:
    """Every file of the package the layer holds, relative to the package's parent."""
    for path in sorted(PACKAGE.rglob("*")):
        relative = path.relative_to(PACKAGE)
        if path.is_dir() or relative.parts[0] in NOT_IN_LAYER or "__pycache__" in relative.parts:
            continue
        yield path.relative_to(PACKAGE.parent)


def copy_into(destination: Path) -> None:
    for relative in layer_files():
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PACKAGE.parent / relative, target)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    copy_into(Path(sys.argv[1]))
