"""FSx for Lustre calls behind Create file system, Link data repository and Tear down.

Functions take their boto3 FSx client as an argument. Every create carries a client request token
derived from the run id and tags its resource at creation, and is preceded by a search for the
run's resource by its tags, so a step that runs twice, or again after a crash between creating and
recording, adopts what the first run made instead of making a second one. Throttling and
service-side failures become `TransientAwsError` (the state machine retries it by name).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from trainrun.adapters.aws_errors import call, error_code
from trainrun.errors import TrainrunError
from trainrun.model.resources import Progress, StorageIds
from trainrun.model.run_file import Fsx
from trainrun.model.tags import COMPONENT, RUN_ID, run_tags

logger = logging.getLogger(__name__)

FILE_SYSTEM_COMPONENT = "file-system"
ASSOCIATION_COMPONENT = "data-repository-association"
# As awsome-distributed-training's ParallelCluster reference architectures link it: the bucket is
# linked at /data with automatic import and export of every change.
DATA_REPOSITORY_FILE_SYSTEM_PATH = "/data"
S3_EVENTS = ("NEW", "CHANGED", "DELETED")
# 2.15 takes data repository associations and "is recommended for all new file systems" (CreateFileSystem).
LUSTRE_VERSION = "2.15"
FAILED_LIFECYCLES = ("FAILED", "MISCONFIGURED", "MISCONFIGURED_UNAVAILABLE")
# A delete is refused while a resource is still being created or changed: wait for it to settle.
SETTLING_LIFECYCLES = ("CREATING", "UPDATING")
FILE_SYSTEM_NOT_FOUND = "FileSystemNotFound"
ASSOCIATION_NOT_FOUND = "DataRepositoryAssociationNotFound"
# ClientRequestToken: 1..63 characters of [A-za-z0-9_.-].
TOKEN_MAX = 63


class StorageFailed(TrainrunError):
    """A file system or data repository association ended FAILED or MISCONFIGURED, or vanished while awaited."""


class StorageInvalid(TrainrunError):
    """The file system the run names cannot be used: it does not exist, is not Lustre, or is not AVAILABLE."""


def ensure_file_system(
    fsx: Any, *, run_id: str, stack: str, spec: Fsx, subnet_id: str, security_group_id: str
) -> StorageIds:
    """Create the run's FSx for Lustre file system, or adopt the one already tagged with the run:
    its id and what a node mounts (known while it is still CREATING)."""
    if spec.file_system_id is not None:
        raise ValueError("the run names an existing file system: use describe_existing_file_system")
    existing = [fs for fs in _run_file_systems(fsx, run_id) if fs.get("Lifecycle") != "DELETING"]
    if existing:
        return _storage_ids(_oldest(existing), created=True)
    deployment = spec.effective_deployment_type
    lustre: dict[str, Any] = {"DeploymentType": deployment, "DataCompressionType": "LZ4"}
    if deployment.startswith("PERSISTENT"):
        lustre["PerUnitStorageThroughput"] = spec.effective_throughput_per_tib
    created = call(
        fsx.create_file_system,
        "CreateFileSystem",
        ClientRequestToken=client_request_token("fs", run_id),
        FileSystemType="LUSTRE",
        FileSystemTypeVersion=LUSTRE_VERSION,
        StorageCapacity=spec.effective_storage_capacity_gib,
        StorageType="SSD",
        SubnetIds=[subnet_id],
        SecurityGroupIds=[security_group_id],
        LustreConfiguration=lustre,
        Tags=_tags(run_id, stack, FILE_SYSTEM_COMPONENT),
    )
    return _storage_ids(created["FileSystem"], created=True)


def _storage_ids(file_system: dict[str, Any], *, created: bool) -> StorageIds:
    return StorageIds(
        created=created,
        file_system_id=str(file_system["FileSystemId"]),
        dns_name=file_system.get("DNSName"),
        mount_name=(file_system.get("LustreConfiguration") or {}).get("MountName"),
    )


def file_system_progress(fsx: Any, file_system_id: str) -> Progress:
    """Done once the file system is AVAILABLE; StorageFailed if it failed or is gone."""
    file_system = _describe_file_system(fsx, file_system_id)
    if file_system is None:
        raise StorageFailed(f"file system {file_system_id} no longer exists")
    return _progress("file system", file_system_id, file_system)


def describe_existing_file_system(fsx: Any, file_system_id: str) -> StorageIds:
    """The file system the run names, checked: it exists, is Lustre and is AVAILABLE."""
    file_system = _describe_file_system(fsx, file_system_id)
    if file_system is None:
        raise StorageInvalid(
            f"storage.fsx.file_system_id: {file_system_id} does not exist in this account and region; "
            "name an FSx for Lustre file system in the region of the capacity reservation, or leave the field out"
        )
    kind = file_system.get("FileSystemType")
    if kind != "LUSTRE":
        raise StorageInvalid(
            f"storage.fsx.file_system_id: {file_system_id} is an FSx for {kind} file system; "
            "the cluster mounts FSx for Lustre only"
        )
    lifecycle = file_system.get("Lifecycle")
    if lifecycle != "AVAILABLE":
        raise StorageInvalid(
            f"storage.fsx.file_system_id: {file_system_id} is {lifecycle}, not AVAILABLE; "
            "start the run again once it is AVAILABLE"
        )
    return _storage_ids(file_system, created=False)


def ensure_data_repository(fsx: Any, *, run_id: str, stack: str, file_system_id: str, data_repository: str) -> str:
    """Link `data_repository` at /data of the file system (automatic import and export), or adopt that link; its id."""
    for association in _describe_associations(fsx, Filters=[{"Name": "file-system-id", "Values": [file_system_id]}]):
        if association.get("FileSystemPath") != DATA_REPOSITORY_FILE_SYSTEM_PATH:
            continue
        if association.get("DataRepositoryPath") != data_repository:
            raise StorageFailed(
                f"{file_system_id} already links {DATA_REPOSITORY_FILE_SYSTEM_PATH} to "
                f"{association.get('DataRepositoryPath')} ({association['AssociationId']}), not to {data_repository}"
            )
        if association.get("Lifecycle") != "DELETING":
            return str(association["AssociationId"])
    created = call(
        fsx.create_data_repository_association,
        "CreateDataRepositoryAssociation",
        FileSystemId=file_system_id,
        FileSystemPath=DATA_REPOSITORY_FILE_SYSTEM_PATH,
        DataRepositoryPath=data_repository,
        BatchImportMetaDataOnCreate=True,
        S3={"AutoImportPolicy": {"Events": list(S3_EVENTS)}, "AutoExportPolicy": {"Events": list(S3_EVENTS)}},
        ClientRequestToken=client_request_token("dra", run_id),
        Tags=_tags(run_id, stack, ASSOCIATION_COMPONENT),
    )
    return str(created["Association"]["AssociationId"])


def data_repository_progress(fsx: Any, association_id: str) -> Progress:
    """Done once the association is AVAILABLE; StorageFailed if it failed or is gone."""
    association = _describe_association(fsx, association_id)
    if association is None:
        raise StorageFailed(f"data repository association {association_id} no longer exists")
    return _progress("data repository association", association_id, association)


def find_run_storage(fsx: Any, run_id: str) -> StorageIds:
    """The run's file system and association, found by their `trainrun:run-id` tag (the oldest of each)."""
    file_systems = _run_file_systems(fsx, run_id)
    associations = _run_associations(fsx, run_id)
    return StorageIds(
        file_system_id=_oldest(file_systems)["FileSystemId"] if file_systems else None,
        data_repository_association_id=_oldest(associations)["AssociationId"] if associations else None,
    )


