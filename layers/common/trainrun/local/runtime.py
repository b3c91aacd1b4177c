"""The local runtime: moto as a server on loopback, the stack deployed onto it, runs driven through it.

Used by `trainrun local` and by every integration test (the "workflow harness"). The same
handlers and the same state machine definition run here as in the cloud; only the endpoints
differ, and the pieces moto lacks are added by patches in this package.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import shutil
import tarfile
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config

from trainrun.adapters.clients import new_client
from trainrun.local import (
    LOCAL_PROVISIONING_LEAD_SECONDS,
    LOCAL_TERMINATION_LEAD_SECONDS,
    capacity_emulator,
    clock,
    ec2_dependencies,
    eks_emulator,
    events,
    execution_history,
    fsx_emulator,
    lambdas,
    log_subscriptions,
    moto_clock,
    server_speed,
    ssm_emulator,
    step_functions,
    task_callbacks,
)
from trainrun.local.fixture import AccountFixture, build_git_repositories
from trainrun.local.head_node_lifecycle import HeadNode, HeadNodeFactory, HeadNodeRequest, HeadNodes
from trainrun.local.iam.access import COMPUTE_NODE, HEAD_NODE, OPERATOR, PCLUSTER_API, LocalIam
from trainrun.local.iam.principals import AccessKey
from trainrun.local.lambdas import LocalFunction, registry
from trainrun.local.template_deployer import ACCOUNT_ID, DeployedStack, StackDeployer
from trainrun.logic import aws_clock
from trainrun.logic.aws_clock import Duration
from trainrun.logic.head_node_scripts import END_WATCHER_POLL_SECONDS
from trainrun.model.run_record import RunStore
from trainrun.project_files import project_root
from trainrun.workflow import TASK_STATES, all_states

if TYPE_CHECKING:
    from trainrun.local.kube_cluster import LocalKubernetes
    from trainrun.local.pcluster_api import ClusterTiming
    from trainrun.ops.stack import Stack

logger = logging.getLogger(__name__)

DEFAULT_STACK_NAME = "trainrun-local"
# Local time is compressed (trainrun.local.step_functions): the interpreter runs this many
# nominal seconds in one real second, so the local stack keeps deployable parameters: a 5 s
# poll is 1/6 s, and a job that logs nothing for 300 s (10 real seconds) is checked with Slurm.
LOCAL_TIME_SCALE = 30
LOCAL_PARAMETERS = {"PollIntervalSeconds": "5", "JobHeartbeatSeconds": "300"}
# Named as the official ParallelCluster API stack names its user role (ParallelClusterApiUserRole-<id>).
PCLUSTER_API_USER_ROLE = "ParallelClusterApiUserRole-local"
FINAL_EXECUTION_STATUSES = {"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"}
# The stack's role of an EKS cluster's nodes (template.yaml), and the add-on that ships pods' output.
EKS_NODE_ROLE = "EksNodeRole"
OBSERVABILITY_ADDON = "amazon-cloudwatch-observability"
# The runtime's own clients (setup, inspection, the operator's) fail fast on a stopped emulator.
_FEW_RETRIES = Config(retries={"max_attempts": 2, "mode": "standard"})


def _cluster_timing() -> ClusterTiming:
    """A cluster's create and delete on the AWS clock (trainrun.logic.aws_clock), in real seconds."""
    from trainrun.local.pcluster_api import ClusterTiming

    def real(*durations: Duration) -> float:
        return sum(clock.real_seconds(duration) or 0.0 for duration in durations)

    return ClusterTiming(
        head_node_boot=real(aws_clock.CLUSTER_STACK_RESOURCES, aws_clock.HEAD_NODE_BOOT),
        custom_action=real(aws_clock.HEAD_NODE_CUSTOM_ACTION),
        clustermgtd_loop=real(aws_clock.CLUSTERMGTD_LOOP),
        fleet_boot=real(aws_clock.COMPUTE_NODE_BOOT, aws_clock.STATIC_FLEET_POLL),
        deletion=real(aws_clock.CLUSTER_DELETED),
        compute_terminated_in_deletion=real(aws_clock.CLUSTER_DELETE_COMPUTE_TERMINATED),
    )


class InjectedFailure(Exception):
    """Raised in place of a state's work by `--fail-at`, to rehearse a failure there."""


def continued_by(execution: dict[str, Any]) -> str | None:
    """The execution that went on with the run, when this one ended in "Run continued" (it
    succeeded with a continuation that names another execution)."""
    if execution["status"] != "SUCCEEDED":
        return None
    continuation = json.loads(execution.get("output") or "{}").get("continuation")
    if not isinstance(continuation, dict) or continuation.get("execution_name") == execution["name"]:
        return None
    return f"{execution['stateMachineArn'].replace(':stateMachine:', ':execution:')}:{continuation['execution_name']}"


def rate_seconds(expression: str) -> float:
    """The period of a schedule's rate expression, `rate(value unit)` (EventBridge Scheduler User
    Guide, "Schedule types": rate-based schedules; units minute(s), hour(s), day(s))."""
    match = re.fullmatch(r"rate\(([1-9][0-9]*) (minute|minutes|hour|hours|day|days)\)", expression)
    if match is None:
        raise LocalRunError(f"{expression!r}: the local runtime fires rate(value unit) schedules only")
    return int(match.group(1)) * {"minute": 60, "hour": 3600, "day": 86400}[match.group(2).rstrip("s")]


class LocalRunError(Exception):
    """The local runtime could not do what was asked (not a failure of the run itself)."""


