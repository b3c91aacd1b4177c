"""A shell on a run's head node, as `pcluster ssh` and `sky ssh` give one.

On AWS it is an SSM Session Manager session (`aws ssm start-session --target <head node>`),
which needs no open port, no key pair and no bastion: only the aws CLI, its Session Manager
plugin (`session-manager-plugin`, AWS Systems Manager User Guide: "Install the Session Manager
plugin for the AWS CLI") and `ssm:StartSession` on the instance and the session document. With
a command, the session runs the document AWS-StartInteractiveCommand instead of a shell.

Against the local stack of `trainrun serve` (an endpoint on this machine's loopback address)
the session is asked for as on AWS (StartSession, then TerminateSession when the shell ends), so
the operator's policy is checked as AWS checks it; its data channel is not emulated: the shell
runs in the head node's sandbox, in the mount namespace the local head node runs its SSM commands
in (trainrun.local.slurm_head_node), as root with the environment the SSM agent gives (where AWS's
sessions run as ssm-user, who may sudo).

An EKS run (`cluster.kind: eks`) has no head node: its jobs are Kubernetes Jobs. `trainrun shell`
then prints the commands that open a shell in rank 0's pod of the job the run is at, and runs
none of them (the CLI never talks to the Kubernetes API): `aws eks update-kubeconfig` with the
stack's Kubernetes role (the one with the cluster's access entry; the output KubernetesRoleArn),
then `kubectl exec` into the pod that `kubectl get pod` finds by the Job's labels.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
import shutil
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from trainrun.errors import TrainrunError
from trainrun.model.resources import EksClusterRef
from trainrun.model.run_record import RunRecord, RunStatus

PLUGIN = "session-manager-plugin"
# AWS Systems Manager User Guide, "Install the Session Manager plugin for the AWS CLI".
PLUGIN_INSTALL_HELP = (
    "install the Session Manager plugin for the AWS CLI (AWS Systems Manager User Guide: "
    '"Install the Session Manager plugin for the AWS CLI"), e.g. on Ubuntu/Debian x86_64:\n'
    "  curl -o session-manager-plugin.deb "
    "https://s3.amazonaws.com/session-manager-downloads/plugin/latest/ubuntu_64bit/session-manager-plugin.deb\n"
    "  sudo dpkg -i session-manager-plugin.deb\n"
    "or on macOS: brew install --cask session-manager-plugin"
)
# The document a session without one runs: the account's shell document, which Session Manager
# creates with the account's session preferences (AWS Systems Manager User Guide, "Create a
# Session Manager preferences document").
SHELL_DOCUMENT = "SSM-SessionManagerRunShell"
# The document that runs one command instead of a shell (AWS Systems Manager User Guide,
# "Start a session": interactive commands).
COMMAND_DOCUMENT = "AWS-StartInteractiveCommand"


class NoHeadNode(TrainrunError):
    """The run has no head node now: not provisioned (yet), rejected, or torn down."""


@dataclass(frozen=True)
class SessionCommand:
    """The `aws ssm start-session` command line that opens the session; `missing`: what this machine lacks."""

    argv: list[str]
    missing: list[str]

    @property
    def text(self) -> str:
        return shlex.join(self.argv)


def head_node_of(record: RunRecord) -> str:
    """The instance id of the run's head node while it exists; NoHeadNode says why not."""
    if record.torn_down_at is not None:
        raise NoHeadNode(
            f"run {record.run_id} was torn down at {record.torn_down_at:%Y-%m-%d %H:%M:%S} UTC: no head node"
        )
    if record.cluster is None or record.cluster.head_node_instance_id is None:
        if record.status == RunStatus.RUNNING:
            raise NoHeadNode(
                f"run {record.run_id} has no head node yet (its cluster is not up); "
                f"`trainrun watch {record.run_id}` shows when it is"
            )
        raise NoHeadNode(f"run {record.run_id} ended {record.status.value} without a head node")
    return record.cluster.head_node_instance_id


class SessionRefused(TrainrunError):
    """Session Manager would not open the session: the caller may not, or the head node's agent is not online."""


def start_session(ssm: Any, instance_id: str, command: str | None = None) -> str:
    """Session Manager's StartSession for a shell (or `command`) on the instance, with the request
    `aws ssm start-session` makes: the session's id. SessionRefused says why not."""
    from botocore.exceptions import ClientError

    from trainrun.adapters.aws_errors import error_code

    request: dict[str, Any] = {"Target": instance_id}
    if command is not None:
        request |= {"DocumentName": COMMAND_DOCUMENT, "Parameters": {"command": [command]}}
    try:
        return str(ssm.start_session(**request)["SessionId"])
    except ClientError as exc:
        if error_code(exc) == "TargetNotConnected":
            raise SessionRefused(
                f"head node {instance_id} is not connected to Session Manager (its SSM agent is not online): "
                f"{_message(exc)}"
            ) from None
        raise SessionRefused(
            f"Session Manager refused a session on head node {instance_id}: {error_code(exc)}: {_message(exc)}"
        ) from None


def end_session(ssm: Any, session_id: str) -> str | None:
    """TerminateSession, as the Session Manager plugin calls it when a session ends; what went
    wrong, for a warning (the session then ends on its own after Session Manager's idle timeout)."""
    from botocore.exceptions import ClientError

    from trainrun.adapters.aws_errors import error_code

    try:
        ssm.terminate_session(SessionId=session_id)
    except ClientError as exc:
        return f"session {session_id} not terminated: {error_code(exc)}: {_message(exc)}"
    return None


