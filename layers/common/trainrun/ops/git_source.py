"""A git workload's ref, looked up where the run will clone it from (`trainrun plan --check`).

The head node clones workload.source.git without credentials (git clone [--branch REF], then a
checkout of REF: trainrun.logic.head_node_scripts), at Prepare head node, after the network, the
file system and the cluster exist. `git ls-remote` against the same https URL, also without
credentials (no prompt), tells before the run whether the repository can be read so and whether
the ref is one of its branches or tags.

What cannot be checked: an SSH URL (git@host:...; the head node's key is not the operator's), a
commit id (servers advertise branch and tag tips only), a server plan --check cannot reach (no
network here), and anything from Load run spec (the Lambda runtime has no git): those are INFO
findings, and the clone is the first to try them.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable

from trainrun.logic.head_node_scripts import is_commit_id
from trainrun.model.findings import Code, Finding, Severity
from trainrun.model.run_file import RunSpec

LS_REMOTE_TIMEOUT_SECONDS = 30
# At most this many branch names are suggested when the ref is not there.
_SUGGESTED = 5

Runner = Callable[[str], subprocess.CompletedProcess[str]]


# What git says when the server answered that the repository is not there or needs credentials
# (as opposed to a network that could not reach it, which says nothing about the repository).
_REFUSED = re.compile(
    r"not found|does not appear to be a git repository|could not read Username|Authentication failed|"
    r"terminal prompts disabled|The requested URL returned error: (401|403|404)",
    re.IGNORECASE,
)


def _ls_remote(url: str) -> subprocess.CompletedProcess[str]:
    # As the head node clones: no credentials (the operator's credential helpers are switched
    # off) and no prompt for them.
    return subprocess.run(  # noqa: S603 - argv built here, no shell
        ["git", "-c", "credential.helper=", "ls-remote", "--", url],  # noqa: S607 - git from PATH
        capture_output=True,
        text=True,
        timeout=LS_REMOTE_TIMEOUT_SECONDS,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        check=False,
    )


def git_source_findings(spec: RunSpec, *, run: Runner = _ls_remote) -> list[Finding]:
    """Findings on the run's git source: ERROR when it cannot be read or has no such ref, INFO
    when it cannot be checked; none for an S3 workload."""
    url, ref = spec.workload.source.git, spec.workload.source.ref
    if url is None:
        return []
    if not url.startswith("https://"):
        return [_not_checked(f"{url} is cloned over SSH with the head node's key, which plan --check does not hold")]
    if ref is not None and is_commit_id(ref):
        return [_not_checked(f"ref {ref} looks like a commit id, which git servers do not list")]
    try:
        listed = run(url)
    except FileNotFoundError:
        return [_not_checked("git is not installed here")]
    except subprocess.TimeoutExpired:
        return [_not_checked(f"{url} did not answer git ls-remote in {LS_REMOTE_TIMEOUT_SECONDS}s")]
    if listed.returncode != 0:
        why = (listed.stderr.strip().splitlines() or [f"exit code {listed.returncode}"])[-1]
        if not _REFUSED.search(listed.stderr):
            return [_not_checked(f"git ls-remote could not reach {url} ({why})")]
        return [
            Finding(
                code=Code.GIT_SOURCE_UNREACHABLE,
                severity=Severity.ERROR,
                message=(
                    f"workload.source.git: {url} cannot be read without credentials (git ls-remote: {why}); "
                    "the head node clones it so: make the repository public, correct the URL, or name a "
                    "local checkout in workload.source.path (`trainrun submit` packs and uploads it)"
                ),
            )
        ]
    refs = {line.split("\t", 1)[1] for line in listed.stdout.splitlines() if "\t" in line}
    wanted = ["HEAD"] if ref is None else [f"refs/heads/{ref}", f"refs/tags/{ref}"]
    if refs.intersection(wanted):
        return []
    branches = sorted(name.removeprefix("refs/heads/") for name in refs if name.startswith("refs/heads/"))
    shown = ", ".join(branches[:_SUGGESTED]) + (", ..." if len(branches) > _SUGGESTED else "") or "none"
    what = "has no default branch (HEAD)" if ref is None else f"has no branch or tag {ref!r}"
    return [
        Finding(
            code=Code.GIT_REF_NOT_FOUND,
            severity=Severity.ERROR,
            message=(
                f"workload.source.{'git' if ref is None else 'ref'}: {url} {what}; push it, or name one of its "
                f"branches (now: {shown}) or tags, or a commit id"
            ),
        )
    ]


def _not_checked(why: str) -> Finding:
    return Finding(
        code=Code.GIT_SOURCE_NOT_CHECKED,
        severity=Severity.INFO,
        message=f"workload.source: not checked: {why}; the head node's clone at Prepare head node tries it first",
    )
