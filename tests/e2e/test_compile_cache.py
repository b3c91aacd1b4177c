"""The shared Neuron compile cache, rehearsed: two runs of the same workload on one `trainrun
serve`. The stand-in compiler (examples/local-head-node/neuron_parallel_compile) lists the cache
at the jobs' NEURON_COMPILE_CACHE_URL and stores each graph there in the emulated S3, and finds
them there in the second run, with the role of the compute node its job runs on: every call
authorized against the policies ParallelCluster builds from the cluster configuration."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainrun.local.iam.access import CALLS_LOG_ENV
from trainrun.logic.neuron_install import SCRIPT_KEY_PREFIX, SCRIPT_NAME, VENV_KEY_PREFIX

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


def compiled_with_the_cache(served: dict[str, str], tmp_path: Path, name: str) -> dict[str, Any]:
    submitted = trainrun("submit", run_file(tmp_path, name), "--watch", env=served, timeout=600)
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.split()[1]
    view = json.loads(trainrun("status", run_id, "--json", env=served).stdout)
    assert view["status"] == "SUCCEEDED" and view["resources"]["remaining"] == []
    logs = trainrun("logs", run_id, "--job", "compile", env=served).stdout
    status = trainrun("status", run_id, env=served).stdout
    return {"compile": view["progress"]["compile"], "logs": logs, "status": status}


@pytest.fixture(scope="module", autouse=True)
def calls_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Where this module's `trainrun serve` records its authorization decisions (set before it starts)."""
    path = tmp_path_factory.mktemp("iam") / "calls.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CALLS_LOG_ENV, str(path))
        yield path


def recorded_calls(calls_log: Path) -> list[dict[str, Any]]:
    """Every authorization decision the module's `trainrun serve` recorded, one a line."""
    return [json.loads(line) for line in calls_log.read_text().splitlines()]


@pytest.fixture(scope="module")
def two_runs(served: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], ...]:
    """The same workload run twice on the stack, one run after the other."""
    tmp_path = tmp_path_factory.mktemp("runs")
    return tuple(compiled_with_the_cache(served, tmp_path, name) for name in ("cache-first", "cache-second"))


def test_the_second_run_of_a_workload_finds_every_graph_in_the_stacks_compile_cache(
    two_runs: tuple[dict[str, Any], ...],
) -> None:
    # When a workload runs for the first time
    first, second = two_runs
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
    # Then every graph came from the cache (the compiler's own line, once per graph), none compiled
    assert second["compile"]["cache_hits"] == GRAPHS == second["compile"]["graphs"]
    assert second["compile"]["compiled"] == 0
    hits = [
        line for line in str(second["logs"]).splitlines() if "||NEURON_CC_WRAPPER||: Using a cached neff at " in line
    ]
    assert len(hits) == GRAPHS
    # In the stack's cache for the instance type
    assert all("/neuron-compile-cache/trn1.32xlarge/neuronxcc-" in line for line in hits)
    # And status says so
    assert f"compile: {GRAPHS} graphs, 0 compiled, {GRAPHS} from the compile cache, 0 failed" in str(second["status"])


def test_the_compile_job_lists_writes_and_reads_the_cache_as_its_compute_nodes_role(
    two_runs: tuple[dict[str, Any], ...], calls_log: Path
) -> None:
    # Given the two runs' S3 calls on the stack's compile cache, as the local IAM decided them
    calls = recorded_calls(calls_log)
    cache = [
        call
        for call in calls
        if call["action"].startswith("s3:")
        and (
            any("/neuron-compile-cache/" in resource["arn"] for resource in call["resources"])
            or str(call["context"].get("s3:prefix", "")).startswith("neuron-compile-cache/")
        )
    ]
    # Then the compile jobs made them as the compute nodes' role (the job runs on a compute node),
    # each session an instance of the cluster
    assert {call["principal"] for call in cache} == {"ComputeNodeRole"}
    assert all("assumed-role/trainrun-local-ComputeNodeRole/i-" in call["principal_arn"] for call in cache)
    # And every one was allowed: the listing (ClusterNodePolicy), the stores of the first run and
    # the reads of the second (the queue's S3Access)
    assert [call for call in cache if not call["allowed"]] == []
    operations = {call["operation"] for call in cache}
    assert {"s3:ListObjectsV2", "s3:PutObject", "s3:GetObject"} <= operations
    listed = {call["context"]["s3:prefix"] for call in cache if call["operation"] == "s3:ListObjectsV2"}
    assert all(prefix.startswith("neuron-compile-cache/trn1.32xlarge/neuronxcc-") for prefix in listed)


def test_each_node_fetches_its_on_node_configured_script_as_its_own_role(
    two_runs: tuple[dict[str, Any], ...], calls_log: Path
) -> None:
    # Given the two runs' reads of the Neuron install script (the nodes' OnNodeConfigured), as the
    # local IAM decided them
    calls = recorded_calls(calls_log)
    fetches = [
        call
        for call in calls
        if call["action"] == "s3:GetObject"
        and any(
            f"/{SCRIPT_KEY_PREFIX}" in resource["arn"] and resource["arn"].endswith(f"/{SCRIPT_NAME}")
            for resource in call["resources"]
        )
    ]
    # Then each cluster's head node read it as the head node's role and its compute node as the
    # compute nodes' role (the queue's S3Access), as on AWS, and every read was allowed
    reads = [call for call in fetches if call["operation"] == "s3:GetObject"]
    assert sorted(call["principal"] for call in reads) == ["ComputeNodeRole"] * 2 + ["HeadNodeRole"] * 2
    assert len({call["principal_arn"] for call in reads}) == 4  # each session an instance of its own
    assert [call for call in fetches if not call["allowed"]] == []


def test_the_second_clusters_head_node_reuses_the_neuron_environment_the_first_saved_as_its_role(
    two_runs: tuple[dict[str, Any], ...], calls_log: Path
) -> None:
    # Given the two runs' S3 calls on the stack's Neuron environments, as the local IAM decided them
    calls = recorded_calls(calls_log)
    venv = [
        call
        for call in calls
        if call["action"].startswith("s3:")
        and any(f"/{VENV_KEY_PREFIX}" in resource["arn"] for resource in call["resources"])
    ]
    # Then only the head nodes made them, each as the head node's role, and every one was allowed
    assert {call["principal"] for call in venv} == {"HeadNodeRole"}
    assert [call for call in venv if not call["allowed"]] == []
    # And one head node (the first cluster's, which found nothing) saved the environment it built,
    # and the other one (the second cluster's) downloaded it
    stores = {
        call["principal_arn"] for call in venv if call["operation"] in {"s3:PutObject", "s3:CreateMultipartUpload"}
    }
    downloads = {call["principal_arn"] for call in venv if call["operation"] == "s3:GetObject"}
    assert len(stores) == len(downloads) == 1
    assert stores != downloads
