"""A scripted head node for the workflow harness: answers the control plane's SSM scripts and
plays each job by shipping a recorded job log (tests/fixtures/joblogs) to the jobs log group.

It does what a head node says, not what it does: no shell, no Slurm. The scripts are told
apart by their rendered header line (trainrun.logic.head_node_scripts); the answers are the lines the
parsers read. The real thing (bash and Slurm) is trainrun.local.slurm_head_node, exercised by the
end-to-end tests.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trainrun.local.head_node_lifecycle import HeadNodeRequest, Ship
from trainrun.local.slurm_head_node import CommandRun, OnNodeConfiguredFailed
from trainrun.model.end_marker import end_marker
from trainrun.model.jobs import JobKind, log_stream_name

JOBLOGS = Path(__file__).resolve().parents[1] / "fixtures" / "joblogs"
_PREPARE = re.compile(r"^# trainrun: prepare the head node for run (?P<run_id>\S+)\. ")
_SUBMIT = re.compile(r"^# trainrun: submit the (?P<job>compile|train) job of run (?P<run_id>\S+)\. ")
_STATUS = re.compile(r"^# trainrun: the state of Slurm job (?P<slurm_job_id>\d+)\. ")
_EXPORT = re.compile(r"^# trainrun: export the checkpoints of run (?P<run_id>\S+)\. ")
_NODES = re.compile(r"^# trainrun: the compute nodes of run (?P<run_id>\S+)\. ")
_STOP = re.compile(r"^# trainrun: stop Slurm job (?P<slurm_job_id>\d+)\. ")
# The Slurm job name the submit script asks for: a resubmission's names its attempt (trainrun-<run>-train-2).
_DESTINATION = re.compile(r"^destination='?(?P<destination>s3://[^'\s]+)'?$", re.MULTILINE)
_JOB_NAME = re.compile(r"^job_name='?trainrun-\S+?-(?P<job>compile|train)(?:-(?P<attempt>[0-9]+))?'?$", re.MULTILINE)
_LOG_GROUP = re.compile(r'"log_group_name": "(?P<group>[^"]+)"')
# The end key the submit script hands its (root) end watcher: an assignment of its root header.
_END_KEY = re.compile(r"^end_key='?(?P<key>[0-9a-f]{64})'?$", re.MULTILINE)
# How long a job that waits for a check waits at most.
CHECK_PATIENCE_SECONDS = 60.0
# How long compute nodes that boot until the head node is prepared boot at most.
BOOT_PATIENCE_SECONDS = 30.0


def recorded_log(name: str) -> list[str]:
    """A job log in the Neuron tutorials' format, without its own end marker (the head node adds one)."""
    return [line for line in (JOBLOGS / name).read_text().splitlines() if not line.startswith("TRAINRUN-END")]


@dataclass
class ScriptedJob:
    """How a job behaves: what it prints, how it ends, and whether its end reaches the logs."""

    lines: list[str]
    exit_code: int = 0
    # Seconds of silence before the job prints anything (longer than the heartbeat: checked with Slurm).
    silent_seconds: float = 0.0
    # ... and until Slurm has been asked about it this many times: a check is sure to find it
    # running, however late a loaded machine fires the heartbeat.
    silent_until_checked: int = 0
    # The end marker never reaches the logs (the agent died, the line was lost).
    lose_end_marker: bool = False
    slurm_state: str = ""
    # Slurm has forgotten the job when it is checked (MinJobAge passed, no accounting): the
    # status script finds only the end watcher's record on /fsx.
    slurm_forgets: bool = False


# A node lost under the job: Slurm's state and srun's line (trainrun.logic.job_failure).
NODE_FAILURE = {"exit_code": 143, "slurm_state": "NODE_FAIL"}
NODE_FAILURE_LINE = "srun: error: Node failure on compute-st-trn1-2"


@dataclass
class SlurmJob:
    slurm_job_id: int
    name: str
    state: str = "RUNNING"
    exit_code: int = -1
    end_key: str = ""
    # The end watcher's signed record on /fsx, once the job ended.
    end_record: str | None = None
    forgotten: bool = False
    # scancel'ed (the budget guard, a reservation's end): the job prints nothing more.
    stopped: bool = False
    checked: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))


