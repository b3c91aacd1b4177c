"""FSx for Lustre as the workflow meets it, for moto, in process.

Written against moto 5.2.5 (pinned in requirements-local.txt). Moto's FSx stores a file system and
hands it back, which is not enough for the Create file system and Link data repository steps:
they wait on a lifecycle, rely on client request tokens, and link an S3 bucket with a data
repository association (DRA), which moto does not have at all. `install()` patches moto's classes
in this process, so it serves both `moto.mock_aws` (tests) and the `ThreadedMotoServer` the local
runtime starts in the same process. FSx speaks JSON with an `X-Amz-Target` header, all on the
route `{0}/$` moto already has, and `BaseResponse.call_action` calls the method named after the
snake_cased action, so a method on `FSxResponse` is a new action: no URL route is needed.

Patches (each one's reason is next to it below):
1. `FSxBackend.create_file_system` - replaced: AWS-shaped ids, ClientRequestToken idempotency,
   a CREATING lifecycle, the Lustre version and mount name.
2. `FSxResponse.describe_file_systems` - replaced: advances the lifecycle, raises
   FileSystemNotFound for an unknown id (moto returns an empty list) and pages with NextToken.
3. `FSxBackend.delete_file_system` - replaced: DELETING first, gone on a later describe (moto
   forgets the file system at once, and keeps its tags).
4. `FileSystem.to_dict` - wrapped: adds Lifecycle, CreationTime, OwnerId, VpcId,
   FileSystemTypeVersion and FailureDetails, which moto never returns.
5. `FSxResponse.create/describe/delete_data_repository_association(s)` - new actions.
6. `FSxBackend.iter_tagged_resources` - wrapped: lists associations too, so the Resource Groups
   Tagging API finds a run's association by its tags as it finds its file system.

Lifecycle: a created resource is CREATING and becomes AVAILABLE on the describe that sees it for
the `DESCRIBES_UNTIL_SETTLED`th time, or on the first describe `SECONDS_UNTIL_SETTLED` seconds
after it was created (None: never by time alone); a deleted one is DELETING and is gone by the same
rule. Both are module settings the local runtime lowers to make a run quick; `reset()` leaves them.
The default (the 2nd describe) makes a test see CREATING once, as a waiting loop does in AWS.
On the AWS clock (trainrun.local.clock, `trainrun local --aws-clock`) neither rule applies: a
resource settles once its tabled duration (trainrun.logic.aws_clock: the file system's by its
deployment type and size, the association's) has passed on the compressed clock, however often
it is described.

Mounts: what a describe observes is published for the local nodes' `mount` stand-in
(trainrun.local.lustre_servers): a file system takes mounts while it is AVAILABLE, as on AWS,
from the describe that saw it so on (the workflow's Link data repository looks at it every poll).

Deleting a file system that still has associations: as far as we know AWS accepts it and the
associations go with the file system (DeleteFileSystem documents no error for it, only that a
Lustre file system should be unmounted first), so the emulator takes them down with it. The
workflow does not rely on this either way: teardown deletes the association first.

What the emulator adds lives on moto's FSx backend object, so moto's own reset (the end of a
`mock_aws`) discards it with the file systems; `reset()` discards it without touching moto's data.
"""

from __future__ import annotations

import base64
import json
import secrets
import string
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any

import moto
from moto.core import DEFAULT_ACCOUNT_ID
from moto.core.exceptions import JsonRESTError
from moto.core.resource_tagging import TaggedResource
from moto.ec2.exceptions import InvalidSubnetIdError
from moto.ec2.models import ec2_backends
from moto.fsx.exceptions import FileSystemNotFound
from moto.fsx.models import FileSystem, FSxBackend, fsx_backends
from moto.fsx.responses import FSxResponse

from trainrun.local import clock, lustre_servers
from trainrun.logic import aws_clock

MOTO_VERSION = "5.2.5"

