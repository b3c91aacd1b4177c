"""`trainrun plan`'s timeline: when each state of the workflow runs and when the compute nodes bill,
predicted from the AWS clock model (trainrun.logic.aws_clock: each figure with its source).

A prediction, not a measurement: `trainrun local --aws-clock` runs the workflow's real code on the
same table. Two schedules of the same durations are computed:

- the workflow's: what overlaps on AWS overlaps here (the file system starts with the network's
  subnets, the cluster once the network is up, its nodes mounting the file system when it is
  AVAILABLE; the data repository link runs beside cluster creation, the head node stages the
  workload while the compute nodes boot);
- the baseline: every state strictly in sequence, as the workflow ran before it overlapped them, so
  the difference shows what overlapping buys.

Compute nodes bill from launch until terminated (Amazon EC2 User Guide, "Instance state changes":
no charge once shutting-down). They are idle while billed and no job runs on them: from launch to
the first job's start, and from the last job's end to their termination (the end marker's log
delivery, then the teardown's deleteClusterInstances terminates them at once). How long training
itself runs is the workload's: the timeline ends at the first training step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from trainrun.logic import aws_clock
from trainrun.logic.aws_clock import Duration
from trainrun.logic.prices import PRICES, PriceTable
from trainrun.model.run_file import RunSpec
from trainrun.workflow import State

# A scratch file system has no throughput setting: 200 MB/s per TiB (Amazon FSx for Lustre User
# Guide, "Deployment options": SCRATCH_2's baseline).
SCRATCH_THROUGHPUT_PER_TIB = 200

BarKind = Literal["state", "part", "billing"]

# The Gantt chart's width in the terminal (columns of the bars, labels aside): fits 100 columns.
CHART_COLUMNS = 60
LABEL_COLUMNS = 34


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class Bar(_Model):
    """One row of the chart: a workflow state, a part of one (`part`), or the compute nodes' billing."""

    label: str
    kind: BarKind
    start_seconds: float
    end_seconds: float
    source: str  # where the duration comes from (aws_clock's sources), or what it is the sum of

    @property
    def seconds(self) -> float:
        return self.end_seconds - self.start_seconds


class Schedule(_Model):
    """One schedule of the run's states to its first training step, with the compute nodes' billing."""

    bars: list[Bar]
    first_step_seconds: float
    first_job_seconds: float  # the compile job's start, or the train job's without a compile job
    compute_launch_seconds: float | None  # None: the nodes already run (a reused cluster)
    idle_node_minutes: float
    idle_cost: float | None  # None: the instance type has no price in the table
    # The last job's end to the compute nodes terminated: its end marker reaches the control
    # plane, whose teardown has ParallelCluster terminate them in its first call.
    job_end_to_terminated_seconds: float = 0.0


class Timeline(_Model):
    """The workflow's schedule and the strictly sequential baseline, cold and with a warm compile cache."""

    nodes: int
    instance_type: str
    workflow: Schedule
    workflow_warm_cache: Schedule | None  # None: the run has no compile job
    baseline: Schedule
    assumptions: list[str]
    sources_doc: str = aws_clock.SOURCES_DOC


class _Activity:
    """A span to schedule: it starts when every activity it comes `after` has ended; or, when it
    `spans` others, it lasts from the first of them to start to the last to end."""

    def __init__(
        self, label: str, kind: BarKind, duration: Duration, after: Iterable[str] = (), spans: Iterable[str] = ()
    ) -> None:
        self.label, self.kind, self.duration = label, kind, duration
        self.after, self.spans = tuple(after), tuple(spans)


class _Activities(list[_Activity]):
    """The activities of one schedule, in the chart's order. In the baseline, each state starts
    after the state before it (its parts keep their order within it)."""

    def __init__(self, *, overlapped: bool) -> None:
        super().__init__()
        self.overlapped = overlapped

    def add(self, label: str, duration: Duration, after: Iterable[str] = (), kind: BarKind = "state") -> None:
        if not self.overlapped and kind == "state":
            after = self.last_state()
        self.append(_Activity(label, kind, duration, after))

    def last_state(self) -> list[str]:
        return (
            [next(a.label for a in reversed(self) if a.kind == "state")] if any(a.kind == "state" for a in self) else []
        )


