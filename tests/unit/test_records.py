"""The run record store: conditional writes against the runs table as template.yaml defines it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from trainrun.model.findings import Code, Finding, Severity
from trainrun.model.run_file import RunSpec, parse_run_file
from trainrun.model.run_record import RunError, RunFileRef, RunRecord, RunStatus, RunStore

from .conftest import ROOT

pytestmark = pytest.mark.usefixtures("no_network")

RUN_ID = "single-node-0123456789ab"
CREATED = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SPEC = parse_run_file((ROOT / "examples" / "single-node.yaml").read_bytes())
FINDING = Finding(code=Code.INSUFFICIENT_CAPACITY, severity=Severity.ERROR, message="needs 32, has 16")


def a_record(**fields: Any) -> RunRecord:
    return RunRecord(
        run_id=RUN_ID,
        run_file=RunFileRef(bucket="config", key="runs/single-node.yaml", version_id="v1", etag="abc"),
        created_at=CREATED,
        updated_at=CREATED,
        **fields,
    )


def test_create_writes_a_new_record(store: RunStore) -> None:
    # When a record is created for a new run
    created = store.create(a_record())
    # Then it is stored, running
    assert created is True
    stored = store.get(RUN_ID)
    assert stored is not None and stored.status is RunStatus.RUNNING


def test_a_second_create_returns_false_and_keeps_the_first_record(store: RunStore) -> None:
    # Given a record created by the first delivery of a start
    store.create(a_record(name="first"))
    # When a replayed start creates it again, with other values
    created = store.create(a_record(name="second", status=RunStatus.FAILED))
    # Then the replay is refused and the first record is untouched
    assert created is False
    stored = store.get(RUN_ID)
    assert stored is not None
    assert (stored.name, stored.status) == ("first", RunStatus.RUNNING)


def test_get_round_trips_every_field(store: RunStore) -> None:
    # Given a record with every field set
    record = a_record(
        status=RunStatus.FAILED,
        execution_arn="arn:aws:states:us-west-2:123456789012:execution:run:" + RUN_ID,
        name="single-node",
        spec=SPEC,
        findings=[FINDING],
        error=RunError(error="States.TaskFailed", cause='{"errorMessage": "boom"}'),
        ended_at=CREATED,
    )
    store.create(record)
    # When it is read back
    # Then it is the same record, nested values included
    assert store.get(RUN_ID) == record


def test_get_of_an_unknown_run_is_none(store: RunStore) -> None:
    assert store.get("no-such-run-0123456789ab") is None


def test_finish_writes_the_final_status(store: RunStore) -> None:
    # Given a running run
    store.create(a_record())
    # When it finishes
    recorded = store.finish(RUN_ID, RunStatus.SUCCEEDED)
    # Then its final status and end time are recorded
    assert recorded is True
    stored = store.get(RUN_ID)
    assert stored is not None
    assert stored.status is RunStatus.SUCCEEDED
    assert stored.ended_at is not None and stored.error is None


def test_a_second_finish_returns_false_and_leaves_the_status(store: RunStore) -> None:
    # Given a run that already failed
    store.create(a_record())
    store.finish(RUN_ID, RunStatus.FAILED, RunError(error="States.Timeout"))
    # When a late duplicate says it succeeded
    recorded = store.finish(RUN_ID, RunStatus.SUCCEEDED)
    # Then nothing changes
    assert recorded is False
    stored = store.get(RUN_ID)
    assert stored is not None
    assert stored.status is RunStatus.FAILED
    assert stored.error == RunError(error="States.Timeout")


def test_finish_without_a_record_records_the_run_it_is_given(store: RunStore) -> None:
    # Given a run whose record was never created (the step creating it failed first)
    run_file = RunFileRef(bucket="config", key="runs/single-node.yaml", version_id="v1")
    # When the run finishes, naming its run file
    recorded = store.finish(RUN_ID, RunStatus.FAILED, RunError(error="States.TaskFailed"), run_file=run_file)
    # Then a minimal record holds its final status, error and run file
    assert recorded is True
    stored = store.get(RUN_ID)
    assert stored is not None
    assert (stored.status, stored.error, stored.run_file) == (
        RunStatus.FAILED,
        RunError(error="States.TaskFailed"),
        run_file,
    )
    assert stored.created_at == stored.ended_at


def test_finish_keeps_the_run_file_of_an_existing_record(store: RunStore) -> None:
    store.create(a_record())
    store.finish(RUN_ID, RunStatus.SUCCEEDED, run_file=RunFileRef(bucket="other", key="runs/other.yaml"))
    stored = store.get(RUN_ID)
    assert stored is not None and stored.run_file == a_record().run_file
    assert stored.created_at == CREATED


def test_finish_without_a_record_or_run_file_leaves_the_table_readable(store: RunStore) -> None:
    # Given no record
    # When a run finishes without naming its run file
    recorded = store.finish(RUN_ID, RunStatus.REJECTED)
    # Then nothing is written: a record without its run file could not be read back
    assert recorded is False
    assert store.get(RUN_ID) is None


def test_finish_stores_the_error_with_its_error_and_cause(store: RunStore, dynamodb: Any, runs_table: str) -> None:
    # Given a running run
    store.create(a_record())
    # When it fails with Step Functions' error and cause
    store.finish(RUN_ID, RunStatus.FAILED, RunError.model_validate({"Error": "RunSpecInvalid", "Cause": "name: bad"}))
    # Then the record keeps both, in Step Functions' own field names
    stored = store.get(RUN_ID)
    assert stored is not None and stored.error == RunError(error="RunSpecInvalid", cause="name: bad")
    item = dynamodb.get_item(TableName=runs_table, Key={"run_id": {"S": RUN_ID}})["Item"]
    assert item["error"]["S"] == '{"Error":"RunSpecInvalid","Cause":"name: bad"}'


def test_set_spec_stores_the_name_and_spec(store: RunStore) -> None:
    store.create(a_record())
    store.set_spec(RUN_ID, SPEC)
    stored = store.get(RUN_ID)
    assert stored is not None and (stored.name, stored.spec) == ("single-node", SPEC)
    assert isinstance(stored.spec, RunSpec)


def test_the_spec_is_stored_as_json_without_unset_fields_as_records_written_before_it_was_typed(
    store: RunStore, dynamodb: Any, runs_table: str
) -> None:
    # Given the spec's stored form before the record typed it: its JSON, None fields left out
    earlier = json.dumps(SPEC.model_dump(mode="json", exclude_none=True), ensure_ascii=False, separators=(",", ":"))
    # When the store writes the spec, through set_spec and through a whole record
    store.create(a_record())
    store.set_spec(RUN_ID, SPEC)
    other = "single-node-ba9876543210"
    store.create(a_record(name="single-node", spec=SPEC).model_copy(update={"run_id": other}))
    # Then both items hold exactly that form
    for run_id in (RUN_ID, other):
        item = dynamodb.get_item(TableName=runs_table, Key={"run_id": {"S": run_id}})["Item"]
        assert item["spec"] == {"S": earlier}


def test_a_record_written_before_the_spec_was_typed_reads_with_its_spec_validated(
    store: RunStore, dynamodb: Any, runs_table: str
) -> None:
    # Given an item as the store wrote it when the spec was a plain dict (JSON text, no unset fields)
    document = SPEC.model_dump(mode="json", exclude_none=True)
    dynamodb.put_item(
        TableName=runs_table,
        Item={
            "run_id": {"S": RUN_ID},
            "status": {"S": "RUNNING"},
            "run_file": {"S": json.dumps({"bucket": "config", "key": "runs/single-node.yaml"})},
            "name": {"S": "single-node"},
            "spec": {"S": json.dumps(document)},
            "created_at": {"S": CREATED.isoformat()},
            "updated_at": {"S": CREATED.isoformat()},
        },
    )
    # When it is read
    stored = store.get(RUN_ID)
    # Then its spec is the run file model, equal to the one it was made from
    assert stored is not None and isinstance(stored.spec, RunSpec)
    assert stored.spec == SPEC and stored.spec.workload.total_steps == 40


def test_a_stored_spec_the_run_file_model_refuses_makes_the_record_unreadable(
    store: RunStore, dynamodb: Any, runs_table: str
) -> None:
    # Given a record whose stored spec is not a valid run file (no reader may act on it)
    store.create(a_record())
    document = SPEC.model_dump(mode="json", exclude_none=True)
    document["capacity"]["nodes"] = 0
    dynamodb.update_item(
        TableName=runs_table,
        Key={"run_id": {"S": RUN_ID}},
        UpdateExpression="SET spec = :spec",
        ExpressionAttributeValues={":spec": {"S": json.dumps(document)}},
    )
    # When it is read, then the record is refused, naming the field
    with pytest.raises(ValidationError, match=r"spec\.capacity\.nodes"):
        store.get(RUN_ID)


def test_set_findings_replaces_the_findings(store: RunStore) -> None:
    store.create(a_record(findings=[FINDING]))
    store.set_findings(RUN_ID, [])
    stored = store.get(RUN_ID)
    assert stored is not None and stored.findings == []


def test_set_spec_on_a_missing_record_raises(store: RunStore, dynamodb: Any) -> None:
    # When a spec is written for a run that has no record
    with pytest.raises(dynamodb.exceptions.ConditionalCheckFailedException):
        store.set_spec(RUN_ID, SPEC)
    # Then no partial record is created
    assert store.get(RUN_ID) is None


def test_set_findings_on_a_missing_record_raises(store: RunStore, dynamodb: Any) -> None:
    with pytest.raises(dynamodb.exceptions.ConditionalCheckFailedException):
        store.set_findings(RUN_ID, [FINDING])
    assert store.get(RUN_ID) is None