def delete_storage(fsx: Any, *, run_id: str, known: StorageIds, keep_file_system: bool) -> Progress:
    """One pass of deleting the run's association, then its file system; done when both are gone.

    Deletes only what is tagged with this run: a file system the run named (`known.created` False)
    is never touched, nor is an id in `known` whose resource carries another run's tags. With
    `keep_file_system` the file system stays, and so does its association (the link to the bucket
    is part of what is kept).
    """
    if not known.created:
        return Progress(done=True)
    file_systems, associations, deleted = _run_storage(fsx, run_id, known)
    if keep_file_system:
        kept = [fs["FileSystemId"] for fs in file_systems] + [a["AssociationId"] for a in associations]
        logger.info("run %s: keeping %s as asked (keep_file_system)", run_id, ", ".join(kept) or "nothing")
        return Progress(done=True, deleted=deleted)
    waiting_on = [_delete_association(fsx, a, deleted) for a in associations]
    waiting_on = [w for w in waiting_on if w]
    if not waiting_on:
        # The file system only once its association is gone: the association is part of it.
        waiting_on = [w for w in (_delete_file_system(fsx, fs, deleted) for fs in file_systems) if w]
    return Progress(done=not waiting_on, waiting_on=waiting_on, deleted=deleted)


def client_request_token(kind: str, run_id: str) -> str:
    """The same token for the same run: a retried create returns the first one's resource."""
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:16]
    prefix = f"trainrun-{kind}-"
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", run_id).strip("-")
    room = TOKEN_MAX - len(prefix) - len(digest) - 1
    return f"{prefix}{slug[:room]}-{digest}"


