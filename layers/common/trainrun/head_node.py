"""The scripts the control plane runs on the head node (SSM AWS-RunShellScript), and their answers.

Pure functions: each renders one script as text, or parses what a script printed. The SSM agent
runs a script as root with `/bin/sh` (dash on Ubuntu), so the outer part of every script is
plain POSIX sh; the real work runs in bash, in one of two ways:

- as the cluster's default user, with a login shell as the runbooks do (it puts Slurm and the
  user's environment on PATH): ``runuser -l <user> -c 'bash -s' <<'TRAINRUN_EOF' ... TRAINRUN_EOF``;
- as root (`status_script`): ``bash -s <<'TRAINRUN_EOF' ... TRAINRUN_EOF``.

Quoting. The heredoc delimiter is quoted, so the outer shell expands nothing in the body, and it
is chosen so that no line of the body equals it (a shell field may hold any line at all). Inside,
every value of the run file reaches the text through `trainrun.shell.quote`/`join` (one shell
word each), the shell fields (`workload.setup`, `compile`, `train`) included: they are passed
whole, as one word, to `bash -lc` (setup) or `srun bash -c` (jobs), so that they are shell code
only for the bash that is meant to run them, never for the script around them. The body is one
`{ ...; } </dev/null` group: bash reads the whole group before running any of it, and no command
in it can read (eat) the rest of the script from stdin.

Output. SSM keeps only the first 24,000 characters of a command's stdout, so the scripts print
little: a few `TRAINRUN-...` lines for the parsers here. The noisy steps of `prepare_script`
(git, aws s3, the user's setup) write to `<logs_dir>/prepare.log`; a failing step prints the
log's last lines to stderr, so `trainrun.adapters.ssm.stderr_tail` shows the actual error.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from dataclasses import dataclass
from typing import get_args

from trainrun.errors import TrainrunError
from trainrun.jobs import DEFAULT_USERS, END_MARKER, JOB_KINDS, JobKind, RunPaths, log_stream_name, slurm_job_name
from trainrun.runfile import RunSpec
from trainrun.shell import env_assignments, join, quote

__all__ = [
    "CLOUDWATCH_AGENT_CONFIG_DIR",
    "CLOUDWATCH_AGENT_CTL",
    "PREPARE_LOG",
    "RUNNING_STATES",
    "SLURM_BIN_DIR",
    "HeadNodeOutputInvalid",
    "JobState",
    "cloudwatch_agent_config",
    "cloudwatch_agent_config_path",
    "default_user",
    "parse_job_state",
    "parse_submitted",
    "prepare_script",
    "status_script",
    "submit_script",
    "wrapper_path",
    "wrapper_script",
]

CLOUDWATCH_AGENT_CTL = "/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl"
# `-c file:<path>` configs are kept here; the agent copies each into amazon-cloudwatch-agent.d/
# as `file_<name>`, so appending the same file again replaces it (a second prepare is a no-op).
CLOUDWATCH_AGENT_CONFIG_DIR = "/opt/aws/amazon-cloudwatch-agent/etc"
# Where ParallelCluster installs Slurm; login shells get it from /etc/profile.d, root's SSM shell does not.
SLURM_BIN_DIR = "/opt/slurm/bin"
PREPARE_LOG = "prepare.log"
# Lines of prepare.log a failing step prints to stderr (SSM keeps 8,000 characters of stderr).
FAILED_STEP_TAIL_LINES = 40
# sacct looks back this far for a finished job (its default is midnight today); runs last at most 30 days.
SACCT_LOOKBACK = "now-45days"
HEREDOC = "TRAINRUN_EOF"

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

_RUN_ID = re.compile(r"[a-z][a-z0-9-]{0,79}")
# A ref that looks like an abbreviated or full commit id is cloned, then checked out (clone --branch
# takes only branches and tags).
_COMMIT_ID = re.compile(r"[0-9a-f]{7,40}")
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
_SUBMITTED = re.compile(r"TRAINRUN-SUBMITTED job=(compile|train) slurm_job_id=([0-9]{1,18}) existing=(true|false)")
_JOB_STATE = re.compile(r"TRAINRUN-JOB-STATE slurm_job_id=([0-9]{1,18}) state=([A-Z_]{1,40}) exit_code=(-?[0-9]{1,9})")


class HeadNodeOutputInvalid(TrainrunError):
    """A head-node script finished, but its output lacks the line the control plane reads."""


@dataclass(frozen=True, slots=True)
class JobState:
    """What Slurm says of a job: its state, its exit code (-1 if unknown), and what that means."""

    state: str
    exit_code: int
    finished: bool
    succeeded: bool


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


def _bash_body(lines: list[str]) -> str:
    """The bash side of a script: strict mode, then one group with stdin from /dev/null."""
    return "\n".join(
        [
            "set -euo pipefail",
            "{",
            f'PATH="$PATH:"{quote(SLURM_BIN_DIR)}',
            "export PATH",
            *lines,
            "} </dev/null",
        ]
    )


def _heredoc(command: str, body: str) -> list[str]:
    delimiter = _delimiter(body)
    return [f"{command} <<'{delimiter}'", body, delimiter]


def _as_user(user: str, body: str) -> list[str]:
    return _heredoc(join(["runuser", "-l", user, "-c", "bash -s"]), body)


def _root_prologue(title: str) -> list[str]:
    return [
        f"# trainrun: {title}. Rendered by trainrun.head_node; do not edit.",
        "# Runs as root under SSM (sh); the work itself runs in bash below.",
        "set -eu",
    ]


def _assign(name: str, value: str) -> str:
    return f"{name}={quote(value)}"


def _fail(message_words: str) -> str:
    """A shell command printing `TRAINRUN-ERROR <message>` to stderr; the message is printf arguments."""
    return f"printf 'TRAINRUN-ERROR %s\\n' {message_words} >&2"


# --- Prepare head node ---------------------------------------------------------------------------


def cloudwatch_agent_config(run_id: str, *, jobs_log_group: str) -> dict[str, object]:
    """The CloudWatch agent configuration that ships the run's job output files to the jobs log group."""
    paths = RunPaths(run_id=_check_run_id(run_id))
    return {
        "logs": {
            "logs_collected": {
                "files": {
                    "collect_list": [
                        {
                            "file_path": paths.output_file(job),
                            "log_group_name": jobs_log_group,
                            "log_stream_name": log_stream_name(run_id, job),
                        }
                        for job in JOB_KINDS
                    ]
                }
            }
        }
    }


