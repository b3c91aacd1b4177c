"""Commands for runs on a deployed stack: submit, runs, status, watch, logs, plot, cancel.

Each finds the stack by --stack (else $TRAINRUN_STACK, else samconfig.toml's stack_name) and
reaches AWS at --endpoint-url (else $AWS_ENDPOINT_URL), so they work the same against the
local stack of `trainrun serve`.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from trainrun.cli.common import (
    EXIT_CANNOT_RUN_HERE,
    EXIT_FAILED,
    EXIT_TIMED_OUT,
    EndpointOption,
    JsonOption,
    RegionOption,
    RunFileArg,
    StackOption,
    app,
    coloured,
    connect,
    err,
    exit_code_of,
    fail,
    out,
    print_findings,
    print_progress,
    print_table,
    read_spec,
)

if TYPE_CHECKING:
    from trainrun.model.run_record import RunRecord
    from trainrun.ops.runs import RunRow
    from trainrun.ops.stack import Stack
    from trainrun.ops.views import Resources, RunView

RunArg = Annotated[str, typer.Argument(help="The run id (as submit printed it), or a run name: its latest run.")]


def find(stack: Stack, run: str) -> RunRecord:
    from trainrun.ops.runs import RunNotFound, find_run

    try:
        return find_run(stack, run)
    except RunNotFound as exc:
        raise fail(str(exc)) from None


@app.command()
def submit(
    run_file: RunFileArg,
    watch: Annotated[
        bool, typer.Option("--watch", help="Then watch the run until it ends (exit code: its outcome).")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the run to start.")] = 60.0,
    as_json: JsonOption = False,
    stack: StackOption = None,
    endpoint_url: EndpointOption = None,
    region: RegionOption = None,
) -> None:
    """Validate a run file, upload it to the stack's config bucket (which starts the run), and
    print the run id once its execution has started. A local directory as the workload
    (workload.source.path) is packed and uploaded first, and the run file sent names its archive."""
    from trainrun.cli.source import upload_workload_directory
    from trainrun.ops.submit import RunDidNotStart, run_file_key, running_runs
    from trainrun.ops.submit import submit as submit_run

    data, spec = read_spec(run_file)
    target = connect(stack, endpoint_url, region)
    data = upload_workload_directory(
        target.client("s3"), target.outputs["ConfigBucketName"], spec, data, run_file, quiet=as_json
    )
    key = run_file_key(spec.name)
    running = running_runs(target, key)
    if not as_json:
        err.print(f"uploading {run_file} to s3://{target.outputs['ConfigBucketName']}/{key}", highlight=False)
    try:
        run = submit_run(target, data, key, timeout=timeout)
    except RunDidNotStart as exc:
        raise fail(str(exc), EXIT_FAILED) from None
    for earlier in running:
        # On stderr, --json or not: the upload has started a second run, which costs as much as the first.
        err.print(
            f"[yellow]warning:[/yellow] run {earlier.run_id} of this run file is still running (started "
            f"{earlier.created_at:%Y-%m-%d %H:%M} UTC); run {run.run_id} now runs beside it. If that was not meant: "
            f"`trainrun cancel {run.run_id}`",
            highlight=False,
            soft_wrap=True,
        )
    if as_json:
        out.print_json(run.model_dump_json())
    else:
        out.print(f"run {run.run_id} started", highlight=False)
        err.print(f"follow it with: trainrun watch {run.run_id}   (or: trainrun logs {run.run_id} --follow)")
    if watch:
        _watch(target, run.run_id, interval=2.0, timeout=None)


@app.command()
def runs(
    limit: Annotated[int, typer.Option(min=1, help="Show at most this many of the newest runs.")] = 20,
    as_json: JsonOption = False,
    stack: StackOption = None,
    endpoint_url: EndpointOption = None,
    region: RegionOption = None,
) -> None:
    """The stack's recent runs: status, current state, age, nodes, last step and loss; then the
    run starts that were never delivered (an upload or a schedule occurrence whose start failed)."""
    from trainrun.ops.runs import run_rows, undelivered_rows
    from trainrun.ops.undelivered import undelivered_runs

    connected = connect(stack, endpoint_url, region)
    rows = run_rows(connected, limit=limit)
    undelivered = undelivered_runs(connected)
    not_started = undelivered_rows(undelivered) if undelivered is not None else []
    if undelivered is not None and undelivered.count > len(not_started):
        err.print(f"{undelivered.count} run starts undelivered, {len(not_started)} of them shown")
    if as_json:
        out.print_json(json.dumps([row.model_dump(mode="json") for row in rows + not_started]))
        return
    if rows:
        print_table(_runs_table(rows))
        _print_kept(rows)
    else:
        err.print("no runs yet (trainrun submit RUN.yaml starts one)")
    if not_started:
        print_table(_undelivered_table(not_started))


def _runs_table(rows: list[RunRow]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    # The run id is what every other command takes: never shortened, whatever the terminal's width.
    table.add_column("run", no_wrap=True, min_width=max(len(row.run_id or "") for row in rows))
    for column in ("status", "state", "age", "nodes", "step", "loss"):
        table.add_column(column, justify="right" if column in ("age", "step", "loss") else "left", no_wrap=True)
    for row in rows:
        table.add_row(
            row.run_id or "",
            coloured(row.status) + (" (kept)" if row.kept else ""),
            row.state or (row.error or ""),
            _duration(row.age_seconds),
            f"{row.nodes} x {row.instance_type}" if row.nodes else "",
            "" if row.step is None else str(row.step),
            "" if row.loss is None else f"{row.loss:.4f}",
        )
    return table


def _print_kept(rows: list[RunRow]) -> None:
    """The runs that still bill after they ended: what they kept, by the hour, and until when."""
    kept = [row for row in rows if row.kept]
    for row in kept:
        until = (
            f"torn down by the janitor once idle for {row.keep_for}"
            if row.keep_for
            else f"until `trainrun down {row.run_id}`"
        )
        line = f"kept: {row.run_id} bills about ${row.per_hour:,.2f}/h, {until}"
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    if len(kept) > 1:
        total = sum(row.per_hour or 0.0 for row in kept)
        out.print(f"kept: {len(kept)} runs bill about ${total:,.2f}/h together", highlight=False, markup=False)


def _undelivered_table(rows: list[RunRow]) -> Table:
    """Run starts that never became runs: upload the run file again once the cause is fixed."""
    table = Table(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        title="UNDELIVERED: not started (upload the run file again once the cause is fixed)",
        title_justify="left",
    )
    for column in ("run file", "trigger", "age", "by", "error"):
        table.add_column(column, justify="right" if column == "age" else "left", no_wrap=column != "error")
    for row in rows:
        start = row.undelivered
        assert start is not None
        trigger = start.trigger if start.occurrence is None else f"{start.trigger} {start.occurrence}"
        error = f"{start.error}: {start.error_message}" if start.error_message else start.error
        table.add_row(start.run_file or "?", trigger, _duration(row.age_seconds), start.by, error)
    return table


@app.command()
def status(
    run: RunArg,
    as_json: JsonOption = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Also print an error's raw cause (a Lambda error's JSON, stack trace)."),
    ] = False,
    stack: StackOption = None,
    endpoint_url: EndpointOption = None,
    region: RegionOption = None,
) -> None:
    """Everything known about one run: states with times, findings, resources, progress, cost, error."""
    from trainrun.ops.runs import build_view

    target = connect(stack, endpoint_url, region)
    record = find(target, run)
    view = build_view(target, record)
    if as_json:
        out.print_json(view.model_dump_json())
    else:
        _print_status(view, verbose=verbose)


@app.command()
def watch(
    run: RunArg,
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between refreshes.")] = 2.0,
    timeout: Annotated[float | None, typer.Option(help="Give up after this many seconds (default: never).")] = None,
    stack: StackOption = None,
    endpoint_url: EndpointOption = None,
    region: RegionOption = None,
) -> None:
    """Follow a run until it has ended and been torn down: its state, a progress bar over training
    steps with an ETA, loss and throughput sparklines, the cost so far. Exit code: the outcome."""
    from trainrun.ops.runs import RunNotFound, find_run
    from trainrun.steps.start_run import looks_like_run_id

    target = connect(stack, endpoint_url, region)
    try:
        run_id = find_run(target, run).run_id
    except RunNotFound as exc:
        # A run id of a run just started (its first state writes the record): watch waits for it.
        if not looks_like_run_id(run):
            raise fail(str(exc)) from None
        run_id = run
    _watch(target, run_id, interval=interval, timeout=timeout)


def _watch(target: Stack, run_id: str, *, interval: float, timeout: float | None) -> None:
    from trainrun.ops.runs import RunNotFound
    from trainrun.ops.watch import watch_run

    try:
        view = watch_run(target, run_id, err, interval=interval, timeout=timeout)
    except RunNotFound as exc:
        raise fail(str(exc), EXIT_FAILED) from None
    except TimeoutError as exc:
        raise fail(f"trainrun watch: {exc}", EXIT_TIMED_OUT) from None
    raise typer.Exit(exit_code_of(view.status))


@app.command()
def logs(
    run: RunArg,
    job: Annotated[
        str | None,
        typer.Option("--job", help="Only this job's output: compile or train (default: both).", show_default=False),
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines until the run ends.")] = False,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw", help="Every line as the job wrote it: each rank's copy, srun's labels, trainrun's markers."
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help='One JSON object a line: {"job": ..., "ranks": [...], "line": ...}.')
    ] = False,
    stack: StackOption = None,
    endpoint_url: EndpointOption = None,
    region: RegionOption = None,
) -> None:
    """The compile and training jobs' output, from the stack's jobs log group (an EKS run's: from
    its cluster's container log group, each pod's lines with its completion index as its rank):
    each line once, prefixed with the ranks that printed it, `(all ranks)` when every rank did (no
    prefix on a one-node run); trainrun's own lines hidden."""
    from trainrun.model.jobs import JOB_KINDS, JobKind
    from trainrun.model.spelling import closest
    from trainrun.ops.logs import RankMerger, ShownLine, print_job_logs

    if job is not None and job not in JOB_KINDS:
        meant = closest(job, JOB_KINDS)
        hint = f"; did you mean {meant}?" if meant else ""
        raise fail(f"--job {job!r} is not a job: the jobs are {' and '.join(JOB_KINDS)}{hint}")
    target = connect(stack, endpoint_url, region)
    record = find(target, run)
    jobs: tuple[JobKind, ...] = tuple(kind for kind in JOB_KINDS if kind == job) if job else JOB_KINDS
    nodes = record.spec.capacity.nodes if record.spec is not None else 1
    mergers = {kind: RankMerger(nodes) for kind in jobs}
    last_job: list[JobKind] = []

    def show(kind: JobKind, lines: list[ShownLine]) -> None:
        for line in lines:
            if as_json:
                print(json.dumps({"job": kind, "ranks": line.ranks, "line": line.text}), flush=True)
                continue
            if len(jobs) > 1 and last_job[-1:] != [kind]:
                err.print(f"[bold]==> {kind} job of {record.run_id} <==[/bold]", highlight=False)
                last_job.append(kind)
            print(line.prefix(single_node=nodes == 1) + line.text, flush=True)

    def emit(kind: JobKind, lines: list[str]) -> None:
        if raw:
            show(kind, [ShownLine(line, None) for line in lines])
            return
        merger = mergers[kind]
        # A quiet stream shows what still waits for other ranks' copies.
        show(kind, [shown for line in lines for shown in merger.feed(line)] if lines else merger.flush())

    found = print_job_logs(target, record.run_id, jobs, emit, follow=follow, eks=record.on_eks)
    for kind in jobs:
        show(kind, mergers[kind].flush())
    for kind, exists in found.items():
        if not exists:
            err.print(f"[dim]no output from the {kind} job of {record.run_id}[/dim]", highlight=False)


