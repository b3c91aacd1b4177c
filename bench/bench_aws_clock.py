"""Time to first step, node-minutes and idle spend of the examples, on the AWS clock (a model).

    python bench/bench_aws_clock.py [--example single-node.yaml ...] [--timeout SECONDS]

Runs each example with `trainrun local --aws-clock`'s runtime (the emulated services take the
durations of trainrun.logic.aws_clock, compressed 30x), twice on one local stack: cold, then with
the compile cache the first run filled (warm). Prints for each run its figures on the AWS clock:
time to first training step, time to everything deleted, compute node-minutes billed and idle,
and their cost, and the last job's end to the compute nodes terminated (seconds); and beside the
two times, the baseline: the same states' durations added up one
after another (a Parallel or Map state's own visit is left out, its branches' states are counted),
so the ratio shows what running states side by side buys; then the run's longest states.
Everything is a model: see
docs/architecture.md#the-aws-clock. Exits 1 when a run does not succeed.

examples/bert-large-phase1.yaml runs at its 16 nodes: 16 slurmd on this machine, about 6 real
minutes a run on a loaded 2-core machine; pass --example to run fewer.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "layers" / "common"))

from trainrun.local.fixture import load_fixture
from trainrun.local.runtime import LocalRuntime
from trainrun.local.summary import LocalRunSummary, summarize
from trainrun.project_files import examples, project_root

EXAMPLES = ("single-node.yaml", "bert-large-phase1.yaml")
RUNS = ("cold", "warm")
# Each run's longest states (AWS-clock minutes), to see where its time went.
TOP_STATES = 6


def composite_states() -> set[str]:
    """The workflow's Parallel and Map states: their own visit spans their branches' states."""
    found: set[str] = set()

    def walk(states: dict[str, dict[str, object]]) -> None:
        for name, state in states.items():
            if state.get("Type") in ("Parallel", "Map"):
                found.add(name)
            for branch in state.get("Branches", []) or []:  # type: ignore[attr-defined]
                walk(branch["States"])
            processor = state.get("ItemProcessor") or state.get("Iterator")
            if isinstance(processor, dict):
                walk(processor["States"])

    definition = json.loads((project_root() / "statemachines" / "run.asl.json").read_text())
    walk(definition["States"])
    return found


def sequential_minutes(summary: LocalRunSummary, until: float | None, composite: set[str]) -> float | None:
    """The states' AWS-clock minutes up to `until` (minutes from the run's start), one after another."""
    figures = summary.aws_clock
    if figures is None or until is None:
        return None
    visits = [v for v in summary.state_visits if v.entered_at is not None and v.name not in composite]
    if not visits:
        return None
    origin = min(v.entered_at for v in visits if v.entered_at is not None)
    total = 0.0
    for visit in visits:
        assert visit.entered_at is not None
        start = (visit.entered_at - origin).total_seconds() * figures.time_scale / 60
        end = start + (visit.seconds or 0.0) * figures.time_scale / 60
        total += max(0.0, min(end, until) - start)
    return total


def _minutes(value: float | None) -> str:
    return "      -" if value is None else f"{value:7.1f}"


def _ratio(measured: float | None, baseline: float | None) -> str:
    return "    -" if not measured or not baseline else f"{measured / baseline:5.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--example", action="append", choices=EXAMPLES, help="run only these (repeatable)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="real seconds to wait for each run")
    args = parser.parse_args()
    fixture = load_fixture(examples() / "accounts" / "default.yaml")
    composite = composite_states()
    failed = False
    print(
        "on the AWS clock model (docs/architecture.md#the-aws-clock); minutes; baseline: the states one after another"
    )
    print(
        f"{'example':<24} {'run':<5} {'first step':>10} {'baseline':>8} {'ratio':>5}  "
        f"{'deleted':>7} {'baseline':>8} {'ratio':>5}  {'node-min':>8} {'idle':>7} {'cost':>9} {'idle cost':>9}  "
        f"{'end->off s':>10}"
    )
    for example in args.example or EXAMPLES:
        run_file = (examples() / example).read_bytes()
        with LocalRuntime(fixture, aws_clock=True) as runtime:
            for run in RUNS:
                started = runtime.submit(run_file, f"runs/{Path(example).stem}.yaml")
                execution = runtime.wait(started.execution_arn, timeout=args.timeout)
                summary = summarize(runtime, started, execution)
                figures = summary.aws_clock
                if summary.status != "SUCCEEDED" or figures is None:
                    print(f"{example:<24} {run:<5} {summary.status}: {summary.error}")
                    failed = True
                    continue
                first, deleted = figures.time_to_first_step_minutes, figures.time_to_deleted_minutes
                first_base = sequential_minutes(summary, first, composite)
                deleted_base = sequential_minutes(summary, deleted, composite)
                print(
                    f"{example:<24} {run:<5} {_minutes(first):>10} {_minutes(first_base):>8} "
                    f"{_ratio(first, first_base)}  {_minutes(deleted)} {_minutes(deleted_base):>8} "
                    f"{_ratio(deleted, deleted_base)}  {figures.node_minutes:8.1f} {figures.idle_node_minutes:7.1f} "
                    f"{figures.cost_usd or 0:9.2f} {figures.idle_cost_usd or 0:9.2f}  "
                    f"{_seconds(figures.job_end_to_nodes_terminated_seconds):>10}",
                    flush=True,
                )
                longest = sorted(figures.state_minutes.items(), key=lambda item: -item[1])[:TOP_STATES]
                compiled = summary.progress.compile
                cache = f"compile cache hits {compiled.cache_hits}/{compiled.graphs}; " if compiled else ""
                print(f"    {cache}longest states: " + ", ".join(f"{state} {m:.1f}" for state, m in longest))
    return 1 if failed else 0


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


if __name__ == "__main__":
    sys.exit(main())
