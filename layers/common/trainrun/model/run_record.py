"""The run record: one DynamoDB item per run, the source of truth every step reads and writes.

Steps and EventBridge deliver at least once, so every write here is conditional: the first
create wins, a final status is written once, and a late duplicate changes nothing.

Each part of the record has a byte budget (trainrun.model.record_size), so that the item always
fits in DynamoDB's 400 KB.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trainrun.model.checkpoints import CheckpointExport
from trainrun.model.findings import Finding
from trainrun.model.jobs import JobKind, JobProgress, JobRecord, log_stream_name
from trainrun.model.record_size import (
    MAX_ERROR_CAUSE_BYTES,
    MAX_ERROR_NAME_BYTES,
    MAX_SPEC_BYTES,
    bounded_findings,
    clip_text,
    encode_json,
    encode_progress,
)
from trainrun.model.resources import ClusterRef, EksClusterRef, NetworkIds, ReservationWindow, StorageIds
from trainrun.model.run_file import Cluster, RunSpec


class RunStatus(StrEnum):
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    REJECTED = "REJECTED"
    # Stopped on purpose with `trainrun cancel` (the record's cancel_request says by whom and when).
    CANCELLED = "CANCELLED"


FINAL_STATUSES = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.REJECTED, RunStatus.CANCELLED})


class Billed(StrEnum):
    """The resources a run is billed for by the hour, each from the moment it was first recorded
    (the cost so far counts each from then: trainrun.ops.runs)."""

    NAT_GATEWAY = "nat_gateway"
    FILE_SYSTEM = "file_system"
    CLUSTER = "cluster"  # its head node and compute nodes (on EKS: its control plane and node group)


def _since_attribute(billed: Billed) -> str:
    return f"{billed.value}_since"


class RunFileRef(BaseModel):
    """Which object (and which version of it) a run was started from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bucket: str
    key: str
    version_id: str | None = None
    etag: str | None = None

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