def _message(exc: Any) -> str:
    """What Session Manager said, as a ClientError carries it."""
    return str(exc.response.get("Error", {}).get("Message", str(exc)))


def is_local_endpoint(endpoint_url: str | None) -> bool:
    """True for an endpoint on this machine's loopback address, where `trainrun serve` listens."""
    if not endpoint_url:
        return False
    host = urlparse(endpoint_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def session_command(
    instance_id: str,
    *,
    region: str,
    endpoint_url: str | None = None,
    profile: str | None = None,
    command: str | None = None,
) -> SessionCommand:
    """The aws CLI command that opens a session on the instance (a shell, or `command`), with
    the executables it needs that PATH does not have."""
    argv = ["aws", "ssm", "start-session", "--target", instance_id, "--region", region]
    if endpoint_url:
        argv += ["--endpoint-url", endpoint_url]
    if profile:
        argv += ["--profile", profile]
    if command is not None:
        argv += ["--document-name", COMMAND_DOCUMENT, "--parameters", json.dumps({"command": [command]})]
    missing = [executable for executable in ("aws", PLUGIN) if shutil.which(executable) is None]
    return SessionCommand(argv=argv, missing=missing)


# --- an EKS run: the commands of a shell in a pod ----------------------------------------------------

KUBECTL = "kubectl"
# Amazon EKS User Guide, "Set up kubectl and eksctl".
KUBECTL_INSTALL_HELP = (
    'install kubectl (Amazon EKS User Guide: "Set up kubectl and eksctl"; Kubernetes docs: "Install Tools"), '
    "within one minor version of the cluster's Kubernetes"
)
# The stack output naming the role with every EKS run's access entry (template.yaml).
KUBERNETES_ROLE_OUTPUT = "KubernetesRoleArn"
# The labels Kubernetes puts on an Indexed Job's pods: its Job, and the pod's completion index.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


class NoEksCluster(TrainrunError):
    """The EKS run has no cluster now: not created (yet), or deleted."""


def eks_cluster_of(record: RunRecord) -> EksClusterRef:
    """The run's EKS cluster while it exists; NoEksCluster says why not."""
    if record.torn_down_at is not None:
        raise NoEksCluster(
            f"run {record.run_id} was torn down at {record.torn_down_at:%Y-%m-%d %H:%M:%S} UTC: "
            "its EKS cluster is gone (`trainrun logs` still has its jobs' output)"
        )
    if record.eks is None:
        if record.status == RunStatus.RUNNING:
            raise NoEksCluster(
                f"run {record.run_id} has no EKS cluster yet; `trainrun watch {record.run_id}` shows when it is up"
            )
        raise NoEksCluster(f"run {record.run_id} ended {record.status.value} without an EKS cluster")
    if record.eks.status == "DELETED":
        raise NoEksCluster(f"run {record.run_id}'s EKS cluster {record.eks.name} was deleted by its teardown")
    return record.eks


def shell_job(record: RunRecord) -> str:
    """The Kubernetes Job a shell goes to: the train job's current attempt once it exists (a
    resubmission's as soon as Resume opened it), else the compile job."""
    from trainrun.logic.kubernetes_objects import job_name

    train = record.job("train")
    if train is not None and (train.slurm_job_id is not None or train.attempt > 1):
        return job_name("train", train.attempt)
    return job_name("compile")


@dataclass(frozen=True)
class PodShellCommands:
    """What opens a shell in rank 0's pod of an EKS run's Job: `kubeconfig`, the kubeconfig
    entry of the cluster (kubectl then assumes the Kubernetes role for each request), and `exec`,
    one line for a POSIX shell; `missing`: the executables this machine lacks."""

    job: str
    kubeconfig: list[str]
    exec: str
    missing: list[str]

    @property
    def text(self) -> str:
        return f"{shlex.join(self.kubeconfig)}\n{self.exec}"


def pod_shell_commands(
    cluster: EksClusterRef,
    job: str,
    *,
    role_arn: str,
    endpoint_url: str | None = None,
    profile: str | None = None,
    command: str | None = None,
) -> PodShellCommands:
    """The commands of a shell (or `command`) in rank 0's pod of `job`: its completion index 0,
    the pod `kubectl get pod` finds by the labels Kubernetes gives an Indexed Job's pods."""
    from trainrun.logic.kubernetes_objects import COMPLETION_INDEX_ANNOTATION, NAMESPACE

    kubeconfig = ["aws", "eks", "update-kubeconfig", "--region", cluster.region, "--name", cluster.name]
    kubeconfig += ["--role-arn", role_arn]
    if endpoint_url:
        kubeconfig += ["--endpoint-url", endpoint_url]
    if profile:
        kubeconfig += ["--profile", profile]
    selector = f"{JOB_NAME_LABEL}={job},{COMPLETION_INDEX_ANNOTATION}=0"
    find_pod = shlex.join([KUBECTL, "get", "pod", "-n", NAMESPACE, "-l", selector, "-o", "name"])
    run = ["bash"] if command is None else ["bash", "-c", command]
    line = f'{KUBECTL} exec -n {NAMESPACE} -it "$({find_pod})" -- {shlex.join(run)}'
    missing = [executable for executable in ("aws", KUBECTL) if shutil.which(executable) is None]
    return PodShellCommands(job=job, kubeconfig=kubeconfig, exec=line, missing=missing)
