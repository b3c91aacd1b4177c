"""Findings: what a check found, each with a stable code, a severity and an actionable message.

Like aws-parallelcluster's ValidationResult with its FailureLevel: checks return every finding,
never just the first exception. Any ERROR rejects a run before anything billable exists.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class Severity(StrEnum):
    ERROR = "ERROR"
    WARNING = "WARNING"
    INFO = "INFO"


class Code(StrEnum):
    """Stable finding codes. Renaming one is a breaking change for whoever reads findings."""

    CAPACITY_RESERVATION_NOT_FOUND = "CAPACITY_RESERVATION_NOT_FOUND"
    CAPACITY_RESERVATION_NOT_ACTIVE = "CAPACITY_RESERVATION_NOT_ACTIVE"
    INSTANCE_TYPE_MISMATCH = "INSTANCE_TYPE_MISMATCH"
    INSUFFICIENT_CAPACITY = "INSUFFICIENT_CAPACITY"
    AVAILABILITY_ZONE_MISMATCH = "AVAILABILITY_ZONE_MISMATCH"
    RESERVATION_ENDS_BEFORE_RUN = "RESERVATION_ENDS_BEFORE_RUN"
    PLATFORM_MISMATCH = "PLATFORM_MISMATCH"
    REGION_MISMATCH = "REGION_MISMATCH"
    RESERVATION_GROUP_EMPTY = "RESERVATION_GROUP_EMPTY"
    RESERVATION_GROUP_MIXED = "RESERVATION_GROUP_MIXED"
    INSTANCE_TYPE_NOT_SUPPORTED = "INSTANCE_TYPE_NOT_SUPPORTED"
    TARGETED_RESERVATION = "TARGETED_RESERVATION"
    OPEN_RESERVATION = "OPEN_RESERVATION"
    CAPACITY_BLOCK = "CAPACITY_BLOCK"
    PLACEMENT_GROUP_DISABLED = "PLACEMENT_GROUP_DISABLED"
    AVAILABILITY_ZONE_SELECTED = "AVAILABILITY_ZONE_SELECTED"
    # A capacity block or reservation that starts later: the run waits for it (Wait for capacity).
    RESERVATION_STARTS_LATER = "RESERVATION_STARTS_LATER"
    # Load run spec reports each run-file problem with this code, so a rejected run shows its
    # reasons in one list whichever step rejected it.
    RUN_FILE_INVALID = "RUN_FILE_INVALID"
    # An environment variable of the run file that a run may set but that usually breaks a
    # Neuron job (trainrun.model.run_file.RISKY_ENV_NAMES); the ones that cannot work are RUN_FILE_INVALID.
    ENVIRONMENT_VARIABLE_RISKY = "ENVIRONMENT_VARIABLE_RISKY"
    # A run file names a bucket or topic the stack does not allow (trainrun.logic.allowlists).
    BUCKET_NOT_ALLOWED = "BUCKET_NOT_ALLOWED"
    TOPIC_NOT_ALLOWED = "TOPIC_NOT_ALLOWED"
    CONFIG_BUCKET_RUN_FILES = "CONFIG_BUCKET_RUN_FILES"
    # A run file that names a local directory (workload.source.path) reached the stack as it
    # was, not through `trainrun submit`, which packs and uploads the directory.
    SOURCE_NOT_PACKED = "SOURCE_NOT_PACKED"
    # What the run reads before its jobs start (trainrun.logic.run_inputs): an S3 object or prefix
    # that is not there, or that the checker may not read; a git source whose ref is not there or
    # whose repository cannot be reached; GIT_SOURCE_NOT_CHECKED (INFO) where it cannot be checked.
    S3_INPUT_NOT_FOUND = "S3_INPUT_NOT_FOUND"
    S3_INPUT_NOT_READABLE = "S3_INPUT_NOT_READABLE"
    GIT_REF_NOT_FOUND = "GIT_REF_NOT_FOUND"
    GIT_SOURCE_UNREACHABLE = "GIT_SOURCE_UNREACHABLE"
    GIT_SOURCE_NOT_CHECKED = "GIT_SOURCE_NOT_CHECKED"
    # Teardown could not export the run's checkpoints before deleting its file system
    # (trainrun.steps.checkpoints); the teardown went on.
    CHECKPOINT_EXPORT_FAILED = "CHECKPOINT_EXPORT_FAILED"
    # cluster.reuse (trainrun.logic.cluster_reuse): the run to reuse the cluster of cannot lend it,
    # or the run does not fit it; CLUSTER_REUSED (INFO) says whose cluster an accepted run runs on.
    REUSED_RUN_NOT_FOUND = "REUSED_RUN_NOT_FOUND"
    REUSED_RUN_STILL_RUNNING = "REUSED_RUN_STILL_RUNNING"
    REUSED_RUN_HAS_NO_CLUSTER = "REUSED_RUN_HAS_NO_CLUSTER"
    REUSED_RUN_NOT_KEPT = "REUSED_RUN_NOT_KEPT"
    REUSED_CLUSTER_TORN_DOWN = "REUSED_CLUSTER_TORN_DOWN"
    REUSED_CLUSTER_DOES_NOT_FIT = "REUSED_CLUSTER_DOES_NOT_FIT"
    CLUSTER_REUSED = "CLUSTER_REUSED"


class Finding(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    code: Code
    severity: Severity
    message: str


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(finding.severity == Severity.ERROR for finding in findings)
