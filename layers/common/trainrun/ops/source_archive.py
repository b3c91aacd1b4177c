"""A local directory as the workload (`workload.source.path`): packed by `trainrun submit` into a
reproducible tar.gz, uploaded to the config bucket, and named in the uploaded run file instead.

The run's functions and head node cannot read the user's disk, so the run file that reaches the
stack names the archive (`source.s3`): the config bucket, outside `runs/`, one object, which the
head node may read as exactly that object (trainrun.logic.cluster_config's S3Access with KeyName).

The archive's key is its content's SHA-256 (`sources/<run name>/<sha256>.tar.gz`): the same tree
gives the same bytes, so an unchanged tree is uploaded once, and no upload under `sources/` starts
a run (only `runs/` does).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

import yaml
from pydantic import BaseModel

from trainrun.errors import TrainrunError
from trainrun.model.run_file import RunSpec, parse_run_file

SOURCES_PREFIX = "sources/"
# The unpacked size a directory may have: a workload's code, not its data (workload.dataset).
MAX_SOURCE_BYTES = 1024**3
# Every entry's modification time in the archive (1980-01-01, as reproducible builds use for
# formats without a zero date): the same tree gives the same bytes whenever it was touched.
FIXED_MTIME = 315532800
# Version control's own directory is never part of the workload.
NEVER_PACKED = ".git"


class SourceInvalid(TrainrunError):
    """The directory of `workload.source.path` cannot be packed; the message says why and the fix."""


class SourceFile(BaseModel):
    """One entry of the archive: a path relative to the directory (POSIX), and its size."""

    path: str
    size: int
    link: str | None = None


class SourceListing(BaseModel):
    directory: Path
    files: list[SourceFile]

    @property
    def size(self) -> int:
        return sum(file.size for file in self.files)

    def describe(self) -> str:
        count = len(self.files)
        return f"{count} file{'s' if count != 1 else ''}, {human_bytes(self.size)}"


class PackedSource(BaseModel):
    listing: SourceListing
    sha256: str
    archive_size: int


def human_bytes(size: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def source_directory(spec: RunSpec, run_file: Path) -> Path | None:
    """The directory `workload.source.path` names, relative to the run file's directory (standard
    input: the current directory); None for a git or S3 source."""
    path = spec.workload.source.path
    return None if path is None else source_path(path, run_file)


def source_path(path: str, run_file: Path) -> Path:
    """`workload.source.path`, relative to the run file's directory (standard input: the current directory)."""
    base = Path.cwd() if str(run_file) in ("-", "<stdin>") else run_file.parent
    return base / path


def missing_directory(directory: Path) -> str | None:
    """What is wrong with `directory` as the workload's source (None: it is a directory)."""
    if directory.is_dir():
        return None
    what = "does not exist" if not directory.exists() else "is not a directory"
    return f"{directory} {what}; name the directory of the workload's code"


def list_source(directory: Path, *, max_bytes: int = MAX_SOURCE_BYTES) -> SourceListing:
    """What would be packed: every file of `directory` that .gitignore does not exclude (git's own
    answer inside a git work tree), never .git; refused when it is not a directory, when a symlink
    leaves it, or when it is larger than `max_bytes`."""
    if (missing := missing_directory(directory)) is not None:
        raise SourceInvalid(f"workload.source.path: {missing}")
    root = directory.resolve()
    names = _git_listing(directory)
    if names is None:
        names = list(_gitignore_listing(directory))
    files = []
    for name in sorted(set(names)):
        if NEVER_PACKED in PurePosixPath(name).parts:
            continue
        entry = directory / name
        info = entry.lstat() if os.path.lexists(entry) else None
        if info is None:  # tracked by git but deleted in the work tree
            continue
        if stat.S_ISLNK(info.st_mode):
            files.append(SourceFile(path=name, size=0, link=_link_inside(root, directory, name)))
        elif stat.S_ISREG(info.st_mode):
            files.append(SourceFile(path=name, size=info.st_size))
        # A git submodule is listed as its directory: its files are not this repository's.
    listing = SourceListing(directory=directory, files=files)
    if not files:
        raise SourceInvalid(
            f"workload.source.path: {directory} holds no file to pack (all are ignored by .gitignore, or it is empty)"
        )
    if listing.size > max_bytes:
        largest = sorted(files, key=lambda file: file.size, reverse=True)[:3]
        named = ", ".join(f"{file.path} ({human_bytes(file.size)})" for file in largest)
        raise SourceInvalid(
            f"workload.source.path: {directory} holds {listing.describe()} to pack; at most "
            f"{human_bytes(max_bytes)}. The largest: {named}. Add what the run does not need to .gitignore, "
            "and put data in workload.dataset (read from S3 onto FSx)"
        )
    return listing