def build_timeline(spec: RunSpec, *, dataset_bytes: int | None = None, prices: PriceTable = PRICES) -> Timeline:
    """The predicted timeline of `spec`. Pure. `dataset_bytes`: the dataset's size when known
    (`plan --check` reads it); unknown, its copy is left out and said so in `assumptions`."""
    assumptions = [
        "Durations are the AWS clock model's (trainrun/logic/aws_clock.py; sources in "
        f"{aws_clock.SOURCES_DOC}); many are estimates, marked so there.",
        "The compile durations are the BERT example's (examples/bert-large-phase1.yaml); another workload's differ.",
        "The head node reuses the PyTorch Neuron environment its stack saved; the first cluster of a pinned "
        f"Neuron version set builds it, {minutes(aws_clock.NEURON_VENV_BUILD.seconds)} more before the compute "
        "nodes launch.",
    ]
    if spec.workload.dataset is not None and dataset_bytes is None:
        assumptions.append(
            "The dataset's size is unknown (offline, or not readable with your credentials), so its copy "
            "onto the file system is not counted."
        )
    price = prices.instance(spec.capacity.instance_type)
    schedules = {
        name: _schedule(_activities(spec, dataset_bytes, overlapped=overlapped, warm_cache=warm), spec, price)
        for name, overlapped, warm in (("workflow", True, False), ("warm", True, True), ("baseline", False, False))
    }
    return Timeline(
        nodes=spec.capacity.nodes,
        instance_type=spec.capacity.instance_type,
        workflow=schedules["workflow"],
        workflow_warm_cache=schedules["warm"] if spec.workload.compile is not None else None,
        baseline=schedules["baseline"],
        assumptions=assumptions,
    )


# The workflow's states the timeline shows, by their own names (trainrun.workflow).
CREATE_NETWORK = State.CREATE_NETWORK.value
CREATE_FILE_SYSTEM = State.CREATE_FILE_SYSTEM.value
LINK_DATA_REPOSITORY = State.LINK_DATA_REPOSITORY.value
CREATE_CLUSTER = State.CREATE_CLUSTER.value
PREPARE_HEAD_NODE = State.PREPARE_HEAD_NODE.value
COMPILE = State.COMPILE.value
TRAIN = State.TRAIN.value
# The parts of cluster creation the chart shows (aws_clock.cluster_created's sum).
HEAD_NODE_BOOT = "  head node boots"
HEAD_NODE_CONFIGURED = "  head node's OnNodeConfigured"
CLUSTERMGTD_LAUNCHES = "  clustermgtd launches nodes"
COMPUTE_NODES_BOOT = "  compute nodes boot"
CREATE_COMPLETE_SEEN = "  CREATE_COMPLETE seen"
COMPUTE_NODES_BILLED = "Compute nodes billed"


