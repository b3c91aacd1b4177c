"""Finding the deployed stack the operator commands work against, and talking to it.

The stack is named by `--stack`, else by $TRAINRUN_STACK, else by the `stack_name` of the
samconfig.toml in the current directory (what `sam deploy` used), else "trainrun". Its
CloudFormation outputs say where everything is: the config bucket, the runs table, the state
machines and the jobs log group; its parameters, what its run files may name (RunBucketArns).
The endpoint is AWS's unless `--endpoint-url` or $AWS_ENDPOINT_URL points elsewhere, such as at
`trainrun serve` (the local runtime).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainrun.errors import TrainrunError
from trainrun.model.run_record import RunStore

STACK_ENVIRONMENT_VARIABLE = "TRAINRUN_STACK"
FALLBACK_STACK_NAME = "trainrun"
# The outputs the commands read; a stack without them is not a trainrun stack (or an older one).
REQUIRED_OUTPUTS = (
    "ConfigBucketName",
    "RunsTableName",
    "StateMachineArn",
    "TeardownStateMachineArn",
    "JobsLogGroupName",
)


class StackNotFound(TrainrunError):
    """The named stack does not exist, is not a trainrun stack, or cannot be reached."""


@dataclass(frozen=True)
class StackName:
    name: str
    source: str  # where the name came from, for error messages


def default_stack_name(explicit: str | None, cwd: Path | None = None) -> StackName:
    if explicit:
        return StackName(explicit, "--stack")
    from_environment = os.environ.get(STACK_ENVIRONMENT_VARIABLE)
    if from_environment:
        return StackName(from_environment, f"${STACK_ENVIRONMENT_VARIABLE}")
    samconfig = (cwd or Path.cwd()) / "samconfig.toml"
    name = _samconfig_stack_name(samconfig)
    if name:
        return StackName(name, str(samconfig))
    return StackName(FALLBACK_STACK_NAME, "the default")


def _samconfig_stack_name(path: Path) -> str | None:
    return _samconfig_value(path, "stack_name")


def samconfig_region(cwd: Path | None = None) -> str | None:
    """The region `sam deploy --guided` saved in ./samconfig.toml, where the stack was deployed."""
    return _samconfig_value((cwd or Path.cwd()) / "samconfig.toml", "region")


def _samconfig_value(path: Path, key: str) -> str | None:
    """A value as `sam deploy` reads it: the default environment's deploy, then global, parameters."""
    try:
        config = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    default = config.get("default", {})
    for command in ("deploy", "global"):
        value = default.get(command, {}).get("parameters", {}).get(key)
        if isinstance(value, str) and value:
            return value
    return None


@dataclass
class Stack:
    """A deployed trainrun stack: its outputs and clients for its account and region."""

    name: str
    outputs: dict[str, str]
    session: Any
    endpoint_url: str | None
    # The template parameters it was deployed with (RunBucketArns: what its run files may name).
    parameters: dict[str, str] = field(default_factory=dict)
    _clients: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def region(self) -> str:
        return str(self.session.region_name)

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self.session.client(service, endpoint_url=self.endpoint_url)
        return self._clients[service]

    def store(self) -> RunStore:
        return RunStore(self.client("dynamodb"), self.outputs["RunsTableName"])


class NoAwsSession(TrainrunError):
    """No region, or a session that cannot be made (an unknown profile, say)."""


def aws_session(region: str | None, endpoint_url: str | None) -> tuple[Any, str | None]:
    """The session and endpoint the commands use: --region, else $AWS_REGION, else
    $AWS_DEFAULT_REGION, else the region `sam deploy --guided` saved in ./samconfig.toml, else the
    AWS configuration's (the profile's `region`); --endpoint-url, else $AWS_ENDPOINT_URL, else AWS's."""
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        # Lambda and the local runtime set AWS_REGION; boto3 itself reads only AWS_DEFAULT_REGION.
        chosen = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or samconfig_region()
        session = boto3.Session(region_name=chosen or None)
    except BotoCoreError as exc:
        raise NoAwsSession(f"cannot create an AWS session: {exc}") from None
    if session.region_name is None:
        raise NoAwsSession("no AWS region: pass --region, or set AWS_REGION or AWS_DEFAULT_REGION")
    return session, endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None


def connect(name: StackName, *, endpoint_url: str | None = None, region: str | None = None) -> Stack:
    """The stack's outputs, read from CloudFormation; StackNotFound with the reason otherwise."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        session, endpoint_url = aws_session(region, endpoint_url)
    except NoAwsSession as exc:
        raise StackNotFound(str(exc)) from None
    stack = Stack(name=name.name, outputs={}, session=session, endpoint_url=endpoint_url)
    where = f"in {session.region_name}" + (f" at {endpoint_url}" if endpoint_url else "")
    try:
        described = stack.client("cloudformation").describe_stacks(StackName=name.name)["Stacks"][0]
    except ClientError as exc:
        error = exc.response.get("Error", {})
        message = error.get("Message", str(exc))
        if error.get("Code") in ("AccessDenied", "AccessDeniedException"):
            # An operator policy scoped to its own stack (docs/deployment.md's minimum policy) is denied
            # DescribeStacks on any other name: most often a wrong --stack, else missing rights.
            message = (
                f"does not exist, or these credentials may not describe it "
                f"(--stack, $TRAINRUN_STACK or samconfig.toml names the stack): {message}"
            )
        raise StackNotFound(f"stack {name.name!r} (from {name.source}) {where}: {message}") from None
    except BotoCoreError as exc:  # no credentials, endpoint unreachable
        raise StackNotFound(f"cannot reach CloudFormation {where}: {exc}") from None
    stack.outputs = {output["OutputKey"]: output["OutputValue"] for output in described.get("Outputs", [])}
    stack.parameters = {
        parameter["ParameterKey"]: parameter.get("ParameterValue", "") for parameter in described.get("Parameters", [])
    }
    missing = [key for key in REQUIRED_OUTPUTS if key not in stack.outputs]
    if missing:
        raise StackNotFound(
            f"stack {name.name!r} (from {name.source}) {where} is not a trainrun stack: "
            f"it has no output {', '.join(missing)}"
        )
    return stack
