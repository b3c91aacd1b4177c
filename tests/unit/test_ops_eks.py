"""The operator commands on an EKS run (`cluster.kind: eks`): `logs` from its cluster's container
log group, `shell`'s printed kubectl commands, and `status` / `watch` naming its Kubernetes Jobs,
over moto, with the operator's policy allowing each call."""

from __future__ import annotations

import contextlib
import json
import shlex
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from rich.console import Console
from typer.testing import CliRunner

from trainrun.adapters.inventory import TaggedResource
from trainrun.cli import ops as cli_ops
from trainrun.cli.common import EXIT_BAD_INPUT, app
from trainrun.local.iam.access import operator_policies
from trainrun.local.iam.operations import Call, describe
from trainrun.logic.cluster_config import cluster_name
from trainrun.logic.kubernetes_objects import ContainerLine, container_line, container_log_group
from trainrun.model.jobs import Attempt, AttemptProgress, JobProgress, JobRecord, TrainPoint
from trainrun.model.resources import EksClusterRef
from trainrun.model.run_record import RunFileRef, RunRecord, RunStatus, RunStore
from trainrun.ops import runs
from trainrun.ops.logs import LATE_EVENTS_MS, ContainerLogReader, RankMerger, print_job_logs
from trainrun.ops.runs import build_view
from trainrun.ops.shell import NoEksCluster, eks_cluster_of, pod_shell_commands, shell_job
from trainrun.ops.stack import Stack
from trainrun.ops.views import current_job, job_views
from trainrun.ops.watch import render, watch_run

from .conftest import ACCOUNT, REGION, RUNS_TABLE
from .test_ops_shell import executables
from .test_provisioning import spec_of

RUN = "bert-large-0123456789ab"
CLUSTER = cluster_name(RUN)
GROUP = container_log_group(CLUSTER)
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/trainrun-test-KubernetesRole-0A1B2C3D4E5F"
NOW = datetime.now(UTC).replace(microsecond=0)
CREATED = NOW - timedelta(minutes=30)
SPEC = spec_of(cluster={"kind": "eks"})  # 2 x trn1.32xlarge


def ms(seconds: float) -> int:
    """A moment `seconds` after the run was created, as CloudWatch Logs stamps events."""
    return int((CREATED + timedelta(seconds=seconds)).timestamp() * 1000)


def an_eks_run(**fields: Any) -> RunRecord:
    values: dict[str, Any] = {
        "run_id": RUN,
        "name": "bert-large",
        "run_file": RunFileRef(bucket="trainrun-config-test", key="runs/bert-large.yaml"),
        "created_at": CREATED,
        "updated_at": CREATED,
        "spec": SPEC,
        "eks": EksClusterRef(name=CLUSTER, region=REGION, status="ACTIVE", nodegroup_status="ACTIVE"),
    }
    return RunRecord(**(values | fields))


def submitted(attempt: int = 1, **fields: Any) -> JobRecord:
    """A job record as trainrun.steps.kubernetes.submit_job leaves it: the attempt in slurm_job_id."""
    values: dict[str, Any] = {"slurm_job_id": attempt, "submitted_at": CREATED, "state": "SUBMITTED"}
    return JobRecord(attempt=attempt, **(values | fields))


@pytest.fixture
def stack(store: RunStore) -> Stack:
    outputs = {"RunsTableName": RUNS_TABLE, "JobsLogGroupName": "trainrun-test-jobs", "KubernetesRoleArn": ROLE_ARN}
    return Stack(name="trainrun-test", outputs=outputs, session=boto3.Session(region_name=REGION), endpoint_url=None)