def _activities(spec: RunSpec, dataset_bytes: int | None, *, overlapped: bool, warm_cache: bool) -> _Activities:
    fsx = spec.storage.fsx
    activities = _Activities(overlapped=overlapped)
    reused = spec.cluster.reuse is not None
    if not reused:
        if spec.network.existing is None:
            activities.add(CREATE_NETWORK, aws_clock.NAT_GATEWAY_AVAILABLE)
        # The compute nodes reach S3 through the NAT gateway: the cluster starts once the network is up.
        network_up = activities.last_state()
        # A file system the run creates is mounted by the nodes once it is AVAILABLE (their first
        # OnNodeConfigured step), so the cluster is created beside it; one it names is AVAILABLE already.
        mount_after = []
        if fsx.file_system_id is None:
            # It needs only the private subnet and the security group: they exist seconds into Create network.
            created = aws_clock.fsx_created(fsx.effective_deployment_type, fsx.effective_storage_capacity_gib)
            activities.add(CREATE_FILE_SYSTEM, created)
            mount_after = [CREATE_FILE_SYSTEM]
        if fsx.data_repository is not None:
            activities.add(
                LINK_DATA_REPOSITORY, aws_clock.DATA_REPOSITORY_ASSOCIATION_AVAILABLE, after=[CREATE_FILE_SYSTEM]
            )
        # In the baseline, after the state before it, as everything else.
        _add_cluster(activities, network_up if overlapped else activities.last_state(), mount_after)
    # Staging waits for the head node's own configuration: /fsx mounted, the Neuron environment in place.
    staging_after = [] if reused else [HEAD_NODE_CONFIGURED]
    if not reused and _dataset_through(spec):
        staging_after.append(LINK_DATA_REPOSITORY)
    activities.add(PREPARE_HEAD_NODE, _staging(spec, dataset_bytes, overlapped=overlapped), after=staging_after)
    jobs_after = [PREPARE_HEAD_NODE] + ([] if reused else [CREATE_CLUSTER])
    if spec.workload.compile is not None:
        compile_time = aws_clock.NEURON_COMPILE_CACHED if warm_cache else aws_clock.NEURON_COMPILE_COLD
        activities.add(COMPILE, compile_time, after=jobs_after)
        jobs_after = [COMPILE]
    # The first step's log line reaches the control plane (the timeline's end).
    activities.add(TRAIN, aws_clock.log_delivery(), after=jobs_after)
    return activities


def _add_cluster(activities: _Activities, after: list[str], mount_after: list[str]) -> None:
    """Create cluster, spanning its parts: the head node's boot, its OnNodeConfigured (which
    mounts the file system, once `mount_after` has ended; staging starts after it), the compute
    nodes' launch and boot, and the head node's poll that sees them all idle."""
    head_ready = Duration(
        aws_clock.CLUSTER_STACK_RESOURCES.seconds + aws_clock.HEAD_NODE_BOOT.seconds,
        "sum of CLUSTER_STACK_RESOURCES, HEAD_NODE_BOOT",
    )
    parts = [
        (HEAD_NODE_BOOT, head_ready, after),
        # The Neuron environment reused from the config bucket (see the timeline's assumptions).
        (HEAD_NODE_CONFIGURED, aws_clock.HEAD_NODE_CUSTOM_ACTION, [HEAD_NODE_BOOT, *mount_after]),
        (CLUSTERMGTD_LAUNCHES, aws_clock.CLUSTERMGTD_LOOP, [HEAD_NODE_CONFIGURED]),
        (COMPUTE_NODES_BOOT, aws_clock.COMPUTE_NODE_BOOT, [CLUSTERMGTD_LAUNCHES]),
        (CREATE_COMPLETE_SEEN, aws_clock.STATIC_FLEET_POLL, [COMPUTE_NODES_BOOT]),
    ]
    activities.append(
        _Activity(
            CREATE_CLUSTER,
            "state",
            Duration(0, "aws_clock.cluster_created: " + aws_clock.cluster_created(1).source),
            spans=[label for label, _, _ in parts],
        )
    )
    activities += [_Activity(label, "part", duration, part_after) for label, duration, part_after in parts]


def _dataset_through(spec: RunSpec) -> bool:
    """True when the dataset is read through the data repository link (its source under the linked prefix)."""
    dataset, link = spec.workload.dataset, spec.storage.fsx.data_repository
    return dataset is not None and link is not None and dataset.source.startswith(link.rstrip("/") + "/")


