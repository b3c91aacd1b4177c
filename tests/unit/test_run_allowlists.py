"""Which buckets and topics a run file may name: the stack's allow-lists, checked in Load run spec."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from trainrun.errors import RunSpecInvalid
from trainrun.logic.allowlists import RunAllowLists, check_allowed
from trainrun.model.findings import Code, Severity
from trainrun.model.run_file import RunSpec, parse_run_file
from trainrun.model.run_record import RunStore
from trainrun.steps.run import load_run_spec

from .conftest import moto_run_events
from .test_steps import SINGLE_NODE, request_for, upload

CONFIG = "trainrun-config"
TOPIC = "arn:aws:sns:us-west-2:123456789012:runs"


def spec_with(**changes: Any) -> RunSpec:
    document = yaml.safe_load(SINGLE_NODE)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = document
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return parse_run_file(yaml.safe_dump(document))


def allow(buckets: str = "", topics: str = "") -> RunAllowLists:
    return RunAllowLists.from_parameters(config_bucket=CONFIG, bucket_arns=buckets, topic_arns=topics)


def codes(spec: RunSpec, allowed: RunAllowLists) -> list[Code]:
    return [finding.code for finding in check_allowed(spec, allowed)]


def test_a_bucket_the_stack_lists_is_allowed() -> None:
    # Given the example's workload bucket in RunBucketArns
    # When the single-node run is checked
    # Then there is no finding
    assert check_allowed(spec_with(), allow("arn:aws:s3:::trainrun-examples")) == []


def test_a_bucket_the_stack_does_not_list_is_an_error_naming_the_parameter() -> None:
    # Given an empty RunBucketArns
    # When a run reads its workload from another bucket
    [finding] = check_allowed(spec_with(), allow())
    # Then an ERROR names the field, the bucket and the parameter to change
    assert (finding.code, finding.severity) == (Code.BUCKET_NOT_ALLOWED, Severity.ERROR)
    assert finding.message.startswith("workload.source.s3: bucket 'trainrun-examples'")
    assert "RunBucketArns" in finding.message


@pytest.mark.parametrize(
    "changes",
    [
        {"workload__dataset": {"source": "s3://other-data/wiki/", "path": "/fsx/data"}},
        {
            "storage__fsx": {
                "deployment_type": "PERSISTENT_2",
                "storage_capacity_gib": 1200,
                "throughput_per_tib": 125,
                "data_repository": "s3://other-data/prefix/",
            }
        },
    ],
    ids=["dataset", "data_repository"],
)
def test_every_s3_field_is_checked(changes: dict[str, Any]) -> None:
    # Given the workload bucket allowed
    # When a dataset or data repository names another bucket
    # Then it is refused
    assert codes(spec_with(**changes), allow("arn:aws:s3:::trainrun-examples")) == [Code.BUCKET_NOT_ALLOWED]


def test_the_config_bucket_serves_one_object_but_never_its_run_files() -> None:
    # Given nothing listed (the config bucket only)
    # When the workload is an object of the config bucket, or lies under runs/
    outside = spec_with(workload__source={"s3": f"s3://{CONFIG}/workloads/w.tar.gz"})
    inside = spec_with(workload__source={"s3": f"s3://{CONFIG}/runs/w.tar.gz"})
    # Then the first is allowed, the second refused
    assert codes(outside, allow()) == []
    assert codes(inside, allow()) == [Code.CONFIG_BUCKET_RUN_FILES]


def test_a_dataset_prefix_of_the_config_bucket_is_refused() -> None:
    # Given nothing listed
    # When the dataset is a prefix of the config bucket (the head node would need the whole bucket)
    spec = spec_with(
        workload__source={"s3": f"s3://{CONFIG}/workloads/w.tar.gz"},
        workload__dataset={"source": f"s3://{CONFIG}/data/", "path": "/fsx/data"},
    )
    # Then it is refused
    assert codes(spec, allow()) == [Code.CONFIG_BUCKET_RUN_FILES]


def test_a_topic_must_be_listed() -> None:
    # Given RunTopicArns empty, then listing the topic
    spec = spec_with(notify={"sns_topic_arn": TOPIC})
    # When the run names the topic
    # Then it is refused without the listing, allowed with it
    assert codes(spec, allow("arn:aws:s3:::trainrun-examples")) == [Code.TOPIC_NOT_ALLOWED]
    assert codes(spec, allow("arn:aws:s3:::trainrun-examples", TOPIC)) == []


def test_a_malformed_bucket_parameter_is_refused() -> None:
    # Given a bucket name where an ARN belongs
    # When the allow-lists are read
    # Then the parameter is named
    with pytest.raises(ValueError, match="RunBucketArns"):
        allow("trainrun-examples")


def test_load_run_spec_rejects_a_run_outside_the_allow_lists_before_anything_is_created(
    s3: Any, config_bucket: str, store: RunStore
) -> None:
    # Given the single-node run and a stack that lists no bucket
    ref = upload(s3, config_bucket, SINGLE_NODE)
    allowed = RunAllowLists(config_bucket=config_bucket)
    # When Load run spec runs
    with pytest.raises(RunSpecInvalid, match=r"workload\.source\.s3"):
        load_run_spec(
            s3, store, request_for(ref), job_heartbeat_seconds=600, run_events=moto_run_events(), allowed=allowed
        )
    # Then the record holds the finding and no spec (nothing downstream can start)
    record = store.get(request_for(ref).run_id)
    assert record is not None and record.spec is None
    assert [finding.code for finding in record.findings] == [Code.BUCKET_NOT_ALLOWED]


def test_load_run_spec_cannot_be_called_without_the_allow_lists(s3: Any, config_bucket: str, store: RunStore) -> None:
    # Given the single-node run, uploaded
    ref = upload(s3, config_bucket, SINGLE_NODE)
    # When Load run spec is called with no allow-lists
    # Then the call itself is refused: no caller can skip the check by leaving them out
    with pytest.raises(TypeError, match="allowed"):
        load_run_spec(  # type: ignore[call-arg]
            s3, store, request_for(ref), job_heartbeat_seconds=600, run_events=moto_run_events()
        )
    # And no run record was created
    assert store.get(request_for(ref).run_id) is None


def test_load_run_spec_rejects_a_local_directory_uploaded_without_trainrun_submit(
    s3: Any, config_bucket: str, store: RunStore
) -> None:
    # Given a run file whose workload is a local directory, uploaded as it was written (aws s3 cp)
    document = yaml.safe_load(SINGLE_NODE)
    document["workload"]["source"] = {"path": "./my-code"}
    ref = upload(s3, config_bucket, yaml.safe_dump(document))
    allowed = RunAllowLists(config_bucket=config_bucket, buckets=frozenset({"trainrun-examples"}))
    # When Load run spec runs
    with pytest.raises(RunSpecInvalid, match=r"workload\.source\.path"):
        load_run_spec(
            s3, store, request_for(ref), job_heartbeat_seconds=600, run_events=moto_run_events(), allowed=allowed
        )
    # Then the run is rejected with one finding that says to submit it with trainrun, and no spec is kept
    record = store.get(request_for(ref).run_id)
    assert record is not None and record.spec is None
    [finding] = record.findings
    assert (finding.code, finding.severity) == (Code.SOURCE_NOT_PACKED, Severity.ERROR)
    assert "'./my-code'" in finding.message and "trainrun submit" in finding.message


def test_resume_from_is_checked_like_every_s3_field() -> None:
    # Given the workload bucket allowed
    # When a run resumes from checkpoints in another bucket
    spec = spec_with(workload__resume_from="s3://other-data/checkpoints/run-1/")
    # Then it is refused, naming the field
    [finding] = check_allowed(spec, allow("arn:aws:s3:::trainrun-examples"))
    assert finding.code == Code.BUCKET_NOT_ALLOWED and finding.message.startswith("workload.resume_from:")


def test_resume_from_in_the_config_bucket_must_be_under_checkpoints() -> None:
    # Given nothing listed but the workload's bucket
    allowed = allow("arn:aws:s3:::trainrun-examples")
    # When a run resumes from an exported run's checkpoints, or from elsewhere in the config bucket
    exported = spec_with(workload__resume_from=f"s3://{CONFIG}/checkpoints/bert-large-0123456789ab/")
    elsewhere = spec_with(workload__resume_from=f"s3://{CONFIG}/runs/")
    # Then the first is allowed, the second refused
    assert codes(exported, allowed) == []
    assert codes(elsewhere, allowed) == [Code.CONFIG_BUCKET_RUN_FILES]
