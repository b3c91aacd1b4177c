"""Iterating on a kept cluster (`cluster: {reuse: RUN}`) as a user does it against `trainrun serve`:
a run keeps its cluster, two runs reuse it at once (Slurm queues them), `trainrun down` refuses
the cluster while they run, a third is cancelled (its job stopped, the cluster kept), and then
`trainrun down` removes everything."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import boto3
import yaml

from .conftest import EXAMPLES, NEEDS_LOCAL_HEAD_NODE, trainrun

pytestmark = NEEDS_LOCAL_HEAD_NODE


def emulated_aws(served: dict[str, str]) -> dict[str, Any]:
    """The account's networks, file systems, instances and ParallelCluster stacks, as the operator sees them."""
    session = boto3.Session(
        aws_access_key_id=served["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=served["AWS_SECRET_ACCESS_KEY"],
        region_name=served["AWS_REGION"],
    )
    ec2 = session.client("ec2", endpoint_url=served["AWS_ENDPOINT_URL"])
    fsx = session.client("fsx", endpoint_url=served["AWS_ENDPOINT_URL"])
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


def test_two_runs_reuse_a_kept_cluster_and_down_then_removes_everything(served: dict[str, str], tmp_path: Path) -> None:
    # Given a run that keeps its cluster, run to its end
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    document["name"] = "owner"
    document["teardown"] = {"on_success": "keep"}
    owner_file = tmp_path / "owner.yaml"
    owner_file.write_text(yaml.safe_dump(document))
    owner_id = submitted_run_id(owner_file, served, "--watch")
    owner = status(owner_id, served)
    assert owner["kept_at"] is not None and owner["torn_down_at"] is None
    kept = emulated_aws(served)
    assert kept["vpcs"] and kept["file_systems"] and kept["instances"], kept

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
        shown = trainrun("logs", run_id, "--job", "train", "--json", "--raw", env=served)
        assert shown.returncode == 0, shown.stderr
        lines = [json.loads(line)["line"] for line in shown.stdout.splitlines()]
        assert any(f"run={run_id} job=train" in line for line in lines), lines[-5:]
    # And the owner's cluster, file system and network are all still there, nothing more
    assert emulated_aws(served) == kept
    # And their run directories are on its file system, beside its own
    listed = trainrun("shell", owner_id, "--command", "ls /fsx/trainrun", env=served)
    assert {owner_id, first, second} <= set(listed.stdout.split()), listed.stdout + listed.stderr

    # When a run on the cluster is cancelled while its train job runs
    document = yaml.safe_load(reusing[0].read_text())
    document["name"] = "reuse-cancelled"
    document["workload"]["train"] = "python3 train.py --steps 100000"
    long_file = tmp_path / "reuse-cancelled.yaml"
    long_file.write_text(yaml.safe_dump(document))
    long_id = submitted_run_id(long_file, served)
    deadline = time.monotonic() + 300
    while (view := status(long_id, served))["current_state"] != "Train" or view["train_submitted_at"] is None:
        assert view["status"] == "RUNNING" and time.monotonic() < deadline, view["status"]
        time.sleep(1)
    cancelled = trainrun("cancel", long_id, "--yes", env=served)
    # Then its teardown stopped its job on the kept cluster (Slurm has nothing of it queued or
    # running), and deleted nothing of the cluster
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    view = status(long_id, served)
    assert view["status"] == "CANCELLED" and view["torn_down_at"] is not None
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
    # Then everything it kept is deleted and nothing is left in the account
    assert down.returncode == 0, down.stdout + down.stderr
    deleted = {line.split()[1] for line in down.stdout.splitlines() if line.startswith("deleted ")}
    assert {"cluster", "file-system", "vpc"} <= deleted, down.stdout
    assert emulated_aws(served) == {"vpcs": [], "file_systems": [], "instances": []}

    # And a run that reuses it now is rejected before anything is created
    rejected_id = submitted_run_id(reusing[0], served)
    watched = trainrun("watch", rejected_id, "--timeout", "120", env=served)
    assert watched.returncode == 3, watched.stdout + watched.stderr
    codes = [finding["code"] for finding in status(rejected_id, served)["findings"]]
    assert "REUSED_CLUSTER_TORN_DOWN" in codes, codes
    assert emulated_aws(served) == {"vpcs": [], "file_systems": [], "instances": []}
