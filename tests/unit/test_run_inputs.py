"""What a run reads before its jobs start, looked up before anything is created (Load run spec,
`trainrun plan --check`): the S3 objects and prefixes, and a git source's ref."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainrun.adapters.s3_inputs import look_up
from trainrun.errors import RunSpecInvalid
from trainrun.logic.run_inputs import Lookup, RunInput, run_inputs
from trainrun.model.findings import Code, Severity
from trainrun.model.run_file import parse_run_file
from trainrun.model.run_record import RunStore
from trainrun.ops.git_source import git_source_findings
from trainrun.steps.run import load_run_spec

from .conftest import EXAMPLE_ALLOW_LISTS, moto_run_events
from .test_steps import RUN_ID, SINGLE_NODE, request_for, upload

DATA = "my-trainrun-data"


def with_workload(**fields: Any) -> str:
    document = yaml.safe_load(SINGLE_NODE)
    document["workload"].update(fields)
    return yaml.safe_dump(document)


def load(s3: Any, store: RunStore, text: str, config_bucket: str) -> None:
    load_run_spec(
        s3,
        store,
        request_for(upload(s3, config_bucket, text)),
        job_heartbeat_seconds=600,
        allowed=EXAMPLE_ALLOW_LISTS,
        run_events=moto_run_events(),
    )


# --- Load run spec ------------------------------------------------------------------------------


def test_load_run_spec_rejects_a_missing_dataset_object_naming_the_field_and_the_fix(
    s3: Any, config_bucket: str, store: RunStore
) -> None:
    # Given a run whose dataset object is not in its (allowed) bucket
    missing = "s3://my-trainrun-data/datasets/missing.tar"
    text = with_workload(dataset={"source": missing, "path": "/fsx/data"})
    # When Load run spec runs
    with pytest.raises(RunSpecInvalid, match=r"missing\.tar does not exist"):
        load(s3, store, text, config_bucket)
    # Then the run is rejected with the finding and its fix, found by its name, with no spec kept
    record = store.get(RUN_ID)
    assert record is not None and record.spec is None and record.name == "single-node"
    [finding] = record.findings
    assert (finding.code, finding.severity) == (Code.S3_INPUT_NOT_FOUND, Severity.ERROR)
    assert finding.message.startswith(f"workload.dataset.source: {missing} does not exist")
    assert f"aws s3 cp FILE {missing}" in finding.message


def test_load_run_spec_rejects_a_dataset_prefix_that_holds_no_object(
    s3: Any, config_bucket: str, store: RunStore
) -> None:
    text = with_workload(dataset={"source": "s3://my-trainrun-data/empty/", "path": "/fsx/data"})
    with pytest.raises(RunSpecInvalid, match="holds no object"):
        load(s3, store, text, config_bucket)


def test_load_run_spec_accepts_a_dataset_prefix_with_objects_under_it(
    s3: Any, config_bucket: str, store: RunStore
) -> None:
    s3.put_object(Bucket=DATA, Key="shards/part-0", Body=b"x")
    load(s3, store, with_workload(dataset={"source": f"s3://{DATA}/shards/", "path": "/fsx/data"}), config_bucket)
    record = store.get(RUN_ID)
    assert record is not None and record.spec is not None


def test_load_run_spec_rejects_a_missing_workload_archive_and_empty_checkpoints_together(
    s3: Any, config_bucket: str, store: RunStore
) -> None:
    # Given a run whose workload archive is not there, resuming from a prefix with no checkpoint
    text = with_workload(
        source={"s3": "s3://trainrun-examples/gone.tar.gz"}, resume_from=f"s3://{DATA}/checkpoints/run-1/"
    )
    with pytest.raises(RunSpecInvalid):
        load(s3, store, text, config_bucket)
    # Then both are findings of the one rejection, each naming its field
    record = store.get(RUN_ID)
    assert record is not None
    assert [finding.message.split(":")[0] for finding in record.findings] == [
        "workload.source.s3",
        "workload.resume_from",
    ]


def test_a_run_file_rejected_as_invalid_is_still_found_by_its_name(
    s3: Any, config_bucket: str, store: RunStore
) -> None:
    # Given a run file with a valid name but an invalid field
    text = SINGLE_NODE.replace("nodes: 1", "nodes: 0")
    with pytest.raises(RunSpecInvalid):
        load(s3, store, text, config_bucket)
    # Then its record carries the name, so that `trainrun status single-node` finds it
    record = store.get(RUN_ID)
    assert record is not None and record.name == "single-node"


# --- looking an object up -------------------------------------------------------------------------


def test_an_object_is_found_only_under_its_own_key_not_a_longer_one(s3: Any, config_bucket: str) -> None:
    # Given only data.tar.gz in the bucket
    s3.put_object(Bucket=DATA, Key="data.tar.gz", Body=b"x")
    # Then data.tar is missing, though a key begins with it, and data.tar.gz is found
    assert look_up(s3, RunInput(field="f", uri=f"s3://{DATA}/data.tar", prefix=False)) == Lookup.MISSING
    assert look_up(s3, RunInput(field="f", uri=f"s3://{DATA}/data.tar.gz", prefix=False)) == Lookup.FOUND


def test_a_bucket_that_does_not_exist_is_missing(s3: Any) -> None:
    assert look_up(s3, RunInput(field="f", uri="s3://no-such-bucket-here/x.tar", prefix=False)) == Lookup.MISSING


def test_only_inputs_in_allowed_buckets_are_looked_up() -> None:
    # Given a dataset in a bucket the stack does not allow (BUCKET_NOT_ALLOWED says so)
    spec = parse_run_file(with_workload(dataset={"source": "s3://team-data/x.tar", "path": "/fsx/data"}))
    # Then only the workload archive, in an allowed bucket, is looked up
    assert [item.field for item in run_inputs(spec, EXAMPLE_ALLOW_LISTS)] == ["workload.source.s3"]


# --- a git source (plan --check) ------------------------------------------------------------------

URL = "https://git.example.test/team/train.git"


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository with branch main and tag v1, that git reaches at URL (url.<base>.insteadOf)."""
    bare = tmp_path / "train.git"
    work = tmp_path / "work"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.test"]
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    subprocess.run([*git, "-C", str(work), "commit", "-q", "--allow-empty", "-m", "one"], check=True)
    subprocess.run([*git, "-C", str(work), "tag", "v1"], check=True)
    subprocess.run(["git", "-C", str(work), "push", "-q", str(bare), "main", "v1"], check=True)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", f"url.file://{tmp_path}/.insteadOf")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "https://git.example.test/team/")
    return bare


