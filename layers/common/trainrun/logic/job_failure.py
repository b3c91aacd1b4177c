"""Why a job failed: the infrastructure (worth resubmitting once the cluster has its nodes back)
or the workload itself (resubmitting would fail the same way).

Pure: it reads what Slurm said of the job (its state when it ended) and the failure signatures
its log lines matched (trainrun.logic.job_log). An infrastructure failure is one of

- a node lost under the job: Slurm ends it NODE_FAIL (or BOOT_FAIL: a node never came up), or
  its log says so (`node_failure`: `srun: error: Node failure on ...`, `... DUE TO NODE FAILURE`);
- a Neuron runtime or device error (`neuron_runtime_error`: the runtime's `ERROR NRT:` /
  `TDRV:` lines, NRT status codes such as NRT_HW_ERROR or NRT_TIMEOUT), unless the job also ran
  out of memory (`out_of_memory`): the runtime reports a model too large for the device's memory
  (`Failed to alloc DEVICE memory`, NRT_RESOURCE) as its own error, and a resubmission would
  fail the same way; and unless the runtime's status blames the workload (`neuron_workload_error`:
  a NaN produced, NRT_EXEC_COMPLETED_WITH_NUM_ERR; an invalid NEFF or input; an out-of-bounds
  copy), which the same graph and data would hit again;
- an EFA error (`efa_error`: libfabric's EFA provider, the OFI plugin, the collectives).

Anything else is the workload's: a Python traceback with none of these signatures, out of
memory, an exit without any signature. ParallelCluster's cluster management daemon on the head
node (clustermgtd, in aws-parallelcluster-node) replaces an unhealthy static node on its own,
bootstrapping the new instance within its node_replacement_timeout; the job that ran on it is lost
with it, and a resubmission resumes from its checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable

# Slurm job states that mean a node of the job failed (Slurm's squeue(1) JOB STATE CODES).
NODE_FAILURE_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL"})
# Failure signatures (trainrun.logic.job_log) of the infrastructure, with what each means for a person.
INFRASTRUCTURE_SIGNATURES = {
    "node_failure": "a node of the job failed",
    "neuron_runtime_error": "a Neuron runtime or device error",
    "efa_error": "an EFA network error",
}

# Signatures that make a Neuron runtime error the workload's own: a resubmission would repeat it.
WORKLOAD_NEURON_SIGNATURES = frozenset({"out_of_memory", "neuron_workload_error"})


def infrastructure_failure(
    slurm_state: str | None, signatures: Iterable[str], *, scheduler: str = "Slurm"
) -> str | None:
    """What infrastructure failed under the job, for a person; None when the failure is the
    workload's own (or nothing says it is not). `scheduler`: who said how the job ended (an EKS
    run's state is the Kubernetes Job's, in Slurm's words: trainrun.steps.kubernetes)."""
    if slurm_state in NODE_FAILURE_STATES:
        return f"{scheduler} ended the job {slurm_state}: a node of the job failed"
    seen = set(signatures)
    if seen & WORKLOAD_NEURON_SIGNATURES:
        seen.discard("neuron_runtime_error")
    found = [name for name in INFRASTRUCTURE_SIGNATURES if name in seen]
    if found:
        return "; ".join(f"{INFRASTRUCTURE_SIGNATURES[name]} ({name} in its log)" for name in found)
    return None


def workload_failure(
    slurm_state: str | None, exit_code: int | None, signatures: Iterable[str], *, scheduler: str = "Slurm"
) -> str:
    """Why the job failed when the infrastructure did not, for a person."""
    state = f"{scheduler} state {slurm_state}" if slurm_state else f"{scheduler} state unknown"
    code = f"exit code {exit_code}" if exit_code is not None else "exit code unknown"
    names = list(signatures)
    found = f"; failure signatures: {', '.join(names)}" if names else "; no failure signature in its log"
    return f"the workload failed ({state}, {code}{found})"
