"""What the handlers share, written once.

Every handler is wrapped by its function's `Telemetry` (trainrun.telemetry: its Logger, Metrics
and Tracer). `provisioning_handler` is the shape of the provisioning steps' handlers: Create
network, Create file system and Link data repository each parse a run id, call one step with one
AWS client, the run store and the stack's settings, and return its progress.
`run_events` is how a step that announces a run's state changes gets its publisher;
`cluster_api` is how the cluster steps reach the ParallelCluster API; `kubernetes_gateways` how
the steps of an EKS run reach its cluster's Kubernetes API.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.utilities.typing import LambdaContext

from trainrun.adapters.clients import client, pcluster_api
from trainrun.metrics import for_stack
from trainrun.model.resources import Progress
from trainrun.model.run_record import RunStore
from trainrun.settings import ClusterSettings, StepSettings
from trainrun.steps.provisioning import ConfigurationMissing
from trainrun.steps.run import RunRef
from trainrun.steps.run_events import RunEvents
from trainrun.telemetry import Handler, Telemetry

if TYPE_CHECKING:
    from trainrun.adapters.kubernetes import KubernetesGateway
    from trainrun.model.run_record import RunRecord

ProvisioningStep = Callable[..., Progress]


def provisioning_handler(step: ProvisioningStep, service: str) -> Handler:
    telemetry = Telemetry()
    logger = telemetry.logger

    @telemetry.handler
    def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        settings = StepSettings.from_environ()
        request = RunRef.model_validate(event)
        logger.append_keys(run_id=request.run_id)
        progress = step(
            client(service),
            RunStore(client("dynamodb"), settings.runs_table),
            request,
            stack=settings.stack,
            poll_seconds=settings.poll_seconds,
        )
        logger.info("progress", extra=progress.model_dump(mode="json"))
        return progress.model_dump(mode="json")

    return lambda_handler


def run_events(settings: StepSettings, metrics: Metrics) -> RunEvents:
    """The step's run-state event publisher; the runs it counts carry the stack's name."""
    return RunEvents(
        client("events"),
        functools.partial(client, "sns"),
        stack=settings.stack,
        metrics=for_stack(metrics, settings.stack),
    )


def cluster_api(settings: ClusterSettings) -> Any | None:
    """The ParallelCluster API client, signing as the API's user role; None when the stack has no API."""
    if not settings.pcluster_api_url:
        return None
    if not settings.pcluster_api_role_arn:
        raise ConfigurationMissing(
            "the stack has PclusterApiUrl but no PclusterApiRoleArn: set it to the ParallelCluster API "
            "stack's ParallelClusterApiUserRole output (only that role may invoke the API)"
        )
    return pcluster_api(settings.pcluster_api_url, settings.region, settings.pcluster_api_role_arn)


def kubernetes_gateways(settings: StepSettings) -> Callable[[RunRecord], KubernetesGateway]:
    """The Kubernetes gateway of a run's EKS cluster, as the stack's Kubernetes role; made when a
    step of an EKS run asks for it (a ParallelCluster run's never does), once per cluster: a step
    that asks again (a teardown pass: stop the jobs, start the export, follow it) reuses its
    endpoint, role session and token (the gateway renews the token itself)."""
    made: dict[str, KubernetesGateway] = {}

    def gateway_for(record: RunRecord) -> KubernetesGateway:
        from trainrun.adapters.kubernetes import KubernetesGateway

        if not settings.kubernetes_role_arn:
            raise ConfigurationMissing(
                "the stack gives no KUBERNETES_ROLE_ARN: deploy it with the EKS roles (template.yaml) "
                "to run cluster.kind: eks"
            )
        if record.eks is None:
            raise ConfigurationMissing(f"run {record.run_id} has no EKS cluster recorded")
        if record.eks.name not in made:
            made[record.eks.name] = KubernetesGateway.for_cluster(
                client("eks"),
                cluster=record.eks.name,
                role_arn=settings.kubernetes_role_arn,
                region=settings.region,
                session_name=f"trainrun-{record.run_id}",
            )
        return made[record.eks.name]

    return gateway_for
