"""`trainrun shell` and `trainrun down` before they reach a head node or a workflow: which head
node, which command line, what is refused, and what a machine without the Session Manager
plugin is told."""

from __future__ import annotations

import json
import os
import shlex
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from trainrun.cli import ops as cli_ops
from trainrun.cli.common import EXIT_CANNOT_RUN_HERE, app
from trainrun.local.head_node_lifecycle import INSTANCE_ID_FILE, OWNER_FILE, SANDBOXES_PREFIX, shell_argv
from trainrun.local.slurm_head_node import NAMESPACE_FILE
from trainrun.model.resources import ClusterRef
from trainrun.model.run_record import RunFileRef, RunRecord, RunStatus
from trainrun.ops import down
from trainrun.ops.shell import (
    COMMAND_DOCUMENT,
    PLUGIN,
    NoHeadNode,
    head_node_of,
    is_local_endpoint,
    session_command,
)

RUN = "single-node-0123456789ab"
HEAD_NODE = "i-0123456789abcdef0"


def a_run(**fields: Any) -> RunRecord:
    started = datetime(2026, 1, 2, 1, 0, tzinfo=UTC)
    run_file = RunFileRef(bucket="config", key="runs/single-node.yaml")
    return RunRecord(run_id=RUN, run_file=run_file, created_at=started, updated_at=started, **fields)


def provisioned(**fields: Any) -> RunRecord:
    cluster = ClusterRef(name=f"trainrun-{RUN}", region="us-west-2", head_node_instance_id=HEAD_NODE)
    return a_run(cluster=cluster, **fields)


def executables(directory: Path, *names: str) -> str:
    """A PATH of one directory holding these (empty) executables."""
    directory.mkdir(exist_ok=True)
    for name in names:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    return str(directory)


# --- which head node ----------------------------------------------------------------------------


def test_a_provisioned_run_has_its_cluster_head_node() -> None:
    assert head_node_of(provisioned(status=RunStatus.SUCCEEDED)) == HEAD_NODE


