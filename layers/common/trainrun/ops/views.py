"""What an operator sees of a run: one model built from the run record and the execution history.

`trainrun status`, `runs`, `watch` and `plot` (and `trainrun local`'s summary) all read runs
through these models, so every view agrees on what a state visit, a run's progress and its
resources are.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, computed_field

from trainrun.model.checkpoints import CheckpointExport
from trainrun.model.findings import Finding
from trainrun.model.jobs import JOB_KINDS, JobKind, JobProgress, JobRecord, TrainPoint
from trainrun.model.run_record import RunError, RunRecord, RunStatus


class StateVisit(BaseModel):
    """One visit of a workflow state; `seconds` is None while the state is still running."""

    name: str
    entered_at: datetime | None = None
    seconds: float | None = None


class StateTotal(BaseModel):
    """A state's visits together: a wait loop's dozens (or, on AWS, hundreds) of rounds in one."""

    name: str
    first_entered_at: datetime | None
    visits: int
    seconds: float  # the visits that ended
    running: bool  # one visit has not ended


class Resources(BaseModel):
    # What the run record says the run created (reused resources are not listed), as "<kind> <id>".
    created: list[str]
    # Everything still tagged with the run in the account when the view was taken, as "<kind> <id>".
    remaining: list[str]


class ResourceRow(BaseModel):
    """One resource of the run: created by it (and recorded), or only found carrying its tag."""

    kind: str
    id: str
    recorded: bool  # False: tagged with the run, but the record does not say it created it
    left: bool  # still there


# The cluster's head and compute nodes carry the run's tag: they are the cluster's, not resources of their own.
CLUSTER_INSTANCE = "instance"
# An EKS run's cluster, as the inventory names it (trainrun.adapters.inventory): its node group's
# instances carry the run's tag too (the launch template's), and are the cluster's as well.
EKS_CLUSTER = "eks-cluster"


def resource_rows(resources: Resources, *, torn_down: bool) -> list[ResourceRow]:
    """The run's resources, each once: what it created, whether each is still there (matched by
    id, as the record and the tags name a kind differently), then whatever else carries its tag.

    The cluster is ParallelCluster's stack, not a tagged resource: it is there until the run is
    torn down, and after that while any of its instances is."""
    remaining = [_kind_and_id(item) for item in resources.remaining]
    left_ids = {resource_id for _, resource_id in remaining}
    instances_left = any(kind == CLUSTER_INSTANCE for kind, _ in remaining)
    has_cluster = any(item.startswith(("cluster ", f"{EKS_CLUSTER} ")) for item in resources.created)
    rows = []
    for item in resources.created:
        kind, resource_id = _kind_and_id(item)
        left = (instances_left or not torn_down) if kind == "cluster" else resource_id in left_ids
        rows.append(ResourceRow(kind=kind, id=resource_id, recorded=True, left=left))
    recorded_ids = {row.id for row in rows}
    for kind, resource_id in remaining:
        if resource_id not in recorded_ids and not (has_cluster and kind == CLUSTER_INSTANCE):
            rows.append(ResourceRow(kind=kind, id=resource_id, recorded=False, left=True))
    return rows


class CompileProgress(BaseModel):
    graphs: int | None
    succeeded: int | None
    failed: int | None
    # Distinct graphs the compile job found in the Neuron compile cache (so did not compile), and
    # found there as failed compilations (trainrun.logic.job_log).
    cache_hits: int = 0
    cached_failures: int = 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def compiled(self) -> int | None:
        """Graphs the compile job compiled: its successful compilations less the graphs found in the
        cache, taking the summary to count those among its successful ones, as the stand-in
        compiler does (clamped at 0 for a summary that does not). None: no summary yet."""
        return None if self.succeeded is None else max(self.succeeded - self.cache_hits, 0)


class AttemptView(BaseModel):
    """One submission of the train job: the first, then one per resubmission after an
    infrastructure failure (workload.retries). `ended_at` None: the current one, still running."""

    number: int
    slurm_job_id: int | None = None  # ParallelCluster's; None on EKS
    kubernetes_job: str | None = None  # an EKS run's: the attempt's Job (`train-<number>`, namespace trainrun)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    state: str | None = None  # Slurm's, when it ended
    why: str | None = None  # why it ended, when it failed
    # The first and last steps its own log lines showed: a resubmission that resumed from a
    # checkpoint starts after the checkpoint's step, not at 1.
    first_step: int | None = None
    last_step: int | None = None


class TrainProgress(BaseModel):
    epoch: int | None
    # The highest step any attempt reached: it never goes back when a resubmission resumes from
    # a checkpoint a few steps before it (each attempt's own steps are in attempt_history).
    step: int | None
    loss: float | None
    learning_rate: float | None
    throughput: float | None
    checkpoints: int
    # How many times the train job was submitted (1 unless resubmitted), and each submission.
    attempts: int = 1
    attempt_history: list[AttemptView] = Field(default_factory=list)


class RunProgress(BaseModel):
    """What the jobs' logs said, as the progress function recorded it (null: no such job output)."""

    compile: CompileProgress | None = None
    train: TrainProgress | None = None
    # The train job printed many lines and none carried progress: which formats trainrun reads.
    train_notice: str | None = None

    @classmethod
    def of(
        cls,
        compile_progress: JobProgress | None,
        train_progress: JobProgress | None,
        train_job: JobRecord | None = None,
        *,
        eks: bool = False,
    ) -> RunProgress:
        compiled = None
        if compile_progress is not None and compile_progress.compile_graphs is not None:
            compiled = CompileProgress(
                graphs=compile_progress.compile_graphs,
                succeeded=compile_progress.compile_succeeded,
                failed=compile_progress.compile_failed,
                cache_hits=len(compile_progress.cache_hit_neffs),
                cached_failures=len(compile_progress.cached_failed_neffs),
            )
        trained = None
        if train_progress is not None and train_progress.step is not None:
            trained = TrainProgress(
                epoch=train_progress.epoch,
                step=train_progress.step,
                loss=train_progress.loss,
                learning_rate=train_progress.learning_rate,
                throughput=train_progress.throughput,
                checkpoints=train_progress.checkpoints,
            )
            history = attempt_history(train_job, train_progress, eks=eks)
            trained.attempts, trained.attempt_history = max(1, len(history)), history
        notice = train_progress.no_progress_notice if train_progress is not None and trained is None else None
        return cls(compile=compiled, train=trained, train_notice=notice)


