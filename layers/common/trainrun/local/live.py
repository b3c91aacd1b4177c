"""The live view of a local run: the current state, time per state, compile totals, training.

It reads what anyone could read from the emulated account while the run goes on: the
execution's history (states and their times) and the run record's job progress (what the
progress function made of the job logs). It polls; the run itself never waits for it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.table import Table
from rich.text import Text

from trainrun.local.runtime import FINAL_EXECUTION_STATUSES, LocalRunError, LocalRuntime, StartedRun
from trainrun.local.summary import RunProgress, StateVisit, run_progress, state_visits

REFRESH_SECONDS = 0.5


@dataclass
class _View:
    visits: list[StateVisit]
    progress: RunProgress
    elapsed: float
    status: str


def follow(runtime: LocalRuntime, run: StartedRun, console: Console, *, timeout: float) -> dict[str, Any]:
    """Show the run live on `console` until its execution ends; the final DescribeExecution."""
    sfn = runtime.client("stepfunctions")
    store = runtime.store()
    started = time.monotonic()
    bar = Progress(
        TextColumn("training"),
        BarColumn(),
        TextColumn("step {task.completed:.0f}"),
        console=console,
        auto_refresh=False,
    )
    task = bar.add_task("train", total=None)
    # Transient: the summary that follows replaces the live view.
    with Live(console=console, refresh_per_second=4, transient=True) as live:
        while True:
            execution = sfn.describe_execution(executionArn=run.execution_arn)
            view = _View(
                visits=state_visits(runtime.history(run.execution_arn)),
                progress=run_progress(store, run.run_id),
                elapsed=time.monotonic() - started,
                status=execution["status"],
            )
            live.update(_render(run, view, bar, task))
            if execution["status"] in FINAL_EXECUTION_STATUSES:
                runtime.wait_for_safety_net(timeout - view.elapsed)
                return execution
            if view.elapsed > timeout:
                raise LocalRunError(f"{run.execution_arn} still {execution['status']} after {timeout:.0f}s")
            time.sleep(REFRESH_SECONDS)


def _render(run: StartedRun, view: _View, bar: Progress, task: TaskID) -> RenderableType:
    current = view.visits[-1].name if view.visits and view.visits[-1].seconds is None else None
    header = Text.assemble(
        ("run ", "dim"),
        (run.run_id, "bold"),
        ("  ", ""),
        (f"{view.elapsed:5.1f}s", "cyan"),
        ("  ", ""),
        (f"in {current}" if current else view.status, "yellow" if current else "bold"),
    )
    states = Table(box=None, show_header=True, header_style="dim", pad_edge=False)
    states.add_column("state")
    states.add_column("visits", justify="right")
    states.add_column("seconds", justify="right")
    for name, (count, seconds, running) in _totals(view.visits).items():
        states.add_row(Text(name, style="yellow" if running else ""), str(count), f"{seconds:.1f}")
    parts: list[RenderableType] = [header, states]
    compiled = view.progress.compile
    if compiled is not None:
        parts.append(
            Text(
                f"compile: {compiled.graphs} graphs, {compiled.succeeded} compiled, {compiled.failed} failed",
                style="red" if compiled.failed else "green",
            )
        )
    trained = view.progress.train
    if trained is not None:
        bar.update(task, completed=trained.step or 0)
        parts.append(bar)
        parts.append(
            Text(
                f"epoch {trained.epoch}  step {trained.step}  loss {_number(trained.loss)}  "
                f"lr {_number(trained.learning_rate)}  throughput {_number(trained.throughput)}/s  "
                f"checkpoints {trained.checkpoints}"
            )
        )
    return Group(*parts)


def _totals(visits: list[StateVisit]) -> dict[str, tuple[int, float, bool]]:
    """Per state: visits, seconds spent in finished visits, whether it runs now."""
    totals: dict[str, tuple[int, float, bool]] = {}
    for visit in visits:
        count, seconds, _ = totals.get(visit.name, (0, 0.0, False))
        running = visit.seconds is None
        totals[visit.name] = (count + 1, seconds + (visit.seconds or 0.0), running)
    return totals


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}"
