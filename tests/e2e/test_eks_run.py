"""Whole EKS runs (`cluster.kind: eks`) on the local runtime: the strict local EKS and its local
Kubernetes (trainrun.local.kube_cluster), whose kubelets run each pod's command on this machine as
the workload user, and whose pods' output reaches the progress function in the Observability
add-on's records. What these show on EKS, the ParallelCluster runs show in test_local_run.py.

One runtime for the module's runs (each its own cluster, torn down at its end): starting a local
stack costs seconds. A rehearsal set on it (a lost node) is put back by its test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from trainrun.local.fixture import load_fixture
from trainrun.local.kube_cluster import kubelet_tools
from trainrun.local.runtime import LocalRuntime
from trainrun.local.summary import LocalRunSummary, summarize
from trainrun.logic import device_plugins
from trainrun.logic.kubernetes_objects import container_log_group
from trainrun.ops import cancel
from trainrun.workflow import State

from .conftest import EXAMPLES

_, KUBELET_MISSING = kubelet_tools()
pytestmark = pytest.mark.skipif(
    KUBELET_MISSING is not None, reason=f"this machine cannot run the local kubelet: {KUBELET_MISSING}"
)


@pytest.fixture(scope="module")
def runtime() -> Iterator[LocalRuntime]:
    with LocalRuntime(load_fixture(EXAMPLES / "accounts" / "default.yaml")) as local:
        yield local


def run_file(name: str = "eks-run", **workload: Any) -> bytes:
    """The single-node EKS example with workload fields replaced (None removes one)."""
    document = yaml.safe_load((EXAMPLES / "single-node-eks.yaml").read_text())
    document["name"] = name
    for key, value in workload.items():
        if value is None:
            document["workload"].pop(key, None)
        else:
            document["workload"][key] = value
    return yaml.safe_dump(document).encode()


def run(runtime: LocalRuntime, data: bytes) -> LocalRunSummary:
    started = runtime.submit(data, "runs/eks.yaml")
    return summarize(runtime, started, runtime.wait(started.execution_arn, timeout=240))


def test_an_eks_run_stages_compiles_trains_and_exports_through_kubernetes_and_leaves_nothing(
    runtime: LocalRuntime,
) -> None:
    # When the single-node EKS example runs
    summary = run(runtime, (EXAMPLES / "single-node-eks.yaml").read_bytes())
    # Then it succeeds: prepared through Kubernetes, compiled and trained as Kubernetes Jobs
    assert summary.status == "SUCCEEDED", summary.error
    states = summary.states
    assert states.index(State.JOBS_ON_EKS) < states.index(State.PREPARE_KUBERNETES) < states.index(State.COMPILE)
    assert State.PREPARE_HEAD_NODE not in states
    assert summary.progress.compile is not None and summary.progress.compile.graphs == 2
    train = summary.progress.train
    assert train is not None and (train.step, train.checkpoints) == (40, 2)
    # And the progress function completed both jobs from the Job status (prompted by the pods' end
    # lines), not by Check after a silence
    assert State.CHECK_COMPILE not in states and State.CHECK_TRAIN not in states
    record = runtime.store().get(summary.run_id)
    assert record is not None and record.eks is not None
    for kind in ("compile", "train"):
        job = record.job(kind)  # type: ignore[arg-type]
        assert job is not None and (job.state, job.slurm_state, job.exit_code) == ("SUCCEEDED", "COMPLETED", 0)
    # And every object was checked by the API server before the node group was created
    eks = record.eks
    assert eks.dry_run_at is not None and eks.nodes_active_at is not None and eks.dry_run_at <= eks.nodes_active_at
    assert eks.staged_at is not None
    # And each line is its pod's, with its rank, read from the add-on's log group
    progress, _ = runtime.store().get_progress(summary.run_id, "train")
    assert progress is not None and set(progress.applied_ranges_by_source) == {"train-1/0"}
    assert all(line.startswith("0: ") for line in progress.tail)
    groups = runtime.client("logs").describe_log_groups(logGroupNamePrefix=container_log_group(eks.name))
    assert [group["logGroupName"] for group in groups["logGroups"]] == [container_log_group(eks.name)]
    # And the checkpoints were exported by the export Job, and nothing is left
    assert summary.checkpoints is not None and summary.checkpoints.status == "EXPORTED"
    assert summary.checkpoints.files == 2
    assert summary.resources.remaining == []


def test_a_lost_node_fails_the_attempt_and_train_resumes_from_its_checkpoint(runtime: LocalRuntime) -> None:
    # Given a run that resumes after an infrastructure failure, and a node lost at step 25 (the
    # checkpoint of step 20 saved)
    assert runtime.kubernetes is not None
    runtime.kubernetes.node_failure_at_step = 25
    data = run_file("eks-resume", resume="python3 train.py --steps 40", retries=1)
    # When it runs
    try:
        summary = run(runtime, data)
    finally:
        runtime.kubernetes.node_failure_at_step = None
    # Then the first attempt ended NODE_FAIL (the Job's pod failure policy on the pod's
    # DisruptionTarget), the second resumed from the checkpoint and finished
    assert summary.status == "SUCCEEDED", summary.error
    assert State.RESUME_TRAIN in summary.states
    record = runtime.store().get(summary.run_id)
    assert record is not None
    job = record.job("train")
    assert job is not None and job.attempt == 2 and job.state == "SUCCEEDED"
    (first,) = job.attempts
    assert first.infrastructure and first.state == "NODE_FAIL"
    assert first.why == "Kubernetes ended the job NODE_FAIL: a node of the job failed"
    progress, _ = runtime.store().get_progress(summary.run_id, "train")
    assert progress is not None and progress.step == 40
    # (the second attempt's first step is the one after the checkpoint it resumed from)
    assert [(item.number, item.first_step) for item in progress.attempts] == [(1, 1), (2, 21)]
    assert summary.resources.remaining == []


def test_a_forged_success_never_succeeds_a_job_the_api_says_failed(runtime: LocalRuntime) -> None:
    # Given a compile command that prints every end line trainrun knows, then fails
    forged = (
        "echo 'TRAINRUN-POD-END index=0 exit=0'; "
        "echo 'TRAINRUN-END run=x job=compile slurm_job_id=1 exit_code=0 state=COMPLETED ended_at=1 mac=00'; "
        "exit 3"
    )
    # When it runs
    summary = run(runtime, run_file("eks-forged", compile=forged))
    # Then the run fails with the Job's own end: exit code 3, found by asking the API
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "JobFailed"
    assert "compile Job compile ended FAILED with exit code 3" in summary.error["cause"]
    assert State.TRAIN not in summary.states and summary.resources.remaining == []


def test_the_budget_stops_the_job_by_deleting_it_and_the_run_leaves_nothing(runtime: LocalRuntime) -> None:
    # Given a run whose budget outlasts its staging but not its training: about a minute of the
    # node, the file system and the rest at the plan's prices, for a training of two and a half minutes
    document = yaml.safe_load(
        run_file(
            "eks-budget",
            compile=None,
            train="python3 train.py --steps 3000 --checkpoint-every 100000",
            total_steps=3000,
            env={"TRAINRUN_LOCAL_STEP_SECONDS": "0.05"},
            # (max_runtime counts compressed time, the budget real time: this one is not the stop)
            max_runtime="24h",
        )
    )
    document["budget"] = {"max_cost_usd": 0.25}
    # When it runs
    summary = run(runtime, yaml.safe_dump(document).encode())
    # Then a Check train stopped the Job (foreground deletion: its pod got SIGTERM and its grace period)
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "BudgetExceeded", summary.error
    assert "the Job train-1 was deleted" in summary.error["cause"]
    progress, _ = runtime.store().get_progress(summary.run_id, "train")
    assert progress is not None and progress.step is not None and 0 < progress.step < 3000
    assert any("SIGTERM after step" in line for line in progress.tail), progress.tail
    # And its checkpoint was exported, and nothing is left
    assert summary.checkpoints is not None and summary.checkpoints.status == "EXPORTED"
    assert summary.resources.remaining == []


def test_a_cancelled_eks_run_stops_its_job_exports_and_leaves_nothing(runtime: LocalRuntime) -> None:
    # Given a run training slowly, with a checkpoint every 2 steps
    data = run_file(
        "eks-cancel",
        compile=None,
        train="python3 train.py --steps 400 --checkpoint-every 2",
        env={"TRAINRUN_LOCAL_STEP_SECONDS": "0.2"},
    )
    started = runtime.submit(data, "runs/eks-cancel.yaml")
    store = runtime.store()

    def training() -> bool:
        progress, _ = store.get_progress(started.run_id, "train")
        return progress is not None and (progress.step or 0) >= 3

    from tests.integration.conftest import wait_for

    wait_for(training, "the train job's third step", timeout=120)
    # When it is cancelled, as `trainrun cancel --yes` does
    stack = runtime.operator_stack()
    record = store.get(started.run_id)
    assert record is not None and cancel.stop(stack, record, who="test")
    outcome = cancel.wait_for_teardown(stack, started.run_id, timeout=180, poll=0.5)
    # Then the teardown stopped the Job, exported its checkpoints and left nothing
    assert (outcome.status, outcome.torn_down, outcome.remaining) == ("CANCELLED", True, [])
    record = store.get(started.run_id)
    assert record is not None and record.checkpoints is not None
    assert record.checkpoints.status == "EXPORTED" and (record.checkpoints.files or 0) >= 1


def test_without_the_neuron_device_plugin_the_run_fails_naming_it(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a stack whose device plugins leave out Neuron's (its nodes never advertise a Neuron device)
    everything = device_plugins.device_plugin_manifests
    monkeypatch.setattr(
        "trainrun.steps.kubernetes.device_plugin_manifests",
        lambda: [item for item in everything() if "neuron" not in item["metadata"]["name"]],
    )
    # When a run waits for its nodes (a minute, compressed)
    summary = run(runtime, run_file("eks-no-plugin", node_bootstrap_timeout="1m"))
    # Then it fails saying which node lacks which devices and which plugin, with nothing left
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "KubernetesNotReady", summary.error
    cause = summary.error["cause"]
    assert "advertises aws.amazon.com/neuron 0 of 16" in cause and "Neuron device plugin" in cause
    assert State.COMPILE not in summary.states and summary.resources.remaining == []
