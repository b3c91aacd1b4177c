"""`cluster: {reuse: RUN}`: the run file's checks, which runs can lend their cluster and what fits
it, Validate capacity recording it as borrowed, and a borrower's teardown and cost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from trainrun.errors import RunSpecInvalid
from trainrun.logic.cluster_reuse import borrowers, lender, reuse_findings
from trainrun.model.end_marker import new_end_key
from trainrun.model.findings import Code, Severity
from trainrun.model.jobs import JobProgress, JobRecord
from trainrun.model.resources import ClusterRef, NetworkIds, StorageIds
from trainrun.model.run_file import Cluster, RunSpec, parse_run_file
from trainrun.model.run_record import Billed, Borrowed, RunFileRef, RunRecord, RunStatus, RunStore
from trainrun.ops.runs import cost_so_far
from trainrun.ops.views import created_resources
from trainrun.steps.head_node import JobsNotStopped
from trainrun.steps.provisioning import TeardownInput, tear_down
from trainrun.steps.run import RunRef, load_run, validate_capacity

from .conftest import moto_run_events
from .test_steps import LEADS

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
OWNER_ID = "owner-0123456789ab"
BORROWER_ID = "borrower-0123456789ab"
OWNER = """\
name: owner
region: us-west-2
capacity:
  reservation_id: cr-0123456789abcdef0
  instance_type: trn1.32xlarge
  nodes: 2
  availability_zone: us-west-2d
storage:
  fsx:
    deployment_type: SCRATCH_2
cluster:
  os: ubuntu2404
workload:
  source:
    s3: s3://trainrun-examples/local-workload.tar.gz
  train: python3 train.py
teardown:
  on_success: keep
"""


def reusing(reference: str = "owner", **capacity: Any) -> str:
    """The owner's run file, made to reuse its cluster: its name, network, storage and cluster removed."""
    document = yaml.safe_load(OWNER)
    document["name"] = "owner"  # a copied run file keeps its name: the lender is still found
    del document["storage"], document["teardown"]
    document["cluster"] = {"reuse": reference}
    document["capacity"].update(capacity)
    return yaml.safe_dump(document, sort_keys=False)


def owner_record(**changes: Any) -> RunRecord:
    """The owner run, ended SUCCEEDED with its cluster kept."""
    record = RunRecord(
        run_id=OWNER_ID,
        name="owner",
        status=RunStatus.SUCCEEDED,
        run_file=RunFileRef(bucket="config", key="runs/owner.yaml"),
        spec=parse_run_file(OWNER),
        availability_zone="us-west-2d",
        network=NetworkIds(vpc_id="vpc-0123456789abcdef0", nat_gateway_id="nat-1", security_group_id="sg-1"),
        storage=StorageIds(file_system_id="fs-0123456789abcdef0"),
        cluster=ClusterRef(name=f"trainrun-{OWNER_ID}", region="us-west-2", head_node_instance_id="i-0abc"),
        cluster_since=NOW - timedelta(hours=2),
        kept_at=NOW - timedelta(hours=1),
        created_at=NOW - timedelta(hours=3),
        updated_at=NOW - timedelta(hours=1),
        ended_at=NOW - timedelta(hours=1),
    )
    return record.model_copy(update=changes)


# --- the run file ---------------------------------------------------------------------------------


def test_a_run_file_that_reuses_a_cluster_names_only_the_run_and_reads_back_the_same() -> None:
    # Given a run file that reuses a cluster and describes none
    spec = parse_run_file(reusing())
    # Then it names the run, and its stored form reads back as the same spec (the cluster
    # section's defaults are not stored as if they were given)
    assert spec.cluster.reuse == "owner"
    assert spec.stored()["cluster"] == {"reuse": "owner"}
    assert RunSpec.model_validate(spec.stored()) == spec


