"""The trainrun command line: one typer app, its commands grouped by what they need.

- trainrun.cli.offline: validate, plan, cluster-config, parse-log, examples (no AWS account);
- trainrun.cli.local: local and serve (the control plane on this machine);
- trainrun.cli.ops: submit, runs, status, watch, logs, plot, cancel (a deployed stack,
  or the local one `trainrun serve` runs).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

# Importing the command modules registers their commands on the app.
import trainrun.cli.local
import trainrun.cli.offline
import trainrun.cli.ops  # noqa: F401
from trainrun.cli.common import app, out


def _version(asked: bool) -> None:
    if asked:
        try:
            out.print(f"trainrun {version('trainrun')}", highlight=False)
        except PackageNotFoundError:  # imported from a checkout that was never installed
            out.print("trainrun (not installed: a source checkout)", highlight=False)
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print trainrun's version and exit."),
    ] = False,
) -> None:
    """Run distributed training on AWS Trainium from one YAML run file."""


def main() -> None:
    # The name in usage lines, however it was started (`python -m trainrun` included).
    app(prog_name="trainrun")