def attempt_history(job: JobRecord | None, progress: JobProgress | None, *, eks: bool = False) -> list[AttemptView]:
    """Every submission of the job, oldest first: the ended ones the record closed, then the
    current one once it was submitted, each with the steps its own lines showed. On EKS (`eks`)
    each is its Kubernetes Job, in place of a Slurm job id (the record keeps the attempt's number there)."""
    from trainrun.logic.kubernetes_objects import job_name

    steps = {item.number: item for item in progress.attempts} if progress is not None else {}
    views = []
    if job is not None:
        for ended in job.attempts:
            views.append(
                AttemptView(
                    number=ended.number,
                    slurm_job_id=ended.slurm_job_id,
                    started_at=ended.submitted_at,
                    ended_at=ended.ended_at,
                    state=ended.state,
                    why=ended.why,
                )
            )
        if all(view.number != job.attempt for view in views) and job.submitted_at is not None:
            views.append(
                AttemptView(
                    number=job.attempt,
                    slurm_job_id=job.slurm_job_id,
                    started_at=job.submitted_at,
                    ended_at=job.ended_at,
                    state=job.slurm_state,
                )
            )
    for view in views:
        if eks:
            view.kubernetes_job, view.slurm_job_id = job_name("train", view.number), None
        logged = steps.get(view.number)
        if logged is not None:
            view.first_step, view.last_step = logged.first_step, logged.last_step
            view.state = view.state or logged.end_state
    return views


def attempt_summary(trained: TrainProgress) -> str | None:
    """Which submission of the train job this is, where it resumed, and why the ones before ended;
    None for a job submitted once that has not failed (nothing to say)."""
    history = trained.attempt_history
    if not history or (len(history) == 1 and history[0].why is None):
        return None
    current = history[-1]
    lines, ended = [], history
    if current.why is None:  # still running (or succeeded): the ones before it ended
        resumed = f", resumed at step {current.first_step:,}" if current.first_step is not None else ""
        job = f" (Kubernetes Job {current.kubernetes_job})" if current.kubernetes_job else ""
        lines.append(f"{current.number} of the train job{job}{resumed}")
        ended = history[:-1]
    for attempt in ended:
        details = [f"Kubernetes Job {attempt.kubernetes_job}"] if attempt.kubernetes_job else []
        if attempt.first_step is not None and attempt.last_step is not None:
            details.append(f"steps {attempt.first_step:,}-{attempt.last_step:,}")
        about = f" ({', '.join(details)})" if details else ""
        lines.append(f"attempt {attempt.number}{about} ended: {attempt.why}")
    return "\n".join(lines)


