"""`trainrun validate` on hostile run files, as a person runs it: exit 2 with the field, the value and the fix."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from trainrun.model.run_file import MAX_RUN_FILE_BYTES

from .conftest import EXAMPLES, trainrun

SINGLE_NODE = (EXAMPLES / "single-node.yaml").read_text()
TRAIN_LINE = "train: python3 train.py --steps 40"


def run_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    return path


def test_validate_refuses_a_nul_in_the_train_command_naming_the_field_and_the_fix(tmp_path: Path) -> None:
    path = run_file(tmp_path, SINGLE_NODE.replace(TRAIN_LINE, 'train: "python3 train.py\\0 --steps 40"'))
    result = trainrun("validate", path)
    assert result.returncode == 2, result.stderr
    assert "workload.train: contains '\\x00' (U+0000) on line 1 of the command" in result.stderr
    assert "remove it" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("ref", ["main..", "a/../..", "feature.lock", "a//b", "main.", ".."])
def test_validate_refuses_a_ref_git_refuses_with_the_ref_and_the_rule(tmp_path: Path, ref: str) -> None:
    source = "source:\n    git: https://github.com/aws-neuron/aws-neuron-samples.git\n    ref: " + f"'{ref}'"
    text = SINGLE_NODE.replace("source:\n    s3: s3://trainrun-examples/local-workload.tar.gz", source)
    result = trainrun("validate", run_file(tmp_path, text))
    assert result.returncode == 2, result.stderr
    assert f"workload.source.ref: '{ref}' is not a ref git accepts: it " in result.stderr
    assert "name a branch, tag or commit" in result.stderr


def test_validate_reports_a_5000_digit_integer_as_an_invalid_field(tmp_path: Path) -> None:
    path = run_file(tmp_path, SINGLE_NODE.replace("nodes: 1", "nodes: " + "9" * 5000))
    result = trainrun("validate", path)
    assert result.returncode == 2, result.stderr
    assert "capacity.nodes: is an integer of 5000 characters; no field takes more than 32" in result.stderr
    assert "Traceback" not in result.stderr


def test_validate_refuses_an_environment_name_that_breaks_the_job_with_the_reason(tmp_path: Path) -> None:
    text = SINGLE_NODE.replace("max_runtime: 30m", "max_runtime: 30m\n  env:\n    LD_PRELOAD: /tmp/x.so")
    result = trainrun("validate", run_file(tmp_path, text))
    assert result.returncode == 2, result.stderr
    assert "workload.env.LD_PRELOAD.[key]: 'LD_PRELOAD' cannot be set by a run: it would be loaded into srun" in (
        result.stderr
    )


def test_validate_warns_of_a_risky_environment_name_and_still_accepts_the_file(tmp_path: Path) -> None:
    text = SINGLE_NODE.replace("max_runtime: 30m", "max_runtime: 30m\n  env:\n    NEURON_RT_VISIBLE_CORES: '0-1'")
    result = trainrun("validate", run_file(tmp_path, text))
    assert result.returncode == 0, result.stderr
    assert "WARNING" in result.stdout and "ENVIRONMENT_VARIABLE_RISKY" in result.stdout
    assert "workload.env.NEURON_RT_VISIBLE_CORES: every process of the job would claim the same NeuronCores" in (
        result.stdout.replace("\n", " ")
    )
    assert "is valid" in result.stdout


def test_validate_refuses_an_oversize_file_by_its_size(tmp_path: Path) -> None:
    path = run_file(tmp_path, SINGLE_NODE + "#" + "x" * MAX_RUN_FILE_BYTES + "\n")
    result = trainrun("validate", path)
    assert result.returncode == 2, result.stderr
    assert f"{path}: is {path.stat().st_size} bytes; a run file is at most {MAX_RUN_FILE_BYTES}" in result.stderr


def test_validate_reads_an_endless_file_only_up_to_the_limit() -> None:
    # /dev/zero has no size and no end: read whole, it would never be checked
    started = time.monotonic()
    result = trainrun("validate", "/dev/zero", timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"/dev/zero: is {MAX_RUN_FILE_BYTES + 1} bytes; a run file is at most {MAX_RUN_FILE_BYTES}" in result.stderr
    assert time.monotonic() - started < 30


def test_validate_refuses_content_too_large_for_the_run_record(tmp_path: Path) -> None:
    command = "echo " + "😀" * 16_000
    aliased = f"compile: &cmd '{command}'\n  setup: *cmd\n  train: *cmd"
    text = SINGLE_NODE.replace("compile: neuron_parallel_compile python3 train.py --steps 40", aliased).replace(
        TRAIN_LINE + "\n", ""
    )
    path = run_file(tmp_path, text)
    result = trainrun("validate", path)
    assert result.returncode == 2, result.stderr
    assert f"{path}: the run file's content is" in result.stderr
    assert "shorten workload.setup, compile, train or env" in result.stderr.replace("\n", " ")
