"""The cluster's head node, played by this machine: a real Slurm, real shell, a log shipper.

SSM commands sent to the head node instance run as real shell scripts, and the jobs they
submit are scheduled by a real Slurm (slurmctld and one slurmd per compute node, MUNGE for
auth, all from the distribution's packages) — so the exact sbatch/srun lines the control
plane generates are really run. Everything lives in a sandbox directory and in a private
mount namespace (held open by a `sleep` started with `unshare --mount`), where the sandbox is
mounted at the paths a ParallelCluster head node has:

    /fsx                              the run's FSx for Lustre file system
    /home                             home directories (the OS's default user's is its own, 0700)
    /etc/passwd, /etc/group           this machine's users, with the OS's default user (ubuntu,
                                      ec2-user, ...) as this machine's unprivileged WORKLOAD_USER
    /run/munge                        MUNGE's socket (every user's sbatch and srun reach it)
    /etc/slurm                        the local cluster's slurm.conf (and the rehearsal switch)
    /opt/aws/amazon-cloudwatch-agent  a stand-in agent: its ctl stores the config it is given
    /usr/local/bin                    stand-ins: every file of `standins` (examples/local-head-node:
                                      executables and the data they read), the aws CLI, the rehearsal srun
    /var/spool/slurmd                 slurmd's spool (short: it holds Unix sockets, 108 bytes a path)
    /var/lib/trainrun                 root's state of the node: the marker the head node's
                                      OnNodeConfigured writes last (neuron_install.NODE_CONFIGURED_MARKER)

Host paths these mounts would hide but the head node needs (the sandbox itself, the aws CLI's
virtualenv and interpreter, e.g. a checkout under /home) are bind-mounted back at their own
paths first. Mount points that do not exist on this machine (/fsx, /etc/slurm,
/opt/aws/amazon-cloudwatch-agent, /var/lib/trainrun) are created empty; nothing else is written outside the sandbox.

Users, as on a ParallelCluster head node: what SSM runs (`run_script`) runs as the agent runs
it, as root, `sh <script file>`, with a minimal environment (HOME=/root); the scripts hand the
workload to the OS's default user (`runuser -l <user>`, trainrun.logic.head_node_scripts), so its sbatch jobs
run as that user, which is not root here either: it is this machine's system user
WORKLOAD_USER (created when missing), uid and gid included, so that the workload can read none
of root's files (the SSM scripts, which hold a job's end key, the end watcher's environment,
credentials such as `trainrun serve`'s env file) and cannot become root. A directory above
the aws CLI's interpreter that other users may not enter (a pyenv Python under root's 0700
/root) is covered, in the namespace only, by an empty tmpfs with just that interpreter's
installation bound back (see `_expose`). Known limit: /etc/passwd and /etc/group are bind
mounts of the sandbox's files, and Linux drops such a mount when this machine's file is replaced
(useradd, userdel and package installs write a new file and rename it): a head node started
before then no longer knows its default user (`runuser: user ubuntu does not exist`).

The `aws` on PATH is the real aws CLI (awscli 1.x: $TRAINRUN_AWS_CLI, or the checkout's
.venv-awscli, built by `make`) behind a wrapper that points it at the emulated account, for
every user, root's SSM shell included. Its credentials, and those of boto3 in a workload, come
from a stand-in of the instance metadata (the `credential_process` of the user's AWS config): the
head node's instance role's key, as the instance metadata gives it to every user of a real head
node, except in a Slurm job's processes, which run on a compute node (Slurm sets SLURMD_NODENAME
in them) and get that node's instance role's key (`node_credentials`), as on a real cluster.

Slurm, as configured here (Debian's slurm-wlm 22.05): jobs are scheduled within a fraction of
a second of sbatch (batch_sched_delay=0, see slurm_conf); as on ParallelCluster, accounting is
disabled (sacct fails: "Slurm accounting storage is disabled") and a finished job is known
from `scontrol show job` for MinJobAge (300 s, ParallelCluster's setting; `min_job_age`
shortens it for a test only). A node set DOWN with
`scontrol update NodeName=<n> State=DOWN Reason=...` (see `scontrol`) kills the job running on
it at once: with JobRequeue=0 the job ends in state NODE_FAIL with ExitCode=0:15 (SIGTERM,
exit code 143 for `trainrun.logic.head_node_scripts.status_script`) and is not requeued (Slurm's default,
JobRequeue=1, would requeue it: PENDING with Reason=BeginTime); the batch script is killed
too, and the head node's end watcher (trainrun.model.end_marker) reports the NODE_FAIL. With
ReturnToService=2 the node is idle again as soon as its slurmd registers, about a second later.

Rehearsals: `fail_job("compile" | "train")` makes that job's srun exit 1 after its command ran
(a stand-in /usr/local/bin/srun reads /etc/slurm/trainrun-fail-job). `lose_node_at_step(n)`
takes a compute node down when a train job's output logs step n (the job ends NODE_FAIL, as
above), keeps it out of service (DOWN and drained: ReturnToService does not bring a drained node
back) for `NODE_REPLACEMENT_SECONDS`, then resumes it, idle again: ParallelCluster's replacement of a
failed static node, compressed.

Compute nodes' bootstrap: once the head node is configured, `bootstrap_compute_nodes` runs the
queue's OnNodeConfigured script for each compute node (as root, in a namespace of its own, as
the head node's). A node whose script fails is DOWN (and drained, so that ReturnToService keeps
it out) with `Node bootstrap error: <the failure>` as its Slurm reason, and is replaced, compressed:
its bootstrap runs again every BOOTSTRAP_REPLACEMENT_SECONDS; after PROTECTED_FAILURE_COUNT
failures in a row the partition goes INACTIVE and the compute fleet PROTECTED, ParallelCluster's
protected mode (see `_replace_failed_nodes`). A queue's script that fails only for
`ComputeFleet` (the stack's NeuronInstallScriptUri) rehearses it.

Needs root (a mount namespace) and Slurm + MUNGE installed (`make slurm`);
`LocalHeadNodeUnavailable` says what is missing.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import logging
import os
import posixpath
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainrun.local import clock, lustre_servers
from trainrun.logic.head_node_scripts import SLURM_KILL_WAIT_SECONDS
from trainrun.logic.job_log import TrainEvent, parse_line
from trainrun.logic.neuron_install import NODE_CONFIGURED_MARKER
from trainrun.model.jobs import FSX_MOUNT_DIR, JOB_KINDS, RunPaths
from trainrun.project_files import checkout_root, examples

if TYPE_CHECKING:
    from trainrun.local.pcluster_api import NodeScripts

logger = logging.getLogger(__name__)

# Where the trainrun package is imported from (for the watchdog's interpreter).
PACKAGE_ROOT = Path(str(importlib.resources.files("trainrun"))).parent
# The aws CLI the head node runs, when not the checkout's .venv-awscli (an installed trainrun has none).
AWS_CLI_VARIABLE = "TRAINRUN_AWS_CLI"
# In a head node's sandbox: its mount namespace, written when it starts, and the process that
# holds the namespace (pid and start time): while that process lives, the id is surely this
# head node's namespace (Linux gives a freed namespace's id to the next one made).
NAMESPACE_FILE = "namespace"
NAMESPACE_HOLDER_FILE = "namespace-holder"
# The executables the head node runs: Slurm and MUNGE, and what builds the namespace.
SLURM_BINARIES = ("slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol", "sinfo", "munged")
HOST_TOOLS = ("unshare", "nsenter", "mount", "sh", "runuser")
# Where they are looked for besides PATH (a non-root PATH lacks the sbin directories).
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
SLURMD_SPOOL_DIR = "/var/spool/slurmd"
# MUNGE's own socket directory: on a path every user can reach (the sandbox is root's own).
MUNGE_SOCKET_DIR = "/run/munge"
MUNGE_SOCKET = f"{MUNGE_SOCKET_DIR}/munge.socket.2"
# The host's unprivileged user that is the cluster's default user in the sandbox (its uid/gid).
WORKLOAD_USER = "trainrun-workload"
_ACCOUNT_LOCK = threading.Lock()
CWAGENT_DIR = "/opt/aws/amazon-cloudwatch-agent"
STANDIN_BIN = "/usr/local/bin"
# How many compute nodes bootstrap at once (their scripts run side by side, as the nodes do on AWS).
BOOTSTRAP_WORKERS = 4
# In a node script's directory of the sandbox: the Lustre mounts the mount stand-in made.
MOUNTS_RECORD = "mounts.log"
# Root's state of the node, where the head node's OnNodeConfigured writes its marker last.
NODE_STATE_DIR = posixpath.dirname(NODE_CONFIGURED_MARKER)
FAIL_JOB_FILE = "/etc/slurm/trainrun-fail-job"
# On the AWS clock: where the srun stand-in logs each job step's nodes and times (job_steps).
STEPS_DIR = "/etc/slurm/trainrun-steps"
COMMAND_TIMEOUT_SECONDS = 600
# ParallelCluster's MinJobAge (see slurm_conf); a test may shorten it to see a job forgotten.
PCLUSTER_MIN_JOB_AGE_SECONDS = 300
# What the SSM agent's shell gets in its environment.
SSM_ENVIRONMENT = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
}
# How long a node lost by `lose_node_at_step` stays out of service before its "replacement" is idle.
NODE_REPLACEMENT_SECONDS = 4.0
# How often the node-failure rehearsal looks at the train jobs' output for its step.
NODE_FAILURE_POLL_SECONDS = 0.05
# The local cluster's one Slurm partition (ParallelCluster names it after the queue).
PARTITION = "compute"
# ParallelCluster's clustermgtd (aws-parallelcluster-node, src/slurm_plugin/clustermgtd.py): after
# `protected_failure_count` (default 10) bootstrap failures of a queue's nodes, with no job running
# in it, it sets the queue's partition INACTIVE and the compute fleet PROTECTED (protected mode);
# a node of the queue that launches successfully resets the count.
PROTECTED_FAILURE_COUNT = 10
# How long a compute node whose bootstrap failed stays down before its replacement has bootstrapped
# again: clustermgtd terminates the node's instance and launches another (minutes on AWS), compressed.
BOOTSTRAP_REPLACEMENT_SECONDS = 1.0
# How long stop() waits for the replacement thread (a node script it is running ends first).
REPLACEMENTS_STOP_SECONDS = 30.0
# Where each compute node's OnNodeConfigured runs (its own /etc overlay and packages.log), in the sandbox.
COMPUTE_CONFIGURED = "compute-configured"
# How long stop() lets the namespace's processes end on SIGTERM before it kills them (slurmctld
# saves its state at once; slurmstepd ignores SIGTERM).
STOP_GRACE_SECONDS = 1.0
# How long this machine's own processes (unshare, munged, slurmctld and slurmd) may take to come up.
# Not AWS's clock (a head node's bootstrap may take 35 minutes there): the test suite runs six workers
# on two cores, where a start that takes a second alone has been seen to take most of a minute.
DAEMON_START_SECONDS = 120.0


class LocalHeadNodeUnavailable(Exception):
    """This machine cannot play the head node (not root, or Slurm/MUNGE missing), or it failed."""


class OnNodeConfiguredFailed(Exception):
    """The OnNodeConfigured script could not be fetched or failed: ParallelCluster's failure code and reason."""

    def __init__(self, failure_code: str, reason: str):
        super().__init__(f"{failure_code}: {reason}")
        self.failure_code = failure_code
        self.reason = reason


