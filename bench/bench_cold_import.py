"""Cold-import time of each Lambda handler: what a cold start pays before the first line runs.

Each measurement is a fresh interpreter importing one functions/<name>/app.py (the same module
search path the Lambda layer gives: the trainrun package and its dependencies). Reported: the
median of RUNS fresh imports, the interpreter's own start-up excluded, and the heaviest imports
by `python -X importtime`. Measured on this machine (x86_64); Lambda's arm64 differs in scale.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = 7
PROBE = """
import importlib.util, sys, time
started = time.perf_counter()
spec = importlib.util.spec_from_file_location("app", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
assert callable(module.lambda_handler)
print((time.perf_counter() - started) * 1000)
"""


def deployed_environment() -> dict[str, str]:
    """The functions' environment as template.yaml's Globals set it (plain values only)."""
    from trainrun.local.template import load_template

    variables = load_template(ROOT / "template.yaml")["Globals"]["Function"]["Environment"]["Variables"]
    return {name: value for name, value in variables.items() if isinstance(value, str)}


ENV = {**os.environ, **deployed_environment(), "AWS_REGION": "us-west-2", "AWS_DEFAULT_REGION": "us-west-2"}


def import_ms(app: Path) -> float:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(app)], capture_output=True, text=True, env=ENV, check=True
    )
    return float(result.stdout.strip().splitlines()[-1])


def heaviest_imports(app: Path, count: int = 4) -> list[tuple[str, float]]:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", PROBE, str(app)], capture_output=True, text=True, env=ENV, check=True
    )
    top_level: list[tuple[str, float]] = []
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.removeprefix("import time:").split("|")
        # Unindented names are what the handler imports itself (cumulative: with their imports).
        if cumulative.strip().isdigit() and not name.startswith("  "):
            top_level.append((name.strip(), int(cumulative) / 1000))
    return sorted(top_level, key=lambda item: item[1], reverse=True)[:count]


def main() -> None:
    apps = sorted(ROOT.glob("functions/*/app.py"))
    print(f"handler cold-import time, median of {RUNS} fresh interpreters (ms)")
    for app in apps:
        import_ms(app)  # compile and cache bytecode first, as the deployed package ships it
        times = [import_ms(app) for _ in range(RUNS)]
        heavy = ", ".join(f"{name} {ms:.0f}" for name, ms in heaviest_imports(app))
        print(f"  {app.parent.name:<20} {statistics.median(times):7.1f}   (heaviest: {heavy})")


if __name__ == "__main__":
    main()