class Cost(BaseModel):
    """An estimate from the plan's price table (trainrun.logic.prices), not a bill.

    Each billable resource (trainrun.model.run_record.Billed) counts from when it was created
    to the run's teardown, or to now while anything of the run is left.
    """

    per_hour: float  # with everything up: the plan's rate
    so_far: float
    # Since the first billable resource was created (0: nothing billable has existed).
    hours: float
    # When the first billable resource was created; None: nothing billable has existed.
    billable_since: datetime | None = None
    partial: bool  # some item has no price in the table: the figures leave it out
    prices_as_of: str
    budget_usd: float | None = None  # budget.max_cost_usd, when the run has one (the budget guard)

    def budget_words(self) -> str | None:
        """`budget $5,000.00, 12% spent`: the budget guard's standing (it stops the run at 100%)."""
        if self.budget_usd is None:
            return None
        return f"budget ${self.budget_usd:,.2f}, {self.so_far / self.budget_usd:.0%} spent"


class ErrorView(BaseModel):
    """An error the run ended with: what a person reads (`message`), and the raw cause beside it."""

    error: str
    # As Step Functions gave it: a Lambda error's cause is its JSON payload, stack trace included.
    cause: str

    @computed_field  # type: ignore[prop-decorator]
    @property
    def message(self) -> str:
        """`<error>: <the message in the cause>`: what every text view shows."""
        return RunError(error=self.error, cause=self.cause).message

    @classmethod
    def of(cls, error: RunError | None) -> ErrorView | None:
        return None if error is None else cls(error=error.error, cause=error.cause)


class JobView(BaseModel):
    """One job of the run as it runs: the current attempt's Slurm job (ParallelCluster) or
    Kubernetes Job (EKS: `compile`, `train-<attempt>` in namespace trainrun); neither before it is
    submitted."""

    job: JobKind
    attempt: int
    state: str | None = None  # SUBMITTED, SUCCEEDED, FAILED
    submitted_at: datetime | None = None
    ended_at: datetime | None = None
    exit_code: int | None = None
    slurm_job_id: int | None = None
    kubernetes_job: str | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def runs_as(self) -> str | None:
        """`Kubernetes Job train-1`, `Slurm job 123`; None before the job is submitted."""
        if self.kubernetes_job is not None:
            return f"Kubernetes Job {self.kubernetes_job}"
        if self.slurm_job_id is not None:
            return f"Slurm job {self.slurm_job_id}"
        return None

    def summary(self) -> str:
        """What `status` and `watch` say of it: `Kubernetes Job train-2 (attempt 2): SUBMITTED`."""
        attempt = f" (attempt {self.attempt})" if self.attempt > 1 else ""
        state = self.state or "not submitted yet"
        if self.exit_code is not None and self.state != "SUBMITTED":
            state += f", exit code {self.exit_code}"
        return f"{self.runs_as or f'the {self.job} job'}{attempt}: {state}"


def job_views(record: RunRecord) -> list[JobView]:
    """The run's jobs that have a record, compile first. On EKS the record's `slurm_job_id` holds
    the submitted attempt's number (trainrun.steps.kubernetes): the Job is named from it."""
    from trainrun.logic.kubernetes_objects import job_name

    eks = record.on_eks
    views = []
    for kind in JOB_KINDS:
        job = record.job(kind)
        if job is None:
            continue
        submitted = job.slurm_job_id is not None  # None again once Resume opened the next attempt
        views.append(
            JobView(
                job=kind,
                attempt=job.attempt,
                state=job.state,
                submitted_at=job.submitted_at,
                ended_at=job.ended_at,
                exit_code=job.exit_code,
                slurm_job_id=None if eks else job.slurm_job_id,
                kubernetes_job=job_name(kind, job.attempt) if eks and submitted else None,
            )
        )
    return views


def current_job(jobs: list[JobView]) -> JobView | None:
    """The job the run is at: train once it has a record (a resubmission not submitted yet among
    them), else compile; None before either."""
    return jobs[-1] if jobs else None


class ExecutionView(BaseModel):
    """One of the run's executions, from its record: a long wait continues in a fresh one."""

    execution_arn: str
    # Silent-job checks it made (each costs about a dozen of its 25,000 history events).
    checks: int
    # Why it ended while the run went on ("continued"); None for the current one.
    ended_because: str | None


