"""`trainrun watch`: one frame of a run's live view, and the loop that polls and redraws it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from trainrun.model.findings import Severity
from trainrun.model.run_record import RunStatus, cause_message
from trainrun.ops.charts import StepRate, sparkline
from trainrun.ops.views import CompileProgress, Cost, RunView, TrainProgress, attempt_summary, current_job

if TYPE_CHECKING:
    from trainrun.ops.stack import Stack

STATUS_COLOURS: dict[str, str] = {
    RunStatus.RUNNING: "cyan",
    RunStatus.SUCCEEDED: "green",
    RunStatus.REJECTED: "yellow",
    RunStatus.CANCELLED: "magenta",
}  # else red
CHART_WIDTH = 40  # the bars' and the sparklines'; one width, so they line up


def watch_run(
    stack: Stack,
    run_id: str,
    console: Console,
    *,
    interval: float,
    timeout: float | None,
    record_timeout: float = 60.0,
    record_poll: float = 0.5,
) -> RunView:
    """`trainrun watch`: wait for a just-started run's record, then follow the run until it has
    settled. Raises RunNotFound (no record in `record_timeout`) or TimeoutError."""
    from trainrun.ops.runs import ExecutionHistories, build_view, find_run, wait_for_record

    wait_for_record(stack, run_id, timeout=record_timeout, poll=record_poll)
    histories = ExecutionHistories()

    def fetch() -> RunView:
        record = find_run(stack, run_id)
        return build_view(stack, record, inventory_while_running=False, histories=histories)

    return follow(fetch, console, interval=interval, timeout=timeout)


def render(view: RunView, rate: StepRate | None = None) -> RenderableType:
    """One frame of the live view of `view`.

    `rate` is what `follow` has observed of the step so far; without one (a single look, as
    `trainrun status` takes) the ETA comes from the average rate since the train job's submission.
    """
    rows = Table.grid(padding=(0, 2))
    rows.add_column(style="bold")
    rows.add_column()
    job = current_job(view.jobs)
    if job is not None:
        # The job the run is at, as it runs: a Slurm job, or an EKS run's Kubernetes Job.
        rows.add_row("job", Text(job.summary()))
    if view.progress.compile is not None:
        _add_compile(rows, view.progress.compile)
    if view.progress.train is not None:
        _add_train(rows, view, view.progress.train, rate if rate is not None else observe_step(None, view))
    elif view.progress.train_notice is not None:
        rows.add_row("train", Text(view.progress.train_notice, style="yellow"))
    if view.cost is not None:
        rows.add_row("cost", _cost(view.cost, ended=view.ended))
    if view.ended:
        _add_ending(rows, view)
    return Group(_header(view), rows)


def follow(
    fetch: Callable[[], RunView],
    console: Console,
    *,
    interval: float = 2.0,
    timeout: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> RunView:
    """Poll `fetch` every `interval` seconds and redraw the run on `console` until it has settled.

    Settled is ended with its teardown over: torn down, kept on purpose, or nothing left tagged
    with it, so the last frame shows what the run left behind. Raises TimeoutError when the run
    has not settled `timeout` seconds after the first poll.
    """
    deadline = None if timeout is None else clock() + timeout
    rate: StepRate | None = None
    # Each poll redraws; auto refresh would only repaint the same frame from another thread.
    # sys.stdout is left alone: on a terminal, rich would swap in a proxy that prints whatever is
    # written to stdout above the view, and `trainrun local`'s in-process functions (whose output
    # the runtime keeps, as Lambda does) would print their metrics (EMF JSON) into it.
    drawn = False
    try:
        with Live(console=console, transient=False, auto_refresh=False, redirect_stdout=False) as live:
            while True:
                view = fetch()
                rate = observe_step(rate, view)
                live.update(render(view, rate), refresh=True)
                drawn = True
                if view.ended and (
                    view.torn_down_at or view.kept_at or view.teardown_error or not view.resources.remaining
                ):
                    return view
                left = None if deadline is None else deadline - clock()
                if left is not None and left <= 0:
                    raise TimeoutError(f"run {view.run_id} has not settled after {timeout:g} seconds ({view.status})")
                sleep(interval if left is None else min(interval, left))
    finally:
        # On a terminal rich ends the view with a newline; to a file or a pipe it does not.
        if drawn and not console.is_terminal:
            console.line()


def observe_step(rate: StepRate | None, view: RunView) -> StepRate:
    """`rate` fed with the view's step; a new one when the train job is (re)submitted."""
    if rate is None or rate.started_at != view.train_submitted_at:
        rate = StepRate(started_at=view.train_submitted_at)
    train = view.progress.train
    if train is not None and train.step is not None:
        rate.observe(view.taken_at, train.step)
    return rate


def _header(view: RunView) -> Text:
    colour = STATUS_COLOURS.get(view.status, "red")
    header = Text.assemble((view.run_id, "bold"))
    if view.name:
        header.append(f"  {view.name}")
    header.append("  ").append(view.status, style=f"bold {colour}")
    if view.ended and view.execution_status not in (None, view.status):
        header.append(f" (execution {view.execution_status})", style=colour)
    if view.current_state:
        header.append(f"  {view.current_state}")
    elapsed = _duration(((view.ended_at or view.taken_at) - view.created_at).total_seconds())
    header.append(f"  took {elapsed}" if view.ended else f"  {elapsed} so far")
    if view.nodes is not None and view.instance_type:
        header.append(f"  {view.nodes} x {view.instance_type}")
    return header


