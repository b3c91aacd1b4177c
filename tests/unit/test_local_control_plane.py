"""The local control plane's housekeeping: sandboxes of dead runtimes reaped, serve's env file private."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from tests.sourcing import sourced
from trainrun.cli.local import export_lines, write_private_file
from trainrun.local import head_node_lifecycle
from trainrun.local.head_node_lifecycle import OWNER_FILE, reap_dead_sandboxes
from trainrun.local.slurm_head_node import NAMESPACE_FILE, NAMESPACE_HOLDER_FILE, process_identity


def sandboxes(root: Path, name: str, owner: str | None) -> Path:
    directory = root / name
    (directory / "0" / "fsx").mkdir(parents=True)
    if owner is not None:
        (directory / OWNER_FILE).write_text(owner)
    return directory


def test_the_sandboxes_of_a_dead_runtime_are_reaped_and_a_live_ones_kept(tmp_path: Path) -> None:
    # Given the sandboxes of a runtime that has died, of this (live) runtime, and a directory not ours
    ended = subprocess.Popen(["true"])  # a process that is gone once waited for
    ended.wait()
    dead = sandboxes(tmp_path, "trl-dead", f"{ended.pid} 1")
    reused = sandboxes(tmp_path, "trl-reused", f"{os.getpid()} 1")  # this pid, another start time
    live = sandboxes(tmp_path, "trl-live", process_identity(os.getpid()))
    foreign = sandboxes(tmp_path, "trl-foreign", None)
    # When a runtime starts
    reaped = reap_dead_sandboxes(tmp_path)
    # Then the dead runtime's sandboxes are gone (a reused pid is not its owner), the others stay
    assert sorted(reaped) == sorted([dead, reused])
    assert not dead.exists() and not reused.exists()
    assert live.exists() and foreign.exists()


def test_serves_env_file_is_readable_by_its_user_only_even_over_a_readable_file(tmp_path: Path) -> None:
    # Given an env file left readable by everyone, and a permissive umask
    path = tmp_path / "serve.env"
    path.write_text("OLD=1\n")
    path.chmod(0o644)
    previous = os.umask(0)
    try:
        # When serve writes its environment there
        write_private_file(path, "AWS_SECRET_ACCESS_KEY=secret\n")
    finally:
        os.umask(previous)
    # Then the file holds it, mode 0600
    assert path.read_text() == "AWS_SECRET_ACCESS_KEY=secret\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["serve.env"]


def test_serves_env_file_is_export_lines_a_shell_sources_with_every_value_intact(tmp_path: Path) -> None:
    # Given an environment whose values a shell would split or expand unquoted
    environment = {"AWS_ENDPOINT_URL": "http://127.0.0.1:5000", "ODD": "a b $HOME 'q' \"d\" `x`;|&"}
    path = tmp_path / "serve.env"
    write_private_file(path, export_lines(environment))
    # When a shell with an empty environment sources it
    exported = sourced(path)
    # Then every variable is exported with its exact value
    assert {key: exported.get(key) for key in environment} == environment
    assert path.read_text().startswith("export AWS_ENDPOINT_URL=")


def test_a_dead_runtimes_namespace_is_ended_only_while_its_holder_still_runs(tmp_path: Path, monkeypatch) -> None:
    # Given two dead runtimes' sandboxes: one whose namespace holder still runs (its watchdog has
    # not ended it yet), one whose holder is gone (its namespace id may be another head node's now)
    ended = subprocess.Popen(["true"])
    ended.wait()
    holder = subprocess.Popen(["sleep", "30"])
    try:
        held = sandboxes(tmp_path, "trl-held", f"{ended.pid} 1")
        (held / "0" / NAMESPACE_FILE).write_text("mnt:[4026530001]")
        (held / "0" / NAMESPACE_HOLDER_FILE).write_text(process_identity(holder.pid) or "")
        gone = sandboxes(tmp_path, "trl-gone", f"{ended.pid} 1")
        (gone / "0" / NAMESPACE_FILE).write_text("mnt:[4026530002]")
        (gone / "0" / NAMESPACE_HOLDER_FILE).write_text(f"{ended.pid} 1")
        ended_namespaces: list[str] = []
        monkeypatch.setattr(
            head_node_lifecycle, "end_namespace_processes", lambda namespace, spare: ended_namespaces.append(namespace)
        )
        # When a runtime starts
        reaped = reap_dead_sandboxes(tmp_path)
        # Then both sandboxes are removed, but only the held namespace's processes are ended
        assert sorted(reaped) == sorted([held, gone])
        assert ended_namespaces == ["mnt:[4026530001]"]
    finally:
        holder.kill()
        holder.wait()
