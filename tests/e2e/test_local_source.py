"""A local directory as the workload (workload.source.path): `trainrun local` packs it, uploads it
as the operator, and the head node runs a script from it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from .conftest import EXAMPLES, NEEDS_LOCAL_HEAD_NODE, trainrun

pytestmark = NEEDS_LOCAL_HEAD_NODE

STEPS = 7


def run_file_with_a_local_directory(tmp_path: Path) -> Path:
    """A run file beside a directory `code/`: the stand-in training script and a file .gitignore
    leaves out, which the train command refuses to find."""
    code = tmp_path / "code"
    code.mkdir()
    shutil.copy(EXAMPLES / "local-workload" / "train.py", code / "my_train.py")
    (code / ".gitignore").write_text("*.ckpt\n")
    (code / "huge.ckpt").write_text("never packed\n")
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    workload = document["workload"]
    workload["source"] = {"path": "./code"}
    del workload["compile"]
    workload["train"] = f"test ! -e huge.ckpt && python3 my_train.py --steps {STEPS}"
    workload["total_steps"] = STEPS
    run_file = tmp_path / "run.yaml"
    run_file.write_text(yaml.safe_dump(document, sort_keys=False))
    return run_file


def test_local_packs_the_directory_and_the_job_runs_a_script_from_it(tmp_path: Path) -> None:
    # Given a run file whose workload is a directory beside it
    run_file = run_file_with_a_local_directory(tmp_path)
    # When it is rehearsed
    result = trainrun("local", run_file, "--json")
    # Then the directory was packed and uploaded to the config bucket under sources/
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["status"] == "SUCCEEDED", summary["error"]
    # And the job ran the packed script (its steps), without the file .gitignore leaves out
    assert summary["progress"]["train"]["step"] == STEPS


def test_validate_and_plan_say_what_is_packed_and_local_refuses_a_missing_directory(tmp_path: Path) -> None:
    run_file = run_file_with_a_local_directory(tmp_path)
    validated = trainrun("validate", run_file)
    assert validated.returncode == 0, validated.stderr
    assert "workload.source.path: ./code: 2 files, " in validated.stderr
    planned = trainrun("plan", run_file)
    assert planned.returncode == 0, planned.stderr
    assert "workload.source.path: ./code: 2 files, " in planned.stderr
    assert "aws s3 cp s3://trainrun-config-preview/sources/single-node/" in planned.stdout
    shutil.rmtree(tmp_path / "code")
    refused = trainrun("local", run_file, "--json")
    assert refused.returncode == 2
    assert "code does not exist" in refused.stderr