def cloudwatch_agent_config_path(run_id: str) -> str:
    return f"{CLOUDWATCH_AGENT_CONFIG_DIR}/trainrun-{_check_run_id(run_id)}.json"


def prepare_script(spec: RunSpec, run_id: str, *, jobs_log_group: str, region: str) -> str:
    """Prepare the head node for a run (workflow state 6), safe to run again.

    As root: configure the CloudWatch agent to ship the compile and train output files to
    `jobs_log_group` (fails if the agent is not installed: without it, progress cannot be
    followed) and create the run's directory (and the dataset directory) owned by the default
    user. As the default user: fetch the workload (git clone + checkout, or an S3 tarball),
    run `workload.setup` from the workload's workdir, stage the dataset onto /fsx. Prints
    `TRAINRUN-PREPARED run=<run_id>` at the end.
    """
    paths = RunPaths(run_id=_check_run_id(run_id))
    user = default_user(spec)
    workload = spec.workload
    dataset_dir = _dataset_dir(workload.dataset.path) if workload.dataset is not None else None
    config_path = cloudwatch_agent_config_path(run_id)
    config = json.dumps(cloudwatch_agent_config(run_id, jobs_log_group=jobs_log_group), indent=2)

    root = [
        *_root_prologue(f"prepare the head node for run {run_id}"),
        _assign("cloudwatch_ctl", CLOUDWATCH_AGENT_CTL),
        'if [ ! -x "$cloudwatch_ctl" ]; then',
        "  "
        + _fail(
            quote("cloudwatch-agent-missing: ")
            + '"$cloudwatch_ctl"'
            + quote(
                " is not installed on the head node; without the CloudWatch agent the job output never reaches"
                " CloudWatch Logs and the run's progress cannot be followed"
            )
        ),
        "  exit 1",
        "fi",
        _assign("run_user", user),
        "# The run's directories, created by root (the file system's root is root's) for the default user.",
        f"for dir in {' '.join(quote(d) for d in [paths.run_dir, *([dataset_dir] if dataset_dir else [])])}; do",
        '  if [ ! -d "$dir" ]; then',
        '    mkdir -p -- "$dir"',
        '    chown -- "$run_user:" "$dir"',
        "  fi",
        "done",
        "# Ship the job output files to CloudWatch Logs.",
        join(["mkdir", "-p", "--", CLOUDWATCH_AGENT_CONFIG_DIR]),
        f"printf '%s\\n' {quote(config)} >{quote(config_path)}",
        f'if ! agent_output=$("$cloudwatch_ctl" -a append-config -m ec2 -s -c {quote("file:" + config_path)} 2>&1)',
        "then",
        "  printf '%s\\n' \"$agent_output\" >&2",
        "  " + _fail(quote("cloudwatch-agent-config: the CloudWatch agent refused " + config_path)),
        "  exit 1",
        "fi",
        "echo TRAINRUN-STEP cloudwatch-agent",
    ]
    body = _bash_body(_prepare_user_lines(spec, paths, region=region))
    return "\n".join([*root, *_as_user(user, body)]) + "\n"


