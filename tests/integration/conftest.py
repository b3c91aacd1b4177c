"""The workflow harness: template.yaml deployed onto moto, the real ASL, handlers in-process."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainrun.adapters.inventory import TaggedResource, tagged_resources
from trainrun.adapters.network import ensure_network
from trainrun.local.fixture import AccountFixture, load_fixture, resolve_directories
from trainrun.local.lambdas import registry
from trainrun.local.runtime import LocalRuntime, StartedRun
from trainrun.local.summary import LocalRunSummary, summarize
from trainrun.logic.cluster_config import cluster_name
from trainrun.model.tags import RUN_ID, STACK

from .scripted_head_node import ClusterOfEachTest, ScriptedCluster

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@pytest.fixture
def account(tmp_path: Path) -> AccountFixture:
    return load_fixture(EXAMPLES / "accounts" / "default.yaml")


def fixture_with(tmp_path: Path, **reservation_changes: Any) -> AccountFixture:
    """The default account fixture with its first reservation changed."""
    document = yaml.safe_load((EXAMPLES / "accounts" / "default.yaml").read_text())
    reservation = document["capacity_reservations"][0]
    old_id = reservation["id"]
    reservation.update(reservation_changes)
    for group in document.get("capacity_reservation_groups", []):
        group["reservations"] = [reservation["id"] if r == old_id else r for r in group["reservations"]]
    resolve_directories(document, EXAMPLES / "accounts")
    path = tmp_path / "account.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_fixture(path)


@pytest.fixture
def cluster() -> ScriptedCluster:
    """The head nodes of the runtime's clusters: scripted (no Slurm); configure before a run."""
    return ScriptedCluster()


@pytest.fixture
def runtime(account: AccountFixture, cluster: ScriptedCluster) -> Iterator[LocalRuntime]:
    with LocalRuntime(account, head_node_factory=cluster) as local:
        yield local


# --- a runtime a module's tests share (docs/development.md, "Sharing a runtime") ------------------
# Every runtime of a process shares moto's backends and the function registry, and starting one
# wipes them: a module's shared runtime is the last one it starts (its own-runtime tests first).


@pytest.fixture(scope="module")
def clusters() -> ClusterOfEachTest:
    """The shared runtime's head node factory: a run's head node plays its own test's `cluster`."""
    return ClusterOfEachTest()


@pytest.fixture(scope="module")
def module_runtime(clusters: ClusterOfEachTest) -> Iterator[LocalRuntime]:
    with LocalRuntime(load_fixture(EXAMPLES / "accounts" / "default.yaml"), head_node_factory=clusters) as local:
        yield local


@pytest.fixture
def scripted_by_the_test(clusters: ClusterOfEachTest, cluster: ScriptedCluster) -> ScriptedCluster:
    """The runs the test starts on the shared runtime play the jobs its own `cluster` scripts."""
    clusters.cluster = cluster
    return cluster


@contextlib.contextmanager
def as_deployed_afterwards(runtime: LocalRuntime) -> Iterator[LocalRuntime]:
    """The runtime, put back as deployed when the block ends: the functions `wrap` replaced, and
    what `fail_at` changed (the workflow's definition, the jobs it makes fail)."""
    functions = list(registry)
    try:
        yield runtime
    finally:
        for function in functions:
            registry.register(function)
        runtime.undo_failures()


@pytest.fixture
def shared_runtime(module_runtime: LocalRuntime, scripted_by_the_test: ScriptedCluster) -> Iterator[LocalRuntime]:
    """The module's runtime, its runs scripted by the test's `cluster`, put back as deployed after."""
    with as_deployed_afterwards(module_runtime) as local:
        yield local


def run_to_end(
    runtime: LocalRuntime, run_file: bytes, key: str = "runs/test-run.yaml"
) -> tuple[StartedRun, LocalRunSummary]:
    started = runtime.submit(run_file, key)
    execution = runtime.wait(started.execution_arn, timeout=120)
    return started, summarize(runtime, started, execution)


def example(name: str) -> bytes:
    return (EXAMPLES / name).read_bytes()


def remaining(runtime: LocalRuntime, run_id: str) -> list[TaggedResource]:
    """What is still tagged with the run's id (network, file system, EKS cluster)."""
    return tagged_resources(
        runtime.client("ec2"), runtime.client("fsx"), key=RUN_ID, value=run_id, eks=runtime.client("eks")
    )


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def ghost_eks_cluster(runtime: LocalRuntime, run_id: str = "ghost-eks-0123456789ab") -> str:
    """An EKS cluster and node group tagged with this stack for a run that no record knows, in
    subnets of two zones (untagged: the run's teardown finds the cluster by its name)."""
    ec2, eks = runtime.client("ec2"), runtime.client("eks")
    vpc = ec2.create_vpc(CidrBlock="10.8.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.8.{i}.0/24", AvailabilityZone=zone)["Subnet"]["SubnetId"]
        for i, zone in enumerate(("us-west-2a", "us-west-2d"))
    ]
    tags = {STACK: runtime.deployed.name, RUN_ID: run_id}
    name = cluster_name(run_id)
    role = runtime.deployed.arns["EksClusterRole"]
    eks.create_cluster(name=name, roleArn=role, resourcesVpcConfig={"subnetIds": subnets}, tags=tags)
    wait_for(lambda: eks.describe_cluster(name=name)["cluster"]["status"] == "ACTIVE", "the ghost cluster")
    eks.create_nodegroup(
        clusterName=name,
        nodegroupName="ghost",
        subnets=subnets[1:],
        nodeRole=runtime.deployed.arns["EksNodeRole"],
        amiType="AL2023_x86_64_STANDARD",
        instanceTypes=["m7i.large"],
        scalingConfig={"minSize": 1, "maxSize": 1, "desiredSize": 1},
        tags=tags,
    )
    return run_id


def ghost_network(runtime: LocalRuntime, run_id: str = "ghost-run-0123456789ab") -> str:
    """A network tagged with this stack for a run that no record knows (a crashed start)."""
    ensure_network(
        runtime.client("ec2"),
        run_id=run_id,
        stack=runtime.deployed.name,
        cidr="10.9.0.0/16",
        availability_zone="us-west-2d",
    )
    return run_id
