"""README.md's "A first real run on AWS" as commands, for the tests that follow it: read from the
README itself (docs/deploying.md points to them), so the guide cannot drift from what is tested."""

from __future__ import annotations

import re
import shlex
import string
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SECTION = "## A first real run on AWS"


def first_run_commands() -> list[list[str]]:
    """The section's shell commands as argv lists: continuation lines joined, comments dropped,
    its variables (REGION=..., BUCKET=...) expanded where later commands use them."""
    text = README.read_text()
    start = text.index(SECTION)
    section = text[start : text.index("\n## ", start + len(SECTION))]
    variables: dict[str, str] = {}
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = [string.Template(word).substitute(variables) for word in shlex.split(line, comments=True)]
            if words and all(re.match(r"^[A-Z_]+=", word) for word in words):
                for word in words:
                    name, _, value = word.partition("=")
                    variables[name] = value
            elif words:
                commands.append(words)
    return commands


def command(*prefix: str, naming: str) -> list[str]:
    """The one command that starts with `prefix` and has the word `naming`."""
    found = [words for words in first_run_commands() if words[: len(prefix)] == list(prefix) and naming in words]
    assert len(found) == 1, f"README.md's first run has no single `{' '.join(prefix)} ... {naming}` command"
    return found[0]


def deploy_parameters() -> dict[str, str]:
    """The `sam deploy` command's --parameter-overrides."""
    deploy = command(".tools/bin/sam", "deploy", naming="--parameter-overrides")
    overrides = deploy[deploy.index("--parameter-overrides") + 1 :]
    return dict(override.split("=", 1) for override in overrides)


def upload() -> list[str]:
    """`aws s3 cp RUN.yaml s3://<ConfigBucketName>/runs/...`: the run file is its fourth word."""
    (found,) = [words for words in first_run_commands() if words[:3] == ["aws", "s3", "cp"] and "/runs/" in words[4]]
    return found