@dataclass
class CommandRun:
    """One SSM command on the head node, as GetCommandInvocation reports it."""

    status: str = "InProgress"
    stdout: str = ""
    stderr: str = ""
    response_code: int = -1


def default_aws_cli() -> Path | None:
    """$TRAINRUN_AWS_CLI, else the checkout's awscli 1.x (`make` builds .venv-awscli), if it is there."""
    if os.environ.get(AWS_CLI_VARIABLE):
        return Path(os.environ[AWS_CLI_VARIABLE])
    root = checkout_root()
    path = root / ".venv-awscli" / "bin" / "aws" if root is not None else None
    return path if path is not None and path.is_file() else None


def default_standins() -> Path | None:
    """The stand-ins every local head node gets in /usr/local/bin (examples/local-head-node)."""
    path = examples() / "local-head-node"
    return path if path.is_dir() else None


@dataclass
class LocalHeadNode:
    """A head node on this machine. `start(ship)`, `mount_file_system()`, then `run_script`; `stop()` ends everything.

    `sandbox`: an empty directory of this machine (not a mount target such as /fsx) that holds
    everything; `nodes`: the compute nodes (one slurmd each); `user`: the OS's default user;
    `aws_environment`: AWS_ENDPOINT_URL, AWS_REGION/AWS_DEFAULT_REGION and the credentials of
    the emulated account (the head node's instance role's); `node_credentials`: a compute node's
    instance role's AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY by node name (a node not named
    has the head node's); `aws_cli`: the aws CLI to wrap (default: $TRAINRUN_AWS_CLI or the
    checkout's .venv-awscli; None: `aws` fails saying so); `standins`: a directory whose
    files (executables, and the data beside them they read) go to /usr/local/bin.
    """

    sandbox: Path
    nodes: list[str]
    user: str
    aws_environment: dict[str, str]
    node_credentials: dict[str, dict[str, str]] = field(default_factory=dict)
    aws_cli: Path | None = field(default_factory=default_aws_cli)
    standins: Path | None = field(default_factory=default_standins)
    min_job_age: int = PCLUSTER_MIN_JOB_AGE_SECONDS
    _tools: dict[str, str] = field(default_factory=dict, repr=False)
    _holder: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _namespace: str | None = field(default=None, repr=False)
    _daemons: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)
    _s3_clients: dict[str, Any] = field(default_factory=dict, repr=False)
    _s3_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _shipper: LogShipper | None = field(default=None, repr=False)
    # trainrun.local.watchdog, and the write end of its pipe (closed by this process's death).
    _watchdog: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _lifeline: int | None = field(default=None, repr=False)
    # The node-failure rehearsal (lose_node_at_step): its thread, and the event that stops it.
    _node_failure: threading.Thread | None = field(default=None, repr=False)
    # clustermgtd's replacement of compute nodes whose bootstrap failed (bootstrap_compute_nodes).
    _replacements: threading.Thread | None = field(default=None, repr=False)
    _stopping: threading.Event = field(default_factory=threading.Event, repr=False)

    # --- lifecycle -------------------------------------------------------------------------
    def start(self, ship: Callable[[str, str, list[str]], None]) -> None:
        """Build the namespace, start MUNGE and Slurm (all nodes idle), then the log shipper.

        On failure everything started is stopped again and LocalHeadNodeUnavailable is raised.
        """
        self._tools = check_available()
        self.sandbox = self.sandbox.resolve()
        try:
            self._layout()
            self._enter_namespace()
            self._mount()
            self._start_slurm()
        except BaseException:
            self.stop()
            raise
        self._shipper = LogShipper(self.sandbox, ship)
        self._shipper.start()

    def stop(self) -> None:
        """End every process of the head node (jobs included), then ship the last lines. Idempotent."""
        self._stopping.set()
        if self._node_failure is not None and self._node_failure is not threading.current_thread():
            self._node_failure.join(timeout=NODE_REPLACEMENT_SECONDS + 5)
            self._node_failure = None
        if self._replacements is not None and self._replacements is not threading.current_thread():
            # A node script running then ends first (seconds); the thread stops at its next look.
            self._replacements.join(timeout=REPLACEMENTS_STOP_SECONDS)
            self._replacements = None
        if self._namespace is not None:
            end_namespace_processes(self._namespace, spare={self._holder.pid} if self._holder is not None else set())
        for daemon in reversed(self._daemons):
            _terminate(daemon)
        self._daemons.clear()
        if self._holder is not None:
            _terminate(self._holder)
            self._holder = None
        self._namespace = None
        self._stop_watchdog()
        if self._shipper is not None:
            self._shipper.stop()
            self._shipper = None

    # --- what SSM runs ------------------------------------------------------------------------
    def run_script(self, script: str, run: CommandRun) -> None:
        """Run one SSM script as the agent would: as root, `sh <file>`, with a minimal environment."""
        scripts = self.sandbox / "ssm"
        scripts.mkdir(exist_ok=True)
        handle, name = tempfile.mkstemp(prefix="script-", suffix=".sh", dir=scripts)
        with os.fdopen(handle, "w") as file:
            file.write(script)
        process = _popen(
            [*self._nsenter(), self._tool("sh"), name],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=SSM_ENVIRONMENT,
            cwd=scripts,
            start_new_session=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=COMMAND_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            run.stdout, run.stderr, run.response_code, run.status = stdout, stderr, -1, "TimedOut"
            return
        run.stdout, run.stderr, run.response_code = stdout, stderr, process.returncode
        run.status = "Success" if process.returncode == 0 else "Failed"

    def scontrol(self, *args: str) -> str:
        """Run scontrol against the local cluster, e.g. `scontrol("update", "NodeName=compute-1",
        "State=DOWN", "Reason=test")` to take a node down (which ends the job running on it)."""
        return self._in_namespace([self._tool("scontrol"), *args])

    def fail_job(self, kind: str) -> None:
        """Rehearse a failing job: the `kind` job (compile or train) of any run exits 1 after its
        command ran (srun prints `srun: error: trainrun local --fail-at: ...`). Before or after start."""
        if kind not in JOB_KINDS:
            raise ValueError(f"{kind!r} is not a job kind; use one of {', '.join(JOB_KINDS)}")
        path = self.sandbox / "etc" / "slurm" / Path(FAIL_JOB_FILE).name
        path.parent.mkdir(parents=True, exist_ok=True)
        kinds = path.read_text().split() if path.exists() else []
        if kind not in kinds:
            path.write_text("".join(f"{k}\n" for k in [*kinds, kind]))

    def lose_node_at_step(self, step: int, *, back_after: float = NODE_REPLACEMENT_SECONDS) -> None:
        """Rehearse a node failure: once a train job's output (any run's) logs `step`, take the
        last compute node down (its job ends NODE_FAIL), keep it out of service for `back_after`
        seconds, then bring it back idle. Once. Before or after start."""
        if step < 1:
            raise ValueError(f"step {step}: steps are numbered from 1")
        self._node_failure = threading.Thread(
            target=self._lose_node, args=(step, back_after), name="trainrun-node-failure", daemon=True
        )
        self._node_failure.start()

    def _lose_node(self, step: int, back_after: float) -> None:
        outputs = self.sandbox / "fsx" / "trainrun"
        offsets: dict[Path, int] = {}
        while not self._stopping.wait(NODE_FAILURE_POLL_SECONDS):
            if any(_logs_step(path, step, offsets) for path in sorted(outputs.glob(f"*/logs/{TRAIN_OUTPUT}"))):
                break
        else:
            return
        node = self.nodes[-1]
        reason = f"Reason=trainrun local --node-failure-at-step {step}"
        try:
            # DOWN ends the job on it (NODE_FAIL); drained, the node stays out until resumed.
            self.scontrol("update", f"NodeName={node}", "State=DOWN", reason)
            self.scontrol("update", f"NodeName={node}", "State=DRAIN", reason)
            logger.debug("node %s taken down at step %d; back in %.0f s", node, step, back_after)
            if self._stopping.wait(back_after):
                return
            self.scontrol("update", f"NodeName={node}", "State=RESUME")
        except LocalHeadNodeUnavailable:
            if not self._stopping.is_set():
                logger.warning("the node-failure rehearsal could not change node %s", node, exc_info=True)

    # --- OnNodeConfigured ---------------------------------------------------------------------
    def run_on_node_configured(
        self, script_uri: str, args: list[str], *, directory: str = "node-configured", node: str | None = None
    ) -> None:
        """Fetch the script with the node's instance role and run it, as ParallelCluster does once
        the node is configured; OnNodeConfiguredFailed with its failure code if not. `directory`:
        the node's in the sandbox (the head node's by default); `node`: a compute node's Slurm name
        (None: the head node), whose instance role's key fetches the script (`_fetch_script`)."""
        script = self.sandbox / directory / "on-node-configured.sh"
        script.parent.mkdir(parents=True, exist_ok=True)
        if not script_uri.startswith("s3://"):
            raise OnNodeConfiguredFailed(
                "OnNodeConfiguredDownloadFailure", f"Failed to download OnNodeConfigured script {script_uri} (offline)."
            )
        refused = self._fetch_script(script_uri, script, node)
        if refused is not None:
            raise OnNodeConfiguredFailed(
                "OnNodeConfiguredDownloadFailure", f"Failed to download OnNodeConfigured script {script_uri}: {refused}"
            )
        script.chmod(0o755)
        completed = self.run_node_script(script, args, directory=directory)
        if completed.returncode != 0:
            raise OnNodeConfiguredFailed(
                "OnNodeConfiguredExecutionFailure",
                f"Failed to execute OnNodeConfigured script (exit code {completed.returncode}): "
                + "; ".join(completed.stderr.strip().splitlines()[-3:]),
            )
        if node is None and self._mounted_lustre(directory):
            # The script ran in a namespace of its own: what it mounted, the head node mounts.
            self.mount_file_system()

    def _fetch_script(self, script_uri: str, target: Path, node: str | None) -> str | None:
        """GetObject of the script with the node's instance role (a compute node's: the queue's
        S3Access; the emulated account's IAM decides); why it failed, or None. In this process
        rather than with the node's aws CLI: the same request by the same principal, without a
        Python start (~0.7 CPU-s) per script and node."""
        from botocore.exceptions import BotoCoreError, ClientError

        key = self.aws_environment if node is None else self.node_credentials.get(node, self.aws_environment)
        bucket, _, name = script_uri.removeprefix("s3://").partition("/")
        try:
            body = self._s3_client(key).get_object(Bucket=bucket, Key=name)["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            return str(exc)
        target.write_bytes(body)
        return None

    @property
    def aws_region(self) -> str:
        """The emulated account's region, as the aws CLI reads it from the environment."""
        env = self.aws_environment
        return env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION", "us-east-1")

    def _s3_client(self, key: Mapping[str, str]) -> Any:
        """An S3 client of the emulated account with `key`: one per key, kept (each costs ~0.1 CPU-s)."""
        access_key = key.get("AWS_ACCESS_KEY_ID", "")
        with self._s3_lock:
            client = self._s3_clients.get(access_key)
            if client is None:
                import boto3

                client = boto3.session.Session().client(
                    "s3",
                    endpoint_url=self.aws_environment.get("AWS_ENDPOINT_URL"),
                    region_name=self.aws_region,
                    aws_access_key_id=access_key,
                    aws_secret_access_key=key.get("AWS_SECRET_ACCESS_KEY", ""),
                    aws_session_token=key.get("AWS_SESSION_TOKEN") or None,
                )
                self._s3_clients[access_key] = client
        return client

    def _mounted_lustre(self, directory: str) -> bool:
        """Whether the node script last run in `directory` mounted a Lustre file system at /fsx
        (the mount stand-in's record: examples/local-head-node/mount)."""
        record = self.sandbox / directory / MOUNTS_RECORD
        lines = record.read_text().splitlines() if record.exists() else []
        return any(line.split()[1:3] == [FSX_MOUNT_DIR, "lustre"] for line in lines if len(line.split()) >= 3)

    def run_node_script(
        self, script: Path, args: list[str], *, directory: str = "node-configured"
    ) -> subprocess.CompletedProcess[str]:
        """Run a node script as root, executed with `args`, in a mount namespace of its own where
        /etc is an overlay whose changes land in the sandbox (`directory`/etc, the head node's
        node-configured/ by default): the package managers on PATH are the stand-ins
        (examples/local-head-node), which record what they would install in
        `directory`/packages.log; nothing reaches this machine's /etc."""
        work = self.sandbox / directory
        # Every run is a fresh node: nothing kept from a previous one (but /home, which is shared).
        for name in ("etc", "etc-work"):
            shutil.rmtree(work / name, ignore_errors=True)
            (work / name).mkdir(parents=True)
        (work / "packages.log").unlink(missing_ok=True)
        (work / MOUNTS_RECORD).unlink(missing_ok=True)
        holder = _popen(
            [*self._nsenter(), self._tool("unshare"), "--mount", "--propagation", "private", "--", "sleep", "infinity"],
            start_new_session=True,
        )
        try:
            inside = [self._tool("nsenter"), f"--target={holder.pid}", "--mount", "--"]
            # Until unshare has run, the holder is still in this process's or the head node's namespace.
            before = (None, os.readlink("/proc/self/ns/mnt"), self._namespace)
            _wait_for(lambda: _mount_namespace(holder.pid) not in before, "the node script's namespace")
            overlay = f"lowerdir=/etc,upperdir={work / 'etc'},workdir={work / 'etc-work'}"
            for mount in (
                [self._tool("mount"), "-t", "overlay", "overlay", "-o", overlay, "/etc"],
                # The overlay shows the machine's /etc: the head node's users come back on top.
                [self._tool("mount"), "--bind", str(self.sandbox / "passwd"), "/etc/passwd"],
                [self._tool("mount"), "--bind", str(self.sandbox / "group"), "/etc/group"],
            ):
                _run([*inside, *mount], check=True, capture_output=True)
            environment = {
                **SSM_ENVIRONMENT,
                "TRAINRUN_STAND_IN_RECORD": str(work / "packages.log"),
                "TRAINRUN_STAND_IN_MOUNTS": str(work / MOUNTS_RECORD),
                lustre_servers.ENVIRONMENT_VARIABLE: str(lustre_servers.directory()),
            }
            return _run(
                [*inside, str(script), *args],
                capture_output=True,
                text=True,
                errors="replace",
                env=environment,
                timeout=COMMAND_TIMEOUT_SECONDS,
                check=False,
            )
        finally:
            _terminate(holder)

    def bootstrap_compute_nodes(self, scripts: NodeScripts, on_protected: Callable[[], None]) -> None:
        """Run the queue's OnNodeConfigured scripts (script URI, args), in order, for each compute
        node, as ParallelCluster does once it has configured the node. A node whose script fails
        goes DOWN with its bootstrap error as Slurm's reason, and is replaced in the background
        (`_replace_failed_nodes`); `on_protected` is called when the queue enters protected mode."""
        # Side by side, as the nodes boot on AWS (each in a namespace of its own).
        with ThreadPoolExecutor(max_workers=BOOTSTRAP_WORKERS, thread_name_prefix="trainrun-bootstrap") as pool:
            bootstrapped = list(pool.map(lambda node: self._bootstrap(node, scripts), self.nodes))
        failed = [node for node, ok in zip(self.nodes, bootstrapped, strict=True) if not ok]
        if failed:
            self._replacements = threading.Thread(
                target=self._replace_failed_nodes,
                args=(failed, scripts, on_protected),
                name="trainrun-clustermgtd",
                daemon=True,
            )
            self._replacements.start()

    def _bootstrap(self, node: str, scripts: NodeScripts) -> bool:
        """Whether the node's OnNodeConfigured succeeded; if not, the node is DOWN with the reason.

        On AWS the compute node's custom action executor writes the failure ("Failed to execute
        OnNodeConfigured script 1, return code: 1.") to its bootstrap_error_msg log
        (aws-parallelcluster-cookbook, custom_action_executor.py) and never registers with Slurm;
        clustermgtd's warnings call it a "Node bootstrap error". Here it is the node's Slurm reason,
        for the status script to report."""
        try:
            # A Sequence stops at its first failing script, as ParallelCluster's executor does.
            for script_uri, args in scripts:
                self.run_on_node_configured(script_uri, args, directory=f"{COMPUTE_CONFIGURED}/{node}", node=node)
        except OnNodeConfiguredFailed as exc:
            reason = f"Reason=Node bootstrap error: {exc.reason}"[:1000]
            # DOWN; drained too, as ReturnToService=2 would bring a DOWN node back once its slurmd registers.
            self.scontrol("update", f"NodeName={node}", "State=DOWN", reason)
            self.scontrol("update", f"NodeName={node}", "State=DRAIN", reason)
            return False
        return True

    def _replace_failed_nodes(self, failed: list[str], scripts: NodeScripts, on_protected: Callable[[], None]) -> None:
        """clustermgtd, compressed: replace each failed node (its bootstrap again) every
        BOOTSTRAP_REPLACEMENT_SECONDS; a node that bootstraps is resumed and resets the failure
        count; once PROTECTED_FAILURE_COUNT failures have added up and no job runs in the
        partition, protected mode: the partition INACTIVE, then `on_protected` (the fleet PROTECTED)."""
        failures = len(failed)
        try:
            while failed and not self._stopping.wait(BOOTSTRAP_REPLACEMENT_SECONDS):
                if failures >= PROTECTED_FAILURE_COUNT and not self._jobs_running():
                    self.scontrol("update", f"PartitionName={PARTITION}", "State=INACTIVE")
                    logger.debug("partition %s INACTIVE after %d bootstrap failures", PARTITION, failures)
                    on_protected()
                    return
                for node in list(failed):
                    if self._bootstrap(node, scripts):
                        self.scontrol("update", f"NodeName={node}", "State=RESUME")
                        failed.remove(node)
                        failures = 0
                    else:
                        failures += 1
        except Exception:
            if not self._stopping.is_set():
                logger.warning("the replacement of compute nodes %s stopped", failed, exc_info=True)

    def _jobs_running(self) -> bool:
        running = self._in_namespace(
            [self._tool("squeue"), "--noheader", f"--partition={PARTITION}", "--states=RUNNING"]
        )
        return bool(running.strip())

    @property
    def mount_namespace(self) -> str | None:
        """The head node's mount namespace (`mnt:[<inode>]`) while it is started."""
        return self._namespace

    # --- internals ----------------------------------------------------------------------------
    @property
    def _pid(self) -> int:
        if self._holder is None:
            raise LocalHeadNodeUnavailable("the local head node is not started")
        return self._holder.pid

    def _tool(self, name: str) -> str:
        if name not in self._tools:
            self._tools = check_available()
        return self._tools[name]

    def _nsenter(self) -> list[str]:
        return [self._tool("nsenter"), f"--target={self._pid}", "--mount", "--"]

    def _in_namespace(self, argv: list[str]) -> str:
        completed = _run([*self._nsenter(), *argv], capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            raise LocalHeadNodeUnavailable(f"{' '.join(argv)} failed: {completed.stderr.strip()}")
        return completed.stdout

    def _layout(self) -> None:
        for directory in ("fsx", "home", "etc/slurm", "cwagent/bin", "cwagent/etc", "bin", "ssm", "node-state"):
            (self.sandbox / directory).mkdir(mode=0o755, parents=True, exist_ok=True)
        for directory in ("state", "spool", "log", "run"):
            # munged refuses a socket directory that others can write to.
            (self.sandbox / "slurm" / directory).mkdir(mode=0o755, parents=True, exist_ok=True)
        # As on ParallelCluster, the OS's default user is an unprivileged user (its uid is this
        # machine's WORKLOAD_USER's): what SSM's root scripts hand to it and its Slurm jobs run as it.
        uid, gid = workload_account()
        host_users = Path("/etc/passwd").read_text().splitlines()
        users = [line for line in host_users if line.split(":")[0] not in (self.user, WORKLOAD_USER)]
        users.append(f"{self.user}:x:{uid}:{gid}:trainrun local head node user:/home/{self.user}:/bin/bash")
        (self.sandbox / "passwd").write_text("\n".join(users) + "\n")
        host_groups = Path("/etc/group").read_text().splitlines()
        groups = [line for line in host_groups if line.split(":")[0] not in (self.user, WORKLOAD_USER)]
        groups.append(f"{self.user}:x:{gid}:")
        (self.sandbox / "group").write_text("\n".join(groups) + "\n")
        self._write_aws_config()
        self._write_standins()
        home = self.sandbox / "home" / self.user
        home.mkdir(exist_ok=True)
        for directory, _, files in os.walk(home):
            for name in [directory, *(os.path.join(directory, file) for file in files)]:
                os.chown(name, uid, gid, follow_symlinks=False)
        home.chmod(0o700)
        munge_key = self.sandbox / "slurm" / "munge.key"
        if not munge_key.exists():
            munge_key.write_bytes(os.urandom(1024))
            munge_key.chmod(0o400)

    def _mounts(self) -> list[tuple[Path, str]]:
        return [
            (self.sandbox / "fsx", FSX_MOUNT_DIR),
            (self.sandbox / "home", "/home"),
            (self.sandbox / "passwd", "/etc/passwd"),
            (self.sandbox / "group", "/etc/group"),
            (self.sandbox / "etc" / "slurm", "/etc/slurm"),
            (self.sandbox / "slurm" / "run", MUNGE_SOCKET_DIR),
            (self.sandbox / "cwagent", CWAGENT_DIR),
            (self.sandbox / "bin", STANDIN_BIN),
            # slurmd's spool holds Unix sockets named after the node, twice; at most 108 bytes a path.
            (self.sandbox / "slurm" / "spool", SLURMD_SPOOL_DIR),
            (self.sandbox / "node-state", NODE_STATE_DIR),
        ]

    def _enter_namespace(self) -> None:
        self._holder = _popen(
            [self._tool("unshare"), "--mount", "--propagation", "private", "--", "sleep", "infinity"],
            start_new_session=True,
        )
        own = os.readlink("/proc/self/ns/mnt")

        def entered() -> bool:
            # Until unshare has run, nsenter would enter *this* namespace, and mount over its /home.
            if self._holder is None or self._holder.poll() is not None:
                raise LocalHeadNodeUnavailable("unshare --mount failed: no private mount namespace")
            try:
                return os.readlink(f"/proc/{self._holder.pid}/ns/mnt") != own
            except OSError:
                return False

        _wait_for(entered, "unshare to create the mount namespace")
        self._namespace = os.readlink(f"/proc/{self._pid}/ns/mnt")
        # What a later start needs to end this head node's processes if this process dies unstopped.
        (self.sandbox / NAMESPACE_FILE).write_text(self._namespace)
        (self.sandbox / NAMESPACE_HOLDER_FILE).write_text(process_identity(self._pid) or "")
        self._start_watchdog(self._namespace)

    def _start_watchdog(self, namespace: str) -> None:
        """Everything in the namespace ends when this process dies, even by kill -9 (trainrun.local.watchdog)."""
        read_end, self._lifeline = os.pipe()  # both ends close-on-exec: no other child inherits them
        try:
            environment = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
            self._watchdog = _popen(
                [sys.executable, "-m", "trainrun.local.watchdog", str(read_end), namespace],
                pass_fds=(read_end,),
                env=environment,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            os.close(read_end)

    def _stop_watchdog(self) -> None:
        """Tell the watchdog the head node was stopped (a byte, then the pipe closed), and reap it."""
        if self._lifeline is not None:
            with contextlib.suppress(OSError):
                os.write(self._lifeline, b"x")
            os.close(self._lifeline)
            self._lifeline = None
        if self._watchdog is not None:
            _terminate(self._watchdog)
            self._watchdog = None

    def _mount(self) -> None:
        mount = self._tool("mount")
        mounts = self._mounts()
        for _, target in mounts:
            if not os.path.lexists(target):
                Path(target).mkdir(parents=True)
        self._expose(mount, mounts)
        # First the host paths a mount would hide, each onto its place inside that mount's source;
        # then the mounts themselves, recursively (--rbind), so that those places come along.
        for host_path, mount_point in self._passthrough(mounts):
            if host_path.is_dir():
                mount_point.mkdir(parents=True, exist_ok=True)
            else:
                mount_point.parent.mkdir(parents=True, exist_ok=True)
                mount_point.touch(exist_ok=True)
            self._in_namespace([mount, "--bind", str(host_path), str(mount_point)])
        for source, target in mounts:
            if target != FSX_MOUNT_DIR:  # mount_file_system mounts it, later
                self._in_namespace([mount, "--rbind", str(source), target])

    def mount_file_system(self) -> None:
        """Mount the run's file system at /fsx, as the head node's configuration does some time
        after the node started (its SSM agent already online): ParallelCluster's for a file system
        in SharedStorage, else the node's mount script (OnNodeConfigured). Until then /fsx is an
        empty directory, and `mountpoint /fsx` says it is not mounted."""
        self._in_namespace([self._tool("mount"), "--rbind", str(self.sandbox / "fsx"), FSX_MOUNT_DIR])

    def _expose(self, mount: str, mounts: list[tuple[Path, str]]) -> None:
        """Make the user's paths reachable in the namespace when a directory above one of them is
        closed to other users (e.g. a pyenv Python under root's 0700 /root): an empty tmpfs (mode
        0711) over that directory, with only those paths bound back at their places. The host's
        modes stay as they are."""
        closed = closed_above(user_paths(self.aws_cli), [Path(target) for _, target in mounts])
        staging = self.sandbox / "expose"
        for n, (directory, paths) in enumerate(sorted(closed.items())):
            if self.sandbox.is_relative_to(directory):
                raise LocalHeadNodeUnavailable(
                    f"the sandbox {self.sandbox} is under {directory}, closed to the head node's default user; "
                    "use a sandbox elsewhere"
                )
            stages = []
            for m, path in enumerate(paths):
                stage = staging / f"{n}-{m}"
                stage.mkdir(parents=True, exist_ok=True)
                self._in_namespace([mount, "--bind", str(path), str(stage)])
                stages.append((stage, path))
            self._in_namespace([mount, "-t", "tmpfs", "-o", "mode=0711,size=1m", "trainrun-expose", str(directory)])
            for stage, path in stages:
                self._in_namespace([self._tool("sh"), "-c", 'umask 022 && mkdir -p -- "$1"', "sh", str(path)])
                self._in_namespace([mount, "--move", str(stage), str(path)])

    def _passthrough(self, mounts: list[tuple[Path, str]]) -> list[tuple[Path, Path]]:
        """(host path, mount point) for each needed host path that one of `mounts` would hide."""
        needed = [self.sandbox]
        if self.aws_cli is not None:
            cli = Path(os.path.abspath(self.aws_cli))
            needed.append(cli.parent.parent if cli.parent.name == "bin" else cli.parent)
            interpreter = _interpreter(cli)
            if interpreter is not None:
                needed.append(interpreter.resolve())
        passthrough = []
        for path in needed:
            if path != self.sandbox and path.is_relative_to(self.sandbox):
                continue
            for source, target in mounts:
                if path == Path(target):
                    raise LocalHeadNodeUnavailable(
                        f"the local head node mounts its sandbox over {path}, which it needs"
                    )
                if source.is_dir() and path.is_relative_to(target):
                    passthrough.append((path, source / path.relative_to(target)))
        return passthrough

    def _write_aws_config(self) -> None:
        """The user's AWS configuration points at the emulated account (for boto3 in workloads
        too), with the instance metadata's stand-in as its credentials (INSTANCE_CREDENTIALS)."""
        aws = self.sandbox / "home" / self.user / ".aws"
        aws.mkdir(parents=True, exist_ok=True)
        env = self.aws_environment
        endpoint = f"endpoint_url = {env['AWS_ENDPOINT_URL']}\n" if env.get("AWS_ENDPOINT_URL") else ""
        credentials = f"credential_process = {STANDIN_BIN}/{INSTANCE_CREDENTIALS}\n"
        (aws / "config").write_text(f"[default]\nregion = {self.aws_region}\n{endpoint}{credentials}")

    def _write_standins(self) -> None:
        bin_dir = self.sandbox / "bin"
        if self.standins is not None:
            for standin in sorted(self.standins.iterdir()):
                if standin.is_file():
                    (bin_dir / standin.name).unlink(missing_ok=True)  # never write through a symlink
                    shutil.copy2(standin, bin_dir / standin.name)
        ctl = self.sandbox / "cwagent" / "bin" / "amazon-cloudwatch-agent-ctl"
        write_executable(ctl, STANDIN_CWAGENT_CTL)
        write_executable(bin_dir / "aws", self._aws_wrapper())
        write_executable(
            bin_dir / INSTANCE_CREDENTIALS, instance_credentials_standin(self.aws_environment, self.node_credentials)
        )
        write_executable(bin_dir / "srun", srun_standin(self._tool("srun"), self._tool("scontrol")))
        if clock.scale() is not None:
            # Anyone's jobs log their steps here (the sticky bit keeps each one's files its own).
            steps = self.sandbox / "etc" / "slurm" / Path(STEPS_DIR).name
            steps.mkdir(exist_ok=True)
            steps.chmod(0o1777)

    def _aws_wrapper(self) -> str:
        if self.aws_cli is None:
            return aws_standin(None, {})
        cli = os.path.abspath(self.aws_cli)
        if Path(cli).parent == Path(STANDIN_BIN):
            raise LocalHeadNodeUnavailable(
                f"aws_cli {cli}: the local head node's aws wrapper takes its place; use another"
            )
        # The key is the instance metadata stand-in's to give (the user's AWS config names it).
        env = {name: value for name, value in self.aws_environment.items() if name not in CREDENTIAL_VARIABLES}
        env.setdefault("AWS_DEFAULT_REGION", self.aws_region)
        env["AWS_CONFIG_FILE"] = f"/home/{self.user}/.aws/config"
        return aws_standin(cli, env)

    def _start_slurm(self) -> None:
        slurm = self.sandbox / "slurm"
        socket_path = slurm / "run" / Path(MUNGE_SOCKET).name
        self._daemons.append(
            _popen(
                [
                    *self._nsenter(),  # in the namespace, as every process of the head node (see stop)
                    self._tool("munged"),
                    "--foreground",
                    "--force",
                    f"--socket={MUNGE_SOCKET}",
                    f"--key-file={slurm / 'munge.key'}",
                    f"--log-file={slurm / 'log' / 'munged.log'}",
                    f"--pid-file={slurm / 'run' / 'munged.pid'}",
                    f"--seed-file={slurm / 'run' / 'munged.seed'}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        _wait_for(socket_path.exists, "munged to create its socket")
        ports = _free_ports(1 + len(self.nodes))
        (self.sandbox / "etc" / "slurm" / "slurm.conf").write_text(
            slurm_conf(slurm, Path(MUNGE_SOCKET), self.nodes, ports[0], ports[1:], self.min_job_age)
        )
        quiet: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        self._daemons.append(_popen([*self._nsenter(), self._tool("slurmctld"), "-D", "-i"], **quiet))
        for node in self.nodes:
            self._daemons.append(_popen([*self._nsenter(), self._tool("slurmd"), "-D", "-N", node], **quiet))
        _wait_for(self._all_nodes_idle, "the local Slurm nodes to be idle")

    def _all_nodes_idle(self) -> bool:
        for daemon in self._daemons:
            if daemon.poll() is not None:
                raise LocalHeadNodeUnavailable(
                    f"{_command_name(daemon)} exited with {daemon.returncode}; "
                    f"see its log in {self.sandbox / 'slurm' / 'log'}"
                )
        try:
            states = self._in_namespace([self._tool("sinfo"), "--noheader", "--Node", "--format=%N %t"])
        except LocalHeadNodeUnavailable:
            return False
        idle = {fields[0] for fields in map(str.split, states.splitlines()) if len(fields) == 2 and fields[1] == "idle"}
        return set(self.nodes) <= idle


def slurm_conf(
    slurm: Path,
    munge_socket: Path,
    nodes: list[str],
    controller_port: int,
    node_ports: list[int],
    min_job_age: int = PCLUSTER_MIN_JOB_AGE_SECONDS,
) -> str:
    host = socket.gethostname()
    node_lines = "\n".join(
        f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs=1 State=UNKNOWN"
        for node, port in zip(nodes, node_ports, strict=True)
    )
    return f"""# trainrun local head node: one slurmd per compute node of the run, on this machine.
ClusterName=trainrun-local
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={controller_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
StateSaveLocation={slurm}/state
SlurmdSpoolDir={SLURMD_SPOOL_DIR}/%n
SlurmctldPidFile={slurm}/run/slurmctld.pid
SlurmdPidFile={slurm}/run/slurmd-%n.pid
SlurmctldLogFile={slurm}/log/slurmctld.log
SlurmdLogFile={slurm}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
# Local only, for speed (ParallelCluster keeps Slurm's default, 3 s): slurm.conf's batch_sched_delay,
# "How long, in seconds, the scheduling of batch jobs can be delayed", was a pure wait in every
# local job, up to 3 real seconds (90 nominal ones at the local time scale).
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
# Loopback only: slurmctld binds its SlurmctldHost address, slurmd and srun their NodeAddr
# (Slurm binds every address, 0.0.0.0, by default).
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
# ParallelCluster's own settings (aws-parallelcluster-cookbook, cookbooks/aws-parallelcluster-slurm/
# templates/default/slurm/slurm.conf.erb, "TIMERS"): a finished job is forgotten MinJobAge=300 s
# after it ends, and there is no accounting (no AccountingStorageType unless a database is
# configured), so `sacct` fails and `scontrol show job` no longer knows the job after 5 minutes.
SlurmctldTimeout=300
SlurmdTimeout=180
UnkillableStepTimeout=180
InactiveLimit=0
MinJobAge={min_job_age}
KillWait={SLURM_KILL_WAIT_SECONDS}
Waittime=0
MessageTimeout=60
EnforcePartLimits=ALL
# Local only (ParallelCluster: ReturnToService=1 and Slurm's default JobRequeue=1): a job on
# a node that goes DOWN ends (NODE_FAIL) instead of being requeued; the node comes back as soon
# as its slurmd registers again.
JobRequeue=0
ReturnToService=2
{node_lines}
PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


STANDIN_CWAGENT_CTL = """#!/bin/bash
# STAND-IN for amazon-cloudwatch-agent-ctl on trainrun's local head node: it keeps the
# configuration it is given (in etc/applied/); trainrun's log shipper plays the agent and
# follows it. -a append-config adds (or replaces) one file, fetch-config replaces them all,
# remove-config removes one.
set -eu
action="" config=""
while [ $# -gt 0 ]; do
  case "$1" in
    -a) action="$2"; shift 2 ;;
    -c) config="${2#file:}"; shift 2 ;;
    *) shift ;;
  esac
done
applied=/opt/aws/amazon-cloudwatch-agent/etc/applied
mkdir -p "$applied"
case "$action" in
  fetch-config) rm -f "$applied"/*.json ;;
  remove-config) [ -n "$config" ] && rm -f "$applied/$(basename "$config")"; config="" ;;
esac
if [ -n "$config" ]; then
  cp -- "$config" "$applied/$(basename "$config")"
fi
echo "trainrun local: CloudWatch agent configuration applied"
"""

STANDIN_SRUN = """#!/bin/bash
# REHEARSAL STAND-IN for srun, on trainrun's local head node only (never on a real cluster).
# It runs the real srun. When @FAIL_JOB_FILE@ names this job's kind (the end of
# $SLURM_JOB_NAME: trainrun-<run_id>-compile / trainrun-<run_id>-train), it then reports an
# injected failure and exits 1, as a failing job would: `trainrun local --fail-at` rehearses it.
# On the AWS clock only (@STEPS_DIR@ exists), it logs when the step ran on which nodes there:
# the run summary's idle node-minutes (trainrun.local.clock).
real=@REAL_SRUN@
fail_file=@FAIL_JOB_FILE@
steps=@STEPS_DIR@
if [ -z "${TRAINRUN_STEP_LOGGED:-}" ] && [ -n "${SLURM_JOB_ID:-}" ] && [ -d "$steps" ] && [ -w "$steps" ]; then
  nodes=$(@SCONTROL@ show hostnames "${SLURM_JOB_NODELIST:-}" 2>/dev/null | paste -sd, -)
  started=$(date +%s.%N)
  TRAINRUN_STEP_LOGGED=1 "$0" "$@"
  status=$?
  echo "$started $(date +%s.%N) $nodes" >>"$steps/job-$SLURM_JOB_ID"
  exit "$status"
fi
if [ -n "${SLURM_JOB_NAME:-}" ] && [ -r "$fail_file" ]; then
  while read -r kind; do
    if [ -n "$kind" ] && [ "${SLURM_JOB_NAME%-"$kind"}" != "$SLURM_JOB_NAME" ]; then
      "$real" "$@"
      echo "srun: error: trainrun local --fail-at: the $kind job exits 1 (injected)" >&2
      exit 1
    fi
  done <"$fail_file"
fi
exec "$real" "$@"
"""

STANDIN_AWS = """#!/bin/sh
# STAND-IN wrapper for the aws CLI on trainrun's local head node: the real aws CLI (awscli 1.x),
# pointed at the local runtime's emulated AWS account, whoever calls it (root's SSM shell too),
# with the credentials the user's AWS config gets from the instance metadata's stand-in.
unset AWS_PROFILE AWS_DEFAULT_PROFILE AWS_SESSION_TOKEN AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
{exports}
exec {aws} "$@"
"""

STANDIN_AWS_MISSING = """#!/bin/sh
# STAND-IN for the aws CLI on trainrun's local head node, when there is no aws CLI to run.
echo "aws: trainrun local: no aws CLI here (set TRAINRUN_AWS_CLI; \\`make demo\\` builds .venv-awscli)" >&2
exit 127
"""


# The instance metadata's stand-in: the credential_process of the user's AWS config (in STANDIN_BIN).
INSTANCE_CREDENTIALS = "trainrun-instance-credentials"
CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")

STANDIN_INSTANCE_CREDENTIALS = """#!/bin/sh
# STAND-IN for the instance metadata's role credentials on trainrun's local head node: the
# credential_process of the user's AWS config (the aws CLI's and boto3's), printing the key in the
# format the AWS SDKs read ("Sourcing credentials with an external process", AWS SDKs and Tools
# Reference Guide). A Slurm job's processes run on a compute node (Slurm sets SLURMD_NODENAME in
# the batch script and every task) and get that node's instance role; the rest the head node's.
case "${{SLURMD_NODENAME:-}}" in
{nodes}
*) echo {head_node} ;;
esac
"""


def instance_credentials_standin(head_node: Mapping[str, str], nodes: Mapping[str, Mapping[str, str]]) -> str:
    """The credential_process stand-in: `head_node`'s key, or in a job on one of `nodes` (by Slurm
    node name) that node's (each a mapping with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)."""

    def process_output(key: Mapping[str, str]) -> str:
        document = {
            "Version": 1,
            "AccessKeyId": key.get("AWS_ACCESS_KEY_ID", ""),
            "SecretAccessKey": key.get("AWS_SECRET_ACCESS_KEY", ""),
        }
        return shlex.quote(json.dumps(document))

    cases = "\n".join(f"{shlex.quote(node)}) echo {process_output(key)} ;;" for node, key in sorted(nodes.items()))
    return STANDIN_INSTANCE_CREDENTIALS.format(nodes=cases, head_node=process_output(head_node))


def srun_standin(real_srun: str, scontrol: str = "scontrol") -> str:
    """The srun stand-in, running `real_srun` (see STANDIN_SRUN)."""
    return (
        STANDIN_SRUN.replace("@REAL_SRUN@", shlex.quote(real_srun))
        .replace("@FAIL_JOB_FILE@", shlex.quote(FAIL_JOB_FILE))
        .replace("@STEPS_DIR@", shlex.quote(STEPS_DIR))
        .replace("@SCONTROL@", shlex.quote(scontrol))
    )


def job_steps(sandbox: Path) -> list[tuple[str, float, float]]:
    """The job steps the srun stand-in logged in this sandbox (AWS clock only): (node, start, end),
    in time.time() seconds, one per node the step's job ran on."""
    steps: list[tuple[str, float, float]] = []
    directory = sandbox / "etc" / "slurm" / Path(STEPS_DIR).name
    for path in sorted(directory.glob("job-*")) if directory.is_dir() else []:
        for line in path.read_text().splitlines():
            fields = line.split()
            if len(fields) == 3:
                steps.extend((node, float(fields[0]), float(fields[1])) for node in fields[2].split(",") if node)
    return steps


def aws_standin(cli: str | None, environment: Mapping[str, str]) -> str:
    """The aws CLI wrapper: `cli` with `environment` exported, or, without a CLI, one that says so."""
    if cli is None:
        return STANDIN_AWS_MISSING
    exports = "\n".join(f"export {name}={shlex.quote(value)}" for name, value in sorted(environment.items()))
    return STANDIN_AWS.format(exports=exports, aws=shlex.quote(cli))


class LogShipper:
    """Plays the CloudWatch agent: ships new lines of the collected files to their streams.

    Follows the configs in the sandbox's cwagent/etc/applied/ (what the stand-in ctl applied);
    collects files under /fsx only. A line is shipped once, whole, after its newline.

    One thread ships, and only it: `ship` delivers to the log group's subscribers (the progress
    function) before it returns, so no lock may be held across it; `stop()` lets that thread
    ship the last lines and waits for it.
    """

    def __init__(self, sandbox: Path, ship: Callable[[str, str, list[str]], None], interval: float = 0.2):
        self._sandbox = sandbox
        self._ship = ship
        self._interval = interval
        self._offsets: dict[str, int] = {}
        self._failing: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="trainrun-log-shipper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout)
            if self._thread.is_alive():
                logger.warning("the log shipper of %s did not finish shipping within %.0fs", self._sandbox, timeout)

    def flush(self) -> None:
        for entry in self._collected():
            path = str(entry.get("file_path", ""))
            try:
                self._ship_new_lines(path, entry)
            except Exception:
                # As the agent does, keep going (and try these lines again next time); say it once.
                if path not in self._failing:
                    logger.warning("could not ship the new lines of %s", path, exc_info=True)
                self._failing.add(path)
            else:
                self._failing.discard(path)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self.flush()
        self.flush()  # the last lines, once the head node's processes have ended

    def _collected(self) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = []
        for config in sorted((self._sandbox / "cwagent" / "etc" / "applied").glob("*.json")):
            try:
                document = json.loads(config.read_text())
                entries += document["logs"]["logs_collected"]["files"]["collect_list"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return [entry for entry in entries if isinstance(entry, dict)]

    def _ship_new_lines(self, path: str, entry: dict[str, Any]) -> None:
        if not path.startswith("/fsx/"):
            return
        local = self._sandbox / "fsx" / path.removeprefix("/fsx/")
        if not local.is_file():
            return
        offset = self._offsets.get(path, 0)
        with local.open("rb") as handle:
            handle.seek(offset)
            data = handle.read()
        complete = data[: data.rfind(b"\n") + 1]  # ship whole lines only, as the agent does
        if not complete:
            return
        lines = complete.decode("utf-8", errors="replace").splitlines()
        self._ship(str(entry["log_group_name"]), str(entry["log_stream_name"]), lines)
        self._offsets[path] = offset + len(complete)


TRAIN_OUTPUT = Path(RunPaths(run_id="r").output_file("train")).name


def _logs_step(path: Path, step: int, offsets: dict[Path, int]) -> bool:
    """Whether the whole lines of `path` after `offsets[path]` hold a training line of `step`."""
    offset = offsets.get(path, 0)
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read()
    except OSError:
        return False
    complete = data[: data.rfind(b"\n") + 1]
    offsets[path] = offset + len(complete)
    for line in complete.decode("utf-8", errors="replace").splitlines():
        event = parse_line(line)
        if isinstance(event, TrainEvent) and event.step == step:
            return True
    return False


def check_available() -> dict[str, str]:
    """The executables the head node needs, by name; LocalHeadNodeUnavailable says what is missing."""
    search = os.pathsep.join([os.environ.get("PATH", ""), *SYSTEM_PATH])
    found = {name: shutil.which(name, path=search) for name in (*SLURM_BINARIES, *HOST_TOOLS)}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise LocalHeadNodeUnavailable(
            f"the local head node needs Slurm and MUNGE ({', '.join(missing)} not found): "
            "`make slurm` installs them (apt-get install slurm-wlm munge)"
        )
    tools = {name: str(path) for name, path in found.items()}
    hidden = [path for path in tools.values() if Path(path).parent == Path(STANDIN_BIN)]
    if hidden:
        raise LocalHeadNodeUnavailable(
            f"the local head node mounts its stand-ins over {STANDIN_BIN}, which would hide {', '.join(hidden)}: "
            "install Slurm and MUNGE from the distribution's packages (`make slurm`)"
        )
    if os.geteuid() != 0:
        raise LocalHeadNodeUnavailable(
            "the local head node needs root: it mounts its sandbox at /fsx and /home in a private mount namespace"
        )
    return tools


def _popen(argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
    # Every argv here is built by this module from resolved executables; the scripts SSM runs
    # are passed as files to sh, never through a shell of ours.
    return subprocess.Popen(argv, **kwargs)  # noqa: S603


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    return subprocess.run(argv, **kwargs)  # noqa: S603 - argv built here from resolved executables


def _command_name(process: subprocess.Popen[Any]) -> str:
    argv = [str(arg) for arg in process.args] if isinstance(process.args, list) else [str(process.args)]
    command = argv[argv.index("--") + 1] if "--" in argv else argv[0]
    return Path(command).name


def workload_account(name: str = WORKLOAD_USER) -> tuple[int, int]:
    """(uid, gid) of this machine's user `name`, a system user without a home or a login shell,
    created (`useradd --system`) if missing: a fresh machine needs nothing done beforehand."""
    with _ACCOUNT_LOCK:  # head nodes of one runtime start in parallel: one useradd at a time
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            useradd = shutil.which("useradd", path=os.pathsep.join(SYSTEM_PATH))
            if useradd is None:
                raise LocalHeadNodeUnavailable(
                    f"the local head node's default user is this machine's user {name}, which does not exist, "
                    "and there is no useradd to create it: install the passwd package"
                ) from None
            created = _run(
                [
                    useradd,
                    "--system",
                    "--user-group",
                    "--no-create-home",
                    "--home-dir",
                    "/nonexistent",
                    "--shell",
                    "/usr/sbin/nologin",
                    "--comment",
                    "trainrun local head node workload",  # no ':' (the passwd field separator)
                    name,
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            try:  # another process may have created it meanwhile (useradd then fails: exit 9)
                entry = pwd.getpwnam(name)
            except KeyError:
                raise LocalHeadNodeUnavailable(
                    f"useradd could not create the local head node's user {name} "
                    f"(exit code {created.returncode}): {created.stderr.strip()}"
                ) from None
    return entry.pw_uid, entry.pw_gid


def user_paths(aws_cli: Path | None) -> list[Path]:
    """The host paths the workload user runs: the aws CLI's virtualenv and its Python installation."""
    if aws_cli is None:
        return []
    cli = Path(os.path.abspath(aws_cli))
    paths = [cli.parent.parent if cli.parent.name == "bin" else cli.parent]
    interpreter = _interpreter(cli)
    if interpreter is not None:
        resolved = interpreter.resolve()
        paths.append(resolved.parent.parent if resolved.parent.name == "bin" else resolved.parent)
    return paths


def closed_above(paths: list[Path], mounted: list[Path]) -> dict[Path, list[Path]]:
    """Of `paths` not under one of the `mounted` targets, those a directory above which other
    users may not enter (no o+x), by the topmost such directory."""
    closed: dict[Path, list[Path]] = {}
    for path in paths:
        if any(path.is_relative_to(target) for target in mounted):
            continue  # passed through into the sandbox's directories (see _passthrough)
        blocked = [a for a in reversed(path.parents) if a != Path("/") and not os.stat(a).st_mode & 0o001]
        if blocked:
            closed.setdefault(blocked[0], []).append(path)
    return closed


def write_executable(path: Path, text: str) -> None:
    path.unlink(missing_ok=True)  # never write through a symlink left in the sandbox
    path.write_text(text)
    path.chmod(0o755)


def _interpreter(script: Path) -> Path | None:
    """The interpreter of a `#!` script (a virtualenv's console script), if it names one."""
    try:
        with script.open("rb") as handle:
            first = handle.readline(4096)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    return Path(words[0]) if words and words[0].startswith("/") else None


def _mount_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def namespace_pids(namespace: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "ns" / "mnt") == namespace:
                    pids.append(int(entry.name))
            except OSError:
                continue  # gone, or a zombie
    return pids


def started_at(pid: int) -> int | None:
    """When the process started (clock ticks since boot); None when it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def process_identity(pid: int) -> str | None:
    """`<pid> <start time>` of a live process (a pid alone may be reused), None if there is none."""
    start = started_at(pid)
    return None if start is None else f"{pid} {start}"


def is_alive(identity: str) -> bool:
    """Whether the process a `process_identity` names still runs (the same pid, started then)."""
    pid = identity.split(" ")[0]
    return pid.isdigit() and process_identity(int(pid)) == identity


def namespace_still_held(sandbox: Path) -> bool:
    """Whether the process that held the sandbox's head node namespace still runs: only then is
    the namespace id it recorded still that head node's."""
    try:
        return is_alive((sandbox / NAMESPACE_HOLDER_FILE).read_text().strip())
    except OSError:
        return False


def _now_ticks() -> int:
    """Clock ticks since boot: the unit of a process's start time."""
    return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


def end_namespace_processes(namespace: str, spare: set[int]) -> None:
    """SIGTERM every process in the mount namespace (daemons, slurmstepd, jobs, scripts), then SIGKILL.

    A namespace is known by its id (`mnt:[inode]`), and Linux gives a freed namespace's id to the
    next one made: another head node's, started a moment later by another run or test. So the
    namespace is surely this one while a process seen in it (same pid, same start) is alive; once
    all of those have ended, only a process that started before then can be one of ours (two
    namespaces never hold one id at the same time): a later one is left alone."""
    own = os.readlink("/proc/self/ns/mnt")
    if namespace == own:
        return  # never this process's own namespace
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    sig = signal.SIGTERM
    seen: dict[int, int] = {}
    ours_until = _now_ticks()  # when the namespace of this id was last surely ours
    while True:
        if any(started_at(pid) == start for pid, start in seen.items()):
            ours_until = _now_ticks()
        found = {pid: started_at(pid) for pid in namespace_pids(namespace) if pid not in spare}
        ours = {pid: start for pid, start in found.items() if start is not None and start <= ours_until}
        seen.update(ours)
        pids = list(ours)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if sig == signal.SIGKILL and time.monotonic() > deadline + STOP_GRACE_SECONDS:
            logger.warning("processes %s of the local head node did not end", pids)
            return
        if time.monotonic() > deadline:
            sig = signal.SIGKILL
        time.sleep(0.05)


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = DAEMON_START_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise LocalHeadNodeUnavailable(f"timed out waiting for {what}")
        time.sleep(0.1)


def _terminate(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
