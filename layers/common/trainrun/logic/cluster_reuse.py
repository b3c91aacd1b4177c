"""Running on a kept cluster (`cluster: {reuse: <run name or run id>}`): which run lends it,
whether it can, and whether the run fits it.

A cluster is lent by a run that ended with its teardown policy keeping everything
(`teardown.on_success`/`on_failure: keep`, `trainrun local --keep`) and that `trainrun down` has
not begun to delete. The borrowing run creates nothing of its own: Validate capacity records the
owner's cluster, file system and network on it as borrowed (trainrun.model.run_record.Borrowed),
its teardown deletes none of them, and `trainrun down OWNER` refuses while a borrower still runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath

from trainrun.model.findings import Code, Finding, Severity
from trainrun.model.run_file import COMPILE_CACHE_OFF, RunSpec
from trainrun.model.run_record import RunRecord, RunStatus, RunStore

# A kept cluster's head node role is made with the first run's S3Access: that run's workload
# archive and nothing of a later run's. So a run on the cluster has its archive copied by Prepare
# head node to `<prefix><owner's run id>/<run id>/`, which the head node of a cluster that may be
# kept reads, read-only (trainrun.logic.cluster_config.render_cluster_config).
LENT_SOURCES_PREFIX = "cluster-sources/"


def lent_sources_prefix(owner_run_id: str) -> str:
    """The config bucket's prefix the head node of `owner_run_id`'s cluster reads later runs' archives from."""
    return f"{LENT_SOURCES_PREFIX}{owner_run_id}/"


def lent_source_key(owner_run_id: str, run_id: str, source_uri: str) -> str:
    """Where, in the config bucket, the archive `source_uri` of run `run_id` on `owner_run_id`'s
    cluster is copied: its file name kept (the head node unpacks by the name's suffix)."""
    return f"{lent_sources_prefix(owner_run_id)}{run_id}/{PurePosixPath(source_uri).name}"


def lender(records: Iterable[RunRecord], ref: str, *, borrower_id: str) -> RunRecord | None:
    """The run `ref` names: the run with that run id, else the latest run of that name that is not
    the borrower itself (which often shares the name) nor another borrower (which has no cluster to lend)."""
    candidates = [record for record in records if record.run_id != borrower_id]
    by_id = next((record for record in candidates if record.run_id == ref), None)
    if by_id is not None:
        return by_id
    named = [record for record in candidates if record.name == ref and record.borrowed is None]
    return max(named, key=lambda record: record.created_at, default=None)


def reuse_findings(spec: RunSpec, owner: RunRecord | None) -> list[Finding]:
    """Whether `owner`'s cluster can be lent, and whether the run of `spec` fits it: ERRORs that
    reject the run, or one INFO saying whose cluster it runs on."""
    ref = spec.cluster.reuse
    if ref is None:
        return []
    if owner is None:
        return [
            _error(
                Code.REUSED_RUN_NOT_FOUND,
                f"no run {ref!r} in this stack: give the name or run id of a run whose cluster was kept "
                "(`trainrun runs` lists the runs)",
            )
        ]
    refusal = _cannot_lend(owner)
    if refusal is not None:
        return [refusal]
    assert owner.spec is not None and owner.cluster is not None  # _cannot_lend saw to it
    misfits = _misfits(spec, owner)
    if misfits:
        return [_error(Code.REUSED_CLUSTER_DOES_NOT_FIT, misfit) for misfit in misfits]
    return [
        Finding(
            code=Code.CLUSTER_REUSED,
            severity=Severity.INFO,
            message=(
                f"cluster.reuse: runs on cluster {owner.cluster.name} of run {_named(owner)}, kept since "
                f"{owner.kept_at:%Y-%m-%d %H:%M} UTC; this run creates no network, file system or cluster, and "
                f"leaves them to `trainrun down {owner.run_id}`"
            ),
        )
    ]