@dataclass(frozen=True)
class StartedRun:
    run_id: str
    execution_arn: str


class LocalRuntime:
    def __init__(
        self,
        fixture: AccountFixture,
        *,
        root: Path | None = None,
        stack_name: str = DEFAULT_STACK_NAME,
        parameters: dict[str, str] | None = None,
        head_node_factory: HeadNodeFactory | None = None,
        keep_sandboxes: bool = False,
        port: int = 0,
        time_scale: float = LOCAL_TIME_SCALE,
        termination_lead_seconds: float = LOCAL_TERMINATION_LEAD_SECONDS,
        aws_clock: bool = False,
    ):
        """`aws_clock`: the emulators take AWS's time (trainrun.local.clock), compressed by `time_scale`."""
        self.time_scale = time_scale
        self.aws_clock = aws_clock
        self.termination_lead_seconds = termination_lead_seconds
        self._keep_sandboxes = keep_sandboxes
        self._port = port
        self.fixture = fixture
        self._head_node_factory = head_node_factory or self._slurm_head_node
        self.head_nodes: HeadNodes | None = None
        # The EKS clusters' Kubernetes (trainrun.local.kube_cluster): `kubernetes.cluster(name)`.
        self.kubernetes: LocalKubernetes | None = None
        self.region = fixture.region
        # template.yaml, the functions' handlers and the state machines' ASL, as CloudFormation reads them.
        self._root = root or project_root()
        self._stack_name = stack_name
        self._parameters = parameters or {}
        self._server: Any = None
        self.pcluster: Any = None
        self.endpoint_url = ""
        self.stack: DeployedStack | None = None
        self._clients: dict[str, Any] = {}
        # Each function's log stream in /aws/lambda/<name> (_ship_function_output).
        self._log_streams: dict[str, str] = {}
        # The job output streams the head nodes' CloudWatch agents created (ship_job_output).
        self._job_streams: set[tuple[str, str]] = set()
        self._executed_before: bool | None = None
        self.iam: LocalIam | None = None
        # The access key of each run's head node instance role, by run id.
        self._head_node_keys: dict[str, AccessKey] = {}
        # The access key of each compute node's instance role, by run id, then Slurm node name.
        self._compute_node_keys: dict[str, dict[str, AccessKey]] = {}
        # The roles of the services that call on the stack's behalf (rule targets, schedules), by logical id.
        self._service_role_keys: dict[str, AccessKey] = {}
        # The fixture's stand-in git repositories (bare, under _git_root), by the URL they stand in for.
        self._git_root: Path | None = None
        self._git_rewrites: dict[str, str] = {}
        self._stack_policies: dict[str, dict[str, Any]] = {}

    # --- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> LocalRuntime:
        try:
            self.start()
        except BaseException:
            # Ctrl-C or SIGTERM while starting, or a failed start: stop what was started.
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        from moto.core.config import default_user_config
        from moto.moto_api._internal.models import moto_api_backend

        # werkzeug logs every request moto serves; a run makes hundreds. moto's interpreter logs
        # every caught error and every Choice on an absent path; the run summary reports errors.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        logging.getLogger("moto.stepfunctions.parser").setLevel(logging.CRITICAL)
        moto_api_backend.reset()
        registry.clear()
        # moto's ASL interpreter (ported from LocalStack) runs the definition for real:
        # Retry, Catch, Choice, Wait and task tokens, instead of returning canned results.
        stepfunctions_config = default_user_config.setdefault("stepfunctions", {})
        self._executed_before = stepfunctions_config.get("execute_state_machine")
        stepfunctions_config["execute_state_machine"] = True
        lambdas.install()
        events.install()
        capacity_emulator.install()
        capacity_emulator.reset()
        ec2_dependencies.install()
        fsx_emulator.install()
        fsx_emulator.reset()
        eks_emulator.install()
        eks_emulator.reset()
        log_subscriptions.install()
        task_callbacks.install()
        execution_history.install()
        server_speed.install()
        step_functions.install(time_scale=self.time_scale)
        ssm_emulator.install()
        ssm_emulator.reset()
        moto_clock.install()
        if self.aws_clock:
            clock.enable(self.time_scale)
        else:
            clock.disable()

        # IAM is enforced on every request to this server, always (trainrun.local.iam.access).
        self.iam = LocalIam(ACCOUNT_ID, self.region)
        self.iam.enforcer.stack = self._stack_name
        self._server = self.iam.server(self._port)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"
        # The interpreter calls Lambda through boto3 at localhost:$MOTO_PORT.
        os.environ["MOTO_PORT"] = str(port)
        # Each function adds its own role's access key (below, once the stack is deployed).
        registry.base_environment = {
            **self._endpoint_environment(),
            step_functions.TIME_SCALE_VARIABLE: str(self.time_scale),
            "TRAINRUN_RESERVATION_PROVISIONING_LEAD_SECONDS": str(LOCAL_PROVISIONING_LEAD_SECONDS),
            "TRAINRUN_RESERVATION_TERMINATION_LEAD_SECONDS": str(self.termination_lead_seconds),
        }
        if self.aws_clock:
            # The end watcher's poll of slurmctld is one of AWS's waits, compressed like the others
            # (uncompressed, its 2 s would count a minute on the clock); 0.1 s at least.
            poll = max(0.1, END_WATCHER_POLL_SECONDS / self.time_scale)
            registry.base_environment["END_WATCHER_POLL_SECONDS"] = f"{poll:g}"
        registry.on_output = self._ship_function_output

        capacity_emulator.seed(self.fixture, ACCOUNT_ID)
        self._seed_objects()
        self._git_root = Path(tempfile.mkdtemp(prefix="trainrun-git-"))
        # The head node's default user (unprivileged) clones from here: stand-ins of public repositories.
        self._git_root.chmod(0o755)
        self._git_rewrites = build_git_repositories(self.fixture.git_repositories, self._git_root)
        from trainrun.local.iam.cluster_stack import ClusterStackIam
        from trainrun.local.pcluster_api import Ec2NodeLauncher, LocalPclusterApi

        api_key = self.iam.add_role(PCLUSTER_API, f"{self._stack_name}-ParallelClusterApi", *_pcluster_api_role())
        api_user_role_arn = self._create_pcluster_api_user_role()
        self.pcluster = LocalPclusterApi(
            self.endpoint_url,
            self.region,
            launcher=Ec2NodeLauncher(self.endpoint_url, credential=api_key.access_key_id),
            api_user_role_arn=api_user_role_arn,
            timing=_cluster_timing() if self.aws_clock else None,
        )
        self.head_nodes = HeadNodes(self._head_node_with_role, self.ship_job_output, self._os_of_run)
        self.head_nodes.keep_sandboxes = self._keep_sandboxes
        self.pcluster.lifecycle = self.head_nodes
        self.pcluster.cluster_stack = ClusterStackIam(self.iam.enforcer, PCLUSTER_API, ACCOUNT_ID)
        self.pcluster.start()
        parameters = {
            **LOCAL_PARAMETERS,
            "PclusterApiUrl": self.pcluster.url,
            **self.fixture.stack_parameters,
            "PclusterApiRoleArn": api_user_role_arn,
            **self._parameters,
        }
        deployer = StackDeployer(self.client, self._root, self._stack_name, self.region, parameters)
        self.stack = deployer.deploy()
        self._issue_stack_keys(deployer, parameters)
        from trainrun.local.iam.template_roles import stack_managed_policies

        # The stack's managed policies a cluster configuration may attach to its nodes.
        self._stack_policies = stack_managed_policies(
            self._root / "template.yaml",
            parameters,
            region=self.region,
            stack_name=self._stack_name,
            resolve=deployer.resolve,
        )
        self._register_stack(self.stack)
        self._start_kubernetes()

    def _issue_stack_keys(self, deployer: StackDeployer, parameters: dict[str, str]) -> None:
        """Each function calls AWS as its own role; each state machine invokes as its own."""
        assert self.iam is not None and self.stack is not None
        sessions = {
            logical_id: name
            for logical_id, name in self.stack.physical_ids.items()
            if logical_id in deployer.typed("AWS::Serverless::Function", "AWS::Serverless::StateMachine")
        }
        keys = self.iam.add_stack(
            self._root / "template.yaml",
            parameters,
            stack_name=self._stack_name,
            resolve=deployer.resolve,
            sessions=sessions,
            outputs=self.stack.outputs,
        )
        for logical_id, key in keys.items():
            function = registry.get(sessions[logical_id]) if logical_id in sessions else None
            if function is not None:
                function.environment.update(key.environment())
        self._service_role_keys = {k: v for k, v in keys.items() if k not in sessions}
        for logical_id in sorted(deployer.typed("AWS::Serverless::StateMachine")):
            if deployer.logs_to_cloudwatch(logical_id):
                self._set_up_log_delivery(logical_id)

    def _set_up_log_delivery(self, logical_id: str) -> None:
        """Step Functions sets up a logging state machine's delivery to CloudWatch Logs with the
        machine's own role (Step Functions developer guide, "Logging using CloudWatch Logs": the
        execution role needs logs:CreateLogDelivery and its kin), and refuses to create it when the
        role may not. logs:CreateLogDelivery has no API to call: it is authorized here, as that role."""
        from trainrun.local.iam.operations import Call

        assert self.iam is not None
        principal = self.iam.principals.named(logical_id)
        assert principal is not None
        call = Call("logs", "CreateLogDelivery", {}, self.region, ACCOUNT_ID)
        denial = self.iam.enforcer.authorize(principal, call)
        if denial is not None:
            raise LocalRunError(
                f"{logical_id}: AccessDeniedException: {principal.arn} is not authorized to perform "
                f"{denial.action} on resource {denial.resource} ({denial.reason}); the state machine "
                "cannot deliver its logs"
            )

    def _create_pcluster_api_user_role(self) -> str:
        """The role the official ParallelCluster API stack creates for its callers: the account
        may assume it, and it may invoke the API (the only principal the API's resource policy lets)."""
        from trainrun.adapters import clients as aws

        # A warm function keeps its clients and the API role's credentials; this moto knows neither.
        aws.forget_clients()
        iam = self.client("iam")
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT_ID}:root"}, "Action": "sts:AssumeRole"}
            ],
        }
        role = iam.create_role(
            RoleName=PCLUSTER_API_USER_ROLE, Path="/parallelcluster/", AssumeRolePolicyDocument=json.dumps(trust)
        )["Role"]
        invoke = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": "execute-api:Invoke",
                    "Resource": f"arn:aws:execute-api:{self.region}:{ACCOUNT_ID}:*/prod/*",
                }
            ],
        }
        iam.put_role_policy(RoleName=PCLUSTER_API_USER_ROLE, PolicyName="InvokeApi", PolicyDocument=json.dumps(invoke))
        return str(role["Arn"])

    def _register_stack(self, stack: DeployedStack) -> None:
        """Make the stack's outputs and parameters readable through CloudFormation, where the
        operator commands (trainrun status, submit, plan --check, ...) look a stack up: a stack
        whose only resource is a placeholder, with the deployed stack's parameters (every one, as
        DescribeStacks lists them) and outputs."""
        template = {
            "Description": "trainrun local stack (deployed by trainrun.local.template_deployer; outputs only)",
            "Parameters": {key: {"Type": "String"} for key in stack.parameters},
            "Resources": {"Placeholder": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
            "Outputs": {key: {"Value": value} for key, value in stack.outputs.items()},
        }
        parameters = [{"ParameterKey": key, "ParameterValue": value} for key, value in stack.parameters.items()]
        with warnings.catch_warnings():
            # moto creates nothing for the placeholder type, and warns that it does not.
            warnings.simplefilter("ignore", UserWarning)
            self.client("cloudformation").create_stack(
                StackName=stack.name, TemplateBody=json.dumps(template), Parameters=parameters
            )

    def _ship_function_output(self, function: LocalFunction, text: str) -> None:
        """What a function printed goes to /aws/lambda/<name>, as Lambda sends it: with the
        function's own role (AWSLambdaBasicExecutionRole's permissions), and its trace to X-Ray
        with the same role when the function has active tracing (every function here does): in
        Lambda, the X-Ray daemon sends Lambda's segment and the Tracer's subsegments as the role
        (AWSXrayWriteOnlyAccess); here the Tracer is off (trainrun.local.lambdas) and this one
        segment stands for both."""
        logs = self._function_client(function, "logs")
        self._send_trace(function)
        group = f"/aws/lambda/{function.name}"
        now = int(time.time() * 1000)
        # One stream per execution environment, as Lambda names them (date/[version]instance): here
        # a function's invocations run one at a time, in one environment, so in one stream.
        stream = self._log_streams.get(function.name)
        if stream is None:
            stream = f"{time.strftime('%Y/%m/%d')}/[$LATEST]{os.urandom(16).hex()}"
            try:
                logs.create_log_stream(logGroupName=group, logStreamName=stream)
            except logs.exceptions.ResourceNotFoundException:
                # Concurrent invocations of one function may both find its group missing.
                with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
                    logs.create_log_group(logGroupName=group)
                with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
                    logs.create_log_stream(logGroupName=group, logStreamName=stream)
            self._log_streams[function.name] = stream
        events = [{"timestamp": now, "message": line} for line in text.splitlines() if line]
        if events:
            logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)

    def _seed_objects(self) -> None:
        """The fixture's S3 objects (the example workload), packed from their directories."""
        s3 = self.client("s3")
        for item in self.fixture.s3_objects:
            with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
                location = {} if self.region == "us-east-1" else {"LocationConstraint": self.region}
                s3.create_bucket(Bucket=item.bucket, **({"CreateBucketConfiguration": location} if location else {}))
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w:gz" if item.compressed else "w") as archive:
                for path in sorted(Path(item.tarball_of).iterdir()):
                    if path.name != "__pycache__":
                        archive.add(path, arcname=path.name)
            s3.put_object(Bucket=item.bucket, Key=item.key, Body=buffer.getvalue())

    def _function_client(self, function: LocalFunction, service: str) -> Any:
        key = f"{function.name}:{service}"
        if key not in self._clients:
            self._clients[key] = self._client_as(
                AccessKey(function.environment["AWS_ACCESS_KEY_ID"], function.environment["AWS_SECRET_ACCESS_KEY"]),
                service,
            )
        return self._clients[key]

    def _send_trace(self, function: LocalFunction) -> None:
        now = time.time()
        segment = {
            "name": function.name,
            "id": os.urandom(8).hex(),
            "trace_id": f"1-{int(now):08x}-{os.urandom(12).hex()}",
            "start_time": now,
            "end_time": now,
        }
        self._function_client(function, "xray").put_trace_segments(TraceSegmentDocuments=[json.dumps(segment)])

    def ship_job_output(self, group: str, stream: str, lines: list[str]) -> None:
        """What the CloudWatch agent does with new lines of a job's output file: on the run's
        head node, with the head node's instance role (streams are named <run id>/<job>, or
        <cluster's run id>/<run id>/<job> on a kept cluster). There is no other identity to ship
        with: a stream of no head node this runtime started is refused, as the agent would have
        no credentials for it (the shipper keeps the lines and says so)."""
        owner = stream.split("/", 1)[0]
        head_node_key = self._head_node_keys.get(owner)
        if head_node_key is None:
            raise LookupError(f"no head node of run {owner!r} ships to {stream!r}: no instance role to ship with")
        cached = f"{head_node_key.access_key_id}:logs"
        if cached not in self._clients:
            self._clients[cached] = self._client_as(head_node_key, "logs")
        logs = self._clients[cached]
        if (group, stream) not in self._job_streams:  # the agent creates a stream once, then puts to it
            with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
                logs.create_log_stream(logGroupName=group, logStreamName=stream)
            self._job_streams.add((group, stream))
        now = int(time.time() * 1000)
        # PutLogEvents takes at most 10,000 events (and 1 MB) a call.
        for start in range(0, len(lines), 5_000):
            batch = [{"timestamp": now, "message": line or " "} for line in lines[start : start + 5_000]]
            logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=batch)

    # --- EKS clusters' Kubernetes ------------------------------------------------------------------
    def _start_kubernetes(self) -> None:
        """Each EKS cluster gets its Kubernetes on this machine once EKS shows it ACTIVE (the EKS
        emulator's hook): its nodes call AWS with the stack's node role (EksNodeRole), one session
        per instance, as the instance metadata gives each instance its role's key."""
        from trainrun.local.kube_cluster import LocalKubernetes

        assert self.iam is not None
        self.kubernetes = LocalKubernetes(
            account=ACCOUNT_ID,
            region=self.region,
            sandbox=Path(tempfile.mkdtemp(prefix="trainrun-kube-")),
            ship_for=self._container_log_shipper,
            node_environment=self._eks_node_environment,
            access_policies=lambda cluster, principal: eks_emulator.access_policies(
                ACCOUNT_ID, self.region, cluster, principal
            ),
            # Pods' grace periods compressed as the workflow's waits are.
            time_scale=self.time_scale,
            outside_world={"GIT_CONFIG_GLOBAL": str(self._pods_git_config())},
        )
        self.kubernetes.sandbox.chmod(0o755)  # the workload user reads the nodes' stand-ins
        eks_emulator.kubernetes = self.kubernetes

    def _eks_node_key(self, session: str) -> AccessKey:
        assert self.iam is not None
        node_role = self.iam.principals.named(EKS_NODE_ROLE)
        if node_role is None:
            raise LocalRunError(f"the stack has no {EKS_NODE_ROLE}: an EKS cluster's nodes have no role")
        return self.iam.add_role(EKS_NODE_ROLE, f"{self._stack_name}-{EKS_NODE_ROLE}", node_role.policies, session)

    def _eks_node_environment(self, cluster: str, node: str, instance_id: str) -> dict[str, str]:
        return {**self._endpoint_environment(), **self._eks_node_key(instance_id).environment()}

    def _container_log_shipper(self, cluster: str) -> Any:
        """What the cluster's Amazon CloudWatch Observability add-on does with its pods' output: its
        Fluent Bit ships it with the node role (no add-on: nothing is shipped), creating the log
        group when it is missing (auto_create_group) and each stream once."""
        client: list[Any] = []
        streams: set[tuple[str, str]] = set()

        def ship(group: str, stream: str, messages: list[str]) -> None:
            if not eks_emulator.has_addon(ACCOUNT_ID, self.region, cluster, OBSERVABILITY_ADDON):
                return
            if not client:
                client.append(self._client_as(self._eks_node_key(f"{cluster}-fluent-bit"), "logs"))
            logs = client[0]
            if (group, stream) not in streams:
                with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
                    logs.create_log_group(logGroupName=group)
                with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
                    logs.create_log_stream(logGroupName=group, logStreamName=stream)
                streams.add((group, stream))
            now = int(time.time() * 1000)
            for start in range(0, len(messages), 5_000):  # PutLogEvents: at most 10,000 events a call
                batch = [{"timestamp": now, "message": m} for m in messages[start : start + 5_000]]
                logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=batch)

        return ship

    def store(self) -> RunStore:
        return RunStore(self.client("dynamodb"), self.deployed.outputs["RunsTableName"])

    def _os_of_run(self, run_id: str) -> str | None:
        record = self.store().get(run_id)
        return record.spec.cluster.os if record is not None and record.spec is not None else None

    def _head_node_with_role(self, request: HeadNodeRequest) -> HeadNode:
        """A head node, once its instance role has a key: its aws CLI and its CloudWatch agent
        call AWS as that role, with the policies the cluster's configuration attaches; so do its
        compute nodes, with theirs."""
        assert self.iam is not None
        import yaml

        from trainrun.local.iam import cluster_roles

        cluster = self._cluster_of(request.instance_id)
        name, config = cluster.name, dict(yaml.safe_load(cluster.config_yaml))
        policies = cluster_roles.node_principal(
            config, name=HEAD_NODE, node=config["HeadNode"], region=self.region, stack_policies=self._stack_policies
        )
        context = cluster_roles.principal_context(config, name)
        key = self.iam.add_role(
            HEAD_NODE, f"{self._stack_name}-HeadNodeRole", policies, request.instance_id, context=context
        )
        self._head_node_keys[request.run_id] = key
        self._compute_node_keys[request.run_id] = self._compute_node_roles(
            dict(zip(request.nodes, cluster.compute_node_ids, strict=True)), config, context
        )
        return self._head_node_factory(request)

    def _compute_node_roles(
        self, instances: dict[str, str], config: dict[str, Any], context: dict[str, str]
    ) -> dict[str, AccessKey]:
        """A key of the compute nodes' instance role for each compute node (`instances`: Slurm
        node name -> instance id), by node name: ParallelCluster builds the queue's role from the
        queue's Iam (S3Access, AdditionalIamPolicies), one session per instance."""
        assert self.iam is not None
        from trainrun.local.iam import cluster_roles

        [queue] = config["Scheduling"]["SlurmQueues"]  # the local API takes exactly one queue
        policies = cluster_roles.node_principal(
            config, name=COMPUTE_NODE, node=queue, region=self.region, stack_policies=self._stack_policies
        )
        role_name = f"{self._stack_name}-ComputeNodeRole"
        return {
            node: self.iam.add_role(COMPUTE_NODE, role_name, policies, instance_id, context=context)
            for node, instance_id in instances.items()
        }

    def _slurm_head_node(self, request: HeadNodeRequest) -> HeadNode:
        from trainrun.local.slurm_head_node import LocalHeadNode

        self._write_git_config(request)
        return LocalHeadNode(
            sandbox=request.sandbox,
            nodes=request.nodes,
            user=request.user,
            aws_environment=self.head_node_environment(request.run_id),
            node_credentials={node: key.environment() for node, key in self._compute_node_keys[request.run_id].items()},
        )

    def head_node_environment(self, run_id: str) -> dict[str, str]:
        """What the run's head node's aws CLI has: this runtime's endpoint, the instance role's key."""
        return {**self._endpoint_environment(), **self._head_node_keys[run_id].environment()}

    def _cluster_of(self, head_node_id: str) -> Any:
        """This head node's cluster, as the local API keeps it (name, configuration, node ids)."""
        for cluster in list(self.pcluster._clusters.values()):
            if cluster.head_node_id == head_node_id:
                return cluster
        raise LocalRunError(f"no cluster of the local ParallelCluster API has head node {head_node_id}")

    def _write_git_config(self, request: HeadNodeRequest) -> None:
        """The user's git clones the fixture's stand-in repositories instead of the real URLs."""
        home = request.sandbox / "home" / request.user
        home.mkdir(parents=True, exist_ok=True)
        (home / ".gitconfig").write_text(self._git_config())

    def _pods_git_config(self) -> Path:
        """The same for an EKS run's pods (GIT_CONFIG_GLOBAL), readable by the workload user."""
        assert self._git_root is not None
        path = self._git_root / "pods-gitconfig"
        path.write_text(self._git_config())
        path.chmod(0o644)
        return path

    def _git_config(self) -> str:
        rewrites = sorted(self._git_rewrites.items())
        # They are root's, and the user is not: git reads another user's repository only when it
        # is a safe.directory (git 2.35.2 and later).
        safe = "".join(f"\tdirectory = {local.removeprefix('file://')}\n" for _, local in rewrites)
        return "".join(f'[url "{local}"]\n\tinsteadOf = {real}\n' for real, local in rewrites) + (
            f"[safe]\n{safe}" if safe else ""
        )

    def stop(self) -> None:
        if self._server is None:
            return
        # An execution still running would go on calling this server's port after it is gone
        # (and hold the function registry while it fails); stop it while the server can answer.
        if self.stack is not None:
            self._stop_executions()
        if self.head_nodes is not None:
            self.head_nodes.stop_all(keep_sandboxes=self._keep_sandboxes)
        if self.kubernetes is not None:
            eks_emulator.kubernetes = None
            self.kubernetes.stop_all()
            if not self._keep_sandboxes:
                shutil.rmtree(self.kubernetes.sandbox, ignore_errors=True)
            self.kubernetes = None
        ssm_emulator.reset()
        self._server.stop()
        from trainrun.adapters import clients as aws

        # The functions' clients point at this server; kept, each run's would pile up in memory.
        aws.forget_clients()
        step_functions.install(time_scale=1)
        clock.disable()
        self._server = None
        # moto's configuration is process-wide: leave it as it was found (tests that use
        # mock_aws after a local run expect moto's default Step Functions behaviour).
        from moto.core.config import default_user_config

        default_user_config.setdefault("stepfunctions", {})["execute_state_machine"] = bool(self._executed_before)
        if self.pcluster is not None:
            self.pcluster.stop()
            self.pcluster = None
        if self._git_root is not None:
            shutil.rmtree(self._git_root, ignore_errors=True)
            self._git_root = None

    def _stop_executions(self, timeout: float = 10.0) -> None:
        sfn = self.client("stepfunctions")
        running = [e["executionArn"] for e in self._executions() if e["status"] == "RUNNING"]
        for arn in running:
            sfn.stop_execution(
                executionArn=arn, error="LocalRuntimeStopped", cause="the local runtime is shutting down"
            )
        deadline = time.monotonic() + timeout
        while running and time.monotonic() < deadline:
            running = [arn for arn in running if sfn.describe_execution(executionArn=arn)["status"] == "RUNNING"]
            time.sleep(0.05)

    def _endpoint_environment(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint_url, "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region}

    def aws_environment(self) -> dict[str, str]:
        """What a process needs in its environment to talk to this runtime's AWS as the operator
        (the `trainrun` commands' identity: the operator's policy, not the admin's)."""
        assert self.iam is not None
        return {**self._endpoint_environment(), **self.iam.key(OPERATOR).environment()}

    def operator_session(self) -> boto3.Session:
        """The operator's session (the `trainrun` commands against the local stack)."""
        assert self.iam is not None
        key = self.iam.key(OPERATOR)
        return boto3.Session(
            aws_access_key_id=key.access_key_id, aws_secret_access_key=key.secret_access_key, region_name=self.region
        )

    def _client_as(self, key: AccessKey, service: str, config: Config | None = None) -> Any:
        """A client of this runtime's AWS signing with `key`. Made from the one session whose
        service models every client in the process shares (adapters.clients): a session per
        client would read endpoints.json and the service's model from disk again each time."""
        return new_client(
            service,
            region_name=self.region,
            endpoint_url=self.endpoint_url,
            aws_access_key_id=key.access_key_id,
            aws_secret_access_key=key.secret_access_key,
            config=config,
        )

    def client(self, service: str) -> Any:
        """An admin client (setup, inspection); `operator_client` for what the operator does. The
        admin's key is never handed to a function, the head node or the operator commands."""
        # Creating a client loads its service model (~0.2 s); a run makes hundreds of calls.
        if service not in self._clients:
            assert self.iam is not None
            self._clients[service] = self._client_as(self.iam.admin, service, config=_FEW_RETRIES)
        return self._clients[service]

    def operator_client(self, service: str) -> Any:
        key = f"operator:{service}"
        if key not in self._clients:
            assert self.iam is not None
            self._clients[key] = self._client_as(self.iam.key(OPERATOR), service, config=_FEW_RETRIES)
        return self._clients[key]

    def operator_stack(self) -> Stack:
        """The local stack as the operator commands see a deployed one (trainrun.ops)."""
        from trainrun.ops.stack import Stack

        return Stack(
            name=self.deployed.name,
            outputs=self.deployed.outputs,
            session=self.operator_session(),
            endpoint_url=self.endpoint_url,
        )

    @property
    def deployed(self) -> DeployedStack:
        if self.stack is None:
            raise LocalRunError("the local stack is not deployed; call start() first")
        return self.stack

    # --- rehearsals ----------------------------------------------------------------------------
    def fail_at(self, state_name: str) -> None:
        """Make the named Task state fail with InjectedFailure, by pointing it at a failing function;
        for a job state (Compile, Train), make the job itself exit non-zero on the head node."""
        if state_name not in TASK_STATES:
            raise LocalRunError(
                f"--fail-at: {state_name!r} is not a state of the run workflow that can fail; "
                f"those are: {', '.join(TASK_STATES)}"
            )
        definition = json.loads(json.dumps(self.deployed.state_machine_definitions["RunStateMachine"]))
        states = all_states(definition["States"])  # the state may be in a Parallel state's branch
        job = states[state_name].get("Parameters", {}).get("Payload", {}).get("job")
        if job is not None and self.head_nodes is not None:
            self.head_nodes.failing_jobs.add(job)
            if self.kubernetes is not None:
                self.kubernetes.failing_jobs.add(job)
            return
        name = f"{self._stack_name}-FailureInjector"
        arn = f"arn:aws:lambda:{self.region}:{ACCOUNT_ID}:function:{name}"
        if registry.get(name) is None:
            self.client("lambda").create_function(
                FunctionName=name,
                Runtime="python3.12",
                Role=f"arn:aws:iam::{ACCOUNT_ID}:role/{self._stack_name}-local-functions",
                Handler="inject.fail",
                Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18},
            )
        registry.register(_failure_injector(name, arn, state_name))
        self._grant_failure_injector(arn)
        states[state_name]["Resource"] = arn
        self.client("stepfunctions").update_state_machine(
            stateMachineArn=self.deployed.outputs["StateMachineArn"], definition=json.dumps(definition)
        )

    def undo_failures(self) -> None:
        """Undo every fail_at: no job left to fail, the run workflow's definition as deployed."""
        if self.head_nodes is not None:
            self.head_nodes.failing_jobs.clear()
        if self.kubernetes is not None:
            self.kubernetes.failing_jobs.clear()
        self.client("stepfunctions").update_state_machine(
            stateMachineArn=self.deployed.outputs["StateMachineArn"],
            definition=json.dumps(self.deployed.state_machine_definitions["RunStateMachine"]),
        )

    def lose_node_at_step(self, step: int) -> None:
        """Rehearse a node failure: each cluster's head node takes a compute node down when its
        train job logs `step`, then brings it back a few seconds later (trainrun.local.slurm_head_node);
        each EKS cluster loses the node of its train pod that logs it, and a new node replaces it
        (trainrun.local.kube_cluster)."""
        if self.head_nodes is None or self.kubernetes is None:
            raise LocalRunError("--node-failure-at-step: the local runtime has no head nodes; call start() first")
        self.head_nodes.node_failure_at_step = step
        self.kubernetes.node_failure_at_step = step
        for cluster in list(self.kubernetes.clusters.values()):
            cluster.lose_node_at_step(step)

    def _grant_failure_injector(self, arn: str) -> None:
        """The run state machine's role may invoke the injector as it may the state's own function
        (a rehearsal grant, added here only: template.yaml knows nothing of the injector)."""
        assert self.iam is not None
        from trainrun.local.iam.policy import PolicySet

        current = self.iam.principals.named("RunStateMachine")
        if current is None or current.policies is None or "FailureInjector" in current.policies.policy_names:
            return
        statement = {"Effect": "Allow", "Action": "lambda:InvokeFunction", "Resource": arn}
        grant = {"Version": "2012-10-17", "Statement": [statement]}
        policies = current.policies
        extended = PolicySet(
            policies.name, [*policies.documents, grant], policy_names=[*policies.policy_names, "FailureInjector"]
        )
        self.iam.principals.replace("RunStateMachine", extended)

    def fire_schedule(self, logical_id: str, event_name: str, payload: bytes = b"{}") -> dict[str, Any]:
        """What EventBridge Scheduler does when a function's ScheduleV2 event fires: invoke the
        function as the schedule's role (SAM's <logical id><event name>Role), whose
        lambda:InvokeFunction is authorized like any call. Schedules do not fire on their own locally."""
        key = self._service_role_keys.get(f"{logical_id}{event_name}Role")
        if key is None:
            raise LocalRunError(f"{logical_id}.Events.{event_name}: no schedule role in the stack")
        client = self._client_as(key, "lambda")
        return dict(client.invoke(FunctionName=self.deployed.function_name(logical_id), Payload=payload))

    def sweep_on_schedule(self, stopping: threading.Event) -> None:
        """Fire the janitor's schedule (JanitorSchedule, a rate) on the local stack's compressed
        time until `stopping` is set, as EventBridge Scheduler fires it on AWS: kept clusters past
        their teardown.keep_for are torn down with nothing else running (`trainrun serve`)."""
        period = rate_seconds(self.deployed.parameters["JanitorSchedule"]) / self.time_scale
        while not stopping.wait(period):
            try:
                self.fire_schedule("JanitorFunction", "Sweep")
            except Exception:
                if stopping.is_set():
                    return  # cut short by the runtime's stop
                # A failed sweep is the next one's to make up, as on AWS (its alarm aside).
                logger.warning("the janitor's scheduled sweep failed", exc_info=True)

    # --- runs ------------------------------------------------------------------------------------
    def submit(self, run_file: bytes, key: str) -> StartedRun:
        """Upload a run file to the config bucket, as a user would; EventBridge starts the run."""
        from trainrun.ops.submit import RunDidNotStart, upload, wait_for_execution

        if self.aws_clock:
            self._register_dataset_copy(run_file)
        outputs = self.deployed.outputs
        run = upload(self.operator_client("s3"), outputs["ConfigBucketName"], key, run_file, outputs["StateMachineArn"])
        try:
            # Delivery is synchronous here: the execution exists once the upload has returned.
            wait_for_execution(self.operator_client("stepfunctions"), run, timeout=0, poll=0)
        except RunDidNotStart as exc:
            raise LocalRunError(str(exc)) from None
        return StartedRun(run_id=run.run_id, execution_arn=run.execution_arn)

    def _register_dataset_copy(self, run_file: bytes) -> None:
        """On the AWS clock: the run's dataset takes as long to fetch as the real one it stands for
        (the fixture's size_on_aws_bytes) takes to copy into the run's file system."""
        from trainrun.errors import RunSpecInvalid
        from trainrun.model.run_file import parse_run_file

        try:
            spec = parse_run_file(run_file)
        except RunSpecInvalid:
            return  # the workflow rejects it; there is no copy to time
        dataset, fsx = spec.workload.dataset, spec.storage.fsx
        throughput = fsx.effective_throughput_per_tib if fsx is not None else None
        for item in self.fixture.s3_objects:
            if dataset is not None and item.uri == dataset.source and item.size_on_aws_bytes and throughput:
                copy = aws_clock.dataset_copy(item.size_on_aws_bytes, fsx.effective_storage_capacity_gib, throughput)
                clock.register_copy(item.bucket, item.key, copy)

    def wait(
        self, execution_arn: str, timeout: float = 300.0, poll: float = 0.05, max_poll: float = 0.25
    ) -> dict[str, Any]:
        """Wait for the run's last execution to end (a long wait continues in a fresh one), then
        for the safety net it may have started."""
        sfn = self.client("stepfunctions")
        deadline = time.monotonic() + timeout
        # A run that ends quickly is seen at once; a longer one at most `max_poll` late. The looks
        # read moto's state in this process: a request through the local server (IAM, moto) costs
        # ~15 ms of CPU, and these looks were a fifth of a run's requests. The execution this
        # returns is described through the server.
        interval = poll
        while True:
            if self._execution_status(execution_arn) in FINAL_EXECUTION_STATUSES:
                execution = sfn.describe_execution(executionArn=execution_arn)
                following = continued_by(execution)
                if following is not None:
                    execution_arn = following
                    continue
                self.wait_for_safety_net(deadline - time.monotonic(), poll)
                return execution
            if time.monotonic() > deadline:
                raise LocalRunError(f"{execution_arn} still RUNNING after {timeout:.0f}s")
            time.sleep(interval)
            interval = min(interval * 2, max_poll)

    def _execution_status(self, execution_arn: str) -> str:
        """The execution's status as moto holds it, read in this process (RUNNING until it exists)."""
        from moto.stepfunctions.exceptions import ExecutionDoesNotExist
        from moto.stepfunctions.parser.models import stepfunctions_parser_backends

        backend = stepfunctions_parser_backends[ACCOUNT_ID][self.region]
        try:
            return str(backend.describe_execution(execution_arn).status)
        except ExecutionDoesNotExist:
            return "RUNNING"  # a continuation about to start: waited for, up to the deadline

    def wait_for_safety_net(self, timeout: float, poll: float = 0.05) -> None:
        """A run that ended FAILED, TIMED_OUT or ABORTED starts the teardown workflow (the
        status-change rule); what is left is only known once it has ended too."""
        sfn = self.client("stepfunctions")
        arn = self.deployed.outputs["TeardownStateMachineArn"]
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            # In this order: a status change delivered before the check has started its execution.
            publishing = events.publishing_status_changes()
            running = sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]
            if not publishing and not running:
                return
            if time.monotonic() > deadline:
                raise LocalRunError(f"the teardown workflow still runs after {timeout:.0f}s: {running[0]['name']}")
            time.sleep(poll)

    def _executions(self) -> list[dict[str, Any]]:
        sfn = self.client("stepfunctions")
        paginator = sfn.get_paginator("list_executions")
        arn = self.deployed.outputs["StateMachineArn"]
        return [e for page in paginator.paginate(stateMachineArn=arn) for e in page["executions"]]


def _pcluster_api_role() -> tuple[Any, str]:
    """The ParallelCluster API's role, for the parameters the README deploys its stack with: its
    policies, and the session name it calls with."""
    from trainrun.local.iam.access import PCLUSTER_API_PARAMETERS, pcluster_api_policies

    return pcluster_api_policies(PCLUSTER_API_PARAMETERS, account=ACCOUNT_ID), "ParallelClusterApi"


def _failure_injector(name: str, arn: str, state_name: str) -> LocalFunction:
    def fail(event: Any, context: Any) -> Any:
        raise InjectedFailure(f"--fail-at {state_name!r}: failure injected by trainrun local")

    function = LocalFunction(name=name, arn=arn, code_dir=Path("."), handler="inject.fail", environment={})
    function.load = lambda: fail  # type: ignore[method-assign]
    return function
