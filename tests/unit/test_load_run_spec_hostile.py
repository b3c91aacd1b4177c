"""Load run spec, through its Lambda handler on moto, on hostile run files: findings recorded, nothing created."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import boto3
import pytest

from trainrun.adapters import clients as aws
from trainrun.errors import RunSpecInvalid
from trainrun.model.findings import Code, Severity
from trainrun.model.record_size import MAX_FINDINGS
from trainrun.model.run_file import MAX_RUN_FILE_BYTES
from trainrun.model.run_record import RunFileRef, RunStatus, RunStore

from .conftest import REGION, ROOT

SINGLE_NODE = (ROOT / "examples" / "single-node.yaml").read_text()
TRAIN_LINE = "train: python3 train.py --steps 40"
KEY = "runs/hostile.yaml"
RUN_ID = "hostile-1"

HOSTILE_FILES: dict[str, tuple[bytes, str]] = {
    # name: (the file, what the finding says: the field, its line in the file, the problem)
    "nul in train": (
        SINGLE_NODE.replace(TRAIN_LINE, 'train: "python3 train.py\\0"').encode(),
        "workload.train (line 26): contains '\\x00' (U+0000)",
    ),
    "ref git refuses": (
        SINGLE_NODE.replace(
            "s3: s3://trainrun-examples/local-workload.tar.gz", "git: https://github.com/a/b.git\n    ref: a/../.."
        ).encode(),
        "workload.source.ref (line 23): 'a/../..' is not a ref git accepts",
    ),
    "5000-digit integer": (
        SINGLE_NODE.replace("nodes: 1", "nodes: " + "9" * 5000).encode(),
        "capacity.nodes (line 9): is an integer of 5000 characters",
    ),
    "environment name": (
        SINGLE_NODE.replace("max_runtime: 30m", "max_runtime: 30m\n  env: {SLURM_JOB_ID: '1'}").encode(),
        "workload.env.SLURM_JOB_ID.[key] (line 30): 'SLURM_JOB_ID' cannot be set by a run",
    ),
    "over the size limit": (
        (SINGLE_NODE + "#" + "x" * MAX_RUN_FILE_BYTES).encode(),
        f"(file): is {len(SINGLE_NODE) + 1 + MAX_RUN_FILE_BYTES} bytes; a run file is at most {MAX_RUN_FILE_BYTES} "
        "(it was not read)",
    ),
    "too large for the run record": (
        SINGLE_NODE.replace(
            "compile: neuron_parallel_compile python3 train.py --steps 40",
            "compile: &c '" + "😀" * 16_000 + "'\n  setup: *c",
        )
        .replace(TRAIN_LINE, "train: *c")
        .encode(),
        "(file): the run file's content is",
    ),
    "10,000 problems": (
        (SINGLE_NODE + "".join(f"unknown_{i}: {i}\n" for i in range(10_000))).encode(),
        "unknown_0 (line 30): is not a known field",
    ),
    "empty": (b"", "(file): must be a YAML mapping"),
}


def load_handler() -> ModuleType:
    spec = importlib.util.spec_from_file_location("load_run_spec_app", ROOT / "functions" / "load_run_spec" / "app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CONTEXT = SimpleNamespace(
    function_name="trainrun-test-LoadRunSpec",
    memory_limit_in_mb=256,
    invoked_function_arn=f"arn:aws:lambda:{REGION}:123456789012:function:trainrun-test-LoadRunSpec",
    aws_request_id="request-1",
)


@pytest.fixture
def handler(
    runs_table: str, config_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[dict[str, Any]], Any]]:
    monkeypatch.setenv("RUNS_TABLE", runs_table)
    monkeypatch.setenv("STACK_NAME", "trainrun-test")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Trainrun")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "trainrun")
    # The stack lets runs use the examples' workload bucket (single-node.yaml names it).
    monkeypatch.setenv("RUN_BUCKET_ARNS", "arn:aws:s3:::trainrun-examples")
    aws._client.cache_clear()  # clients of this test's mock_aws only
    app = load_handler()
    yield lambda event: app.lambda_handler(event, CONTEXT)
    aws._client.cache_clear()


def tagged_resources() -> list[dict[str, Any]]:
    tagging = boto3.client("resourcegroupstaggingapi", region_name=REGION)
    resources: list[dict[str, Any]] = tagging.get_resources()["ResourceTagMappingList"]
    return resources


@pytest.mark.parametrize("name", sorted(HOSTILE_FILES))
def test_a_hostile_run_file_is_rejected_with_its_findings_and_nothing_created(
    name: str, handler: Callable[[dict[str, Any]], Any], s3: Any, config_bucket: str, store: RunStore
) -> None:
    # Given a hostile run file uploaded to the config bucket, and what the account holds before
    text, says = HOSTILE_FILES[name]
    put = s3.put_object(Bucket=config_bucket, Key=KEY, Body=text)
    ec2 = boto3.client("ec2", region_name=REGION)
    vpcs_before = ec2.describe_vpcs()["Vpcs"]
    run_file = RunFileRef(bucket=config_bucket, key=KEY, version_id=put["VersionId"])
    # When Load run spec's handler runs on it
    with pytest.raises(RunSpecInvalid):
        handler({"run_id": RUN_ID, "run_file": run_file.model_dump(mode="json")})
    # Then the record holds the problem as a RUN_FILE_INVALID error, within the record's budget
    record = store.get(RUN_ID)
    assert record is not None and record.status == RunStatus.RUNNING
    assert record.findings and len(record.findings) <= MAX_FINDINGS
    assert {(f.code, f.severity) for f in record.findings} == {(Code.RUN_FILE_INVALID, Severity.ERROR)}
    assert any(finding.message.startswith(says) for finding in record.findings), record.findings
    # And nothing was created
    assert ec2.describe_vpcs()["Vpcs"] == vpcs_before
    assert tagged_resources() == []


def test_load_run_spec_asks_s3_for_at_most_the_limit_plus_one_byte(
    handler: Callable[[dict[str, Any]], Any], s3: Any, config_bucket: str, store: RunStore
) -> None:
    # Given a valid run file, and every GetObject the handler's S3 client makes recorded
    put = s3.put_object(Bucket=config_bucket, Key=KEY, Body=SINGLE_NODE.encode())
    ranges: list[str | None] = []
    aws.client("s3").meta.events.register(
        "before-parameter-build.s3.GetObject", lambda params, **_: ranges.append(params.get("Range"))
    )
    # When Load run spec reads it
    run_file = RunFileRef(bucket=config_bucket, key=KEY, version_id=put["VersionId"])
    summary = handler({"run_id": RUN_ID, "run_file": run_file.model_dump(mode="json")})
    # Then it asked for the first limit + 1 bytes only, and the run goes on
    assert ranges == [f"bytes=0-{MAX_RUN_FILE_BYTES}"]
    assert summary["name"] == "single-node"
