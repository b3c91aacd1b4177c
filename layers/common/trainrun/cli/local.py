"""Commands that run the control plane on this machine: local (one run) and serve (a local stack)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from trainrun.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_CANNOT_RUN_HERE,
    RunFileArg,
    app,
    coloured,
    err,
    exit_code_of,
    fail,
    out,
    print_findings,
    print_progress,
    print_table,
    read_spec,
)
from trainrun.cli.source import listed_source, upload_workload_directory
from trainrun.local import LOCAL_TERMINATION_LEAD_SECONDS
from trainrun.model.spelling import closest
from trainrun.project_files import examples
from trainrun.workflow import TASK_STATES

if TYPE_CHECKING:
    from trainrun.local.fixture import AccountFixture
    from trainrun.local.runtime import LocalRuntime, StartedRun
    from trainrun.local.summary import LocalRunSummary

DEFAULT_FIXTURE = examples() / "accounts" / "default.yaml"
# How long `trainrun serve` waits for a janitor's sweep under way when it is told to stop.
JANITOR_STOP_SECONDS = 5.0
# Exit code of a local run stopped by Ctrl-C or SIGTERM (the shell's 128 + SIGINT).
EXIT_INTERRUPTED = 130


@app.command()
def local(
    run_file: RunFileArg,
    account: Annotated[
        Path, typer.Option("--account", help="Account fixture: the emulated account's capacity reservations.")
    ] = DEFAULT_FIXTURE,
    fail_at: Annotated[
        str | None,
        typer.Option(
            "--fail-at", help='Make this Task state of the run workflow fail, e.g. "Validate capacity" (any case).'
        ),
    ] = None,
    node_failure_at_step: Annotated[
        int | None,
        typer.Option(
            "--node-failure-at-step",
            help="Take a compute node down when the train job logs this step, and bring a replacement up a few "
            "seconds later: rehearses resume after failure (workload.resume, workload.retries).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
    keep: Annotated[
        bool,
        typer.Option("--keep", help="Skip teardown: the summary lists what is left; the head node's sandbox is kept."),
    ] = False,
    timeout: Annotated[float, typer.Option(help="Give up waiting for the run after this many seconds.")] = 600.0,
    termination_lead: Annotated[
        float,
        typer.Option(
            "--termination-lead",
            min=0,
            help="Seconds before a capacity block's end that its instances go (EC2: 30 minutes); the job "
            "is stopped before then.",
        ),
    ] = LOCAL_TERMINATION_LEAD_SECONDS,
    aws_clock: Annotated[
        bool,
        typer.Option(
            "--aws-clock",
            help="Let the emulated services take AWS's time (NAT gateway, file system, cluster, compute nodes, "
            "dataset copy; compressed, 1 AWS hour in 2 minutes) and report time to first step, node-minutes, "
            "idle and their cost on that clock (a model: docs/architecture.md#the-aws-clock).",
        ),
    ] = False,
) -> None:
    """Rehearse a whole run on this machine with no AWS account: moto, the real workflow, a real
    Slurm head node. Exit code: 0 SUCCEEDED, 1 FAILED, 3 REJECTED, 2 bad run file, fixture or state."""
    # Bad input is refused before the local runtime is even imported (seconds: moto, the stack).
    data, spec = read_spec(run_file)
    listed_source(spec, run_file)  # a directory that cannot be packed is refused before anything starts
    if fail_at:
        fail_at = _state_to_fail(fail_at)
    if node_failure_at_step is not None:
        _check_failure_step(node_failure_at_step, spec.workload.total_steps)
    if keep:
        data = _kept(data)
    fixture = _account_for_a_head_node(account, "local")

    from trainrun.local.runtime import LocalRunError, LocalRuntime
    from trainrun.local.summary import summarize

    _interrupt_on_sigterm()
    try:
        with LocalRuntime(
            fixture, keep_sandboxes=keep, termination_lead_seconds=termination_lead, aws_clock=aws_clock
        ) as runtime:
            try:
                if fail_at:
                    runtime.fail_at(fail_at)
                if node_failure_at_step is not None:
                    runtime.lose_node_at_step(node_failure_at_step)
                if not as_json:
                    err.print(
                        f"[dim]local AWS at {runtime.endpoint_url} (try: aws --endpoint-url {runtime.endpoint_url} "
                        f"stepfunctions list-executions ...); uploading {run_file.name} to the config bucket[/dim]"
                    )
                # As the operator, as `trainrun submit` would: the operator's policy must allow it.
                data = upload_workload_directory(
                    runtime.operator_client("s3"),
                    runtime.deployed.outputs["ConfigBucketName"],
                    spec,
                    data,
                    run_file,
                    quiet=as_json,
                )
                started = runtime.submit(data, f"runs/{spec.name}.yaml")
                if as_json:
                    execution = runtime.wait(started.execution_arn, timeout=timeout)
                else:
                    execution = _watch(runtime, started, timeout=timeout)
            except LocalRunError as exc:
                err.print(f"[red]{exc}[/red]")
                raise typer.Exit(EXIT_BAD_INPUT) from None
            summary = summarize(runtime, started, execution)
            if keep and runtime.head_nodes is not None and not as_json:
                err.print(f"[dim]head node sandboxes kept in {runtime.head_nodes.sandboxes}[/dim]")
    except KeyboardInterrupt:
        # The runtime has stopped everything it started on the way out of its `with`.
        err.print("[yellow]trainrun local: interrupted; everything the run started is stopped[/yellow]")
        raise typer.Exit(EXIT_INTERRUPTED) from None

    if as_json:
        out.print_json(
            json.dumps(
                summary.model_dump(mode="json", exclude={"state_visits"})
                | {"state_visits": [v.model_dump(mode="json") for v in summary.state_visits]}
            )
        )
    else:
        _print_summary(summary)
    raise typer.Exit(exit_code_of(summary.status))


def _state_to_fail(name: str) -> str:
    """The Task state `--fail-at` names, in any case; else exit 2, saying which one was likely meant."""
    # Only a Task state does work that could fail (not a Choice, Wait or Pass state).
    states = [str(state) for state in TASK_STATES]
    meant = closest(name, states)
    if meant is not None and meant.lower() == name.lower():
        return meant
    hint = f"did you mean {meant!r}? " if meant else ""
    raise fail(
        f"--fail-at: {name!r} is not a Task state of the run workflow (only a Task state can fail); "
        f"{hint}the Task states are: {', '.join(states)}"
    )


def _check_failure_step(step: int, total_steps: int | None) -> None:
    """`--node-failure-at-step`: a step the train job logs (from 1 to workload.total_steps); else exit 2."""
    if step < 1:
        raise fail(f"--node-failure-at-step: {step} is not a step; training steps are numbered from 1")
    if total_steps is not None and step > total_steps:
        raise fail(
            f"--node-failure-at-step: {step} is after the last step the train job logs "
            f"(workload.total_steps: {total_steps}); the node would never be lost"
        )


def _interrupt_on_sigterm() -> None:
    """SIGTERM stops a local run as Ctrl-C does: KeyboardInterrupt in the main thread, so that the
    runtime stops everything it started (head nodes, Slurm, MUNGE, the sandboxes). Once: a second
    SIGTERM does not cut that cleanup short."""

    def interrupt(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def _account_for_a_head_node(account: Path, command: str) -> AccountFixture:
    """The account fixture, on a machine that can play the head node; else exit 2 or 4, saying why."""
    from trainrun.local.fixture import FixtureInvalid, load_fixture
    from trainrun.local.slurm_head_node import LocalHeadNodeUnavailable, check_available

    try:
        fixture = load_fixture(account)
    except FixtureInvalid as exc:
        err.print(f"[red]{account} is not a valid account fixture:[/red]")
        for field, message in exc.problems:
            err.print(f"  {field}: {message}", markup=False, highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    try:
        check_available()
    except LocalHeadNodeUnavailable as exc:
        err.print(f"[red]trainrun {command} cannot play the head node here: {exc}[/red]")
        raise typer.Exit(EXIT_CANNOT_RUN_HERE) from None
    return fixture


def _watch(runtime: LocalRuntime, started: StartedRun, *, timeout: float) -> dict[str, Any]:
    """`trainrun watch`'s live view of the run, on stderr, until it has settled; its execution."""
    from trainrun.local.runtime import LocalRunError
    from trainrun.ops.runs import RunNotFound
    from trainrun.ops.watch import watch_run

    stack = runtime.operator_stack()
    try:
        # Each look costs a tenth of a CPU-second (record, execution, history, redraw); once a real
        # second is 30 seconds on AWS's clock (LOCAL_TIME_SCALE), finer gains the view nothing.
        watch_run(stack, started.run_id, err, interval=1.0, timeout=timeout, record_timeout=timeout, record_poll=0.05)
    except (RunNotFound, TimeoutError) as exc:
        raise LocalRunError(str(exc)) from None
    return runtime.wait(started.execution_arn, timeout=timeout)