@pytest.fixture
def cli(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    """`trainrun ...` in this process, connected to the stack over moto."""
    monkeypatch.setattr(cli_ops, "connect", lambda *args: stack)
    yield CliRunner()


# --- logs ---------------------------------------------------------------------------------------


def record_of(line: str, *, job_name: str, index: int) -> str:
    """An event's message as the Observability add-on's Fluent Bit ships a container's line: the
    pod's name and place, no labels nor annotations (its kubernetes filter has Labels Off)."""
    pod = f"{job_name}-{index}-x7k2p"
    return json.dumps(
        {
            "time": "2026-03-01T12:00:00.123456789Z",
            "stream": "stdout",
            "_p": "F",
            "log": f"{line}\n",
            "kubernetes": {
                "pod_name": pod,
                "namespace_name": "trainrun",
                "pod_id": f"uid-{pod}",
                "host": f"ip-10-0-0-{10 + index}.us-west-2.compute.internal",
                "container_name": "workload",
            },
        }
    )


def stream_of(job_name: str, index: int) -> str:
    """A container's stream, named as the add-on names it: `<node>-application.var.log.containers.<log file>`."""
    node = f"ip-10-0-0-{10 + index}.us-west-2.compute.internal"
    return f"{node}-application.var.log.containers.{job_name}-{index}-x7k2p_trainrun_workload-{index}abc.log"


def put(logs: Any, stream: str, *events: tuple[int, str]) -> None:
    """Events into one container's stream (made on first use), as Fluent Bit ships them."""
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_stream(logGroupName=GROUP, logStreamName=stream)
    logs.put_log_events(
        logGroupName=GROUP,
        logStreamName=stream,
        logEvents=[{"timestamp": at, "message": message} for at, message in events],
    )


def pod_lines(logs: Any, job_name: str, index: int, *lines: tuple[float, str]) -> None:
    put(
        logs,
        stream_of(job_name, index),
        *((ms(second), record_of(text, job_name=job_name, index=index)) for second, text in lines),
    )


@pytest.fixture
def logs(aws: None) -> Any:
    client = boto3.client("logs", region_name=REGION)
    client.create_log_group(logGroupName=GROUP)
    return client


@pytest.fixture
def two_jobs(logs: Any, store: RunStore) -> Any:
    """An EKS run whose compile Job ran on both nodes, then train-1 (which lost a node) and train-2,
    interleaved in time across their pods' streams, beside the stage Job's and a device plugin's."""
    store.create(an_eks_run(job_compile=submitted(), job_train=submitted(2)))
    pod_lines(logs, "compile", 0, (10, "compiling graph 1"), (12, "Compiler status PASS"))
    pod_lines(logs, "compile", 1, (11, "compiling graph 1"), (13, "Compiler status PASS"))
    pod_lines(logs, "train-1", 1, (21, "step 1 loss 9.5"), (24, "step 2 loss 9.1"))
    pod_lines(logs, "train-1", 0, (20, "step 1 loss 9.5"), (23, "step 2 loss 9.1"))
    pod_lines(logs, "train-2", 0, (40, "resumed at step 2"), (42, "TRAINRUN-POD-END index=0 exit=0"))
    pod_lines(logs, "train-2", 1, (41, "resumed at step 2"), (43, "TRAINRUN-POD-END index=1 exit=0"))
    put(logs, stream_of("stage", 0), (ms(5), record_of("staging the workload", job_name="stage", index=0)))
    plugin = json.dumps({"log": "device plugin up\n", "kubernetes": {"namespace_name": "kube-system", "labels": {}}})
    put(logs, "ip-10-0-0-10-application.var.log.containers.neuron-device-plugin.log", (ms(1), plugin))
    return logs


def test_an_eks_runs_job_lines_are_its_pods_in_time_order_each_with_its_rank(cli: CliRunner, two_jobs: Any) -> None:
    # Given an EKS run whose pods logged into its cluster's container log group
    # When `trainrun logs --job train --raw` reads it
    result = cli.invoke(app, ["logs", RUN, "--job", "train", "--raw"])
    # Then it prints the train Jobs' pods' lines (every attempt's, no other container's) in time
    # order, each labelled with its pod's completion index as srun labels a rank's
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "0: step 1 loss 9.5",
        "1: step 1 loss 9.5",
        "0: step 2 loss 9.1",
        "1: step 2 loss 9.1",
        "0: resumed at step 2",
        "1: resumed at step 2",
        "0: TRAINRUN-POD-END index=0 exit=0",
        "1: TRAINRUN-POD-END index=1 exit=0",
    ]


