"""What a shell gets from sourcing a file: the tests of `trainrun serve`'s env file."""

from __future__ import annotations

import subprocess
from pathlib import Path


def sourced(env_file: Path) -> dict[str, str]:
    """What `. ENV_FILE` exports in a shell that starts with an empty environment (`trainrun serve`'s
    file, as its message tells a user to use it)."""
    shell = subprocess.run(
        ["env", "-i", "sh", "-c", '. "$1" && env -0', "sh", str(env_file)], capture_output=True, check=True
    )
    pairs = (entry.split("=", 1) for entry in shell.stdout.decode().split("\0") if entry)
    return {key: value for key, value in pairs if key not in ("PWD", "SHLVL", "_")}
