"""The workflow as the code knows it: every state's name, and what each Task state runs.

Two state machines run a run: statemachines/run.asl.json (the run itself) and
statemachines/teardown.asl.json (the safety net that tears down a run whose execution ended
before its own teardown). `State` names every state of both; `FUNCTIONS` says, for each Task
state that invokes a Lambda function, which function (the template's logical id and its code
under functions/), the step it runs and the models it reads and returns; `INTEGRATIONS` the
Task states that call another AWS service directly. tests/unit/test_workflow_contract.py checks
all of it against the two definitions and template.yaml, so a state renamed in one place fails
there instead of at a run.

Steps and models are named by their dotted path rather than imported: the steps name states in
their messages, so this module imports none of them (the test resolves each path).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from trainrun.model.jobs import JobKind


class State(StrEnum):
    """Every state of the run workflow, in the order of its definition (a Parallel state's branches
    after it: `all_states`), then the safety net's own."""

    CONTINUED_RUN = "Continued run?"
    RESUME_WHICH_JOB = "Resume which job?"
    LOAD_RUN_SPEC = "Load run spec"
    VALIDATE_CAPACITY = "Validate capacity"
    CAPACITY_ACCEPTED = "Capacity accepted?"
    WAIT_FOR_CAPACITY = "Wait for capacity"
    REUSING_A_KEPT_CLUSTER = "Reusing a kept cluster?"
    CREATE_NETWORK = "Create network"
    NETWORK_READY = "Network ready?"
    WAIT_FOR_NETWORK = "Wait for network"
    CREATE_FILE_SYSTEM = "Create file system"
    # A Parallel state: its three branches' states follow it.
    CREATE_CLUSTER_AND_PREPARE_HEAD_NODE = "Create cluster and prepare head node"
    CLUSTER_KIND = "Cluster kind?"
    CREATE_CLUSTER = "Create cluster"
    CLUSTER_READY = "Cluster ready?"
    WAIT_FOR_CLUSTER = "Wait for cluster"
    CLUSTER_CREATED = "Cluster created"
    CREATE_EKS_CLUSTER = "Create EKS cluster"
    EKS_CLUSTER_READY = "EKS cluster ready?"
    WAIT_FOR_EKS_CLUSTER = "Wait for EKS cluster"
    CREATE_NODE_GROUP = "Create node group"
    NODE_GROUP_READY = "Node group ready?"
    WAIT_FOR_NODE_GROUP = "Wait for node group"
    EKS_CLUSTER_CREATED = "EKS cluster created"
    LINK_DATA_REPOSITORY = "Link data repository"
    DATA_REPOSITORY_READY = "Data repository ready?"
    WAIT_FOR_DATA_REPOSITORY = "Wait for data repository"
    DATA_REPOSITORY_LINKED = "Data repository linked"
    HEAD_NODE_TO_PREPARE = "Head node to prepare?"
    NO_HEAD_NODE = "No head node"
    PREPARE_HEAD_NODE = "Prepare head node"
    HEAD_NODE_READY = "Head node ready?"
    WAIT_FOR_HEAD_NODE = "Wait for head node"
    HEAD_NODE_PREPARED = "Head node prepared"
    JOBS_ON_EKS = "Jobs on EKS?"
    PREPARE_KUBERNETES = "Prepare Kubernetes"
    KUBERNETES_READY = "Kubernetes ready?"
    WAIT_FOR_KUBERNETES = "Wait for Kubernetes"
    COMPILE_NEEDED = "Compile needed?"
    COMPILE = "Compile"
    CHECK_COMPILE = "Check compile"
    COMPILE_FINISHED = "Compile finished?"
    HAND_THE_COMPILE_WAIT_ON = "Hand the compile wait on"
    TRAIN = "Train"
    CHECK_TRAIN = "Check train"
    TRAIN_FINISHED = "Train finished?"
    HAND_THE_TRAIN_WAIT_ON = "Hand the train wait on"
    RESUME_TRAIN = "Resume train"
    TRAIN_RESUBMITTED = "Train resubmitted?"
    WAIT_FOR_NODES = "Wait for nodes"
    HAND_THE_TRAIN_FAILURE_ON = "Hand the train failure on"
    CONTINUE_IN_A_NEW_EXECUTION = "Continue in a new execution"
    RUN_CONTINUED = "Run continued"
    TEAR_DOWN = "Tear down"
    TORN_DOWN = "Torn down?"
    WAIT_FOR_TEARDOWN = "Wait for teardown"
    RUN_OUTCOME = "Run outcome?"
    RECORD_SUCCESS = "Record success"
    RUN_SUCCEEDED = "Run succeeded"
    RECORD_REJECTION = "Record rejection"
    RUN_REJECTED = "Run rejected"
    RECORD_FAILURE = "Record failure"
    RUN_FAILED = "Run failed"
    # The safety net's own states (it shares Tear down, Torn down?, Wait for teardown and Record failure).
    READ_THE_RUN_ID = "Read the run id"
    DELETE_WHAT_WAS_KEPT = "Delete what was kept?"  # `trainrun down` deletes a kept run's resources
    KEEP_WHAT_THE_POLICY_KEEPS = "Keep what the policy keeps"
    RECORD_FAILURE_AND_LEFTOVERS = "Record failure and leftovers"
    LEFTOVERS_REMAIN = "Leftovers remain"


