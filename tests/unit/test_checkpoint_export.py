"""Checkpoints that outlive teardown: the export that Tear down makes before the cluster goes
(trainrun.steps.checkpoints), against moto, the FSx emulator, the fake ParallelCluster API and a
fake SSM that plays the head node's export command."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from trainrun.adapters.pcluster import PclusterApiError
from trainrun.model.checkpoints import CheckpointExport, ExportStatus
from trainrun.model.findings import Code, Severity
from trainrun.model.jobs import JobRecord
from trainrun.model.resources import ClusterRef, StorageIds
from trainrun.model.run_record import RunStore, utcnow
from trainrun.steps import checkpoints
from trainrun.steps.head_node import SHORT_COMMAND_SECONDS
from trainrun.steps.provisioning import TeardownInput

from .conftest import CONFIG_BUCKET, REGION
from .test_provisioning import (
    CLUSTER,
    FAILED,
    RUN,
    FakePclusterApi,
    file_system_lifecycle,
    provisioned,
    record,
    teardown_step,
    until_done,
)

HEAD_NODE = "i-0123456789abcdef0"
DESTINATION = f"s3://{CONFIG_BUCKET}/checkpoints/{RUN}/"


@dataclass
class FakeSsm:
    """send_command and get_command_invocation as SSM answers them, for one script at a time:
    `answers` are the invocation's successive states (the last one stays)."""

    answers: list[dict[str, Any]] = field(
        default_factory=lambda: [
            {"Status": "InProgress"},
            {
                "Status": "Success",
                "ResponseCode": 0,
                "StandardOutputContent": "TRAINRUN-CHECKPOINTS exported files=2\n",
            },
        ]
    )
    refuse_send: bool = False
    sent: list[dict[str, Any]] = field(default_factory=list)

    def send_command(self, **request: Any) -> dict[str, Any]:
        if self.refuse_send:
            raise ClientError(
                {"Error": {"Code": "InvalidInstanceId", "Message": "Instances not in a valid state"}}, "SendCommand"
            )
        self.sent.append(request)
        return {"Command": {"CommandId": f"command-{len(self.sent)}"}}

    def get_command_invocation(self, *, CommandId: str, InstanceId: str) -> dict[str, Any]:
        assert InstanceId == HEAD_NODE
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if answer.get("Throttle"):
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "GetCommandInvocation"
            )
        return {"CommandId": CommandId, "ResponseCode": -1, **answer}


@pytest.fixture
def api() -> FakePclusterApi:
    return FakePclusterApi()


