"""A kept cluster as a user iterates on it against `trainrun serve`: a shell in its head node
(piped, one command, and on a terminal), two runs that reuse it at once (Slurm queues them),
`trainrun down` refused while they run, a third cancelled (its job stopped, the cluster kept),
and then `trainrun down`, which removes everything; a shell or a second down finds nothing left.

One kept cluster serves every check: a run that creates a cluster costs a whole run (network,
file system, cluster, head node), and its `trainrun serve` a stack of its own.
"""

from __future__ import annotations

import functools
import json
import os
import pty
import select
import subprocess
import time
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import pytest
import yaml

from trainrun.ops.runs import build_view, find_run, wait_for_record
from trainrun.ops.stack import Stack, connect, default_stack_name

from .conftest import EXAMPLES, NEEDS_LOCAL_HEAD_NODE, ROOT, TRAINRUN, trainrun

pytestmark = NEEDS_LOCAL_HEAD_NODE


@functools.cache
def operator_clients(endpoint_url: str, access_key_id: str, secret_access_key: str, region: str) -> tuple[Any, Any]:
    """The operator's EC2 and FSx clients of one local stack, made once: a client loads its
    service's model (EC2's is large), a tenth of a CPU-second or more each time."""
    session = boto3.Session(
        aws_access_key_id=access_key_id, aws_secret_access_key=secret_access_key, region_name=region
    )
    return session.client("ec2", endpoint_url=endpoint_url), session.client("fsx", endpoint_url=endpoint_url)


def emulated_aws(served: dict[str, str]) -> dict[str, Any]:
    """The account's networks, file systems, instances and ParallelCluster stacks, as the operator sees them."""
    ec2, fsx = operator_clients(
        served["AWS_ENDPOINT_URL"], served["AWS_ACCESS_KEY_ID"], served["AWS_SECRET_ACCESS_KEY"], served["AWS_REGION"]
    )
    instances = [
        instance["InstanceId"]
        for reservation in ec2.describe_instances()["Reservations"]
        for instance in reservation["Instances"]
        if instance["State"]["Name"] not in ("terminated", "shutting-down")
    ]
    return {
        "vpcs": sorted(vpc["VpcId"] for vpc in ec2.describe_vpcs()["Vpcs"] if not vpc.get("IsDefault")),
        "file_systems": sorted(fs["FileSystemId"] for fs in fsx.describe_file_systems()["FileSystems"]),
        "instances": sorted(instances),
    }


def submitted_run_id(run_file: Path, served: dict[str, str], *options: str) -> str:
    submitted = trainrun("submit", run_file, *options, env=served)
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.split()[1]


def status(run_id: str, served: dict[str, str]) -> dict[str, Any]:
    shown = trainrun("status", run_id, "--json", env=served)
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def operator_stack(served: dict[str, str]) -> Stack:
    """The local stack as the operator commands reach it (trainrun.ops.stack.connect), in this
    process: for the waits that poll. Through `trainrun status` each look would start an
    interpreter and take an inventory of the run's resources: about a CPU-second a look."""
    # The session reads its credentials and region from the environment once, here.
    with mock.patch.dict(os.environ, served):
        stack = connect(default_stack_name(None))
        stack.client("dynamodb")
        stack.client("stepfunctions")
    return stack