# How soon a CREATING or DELETING resource settles (see the module docstring).
DESCRIBES_UNTIL_SETTLED = 2
SECONDS_UNTIL_SETTLED: float | None = None

CREATING, AVAILABLE, DELETING, GONE = "CREATING", "AVAILABLE", "DELETING", "GONE"
_SETTLES_TO = {CREATING: AVAILABLE, DELETING: GONE}
# AWS: "a maximum of 8 data repository associations on a file system".
MAX_ASSOCIATIONS_PER_FILE_SYSTEM = 8
# DescribeDataRepositoryAssociations takes MaxResults 1..25.
MAX_ASSOCIATIONS_PER_PAGE = 25
# Lustre versions whose file systems take associations (all but SCRATCH_1).
DRA_LUSTRE_VERSIONS = ("2.12", "2.15")
_STATE_ATTR = "_trainrun_fsx_emulator"
_DRA_CREATED = aws_clock.DATA_REPOSITORY_ASSOCIATION_AVAILABLE
_DRA_DELETED = aws_clock.DATA_REPOSITORY_ASSOCIATION_DELETED

_lock = threading.RLock()
_installed = False
_original_to_dict: Callable[[FileSystem], dict[str, Any]] | None = None
_original_iter_tagged: Callable[[FSxBackend], Iterator[TaggedResource]] | None = None


def install() -> None:
    """Patch moto (once per process; later calls do nothing)."""
    global _installed, _original_to_dict, _original_iter_tagged
    with _lock:
        if _installed:
            return
        if moto.__version__ != MOTO_VERSION:
            raise RuntimeError(
                f"trainrun's FSx emulator patches moto {MOTO_VERSION} internals, but moto {moto.__version__} "
                "is installed: check the patches in trainrun/local/fsx_emulator.py against it, then update MOTO_VERSION"
            )
        _original_to_dict = FileSystem.to_dict
        _original_iter_tagged = FSxBackend.iter_tagged_resources
        FSxBackend.create_file_system = _create_file_system  # type: ignore[method-assign,assignment]
        FSxBackend.delete_file_system = _delete_file_system  # type: ignore[method-assign]
        FSxBackend.iter_tagged_resources = _iter_tagged_resources  # type: ignore[method-assign]
        FileSystem.to_dict = _file_system_to_dict  # type: ignore[method-assign]
        FSxResponse.describe_file_systems = _describe_file_systems  # type: ignore[method-assign]
        FSxResponse.create_data_repository_association = _create_association  # type: ignore[attr-defined]
        FSxResponse.describe_data_repository_associations = _describe_associations  # type: ignore[attr-defined]
        FSxResponse.delete_data_repository_association = _delete_association  # type: ignore[attr-defined]
        _installed = True


def reset() -> None:
    """Forget what the emulator added (associations, tokens, lifecycles) in every FSx backend.

    Moto's file systems stay, as AVAILABLE; the settings above are left as they are.
    """
    with _lock:
        for account_backends in fsx_backends.values():
            for backend in account_backends.values():
                state = backend.__dict__.pop(_STATE_ATTR, None)
                if state is not None:
                    for association in state.associations.values():
                        backend.tagger.delete_all_tags_for_resource(association.resource_arn)


def fail(
    resource_id: str, message: str, *, region: str, lifecycle: str = "FAILED", account_id: str = DEFAULT_ACCOUNT_ID
) -> None:
    """Put a file system (fs-...) or association (dra-...) into FAILED or MISCONFIGURED, as AWS can."""
    backend = fsx_backends[account_id][region]
    with _lock:
        state = _state(backend)
        if resource_id.startswith("dra-"):
            tracked = state.associations[resource_id].lifecycle
        else:
            if resource_id not in backend.file_systems:
                raise KeyError(resource_id)
            tracked = _extras(backend, resource_id).lifecycle
        tracked.enter(lifecycle)
        tracked.failure = message
        if not resource_id.startswith("dra-"):
            _publish(backend.file_systems[resource_id], lifecycle)


