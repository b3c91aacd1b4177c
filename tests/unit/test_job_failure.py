"""Why a job failed: the log lines that name the infrastructure (trainrun.logic.job_log's
signatures) and the classification that decides a resubmission (trainrun.logic.job_failure)."""

from __future__ import annotations

import pytest

from trainrun.logic.job_failure import infrastructure_failure, workload_failure
from trainrun.logic.job_log import FailureEvent, JobLogSummary, parse_line

from .test_joblog import FIXTURES as JOBLOGS

# Lines as Slurm, libfabric's EFA provider, the OFI plugin and the Neuron runtime print them
# (public reports: GoogleCloudPlatform/cluster-toolkit#1600, aws/aws-ofi-nccl#20 and #889,
# huggingface/optimum-neuron#761); srun --label and torchrun prefixes tolerated as elsewhere.
INFRASTRUCTURE_LINES = {
    "srun: error: Node failure on hpcsmall-debug-ghpc-0": "node_failure",
    "slurmstepd: error: *** JOB 42 ON compute-st-trn1-2 CANCELLED AT 2024-05-21T16:08:34 DUE TO NODE FAILURE, "
    "SEE SLURMCTLD LOG FOR DETAILS ***": "node_failure",
    "Unable to write to EQ: Missing or unavailable event queue. err: Input/output error (5) prov_errno: "
    "Unknown error -114 (-114) prov/rxr/src/rxr.h:1042": "efa_error",
    "nccl_net_ofi_domain_get_ep:969 NCCL WARN NET/OFI Creating new endpoint for domain 0x7f9befa99380 "
    "failed: Invalid argument": "efa_error",
    "2025-Jan-16 00:39:18.628881 31598:33752 ERROR   ENC:enc_init_comm  global comm (2) has less channels "
    "than this replica group (4) :likely not enough EFA devices found": "efa_error",
    "0: 2024-May-21 16:08:34.200978 58093:58093 ERROR   NRT:nrt_infodump   NRT version: 2.20.22.0": (
        "neuron_runtime_error"
    ),
}
# Lines that look alike but name no infrastructure failure.
ORDINARY_LINES = [
    "srun: error: queue1-st-trn1-1: task 0: Exited with exit code 1",
    "libfabric EFA provider selected for 32 devices",
    "NET/OFI Selected Provider is efa (found 8 nics)",
    "Node failure rate is a metric of the cluster dashboard",
]


@pytest.mark.parametrize(("line", "signature"), INFRASTRUCTURE_LINES.items())
def test_each_infrastructure_line_has_its_signature(line: str, signature: str) -> None:
    event = parse_line(line)
    assert isinstance(event, FailureEvent) and signature in event.signatures


@pytest.mark.parametrize("line", ORDINARY_LINES)
def test_alike_lines_are_no_infrastructure_signature(line: str) -> None:
    event = parse_line(line)
    signatures = event.signatures if isinstance(event, FailureEvent) else ()
    assert not {"node_failure", "efa_error", "neuron_runtime_error"} & set(signatures)


@pytest.mark.parametrize(
    ("state", "signatures", "meaning"),
    [
        ("NODE_FAIL", [], "Slurm ended the job NODE_FAIL"),
        ("BOOT_FAIL", ["traceback"], "Slurm ended the job BOOT_FAIL"),
        ("FAILED", ["node_failure", "srun_error"], "a node of the job failed (node_failure in its log)"),
        ("FAILED", ["efa_error", "traceback"], "an EFA network error (efa_error in its log)"),
        (None, ["neuron_runtime_error"], "a Neuron runtime or device error (neuron_runtime_error in its log)"),
    ],
)
def test_the_infrastructure_failures(state: str | None, signatures: list[str], meaning: str) -> None:
    why = infrastructure_failure(state, signatures)
    assert why is not None and meaning in why


@pytest.mark.parametrize(
    ("state", "signatures"),
    [
        ("FAILED", ["traceback"]),  # a Python exception in the user's code
        ("FAILED", []),  # an exit without any signature
        ("COMPLETED", ["srun_error"]),  # a task's non-zero exit, as srun reports it
        ("CANCELLED", []),
        ("TIMEOUT", []),
        (None, []),
        # The runtime's own words for a model too large for the device: out of memory, not a broken device
        ("FAILED", ["neuron_runtime_error", "traceback", "out_of_memory", "srun_error"]),
        # The runtime's status for a NaN the graph produced: the same step would produce it again
        ("FAILED", ["neuron_runtime_error", "neuron_workload_error", "traceback"]),
    ],
)
def test_the_workloads_own_failures(state: str | None, signatures: list[str]) -> None:
    assert infrastructure_failure(state, signatures) is None
    assert workload_failure(state, 1, signatures).startswith("the workload failed")


def test_the_recorded_device_out_of_memory_is_the_workloads_failure() -> None:
    summary = JobLogSummary().feed_text((JOBLOGS / "train_bert_failed.out").read_text())
    assert "neuron_runtime_error" in summary.failures and "out_of_memory" in summary.failures
    assert infrastructure_failure("FAILED", summary.failures) is None


def test_a_workload_failure_says_what_is_known() -> None:
    assert workload_failure("FAILED", 1, ["traceback"]) == (
        "the workload failed (Slurm state FAILED, exit code 1; failure signatures: traceback)"
    )
    assert workload_failure(None, None, []) == (
        "the workload failed (Slurm state unknown, exit code unknown; no failure signature in its log)"
    )