def _prepare_user_lines(spec: RunSpec, paths: RunPaths, *, region: str) -> list[str]:
    workload = spec.workload
    workdir_path = _workdir_path(spec, paths)
    log = f"{paths.logs_dir}/{PREPARE_LOG}"
    lines = [
        f"export AWS_DEFAULT_REGION={quote(region)}",
        _assign("workload_dir", paths.workload_dir),
        _assign("partial_dir", paths.workload_dir + ".partial"),
        _assign("workdir_path", workdir_path),
        _assign("prepare_log", log),
        join(["mkdir", "-p", "--", paths.run_dir, paths.logs_dir]),
        ': >>"$prepare_log"',
        "",
        "# run_step NAME FUNCTION: FUNCTION's output goes to prepare.log; if it fails, the log's tail goes",
        "# to stderr. The subshell has its own `set -e` (errexit is off in an `if` or `&&` context).",
        "run_step() {",
        "  local name=$1 rc",
        "  printf 'TRAINRUN-STEP %s\\n' \"$name\"",
        '  printf \'\\n=== %s %s\\n\' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$name" >>"$prepare_log"',
        "  set +e",
        '  (set -e; "$2") >>"$prepare_log" 2>&1',
        "  rc=$?",
        "  set -e",
        '  if [ "$rc" -ne 0 ]; then',
        "    printf 'TRAINRUN-ERROR step %s failed with exit code %s; the last lines of %s:\\n' "
        '"$name" "$rc" "$prepare_log" >&2',
        f'    tail -n {FAILED_STEP_TAIL_LINES} -- "$prepare_log" >&2',
        '    exit "$rc"',
        "  fi",
        "}",
        "",
        *_fetch_lines(spec, paths),
        "",
    ]
    steps = ["run_step fetch-workload fetch_workload"]
    lines += [
        "check_workdir() {",
        '  if [ ! -d "$workdir_path" ]; then',
        "    "
        + _fail(quote(f"workload.workdir: {workload.workdir} is not a directory of the workload ({workdir_path})")),
        "    exit 1",
        "  fi",
        "}",
    ]
    steps.append("check_workdir")
    if workload.setup is not None:
        setup = _check_shell_field("workload.setup", workload.setup)
        lines += [
            "run_setup() {",
            '  cd -- "$workdir_path"',
            *("  " + line for line in env_assignments(workload.env).splitlines()),
            f"  bash -lc {quote(setup)}",
            "}",
        ]
        steps.append("run_step setup run_setup")
    if workload.dataset is not None:
        lines += _dataset_lines(workload.dataset.source, _dataset_dir(workload.dataset.path))
        steps.append("run_step dataset stage_dataset")
    lines += ["", *steps, f"printf 'TRAINRUN-PREPARED run=%s\\n' {quote(paths.run_id)}"]
    return lines