@dataclass(frozen=True)
class Function:
    """The Lambda function a Task state invokes, and what it does with what."""

    logical_id: str  # in template.yaml; the definitions name its ARN as ${<logical_id>Arn}
    code_uri: str  # its handler, functions/<dir>/app.py
    step: str  # the function of trainrun.steps its handler calls
    input: str  # the model the handler reads the state's input with
    output: str  # the model it returns
    # True: the state waits for the task token (lambda:invoke.waitForTaskToken); its result is
    # what the progress function sends back when the job ends, not the function's output.
    callback: bool = False


_RUN_REF = "trainrun.steps.run.RunRef"
_PROGRESS = "trainrun.model.resources.Progress"
_RECORD = Function(
    "FinishRunFunction",
    "functions/finish_run/",
    "trainrun.steps.run.finish_run",
    "trainrun.steps.run.FinishRunInput",
    "trainrun.steps.run.FinishRunOutput",
)
_SUBMIT = Function(
    "SubmitJobFunction",
    "functions/submit_job/",
    "trainrun.steps.head_node.submit_job",
    "trainrun.steps.head_node.SubmitRequest",
    "trainrun.steps.head_node.Submitted",
    callback=True,
)
_CHECK = Function(
    "CheckJobFunction",
    "functions/check_job/",
    "trainrun.steps.head_node.check_job",
    "trainrun.steps.head_node.JobRequest",
    "trainrun.steps.head_node.JobCheck",
)