def shell_on_a_terminal(run_id: str, typed: bytes, env: dict[str, str], until: bytes, timeout: float = 60) -> bytes:
    """What `trainrun shell RUN` shows on a terminal (a pty) while `typed` is typed, up to `until`."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [*TRAINRUN, "shell", run_id], stdin=terminal, stdout=terminal, stderr=terminal, cwd=ROOT, env=env
    )
    os.close(terminal)
    shown = b""
    deadline = time.monotonic() + timeout
    try:
        os.write(controller, typed)
        while until not in shown and time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 1)
            if ready:
                try:
                    shown += os.read(controller, 4096)
                except OSError:
                    break  # the terminal closed: the session ended
        os.write(controller, b"exit\n")
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(controller)
    return shown


# A run that creates the cluster, four on it and two downs, on a loaded machine (alone: a minute and a half).
@pytest.mark.timeout(600)
def test_a_kept_cluster_has_a_shell_runs_two_reusing_runs_and_down_then_removes_everything(
    served: dict[str, str], tmp_path: Path
) -> None:
    # Given a run that keeps its cluster, run to its end
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    document["name"] = "owner"
    document["teardown"] = {"on_success": "keep"}
    owner_file = tmp_path / "owner.yaml"
    owner_file.write_text(yaml.safe_dump(document))
    owner_id = submitted_run_id(owner_file, served, "--watch")
    owner = status(owner_id, served)
    assert owner["kept_at"] is not None and owner["torn_down_at"] is None
    # (its checkpoints stay on its kept file system: nothing is exported yet)
    assert owner["checkpoints"] is None
    kept = emulated_aws(served)
    assert kept["vpcs"] and kept["file_systems"] and kept["instances"], kept

    # When commands are piped into `trainrun shell`
    commands = "id -u\nsed -n 's/^ClusterName=//p' /etc/slurm/slurm.conf\nexit 7\n"
    piped = trainrun("shell", owner_id, input=commands, timeout=120, env=served)
    # Then they ran as root in the head node's sandbox, whose /etc/slurm is the local cluster's,
    # and the exit code is the shell's
    assert piped.returncode == 7, piped.stderr
    assert piped.stdout.split() == ["0", "trainrun-local"], piped.stdout
    # through a Session Manager session the operator's policy granted, ended without a warning
    assert "session trainrun-" in piped.stderr and "warning" not in piped.stderr, piped.stderr

    # When a shell is opened on a terminal and a command typed
    shown = shell_on_a_terminal(owner_id, b"echo marker-$((6 * 7))\n", served, until=b"marker-42")
    # Then the shell ran it and showed its output
    assert b"marker-42" in shown, shown.decode(errors="replace")

    # And two run files that reuse its cluster, one by its name, one by its run id (no network,
    # storage or cluster of their own; the same capacity section)
    reusing = []
    for name, reference in (("reuse-by-name", "owner"), ("reuse-by-id", owner_id)):
        document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
        document["name"] = name
        del document["storage"]
        document["cluster"] = {"reuse": reference}
        run_file = tmp_path / f"{name}.yaml"
        run_file.write_text(yaml.safe_dump(document))
        reusing.append(run_file)

    # When both are submitted at once
    first, second = (submitted_run_id(run_file, served) for run_file in reusing)
    # And the owner is taken down while they run
    refused = trainrun("down", owner_id, env=served)
    # Then the down is refused, naming the runs on the cluster, and deletes nothing
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "in use by" in refused.stderr and "trainrun cancel" in refused.stderr, refused.stderr
    assert emulated_aws(served) == kept

    # When they have ended
    for run_id in (first, second):
        watched = trainrun("watch", run_id, "--timeout", "600", env=served)
        # Then each succeeded on the owner's cluster (Slurm ran their jobs one after the other)
        assert watched.returncode == 0, watched.stdout + watched.stderr
        view = status(run_id, served)
        assert view["status"] == "SUCCEEDED"
        visited = {state["name"] for state in view["states"]}
        assert {"Prepare head node", "Compile", "Train"} <= visited
        assert not visited & {"Create network", "Create file system"}
        # (Create cluster and Link data repository report the kept ones ready: created below is empty)
        # And it created nothing and is billed nothing; nothing of its own is left
        assert view["resources"] == {"created": [], "remaining": []}, view["resources"]
        assert view["cost"]["so_far"] == 0 and view["cost"]["per_hour"] == 0, view["cost"]
        assert view["torn_down_at"] is not None
        [reused] = [finding for finding in view["findings"] if finding["code"] == "CLUSTER_REUSED"]
        assert owner_id in reused["message"]
        # And its training output reached its own log stream, shipped by the kept cluster's head node
        # with that node's role (which writes only under the owner's run id)
        # (--raw: as the job wrote them, trainrun's end marker, which names the run, included)
        shown_logs = trainrun("logs", run_id, "--job", "train", "--json", "--raw", env=served)
        assert shown_logs.returncode == 0, shown_logs.stderr
        lines = [json.loads(line)["line"] for line in shown_logs.stdout.splitlines()]
        assert any(f"run={run_id} job=train" in line for line in lines), lines[-5:]
    # And the owner's cluster, file system and network are all still there, nothing more
    assert emulated_aws(served) == kept
    # And one command run with --command sees the owner's file system: their run directories are
    # on it, beside its own
    listed = trainrun("shell", owner_id, "--command", "ls /fsx/trainrun", env=served)
    assert listed.returncode == 0, listed.stderr
    assert {owner_id, first, second} <= set(listed.stdout.split()), listed.stdout + listed.stderr

    # When a run on the cluster is cancelled while its train job runs
    document = yaml.safe_load(reusing[0].read_text())
    document["name"] = "reuse-cancelled"
    document["workload"]["train"] = "python3 train.py --steps 100000"
    long_file = tmp_path / "reuse-cancelled.yaml"
    long_file.write_text(yaml.safe_dump(document))
    long_id = submitted_run_id(long_file, served)
    # (the view `trainrun status` shows, taken in this process: it polls every second)
    stack = operator_stack(served)
    wait_for_record(stack, long_id)
    deadline = time.monotonic() + 300
    while True:
        live = build_view(stack, find_run(stack, long_id), inventory_while_running=False)
        if live.current_state == "Train" and live.train_submitted_at is not None:
            break
        assert live.status == "RUNNING" and time.monotonic() < deadline, live.status
        time.sleep(1)
    cancelled = trainrun("cancel", long_id, "--yes", env=served)
    # Then its teardown stopped its job on the kept cluster (Slurm has nothing of it queued or
    # running), and deleted nothing of the cluster
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    cancelled_view = status(long_id, served)
    assert cancelled_view["status"] == "CANCELLED" and cancelled_view["torn_down_at"] is not None
    queued = trainrun(
        "shell",
        owner_id,
        "--command",
        f"squeue --noheader --states=PENDING,RUNNING --name=trainrun-{long_id}-train",
        env=served,
    )
    assert queued.returncode == 0 and queued.stdout.strip() == "", queued.stdout + queued.stderr
    assert emulated_aws(served) == kept

    # When the owner is taken down now
    down = trainrun("down", owner_id, env=served)
    # Then everything it kept is deleted: its cluster, its file system, its network; nothing is
    # left in the account
    assert down.returncode == 0, down.stdout + down.stderr
    deleted = {line.split()[1] for line in down.stdout.splitlines() if line.startswith("deleted ")}
    assert {"cluster", "file-system", "vpc"} <= deleted, down.stdout
    assert f"run {owner_id} torn down: nothing left" in down.stdout
    assert emulated_aws(served) == {"vpcs": [], "file_systems": [], "instances": []}
    owner = status(owner_id, served)
    assert owner["torn_down_at"] is not None and owner["resources"]["remaining"] == []
    # And its checkpoints were exported before its file system went
    assert (owner["checkpoints"]["status"], owner["checkpoints"]["files"]) == ("EXPORTED", 2), owner["checkpoints"]

    # And the run has no head node for a shell any more
    gone = trainrun("shell", owner_id, "--command", "true", env=served)
    assert gone.returncode == 2 and "torn down" in gone.stderr and "no head node" in gone.stderr
    # And a second down has nothing to do
    again = trainrun("down", owner_id, env=served)
    assert again.returncode == 0 and "nothing to do" in again.stdout

    # And a run that reuses it now is rejected before anything is created
    rejected_id = submitted_run_id(reusing[0], served)
    watched = trainrun("watch", rejected_id, "--timeout", "120", env=served)
    assert watched.returncode == 3, watched.stdout + watched.stderr
    codes = [finding["code"] for finding in status(rejected_id, served)["findings"]]
    assert "REUSED_CLUSTER_TORN_DOWN" in codes, codes
    assert emulated_aws(served) == {"vpcs": [], "file_systems": [], "instances": []}
