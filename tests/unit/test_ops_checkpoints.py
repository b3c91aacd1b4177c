"""Where a run's exported checkpoints land on disk, and which step each one is."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainrun.ops.checkpoints import local_path, step_of


@pytest.mark.parametrize(
    ("path", "step"),
    [
        ("step-40.json", 40),
        ("checkpoint_1000/model.pt", 1000),
        ("global_step200/mp_rank_00_model_states.pt", 200),
        ("ckpt_7.pt", 7),
        ("tokenizer/vocab.txt", None),
    ],
)
def test_a_checkpoints_step_is_the_number_its_name_gives_after_step_or_ckpt(path: str, step: int | None) -> None:
    assert step_of(path) == step


@pytest.mark.parametrize("path", ["../outside.pt", "a/../../outside.pt", "/etc/passwd", "a//b", "./x"])
def test_an_object_path_that_would_leave_the_download_directory_is_refused(path: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="would leave"):
        local_path(tmp_path, path)


def test_an_object_path_lands_under_the_download_directory_with_its_folders(tmp_path: Path) -> None:
    assert local_path(tmp_path, "tokenizer/vocab.txt") == tmp_path / "tokenizer" / "vocab.txt"
