"""The Kubernetes gateway's cost in the Lambda layer: cold import time and installed size.

Cold import: a fresh interpreter imports trainrun.adapters.kubernetes, then the lightkube modules
the gateway imports inside its functions (on its first call: the client, its config models, codecs
and the resource classes); each part is timed on its own, the interpreter's start-up excluded.
Reported: the median of RUNS fresh interpreters. Without the gateway module, the bench times
lightkube's client and the resources a gateway needs instead, and says so.

Size: the requirements that follow the Kubernetes comment of layers/common/requirements.txt,
installed as the layer's Makefile installs them (exactly those, --no-deps, for Lambda's arm64
Python 3.12) into a temporary directory: `du -sk` of it, and each distribution's share (apparent
size, so they add up to a little less).
Measured on this machine (x86_64); Lambda's arm64 differs in scale.
docs/development.md, "Kubernetes client: why lightkube", compares lightkube with the other clients.
"""

from __future__ import annotations

import ast
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_cold_import import ENV, ROOT, RUNS

GATEWAY = "trainrun.adapters.kubernetes"
REQUIREMENTS = ROOT / "layers" / "common" / "requirements.txt"
# What a gateway needs when the module is not there: the client and the kinds trainrun uses.
FALLBACK = """\
from lightkube import ApiError, Client, KubeConfig, codecs
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.batch_v1 import Job
from lightkube.resources.core_v1 import (
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, Service, ServiceAccount,
)
"""
PROBE = """
import importlib, sys, time
started = time.perf_counter()
if sys.argv[1]:
    importlib.import_module(sys.argv[1])
module_ms = (time.perf_counter() - started) * 1000
started = time.perf_counter()
exec(sys.argv[2])
print(module_ms, (time.perf_counter() - started) * 1000)
"""


def gateway_file() -> Path | None:
    path = ROOT / "layers" / "common" / Path(*GATEWAY.split("."))
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def lazy_lightkube_imports(path: Path) -> str:
    """The gateway's `import lightkube...` statements, wherever they are (its functions import
    lightkube on first use, so importing the module alone does not)."""
    statements = {
        ast.unparse(node)
        for node in ast.walk(ast.parse(path.read_text()))
        if (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "lightkube")
        or (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "lightkube" for a in node.names))
    }
    return "\n".join(sorted(statements))


def import_ms(module: str, code: str) -> tuple[float, float]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, module, code], capture_output=True, text=True, env=ENV, check=True
    )
    module_ms, lightkube_ms = result.stdout.strip().splitlines()[-1].split()
    return float(module_ms), float(lightkube_ms)


def kubernetes_requirements() -> list[str]:
    """The requirement lines after the first comment naming Kubernetes, up to the next section."""
    lines = [line.strip() for line in REQUIREMENTS.read_text().splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("#") and "Kubernetes" in line)
    requirements: list[str] = []
    for line in lines[start + 1 :]:
        if line.startswith("#") and requirements:
            break
        if line and not line.startswith("#"):
            requirements.append(line)
    return requirements


def installed_kib(requirements: list[str]) -> tuple[int, dict[str, int]] | str:
    """du -sk of the requirements installed as the layer's Makefile does, and each distribution's
    KiB (the apparent size of its RECORD's files); or why they could not be installed."""
    with tempfile.TemporaryDirectory() as target:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", target,
             "--platform", "manylinux2014_aarch64", "--implementation", "cp", "--python-version", "3.12",
             "--only-binary=:all:", *requirements],
            capture_output=True, text=True,
        )  # fmt: skip
        if result.returncode:
            return result.stderr.strip().splitlines()[-1]
        total = int(subprocess.run(["du", "-sk", target], capture_output=True, text=True, check=True).stdout.split()[0])
        shares = {}
        for info in sorted(Path(target).glob("*.dist-info")):
            files = [Path(target, line.split(",")[0]) for line in (info / "RECORD").read_text().splitlines() if line]
            size = sum(f.stat().st_size for f in files if f.is_file())
            shares[info.name.removesuffix(".dist-info")] = round(size / 1024)
        return total, shares


def main() -> None:
    path = gateway_file()
    if path is None:
        module, code = "", FALLBACK
        print(f"note: {GATEWAY} is not there yet: timing lightkube's client and resources alone")
    else:
        module, code = GATEWAY, lazy_lightkube_imports(path) or FALLBACK
    import_ms(module, code)  # compile and cache bytecode first, as the deployed package ships it
    runs = [import_ms(module, code) for _ in range(RUNS)]
    module_ms = statistics.median(r[0] for r in runs)
    lightkube_ms = statistics.median(r[1] for r in runs)
    total_ms = statistics.median(r[0] + r[1] for r in runs)
    print(f"Kubernetes gateway cold import, median of {RUNS} fresh interpreters (ms)")
    if module:
        print(f"  {GATEWAY:<34} {module_ms:7.1f}")
    print(f"  {'+ its lightkube imports':<34} {lightkube_ms:7.1f}")
    print(f"  {'total':<34} {total_ms:7.1f}")

    requirements = kubernetes_requirements()
    print(f"layer's Kubernetes dependencies ({len(requirements)} pinned in {REQUIREMENTS.relative_to(ROOT)}),")
    print("installed as the layer's Makefile does (--no-deps, Lambda arm64, Python 3.12, with bytecode)")
    sizes = installed_kib(requirements)
    if isinstance(sizes, str):
        print(f"  could not install them here: {sizes}")
        return
    total, shares = sizes
    print(f"  {'du -sk':<34} {total:7d} KiB")
    for name, kib in sorted(shares.items(), key=lambda item: item[1], reverse=True):
        print(f"  {name:<34} {kib:7d} KiB")


if __name__ == "__main__":
    main()
