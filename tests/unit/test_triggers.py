"""Starting runs: which keys are run files, deterministic run ids, and starting each run once."""

from __future__ import annotations

import json
import re
from typing import Any
from unittest.mock import Mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainrun.model.run_record import RunFileRef
from trainrun.model.tags import RUN_ID_PATTERN
from trainrun.steps.start_run import execution_arn_for, is_run_file, looks_like_run_id, run_id_for, start_run

pytestmark = pytest.mark.usefixtures("no_network")

REF = RunFileRef(bucket="config", key="runs/bert-large-phase1.yaml", version_id="v1", etag="abc")
STATE_MACHINE = "arn:aws:states:us-west-2:123456789012:stateMachine:trainrun-run"


# --- is_run_file ----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["runs/a.yaml", "runs/a.yml", "runs/team/nightly.yaml", "runs/.yaml"])
def test_a_yaml_file_under_runs_is_a_run_file(key: str) -> None:
    assert is_run_file(key)


@pytest.mark.parametrize(
    "key",
    [
        "a.yaml",  # not under runs/
        "other/runs/a.yaml",  # runs/ must be the prefix, not any segment
        "Runs/a.yaml",  # S3 keys are case-sensitive
        "runs/a.json",
        "runs/a.yaml.bak",
        "runs/a.YAML",
        "runs/",
        "runs",
    ],
)
def test_anything_else_is_not_a_run_file(key: str) -> None:
    assert not is_run_file(key)


# --- run_id_for -----------------------------------------------------------------------------------


def test_the_run_id_is_the_readable_stem_and_a_digest() -> None:
    run_id = run_id_for(REF)
    assert run_id.startswith("bert-large-phase1-")
    assert len(run_id) == len("bert-large-phase1-") + 12


def test_the_same_object_gets_the_same_run_id() -> None:
    assert run_id_for(REF) == run_id_for(RunFileRef(**REF.model_dump()))
    assert run_id_for(REF, "2026-03-01T02:00:00Z") == run_id_for(REF, "2026-03-01T02:00:00Z")


@pytest.mark.parametrize(
    ("other", "occurrence"),
    [
        (REF.model_copy(update={"version_id": "v2"}), None),
        (REF.model_copy(update={"version_id": None}), None),
        (REF.model_copy(update={"version_id": None, "etag": "def"}), None),
        (REF.model_copy(update={"bucket": "config-2"}), None),
        (REF.model_copy(update={"key": "runs/team/bert-large-phase1.yaml"}), None),
        (REF.model_copy(update={"key": "runs/bert-large-phase1.yml"}), None),
        (REF, "2026-03-01T02:00:00Z"),
    ],
    ids=["version", "no-version", "etag-when-unversioned", "bucket", "key", "suffix", "occurrence"],
)
def test_a_different_identity_gets_a_different_run_id(other: RunFileRef, occurrence: str | None) -> None:
    assert run_id_for(other, occurrence) != run_id_for(REF)


def test_a_version_names_the_object_whatever_the_event_says_of_its_etag() -> None:
    # A submitter knows the version from PutObject; moto's S3 events carry no etag at all.
    assert run_id_for(REF.model_copy(update={"etag": None})) == run_id_for(REF)


def test_each_schedule_occurrence_gets_its_own_run_id() -> None:
    assert run_id_for(REF, "2026-03-01T02:00:00Z") != run_id_for(REF, "2026-03-02T02:00:00Z")


@pytest.mark.parametrize(
    ("key", "prefix"),
    [
        ("runs/BERT Large.yaml", "bert-large-"),
        ("runs/2026-03-01.yaml", "run-2026-03-01-"),
        ("runs/.yaml", "run-"),
        ("runs/---.yml", "run-"),
        ("runs/日本語.yaml", "run-"),
        ("runs/a.b.c.yaml", "a-b-c-"),
    ],
)
def test_an_awkward_name_is_made_readable(key: str, prefix: str) -> None:
    run_id = run_id_for(RunFileRef(bucket="config", key=key))
    assert run_id.startswith(prefix)
    assert re.fullmatch(RUN_ID_PATTERN, run_id)


keys = st.one_of(
    st.text(max_size=300),
    st.builds(lambda s: f"runs/{s}.yaml", st.text(max_size=1024)),
    st.builds(lambda d, s: f"runs/{d}{s}.yml", st.integers(min_value=0), st.text(alphabet="._-", max_size=5)),
    st.builds(lambda s: f"runs/{s}.yaml", st.text(alphabet=st.characters(codec="utf-8"), min_size=200)),
)