class RunView(BaseModel):
    """Everything known about one run at `taken_at`."""

    run_id: str
    name: str | None
    status: str  # the run record's: RUNNING, SUCCEEDED, FAILED, REJECTED, CANCELLED
    execution_status: str | None  # Step Functions': RUNNING, SUCCEEDED, FAILED, TIMED_OUT, ABORTED
    current_state: str | None  # the state the execution is in (None once it ended)
    run_file: str
    created_at: datetime
    ended_at: datetime | None
    torn_down_at: datetime | None
    kept_at: datetime | None
    taken_at: datetime
    nodes: int | None
    instance_type: str | None
    total_steps: int | None  # workload.total_steps: the progress bar's total
    states: list[StateVisit]
    findings: list[Finding]
    resources: Resources
    progress: RunProgress
    # The training history (step, loss, learning rate, throughput), thinned to at most
    # job_log.HISTORY_MAX_POINTS points: what `plot` draws and `watch` sparklines.
    history: list[TrainPoint] = Field(default_factory=list)
    # When the train job was submitted (the start of its step rate), if it was.
    train_submitted_at: datetime | None = None
    # The jobs as they run: Slurm jobs, or an EKS run's Kubernetes Jobs.
    jobs: list[JobView] = Field(default_factory=list)
    cost: Cost | None
    error: ErrorView | None
    # Teardown itself failed: what is left stays until the janitor or a person deletes it.
    teardown_error: ErrorView | None = None
    # What teardown did with the checkpoint directory (exported_to: a later run's resume_from).
    checkpoints: CheckpointExport | None = None
    # Every execution of the run's workflow, oldest first (more than one: a continued long wait).
    executions: list[ExecutionView] = Field(default_factory=list)

    @property
    def ended(self) -> bool:
        return self.status != RunStatus.RUNNING


def state_visits(events: list[dict[str, Any]]) -> list[StateVisit]:
    """The state visits of an execution history, in order, each with its entry time and duration."""
    visits: list[StateVisit] = []
    entered: dict[str, datetime] = {}
    for event in events:
        kind = event["type"]
        if kind.endswith("StateEntered"):
            name = event["stateEnteredEventDetails"]["name"]
            entered[name] = event["timestamp"]
            visits.append(StateVisit(name=name, entered_at=event["timestamp"]))
        elif kind.endswith("StateExited"):
            name = event["stateExitedEventDetails"]["name"]
            started = entered.pop(name, None)
            for visit in reversed(visits):
                if visit.name == name and visit.seconds is None and started is not None:
                    visit.seconds = round((event["timestamp"] - started).total_seconds(), 3)
                    break
    return visits


def _kind_and_id(item: str) -> tuple[str, str]:
    kind, _, resource_id = item.partition(" ")
    return kind, resource_id


def state_totals(visits: list[StateVisit]) -> list[StateTotal]:
    """The visits grouped by state, in the order the states were first entered."""
    totals: dict[str, StateTotal] = {}
    for visit in visits:
        total = totals.setdefault(
            visit.name,
            StateTotal(name=visit.name, first_entered_at=visit.entered_at, visits=0, seconds=0.0, running=False),
        )
        total.visits += 1
        total.seconds = round(total.seconds + (visit.seconds or 0.0), 3)
        total.running = total.running or visit.seconds is None
    return list(totals.values())


def created_resources(record: RunRecord) -> list[str]:
    """What the run record says the run created (reused resources are not listed)."""
    if record.borrowed is not None:  # it runs on a kept cluster: everything it runs on is the owner's
        return []
    created: list[str] = []
    if record.network is not None and record.network.created:
        created += [
            f"{field.removesuffix('_id').replace('_', '-')} {value}"
            for field, value in record.network.model_dump(exclude={"created"}).items()
            if value is not None
        ]
    elif record.network is not None and record.network.security_group_id:
        created.append(f"security-group {record.network.security_group_id}")
    if record.storage is not None and record.storage.created and record.storage.file_system_id:
        created.append(f"file-system {record.storage.file_system_id}")
    if record.storage is not None and record.storage.data_repository_association_id:
        created.append(f"data-repository-association {record.storage.data_repository_association_id}")
    if record.cluster is not None:
        created.append(f"cluster {record.cluster.name}")
    if record.eks is not None:
        # The node group and add-ons go with the cluster; the node group's launch template is trainrun's own.
        created.append(f"{EKS_CLUSTER} {record.eks.name}")
        if record.eks.launch_template_id is not None:
            created.append(f"launch-template {record.eks.launch_template_id}")
    return created
