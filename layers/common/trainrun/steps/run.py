"""The workflow's steps: what each Lambda task does, between its input and output models.

Each step is one function. It takes its AWS clients as arguments and a parsed input model,
and returns an output model; the handlers in functions/ only parse, call and return.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from trainrun.errors import WHOLE_FILE, Problem, RunFileNotFound, RunSpecInvalid
from trainrun.logic.allowlists import RunAllowLists, check_allowed
from trainrun.logic.capacity import DEFAULT_STARTUP_ALLOWANCE, assess_capacity, reservation_window, target_zone
from trainrun.logic.run_inputs import input_findings, run_inputs
from trainrun.model.findings import Code, Finding, Severity, has_errors
from trainrun.model.run_file import MAX_RUN_FILE_BYTES, RunSpec, environment_findings, parse_run_file, written_name
from trainrun.model.run_record import ExecutionLink, RunError, RunFileRef, RunRecord, RunStatus, RunStore, utcnow
from trainrun.steps.run_events import ENDED_STATES, RunEvents, RunState, outcome_detail
from trainrun.workflow import State


class StepModel(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class LoadRunSpecInput(StepModel):
    run_id: str
    run_file: RunFileRef
    execution_arn: str | None = None


class RunSummary(StepModel):
    """What the state machine carries between states; everything else lives in the record."""

    run_id: str
    name: str
    nodes: int
    instance_type: str
    # What the job states read: Compile is skipped without a compile command; each job state
    # falls back to asking Slurm (Check) after a heartbeat-long silence or its timeout.
    has_compile: bool
    job_timeout_seconds: int
    job_heartbeat_seconds: int
    # cluster.reuse: once its capacity is accepted the run prepares the head node of the kept cluster
    # (Create cluster and Link data repository report the kept ones ready).
    reuses_cluster: bool = False
    # cluster.kind: which branch builds the cluster (and, on EKS, that no head node is prepared).
    kind: Literal["parallelcluster", "eks"] = "parallelcluster"


class RunRef(StepModel):
    """The input of a step that needs only the run's id (what it reads is in the run record)."""

    run_id: str


class CapacityVerdict(StepModel):
    accepted: bool
    availability_zone: str | None
    findings: list[Finding]
    # When the run's reservation starts later: the moment Wait for capacity waits until (its
    # TimestampPath), in the form Step Functions requires (RFC 3339, `T` and `Z`). Absent: no wait.
    wait_until: str | None = None


class ReservationLeads(StepModel):
    """How the run's reservation window is drawn (trainrun.logic.capacity.reservation_window):
    real durations, from the stack's settings."""

    provisioning: timedelta
    termination: timedelta
    # How long until the cluster could be up (trainrun.logic.capacity.assess_capacity).
    startup_allowance: timedelta = DEFAULT_STARTUP_ALLOWANCE
    # The job's stop grace and how late a silent job's check may come (its heartbeat period).
    stop_margin: timedelta


class FinishState(StepModel):
    """The parts of the workflow's state the final record is made from."""

    run_file: RunFileRef | None = None
    error: RunError | None = None
    teardown_error: RunError | None = None