def _staging(spec: RunSpec, dataset_bytes: int | None, *, overlapped: bool) -> Duration:
    """Prepare head node: the command reaches the head node, then the workload is fetched and set up
    while the dataset is staged onto the file system (when its size is known): the longer of the
    two (in the baseline, one after the other)."""
    fsx = spec.storage.fsx
    side_by_side = [aws_clock.WORKLOAD_SETUP]
    if spec.workload.dataset is not None and dataset_bytes:
        throughput = fsx.effective_throughput_per_tib or SCRATCH_THROUGHPUT_PER_TIB
        side_by_side.append(aws_clock.dataset_staged(dataset_bytes, fsx.effective_storage_capacity_gib, throughput))
    parts = [aws_clock.SSM_COMMAND_DELIVERY, *side_by_side]
    staged = [part.seconds for part in side_by_side]
    seconds = aws_clock.SSM_COMMAND_DELIVERY.seconds + (max(staged) if overlapped else sum(staged))
    return Duration(seconds, "; ".join(part.source for part in parts))


def _times(activities: Sequence[_Activity]) -> tuple[dict[str, float], dict[str, float]]:
    """Each activity's start and end, in seconds from the run's start (the graph is small: time an
    activity once everything it waits for is timed)."""
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}
    waiting = list(activities)
    while waiting:
        ready = [a for a in waiting if all(label in ends for label in (a.spans or a.after))]
        if not ready:
            raise ValueError(f"the timeline's activities wait on each other: {[a.label for a in waiting]}")
        for activity in ready:
            if activity.spans:
                starts[activity.label] = min(starts[label] for label in activity.spans)
                ends[activity.label] = max(ends[label] for label in activity.spans)
            else:
                starts[activity.label] = max((ends[label] for label in activity.after), default=0.0)
                ends[activity.label] = starts[activity.label] + activity.duration.seconds
            waiting.remove(activity)
    return starts, ends


def _schedule(activities: Sequence[_Activity], spec: RunSpec, price_per_hour: float | None) -> Schedule:
    starts, ends = _times(activities)
    bars = [
        Bar(
            label=a.label,
            kind=a.kind,
            start_seconds=starts[a.label],
            end_seconds=ends[a.label],
            source=a.duration.source,
        )
        for a in activities
    ]
    first_step = ends[TRAIN]
    first_job = starts[COMPILE] if COMPILE in starts else starts[TRAIN]
    launch = starts.get(COMPUTE_NODES_BOOT)
    # After the last job: the end marker reaches the control plane, whose teardown has
    # ParallelCluster terminate the nodes (deleteClusterInstances) within its first call.
    tail = aws_clock.log_delivery().seconds
    idle_seconds = (first_job - launch if launch is not None else 0.0) + tail
    if launch is not None:
        bars.append(
            Bar(
                label=COMPUTE_NODES_BILLED,
                kind="billing",
                start_seconds=launch,
                end_seconds=first_step,
                source="Amazon EC2 User Guide, 'Instance state changes' (billed from launch until shutting-down)",
            )
        )
    idle_node_minutes = idle_seconds / 60 * spec.capacity.nodes
    return Schedule(
        bars=bars,
        first_step_seconds=first_step,
        first_job_seconds=first_job,
        compute_launch_seconds=launch,
        idle_node_minutes=idle_node_minutes,
        idle_cost=None if price_per_hour is None else idle_node_minutes / 60 * price_per_hour,
        job_end_to_terminated_seconds=tail,
    )


# --- pictures ------------------------------------------------------------------------------------


def minutes(seconds: float) -> str:
    """'4 min', '1 h 13 min': a prediction has no seconds worth showing."""
    whole = round(seconds / 60)
    return f"{whole // 60} h {whole % 60} min" if whole >= 60 else f"{whole} min"


def render_text(timeline: Timeline) -> list[str]:
    """The timeline for a person: the figures, the workflow's Gantt chart, the baseline beside it."""
    work, base = timeline.workflow, timeline.baseline
    out = [
        f"Timeline (a model: the AWS clock, {timeline.sources_doc}; to the first training step)",
        f"  time to first training step: {minutes(work.first_step_seconds)} "
        f"(all in sequence: {minutes(base.first_step_seconds)})",
    ]
    if timeline.workflow_warm_cache is not None:
        out.append(f"  with a warm compile cache:   {minutes(timeline.workflow_warm_cache.first_step_seconds)}")
    out.append(
        f"  idle node-minutes:           {work.idle_node_minutes:,.0f} ({_money(work.idle_cost)}; "
        f"all in sequence: {base.idle_node_minutes:,.0f}, {_money(base.idle_cost)})"
    )
    out.append(f"  last job's end to compute nodes terminated: {work.job_end_to_terminated_seconds:.0f} s")
    out += ["", *gantt_lines(work), ""]
    out += [f"  - {assumption}" for assumption in timeline.assumptions]
    return out