def git_spec(url: str, ref: str | None) -> Any:
    return parse_run_file(with_workload(source={"git": url, **({"ref": ref} if ref else {})}))


@pytest.mark.parametrize("ref", ["main", "v1", None])
def test_a_branch_a_tag_or_the_default_branch_that_exists_is_no_finding(served: Path, ref: str | None) -> None:
    assert git_source_findings(git_spec(URL, ref)) == []


def test_a_ref_the_repository_does_not_have_is_an_error_naming_its_branches(served: Path) -> None:
    [finding] = git_source_findings(git_spec(URL, "release-2"))
    assert (finding.code, finding.severity) == (Code.GIT_REF_NOT_FOUND, Severity.ERROR)
    assert finding.message == (
        f"workload.source.ref: {URL} has no branch or tag 'release-2'; push it, or name one of its branches "
        "(now: main) or tags, or a commit id"
    )


def test_a_repository_that_is_not_there_is_an_error_with_the_fix(served: Path) -> None:
    [finding] = git_source_findings(git_spec("https://git.example.test/team/gone.git", "main"))
    assert (finding.code, finding.severity) == (Code.GIT_SOURCE_UNREACHABLE, Severity.ERROR)
    assert "cannot be read without credentials" in finding.message and "workload.source.path" in finding.message


def test_a_server_that_cannot_be_reached_is_not_checked_rather_than_blamed() -> None:
    # Given no network (unit tests refuse sockets; git's own resolver fails the same way offline)
    def unreachable(url: str) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess([], 128, "", f"fatal: unable to access '{url}': Could not resolve host")

    [finding] = git_source_findings(git_spec(URL, "main"), run=unreachable)
    assert (finding.code, finding.severity) == (Code.GIT_SOURCE_NOT_CHECKED, Severity.INFO)


@pytest.mark.parametrize(
    ("url", "ref"), [("git@github.com:team/train.git", "main"), (URL, "0123abcd")], ids=["ssh", "commit"]
)
def test_an_ssh_url_or_a_commit_id_is_not_checked(url: str, ref: str) -> None:
    [finding] = git_source_findings(git_spec(url, ref), run=lambda _: pytest.fail("nothing to ask"))
    assert (finding.code, finding.severity) == (Code.GIT_SOURCE_NOT_CHECKED, Severity.INFO)
