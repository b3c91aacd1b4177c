"""The local head node for real: Slurm and MUNGE on this machine, in a private mount namespace.

One head node with two compute nodes serves the module; the test of stop() starts its own.
Needs root and Slurm + MUNGE (`make slurm`); skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto.moto_server.threaded_moto_server import ThreadedMotoServer

from trainrun.local.slurm_head_node import CommandRun, LocalHeadNode, workload_account
from trainrun.logic.head_node_scripts import parse_job_state, parse_submitted, status_script, submit_script
from trainrun.model.end_marker import new_end_key
from trainrun.model.jobs import JobRecord
from trainrun.model.run_file import RunSpec
from trainrun.steps.head_node import job_state_from_end_record

from .conftest import NEEDS_LOCAL_HEAD_NODE

pytestmark = NEEDS_LOCAL_HEAD_NODE

NODES = ["compute-1", "compute-2"]


class Shipped:
    """What the log shipper sent, as the CloudWatch agent would: (group, stream) -> lines."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.lines: dict[tuple[str, str], list[str]] = {}

    def __call__(self, group: str, stream: str, lines: list[str]) -> None:
        with self._lock:
            self.lines.setdefault((group, stream), []).extend(lines)

    def of(self, group: str, stream: str) -> list[str]:
        with self._lock:
            return list(self.lines.get((group, stream), []))


@pytest.fixture(scope="module")
def aws_environment() -> Iterator[dict[str, str]]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_REGION": "us-west-2",
        "AWS_DEFAULT_REGION": "us-west-2",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    server.stop()


@pytest.fixture(scope="module")
def shipped() -> Shipped:
    return Shipped()


@pytest.fixture(scope="module")
def head_node(
    tmp_path_factory: pytest.TempPathFactory, aws_environment: dict[str, str], shipped: Shipped
) -> Iterator[LocalHeadNode]:
    node = LocalHeadNode(
        sandbox=tmp_path_factory.mktemp("head-node"), nodes=NODES, user="ubuntu", aws_environment=aws_environment
    )
    node.start(shipped)
    node.mount_file_system()  # as the node's configuration does after it started
    jobs_directory(node)
    yield node
    node.stop()


def jobs_directory(head_node: LocalHeadNode) -> None:
    """/fsx/jobs, the default user's (the file system's root is root's, as on FSx for Lustre)."""
    command = run(head_node, "install -d -o ubuntu -g ubuntu /fsx/jobs")
    assert command.status == "Success", command


def run(head_node: LocalHeadNode, script: str) -> CommandRun:
    command = CommandRun()
    head_node.run_script(script, command)
    return command


def submit(head_node: LocalHeadNode, *sbatch_args: str) -> int:
    """sbatch as the default user, as the control plane's scripts do; the job id."""
    sbatch = shlex.join(["sbatch", "--parsable", *sbatch_args])
    command = run(head_node, f"runuser -l ubuntu -c {shlex.quote(sbatch)}")
    assert command.status == "Success", command
    return int(command.stdout.strip().split(";")[0])


def job_fields(head_node: LocalHeadNode, job_id: int) -> dict[str, str]:
    line = head_node.scontrol("show", "job", "-o", str(job_id))
    return dict(re.findall(r"(\w+)=(\S*)", line))


def wait_for_job(head_node: LocalHeadNode, job_id: int, states: set[str], timeout: float = 60) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        fields = job_fields(head_node, job_id)
        if fields["JobState"] in states:
            return fields
        assert time.monotonic() < deadline, f"job {job_id} is {fields['JobState']}, not {states}"
        time.sleep(0.1)


def wait_until(condition: object, what: str, timeout: float = 30) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def node_states(head_node: LocalHeadNode) -> dict[str, str]:
    out = run(head_node, "sinfo --noheader --Node --format='%N %t'").stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


# --- Slurm --------------------------------------------------------------------------------------


