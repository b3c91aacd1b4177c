"""Resume after failure through the real state machine: a train job the infrastructure failed is
resubmitted once the cluster has its nodes back, as a new Slurm job that resumes from the run's
checkpoint; one the workload failed is not. The head node is scripted
(tests/integration/scripted_head_node.py); the real Slurm one loses a node in tests/e2e.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from trainrun.local.runtime import LocalRuntime
from trainrun.workflow import State

from .conftest import EXAMPLES, run_to_end
from .scripted_head_node import NODE_FAILURE, NODE_FAILURE_LINE, ScriptedCluster, ScriptedJob, recorded_log
from .test_provisioning import remaining

TRAIN = recorded_log("train_bert_ok.out")
_STEP = re.compile(r"\(0, (\d+)\) step_loss")


def steps(first: int, last: int) -> list[str]:
    """The recorded training log with only the lines of steps first..last (and every other line)."""
    kept = []
    for line in TRAIN:
        match = _STEP.search(line)
        if match is None or first <= int(match.group(1)) <= last:
            kept.append(line)
    return kept


def resumable(**workload: Any) -> bytes:
    document = yaml.safe_load((EXAMPLES / "single-node.yaml").read_text())
    document["workload"].update({"resume": "python3 train.py --steps 40 --resume", **workload})
    return yaml.safe_dump(document).encode()


def test_a_node_failure_is_resubmitted_once_the_nodes_are_back_and_resumes_from_its_checkpoint(
    runtime: LocalRuntime, cluster: ScriptedCluster
) -> None:
    # Given a train job that loses a node after step 22 (its checkpoint: step 20), and whose
    # resubmission resumes after the checkpoint; the replaced node is idle after two looks
    cluster.jobs["train"] = ScriptedJob([*steps(1, 22), NODE_FAILURE_LINE], **NODE_FAILURE)
    cluster.jobs["train-2"] = ScriptedJob(steps(21, 40))
    cluster.nodes_missing_for_checks = 2
    started, summary = run_to_end(runtime, resumable())
    # Then the run succeeds after waiting for the nodes and submitting the job again
    assert summary.status == "SUCCEEDED", summary.error
    after_train = summary.states[summary.states.index(State.TRAIN) :]
    assert after_train[:4] == [State.TRAIN, State.RESUME_TRAIN, State.TRAIN_RESUBMITTED, State.WAIT_FOR_NODES]
    assert after_train.count(State.WAIT_FOR_NODES) == 2
    assert after_train.count(State.TRAIN) == 2 and State.HAND_THE_TRAIN_FAILURE_ON not in after_train
    # As a second Slurm job of its own name, once
    (head_node,) = cluster.head_nodes
    assert sorted(head_node.slurm_jobs) == ["compile", "train", "train-2"]
    assert head_node.slurm_jobs["train-2"].name == f"trainrun-{started.run_id}-train-2"
    # And the progress is truthful: two attempts, the second from after the checkpoint, the step never back
    train = summary.progress.train
    assert train is not None and train.attempts == 2 and train.step == 40
    first, second = train.attempt_history
    assert (first.number, first.state, first.first_step, first.last_step) == (1, "NODE_FAIL", 1, 22)
    assert first.why is not None and "a node of the job failed" in first.why
    assert (second.number, second.first_step, second.last_step, second.why) == (2, 21, 40, None)
    assert first.slurm_job_id != second.slurm_job_id
    assert remaining(runtime, started.run_id) == []


def test_a_failure_in_the_workload_is_not_resubmitted(runtime: LocalRuntime, cluster: ScriptedCluster) -> None:
    # Given a run that may resume, whose train job runs out of device memory (the Neuron runtime's
    # errors, then a Python traceback) and exits 1
    cluster.jobs["train"] = ScriptedJob(recorded_log("train_bert_failed.out"), exit_code=1)
    started, summary = run_to_end(runtime, resumable())
    # Then the run fails with the job's failure, after one attempt, without waiting for nodes
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "JobFailed"
    assert "traceback" in summary.error["cause"]
    after_train = summary.states[summary.states.index(State.TRAIN) :]
    assert after_train[:4] == [
        State.TRAIN,
        State.RESUME_TRAIN,
        State.TRAIN_RESUBMITTED,
        State.HAND_THE_TRAIN_FAILURE_ON,
    ]
    assert State.WAIT_FOR_NODES not in after_train and after_train.count(State.TRAIN) == 1
    (head_node,) = cluster.head_nodes
    assert sorted(head_node.slurm_jobs) == ["compile", "train"]
    record = runtime.store().get(started.run_id)
    assert record is not None and record.job_train is not None
    (attempt,) = record.job_train.attempts
    assert not attempt.infrastructure and attempt.why is not None and "the workload failed" in attempt.why
    assert remaining(runtime, started.run_id) == []


def test_resubmissions_stop_at_workload_retries(runtime: LocalRuntime, cluster: ScriptedCluster) -> None:
    # Given a run allowed one resubmission, whose every attempt loses a node
    cluster.jobs["train"] = ScriptedJob([*steps(1, 5), NODE_FAILURE_LINE], **NODE_FAILURE)
    started, summary = run_to_end(runtime, resumable(retries=1))
    # Then it is submitted twice, and fails with the second attempt's node failure
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "JobFailed"
    assert "(Slurm state NODE_FAIL)" in summary.error["cause"]
    (head_node,) = cluster.head_nodes
    assert sorted(head_node.slurm_jobs) == ["compile", "train", "train-2"]
    record = runtime.store().get(started.run_id)
    assert record is not None and record.job_train is not None
    assert [(a.number, a.infrastructure) for a in record.job_train.attempts] == [(1, True), (2, True)]
    assert "no resubmission left (workload.retries: 1)" in (record.job_train.attempts[-1].why or "")
    assert remaining(runtime, started.run_id) == []
