"""Whole runs on the local runtime with the real head node that cannot share test_local_run.py's
runtime: rehearsed failures (fail_at rewrites the state machine; they share a runtime of their own,
each undoing its rehearsal) and runs on other stack parameters (a runtime each). A module apart, so
that `--dist loadfile` runs it and test_local_run.py on two workers.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from trainrun.local.fixture import AccountFixture
from trainrun.local.runtime import LocalRuntime
from trainrun.local.summary import summarize
from trainrun.workflow import State

from .conftest import NEEDS_LOCAL_HEAD_NODE
from .test_local_run import account, run, run_file

pytestmark = NEEDS_LOCAL_HEAD_NODE

__all__ = ["account"]


# The states where the head node matters: from the cluster's creation on, a failure must also stop
# Slurm and its jobs. A failure at an earlier state (before any head node exists) ends FAILED with
# its error and leaves nothing in tests/integration (test_workflow.py: Load run spec, Validate
# capacity; test_provisioning.py: Create network, Create file system, Link data repository). A
# failed Tear down after a successful training leaves the run SUCCEEDED with its teardown error
# (tests/integration/test_provisioning.py), not FAILED.
HEAD_NODE_STATES = [State.CREATE_CLUSTER, State.PREPARE_HEAD_NODE, State.COMPILE, State.TRAIN, State.RECORD_SUCCESS]


# One runtime for the failures fail_at rehearses (TestRehearsedFailures): starting and stopping a
# local stack costs seconds a test. Scoped to their class, so that it is stopped before the tests
# after it start their own (two local runtimes cannot be up at once in one process).
@pytest.fixture(scope="class")
def rehearsals_runtime(account: AccountFixture) -> Iterator[LocalRuntime]:
    with LocalRuntime(account) as local:
        yield local


@pytest.fixture
def rehearsing(rehearsals_runtime: LocalRuntime) -> Iterator[LocalRuntime]:
    """The rehearsals' runtime, its run workflow as deployed; the failure a test arms with fail_at
    is undone at its end (the state machine's definition put back, no job left to fail), so that
    each rehearsal fails at its own state only."""
    yield rehearsals_runtime
    rehearsals_runtime.undo_failures()


class TestRehearsedFailures:
    """The failures fail_at rehearses, one after another on the runtime they share."""

    @pytest.mark.parametrize("state", HEAD_NODE_STATES)
    def test_a_failure_at_any_state_ends_failed_with_its_error_and_leaves_nothing(
        self, rehearsing: LocalRuntime, state: str
    ) -> None:
        rehearsing.fail_at(state)
        summary = run(rehearsing, run_file(), f"runs/fail-at-{state.lower().replace(' ', '-')}.yaml")
        assert summary.status == "FAILED"
        assert summary.error is not None
        if state in (State.COMPILE, State.TRAIN):
            # The job itself exits 1 (the rehearsal srun): the progress function fails the state
            assert summary.error["error"] == "JobFailed"
            assert f"{state.lower()} job" in summary.error["cause"]
            assert "exited with code 1" in summary.error["cause"] and "srun_error" in summary.error["cause"]
        else:
            assert summary.error["error"] == "InjectedFailure", summary.error
            assert state in summary.error["cause"]
        assert summary.resources.remaining == []
        # Nor is its head node left running: the runtime, shared, would carry it into the next rehearsal
        assert rehearsing.head_nodes is not None and rehearsing.head_nodes.running() == []


def test_a_run_whose_compute_node_bootstrap_fails_ends_failed_with_the_nodes_reason_and_leaves_nothing(
    account: AccountFixture,
) -> None:
    # Given a stack whose node script (NeuronInstallScriptUri) fails on compute nodes only
    parameters = {"NeuronInstallScriptUri": "s3://trainrun-examples/no-driver.sh"}
    with LocalRuntime(account, parameters=parameters) as local:
        local.client("s3").put_object(
            Bucket="trainrun-examples",
            Key="no-driver.sh",
            Body=b"#!/bin/sh\n[ \"$1\" != ComputeFleet ] || { echo 'E: no Neuron driver' >&2; exit 1; }\n",
        )
        # When a run starts
        started = local.submit(run_file(), "runs/no-driver.yaml")
        summary = summarize(local, started, local.wait(started.execution_arn, timeout=240))
    # Then the cluster is created, the compile job waits for a node that never comes up, the queue
    # goes into protected mode, and Check compile fails the run with the node's bootstrap error,
    # in minutes of compressed time (not at max_runtime), leaving nothing
    assert summary.status == "FAILED"
    assert summary.error is not None and summary.error["error"] == "ComputeNodesFailed"
    assert "protected mode" in summary.error["cause"]
    assert "Node bootstrap error: Failed to execute OnNodeConfigured script (exit code 1)" in summary.error["cause"]
    assert "E: no Neuron driver" in summary.error["cause"]
    assert State.CHECK_COMPILE in summary.states and State.TRAIN not in summary.states
    assert summary.resources.remaining == []


def test_training_length_does_not_change_the_number_of_state_transitions(account: AccountFixture) -> None:
    # (each declares its real length: a step beyond workload.total_steps is ignored as implausible)
    # The longest heartbeat the template allows: on a loaded machine a log line can take longer
    # than the local default (10 real seconds) to arrive, and the Check it causes is a wait
    # round, not a cost of the training's length.
    with LocalRuntime(account, parameters={"JobHeartbeatSeconds": "3600"}) as runtime:
        _assert_same_transitions_for_short_and_long_training(runtime)


def _assert_same_transitions_for_short_and_long_training(runtime: LocalRuntime) -> None:
    short = run(runtime, run_file(train="python3 train.py --steps 10", total_steps=10), "runs/short.yaml")
    long = run(runtime, run_file(train="python3 train.py --steps 150", total_steps=150), "runs/long.yaml")
    assert short.status == long.status == "SUCCEEDED"
    assert long.progress.train is not None and long.progress.train.step == 150
    # The training runs between Compile needed? and Tear down; before it, the workflow polls the
    # cluster, data repository and head node (in parallel) and after it the teardown, for as many
    # rounds as the machine takes: those counts depend on load, not on the training's length.
    assert _job_phase(short.states) == _job_phase(long.states)


def _job_phase(states: list[str]) -> list[str]:
    """The states visited from Compile needed? up to Tear down: where a longer training would show."""
    return states[states.index(State.COMPILE_NEEDED) : states.index(State.TEAR_DOWN)]
