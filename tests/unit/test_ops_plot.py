"""`trainrun plot`: the training history drawn to a PNG, and what was drawn."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image, ImageColor

from trainrun.model.jobs import TrainPoint
from trainrun.ops.plot import DPI, FIGURE_SIZE_INCHES, LOSS_COLOUR, THROUGHPUT_COLOUR, plot_history

HISTORY = [
    TrainPoint(step=step, loss=8.0 / (1 + step / 100), learning_rate=0.0001, throughput=600.0 + step / 5)
    for step in range(0, 2001, 50)
]


def colours_in(path: Path) -> set[tuple[int, ...]]:
    with Image.open(path) as image:
        rgb = image.convert("RGB")
    counted = rgb.getcolors(maxcolors=rgb.width * rgb.height)
    assert counted is not None  # None only when there are more colours than maxcolors
    return {colour for _, colour in counted if isinstance(colour, tuple)}


def test_the_plot_is_a_png_of_the_figure_size(tmp_path: Path) -> None:
    path = tmp_path / "run.png"

    plot_history(HISTORY, path, title="bert-7f3a")

    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.size == (FIGURE_SIZE_INCHES[0] * DPI, FIGURE_SIZE_INCHES[1] * DPI)


def test_the_plot_returns_the_points_it_drew(tmp_path: Path) -> None:
    data = plot_history(HISTORY, tmp_path / "run.png", title="bert-7f3a")

    assert data.loss.steps == [point.step for point in HISTORY]
    assert data.loss.values == [point.loss for point in HISTORY]
    assert data.throughput.steps == [point.step for point in HISTORY]
    assert data.throughput.values == [point.throughput for point in HISTORY]


def test_the_loss_and_throughput_lines_are_in_the_image(tmp_path: Path) -> None:
    path = tmp_path / "run.png"

    plot_history(HISTORY, path, title="bert-7f3a")

    colours = colours_in(path)
    assert ImageColor.getrgb(LOSS_COLOUR) in colours
    assert ImageColor.getrgb(THROUGHPUT_COLOUR) in colours


def test_points_without_a_value_are_left_out_of_that_line(tmp_path: Path) -> None:
    history = [
        TrainPoint(step=10, loss=3.0, learning_rate=None, throughput=None),
        TrainPoint(step=20, loss=None, learning_rate=None, throughput=500.0),
        TrainPoint(step=30, loss=float("nan"), learning_rate=None, throughput=510.0),
        TrainPoint(step=40, loss=2.5, learning_rate=None, throughput=520.0),
    ]

    data = plot_history(history, tmp_path / "run.png", title="bert-7f3a")

    assert (data.loss.steps, data.loss.values) == ([10, 40], [3.0, 2.5])
    assert (data.throughput.steps, data.throughput.values) == ([20, 30, 40], [500.0, 510.0, 520.0])


def test_a_history_without_throughput_still_plots_the_loss(tmp_path: Path) -> None:
    path = tmp_path / "run.png"
    history = [TrainPoint(step=step, loss=5.0 - step, learning_rate=None, throughput=None) for step in range(4)]

    data = plot_history(history, path, title="bert-7f3a")

    assert data.throughput.steps == []
    colours = colours_in(path)
    assert ImageColor.getrgb(LOSS_COLOUR) in colours
    assert ImageColor.getrgb(THROUGHPUT_COLOUR) not in colours


@pytest.mark.parametrize(
    "history",
    [[], [TrainPoint(step=10, loss=None, learning_rate=0.0001, throughput=500.0)]],
    ids=["empty", "no-loss"],
)
def test_a_history_without_a_loss_is_refused_and_writes_nothing(tmp_path: Path, history: list[TrainPoint]) -> None:
    with pytest.raises(ValueError, match="no training history recorded yet for this run"):
        plot_history(history, tmp_path / "run.png", title="bert-7f3a")

    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_neither_the_plot_nor_a_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", fail)

    with pytest.raises(OSError, match="disk full"):
        plot_history(HISTORY, tmp_path / "run.png", title="bert-7f3a")

    assert list(tmp_path.iterdir()) == []


def test_the_plot_gets_the_mode_of_any_new_file_not_a_private_one(tmp_path: Path) -> None:
    path = tmp_path / "run.png"
    ordinary = tmp_path / "ordinary"
    ordinary.touch()

    plot_history(HISTORY, path, title="bert-7f3a")

    assert path.stat().st_mode == ordinary.stat().st_mode


def test_a_new_plot_replaces_the_old_one(tmp_path: Path) -> None:
    path = tmp_path / "run.png"
    path.write_bytes(b"an older plot")

    plot_history(HISTORY, path, title="bert-7f3a")

    assert path.read_bytes().startswith(b"\x89PNG")
    assert [entry.name for entry in tmp_path.iterdir()] == ["run.png"]  # and no partial file