def _fetch_lines(spec: RunSpec, paths: RunPaths) -> list[str]:
    """`fetch_workload`: the workload into workload_dir, atomically (fetched into .partial, then moved)."""
    source = spec.workload.source
    if source.s3 is not None:
        extract = ["tar", "-xzf" if source.s3.endswith((".tar.gz", ".tgz")) else "-xf", "-", "-C"]
        return [
            "fetch_workload() {",
            '  if [ -e "$workload_dir" ]; then',
            '    echo "the workload is already in $workload_dir"',
            "    return 0",
            "  fi",
            '  rm -rf -- "$partial_dir"',
            '  mkdir -p -- "$partial_dir"',
            f'  {join(["aws", "s3", "cp", source.s3, "-"])} | {join(extract)} "$partial_dir"',
            '  mv -T -- "$partial_dir" "$workload_dir"',
            "}",
        ]
    assert source.git is not None
    ref = source.ref
    clone = ["git", "clone"]
    if ref is not None and _COMMIT_ID.fullmatch(ref) is None:
        clone += ["--branch", ref]
    clone += ["--", source.git]
    if ref is None:
        checkout_fresh: list[str] = []
        checkout_again = ['    git -C "$workload_dir" checkout --quiet --detach refs/remotes/origin/HEAD']
    else:
        checkout_fresh = [f'  checkout_ref "$partial_dir" {quote(ref)}']
        checkout_again = [f'    checkout_ref "$workload_dir" {quote(ref)}']
    return [
        "# checkout_ref DIR REF: detach at REF, taken as a branch of origin, then a tag, then a commit.",
        "checkout_ref() {",
        "  local candidate commit",
        '  for candidate in "refs/remotes/origin/$2" "refs/tags/$2" "$2"; do',
        '    if commit=$(git -C "$1" rev-parse --verify --quiet "$candidate^{commit}"); then',
        '      git -C "$1" checkout --quiet --detach "$commit"',
        "      return 0",
        "    fi",
        "  done",
        "  "
        + _fail(quote("workload.source.ref: ") + '"$2"' + quote(" is not a branch, tag or commit of the repository")),
        "  return 1",
        "}",
        "fetch_workload() {",
        '  if [ -d "$workload_dir/.git" ]; then',
        '    echo "the workload is already cloned in $workload_dir: fetching"',
        '    git -C "$workload_dir" fetch --quiet --tags --force origin',
        *checkout_again,
        "    return 0",
        "  fi",
        '  if [ -e "$workload_dir" ]; then',
        "    " + _fail('"$workload_dir"' + quote(" exists and is not a git checkout")),
        "    return 1",
        "  fi",
        '  rm -rf -- "$partial_dir"',
        f'  {join(clone)} "$partial_dir"',
        *checkout_fresh,
        '  mv -T -- "$partial_dir" "$workload_dir"',
        "}",
    ]