def _tags(run_id: str, stack: str, component: str) -> list[dict[str, str]]:
    tags = run_tags(run_id, stack) | {COMPONENT: component}
    return [{"Key": key, "Value": value} for key, value in tags.items()]


# --- reading -------------------------------------------------------------------------------------


def _run_storage(
    fsx: Any, run_id: str, known: StorageIds
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """The run's file systems and associations: by tag, plus the recorded ids if they carry the run's tag.

    The third list holds the recorded ids that no longer exist.
    """
    file_systems = _run_file_systems(fsx, run_id)
    associations = _run_associations(fsx, run_id)
    gone: list[str] = []
    dra_id = known.data_repository_association_id
    if dra_id and dra_id not in {a["AssociationId"] for a in associations}:
        association = _describe_association(fsx, dra_id)
        if association is None:
            gone.append(dra_id)
        elif _is_run(association, run_id):
            associations.append(association)
        else:
            logger.warning("run %s: leaving association %s alone, it is not tagged with this run", run_id, dra_id)
    fs_id = known.file_system_id
    if fs_id and fs_id not in {fs["FileSystemId"] for fs in file_systems}:
        file_system = _describe_file_system(fsx, fs_id)
        if file_system is None:
            gone.append(fs_id)
        elif _is_run(file_system, run_id):
            file_systems.append(file_system)
        else:
            logger.warning("run %s: leaving file system %s alone, it is not tagged with this run", run_id, fs_id)
    return file_systems, associations, gone


def _run_file_systems(fsx: Any, run_id: str) -> list[dict[str, Any]]:
    return [fs for fs in _pages(fsx.describe_file_systems, "DescribeFileSystems", "FileSystems") if _is_run(fs, run_id)]


def _run_associations(fsx: Any, run_id: str) -> list[dict[str, Any]]:
    return [a for a in _describe_associations(fsx) if _is_run(a, run_id)]


def _describe_file_system(fsx: Any, file_system_id: str) -> dict[str, Any] | None:
    try:
        found = call(fsx.describe_file_systems, "DescribeFileSystems", FileSystemIds=[file_system_id])
    except ClientError as exc:
        if error_code(exc) == FILE_SYSTEM_NOT_FOUND:
            return None
        raise
    file_systems: list[dict[str, Any]] = found.get("FileSystems", [])
    return file_systems[0] if file_systems else None


def _describe_association(fsx: Any, association_id: str) -> dict[str, Any] | None:
    try:
        associations = _describe_associations(fsx, AssociationIds=[association_id])
    except ClientError as exc:
        if error_code(exc) == ASSOCIATION_NOT_FOUND:
            return None
        raise
    return associations[0] if associations else None


def _describe_associations(fsx: Any, **kwargs: Any) -> list[dict[str, Any]]:
    try:
        return _pages(
            fsx.describe_data_repository_associations, "DescribeDataRepositoryAssociations", "Associations", **kwargs
        )
    except ClientError as exc:
        # Filtering on a file system that is gone is no association at all.
        if error_code(exc) == FILE_SYSTEM_NOT_FOUND:
            return []
        raise


def _pages(method: Callable[..., dict[str, Any]], operation: str, key: str, **kwargs: Any) -> list[dict[str, Any]]:
    """Every item of a NextToken-paged FSx describe (DescribeDataRepositoryAssociations has no boto3 paginator)."""
    items: list[dict[str, Any]] = []
    while True:
        page = call(method, operation, **kwargs)
        items += page.get(key, [])
        if not page.get("NextToken"):
            return items
        kwargs["NextToken"] = page["NextToken"]


def _is_run(resource: dict[str, Any], run_id: str) -> bool:
    return any(tag.get("Key") == RUN_ID and tag.get("Value") == run_id for tag in resource.get("Tags") or [])


def _oldest(resources: list[dict[str, Any]]) -> dict[str, Any]:
    # Two of a kind only after a race; pick the same one every time.
    return min(resources, key=lambda r: (str(r.get("CreationTime", "")), r.get("AssociationId") or r["FileSystemId"]))


def _progress(kind: str, resource_id: str, resource: dict[str, Any]) -> Progress:
    lifecycle = str(resource.get("Lifecycle", ""))
    if lifecycle == "AVAILABLE":
        return Progress(done=True)
    if lifecycle in FAILED_LIFECYCLES:
        reason = (resource.get("FailureDetails") or {}).get("Message") or "no reason given"
        raise StorageFailed(f"{kind} {resource_id} is {lifecycle}: {reason}")
    return Progress(done=False, waiting_on=[f"{kind} {resource_id} ({lifecycle})"])


# --- deleting ------------------------------------------------------------------------------------


def _delete_association(fsx: Any, association: dict[str, Any], deleted: list[str]) -> str | None:
    """Ask for the association's deletion; what this pass waits on, or None if it is gone."""
    association_id = association["AssociationId"]
    lifecycle = association.get("Lifecycle")
    waiting = f"data repository association {association_id} ({lifecycle})"
    if lifecycle == "DELETING" or lifecycle in SETTLING_LIFECYCLES:
        return waiting
    try:
        call(
            fsx.delete_data_repository_association,
            "DeleteDataRepositoryAssociation",
            AssociationId=association_id,
            DeleteDataInFileSystem=False,
        )
    except ClientError as exc:
        if error_code(exc) == ASSOCIATION_NOT_FOUND:
            deleted.append(association_id)
            return None
        raise
    return f"data repository association {association_id} (DELETING)"


def _delete_file_system(fsx: Any, file_system: dict[str, Any], deleted: list[str]) -> str | None:
    """Ask for the file system's deletion, without a final backup; what this pass waits on, or None."""
    file_system_id = file_system["FileSystemId"]
    lifecycle = file_system.get("Lifecycle")
    if lifecycle == "DELETING" or lifecycle in SETTLING_LIFECYCLES:
        return f"file system {file_system_id} ({lifecycle})"
    try:
        call(
            fsx.delete_file_system,
            "DeleteFileSystem",
            FileSystemId=file_system_id,
            LustreConfiguration={"SkipFinalBackup": True},
        )
    except ClientError as exc:
        if error_code(exc) == FILE_SYSTEM_NOT_FOUND:
            deleted.append(file_system_id)
            return None
        raise
    return f"file system {file_system_id} (DELETING)"
