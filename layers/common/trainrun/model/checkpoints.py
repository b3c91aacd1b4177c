"""Checkpoints that outlive teardown: where a run's checkpoint directory is exported before its
file system goes, and what the export did (the run record's `checkpoints`)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from trainrun.model.run_file import RunSpec

# The prefix of the stack's config bucket that holds exported checkpoints, one prefix per run.
CHECKPOINTS_PREFIX = "checkpoints/"


def export_destination(spec: RunSpec, run_id: str, config_bucket: str) -> str:
    """Where the run's checkpoints go: under its data repository when it has one (the user's
    bucket, beside the data the run linked), else the stack's config bucket. The config bucket
    is the stack's only bucket; it already holds what runs read (cluster-scripts/) and only
    `runs/` starts runs, so checkpoints/ starts nothing, and its versioning keeps an overwritten
    checkpoint."""
    repository = spec.storage.fsx.data_repository
    base = repository.rstrip("/") if repository is not None else f"s3://{config_bucket}"
    return f"{base}/{CHECKPOINTS_PREFIX}{run_id}/"


class ExportStatus(StrEnum):
    EXPORTING = "EXPORTING"
    EXPORTED = "EXPORTED"
    # Nothing to export (no job ran, an empty directory, a file system teardown never deletes).
    SKIPPED = "SKIPPED"
    # The export failed or ran out of time; the teardown went on (a WARNING finding says so).
    FAILED = "FAILED"


class CheckpointExport(BaseModel):
    """The record's `checkpoints`: written once when the export starts (with its SSM command),
    then once more when it ends; a teardown pass that finds it ended does not export again."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    status: ExportStatus
    destination: str | None = None
    command_id: str | None = None
    files: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    # Why it was skipped or failed, for a person.
    reason: str = ""

    @property
    def ended(self) -> bool:
        return self.status != ExportStatus.EXPORTING

    @property
    def exported_to(self) -> str | None:
        """The S3 prefix that holds the run's checkpoints (`workload.resume_from` of a later run)."""
        return self.destination if self.status == ExportStatus.EXPORTED else None

    def summary(self) -> str:
        """One line for `status` and the run summary."""
        if self.status == ExportStatus.EXPORTED:
            return f"exported to {self.destination} ({self.files} files)"
        if self.status == ExportStatus.EXPORTING:
            return f"exporting to {self.destination}"
        return f"{self.status.value.lower()}: {self.reason}"