class FinishRunInput(StepModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    outcome: Literal["SUCCEEDED", "FAILED", "REJECTED"]
    state: FinishState = FinishState()


class FinishRunOutput(StepModel):
    run_id: str
    status: RunStatus
    recorded: bool
    # The error the run ended with: the original one; teardown's only when there was no other.
    error: RunError | None = None


def load_run_spec(
    s3: Any,
    store: RunStore,
    request: LoadRunSpecInput,
    *,
    job_heartbeat_seconds: int,
    run_events: RunEvents,
    allowed: RunAllowLists,
) -> RunSummary:
    """Create the run record, then read and validate the run file at the exact version that started the run.

    An invalid run file is recorded as RUN_FILE_INVALID findings (one per problem) before
    RunSpecInvalid is raised, so the rejection shows every problem, not the first. So is a
    bucket or topic the stack does not allow (`allowed`: the stack's allow-lists; required, so
    that no caller can skip the check).
    """
    now = utcnow()
    record = RunRecord(
        run_id=request.run_id,
        run_file=request.run_file,
        execution_arn=request.execution_arn,
        executions=[ExecutionLink(execution_arn=request.execution_arn)] if request.execution_arn else [],
        created_at=now,
        updated_at=now,
    )
    created = store.create(record)
    try:
        spec = _read_run_spec(s3, store, request)
        # The name before the checks, so that a run they reject is found by it; the spec once accepted.
        store.set_name(request.run_id, spec.name)
        record = record.model_copy(update={"name": spec.name})
        _check_before_creating(s3, store, request, spec, allowed)
        store.set_spec(request.run_id, spec)
        record = record.model_copy(update={"spec": spec})
    finally:
        # Announced once the run file was read, so that the event carries the run's name and
        # notification topic; and announced for a bad run file too, before its rejection.
        if created:
            run_events.publish(record, RunState.STARTED, f"run file {request.run_file.uri}")
    return RunSummary(
        run_id=request.run_id,
        name=spec.name,
        nodes=spec.capacity.nodes,
        instance_type=spec.capacity.instance_type,
        has_compile=spec.workload.compile is not None,
        **job_wait_seconds(spec, job_heartbeat_seconds),
        reuses_cluster=spec.cluster.reuse is not None,
        kind=spec.cluster.kind,
    )


def job_wait_seconds(spec: RunSpec, job_heartbeat_seconds: int) -> dict[str, int]:
    """The job states' TimeoutSecondsPath and HeartbeatSecondsPath values (RunSummary's fields).

    The timeout is how long a job state waits before its Check: max_runtime (Check enforces it
    from the job's submission, however often the state is entered); with a budget, at most a
    heartbeat period, so that the budget is checked that often even while the job logs (a
    heartbeat resets only the heartbeat's clock, not the state's timeout).

    The heartbeat is the stack's, but always below the timeout: the States Language requires
    HeartbeatSeconds < TimeoutSeconds, and Step Functions fails the whole execution with
    States.Runtime otherwise. When the timeout is not longer (a budget's, or a max_runtime under
    a heartbeat period), the heartbeat is a second under it: a silent job is checked then, as it
    would have been at the timeout."""
    timeout = spec.workload.max_runtime_seconds
    if spec.budget is not None:
        timeout = min(timeout, job_heartbeat_seconds)
    return {"job_timeout_seconds": timeout, "job_heartbeat_seconds": min(job_heartbeat_seconds, timeout - 1)}


def validate_capacity(
    ec2: Any,
    resource_groups: Any,
    store: RunStore,
    request: RunRef,
    *,
    stack_region: str,
    now: datetime,
    leads: ReservationLeads,
) -> CapacityVerdict:
    """Check the reservation against the run; findings are recorded whatever the verdict. An
    accepted run whose reservation starts later, or ends by taking its instances away, has its
    reservation window recorded.

    A run on a kept cluster (`cluster.reuse`) is checked against that cluster instead: the
    reservation's instances are its nodes already. Accepted, it records the cluster (and its file
    system and network) as borrowed, and the workflow goes on to prepare its head node.
    """
    from trainrun.adapters.ec2 import lookup_capacity

    _, spec = load_run(store, request.run_id)
    if spec.cluster.reuse is not None:
        return _validate_reuse(store, request.run_id, spec)
    found = lookup_capacity(ec2, resource_groups, spec.capacity)
    findings = [
        *environment_findings(spec),
        *assess_capacity(
            spec,
            found,
            stack_region=stack_region,
            now=now,
            startup_allowance=leads.startup_allowance,
            # A local run's allowance is compressed: still say what AWS would refuse.
            aws_startup_allowance=DEFAULT_STARTUP_ALLOWANCE,
        ),
    ]
    store.set_findings(request.run_id, findings)
    accepted = not has_errors(findings)
    zone = target_zone(spec, found) if accepted else None
    if zone is not None:
        store.set_availability_zone(request.run_id, zone)
    window = None
    if accepted:
        window = reservation_window(
            spec,
            found,
            now=now,
            provisioning_lead=leads.provisioning,
            termination_lead=leads.termination,
            stop_margin=leads.stop_margin,
        )
    if window is not None:
        store.set_reservation_window(request.run_id, window)
    wait_until = None
    if window is not None and window.provision_at is not None:
        wait_until = window.provision_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return CapacityVerdict(accepted=accepted, availability_zone=zone, findings=findings, wait_until=wait_until)


def _validate_reuse(store: RunStore, run_id: str, spec: RunSpec) -> CapacityVerdict:
    from trainrun.logic.cluster_reuse import lender, reuse_findings

    assert spec.cluster.reuse is not None
    owner = lender(store.scan(), spec.cluster.reuse, borrower_id=run_id)
    findings = [*environment_findings(spec), *reuse_findings(spec, owner)]
    store.set_findings(run_id, findings)
    accepted = not has_errors(findings)
    if accepted and owner is not None:
        store.set_borrowed(run_id, owner)
    zone = owner.availability_zone if accepted and owner is not None else None
    return CapacityVerdict(accepted=accepted, availability_zone=zone, findings=findings)


def finish_run(store: RunStore, request: FinishRunInput, *, run_events: RunEvents) -> FinishRunOutput:
    """Record the outcome and announce it; when the run had already ended, report the status it ended with.

    A run that `trainrun cancel` asked to stop and that then failed (a stopped execution's safety
    net records FAILED) is CANCELLED, with the cancel's request as its error: the workflow cannot
    tell a cancel from any other stop, the record can. A success or a rejection stays what it was.
    """
    state = request.state
    if request.outcome == "SUCCEEDED":
        # The training succeeded: a teardown that could not finish does not change that; the
        # error is kept beside it (and the janitor tears down what is left).
        error, teardown_error = None, state.teardown_error
    else:
        error = state.error or state.teardown_error
        teardown_error = state.teardown_error if state.error is not None else None
    status = RunStatus(request.outcome)
    if status == RunStatus.FAILED:
        before = store.get(request.run_id)
        if before is not None and before.cancel_request is not None:
            status, error, teardown_error = RunStatus.CANCELLED, before.cancel_request, state.teardown_error
    recorded = store.finish(request.run_id, status, error, state.run_file, teardown_error)
    record = store.get(request.run_id)
    if record is None:  # there was none, and without the run file none could be made
        return FinishRunOutput(run_id=request.run_id, status=status, recorded=recorded, error=error)
    if recorded:
        run_events.publish(record, ENDED_STATES[record.status], outcome_detail(record))
        # The run's own teardown came first (success, failure): nothing is left, and now it has ended.
        if record.torn_down_at is not None:
            run_events.publish(record, RunState.TORN_DOWN)
    return FinishRunOutput(run_id=request.run_id, status=record.status, recorded=recorded, error=record.error)


def load_run(store: RunStore, run_id: str) -> tuple[RunRecord, RunSpec]:
    """The run's record and its spec as Load run spec validated it; RunFileNotFound before that."""
    record = store.get(run_id)
    if record is None or record.spec is None:
        raise RunFileNotFound(f"run {run_id} has no validated run spec; was '{State.LOAD_RUN_SPEC}' skipped?")
    if record.borrowed is not None:
        # On a kept cluster the run's scripts run as that cluster was made (its OS, its default user).
        cluster = record.borrowed.cluster.model_copy(update={"reuse": record.spec.cluster.reuse})
        return record, record.spec.model_copy(update={"cluster": cluster})
    return record, record.spec


def _read_run_spec(s3: Any, store: RunStore, request: LoadRunSpecInput) -> RunSpec:
    data = b""
    try:
        data = _read_run_file(s3, request.run_file)
        return parse_run_file(data)
    except RunSpecInvalid as exc:
        store.set_findings(request.run_id, [_invalid_field(problem) for problem in exc.problems])
        name = written_name(data)
        if name is not None:  # so that `trainrun status NAME` finds the rejected run
            store.set_name(request.run_id, name)
        raise


def _check_before_creating(
    s3: Any, store: RunStore, request: LoadRunSpecInput, spec: RunSpec, allowed: RunAllowLists
) -> None:
    """Before anything is created: the run names only buckets and topics the stack allows, and
    what its head node will read from them is there (trainrun.logic.run_inputs)."""
    from trainrun.adapters.s3_inputs import look_up_all

    looked_up = look_up_all(s3, run_inputs(spec, allowed))
    findings = [*check_allowed(spec, allowed), *input_findings(looked_up, checker="Load run spec's role")]
    if findings:
        store.set_findings(request.run_id, findings)
        raise RunSpecInvalid([_problem(finding) for finding in findings])


def _problem(finding: Finding) -> tuple[str, str]:
    path, _, message = finding.message.partition(": ")
    return path, message


def _read_run_file(s3: Any, ref: RunFileRef) -> bytes:
    """The run file's bytes, read only when its size is within MAX_RUN_FILE_BYTES.

    One ranged GetObject (s3:GetObject or s3:GetObjectVersion, as a whole read): S3 sends at most
    the limit + 1 bytes and tells the object's size in Content-Range, so an oversize object is
    refused without being read.
    """
    kwargs = {"Bucket": ref.bucket, "Key": ref.key, "Range": f"bytes=0-{MAX_RUN_FILE_BYTES}"}
    if ref.version_id:
        kwargs["VersionId"] = ref.version_id
    try:
        response = s3.get_object(**kwargs)
    except s3.exceptions.NoSuchKey as exc:
        raise RunFileNotFound(f"{ref.uri} does not exist") from exc
    except s3.exceptions.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code")
        if code == "InvalidRange":  # S3 answers a range of an empty object so
            return b""
        if code in {"NoSuchVersion", "AccessDenied", "404", "403"}:
            raise RunFileNotFound(f"{ref.uri} cannot be read: {exc}") from exc
        raise
    body = response["Body"]
    # "bytes 0-262144/<size>"; without a Content-Range the whole object was sent.
    size = int(response.get("ContentRange", "").rpartition("/")[2] or response["ContentLength"])
    if size > MAX_RUN_FILE_BYTES:
        body.close()
        raise RunSpecInvalid(
            [(WHOLE_FILE, f"is {size} bytes; a run file is at most {MAX_RUN_FILE_BYTES} (it was not read)")]
        )
    return body.read(MAX_RUN_FILE_BYTES + 1)


def _invalid_field(problem: Problem) -> Finding:
    """A problem of the run file as a finding: its field path, its line in the file when known, and what is wrong."""
    return Finding(code=Code.RUN_FILE_INVALID, severity=Severity.ERROR, message=str(problem))