def test_a_run_file_that_reuses_a_cluster_and_describes_one_gets_every_field_with_its_value_line_and_fix() -> None:
    # Given a run file copied from the owner's, with cluster.reuse added and nothing removed
    document = yaml.safe_load(OWNER)
    document["cluster"]["reuse"] = "owner"
    document["network"] = {"vpc_cidr": "10.1.0.0/16"}
    text = yaml.safe_dump(document, sort_keys=False)
    # When it is validated
    with pytest.raises(RunSpecInvalid) as invalid:
        parse_run_file(text)
    # Then each field that describes a cluster to create (or what a teardown keeps) is a problem
    # of its own, at its line, with its value and the fix
    problems = {problem.path: problem for problem in invalid.value.problems}
    assert set(problems) == {
        "network.vpc_cidr",
        "storage.fsx.deployment_type",
        "cluster.os",
        "teardown.on_success",
    }
    lines = text.splitlines()
    for field, problem in problems.items():
        assert problem.line is not None and lines[problem.line - 1].strip().startswith(field.split(".")[-1] + ":")
        assert "remove it" in problem.message, problem.message
    assert "'10.1.0.0/16'" in problems["network.vpc_cidr"].message
    assert "'ubuntu2404'" in problems["cluster.os"].message
    assert "`trainrun down owner`" in problems["teardown.on_success"].message


def test_reusing_a_cluster_with_a_head_node_type_or_custom_ami_given_is_refused_even_at_their_defaults() -> None:
    # Given a run file that reuses a cluster and writes the head node type at its default value
    text = reusing().replace("  reuse: owner", "  reuse: owner\n  head_node_instance_type: c5.4xlarge")
    # Then it is refused: the head node is the one the kept cluster has, whatever the file says
    with pytest.raises(RunSpecInvalid) as invalid:
        parse_run_file(text)
    assert [problem.path for problem in invalid.value.problems] == ["cluster.head_node_instance_type"]


def test_a_reuse_that_is_no_run_name_or_id_says_what_one_looks_like() -> None:
    with pytest.raises(RunSpecInvalid) as invalid:
        parse_run_file(reusing("Owner_1"))
    [problem] = invalid.value.problems
    assert problem.path == "cluster.reuse"
    assert "'Owner_1' is not a run's name or run id" in problem.message and "e.g. bert-phase1" in problem.message


def test_the_plan_of_a_run_on_a_kept_cluster_creates_nothing() -> None:
    from trainrun.ops.plan import build_plan

    plan = build_plan(parse_run_file(reusing()))
    [resource] = plan.resources
    assert (resource.kind, resource.action) == ("cluster", "reuse")
    assert "`trainrun down owner`" in resource.detail
    assert any(note.startswith("cluster.reuse: ") and "billed to that run" in note for note in plan.cost.notes)


# --- who lends, and what fits ---------------------------------------------------------------------


def test_the_lender_is_the_run_of_that_id_else_the_latest_of_that_name_but_the_borrower_and_other_borrowers() -> None:
    # Given the owner, an older run of the same name, a borrower of the same name and the borrower itself
    older = owner_record(run_id="owner-older", created_at=NOW - timedelta(days=1))
    other_borrower = owner_record(
        run_id="owner-borrowed", created_at=NOW, borrowed=Borrowed(run_id=OWNER_ID, cluster=Cluster()), cluster=None
    )
    itself = owner_record(run_id=BORROWER_ID, created_at=NOW + timedelta(minutes=1), status=RunStatus.RUNNING)
    records = [older, owner_record(), other_borrower, itself]
    # Then the name means the latest run of that name that has a cluster of its own
    found = lender(records, "owner", borrower_id=BORROWER_ID)
    assert found is not None and found.run_id == OWNER_ID
    # And a run id means that run
    found = lender(records, "owner-older", borrower_id=BORROWER_ID)
    assert found is not None and found.run_id == "owner-older"
    # And nothing else is a lender
    assert lender(records, "nobody", borrower_id=BORROWER_ID) is None