@app.command()
def plot(
    run: RunArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="The PNG file to write.")] = Path("loss.png"),
    as_json: Annotated[bool, typer.Option("--json", help="Also print the plotted points as JSON.")] = False,
    stack: StackOption = None,
    endpoint_url: EndpointOption = None,
    region: RegionOption = None,
) -> None:
    """Plot loss and throughput against step from the run's recorded training history (PNG)."""
    from trainrun.ops.plot import plot_history

    target = connect(stack, endpoint_url, region)
    record = find(target, run)
    history = record.progress_train.history if record.progress_train is not None else []
    try:
        plotted = plot_history(history, output, title=f"{record.name or record.run_id} ({record.run_id})")
    except ValueError as exc:
        raise fail(f"{record.run_id}: {exc}") from None
    except OSError as exc:
        raise fail(f"{output}: cannot write: {exc.strerror}") from None
    steps = plotted.loss.steps
    if as_json:
        out.print_json(json.dumps({"output": str(output), **plotted.model_dump(mode="json")}))
        return
    out.print(f"wrote {output}: {len(steps)} points, steps {steps[0]} to {steps[-1]}", highlight=False)


@app.command()
def checkpoints(
    run: RunArg,
    download: Annotated[
        Path | None,
        typer.Option(
            "--download",
            help="Fetch them into this directory (a file already there with the same size is skipped).",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOption = False,
    stack: StackOption = None,
    endpoint_url: EndpointOption = None,
    region: RegionOption = None,
) -> None:
    """The checkpoints teardown exported to S3 for a run: each file with its step (from its name)
    and size; `--download DIR` fetches them, with progress, and skips what is already there."""
    from botocore.exceptions import ClientError

    from trainrun.ops import checkpoints as exported
    from trainrun.ops.source_archive import human_bytes

    target = connect(stack, endpoint_url, region)
    record = find(target, run)
    try:
        location = exported.checkpoint_location(record)
    except exported.NoCheckpoints as exc:
        raise fail(str(exc)) from None
    s3 = target.client("s3")
    try:
        files = exported.list_checkpoints(s3, location)
        done = _download_checkpoints(s3, location, files, download) if download is not None else None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise fail(
            f"cannot read {location}: {error.get('Code')}: {error.get('Message')} (the operator's policy reads the "
            "config bucket's checkpoints/; a data repository's are read with your own access to its bucket; "
            "see docs/deployment.md)",
            EXIT_FAILED,
        ) from None
    except (ValueError, OSError) as exc:
        raise fail(str(exc), EXIT_FAILED) from None
    if as_json:
        listing = [{"path": file.path, "step": file.step, "size": file.size} for file in files]
        result: dict[str, Any] = {"run_id": record.run_id, "location": location, "files": listing}
        if done is not None:
            result["downloaded"] = {"directory": str(download), **done.__dict__}
        out.print_json(json.dumps(result))
        return
    if done is not None:
        out.print(
            f"downloaded {done.files} {_plural(done.files, 'file')} ({human_bytes(done.bytes)}), "
            f"{done.already_there} already there, into {download}",
            highlight=False,
        )
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title=location, title_justify="left")
    table.add_column("file", no_wrap=True)
    table.add_column("step", justify="right")
    table.add_column("size", justify="right")
    for file in files:
        table.add_row(Text(file.path), "" if file.step is None else str(file.step), human_bytes(file.size))
    print_table(table)
    total = sum(file.size for file in files)
    out.print(f"{len(files)} {_plural(len(files), 'file')}, {human_bytes(total)}", highlight=False)


def _download_checkpoints(s3: Any, location: str, files: list[Any], directory: Path) -> Any:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from trainrun.ops.checkpoints import download_checkpoints

    # On a terminal only: piped, the summary line is the whole output.
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TransferSpeedColumn(),
        console=err,
        disable=not err.is_terminal,
        transient=True,
    ) as bar:
        task = bar.add_task("checkpoints", total=sum(file.size for file in files))
        return download_checkpoints(
            s3,
            location,
            files,
            directory,
            on_file=lambda file: bar.update(task, description=file.path),
            on_bytes=lambda count: bar.advance(task, count),
        )


