"""The shellcheck gate over every script trainrun renders (tools/shellcheck_rendered.py), which
`make lint-shell` also runs: here so that `make test` guards the rendered scripts too."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tools.shellcheck_rendered import (
    HOSTILE_COMMAND,
    Rendered,
    heredoc_bodies,
    rendered_scripts,
    shellcheck,
    shipped_scripts,
)
from trainrun.logic.neuron_install import supported_os

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

needs_shellcheck = pytest.mark.skipif(
    shutil.which("shellcheck") is None, reason="shellcheck is not on PATH (`make shellcheck` installs it)"
)


@needs_shellcheck
def test_every_rendered_script_passes_shellcheck(tmp_path: Path):
    result = shellcheck(rendered_scripts(), tmp_path)

    assert result.returncode == 0, result.stdout


@needs_shellcheck
def test_the_gate_fails_on_a_script_shellcheck_faults(tmp_path: Path):
    unquoted = Rendered("bad/unquoted.bash", "echo $1\n", interpreter="bash")

    result = shellcheck([unquoted], tmp_path)

    assert result.returncode != 0
    assert "SC2086" in result.stdout


@needs_shellcheck
def test_a_whole_script_must_name_its_shell(tmp_path: Path):
    result = shellcheck([Rendered("bad/no-shebang.sh", "echo hi\n")], tmp_path)

    assert "SC2148" in result.stdout


def test_every_example_every_script_and_every_os_is_rendered():
    names = {script.name for script in rendered_scripts()}
    for example in EXAMPLES.glob("*.yaml"):
        for script in (
            "prepare.sh",
            "train-submit.sh",
            "train-wrapper.sh",
            "train-end-watcher.bash",
            "train-status.sh",
        ):
            assert f"{example.stem}/{script}" in names
        assert f"{example.stem}/prepare.sh.heredoc-1.bash" in names
        assert f"{example.stem}-everything/compile-wrapper.sh" in names
        assert f"{example.stem}-hostile/train-submit.sh.heredoc-1.bash" in names
    assert {f"neuron/{os_name}.sh" for os_name in supported_os()} <= names


def test_every_shipped_script_is_checked_as_it_is():
    checked = {script.name: script for script in rendered_scripts()}
    shipped = shipped_scripts()

    # The head node's scripts, the Neuron install script's parts: every .sh file of trainrun/scripts/.
    assert {path.name for path in shipped} >= {
        "prepare-as-root.sh",
        "prepare-as-user.sh",
        "submit-as-root.sh",
        "submit-as-user.sh",
        "job-wrapper.sh",
        "end-watcher.sh",
        "job-status.sh",
        "slurm-job-state.sh",
        "node-configured.sh",
    }
    for path in shipped:
        script = checked[f"shipped/{path.name}"]
        assert script.text == path.read_text(encoding="utf-8")
        assert script.excludes == ()


def test_hostile_fields_reach_the_bash_bodies_whole():
    hostile = {s.name: s for s in rendered_scripts() if s.hostile}
    prepare = hostile["single-node-hostile/prepare.sh.heredoc-1.bash"].text

    # The body holds the hostile setup as one quoted word, its TRAINRUN_EOF line included: the
    # heredoc's delimiter was chosen around it, so the cut-out body is the whole bash part.
    assert "TRAINRUN_EOF\n" in prepare
    assert "TRAINRUN-PREPARED" in prepare
    assert all(line in prepare for line in HOSTILE_COMMAND.replace("'", "'\"'\"'").splitlines())


def test_heredoc_bodies_are_cut_at_their_own_delimiter():
    script = "set -eu\nrunuser -l u -c 'bash -s' <<'TRAINRUN_EOF_1'\necho a\nTRAINRUN_EOF\nTRAINRUN_EOF_1\necho b\n"

    assert heredoc_bodies(script) == ["echo a\nTRAINRUN_EOF\n"]


@pytest.mark.parametrize(
    ("script", "problem"),
    [
        ("set -eu\necho no heredoc\n", "no heredoc"),
        ("cat <<'TRAINRUN_EOF'\necho a\nTRAINRUN_EOF\n", "other than `bash -s`"),
        ("bash -s <<'TRAINRUN_EOF'\necho a\n", "never ends"),
    ],
)
def test_heredoc_bodies_refuse_what_would_go_unchecked(script: str, problem: str):
    with pytest.raises(ValueError, match=problem):
        heredoc_bodies(script)
