"""The trainrun command line: one typer app, its commands grouped by what they need.

- trainrun.cli.offline: validate, plan, cluster-config, parse-log, examples (no AWS account);
- trainrun.cli.local: local and serve (the control plane on this machine);
- trainrun.cli.ops: submit, runs, status, watch, logs, plot, cancel (a deployed stack,
  or the local one `trainrun serve` runs).
"""

from __future__ import annotations

# Importing the command modules registers their commands on the app.
import trainrun.cli.local
import trainrun.cli.offline
import trainrun.cli.ops  # noqa: F401
from trainrun.cli.common import app


def main() -> None:
    app()
