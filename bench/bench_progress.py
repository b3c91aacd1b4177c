"""AWS calls and time of the progress handler's logic for one full CloudWatch Logs batch.

    python bench/bench_progress.py [--events N] [--max-writes W]

Builds a reproducible (fixed seed) awslogs payload of N log events (10,000 by default: the most
CloudWatch Logs delivers at once) from a realistic training log — training lines, noise, a few
multi-line events, checkpoints, a failure — and runs decode_awslogs + apply_batch against moto
(mock_aws, in process) with a real RunStore table and a fake Step Functions client. Counts every
DynamoDB call by operation with a botocore `before-call` hook, prints the counts and the time,
applies the same payload again (a redelivery: it must write nothing) and exits 1 if either
delivery made more than W DynamoDB writes (3 by default).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "layers" / "common"))

for _name, _value in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-west-2",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}.items():
    os.environ[_name] = _value
os.environ.pop("AWS_PROFILE", None)
os.environ.pop("AWS_ENDPOINT_URL", None)

import boto3  # noqa: E402
from aws_lambda_powertools import Metrics  # noqa: E402
from moto import mock_aws  # noqa: E402

from trainrun.model.jobs import JobRecord  # noqa: E402
from trainrun.model.run_record import RunFileRef, RunRecord, RunStore  # noqa: E402
from trainrun.steps.progress import LogBatch, LogEvent, apply_batch, decode_awslogs, encode_awslogs  # noqa: E402

SEED = 20230824
RUN_ID = "bench-run"
TABLE = "trainrun-runs-bench"
WRITE_OPERATIONS = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
NOW = datetime(2023, 8, 24, 17, 0, tzinfo=UTC)

_NOISE = [
    "2023-Aug-24 16:30:13.0789 161136:161300 INFO  NRT:nrt_init  Neuron Runtime version 2.15.11.0",
    (
        "2023-08-24 16:30:14.000456:  161136  INFO ||NEURON_CC_WRAPPER||: Using a cached neff at"
        " /fsx/neuron-compile-cache/neuronxcc-2.9.0.40+07376825f/MODULE_10828485584282432342+abb26765/model.neff."
        " Exiting with a successfully compiled graph."
    ),
    "Reading data file /fsx/examples_datasets/bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128/training.hdf5",
    "100%|##########| 1024/1024 [00:03<00:00, 301.53it/s]",
    "[0]:Running with WORLD_SIZE=64 and local_rank 0",
    "",
]


def build_batch(events: int) -> LogBatch:
    rng = random.Random(SEED)
    messages: list[str] = []
    step = 0
    while len(messages) < events:
        roll = rng.random()
        if roll < 0.6:
            step += 1
            prefix = rng.choice(["", "0: ", "[0]:"])
            grad = f" grad-norm : {rng.uniform(0.5, 3):.4f}" if rng.random() < 0.25 else ""
            messages.append(
                f"{prefix}LOG Thu Aug 24 16:35:{step % 60:02d} 2023 - (0, {step}) step_loss : {10 - step / 2000:.4f}"
                f" learning_rate : {step * 2e-7:.2e} throughput : {rng.uniform(1600, 1660):.2f} {grad}"
            )
        elif roll < 0.97:
            messages.append(rng.choice(_NOISE))
        elif roll < 0.99:
            # The agent joins a traceback-like block into one event (multi_line_start_pattern).
            messages.append("WARNING:torch.distributed.run:\n*****************************************\nSetting OMP")
        elif roll < 0.995:
            messages.append("Checkpointing done")
        else:
            messages.append("2023-Aug-24 16:35:59.0123 12345:12345 ERROR  NRT:nrt_init      Failed to allocate")
    base = 37_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000
    return LogBatch(
        message_type="DATA_MESSAGE",
        owner="123456789012",
        log_group="/trainrun/jobs",
        log_stream=f"{RUN_ID}/train",
        subscription_filters=["trainrun-progress"],
        log_events=[
            LogEvent(id=str(base + i), timestamp=1692895000000 + i, message=message)
            for i, message in enumerate(messages)
        ],
    )


class FakeSfn:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def send_task_heartbeat(self, **_: Any) -> dict[str, Any]:
        self.calls["SendTaskHeartbeat"] += 1
        return {}

    def send_task_success(self, **_: Any) -> dict[str, Any]:
        self.calls["SendTaskSuccess"] += 1
        return {}

    def send_task_failure(self, **_: Any) -> dict[str, Any]:
        self.calls["SendTaskFailure"] += 1
        return {}


def run(events: int) -> list[tuple[str, Counter[str], float, float]]:
    event = encode_awslogs(build_batch(events))
    results = []
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-west-2")
        dynamodb.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "run_id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "run_id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        store = RunStore(dynamodb, TABLE)
        store.create(RunRecord(run_id=RUN_ID, run_file=RunFileRef(bucket="b", key="k"), created_at=NOW, updated_at=NOW))
        store.set_job(RUN_ID, "train", JobRecord(task_token="tok", slurm_job_id=18, state="SUBMITTED"))

        calls: Counter[str] = Counter()

        def count(model: Any, **_: Any) -> None:
            calls[model.name] += 1

        dynamodb.meta.events.register("before-call", count)
        metrics = Metrics(namespace="TrainrunBench")
        for label in ("first delivery", "redelivery"):
            calls.clear()
            sfn = FakeSfn()
            started = time.perf_counter()
            batch = decode_awslogs(event)
            decoded = time.perf_counter()
            outcome = apply_batch(batch, store=store, sfn=sfn, metrics=metrics, now=NOW)
            done = time.perf_counter()
            metrics.clear_metrics()
            print(f"{label}: {outcome.model_dump_json()}")
            results.append((label, calls + sfn.calls, decoded - started, done - decoded))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--max-writes", type=int, default=3)
    args = parser.parse_args()
    failed = False
    for label, calls, decode_s, apply_s in run(args.events):
        writes = sum(n for operation, n in calls.items() if operation in WRITE_OPERATIONS)
        listed = ", ".join(f"{operation}={n}" for operation, n in sorted(calls.items())) or "none"
        print(
            f"{label}: {args.events} events, AWS calls: {listed}; DynamoDB writes {writes};"
            f" decode {decode_s * 1000:.1f} ms, apply {apply_s * 1000:.1f} ms (moto included)"
        )
        if writes > args.max_writes:
            print(f"FAIL: {writes} DynamoDB writes > {args.max_writes}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
