"""Authentic end markers (trainrun.model.end_marker): only the end watcher's signature, for this
run, job and Slurm job."""

from __future__ import annotations

import pytest

from trainrun.logic.job_log import EndEvent, parse_line
from trainrun.model.end_marker import end_marker, is_authentic, new_end_key

KEY = new_end_key()


def marker(key: str = KEY, **changes: object) -> str:
    fields: dict[str, object] = {
        "run_id": "run-1",
        "job": "train",
        "slurm_job_id": 42,
        "exit_code": 0,
        "state": "COMPLETED",
        "ended_at": 1700000000,
    }
    fields.update(changes)
    return end_marker(key, **fields)  # type: ignore[arg-type]


def authentic(line: str, *, end_key: str | None = KEY, slurm_job_id: int | None = 42) -> bool:
    event = parse_line(line)
    assert isinstance(event, EndEvent), line
    return is_authentic(event, run_id="run-1", job="train", end_key=end_key, slurm_job_id=slurm_job_id)


def test_the_end_watchers_marker_is_authentic() -> None:
    assert authentic(marker())


def test_a_marker_is_authentic_before_the_record_knows_the_slurm_job_id() -> None:
    assert authentic(marker(slurm_job_id=7), slurm_job_id=None)


@pytest.mark.parametrize(
    "line",
    [
        "TRAINRUN-END run=run-1 job=train slurm_job_id=42 exit_code=0",
        "TRAINRUN-END run=run-1 job=train slurm_job_id=42 exit_code=0 state=COMPLETED ended_at=1 mac=" + "0" * 64,
    ],
    ids=["unsigned", "made-up mac"],
)
def test_a_marker_the_job_printed_is_not_authentic(line: str) -> None:
    assert not authentic(line)


def test_a_marker_whose_exit_code_was_changed_is_not_authentic() -> None:
    assert not authentic(marker(exit_code=7).replace("exit_code=7", "exit_code=0"))


def test_a_marker_signed_with_another_key_is_not_authentic() -> None:
    assert not authentic(marker(new_end_key()))


@pytest.mark.parametrize("changes", [{"run_id": "run-2"}, {"job": "compile"}], ids=["other run", "other job"])
def test_a_marker_of_another_run_or_job_is_not_authentic(changes: dict[str, object]) -> None:
    assert not authentic(marker(**changes))


def test_a_marker_of_an_earlier_slurm_job_is_stale() -> None:
    assert not authentic(marker(slurm_job_id=41))


@pytest.mark.parametrize("end_key", [None, "", "xyz", KEY.upper()], ids=["none", "empty", "not-hex", "upper-case"])
def test_without_a_valid_end_key_in_the_record_nothing_is_authentic(end_key: str | None) -> None:
    assert not authentic(marker(), end_key=end_key)