def test_an_eks_runs_logs_merge_the_ranks_and_hide_the_pods_end_lines(cli: CliRunner, two_jobs: Any) -> None:
    # When `trainrun logs` reads both jobs, as a person reads them
    result = cli.invoke(app, ["logs", RUN])
    # Then each job's lines show once for all ranks, compile's first; the pods' end lines are hidden
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "(all ranks) compiling graph 1",
        "(all ranks) Compiler status PASS",
        "(all ranks) step 1 loss 9.5",
        "(all ranks) step 2 loss 9.1",
        "(all ranks) resumed at step 2",
    ]
    assert "==> compile job of" in result.stderr and "==> train job of" in result.stderr


def test_an_eks_job_without_output_says_so(cli: CliRunner, logs: Any, store: RunStore) -> None:
    # Given an EKS run whose train Job has not logged yet (its compile Job has)
    store.create(an_eks_run(job_compile=submitted()))
    pod_lines(logs, "compile", 0, (10, "compiling graph 1"))
    # When its train job's output is asked for
    result = cli.invoke(app, ["logs", RUN, "--job", "train"])
    # Then there is none, and it says so
    assert result.exit_code == 0 and result.stdout == ""
    assert f"no output from the train job of {RUN}" in result.stderr


def test_an_eks_run_before_its_cluster_or_its_log_group_has_no_output(stack: Stack, store: RunStore, aws: None) -> None:
    # Given an EKS run without a cluster yet, then with one whose log group is not made yet
    store.create(an_eks_run(eks=None))
    reader = ContainerLogReader(stack, RUN, "train")
    # When its output is read
    # Then there is none, and no error
    assert reader.read() == [] and not reader.exists
    store.set_eks(RUN, EksClusterRef(name=CLUSTER, region=REGION, status="CREATING"))
    assert reader.read() == [] and not reader.exists


class PagedLogs:
    """The logs client, its FilterLogEvents answering `page` events a page (AWS answers up to
    10,000, or 1 MB); every request kept."""

    def __init__(self, real: Any, page: int):
        self.real, self.page, self.exceptions = real, page, real.exceptions
        self.requests: list[dict[str, Any]] = []

    def filter_log_events(self, **request: Any) -> Any:
        self.requests.append(request)
        return self.real.filter_log_events(limit=self.page, **request)


def test_following_an_eks_run_reads_every_page_prints_each_line_once_and_stops_when_it_ends(
    stack: Stack, two_jobs: Any, store: RunStore
) -> None:
    # Given the run above, read three events a page
    paged = PagedLogs(two_jobs, page=3)
    stack._clients["logs"] = paged
    emitted: list[str] = []

    def end_the_run() -> None:
        # with a last line, which the pass after the end reads
        store.finish(RUN, RunStatus.SUCCEEDED)
        pod_lines(two_jobs, "train-2", 0, (302, "last"))

    polls = iter(
        [
            lambda: pod_lines(two_jobs, "train-2", 1, (300, "1 at 300"), (301, "1 at 301")),
            # a line of the other pod that arrives after later-stamped ones (its batch came late)
            lambda: pod_lines(two_jobs, "train-2", 0, (290, "0 at 290")),
            end_the_run,
        ]
    )
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        next(polls)()

    # When `trainrun logs --follow --job train` follows it
    found = print_job_logs(
        stack, RUN, ["train"], lambda job, lines: emitted.extend(lines), follow=True, poll=2.0, sleep=sleep
    )
    # Then every line is printed once, in the order it was read, and following stops once the run has ended
    assert found == {"train": True}
    assert emitted[:8] == [
        "0: step 1 loss 9.5",
        "1: step 1 loss 9.5",
        "0: step 2 loss 9.1",
        "1: step 2 loss 9.1",
        "0: resumed at step 2",
        "1: resumed at step 2",
        "0: TRAINRUN-POD-END index=0 exit=0",
        "1: TRAINRUN-POD-END index=1 exit=0",
    ]
    assert emitted[8:] == ["1: 1 at 300", "1: 1 at 301", "0: 0 at 290", "0: last"]
    assert sleeps == [2.0, 2.0, 2.0]
    # And it read every page (nextToken) of the group's streams, the first from the run's creation,
    # the later ones from a minute before the newest line read (a line can arrive late)
    assert {request["logGroupName"] for request in paged.requests} == {GROUP}
    assert any("nextToken" in request for request in paged.requests)
    starts = [request["startTime"] for request in paged.requests if "nextToken" not in request]
    assert starts == [ms(0), ms(0), ms(301) - LATE_EVENTS_MS, ms(301) - LATE_EVENTS_MS]


