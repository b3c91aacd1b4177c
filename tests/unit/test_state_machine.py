"""The state machine definition's contract: state names, retries, catches, substitutions."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from trainrun.local.template import load_template
from trainrun.workflow import CHECK_STATES, FUNCTIONS, SUBMIT_STATES, State, all_states

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = json.loads((ROOT / "statemachines" / "run.asl.json").read_text())
# Every state, a Parallel state's branches' included (their names are unique in the whole definition).
STATES = all_states(DEFINITION["States"])
PARALLEL = STATES[State.CREATE_CLUSTER_AND_PREPARE_HEAD_NODE]
TASKS = {name: state for name, state in STATES.items() if state["Type"] == "Task"}
# The run's functions (Lambda tasks); "Continue in a new execution" calls Step Functions itself.
FUNCTION_TASKS = {name: state for name, state in TASKS.items() if name in FUNCTIONS}
TRANSIENT = {
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
    "TransientAwsError",
}


def test_every_task_retries_transient_errors_with_backoff_and_jitter() -> None:
    for name, state in FUNCTION_TASKS.items():
        retry = state["Retry"][0]
        assert set(retry["ErrorEquals"]) == TRANSIENT, name
        assert retry["BackoffRate"] > 1 and retry["MaxAttempts"] >= 2, name
        assert retry["JitterStrategy"] == "FULL", name


# Before anything billable exists a failure is recorded at once; after, it goes through teardown.
BEFORE_PROVISIONING = {State.LOAD_RUN_SPEC, State.VALIDATE_CAPACITY, State.RECORD_SUCCESS, State.RECORD_REJECTION}
PROVISIONING = {State.CREATE_NETWORK, State.CREATE_FILE_SYSTEM}
# Side by side in the Parallel state's branches: a failure of one fails the Parallel state, whose catch tears down.
IN_PARALLEL = {
    State.CREATE_CLUSTER,
    State.CREATE_EKS_CLUSTER,
    State.CREATE_NODE_GROUP,
    State.LINK_DATA_REPOSITORY,
    State.PREPARE_HEAD_NODE,
}
# Once the cluster exists, these run on it; a failure goes through teardown as well.
ON_THE_CLUSTER = {State.PREPARE_KUBERNETES, State.CHECK_COMPILE, State.RESUME_TRAIN}
JOBS = {state: job for job, state in SUBMIT_STATES.items()}
# A failed train job (its end marker, or Check) may be resubmitted: its failure goes to Resume train.
TRAIN_FAILED = {"ErrorEquals": ["JobFailed"], "ResultPath": "$.train_failure", "Next": State.RESUME_TRAIN}
TEAR_DOWN_ON_ANY_ERROR = {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": State.TEAR_DOWN}


def test_every_state_before_provisioning_catches_everything_into_record_failure() -> None:
    for name in BEFORE_PROVISIONING:
        last = STATES[name]["Catch"][-1]
        assert last == {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": State.RECORD_FAILURE}, name


def test_every_provisioning_state_catches_everything_into_teardown_keeping_its_input() -> None:
    for name in PROVISIONING | ON_THE_CLUSTER:
        assert STATES[name]["Catch"] == [TEAR_DOWN_ON_ANY_ERROR], name
    # A state in a branch cannot leave it: its failure fails the Parallel state, which tears down
    # (its input kept: the branches' results are dropped, ResultPath null)
    assert PARALLEL["Catch"] == [TEAR_DOWN_ON_ANY_ERROR]
    assert PARALLEL["ResultPath"] is None
    for name in IN_PARALLEL:
        assert "Catch" not in STATES[name], name
    # Check train too, but a failed job first goes to Resume train
    assert STATES[State.CHECK_TRAIN]["Catch"] == [TRAIN_FAILED, TEAR_DOWN_ON_ANY_ERROR]


def test_a_train_failure_that_is_not_resubmitted_becomes_the_runs_error_and_goes_to_teardown() -> None:
    resubmitted = STATES[State.TRAIN_RESUBMITTED]
    assert STATES[State.RESUME_TRAIN]["Next"] == State.TRAIN_RESUBMITTED
    assert STATES[State.RESUME_TRAIN]["Parameters"] == {"run_id.$": "$.run_id", "job": "train"}
    assert resubmitted["Choices"] == [
        {"Variable": "$.train_resume.ready", "BooleanEquals": True, "Next": State.TRAIN},
        {"Variable": "$.train_resume.resubmit", "BooleanEquals": False, "Next": State.HAND_THE_TRAIN_FAILURE_ON},
    ]
    # Not ready yet: the nodes are waited for, then Resume train asks again
    assert resubmitted["Default"] == State.WAIT_FOR_NODES
    assert STATES[State.WAIT_FOR_NODES] == {
        "Type": "Wait",
        "SecondsPath": "$.train_resume.retry_after_seconds",
        "Next": State.RESUME_TRAIN,
    }
    # The failure becomes $.error only here: a resubmission that succeeds leaves the run without one
    handed = STATES[State.HAND_THE_TRAIN_FAILURE_ON]
    assert (handed["InputPath"], handed["ResultPath"], handed["Next"]) == (
        "$.train_failure",
        "$.error",
        State.TEAR_DOWN,
    )


def test_a_failing_teardown_keeps_the_original_error_and_does_not_fail_a_run_that_succeeded() -> None:
    # The run's outcome decides: with an error, Record failure keeps it; without, Record success
    # records SUCCEEDED with the teardown's error beside it.
    assert STATES[State.TEAR_DOWN]["Catch"] == [
        {"ErrorEquals": ["States.ALL"], "ResultPath": "$.teardown_error", "Next": State.RUN_OUTCOME}
    ]
    assert STATES[State.RUN_OUTCOME]["Choices"] == [
        {"Variable": "$.error", "IsPresent": True, "Next": State.RECORD_FAILURE}
    ]
    assert STATES[State.RUN_OUTCOME]["Default"] == State.RECORD_SUCCESS
    assert STATES[State.RECORD_SUCCESS]["Parameters"]["state.$"] == "$"
    assert STATES[State.RECORD_FAILURE]["Parameters"]["state.$"] == "$"
    assert "Catch" not in STATES[State.RECORD_FAILURE]


def retry_budget_seconds(retry: dict[str, Any]) -> float:
    """The longest a Retry rule keeps retrying (before jitter shortens the waits)."""
    cap = retry.get("MaxDelaySeconds", float("inf"))
    return sum(
        min(retry["IntervalSeconds"] * retry["BackoffRate"] ** attempt, cap) for attempt in range(retry["MaxAttempts"])
    )


@pytest.mark.parametrize("definition", ["run.asl.json", "teardown.asl.json"])
def test_teardown_retries_transient_errors_for_minutes_not_seconds(definition: str) -> None:
    # A throttled or briefly unreachable API must not end a teardown (4 of 10 concurrent runs did).
    states = json.loads((ROOT / "statemachines" / definition).read_text())["States"]
    (retry,) = states[State.TEAR_DOWN]["Retry"]
    assert "TransientAwsError" in retry["ErrorEquals"]
    assert retry_budget_seconds(retry) >= 300


def test_every_task_is_covered_by_a_catch_rule() -> None:
    assert set(TASKS) == BEFORE_PROVISIONING | PROVISIONING | IN_PARALLEL | ON_THE_CLUSTER | set(JOBS) | {
        State.CHECK_TRAIN,
        State.TEAR_DOWN,
        State.RECORD_FAILURE,
        State.CONTINUE_IN_A_NEW_EXECUTION,
    }


@pytest.mark.parametrize(("name", "job"), JOBS.items())
def test_a_job_state_waits_for_a_callback_not_by_polling(name: str, job: str) -> None:
    state = STATES[name]
    # The function submits the job with the task token; the progress function completes it.
    assert state["Resource"] == "arn:aws:states:::lambda:invoke.waitForTaskToken"
    assert state["Parameters"] == {
        "FunctionName": "${SubmitJobFunctionArn}",
        "Payload": {"run_id.$": "$.run_id", "job": job, "task_token.$": "$$.Task.Token"},
    }
    assert state["HeartbeatSecondsPath"] == "$.run.job_heartbeat_seconds"
    assert state["TimeoutSecondsPath"] == "$.run.job_timeout_seconds"


@pytest.mark.parametrize(("name", "job"), JOBS.items())
def test_a_silent_job_is_checked_with_slurm_and_a_running_one_is_waited_for_again(name: str, job: str) -> None:
    silence, *failures = STATES[name]["Catch"]
    assert silence == {
        "ErrorEquals": ["States.HeartbeatTimeout", "States.Timeout"],
        "ResultPath": f"$.{job}_silence",
        "Next": CHECK_STATES[job],
    }
    assert failures == ([TRAIN_FAILED] if job == "train" else []) + [TEAR_DOWN_ON_ANY_ERROR]
    assert STATES[CHECK_STATES[job]]["Parameters"] == {
        "run_id.$": "$.run_id",
        "job": job,
        "execution_arn.$": "$$.Execution.Id",
    }
    finished = STATES[f"{name} finished?"]
    assert finished["Choices"][0] == {
        "Variable": f"$.{job}_check.finished",
        "BooleanEquals": True,
        "Next": STATES[name]["Next"],
    }
    assert finished["Default"] == name


@pytest.mark.parametrize(("name", "job"), JOBS.items())
def test_a_check_that_names_a_continuation_hands_the_wait_on_to_a_new_execution(name: str, job: str) -> None:
    finished = STATES[f"{name} finished?"]
    assert finished["Choices"][1] == {
        "Variable": f"$.{job}_check.continuation",
        "IsPresent": True,
        "Next": f"Hand the {job} wait on",
    }
    hand_on = STATES[f"Hand the {job} wait on"]
    assert (hand_on["Type"], hand_on["InputPath"], hand_on["ResultPath"]) == (
        "Pass",
        f"$.{job}_check.continuation",
        "$.continuation",
    )
    assert hand_on["Next"] == State.CONTINUE_IN_A_NEW_EXECUTION


def test_the_new_execution_is_this_state_machine_named_by_check_with_the_whole_state() -> None:
    state = STATES[State.CONTINUE_IN_A_NEW_EXECUTION]
    assert state["Resource"] == "arn:aws:states:::states:startExecution"
    assert state["Parameters"] == {
        "StateMachineArn.$": "$$.StateMachine.Id",
        "Name.$": "$.continuation.execution_name",
        "Input.$": "$",
    }
    # A retry finds the execution started: that is success, never a second execution
    already = "StepFunctions.ExecutionAlreadyExistsException"
    assert state["Retry"][0] == {"ErrorEquals": [already], "MaxAttempts": 0}
    assert state["Catch"][0] == {"ErrorEquals": [already], "ResultPath": None, "Next": State.RUN_CONTINUED}
    assert state["Catch"][-1] == {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": State.TEAR_DOWN}
    # This execution then ends SUCCEEDED: the safety net's rule ignores it
    assert state["Next"] == State.RUN_CONTINUED
    assert STATES[State.RUN_CONTINUED] == {"Type": "Succeed"}


def test_a_continued_execution_skips_to_the_wait_for_its_job() -> None:
    assert DEFINITION["StartAt"] == State.CONTINUED_RUN
    start = STATES[State.CONTINUED_RUN]
    assert start["Choices"] == [{"Variable": "$.continuation", "IsPresent": True, "Next": State.RESUME_WHICH_JOB}]
    assert start["Default"] == State.LOAD_RUN_SPEC
    resume = STATES[State.RESUME_WHICH_JOB]
    assert resume["Choices"] == [{"Variable": "$.continuation.job", "StringEquals": "compile", "Next": State.COMPILE}]
    assert resume["Default"] == State.TRAIN


def test_the_safety_net_reads_the_run_id_from_the_execution_input_not_its_name() -> None:
    states = json.loads((ROOT / "statemachines" / "teardown.asl.json").read_text())
    first = states["States"][states["StartAt"]]
    assert first["Parameters"] == {"input.$": "States.StringToJson($.input)"}
    run_ids = {s["Parameters"]["run_id.$"] for s in states["States"].values() if "run_id.$" in s.get("Parameters", {})}
    assert run_ids == {"$.execution.input.run_id"}


def test_compile_is_skipped_without_a_compile_command() -> None:
    assert STATES[State.COMPILE_NEEDED]["Choices"] == [
        {"Variable": "$.run.has_compile", "BooleanEquals": True, "Next": State.COMPILE}
    ]
    assert STATES[State.COMPILE_NEEDED]["Default"] == State.TRAIN
    assert STATES[State.COMPILE]["Next"] == State.TRAIN


def test_every_wait_waits_as_long_as_its_step_asks() -> None:
    for name, state in STATES.items():
        if state["Type"] == "Wait" and name != State.WAIT_FOR_CAPACITY:
            assert state["SecondsPath"].endswith(".retry_after_seconds"), name


def test_a_run_whose_reservation_starts_later_waits_for_it_before_anything_billable() -> None:
    # Only an accepted run with a wait_until waits, and it waits until that moment, then provisions.
    waits, provisions = STATES[State.CAPACITY_ACCEPTED]["Choices"]
    assert waits["Next"] == State.WAIT_FOR_CAPACITY
    assert {"Variable": "$.capacity.wait_until", "IsPresent": True} in waits["And"]
    assert {"Variable": "$.capacity.accepted", "BooleanEquals": True} in waits["And"]
    # (a run that starts now provisions, unless it reuses a kept cluster)
    assert provisions["Next"] == State.REUSING_A_KEPT_CLUSTER
    assert STATES[State.REUSING_A_KEPT_CLUSTER]["Default"] == State.CREATE_NETWORK
    # (a run on a kept cluster creates nothing: Create cluster and Link data repository report it ready)
    assert STATES[State.REUSING_A_KEPT_CLUSTER]["Choices"][0]["Next"] == State.CREATE_CLUSTER_AND_PREPARE_HEAD_NODE
    wait = STATES[State.WAIT_FOR_CAPACITY]
    assert (wait["Type"], wait["TimestampPath"], wait["Next"]) == (
        "Wait",
        "$.capacity.wait_until",
        State.CREATE_NETWORK,
    )


def test_the_jobs_are_followed_by_teardown_on_success_too() -> None:
    assert PARALLEL["Next"] == State.JOBS_ON_EKS
    assert STATES[State.JOBS_ON_EKS]["Default"] == State.COMPILE_NEEDED
    assert STATES[State.TRAIN]["Next"] == State.TEAR_DOWN
    assert STATES[State.RUN_OUTCOME]["Choices"] == [
        {"Variable": "$.error", "IsPresent": True, "Next": State.RECORD_FAILURE}
    ]
    assert STATES[State.RUN_OUTCOME]["Default"] == State.RECORD_SUCCESS


def test_an_invalid_run_file_is_a_rejection_not_a_failure() -> None:
    first = STATES[State.LOAD_RUN_SPEC]["Catch"][0]
    assert first == {"ErrorEquals": ["RunSpecInvalid"], "ResultPath": "$.error", "Next": State.RECORD_REJECTION}


def test_a_failed_run_ends_with_the_error_it_recorded() -> None:
    assert STATES[State.RUN_FAILED] == {
        "Type": "Fail",
        "ErrorPath": "$.finish.error.Error",
        "CausePath": "$.finish.error.Cause",
    }


@pytest.mark.parametrize(
    ("logical_id", "file"), [("RunStateMachine", "run.asl.json"), ("TeardownStateMachine", "teardown.asl.json")]
)
def test_every_substitution_is_defined_by_the_template_and_used(logical_id: str, file: str) -> None:
    text = (ROOT / "statemachines" / file).read_text()
    used = set(re.findall(r"\$\{(\w+)\}", text))
    template = load_template(ROOT / "template.yaml")
    properties = template["Resources"][logical_id]["Properties"]
    assert properties["DefinitionUri"] == f"statemachines/{file}"
    assert used == set(properties["DefinitionSubstitutions"])


def test_every_path_reaches_an_end() -> None:
    for name, state in STATES.items():
        targets = [state.get("Next"), state.get("Default")]
        targets += [choice["Next"] for choice in state.get("Choices", [])]
        targets += [catch["Next"] for catch in state.get("Catch", [])]
        for target in filter(None, targets):
            assert target in STATES, f"{name} -> {target}"
        if state["Type"] not in {"Succeed", "Fail", "Choice"}:
            assert "Next" in state or state.get("End"), name


def test_the_file_system_is_requested_after_the_networks_first_call_and_the_cluster_does_not_wait_for_it() -> None:
    # Create network's first call records the private subnet and the security group, all the file
    # system needs; its NAT gateway comes up while the file system is requested
    assert STATES[State.CREATE_NETWORK]["Next"] == State.CREATE_FILE_SYSTEM
    assert STATES[State.CREATE_FILE_SYSTEM]["Next"] == State.NETWORK_READY
    # The cluster starts once the network is up and the file system requested (not AVAILABLE: its
    # nodes mount it themselves, and Link data repository waits for it beside the cluster)
    ready = STATES[State.NETWORK_READY]
    (both,) = ready["Choices"]
    assert both["Next"] == State.CREATE_CLUSTER_AND_PREPARE_HEAD_NODE
    assert {"Variable": "$.storage.done", "BooleanEquals": True} in both["And"]
    assert {"Variable": "$.network.done", "BooleanEquals": True} in both["And"]
    # Until then, the network is asked again after a wait (and the file system request repeated: idempotent)
    assert ready["Default"] == State.WAIT_FOR_NETWORK
    assert STATES[State.WAIT_FOR_NETWORK]["Next"] == State.CREATE_NETWORK
    assert "File system ready?" not in STATES and "Wait for file system" not in STATES


def test_the_cluster_the_data_repository_and_the_head_nodes_preparation_run_side_by_side() -> None:
    # Given the Parallel state after the network and the file system
    assert PARALLEL["Type"] == "Parallel"
    starts = [branch["StartAt"] for branch in PARALLEL["Branches"]]
    # Then each of the three loops is a branch of its own (the cluster's and the head node's by the
    # cluster's kind), ending when its step reports done
    assert starts == [State.CLUSTER_KIND, State.LINK_DATA_REPOSITORY, State.HEAD_NODE_TO_PREPARE]
    ends = {State.CLUSTER_READY: State.CLUSTER_CREATED, State.DATA_REPOSITORY_READY: State.DATA_REPOSITORY_LINKED}
    ends[State.HEAD_NODE_READY] = State.HEAD_NODE_PREPARED
    ends[State.NODE_GROUP_READY] = State.EKS_CLUSTER_CREATED
    for ready, end in ends.items():
        assert STATES[ready]["Choices"][0]["Next"] == end
        assert STATES[end] == {"Type": "Succeed"}
    # And no state of a branch leads out of it (Step Functions refuses such a definition)
    for branch in PARALLEL["Branches"]:
        for name, state in branch["States"].items():
            targets = [state.get("Next"), state.get("Default"), *[c["Next"] for c in state.get("Choices", [])]]
            assert set(filter(None, targets)) <= set(branch["States"]), name


def test_an_eks_run_builds_its_cluster_and_node_group_then_prepares_kubernetes_not_a_head_node() -> None:
    # Given the cluster's kind, from Load run spec
    on_eks = {"Variable": "$.run.kind", "StringEquals": "eks"}
    # Then the first branch builds the EKS cluster, then its node group; ParallelCluster's otherwise
    assert STATES[State.CLUSTER_KIND]["Choices"] == [{**on_eks, "Next": State.CREATE_EKS_CLUSTER}]
    assert STATES[State.CLUSTER_KIND]["Default"] == State.CREATE_CLUSTER
    assert STATES[State.EKS_CLUSTER_READY]["Choices"][0]["Next"] == State.CREATE_NODE_GROUP
    assert STATES[State.WAIT_FOR_EKS_CLUSTER]["Next"] == State.CREATE_EKS_CLUSTER
    assert STATES[State.WAIT_FOR_NODE_GROUP]["Next"] == State.CREATE_NODE_GROUP
    # And the last has no head node to prepare
    assert STATES[State.HEAD_NODE_TO_PREPARE]["Choices"] == [{**on_eks, "Next": State.NO_HEAD_NODE}]
    assert STATES[State.NO_HEAD_NODE] == {"Type": "Succeed"}
    # And after the Parallel state, an EKS run prepares Kubernetes for its jobs (a wait loop that
    # tears down on any error), then compiles and trains in the same job states as ParallelCluster's
    assert STATES[State.JOBS_ON_EKS]["Choices"] == [{**on_eks, "Next": State.PREPARE_KUBERNETES}]
    assert STATES[State.JOBS_ON_EKS]["Default"] == State.COMPILE_NEEDED
    prepare = STATES[State.PREPARE_KUBERNETES]
    assert (prepare["Resource"], prepare["Next"]) == ("${PrepareKubernetesFunctionArn}", State.KUBERNETES_READY)
    assert prepare["Catch"] == [TEAR_DOWN_ON_ANY_ERROR]
    assert STATES[State.KUBERNETES_READY]["Choices"] == [
        {"Variable": "$.kubernetes.done", "BooleanEquals": True, "Next": State.COMPILE_NEEDED}
    ]
    assert STATES[State.KUBERNETES_READY]["Default"] == State.WAIT_FOR_KUBERNETES
    assert STATES[State.WAIT_FOR_KUBERNETES] == {
        "Type": "Wait",
        "SecondsPath": "$.kubernetes.retry_after_seconds",
        "Next": State.PREPARE_KUBERNETES,
    }


def test_every_state_name_is_unique_in_the_whole_definition() -> None:
    # Step Functions: state names are unique within the whole state machine, branches included
    names = list(DEFINITION["States"])
    for branch in PARALLEL["Branches"]:
        names += list(branch["States"])
    assert len(names) == len(set(names)) == len(STATES)


@pytest.mark.parametrize(
    "name", [State.PREPARE_HEAD_NODE, State.COMPILE, State.CHECK_COMPILE, State.TRAIN, State.CHECK_TRAIN]
)
def test_every_state_that_sends_an_ssm_command_waits_minutes_for_the_agent_to_register(name: str) -> None:
    # SendCommand answers InvalidInstanceId until the head node's SSM agent is online.
    (retry,) = [r for r in STATES[name]["Retry"] if r["ErrorEquals"] == ["InstanceNotReachable"]]
    assert retry_budget_seconds(retry) >= 240 and retry["JitterStrategy"] == "FULL"


@pytest.mark.parametrize("name", [State.COMPILE, State.TRAIN])
def test_a_submit_command_still_running_is_looked_at_again_not_failed(name: str) -> None:
    (retry,) = [r for r in STATES[name]["Retry"] if r["ErrorEquals"] == ["SubmitStillRunning"]]
    assert retry_budget_seconds(retry) >= 300
    # Caught after the retries only: the catch-all comes after every retry rule.
    assert STATES[name]["Catch"][-1]["ErrorEquals"] == ["States.ALL"]


def _caught_or_retried_names(node: Any) -> set[str]:
    if isinstance(node, dict):
        names = set(node.get("ErrorEquals", []))
        return names.union(*(_caught_or_retried_names(v) for k, v in node.items() if k != "ErrorEquals"))
    if isinstance(node, list):
        return set().union(*(_caught_or_retried_names(v) for v in node))
    return set()


@pytest.mark.parametrize("definition", ["run.asl.json", "teardown.asl.json"])
def test_every_error_the_workflow_names_is_one_of_trainrun_errors(definition: str) -> None:
    # Given every error name a Retry or Catch of the state machine lists
    import trainrun.errors

    names = _caught_or_retried_names(json.loads((ROOT / "statemachines" / definition).read_text()))
    # Then those that are not the service's own (States.*, Lambda.*, an SDK integration's) are
    # business errors defined in trainrun.errors, the one module that holds the contract
    ours = {n for n in names if not n.startswith(("States.", "Lambda.", "StepFunctions."))}
    assert all(isinstance(getattr(trainrun.errors, n, None), type) for n in ours), sorted(ours)
    assert all(issubclass(getattr(trainrun.errors, n), trainrun.errors.TrainrunError) for n in ours)
    if definition == "run.asl.json":
        assert {"RunSpecInvalid", "InstanceNotReachable", "SubmitStillRunning", "TransientAwsError"} <= ours


def test_a_head_node_lost_under_its_preparation_waits_for_create_clusters_report() -> None:
    # Given the template's longest poll interval: Create cluster sees CREATE_FAILED within one of them
    poll = load_template(ROOT / "template.yaml")["Parameters"]["PollIntervalSeconds"]
    longest_poll = poll.get("MaxValue", poll["Default"])
    # Then Prepare head node retries HeadNodeLost for more than two of them, so that the root cause
    # (Create cluster's ClusterCreateFailed) fails the Parallel state, not the staging it killed
    (retry,) = [r for r in STATES[State.PREPARE_HEAD_NODE]["Retry"] if r["ErrorEquals"] == ["HeadNodeLost"]]
    assert retry_budget_seconds(retry) > 2 * longest_poll
