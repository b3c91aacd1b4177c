"""What every trainrun command shares: the app, the consoles, exit codes and reading input.

Exit codes are a contract: 0 success, 1 the run failed, 2 bad input (run file, fixture,
arguments, a run or stack that does not exist), 3 the run was rejected before anything was
created, 4 `trainrun local` cannot play the head node on this machine, 5 the run was cancelled
(`trainrun cancel`), 124 `watch --timeout` gave up before the run ended (as timeout(1)).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from trainrun.errors import WHOLE_FILE, Problem, RunSpecInvalid
from trainrun.model.findings import Finding
from trainrun.model.run_file import MAX_RUN_FILE_BYTES, RunSpec, parse_run_file
from trainrun.ops.views import RunProgress, attempt_summary

if TYPE_CHECKING:
    from trainrun.ops.stack import Stack

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_REJECTED = 3
# `trainrun local` on a machine that cannot play the head node (no Slurm/MUNGE, not root).
EXIT_CANNOT_RUN_HERE = 4
EXIT_CANCELLED = 5
# `watch --timeout` (and `submit --watch`): the run had not ended in time; its outcome is unknown yet.
EXIT_TIMED_OUT = 124

app = typer.Typer(
    help="Run distributed training on AWS Trainium from one YAML run file.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    add_completion=False,
    pretty_exceptions_enable=False,
    # Docstrings wrap at the source's line length; markdown joins a paragraph's lines again.
    rich_markup_mode="markdown",
)
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

RunFileArg = Annotated[Path, typer.Argument(help="The run file (YAML); - reads it from stdin.", show_default=False)]
# The run file argument that means standard input, as for most Unix tools.
STDIN = Path("-")
JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
EndpointOption = Annotated[
    str | None,
    typer.Option(
        "--endpoint-url",
        help="Reach AWS here instead (default: $AWS_ENDPOINT_URL), e.g. the local stack of `trainrun serve`.",
        show_default=False,
    ),
]
RegionOption = Annotated[
    str | None,
    typer.Option(
        "--region",
        help="The stack's region (default: $AWS_REGION, $AWS_DEFAULT_REGION, ./samconfig.toml's, the AWS config's).",
        show_default=False,
    ),
]
StackOption = Annotated[
    str | None,
    typer.Option(
        "--stack",
        help="The deployed stack (default: $TRAINRUN_STACK, else stack_name in ./samconfig.toml, else trainrun).",
        show_default=False,
    ),
]


def exit_code_of(status: str) -> int:
    """A run's outcome as an exit code: 0 SUCCEEDED, 3 REJECTED, 5 CANCELLED, 1 anything else."""
    return {"SUCCEEDED": 0, "REJECTED": EXIT_REJECTED, "CANCELLED": EXIT_CANCELLED}.get(status, EXIT_FAILED)


def coloured(status: str) -> str:
    """A run status in rich markup, coloured as `trainrun watch` shows it."""
    from trainrun.ops.watch import STATUS_COLOURS

    colour = STATUS_COLOURS.get(status, "red")
    return f"[{colour}]{status}[/{colour}]"


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print `message` on stderr and return the Exit to raise (`raise fail(...)`)."""
    err.print(f"[red]{message}[/red]", highlight=False)
    return typer.Exit(code)


def connect(stack: str | None, endpoint_url: str | None, region: str | None) -> Stack:
    """The deployed stack the run commands (and `plan --check`) work against; exit 2 when there is none."""
    from trainrun.ops.stack import StackNotFound, connect, default_stack_name

    try:
        return connect(default_stack_name(stack), endpoint_url=endpoint_url, region=region)
    except StackNotFound as exc:
        raise fail(str(exc)) from None


def read_spec(path: Path) -> tuple[bytes, RunSpec]:
    """Read and validate a run file, or print every problem and exit 2."""
    try:
        if path == STDIN:
            # A pipe has no size: never more than the limit + 1 bytes read, which is too many.
            data = sys.stdin.buffer.read(MAX_RUN_FILE_BYTES + 1)
            size = len(data)
            path = Path("<stdin>")
        else:
            # The size first, and never more than the limit + 1 bytes read (a FIFO or a device has no size).
            with path.open("rb") as stream:
                size = os.fstat(stream.fileno()).st_size
                data = stream.read(MAX_RUN_FILE_BYTES + 1) if size <= MAX_RUN_FILE_BYTES else b""
    except OSError as exc:
        raise fail(f"{path}: cannot read: {exc.strerror}") from None
    if size > MAX_RUN_FILE_BYTES:
        print_problems(
            path, data, [Problem(WHOLE_FILE, f"is {size} bytes; a run file is at most {MAX_RUN_FILE_BYTES}")]
        )
        raise typer.Exit(EXIT_BAD_INPUT)
    problems: list[Problem] = []
    try:
        spec = parse_run_file(data)
    except RunSpecInvalid as exc:
        problems = list(exc.problems)
    missing = _missing_source(data, path)
    if missing is not None:
        problems = sorted([*problems, missing], key=lambda problem: (problem.line is None, problem.line or 0))
    if problems:
        print_problems(path, data, problems)
        raise typer.Exit(EXIT_BAD_INPUT)
    return data, spec


def _missing_source(data: bytes, run_file: Path) -> Problem | None:
    """`workload.source.path` naming no directory, found in the YAML itself, so that it is reported
    with the run file's other problems, at its line, whether or not the rest is valid."""
    import yaml

    from trainrun.ops.source_archive import missing_directory, source_path

    try:
        node = yaml.compose(data, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, RecursionError):
        return None  # the file's own problem is the one reported
    for key in ("workload", "source", "path"):
        pairs = node.value if isinstance(node, yaml.MappingNode) else []
        node = next((value for name, value in pairs if isinstance(name, yaml.ScalarNode) and name.value == key), None)
    if not isinstance(node, yaml.ScalarNode) or not node.value:
        return None
    missing = missing_directory(source_path(node.value, run_file))
    if missing is None:
        return None
    return Problem("workload.source.path", missing, line=node.start_mark.line + 1)


