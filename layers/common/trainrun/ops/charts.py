"""Small text charts for the operator views: a sparkline and the training step rate behind the ETA.

Rich has progress bars but no sparkline, so the sparkline is here; both are pure so that
`watch`, `status` and the tests agree on what a series looks like.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from datetime import datetime, timedelta

BLOCKS = "▁▂▃▄▅▆▇█"
# How far back the step rate looks: long enough to smooth over the log shipping's batches
# (a step that did not move between two polls), short enough to follow a change of pace.
DEFAULT_RATE_WINDOW = timedelta(minutes=3)


def sparkline(values: Sequence[float | None], width: int) -> str:
    """`values` as at most `width` blocks, lowest ▁ to highest █.

    A longer series is cut into `width` consecutive buckets and each bucket drawn at its mean,
    so a spike is averaged in rather than sampled or dropped. None and non-finite values (a
    diverged loss) are skipped. A flat series is a flat line at mid height.
    """
    points = [value for value in values if value is not None and math.isfinite(value)]
    if width < 1 or not points:
        return ""
    if len(points) > width:
        count = len(points)
        buckets = (points[index * count // width : (index + 1) * count // width] for index in range(width))
        points = [sum(bucket) / len(bucket) for bucket in buckets]
    low, high = min(points), max(points)
    # Halved first: the span of two finite floats may overflow to infinity (and inf / inf is NaN).
    # Two points a subnormal apart halve to the same value: as flat as equal ones.
    span = high / 2 - low / 2
    if span == 0:
        return "▄" * len(points)  # the lower half block: half height
    # Each point's height as a fraction of the span first: a span too small to divide by (subnormal
    # values) would make a scale of infinity, and 0 x infinity is NaN.
    top = len(BLOCKS) - 1
    return "".join(BLOCKS[round((point / 2 - low / 2) / span * top)] for point in points)


class StepRate:
    """Training steps per second over the recent observations of the run, for the ETA.

    The rate is the step difference over the time between the oldest and newest observation in
    the sliding `window` (the oldest kept is the last one at or before the window's start, so the
    rate spans the whole window once there is that much history). A step that goes back is a
    restart: the observations before it say nothing about the new pace and are dropped.

    With fewer than two observations the rate falls back to the average since `started_at` (the
    train job's submission), when known: step N after T seconds is N / T steps per second. It
    counts the job's start-up as training time, so it underestimates until the window takes over.
    """

    def __init__(self, *, started_at: datetime | None = None, window: timedelta = DEFAULT_RATE_WINDOW) -> None:
        self.started_at = started_at
        self._window = window
        self._observations: deque[tuple[datetime, int]] = deque()

    def observe(self, at: datetime, step: int) -> None:
        if self._observations:
            last_at, last_step = self._observations[-1]
            if at <= last_at:
                # The same view polled twice, or an older one: nothing new about the pace.
                return
            if step < last_step:
                self._observations.clear()
        self._observations.append((at, step))
        while len(self._observations) > 2 and self._observations[1][0] <= at - self._window:
            self._observations.popleft()

    @property
    def steps_per_second(self) -> float | None:
        """The recent rate; 0.0 when the step has not moved in the whole window; None when unknown."""
        if len(self._observations) >= 2:
            (first_at, first_step), (last_at, last_step) = self._observations[0], self._observations[-1]
            return (last_step - first_step) / (last_at - first_at).total_seconds()
        if self._observations and self.started_at is not None:
            at, step = self._observations[-1]
            seconds = (at - self.started_at).total_seconds()
            if seconds > 0:
                return step / seconds
        return None

    def eta_seconds(self, step: int, total_steps: int) -> float | None:
        """Seconds until `total_steps` at the current rate; None when the rate is unknown or zero."""
        if step >= total_steps:
            return 0.0
        rate = self.steps_per_second
        if rate is None or rate <= 0:
            return None
        return (total_steps - step) / rate