@dataclass
class ScriptedHeadNode:
    request: HeadNodeRequest
    jobs: dict[str, ScriptedJob]
    # The stderr of a failing preparation (None: it succeeds).
    prepare_failure: str | None = None
    # The reason its OnNodeConfigured fails with, once the preparation has been sent (None: it
    # succeeds); the preparation then runs until the head node stops, and dies with it.
    node_configured_failure: str | None = None
    ship: Ship | None = None
    log_group: str | None = None
    scripts: list[str] = field(default_factory=list)
    # The OnNodeConfigured scripts and args the cluster's head node was given, in order (not run: no shell here).
    on_node_configured: list[tuple[str, list[str]]] = field(default_factory=list)
    # The queue's, which each compute node was given (not run either).
    compute_on_node_configured: list[tuple[str, list[str]]] | None = None
    # By the job's kind, and attempt after the first ("train-2"): each attempt is a Slurm job of its own.
    slurm_jobs: dict[str, SlurmJob] = field(default_factory=dict)
    job_states_at_stop: dict[str, str] | None = None
    # How many times sinfo says a node is not idle yet before the cluster has all its nodes back.
    nodes_missing_for_checks: int = 0
    node_checks: int = 0
    # The files the jobs saved in the checkpoint directory (relative path -> bytes), and how the
    # export puts one (s3:// URL, bytes): the head node's copy is played by the test's S3 client.
    checkpoints: dict[str, bytes] = field(default_factory=dict)
    put_checkpoint: Callable[[str, bytes], None] | None = None
    # The compute nodes boot until the preparation has run (at most BOOT_PATIENCE_SECONDS), and
    # whether it ran while they booted, i.e. before the cluster's creation completed.
    boot_until_prepared: bool = False
    prepared_while_booting: bool | None = None
    prepared: threading.Event = field(default_factory=threading.Event)
    stopped: threading.Event = field(default_factory=threading.Event)
    # Called when the checkpoint export's script arrives, before it answers.
    on_export: Callable[[], None] | None = None
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(101))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, ship: Ship) -> None:
        self.ship = ship

    def stop(self) -> None:
        self.ship = None
        self.stopped.set()
        # What Slurm ran when the cluster went away: a job still RUNNING was cut off.
        self.job_states_at_stop = {name: job.state for name, job in self.slurm_jobs.items()}

    def fail_job(self, job: str) -> None:
        self.jobs[job].exit_code = 1

    def mount_file_system(self) -> None:
        pass  # no shell, no /fsx: the preparation's wait for the mount is the local head node's to show

    def run_on_node_configured(self, script_uri: str, args: list[str]) -> None:
        self.on_node_configured.append((script_uri, args))
        if self.node_configured_failure is not None:
            self.prepared.wait(timeout=BOOT_PATIENCE_SECONDS)
            raise OnNodeConfiguredFailed("OnNodeConfiguredExecutionFailure", self.node_configured_failure)

    def bootstrap_compute_nodes(self, scripts: list[tuple[str, list[str]]], on_protected: Callable[[], None]) -> None:
        self.compute_on_node_configured = scripts
        if self.boot_until_prepared:
            # The compute nodes take their time: long enough for a preparation sent meanwhile to end.
            self.prepared_while_booting = self.prepared.wait(timeout=BOOT_PATIENCE_SECONDS)
            if self.prepare_failure is not None:
                # ...and after a failed one, until the teardown stops them: the creation never
                # completes, whatever the time the failure takes to reach the workflow.
                self.stopped.wait(timeout=BOOT_PATIENCE_SECONDS)

    def run_script(self, script: str, run: CommandRun) -> None:
        self.scripts.append(script)
        header = script.splitlines()[0]
        if match := _PREPARE.match(header):
            self.prepared.set()
            if self.node_configured_failure is not None:
                self.stopped.wait(timeout=BOOT_PATIENCE_SECONDS)
                run.stderr, run.status, run.response_code = "Session terminated, killing shell...", "Failed", 143
                return
            if self.prepare_failure is not None:
                run.stderr, run.status, run.response_code = self.prepare_failure, "Failed", 1
                return
            group = _LOG_GROUP.search(script)
            self.log_group = group["group"] if group else None
            run.stdout = f"TRAINRUN-STEP cloudwatch-agent\nTRAINRUN-PREPARED run={match['run_id']}\n"
        elif match := _SUBMIT.match(header):
            key = _END_KEY.search(script)
            name = _JOB_NAME.search(script)
            attempt = f"-{name['attempt']}" if name is not None and name["attempt"] else ""
            run.stdout = self._submit(match["run_id"], match["job"], key["key"] if key else "", attempt)
        elif match := _NODES.match(header):
            nodes = len(self.request.nodes)
            self.node_checks += 1
            idle = nodes - 1 if self.node_checks <= self.nodes_missing_for_checks else nodes
            run.stdout = f"TRAINRUN-NODES total={nodes} idle={idle}\n"
        elif match := _STATUS.match(header):
            job = self._slurm_job(int(match["slurm_job_id"]))
            known = job is not None and not job.forgotten
            state, code = (job.state, job.exit_code) if job is not None and known else ("UNKNOWN", -1)
            run.stdout = f"TRAINRUN-JOB-STATE slurm_job_id={match['slurm_job_id']} state={state} exit_code={code}\n"
            if job is not None:
                job.checked.release()
            if job is not None and not known and job.end_record is not None:
                run.stdout += f"TRAINRUN-JOB-RECORD {job.end_record}\n"
        elif match := _STOP.match(header):
            job = self._slurm_job(int(match["slurm_job_id"]))
            if job is not None and job.state == "RUNNING":
                # scancel: SIGTERM, the job's handler exits 128 + 15 within KillWait.
                job.stopped, job.state, job.exit_code = True, "CANCELLED", 143
                job.checked.release()
            state, code = (job.state, job.exit_code) if job is not None else ("UNKNOWN", -1)
            run.stdout = f"TRAINRUN-JOB-STATE slurm_job_id={match['slurm_job_id']} state={state} exit_code={code}\n"
        elif _EXPORT.match(header):
            if self.on_export is not None:
                self.on_export()
            destination = _DESTINATION.search(script)
            if not self.checkpoints or self.put_checkpoint is None or destination is None:
                # The scripted jobs save no checkpoints: the export finds nothing to copy.
                run.stdout = "TRAINRUN-CHECKPOINTS none\n"
            else:
                # What `aws s3 cp --recursive` puts: each file at the destination + its relative path.
                for name, body in self.checkpoints.items():
                    self.put_checkpoint(destination["destination"] + name, body)
                run.stdout = f"TRAINRUN-CHECKPOINTS exported files={len(self.checkpoints)}\n"
        else:
            run.stderr, run.status, run.response_code = f"unexpected script: {header}", "Failed", 1
            return
        run.status, run.response_code = "Success", 0

    def _slurm_job(self, slurm_job_id: int) -> SlurmJob | None:
        return next((job for job in self.slurm_jobs.values() if job.slurm_job_id == slurm_job_id), None)

    def _submit(self, run_id: str, job: str, end_key: str, attempt: str = "") -> str:
        # As the submit script: a job of the same name is the one submitted before. The jobs of a
        # run on this cluster's own run are kept by kind (and attempt), another run's (cluster.reuse)
        # under its run id too.
        key = job + attempt if run_id == self.request.run_id else f"{run_id}/{job}{attempt}"
        with self._lock:
            existing = self.slurm_jobs.get(key)
            if existing is not None:
                return f"TRAINRUN-SUBMITTED job={job} slurm_job_id={existing.slurm_job_id} existing=true\n"
            slurm_job = SlurmJob(next(self._ids), f"trainrun-{run_id}-{job}{attempt}", end_key=end_key)
            self.slurm_jobs[key] = slurm_job
        kind: JobKind = "compile" if job == "compile" else "train"
        script = self.jobs.get(job + attempt, self.jobs[job])
        threading.Thread(target=self._play, args=(run_id, kind, slurm_job, script), daemon=True).start()
        return f"TRAINRUN-SUBMITTED job={job} slurm_job_id={slurm_job.slurm_job_id} existing=false\n"

    def _play(self, run_id: str, job: JobKind, slurm_job: SlurmJob, script: ScriptedJob) -> None:
        time.sleep(script.silent_seconds)
        for _ in range(script.silent_until_checked):
            # Never asked: end anyway, and let the test's assertions say what went wrong.
            slurm_job.checked.acquire(timeout=CHECK_PATIENCE_SECONDS)
        if slurm_job.stopped:
            return
        # A job's own lines may name its run and Slurm job (a forger's would).
        lines = [
            line.replace("{run_id}", run_id).replace("{slurm_job_id}", str(slurm_job.slurm_job_id))
            for line in script.lines
        ]
        state = script.slurm_state or ("COMPLETED" if script.exit_code == 0 else "FAILED")
        # What the head node's end watcher signs and writes (trainrun.model.end_marker).
        slurm_job.end_record = end_marker(
            slurm_job.end_key,
            run_id=run_id,
            job=job,
            slurm_job_id=slurm_job.slurm_job_id,
            exit_code=script.exit_code,
            state=state,
            ended_at=int(time.time()),
        )
        if not script.lose_end_marker:
            lines.append(slurm_job.end_record)
        # Slurm knows the job ended before its last lines reach CloudWatch Logs.
        slurm_job.exit_code = script.exit_code
        slurm_job.state = state
        slurm_job.forgotten = script.slurm_forgets
        ship = self.ship
        if ship is not None and self.log_group is not None:
            # The nodes of another run's cluster write under that run's id (cluster.reuse).
            stream = log_stream_name(run_id, job, cluster_run_id=self.request.run_id)
            ship(self.log_group, stream, lines)