class RunError(BaseModel):
    """An error as Step Functions reports it: the error name and its cause."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    error: str = Field(alias="Error")
    cause: str = Field(default="", alias="Cause")

    @field_validator("cause", mode="before")
    @classmethod
    def _no_cause(cls, value: object) -> object:
        # SendTaskFailure's cause is optional: the workflow then holds "Cause": null.
        return "" if value is None else value

    @property
    def message(self) -> str:
        """`<error>: <what happened>`, for a person (a Lambda error's cause is its JSON payload)."""
        cause = cause_message(self.cause)
        return f"{self.error}: {cause}" if cause else self.error


def cause_message(cause: str) -> str:
    """A Lambda error's cause is its JSON payload; a person wants the message in it."""
    try:
        payload = json.loads(cause)
    except (TypeError, ValueError):
        return cause
    if isinstance(payload, dict) and "errorMessage" in payload:
        return str(payload["errorMessage"])
    return cause


def bounded_error(error: RunError) -> RunError:
    """The error with its name and cause cut to their budgets (a cause may be 32,768 characters)."""
    return RunError(
        error=clip_text(error.error, MAX_ERROR_NAME_BYTES), cause=clip_text(error.cause, MAX_ERROR_CAUSE_BYTES)
    )


class Borrowed(BaseModel):
    """The kept cluster a run runs on (`cluster.reuse`): whose it is, and how it was made.

    The run's network, storage and cluster are then that run's, borrowed: its teardown deletes
    none of them and its cost counts none of them; the owner's teardown (`trainrun down OWNER`) does.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    run_id: str
    name: str | None = None
    # The owner's `cluster` section: the OS (and so the default user) the run's scripts run as.
    cluster: Cluster


class ExecutionLink(BaseModel):
    """One execution of the run's workflow. The first starts the run; a long silent wait goes on
    in a fresh execution before Step Functions' history quota ends the current one (see
    trainrun.steps.head_node.CHECKS_PER_EXECUTION)."""

    model_config = ConfigDict(extra="ignore")

    execution_arn: str
    # Silent-job checks made in this execution: each costs about a dozen history events.
    checks: int = 0
    # Why it ended, when the run went on without it: "continued".
    ended_because: str | None = None


CONTINUED = "continued"


class RunRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    def job(self, job: JobKind) -> JobRecord | None:
        return self.job_compile if job == "compile" else self.job_train

    @property
    def on_eks(self) -> bool:
        """Whether the run runs on Amazon EKS (`cluster.kind: eks`): Kubernetes Jobs in its cluster,
        no head node, no Slurm."""
        return self.eks is not None or (self.spec is not None and self.spec.cluster.kind == "eks")

    def progress(self, job: JobKind) -> JobProgress | None:
        return self.progress_compile if job == "compile" else self.progress_train

    def log_stream(self, job: JobKind) -> str:
        """The job's stream in the jobs log group (under the kept cluster's run, on a borrowed cluster)."""
        return log_stream_name(self.run_id, job, cluster_run_id=self.borrowed.run_id if self.borrowed else None)

    def billed_since(self, billed: Billed) -> datetime | None:
        """When the run's resource of this kind began to bill; None: the run has created none."""
        since: datetime | None = getattr(self, _since_attribute(billed))
        return since

    run_id: str
    status: RunStatus = RunStatus.RUNNING
    run_file: RunFileRef
    # The run's current execution; `executions` links every one it had, oldest first.
    execution_arn: str | None = None
    executions: list[ExecutionLink] = Field(default_factory=list)
    name: str | None = None
    # The run file as Load run spec validated it (None before that); read back, it is validated
    # again with the record, so every reader gets the model.
    spec: RunSpec | None = None
    findings: list[Finding] = Field(default_factory=list)
    availability_zone: str | None = None
    # Set by Validate capacity when the run's reservation starts later or takes its instances away.
    reservation_window: ReservationWindow | None = None
    error: RunError | None = None
    teardown_error: RunError | None = None
    # Written by `trainrun cancel` before it stops the execution: the step that records the end
    # records a run that did not succeed CANCELLED, with this as its error (who cancelled, when).
    cancel_request: RunError | None = None
    # What the run created (or reused), recorded as each step creates it.
    network: NetworkIds | None = None
    storage: StorageIds | None = None
    cluster: ClusterRef | None = None
    # cluster.kind: eks: the EKS cluster, its node group and add-ons (`cluster` stays None).
    eks: EksClusterRef | None = None
    # cluster.reuse: whose kept cluster the run runs on; network, storage and cluster are then that run's.
    borrowed: Borrowed | None = None
    # `trainrun down` began deleting what the run kept: no run may start on its cluster any more.
    down_requested_at: datetime | None = None
    # When the run's billable resources were first recorded (see Billed and billed_since);
    # a reused network or file system is not the run's to bill.
    nat_gateway_since: datetime | None = None
    file_system_since: datetime | None = None
    cluster_since: datetime | None = None
    # When a check first found the estimated cost at BUDGET_WARNING_FRACTION of budget.max_cost_usd
    # (trainrun.logic.cost): its run event is published once, by the write that set this.
    budget_warned_at: datetime | None = None
    # Set when teardown kept resources on purpose: everything (teardown.on_success/on_failure:
    # keep) or the file system and its network (keep_file_system). The janitor leaves them alone.
    kept_at: datetime | None = None
    torn_down_at: datetime | None = None
    # The export of the checkpoint directory before teardown deletes the file system.
    checkpoints: CheckpointExport | None = None
    # The head node's preparation command, and each job: one attribute each, so the steps and
    # the progress handler never overwrite each other's writes.
    prepare_command_id: str | None = None
    job_compile: JobRecord | None = None
    job_train: JobRecord | None = None
    progress_compile: JobProgress | None = None
    progress_train: JobProgress | None = None
    created_at: datetime
    updated_at: datetime
    ended_at: datetime | None = None