def test_a_record_is_a_jobs_line_by_its_pods_name_in_the_runs_namespace() -> None:
    # The group is the run's cluster's: the pod's name says the job and the rank (records carry no labels)
    line = record_of("hello", job_name="train-1", index=3)
    assert container_line(line) == ContainerLine(job="train", job_name="train-1", index="3", text="hello")
    assert container_line(record_of("graph 1", job_name="compile", index=0)) == ContainerLine(
        job="compile", job_name="compile", index="0", text="graph 1"
    )
    # Not a compile or train Job's pod, another namespace's, not the add-on's record
    assert container_line(record_of("staging", job_name="stage", index=0)) is None
    assert container_line(line.replace('"trainrun"', '"default"')) is None
    assert container_line("not json") is None


def test_the_rank_merger_hides_a_pods_end_line_but_not_a_line_that_only_starts_alike() -> None:
    merger = RankMerger(ranks=1)
    shown = [*merger.feed("0: TRAINRUN-POD-END index=0 exit=1"), *merger.feed("0: TRAINRUN-POD-ENDED"), *merger.flush()]
    assert [line.text for line in shown] == ["TRAINRUN-POD-ENDED"]


# --- shell --------------------------------------------------------------------------------------


@pytest.fixture
def shell_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """`trainrun shell` for a given record, against a stack with the KubernetesRoleArn output,
    on a machine with the aws CLI and kubectl."""
    monkeypatch.setenv("PATH", executables(tmp_path / "bin", "aws", "kubectl"))
    target = SimpleNamespace(
        name="trainrun-test",
        region=REGION,
        endpoint_url=None,
        outputs={"KubernetesRoleArn": ROLE_ARN},
        session=SimpleNamespace(profile_name="default"),
    )
    monkeypatch.setattr(cli_ops, "connect", lambda *args: target)

    def invoke(record: RunRecord, *args: str) -> Any:
        monkeypatch.setattr(cli_ops, "find", lambda stack, run: record)
        return CliRunner().invoke(app, ["shell", RUN, *args])

    invoke.target = target  # type: ignore[attr-defined]
    return invoke


def test_shell_of_an_eks_run_prints_the_kubeconfig_and_the_exec_into_rank_0_of_the_current_train_job(
    shell_cli: Any,
) -> None:
    # Given an EKS run on its second train attempt
    record = an_eks_run(job_compile=submitted(state="SUCCEEDED"), job_train=submitted(2))
    # When `trainrun shell` is run for it
    result = shell_cli(record)
    # Then it prints the exact commands, runs nothing, and exits 0
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"aws eks update-kubeconfig --region {REGION} --name {CLUSTER} --role-arn {ROLE_ARN}",
        'kubectl exec -n trainrun -it "$(kubectl get pod -n trainrun -l '
        'batch.kubernetes.io/job-name=train-2,batch.kubernetes.io/job-completion-index=0 -o name)" -- bash',
    ]
    assert f"EKS cluster {CLUSTER}: no head node" in result.stderr
    assert "Kubernetes Job train-2" in result.stderr