# --- the emulated state --------------------------------------------------------------------------


@dataclass
class _Lifecycle:
    state: str
    entered: float = field(default_factory=time.monotonic)
    describes: int = 0
    failure: str | None = None
    # On the AWS clock: the real seconds this state lasts (trainrun.local.clock); None: the rule above.
    lasts: float | None = None

    def enter(self, state: str, lasts: float | None = None) -> None:
        self.state, self.entered, self.describes, self.lasts = state, time.monotonic(), 0, lasts

    def observe(self) -> str:
        """One describe saw the resource: settle a CREATING or DELETING one once seen enough, or long enough."""
        if self.state in _SETTLES_TO:
            self.describes += 1
            waited = time.monotonic() - self.entered
            if self.lasts is not None:
                if waited >= self.lasts:
                    self.enter(_SETTLES_TO[self.state])
            elif self.describes >= DESCRIBES_UNTIL_SETTLED or (
                SECONDS_UNTIL_SETTLED is not None and waited >= SECONDS_UNTIL_SETTLED
            ):
                self.enter(_SETTLES_TO[self.state])
        return self.state


@dataclass
class _FileSystemExtras:
    lifecycle: _Lifecycle
    creation_time: float
    version: str | None = None
    vpc_id: str | None = None


@dataclass
class _Association:
    association_id: str
    resource_arn: str
    file_system_id: str
    file_system_path: str
    data_repository_path: str
    batch_import: bool
    chunk_size: int
    s3: dict[str, Any] | None
    creation_time: float
    lifecycle: _Lifecycle = field(default_factory=lambda: _Lifecycle(CREATING, lasts=clock.real_seconds(_DRA_CREATED)))

    def to_dict(self, backend: FSxBackend) -> dict[str, Any]:
        described: dict[str, Any] = {
            "AssociationId": self.association_id,
            "ResourceARN": self.resource_arn,
            "FileSystemId": self.file_system_id,
            "Lifecycle": self.lifecycle.state,
            "FileSystemPath": self.file_system_path,
            "DataRepositoryPath": self.data_repository_path,
            "BatchImportMetaDataOnCreate": self.batch_import,
            "ImportedFileChunkSize": self.chunk_size,
            "Tags": backend.list_tags_for_resource(self.resource_arn),
            "CreationTime": self.creation_time,
        }
        if self.s3 is not None:
            described["S3"] = deepcopy(self.s3)
        if self.lifecycle.failure is not None:
            described["FailureDetails"] = {"Message": self.lifecycle.failure}
        return described


@dataclass
class _Emulated:
    file_systems: dict[str, _FileSystemExtras] = field(default_factory=dict)
    associations: dict[str, _Association] = field(default_factory=dict)
    # ClientRequestToken -> (resource id, the request's other parameters)
    file_system_tokens: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    association_tokens: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)


def _state(backend: FSxBackend) -> _Emulated:
    state: _Emulated | None = backend.__dict__.get(_STATE_ATTR)
    if state is None:
        state = _Emulated()
        setattr(backend, _STATE_ATTR, state)
    return state


def _extras(backend: FSxBackend, file_system_id: str) -> _FileSystemExtras:
    """The emulated side of a file system; one the emulator did not see created is AVAILABLE."""
    state = _state(backend)
    if file_system_id not in state.file_systems:
        state.file_systems[file_system_id] = _FileSystemExtras(_Lifecycle(AVAILABLE), time.time())
    return state.file_systems[file_system_id]


def _hex_id(prefix: str) -> str:
    # AWS ids are the prefix and 17 hex digits; ParallelCluster's schema and the run file require it.
    return f"{prefix}-{uuid.uuid4().hex[:17]}"


def _error(code: str, message: str) -> JsonRESTError:
    return JsonRESTError(code, message)


