"""Environment variables, validated once at the edge (the handler), never read by domain code."""

from __future__ import annotations

import os
from typing import Self

from pydantic import BaseModel, ConfigDict, Field

from trainrun.logic.capacity import CAPACITY_BLOCK_TERMINATION_LEAD, PROVISIONING_LEAD


class _Environment(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    @classmethod
    def from_environ(cls) -> Self:
        # pydantic's lax mode turns "30" into 30: environment variables are always strings.
        return cls.model_validate(dict(os.environ))


# An IAM role's ARN, or empty (not deployed).
_ROLE_ARN = r"^(arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+)?$"


class StepSettings(_Environment):
    """What every workflow step needs."""

    runs_table: str = Field(alias="RUNS_TABLE", min_length=1)
    region: str = Field(alias="AWS_REGION", min_length=1)
    stack: str = Field(alias="STACK_NAME", default="trainrun", min_length=1)
    # The bounds are template.yaml's MinValue/MaxValue of PollIntervalSeconds and
    # JobHeartbeatSeconds (tests/unit/test_settings.py keeps every such pair equal). Each
    # heartbeat round of a silent job costs about a dozen history events of the execution's 25,000.
    poll_seconds: int = Field(alias="POLL_SECONDS", default=30, ge=5, le=300)
    # A job state that hears nothing (no log line, so no heartbeat) for this long asks Slurm.
    job_heartbeat_seconds: int = Field(alias="JOB_HEARTBEAT_SECONDS", default=600, ge=60, le=3600)
    # Set only by the local runtime, whose Step Functions runs this many nominal seconds in one
    # real second (trainrun.local.step_functions); never set in template.yaml.
    local_time_scale: float = Field(alias="TRAINRUN_LOCAL_TIME_SCALE", default=1.0, ge=1.0)
    # Reservation windows (docs/run-file.md, "Reservation windows"), in real seconds: how long
    # before a reservation's start the run provisions, and how long before a capacity block's end
    # EC2 begins terminating its instances. Not stack parameters; the local runtime shortens both,
    # since its fixture reservations start and end minutes away.
    reservation_provisioning_lead_seconds: float = Field(
        alias="TRAINRUN_RESERVATION_PROVISIONING_LEAD_SECONDS", default=PROVISIONING_LEAD.total_seconds(), ge=0
    )
    reservation_termination_lead_seconds: float = Field(
        alias="TRAINRUN_RESERVATION_TERMINATION_LEAD_SECONDS",
        default=CAPACITY_BLOCK_TERMINATION_LEAD.total_seconds(),
        ge=0,
    )

    # The role that talks to an EKS run's Kubernetes API (its access entry's principal): the steps
    # that reach the jobs assume it (trainrun.adapters.kubernetes). Empty: a stack without EKS.
    kubernetes_role_arn: str = Field(alias="KUBERNETES_ROLE_ARN", default="", pattern=_ROLE_ARN)

    @property
    def heartbeat_every_seconds(self) -> float:
        """How often (real seconds) the progress handler sends a heartbeat: at most once a minute,
        and often enough (four per heartbeat period) that a job that logs is never taken for a
        silent one."""
        return min(60, self.job_heartbeat_seconds // 4) / self.local_time_scale


class ClusterSettings(StepSettings):
    """The cluster steps reach ParallelCluster through its API (empty URL: not deployed), as the
    API's user role: the only principal the official API stack's resource policy lets invoke it."""

    pcluster_api_url: str = Field(alias="PCLUSTER_API_URL", default="")
    pcluster_api_role_arn: str = Field(alias="PCLUSTER_API_ROLE_ARN", default="", pattern=_ROLE_ARN)
    neuron_install_script_uri: str = Field(alias="NEURON_INSTALL_SCRIPT_URI", default="")
    # The stack's ClusterNodePolicy, put on every node of the cluster.
    cluster_node_policy_arn: str = Field(alias="CLUSTER_NODE_POLICY_ARN", default="")
    # Where Create cluster puts trainrun's own Neuron script when NEURON_INSTALL_SCRIPT_URI is empty.
    config_bucket: str = Field(alias="CONFIG_BUCKET", default="")


class EksSettings(StepSettings):
    """The EKS steps (cluster.kind: eks): the stack's roles for the cluster and its nodes, and the
    role that talks to Kubernetes, which gets the cluster's access entry."""

    eks_cluster_role_arn: str = Field(alias="EKS_CLUSTER_ROLE_ARN", default="", pattern=_ROLE_ARN)
    eks_node_role_arn: str = Field(alias="EKS_NODE_ROLE_ARN", default="", pattern=_ROLE_ARN)
    # Create node group's dry run checks the jobs' Kubernetes objects, which name the run's Neuron
    # compile cache (in the stack's config bucket by default).
    config_bucket: str = Field(alias="CONFIG_BUCKET", default="", max_length=63)


class HeadNodeSettings(StepSettings):
    """Prepare head node ships job output to the stack's jobs log group, and copies the workload
    archive of a run on a kept cluster into the stack's config bucket (trainrun.logic.cluster_reuse)."""

    jobs_log_group: str = Field(alias="JOBS_LOG_GROUP", min_length=1)
    config_bucket: str = Field(alias="CONFIG_BUCKET", min_length=3)
    # A stack's own node script (NeuronInstallScriptUri) writes no OnNodeConfigured marker: the
    # preparation then waits for /fsx only.
    neuron_install_script_uri: str = Field(alias="NEURON_INSTALL_SCRIPT_URI", default="")


class KubernetesSettings(StepSettings):
    """Prepare Kubernetes subscribes the progress function to the cluster's container log group,
    which it creates with the stack's log retention."""

    progress_function_arn: str = Field(alias="PROGRESS_FUNCTION_ARN", pattern=r"^arn:aws[a-z-]*:lambda:")
    # One of CloudWatch Logs' retention values: the template's LogRetentionDays allows only those.
    log_retention_days: int = Field(alias="LOG_RETENTION_DAYS", default=30)


class SubmitSettings(StepSettings):
    """Compile / Train: the jobs' Neuron compile cache is in the stack's config bucket by default
    (trainrun.logic.compile_cache)."""

    config_bucket: str = Field(alias="CONFIG_BUCKET", min_length=3)
    # How often the jobs' end watchers ask Slurm (trainrun.logic.head_node_scripts): never set on AWS;
    # the local runtime's AWS clock compresses it as it compresses AWS's own waits.
    end_watcher_poll_seconds: float = Field(alias="END_WATCHER_POLL_SECONDS", default=2.0, ge=0.1, le=60)


class JanitorSettings(StepSettings):
    teardown_state_machine_arn: str = Field(alias="TEARDOWN_STATE_MACHINE_ARN", pattern=r"^arn:aws[a-z-]*:states:")
    # template.yaml's JanitorGraceMinutes bounds (a test keeps them equal).
    grace_minutes: int = Field(alias="JANITOR_GRACE_MINUTES", default=120, ge=10)


class StartRunSettings(_Environment):
    state_machine_arn: str = Field(alias="STATE_MACHINE_ARN", pattern=r"^arn:aws[a-z-]*:states:")
    config_bucket: str = Field(alias="CONFIG_BUCKET", min_length=3)


class LoadRunSpecSettings(StepSettings):
    """The buckets and topics the stack lets run files name (comma-separated ARNs; empty: none)."""

    run_bucket_arns: str = Field(alias="RUN_BUCKET_ARNS", default="")
    run_topic_arns: str = Field(alias="RUN_TOPIC_ARNS", default="")


# Every settings model a handler reads (tests/unit/test_settings.py checks the template against them).
SETTINGS: tuple[type[_Environment], ...] = (
    StepSettings,
    ClusterSettings,
    HeadNodeSettings,
    KubernetesSettings,
    SubmitSettings,
    JanitorSettings,
    StartRunSettings,
    LoadRunSpecSettings,
)
