"""The one build step pyproject.toml cannot say: the project's files that the CLI and the local
runtime read at run time (trainrun.project_files.SHIPPED: examples, template, ASL, handlers) go
into the wheel as package data under trainrun/_project/, and into the source distribution at its
root, copied from the checkout at build time so that git holds each file once.
"""

from __future__ import annotations

import functools
import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent


@functools.cache
def _project_files() -> ModuleType:
    """trainrun.project_files, loaded from the source tree (the package is not importable here)."""
    spec = importlib.util.spec_from_file_location("project_files", ROOT / "layers/common/trainrun/project_files.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shipped_files() -> list[Path]:
    """Every file of SHIPPED, relative to the checkout's root."""
    found = []
    for relative in _project_files().SHIPPED:
        path = ROOT / relative
        if not path.exists():
            raise FileNotFoundError(f"{path}: a project file the wheel ships is missing from the source tree")
        candidates = sorted(path.rglob("*")) if path.is_dir() else [path]
        found += [
            c.relative_to(ROOT)
            for c in candidates
            if c.is_file() and "__pycache__" not in c.parts and c.suffix not in {".pyc", ".pyo"}
        ]
    return found


class BuildPyWithProjectFiles(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # an editable install imports the checkout, which has them at its root
        target = Path(self.build_lib) / "trainrun" / _project_files().PACKAGED
        shutil.rmtree(target, ignore_errors=True)  # nothing left from an earlier build
        for relative in _shipped_files():
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / relative, target / relative)  # with its mode: the stand-ins are executables


class SdistWithProjectFiles(sdist):
    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        shipped = [str(relative) for relative in _shipped_files()]
        super().make_release_tree(base_dir, sorted({*files, *shipped}))


setup(cmdclass={"build_py": BuildPyWithProjectFiles, "sdist": SdistWithProjectFiles})
