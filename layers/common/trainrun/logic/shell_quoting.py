"""The one place that turns values into command-line text.

Every run-file field other than the shell fields (`workload.setup`, `compile`, `train`) is
untrusted data. It is checked against a strict pattern in `trainrun.model.run_file`, and it reaches a
command line (SSM scripts, sbatch wrappers) only through these functions, so it is always one
shell word whatever it contains. Never build command text with f-strings around a field.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from trainrun.model.run_file import env_name_problem


def quote(value: str) -> str:
    """One shell word that stands for exactly `value`."""
    return shlex.quote(value)


def join(argv: Sequence[str]) -> str:
    """A command line that a shell splits back into exactly `argv`."""
    return shlex.join(argv)


def env_words(env: Mapping[str, str]) -> list[str]:
    """`NAME=value` words for env(1), one per variable (quote or join them as any value); names are
    checked: each is one a run may set."""
    words = []
    for name, value in env.items():
        problem = env_name_problem(name)
        if problem is not None:
            raise ValueError(f"{name!r} is not an environment variable name a run may set: {problem}")
        words.append(f"{name}={value}")
    return words
