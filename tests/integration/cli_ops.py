"""What the operator-command tests share: `trainrun <args>` as its own process aimed at the local
stack, as a user aims it at a deployed one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from trainrun.local.runtime import LocalRuntime

from .conftest import ROOT, example
from .scripted_head_node import ScriptedCluster, ScriptedJob, recorded_log

COMMANDS_ON_A_RUN = ["status", "watch", "logs", "plot", "cancel"]


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def trainrun(
    runtime: LocalRuntime, *args: str, stack: str | None = None, target: bool = True, env: dict[str, str] | None = None
) -> Result:
    """`trainrun <args>` aimed at the local stack (unless target=False), as a user would aim it."""
    options = ["--stack", stack or runtime.deployed.name, "--endpoint-url", runtime.endpoint_url]
    options += ["--region", runtime.region]
    # The operator's credentials (the runtime refuses any key it did not issue), not its endpoint:
    # the commands are aimed with --endpoint-url, as a user would aim them.
    operator = {k: v for k, v in runtime.aws_environment().items() if k.startswith("AWS_") and "KEY" in k}
    environment = {**os.environ, **operator, "COLUMNS": "160"}
    environment.pop("AWS_ENDPOINT_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "trainrun", *args, *(options if target else [])],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**environment, **(env or {})},
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def wait_until(condition: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def config_objects(runtime: LocalRuntime) -> list[str]:
    listed = runtime.client("s3").list_objects_v2(Bucket=runtime.deployed.outputs["ConfigBucketName"])
    return [item["Key"] for item in listed.get("Contents", [])]


def a_training_run(runtime: LocalRuntime, cluster: ScriptedCluster) -> str:
    """A run whose train job has started and goes on for a minute."""
    cluster.jobs["train"] = ScriptedJob(recorded_log("train_bert_ok.out"), silent_seconds=60)
    started = runtime.submit(example("single-node.yaml"), "runs/single-node.yaml")
    # The record is written by the run's first state: it may not exist yet right after the upload.
    wait_until(lambda: (record := runtime.store().get(started.run_id)) is not None and record.job_train is not None)
    return started.run_id
