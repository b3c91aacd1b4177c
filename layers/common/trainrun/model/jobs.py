"""The compile and training jobs of a run: names, paths and what the run record keeps of them.

One place for the facts every side of a job agrees on: the Slurm job name (how a second
submission finds the first), the job's output file on the shared file system (what the
CloudWatch agent ships), the log stream it lands in (how the progress handler knows the run
and the job), and the end marker that confirms how a job ended (trainrun.model.end_marker signs it).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trainrun.model.tags import RUN_ID_PATTERN

# Where the cluster mounts the run's FSx for Lustre file system (ParallelCluster SharedStorage).
FSX_MOUNT_DIR = "/fsx"
JobKind = Literal["compile", "train"]
JOB_KINDS: tuple[JobKind, ...] = ("compile", "train")
# The line that says how a job ended: printed by the head node's root end watcher (not the job,
# which could lie; see trainrun.model.end_marker), signed with the job's end key;
# trainrun.logic.job_log parses it (tests/unit/test_job_end.py parses every marker end_marker writes).
END_MARKER = (
    "TRAINRUN-END run={run_id} job={job} slurm_job_id={slurm_job_id} exit_code={exit_code}"
    " state={state} ended_at={ended_at} mac={mac}"
)
# <run id>/<job>, or <cluster's run id>/<run id>/<job> for a run on another run's kept cluster (log_stream_name).
LOG_STREAM = re.compile(
    f"^((?P<cluster_run_id>{RUN_ID_PATTERN})/)?(?P<run_id>{RUN_ID_PATTERN})/(?P<job>compile|train)$"
)
# The default user of each ParallelCluster OS: head-node commands run as it, with a login
# shell, as the AWS Neuron ParallelCluster tutorials do.
DEFAULT_USERS = {
    "alinux2023": "ec2-user",
    "ubuntu2204": "ubuntu",
    "ubuntu2404": "ubuntu",
    "rhel8": "ec2-user",
    "rhel9": "ec2-user",
    "rocky8": "rocky",
    "rocky9": "rocky",
}


class RunPaths(BaseModel):
    """Where a run lives on the cluster's shared file system."""

    model_config = ConfigDict(frozen=True)

    run_id: str

    @property
    def run_dir(self) -> str:
        return f"{FSX_MOUNT_DIR}/trainrun/{self.run_id}"

    @property
    def workload_dir(self) -> str:
        return f"{self.run_dir}/workload"

    @property
    def logs_dir(self) -> str:
        return f"{self.run_dir}/logs"

    def output_file(self, job: JobKind) -> str:
        return f"{self.logs_dir}/{job}.out"

    def end_record_file(self, job: JobKind, attempt: int = 1) -> str:
        """The job's signed end marker, kept where the status check finds it after Slurm forgot the
        job; one per attempt (a resubmission's status check must not find the failed attempt's)."""
        return f"{self.run_dir}/{job}{attempt_suffix(attempt)}.end"

    @property
    def checkpoint_dir(self) -> str:
        """The run's checkpoints (TRAINRUN_CHECKPOINT_DIR of its jobs): one directory for every
        attempt of the run, on the shared file system, so a resubmitted job resumes from it."""
        return f"{self.run_dir}/checkpoints"

    @property
    def compile_checkpoint_dir(self) -> str:
        """The compile job's TRAINRUN_CHECKPOINT_DIR: neuron_parallel_compile runs the training
        script as a trial, and what a trial saves is from steps never trained; in the run's
        directory a resuming train job would start from it, and the export would copy it. Beside
        it, not in it: neither reads nor exports this one."""
        return f"{self.run_dir}/compile-checkpoints"

    @property
    def watchers_dir(self) -> str:
        """Root's directory (0700) of the end watchers' pid files."""
        return f"{self.run_dir}/.end-watchers"


def attempt_suffix(attempt: int) -> str:
    """What names a resubmission's own things apart from the first attempt's: "" for attempt 1
    (its names are those of a job that is never resubmitted), "-<n>" after."""
    if attempt < 1:
        raise ValueError(f"attempt {attempt}: attempts are numbered from 1")
    return "" if attempt == 1 else f"-{attempt}"


def slurm_job_name(run_id: str, job: JobKind, attempt: int = 1) -> str:
    """The job's name in Slurm: a second submission of an attempt finds its job by it, and a
    resubmission (the next attempt) is a new job. No two runs' or attempts' names are equal: a name
    ends in the job kind (attempt 1) or in the kind and the attempt's number, and Slurm matches
    names whole (squeue --name, sacct --name)."""
    return f"trainrun-{run_id}-{job}{attempt_suffix(attempt)}"


def log_stream_name(run_id: str, job: JobKind, *, cluster_run_id: str | None = None) -> str:
    """The job's stream in the jobs log group: <run id>/<job>. On another run's kept cluster
    (cluster.reuse, `cluster_run_id`: the run that made it) <cluster's run id>/<run id>/<job>: a
    cluster's nodes may write only the streams under their own run's id (ClusterNodePolicy)."""
    if cluster_run_id is None or cluster_run_id == run_id:
        return f"{run_id}/{job}"
    return f"{cluster_run_id}/{run_id}/{job}"