@pytest.mark.parametrize(
    ("owner", "code", "says"),
    [
        (None, Code.REUSED_RUN_NOT_FOUND, "no run 'owner' in this stack"),
        ({"status": RunStatus.RUNNING, "kept_at": None}, Code.REUSED_RUN_STILL_RUNNING, "still running"),
        ({"down_requested_at": NOW}, Code.REUSED_CLUSTER_TORN_DOWN, "torn down (`trainrun down`"),
        ({"torn_down_at": NOW}, Code.REUSED_CLUSTER_TORN_DOWN, "run without cluster.reuse"),
        ({"status": RunStatus.REJECTED, "cluster": None}, Code.REUSED_RUN_HAS_NO_CLUSTER, "before it created"),
        (
            {"borrowed": Borrowed(run_id="first-owner", cluster=Cluster())},
            Code.REUSED_RUN_HAS_NO_CLUSTER,
            "set cluster.reuse: first-owner",
        ),
        ({"kept_at": None}, Code.REUSED_RUN_NOT_KEPT, "teardown deleted its cluster"),
        # keep_file_system keeps the file system (and records it kept) but deletes the cluster
        ({"status": RunStatus.FAILED}, Code.REUSED_RUN_NOT_KEPT, "on_failure: delete"),
    ],
)
def test_a_run_whose_cluster_cannot_be_lent_is_rejected_saying_why(
    owner: dict[str, Any] | None, code: Code, says: str
) -> None:
    # Given the owner in that state
    record = None if owner is None else owner_record(**owner)
    # When a run that reuses its cluster is checked against it
    findings = reuse_findings(parse_run_file(reusing()), record)
    # Then one ERROR says why, and what to do
    [finding] = findings
    assert (finding.code, finding.severity) == (code, Severity.ERROR)
    assert says in finding.message, finding.message


@pytest.mark.parametrize(
    ("capacity", "says"),
    [
        ({"instance_type": "trn1n.32xlarge"}, "set instance_type: trn1.32xlarge"),
        ({"nodes": 3}, "set nodes: 2 or fewer"),
        ({"reservation_id": "cr-0123456789abcdef1"}, "name the same reservation"),
        ({"availability_zone": "us-west-2a"}, "is in us-west-2d"),
    ],
)
def test_a_run_that_does_not_fit_the_kept_cluster_is_rejected_with_the_value_that_fits(
    capacity: dict[str, Any], says: str
) -> None:
    findings = reuse_findings(parse_run_file(reusing(**capacity)), owner_record())
    [finding] = findings
    assert (finding.code, finding.severity) == (Code.REUSED_CLUSTER_DOES_NOT_FIT, Severity.ERROR)
    assert says in finding.message, finding.message


def test_a_run_that_fits_on_fewer_nodes_is_told_whose_cluster_it_runs_on() -> None:
    [finding] = reuse_findings(parse_run_file(reusing(nodes=1)), owner_record())
    assert (finding.code, finding.severity) == (Code.CLUSTER_REUSED, Severity.INFO)
    assert f"trainrun-{OWNER_ID}" in finding.message and f"`trainrun down {OWNER_ID}`" in finding.message


def reusing_with(**workload: Any) -> RunSpec:
    """The reusing run file with workload fields added or replaced."""
    document = yaml.safe_load(reusing())
    document["workload"].update(workload)
    return parse_run_file(yaml.safe_dump(document))


def test_a_run_with_new_code_and_env_fits_the_kept_cluster() -> None:
    # Given a run on the kept cluster with another archive, another setup and another env
    spec = reusing_with(source={"s3": "s3://trainrun-examples/v2.tar.gz"}, setup="pip install x", env={"A": "b"})
    # When its fit is checked
    [finding] = reuse_findings(spec, owner_record())
    # Then it fits: Prepare head node copies its archive to where the cluster reads it
    assert finding.code == Code.CLUSTER_REUSED


