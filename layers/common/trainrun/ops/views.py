"""What an operator sees of a run: one model built from the run record and the execution history.

`trainrun status`, `runs`, `watch` and `plot` (and `trainrun local`'s summary) all read runs
through these models, so every view agrees on what a state visit, a run's progress and its
resources are.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, computed_field

from trainrun.model.findings import Finding
from trainrun.model.jobs import JobProgress, TrainPoint
from trainrun.model.run_record import RunError, RunRecord, RunStatus


class StateVisit(BaseModel):
    """One visit of a workflow state; `seconds` is None while the state is still running."""

    name: str
    entered_at: datetime | None = None
    seconds: float | None = None


class Resources(BaseModel):
    # What the run record says the run created (reused resources are not listed).
    created: list[str]
    # Everything still tagged with the run in the account when the view was taken.
    remaining: list[str]


class CompileProgress(BaseModel):
    graphs: int | None
    succeeded: int | None
    failed: int | None


class TrainProgress(BaseModel):
    epoch: int | None
    step: int | None
    loss: float | None
    learning_rate: float | None
    throughput: float | None
    checkpoints: int


class RunProgress(BaseModel):
    """What the jobs' logs said, as the progress function recorded it (null: no such job output)."""

    compile: CompileProgress | None = None
    train: TrainProgress | None = None

    @classmethod
    def of(cls, compile_progress: JobProgress | None, train_progress: JobProgress | None) -> RunProgress:
        compiled = None
        if compile_progress is not None and compile_progress.compile_graphs is not None:
            compiled = CompileProgress(
                graphs=compile_progress.compile_graphs,
                succeeded=compile_progress.compile_succeeded,
                failed=compile_progress.compile_failed,
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
        return cls(compile=compiled, train=trained)


class Cost(BaseModel):
    """An estimate from the plan's price table (trainrun.ops.prices), not a bill.

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
    cost: Cost | None
    error: ErrorView | None
    # Teardown itself failed: what is left stays until the janitor or a person deletes it.
    teardown_error: ErrorView | None = None
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


def created_resources(record: RunRecord) -> list[str]:
    """What the run record says the run created (reused resources are not listed)."""
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
    return created
