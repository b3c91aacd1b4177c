"""Commands that need no AWS account: validate, plan, cluster-config, parse-log, examples."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from trainrun.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_REJECTED,
    STDIN,
    EndpointOption,
    RegionOption,
    RunFileArg,
    StackOption,
    app,
    connect,
    err,
    fail,
    out,
    print_findings,
    read_spec,
)
from trainrun.cli.source import as_packed, listed_source, say_what_is_packed
from trainrun.logic.cluster_config import PREVIEW_CONFIG_BUCKET

NeuronScriptOption = Annotated[
    str | None,
    typer.Option(
        help="s3:// or https:// URI of an OnNodeConfigured script that installs the Neuron SDK "
        "(the stack's NeuronInstallScriptUri). Default: trainrun's own, in the config bucket."
    ),
]
ConfigBucketOption = Annotated[
    str,
    typer.Option(help="The stack's config bucket (its ConfigBucketName output), where trainrun's Neuron script lives."),
]

if TYPE_CHECKING:
    from trainrun.model.run_file import RunSpec
    from trainrun.ops.plan import CapacityCheck, InputsCheck
    from trainrun.ops.stack import Stack
    from trainrun.ops.timeline import Timeline


@app.command()
def validate(run_file: RunFileArg) -> None:
    """Check a run file offline; print each problem with its field path (exit 2), or a summary (exit 0).

    Warnings (settings a run may make but that usually break a Neuron job) are printed, exit 0.
    """
    from trainrun.model.run_file import environment_findings

    _, spec = read_spec(run_file)
    listing = listed_source(spec, run_file)
    print_findings(environment_findings(spec))
    if listing is not None:
        say_what_is_packed(spec, listing)
    target = spec.capacity.reservation_id or spec.capacity.reservation_group_arn
    shown = "<stdin>" if run_file == STDIN else run_file
    cluster = f"EKS {spec.cluster.eks_settings.kubernetes_version}" if spec.cluster.kind == "eks" else spec.cluster.os
    out.print(
        f"[green]{shown} is valid:[/green] {spec.name}: {spec.capacity.nodes} x {spec.capacity.instance_type} "
        f"on {target}, {cluster}, max runtime {spec.workload.max_runtime}",
        highlight=False,
    )


@app.command("cluster-config")
def cluster_config(
    run_file: RunFileArg,
    neuron_install_script: NeuronScriptOption = None,
    config_bucket: ConfigBucketOption = PREVIEW_CONFIG_BUCKET,
) -> None:
    """Print the ParallelCluster configuration the run will create, with placeholder ids for what does not exist yet.

    For a `cluster.kind: eks` run: the EKS CreateCluster, EC2 CreateLaunchTemplate and EKS
    CreateNodegroup requests, as YAML, for a reservation that is not a Capacity Block.
    """
    from trainrun.logic.cluster_config import ClusterIds, cluster_name, render_cluster_config, to_yaml
    from trainrun.logic.eks_node_group import EksIds, render_eks_requests
    from trainrun.model.tags import run_tags

    _, written = read_spec(run_file)
    spec = _as_submitted(run_file, written, config_bucket)
    run_id = f"{spec.name}-preview"
    tags = run_tags(run_id, "trainrun")
    try:
        if spec.cluster.kind == "eks":
            requests = render_eks_requests(spec, EksIds.placeholders(), cluster_name=cluster_name(run_id), tags=tags)
            config = {**requests}
        else:
            config = render_cluster_config(
                spec,
                ClusterIds.placeholders(spec),
                tags=tags,
                neuron_install_script_uri=neuron_install_script,
                config_bucket=config_bucket,
                run_id=run_id,
            )
    except ValueError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    out.print(to_yaml(config), end="", highlight=False, markup=False)


@app.command()
def plan(
    run_file: RunFileArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole plan as one JSON document.")] = False,
    neuron_install_script: NeuronScriptOption = None,
    config_bucket: ConfigBucketOption = PREVIEW_CONFIG_BUCKET,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Also check the run against the account and the deployed stack: the capacity validation (as "
            "the run's Validate capacity will), the buckets and topic the run file names and the S3 objects the "
            "head node will read (as Load run spec will), and a git source's ref (git ls-remote). Exit code 3 "
            "when any would reject the run.",
        ),
    ] = False,
    png: Annotated[
        Path | None,
        typer.Option(
            "--png",
            help="Also draw the timeline (a Gantt chart of the states and the compute nodes' billing) "
            "into this PNG file.",
        ),
    ] = None,
    stack: StackOption = None,
    endpoint_url: EndpointOption = None,
    region: RegionOption = None,
) -> None:
    """Show what the run will create, the commands it will run on the head node, what it will cost,
    and its timeline: when each state runs and what the compute nodes bill idle (the AWS clock model).

    Offline unless --check: no AWS calls. Costs are estimates from the on-demand list prices in
    trainrun/logic/prices.py, not a bill.
    """
    from trainrun.ops.plan import build_plan, check_stack, render_text
    from trainrun.ops.timeline import build_timeline

    _, written = read_spec(run_file)
    target = connect(stack, endpoint_url, region or written.region) if check else None
    if target is not None and config_bucket == PREVIEW_CONFIG_BUCKET:
        # The buckets are checked as the run will name them: a packed workload's in the stack's config bucket.
        config_bucket = target.outputs["ConfigBucketName"]
    spec = _as_submitted(run_file, written, config_bucket)
    try:
        result = build_plan(spec, neuron_install_script_uri=neuron_install_script, config_bucket=config_bucket)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if png is not None and result.timeline is None:
        raise fail("--png: the EKS timeline is not modelled yet (cluster.kind: eks); leave --png out")
    if target is not None:
        checked = check_stack(spec, target.name, config_bucket=config_bucket, parameters=target.parameters)
        capacity = _check_capacity(spec, target)
        inputs = _check_inputs(spec, target, config_bucket)
        # With the dataset's size, the timeline's staging time is the real one (none on EKS yet).
        timeline = (
            build_timeline(spec, dataset_bytes=_dataset_size(spec, target)) if result.timeline is not None else None
        )
        result = result.model_copy(
            update={"capacity_check": capacity, "stack_check": checked, "inputs_check": inputs, "timeline": timeline}
        )
    if as_json:
        out.print_json(result.model_dump_json())
    else:
        out.print(render_text(result), end="", highlight=False, markup=False)
    if png is not None and result.timeline is not None:
        _draw_timeline(result.timeline, png)
    if result.rejected:
        raise typer.Exit(EXIT_REJECTED)


def _dataset_size(spec: RunSpec, target: Stack) -> int | None:
    """The dataset's size in bytes for the timeline's staging time; None when it cannot be listed
    (the inputs check says why)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from trainrun.adapters.s3_inputs import size_of
    from trainrun.logic.run_inputs import dataset_input

    dataset = dataset_input(spec)
    if dataset is None:
        return None
    try:
        return size_of(target.client("s3"), dataset)
    except (BotoCoreError, ClientError):
        return None


