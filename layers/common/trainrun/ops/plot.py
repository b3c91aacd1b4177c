"""`trainrun plot`: a run's training history (loss and throughput against the step) as a PNG.

matplotlib is a development dependency (the CLI's, not the Lambda layer's) and slow to import,
so it is imported only when a plot is drawn.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from trainrun.model.jobs import TrainPoint

FIGURE_SIZE_INCHES = (10.0, 7.0)
DPI = 100
LOSS_COLOUR = "#1f77b4"
THROUGHPUT_COLOUR = "#ff7f0e"


class Series(BaseModel):
    """The points of one line: only the steps that reported a (finite) value."""

    model_config = ConfigDict(frozen=True)

    steps: list[int]
    values: list[float]


class PlotData(BaseModel):
    """What a plot drew."""

    model_config = ConfigDict(frozen=True)

    loss: Series
    throughput: Series


def plot_history(history: Sequence[TrainPoint], path: Path, *, title: str) -> PlotData:
    """Draw loss (top) and throughput (bottom) against the step into the PNG `path`.

    The file is written next to `path` and renamed into place, so a failed plot leaves no half
    file. Raises ValueError when no point of the history has a loss.
    """
    data = PlotData(
        loss=_series((point.step, point.loss) for point in history),
        throughput=_series((point.step, point.throughput) for point in history),
    )
    if not data.loss.steps:
        raise ValueError("no training history recorded yet for this run")

    # A Figure on an Agg canvas, not pyplot: no global backend or figure registry to leak into.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=FIGURE_SIZE_INCHES, dpi=DPI)
    FigureCanvasAgg(figure)
    loss_axes, throughput_axes = figure.subplots(2, 1, sharex=True)
    figure.suptitle(title)
    loss_axes.plot(data.loss.steps, data.loss.values, color=LOSS_COLOUR)
    loss_axes.set_ylabel("loss")
    if data.throughput.steps:
        throughput_axes.plot(data.throughput.steps, data.throughput.values, color=THROUGHPUT_COLOUR)
    else:
        throughput_axes.text(
            0.5, 0.5, "no throughput recorded", ha="center", va="center", transform=throughput_axes.transAxes
        )
    throughput_axes.set_ylabel("throughput (/s)")
    throughput_axes.set_xlabel("step")
    for axes in (loss_axes, throughput_axes):
        axes.grid(True, alpha=0.3)

    save_png(figure, path)
    return data


def save_png(figure: Any, path: Path) -> None:
    """`figure` (a matplotlib Figure) as the PNG `path`, written next to it and renamed into
    place: a failed write leaves no half file."""
    # Not tempfile.mkstemp: its file is private (0600), and the picture should get the umask's mode.
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with partial.open("xb") as handle:
            figure.savefig(handle, format="png")
        partial.replace(path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _series(points: Iterable[tuple[int, float | None]]) -> Series:
    # A diverged loss (nan, inf) has no place on an axis; the line joins the points around it.
    kept = [(step, value) for step, value in points if value is not None and math.isfinite(value)]
    return Series(steps=[step for step, _ in kept], values=[value for _, value in kept])
