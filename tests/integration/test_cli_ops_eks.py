"""`trainrun logs`, `shell` and `status` of an EKS run, as their own processes against the local
stack, with the operator's credentials: the local IAM checks each call against the operator's
minimum policy as AWS would.

The run is written as its steps leave it (its record, and its pods' lines in its cluster's
container log group as the Observability add-on ships them): these tests are about what the
commands read, not about the EKS workflow (test_eks_workflow.py)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

from trainrun.local.runtime import LocalRuntime
from trainrun.logic.cluster_config import cluster_name
from trainrun.logic.kubernetes_objects import container_log_group
from trainrun.model.jobs import JobRecord
from trainrun.model.resources import EksClusterRef
from trainrun.model.run_file import parse_run_file
from trainrun.model.run_record import RunFileRef, RunRecord, RunStatus

from .cli_ops import trainrun
from .conftest import EXAMPLES

RUN = "bert-large-eks-0123456789ab"
CLUSTER = cluster_name(RUN)


def eks_run(runtime: LocalRuntime, *, status: RunStatus = RunStatus.SUCCEEDED) -> int:
    """The record of an EKS run whose compile Job and first train attempt ran, and their pods'
    lines in the container log group (with the stage Job's); its number of nodes."""
    created = datetime.now(UTC) - timedelta(minutes=10)
    spec = parse_run_file((EXAMPLES / "bert-large-phase1-eks.yaml").read_text())
    job = JobRecord(slurm_job_id=1, submitted_at=created, state="SUCCEEDED", exit_code=0)
    runtime.store().create(
        RunRecord(
            run_id=RUN,
            status=status,
            name=spec.name,
            run_file=RunFileRef(bucket=runtime.deployed.outputs["ConfigBucketName"], key="runs/eks.yaml"),
            created_at=created,
            updated_at=created,
            spec=spec,
            eks=EksClusterRef(name=CLUSTER, region=runtime.region, status="ACTIVE"),
            job_compile=job,
            job_train=job,
        )
    )
    logs = runtime.client("logs")
    group = container_log_group(CLUSTER)
    logs.create_log_group(logGroupName=group)
    start = int(created.timestamp() * 1000)
    for job_name, lines in (
        ("stage", ["staged"]),
        ("compile", ["compiling", "compiled"]),
        ("train-1", ["step 1 loss 9.5", "step 2 loss 9.0"]),
    ):
        for index in range(spec.capacity.nodes):
            stream = (
                f"ip-10-0-0-{index}-application.var.log.containers.{job_name}-{index}-abcde_trainrun_workload-1.log"
            )
            logs.create_log_stream(logGroupName=group, logStreamName=stream)
            # As the Observability add-on's Fluent Bit ships it: the pod's name, no labels (Labels Off)
            pod = {"pod_name": f"{job_name}-{index}-abcde", "namespace_name": "trainrun"}
            events = [
                {
                    "timestamp": start + 1000 * (100 * number + index),
                    "message": json.dumps({"log": f"{line}\n", "stream": "stdout", "kubernetes": pod}),
                }
                for number, line in enumerate(lines)
            ]
            logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)
    return spec.capacity.nodes


def test_logs_of_an_eks_run_read_its_container_log_group_as_the_operator(runtime: LocalRuntime) -> None:
    # Given an EKS run that ran
    nodes = eks_run(runtime)
    # When the operator reads its train job's output (following it: the run has ended, so it stops)
    started = time.monotonic()
    raw = trainrun(runtime, "logs", RUN, "--job", "train", "--raw", "--follow")
    merged = trainrun(runtime, "logs", RUN)
    # Then the operator's policy allows FilterLogEvents on the group, and the lines come in time
    # order with their ranks; merged, once for all ranks
    assert raw.exit_code == 0, raw.output
    assert raw.stdout.splitlines() == [f"{i}: step 1 loss 9.5" for i in range(nodes)] + [
        f"{i}: step 2 loss 9.0" for i in range(nodes)
    ]
    assert time.monotonic() - started < 120
    assert merged.exit_code == 0, merged.output
    assert merged.stdout.splitlines() == [
        "(all ranks) compiling",
        "(all ranks) compiled",
        "(all ranks) step 1 loss 9.5",
        "(all ranks) step 2 loss 9.0",
    ]


def test_shell_and_status_of_an_eks_run_name_its_kubernetes_job(runtime: LocalRuntime) -> None:
    # Given a running EKS run on its first train attempt
    eks_run(runtime, status=RunStatus.RUNNING)
    # When the operator asks for a shell, and for its status
    shell = trainrun(runtime, "shell", RUN)
    status = trainrun(runtime, "status", RUN)
    # Then the shell's commands name the stack's Kubernetes role and rank 0 of train-1, and run nothing
    assert shell.exit_code == 0, shell.output
    kubeconfig, exec_line = shell.stdout.splitlines()
    role = runtime.deployed.outputs["KubernetesRoleArn"]
    assert kubeconfig.startswith(f"aws eks update-kubeconfig --region {runtime.region} --name {CLUSTER} ")
    assert f"--role-arn {role} --endpoint-url {runtime.endpoint_url}" in kubeconfig
    assert "batch.kubernetes.io/job-name=train-1,batch.kubernetes.io/job-completion-index=0" in exec_line
    # And status names the Kubernetes Jobs
    assert status.exit_code == 0, status.output
    assert "Kubernetes Job train-1: SUCCEEDED, exit code 0" in " ".join(status.stdout.split())