def _plural(count: int, word: str) -> str:
    return word if count == 1 else f"{word}s"


@app.command()
def cancel(
    run: RunArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    wait: Annotated[bool, typer.Option(help="Wait until teardown has finished.")] = True,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for teardown.")] = 3600.0,
    stack: StackOption = None,
    endpoint_url: EndpointOption = None,
    region: RegionOption = None,
) -> None:
    """Stop a run so that teardown still happens; show what will be deleted first, and report
    when nothing is left."""
    from trainrun.ops import cancel as cancelling

    target = connect(stack, endpoint_url, region)
    record = find(target, run)
    preview = cancelling.preview(target, record)
    if not preview.running:
        err.print(f"run {record.run_id} has already ended: {coloured(preview.status)}", highlight=False)
        if preview.resources:
            raise fail(
                f"still there: {', '.join(preview.resources)} (teardown.on_failure/on_success: keep, or the janitor "
                "will sweep them)",
                EXIT_FAILED,
            )
        return
    err.print(f"cancelling run {record.run_id} ({record.name}): its execution stops, then teardown", highlight=False)
    if preview.kept_by_policy:
        err.print("[yellow]teardown.on_failure is keep: nothing will be deleted; this is left running:[/yellow]")
    else:
        err.print("teardown deletes:" if preview.resources else "teardown deletes: nothing created yet")
    for item in preview.resources:
        err.print(f"  {item}", highlight=False)
    if not yes:
        if not sys.stdin.isatty():
            raise fail("trainrun cancel: not a terminal, so no confirmation: pass --yes")
        typer.confirm("cancel the run?", abort=True, err=True)
    if not cancelling.stop(target, record):
        err.print(f"run {record.run_id} ended before it could be cancelled")
        return
    err.print(f"run {record.run_id} cancelled: execution stopped")
    if not wait:
        err.print(f"teardown goes on; `trainrun status {record.run_id}` shows what is left")
        return
    with err.status("waiting for teardown") as spinner:
        try:
            outcome = cancelling.wait_for_teardown(
                target,
                record.run_id,
                timeout=timeout,
                on_progress=lambda remaining: spinner.update(
                    f"waiting for teardown: {len(remaining)} tagged resources left"
                ),
            )
        except TimeoutError as exc:
            raise fail(str(exc), EXIT_FAILED) from None
    if outcome.kept:
        err.print(f"[yellow]kept by teardown policy:[/yellow] {', '.join(outcome.remaining) or 'nothing tagged'}")
    elif outcome.remaining:
        raise fail(f"torn down, but still tagged with the run: {', '.join(outcome.remaining)}", EXIT_FAILED)
    else:
        out.print(f"run {record.run_id} cancelled and torn down: nothing left", highlight=False)


