"""Packing a local directory as the workload (workload.source.path): what is packed, reproducibly."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainrun.model.run_file import parse_run_file
from trainrun.ops.source_archive import (
    SourceInvalid,
    archive_key,
    check_workdir,
    list_source,
    pack,
    source_directory,
    upload_source,
    with_archive,
)

from .test_steps import SINGLE_NODE


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


def packed_names(directory: Path) -> list[str]:
    return [file.path for file in list_source(directory).files]


def archive_of(directory: Path) -> bytes:
    stream = io.BytesIO()
    pack(list_source(directory), stream)
    return stream.getvalue()


def git(directory: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(directory), *args], check=True, capture_output=True)


CODE = {
    "train.py": "print('hi')\n",
    "lib/model.py": "x = 1\n",
    "run.log": "noise\n",
    "keep.log": "kept\n",
    "build/out.bin": "binary\n",
    "lib/.gitignore": "*.tmp\n",
    "lib/scratch.tmp": "scratch\n",
    ".gitignore": "*.log\n!keep.log\nbuild/\n",
}
PACKED = [".gitignore", "keep.log", "lib/.gitignore", "lib/model.py", "train.py"]


def test_gitignore_files_are_respected_outside_a_git_work_tree(tmp_path: Path) -> None:
    # Given a directory (not in a git work tree) with .gitignore files at two levels
    code = tree(tmp_path / "code", CODE)
    # When it is listed
    # Then ignored files and directories are left out, negations and nested files respected
    assert packed_names(code) == PACKED


def test_in_a_git_work_tree_git_decides_and_dot_git_is_never_packed(tmp_path: Path) -> None:
    # Given the same tree as a git repository with one file committed, and one more untracked
    code = tree(tmp_path / "code", CODE)
    git(code, "init", "-q")
    git(code, "add", "train.py")
    (code / "new.py").write_text("y = 2\n")
    # When it is listed
    names = packed_names(code)
    # Then tracked and untracked-not-ignored files are packed, and nothing of .git
    assert names == sorted([*PACKED, "new.py"])
    assert (code / ".git").is_dir() and not [name for name in names if name.startswith(".git/")]


def test_a_subdirectory_of_a_git_work_tree_packs_only_itself(tmp_path: Path) -> None:
    # Given a repository whose workload is one of its directories
    repository = tree(tmp_path / "repo", {"README.md": "top\n", "src/train.py": "1\n", "src/x.log": "2\n"})
    (repository / ".gitignore").write_text("*.log\n")
    git(repository, "init", "-q")
    # When the directory is listed
    # Then its paths are relative to it, and the repository's .gitignore applies
    assert packed_names(repository / "src") == ["train.py"]


def test_a_dot_git_directory_is_left_out_without_git_too(tmp_path: Path) -> None:
    # Given a directory holding a .git directory that is not a repository git recognises
    code = tree(tmp_path / "code", {"train.py": "1\n", ".git/config": "broken\n", "sub/.git": "gitdir: x\n"})
    # When it is listed
    # Then nothing named .git is packed
    assert packed_names(code) == ["train.py"]


def test_the_same_tree_gives_the_same_bytes(tmp_path: Path) -> None:
    # Given two copies of a tree, written in different orders at different times
    first = tree(tmp_path / "a", CODE)
    second = tree(tmp_path / "b", dict(reversed(list(CODE.items()))))
    os.utime(second / "train.py", (1_000_000, 1_000_000))
    # When both are packed
    # Then the archives are byte for byte equal
    assert archive_of(first) == archive_of(second)
    # And a change of content changes them
    (second / "train.py").write_text("print('changed')\n")
    assert archive_of(first) != archive_of(second)


def test_the_archive_unpacks_to_the_files_with_their_executable_bit(tmp_path: Path) -> None:
    # Given a tree with an executable script and a symlink inside it
    code = tree(tmp_path / "code", {"run.sh": "#!/bin/sh\necho hi\n", "lib/model.py": "x = 1\n"})
    (code / "run.sh").chmod(0o700)
    (code / "model.py").symlink_to("lib/model.py")
    # When it is packed
    with tarfile.open(fileobj=io.BytesIO(archive_of(code)), mode="r:gz") as archive:
        members = {member.name: member for member in archive.getmembers()}
        content = archive.extractfile("lib/model.py")
        assert content is not None and content.read() == b"x = 1\n"
    # Then the entries are there, owned by root without names, at the fixed time
    assert sorted(members) == ["lib/model.py", "model.py", "run.sh"]
    assert (members["run.sh"].mode, members["lib/model.py"].mode) == (0o755, 0o644)
    assert members["model.py"].issym() and members["model.py"].linkname == "lib/model.py"
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members.values()} == {(0, 0, "", "", 315532800)}


@pytest.mark.parametrize("target", ["../outside.py", "/etc/passwd", "lib/../../outside.py"])
def test_a_symlink_leaving_the_directory_is_refused(tmp_path: Path, target: str) -> None:
    # Given a symlink that points outside the directory (or to an absolute path)
    (tmp_path / "outside.py").write_text("secret\n")
    code = tree(tmp_path / "code", {"train.py": "1\n", "lib/x.py": "2\n"})
    (code / "link.py").symlink_to(target)
    # When it is listed
    # Then it is refused, naming the link and its target
    with pytest.raises(SourceInvalid, match=rf"link\.py is a symlink to {target}"):
        list_source(code)


def test_a_symlinked_directory_leaving_the_tree_is_refused(tmp_path: Path) -> None:
    # Given a symlink to a directory outside (which os.walk does not follow)
    tree(tmp_path / "elsewhere", {"secret.txt": "s\n"})
    code = tree(tmp_path / "code", {"train.py": "1\n"})
    (code / "data").symlink_to(tmp_path / "elsewhere")
    # Then it is refused rather than packed as its files or left out silently
    with pytest.raises(SourceInvalid, match="data is a symlink"):
        list_source(code)


def test_a_directory_over_the_size_limit_is_refused_naming_the_largest_files(tmp_path: Path) -> None:
    # Given a directory of 3 KiB with a 2 KiB file
    code = tree(tmp_path / "code", {"train.py": "x" * 1024, "weights.bin": "w" * 2048})
    # When it is listed with a 2 KiB limit
    # Then the error gives the size, the limit, the largest file and the fix
    with pytest.raises(SourceInvalid) as raised:
        list_source(code, max_bytes=2048)
    message = str(raised.value)
    assert "2 files, 3.0 KiB" in message and "at most 2.0 KiB" in message
    assert "weights.bin (2.0 KiB)" in message and ".gitignore" in message


@pytest.mark.parametrize("make", [lambda p: None, lambda p: p.write_text("a file")], ids=["missing", "a file"])
def test_a_path_that_is_not_a_directory_is_refused(tmp_path: Path, make: Any) -> None:
    make(tmp_path / "code")
    with pytest.raises(SourceInvalid, match=r"code (does not exist|is not a directory)"):
        list_source(tmp_path / "code")


def local_run_file(path: str = "./code") -> bytes:
    document = yaml.safe_load(SINGLE_NODE)
    document["workload"]["source"] = {"path": path}
    return yaml.safe_dump(document).encode()


def test_the_directory_is_relative_to_the_run_files_directory(tmp_path: Path) -> None:
    spec = parse_run_file(local_run_file("../code"))
    assert source_directory(spec, tmp_path / "runs" / "run.yaml") == tmp_path / "runs" / ".." / "code"


def test_upload_puts_the_archive_once_at_its_content_address_and_the_run_file_names_it(
    s3: Any, config_bucket: str, tmp_path: Path
) -> None:
    # Given a run file whose workload is a directory
    code = tree(tmp_path / "code", {"train.py": "print('hi')\n"})
    data = local_run_file()
    spec = parse_run_file(data)
    sent: list[tuple[int, int]] = []
    # When it is uploaded twice
    packed, uri, uploaded = upload_source(
        s3, config_bucket, spec, list_source(code), progress=lambda *p: sent.append(p)
    )
    _, same_uri, uploaded_again = upload_source(s3, config_bucket, spec, list_source(code))
    # Then the archive is at sources/<name>/<sha256>.tar.gz, uploaded the first time only
    key = archive_key("single-node", packed.sha256)
    assert key.startswith("sources/single-node/") and uri == f"s3://{config_bucket}/{key}" == same_uri
    assert (uploaded, uploaded_again) == (True, False)
    body = s3.get_object(Bucket=config_bucket, Key=key)["Body"].read()
    assert len(body) == packed.archive_size and sent[-1] == (packed.archive_size, packed.archive_size)
    # And the rewritten run file is valid and names the archive instead of the directory
    rewritten = parse_run_file(with_archive(data, uri))
    assert (rewritten.workload.source.s3, rewritten.workload.source.path) == (uri, None)
    assert rewritten.model_copy(update={"workload": spec.workload}) == spec


def test_a_large_upload_shows_its_progress_in_bytes_on_a_terminal(
    s3: Any, config_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    import trainrun.cli.source as cli_source

    # Given a terminal, and a directory larger than the size that shows a progress bar
    terminal = Console(file=io.StringIO(), force_terminal=True, width=120, soft_wrap=True)
    monkeypatch.setattr(cli_source, "err", terminal)
    monkeypatch.setattr(cli_source, "PROGRESS_FROM_BYTES", 1024)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "weights.bin").write_bytes(os.urandom(4096))  # random: it does not compress
    data = local_run_file()
    # When the run file is prepared for upload
    sent = cli_source.upload_workload_directory(s3, config_bucket, parse_run_file(data), data, tmp_path / "run.yaml")
    # Then the terminal showed the upload's bar with its bytes, then what was packed and where
    shown = terminal.file.getvalue()  # type: ignore[attr-defined]
    assert "uploading the workload" in shown and "4.2/4.2 KiB" in shown
    assert "packed ./code: 1 file, 4.0 KiB" in shown and "uploaded to s3://" in shown
    assert parse_run_file(sent).workload.source.s3 in shown


def test_a_directory_with_nothing_to_pack_is_refused(tmp_path: Path) -> None:
    # Given a directory whose only file its .gitignore ignores
    code = tree(tmp_path / "code", {".gitignore": "*\n"})
    # Then there is nothing to run: refused, saying why
    with pytest.raises(SourceInvalid, match="holds no file to pack"):
        list_source(code)


@pytest.mark.parametrize(
    ("workdir", "valid"), [(".", True), ("lib", True), ("lib/", True), ("li", False), ("x", False)]
)
def test_the_workdir_must_be_a_directory_of_the_packed_files(tmp_path: Path, workdir: str, valid: bool) -> None:
    listing = list_source(tree(tmp_path / "code", {"train.py": "1\n", "lib/model.py": "2\n"}))
    if valid:
        check_workdir(listing, workdir)
    else:
        with pytest.raises(SourceInvalid, match=rf"workload.workdir: '{workdir}' holds none of the files"):
            check_workdir(listing, workdir)
