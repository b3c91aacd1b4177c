"""The tags on everything a run creates: how teardown and the janitor find it again."""

from __future__ import annotations

RUN_ID = "trainrun:run-id"
STACK = "trainrun:stack"
# What part of a run a resource is (a subnet, the file system...), beside the run's own tags.
COMPONENT = "trainrun:component"
# A run id, as an execution name's run part, a tag value, a log stream's and a Slurm job name's
# first part and the end marker's run= all carry it (unanchored: each use anchors it).
RUN_ID_PATTERN = "[a-z][a-z0-9-]{0,79}"


def run_tags(run_id: str, stack: str) -> dict[str, str]:
    return {RUN_ID: run_id, STACK: stack, "Name": f"trainrun-{run_id}"}
