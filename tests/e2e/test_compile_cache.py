"""The shared Neuron compile cache, rehearsed: two runs of the same workload on one `trainrun
serve`. The stand-in compiler (examples/local-head-node/neuron_parallel_compile) stores each graph
in the emulated S3 at the jobs' NEURON_COMPILE_CACHE_URL, with the head node's role, and finds
them there in the second run."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from .conftest import EXAMPLES, NEEDS_LOCAL_HEAD_NODE, trainrun

pytestmark = NEEDS_LOCAL_HEAD_NODE

# A workload no other run of this stack compiles (the cache key is the command and the graph).
COMMAND = "python3 train.py --steps 12 --checkpoint-every 6"
GRAPHS = 3


def run_file(tmp_path: Path, name: str) -> Path:
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    document["name"] = name
    document["workload"].update(
        compile=f"neuron_parallel_compile {COMMAND}",
        train=COMMAND,
        total_steps=12,
        env={"TRAINRUN_LOCAL_GRAPHS": str(GRAPHS)},
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def compiled_with_the_cache(served: dict[str, str], tmp_path: Path, name: str) -> dict[str, object]:
    submitted = trainrun("submit", run_file(tmp_path, name), "--watch", env=served, timeout=600)
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.split()[1]
    view = json.loads(trainrun("status", run_id, "--json", env=served).stdout)
    assert view["status"] == "SUCCEEDED" and view["resources"]["remaining"] == []
    logs = trainrun("logs", run_id, "--job", "compile", env=served).stdout
    status = trainrun("status", run_id, env=served).stdout
    return {"compile": view["progress"]["compile"], "logs": logs, "status": status}


def test_the_second_run_of_a_workload_finds_every_graph_in_the_stacks_compile_cache(
    served: dict[str, str], tmp_path: Path
) -> None:
    # When a workload runs for the first time
    first = compiled_with_the_cache(served, tmp_path, "cache-first")
    # Then it compiled every graph, and found none in the cache
    assert first["compile"] == {
        "graphs": GRAPHS,
        "succeeded": GRAPHS,
        "failed": 0,
        "cache_hits": 0,
        "cached_failures": 0,
        "compiled": GRAPHS,
    }
    assert "Using a cached neff" not in str(first["logs"])
    # When the same workload runs again, on the same stack
    second = compiled_with_the_cache(served, tmp_path, "cache-second")
    # Then every graph came from the cache (the compiler's own line, once per graph), none compiled
    assert second["compile"]["cache_hits"] == GRAPHS == second["compile"]["graphs"]  # type: ignore[index]
    assert second["compile"]["compiled"] == 0  # type: ignore[index]
    hits = [
        line for line in str(second["logs"]).splitlines() if "||NEURON_CC_WRAPPER||: Using a cached neff at " in line
    ]
    assert len(hits) == GRAPHS
    # In the stack's cache for the instance type
    assert all("/neuron-compile-cache/trn1.32xlarge/neuronxcc-" in line for line in hits)
    # And status says so
    assert f"compile: {GRAPHS} graphs, 0 compiled, {GRAPHS} from the compile cache, 0 failed" in str(second["status"])