def _dataset_lines(source: str, dataset_dir: str) -> list[str]:
    """`stage_dataset`: the dataset onto /fsx once; a marker file named after the source records it."""
    digest = hashlib.sha256(source.encode()).hexdigest()
    marker = posixpath.join(dataset_dir, f".trainrun-staged-{digest}")
    key = source[len("s3://") :].partition("/")[2]
    lines = [
        "stage_dataset() {",
        f"  if [ -e {quote(marker)} ]; then",
        f"    printf 'the dataset %s is already staged in %s\\n' {quote(source)} {quote(dataset_dir)}",
        "    return 0",
        "  fi",
        f"  {join(['mkdir', '-p', '--', dataset_dir])}",
    ]
    if not key or source.endswith("/"):
        lines.append("  " + join(["aws", "s3", "sync", source, dataset_dir]))
    else:
        target = posixpath.join(dataset_dir, posixpath.basename(key))
        lines.append("  " + join(["aws", "s3", "cp", source, target]))
        if key.endswith(_ARCHIVE_SUFFIXES):
            flags = "-xzf" if key.endswith((".tar.gz", ".tgz")) else "-xf"
            lines += ["  " + join(["tar", flags, target, "-C", dataset_dir]), "  " + join(["rm", "-f", "--", target])]
    lines += [f"  {join(['touch', '--', marker])}", "}"]
    return lines


# --- Compile / Train -----------------------------------------------------------------------------


def _end_marker_printf(run_id: str, job: JobKind) -> str:
    """`printf` of END_MARKER with the job id and exit code filled in by the wrapper's shell."""
    job_id, code = "\x00job\x00", "\x00code\x00"
    text = END_MARKER.format(run_id=run_id, job=job, slurm_job_id=job_id, exit_code=code)
    words = []
    for part in re.split("(\x00job\x00|\x00code\x00)", text):
        if part == job_id:
            words.append('"${SLURM_JOB_ID:-0}"')
        elif part == code:
            words.append('"$code"')
        elif part:
            words.append(quote(part))
    return "printf '%s\\n' " + "".join(words)


def wrapper_script(spec: RunSpec, run_id: str, job: JobKind) -> str:
    """The sbatch script of a job: the run's env, `srun` of the job's command, then the end marker.

    The marker line (trainrun.jobs.END_MARKER) carries the job's exit code, and the wrapper exits
    with it; no `set -e`, so a failing command still reaches the marker.
    """
    _check_run_id(run_id)
    job = _check_job(job)
    command = spec.workload.compile if job == "compile" else spec.workload.train
    if command is None:
        raise ValueError(f"the run has no workload.{job} command")
    command = _check_shell_field(f"workload.{job}", command)
    paths = RunPaths(run_id=run_id)
    return (
        "\n".join(
            [
                "#!/bin/bash",
                f"# trainrun: the {job} job of run {run_id}. Rendered by trainrun.head_node; do not edit.",
                "set -uo pipefail",
                *env_assignments(spec.workload.env).splitlines(),
                "code=0",
                f"cd -- {quote(_workdir_path(spec, paths))} || code=$?",
                'if [ "$code" -eq 0 ]; then',
                f"  srun bash -c {quote(command)} || code=$?",
                "fi",
                _end_marker_printf(run_id, job),
                'exit "$code"',
            ]
        )
        + "\n"
    )


