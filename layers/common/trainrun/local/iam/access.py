"""The local account's identities: one principal and access key per role, and the enforcement
that starts with every `LocalRuntime` (there is no switch to turn it off).

Principals (see trainrun.local.iam.principals for the keys):
- every function of template.yaml, as its own role with the template's policies for it;
- each state machine's role (Step Functions invokes the functions as that role);
- the head node's instance role, with the policies the cluster configuration attaches;
- the ParallelCluster API's own role (it launches and terminates the cluster's instances);
- the operator (`trainrun` commands against the local stack), with the operator's policy;
- the admin, for what the runtime itself does to set up the account (deploy, seed, inspect).

Every decision is kept on `LocalIam.enforcer.calls` and appended to a JSON-lines file:
`iam-calls.jsonl` in `trainrun.project_files.local_runs()` (the checkout's .local-runs), or
`$TRAINRUN_IAM_CALLS` (CI keeps it elsewhere); `make iam-report` reads it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from trainrun.local import events
from trainrun.local.iam import enforcement
from trainrun.local.iam.policy import PolicySet, stack_principals
from trainrun.local.iam.principals import AccessKey, Principal, Principals, role_session_user_id, session_arn
from trainrun.local.server_speed import SERVER_POLL_SECONDS
from trainrun.project_files import local_runs

CALLS_LOG_ENV = "TRAINRUN_IAM_CALLS"
ADMIN = "Admin"
OPERATOR = "Operator"
HEAD_NODE = "HeadNodeRole"
COMPUTE_NODE = "ComputeNodeRole"
PCLUSTER_API = "ParallelClusterApiRole"
OPERATOR_POLICY = Path(__file__).with_name("operator-policy.json")
PCLUSTER_API_POLICY = Path(__file__).with_name("pcluster-api-policy.json")
# The parameters README.md deploys the ParallelCluster API stack with (its `--parameters`;
# tests/unit/test_pcluster_api_role.py checks that they match): the API's role gets the
# policies ParallelCluster's template gives it for them.
PCLUSTER_API_PARAMETERS = {"EnableIamAdminAccess": "true"}


def calls_log_path() -> Path:
    return Path(os.environ.get(CALLS_LOG_ENV) or local_runs() / "iam-calls.jsonl")


class EnforcingMotoServer(ThreadedMotoServer):
    """moto's threaded server with the enforcement middleware around its app."""

    def __init__(self, enforcer: enforcement.Enforcer, *, ip_address: str, port: int):
        super().__init__(ip_address=ip_address, port=port, verbose=False)
        self._enforcer = enforcer

    def _server_entry(self) -> None:
        app = enforcement.EnforcingApp(DomainDispatcherApplication(create_backend_app), self._enforcer)
        self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever(poll_interval=SERVER_POLL_SECONDS)


class LocalIam:
    """The principals of one runtime and the enforcer that checks their calls."""

    def __init__(self, account: str, region: str):
        self.account = account
        self.region = region
        self.principals = Principals(account)
        self.enforcer = enforcement.Enforcer(self.principals, calls_log_path())
        self._keys: dict[str, AccessKey] = {}
        self._role_keys: dict[str, AccessKey] = {}
        self.admin = self._issue(Principal(ADMIN, f"arn:aws:iam::{account}:root", None, admin=True))
        enforcement.install()
        _install_state_machine_credentials(self._role_key)
        events.sign_state_machine_targets_with(self._role_key)

    def server(self, port: int) -> EnforcingMotoServer:
        return EnforcingMotoServer(self.enforcer, ip_address="127.0.0.1", port=port)

    # --- principals ---------------------------------------------------------------------------
    def _issue(self, principal: Principal, role_arn: str | None = None) -> AccessKey:
        key = self.principals.issue(principal, role_arn=role_arn)
        self._keys[principal.name] = key
        if role_arn is not None:
            self._role_keys[role_arn] = key
        return key

    def _role_key(self, role_arn: str) -> AccessKey | None:
        return self._role_keys.get(role_arn)

    def key(self, name: str) -> AccessKey:
        return self._keys[name]

    def add_role(
        self,
        name: str,
        role_name: str,
        policies: PolicySet | None,
        session: str,
        context: Mapping[str, str] | None = None,
    ) -> AccessKey:
        """A key for a role; `context`: the condition keys each of its calls carries (aws:PrincipalTag/*),
        beside aws:userid, which AWS fills for every call of a role's session."""
        role_arn = f"arn:aws:iam::{self.account}:role/{role_name}"
        context = {**(context or {}), "aws:userid": role_session_user_id(role_arn, session)}
        principal = Principal(name, session_arn(self.account, role_name, session), policies, context=context)
        return self._issue(principal, role_arn=role_arn)

    def add_stack(
        self,
        template: Path,
        parameters: dict[str, str],
        *,
        stack_name: str,
        resolve: Callable[[Any], Any] | None,
        sessions: dict[str, str],
        outputs: Mapping[str, str],
    ) -> dict[str, AccessKey]:
        """A principal for every function and state machine of the stack (by logical id), and the
        operator; the keys, by logical id. `sessions`: logical id -> session name (the function's name)."""
        policies = stack_principals(
            template, parameters, region=self.region, account=self.account, stack_name=stack_name, resolve=resolve
        )
        keys = {}
        for logical_id, session in sessions.items():
            role_name = f"{stack_name}-{logical_id}Role"
            keys[logical_id] = self.add_role(logical_id, role_name, policies.get(logical_id), session)
        # The roles SAM creates for the services that call on the stack's behalf (an EventBridge
        # rule's target role, an EventBridge Scheduler schedule's role): <logical id> is the role's.
        for logical_id in sorted(set(policies) - set(sessions)):
            keys[logical_id] = self.add_role(logical_id, f"{stack_name}-{logical_id}", policies[logical_id], logical_id)
        variables = {
            "Partition": "aws",
            "Region": self.region,
            "AccountId": self.account,
            "StackName": stack_name,
            **outputs,
            "StateMachineName": outputs["StateMachineArn"].rsplit(":", 1)[-1],
            "TeardownStateMachineName": outputs["TeardownStateMachineArn"].rsplit(":", 1)[-1],
        }
        self.add_role(OPERATOR, f"{stack_name}-operator", operator_policies(variables), "trainrun")
        return keys


