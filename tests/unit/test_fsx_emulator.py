"""The FSx emulator on moto: AWS-shaped ids, client tokens, lifecycles and data repository associations.

Real boto3 clients talk to `moto.mock_aws` in process; the emulator is installed once and its
additions are forgotten around every test.
"""

from __future__ import annotations

import re
from typing import Any

import boto3
import moto
import pytest
from botocore.exceptions import ClientError
from moto.fsx.responses import FSxResponse

from trainrun.local import fsx_emulator

REGION = "us-west-2"
ACCOUNT = "123456789012"
BUCKET = "s3://trainrun-data-123456789012"
FILE_SYSTEM_ID = re.compile(r"^fs-[0-9a-f]{17}$")
ASSOCIATION_ID = re.compile(r"^dra-[0-9a-f]{17}$")
S3_POLICIES = {
    "AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
    "AutoExportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
}


def create(fsx: Any, deployment: str = "PERSISTENT_2", **extra: Any) -> dict[str, Any]:
    lustre: dict[str, Any] = {"DeploymentType": deployment}
    if deployment.startswith("PERSISTENT"):
        lustre["PerUnitStorageThroughput"] = 250 if deployment == "PERSISTENT_2" else 200
    request: dict[str, Any] = {
        "FileSystemType": "LUSTRE",
        "StorageCapacity": 1200,
        "StorageType": "SSD",
        "SubnetIds": ["subnet-0123456789abcdef0"],
        "SecurityGroupIds": ["sg-0123456789abcdef0"],
        "LustreConfiguration": lustre,
    }
    if deployment == "PERSISTENT_2":
        request["FileSystemTypeVersion"] = "2.15"
    file_system: dict[str, Any] = fsx.create_file_system(**(request | extra))["FileSystem"]
    return file_system


def lifecycle(fsx: Any, file_system_id: str) -> str | None:
    """The file system's lifecycle, or None once it is gone."""
    try:
        found = fsx.describe_file_systems(FileSystemIds=[file_system_id])["FileSystems"]
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "FileSystemNotFound"
        return None
    return found[0]["Lifecycle"] if found else None


def available(fsx: Any, **extra: Any) -> str:
    file_system_id: str = create(fsx, **extra)["FileSystemId"]
    while lifecycle(fsx, file_system_id) != "AVAILABLE":
        pass
    return file_system_id


def associate(fsx: Any, file_system_id: str, path: str = "/data", **extra: Any) -> dict[str, Any]:
    association: dict[str, Any] = fsx.create_data_repository_association(
        FileSystemId=file_system_id,
        FileSystemPath=path,
        DataRepositoryPath=BUCKET if path == "/data" else f"{BUCKET}{path}",
        BatchImportMetaDataOnCreate=True,
        S3=S3_POLICIES,
        **extra,
    )["Association"]
    return association


def association_lifecycle(fsx: Any, association_id: str) -> str | None:
    try:
        found = fsx.describe_data_repository_associations(AssociationIds=[association_id])["Associations"]
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "DataRepositoryAssociationNotFound"
        return None
    return found[0]["Lifecycle"] if found else None


def test_install_twice_patches_once() -> None:
    fsx_emulator.install()
    patched = FSxResponse.describe_file_systems
    fsx_emulator.install()
    assert FSxResponse.describe_file_systems is patched


def test_install_refuses_another_moto_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fsx_emulator, "_installed", False)
    monkeypatch.setattr(moto, "__version__", "9.9.9")
    with pytest.raises(RuntimeError, match=r"moto 5\.2\.5 internals, but moto 9\.9\.9"):
        fsx_emulator.install()


def test_file_system_ids_and_arns_look_like_aws(fsx: Any) -> None:
    file_system = create(fsx)
    assert FILE_SYSTEM_ID.match(file_system["FileSystemId"])
    assert file_system["ResourceARN"] == f"arn:aws:fsx:{REGION}:{ACCOUNT}:file-system/{file_system['FileSystemId']}"
    assert file_system["DNSName"] == f"{file_system['FileSystemId']}.fsx.{REGION}.amazonaws.com"


def test_a_new_file_system_describes_what_aws_adds(fsx: Any) -> None:
    file_system = create(fsx, Tags=[{"Key": "trainrun:run-id", "Value": "r1"}])
    assert file_system["Lifecycle"] == "CREATING"
    assert file_system["OwnerId"] == ACCOUNT
    assert file_system["FileSystemTypeVersion"] == "2.15"
    assert re.match(r"^[a-z0-9]{8}$", file_system["LustreConfiguration"]["MountName"])
    assert file_system["Tags"] == [{"Key": "trainrun:run-id", "Value": "r1"}]
    assert "CreationTime" in file_system


def test_lustre_version_defaults_as_documented(fsx: Any) -> None:
    assert create(fsx, deployment="SCRATCH_2")["FileSystemTypeVersion"] == "2.10"
    scratch_1 = create(fsx, deployment="SCRATCH_1")
    assert scratch_1["LustreConfiguration"]["MountName"] == "fsx"


