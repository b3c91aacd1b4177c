"""The two events that start a run: an S3 upload delivered by EventBridge, and a Scheduler input."""

from __future__ import annotations

from typing import Any

import pytest

from trainrun.model.run_record import RunFileRef
from trainrun.model.start_events import StartEventInvalid, parse_start_event

pytestmark = pytest.mark.usefixtures("no_network")

DEFAULT_BUCKET = "trainrun-config-default"


def object_created(**detail_changes: Any) -> dict[str, Any]:
    """An S3 "Object Created" event exactly as EventBridge delivers it.

    The shape is the S3 User Guide's "EventBridge event message structure".
    """
    detail: dict[str, Any] = {
        "version": "0",
        "bucket": {"name": "trainrun-config-123456789012"},
        "object": {
            "key": "runs/bert-large-phase1.yaml",
            "size": 2418,
            "etag": "b1946ac92492d2347c6235b4d2611184",
            "version-id": "IYV3p45BT0ac8hjHg1houSdS1a.Mro8e",
            "sequencer": "00617F08299329D189",
        },
        "request-id": "N4N7GDK58NMKJ12R",
        "requester": "123456789012",
        "source-ip-address": "203.0.113.15",
        "reason": "PutObject",
    }
    detail.update(detail_changes)
    return {
        "version": "0",
        "id": "17793124-05d4-b198-2fde-7ededc63b103",
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": "123456789012",
        "time": "2026-03-01T12:00:00Z",
        "region": "us-west-2",
        "resources": ["arn:aws:s3:::trainrun-config-123456789012"],
        "detail": detail,
    }


def test_an_upload_names_the_exact_object_version() -> None:
    # When an S3 Object Created event is parsed
    trigger = parse_start_event(object_created(), default_bucket=DEFAULT_BUCKET)
    # Then it names the bucket, key, version and ETag of the upload, and no occurrence
    assert trigger.run_file == RunFileRef(
        bucket="trainrun-config-123456789012",
        key="runs/bert-large-phase1.yaml",
        version_id="IYV3p45BT0ac8hjHg1houSdS1a.Mro8e",
        etag="b1946ac92492d2347c6235b4d2611184",
    )
    assert trigger.occurrence is None


def test_an_upload_to_an_unversioned_bucket_has_no_version() -> None:
    event = object_created()
    del event["detail"]["object"]["version-id"]
    trigger = parse_start_event(event, default_bucket=DEFAULT_BUCKET)
    assert trigger.run_file.version_id is None


def test_a_schedule_with_an_s3_uri_names_that_bucket_and_the_occurrence() -> None:
    # Given the input template.yaml's RunSchedule sends, with the scheduled time filled in
    event = {
        "run_file": "s3://trainrun-config-123456789012/runs/nightly.yaml",
        "scheduled_time": "2026-03-01T02:00:00Z",
    }
    # When it is parsed
    trigger = parse_start_event(event, default_bucket=DEFAULT_BUCKET)
    # Then the run file is that object (any version) and the scheduled time is the occurrence
    assert trigger.run_file == RunFileRef(bucket="trainrun-config-123456789012", key="runs/nightly.yaml")
    assert trigger.occurrence == "2026-03-01T02:00:00Z"


def test_a_schedule_with_a_bare_key_uses_the_default_bucket() -> None:
    event = {"run_file": "runs/team/nightly.yml", "scheduled_time": "2026-03-01T02:00:00Z"}
    trigger = parse_start_event(event, default_bucket=DEFAULT_BUCKET)
    assert trigger.run_file == RunFileRef(bucket=DEFAULT_BUCKET, key="runs/team/nightly.yml")
    assert trigger.occurrence == "2026-03-01T02:00:00Z"


# --- malformed events -----------------------------------------------------------------------------


def without(event: dict[str, Any], *path: str) -> dict[str, Any]:
    parent = event
    for part in path[:-1]:
        parent = parent[part]
    del parent[path[-1]]
    return event


@pytest.mark.parametrize(
    ("event", "named"),
    [
        (without(object_created(), "detail", "bucket"), "bucket"),
        (without(object_created(), "detail", "object", "key"), "key"),
        (without(object_created(), "detail"), "detail"),
        (without(object_created(), "time"), "time"),
        ({**object_created(), "time": "yesterday"}, "time"),
    ],
    ids=["no-bucket", "no-key", "no-detail", "no-time", "bad-time"],
)
def test_a_malformed_s3_event_is_rejected_naming_the_problem(event: dict[str, Any], named: str) -> None:
    with pytest.raises(StartEventInvalid, match="not an S3 Object Created event") as raised:
        parse_start_event(event, default_bucket=DEFAULT_BUCKET)
    assert named in str(raised.value)


@pytest.mark.parametrize(
    ("event", "named"),
    [
        ({"run_file": "runs/nightly.yaml"}, "scheduled_time"),
        ({"scheduled_time": "2026-03-01T02:00:00Z"}, "run_file"),
        ({"run_file": "other/nightly.yaml", "scheduled_time": "t"}, "run_file"),
        ({"run_file": "runs/nightly.json", "scheduled_time": "t"}, "run_file"),
        ({"run_file": "s3://Bad_Bucket/runs/nightly.yaml", "scheduled_time": "t"}, "run_file"),
        ({"run_file": "runs/$(reboot).yaml", "scheduled_time": "t"}, "run_file"),
        ({"run_file": "runs/nightly.yaml", "scheduled_time": ""}, "scheduled_time"),
        ({"run_file": "runs/nightly.yaml", "scheduled_time": "t", "bucket": "x"}, "bucket"),
        ({}, "run_file"),
    ],
    ids=[
        "no-time",
        "no-run-file",
        "outside-runs",
        "not-yaml",
        "bad-bucket",
        "shell-characters",
        "empty-time",
        "unknown-field",
        "empty",
    ],
)
def test_a_malformed_schedule_input_is_rejected_naming_the_problem(event: dict[str, Any], named: str) -> None:
    with pytest.raises(StartEventInvalid, match="not a schedule input") as raised:
        parse_start_event(event, default_bucket=DEFAULT_BUCKET)
    assert named in str(raised.value)


def test_an_s3_event_other_than_object_created_is_rejected() -> None:
    # Given the event S3 sends when the run file is deleted
    event = object_created(reason="DeleteObject")
    event["detail-type"] = "Object Deleted"
    event["detail"]["deletion-type"] = "Delete Marker Created"
    del event["detail"]["object"]["size"]
    # When it reaches the start-run function
    # Then it is refused, naming the detail-type
    with pytest.raises(StartEventInvalid, match="Object Deleted"):
        parse_start_event(event, default_bucket=DEFAULT_BUCKET)