def submit_script(spec: RunSpec, run_id: str, job: JobKind) -> str:
    """Submit a job with sbatch, unless Slurm already knows a job of that name (workflow states 7, 8).

    Prints `TRAINRUN-SUBMITTED job=<job> slurm_job_id=<id> existing=<true|false>`. A job of the
    same name is looked for in the queue (squeue), then in accounting (sacct, when it is
    enabled), then in the jobs slurmctld still remembers (scontrol); when squeue itself fails the
    script fails rather than risk a second job.
    """
    _check_run_id(run_id)
    job = _check_job(job)
    paths = RunPaths(run_id=run_id)
    wrapper = wrapper_path(run_id, job)
    name = slurm_job_name(run_id, job)
    sbatch = join(
        [
            "sbatch",
            "--parsable",
            "--exclusive",
            f"--nodes={spec.capacity.nodes}",
            f"--job-name={name}",
            f"--output={paths.output_file(job)}",
            "--open-mode=append",
            wrapper,
        ]
    )
    lines = [
        _assign("job", job),
        _assign("job_name", name),
        join(["cd", "--", _workdir_path(spec, paths)]),
        "",
        "# The first/last plain job id of some lines (array or step ids are not ours).",
        "first_id() { awk '/^[0-9]+$/ { print; exit }'; }",
        "last_id() { awk '/^[0-9]+$/ { last = $0 } END { if (last != \"\") print last }'; }",
        "",
        'if ! queued=$(squeue --noheader --name="$job_name" --format=%i); then',
        "  "
        + _fail(quote("squeue failed: not submitting ") + '"$job_name"' + quote(" without knowing if it is queued")),
        "  exit 1",
        "fi",
        "existing=$(printf '%s\\n' \"$queued\" | first_id)",
        'if [ -z "$existing" ]; then',
        "  # Finished jobs: accounting if it is enabled (it fails when it is not).",
        "  finished=$(sacct --noheader -X --parsable2 "
        f'--starttime={SACCT_LOOKBACK} --name="$job_name" --format=JobID 2>/dev/null) || finished=""',
        "  existing=$(printf '%s\\n' \"$finished\" | last_id)",
        "fi",
        'if [ -z "$existing" ]; then',
        "  # Finished jobs slurmctld still remembers (MinJobAge).",
        '  known=$(scontrol show job -o 2>/dev/null) || known=""',
        '  existing=$(printf \'%s\\n\' "$known" | JOB_NAME="$job_name" awk \'',
        '    { id = ""; hit = 0',
        "      for (i = 1; i <= NF; i++) {",
        "        if ($i ~ /^JobId=/) id = substr($i, 7)",
        '        if ($i == "JobName=" ENVIRON["JOB_NAME"]) hit = 1',
        "      }",
        "      if (hit && id ~ /^[0-9]+$/) last = id }",
        '    END { if (last != "") print last }\')',
        "fi",
        'if [ -n "$existing" ]; then',
        '  printf \'TRAINRUN-SUBMITTED job=%s slurm_job_id=%s existing=true\\n\' "$job" "$existing"',
        "  exit 0",
        "fi",
        "",
        join(["mkdir", "-p", "--", paths.logs_dir]),
        _assign("wrapper", wrapper),
        f"printf '%s' {quote(wrapper_script(spec, run_id, job))} >\"$wrapper.tmp\"",
        'chmod 0755 -- "$wrapper.tmp"',
        'mv -f -- "$wrapper.tmp" "$wrapper"',
        f"submitted=$({sbatch})",
        "slurm_job_id=${submitted%%;*}",
        'case "$slurm_job_id" in',
        "  '' | *[!0-9]*)",
        "    " + _fail(quote("sbatch printed ") + '"$submitted"' + quote(", not a job id")),
        "    exit 1",
        "    ;;",
        "esac",
        'printf \'TRAINRUN-SUBMITTED job=%s slurm_job_id=%s existing=false\\n\' "$job" "$slurm_job_id"',
    ]
    root = _root_prologue(f"submit the {job} job of run {run_id}")
    return "\n".join([*root, *_as_user(default_user(spec), _bash_body(lines))]) + "\n"


# --- Slurm's view of a job -----------------------------------------------------------------------