class Attempt(BaseModel):
    """One submission of the train job that ended: resubmitted after an infrastructure failure,
    the record keeps each (trainrun.steps.resume). The steps it logged are in JobProgress.attempts."""

    model_config = ConfigDict(extra="ignore")

    number: int
    slurm_job_id: int | None = None
    submitted_at: datetime | None = None
    ended_at: datetime | None = None
    # Slurm's state for the job when it ended (NODE_FAIL, FAILED, ...), when known.
    state: str | None = None
    # Why it ended, for a person; `infrastructure`: the failure was the infrastructure's
    # (trainrun.logic.job_failure), not the workload's.
    why: str | None = None
    infrastructure: bool = False


class JobRecord(BaseModel):
    """What the run record keeps of one job (compile or train)."""

    model_config = ConfigDict(extra="ignore")

    # Which submission of the job this is: 1, then one more per resubmission (workload.retries);
    # the fields below are the current attempt's, `attempts` the ones that ended before it.
    attempt: int = 1
    attempts: list[Attempt] = Field(default_factory=list)
    # Slurm's state for the current attempt once Check found it ended (the end marker carries it too).
    slurm_state: str | None = None
    # Visits of "Resume train" that waited for this attempt's end to be recorded (trainrun.steps.resume).
    resume_polls: int = 0

    # The waiting state's task token: the progress handler completes it when the job ends.
    task_token: str | None = None
    command_id: str | None = None
    slurm_job_id: int | None = None
    submitted_at: datetime | None = None
    ended_at: datetime | None = None
    exit_code: int | None = None
    state: Literal["SUBMITTED", "SUCCEEDED", "FAILED"] | None = None
    # The job's end key (trainrun.model.end_marker): a secret that signs its end marker. It lives here and in
    # the head node's root end watcher only; it is never logged, published or returned.
    end_key: str | None = Field(default=None, repr=False)


class TrainPoint(BaseModel):
    """One point of the training history kept for plots."""

    model_config = ConfigDict(frozen=True)

    step: int
    loss: float | None
    learning_rate: float | None
    throughput: float | None


class AttemptProgress(BaseModel):
    """What one attempt's log lines said: the steps it ran and its failure signatures. A line is
    the attempt's that the run record names current when its batch is applied (the attempt before
    has ended, its end marker applied, before a resubmission exists)."""

    model_config = ConfigDict(extra="ignore")

    number: int
    first_step: int | None = None
    last_step: int | None = None
    failures: list[str] = Field(default_factory=list)
    # From the attempt's authentic end marker: its Slurm job, and Slurm's state when it ended.
    slurm_job_id: int | None = None
    end_state: str | None = None


class JobProgress(BaseModel):
    """What the job's logs said so far: monotonic, whatever order batches arrive in."""

    model_config = ConfigDict(extra="ignore")

    # The highest CloudWatch Logs event id applied, and the id ranges of the batches applied
    # (trainrun.steps.progress): an event inside one of them is a redelivery.
    last_event_id: str | None = None
    applied_ranges: list[tuple[str, str]] = Field(default_factory=list)
    # An EKS run's job logs one stream per pod: each pod's applied ranges, by `<Job>/<index>`
    # (event ids of different streams interleave, so one list of ranges would mix them up).
    applied_ranges_by_source: dict[str, list[tuple[str, str]]] = Field(default_factory=dict)
    lines: int = 0
    unparsed_lines: int = 0
    compile_graphs: int | None = None
    compile_succeeded: int | None = None
    compile_failed: int | None = None
    # The distinct NEFFs the job found in the Neuron compile cache, and found there as failed
    # compilations (ids: trainrun.logic.job_log.CacheEvent.neff_id), sorted, at most job_log.MAX_CACHE_NEFFS each.
    cache_hit_neffs: list[str] = Field(default_factory=list)
    cached_failed_neffs: list[str] = Field(default_factory=list)
    epoch: int | None = None
    step: int | None = None
    loss: float | None = None
    learning_rate: float | None = None
    throughput: float | None = None
    checkpoints: int = 0
    # Training lines without a step (Hugging Face Trainer's dicts): their steps are counted
    # (trainrun.logic.job_log.JobLogSummary.counted_steps), in the order their batches were applied.
    counted_steps: int = 0
    # Set once, when the train job printed NO_PROGRESS_LINES lines and none carried progress
    # (trainrun.steps.progress): what `watch`, `status` and the run event `no_progress` say.
    no_progress_notice: str | None = None
    # From the job's authentic end marker, once it arrived: the job is over.
    slurm_job_id: int | None = None
    exit_code: int | None = None
    # End markers that were not authentic (forged, foreign or stale) and were ignored.
    rejected_end_markers: int = 0
    # Training lines whose step was beyond workload.total_steps or implausible, ignored.
    rejected_steps: int = 0
    failures: list[str] = Field(default_factory=list)
    # The first failure line and exception seen, and the log's last lines (bounded, see
    # trainrun.steps.progress): the failure cause needs them when the end marker comes in a later batch.
    first_failure: str | None = None
    exception: str | None = None
    tail: list[str] = Field(default_factory=list)
    history: list[TrainPoint] = Field(default_factory=list)
    last_heartbeat_at: datetime | None = None
    # Per attempt of the job (one unless it was resubmitted; at most workload.retries + 1).
    attempts: list[AttemptProgress] = Field(default_factory=list)
