"""The tags on everything a run creates: how teardown and the janitor find it again."""

from __future__ import annotations

RUN_ID = "trainrun:run-id"
STACK = "trainrun:stack"


def run_tags(run_id: str, stack: str) -> dict[str, str]:
    return {RUN_ID: run_id, STACK: stack, "Name": f"trainrun-{run_id}"}