@pytest.fixture(autouse=True)
def one_check_per_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each teardown pass looks at the copy once (the wait within a pass has its own test)."""
    monkeypatch.setattr(checkpoints, "PASS_WAIT_SECONDS", 0)


def trained(ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore, **sections: Any) -> str:
    """A provisioned run whose head node is recorded and whose train job ran; its file system id."""
    file_system_id = provisioned(ec2, fsx, api, store, **sections).file_system_id
    store.set_cluster(
        RUN, ClusterRef(name=CLUSTER, region=REGION, status="CREATE_COMPLETE", head_node_instance_id=HEAD_NODE)
    )
    store.set_job(RUN, "train", JobRecord(slurm_job_id=7, state="FAILED"))
    return file_system_id


def exported(store: RunStore) -> CheckpointExport:
    export = record(store).checkpoints
    assert export is not None
    return export


def test_teardown_exports_the_checkpoints_before_it_deletes_the_cluster(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given a run whose training failed, with its checkpoints on the file system it created
    trained(ec2, fsx, api, store)
    running, done = FakeSsm().answers
    ssm = FakeSsm(answers=[running, running, done])
    # When teardown makes its first two passes (the copy still running)
    first = teardown_step(ec2, fsx, api, store, FAILED, ssm=ssm)
    second = teardown_step(ec2, fsx, api, store, FAILED, ssm=ssm)
    # Then the head node was asked once to copy the directory to the run's prefix of the config bucket
    (request,) = ssm.sent
    assert request["InstanceIds"] == [HEAD_NODE]
    script = request["Parameters"]["commands"][0]
    assert f"destination={DESTINATION}\n" in script and f"checkpoint_dir=/fsx/trainrun/{RUN}/checkpoints\n" in script
    # And both passes wait on the export, with the cluster untouched
    assert not first.done and first.waiting_on == [f"checkpoint export to {DESTINATION} (InProgress)"]
    assert second == first
    assert api.deleted == []
    # When the copy has ended, the next pass records where the checkpoints are and deletes the cluster
    teardown_step(ec2, fsx, api, store, FAILED, ssm=ssm)
    assert api.deleted == [CLUSTER]
    export = exported(store)
    assert (export.status, export.exported_to, export.files) == (ExportStatus.EXPORTED, DESTINATION, 2)
    assert export.summary() == f"exported to {DESTINATION} (2 files)"


def test_the_compute_nodes_are_terminated_before_the_export_starts(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given a run whose training ended, and a head node that notes what had been asked when asked to copy
    trained(ec2, fsx, api, store)
    ssm = FakeSsm()
    asked_when_sent: list[tuple[list[str], list[tuple[str, str | None]]]] = []
    send = ssm.send_command
    ssm.send_command = lambda **request: (  # type: ignore[method-assign]
        asked_when_sent.append((list(api.fleet_stopped), list(api.instances_deleted))),
        send(**request),
    )[1]
    # When teardown runs to its end
    until_done(lambda: teardown_step(ec2, fsx, api, store, FAILED, ssm=ssm))
    # Then, before the copy was asked for, the fleet was stopped and then its nodes terminated, once
    assert asked_when_sent == [([CLUSTER], [(CLUSTER, "STOP_REQUESTED")])]
    assert api.fleet_stopped == [CLUSTER] and api.instances_deleted == [(CLUSTER, "STOP_REQUESTED")]
    # And the cluster was deleted after the export
    assert api.deleted[0] == CLUSTER
    assert exported(store).status == ExportStatus.EXPORTED


def test_a_compute_fleet_that_cannot_be_stopped_keeps_neither_the_export_nor_the_teardown_from_going_on(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given a ParallelCluster API that refuses the stop
    trained(ec2, fsx, api, store)
    api.stop_error = PclusterApiError("Cannot stop/disable compute fleet while stack is in UPDATE_IN_PROGRESS status.")
    ssm = FakeSsm()
    # When teardown runs to its end
    until_done(lambda: teardown_step(ec2, fsx, api, store, FAILED, ssm=ssm))
    # Then the checkpoints were exported and the cluster deleted all the same (its nodes go with it);
    # no node was terminated behind a fleet still running (clustermgtd would replace it)
    assert exported(store).status == ExportStatus.EXPORTED
    assert CLUSTER in api.deleted
    assert api.instances_deleted == []


def test_the_compute_nodes_are_kept_under_a_job_that_may_still_run_until_the_export_ends(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given a run torn down while its train job was submitted and has not been seen to end
    trained(ec2, fsx, api, store)
    store.set_job(RUN, "train", JobRecord(slurm_job_id=7, command_id="command-0", state="SUBMITTED"))
    ssm = FakeSsm()
    released_when_sent: list[list[str]] = []
    send = ssm.send_command
    ssm.send_command = lambda **request: (released_when_sent.append(list(api.fleet_stopped)), send(**request))[1]  # type: ignore[method-assign]
    # When teardown runs to its end
    until_done(lambda: teardown_step(ec2, fsx, api, store, FAILED, ssm=ssm))
    # Then the nodes ran on through the export (the job may still write its checkpoints), and went
    # with the cluster's deletion: fleet stopped, nodes terminated, cluster deleted
    assert released_when_sent == [[]]
    assert exported(store).status == ExportStatus.EXPORTED
    assert api.fleet_stopped == [CLUSTER] and api.instances_deleted == [(CLUSTER, "STOP_REQUESTED")]
    assert api.deleted[0] == CLUSTER


def test_a_retried_teardown_does_not_export_again(ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore) -> None:
    # Given a run whose teardown exported its checkpoints and went on to the cluster
    trained(ec2, fsx, api, store)
    ssm = FakeSsm()
    until_done(lambda: teardown_step(ec2, fsx, api, store, FAILED, ssm=ssm), passes=20)
    before = exported(store)
    # When the safety net tears the run down again
    until_done(lambda: teardown_step(ec2, fsx, api, store, FAILED, ssm=ssm), passes=20)
    # Then it sent no second copy, and the record is unchanged
    assert len(ssm.sent) == 1
    assert exported(store) == before


def test_a_teardown_pass_that_finds_an_export_under_way_follows_it(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given another teardown pass that started the export (its command recorded) moments ago
    trained(ec2, fsx, api, store)
    store.start_checkpoint_export(
        RUN,
        CheckpointExport(
            status=ExportStatus.EXPORTING, destination=DESTINATION, command_id="command-0", started_at=utcnow()
        ),
    )
    ssm = FakeSsm()
    # When this teardown's passes run
    until_done(lambda: teardown_step(ec2, fsx, api, store, FAILED, ssm=ssm), passes=20)
    # Then they followed that command to its end and sent none of their own
    assert ssm.sent == []
    assert exported(store).status == ExportStatus.EXPORTED and exported(store).command_id == "command-0"


@pytest.mark.parametrize(
    ("ssm", "why"),
    [
        (
            FakeSsm(
                answers=[{"Status": "Failed", "ResponseCode": 1, "StandardErrorContent": "upload failed: AccessDenied"}]
            ),
            "the copy ended Failed: upload failed: AccessDenied",
        ),
        (FakeSsm(refuse_send=True), "the head node could not be asked to copy them"),
    ],
    ids=["copy-fails", "head-node-unreachable"],
)
def test_a_failed_export_is_a_warning_and_the_teardown_deletes_everything(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore, ssm: FakeSsm, why: str
) -> None:
    # Given a trained run whose export cannot succeed
    file_system_id = trained(ec2, fsx, api, store)
    # When it is torn down until done
    until_done(lambda: teardown_step(ec2, fsx, api, store, FAILED, ssm=ssm), passes=20)
    # Then everything billable is gone all the same
    assert api.deleted == [CLUSTER]
    assert file_system_lifecycle(fsx, file_system_id) is None
    assert record(store).torn_down_at is not None
    # And the record says the export failed, and why, as a WARNING finding too
    export = exported(store)
    assert export.status == ExportStatus.FAILED and export.exported_to is None and why in export.reason
    (finding,) = [f for f in record(store).findings if f.code == Code.CHECKPOINT_EXPORT_FAILED]
    assert finding.severity == Severity.WARNING and why in finding.message


def test_an_export_that_outlasts_its_time_is_given_up_and_the_teardown_goes_on(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given an export that started longer ago than it may take, and still runs
    trained(ec2, fsx, api, store)
    started = utcnow() - timedelta(seconds=checkpoints.EXPORT_TIMEOUT_SECONDS + 1)
    store.start_checkpoint_export(
        RUN,
        CheckpointExport(status=ExportStatus.EXPORTING, destination=DESTINATION, command_id="c-1", started_at=started),
    )
    # When teardown makes its next pass
    teardown_step(ec2, fsx, api, store, FAILED, ssm=FakeSsm(answers=[{"Status": "InProgress"}]))
    # Then the export is recorded FAILED and the cluster's deletion has begun
    assert exported(store).status == ExportStatus.FAILED and "still InProgress" in exported(store).reason
    assert api.deleted == [CLUSTER]


def test_an_empty_checkpoint_directory_is_skipped_and_said_so(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    trained(ec2, fsx, api, store)
    ssm = FakeSsm(
        answers=[{"Status": "Success", "ResponseCode": 0, "StandardOutputContent": "TRAINRUN-CHECKPOINTS none\n"}]
    )
    until_done(lambda: teardown_step(ec2, fsx, api, store, FAILED, ssm=ssm), passes=20)
    export = exported(store)
    assert export.status == ExportStatus.SKIPPED and export.exported_to is None
    assert "was empty or missing" in export.reason


def test_a_run_whose_jobs_never_ran_skips_the_export_without_asking_the_head_node(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    provisioned(ec2, fsx, api, store)
    until_done(lambda: teardown_step(ec2, fsx, api, store, FAILED, ssm=None), passes=20)
    export = exported(store)
    assert export.status == ExportStatus.SKIPPED and "no job ran" in export.reason


def test_a_file_system_the_run_did_not_create_keeps_its_checkpoints_where_they_are(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    file_system_id = trained(ec2, fsx, api, store)
    store.set_storage(RUN, StorageIds(created=False, file_system_id=file_system_id))
    until_done(lambda: teardown_step(ec2, fsx, api, store, FAILED, ssm=None), passes=20)
    export = exported(store)
    assert export.status == ExportStatus.SKIPPED and "teardown never deletes it" in export.reason
    assert file_system_lifecycle(fsx, file_system_id) == "AVAILABLE"


def test_a_run_with_a_data_repository_exports_under_it(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    trained(ec2, fsx, api, store, storage={"fsx": {"data_repository": "s3://trainrun-data-123456789012/wiki/"}})
    ssm = FakeSsm()
    until_done(lambda: teardown_step(ec2, fsx, api, store, FAILED, ssm=ssm), passes=20)
    assert exported(store).exported_to == f"s3://trainrun-data-123456789012/wiki/checkpoints/{RUN}/"


def test_keep_exports_nothing_until_down_deletes_what_was_kept(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given a failed run whose policy keeps everything (its checkpoints stay on its file system)
    trained(ec2, fsx, api, store, teardown={"on_failure": "keep"})
    ssm = FakeSsm()
    teardown_step(ec2, fsx, api, store, FAILED, ssm=ssm)
    assert ssm.sent == [] and record(store).checkpoints is None
    # When `trainrun down` deletes what was kept, the head node still there
    down = TeardownInput(run_id=RUN, state=FAILED.state, delete_kept=True)
    until_done(lambda: teardown_step(ec2, fsx, api, store, down, ssm=ssm), passes=20)
    # Then the checkpoints are exported before the cluster goes
    assert len(ssm.sent) == 1 and exported(store).exported_to == DESTINATION


def test_keep_file_system_still_exports_because_the_head_node_goes_now(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    file_system_id = trained(ec2, fsx, api, store, teardown={"keep_file_system": True})
    ssm = FakeSsm()
    until_done(lambda: teardown_step(ec2, fsx, api, store, FAILED, ssm=ssm), passes=20)
    assert exported(store).exported_to == DESTINATION
    assert file_system_lifecycle(fsx, file_system_id) == "AVAILABLE"


def test_a_copy_that_ends_quickly_is_waited_for_within_the_pass(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the wait within a pass as deployed, and a copy that ends at the second look
    monkeypatch.setattr(checkpoints, "PASS_WAIT_SECONDS", SHORT_COMMAND_SECONDS)
    monkeypatch.setattr(checkpoints, "COMMAND_POLL_SECONDS", 0.01)
    trained(ec2, fsx, api, store)
    # When teardown makes its first pass
    teardown_step(ec2, fsx, api, store, FAILED, ssm=FakeSsm())
    # Then that pass exported the checkpoints and went on to delete the cluster
    assert exported(store).status == ExportStatus.EXPORTED
    assert api.deleted == [CLUSTER]


def test_only_the_first_teardown_pass_to_start_an_export_records_it(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given two teardowns (the run's own and the safety net) that both sent a copy
    trained(ec2, fsx, api, store)
    first, second = (
        CheckpointExport(
            status=ExportStatus.EXPORTING, destination=DESTINATION, command_id=command, started_at=utcnow()
        )
        for command in ("command-1", "command-2")
    )
    # When both record their start
    # Then the first is kept, and the second is told to follow it
    assert store.start_checkpoint_export(RUN, first) is True
    assert store.start_checkpoint_export(RUN, second) is False
    assert exported(store).command_id == "command-1"


def test_an_unforeseen_error_fails_the_export_once_and_the_teardown_goes_on(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given an SSM that answers a status no SSM has (command_result raises on it)
    file_system_id = trained(ec2, fsx, api, store)
    ssm = FakeSsm(answers=[{"Status": "Exploded"}])
    # When the run is torn down until done
    until_done(lambda: teardown_step(ec2, fsx, api, store, FAILED, ssm=ssm), passes=20)
    # Then the export is recorded FAILED after one copy, and everything billable is gone
    assert len(ssm.sent) == 1
    export = exported(store)
    assert export.status == ExportStatus.FAILED and export.destination == DESTINATION
    assert "unknown status 'Exploded'" in export.reason
    assert file_system_lifecycle(fsx, file_system_id) is None and api.deleted == [CLUSTER]


def test_a_throttled_look_at_the_copy_is_tried_again_at_the_next_pass(
    ec2: Any, fsx: Any, api: FakePclusterApi, store: RunStore
) -> None:
    # Given a copy whose first look is throttled, then ends
    trained(ec2, fsx, api, store)
    throttled = {"Throttle": True}
    ssm = FakeSsm(answers=[throttled, FakeSsm().answers[1]])
    # When teardown makes its first two passes
    first = teardown_step(ec2, fsx, api, store, FAILED, ssm=ssm)
    teardown_step(ec2, fsx, api, store, FAILED, ssm=ssm)
    # Then the first waited, and the second found the copy ended
    assert not first.done and first.waiting_on == [f"checkpoint export to {DESTINATION} (Pending)"]
    assert exported(store).status == ExportStatus.EXPORTED
