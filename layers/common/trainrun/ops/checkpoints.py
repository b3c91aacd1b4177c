"""A run's exported checkpoints: what teardown copied to S3 (trainrun.steps.checkpoints), listed
and downloaded as the operator.

Where. The record's `checkpoints` says where the export went (trainrun.model.checkpoints): the
config bucket's `checkpoints/<run id>/`, which the operator's minimum policy may list and read
(docs/deployment.md), or under the run's data repository, the user's own bucket, which the
operator reads with their own access to it.

Download. Each file goes to DIR + its path under the run's prefix, through a `.part` file renamed
when whole: a file already there with the object's size is not fetched again, so a download cut
short is finished by running it again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainrun.model.checkpoints import ExportStatus
from trainrun.model.run_record import RunRecord

# A checkpoint's step, from its name: the number after "step", "ckpt", "checkpoint", "iter" or
# "global_step" ("step-40.json", "checkpoint_1000/model.pt", "global_step200/"); None when its
# path has none (a tokenizer's files).
_STEP = re.compile(r"(?:step|ckpt|checkpoint|iter)[-_ ]?(\d{1,12})(?!\d)", re.IGNORECASE)
_CHUNK_BYTES = 1 << 20
PART_SUFFIX = ".part"


class NoCheckpoints(Exception):
    """The run has no exported checkpoints to list (yet): the message says why."""


@dataclass(frozen=True)
class CheckpointFile:
    path: str  # under the run's prefix, '/'-separated
    size: int
    step: int | None


@dataclass(frozen=True)
class Downloaded:
    files: int
    bytes: int
    already_there: int


def checkpoint_location(record: RunRecord) -> str:
    """The s3:// prefix the run's checkpoints were exported to, or NoCheckpoints saying why none."""
    export = record.checkpoints
    if export is None:
        raise NoCheckpoints(
            f"run {record.run_id} has no exported checkpoints (yet): teardown exports them before the file system "
            "goes (a run kept by its teardown policy: when `trainrun down` deletes it)"
        )
    if export.status == ExportStatus.EXPORTING:
        raise NoCheckpoints(f"run {record.run_id}'s checkpoints are still being exported to {export.destination}")
    location = export.exported_to
    if location is None:
        raise NoCheckpoints(f"run {record.run_id} has no exported checkpoints: {export.summary()}")
    return location


def step_of(path: str) -> int | None:
    """The training step a checkpoint file's path names (its last step-like number), if any."""
    matches = _STEP.findall(path)
    return int(matches[-1]) if matches else None


def list_checkpoints(s3: Any, location: str) -> list[CheckpointFile]:
    """Every object under `location` (an s3:// prefix ending in '/'), by path."""
    bucket, prefix = _split(location)
    files = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            path = item["Key"].removeprefix(prefix)
            if path and not path.endswith("/"):
                files.append(CheckpointFile(path=path, size=int(item["Size"]), step=step_of(path)))
    return sorted(files, key=lambda file: file.path)


def download_checkpoints(
    s3: Any,
    location: str,
    files: list[CheckpointFile],
    directory: Path,
    *,
    on_file: Callable[[CheckpointFile], None] = lambda file: None,
    on_bytes: Callable[[int], None] = lambda count: None,
) -> Downloaded:
    """Fetch `files` into `directory`; one already there with the same size is skipped."""
    bucket, prefix = _split(location)
    fetched = fetched_bytes = skipped = 0
    for file in files:
        target = local_path(directory, file.path)
        on_file(file)
        if target.is_file() and target.stat().st_size == file.size:
            skipped += 1
            on_bytes(file.size)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + PART_SUFFIX)
        body = s3.get_object(Bucket=bucket, Key=prefix + file.path)["Body"]
        with part.open("wb") as stream:
            for chunk in _chunks(body):
                stream.write(chunk)
                on_bytes(len(chunk))
        os.replace(part, target)
        fetched, fetched_bytes = fetched + 1, fetched_bytes + file.size
    return Downloaded(files=fetched, bytes=fetched_bytes, already_there=skipped)


def local_path(directory: Path, path: str) -> Path:
    """Where an object's path goes under `directory`; a path that would leave it is refused
    (S3 keys may hold '..' and absolute-looking parts: the bucket is not ours to trust)."""
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"checkpoint object {path!r} has a path that would leave {directory}: not downloaded")
    return directory.joinpath(*parts)


def _chunks(body: Any) -> Iterator[bytes]:
    while chunk := body.read(_CHUNK_BYTES):
        yield chunk


def _split(location: str) -> tuple[str, str]:
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    return bucket, prefix
