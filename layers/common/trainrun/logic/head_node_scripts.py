"""The scripts the control plane runs on the head node (SSM AWS-RunShellScript), and their answers.

Pure functions: each renders one script as text, or parses what a script printed. The shell code
is not here: it is in the `.sh` files shipped in trainrun/scripts/ (package data of the layer),
and Python renders only a header of quoted assignments in front of each, the values of the run:

| script                       | root's part (sh)   | bash part                                        |
|------------------------------|--------------------|--------------------------------------------------|
| `prepare_script`             | prepare-as-root.sh | prepare-as-user.sh, as the default user          |
| `submit_script`              | submit-as-root.sh  | submit-as-user.sh, as the default user           |
| `wrapper_script` (sbatch)    |                    | job-wrapper.sh, as the default user under Slurm  |
| `end_watcher_script`         |                    | slurm-job-state.sh + end-watcher.sh, as root     |
| `status_script`              |                    | slurm-job-state.sh + compute-nodes.sh + job-status.sh, as root |
| `node_states_script`         |                    | compute-nodes.sh + node-states.sh, as root       |
| `stop_jobs_script`           |                    | stop-jobs.sh, as root                            |

A step the run may not have (setup, dataset) or that takes another form (a git repository or an
S3 archive) is a bash conditional on the header's values; a command is a bash array of its
arguments (`PrepareCommands`, `JobCommands`: `trainrun plan` shows the same commands).

Shells. The SSM agent runs a script as root with `/bin/sh` (dash on Ubuntu), so the outer part of
every SSM script is plain POSIX sh; the real work runs in bash, in one of two ways:

- as the cluster's default user, with a login shell, as a user who logs in to the head node gets (it puts Slurm and the
  user's environment on PATH): ``runuser -l <user> -c 'bash -s' <<'TRAINRUN_EOF' ... TRAINRUN_EOF``;
- as root (`status_script`): ``bash -s <<'TRAINRUN_EOF' ... TRAINRUN_EOF``.

Quoting. The heredoc delimiter is quoted, so the outer shell expands nothing in the body, and it
is chosen so that no line of the body equals it (a shell field may hold any line at all). Every
value of the run file reaches the text through `trainrun.logic.shell_quoting.quote`/`join` (one shell
word each), the shell fields (`workload.setup`, `compile`, `train`) included: they are passed
whole, as one word, to `bash -lc` (setup) or `srun bash -c` (jobs), so that they are shell code
only for the bash that is meant to run them, never for the script around them. The run's env
reaches setup and srun through env(1), never as assignments in the scripts' own shell. Each bash
part is one `{ ...; } </dev/null` group: bash reads the whole group before running any of it, and
no command in it can read (eat) the rest of the script from stdin.

Output. SSM keeps only the first 24,000 characters of a command's stdout, so the scripts print
little: a few `TRAINRUN-...` lines for the parsers here. The noisy steps of `prepare_script`
(git, aws s3, the user's setup) write to `<logs_dir>/prepare.log`; a failing step prints the
log's last lines to stderr, so `trainrun.adapters.ssm.stderr_tail` shows the actual error.

shellcheck checks the shipped files and every script rendered here, its bash parts cut out and
checked as bash, for the example run files and hostile values (tools/shellcheck_rendered.py, in
`make lint-shell`). A `# shellcheck disable=...` line in a script says why the code it silences
is right.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import get_args

from trainrun.errors import TrainrunError
from trainrun.logic.compile_cache import CACHE_ENV_NAME, cache_url
from trainrun.logic.neuron_install import NODE_CONFIGURED_MARKER
from trainrun.logic.shell_quoting import env_words, join, quote
from trainrun.model.end_marker import END_KEY_PATTERN
from trainrun.model.jobs import (
    DEFAULT_USERS,
    FSX_MOUNT_DIR,
    JOB_KINDS,
    JobKind,
    RunPaths,
    log_stream_name,
    slurm_job_name,
)
from trainrun.model.run_file import S3_URI, RunSpec
from trainrun.model.tags import RUN_ID_PATTERN

__all__ = [
    "CLOUDWATCH_AGENT_CONFIG_DIR",
    "CLOUDWATCH_AGENT_CTL",
    "PLAN_END_KEY",
    "PREPARE_LOG",
    "RUNNING_STATES",
    "SLURM_BIN_DIR",
    "DownNode",
    "HeadNodeOutputInvalid",
    "JobCommands",
    "JobState",
    "NodeStates",
    "PrepareCommands",
    "QueueState",
    "cloudwatch_agent_config",
    "cloudwatch_agent_config_path",
    "compile_cache_env_words",
    "default_user",
    "end_watcher_script",
    "export_checkpoints_script",
    "find_submitted",
    "job_commands",
    "node_states_script",
    "parse_checkpoint_export",
    "parse_job_state",
    "parse_node_states",
    "parse_submitted",
    "prepare_commands",
    "prepare_script",
    "status_script",
    "submit_script",
    "wrapper_path",
    "wrapper_script",
]

CLOUDWATCH_AGENT_CTL = "/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl"
# How often the agent sends what it has read of the job output files (cloudwatch_agent_config).
CLOUDWATCH_AGENT_FLUSH_SECONDS = 1
# `-c file:<path>` configs are kept here; the agent copies each into amazon-cloudwatch-agent.d/
# as `file_<name>`, so appending the same file again replaces it (a second prepare is a no-op).
CLOUDWATCH_AGENT_CONFIG_DIR = "/opt/aws/amazon-cloudwatch-agent/etc"
# Where ParallelCluster installs Slurm; login shells get it from /etc/profile.d, root's SSM shell does not.
SLURM_BIN_DIR = "/opt/slurm/bin"
PREPARE_LOG = "prepare.log"
# How long the preparation waits for /fsx to be mounted, when it starts while the cluster is created:
# ParallelCluster's default head node bootstrap timeout (HeadNodeBootstrapTimeout, 1800 s), after
# which the cluster's creation fails anyway.
FSX_MOUNT_WAIT_SECONDS = 1800
# Lines of prepare.log a failing step prints to stderr (SSM keeps 8,000 characters of stderr).
FAILED_STEP_TAIL_LINES = 40
# sacct looks back this far for a finished job (its default is midnight today); runs last at most 30 days.
SACCT_LOOKBACK = "now-45days"
HEREDOC = "TRAINRUN_EOF"
# What `trainrun plan` shows in place of a job's end key (Submit job generates the real one).
PLAN_END_KEY = "<the job's end key: generated by Submit job, never shown>"
# The scripts' shell code, shipped in trainrun/scripts/ (shellchecked by `make lint-shell`);
# Python renders only a header of quoted assignments in front of each.
PREPARE_AS_ROOT_SCRIPT = "prepare-as-root.sh"
PREPARE_AS_USER_SCRIPT = "prepare-as-user.sh"
SUBMIT_AS_ROOT_SCRIPT = "submit-as-root.sh"
SUBMIT_AS_USER_SCRIPT = "submit-as-user.sh"
JOB_WRAPPER_SCRIPT = "job-wrapper.sh"
SLURM_JOB_STATE_SCRIPT = "slurm-job-state.sh"
END_WATCHER_SCRIPT = "end-watcher.sh"
JOB_STATUS_SCRIPT = "job-status.sh"
JOB_STOP_SCRIPT = "job-stop.sh"
# slurm.conf's KillWait on ParallelCluster (its cookbook's slurm.conf template, "TIMERS"): a
# cancelled job's processes get SIGTERM, then this long to end before SIGKILL (scancel(1), NOTES).
SLURM_KILL_WAIT_SECONDS = 30
# How long the stop script waits for slurmctld to say a cancelled job has ended: KillWait, and
# time for the job's epilog and for slurmctld to hear from the nodes.
JOB_STOP_WAIT_SECONDS = SLURM_KILL_WAIT_SECONDS + 30
EXPORT_CHECKPOINTS_SCRIPT = "export-checkpoints.sh"
NODE_STATES_SCRIPT = "node-states.sh"
COMPUTE_NODES_SCRIPT = "compute-nodes.sh"
STOP_JOBS_SCRIPT = "stop-jobs.sh"

# Slurm job states in which the job has not ended yet (it may still run, or run again).
RUNNING_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "CONFIGURING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "SIGNALING",
        "SPECIAL_EXIT",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)
UNKNOWN_STATE = "UNKNOWN"

_RUN_ID = re.compile(RUN_ID_PATTERN)
# A ref that looks like an abbreviated or full commit id (see prepare_commands).
_COMMIT_ID = re.compile(r"[0-9a-f]{7,40}")
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
_SUBMITTED = re.compile(r"TRAINRUN-SUBMITTED job=(compile|train) slurm_job_id=([0-9]{1,18}) existing=(true|false)")
_CHECKPOINTS_EXPORTED = re.compile(r"TRAINRUN-CHECKPOINTS exported files=([0-9]{1,12})")
_JOB_STATE = re.compile(r"TRAINRUN-JOB-STATE slurm_job_id=([0-9]{1,18}) state=([A-Z_]{1,40}) exit_code=(-?[0-9]{1,9})")
_NODES = re.compile(r"TRAINRUN-NODES total=([0-9]{1,9}) idle=([0-9]{1,9})")
_JOB_RECORD = re.compile(r"TRAINRUN-JOB-RECORD (TRAINRUN-END [A-Za-z0-9=_ -]{1,400})")
_QUEUE = re.compile(r"TRAINRUN-QUEUE nodes=([0-9]{1,9}) up=([0-9]{1,9}) inactive=([0-9]{1,9})")
_NODE_DOWN = re.compile(r"TRAINRUN-NODE-DOWN name=([^\s]{1,200}) state=([^\s]{1,40}) reason=(.{0,300})")


def is_commit_id(ref: str) -> bool:
    """A ref that looks like an abbreviated or full commit id (no branch or tag name is checked for)."""
    return _COMMIT_ID.fullmatch(ref) is not None


class HeadNodeOutputInvalid(TrainrunError):
    """A head-node script finished, but its output lacks the line the control plane reads."""


@dataclass(frozen=True, slots=True)
class DownNode:
    """A compute node that is not up, as sinfo shows it: its state (`down`, `idle#`, `drain`, ...)
    and the reason Slurm keeps for it (ParallelCluster's, or a bootstrap error's)."""

    name: str
    state: str
    reason: str


@dataclass(frozen=True, slots=True)
class QueueState:
    """What Slurm says of the compute nodes while a job is pending: how many there are, how many
    are up, how many partitions are INACTIVE (ParallelCluster's protected mode), and the first
    nodes that are not up (at most 10; `status_script`)."""

    nodes: int
    up: int
    inactive_partitions: int
    down: tuple[DownNode, ...] = ()


@dataclass(frozen=True, slots=True)
class JobState:
    """What Slurm says of a job: its state, its exit code (-1 if unknown), and what that means."""

    state: str
    exit_code: int
    finished: bool
    succeeded: bool
    # When Slurm no longer knows the job: the signed end marker kept on /fsx, unverified (trainrun.model.end_marker).
    end_record: str | None = None
    # While the job is PENDING: the compute nodes it may be waiting for.
    queue: QueueState | None = None


@dataclass(frozen=True, slots=True)
class NodeStates:
    """What Slurm says of the cluster's compute nodes: how many there are, how many are idle, and
    the queue (nodes not up, an INACTIVE partition) when the script printed it."""

    total: int
    idle: int
    queue: QueueState | None = None


# --- paths and names -----------------------------------------------------------------------------


def default_user(spec: RunSpec) -> str:
    """The default user of the cluster's OS: the scripts do their work as it."""
    return DEFAULT_USERS[spec.cluster.os]


def wrapper_path(run_id: str, job: JobKind) -> str:
    """The sbatch wrapper of a job, on the shared file system."""
    return f"{RunPaths(run_id=_check_run_id(run_id)).run_dir}/{job}.sbatch.sh"


def _workdir_path(spec: RunSpec, paths: RunPaths) -> str:
    return posixpath.normpath(posixpath.join(paths.workload_dir, spec.workload.workdir))


def _dataset_dir(path: str) -> str:
    return path.rstrip("/") or "/"


def _check_slurm_job_id(slurm_job_id: int) -> int:
    if isinstance(slurm_job_id, bool) or not isinstance(slurm_job_id, int) or slurm_job_id <= 0:
        raise ValueError(f"{slurm_job_id!r} is not a Slurm job id")
    return slurm_job_id


def _check_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or _RUN_ID.fullmatch(run_id) is None:
        raise ValueError(f"{run_id!r} is not a run id (a lower-case letter, then lower-case letters, digits, '-')")
    return run_id


def _check_job(job: str) -> JobKind:
    if job not in JOB_KINDS:
        raise ValueError(f"{job!r} is not a job kind; use one of {', '.join(get_args(JobKind))}")
    return "compile" if job == "compile" else "train"


def _check_shell_field(field: str, text: str) -> str:
    # A NUL cannot be passed in an argument, and bash drops it from a script: the command would
    # silently change. Everything else passes unchanged.
    if "\x00" in text:
        raise ValueError(f"{field} contains a NUL character, which no shell command can hold")
    return text


# --- script building blocks ----------------------------------------------------------------------


def _delimiter(body: str) -> str:
    """A heredoc delimiter that no line of `body` equals (bash ends the heredoc at such a line)."""
    lines = set(body.split("\n"))
    delimiter, n = HEREDOC, 0
    while delimiter in lines:
        n += 1
        delimiter = f"{HEREDOC}_{n}"
    return delimiter


def _heredoc(command: str, body: str) -> list[str]:
    delimiter = _delimiter(body)
    return [f"{command} <<'{delimiter}'", body, delimiter]


def _as_user(user: str) -> str:
    """The command that runs a script given on stdin as `user`, in a login shell, with bash."""
    return join(["runuser", "-l", user, "-c", "bash -s"])


def _root_prologue(title: str) -> list[str]:
    # The first line says what the script is (SSM's command history, and the integration tests,
    # go by it), so the shell is named to shellcheck by a directive, not a shebang.
    return [
        f"# trainrun: {title}. Rendered by trainrun.logic.head_node_scripts; do not edit.",
        "# Runs as root under SSM (sh); the work itself runs in bash below.",
        "# shellcheck shell=sh",
        "set -eu",
    ]


def _assignments(values: dict[str, str | Sequence[str]]) -> list[str]:
    """`name='value'` for each value; a sequence becomes a bash array (bash parts only), one element per word."""
    return [
        f"{name}={quote(value)}" if isinstance(value, str) else f"{name}=({join(value)})"
        for name, value in values.items()
    ]


def _header(title: str, **values: str | Sequence[str]) -> list[str]:
    """The lines rendered in front of a shipped script: what it is, then its quoted assignments."""
    return [f"# trainrun: {title}. Rendered by trainrun.logic.head_node_scripts; do not edit.", *_assignments(values)]


def _script_file(name: str) -> str:
    """A script shipped in trainrun/scripts/, without its trailing newlines."""
    return resources.files("trainrun").joinpath("scripts", name).read_text(encoding="utf-8").rstrip("\n")


# --- Prepare head node ---------------------------------------------------------------------------


def cloudwatch_agent_config(
    run_id: str, *, jobs_log_group: str, cluster_run_id: str | None = None
) -> dict[str, object]:
    """The CloudWatch agent configuration that ships the run's job output files to the jobs log group
    (`cluster_run_id`: the run that made the cluster, when it is another's: see log_stream_name)."""
    paths = RunPaths(run_id=_check_run_id(run_id))
    return {
        "logs": {
            # The job's end reaches the workflow as a line of its output file (the end watcher's
            # marker), so the agent's buffer is on the path from job end to teardown: flush it every
            # second, not every 5 (the agent's default; Amazon CloudWatch User Guide, "Manually
            # create or edit the CloudWatch agent configuration file": force_flush_interval). The key
            # applies to the agent's every log; ParallelCluster's own config does not set it
            # (aws-parallelcluster-cookbook, write_cloudwatch_agent_json.py), so appending ours
            # conflicts with nothing.
            "force_flush_interval": CLOUDWATCH_AGENT_FLUSH_SECONDS,
            "logs_collected": {
                "files": {
                    "collect_list": [
                        {
                            "file_path": paths.output_file(job),
                            "log_group_name": jobs_log_group,
                            "log_stream_name": log_stream_name(run_id, job, cluster_run_id=cluster_run_id),
                        }
                        for job in JOB_KINDS
                    ]
                }
            },
        }
    }


def cloudwatch_agent_config_path(run_id: str) -> str:
    return f"{CLOUDWATCH_AGENT_CONFIG_DIR}/trainrun-{_check_run_id(run_id)}.json"


@dataclass(frozen=True, slots=True)
class PrepareCommands:
    """The commands of Prepare head node's steps, argument by argument, as the default user runs
    them (prepare-as-user.sh); an empty one is a step the run does not have."""

    # The workload is fetched into its directory + ".partial", then moved: git clone [--branch REF]
    # -- URL DIR (empty: the workload is an S3 archive), or aws s3 cp URI - | tar -x[z]f - -C DIR.
    clone: tuple[str, ...]
    download: tuple[str, ...]
    unpack: tuple[str, ...]
    # bash -lc SETUP, from the workload's workdir, with the run's env.
    setup: tuple[str, ...]
    # aws s3 sync (a prefix) or cp (one object); tar unpacks an archive, which is then removed.
    dataset_download: tuple[str, ...]
    dataset_unpack: tuple[str, ...]
    # aws s3 cp --recursive of workload.resume_from into the run's checkpoint directory.
    checkpoints_download: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _DatasetStaging:
    source: str
    directory: str
    # Named after the source: it records that this source is staged in the directory.
    marker: str
    download: tuple[str, ...]
    unpack: tuple[str, ...]
    archive: str  # the downloaded archive, removed once unpacked ("" when nothing is unpacked)


def _dataset_staging(spec: RunSpec) -> _DatasetStaging | None:
    dataset = spec.workload.dataset
    if dataset is None:
        return None
    source, directory = dataset.source, _dataset_dir(dataset.path)
    marker = posixpath.join(directory, f".trainrun-staged-{hashlib.sha256(source.encode()).hexdigest()}")
    key = source[len("s3://") :].partition("/")[2]
    if not key or source.endswith("/"):
        return _DatasetStaging(source, directory, marker, ("aws", "s3", "sync", source, directory), (), "")
    target = posixpath.join(directory, posixpath.basename(key))
    download = ("aws", "s3", "cp", source, target)
    if not key.endswith(_ARCHIVE_SUFFIXES):
        return _DatasetStaging(source, directory, marker, download, (), "")
    flags = "-xzf" if key.endswith((".tar.gz", ".tgz")) else "-xf"
    return _DatasetStaging(source, directory, marker, download, ("tar", flags, target, "-C", directory), target)


def _partial_dir(paths: RunPaths) -> str:
    return paths.workload_dir + ".partial"


def prepare_commands(spec: RunSpec, run_id: str) -> PrepareCommands:
    """What Prepare head node runs for `spec` (`trainrun plan` shows these commands)."""
    partial_dir = _partial_dir(RunPaths(run_id=_check_run_id(run_id)))
    workload = spec.workload
    source = workload.source
    clone: tuple[str, ...] = ()
    download: tuple[str, ...] = ()
    unpack: tuple[str, ...] = ()
    if source.s3 is not None:
        download = ("aws", "s3", "cp", source.s3, "-")
        unpack = ("tar", "-xzf" if source.s3.endswith((".tar.gz", ".tgz")) else "-xf", "-", "-C", partial_dir)
    else:
        assert source.git is not None
        # A ref that looks like a commit id is cloned, then checked out (clone --branch takes only
        # branches and tags); prepare-as-user.sh checks out any ref.
        branch = () if source.ref is None or is_commit_id(source.ref) else ("--branch", source.ref)
        clone = ("git", "clone", *branch, "--", source.git, partial_dir)
    setup = () if workload.setup is None else ("bash", "-lc", _check_shell_field("workload.setup", workload.setup))
    staging = _dataset_staging(spec)
    return PrepareCommands(
        clone=clone,
        download=download,
        unpack=unpack,
        setup=setup,
        dataset_download=staging.download if staging else (),
        dataset_unpack=staging.unpack if staging else (),
        checkpoints_download=_checkpoints_download(spec, run_id),
    )


def _checkpoints_download(spec: RunSpec, run_id: str) -> tuple[str, ...]:
    # cp --recursive, not sync: sync would also compare against what the directory holds, and
    # staging happens only into an empty directory, before the first attempt (prepare-as-user.sh).
    source = spec.workload.resume_from
    if source is None:
        return ()
    return ("aws", "s3", "cp", "--recursive", "--only-show-errors", source, RunPaths(run_id=run_id).checkpoint_dir)


def prepare_script(
    spec: RunSpec,
    run_id: str,
    *,
    jobs_log_group: str,
    region: str,
    cluster_run_id: str | None = None,
    wait_for_node_configured: bool = True,
) -> str:
    """Prepare the head node for a run (workflow state 6), safe to run again.

    As root (prepare-as-root.sh): configure the CloudWatch agent to ship the compile and train
    output files to `jobs_log_group` (fails if the agent is not installed: without it, progress
    cannot be followed) and create the run's directory (and the dataset directory) owned by the
    default user. As the default user (prepare-as-user.sh): fetch the workload (git clone +
    checkout, or an S3 tarball), run `workload.setup` from the workload's workdir, stage the
    dataset onto /fsx, and copy `workload.resume_from` into the run's checkpoint directory (once).
    Prints `TRAINRUN-PREPARED run=<run_id>` at the end.
    """
    paths = RunPaths(run_id=_check_run_id(run_id))
    user = default_user(spec)
    staging = _dataset_staging(spec)
    root = [
        *_root_prologue(f"prepare the head node for run {run_id}"),
        *_assignments(
            {
                "fsx_mount_dir": FSX_MOUNT_DIR,
                "fsx_mount_wait_seconds": str(FSX_MOUNT_WAIT_SECONDS),
                # Empty: a stack's own node script, which writes no marker (wait for /fsx only).
                "node_configured_marker": NODE_CONFIGURED_MARKER if wait_for_node_configured else "",
                "cloudwatch_ctl": CLOUDWATCH_AGENT_CTL,
                "run_user": user,
                "run_dir": paths.run_dir,
                "dataset_dir": staging.directory if staging else "",
                "agent_config_dir": CLOUDWATCH_AGENT_CONFIG_DIR,
                "agent_config_file": cloudwatch_agent_config_path(run_id),
                "agent_config": json.dumps(
                    cloudwatch_agent_config(run_id, jobs_log_group=jobs_log_group, cluster_run_id=cluster_run_id),
                    indent=2,
                ),
            }
        ),
        _script_file(PREPARE_AS_ROOT_SCRIPT),
    ]
    as_user = staging_script(spec, run_id, region=region)
    return "\n".join([*root, *_heredoc(_as_user(user), as_user.rstrip("\n"))]) + "\n"


def staging_script(spec: RunSpec, run_id: str, *, region: str, for_head_node: bool = True) -> str:
    """The workload's staging (prepare-as-user.sh with its header), as the default user runs it on a
    head node and an EKS run's staging Job runs it in its pod: fetch the workload, run
    workload.setup, stage the dataset and workload.resume_from onto /fsx, once."""
    paths = RunPaths(run_id=_check_run_id(run_id))
    commands = prepare_commands(spec, run_id)
    staging = _dataset_staging(spec)
    lines = [
        *_header(
            f"the default user's part of preparing the head node for run {run_id}"
            if for_head_node
            else f"staging run {run_id} onto the file system",
            slurm_bin_dir=SLURM_BIN_DIR,
            aws_region=region,
            run_id=run_id,
            run_dir=paths.run_dir,
            logs_dir=paths.logs_dir,
            prepare_log=f"{paths.logs_dir}/{PREPARE_LOG}",
            failed_step_tail_lines=str(FAILED_STEP_TAIL_LINES),
            workload_dir=paths.workload_dir,
            partial_dir=_partial_dir(paths),
            workdir=spec.workload.workdir,
            workdir_path=_workdir_path(spec, paths),
            clone_command=commands.clone,
            source_ref=spec.workload.source.ref or "",
            download_command=commands.download,
            unpack_command=commands.unpack,
            workload_env=env_words(spec.workload.env),
            setup_command=commands.setup,
            dataset_source=staging.source if staging else "",
            dataset_dir=staging.directory if staging else "",
            dataset_marker=staging.marker if staging else "",
            dataset_download_command=commands.dataset_download,
            dataset_unpack_command=commands.dataset_unpack,
            dataset_archive=staging.archive if staging else "",
            resume_from=spec.workload.resume_from or "",
            checkpoint_dir=paths.checkpoint_dir,
            # Beside the checkpoint directory, not in it: the export copies that directory whole.
            checkpoints_marker=f"{paths.run_dir}/.trainrun-checkpoints-staged",
            checkpoints_download_command=commands.checkpoints_download,
        ),
        _script_file(PREPARE_AS_USER_SCRIPT),
    ]
    return "\n".join(lines) + "\n"


# --- Compile / Train -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobCommands:
    """The sbatch command that submits a job and the srun command its wrapper runs, argument by argument."""

    sbatch: tuple[str, ...]
    srun: tuple[str, ...]


def job_commands(spec: RunSpec, run_id: str, job: JobKind, attempt: int = 1) -> JobCommands:
    """What Compile or Train runs for `spec` (`trainrun plan` shows these commands); a
    resubmitted train job (`attempt` 2, 3, ...) runs workload.resume when the run has one."""
    _check_run_id(run_id)
    job = _check_job(job)
    attempt = _check_attempt(spec, job, attempt)
    if job == "compile":
        command, field = spec.workload.compile, "workload.compile"
    else:
        command = spec.workload.train_command(attempt)
        field = "workload.resume" if attempt > 1 and spec.workload.resume is not None else "workload.train"
    if command is None:
        raise ValueError(f"the run has no workload.{job} command")
    paths = RunPaths(run_id=run_id)
    sbatch = (
        "sbatch",
        "--parsable",
        "--exclusive",
        # Slurm would requeue a batch job whose node failed (JobRequeue=1, its default) as the
        # same job, with none of trainrun's attempts counted: trainrun resubmits it instead
        # (workload.retries), as a new job with its attempt number.
        "--no-requeue",
        f"--nodes={spec.capacity.nodes}",
        f"--job-name={slurm_job_name(run_id, job, attempt)}",
        f"--output={paths.output_file(job)}",
        "--open-mode=append",
        wrapper_path(run_id, job),
    )
    # --label: each line of a task's output starts with its task number ("0: "), one task per
    # node, so that `trainrun logs` can say which rank printed what (trainrun.ops.logs); the
    # progress parser reads past the label (trainrun.logic.job_log).
    srun = ("srun", "--label", "bash", "-c", _check_shell_field(field, command))
    return JobCommands(sbatch=sbatch, srun=srun)


def compile_cache_env_words(spec: RunSpec, config_bucket: str) -> list[str]:
    """`NEURON_COMPILE_CACHE_URL=<the run's cache>` for env(1), the same in both jobs (none when the
    run turns the cache off). trainrun's own: workload.env may not set it (run_file.RESERVED_ENV_NAMES)."""
    url = cache_url(spec, config_bucket)
    return [] if url is None else [f"{CACHE_ENV_NAME}={url}"]


def _attempts(spec: RunSpec, job: JobKind) -> range:
    """The attempts the run may make of a job: 1 for compile; 1 to workload.retries + 1 for train."""
    return range(1, 2 + (spec.workload.train_retries if job == "train" else 0))


def _check_attempt(spec: RunSpec, job: JobKind, attempt: int) -> int:
    """`attempt`, when the run may make it (`_attempts`)."""
    allowed = _attempts(spec, job)
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt not in allowed:
        raise ValueError(f"attempt {attempt!r} of the {job} job: the run allows attempts 1 to {allowed[-1]}")
    return attempt


def wrapper_script(spec: RunSpec, run_id: str, job: JobKind, attempt: int = 1, *, config_bucket: str) -> str:
    """The sbatch script of a job (job-wrapper.sh): `srun` of the job's command with the run's env,
    TRAINRUN_CHECKPOINT_DIR (the run's checkpoints for train, RunPaths.compile_checkpoint_dir for
    compile), TRAINRUN_ATTEMPT and its Neuron compile cache (in `config_bucket`
    unless the run names its own); it exits with the command's exit code (no `set -e`). It prints
    no end marker: it runs as the default user, like the workload, so nothing it printed could be
    trusted; the head node's end watcher reports the end (trainrun.model.end_marker)."""
    return _job_script(spec, run_id, job, attempt, config_bucket, job_commands(spec, run_id, job, attempt).srun)


def pod_job_script(spec: RunSpec, run_id: str, job: JobKind, attempt: int = 1, *, config_bucket: str) -> str:
    """What each pod of an EKS run's compile or train Job runs (job-wrapper.sh, as `wrapper_script`):
    the job's command with `bash -c` instead of srun, on the one node the pod holds."""
    _check_attempt(spec, _check_job(job), attempt)
    command = spec.workload.compile if job == "compile" else spec.workload.train_command(attempt)
    if command is None:
        raise ValueError(f"the run has no workload.{job} command")
    launcher = ("bash", "-c", _check_shell_field(f"workload.{job}", command))
    return _job_script(spec, run_id, job, attempt, config_bucket, launcher)


def _job_script(
    spec: RunSpec, run_id: str, job: JobKind, attempt: int, config_bucket: str, launcher: Sequence[str]
) -> str:
    paths = RunPaths(run_id=run_id)
    header = _header(
        f"the {job} job of run {run_id}",
        workdir_path=_workdir_path(spec, paths),
        # The compile job's trial run saves into a directory of its own, never read nor exported.
        checkpoint_dir=paths.checkpoint_dir if job == "train" else paths.compile_checkpoint_dir,
        attempt=str(attempt),
        workload_env=[*env_words(spec.workload.env), *compile_cache_env_words(spec, config_bucket)],
        srun_command=launcher,
    )
    return "\n".join(["#!/bin/bash", *header, _script_file(JOB_WRAPPER_SCRIPT)]) + "\n"


# How often the end watcher asks slurmctld whether its job has ended: what the job's end waits on
# before its marker is signed (the local runtime's AWS clock compresses it with the rest).
END_WATCHER_POLL_SECONDS = 2.0


def end_watcher_script(
    spec: RunSpec, run_id: str, job: JobKind, attempt: int = 1, *, poll_seconds: float = END_WATCHER_POLL_SECONDS
) -> str:
    """The head node's end watcher of a job (bash, as root, `bash -c <this> trainrun-end-watch
    <slurm job id>`, its end key in TRAINRUN_END_KEY): waits until slurmctld says the job ended,
    then signs the end marker (trainrun.model.end_marker) and, as the default user, writes it to the
    job's end record on /fsx and appends it to the job's output file (which the CloudWatch agent
    ships). One watcher per Slurm job: a second one exits at once. The script is
    trainrun/scripts/end-watcher.sh, after this run's header and slurm-job-state.sh."""
    _check_run_id(run_id)
    job = _check_job(job)
    paths = RunPaths(run_id=run_id)
    header = _header(
        f"the end watcher of the {job} job of run {run_id}",
        slurm_bin_dir=SLURM_BIN_DIR,
        run_id=run_id,
        job=job,
        run_user=default_user(spec),
        output_file=paths.output_file(job),
        end_record=paths.end_record_file(job, _check_attempt(spec, job, attempt)),
        watchers=paths.watchers_dir,
        running_states=" ".join(sorted(RUNNING_STATES)),
        poll_seconds=_poll_seconds(poll_seconds),
    )
    return "\n".join([*header, _script_file(SLURM_JOB_STATE_SCRIPT), _script_file(END_WATCHER_SCRIPT)]) + "\n"


def _poll_seconds(seconds: float) -> str:
    # sleep(1) takes a decimal number; a tenth of a second at least, so a watcher never spins.
    if not 0.1 <= seconds <= 60:
        raise ValueError(f"the end watcher's poll is 0.1 to 60 seconds, not {seconds}")
    return f"{seconds:g}"


def _check_end_key(end_key: str) -> str:
    if end_key != PLAN_END_KEY and END_KEY_PATTERN.fullmatch(end_key) is None:
        raise ValueError("an end key is 64 lower-case hex digits (trainrun.model.end_marker.new_end_key)")
    return end_key


def submit_script(
    spec: RunSpec,
    run_id: str,
    job: JobKind,
    *,
    end_key: str,
    config_bucket: str,
    attempt: int = 1,
    chained_end_key: str | None = None,
    end_watcher_poll_seconds: float = END_WATCHER_POLL_SECONDS,
) -> str:
    """Submit a job with sbatch, unless Slurm already knows a job of that name (workflow states 7,
    8), then start the job's end watcher as root with `end_key` (trainrun.model.end_marker). Each
    attempt of a job has a name of its own (`slurm_job_name`): a resubmission is a new job, and a
    second submission of one attempt finds the first.

    Prints `TRAINRUN-SUBMITTED job=<job> slurm_job_id=<id> existing=<true|false>`. As the default
    user (submit-as-user.sh): a job of the same name is looked for in the queue (squeue), then in
    accounting (sacct, when it is enabled), then in the jobs slurmctld still remembers (scontrol);
    when squeue itself fails the script fails rather than risk a second job. The job's wrapper is
    `wrapper_script` (`config_bucket`: the stack's, for the default compile cache). As root
    (submit-as-root.sh): the end watcher. The key is never printed, never on a command line and
    never in the default user's part of the script.

    `chained_end_key` (compile only): then also the train job's first attempt, the same way with
    its own key, queued behind the compile job (`--dependency=afterok:<compile job>
    --kill-on-invalid-dep=yes`): it starts the moment compile succeeds, with no round trip through
    the control plane, and Slurm cancels it if compile fails. Its own TRAINRUN-SUBMITTED line
    follows compile's; if its submission fails, stderr says why and the command still succeeds.
    """
    job = _check_job(job)
    end_key = _check_end_key(end_key)
    if chained_end_key is not None and job != "compile":
        raise ValueError("only the compile job has a job queued behind it (train)")
    user = default_user(spec)
    root = [
        *_root_prologue(f"submit the {job} job of run {run_id}"),
        *_assignments(
            {
                "end_key": end_key,
                "end_watcher": end_watcher_script(spec, run_id, job, attempt, poll_seconds=end_watcher_poll_seconds),
            }
        ),
    ]
    if chained_end_key is not None:
        root += _assignments(
            {
                "chained_end_key": _check_end_key(chained_end_key),
                "chained_end_watcher": end_watcher_script(spec, run_id, "train", poll_seconds=end_watcher_poll_seconds),
            }
        )
    root.append(_script_file(SUBMIT_AS_ROOT_SCRIPT))
    # submit_and_watch (submit-as-root.sh) runs the default user's part, given as a heredoc.
    lines = [
        *root,
        *_heredoc(f"submit_and_watch {_as_user(user)}", _user_submission(spec, run_id, job, attempt, config_bucket)),
    ]
    if chained_end_key is not None:
        lines += _heredoc(f"submit_chained {quote(user)}", _user_submission(spec, run_id, "train", 1, config_bucket))
    return "\n".join(lines) + "\n"


def _user_submission(spec: RunSpec, run_id: str, job: JobKind, attempt: int, config_bucket: str) -> str:
    """The default user's part of submitting one job (submit-as-user.sh, after its header)."""
    commands = job_commands(spec, run_id, job, attempt)
    paths = RunPaths(run_id=run_id)
    header = _header(
        f"the default user's part of submitting the {job} job of run {run_id}",
        slurm_bin_dir=SLURM_BIN_DIR,
        job=job,
        job_name=slurm_job_name(run_id, job, attempt),
        workdir_path=_workdir_path(spec, paths),
        sacct_lookback=SACCT_LOOKBACK,
        logs_dir=paths.logs_dir,
        wrapper=wrapper_path(run_id, job),
        wrapper_script=wrapper_script(spec, run_id, job, attempt, config_bucket=config_bucket),
        sbatch_command=commands.sbatch,
    )
    return "\n".join([*header, _script_file(SUBMIT_AS_USER_SCRIPT)])


# --- Slurm's view of a job -----------------------------------------------------------------------


def status_script(slurm_job_id: int, run_id: str, job: JobKind, attempt: int = 1) -> str:
    """Print `TRAINRUN-JOB-STATE slurm_job_id=<id> state=<STATE> exit_code=<n>`: sacct, else
    scontrol; when neither knows the job, also `TRAINRUN-JOB-RECORD <end marker>` from the job's
    end record on /fsx (the control plane verifies its signature: trainrun.model.end_marker);
    while the job is PENDING, also the compute nodes' state (`TRAINRUN-QUEUE ...` and a
    `TRAINRUN-NODE-DOWN ...` line per node that is not up: parse_job_state's `queue`).

    The exit code is the job's return code, or 128 + the signal that ended it; -1 when unknown
    (state UNKNOWN: neither accounting nor slurmctld knows the job). ParallelCluster keeps no
    accounting by default and slurmctld forgets a finished job after MinJobAge (300 s).
    """
    _check_slurm_job_id(slurm_job_id)
    _check_run_id(run_id)
    job = _check_job(job)
    header = _header(
        f"the state of the {job} job of run {run_id}",
        slurm_bin_dir=SLURM_BIN_DIR,
        slurm_job_id=str(slurm_job_id),
        end_record=RunPaths(run_id=run_id).end_record_file(job, attempt),
    )
    scripts = [_script_file(name) for name in (SLURM_JOB_STATE_SCRIPT, COMPUTE_NODES_SCRIPT, JOB_STATUS_SCRIPT)]
    body = "\n".join([*header, *scripts])
    root = _root_prologue(f"the state of Slurm job {slurm_job_id}")
    return "\n".join([*root, *_heredoc(join(["bash", "-s"]), body)]) + "\n"


def stop_script(slurm_job_id: int, run_id: str, job: JobKind, attempt: int = 1) -> str:
    """Cancel the job with its grace period, wait up to JOB_STOP_WAIT_SECONDS for it to end, then
    print its state as `status_script` does (parse_job_state reads it).

    `scancel` without --signal sends every step of the job SIGCONT and SIGTERM, waits KillWait,
    then sends SIGKILL (scancel(1), NOTES): the training script's SIGTERM handler has KillWait to
    write its checkpoint.
    """
    _check_slurm_job_id(slurm_job_id)
    _check_run_id(run_id)
    job = _check_job(job)
    header = _header(
        f"stop the {job} job of run {run_id}",
        slurm_bin_dir=SLURM_BIN_DIR,
        slurm_job_id=str(slurm_job_id),
        end_record=RunPaths(run_id=run_id).end_record_file(job, attempt),
        running_states=sorted(RUNNING_STATES),
        stop_wait_seconds=str(JOB_STOP_WAIT_SECONDS),
    )
    names = (SLURM_JOB_STATE_SCRIPT, COMPUTE_NODES_SCRIPT, JOB_STOP_SCRIPT, JOB_STATUS_SCRIPT)
    scripts = [_script_file(name) for name in names]
    root = _root_prologue(f"stop Slurm job {slurm_job_id}")
    return "\n".join([*root, *_heredoc(join(["bash", "-s"]), "\n".join([*header, *scripts]))]) + "\n"


# --- Tear down: export the checkpoints -----------------------------------------------------------


def export_checkpoints_script(spec: RunSpec, run_id: str, *, destination: str, region: str) -> str:
    """Copy the run's checkpoint directory to `destination` (an s3:// prefix) as the default user,
    with the head node's role (export-checkpoints.sh). Prints `TRAINRUN-CHECKPOINTS none` when the
    directory is missing or empty, else `TRAINRUN-CHECKPOINTS exported files=<n>`. Safe to run
    again: the same files are put at the same keys."""
    body = export_body(run_id, destination=destination, region=region)
    root = _root_prologue(f"export the checkpoints of run {run_id}")
    return "\n".join([*root, *_heredoc(_as_user(default_user(spec)), body)]) + "\n"


def export_body(run_id: str, *, destination: str, region: str) -> str:
    """export-checkpoints.sh with its header: what the default user runs on a head node, and what an
    EKS run's export Job runs in its pod."""
    paths = RunPaths(run_id=_check_run_id(run_id))
    if re.fullmatch(S3_URI, destination) is None or not destination.endswith("/"):
        raise ValueError(f"{destination!r} is not an s3:// prefix ending in '/'")
    return "\n".join(
        [
            *_header(
                f"the export of run {run_id}'s checkpoints",
                aws_region=region,
                checkpoint_dir=paths.checkpoint_dir,
                destination=destination,
            ),
            _script_file(EXPORT_CHECKPOINTS_SCRIPT),
        ]
    )


def node_states_script(run_id: str) -> str:
    """Print `TRAINRUN-NODES total=<n> idle=<n>`: the cluster's compute nodes as sinfo lists them,
    then the queue's state as `status_script` prints it for a pending job (parse_node_states' `queue`).
    After a node failed, its job's resubmission waits until the run's nodes are idle again
    (ParallelCluster replaces a failed static node)."""
    _check_run_id(run_id)
    header = _header(f"the compute nodes of run {run_id}", slurm_bin_dir=SLURM_BIN_DIR)
    body = "\n".join([*header, _script_file(COMPUTE_NODES_SCRIPT), _script_file(NODE_STATES_SCRIPT)])
    root = _root_prologue(f"the compute nodes of run {run_id}")
    return "\n".join([*root, *_heredoc(join(["bash", "-s"]), body)]) + "\n"


def stop_jobs_script(spec: RunSpec, run_id: str) -> str:
    """Cancel the run's compile and train jobs (by their Slurm job names, every attempt the run may
    make) on a cluster that stays up: a run on a kept cluster (cluster.reuse) at its teardown.
    Prints `TRAINRUN-JOBS-STOPPED run=<run id>` once none of them is pending or running; fails
    (stderr says which) otherwise."""
    _check_run_id(run_id)
    header = _header(
        f"stop the jobs of run {run_id}",
        slurm_bin_dir=SLURM_BIN_DIR,
        run_id=run_id,
        job_names=[slurm_job_name(run_id, job, n) for job in JOB_KINDS for n in _attempts(spec, job)],
    )
    body = "\n".join([*header, _script_file(STOP_JOBS_SCRIPT)])
    root = _root_prologue(f"stop the jobs of run {run_id}")
    return "\n".join([*root, *_heredoc(join(["bash", "-s"]), body)]) + "\n"


# --- parsing what the scripts printed ------------------------------------------------------------


def _lines(stdout: str) -> list[str]:
    return [line.strip() for line in stdout.replace("\r", "\n").split("\n")]


def _excerpt(stdout: str, limit: int = 300) -> str:
    text = stdout.strip()
    if not text:
        return "no output at all"
    return "output ended with: " + (text if len(text) <= limit else "..." + text[-limit:])


def parse_submitted(stdout: str, job: JobKind | None = None) -> tuple[int, bool]:
    """(Slurm job id, whether it already existed) from `submit_script`'s output: of `job`, when
    given (a compile submission also prints the line of the train job chained behind it)."""
    submitted = find_submitted(stdout, job)
    if submitted is None:
        raise HeadNodeOutputInvalid(
            f"the submit script printed no 'TRAINRUN-SUBMITTED job={job or '<job>'} slurm_job_id=<id> "
            "existing=<true|false>' line; " + _excerpt(stdout)
        )
    return submitted


def find_submitted(stdout: str, job: JobKind | None = None) -> tuple[int, bool] | None:
    """`parse_submitted`, or None when the script printed no such line (a chained job whose
    submission failed)."""
    for line in reversed(_lines(stdout)):
        match = _SUBMITTED.fullmatch(line)
        if match is not None and job in (None, match.group(1)):
            return int(match.group(2)), match.group(3) == "true"
    return None


def parse_checkpoint_export(stdout: str) -> int:
    """How many files `export_checkpoints_script` exported (0: the directory was missing or empty)."""
    for line in reversed(_lines(stdout)):
        if line == "TRAINRUN-CHECKPOINTS none":
            return 0
        match = _CHECKPOINTS_EXPORTED.fullmatch(line)
        if match is not None:
            return int(match.group(1))
    raise HeadNodeOutputInvalid(
        "the export script printed no 'TRAINRUN-CHECKPOINTS none|exported files=<n>' line; " + _excerpt(stdout)
    )


def parse_job_state(stdout: str) -> JobState:
    """The job's state from `status_script`'s output."""
    lines = _lines(stdout)
    records = [match.group(1) for match in map(_JOB_RECORD.fullmatch, lines) if match is not None]
    for line in reversed(lines):
        match = _JOB_STATE.fullmatch(line)
        if match is not None:
            state, exit_code = match.group(2), int(match.group(3))
            finished = state not in RUNNING_STATES
            return JobState(
                state=state,
                exit_code=exit_code,
                finished=finished,
                succeeded=finished and state == "COMPLETED" and exit_code == 0,
                end_record=records[-1] if records and state == UNKNOWN_STATE else None,
                queue=_queue_state(lines),
            )
    raise HeadNodeOutputInvalid(
        "the status script printed no 'TRAINRUN-JOB-STATE slurm_job_id=<id> state=<STATE> exit_code=<n>' line; "
        + _excerpt(stdout)
    )


def _queue_state(lines: list[str]) -> QueueState | None:
    """The compute nodes as `status_script` printed them for a pending job; None when it did not."""
    queue = next((match for match in map(_QUEUE.fullmatch, reversed(lines)) if match is not None), None)
    if queue is None:
        return None
    down = tuple(
        DownNode(name=match.group(1), state=match.group(2), reason=match.group(3).strip())
        for match in map(_NODE_DOWN.fullmatch, lines)
        if match is not None
    )
    return QueueState(
        nodes=int(queue.group(1)), up=int(queue.group(2)), inactive_partitions=int(queue.group(3)), down=down
    )


def parse_node_states(stdout: str) -> NodeStates:
    """The compute nodes' states from `node_states_script`'s output."""
    for line in reversed(_lines(stdout)):
        match = _NODES.fullmatch(line)
        if match is not None:
            return NodeStates(total=int(match.group(1)), idle=int(match.group(2)), queue=_queue_state(_lines(stdout)))
    raise HeadNodeOutputInvalid(
        "the node states script printed no 'TRAINRUN-NODES total=<n> idle=<n>' line; " + _excerpt(stdout)
    )