def check_workdir(listing: SourceListing, workdir: str) -> None:
    """SourceInvalid when `workload.workdir` is not a directory of the packed files: the run would
    fail in Prepare, after its cluster was created."""
    if workdir.strip("/") in ("", "."):
        return
    inside = PurePosixPath(workdir)
    if not any(inside in PurePosixPath(file.path).parents for file in listing.files):
        raise SourceInvalid(
            f"workload.workdir: {workdir!r} holds none of the files packed from {listing.directory}; name a "
            "directory inside workload.source.path (or . for its top)"
        )


def _git_listing(directory: Path) -> list[str] | None:
    """The files git would commit under `directory` (tracked, and untracked but not ignored), or
    None when `directory` is not in a git work tree (or there is no git: the .gitignore files are
    read instead)."""
    git = shutil.which("git")
    if git is None:
        return None
    # argv of the resolved git and the user's own directory; no shell.
    inside = subprocess.run(  # noqa: S603
        [git, "-C", str(directory), "rev-parse", "--is-inside-work-tree"], capture_output=True, text=True, check=False
    )
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return None
    listed = subprocess.run(  # noqa: S603
        [git, "-C", str(directory), "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "."],
        capture_output=True,
        check=True,
    )
    # Run in `directory`, ls-files prints paths relative to it.
    return [os.fsdecode(name) for name in listed.stdout.split(b"\0") if name]


def _gitignore_listing(directory: Path) -> Iterator[str]:
    """Every file under `directory` that its .gitignore files do not exclude, read as git reads
    them: each file's patterns relative to its own directory, a deeper file's decision winning."""
    import pathspec

    specs: list[tuple[str, pathspec.GitIgnoreSpec]] = []

    def ignored(relative: str, is_dir: bool) -> bool:
        verdict = False
        for base, spec in specs:
            if base and not relative.startswith(base + "/"):
                continue
            inner = relative[len(base) + 1 :] if base else relative
            result = spec.check_file(inner + "/" if is_dir else inner)
            if result.include is not None:
                verdict = result.include
        return verdict

    for top, dirs, names in os.walk(directory):
        here = Path(top).relative_to(directory).as_posix()
        here = "" if here == "." else here
        specs = [(base, spec) for base, spec in specs if not base or here == base or here.startswith(base + "/")]
        if ".gitignore" in names:
            lines = (Path(top) / ".gitignore").read_text(errors="replace").splitlines()
            specs.append((here, pathspec.GitIgnoreSpec.from_lines(lines)))
        joined = [f"{here}/{name}" if here else name for name in dirs]
        # os.walk does not follow symlinked directories; they are entries of their own.
        keep = []
        for name, relative in zip(dirs, joined, strict=True):
            if name == NEVER_PACKED or ignored(relative, is_dir=True):
                continue
            if (Path(top) / name).is_symlink():
                yield relative
            else:
                keep.append(name)
        dirs[:] = keep
        for name in names:
            relative = f"{here}/{name}" if here else name
            if not ignored(relative, is_dir=False):
                yield relative


def _link_inside(root: Path, directory: Path, name: str) -> str:
    """A symlink's target, if it stays inside the directory once unpacked; else SourceInvalid."""
    target = os.readlink(directory / name)
    where = f"workload.source.path: {directory / name} is a symlink to {target}"
    if os.path.isabs(target):
        raise SourceInvalid(f"{where}, an absolute path, which the head node does not have; make it relative")
    resolved = (root / name).parent.joinpath(target).resolve()
    if resolved != root and root not in resolved.parents:
        raise SourceInvalid(
            f"{where}, outside the directory that is packed; copy what it points to into the directory, or "
            "point workload.source.path at a directory that holds both"
        )
    return target


class Writable(Protocol):
    def write(self, data: bytes, /) -> int: ...

    def flush(self) -> None: ...


def pack(listing: SourceListing, stream: Writable) -> str:
    """Write the listing as a tar.gz to `stream`; the archive's SHA-256 (hex).

    Reproducible: entries in sorted order, fixed times, owner root (0) without names, modes
    normalised to 0644/0755 (executable kept), and a gzip header without a name or time."""
    digest = hashlib.sha256()
    hashing = _HashingWriter(stream, digest)
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=hashing, mtime=0, compresslevel=6) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as archive,
    ):
        for file in listing.files:
            info = tarfile.TarInfo(file.path)
            info.mtime = FIXED_MTIME
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if file.link is not None:
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, file.link, 0o777
                archive.addfile(info)
                continue
            path = listing.directory / file.path
            executable = os.stat(path).st_mode & stat.S_IXUSR
            info.mode = 0o755 if executable else 0o644
            with path.open("rb") as content:
                info.size = os.fstat(content.fileno()).st_size
                archive.addfile(info, content)
    return digest.hexdigest()