def _same_request(
    tokens: dict[str, tuple[str, dict[str, Any]]],
    token: str | None,
    params: dict[str, Any],
    exists: Callable[[str], bool],
) -> str | None:
    """The id an earlier request with this token created, as AWS answers a retried create.

    A token reused with other parameters is IncompatibleParameterError, as in AWS. A token whose
    resource is gone starts afresh.
    """
    if not token or token not in tokens:
        return None
    resource_id, earlier = tokens[token]
    if not exists(resource_id):
        del tokens[token]
        return None
    if earlier != params:
        raise _error(
            "IncompatibleParameterError",
            f"The client request token {token} was already used with different parameters",
        )
    return resource_id


def _page(items: list[Any], params: dict[str, Any], default_size: int | None) -> tuple[list[Any], str | None]:
    """A page and the token of the next; tokens are base64 as the FSx NextToken pattern wants."""
    start = int(base64.b64decode(params["NextToken"]).decode()) if params.get("NextToken") else 0
    size = params.get("MaxResults") or default_size or len(items) or 1
    end = start + int(size)
    next_token = base64.b64encode(str(end).encode()).decode() if end < len(items) else None
    return items[start:end], next_token


# --- patch 1: CreateFileSystem -------------------------------------------------------------------

# moto's FileSystem takes these; the rest of a request is ours to keep.
_FILE_SYSTEM_ARGS = (
    "file_system_type",
    "storage_capacity",
    "storage_type",
    "subnet_ids",
    "security_group_ids",
    "kms_key_id",
    "windows_configuration",
    "lustre_configuration",
    "ontap_configuration",
    "open_zfs_configuration",
)


def _create_file_system(self: FSxBackend, client_request_token: str | None = None, **params: Any) -> FileSystem:
    with _lock:
        state = _state(self)
        existing = _same_request(state.file_system_tokens, client_request_token, params, self.file_systems.__contains__)
        if existing is not None:
            return self.file_systems[existing]
        lustre = deepcopy(params.get("lustre_configuration")) or None
        if params.get("file_system_type") == "LUSTRE":
            lustre = lustre or {}
            lustre.setdefault("DeploymentType", "SCRATCH_1")
            # Clients mount <dns>@tcp:/<MountName>; AWS gives SCRATCH_1 "fsx" and the others 8 random characters.
            lustre["MountName"] = "fsx" if lustre["DeploymentType"] == "SCRATCH_1" else _mount_name()
        arguments: dict[str, Any] = {name: params.get(name) for name in _FILE_SYSTEM_ARGS}
        arguments["lustre_configuration"] = lustre
        # Tags are applied below, under the final ARN: moto's constructor would tag its own 8-digit one.
        file_system = FileSystem(
            account_id=self.account_id, region_name=self.region_name, tags=None, backend=self, **arguments
        )
        file_system.file_system_id = _hex_id("fs")
        file_system.dns_name = f"{file_system.file_system_id}.fsx.{self.region_name}.amazonaws.com"
        file_system.resource_arn = (
            f"arn:aws:fsx:{self.region_name}:{self.account_id}:file-system/{file_system.file_system_id}"
        )
        if params.get("tags"):
            self.tagger.tag_resource(file_system.resource_arn, params["tags"])
        self.file_systems[file_system.file_system_id] = file_system
        state.file_systems[file_system.file_system_id] = _FileSystemExtras(
            lifecycle=_Lifecycle(CREATING, lasts=_creation_lasts(file_system)),
            creation_time=time.time(),
            version=params.get("file_system_type_version") or _default_lustre_version(file_system),
            vpc_id=_vpc_of(self, params.get("subnet_ids") or []),
        )
        if client_request_token:
            state.file_system_tokens[client_request_token] = (file_system.file_system_id, deepcopy(params))
        return file_system


def _creation_lasts(file_system: FileSystem) -> float | None:
    """On the AWS clock, how long a new Lustre file system stays CREATING (None: clock off, or not Lustre)."""
    deployment = (file_system.lustre_configuration or {}).get("DeploymentType")
    if file_system.file_system_type != "LUSTRE" or not deployment or not file_system.storage_capacity:
        return None
    return clock.real_seconds(aws_clock.fsx_created(deployment, int(file_system.storage_capacity)))


