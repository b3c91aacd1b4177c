"""The trainrun command line.

Exit codes are a contract: 0 success, 1 the run failed, 2 bad input (run file, fixture,
arguments), 3 the run was rejected before anything was created.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from trainrun.errors import RunSpecInvalid
from trainrun.runfile import RunSpec, parse_run_file

if TYPE_CHECKING:
    from trainrun.local.summary import RunSummary

EXIT_BAD_INPUT = 2  # the run's own exit codes are RunSummary.exit_code's
# `trainrun local` on a machine that cannot play the head node (no Slurm/MUNGE, not root).
EXIT_CANNOT_RUN_HERE = 4
DEFAULT_FIXTURE = Path(__file__).resolve().parents[3] / "examples" / "accounts" / "default.yaml"

app = typer.Typer(
    help="Run distributed training on AWS Trainium from one YAML run file.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

RunFileArg = Annotated[Path, typer.Argument(help="The run file (YAML).", show_default=False)]


def _read_spec(path: Path) -> tuple[bytes, RunSpec]:
    """Read and validate a run file, or print every problem and exit 2."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        err.print(f"[red]{path}: cannot read: {exc.strerror}[/red]")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    try:
        return data, parse_run_file(data)
    except RunSpecInvalid as exc:
        err.print(f"[red]{path} is not a valid run file:[/red]")
        for field, message in exc.problems:
            err.print(f"  {field}: {message}", markup=False, highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None


@app.command()
def validate(run_file: RunFileArg) -> None:
    """Check a run file offline; print each problem with its field path (exit 2), or a summary (exit 0)."""
    _, spec = _read_spec(run_file)
    target = spec.capacity.reservation_id or spec.capacity.reservation_group_arn
    out.print(
        f"[green]{run_file} is valid:[/green] {spec.name}: {spec.capacity.nodes} x {spec.capacity.instance_type} "
        f"on {target}, {spec.cluster.os}, max runtime {spec.workload.max_runtime}",
        highlight=False,
    )


@app.command()
def local(
    run_file: RunFileArg,
    account: Annotated[
        Path, typer.Option("--account", help="Account fixture: the emulated account's capacity reservations.")
    ] = DEFAULT_FIXTURE,
    fail_at: Annotated[
        str | None, typer.Option("--fail-at", help='Make this state fail, e.g. "Validate capacity".')
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
    keep: Annotated[
        bool,
        typer.Option("--keep", help="Skip teardown: the summary lists what is left; the head node's sandbox is kept."),
    ] = False,
    timeout: Annotated[float, typer.Option(help="Give up waiting for the run after this many seconds.")] = 600.0,
) -> None:
    """Rehearse a whole run on this machine with no AWS account: moto, the real workflow, a real
    Slurm head node. Exit code: 0 SUCCEEDED, 1 FAILED, 3 REJECTED, 2 bad run file or fixture."""
    from trainrun.local.fixture import FixtureInvalid, load_fixture
    from trainrun.local.head_node import LocalHeadNodeUnavailable, check_available
    from trainrun.local.live import follow
    from trainrun.local.runtime import LocalRunError, LocalRuntime
    from trainrun.local.summary import summarize

    data, spec = _read_spec(run_file)
    if keep:
        data = _kept(data)
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
        err.print(f"[red]trainrun local cannot play the head node here: {exc}[/red]")
        raise typer.Exit(EXIT_CANNOT_RUN_HERE) from None

    with LocalRuntime(fixture, keep_sandboxes=keep) as runtime:
        try:
            if fail_at:
                runtime.fail_at(fail_at)
            if not as_json:
                err.print(
                    f"[dim]local AWS at {runtime.endpoint_url} (try: aws --endpoint-url {runtime.endpoint_url} "
                    f"stepfunctions list-executions ...); uploading {run_file.name} to the config bucket[/dim]"
                )
            started = runtime.submit(data, f"runs/{spec.name}.yaml")
            if as_json:
                execution = runtime.wait(started.execution_arn, timeout=timeout)
            else:
                execution = follow(runtime, started, err, timeout=timeout)
        except LocalRunError as exc:
            err.print(f"[red]{exc}[/red]")
            raise typer.Exit(EXIT_BAD_INPUT) from None
        summary = summarize(runtime, started, execution)
        if keep and runtime.head_nodes is not None and not as_json:
            err.print(f"[dim]head node sandboxes kept in {runtime.head_nodes.sandboxes}[/dim]")

    if as_json:
        out.print_json(
            json.dumps(
                summary.model_dump(mode="json", exclude={"state_visits"})
                | {"state_visits": [v.model_dump(mode="json") for v in summary.state_visits]}
            )
        )
    else:
        _print_summary(summary)
    raise typer.Exit(summary.exit_code())


@app.command("cluster-config")
def cluster_config(
    run_file: RunFileArg,
    neuron_install_script: Annotated[
        str | None,
        typer.Option(help="s3:// or https:// URI of the OnNodeConfigured script that installs the Neuron SDK."),
    ] = None,
) -> None:
    """Print the ParallelCluster configuration the run will create, with placeholder ids for what does not exist yet."""
    from trainrun.cluster_config import ClusterIds, render_cluster_config, to_yaml
    from trainrun.tags import run_tags

    _, spec = _read_spec(run_file)
    try:
        config = render_cluster_config(
            spec,
            ClusterIds.placeholders(),
            tags=run_tags(f"{spec.name}-preview", "trainrun"),
            neuron_install_script_uri=neuron_install_script,
        )
    except ValueError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    out.print(to_yaml(config), end="", highlight=False, markup=False)


@app.command()
def plan(
    run_file: RunFileArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole plan as one JSON document.")] = False,
    neuron_install_script: Annotated[
        str | None,
        typer.Option(help="s3:// or https:// URI of the OnNodeConfigured script that installs the Neuron SDK."),
    ] = None,
) -> None:
    """Show what the run will create, the commands it will run on the head node, and what it will cost.

    Offline: no AWS calls. The capacity reservation is not checked against an account (not offered yet).

    Costs are estimates from the on-demand list prices in trainrun/prices.py, not a bill.
    """
    from trainrun.plan import build_plan, render_text

    _, spec = _read_spec(run_file)
    try:
        result = build_plan(spec, neuron_install_script_uri=neuron_install_script)
    except ValueError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    if as_json:
        out.print_json(result.model_dump_json())
    else:
        out.print(render_text(result), end="", highlight=False, markup=False)


@app.command("parse-log")
def parse_log(
    log_file: Annotated[Path, typer.Argument(help="A job output file (slurm-<id>.out).", show_default=False)],
    as_json: Annotated[bool, typer.Option("--json", help="Print what was found as JSON.")] = False,
) -> None:
    """Run the progress parser over a local job output file and print what it found."""
    from trainrun.joblog import render_text, summarize_file

    try:
        summary = summarize_file(log_file)
    except OSError as exc:
        err.print(f"[red]{log_file}: cannot read: {exc.strerror}[/red]")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    if as_json:
        out.print_json(json.dumps(summary.to_json()))
    else:
        out.print(render_text(summary), highlight=False, markup=False)


def _kept(run_file: bytes) -> bytes:
    """The run file with teardown set to keep everything, whatever the outcome (`--keep`)."""
    import yaml

    document = yaml.safe_load(run_file)
    document["teardown"] = {**document.get("teardown", {}), "on_success": "keep", "on_failure": "keep"}
    return yaml.safe_dump(document, sort_keys=False).encode()


def _print_summary(summary: RunSummary) -> None:
    # Wait loops visit their states many times: one row per state, with its visits and total time.
    totals: dict[str, tuple[int, float]] = {}
    for visit in summary.state_visits:
        count, seconds = totals.get(visit.name, (0, 0.0))
        totals[visit.name] = (count + 1, seconds + (visit.seconds or 0.0))
    states = Table(title=f"run {summary.run_id}", title_justify="left")
    states.add_column("state")
    states.add_column("visits", justify="right")
    states.add_column("seconds", justify="right")
    for name, (count, seconds) in totals.items():
        states.add_row(name, str(count), f"{seconds:.2f}")
    out.print(states)
    colours = {"ERROR": "red", "WARNING": "yellow", "INFO": "cyan"}
    for finding in summary.findings:
        colour = colours[finding.severity]
        out.print(
            f"[{colour}]{finding.severity:<7}[/{colour}] [bold]{finding.code}[/bold]: {finding.message}",
            highlight=False,
        )
    compiled, trained = summary.progress.compile, summary.progress.train
    if compiled is not None:
        out.print(f"compile: {compiled.graphs} graphs, {compiled.succeeded} compiled, {compiled.failed} failed")
    if trained is not None:
        out.print(
            f"train: epoch {trained.epoch}, step {trained.step}, loss {trained.loss}, "
            f"learning rate {trained.learning_rate}, throughput {trained.throughput}/s, "
            f"{trained.checkpoints} checkpoints"
        )
    resources = summary.resources
    out.print(f"resources created: {len(resources.created)}; left behind: {len(resources.remaining) or 'none'}")
    for leftover in resources.remaining:
        out.print(f"  [yellow]left:[/yellow] {leftover}", highlight=False)
    colour = {"SUCCEEDED": "green", "REJECTED": "yellow"}.get(summary.status, "red")
    out.print(f"[bold {colour}]{summary.status}[/bold {colour}]")
    if summary.error:
        out.print(f"error: {summary.error['error']}: {summary.error['cause']}", highlight=False, markup=False)


def main() -> None:
    app()