# --- text output --------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d"


def _time(moment: datetime | None) -> str:
    return "" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def _print_resources(resources: Resources, *, torn_down: bool, running: bool) -> None:
    from trainrun.ops.views import resource_rows

    rows = resource_rows(resources, torn_down=torn_down)
    if not rows:
        out.print("resources: none created", highlight=False)
        return
    table = Table(title="resources", title_justify="left")
    for column in ("resource", "id", "now"):
        table.add_column(column, no_wrap=column != "now")
    # While the run runs, what it created is in use, not left behind.
    there = "[green]up[/green]" if running else "[yellow]left[/yellow]"
    for row in rows:
        now = there if row.left else "[green]deleted[/green]"
        if not row.recorded:
            now += " (tagged with the run; not recorded as created)"
        table.add_row(row.kind, Text(row.id), now)
    print_table(table)
    left = sum(row.left for row in rows)
    if running:
        out.print(f"up: {left or 'nothing'} (teardown follows the run's end)", highlight=False)
    else:
        out.print(f"still there: {left or 'nothing'}", highlight=False)


def _print_status(view: RunView, *, verbose: bool) -> None:
    from trainrun.ops.views import state_totals

    out.print(
        f"[bold]run {view.run_id}[/bold] ({view.name or 'no name yet'}): {coloured(view.status)}", highlight=False
    )
    out.print(f"  run file   {view.run_file}", highlight=False, markup=False)
    if view.nodes:
        out.print(f"  nodes      {view.nodes} x {view.instance_type}", highlight=False)
    out.print(f"  started    {_time(view.created_at)} UTC", highlight=False)
    if view.current_state:
        out.print(f"  now in     {view.current_state}", highlight=False)
    for job in view.jobs:
        # As it runs: a Slurm job, or an EKS run's Kubernetes Job (namespace trainrun).
        out.print(f"  {job.job:<10} {job.summary()}", highlight=False, markup=False)
    if view.ended_at:
        out.print(f"  ended      {_time(view.ended_at)} UTC", highlight=False)
    if view.torn_down_at:
        out.print(f"  torn down  {_time(view.torn_down_at)} UTC", highlight=False)
    if view.kept_at:
        out.print(f"  kept since {_time(view.kept_at)} UTC (teardown policy)", highlight=False)
    if view.checkpoints:
        out.print(f"  checkpoints {view.checkpoints.summary()}", highlight=False, markup=False)
    if len(view.executions) > 1:
        # A long silent wait went on in fresh executions before Step Functions' history quota.
        for number, execution in enumerate(view.executions):
            why = f"ended: {execution.ended_because}" if execution.ended_because else "current"
            label = "executions" if number == 0 else ""
            out.print(
                f"  {label:<10} {execution.execution_arn} ({why}, {execution.checks} silent-job checks)",
                highlight=False,
                markup=False,
            )
    if view.states:
        # A wait loop is one row: its rounds and their time together (`--json` has every visit).
        table = Table(title="states", title_justify="left")
        for column in ("state", "first entered (UTC)", "visits", "seconds"):
            table.add_column(column, justify="right" if column in ("visits", "seconds") else "left")
        for total in state_totals(view.states):
            seconds = f"{total.seconds:.1f}" + (" + running" if total.running else "")
            table.add_row(total.name, _time(total.first_entered_at), str(total.visits), seconds)
        print_table(table)
    print_findings(view.findings)
    print_progress(view.progress, total_steps=view.total_steps)
    _print_resources(view.resources, torn_down=view.torn_down_at is not None, running=not view.ended)
    if view.cost is not None and view.cost.billable_since is None:
        out.print(f"cost so far: none, nothing billable {'was created' if view.ended else 'yet'}", highlight=False)
    elif view.cost is not None:
        partial = " (partial: some items have no price)" if view.cost.partial else ""
        out.print(
            f"cost so far: about ${view.cost.so_far:,.2f}, billable for {view.cost.hours:.2f} h; "
            f"${view.cost.per_hour:,.2f}/h with everything up "
            f"(estimate, list prices of {view.cost.prices_as_of}){partial}",
            highlight=False,
        )
    if view.cost is not None and (budget := view.cost.budget_words()) is not None:
        out.print(budget, highlight=False)
    # Text, not markup: a message can hold brackets that rich would read as styles.
    for label, error in (("error", view.error), ("teardown failed", view.teardown_error)):
        if error is None:
            continue
        out.print(Text.assemble((f"{label}: ", "red"), error.message))
        if verbose and error.cause:
            out.print(Text.assemble(("  raw cause: ", "dim"), error.cause))


