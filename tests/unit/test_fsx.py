"""The FSx adapter against moto with the FSx emulator: create or adopt, wait, link, find, tear down.

Real boto3 clients talk to `moto.mock_aws` in process, with `trainrun.local.fsx_emulator` adding
lifecycles, client tokens and data repository associations. Error paths moto cannot produce
(throttling, 5xx) use botocore's Stubber.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from botocore.stub import Stubber

from trainrun.adapters.fsx import (
    StorageFailed,
    StorageInvalid,
    client_request_token,
    data_repository_progress,
    delete_storage,
    describe_existing_file_system,
    ensure_data_repository,
    ensure_file_system,
    file_system_progress,
    find_run_storage,
)
from trainrun.errors import TransientAwsError
from trainrun.local import fsx_emulator
from trainrun.model.resources import Progress, StorageIds
from trainrun.model.run_file import Fsx

REGION = "us-west-2"
RUN_ID = "llama3-8b-20250101-0930"
OTHER_RUN = "bert-large-20250101-1000"
STACK = "trainrun-test"
SUBNET = "subnet-0123456789abcdef0"
SECURITY_GROUP = "sg-0123456789abcdef0"
BUCKET = "s3://trainrun-data-123456789012/wiki"
EVENTS = ["NEW", "CHANGED", "DELETED"]


def ensure(fsx: Any, run_id: str = RUN_ID, spec: Fsx | None = None) -> str:
    storage = ensure_file_system(
        fsx, run_id=run_id, stack=STACK, spec=spec or Fsx(), subnet_id=SUBNET, security_group_id=SECURITY_GROUP
    )
    return str(storage.file_system_id)


def until_done(check: Any, *args: Any, passes: int = 10) -> list[Progress]:
    seen = [check(*args)]
    while not seen[-1].done:
        assert len(seen) < passes, seen
        seen.append(check(*args))
    return seen


def available_file_system(fsx: Any, run_id: str = RUN_ID) -> str:
    file_system_id = ensure(fsx, run_id)
    until_done(file_system_progress, fsx, file_system_id)
    return file_system_id


def linked(fsx: Any, run_id: str = RUN_ID) -> StorageIds:
    file_system_id = available_file_system(fsx, run_id)
    association_id = ensure_data_repository(
        fsx, run_id=run_id, stack=STACK, file_system_id=file_system_id, data_repository=BUCKET
    )
    until_done(data_repository_progress, fsx, association_id)
    return StorageIds(file_system_id=file_system_id, data_repository_association_id=association_id)


def described(fsx: Any, file_system_id: str) -> dict[str, Any]:
    file_system: dict[str, Any] = fsx.describe_file_systems(FileSystemIds=[file_system_id])["FileSystems"][0]
    return file_system


def tags_of(resource: dict[str, Any]) -> dict[str, str]:
    return {tag["Key"]: tag["Value"] for tag in resource["Tags"]}


def file_system_ids(fsx: Any) -> set[str]:
    return {fs["FileSystemId"] for fs in fsx.describe_file_systems()["FileSystems"]}


def tear_down(fsx: Any, known: StorageIds, keep_file_system: bool = False) -> list[Progress]:
    return until_done(
        lambda: delete_storage(fsx, run_id=RUN_ID, known=known, keep_file_system=keep_file_system), passes=20
    )


# --- creating ------------------------------------------------------------------------------------


def test_a_new_file_system_is_tagged_with_the_run_at_creation(fsx: Any) -> None:
    file_system = described(fsx, ensure(fsx))
    assert tags_of(file_system) == {
        "trainrun:run-id": RUN_ID,
        "trainrun:stack": STACK,
        "Name": f"trainrun-{RUN_ID}",
        "trainrun:component": "file-system",
    }


def test_a_new_file_system_is_persistent_2_lustre_2_15_in_the_private_subnet(fsx: Any) -> None:
    file_system = described(fsx, ensure(fsx))
    assert file_system["FileSystemType"] == "LUSTRE"
    assert file_system["FileSystemTypeVersion"] == "2.15"
    assert (file_system["StorageCapacity"], file_system["StorageType"]) == (1200, "SSD")
    # DescribeFileSystems returns no security groups; the create request's are checked with a Stubber below.
    assert file_system["SubnetIds"] == [SUBNET]
    lustre = file_system["LustreConfiguration"]
    assert (lustre["DeploymentType"], lustre["PerUnitStorageThroughput"], lustre["DataCompressionType"]) == (
        "PERSISTENT_2",
        250,
        "LZ4",
    )


def test_a_scratch_file_system_is_given_no_throughput(fsx: Any) -> None:
    spec = Fsx(deployment_type="SCRATCH_2", storage_capacity_gib=2400)
    lustre = described(fsx, ensure(fsx, spec=spec))["LustreConfiguration"]
    assert lustre["DeploymentType"] == "SCRATCH_2"
    assert "PerUnitStorageThroughput" not in lustre


def test_the_create_carries_a_client_token_derived_from_the_run(fsx: Any) -> None:
    token = client_request_token("fs", RUN_ID)
    assert token == client_request_token("fs", RUN_ID) != client_request_token("fs", OTHER_RUN)
    assert re.fullmatch(r"[A-Za-z0-9_.-]{1,63}", token)
    stubber = Stubber(fsx)
    stubber.add_response("describe_file_systems", {"FileSystems": []})
    stubber.add_response(
        "create_file_system",
        {"FileSystem": {"FileSystemId": "fs-0123456789abcdef0"}},
        expected_params={
            "ClientRequestToken": token,
            "FileSystemType": "LUSTRE",
            "FileSystemTypeVersion": "2.15",
            "StorageCapacity": 1200,
            "StorageType": "SSD",
            "SubnetIds": [SUBNET],
            "SecurityGroupIds": [SECURITY_GROUP],
            "LustreConfiguration": {
                "DeploymentType": "PERSISTENT_2",
                "DataCompressionType": "LZ4",
                "PerUnitStorageThroughput": 250,
            },
            "Tags": [
                {"Key": "trainrun:run-id", "Value": RUN_ID},
                {"Key": "trainrun:stack", "Value": STACK},
                {"Key": "Name", "Value": f"trainrun-{RUN_ID}"},
                {"Key": "trainrun:component", "Value": "file-system"},
            ],
        },
    )
    with stubber:
        assert ensure(fsx) == "fs-0123456789abcdef0"


def test_a_long_run_id_still_gives_a_valid_token() -> None:
    token = client_request_token("dra", "r" * 200 + "/with spaces")
    assert len(token) <= 63
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", token)


def test_ensuring_twice_makes_one_file_system(fsx: Any) -> None:
    first = ensure(fsx)
    assert ensure(fsx) == first
    assert file_system_ids(fsx) == {first}


def test_a_file_system_made_before_a_crash_is_adopted(fsx: Any) -> None:
    # Given a file system the step created (tagged) but never recorded
    orphan = fsx.create_file_system(
        FileSystemType="LUSTRE",
        StorageCapacity=1200,
        SubnetIds=[SUBNET],
        LustreConfiguration={"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250},
        Tags=[{"Key": "trainrun:run-id", "Value": RUN_ID}],
    )["FileSystem"]["FileSystemId"]
    # When the step runs again, then it adopts it
    assert ensure(fsx) == orphan
    assert file_system_ids(fsx) == {orphan}


def test_another_runs_file_system_is_not_adopted(fsx: Any) -> None:
    theirs = ensure(fsx, OTHER_RUN)
    assert ensure(fsx) != theirs


def test_a_named_file_system_is_not_created() -> None:
    with pytest.raises(ValueError, match="describe_existing_file_system"):
        ensure_file_system(
            None,
            run_id=RUN_ID,
            stack=STACK,
            spec=Fsx(file_system_id="fs-0123456789abcdef0"),
            subnet_id=SUBNET,
            security_group_id=SECURITY_GROUP,
        )


# --- waiting -------------------------------------------------------------------------------------


def test_progress_waits_while_creating_then_is_done_when_available(fsx: Any) -> None:
    file_system_id = ensure(fsx)
    assert until_done(file_system_progress, fsx, file_system_id) == [
        Progress(done=False, waiting_on=[f"file system {file_system_id} (CREATING)"]),
        Progress(done=True),
    ]


@pytest.mark.parametrize("lifecycle", ["FAILED", "MISCONFIGURED"])
def test_a_failed_file_system_raises_with_aws_reason(fsx: Any, lifecycle: str) -> None:
    file_system_id = ensure(fsx)
    fsx_emulator.fail(file_system_id, "no free IP addresses in the subnet", region=REGION, lifecycle=lifecycle)
    with pytest.raises(StorageFailed, match=f"{lifecycle}: no free IP addresses in the subnet"):
        file_system_progress(fsx, file_system_id)


def test_a_vanished_file_system_fails_the_wait(fsx: Any) -> None:
    with pytest.raises(StorageFailed, match="no longer exists"):
        file_system_progress(fsx, "fs-0123456789abcdef0")


def test_throttling_is_transient(fsx: Any) -> None:
    stubber = Stubber(fsx)
    stubber.add_client_error("describe_file_systems", "ThrottlingException", http_status_code=400)
    with stubber, pytest.raises(TransientAwsError, match="DescribeFileSystems"):
        file_system_progress(fsx, "fs-0123456789abcdef0")


def test_a_server_error_is_transient(fsx: Any) -> None:
    stubber = Stubber(fsx)
    stubber.add_client_error("describe_data_repository_associations", "InternalServerError", http_status_code=500)
    with stubber, pytest.raises(TransientAwsError):
        data_repository_progress(fsx, "dra-0123456789abcdef0")


# --- an existing file system ---------------------------------------------------------------------


def test_an_existing_available_lustre_file_system_is_used_as_it_is(fsx: Any) -> None:
    file_system_id = available_file_system(fsx, OTHER_RUN)
    (described,) = fsx.describe_file_systems(FileSystemIds=[file_system_id])["FileSystems"]
    assert describe_existing_file_system(fsx, file_system_id) == StorageIds(
        created=False,
        file_system_id=file_system_id,
        dns_name=described["DNSName"],
        mount_name=described["LustreConfiguration"]["MountName"],
    )


def test_an_existing_file_system_must_exist(fsx: Any) -> None:
    with pytest.raises(StorageInvalid, match=r"storage\.fsx\.file_system_id: fs-0123456789abcdef0 does not exist"):
        describe_existing_file_system(fsx, "fs-0123456789abcdef0")


def test_an_existing_file_system_must_be_available(fsx: Any) -> None:
    file_system_id = ensure(fsx, OTHER_RUN)
    with pytest.raises(StorageInvalid, match="is CREATING, not AVAILABLE"):
        describe_existing_file_system(fsx, file_system_id)


def test_an_existing_file_system_must_be_lustre(fsx: Any) -> None:
    windows = fsx.create_file_system(
        FileSystemType="WINDOWS", StorageCapacity=32, SubnetIds=[SUBNET], WindowsConfiguration={"ThroughputCapacity": 8}
    )["FileSystem"]["FileSystemId"]
    with pytest.raises(StorageInvalid, match="FSx for WINDOWS file system; the cluster mounts FSx for Lustre only"):
        describe_existing_file_system(fsx, windows)


# --- the data repository association -------------------------------------------------------------


def test_the_bucket_is_linked_at_data_with_seed_001s_settings(fsx: Any) -> None:
    file_system_id = available_file_system(fsx)
    association_id = ensure_data_repository(
        fsx, run_id=RUN_ID, stack=STACK, file_system_id=file_system_id, data_repository=BUCKET
    )
    association = fsx.describe_data_repository_associations(AssociationIds=[association_id])["Associations"][0]
    assert association["FileSystemId"] == file_system_id
    assert (association["FileSystemPath"], association["DataRepositoryPath"]) == ("/data", BUCKET)
    assert association["BatchImportMetaDataOnCreate"] is True
    assert association["S3"] == {"AutoImportPolicy": {"Events": EVENTS}, "AutoExportPolicy": {"Events": EVENTS}}
    assert tags_of(association)["trainrun:component"] == "data-repository-association"
    assert tags_of(association)["trainrun:run-id"] == RUN_ID


def test_the_association_carries_a_client_token_and_keeps_the_data(fsx: Any) -> None:
    stubber = Stubber(fsx)
    stubber.add_response("describe_data_repository_associations", {"Associations": []})
    stubber.add_response(
        "create_data_repository_association",
        {"Association": {"AssociationId": "dra-0123456789abcdef0"}},
        expected_params={
            "FileSystemId": "fs-0123456789abcdef0",
            "FileSystemPath": "/data",
            "DataRepositoryPath": BUCKET,
            "BatchImportMetaDataOnCreate": True,
            "S3": {"AutoImportPolicy": {"Events": EVENTS}, "AutoExportPolicy": {"Events": EVENTS}},
            "ClientRequestToken": client_request_token("dra", RUN_ID),
            "Tags": [
                {"Key": "trainrun:run-id", "Value": RUN_ID},
                {"Key": "trainrun:stack", "Value": STACK},
                {"Key": "Name", "Value": f"trainrun-{RUN_ID}"},
                {"Key": "trainrun:component", "Value": "data-repository-association"},
            ],
        },
    )
    with stubber:
        association_id = ensure_data_repository(
            fsx, run_id=RUN_ID, stack=STACK, file_system_id="fs-0123456789abcdef0", data_repository=BUCKET
        )
    assert association_id == "dra-0123456789abcdef0"


def test_linking_twice_makes_one_association(fsx: Any) -> None:
    storage = linked(fsx)
    again = ensure_data_repository(
        fsx, run_id=RUN_ID, stack=STACK, file_system_id=storage.file_system_id or "", data_repository=BUCKET
    )
    assert again == storage.data_repository_association_id
    assert len(fsx.describe_data_repository_associations()["Associations"]) == 1


def test_data_already_linked_elsewhere_fails(fsx: Any) -> None:
    storage = linked(fsx)
    with pytest.raises(StorageFailed, match="already links /data to s3://trainrun-data-123456789012/wiki"):
        ensure_data_repository(
            fsx,
            run_id=RUN_ID,
            stack=STACK,
            file_system_id=storage.file_system_id or "",
            data_repository="s3://another-bucket",
        )


def test_association_progress_waits_then_is_done(fsx: Any) -> None:
    file_system_id = available_file_system(fsx)
    association_id = ensure_data_repository(
        fsx, run_id=RUN_ID, stack=STACK, file_system_id=file_system_id, data_repository=BUCKET
    )
    assert until_done(data_repository_progress, fsx, association_id) == [
        Progress(done=False, waiting_on=[f"data repository association {association_id} (CREATING)"]),
        Progress(done=True),
    ]


def test_a_misconfigured_association_raises_with_aws_reason(fsx: Any) -> None:
    association_id = linked(fsx).data_repository_association_id or ""
    fsx_emulator.fail(association_id, "bucket policy denies FSx", region=REGION, lifecycle="MISCONFIGURED")
    with pytest.raises(StorageFailed, match="MISCONFIGURED: bucket policy denies FSx"):
        data_repository_progress(fsx, association_id)


# --- finding -------------------------------------------------------------------------------------


def test_the_runs_storage_is_found_by_its_tags(fsx: Any) -> None:
    linked(fsx, OTHER_RUN)
    ours = linked(fsx)
    assert find_run_storage(fsx, RUN_ID) == ours


def test_a_run_without_storage_finds_nothing(fsx: Any) -> None:
    linked(fsx, OTHER_RUN)
    assert find_run_storage(fsx, RUN_ID) == StorageIds()


def test_finding_pages_through_every_association(fsx: Any) -> None:
    # Given more associations than one page of DescribeDataRepositoryAssociations holds
    for index in range(3):
        file_system_id = available_file_system(fsx, f"other-{index}")
        for path in range(8):
            fsx.create_data_repository_association(
                FileSystemId=file_system_id, FileSystemPath=f"/p{path}", DataRepositoryPath=f"s3://b{index}/{path}"
            )
    ours = linked(fsx)
    assert find_run_storage(fsx, RUN_ID) == ours


# --- tearing down --------------------------------------------------------------------------------


def test_teardown_deletes_the_association_before_the_file_system(fsx: Any) -> None:
    storage = linked(fsx)
    passes = tear_down(fsx, storage)
    association = f"data repository association {storage.data_repository_association_id}"
    file_system = f"file system {storage.file_system_id}"
    waited_on = [p.waiting_on for p in passes]
    assert waited_on == [
        [f"{association} (DELETING)"],
        [f"{association} (DELETING)"],
        [f"{file_system} (DELETING)"],
        [f"{file_system} (DELETING)"],
        [],
    ]
    assert passes[-1] == Progress(done=True, deleted=[storage.data_repository_association_id, storage.file_system_id])
    assert file_system_ids(fsx) == set()


def test_teardown_finds_what_was_never_recorded(fsx: Any) -> None:
    linked(fsx)
    tear_down(fsx, StorageIds())
    assert file_system_ids(fsx) == set()
    assert fsx.describe_data_repository_associations()["Associations"] == []


def test_teardown_asks_for_no_final_backup_and_keeps_the_data_in_the_file_system(fsx: Any) -> None:
    storage = linked(fsx)
    association = fsx.describe_data_repository_associations()["Associations"][0]
    file_system = described(fsx, storage.file_system_id or "")
    stubber = Stubber(fsx)
    stubber.add_response("describe_file_systems", {"FileSystems": [file_system]})
    stubber.add_response("describe_data_repository_associations", {"Associations": [association]})
    stubber.add_response(
        "delete_data_repository_association",
        {"AssociationId": association["AssociationId"], "Lifecycle": "DELETING"},
        expected_params={"AssociationId": association["AssociationId"], "DeleteDataInFileSystem": False},
    )
    stubber.add_response("describe_file_systems", {"FileSystems": [file_system]})
    stubber.add_response("describe_data_repository_associations", {"Associations": []})
    stubber.add_response(
        "delete_file_system",
        {"FileSystemId": file_system["FileSystemId"], "Lifecycle": "DELETING"},
        expected_params={"FileSystemId": file_system["FileSystemId"], "LustreConfiguration": {"SkipFinalBackup": True}},
    )
    with stubber:
        delete_storage(fsx, run_id=RUN_ID, known=storage, keep_file_system=False)
        delete_storage(
            fsx, run_id=RUN_ID, known=StorageIds(file_system_id=storage.file_system_id), keep_file_system=False
        )
    stubber.assert_no_pending_responses()


def test_keep_file_system_keeps_the_file_system_and_its_association(fsx: Any) -> None:
    storage = linked(fsx)
    assert delete_storage(fsx, run_id=RUN_ID, known=storage, keep_file_system=True) == Progress(done=True)
    assert find_run_storage(fsx, RUN_ID) == storage


def test_a_named_file_system_is_never_deleted(fsx: Any) -> None:
    # Given a run that used an existing file system (created False), even one with the run's tag
    storage = linked(fsx)
    named = StorageIds(created=False, file_system_id=storage.file_system_id)
    assert delete_storage(fsx, run_id=RUN_ID, known=named, keep_file_system=False) == Progress(done=True)
    assert find_run_storage(fsx, RUN_ID) == storage


def test_another_runs_storage_is_left_alone_even_if_recorded(fsx: Any) -> None:
    theirs = linked(fsx, OTHER_RUN)
    ours = linked(fsx)
    tear_down(fsx, theirs)
    assert file_system_ids(fsx) == {theirs.file_system_id}
    assert find_run_storage(fsx, OTHER_RUN) == theirs
    assert find_run_storage(fsx, RUN_ID) == StorageIds()
    assert ours.file_system_id not in file_system_ids(fsx)


def test_storage_already_gone_counts_as_deleted(fsx: Any) -> None:
    known = StorageIds(file_system_id="fs-0123456789abcdef0", data_repository_association_id="dra-0123456789abcdef0")
    assert delete_storage(fsx, run_id=RUN_ID, known=known, keep_file_system=False) == Progress(
        done=True, deleted=["dra-0123456789abcdef0", "fs-0123456789abcdef0"]
    )


def test_a_file_system_still_creating_is_deleted_once_it_settles(fsx: Any) -> None:
    file_system_id = ensure(fsx)
    first = delete_storage(fsx, run_id=RUN_ID, known=StorageIds(file_system_id=file_system_id), keep_file_system=False)
    assert first == Progress(done=False, waiting_on=[f"file system {file_system_id} (CREATING)"])
    tear_down(fsx, StorageIds(file_system_id=file_system_id))
    assert file_system_ids(fsx) == set()