def status_script(slurm_job_id: int) -> str:
    """Print `TRAINRUN-JOB-STATE slurm_job_id=<id> state=<STATE> exit_code=<n>`: sacct, else scontrol.

    The exit code is the job's return code, or 128 + the signal that ended it; -1 when unknown
    (state UNKNOWN: neither accounting nor slurmctld knows the job).
    """
    if isinstance(slurm_job_id, bool) or not isinstance(slurm_job_id, int) or slurm_job_id <= 0:
        raise ValueError(f"{slurm_job_id!r} is not a Slurm job id")
    lines = [
        _assign("slurm_job_id", str(slurm_job_id)),
        'state=""',
        'code=""',
        "# Accounting: `State|rc:signal`; it fails when accounting storage is disabled.",
        'if out=$(sacct -j "$slurm_job_id" -X --noheader --parsable2 --format=State,ExitCode 2>/dev/null); then',
        "  line=$(printf '%s\\n' \"$out\" | awk 'NF { last = $0 } END { print last }')",
        '  if [ -n "$line" ]; then',
        "    state=${line%%|*}",
        "    state=${state%% *}",
        "    code=${line#*|}",
        "  fi",
        "fi",
        "# slurmctld: `... JobState=COMPLETED ... ExitCode=0:0 ...` while it still remembers the job.",
        'if [ -z "$state" ] && out=$(scontrol show job -o "$slurm_job_id" 2>/dev/null); then',
        '  read -r -a fields <<<"$out"',
        '  for field in "${fields[@]}"; do',
        '    case "$field" in',
        "      JobState=*) state=${field#JobState=} ;;",
        "      ExitCode=*) code=${field#ExitCode=} ;;",
        "    esac",
        "  done",
        "fi",
        'if [[ ! "$state" =~ ^[A-Z_]+$ ]]; then',
        "  state=UNKNOWN",
        "fi",
        "exit_code=-1",
        "rc=${code%%:*}",
        "signal=${code#*:}",
        'if [ "$state" != UNKNOWN ] && [[ "$rc" =~ ^[0-9]+$ ]]; then',
        '  if [[ "$signal" =~ ^[0-9]+$ ]] && [ "$signal" -gt 0 ]; then',
        "    exit_code=$((128 + signal))",
        "  else",
        "    exit_code=$((10#$rc))",
        "  fi",
        "fi",
        'printf \'TRAINRUN-JOB-STATE slurm_job_id=%s state=%s exit_code=%s\\n\' "$slurm_job_id" "$state" "$exit_code"',
    ]
    root = _root_prologue(f"the state of Slurm job {slurm_job_id}")
    return "\n".join([*root, *_heredoc(join(["bash", "-s"]), _bash_body(lines))]) + "\n"


# --- parsing what the scripts printed ------------------------------------------------------------


def _lines(stdout: str) -> list[str]:
    return [line.strip() for line in stdout.replace("\r", "\n").split("\n")]


def _excerpt(stdout: str, limit: int = 300) -> str:
    text = stdout.strip()
    if not text:
        return "no output at all"
    return "output ended with: " + (text if len(text) <= limit else "..." + text[-limit:])


def parse_submitted(stdout: str) -> tuple[int, bool]:
    """(Slurm job id, whether it already existed) from `submit_script`'s output."""
    for line in reversed(_lines(stdout)):
        match = _SUBMITTED.fullmatch(line)
        if match is not None:
            return int(match.group(2)), match.group(3) == "true"
    raise HeadNodeOutputInvalid(
        "the submit script printed no 'TRAINRUN-SUBMITTED job=<job> slurm_job_id=<id> existing=<true|false>' line; "
        + _excerpt(stdout)
    )


def parse_job_state(stdout: str) -> JobState:
    """The job's state from `status_script`'s output."""
    for line in reversed(_lines(stdout)):
        match = _JOB_STATE.fullmatch(line)
        if match is not None:
            state, exit_code = match.group(2), int(match.group(3))
            finished = state not in RUNNING_STATES
            return JobState(
                state=state,
                exit_code=exit_code,
                finished=finished,
                succeeded=finished and state == "COMPLETED" and exit_code == 0,
            )
    raise HeadNodeOutputInvalid(
        "the status script printed no 'TRAINRUN-JOB-STATE slurm_job_id=<id> state=<STATE> exit_code=<n>' line; "
        + _excerpt(stdout)
    )