# --- on the run's cluster: shell, down ----------------------------------------------------------


@app.command()
def shell(
    run: RunArg,
    command: Annotated[
        str | None,
        typer.Option("--command", "-c", help="Run this command instead of an interactive shell."),
    ] = None,
    stack: StackOption = None,
    endpoint_url: EndpointOption = None,
    region: RegionOption = None,
) -> None:
    """A shell on the run's head node through SSM Session Manager (aws ssm start-session); on the
    local stack of `trainrun serve`, in the head node's sandbox. Exit code: the session's. An EKS
    run has no head node: this prints the commands of a shell in rank 0's pod of its current job
    (aws eks update-kubeconfig, then kubectl exec), and runs none of them."""
    import subprocess

    from trainrun.ops import shell as shells

    target = connect(stack, endpoint_url, region)
    record = find(target, run)
    if record.on_eks:
        _print_pod_shell(target, record, command)
        return
    try:
        instance_id = shells.head_node_of(record)
    except shells.NoHeadNode as exc:
        raise fail(str(exc)) from None
    # The local stack's Session Manager session (its client and id), ended when the shell ends.
    local_session: tuple[Any, str] | None = None
    if shells.is_local_endpoint(target.endpoint_url):
        from trainrun.local.head_node_lifecycle import shell_argv
        from trainrun.local.slurm_head_node import LocalHeadNodeUnavailable

        try:
            argv = shell_argv(instance_id, command)
        except LocalHeadNodeUnavailable as exc:
            raise fail(f"trainrun shell: {exc}", EXIT_CANNOT_RUN_HERE) from None
        if argv is None:
            raise fail(
                f"head node {instance_id} of run {record.run_id} is not running on this machine "
                f"(the local stack at {target.endpoint_url} runs its head nodes where `trainrun serve` runs)",
                EXIT_CANNOT_RUN_HERE,
            )
        # Session Manager's control plane decides as on AWS; the shell itself is the sandbox's.
        ssm = target.client("ssm")
        try:
            session_id = shells.start_session(ssm, instance_id, command)
        except shells.SessionRefused as exc:
            raise fail(f"trainrun shell: {exc}", EXIT_FAILED) from None
        local_session = (ssm, session_id)
        err.print(
            f"[dim]session {session_id}: a shell on head node {instance_id} (local sandbox) as root[/dim]",
            highlight=False,
        )
    else:
        session = shells.session_command(
            instance_id,
            region=target.region,
            endpoint_url=target.endpoint_url,
            profile=target.session.profile_name if target.session.profile_name != "default" else None,
            command=command,
        )
        if session.missing:
            err.print(
                f"{' and '.join(session.missing)} not found on PATH; the session is opened with:", highlight=False
            )
            out.print(session.text, highlight=False, markup=False, soft_wrap=True)
            if shells.PLUGIN in session.missing:
                err.print(shells.PLUGIN_INSTALL_HELP, highlight=False, markup=False)
            if "aws" in session.missing:
                err.print(
                    'install the AWS CLI (AWS Command Line Interface User Guide: "Installing or updating the '
                    'latest version of the AWS CLI")',
                    highlight=False,
                    markup=False,
                )
            raise typer.Exit(EXIT_CANNOT_RUN_HERE)
        argv = session.argv
        err.print(f"[dim]{session.text}[/dim]", highlight=False, markup=False)
    # The user's own command line, run as typed: the session takes over this terminal until it ends.
    try:
        code = subprocess.run(argv, check=False).returncode  # noqa: S603 - argv built here, no shell
    finally:
        # Locally, the session ends as the Session Manager plugin ends it on AWS.
        problem = shells.end_session(*local_session) if local_session is not None else None
        if problem is not None:
            err.print(f"warning: {problem}", highlight=False, markup=False)
    raise typer.Exit(code)