class _HashingWriter:
    """A write-only stream that hashes what passes through it."""

    def __init__(self, stream: Writable, digest: Any) -> None:
        self._stream, self._digest = stream, digest

    def write(self, data: bytes) -> int:
        self._digest.update(data)
        return self._stream.write(data)

    def flush(self) -> None:
        self._stream.flush()


def archive_key(run_name: str, sha256: str) -> str:
    return f"{SOURCES_PREFIX}{run_name}/{sha256}.tar.gz"


def archive_uri(bucket: str, run_name: str, sha256: str) -> str:
    """Where the archive of a run's directory is, as the uploaded run file's workload.source.s3."""
    return f"s3://{bucket}/{archive_key(run_name, sha256)}"


def upload_source(
    s3: Any,
    bucket: str,
    spec: RunSpec,
    listing: SourceListing,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[PackedSource, str, bool]:
    """Pack the listed files and upload them, unless an archive of the same bytes is there already;
    the packed source, its s3:// URI and whether it was uploaded. `progress(sent, total)` follows
    the upload in bytes."""
    with tempfile.TemporaryFile() as archive:
        sha256 = pack(listing, archive)
        size = archive.tell()
        archive.seek(0)
        packed = PackedSource(listing=listing, sha256=sha256, archive_size=size)
        key = archive_key(spec.name, sha256)
        uri = archive_uri(bucket, spec.name, sha256)
        if _exists(s3, bucket, key):
            return packed, uri, False
        sent = 0

        def advance(chunk: int) -> None:
            nonlocal sent
            sent += chunk
            if progress is not None:
                progress(sent, size)

        s3.upload_fileobj(archive, bucket, key, ExtraArgs={"ContentType": "application/gzip"}, Callback=advance)
    return packed, uri, True


def _exists(s3: Any, bucket: str, key: str) -> bool:
    from botocore.exceptions import ClientError

    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    return True


def with_archive(run_file: bytes, uri: str) -> bytes:
    """The run file with `workload.source` naming the uploaded archive instead of the directory."""
    document = yaml.safe_load(run_file)
    document["workload"]["source"] = {"s3": uri}
    rewritten = yaml.safe_dump(document, sort_keys=False).encode()
    parse_run_file(rewritten)  # still a valid run file: the archive's URI fits the S3 pattern
    return rewritten