def operator_policies(variables: Mapping[str, str]) -> PolicySet:
    """The operator's minimum policy (operator-policy.json), its ${...} filled from the stack:
    ${Partition}, ${Region}, ${AccountId}, ${StackName}, and the stack's outputs by name (with
    ${StateMachineName} and ${TeardownStateMachineName}, the names in those ARNs)."""
    text = OPERATOR_POLICY.read_text()
    for name, value in variables.items():
        text = text.replace("${" + name + "}", value)
    unresolved = sorted(set(re.findall(r"\$\{([A-Za-z]+)\}", text)))
    if unresolved:
        raise ValueError(f"{OPERATOR_POLICY.name}: no value for {', '.join(unresolved)}")
    return PolicySet(OPERATOR, [json.loads(text)], policy_names=["OperatorPolicy"])


def pcluster_api_policies(parameters: Mapping[str, str], *, account: str, partition: str = "aws") -> PolicySet:
    """The ParallelCluster API's own role (ParallelClusterLambdaRole) with the policies
    ParallelCluster's template gives it when its stack is deployed with `parameters`
    (pcluster-api-policy.json, resolved for the template's defaults; `EnableIamAdminAccess`
    adds DefaultParallelClusterIamAdminPolicy). Any other parameter, or another value of one
    the file is resolved for, is refused: the file would not say what that deploy grants."""
    data = json.loads(PCLUSTER_API_POLICY.read_text())
    admin = False
    for key, value in parameters.items():
        if key == "EnableIamAdminAccess" and value in ("true", "false"):
            admin = value == "true"
        elif data["ResolvedFor"].get(key) != value:
            raise ValueError(
                f"{PCLUSTER_API_POLICY.name} is resolved for {data['ResolvedFor']} and EnableIamAdminAccess "
                f"true or false, not {key}={value!r}: resolve parallelcluster-policies.yaml for it there"
            )
    named = [(name, document) for name, document in data["Policies"].items() if admin or name not in data["OnlyWhen"]]
    text = json.dumps([document for _, document in named])
    text = text.replace("${Partition}", partition).replace("${AccountId}", account)
    return PolicySet(PCLUSTER_API, json.loads(text), policy_names=[name for name, _ in named])


_original_boto_client_for: Any = None


def _install_state_machine_credentials(key_of_role: Callable[[str], AccessKey | None]) -> None:
    """Step Functions invokes a Task's function as the state machine's role: moto's interpreter
    signs with a fixed "ak" key, which this runtime never issued; sign with the role's key instead."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils

    global _original_boto_client_for
    if _original_boto_client_for is None:
        _original_boto_client_for = lambda_eval_utils.boto_client_for

    def boto_client_for(region: str, service: str, state_credentials: Any = None) -> Any:
        from botocore.config import Config
        from moto.stepfunctions.parser.asl.component.common.timeouts.timeout import TimeoutSeconds

        key = key_of_role(state_credentials.role_arn) if state_credentials is not None else None
        if key is None:
            return _original_boto_client_for(region=region, service=service, state_credentials=state_credentials)
        return key.client(
            service,
            region,
            # As moto's own client for the interpreter: no retries, the interpreter's timeouts.
            config=Config(
                parameter_validation=False,
                retries={"max_attempts": 0, "total_max_attempts": 1},
                connect_timeout=TimeoutSeconds.DEFAULT_TIMEOUT_SECONDS,
                read_timeout=TimeoutSeconds.DEFAULT_TIMEOUT_SECONDS,
            ),
        )

    lambda_eval_utils.boto_client_for = boto_client_for
    # The Step Functions integration (states:startExecution) signs its calls the same way.
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import state_task_service_sfn

    state_task_service_sfn.boto_client_for = boto_client_for