def _print_pod_shell(target: Stack, record: RunRecord, command: str | None) -> None:
    """`trainrun shell` of an EKS run: the commands on stdout, what they do on stderr."""
    from trainrun.ops import shell as shells

    try:
        cluster = shells.eks_cluster_of(record)
    except shells.NoEksCluster as exc:
        raise fail(str(exc)) from None
    role_arn = target.outputs.get(shells.KUBERNETES_ROLE_OUTPUT)
    if not role_arn:
        raise fail(
            f"stack {target.name} has no output {shells.KUBERNETES_ROLE_OUTPUT} (the role with the access entry of "
            "every EKS run's cluster): update the stack (sam deploy) to reach the run's pods"
        )
    commands = shells.pod_shell_commands(
        cluster,
        shells.shell_job(record),
        role_arn=role_arn,
        endpoint_url=target.endpoint_url,
        profile=target.session.profile_name if target.session.profile_name != "default" else None,
        command=command,
    )
    err.print(
        f"run {record.run_id} runs on EKS cluster {cluster.name}: no head node. A shell in rank 0's pod of "
        f"Kubernetes Job {commands.job} (namespace trainrun), with kubectl as the stack's Kubernetes role:",
        highlight=False,
        markup=False,
    )
    out.print(commands.text, highlight=False, markup=False, soft_wrap=True)
    for missing in commands.missing:
        what = (
            shells.KUBECTL_INSTALL_HELP
            if missing == shells.KUBECTL
            else (
                'install the AWS CLI (AWS Command Line Interface User Guide: "Installing or updating the latest '
                'version of the AWS CLI")'
            )
        )
        err.print(f"{missing} not found on PATH: {what}", highlight=False, markup=False)