def borrowers(records: Iterable[RunRecord], owner: RunRecord) -> list[RunRecord]:
    """The runs still running that run, or may be about to run, on `owner`'s cluster: those that
    borrowed it, and those whose run file names it and that have not been checked yet."""
    names = {owner.run_id} | ({owner.name} if owner.name else set())
    return [
        record
        for record in records
        if record.run_id != owner.run_id
        and record.status == RunStatus.RUNNING
        and (
            (record.borrowed is not None and record.borrowed.run_id == owner.run_id)
            or (record.borrowed is None and record.spec is not None and record.spec.cluster.reuse in names)
        )
    ]


def claim_for_teardown(store: RunStore, owner: RunRecord) -> list[RunRecord]:
    """Record that `owner`'s kept cluster is being deleted (`trainrun down`, or the janitor past its
    teardown.keep_for), unless runs are on it: those runs, the claim withdrawn.

    The down is recorded first, then the runs are read: a run checked after the record is refused
    the cluster (REUSED_CLUSTER_TORN_DOWN), and one checked before is found here, so the claim is
    withdrawn; there is no moment in between.
    """
    store.request_down(owner.run_id)
    running = borrowers(store.scan(), owner)
    if running:
        store.withdraw_down(owner.run_id)
    return running


def teardown_policy(record: RunRecord) -> str | None:
    """The teardown policy that applied to the run's end (`keep` or `delete`); None without a spec."""
    if record.spec is None:
        return None
    teardown = record.spec.teardown
    return teardown.on_success if record.status == RunStatus.SUCCEEDED else teardown.on_failure


def keeps_cluster(record: RunRecord) -> bool:
    """Whether the run's cluster is kept now: its teardown kept it, and no teardown has deleted it since."""
    return (
        record.kept_at is not None
        and record.torn_down_at is None
        and record.borrowed is None
        and record.cluster is not None
        and teardown_policy(record) == "keep"
    )


def _cannot_lend(owner: RunRecord) -> Finding | None:
    named = _named(owner)
    if owner.borrowed is not None:
        return _error(
            Code.REUSED_RUN_HAS_NO_CLUSTER,
            f"run {named} ran on the kept cluster of run {owner.borrowed.run_id}, it has none of its own: "
            f"set cluster.reuse: {owner.borrowed.run_id}",
        )
    if owner.status == RunStatus.RUNNING:
        return _error(
            Code.REUSED_RUN_STILL_RUNNING,
            f"run {named} is still running; its teardown, when it ends, decides whether its cluster is kept: "
            "reuse it once it has ended with its cluster kept",
        )
    if owner.down_requested_at is not None or owner.torn_down_at is not None:
        when = owner.torn_down_at or owner.down_requested_at
        return _error(
            Code.REUSED_CLUSTER_TORN_DOWN,
            f"run {named}'s cluster is torn down (`trainrun down`, {when:%Y-%m-%d %H:%M} UTC): "
            "run without cluster.reuse to create a cluster",
        )
    if owner.cluster is None or owner.spec is None:
        return _error(
            Code.REUSED_RUN_HAS_NO_CLUSTER,
            f"run {named} ended {owner.status.value} before it created a cluster: run without cluster.reuse "
            "to create one",
        )
    policy = teardown_policy(owner)
    if owner.kept_at is None or policy != "keep":
        return _error(
            Code.REUSED_RUN_NOT_KEPT,
            f"run {named}'s teardown deleted its cluster ({owner.status.value}, teardown "
            f"{'on_success' if owner.status == RunStatus.SUCCEEDED else 'on_failure'}: {policy}): keep a cluster with "
            "teardown: {on_success: keep, on_failure: keep} (or `trainrun local --keep`), then reuse it",
        )
    return None