def test_shell_of_an_eks_run_before_its_train_job_goes_to_the_compile_job_and_passes_a_command(
    shell_cli: Any,
) -> None:
    # Given an EKS run that is compiling
    record = an_eks_run(job_compile=submitted())
    # When `trainrun shell --command` is run for it
    result = shell_cli(record, "--command", "neuron-ls && df -h /fsx")
    # Then the exec runs that command with bash -c in rank 0's pod of the compile Job
    assert result.exit_code == 0, result.output
    exec_line = result.stdout.splitlines()[1]
    assert "batch.kubernetes.io/job-name=compile," in exec_line
    assert exec_line.endswith("-- bash -c 'neuron-ls && df -h /fsx'")
    assert shlex.split(exec_line)[-3:] == ["bash", "-c", "neuron-ls && df -h /fsx"]


@pytest.mark.parametrize(
    ("record", "says"),
    [
        (an_eks_run(eks=None), "has no EKS cluster yet"),
        (an_eks_run(eks=None, status=RunStatus.REJECTED), "ended REJECTED without an EKS cluster"),
        (
            an_eks_run(status=RunStatus.SUCCEEDED, torn_down_at=datetime(2026, 3, 1, 13, 4, 5, tzinfo=UTC)),
            "torn down at 2026-03-01 13:04:05 UTC: its EKS cluster is gone",
        ),
        (
            an_eks_run(status=RunStatus.FAILED, eks=EksClusterRef(name=CLUSTER, region=REGION, status="DELETED")),
            f"EKS cluster {CLUSTER} was deleted",
        ),
    ],
    ids=["not-created-yet", "rejected", "torn-down", "deleted"],
)
def test_shell_of_an_eks_run_without_a_cluster_now_is_refused_saying_why(
    shell_cli: Any, record: RunRecord, says: str
) -> None:
    result = shell_cli(record)
    assert result.exit_code == EXIT_BAD_INPUT
    assert result.stdout == ""
    assert says in " ".join(result.stderr.split())
    with pytest.raises(NoEksCluster, match=says):
        eks_cluster_of(record)


def test_shell_of_an_eks_run_on_a_stack_without_the_kubernetes_role_output_says_to_update_it(
    shell_cli: Any,
) -> None:
    shell_cli.target.outputs = {}
    result = shell_cli(an_eks_run(job_compile=submitted()))
    assert result.exit_code == EXIT_BAD_INPUT
    assert "has no output KubernetesRoleArn" in " ".join(result.stderr.split())