@pytest.mark.parametrize(
    ("workload", "says"),
    [
        (
            {"dataset": {"source": "s3://trainrun-examples/data.tar", "path": "/fsx/data"}},
            "workload.dataset.source: s3://trainrun-examples/data.tar, but run owner (owner-0123456789ab)'s cluster "
            "reads only what run owner (owner-0123456789ab) named (none;",
        ),
        ({"resume_from": "s3://trainrun-examples/checkpoints/x/"}, "workload.resume_from: s3://trainrun-examples/"),
        ({"compile_cache": "s3://trainrun-examples/cache/"}, "set none (the default) or off"),
    ],
    ids=["dataset", "resume_from", "compile_cache"],
)
def test_a_run_that_reads_what_the_kept_clusters_roles_cannot_is_rejected_before_it_starts(
    workload: dict[str, Any], says: str
) -> None:
    # Given a run on the kept cluster that reads from S3 what the owner's nodes' roles do not grant
    # When its fit is checked
    [finding] = reuse_findings(reusing_with(**workload), owner_record())
    # Then it is rejected, saying what the cluster reads
    assert (finding.code, finding.severity) == (Code.REUSED_CLUSTER_DOES_NOT_FIT, Severity.ERROR)
    assert says in finding.message, finding.message


def test_a_run_that_stages_a_dataset_under_the_owners_dataset_prefix_fits() -> None:
    # Given an owner that staged a dataset prefix (its head node lists and reads that whole bucket)
    document = yaml.safe_load(OWNER)
    document["workload"]["dataset"] = {"source": "s3://trainrun-examples/data/", "path": "/fsx/data"}
    owner = owner_record(spec=parse_run_file(yaml.safe_dump(document)))
    # When a run on its cluster stages another object of that bucket
    spec = reusing_with(dataset={"source": "s3://trainrun-examples/other/part-1.tar", "path": "/fsx/other"})
    # Then it fits
    [finding] = reuse_findings(spec, owner)
    assert finding.code == Code.CLUSTER_REUSED


def test_the_borrowers_of_a_cluster_are_the_running_runs_that_borrowed_it_or_name_it() -> None:
    spec = parse_run_file(reusing())
    owner = owner_record()
    checked = owner_record(
        run_id="checked", status=RunStatus.RUNNING, borrowed=Borrowed(run_id=OWNER_ID, cluster=Cluster())
    )
    unchecked = owner_record(run_id="unchecked", status=RunStatus.RUNNING, spec=spec)
    ended = checked.model_copy(update={"run_id": "ended", "status": RunStatus.SUCCEEDED})
    elsewhere = owner_record(run_id="elsewhere", status=RunStatus.RUNNING)
    found = borrowers([owner, checked, unchecked, ended, elsewhere], owner)
    assert [record.run_id for record in found] == ["checked", "unchecked"]


# --- the steps, against the runs table --------------------------------------------------------------


def borrower_loaded(store: RunStore, text: str) -> RunRef:
    """The borrower's record as Load run spec leaves it (the run file read and validated)."""
    store.create(
        RunRecord(
            run_id=BORROWER_ID,
            run_file=RunFileRef(bucket="config", key="runs/borrower.yaml"),
            created_at=NOW,
            updated_at=NOW,
        )
    )
    store.set_spec(BORROWER_ID, parse_run_file(text))
    return RunRef(run_id=BORROWER_ID)


def test_validate_capacity_records_the_kept_cluster_as_borrowed_and_bills_none_of_it(store: RunStore) -> None:
    # Given the owner's record, kept, and a run that reuses its cluster by name
    store.create(owner_record())
    run = borrower_loaded(store, reusing())
    # When its capacity is validated (no EC2 client: the reservation is not looked at)
    verdict = validate_capacity(None, None, store, run, stack_region="us-west-2", now=NOW, leads=LEADS)
    # Then it is accepted in the owner's zone, on the owner's cluster, file system and network, borrowed
    assert verdict.accepted is True and verdict.availability_zone == "us-west-2d"
    record, spec = load_run(store, BORROWER_ID)
    assert record.borrowed is not None and record.borrowed.run_id == OWNER_ID
    assert record.cluster is not None and record.cluster.name == f"trainrun-{OWNER_ID}"
    assert record.cluster.head_node_instance_id == "i-0abc"
    assert record.storage is not None and not record.storage.created
    assert record.network is not None and not record.network.created
    # And nothing of it bills to the run, nor counts as created by it
    assert all(record.billed_since(billed) is None for billed in Billed)
    assert created_resources(record) == []
    cost = cost_so_far(record, record.spec, NOW, billing=False)
    assert cost is not None and (cost.so_far, cost.per_hour) == (0, 0)
    # And its scripts run as the kept cluster was made (the owner's OS)
    assert spec.cluster.os == "ubuntu2404" and spec.cluster.reuse == "owner"