def _kept(run_file: bytes) -> bytes:
    """The run file with teardown set to keep everything, whatever the outcome (`--keep`)."""
    import yaml

    document = yaml.safe_load(run_file)
    document["teardown"] = {**document.get("teardown", {}), "on_success": "keep", "on_failure": "keep"}
    return yaml.safe_dump(document, sort_keys=False).encode()


def _print_summary(summary: LocalRunSummary) -> None:
    from trainrun.ops.views import resource_rows, state_totals

    # Wait loops visit their states many times: one row per state, with its visits and total time.
    states = Table(title=f"run {summary.run_id}", title_justify="left")
    states.add_column("state")
    states.add_column("visits", justify="right")
    states.add_column("seconds", justify="right")
    for total in state_totals(summary.state_visits):
        states.add_row(total.name, str(total.visits), f"{total.seconds:.2f}")
    print_table(states)
    print_findings(summary.findings)
    print_progress(summary.progress)
    # Counted alike: each resource once, the cluster with its instances (trainrun.ops.views.resource_rows).
    rows = resource_rows(summary.resources, torn_down=summary.torn_down_at is not None)
    created, left = sum(row.recorded for row in rows), [row for row in rows if row.left]
    out.print(f"resources created: {created}; left behind: {len(left) or 'none'}", highlight=False)
    for row in left:
        unrecorded = "" if row.recorded else " (tagged with the run; not recorded as created)"
        out.print(f"  [yellow]left:[/yellow] {row.kind} {row.id}{unrecorded}", highlight=False)
    if summary.checkpoints:
        out.print(f"checkpoints: {summary.checkpoints.summary()}", highlight=False, markup=False)
    if summary.aws_clock:
        for line in summary.aws_clock.lines():
            out.print(line, highlight=False, markup=False)
    out.print(f"[bold]{coloured(summary.status)}[/bold]")
    if summary.error:
        out.print(f"error: {summary.error['error']}: {summary.error['cause']}", highlight=False, markup=False)