def test_an_ssm_script_submits_a_job_that_runs_on_both_nodes(head_node: LocalHeadNode) -> None:
    job_id = submit(head_node, "--nodes=2", "--output=/fsx/jobs/both-nodes.out", "--wrap", "srun --label hostname")

    fields = wait_for_job(head_node, job_id, {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL"})

    assert (fields["JobState"], fields["ExitCode"], fields["NodeList"]) == ("COMPLETED", "0:0", "compute-[1-2]")
    output = (head_node.sandbox / "fsx" / "jobs" / "both-nodes.out").read_text()
    assert sorted(line.split(":")[0] for line in output.splitlines()) == ["0", "1"]


def test_a_job_runs_as_the_default_user_with_the_machines_unprivileged_uid(head_node: LocalHeadNode) -> None:
    # Given the machine's workload user, which the head node made its OS's default user (ubuntu)
    uid, gid = workload_account()
    # When an SSM script (root's) submits a job as the default user, as the submit script does
    output = "/fsx/jobs/whoami.out"
    # srun's own notices (e.g. "step creation temporarily disabled" while the last step's resources
    # are still being released) go to stderr: kept apart, they cannot interleave with the ids
    error = "/fsx/jobs/whoami.err"
    job_id = submit(
        head_node, f"--output={output}", f"--error={error}", "--wrap", "srun id -u; srun id -g; srun id -un"
    )
    fields = wait_for_job(head_node, job_id, {"COMPLETED", "FAILED"})
    # Then the job ran as that user: not root, with the machine's uid and gid for it
    assert (fields["JobState"], fields["ExitCode"]) == ("COMPLETED", "0:0")
    assert (head_node.sandbox / output.removeprefix("/")).read_text().split() == [str(uid), str(gid), "ubuntu"]
    assert uid != 0


def test_an_ssm_script_runs_as_the_agent_runs_it(head_node: LocalHeadNode) -> None:
    command = run(head_node, 'echo "$HOME $(id -u)"\necho oops >&2\nexit 3')

    assert (command.status, command.response_code) == ("Failed", 3)
    assert (command.stdout, command.stderr) == ("/root 0\n", "oops\n")


def test_fail_job_makes_srun_of_that_job_kind_exit_1(head_node: LocalHeadNode) -> None:
    head_node.fail_job("train")
    try:
        train = submit(
            head_node, "--job-name=trainrun-r1-train", "--output=/fsx/jobs/failing-train.out", "--wrap", "srun true"
        )
        compile_ = submit(
            head_node, "--job-name=trainrun-r1-compile", "--output=/fsx/jobs/fine-compile.out", "--wrap", "srun true"
        )
        train_fields = wait_for_job(head_node, train, {"COMPLETED", "FAILED"})
        compile_fields = wait_for_job(head_node, compile_, {"COMPLETED", "FAILED"})
    finally:
        (head_node.sandbox / "etc" / "slurm" / "trainrun-fail-job").unlink()

    assert (train_fields["JobState"], train_fields["ExitCode"]) == ("FAILED", "1:0")
    assert (head_node.sandbox / "fsx" / "jobs" / "failing-train.out").read_text() == (
        "srun: error: trainrun local --fail-at: the train job exits 1 (injected)\n"
    )
    assert (compile_fields["JobState"], compile_fields["ExitCode"]) == ("COMPLETED", "0:0")


def test_a_node_going_down_ends_the_job_running_on_it(head_node: LocalHeadNode) -> None:
    # The batch script outlives its srun by a few seconds, as a wrapper that records the exit
    # code does: Slurm's kill of the whole job reaches it in that time, however loaded the machine.
    wrapper = "srun bash -c 'echo started; sleep 60'; sleep 10; echo TRAINRUN-END"
    job_id = submit(head_node, "--nodes=2", "--output=/fsx/jobs/node-down.out", "--wrap", wrapper)
    output = head_node.sandbox / "fsx" / "jobs" / "node-down.out"
    wait_until(lambda: output.exists() and output.read_text().count("started") == 2, "the job to run on both nodes")

    try:
        head_node.scontrol("update", "NodeName=compute-2", "State=DOWN", "Reason=rehearsal")
        fields = wait_for_job(head_node, job_id, {"NODE_FAIL", "FAILED", "COMPLETED", "CANCELLED", "PENDING"})
    finally:
        # ReturnToService=2 brings it back when its slurmd registers; RESUME in case it has not yet.
        if node_states(head_node).get("compute-2") != "idle":
            head_node.scontrol("update", "NodeName=compute-2", "State=RESUME")
        wait_until(lambda: set(node_states(head_node).values()) == {"idle"}, "both nodes to be idle again")

    assert (fields["JobState"], fields["Reason"], fields["Restarts"]) == ("NODE_FAIL", "NodeDown", "0")
    assert "TRAINRUN-END" not in output.read_text()


# --- the CloudWatch agent and the aws CLI --------------------------------------------------------


def test_the_log_shipper_follows_the_files_of_an_applied_agent_config(
    head_node: LocalHeadNode, shipped: Shipped
) -> None:
    config = {
        "logs": {
            "logs_collected": {
                "files": {
                    "collect_list": [
                        {"file_path": "/fsx/cw/app.log", "log_group_name": "group", "log_stream_name": "stream"}
                    ]
                }
            }
        }
    }
    command = run(
        head_node,
        "mkdir -p /fsx/cw\n"
        f"printf '%s\\n' '{json.dumps(config)}' >/fsx/cw/trainrun-test.json\n"
        "/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl -a append-config -m ec2 -s "
        "-c file:/fsx/cw/trainrun-test.json\n"
        "printf 'one\\ntwo\\nthr' >>/fsx/cw/app.log\n",
    )
    assert command.status == "Success", command

    wait_until(lambda: shipped.of("group", "stream") == ["one", "two"], "the two whole lines to be shipped")
    run(head_node, "printf 'ee\\n' >>/fsx/cw/app.log")
    wait_until(lambda: shipped.of("group", "stream") == ["one", "two", "three"], "the third line to be shipped")


def test_the_aws_cli_reaches_the_emulated_account_as_root_and_as_the_user(head_node: LocalHeadNode) -> None:
    if head_node.aws_cli is None:
        pytest.skip("no .venv-awscli: `make .venv-awscli/bin/.installed` builds it")

    command = run(head_node, "set -e\naws s3 mb s3://head-node-bucket\nrunuser -l ubuntu -c 'aws s3 ls'")

    assert command.status == "Success", command
    assert command.stdout.splitlines()[-1].endswith(" head-node-bucket")


# --- stop -----------------------------------------------------------------------------------------


def _namespace_processes(namespace: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.readlink(entry / "ns" / "mnt") == namespace:
                found.append((entry / "cmdline").read_text().replace("\0", " "))
        except OSError:
            continue  # gone, or a zombie
    return found


def _processes_naming(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (cmdline := (entry / "cmdline").read_text()):
                found.append(cmdline.replace("\0", " "))
        except OSError:
            continue
    return found


def test_stop_ends_every_process_and_leaves_no_mount(tmp_path: Path, aws_environment: dict[str, str]) -> None:
    node = LocalHeadNode(sandbox=tmp_path, nodes=["compute-1"], user="ubuntu", aws_environment=aws_environment)
    node.start(lambda group, stream, lines: None)
    node.mount_file_system()  # as the node's configuration does after it started
    try:
        namespace = node.mount_namespace
        assert namespace is not None
        jobs_directory(node)
        job_id = submit(node, "--output=/fsx/jobs/long.out", "--wrap", "srun sleep 300")
        wait_for_job(node, job_id, {"RUNNING"})
        assert any("slurmctld" in p for p in _namespace_processes(namespace))
    finally:
        node.stop()

    assert _namespace_processes(namespace) == []
    assert _processes_naming(str(tmp_path)) == []  # munged runs outside the namespace
    assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()
    node.stop()  # again: nothing to do


# --- how a job ended, after Slurm forgot it -----------------------------------------------------


def test_a_job_slurm_has_forgotten_is_read_from_its_signed_end_record(
    tmp_path: Path, aws_environment: dict[str, str]
) -> None:
    # Given a head node that forgets finished jobs after MinJobAge (shortened from ParallelCluster's 300 s)
    node = LocalHeadNode(
        sandbox=tmp_path / "sandbox", nodes=["compute-1"], user="ubuntu", aws_environment=aws_environment, min_job_age=2
    )
    node.start(Shipped())
    node.mount_file_system()  # as the node's configuration does after it started
    try:
        spec = RunSpec.model_validate(
            {
                "name": "forgotten",
                "capacity": {"reservation_id": "cr-0123456789abcdef0", "instance_type": "trn1.32xlarge", "nodes": 1},
                "workload": {"source": {"s3": "s3://bucket/workload.tar.gz"}, "train": "echo trained"},
            }
        )
        # (the run's directory as Prepare head node leaves it: the default user's)
        prepared = run(node, "install -d -o ubuntu -g ubuntu /fsx/trainrun/forgotten /fsx/trainrun/forgotten/workload")
        assert prepared.status == "Success", prepared
        key = new_end_key()
        # When its train job is submitted, ends, and its end marker never reaches the logs
        submit = run(
            node, submit_script(spec, "forgotten", "train", end_key=key, config_bucket="trainrun-config-local")
        )
        assert submit.status == "Success", submit.stderr
        slurm_job_id, _ = parse_submitted(submit.stdout)
        record_file = node.sandbox / "fsx" / "trainrun" / "forgotten" / "train.end"
        wait_until(record_file.exists, "the end watcher's record", timeout=30)
        # ... and the check comes after slurmctld forgot the job
        wait_until(lambda: forgotten(node, slurm_job_id), "slurmctld to forget the job", timeout=240)
        status = run(node, status_script(slurm_job_id, "forgotten", "train"))
        state = parse_job_state(status.stdout)
        # Then Slurm does not know it, and the signed record says it COMPLETED with exit code 0
        assert state.state == "UNKNOWN" and state.end_record is not None
        job = JobRecord(slurm_job_id=slurm_job_id, end_key=key, config_bucket="trainrun-config-local")
        read = job_state_from_end_record(state, "forgotten", "train", job)
        assert (read.state, read.exit_code, read.succeeded) == ("COMPLETED", 0, True)
        # And a record the workload rewrote proves nothing
        record_file.write_text(state.end_record.replace("exit_code=0", "exit_code=1") + "\n")
        rewritten = parse_job_state(run(node, status_script(slurm_job_id, "forgotten", "train")).stdout)
        assert job_state_from_end_record(rewritten, "forgotten", "train", job).state == "UNKNOWN"
    finally:
        node.stop()


def forgotten(node: LocalHeadNode, slurm_job_id: int) -> bool:
    return run(node, f"scontrol show job -o {slurm_job_id}").status == "Failed"


# --- compute nodes whose bootstrap fails --------------------------------------------------------

# Fails on a compute node only, as a Neuron install that finds no driver for the node would.
FAILING_ON_COMPUTE = b"""#!/bin/sh
if [ "$1" = ComputeFleet ]; then echo 'E: Unable to locate package aws-neuronx-dkms' >&2; exit 100; fi
"""


def test_a_compute_node_whose_bootstrap_fails_is_down_then_its_queue_protected(
    tmp_path: Path, aws_environment: dict[str, str]
) -> None:
    # Given a head node whose queue's OnNodeConfigured fails on every compute node
    s3 = boto3.client(
        "s3",
        endpoint_url=aws_environment["AWS_ENDPOINT_URL"],
        region_name="us-west-2",
        aws_access_key_id=aws_environment["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=aws_environment["AWS_SECRET_ACCESS_KEY"],
    )
    s3.create_bucket(Bucket="bootstrap", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    s3.put_object(Bucket="bootstrap", Key="install.sh", Body=FAILING_ON_COMPUTE)
    node = LocalHeadNode(
        sandbox=tmp_path, nodes=["queue-st-a-1", "queue-st-a-2"], user="ubuntu", aws_environment=aws_environment
    )
    node.start(lambda group, stream, lines: None)
    node.mount_file_system()  # as the node's configuration does after it started
    protected = threading.Event()
    try:
        jobs_directory(node)
        # When the compute nodes bootstrap
        node.bootstrap_compute_nodes([("s3://bootstrap/install.sh", ["ComputeFleet"])], on_protected=protected.set)
        # Then each is out of service with its bootstrap error as Slurm's reason, and a job waits
        job_id = submit(node, "--nodes=2", "--output=/fsx/jobs/pending.out", "--wrap", "srun true")
        pending = parse_job_state(run(node, status_script(job_id, "r", "compile")).stdout)
        assert pending.state == "PENDING" and pending.queue is not None
        assert (pending.queue.nodes, pending.queue.up) == (2, 0)
        assert [down.name for down in pending.queue.down] == ["queue-st-a-1", "queue-st-a-2"]
        assert all(
            "Node bootstrap error: Failed to execute OnNodeConfigured script (exit code 100)" in down.reason
            and "Unable to locate package aws-neuronx-dkms" in down.reason
            for down in pending.queue.down
        )
        # And after repeated failures of their replacements, the queue is in protected mode
        assert protected.wait(timeout=60), "the queue never entered protected mode"
        inactive = parse_job_state(run(node, status_script(job_id, "r", "compile")).stdout)
        assert inactive.state == "PENDING" and inactive.queue is not None
        assert inactive.queue.inactive_partitions == 1
    finally:
        node.stop()


# --- train queued behind compile (a Slurm dependency) --------------------------------------------


def chained_run(node: LocalHeadNode, run_id: str, compile_command: str, train_command: str) -> tuple[int, int]:
    """Compile's submission with train queued behind it, as Submit job sends it for Compile: both
    Slurm job ids."""
    spec = RunSpec.model_validate(
        {
            "name": run_id,
            "capacity": {"reservation_id": "cr-0123456789abcdef0", "instance_type": "trn1.32xlarge", "nodes": 1},
            "workload": {
                "source": {"s3": "s3://bucket/workload.tar.gz"},
                "compile": compile_command,
                "train": train_command,
            },
        }
    )
    # (the run's directory as Prepare head node leaves it: the default user's)
    prepared = run(node, f"install -d -o ubuntu -g ubuntu /fsx/trainrun/{run_id} /fsx/trainrun/{run_id}/workload")
    assert prepared.status == "Success", prepared
    script = submit_script(
        spec,
        run_id,
        "compile",
        end_key=new_end_key(),
        config_bucket="trainrun-config-local",
        chained_end_key=new_end_key(),
    )
    submitted = run(node, script)
    assert submitted.status == "Success", submitted.stderr
    return parse_submitted(submitted.stdout, "compile")[0], parse_submitted(submitted.stdout, "train")[0]


def slurm_time(fields: dict[str, str], name: str) -> float:
    return time.mktime(time.strptime(fields[name], "%Y-%m-%dT%H:%M:%S"))


def test_a_train_job_queued_behind_compile_starts_the_moment_compile_succeeds(head_node: LocalHeadNode) -> None:
    # Given compile's submission, with train queued behind it
    compile_id, train_id = chained_run(head_node, "chained", "sleep 3", "echo trained")
    waiting = job_fields(head_node, train_id)
    assert (waiting["JobState"], waiting["Reason"]) == ("PENDING", "Dependency"), waiting
    # When compile succeeds
    compiled = wait_for_job(head_node, compile_id, {"COMPLETED"}, timeout=120)
    trained = wait_for_job(head_node, train_id, {"COMPLETED"}, timeout=120)
    # Then Slurm started train within 2 s of compile's end (its times have 1 s resolution), with no
    # control-plane round trip
    assert 0 <= slurm_time(trained, "StartTime") - slurm_time(compiled, "EndTime") <= 2, (compiled, trained)


def test_a_train_job_queued_behind_compile_gets_the_env_a_train_submission_gives_it(head_node: LocalHeadNode) -> None:
    # Given train queued behind compile, printing trainrun's env
    _, train_id = chained_run(
        head_node, "chained-env", "true", 'echo "attempt=$TRAINRUN_ATTEMPT checkpoints=$TRAINRUN_CHECKPOINT_DIR"'
    )
    # When it runs
    wait_for_job(head_node, train_id, {"COMPLETED"}, timeout=120)
    # Then it is the first attempt, with the run's checkpoint directory, as the Train state's submission gives it
    output = head_node.sandbox / "fsx" / "trainrun" / "chained-env" / "logs" / "train.out"
    assert "attempt=1 checkpoints=/fsx/trainrun/chained-env/checkpoints" in output.read_text()


def test_a_train_job_queued_behind_a_failed_compile_never_runs(head_node: LocalHeadNode) -> None:
    # Given compile's submission, with train queued behind it
    compile_id, train_id = chained_run(head_node, "chained-fails", "exit 3", "echo trained")
    # When compile fails
    wait_for_job(head_node, compile_id, {"FAILED"}, timeout=120)
    # Then Slurm cancels train, its dependency never satisfied, and it never ran
    cancelled = wait_for_job(head_node, train_id, {"CANCELLED"}, timeout=60)
    assert cancelled["Reason"] == "DependencyNeverSatisfied", cancelled
    assert cancelled["RunTime"] == "00:00:00"
    output = head_node.sandbox / "fsx" / "trainrun" / "chained-fails" / "logs" / "train.out"
    assert not output.exists() or "trained" not in output.read_text()
