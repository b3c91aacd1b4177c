"""A local directory as the workload, as the commands show it: `validate` and `plan` say what will
be packed, `submit` and `local` pack and upload it and send the run file that names the archive."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainrun.cli.common import err, fail

if TYPE_CHECKING:
    from rich.progress import Progress

    from trainrun.model.run_file import RunSpec
    from trainrun.ops.source_archive import SourceListing

# An upload at least this large shows a progress bar (on a terminal); a smaller one is over before
# it would help.
PROGRESS_FROM_BYTES = 8 * 1024**2


def listed_source(spec: RunSpec, run_file: Path) -> SourceListing | None:
    """What `workload.source.path` packs (None for a git or S3 source); exit 2 when it cannot be packed."""
    from trainrun.ops.source_archive import SourceInvalid, check_workdir, list_source, source_directory

    directory = source_directory(spec, run_file)
    if directory is None:
        return None
    try:
        listing = list_source(directory)
        check_workdir(listing, spec.workload.workdir)
        return listing
    except SourceInvalid as exc:
        raise fail(str(exc)) from None


def say_what_is_packed(spec: RunSpec, listing: SourceListing) -> None:
    """One line on stderr: the directory and what of it `trainrun submit` will pack."""
    err.print(
        f"workload.source.path: {spec.workload.source.path}: {listing.describe()} to pack "
        "(trainrun submit uploads them to the config bucket, under sources/)",
        highlight=False,
    )


def as_packed(spec: RunSpec, listing: SourceListing, config_bucket: str) -> RunSpec:
    """The run as it will reach the stack: `workload.source.path` replaced by the S3 URI the
    listing's archive will have in `config_bucket` (packed, to know its name, but not uploaded)."""
    from trainrun.ops.source_archive import archive_uri, pack

    uri = archive_uri(config_bucket, spec.name, pack(listing, _Discard()))
    source = spec.workload.source.model_copy(update={"path": None, "s3": uri})
    return spec.model_copy(update={"workload": spec.workload.model_copy(update={"source": source})})


class _Discard:
    """Where an archive packed only for its hash goes."""

    def write(self, data: bytes) -> int:
        return len(data)

    def flush(self) -> None:
        pass


def upload_workload_directory(
    s3: Any, bucket: str, spec: RunSpec, data: bytes, run_file: Path, *, quiet: bool = False
) -> bytes:
    """The run file to upload: as it is, or, for `workload.source.path`, naming the directory's
    archive, packed and uploaded to `bucket` first (with a progress bar when large)."""
    from trainrun.ops.source_archive import SOURCES_PREFIX, human_bytes, upload_source, with_archive

    listing = listed_source(spec, run_file)  # refused here, with the reason, before anything is sent
    if listing is None:
        return data
    bar: Progress | None = None
    # The upload calls back from its threads: the bar is made once.
    making = threading.Lock()

    def progress(sent: int, total: int) -> None:
        nonlocal bar
        if quiet or total < PROGRESS_FROM_BYTES or not err.is_terminal:
            return
        with making:
            if bar is None:
                from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

                bar = Progress(
                    "uploading the workload",
                    BarColumn(),
                    DownloadColumn(binary_units=True),
                    TransferSpeedColumn(),
                    console=err,
                )
                bar.start()
                bar.add_task("upload", total=total)
        bar.update(bar.task_ids[0], completed=sent)

    from botocore.exceptions import ClientError

    try:
        packed, uri, uploaded = upload_source(s3, bucket, spec, listing, progress=progress)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise fail(
            f"cannot upload the workload directory to s3://{bucket}/{SOURCES_PREFIX}: {error.get('Code')}: "
            f"{error.get('Message')} (the operator's policy needs s3:PutObject and s3:GetObject on "
            f"{bucket}/{SOURCES_PREFIX}*; see docs/deployment.md)"
        ) from None
    finally:
        if bar is not None:
            bar.stop()
    if not quiet:
        done = "uploaded to" if uploaded else "unchanged, already at"
        err.print(
            f"packed {spec.workload.source.path}: {packed.listing.describe()} "
            f"({human_bytes(packed.archive_size)} compressed), {done} {uri}",
            highlight=False,
        )
    return with_archive(data, uri)