@app.command()
def down(
    run: RunArg,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the teardown.")] = 3600.0,
    stack: StackOption = None,
    endpoint_url: EndpointOption = None,
    region: RegionOption = None,
) -> None:
    """Tear down a run that has ended, deleting what its teardown policy kept (its cluster, file
    system and network); wait until nothing is left and say what was deleted. Refused while a run
    on its kept cluster (cluster.reuse) is still running."""
    from trainrun.ops import down as downing
    from trainrun.ops.cancel import existing_resources

    target = connect(stack, endpoint_url, region)
    record = find(target, run)
    if record.torn_down_at is not None:
        out.print(
            f"run {record.run_id} was torn down at {_time(record.torn_down_at)} UTC: nothing to do", highlight=False
        )
        return
    before = existing_resources(target, record)
    try:
        execution_arn = downing.start(target, record)
    except (downing.StillRunning, downing.ClusterInUse) as exc:
        raise fail(str(exc)) from None
    err.print(f"tearing down run {record.run_id} ({record.name}):", highlight=False)
    for item in before:
        err.print(f"  {item}", highlight=False)
    with err.status("waiting for teardown") as spinner:
        try:
            outcome = downing.wait(
                target,
                record,
                execution_arn,
                before,
                timeout=timeout,
                on_progress=lambda remaining: spinner.update(
                    f"waiting for teardown: {len(remaining)} left ({', '.join(remaining[:3]) or 'finishing'})"
                ),
            )
        except TimeoutError as exc:
            raise fail(str(exc), EXIT_FAILED) from None
    for item in outcome.deleted:
        out.print(f"deleted {item}", highlight=False)
    if outcome.teardown_error is not None:
        left = ", ".join(outcome.remaining) or "nothing tagged"
        raise fail(f"teardown failed: {outcome.teardown_error}; still there: {left}", EXIT_FAILED)
    out.print(f"run {record.run_id} torn down: nothing left", highlight=False)