@given(
    bucket=st.from_regex(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", fullmatch=True),
    key=keys,
    version_id=st.none() | st.text(max_size=64),
    etag=st.none() | st.text(alphabet="0123456789abcdef-", max_size=40),
    occurrence=st.none() | st.text(max_size=64),
)
def test_every_run_id_is_a_valid_execution_name(
    bucket: str, key: str, version_id: str | None, etag: str | None, occurrence: str | None
) -> None:
    ref = RunFileRef(bucket=bucket, key=key, version_id=version_id, etag=etag)
    run_id = run_id_for(ref, occurrence)
    assert re.fullmatch(RUN_ID_PATTERN, run_id)
    # Python's `$` also matches before a trailing newline; an execution name never has one.
    assert "\n" not in run_id


# --- execution_arn_for ----------------------------------------------------------------------------


def test_the_execution_arn_is_the_state_machine_arn_with_the_execution_name() -> None:
    assert (
        execution_arn_for(STATE_MACHINE, "bert-0123456789ab")
        == "arn:aws:states:us-west-2:123456789012:execution:trainrun-run:bert-0123456789ab"
    )


def test_the_execution_arn_keeps_the_partition() -> None:
    arn = "arn:aws-cn:states:cn-north-1:123456789012:stateMachine:run"
    assert execution_arn_for(arn, "x") == "arn:aws-cn:states:cn-north-1:123456789012:execution:run:x"


# --- start_run ------------------------------------------------------------------------------------


def test_start_run_starts_one_execution_named_for_the_run(sfn: Any, state_machine_arn: str) -> None:
    # When a run file's upload is handled
    decision = start_run(sfn, state_machine_arn, REF)
    # Then one execution is started, named by the run id, with the run file as input
    assert decision.started is True
    assert decision.run_id == run_id_for(REF)
    assert decision.execution_arn == execution_arn_for(state_machine_arn, run_id_for(REF))
    execution = sfn.describe_execution(executionArn=decision.execution_arn)
    assert json.loads(execution["input"]) == {"run_id": decision.run_id, "run_file": REF.model_dump(mode="json")}
    assert len(sfn.list_executions(stateMachineArn=state_machine_arn)["executions"]) == 1


def test_a_duplicate_event_does_not_start_a_second_execution(sfn: Any, state_machine_arn: str) -> None:
    # Given the run already started from the first delivery of the event
    first = start_run(sfn, state_machine_arn, REF)
    # When the same event is delivered again
    again = start_run(sfn, state_machine_arn, REF)
    # Then nothing new starts and the decision says why
    assert again.started is False
    assert again.reason.startswith("duplicate")
    assert (again.run_id, again.execution_arn) == (first.run_id, first.execution_arn)
    assert len(sfn.list_executions(stateMachineArn=state_machine_arn)["executions"]) == 1


def test_a_new_version_of_the_run_file_starts_a_new_run(sfn: Any, state_machine_arn: str) -> None:
    start_run(sfn, state_machine_arn, REF)
    decision = start_run(sfn, state_machine_arn, REF.model_copy(update={"version_id": "v2", "etag": "def"}))
    assert decision.started is True
    assert len(sfn.list_executions(stateMachineArn=state_machine_arn)["executions"]) == 2


def test_a_start_that_races_another_is_a_duplicate() -> None:
    # Given the execution did not exist when asked, but another start created it just after
    sfn = Mock()
    sfn.exceptions.ExecutionDoesNotExist = type("ExecutionDoesNotExist", (Exception,), {})
    sfn.exceptions.ExecutionAlreadyExists = type("ExecutionAlreadyExists", (Exception,), {})
    sfn.describe_execution.side_effect = sfn.exceptions.ExecutionDoesNotExist()
    sfn.start_execution.side_effect = sfn.exceptions.ExecutionAlreadyExists()
    # When this start is refused
    decision = start_run(sfn, STATE_MACHINE, REF)
    # Then it is reported as a duplicate, not an error
    assert decision.started is False and decision.reason.startswith("duplicate")


def test_a_key_that_is_not_a_run_file_is_ignored_without_calling_step_functions() -> None:
    # Given a Step Functions client that must not be called
    sfn = Mock(spec=[])
    # When an upload outside runs/ is handled
    decision = start_run(sfn, STATE_MACHINE, RunFileRef(bucket="config", key="notes/readme.md"))
    # Then it is ignored, with the reason
    assert decision.started is False
    assert decision.run_id is None and decision.execution_arn is None
    assert decision.reason.startswith("ignored")
    assert decision.run_file == "s3://config/notes/readme.md"


def test_a_run_id_is_told_from_a_run_name_by_its_digest() -> None:
    # `trainrun watch` waits for the record of a run id it does not find yet (a run just started),
    # and says at once that a name it does not find is no run
    run_id = run_id_for(RunFileRef(bucket="trainrun-config", key="runs/bert.yaml", version_id="v1"))
    assert looks_like_run_id(run_id)
    assert not looks_like_run_id("bert")
    assert not looks_like_run_id("bert-large-phase1")
    assert not looks_like_run_id("Bert-0123456789ab")
