"""The run record: one DynamoDB item per run, the source of truth every step reads and writes.

Steps and EventBridge deliver at least once, so every write here is conditional: the first
create wins, a final status is written once, and a late duplicate changes nothing.

The record is one DynamoDB item, and DynamoDB refuses an item over 400 KB (409,600 bytes: the
UTF-8 bytes of every attribute's name and value; "DynamoDB item sizes and formats" in the
DynamoDB developer guide). A refused write would end a run without its findings, or fail every
later progress write, so each part of the record has a byte budget, enforced here whatever the
input (nested values are stored as UTF-8 JSON; the size of each is its encoded length):

| part                           | budget (bytes)                                         |
|--------------------------------|--------------------------------------------------------|
| spec                           | MAX_SPEC_BYTES (98,304; the run file model refuses more) |
| findings                       | MAX_FINDINGS x (MAX_FINDING_MESSAGE_BYTES + 64) = 34,816  |
| error, teardown_error, cancel_request | 3 x (MAX_ERROR_NAME_BYTES + MAX_ERROR_CAUSE_BYTES + 32) = 25,440 |
| progress_compile, progress_train | 2 x MAX_PROGRESS_BYTES = 98,304 (history thinned to fit) |
| run_file                       | S3: key <= 1,024 UTF-8 bytes (<= 6,144 escaped), version id <= 1,024: < 8,400 |
| job_compile, job_train         | 2 x (task token <= 2,048 + ~300)                        |
| everything else (ids, times, names) | < 4,000                                           |

That is under 270 KB in all (264,651 bytes measured), more than 130 KB below DynamoDB's limit; the tests build
the largest record and check it (tests/unit/test_record_size.py).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trainrun.model.findings import Finding, Severity
from trainrun.model.jobs import JobKind, JobProgress, JobRecord
from trainrun.model.resources import ClusterRef, NetworkIds, StorageIds

# --- the item size budget ------------------------------------------------------------------------
DYNAMODB_ITEM_LIMIT_BYTES = 400 * 1024  # DynamoDB's 1 KB is 1,024 bytes
MAX_SPEC_BYTES = 96 * 1024
MAX_FINDINGS = 32
MAX_FINDING_MESSAGE_BYTES = 1024
MAX_ERROR_NAME_BYTES = 256
MAX_ERROR_CAUSE_BYTES = 8 * 1024
MAX_PROGRESS_BYTES = 48 * 1024
# The newest history points are kept as they are when a progress must be thinned to fit.
RECENT_HISTORY_POINTS = 64
MAX_FAILURES = 16
MAX_FAILURE_BYTES = 256
_SURROGATES = re.compile(r"[\ud800-\udfff]")
_CUT = " …[cut]"


def encode_json(value: Any) -> str:
    """A nested value as the record stores it: compact JSON, non-ASCII as UTF-8 (DynamoDB counts bytes).

    json.dumps' default escapes every non-ASCII character to 6 or 12 bytes; UTF-8 takes 2 to 4.
    """
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _json_cost(character: str) -> int:
    """Bytes one character takes inside a JSON string, encoded as UTF-8."""
    if character in '"\\' or character in "\n\r\t\b\f":
        return 2
    if ord(character) < 0x20:
        return 6  # \u00XX
    return len(character.encode())


def clip_text(text: str, max_bytes: int) -> str:
    """`text`, cut so that it takes at most `max_bytes` inside a stored JSON string (UTF-8).

    A lone surrogate (JSON can carry one, UTF-8 cannot) becomes U+FFFD, so the text can be stored at all.
    """
    text = _SURROGATES.sub("\ufffd", text)
    if len(text) * 6 <= max_bytes or sum(map(_json_cost, text)) <= max_bytes:
        return text
    budget = max_bytes - sum(map(_json_cost, _CUT))
    used = 0
    for index, character in enumerate(text):
        used += _json_cost(character)
        if used > budget:
            return text[:index] + _CUT
    return text  # unreachable: the whole text was over the budget


def bounded_findings(findings: list[Finding]) -> list[Finding]:
    """The findings, each message within MAX_FINDING_MESSAGE_BYTES; past MAX_FINDINGS, the errors
    first and a last finding that counts the ones left out."""
    ordered = list(findings)
    if len(ordered) > MAX_FINDINGS:
        ordered.sort(key=lambda finding: finding.severity != Severity.ERROR)
        kept, left = ordered[: MAX_FINDINGS - 1], ordered[MAX_FINDINGS - 1 :]
        ordered = [
            *kept,
            Finding(
                code=left[0].code,
                severity=left[0].severity,
                message=f"and {len(left)} more findings the run record does not keep (it keeps {MAX_FINDINGS}); "
                "`trainrun validate` on the run file lists every run-file problem",
            ),
        ]
    return [
        finding.model_copy(update={"message": clip_text(finding.message, MAX_FINDING_MESSAGE_BYTES)})
        for finding in ordered
    ]


def bounded_error(error: RunError) -> RunError:
    """The error with its name and cause cut to their budgets (a cause may be 32,768 characters)."""
    return RunError(
        error=clip_text(error.error, MAX_ERROR_NAME_BYTES), cause=clip_text(error.cause, MAX_ERROR_CAUSE_BYTES)
    )


def encode_progress(progress: JobProgress) -> str:
    """The progress as stored, within MAX_PROGRESS_BYTES whatever the job printed.

    progress.py already keeps at most job_log.HISTORY_MAX_POINTS points; when even those do not
    fit (absurd numbers in the log), the newest RECENT_HISTORY_POINTS are kept and the older ones
    thinned by half until it fits, as a plot needs the recent points most.
    """
    encoded = progress.model_dump_json()
    if len(encoded.encode()) <= MAX_PROGRESS_BYTES:
        return encoded
    failures = [clip_text(failure, MAX_FAILURE_BYTES) for failure in progress.failures[:MAX_FAILURES]]
    history = list(progress.history)
    while True:
        encoded = progress.model_copy(update={"failures": failures, "history": history}).model_dump_json()
        if len(encoded.encode()) <= MAX_PROGRESS_BYTES or not history:
            return encoded
        older, recent = history[:-RECENT_HISTORY_POINTS], history[-RECENT_HISTORY_POINTS:]
        history = older[1::2] + recent if older else recent[len(recent) // 2 + 1 :]


def item_size(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it: each attribute's name and value, strings as UTF-8 bytes.

    Numbers count (significant digits / 2) + 1 bytes; this counts one byte a digit, an upper bound.
    """
    total = 0
    for name, value in item.items():
        total += len(name.encode())
        if "S" in value:
            total += len(value["S"].encode())
        elif "N" in value:
            total += len(value["N"]) + 1
        else:
            raise ValueError(f"{name}: the run record stores only strings and numbers, not {sorted(value)}")
    return total


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
    CLUSTER = "cluster"  # its head node and compute nodes


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

    def progress(self, job: JobKind) -> JobProgress | None:
        return self.progress_compile if job == "compile" else self.progress_train

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
    spec: dict[str, Any] | None = None
    findings: list[Finding] = Field(default_factory=list)
    availability_zone: str | None = None
    error: RunError | None = None
    teardown_error: RunError | None = None
    # Written by `trainrun cancel` before it stops the execution: the step that records the end
    # records a run that did not succeed CANCELLED, with this as its error (who cancelled, when).
    cancel_request: RunError | None = None
    # What the run created (or reused), recorded as each step creates it.
    network: NetworkIds | None = None
    storage: StorageIds | None = None
    cluster: ClusterRef | None = None
    # When the run's billable resources were first recorded (see Billed and billed_since);
    # a reused network or file system is not the run's to bill.
    nat_gateway_since: datetime | None = None
    file_system_since: datetime | None = None
    cluster_since: datetime | None = None
    # Set when teardown kept resources on purpose: everything (teardown.on_success/on_failure:
    # keep) or the file system and its network (keep_file_system). The janitor leaves them alone.
    kept_at: datetime | None = None
    torn_down_at: datetime | None = None
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

    def set_spec(self, run_id: str, name: str, spec: dict[str, Any]) -> None:
        size = len(encode_json(spec).encode())
        if size > MAX_SPEC_BYTES:  # the run file model refuses such a spec; this is a second line
            raise ValueError(f"the run spec is {size} bytes stored; the run record keeps at most {MAX_SPEC_BYTES}")
        self._update(run_id, {"name": name, "spec": spec})

    def set_findings(self, run_id: str, findings: list[Finding]) -> None:
        self._update(run_id, {"findings": [f.model_dump(mode="json") for f in bounded_findings(findings)]})

    def set_availability_zone(self, run_id: str, zone: str) -> None:
        self._update(run_id, {"availability_zone": zone})

    def set_network(self, run_id: str, network: NetworkIds) -> None:
        billed = Billed.NAT_GATEWAY if network.created and network.nat_gateway_id else None
        self._update(run_id, {"network": network.model_dump(mode="json")}, billed=billed)

    def set_storage(self, run_id: str, storage: StorageIds) -> None:
        billed = Billed.FILE_SYSTEM if storage.created and storage.file_system_id else None
        self._update(run_id, {"storage": storage.model_dump(mode="json")}, billed=billed)

    def set_cluster(self, run_id: str, cluster: ClusterRef) -> None:
        self._update(run_id, {"cluster": cluster.model_dump(mode="json")}, billed=Billed.CLUSTER)

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
    "cluster",
    "job_compile",
    "job_train",
    "progress_compile",
    "progress_train",
    "executions",
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
        else:
            item[key] = {"S": encode_json(value) if key in _JSON_FIELDS else str(value)}
    return item


def record_from_item(item: dict[str, Any]) -> RunRecord:
    data = {key: value["S"] for key, value in item.items() if "S" in value}
    for key in _JSON_FIELDS:
        if key in data:
            data[key] = json.loads(data[key])
    return RunRecord.model_validate(data)