def _links(record: RunRecord) -> list[ExecutionLink]:
    """The record's executions (a record written before they were linked knows only its first)."""
    if record.executions:
        return [link.model_copy() for link in record.executions]
    return [ExecutionLink(execution_arn=record.execution_arn)] if record.execution_arn else []


def _job_attribute(job: JobKind) -> str:
    return f"job_{job}"


def _progress_attribute(job: JobKind) -> str:
    return f"progress_{job}"


def utcnow() -> datetime:
    return datetime.now(UTC)


class RunStore:
    """Reads and writes run records. Takes a boto3 DynamoDB *client* and the table name."""

    def __init__(self, dynamodb: Any, table_name: str):
        self._db = dynamodb
        self._table = table_name

    def create(self, record: RunRecord) -> bool:
        """Create the record unless it exists; return False when it already did (a replayed start)."""
        try:
            self._db.put_item(
                TableName=self._table,
                Item=_to_item(record),
                ConditionExpression="attribute_not_exists(run_id)",
            )
        except self._db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def get(self, run_id: str) -> RunRecord | None:
        item = self._db.get_item(TableName=self._table, Key={"run_id": {"S": run_id}}, ConsistentRead=True).get("Item")
        return record_from_item(item) if item else None

    def set_spec(self, run_id: str, spec: RunSpec) -> None:
        stored = spec.stored()
        size = len(encode_json(stored).encode())
        if size > MAX_SPEC_BYTES:  # the run file model refuses such a spec; this is a second line
            raise ValueError(f"the run spec is {size} bytes stored; the run record keeps at most {MAX_SPEC_BYTES}")
        self._update(run_id, {"name": spec.name, "spec": stored})

    def set_name(self, run_id: str, name: str) -> None:
        """The run file's name, before its spec is accepted (set_spec), so that a rejected run is found by it."""
        self._update(run_id, {"name": name})

    def set_findings(self, run_id: str, findings: list[Finding]) -> None:
        self._update(run_id, {"findings": [f.model_dump(mode="json") for f in bounded_findings(findings)]})

    def set_availability_zone(self, run_id: str, zone: str) -> None:
        self._update(run_id, {"availability_zone": zone})

    def set_reservation_window(self, run_id: str, window: ReservationWindow) -> None:
        self._update(run_id, {"reservation_window": window.model_dump(mode="json")})

    def set_network(self, run_id: str, network: NetworkIds) -> None:
        billed = Billed.NAT_GATEWAY if network.created and network.nat_gateway_id else None
        self._update(run_id, {"network": network.model_dump(mode="json")}, billed=billed)

    def set_storage(self, run_id: str, storage: StorageIds) -> None:
        billed = Billed.FILE_SYSTEM if storage.created and storage.file_system_id else None
        self._update(run_id, {"storage": storage.model_dump(mode="json")}, billed=billed)

    def set_cluster(self, run_id: str, cluster: ClusterRef) -> None:
        self._update(run_id, {"cluster": cluster.model_dump(mode="json")}, billed=Billed.CLUSTER)

    def set_eks(self, run_id: str, eks: EksClusterRef) -> None:
        self._update(run_id, {"eks": eks.model_dump(mode="json")}, billed=Billed.CLUSTER)

    def set_borrowed(self, run_id: str, owner: RunRecord) -> None:
        """Record that the run runs on `owner`'s kept cluster, with its network and file system:
        borrowed (created False), so not the run's to delete or to bill (no *_since is set)."""
        if owner.spec is None or owner.cluster is None:
            raise ValueError(f"run {owner.run_id} has no cluster to borrow")
        fields: dict[str, Any] = {
            "borrowed": Borrowed(run_id=owner.run_id, name=owner.name, cluster=owner.spec.cluster).model_dump(
                mode="json"
            ),
            "cluster": owner.cluster.model_dump(mode="json"),
        }
        if owner.network is not None:
            fields["network"] = owner.network.model_copy(update={"created": False}).model_dump(mode="json")
        if owner.storage is not None:
            fields["storage"] = owner.storage.model_copy(update={"created": False}).model_dump(mode="json")
        if owner.availability_zone is not None:
            fields["availability_zone"] = owner.availability_zone
        self._update(run_id, fields)

    def request_down(self, run_id: str) -> bool:
        """Record that `trainrun down` is deleting what the run kept; False when it had been already."""
        try:
            self._db.update_item(
                TableName=self._table,
                Key={"run_id": {"S": run_id}},
                UpdateExpression="SET down_requested_at = :now, updated_at = :now",
                ConditionExpression="attribute_exists(run_id) AND attribute_not_exists(down_requested_at)",
                ExpressionAttributeValues={":now": {"S": utcnow().isoformat()}},
            )
        except self._db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def withdraw_down(self, run_id: str) -> None:
        """`trainrun down` refused after all (a run on the cluster is running): the cluster may be reused again."""
        self._db.update_item(
            TableName=self._table,
            Key={"run_id": {"S": run_id}},
            UpdateExpression="REMOVE down_requested_at SET updated_at = :now",
            ExpressionAttributeValues={":now": {"S": utcnow().isoformat()}},
        )

    def scan(self) -> list[RunRecord]:
        """Every run of the table, read consistently (a scan: the table is keyed by run id only;
        a stack keeps hundreds of runs, not millions)."""
        records: list[RunRecord] = []
        for page in self._db.get_paginator("scan").paginate(TableName=self._table, ConsistentRead=True):
            records.extend(record_from_item(item) for item in page["Items"])
        return records

    def set_prepare_command(self, run_id: str, command_id: str) -> None:
        self._update(run_id, {"prepare_command_id": command_id})

    def set_job(self, run_id: str, job: JobKind, record: JobRecord) -> None:
        self._update(run_id, {_job_attribute(job): record.model_dump(mode="json")})

    def get_progress(self, run_id: str, job: JobKind) -> tuple[JobProgress | None, int]:
        """A job's progress and its version, for an optimistic update (put_progress)."""
        item = self._db.get_item(
            TableName=self._table,
            Key={"run_id": {"S": run_id}},
            ConsistentRead=True,
            ProjectionExpression="#p, #v",
            ExpressionAttributeNames={"#p": _progress_attribute(job), "#v": f"{_progress_attribute(job)}_version"},
        ).get("Item", {})
        progress = item.get(_progress_attribute(job))
        version = int(item.get(f"{_progress_attribute(job)}_version", {}).get("N", "0"))
        return (JobProgress.model_validate_json(progress["S"]) if progress else None), version

    def put_progress(self, run_id: str, job: JobKind, progress: JobProgress, expected_version: int) -> bool:
        """Write a job's progress if nobody else did since `expected_version`; False on a conflict."""
        attribute = _progress_attribute(job)
        try:
            self._db.update_item(
                TableName=self._table,
                Key={"run_id": {"S": run_id}},
                UpdateExpression="SET #p = :p, #v = :next, updated_at = :now",
                ConditionExpression="attribute_exists(run_id) AND (attribute_not_exists(#v) OR #v = :expected)",
                ExpressionAttributeNames={"#p": attribute, "#v": f"{attribute}_version"},
                ExpressionAttributeValues={
                    ":p": {"S": encode_progress(progress)},
                    ":next": {"N": str(expected_version + 1)},
                    ":expected": {"N": str(expected_version)},
                    ":now": {"S": utcnow().isoformat()},
                },
            )
        except self._db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def count_check(self, run_id: str, execution_arn: str) -> ExecutionLink:
        """Count one silent-job check against the execution that made it; return its link."""
        record = self.get(run_id)
        if record is None:
            raise ValueError(f"run {run_id} has no record")
        links = _links(record)
        link = next((link for link in links if link.execution_arn == execution_arn), None)
        if link is None:
            link = ExecutionLink(execution_arn=execution_arn)
            links.append(link)
        if link.ended_because is None:
            link.checks += 1
            self._update(run_id, {"executions": [item.model_dump(mode="json") for item in links]})
        return link

    def continue_execution(self, run_id: str, previous_arn: str, next_arn: str) -> None:
        """Link the execution that goes on with the run, and make it the current one: cancel
        stops it, the janitor asks about it. Safe to repeat."""
        record = self.get(run_id)
        if record is None:
            raise ValueError(f"run {run_id} has no record")
        links = _links(record)
        for link in links:
            if link.execution_arn == previous_arn:
                link.ended_because = CONTINUED
        if all(link.execution_arn != next_arn for link in links):
            links.append(ExecutionLink(execution_arn=next_arn))
        self._update(
            run_id,
            {"executions": [item.model_dump(mode="json") for item in links], "execution_arn": next_arn},
        )

    def set_teardown_error(self, run_id: str, error: RunError) -> None:
        """What the run's teardown could not delete, and why (kept when the run ends)."""
        self._update(run_id, {"teardown_error": error.model_dump(mode="json", by_alias=True)})

    def request_cancel(self, run_id: str, request: RunError) -> bool:
        """Record that the run is being cancelled; False when it has already ended.

        A second cancel keeps the first one's request (who cancelled, and when).
        """
        try:
            self._db.update_item(
                TableName=self._table,
                Key={"run_id": {"S": run_id}},
                UpdateExpression="SET cancel_request = if_not_exists(cancel_request, :request), updated_at = :now",
                ConditionExpression="attribute_exists(run_id) AND #status = :running",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={
                    ":request": {"S": bounded_error(request).model_dump_json(by_alias=True)},
                    ":now": {"S": utcnow().isoformat()},
                    ":running": {"S": RunStatus.RUNNING.value},
                },
            )
        except self._db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def mark_budget_warned(self, run_id: str) -> bool:
        """Record that the budget is nearly spent; False when a check had already recorded it."""
        try:
            self._db.update_item(
                TableName=self._table,
                Key={"run_id": {"S": run_id}},
                UpdateExpression="SET budget_warned_at = :now, updated_at = :now",
                ConditionExpression="attribute_exists(run_id) AND attribute_not_exists(budget_warned_at)",
                ExpressionAttributeValues={":now": {"S": utcnow().isoformat()}},
            )
        except self._db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def start_checkpoint_export(self, run_id: str, export: CheckpointExport) -> bool:
        """Record the export's start; False when another teardown pass recorded one first."""
        try:
            self._db.update_item(
                TableName=self._table,
                Key={"run_id": {"S": run_id}},
                UpdateExpression="SET checkpoints = :export, updated_at = :now",
                ConditionExpression="attribute_exists(run_id) AND attribute_not_exists(checkpoints)",
                ExpressionAttributeValues={
                    ":export": {"S": encode_json(export.model_dump(mode="json"))},
                    ":now": {"S": utcnow().isoformat()},
                },
            )
        except self._db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def set_checkpoint_export(self, run_id: str, export: CheckpointExport) -> None:
        self._update(run_id, {"checkpoints": export.model_dump(mode="json")})

    def mark_kept(self, run_id: str) -> None:
        self._update(run_id, {"kept_at": utcnow().isoformat()})

    def mark_torn_down(self, run_id: str) -> bool:
        """Record that nothing is left; return False when a teardown had already recorded it."""
        try:
            self._db.update_item(
                TableName=self._table,
                Key={"run_id": {"S": run_id}},
                UpdateExpression="SET torn_down_at = :now, updated_at = :now",
                ConditionExpression="attribute_exists(run_id) AND attribute_not_exists(torn_down_at)",
                ExpressionAttributeValues={":now": {"S": utcnow().isoformat()}},
            )
        except self._db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def finish(
        self,
        run_id: str,
        status: RunStatus,
        error: RunError | None = None,
        run_file: RunFileRef | None = None,
        teardown_error: RunError | None = None,
    ) -> bool:
        """Record the final status once; return False when the run had already ended.

        Creates a minimal record when none exists (the step that creates it failed first),
        so every run that reached the end of the workflow can be found with its error.
        """
        now = utcnow().isoformat()
        names = {"#status": "status"}
        values: dict[str, Any] = {
            ":status": {"S": status.value},
            ":now": {"S": now},
            ":running": {"S": RunStatus.RUNNING.value},
        }
        assignments = [
            "#status = :status",
            "updated_at = :now",
            "ended_at = :now",
            "created_at = if_not_exists(created_at, :now)",
        ]
        if error is not None:
            names["#error"] = "error"
            values[":error"] = {"S": bounded_error(error).model_dump_json(by_alias=True)}
            assignments.append("#error = :error")
        if teardown_error is not None:
            values[":teardown_error"] = {"S": bounded_error(teardown_error).model_dump_json(by_alias=True)}
            assignments.append("teardown_error = :teardown_error")
        # A record is only created here when it can be complete enough to read back.
        condition = "attribute_exists(run_id) AND #status = :running"
        if run_file is not None:
            values[":run_file"] = {"S": run_file.model_dump_json()}
            assignments.append("run_file = if_not_exists(run_file, :run_file)")
            condition = "attribute_not_exists(run_id) OR #status = :running"
        try:
            self._db.update_item(
                TableName=self._table,
                Key={"run_id": {"S": run_id}},
                UpdateExpression="SET " + ", ".join(assignments),
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except self._db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def _update(self, run_id: str, fields: dict[str, Any], *, billed: Billed | None = None) -> None:
        """Set `fields`; with `billed`, also when that resource began to bill, if not yet known."""
        names = {f"#f{i}": name for i, name in enumerate(fields)}
        values = {
            f":v{i}": {"S": encode_json(value) if name in _JSON_FIELDS else str(value)}
            for i, (name, value) in enumerate(fields.items())
        }
        values[":now"] = {"S": utcnow().isoformat()}
        assignments = ", ".join(f"#f{i} = :v{i}" for i in range(len(fields)))
        if billed is not None:
            names["#since"] = _since_attribute(billed)
            assignments += ", #since = if_not_exists(#since, :now)"
        self._db.update_item(
            TableName=self._table,
            Key={"run_id": {"S": run_id}},
            UpdateExpression=f"SET {assignments}, updated_at = :now",
            ConditionExpression="attribute_exists(run_id)",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )


# Nested values are stored as JSON strings: one attribute type, no Decimal conversions, and
# the item stays readable in the console.
_JSON_FIELDS = (
    "run_file",
    "spec",
    "findings",
    "error",
    "teardown_error",
    "cancel_request",
    "network",
    "storage",
    "eks",
    "cluster",
    "job_compile",
    "job_train",
    "progress_compile",
    "progress_train",
    "executions",
    "checkpoints",
    "reservation_window",
    "borrowed",
)


def _to_item(record: RunRecord) -> dict[str, Any]:
    record = record.model_copy(
        update={
            "findings": bounded_findings(record.findings),
            "error": record.error and bounded_error(record.error),
            "teardown_error": record.teardown_error and bounded_error(record.teardown_error),
            "cancel_request": record.cancel_request and bounded_error(record.cancel_request),
        }
    )
    data = record.model_dump(mode="json", by_alias=True)
    item: dict[str, Any] = {}
    for key, value in data.items():
        if value is None:
            continue
        if key in ("progress_compile", "progress_train"):
            item[key] = {"S": encode_progress(getattr(record, key))}
        elif key == "spec" and record.spec is not None:
            item[key] = {"S": encode_json(record.spec.stored())}
        else:
            item[key] = {"S": encode_json(value) if key in _JSON_FIELDS else str(value)}
    return item


def record_from_item(item: dict[str, Any]) -> RunRecord:
    data = {key: value["S"] for key, value in item.items() if "S" in value}
    for key in _JSON_FIELDS:
        if key in data:
            data[key] = json.loads(data[key])
    return RunRecord.model_validate(data)