def test_validate_capacity_rejects_a_reuse_of_a_run_that_does_not_exist_and_records_nothing_borrowed(
    store: RunStore,
) -> None:
    run = borrower_loaded(store, reusing("nobody"))
    verdict = validate_capacity(None, None, store, run, stack_region="us-west-2", now=NOW, leads=LEADS)
    assert verdict.accepted is False
    assert [finding.code for finding in verdict.findings] == [Code.REUSED_RUN_NOT_FOUND]
    record = store.get(BORROWER_ID)
    assert record is not None and record.findings == verdict.findings
    assert (record.borrowed, record.cluster, record.network, record.storage) == (None, None, None, None)


class NoClusterApi:
    """A ParallelCluster API that must not be called: a borrower's teardown leaves the cluster alone."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the borrower's teardown called the ParallelCluster API's {name}")


class RecordingSsm:
    """SendCommand / GetCommandInvocation: every command sent is kept, and answers `status`."""

    def __init__(self, status: str = "Success", stderr: str = "") -> None:
        self.sent: list[tuple[list[str], str]] = []
        self.status, self.stderr = status, stderr

    def send_command(self, **kwargs: Any) -> dict[str, Any]:
        self.sent.append((kwargs["InstanceIds"], kwargs["Parameters"]["commands"][0]))
        return {"Command": {"CommandId": f"command-{len(self.sent)}"}}

    def get_command_invocation(self, **kwargs: Any) -> dict[str, Any]:
        code = 0 if self.status == "Success" else 1
        stdout = f"TRAINRUN-JOBS-STOPPED run={BORROWER_ID}\n" if code == 0 else ""
        return {
            "Status": self.status,
            "ResponseCode": code,
            "StandardOutputContent": stdout,
            "StandardErrorContent": self.stderr,
        }


def borrower_ended(store: RunStore, *, train_exit_code: int | None) -> None:
    """A run that borrowed the owner's cluster, submitted its train job, and ended CANCELLED; the
    job's end marker arrived (`train_exit_code`) or not."""
    store.create(owner_record())
    run = borrower_loaded(store, reusing())
    validate_capacity(None, None, store, run, stack_region="us-west-2", now=NOW, leads=LEADS)
    store.set_job(BORROWER_ID, "train", JobRecord(command_id="c-1", slurm_job_id=7, state="SUBMITTED"))
    if train_exit_code is not None:
        store.put_progress(BORROWER_ID, "train", JobProgress(exit_code=train_exit_code), 0)
    store.finish(BORROWER_ID, RunStatus.CANCELLED)


def borrower_teardown(store: RunStore, ssm: Any) -> Any:
    return tear_down(
        None,
        None,
        NoClusterApi(),
        store,
        TeardownInput(run_id=BORROWER_ID),
        region="us-west-2",
        poll_seconds=1,
        run_events=moto_run_events(),
        metrics=None,
        ssm=ssm,
        config_bucket="trainrun-config-test",
    )


def test_a_borrowers_teardown_stops_a_job_it_left_running_on_the_kept_cluster(store: RunStore) -> None:
    # Given a borrower cancelled while its train job ran (no end marker came)
    borrower_ended(store, train_exit_code=None)
    ssm = RecordingSsm()
    # When it is torn down
    progress = borrower_teardown(store, ssm)
    # Then its jobs (by their Slurm names) were cancelled on the owner's head node, and it is torn down
    [(instances, script)] = ssm.sent
    assert instances == ["i-0abc"]
    assert script.startswith(f"# trainrun: stop the jobs of run {BORROWER_ID}.")
    assert f"trainrun-{BORROWER_ID}-train" in script and f"trainrun-{BORROWER_ID}-compile" in script
    assert progress.done
    record = store.get(BORROWER_ID)
    assert record is not None and record.torn_down_at is not None