def test_the_vpc_is_the_subnets_when_ec2_knows_it(fsx: Any) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc_id = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet_id = ec2.create_subnet(VpcId=vpc_id, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    assert create(fsx, SubnetIds=[subnet_id])["VpcId"] == vpc_id


def test_the_same_client_token_gives_the_same_file_system(fsx: Any) -> None:
    first = create(fsx, ClientRequestToken="token-1")
    again = create(fsx, ClientRequestToken="token-1")
    assert again["FileSystemId"] == first["FileSystemId"]
    assert len(fsx.describe_file_systems()["FileSystems"]) == 1


def test_a_client_token_reused_with_other_parameters_is_refused(fsx: Any) -> None:
    create(fsx, ClientRequestToken="token-1")
    with pytest.raises(ClientError) as raised:
        create(fsx, ClientRequestToken="token-1", StorageCapacity=2400)
    assert raised.value.response["Error"]["Code"] == "IncompatibleParameterError"


def test_a_file_system_becomes_available_on_its_second_describe(fsx: Any) -> None:
    file_system_id = create(fsx)["FileSystemId"]
    assert [lifecycle(fsx, file_system_id) for _ in range(3)] == ["CREATING", "AVAILABLE", "AVAILABLE"]


def test_the_number_of_describes_is_a_setting(fsx: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fsx_emulator, "DESCRIBES_UNTIL_SETTLED", 1)
    file_system_id = create(fsx)["FileSystemId"]
    assert lifecycle(fsx, file_system_id) == "AVAILABLE"


def test_time_settles_a_file_system_too(fsx: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fsx_emulator, "DESCRIBES_UNTIL_SETTLED", 100)
    monkeypatch.setattr(fsx_emulator, "SECONDS_UNTIL_SETTLED", 0.0)
    file_system_id = create(fsx)["FileSystemId"]
    assert lifecycle(fsx, file_system_id) == "AVAILABLE"


def test_a_deleted_file_system_is_deleting_then_gone_with_its_tags(fsx: Any) -> None:
    file_system = create(fsx, Tags=[{"Key": "trainrun:run-id", "Value": "r1"}])
    file_system_id = file_system["FileSystemId"]
    deleted = fsx.delete_file_system(FileSystemId=file_system_id, LustreConfiguration={"SkipFinalBackup": True})
    assert deleted["Lifecycle"] == "DELETING"
    assert [lifecycle(fsx, file_system_id) for _ in range(3)] == ["DELETING", None, None]
    assert fsx.list_tags_for_resource(ResourceARN=file_system["ResourceARN"])["Tags"] == []


def test_describing_an_unknown_file_system_is_not_found(fsx: Any) -> None:
    with pytest.raises(ClientError) as raised:
        fsx.describe_file_systems(FileSystemIds=["fs-0123456789abcdef0"])
    assert raised.value.response["Error"]["Code"] == "FileSystemNotFound"


def test_file_systems_page_with_next_token(fsx: Any) -> None:
    created = {create(fsx)["FileSystemId"] for _ in range(3)}
    first = fsx.describe_file_systems(MaxResults=2)
    second = fsx.describe_file_systems(MaxResults=2, NextToken=first["NextToken"])
    assert "NextToken" not in second
    assert {fs["FileSystemId"] for fs in first["FileSystems"] + second["FileSystems"]} == created


def test_an_association_describes_as_seed_001_shows(fsx: Any) -> None:
    file_system_id = available(fsx)
    association = associate(fsx, file_system_id)
    assert ASSOCIATION_ID.match(association["AssociationId"])
    assert association["ResourceARN"] == (
        f"arn:aws:fsx:{REGION}:{ACCOUNT}:association/{file_system_id}/{association['AssociationId']}"
    )
    assert {key: value for key, value in association.items() if key not in ("AssociationId", "ResourceARN")} == {
        "FileSystemId": file_system_id,
        "Lifecycle": "CREATING",
        "FileSystemPath": "/data",
        "DataRepositoryPath": BUCKET,
        "BatchImportMetaDataOnCreate": True,
        "ImportedFileChunkSize": 1024,
        "S3": S3_POLICIES,
        "Tags": [],
        "CreationTime": association["CreationTime"],
    }


def test_an_association_is_available_on_its_second_describe_then_deleting_then_gone(fsx: Any) -> None:
    association_id = associate(fsx, available(fsx))["AssociationId"]
    assert [association_lifecycle(fsx, association_id) for _ in range(2)] == ["CREATING", "AVAILABLE"]
    deleted = fsx.delete_data_repository_association(AssociationId=association_id, DeleteDataInFileSystem=False)
    assert (deleted["Lifecycle"], deleted["DeleteDataInFileSystem"]) == ("DELETING", False)
    assert [association_lifecycle(fsx, association_id) for _ in range(3)] == ["DELETING", None, None]


def test_associations_are_found_by_file_system_and_by_id(fsx: Any) -> None:
    ours, other = available(fsx), available(fsx)
    association_id = associate(fsx, ours)["AssociationId"]
    associate(fsx, other)
    by_file_system = fsx.describe_data_repository_associations(Filters=[{"Name": "file-system-id", "Values": [ours]}])[
        "Associations"
    ]
    by_id = fsx.describe_data_repository_associations(AssociationIds=[association_id])["Associations"]
    assert [a["AssociationId"] for a in by_file_system] == [a["AssociationId"] for a in by_id] == [association_id]


def test_associations_page_with_next_token(fsx: Any) -> None:
    file_system_id = available(fsx)
    created = {associate(fsx, file_system_id, path=f"/data{i}")["AssociationId"] for i in range(3)}
    first = fsx.describe_data_repository_associations(MaxResults=2)
    second = fsx.describe_data_repository_associations(MaxResults=2, NextToken=first["NextToken"])
    assert {a["AssociationId"] for a in first["Associations"] + second["Associations"]} == created


def test_an_unknown_association_is_not_found(fsx: Any) -> None:
    with pytest.raises(ClientError) as raised:
        fsx.delete_data_repository_association(AssociationId="dra-0123456789abcdef0")
    assert raised.value.response["Error"]["Code"] == "DataRepositoryAssociationNotFound"


def test_association_tags_are_listed_and_returned(fsx: Any) -> None:
    tags = [{"Key": "trainrun:run-id", "Value": "r1"}]
    association = associate(fsx, available(fsx), Tags=tags)
    assert association["Tags"] == tags
    assert fsx.list_tags_for_resource(ResourceARN=association["ResourceARN"])["Tags"] == tags


def test_the_tagging_api_finds_associations(fsx: Any) -> None:
    association = associate(fsx, available(fsx), Tags=[{"Key": "trainrun:run-id", "Value": "r1"}])
    tagging = boto3.client("resourcegroupstaggingapi", region_name=REGION)
    found = tagging.get_resources(TagFilters=[{"Key": "trainrun:run-id", "Values": ["r1"]}])
    assert association["ResourceARN"] in {r["ResourceARN"] for r in found["ResourceTagMappingList"]}


def test_the_same_client_token_gives_the_same_association(fsx: Any) -> None:
    file_system_id = available(fsx)
    first = associate(fsx, file_system_id, ClientRequestToken="dra-token")
    again = associate(fsx, file_system_id, ClientRequestToken="dra-token")
    assert again["AssociationId"] == first["AssociationId"]
    assert len(fsx.describe_data_repository_associations()["Associations"]) == 1


def test_an_association_needs_an_available_file_system(fsx: Any) -> None:
    with pytest.raises(ClientError) as raised:
        associate(fsx, create(fsx)["FileSystemId"])
    assert raised.value.response["Error"]["Code"] == "BadRequest"
    assert "CREATING" in raised.value.response["Error"]["Message"]


def test_scratch_1_takes_no_association(fsx: Any) -> None:
    with pytest.raises(ClientError) as raised:
        associate(fsx, available(fsx, deployment="SCRATCH_1"))
    assert raised.value.response["Error"]["Code"] == "UnsupportedOperation"


def test_one_path_takes_one_association(fsx: Any) -> None:
    file_system_id = available(fsx)
    associate(fsx, file_system_id)
    with pytest.raises(ClientError) as raised:
        associate(fsx, file_system_id)
    assert raised.value.response["Error"]["Code"] == "BadRequest"


def test_an_association_on_an_unknown_file_system_is_not_found(fsx: Any) -> None:
    with pytest.raises(ClientError) as raised:
        associate(fsx, "fs-0123456789abcdef0")
    assert raised.value.response["Error"]["Code"] == "FileSystemNotFound"


def test_deleting_a_file_system_takes_its_associations_with_it(fsx: Any) -> None:
    file_system_id = available(fsx)
    association_id = associate(fsx, file_system_id)["AssociationId"]
    fsx.delete_file_system(FileSystemId=file_system_id)
    assert association_lifecycle(fsx, association_id) == "DELETING"
    while lifecycle(fsx, file_system_id) is not None:
        pass
    assert association_lifecycle(fsx, association_id) is None


def test_a_failure_can_be_injected(fsx: Any) -> None:
    file_system_id = create(fsx)["FileSystemId"]
    fsx_emulator.fail(file_system_id, "subnet has no free IP addresses", region=REGION)
    described = fsx.describe_file_systems(FileSystemIds=[file_system_id])["FileSystems"][0]
    assert described["Lifecycle"] == "FAILED"
    assert described["FailureDetails"] == {"Message": "subnet has no free IP addresses"}


def test_reset_forgets_associations_and_leaves_file_systems_available(fsx: Any) -> None:
    file_system_id = available(fsx)
    associate(fsx, file_system_id)
    fsx_emulator.reset()
    assert fsx.describe_data_repository_associations()["Associations"] == []
    assert lifecycle(fsx, file_system_id) == "AVAILABLE"