@pytest.mark.parametrize(
    ("record", "says"),
    [
        (a_run(), "no head node yet"),
        (a_run(status=RunStatus.REJECTED), "ended REJECTED without a head node"),
        (
            provisioned(status=RunStatus.SUCCEEDED, torn_down_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
            "torn down at 2026-01-02 03:04:05 UTC: no head node",
        ),
    ],
    ids=["not-provisioned-yet", "rejected", "torn-down"],
)
def test_a_run_without_a_head_node_now_is_refused_saying_why(record: RunRecord, says: str) -> None:
    with pytest.raises(NoHeadNode, match=says):
        head_node_of(record)


@pytest.mark.parametrize(
    ("endpoint", "local"),
    [
        (None, False),
        ("http://127.0.0.1:4566", True),
        ("http://localhost:4566", True),
        ("http://[::1]:4566", True),
        ("https://ssm.us-west-2.amazonaws.com", False),
        ("http://10.0.0.5:4566", False),
    ],
)
def test_only_an_endpoint_on_this_machine_is_the_local_stack(endpoint: str | None, local: bool) -> None:
    assert is_local_endpoint(endpoint) is local


# --- the session's command line -------------------------------------------------------------------


def test_the_session_command_names_the_head_node_region_endpoint_and_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", executables(tmp_path / "bin", "aws", PLUGIN))
    session = session_command(HEAD_NODE, region="us-west-2", endpoint_url="https://vpce.example", profile="training")
    assert session.missing == []
    assert session.text == (
        f"aws ssm start-session --target {HEAD_NODE} --region us-west-2 "
        "--endpoint-url https://vpce.example --profile training"
    )


def test_a_command_runs_through_the_interactive_command_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", executables(tmp_path / "bin", "aws", PLUGIN))
    session = session_command(HEAD_NODE, region="us-west-2", command="squeue -u ubuntu")
    assert session.argv[-4:] == [
        "--document-name",
        COMMAND_DOCUMENT,
        "--parameters",
        json.dumps({"command": ["squeue -u ubuntu"]}),
    ]
    # The printed line gives the shell the same words back.
    assert shlex.split(session.text) == session.argv


def test_without_the_plugin_on_path_the_session_command_says_it_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", executables(tmp_path / "bin", "aws"))
    assert session_command(HEAD_NODE, region="us-west-2").missing == [PLUGIN]


def test_trainrun_shell_without_the_plugin_prints_the_command_and_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a machine whose PATH has the aws CLI but not the Session Manager plugin
    monkeypatch.setenv("PATH", executables(tmp_path / "bin", "aws"))
    stack = SimpleNamespace(region="eu-west-1", endpoint_url=None, session=SimpleNamespace(profile_name="default"))
    monkeypatch.setattr(cli_ops, "connect", lambda *args: stack)
    monkeypatch.setattr(cli_ops, "find", lambda target, run: provisioned(status=RunStatus.SUCCEEDED))
    # When `trainrun shell` is run for a run with a head node
    result = CliRunner().invoke(app, ["shell", RUN])
    # Then it prints the exact command, says how to install the plugin, and exits 4
    assert result.exit_code == EXIT_CANNOT_RUN_HERE, result.output
    assert f"aws ssm start-session --target {HEAD_NODE} --region eu-west-1" in result.stdout
    assert f"{PLUGIN} not found on PATH" in result.stderr
    assert "Install the Session Manager plugin for the AWS CLI" in result.stderr


# --- down ---------------------------------------------------------------------------------------


def test_down_refuses_a_run_still_running_and_names_cancel() -> None:
    with pytest.raises(down.StillRunning, match=f"trainrun cancel {RUN}"):
        down.start(SimpleNamespace(), provisioned())  # type: ignore[arg-type]


# --- the local stack's head node ------------------------------------------------------------------


def test_a_head_node_of_a_runtime_that_died_gets_no_local_shell(tmp_path: Path) -> None:
    # Given the sandboxes of a runtime that is gone (its owner's pid lives, but started at another time)
    sandbox = tmp_path / f"{SANDBOXES_PREFIX}dead" / "0"
    sandbox.mkdir(parents=True)
    (sandbox.parent / OWNER_FILE).write_text("1 0")
    (sandbox / INSTANCE_ID_FILE).write_text(HEAD_NODE)
    (sandbox / NAMESPACE_FILE).write_text(os.readlink("/proc/self/ns/mnt"))
    # When a shell on its head node is looked for, and on an instance no sandbox names
    # Then there is none: the namespace its file names may be anyone's now (here: this process's)
    assert shell_argv(HEAD_NODE, root=tmp_path) is None
    assert shell_argv("i-0fffffffffffffff0", root=tmp_path) is None


def test_down_that_sees_its_teardown_end_reads_the_record_and_resources_the_end_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a teardown execution that ends between two of down's reads: its record says torn down
    # and its cluster is gone from then on
    ended = {"now": False}

    def describe_execution(executionArn: str) -> dict[str, str]:
        ended["now"] = True
        return {"status": "SUCCEEDED"}

    def get(run_id: str) -> RunRecord:
        return provisioned(torn_down_at=datetime.now(UTC) if ended["now"] else None, status=RunStatus.SUCCEEDED)

    monkeypatch.setattr(
        down, "existing_resources", lambda stack, record: [] if ended["now"] else [f"cluster trainrun-{RUN}"]
    )
    stack = SimpleNamespace(
        client=lambda service: SimpleNamespace(describe_execution=describe_execution),
        store=lambda: SimpleNamespace(get=get),
    )
    # When down waits for it
    outcome = down.wait(
        stack,  # type: ignore[arg-type]
        provisioned(status=RunStatus.SUCCEEDED),
        "arn:execution",
        [f"cluster trainrun-{RUN}"],
        timeout=5,
        sleep=lambda seconds: None,
    )
    # Then it reports the teardown as it ended: done, the cluster deleted, nothing left
    assert (outcome.teardown_error, outcome.remaining, outcome.deleted) == (None, [], [f"cluster trainrun-{RUN}"])