def _mount_name() -> str:
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def _default_lustre_version(file_system: FileSystem) -> str | None:
    # CreateFileSystem's documented default: 2.12 for PERSISTENT_2, 2.10 for the other Lustre types.
    if file_system.file_system_type != "LUSTRE":
        return None
    deployment = (file_system.lustre_configuration or {}).get("DeploymentType")
    return "2.12" if deployment == "PERSISTENT_2" else "2.10"


def _vpc_of(backend: FSxBackend, subnet_ids: list[str]) -> str | None:
    """The VPC of the first subnet, when moto's EC2 knows it (AWS returns VpcId; tests may use made-up subnets)."""
    if not subnet_ids:
        return None
    try:
        subnet = ec2_backends[backend.account_id][backend.region_name].get_subnet(subnet_ids[0])
    except InvalidSubnetIdError:
        return None
    vpc_id: str | None = subnet.vpc_id
    return vpc_id


# --- patch 2: DescribeFileSystems ----------------------------------------------------------------


def _describe_file_systems(self: FSxResponse) -> str:
    params = json.loads(self.body or "{}")
    backend = self.fsx_backend
    ids: list[str] = params.get("FileSystemIds") or []
    with _lock:
        for file_system_id in ids:
            if file_system_id not in backend.file_systems:
                raise FileSystemNotFound(file_system_id)
        chosen = [backend.file_systems[i] for i in ids] if ids else list(backend.file_systems.values())
        page, next_token = _page(chosen, params, None)
        described = []
        for file_system in page:
            state = _extras(backend, file_system.file_system_id).lifecycle.observe()
            _publish(file_system, state)
            if state == GONE:
                _forget_file_system(backend, file_system.file_system_id)
            else:
                described.append(file_system.to_dict())
    answer: dict[str, Any] = {"FileSystems": described}
    if next_token:
        answer["NextToken"] = next_token
    return json.dumps(answer)


def _publish(file_system: FileSystem, state: str) -> None:
    """Tell the local nodes whether the file system takes mounts now (trainrun.local.lustre_servers)."""
    mount_name = (file_system.lustre_configuration or {}).get("MountName")
    if file_system.file_system_type == "LUSTRE" and mount_name:
        lustre_servers.publish(file_system.dns_name, mount_name, available=state == AVAILABLE)


def _forget_file_system(backend: FSxBackend, file_system_id: str) -> None:
    state = _state(backend)
    file_system = backend.file_systems.pop(file_system_id)
    backend.tagger.delete_all_tags_for_resource(file_system.resource_arn)
    state.file_systems.pop(file_system_id, None)
    for association in [a for a in state.associations.values() if a.file_system_id == file_system_id]:
        _forget_association(backend, association.association_id)


# --- patch 3: DeleteFileSystem -------------------------------------------------------------------


def _delete_file_system(
    self: FSxBackend,
    file_system_id: str,
    client_request_token: str | None = None,
    windows_configuration: dict[str, Any] | None = None,
    lustre_configuration: dict[str, Any] | None = None,
    open_zfs_configuration: dict[str, Any] | None = None,
) -> tuple[str, str, dict[str, Any] | None, dict[str, Any] | None, dict[str, Any] | None]:
    with _lock:
        if file_system_id not in self.file_systems:
            raise FileSystemNotFound(file_system_id)
        file_system = self.file_systems[file_system_id]
        lifecycle = _extras(self, file_system_id).lifecycle
        if lifecycle.state != DELETING:
            lifecycle.enter(DELETING, lasts=clock.real_seconds(aws_clock.FSX_DELETED))
            _publish(file_system, DELETING)
            for association in _state(self).associations.values():
                if association.file_system_id == file_system_id and association.lifecycle.state != DELETING:
                    association.lifecycle.enter(DELETING, lasts=clock.real_seconds(aws_clock.FSX_DELETED))
    # No final backup is taken, so there is no FinalBackupId to report.
    response: dict[str, Any] = {}
    kind = file_system.file_system_type
    return (
        file_system_id,
        DELETING,
        response if kind == "WINDOWS" else None,
        response if kind == "LUSTRE" else None,
        response if kind == "OPENZFS" else None,
    )