def gantt_lines(schedule: Schedule, columns: int = CHART_COLUMNS) -> list[str]:
    """One line a bar: '█' a state or part, '░' compute nodes billed and idle, '▓' billed and working."""
    total = max(bar.end_seconds for bar in schedule.bars) or 1.0
    scale = columns / total

    def column(seconds: float) -> int:
        return min(columns, round(seconds * scale))

    lines = []
    for bar in schedule.bars:
        # Every bar shows at least one cell, the last one included.
        start = min(column(bar.start_seconds), columns - 1)
        end = max(column(bar.end_seconds), start + 1)
        if bar.kind == "billing":
            working = column(schedule.first_job_seconds)
            cells = " " * start + "░" * (working - start) + "▓" * (end - working)
        else:
            cells = " " * start + "█" * (end - start)
        lines.append(f"  {bar.label:<{LABEL_COLUMNS}}{cells:<{columns}} {minutes(bar.seconds):>9}")
    ticks = [f"{minutes(total * i / 4):<{columns // 4}}" for i in range(4)]
    lines.append(f"  {'':<{LABEL_COLUMNS}}{''.join(ticks)}{minutes(total)}")
    lines.append(f"  {'':<{LABEL_COLUMNS}}░ compute nodes billed, idle   ▓ billed, working")
    return lines


def _money(value: float | None) -> str:
    return "no price for the instance type" if value is None else f"${value:,.0f}"


FIGURE_SIZE_INCHES = (11.0, 5.5)
DPI = 100
STATE_COLOUR = "#1f77b4"
PART_COLOUR = "#aec7e8"
IDLE_COLOUR = "#d62728"
WORKING_COLOUR = "#2ca02c"


def draw_png(timeline: Timeline, path: Path) -> None:
    """The workflow's Gantt chart (and the baseline's first step) as a PNG, written whole or not at all.

    matplotlib is the CLI's dependency, not the Lambda layer's, and slow to import: imported here.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from trainrun.ops.plot import save_png

    schedule = timeline.workflow
    figure = Figure(figsize=FIGURE_SIZE_INCHES, dpi=DPI)
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    rows = list(reversed(schedule.bars))
    first_job = schedule.first_job_seconds
    for row, bar in enumerate(rows):
        start, length = bar.start_seconds / 60, max(bar.seconds / 60, 0.2)
        if bar.kind == "billing":
            axes.broken_barh([(start, first_job / 60 - start)], (row - 0.4, 0.8), color=IDLE_COLOUR)
            axes.broken_barh(
                [(first_job / 60, bar.end_seconds / 60 - first_job / 60)], (row - 0.4, 0.8), color=WORKING_COLOUR
            )
        else:
            colour = PART_COLOUR if bar.kind == "part" else STATE_COLOUR
            axes.broken_barh([(start, length)], (row - 0.4, 0.8), color=colour)
    axes.axvline(timeline.baseline.first_step_seconds / 60, color="grey", linestyle="--", linewidth=1)
    axes.set_yticks(range(len(rows)), [bar.label.strip() for bar in rows])
    axes.set_xlabel("minutes from the run's start (AWS clock model)")
    axes.set_title(
        f"{timeline.nodes} x {timeline.instance_type}: first training step at {minutes(schedule.first_step_seconds)} "
        f"(dashed line: {minutes(timeline.baseline.first_step_seconds)} all in sequence)\n"
        f"compute nodes idle {schedule.idle_node_minutes:,.0f} node-minutes (red), working (green)"
    )
    axes.grid(True, axis="x", alpha=0.3)
    figure.tight_layout()
    save_png(figure, path)