def _add_compile(rows: Table, compiled: CompileProgress) -> None:
    done = (compiled.succeeded or 0) + (compiled.failed or 0)
    bar = ProgressBar(total=compiled.graphs, completed=done, width=CHART_WIDTH) if compiled.graphs else ""
    if compiled.cache_hits:
        # Found in the Neuron compile cache: ready without being compiled again (CompileProgress.compiled).
        summary = Text(
            f"{compiled.succeeded or 0}/{compiled.graphs} graphs ready: {compiled.compiled} compiled, "
            f"{compiled.cache_hits} cached"
        )
    else:
        summary = Text(f"{compiled.succeeded or 0}/{compiled.graphs} graphs compiled")
    if compiled.failed:
        summary.append(f", {compiled.failed} failed", style="red")
    if compiled.cached_failures:
        summary.append(f", {compiled.cached_failures} failed in the cache", style="red")
    rows.add_row("compile", _beside(bar, summary))


def _add_train(rows: Table, view: RunView, trained: TrainProgress, rate: StepRate) -> None:
    step = trained.step or 0
    epoch = "" if trained.epoch is None else f"  epoch {trained.epoch}"
    steps_per_second = rate.steps_per_second
    pace = "no rate yet" if steps_per_second is None else f"{steps_per_second:.3g} steps/s"
    if view.total_steps:
        bar = ProgressBar(total=view.total_steps, completed=step, width=CHART_WIDTH)
        percent = 100 * step / view.total_steps
        rows.add_row("train", _beside(bar, f"step {step:,}/{view.total_steps:,}  {percent:.1f}%{epoch}"))
        if not view.ended:
            eta = rate.eta_seconds(step, view.total_steps)
            rows.add_row("ETA", f"unknown ({pace})" if eta is None else f"{_duration(eta)} at {pace}")
    else:
        rows.add_row("train", f"step {step:,}{epoch}")
        if not view.ended:
            rows.add_row("rate", pace)
    # The history is thinned; the progress record holds the latest value the logs gave.
    losses = [point.loss for point in view.history]
    loss = trained.loss if trained.loss is not None else _last(losses)
    rows.add_row("loss", _beside(sparkline(losses, CHART_WIDTH), "" if loss is None else f"{loss:.4g}"))
    throughputs = [point.throughput for point in view.history]
    throughput = trained.throughput if trained.throughput is not None else _last(throughputs)
    rows.add_row(
        "throughput",
        _beside(sparkline(throughputs, CHART_WIDTH), "" if throughput is None else f"{throughput:,.1f}/s"),
    )
    if trained.learning_rate is not None:
        rows.add_row("learning rate", f"{trained.learning_rate:.3g}")
    rows.add_row("checkpoints", str(trained.checkpoints))
    attempts = attempt_summary(trained)
    if attempts is not None:
        rows.add_row("attempt", Text(attempts))


def _beside(chart: RenderableType, summary: RenderableType) -> Table:
    """A chart and its figures, the charts of every row in one column so they line up."""
    row = Table.grid(padding=(0, 2))
    row.add_column(width=CHART_WIDTH)
    row.add_column()
    row.add_row(chart, summary)
    return row


def _cost(cost: Cost, *, ended: bool) -> str:
    if cost.billable_since is None:
        return "none: nothing billable was created" if ended else "nothing billable yet"
    text = f"${cost.so_far:,.2f} so far, ${cost.per_hour:,.2f}/hour (estimate, prices as of {cost.prices_as_of})"
    if cost.partial:
        text += "; some items have no price and are left out"
    if (budget := cost.budget_words()) is not None:
        text += f"; {budget}"
    return text


def _add_ending(rows: Table, view: RunView) -> None:
    # The message, never the raw cause (a Lambda error's JSON and stack trace: `status --verbose`).
    # Text, not markup: a message can hold brackets that rich would read as styles.
    rejections = [finding for finding in view.findings if finding.severity == Severity.ERROR]
    if view.status == RunStatus.REJECTED and rejections:
        # Why, with each fix: the findings that rejected it (its error, if any, says the same in one line).
        reasons = "\n".join(f"{finding.code}: {finding.message}" for finding in rejections)
        rows.add_row("rejected", Text(reasons, style=STATUS_COLOURS[RunStatus.REJECTED]))
    elif view.error and view.status == RunStatus.CANCELLED:
        rows.add_row("ended", Text(cause_message(view.error.cause), style=STATUS_COLOURS[RunStatus.CANCELLED]))
    elif view.error:
        rows.add_row("error", Text(view.error.message, style="red"))
    if view.teardown_error:
        rows.add_row("teardown failed", Text(view.teardown_error.message, style="red"))
    remaining = view.resources.remaining
    if not remaining:
        rows.add_row("resources", Text("nothing left", style="green"))
        return
    if view.kept_at:
        title = f"{len(remaining)} kept on purpose (teardown: keep)"
    elif view.torn_down_at:
        title = f"{len(remaining)} still tagged with the run after teardown"
    elif view.teardown_error:
        title = f"{len(remaining)} left: delete them, or let the janitor sweep them"
    else:
        title = f"tearing down, {len(remaining)} left"
    rows.add_row("resources", Text.assemble((title, "yellow"), *(f"\n{resource}" for resource in remaining)))


def _last(values: list[float | None]) -> float | None:
    return next((value for value in reversed(values) if value is not None), None)


def _duration(seconds: float) -> str:
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"
