"""The jobs of an EKS run (trainrun.steps.kubernetes) and their logs (trainrun.steps.progress's
container batches), against a gateway that holds the cluster's objects as the API would answer
them: the Job status is what decides, never a line of the logs.

The API server's own rules (schemas, admission, scheduling) are the local Kubernetes' to test
(tests/integration/test_kube_apiserver.py, test_kube_cluster.py); here the objects' status is
written by hand, as a real cluster's controllers would write it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

import pytest
from aws_lambda_powertools import Metrics

from trainrun.errors import JobFailed
from trainrun.logic import kubernetes_objects as objects
from trainrun.model.jobs import JobRecord
from trainrun.model.resources import EksClusterRef, StorageIds
from trainrun.model.run_record import RunStore, utcnow
from trainrun.steps import kubernetes as steps
from trainrun.steps.head_node import JobRequest, MaxRuntimeExceeded, SubmitRequest, Submitted, jobs_may_run
from trainrun.steps.progress import LogBatch, LogEvent, apply_container_batch

from .conftest import moto_run_events
from .test_progress import TRAIN_LINE
from .test_provisioning import RUN, given_run, record

CLUSTER = f"trainrun-{RUN}"[:100]
EKS = {"kind": "eks"}
NODEGROUP = "trn1-32xlarge"


class Gateway:
    """The cluster's objects by (kind, namespace, name), as its API answers them."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.applied: list[tuple[str, str, bool]] = []
        self.deleted: list[tuple[str, str]] = []

    def apply(self, items: Iterable[Mapping[str, Any]], *, dry_run: bool = False) -> list[dict[str, Any]]:
        answers = []
        for item in items:
            key = (item["kind"], item["metadata"].get("namespace", ""), item["metadata"]["name"])
            self.applied.append((key[0], key[2], dry_run))
            stored = self.objects.get(key)
            merged = {**json.loads(json.dumps(item)), "status": (stored or {}).get("status", {})}
            if not dry_run:
                self.objects[key] = merged
            answers.append(merged)
        return answers

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.objects.get((kind, namespace or "", name))

    def list(
        self, kind: str, namespace: str | None = None, labels: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        return [
            item
            for (k, ns, _), item in self.objects.items()
            if k == kind
            and (namespace is None or ns == namespace)
            and all((item["metadata"].get("labels") or {}).get(key) == value for key, value in (labels or {}).items())
        ]

    def delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        self.deleted.append((kind, name))
        return self.objects.pop((kind, namespace or "", name), None) is not None

    # --- what the cluster's controllers would write -------------------------------------------
    def node(self, name: str, *, ready: bool = True, devices: bool = True) -> None:
        allocatable = {"cpu": "128", "memory": "512Gi", "pods": "250"}
        if devices:
            allocatable |= {"aws.amazon.com/neuron": "16", "vpc.amazonaws.com/efa": "8"}
        self.objects[("Node", "", name)] = {
            "metadata": {"name": name, "labels": {steps.NODEGROUP_LABEL: NODEGROUP}},
            "status": {
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                "allocatable": allocatable,
            },
        }

    def job_ends(self, name: str, condition: str, message: str = "") -> None:
        job = self.objects[("Job", objects.NAMESPACE, name)]
        job["status"] = {"conditions": [{"type": condition, "status": "True", "message": message}]}

    def pod(self, job: str, index: int, *, phase: str, terminated: dict[str, Any] | None = None, **extra: Any) -> None:
        name = f"{job}-{index}-abcde"
        status: dict[str, Any] = {"phase": phase, **extra}
        if terminated is not None:
            status["containerStatuses"] = [{"name": objects.CONTAINER, "state": {"terminated": terminated}}]
        self.objects[("Pod", objects.NAMESPACE, name)] = {
            "metadata": {"name": name, "labels": {steps.JOB_NAME_LABEL: job}},
            "spec": {"nodeName": "ip-10-0-1-5.us-west-2.compute.internal"},
            "status": status,
        }


class Sfn:
    """Step Functions' task-token calls, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def send_task_success(self, **kwargs: Any) -> None:
        self.calls.append(("success", kwargs))

    def send_task_failure(self, **kwargs: Any) -> None:
        self.calls.append(("failure", kwargs))

    def send_task_heartbeat(self, **kwargs: Any) -> None:
        self.calls.append(("heartbeat", kwargs))


@pytest.fixture
def gateway() -> Gateway:
    return Gateway()


def given_eks_run(store: RunStore, **sections: Any) -> None:
    """An EKS run whose cluster, node group and file system are up (past Create node group)."""
    given_run(store, cluster=EKS, **sections)
    store.set_storage(
        RUN, StorageIds(file_system_id="fs-0123456789abcdef0", dns_name="fs.example", mount_name="abcdefgh")
    )
    store.set_eks(
        RUN,
        EksClusterRef(
            name=CLUSTER, region="us-west-2", status="ACTIVE", nodegroup=NODEGROUP, nodegroup_status="ACTIVE"
        ),
    )


def submit(gateway: Gateway, store: RunStore, job: str = "train", token: str = "token-1") -> Submitted:
    return steps.submit_job(
        lambda _: gateway,  # type: ignore[arg-type,return-value]
        store,
        SubmitRequest(run_id=RUN, job=job, task_token=token),  # type: ignore[arg-type]
        sfn=Sfn(),
        run_events=moto_run_events(),
        config_bucket="trainrun-config-test",
    )


# --- how a Job ended ---------------------------------------------------------------------------


def test_a_complete_job_succeeded(gateway: Gateway, store: RunStore) -> None:
    given_eks_run(store)
    submit(gateway, store)
    gateway.job_ends("train-1", "Complete")
    assert steps.job_status(gateway, "train-1") == steps.JobStatus(  # type: ignore[arg-type]
        name="train-1", finished=True, succeeded=True, state="COMPLETED", exit_code=0
    )


@pytest.mark.parametrize(
    ("pod", "state", "exit_code", "why"),
    [
        # The pod garbage collector marks a gone node's pods (Kubernetes docs, "Pod disruption conditions").
        (
            {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC"}]},
            "NODE_FAIL",
            143,
            "the node was lost",
        ),
        ({"terminated": {"exitCode": 137, "reason": "OOMKilled"}}, "OUT_OF_MEMORY", 137, "OOMKilled"),
        ({"terminated": {"exitCode": 3, "reason": "Error"}}, "FAILED", 3, "exited with code 3"),
    ],
)
def test_a_failed_job_says_why_from_its_first_failed_pod_in_slurms_words(
    gateway: Gateway, store: RunStore, pod: dict[str, Any], state: str, exit_code: int, why: str
) -> None:
    given_eks_run(store)
    submit(gateway, store)
    terminated = pod.pop("terminated", {"exitCode": 143, "reason": "Error"})
    gateway.pod("train-1", 0, phase="Failed", terminated=terminated, **pod)
    gateway.job_ends("train-1", "Failed", "Job has reached the specified backoff limit")
    status = steps.job_status(gateway, "train-1")  # type: ignore[arg-type]
    assert status is not None and (status.finished, status.succeeded) == (True, False)
    assert (status.state, status.exit_code) == (state, exit_code)
    assert why in status.why


def test_a_pending_pod_says_what_the_scheduler_said(gateway: Gateway, store: RunStore) -> None:
    given_eks_run(store)
    submit(gateway, store)
    message = "0/1 nodes are available: 1 Insufficient aws.amazon.com/neuron."
    gateway.pod(
        "train-1",
        0,
        phase="Pending",
        conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}],
    )
    status = steps.job_status(gateway, "train-1")  # type: ignore[arg-type]
    assert status is not None and status.state == "PENDING" and not status.finished
    assert status.unschedulable == f"pod train-1-0-abcde is Pending: {message}"


# --- nodes -------------------------------------------------------------------------------------------


def test_nodes_without_their_devices_are_not_ready_and_say_which_plugin(gateway: Gateway, store: RunStore) -> None:
    given_eks_run(store)
    spec = record(store).spec
    assert spec is not None
    eks = record(store).eks
    assert eks is not None
    assert steps.node_problems(gateway, spec, eks) == [f"0 of 2 nodes of node group {NODEGROUP} registered"]  # type: ignore[arg-type]
    gateway.node("ip-10-0-1-5", devices=False)
    gateway.node("ip-10-0-1-6")
    problems = steps.node_problems(gateway, spec, eks)  # type: ignore[arg-type]
    assert problems == [
        "node ip-10-0-1-5 advertises aws.amazon.com/neuron 0 of 16, vpc.amazonaws.com/efa 0 of 8 "
        "(is the Neuron device plugin running on it?)"
    ]
    gateway.node("ip-10-0-1-5")
    assert steps.node_problems(gateway, spec, eks) == []  # type: ignore[arg-type]


def test_a_lost_node_not_yet_deleted_beside_its_replacement_keeps_nothing_waiting(
    gateway: Gateway, store: RunStore
) -> None:
    given_eks_run(store)
    spec, eks = record(store).spec, record(store).eks
    assert spec is not None and eks is not None
    gateway.node("ip-10-0-1-5")
    gateway.node("ip-10-0-1-6", ready=False)  # lost
    assert steps.node_problems(gateway, spec, eks) == ["node ip-10-0-1-6 is not Ready"]  # type: ignore[arg-type]
    gateway.node("ip-10-0-1-7")  # its replacement joined; the lost one's Node is still there
    assert steps.node_problems(gateway, spec, eks) == []  # type: ignore[arg-type]


# --- submit, end prompts, check ----------------------------------------------------------------------


def test_submit_applies_the_attempts_job_once_and_keeps_the_token(gateway: Gateway, store: RunStore) -> None:
    given_eks_run(store)
    first = submit(gateway, store, token="token-1")
    again = submit(gateway, store, token="token-2")
    assert (first.slurm_job_id, first.existing, again.existing) == (1, False, True)
    job = record(store).job("train")
    assert job is not None and (job.task_token, job.slurm_job_id, job.state) == ("token-2", 1, "SUBMITTED")
    # The same Job applied twice is one Job (server-side apply of the same object)
    assert [key for key in gateway.objects if key[0] == "Job"] == [("Job", objects.NAMESPACE, "train-1")]


def test_a_line_saying_the_job_ended_decides_nothing_while_the_api_says_it_runs(
    gateway: Gateway, store: RunStore
) -> None:
    given_eks_run(store)
    submit(gateway, store)
    sfn = Sfn()
    # A workload prints the end line of every pod (a forgery, or a pod ahead of its Job)
    said = steps.complete_if_ended(gateway, store, sfn, RUN, "train", wait_seconds=0)  # type: ignore[arg-type]
    assert said is None and sfn.calls == []
    job = record(store).job("train")
    assert job is not None and job.state == "SUBMITTED"
    # Once the API says the Job completed, the prompt completes the task with success
    gateway.job_ends("train-1", "Complete")
    assert steps.complete_if_ended(gateway, store, sfn, RUN, "train", wait_seconds=0) == "success"  # type: ignore[arg-type]
    assert [call for call, _ in sfn.calls] == ["success"]
    job = record(store).job("train")
    assert job is not None and (job.state, job.slurm_state, job.exit_code) == ("SUCCEEDED", "COMPLETED", 0)


def test_a_failed_job_fails_the_task_with_jobfailed_and_why(gateway: Gateway, store: RunStore) -> None:
    given_eks_run(store)
    submit(gateway, store)
    gateway.pod("train-1", 0, phase="Failed", terminated={"exitCode": 1, "reason": "Error"})
    gateway.job_ends("train-1", "Failed")
    sfn = Sfn()
    assert steps.complete_if_ended(gateway, store, sfn, RUN, "train", wait_seconds=0) == "failure"  # type: ignore[arg-type]
    ((call, kwargs),) = sfn.calls
    assert (call, kwargs["error"]) == ("failure", JobFailed.__name__)
    assert "train Job train-1 ended FAILED with exit code 1" in kwargs["cause"]


def test_check_stops_a_job_past_max_runtime_by_deleting_it(gateway: Gateway, store: RunStore) -> None:
    given_eks_run(store)
    submit(gateway, store)
    job = record(store).job("train")
    assert job is not None and job.submitted_at is not None
    later = job.submitted_at + timedelta(hours=25)  # the run file's max_runtime is 24h
    with pytest.raises(MaxRuntimeExceeded, match="the Job train-1 was deleted"):
        steps.check_job(
            lambda _: gateway,  # type: ignore[arg-type,return-value]
            store,
            JobRequest(run_id=RUN, job="train"),
            run_events=moto_run_events(),
            now=later,
            sleep=lambda _: None,
        )
    assert ("Job", "train-1") in gateway.deleted and gateway.get("Job", "train-1", objects.NAMESPACE) is None


def test_a_submitted_job_may_run_until_it_ended_so_teardown_stops_it_before_the_export(
    gateway: Gateway, store: RunStore
) -> None:
    # Given an EKS run whose train Job was applied (no SSM command, no end key: its attempt recorded)
    given_eks_run(store)
    submit(gateway, store)
    # Then it may be running: the teardown's guard lets stop_run_jobs delete it before the export
    assert jobs_may_run(record(store))
    assert steps.stop_run_jobs(gateway, record(store))  # type: ignore[arg-type]
    assert ("Job", "train-1") in gateway.deleted
    # And once Check has recorded its end, nothing of it may run
    job = record(store).job("train")
    assert job is not None
    store.set_job(RUN, "train", job.model_copy(update={"state": "SUCCEEDED"}))
    assert not jobs_may_run(record(store))


def test_check_of_a_failed_job_raises_jobfailed_for_resume_to_classify(gateway: Gateway, store: RunStore) -> None:
    given_eks_run(store)
    submit(gateway, store)
    # The node's pod was marked DisruptionTarget and garbage-collected at once; the Job's pod
    # failure policy (FailJob on DisruptionTarget) says so in its Failed condition
    job = gateway.objects[("Job", objects.NAMESPACE, "train-1")]
    message = "Pod trainrun/train-1-0-abcde has condition DisruptionTarget matching FailJob rule at index 0"
    job["status"] = {
        "conditions": [{"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": message}]
    }
    with pytest.raises(JobFailed, match="NODE_FAIL"):
        steps.check_job(
            lambda _: gateway,  # type: ignore[arg-type,return-value]
            store,
            JobRequest(run_id=RUN, job="train"),
            run_events=moto_run_events(),
        )
    job = record(store).job("train")
    assert job is not None and (job.state, job.slurm_state) == ("FAILED", "NODE_FAIL")


# --- the container logs -------------------------------------------------------------------------------


def container_record(
    line: str, *, job_name: str = "train-1", index: int = 0, namespace: str = objects.NAMESPACE
) -> str:
    """A record of the Observability add-on's Fluent Bit, as the local kubelet ships it (no labels:
    the add-on's filter sets Labels Off)."""
    kubernetes = {"pod_name": f"{job_name}-{index}-abcde", "namespace_name": namespace, "container_name": "workload"}
    return json.dumps({"log": line + "\n", "stream": "stdout", "kubernetes": kubernetes})


def batch(events: list[tuple[int, str]], cluster: str = CLUSTER, run: str = RUN) -> LogBatch:
    return LogBatch(
        log_group=objects.container_log_group(cluster),
        log_stream="node-application.var.log.containers.pod.log",
        subscription_filters=[objects.progress_subscription(run)],
        log_events=[LogEvent(id=f"{number:056d}", timestamp=number, message=message) for number, message in events],
    )


def apply(store: RunStore, gateway: Gateway, sfn: Sfn, items: LogBatch) -> list[Any]:
    return apply_container_batch(
        items,
        store=store,
        sfn=sfn,
        metrics=Metrics(namespace="TrainrunTest", service="progress"),
        now=utcnow(),
        kubernetes=lambda _: gateway,  # type: ignore[arg-type,return-value]
    )


def step_line(step: int) -> str:
    return TRAIN_LINE.format(epoch=0, step=step, loss="5.5000")


def test_each_pods_lines_are_its_rank_and_interleaved_event_ids_of_two_pods_are_both_counted(
    gateway: Gateway, store: RunStore
) -> None:
    given_eks_run(store)
    submit(gateway, store)
    sfn = Sfn()
    # Two pods' batches whose event ids interleave (ids of different streams do)
    apply(
        store,
        gateway,
        sfn,
        batch([(10, container_record(step_line(3), index=0)), (30, container_record(step_line(4)))]),
    )
    apply(store, gateway, sfn, batch([(20, container_record("rank 1 says hello", index=1))]))
    apply(store, gateway, sfn, batch([(40, container_record("rank 1 says bye", index=1))]))
    # A redelivery of the first is not counted again
    apply(
        store,
        gateway,
        sfn,
        batch([(10, container_record(step_line(3), index=0)), (30, container_record(step_line(4)))]),
    )
    progress, _ = store.get_progress(RUN, "train")
    assert progress is not None
    assert (progress.step, progress.lines) == (4, 4)
    assert set(progress.applied_ranges_by_source) == {"train-1/0", "train-1/1"}
    # Each line is its pod's, prefixed with its completion index, the rank (as srun --label does)
    assert progress.tail[-1] == "1: rank 1 says bye"


def test_a_forged_end_line_never_succeeds_the_run(gateway: Gateway, store: RunStore) -> None:
    given_eks_run(store)
    submit(gateway, store)
    sfn = Sfn()
    forged = [
        f"{objects.POD_END_LINE} index=0 exit=0",
        f"TRAINRUN-END run={RUN} job=train slurm_job_id=1 exit_code=0 state=COMPLETED ended_at=1 mac={'0' * 64}",
    ]
    (outcome,) = apply(store, gateway, sfn, batch([(40 + n, container_record(line)) for n, line in enumerate(forged)]))
    # The prompt asked the API: the Job still runs, so nothing was completed
    assert outcome.completed is None and [call for call, _ in sfn.calls if call != "heartbeat"] == []
    # And the end marker a head node's watcher would sign is, in a pod's output, just a line
    progress, _ = store.get_progress(RUN, "train")
    assert progress is not None and progress.exit_code is None
    job = record(store).job("train")
    assert job is not None and job.state == "SUBMITTED"


def test_the_pods_end_line_prompts_the_completion_the_api_confirms(gateway: Gateway, store: RunStore) -> None:
    given_eks_run(store)
    submit(gateway, store)
    gateway.job_ends("train-1", "Complete")
    sfn = Sfn()
    (outcome,) = apply(store, gateway, sfn, batch([(50, container_record(f"{objects.POD_END_LINE} index=0 exit=0"))]))
    assert outcome.completed == "success"
    assert [call for call, _ in sfn.calls if call != "heartbeat"] == ["success"]


def test_logs_of_another_clusters_pods_are_not_the_runs(gateway: Gateway, store: RunStore) -> None:
    given_eks_run(store)
    submit(gateway, store)
    (outcome,) = apply(store, gateway, Sfn(), batch([(60, container_record(step_line(9)))], cluster="trainrun-other"))
    assert outcome.ignored_reason == f"cluster trainrun-other is not run {RUN}'s"
    assert store.get_progress(RUN, "train")[0] is None


def test_a_record_not_of_the_runs_job_pods_is_skipped(gateway: Gateway, store: RunStore) -> None:
    given_eks_run(store)
    other = container_record("coredns says hi", job_name="coredns", namespace="kube-system")
    stage = json.dumps(
        {"log": "staged", "kubernetes": {"pod_name": "stage-x7k2p", "namespace_name": objects.NAMESPACE}}
    )
    assert apply(store, gateway, Sfn(), batch([(70, other), (71, "not json"), (72, stage)])) == []


def test_a_delivery_no_subscription_of_a_run_made_is_ignored(gateway: Gateway, store: RunStore) -> None:
    given_eks_run(store)
    submit(gateway, store)
    unnamed = batch([(80, container_record(step_line(9)))]).model_copy(update={"subscription_filters": ["other"]})
    (outcome,) = apply(store, gateway, Sfn(), unnamed)
    assert outcome.ignored_reason is not None and "names a run" in outcome.ignored_reason


def test_the_job_record_keeps_the_attempt_as_its_number(gateway: Gateway, store: RunStore) -> None:
    workload = {"source": {"s3": "s3://trainrun-examples/bert.tar.gz"}, "train": "python3 train.py", "retries": 1}
    given_eks_run(store, workload=workload)
    store.set_job(RUN, "train", JobRecord(attempt=2))
    submit(gateway, store)
    assert gateway.get("Job", "train-2", objects.NAMESPACE) is not None
    job = record(store).job("train")
    assert job is not None and job.slurm_job_id == 2
