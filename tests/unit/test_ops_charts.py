"""The operator views' text charts: the sparkline and the step rate behind the ETA."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from trainrun.ops.charts import BLOCKS, StepRate, sparkline

START = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)

values = st.lists(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)), max_size=300)


def at(seconds: float) -> datetime:
    return START + timedelta(seconds=seconds)


@given(series=values, width=st.integers(min_value=0, max_value=120))
def test_sparkline_fits_the_width_and_draws_only_blocks(series: list[float | None], width: int) -> None:
    line = sparkline(series, width)

    assert len(line) <= width
    assert set(line) <= set(BLOCKS)


@given(series=st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=60))
@example(series=[0.0, 1.1125369292536007e-308])  # a subnormal span: 7 / span overflows to infinity
def test_sparkline_draws_one_block_per_value_when_they_fit(series: list[float]) -> None:
    assert len(sparkline(series, 60)) == len(series)


def test_sparkline_spans_lowest_to_highest_block() -> None:
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7], 8) == "▁▂▃▄▅▆▇█"


def test_sparkline_skips_missing_and_non_finite_values() -> None:
    assert sparkline([None, 0.0, float("nan"), 7.0, float("inf"), None], 10) == "▁█"


def test_a_flat_series_is_a_flat_line() -> None:
    assert sparkline([3.5] * 5, 10) == "▄▄▄▄▄"
    # Two values the smallest subnormal apart: halved (against overflow), they are the same
    assert sparkline([0.0, 5e-324], 10) == "▄▄"


def test_an_empty_series_or_no_room_draws_nothing() -> None:
    assert sparkline([], 10) == ""
    assert sparkline([None, None], 10) == ""
    assert sparkline([1.0, 2.0], 0) == ""


def test_a_long_series_is_resampled_to_the_width() -> None:
    assert sparkline([0.0] * 50 + [10.0] * 50, 10) == "▁▁▁▁▁█████"


def test_resampling_averages_each_bucket_rather_than_sampling_it() -> None:
    # Every bucket of ten alternating values averages to 5: a flat line, where sampling would zigzag.
    assert sparkline([0.0, 10.0] * 50, 10) == "▄" * 10


def test_step_rate_is_unknown_before_two_observations() -> None:
    rate = StepRate()
    assert rate.steps_per_second is None
    rate.observe(at(0), 100)

    assert rate.steps_per_second is None
    assert rate.eta_seconds(100, 1000) is None


def test_step_rate_is_steps_over_seconds_between_observations() -> None:
    rate = StepRate()
    rate.observe(at(0), 100)
    rate.observe(at(10), 120)

    assert rate.steps_per_second == pytest.approx(2.0)
    assert rate.eta_seconds(120, 1120) == pytest.approx(500.0)


def test_a_step_that_did_not_move_between_polls_is_averaged_in() -> None:
    rate = StepRate()
    for seconds, step in [(0, 100), (10, 100), (20, 140), (30, 140)]:
        rate.observe(at(seconds), step)

    assert rate.steps_per_second == pytest.approx(40 / 30)


def test_no_progress_in_the_whole_window_is_a_zero_rate_and_no_eta() -> None:
    rate = StepRate()
    rate.observe(at(0), 100)
    rate.observe(at(60), 100)

    assert rate.steps_per_second == 0.0
    assert rate.eta_seconds(100, 1000) is None


def test_the_rate_follows_the_recent_window() -> None:
    rate = StepRate(window=timedelta(minutes=2))
    # 1 step/s for ten minutes, then 5 steps/s for four minutes.
    step = 0
    for seconds in range(0, 600, 10):
        rate.observe(at(seconds), step)
        step += 10
    for seconds in range(600, 840, 10):
        rate.observe(at(seconds), step)
        step += 50

    assert rate.steps_per_second == pytest.approx(5.0)


def test_a_restart_drops_the_observations_before_it() -> None:
    rate = StepRate()
    rate.observe(at(0), 500)
    rate.observe(at(10), 600)
    rate.observe(at(20), 0)  # the job restarted from scratch
    assert rate.steps_per_second is None
    rate.observe(at(30), 30)

    assert rate.steps_per_second == pytest.approx(3.0)


def test_a_repeated_or_older_observation_is_ignored() -> None:
    rate = StepRate()
    rate.observe(at(0), 0)
    rate.observe(at(10), 20)
    rate.observe(at(10), 20)
    rate.observe(at(5), 10)

    assert rate.steps_per_second == pytest.approx(2.0)


def test_one_observation_falls_back_to_the_average_since_the_train_job_was_submitted() -> None:
    rate = StepRate(started_at=at(0))
    rate.observe(at(200), 400)

    assert rate.steps_per_second == pytest.approx(2.0)
    assert rate.eta_seconds(400, 1000) == pytest.approx(300.0)


def test_two_observations_take_over_from_the_average_since_submission() -> None:
    rate = StepRate(started_at=at(0))
    rate.observe(at(200), 400)
    rate.observe(at(210), 500)

    assert rate.steps_per_second == pytest.approx(10.0)


def test_eta_is_zero_once_the_total_is_reached() -> None:
    assert StepRate().eta_seconds(1000, 1000) == 0.0