def test_a_borrowers_teardown_stops_the_train_job_queued_behind_its_ended_compile(store: RunStore) -> None:
    # Given a borrower cancelled after its compile job succeeded, before the Train state recorded
    # the train job compile's submission queued behind it (only its end key is kept)
    store.create(owner_record())
    run = borrower_loaded(store, reusing())
    validate_capacity(None, None, store, run, stack_region="us-west-2", now=NOW, leads=LEADS)
    store.set_job(BORROWER_ID, "compile", JobRecord(command_id="c-1", slurm_job_id=7, state="SUCCEEDED"))
    store.set_job(BORROWER_ID, "train", JobRecord(end_key=new_end_key()))
    store.finish(BORROWER_ID, RunStatus.CANCELLED)
    ssm = RecordingSsm()
    # When it is torn down
    borrower_teardown(store, ssm)
    # Then its jobs are cancelled on the kept cluster: that train job may be running there
    [(_, script)] = ssm.sent
    assert script.startswith(f"# trainrun: stop the jobs of run {BORROWER_ID}.")


def test_a_borrowers_teardown_that_cannot_stop_its_job_fails_saying_why(store: RunStore) -> None:
    borrower_ended(store, train_exit_code=None)
    ssm = RecordingSsm(status="Failed", stderr="TRAINRUN-ERROR jobs of run x still pending or running after scancel: 7")
    with pytest.raises(JobsNotStopped, match="still pending or running after scancel: 7"):
        borrower_teardown(store, ssm)
    record = store.get(BORROWER_ID)
    assert record is not None and record.torn_down_at is None


@pytest.mark.parametrize(
    ("train_exit_code", "owner_since"),
    [
        (0, None),  # the job's end marker came: it has ended
        (None, RunStore.mark_torn_down),  # the owner's teardown deleted the cluster, and the job with it
        (None, RunStore.request_down),  # it is deleting it
    ],
)
def test_a_borrowers_teardown_sends_nothing_when_no_job_of_it_can_still_run(
    store: RunStore, train_exit_code: int | None, owner_since: Any
) -> None:
    borrower_ended(store, train_exit_code=train_exit_code)
    if owner_since is not None:
        owner_since(store, OWNER_ID)
    ssm = RecordingSsm()
    progress = borrower_teardown(store, ssm)
    assert ssm.sent == [] and progress.done


def test_a_borrowers_teardown_deletes_nothing_of_the_kept_cluster_and_records_it_torn_down(store: RunStore) -> None:
    # Given a run that borrowed the owner's cluster, ended
    store.create(owner_record())
    run = borrower_loaded(store, reusing())
    validate_capacity(None, None, store, run, stack_region="us-west-2", now=NOW, leads=LEADS)
    store.finish(BORROWER_ID, RunStatus.SUCCEEDED)
    # When it is torn down (no EC2 or FSx client either: nothing is looked for to delete)
    progress = tear_down(
        None,
        None,
        NoClusterApi(),
        store,
        TeardownInput(run_id=BORROWER_ID, delete_kept=True),
        region="us-west-2",
        poll_seconds=1,
        run_events=moto_run_events(),
        metrics=None,
        ssm=None,
        config_bucket="trainrun-config-test",
    )
    # Then it is done, deleted nothing, and the run is recorded torn down; the owner's record is untouched
    assert progress.done and progress.deleted == []
    record = store.get(BORROWER_ID)
    assert record is not None and record.torn_down_at is not None
    owner = store.get(OWNER_ID)
    assert owner is not None and owner.torn_down_at is None and owner.kept_at is not None