def print_problems(path: Path, data: bytes, problems: list[Problem]) -> None:
    """Every problem of a run file as `file:line: field: what is wrong and the fix`, as compilers
    print theirs; a syntax error or a tab also shows its line of the file, marked at its column."""
    count = f"{len(problems)} problems" if len(problems) != 1 else "1 problem"
    err.print(f"[red]{path} is not a valid run file ({count}):[/red]", highlight=False)
    lines = data.decode("utf-8", "replace").splitlines()
    for problem in problems:
        where = f"{path}:{problem.line}" if problem.line is not None else str(path)
        if problem.path != WHOLE_FILE:
            err.print(f"{where}: {problem.path}: {problem.message}", markup=False, highlight=False)
            continue
        if problem.column is not None:
            where += f":{problem.column}"
        err.print(f"{where}: {problem.message}", markup=False, highlight=False)
        if problem.line is not None and problem.line <= len(lines):
            line = lines[problem.line - 1]
            err.print(f"    {line}", markup=False, highlight=False)
            if problem.column is not None:
                # Tabs kept, so that the mark lines up under the tab-indented line too.
                pad = "".join(c if c == "\t" else " " for c in line[: problem.column - 1])
                err.print(f"    {pad}^", markup=False, highlight=False)


def print_findings(findings: list[Finding]) -> None:
    colours = {"ERROR": "red", "WARNING": "yellow", "INFO": "cyan"}
    for finding in findings:
        colour = colours[finding.severity]
        out.print(
            f"[{colour}]{finding.severity:<7}[/{colour}] [bold]{finding.code}[/bold]: {finding.message}",
            highlight=False,
        )


def print_progress(progress: RunProgress, *, total_steps: int | None = None) -> None:
    """What the jobs' logs said: compile totals, then where training is."""
    compiled, trained = progress.compile, progress.train
    if compiled is not None:
        # Graphs found in the Neuron compile cache were not compiled again.
        cached = f", {compiled.cache_hits} from the compile cache" if compiled.cache_hits else ""
        out.print(
            f"compile: {compiled.graphs} graphs, {compiled.compiled} compiled{cached}, {compiled.failed} failed",
            highlight=False,
        )
    if trained is not None:
        total = f"/{total_steps}" if total_steps else ""
        out.print(
            f"train: epoch {trained.epoch}, step {trained.step}{total}, loss {trained.loss}, "
            f"learning rate {trained.learning_rate}, throughput {trained.throughput}/s, "
            f"{trained.checkpoints} checkpoints",
            highlight=False,
        )
        attempts = attempt_summary(trained)
        if attempts is not None:
            out.print(f"attempt: {attempts}", highlight=False, markup=False)
    elif progress.train_notice is not None:
        out.print(f"train: {progress.train_notice}", highlight=False, markup=False)


def print_table(table: Table) -> None:
    """A table on stdout: at the terminal's width; piped (to grep, awk, a file), every column whole,
    however wide, where rich would cut it to 80 columns."""
    if out.is_terminal:
        out.print(table)
        return
    width = Measurement.get(out, out.options.update(width=10_000), table).maximum
    Console(file=out.file, width=width, soft_wrap=True).print(table)