def _draw_timeline(timeline: Timeline, path: Path) -> None:
    from trainrun.ops.timeline import draw_png

    try:
        draw_png(timeline, path)
    except OSError as exc:
        raise fail(f"--png: cannot write {path}: {exc.strerror or exc}; name a file in a writable directory") from None
    err.print(f"Timeline drawn: {path}", highlight=False)


def _as_submitted(run_file: Path, spec: RunSpec, config_bucket: str) -> RunSpec:
    """The run file's spec as `trainrun submit` sends it: a local directory as the workload named
    by the S3 URI its archive will have (saying what will be packed)."""
    listing = listed_source(spec, run_file)
    if listing is None:
        return spec
    say_what_is_packed(spec, listing)
    return as_packed(spec, listing, config_bucket)


def _check_capacity(spec: RunSpec, target: Stack) -> CapacityCheck:
    from botocore.exceptions import BotoCoreError, ClientError

    from trainrun.ops.plan import check_capacity, check_reuse

    try:
        if spec.cluster.reuse is not None:
            return check_reuse(spec, target.store().scan(), region=target.region, now=datetime.now(UTC))
        return check_capacity(
            spec,
            target.client("ec2"),
            target.client("resource-groups"),
            region=target.region,
            now=datetime.now(UTC),
        )
    except (BotoCoreError, ClientError) as exc:
        raise fail(f"plan --check: cannot look the capacity up in {target.region}: {exc}") from None


def _check_inputs(spec: RunSpec, target: Stack, config_bucket: str) -> InputsCheck:
    from botocore.exceptions import BotoCoreError, ClientError

    from trainrun.errors import TransientAwsError
    from trainrun.ops.plan import check_inputs

    try:
        return check_inputs(spec, target.client("s3"), config_bucket=config_bucket, parameters=target.parameters)
    except (BotoCoreError, ClientError, TransientAwsError) as exc:
        raise fail(f"plan --check: cannot look up what the run will read: {exc}") from None


@app.command("parse-log")
def parse_log(
    log_file: Annotated[Path, typer.Argument(help="A job output file (slurm-<id>.out).", show_default=False)],
    as_json: Annotated[bool, typer.Option("--json", help="Print what was found as JSON.")] = False,
    pattern: Annotated[
        str | None,
        typer.Option(
            "--pattern", help="A run's workload.progress_pattern: the progress line of a format trainrun does not read."
        ),
    ] = None,
) -> None:
    """Run the progress parser over a local job output file and print what it found. Exit code: 0,
    1 the job failed (a failure in its output, or a non-zero exit code in its end marker), 2."""
    from trainrun.logic.job_log import compile_progress_pattern, render_text, summarize_file

    try:
        compiled = compile_progress_pattern(pattern) if pattern is not None else None
    except ValueError as exc:
        err.print(f"--pattern: {pattern!r} {exc}", markup=False, highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    try:
        summary = summarize_file(log_file, compiled)
    except OSError as exc:
        err.print(f"[red]{log_file}: cannot read: {exc.strerror}[/red]")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    if as_json:
        out.print_json(json.dumps(summary.to_json()))
    else:
        out.print(render_text(summary), highlight=False, markup=False)
    if summary.failed:
        raise typer.Exit(EXIT_FAILED)


@app.command()
def examples() -> None:
    """Print the directory of the example run files and account fixture (examples/ of a checkout,
    or the installed package's copy), e.g. `trainrun validate "$(trainrun examples)/single-node.yaml"`."""
    from trainrun.project_files import examples as examples_directory

    out.print(str(examples_directory()), highlight=False, markup=False, soft_wrap=True)