def _misfits(spec: RunSpec, owner: RunRecord) -> list[str]:
    """How the run's capacity section differs from the cluster's: each with the value that fits."""
    assert owner.spec is not None and owner.cluster is not None
    named, theirs, ours = _named(owner), owner.spec.capacity, spec.capacity
    misfits = []
    if ours.instance_type != theirs.instance_type:
        misfits.append(
            f"capacity.instance_type: {ours.instance_type}, but run {named}'s cluster has {theirs.instance_type} "
            f"nodes: set instance_type: {theirs.instance_type}"
        )
    if ours.nodes > theirs.nodes:
        misfits.append(
            f"capacity.nodes: {ours.nodes}, but run {named}'s cluster has {theirs.nodes}: set nodes: {theirs.nodes} "
            "or fewer (or run without cluster.reuse to create a larger cluster)"
        )
    for field in ("reservation_id", "reservation_group_arn"):
        if getattr(ours, field) != getattr(theirs, field):
            shown = getattr(theirs, field) or "none"
            misfits.append(
                f"capacity.{field}: {getattr(ours, field) or 'none'}, but run {named}'s cluster runs on {shown}: "
                f"name the same reservation as run {named}"
            )
    if ours.availability_zone is not None and ours.availability_zone != owner.availability_zone:
        misfits.append(
            f"capacity.availability_zone: {ours.availability_zone}, but run {named}'s cluster is in "
            f"{owner.availability_zone}: remove it"
        )
    if spec.region is not None and spec.region != owner.cluster.region:
        misfits.append(f"region: {spec.region}, but run {named}'s cluster is in {owner.cluster.region}: remove it")
    return misfits + _unreadable(spec, owner.spec, named)


def _unreadable(spec: RunSpec, owners: RunSpec, named: str) -> list[str]:
    """What the run's nodes would read from S3 that the kept cluster's cannot: their roles were made
    with the owner's run file (trainrun.logic.cluster_config), and only the workload archive is
    copied to where they read it (lent_source_key). So the dataset and the checkpoints to resume
    from must be ones the owner's head node reads, and the compile cache the owner's."""
    misfits = []
    read = (
        ("workload.dataset.source", _dataset(spec), _dataset(owners)),
        ("workload.resume_from", spec.workload.resume_from, owners.workload.resume_from),
    )
    for field, uri, theirs in read:
        if uri is not None and not _owner_reads(owners, uri):
            misfits.append(
                f"{field}: {uri}, but run {named}'s cluster reads only what run {named} named "
                f"({theirs or 'none'}; its nodes' role is made with the cluster): use that, remove it, "
                "or run without cluster.reuse"
            )
    ours, theirs_cache = spec.workload.compile_cache, owners.workload.compile_cache
    if ours not in (theirs_cache, COMPILE_CACHE_OFF):
        misfits.append(
            f"workload.compile_cache: {ours or 'the default'}, but run {named}'s compute nodes use "
            f"{theirs_cache or 'the default'} only (their role is made with the cluster): set "
            f"{theirs_cache or 'none (the default)'} or off"
        )
    return misfits


def _owner_reads(owners: RunSpec, uri: str) -> bool:
    """Whether the owner's head node reads `uri`: the owner's dataset object, any key of the
    bucket of its dataset prefix (listed whole), or what is under its resume_from prefix."""
    bucket = uri.removeprefix("s3://").partition("/")[0]
    dataset = _dataset(owners)
    if dataset is not None:
        dataset_bucket, _, dataset_key = dataset.removeprefix("s3://").partition("/")
        if uri == dataset or (dataset_bucket == bucket and (not dataset_key or dataset_key.endswith("/"))):
            return True
    return owners.workload.resume_from is not None and uri.startswith(owners.workload.resume_from)


def _dataset(spec: RunSpec) -> str | None:
    return spec.workload.dataset.source if spec.workload.dataset else None


def _named(record: RunRecord) -> str:
    return f"{record.name} ({record.run_id})" if record.name and record.name != record.run_id else record.run_id


def _error(code: Code, message: str) -> Finding:
    return Finding(code=code, severity=Severity.ERROR, message=message)
