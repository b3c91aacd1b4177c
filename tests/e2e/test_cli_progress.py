"""Training progress from the log formats people print, as a user sees it: the stand-in training
script prints each format (TRAINRUN_LOCAL_LOG_FORMAT) on the local stack, and `submit --watch`,
`runs`, `status` and `plot` run as separate processes (samples of the real formats, and their
sources, are in tests/fixtures/joblogs; the parser's own tests are tests/unit/test_joblog_formats.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainrun.local.iam.access import CALLS_LOG_ENV

from .conftest import EXAMPLES, NEEDS_LOCAL_HEAD_NODE, trainrun

pytestmark = NEEDS_LOCAL_HEAD_NODE


@pytest.fixture(scope="module", autouse=True)
def calls_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Where this module's `trainrun serve` records its authorization decisions (set before it starts)."""
    path = tmp_path_factory.mktemp("iam") / "calls.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CALLS_LOG_ENV, str(path))
        yield path


CUSTOM_PATTERN = r"it=(?P<step>\d+) obj=(?P<loss>\S+) tok/s=(?P<throughput>\S+)"


def run_file(tmp_path: Path, name: str, env: dict[str, str], **workload: Any) -> Path:
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    document["name"] = name
    document["workload"]["env"] = env
    document["workload"].update(workload)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def submitted_and_watched(served: dict[str, str], path: Path) -> tuple[str, str]:
    """The run id and the watch's output (its last frame) of a run submitted with --watch."""
    result = trainrun("submit", path, "--watch", env=served, timeout=420)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()[1], result.stderr


@pytest.mark.parametrize(
    ("log_format", "workload"),
    [
        # Every run saves during neuron_parallel_compile's trial too (a careless script): the compile
        # job's checkpoints go to a directory of its own, so the train job starts at step 1 and only
        # its own checkpoints are exported.
        ("key_value", {}),
        ("hf_trainer", {}),
        ("progress_bar", {}),
        ("custom", {"progress_pattern": CUSTOM_PATTERN}),
    ],
)
def test_each_format_shows_step_loss_and_throughput_in_watch_runs_status_and_plot(
    served: dict[str, str], tmp_path: Path, log_format: str, workload: dict[str, str]
) -> None:
    # Given the stand-in script printing its progress in one of the formats
    env = {"TRAINRUN_LOCAL_LOG_FORMAT": log_format, "TRAINRUN_LOCAL_SAVE_IN_TRIAL": "1"}
    path = run_file(tmp_path, f"format-{log_format.replace('_', '-')}", env, **workload)
    # When it is submitted and watched to its end
    run_id, watched = submitted_and_watched(served, path)
    # Then watch showed the train row at step 40 of 40, with the loss
    assert "step 40/40" in watched and "loss" in watched, watched
    # And runs lists its last step and loss
    rows = json.loads(trainrun("runs", "--json", env=served).stdout)
    (row,) = [row for row in rows if row["run_id"] == run_id]
    assert row["status"] == "SUCCEEDED" and row["step"] == 40 and row["loss"] is not None
    # And status has the step, loss and throughput (the Trainer prints no throughput per step)
    view = json.loads(trainrun("status", run_id, "--json", env=served).stdout)
    train = view["progress"]["train"]
    assert train["step"] == 40 and train["loss"] is not None
    assert (train["throughput"] is None) == (log_format == "hf_trainer")
    # And the history starts at step 1: the train job did not resume from the compile trial's save
    assert view["history"][0]["step"] == 1
    # And the checkpoints exported are the train job's two (steps 20 and 40), as the progress counts them
    assert view["checkpoints"]["files"] == train["checkpoints"] == 2, view["checkpoints"]
    # And plot draws the recorded history
    plotted = trainrun("plot", run_id, "-o", tmp_path / "loss.png", env=served)
    assert plotted.returncode == 0, plotted.stderr
    assert "steps 1 to 40" in plotted.stdout


def test_a_script_printing_no_known_format_is_told_once_what_trainrun_reads(
    served: dict[str, str], tmp_path: Path, calls_log: Path
) -> None:
    # Given a script whose lines carry no progress trainrun reads (more than the notice's 100)
    env = {"TRAINRUN_LOCAL_LOG_FORMAT": "none", "TRAINRUN_LOCAL_STEP_SECONDS": "0.01"}
    path = run_file(tmp_path, "format-none", env, train="python3 train.py --steps 120", total_steps=120)
    # When it runs to its end
    run_id, watched = submitted_and_watched(served, path)
    # Then watch showed the notice in place of the train row, naming the fix
    assert "none carried training progress" in watched, watched
    # And status says it once, with the formats trainrun reads and workload.progress_pattern
    status = trainrun("status", run_id, env=served).stdout
    assert status.count("none carried training progress") == 1, status
    assert "progress_pattern" in status and "Hugging Face Trainer" in status
    # And the progress function published it as a run event, allowed by its role (RunEventsPolicy)
    calls = [json.loads(line) for line in calls_log.read_text().splitlines()]
    published = [call for call in calls if call["action"] == "events:PutEvents" and "Progress" in call["principal"]]
    assert len(published) == 1 and published[0]["allowed"], published