def test_shell_of_an_eks_run_without_kubectl_prints_the_commands_and_how_to_install_it(
    shell_cli: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", executables(tmp_path / "aws-only", "aws"))
    result = shell_cli(an_eks_run(job_compile=submitted()))
    assert result.exit_code == 0
    assert result.stdout.startswith("aws eks update-kubeconfig")
    assert "kubectl not found on PATH" in result.stderr and "Set up kubectl and eksctl" in result.stderr


def test_the_pod_shell_commands_carry_the_endpoint_and_profile_and_a_resubmission_waits_in_its_own_job() -> None:
    cluster = EksClusterRef(name=CLUSTER, region=REGION)
    commands = pod_shell_commands(
        cluster, "train-1", role_arn=ROLE_ARN, endpoint_url="http://127.0.0.1:4566", profile="training"
    )
    assert commands.kubeconfig[-4:] == ["--endpoint-url", "http://127.0.0.1:4566", "--profile", "training"]
    # Resume opened attempt 3 (no Job yet): the shell goes where its pods will be
    resumed = an_eks_run(job_train=JobRecord(attempt=3, attempts=[Attempt(number=1), Attempt(number=2)]))
    assert shell_job(resumed) == "train-3"
    assert shell_job(an_eks_run()) == "compile"


# --- status, watch, plot ------------------------------------------------------------------------


def a_resumed_eks_run(**fields: Any) -> RunRecord:
    """An EKS run on its second train attempt, resumed after its first lost a node."""
    first = Attempt(
        number=1,
        slurm_job_id=1,
        submitted_at=CREATED,
        ended_at=CREATED + timedelta(minutes=5),
        state="NODE_FAIL",
        why="a node of the job failed",
        infrastructure=True,
    )
    progress = JobProgress(
        step=40,
        loss=1.5,
        checkpoints=2,
        history=[TrainPoint(step=s, loss=10 - s / 10, learning_rate=1e-4, throughput=800.0) for s in (10, 20, 30, 40)],
        attempts=[AttemptProgress(number=1, first_step=1, last_step=22), AttemptProgress(number=2, first_step=21)],
    )
    values: dict[str, Any] = {
        "job_compile": submitted(state="SUCCEEDED", exit_code=0),
        "job_train": submitted(2, attempts=[first]),
        "progress_train": progress,
    }
    return an_eks_run(**(values | fields))


def test_the_jobs_of_an_eks_run_are_its_kubernetes_jobs_and_a_parallelcluster_runs_its_slurm_jobs() -> None:
    views = job_views(a_resumed_eks_run())
    assert [(view.job, view.runs_as, view.slurm_job_id) for view in views] == [
        ("compile", "Kubernetes Job compile", None),
        ("train", "Kubernetes Job train-2", None),
    ]
    assert views[1].summary() == "Kubernetes Job train-2 (attempt 2): SUBMITTED"
    slurm = job_views(a_resumed_eks_run(eks=None, spec=spec_of(), job_train=JobRecord(slurm_job_id=123)))
    assert [view.runs_as for view in slurm] == ["Slurm job 1", "Slurm job 123"]


def test_the_job_row_is_the_train_jobs_once_it_has_a_record_even_before_a_resubmission_is_submitted() -> None:
    # Given an EKS run whose train job Resume opened a third attempt of (no Job yet)
    resumed = a_resumed_eks_run(job_train=JobRecord(attempt=3, attempts=[Attempt(number=1), Attempt(number=2)]))
    # Then the job row says so, and a ParallelCluster run's names its Slurm job
    assert current_job(job_views(resumed)).summary() == "the train job (attempt 3): not submitted yet"  # type: ignore[union-attr]
    pcluster = a_resumed_eks_run(eks=None, spec=spec_of(), job_train=JobRecord(slurm_job_id=123, state="SUBMITTED"))
    assert current_job(job_views(pcluster)).summary() == "Slurm job 123: SUBMITTED"  # type: ignore[union-attr]
    assert current_job(job_views(an_eks_run())) is None


def test_status_of_an_eks_run_names_its_kubernetes_jobs_and_its_cluster(
    cli: CliRunner, store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a running EKS run on its second train attempt (no head node, no Slurm), and its cluster
    # as the inventory finds it (moto's EKS is made strict by other tests: no cluster is created here)
    store.create(a_resumed_eks_run())
    cluster = TaggedResource(kind="eks-cluster", id=CLUSTER, run_id=RUN)
    monkeypatch.setattr(runs, "tagged_resources", lambda *args, **kwargs: [cluster])
    # When `trainrun status` shows it
    result = cli.invoke(app, ["status", RUN])
    # Then it names each job's Kubernetes Job, the attempts' too, and the EKS cluster among its resources
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "compile Kubernetes Job compile: SUCCEEDED, exit code 0" in text
    assert "train Kubernetes Job train-2 (attempt 2): SUBMITTED" in text
    assert "attempt: 2 of the train job (Kubernetes Job train-2), resumed at step 21" in text
    assert "attempt 1 (Kubernetes Job train-1, steps 1-22) ended: a node of the job failed" in text
    assert f"│ eks-cluster │ {CLUSTER} │ up │" in text
    assert "Slurm" not in text and "head node" not in text
    # And --json has them, and no Slurm job id
    view = json.loads(cli.invoke(app, ["status", RUN, "--json"]).stdout)
    assert [job["runs_as"] for job in view["jobs"]] == ["Kubernetes Job compile", "Kubernetes Job train-2"]
    history = view["progress"]["train"]["attempt_history"]
    assert [(a["kubernetes_job"], a["slurm_job_id"]) for a in history] == [("train-1", None), ("train-2", None)]
    assert f"eks-cluster {CLUSTER}" in view["resources"]["created"]


def test_watch_of_an_eks_run_shows_its_kubernetes_job_and_follows_it_to_its_end(
    stack: Stack, store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a running EKS run, which leaves nothing once it has ended
    store.create(a_resumed_eks_run())
    monkeypatch.setattr(runs, "tagged_resources", lambda *args, **kwargs: [])
    # When the live view draws it
    console = Console(record=True, width=120)
    record = store.get(RUN)
    assert record is not None
    console.print(render(build_view(stack, record, inventory_while_running=False)))
    text = console.export_text()
    # Then its job row names the Kubernetes Job, and its progress shows
    rows = {line.split()[0]: " ".join(line.split()[1:]) for line in text.splitlines()[1:] if line.strip()}
    assert rows["job"] == "Kubernetes Job train-2 (attempt 2): SUBMITTED"
    assert rows["train"] == "step 40"
    # And once it has ended and been torn down, `watch` draws its last frame and returns
    store.set_job(RUN, "train", submitted(2, state="SUCCEEDED", exit_code=0))
    store.finish(RUN, RunStatus.SUCCEEDED)
    store.mark_torn_down(RUN)
    final = Console(record=True, width=120)
    view = watch_run(stack, RUN, final, interval=0.1, timeout=1.0)
    assert view.status == RunStatus.SUCCEEDED
    assert "Kubernetes Job train-2 (attempt 2): SUCCEEDED, exit code 0" in " ".join(final.export_text().split())


def test_plot_of_an_eks_run_draws_its_recorded_history(
    cli: CliRunner, store: RunStore, tmp_path: Path, aws: None
) -> None:
    store.create(a_resumed_eks_run())
    result = cli.invoke(app, ["plot", RUN, "-o", str(tmp_path / "loss.png")])
    assert result.exit_code == 0, result.output
    assert "4 points, steps 10 to 40" in result.stdout
    assert (tmp_path / "loss.png").read_bytes().startswith(b"\x89PNG")


# --- the operator's policy ----------------------------------------------------------------------


def test_the_operators_policy_allows_what_logs_and_shell_of_an_eks_run_call() -> None:
    # Given the operator's policy as the local stack enforces it
    outputs = {
        name: f"<{name}>"
        for name in (
            "ConfigBucketName",
            "RunsTableName",
            "StateMachineArn",
            "JobsLogGroupName",
            "UndeliveredRunsQueueArn",
        )
    }
    variables = {
        "Partition": "aws",
        "Region": REGION,
        "AccountId": ACCOUNT,
        "StackName": "trainrun-test",
        **outputs,
        "TeardownStateMachineArn": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:trainrun-test-teardown",
        "KubernetesRoleArn": ROLE_ARN,
    }
    operator = operator_policies(variables)
    # When `logs` filters the cluster's container log group, and the printed commands describe the
    # cluster (update-kubeconfig) and assume the Kubernetes role (kubectl's token)
    calls = [
        Call("logs", "FilterLogEvents", {"logGroupName": GROUP, "startTime": 0}, REGION, ACCOUNT),
        Call("eks", "DescribeCluster", {"name": CLUSTER}, REGION, ACCOUNT),
        Call("sts", "AssumeRole", {"RoleArn": ROLE_ARN, "RoleSessionName": "EKSGetTokenAuth"}, REGION, ACCOUNT),
    ]
    # Then each is allowed; another log group, or another role, is not
    for call in calls:
        for request in describe(call):
            decision = operator.evaluate(request)
            assert decision.allowed, (request, decision.reason)
    other_group = Call("logs", "FilterLogEvents", {"logGroupName": "/aws/lambda/x"}, REGION, ACCOUNT)
    other_role = Call("sts", "AssumeRole", {"RoleArn": f"arn:aws:iam::{ACCOUNT}:role/admin"}, REGION, ACCOUNT)
    for call in (other_group, other_role):
        assert not any(operator.evaluate(request).allowed for request in describe(call))