# --- patch 4: FileSystem.to_dict -----------------------------------------------------------------


def _file_system_to_dict(self: FileSystem) -> dict[str, Any]:
    assert _original_to_dict is not None  # set by install(), before this is patched in
    described = _original_to_dict(self)
    extras = _extras(self.backend, self.file_system_id)
    described["Lifecycle"] = extras.lifecycle.state
    described["CreationTime"] = extras.creation_time
    described["OwnerId"] = self.backend.account_id
    if extras.version:
        described["FileSystemTypeVersion"] = extras.version
    if extras.vpc_id:
        described["VpcId"] = extras.vpc_id
    if extras.lifecycle.failure is not None:
        described["FailureDetails"] = {"Message": extras.lifecycle.failure}
    return described


# --- patch 5: data repository associations -------------------------------------------------------


def _create_association(self: FSxResponse) -> str:
    params = json.loads(self.body or "{}")
    token = params.pop("ClientRequestToken", None)
    backend = self.fsx_backend
    with _lock:
        state = _state(backend)
        existing = _same_request(state.association_tokens, token, params, state.associations.__contains__)
        if existing is not None:
            return json.dumps({"Association": state.associations[existing].to_dict(backend)})
        file_system_id = params.get("FileSystemId", "")
        file_system_path = params.get("FileSystemPath")
        repository_path = params.get("DataRepositoryPath", "")
        file_system = _association_target(backend, file_system_id)
        if not file_system_path:
            raise _error("BadRequest", "FileSystemPath is required for an FSx for Lustre file system")
        if not repository_path.startswith("s3://"):
            raise _error("BadRequest", f"DataRepositoryPath {repository_path} is not an s3:// path")
        siblings = [a for a in state.associations.values() if a.file_system_id == file_system_id]
        for sibling in siblings:
            if sibling.file_system_path == file_system_path or sibling.data_repository_path == repository_path:
                raise _error(
                    "BadRequest",
                    f"{file_system_id} already links {sibling.file_system_path} to {sibling.data_repository_path} "
                    f"({sibling.association_id}); each association needs its own path and repository",
                )
        if len(siblings) >= MAX_ASSOCIATIONS_PER_FILE_SYSTEM:
            raise _error("ServiceLimitExceeded", f"{file_system_id} already has {len(siblings)} associations")
        association_id = _hex_id("dra")
        association = _Association(
            association_id=association_id,
            resource_arn=f"{file_system.resource_arn.rsplit(':', 1)[0]}:association/{file_system_id}/{association_id}",
            file_system_id=file_system_id,
            file_system_path=file_system_path,
            data_repository_path=repository_path,
            batch_import=bool(params.get("BatchImportMetaDataOnCreate", False)),
            chunk_size=int(params.get("ImportedFileChunkSize") or 1024),
            s3=params.get("S3"),
            creation_time=time.time(),
        )
        state.associations[association_id] = association
        if params.get("Tags"):
            backend.tagger.tag_resource(association.resource_arn, params["Tags"])
        if token:
            state.association_tokens[token] = (association_id, params)
        return json.dumps({"Association": association.to_dict(backend)})