@app.command()
def serve(
    account: Annotated[
        Path, typer.Option("--account", help="Account fixture: the emulated account's capacity reservations.")
    ] = DEFAULT_FIXTURE,
    port: Annotated[int, typer.Option(help="The port to serve the emulated AWS on (0: any free port).")] = 0,
    node_failure_at_step: Annotated[
        int | None,
        typer.Option(
            "--node-failure-at-step",
            help="In every run's cluster, take a compute node down when the train job logs this step, and bring "
            "a replacement up a few seconds later (as `trainrun local --node-failure-at-step`).",
        ),
    ] = None,
    env_file: Annotated[
        Path | None,
        typer.Option(
            help="Write the environment for the other commands (`export KEY=VALUE` lines, credentials included; "
            "`. FILE` in a shell sets it) to this file, readable by you only (default: serve.env in ~/.trainrun)."
        ),
    ] = None,
) -> None:
    """Run the control plane on this machine until interrupted (Ctrl-C or SIGTERM): an emulated AWS
    account with the stack deployed and real Slurm head nodes, on loopback. The other commands
    (submit, runs, status, watch, logs, plot, cancel, plan --check) reach it with the environment
    it writes to its env file."""
    import threading

    from trainrun.local.runtime import LocalRuntime
    from trainrun.ops.stack import STACK_ENVIRONMENT_VARIABLE

    if node_failure_at_step is not None:
        _check_failure_step(node_failure_at_step, total_steps=None)
    fixture = _account_for_a_head_node(account, "serve")
    env_file = env_file or Path.home() / ".trainrun" / "serve.env"

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    with LocalRuntime(fixture, port=port) as runtime:
        if node_failure_at_step is not None:
            runtime.lose_node_at_step(node_failure_at_step)
        environment = {**runtime.aws_environment(), STACK_ENVIRONMENT_VARIABLE: runtime.deployed.name}
        # Written before it is announced: a script that waits for the file finds the stack ready.
        write_private_file(env_file, export_lines(environment))
        err.print(
            f"[green]trainrun serve:[/green] the local stack {runtime.deployed.name} is up at {runtime.endpoint_url}\n"
            f"Its environment (credentials included) is in {env_file}, readable by you only. In another shell:\n"
            f"  . {env_file}\n  trainrun submit examples/single-node.yaml --watch\n"
            "Ctrl-C (or SIGTERM) stops it, and everything it runs.",
            highlight=False,
        )
        # The janitor sweeps on its schedule, as on AWS, with nothing else running.
        janitor = threading.Thread(target=runtime.sweep_on_schedule, args=(stopping,), name="janitor", daemon=True)
        janitor.start()
        with contextlib.suppress(KeyboardInterrupt):
            stopping.wait()
        stopping.set()
        # A sweep under way is not waited for past a few seconds (on a loaded machine one has
        # taken minutes): stopping the runtime ends it, and the next start's janitor sweeps again.
        janitor.join(timeout=JANITOR_STOP_SECONDS)
        err.print("trainrun serve: stopping (running executions are stopped, head nodes shut down)")


def export_lines(environment: dict[str, str]) -> str:
    """`environment` as a shell's `export` lines, each value quoted: `. FILE` sets it in a shell."""
    return "".join(f"export {key}={shlex.quote(value)}\n" for key, value in environment.items())


def write_private_file(path: Path, text: str) -> None:
    """Write `text` to `path` readable and writable by this user only (0600), whole or not at all:
    it goes to a private file next to it first, which then replaces it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # created 0600
    try:
        with os.fdopen(handle, "w") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