FUNCTIONS: dict[State, Function] = {
    State.LOAD_RUN_SPEC: Function(
        "LoadRunSpecFunction",
        "functions/load_run_spec/",
        "trainrun.steps.run.load_run_spec",
        "trainrun.steps.run.LoadRunSpecInput",
        "trainrun.steps.run.RunSummary",
    ),
    State.VALIDATE_CAPACITY: Function(
        "ValidateCapacityFunction",
        "functions/validate_capacity/",
        "trainrun.steps.run.validate_capacity",
        _RUN_REF,
        "trainrun.steps.run.CapacityVerdict",
    ),
    State.CREATE_NETWORK: Function(
        "CreateNetworkFunction",
        "functions/create_network/",
        "trainrun.steps.provisioning.create_network",
        _RUN_REF,
        _PROGRESS,
    ),
    State.CREATE_FILE_SYSTEM: Function(
        "CreateFileSystemFunction",
        "functions/create_file_system/",
        "trainrun.steps.provisioning.create_file_system",
        _RUN_REF,
        _PROGRESS,
    ),
    State.LINK_DATA_REPOSITORY: Function(
        "LinkDataRepositoryFunction",
        "functions/link_data_repository/",
        "trainrun.steps.provisioning.link_data_repository",
        _RUN_REF,
        _PROGRESS,
    ),
    State.CREATE_CLUSTER: Function(
        "CreateClusterFunction",
        "functions/create_cluster/",
        "trainrun.steps.provisioning.create_cluster",
        _RUN_REF,
        _PROGRESS,
    ),
    State.CREATE_EKS_CLUSTER: Function(
        "CreateEksClusterFunction",
        "functions/create_eks_cluster/",
        "trainrun.steps.eks.create_eks_cluster",
        _RUN_REF,
        _PROGRESS,
    ),
    State.CREATE_NODE_GROUP: Function(
        "CreateNodeGroupFunction",
        "functions/create_node_group/",
        "trainrun.steps.eks.create_eks_nodes",
        _RUN_REF,
        _PROGRESS,
    ),
    State.PREPARE_HEAD_NODE: Function(
        "PrepareHeadNodeFunction",
        "functions/prepare_head_node/",
        "trainrun.steps.head_node.prepare_head_node",
        _RUN_REF,
        _PROGRESS,
    ),
    State.PREPARE_KUBERNETES: Function(
        "PrepareKubernetesFunction",
        "functions/prepare_kubernetes/",
        "trainrun.steps.kubernetes.prepare_kubernetes",
        _RUN_REF,
        _PROGRESS,
    ),
    State.COMPILE: _SUBMIT,
    State.CHECK_COMPILE: _CHECK,
    State.TRAIN: _SUBMIT,
    State.CHECK_TRAIN: _CHECK,
    State.RESUME_TRAIN: Function(
        "ResumeJobFunction",
        "functions/resume_job/",
        "trainrun.steps.resume.resume_job",
        "trainrun.steps.resume.ResumeRequest",
        "trainrun.steps.resume.ResumeDecision",
    ),
    State.TEAR_DOWN: Function(
        "TearDownFunction",
        "functions/tear_down/",
        "trainrun.steps.provisioning.tear_down",
        "trainrun.steps.provisioning.TeardownInput",
        _PROGRESS,
    ),
    State.RECORD_SUCCESS: _RECORD,
    State.RECORD_REJECTION: _RECORD,
    State.RECORD_FAILURE: _RECORD,
    State.RECORD_FAILURE_AND_LEFTOVERS: _RECORD,
}

# Task states that call a Step Functions integration instead of a function: the ASL's Resource.
INTEGRATIONS: dict[State, str] = {
    State.CONTINUE_IN_A_NEW_EXECUTION: "arn:aws:states:::states:startExecution",
}

# The run workflow's Task states, in the order of its definition: the states that can fail, and
# so the ones `trainrun local --fail-at` offers (a Choice, Wait or Pass state has nothing to fail).
TASK_STATES: tuple[State, ...] = (
    State.LOAD_RUN_SPEC,
    State.VALIDATE_CAPACITY,
    State.CREATE_NETWORK,
    State.CREATE_FILE_SYSTEM,
    State.CREATE_CLUSTER,
    State.CREATE_EKS_CLUSTER,
    State.CREATE_NODE_GROUP,
    State.LINK_DATA_REPOSITORY,
    State.PREPARE_HEAD_NODE,
    State.PREPARE_KUBERNETES,
    State.COMPILE,
    State.CHECK_COMPILE,
    State.TRAIN,
    State.CHECK_TRAIN,
    State.RESUME_TRAIN,
    State.CONTINUE_IN_A_NEW_EXECUTION,
    State.TEAR_DOWN,
    State.RECORD_SUCCESS,
    State.RECORD_REJECTION,
    State.RECORD_FAILURE,
)


def all_states(states: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A definition's `States`, with the states of each Parallel state's branches after it, in
    order. Step Functions requires a state's name to be unique in the whole state machine, branches
    included, so the names stay keys."""
    flat: dict[str, dict[str, Any]] = {}
    for name, state in states.items():
        flat[name] = state
        for branch in state.get("Branches", []):
            flat.update(all_states(branch["States"]))
    return flat


# The state that submits each job and waits for it, and the one that asks Slurm after a silence.
SUBMIT_STATES: dict[JobKind, State] = {"compile": State.COMPILE, "train": State.TRAIN}
CHECK_STATES: dict[JobKind, State] = {"compile": State.CHECK_COMPILE, "train": State.CHECK_TRAIN}