def _association_target(backend: FSxBackend, file_system_id: str) -> FileSystem:
    """The file system to link, refused as AWS refuses it (the messages are ours)."""
    file_system = backend.file_systems.get(file_system_id)
    if file_system is None:
        raise FileSystemNotFound(file_system_id)
    extras = _extras(backend, file_system_id)
    deployment = (file_system.lustre_configuration or {}).get("DeploymentType")
    if (
        file_system.file_system_type != "LUSTRE"
        or deployment == "SCRATCH_1"
        or extras.version not in DRA_LUSTRE_VERSIONS
    ):
        raise _error(
            "UnsupportedOperation",
            f"{file_system_id} ({file_system.file_system_type} {deployment}, Lustre {extras.version}) takes no data "
            "repository associations: they need FSx for Lustre 2.12 or 2.15, not SCRATCH_1",
        )
    if extras.lifecycle.state != AVAILABLE:
        raise _error(
            "BadRequest", f"{file_system_id} is {extras.lifecycle.state}; link a data repository once it is AVAILABLE"
        )
    return file_system


# DescribeDataRepositoryAssociations filter name -> how an association matches a value.
_ASSOCIATION_FILTERS: dict[str, Callable[[_Association, str], bool]] = {
    "file-system-id": lambda a, value: a.file_system_id == value,
    "data-repository-type": lambda a, value: value == ("S3" if a.data_repository_path.startswith("s3://") else "NFS"),
    "file-cache-id": lambda a, value: False,  # the emulator has no File Cache
}


def _describe_associations(self: FSxResponse) -> str:
    params = json.loads(self.body or "{}")
    backend = self.fsx_backend
    ids: list[str] = params.get("AssociationIds") or []
    filters: list[dict[str, Any]] = params.get("Filters") or []
    with _lock:
        state = _state(backend)
        for association_id in ids:
            if association_id not in state.associations:
                raise _error(
                    "DataRepositoryAssociationNotFound", f"Data repository association {association_id} does not exist"
                )
        for item in filters:
            if item.get("Name") not in _ASSOCIATION_FILTERS:
                raise _error("BadRequest", f"Unsupported filter {item.get('Name')}")
        chosen = [state.associations[i] for i in ids] if ids else list(state.associations.values())
        chosen = [
            a
            for a in chosen
            if all(any(_ASSOCIATION_FILTERS[f["Name"]](a, v) for v in f.get("Values", [])) for f in filters)
        ]
        page, next_token = _page(chosen, params, MAX_ASSOCIATIONS_PER_PAGE)
        described = []
        for association in page:
            if association.lifecycle.observe() == GONE:
                _forget_association(backend, association.association_id)
            else:
                described.append(association.to_dict(backend))
    answer: dict[str, Any] = {"Associations": described}
    if next_token:
        answer["NextToken"] = next_token
    return json.dumps(answer)


def _delete_association(self: FSxResponse) -> str:
    params = json.loads(self.body or "{}")
    association_id = params.get("AssociationId", "")
    backend = self.fsx_backend
    with _lock:
        association = _state(backend).associations.get(association_id)
        if association is None:
            raise _error(
                "DataRepositoryAssociationNotFound", f"Data repository association {association_id} does not exist"
            )
        if association.lifecycle.state != DELETING:
            association.lifecycle.enter(DELETING, lasts=clock.real_seconds(_DRA_DELETED))
    return json.dumps(
        {
            "AssociationId": association_id,
            "Lifecycle": DELETING,
            "DeleteDataInFileSystem": bool(params.get("DeleteDataInFileSystem", False)),
        }
    )


def _forget_association(backend: FSxBackend, association_id: str) -> None:
    association = _state(backend).associations.pop(association_id)
    backend.tagger.delete_all_tags_for_resource(association.resource_arn)


# --- patch 6: the Resource Groups Tagging API ----------------------------------------------------


def _iter_tagged_resources(self: FSxBackend) -> Iterator[TaggedResource]:
    assert _original_iter_tagged is not None  # set by install(), before this is patched in
    yield from _original_iter_tagged(self)
    for association in list(_state(self).associations.values()):
        yield TaggedResource(
            arn=association.resource_arn,
            tags=self.tagger.get_tag_dict_for_resource(association.resource_arn),
            resource_type="fsx:association",
        )