@dataclass
class ScriptedCluster:
    """The head node factory for the harness; set `jobs` before a run to script its jobs."""

    jobs: dict[str, ScriptedJob] = field(
        default_factory=lambda: {
            "compile": ScriptedJob(recorded_log("compile_bert_ok.out")),
            "train": ScriptedJob(recorded_log("train_bert_ok.out")),
        }
    )
    prepare_failure: str | None = None
    # How many times each head node's sinfo says a node is not idle yet (a replacement coming up).
    nodes_missing_for_checks: int = 0
    boot_until_prepared: bool = False
    on_export: Callable[[], None] | None = None
    node_configured_failure: str | None = None
    head_nodes: list[ScriptedHeadNode] = field(default_factory=list)
    # What every head node's export finds in the checkpoint directory, and how it puts a file.
    checkpoints: dict[str, bytes] = field(default_factory=dict)
    put_checkpoint: Callable[[str, bytes], None] | None = None

    def __call__(self, request: HeadNodeRequest) -> ScriptedHeadNode:
        head_node = ScriptedHeadNode(request, self.jobs, self.prepare_failure)
        head_node.nodes_missing_for_checks = self.nodes_missing_for_checks
        head_node.checkpoints, head_node.put_checkpoint = self.checkpoints, self.put_checkpoint
        head_node.boot_until_prepared = self.boot_until_prepared
        head_node.on_export, head_node.node_configured_failure = self.on_export, self.node_configured_failure
        self.head_nodes.append(head_node)
        return head_node


class ClusterOfEachTest:
    """The head node factory of a runtime that a module's tests share: each run's head node is
    scripted by the ScriptedCluster of the test (or fixture) that started the run, as if the
    runtime were the test's own. Set `cluster` before a run; a head node keeps the jobs it was
    given, whichever test comes next."""

    def __init__(self) -> None:
        self.cluster = ScriptedCluster()

    def __call__(self, request: HeadNodeRequest) -> ScriptedHeadNode:
        return self.cluster(request)
