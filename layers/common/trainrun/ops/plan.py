"""The plan of a run: what it will create, what it will run on the head node, and what it will cost.

`trainrun plan RUN.yaml` answers, before anything billable exists and with no AWS calls, the
three questions a person asks before pressing the button:

- **What will it create?** The network pieces (or the reused VPC and subnets), the FSx for Lustre
  file system (or the reused one) and its data repository association, and the ParallelCluster
  cluster with its head node and N compute nodes in the capacity reservation; and the exact
  cluster configuration (`trainrun cluster-config`, with placeholder ids).
- **What will it run?** The exact scripts the control plane sends to the head node over SSM
  (prepare, then the compile and train submissions), rendered by `trainrun.logic.head_node_scripts` for a
  preview run id (`<name>-preview`) and the jobs log group placeholder `/trainrun/<stack>/jobs`.
- **What will it cost?** An estimate per hour and for `workload.max_runtime`, from the list
  prices of `trainrun.logic.prices` (on-demand, us-east-1/us-west-2, dated): the compute nodes, the
  head node, the file system and the NAT gateway (`trainrun.logic.cost`); and, when the run file
  sets a budget, whether it covers max_runtime. It is an estimate, not a bill: other regions,
  discounts, data transfer and the smaller items listed in the notes are left out.

A `cluster.kind: eks` run's plan has the same network (with the EKS control plane's second subnet)
and file system, then the EKS cluster, launch template, node group, add-ons and access entry of
`trainrun.logic.eks_node_group`, and the cost with the EKS control plane's hour instead of the head
node's; it has no head-node commands (no head node) and no timeline (not modelled for EKS yet).

Offline by design, except with `--check`: then the capacity reservation is looked up in the
account and assessed exactly as the run's `Validate capacity` state will (`check_capacity`), and
the buckets and topic the run file names are checked against the deployed stack's allow-lists
exactly as its `Load run spec` state will (`check_stack`), and what the head node will read is
looked up: the S3 objects and prefixes as Load run spec will look them up (`check_inputs`,
trainrun.logic.run_inputs), and a git source's ref with `git ls-remote` (trainrun.ops.git_source).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from trainrun.adapters.fsx import (
    ASSOCIATION_COMPONENT,
    DATA_REPOSITORY_FILE_SYSTEM_PATH,
    FILE_SYSTEM_COMPONENT,
    LUSTRE_VERSION,
    S3_EVENTS,
)
from trainrun.logic.allowlists import BUCKETS_PARAMETER, TOPICS_PARAMETER, RunAllowLists, check_allowed
from trainrun.logic.capacity import assess_capacity
from trainrun.logic.cluster_config import (
    COMPUTE_ROOT_GIB,
    EFA_INSTANCE_TYPES,
    HEAD_NODE_ROOT_GIB,
    LOG_RETENTION_DAYS,
    PREVIEW_CONFIG_BUCKET,
    QUEUE_NAME,
    ClusterIds,
    cluster_name,
    render_cluster_config,
)
from trainrun.logic.cluster_config import _region as run_region
from trainrun.logic.cost import DEFAULT_REGION, CostEstimate, CostLine, estimate_cost
from trainrun.logic.eks_node_group import (
    ADD_ONS,
    AMI_TYPE,
    NEURON_TAINT,
    EksIds,
    EksRequests,
    efa_interface_count,
    render_eks_requests,
)
from trainrun.logic.eks_versions import support_period
from trainrun.logic.head_node_scripts import (
    PLAN_END_KEY,
    default_user,
    job_commands,
    prepare_commands,
    prepare_script,
    submit_script,
    wrapper_script,
)
from trainrun.logic.prices import PRICES, PriceTable
from trainrun.logic.shell_quoting import join
from trainrun.model.findings import Code, Finding, Severity, has_errors
from trainrun.model.jobs import FSX_MOUNT_DIR, JOB_KINDS, JobKind, RunPaths
from trainrun.model.run_file import RunSpec
from trainrun.model.run_record import RunRecord
from trainrun.model.tags import run_tags
from trainrun.ops.timeline import Timeline, build_timeline
from trainrun.ops.timeline import render_text as timeline_text
from trainrun.workflow import SUBMIT_STATES, State

__all__ = [
    "CostEstimate",
    "CostLine",
    "HeadNodeCommand",
    "InputsCheck",
    "Plan",
    "Resource",
    "StackCheck",
    "build_plan",
    "estimate_cost",
    "render_text",
]

# The same preview identity as `trainrun cluster-config`.
PREVIEW_STACK = "trainrun"
JOBS_LOG_GROUP_PLACEHOLDER = "/trainrun/<stack>/jobs"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class Resource(_Model):
    """One thing the run creates (`create`), or one it uses without owning (`reuse`)."""

    kind: str
    action: Literal["create", "reuse"]
    detail: str


class HeadNodeCommand(_Model):
    """One SSM command (AWS-RunShellScript) the control plane sends to the head node."""

    state: State  # the workflow state that sends it
    job: JobKind | None  # None for the preparation
    purpose: str
    key_lines: list[str]  # the commands that matter, as the script (or its sbatch wrapper) runs them
    script: str  # the whole script, exactly as sent
    wrapper_script: str | None  # a job's sbatch wrapper, which the script writes to the file system


class CapacityCheck(_Model):
    """The run's capacity validation, run against an account before the run (as Validate capacity will)."""

    region: str
    checked_at: datetime
    accepted: bool  # False: the run would be REJECTED
    findings: list[Finding]


def check_capacity(spec: RunSpec, ec2: Any, resource_groups: Any, *, region: str, now: datetime) -> CapacityCheck:
    """Look the reservation up in the account and assess it, exactly as the Validate capacity state does."""
    from trainrun.adapters.ec2 import lookup_capacity

    findings = assess_capacity(spec, lookup_capacity(ec2, resource_groups, spec.capacity), stack_region=region, now=now)
    return CapacityCheck(region=region, checked_at=now, accepted=not has_errors(findings), findings=findings)


def check_reuse(spec: RunSpec, records: list[RunRecord], *, region: str, now: datetime) -> CapacityCheck:
    """A run on a kept cluster (`cluster.reuse`) checked against the stack's runs instead of the
    reservation, exactly as the Validate capacity state does: which run lends the cluster, whether
    it can, and whether the run fits it (what its nodes can read included)."""
    from trainrun.logic.cluster_reuse import lender, reuse_findings

    assert spec.cluster.reuse is not None
    owner = lender(records, spec.cluster.reuse, borrower_id="")
    findings = reuse_findings(spec, owner)
    return CapacityCheck(region=region, checked_at=now, accepted=not has_errors(findings), findings=findings)


class StackCheck(_Model):
    """The run file's buckets and topic against the deployed stack's allow-lists (as Load run spec will check them)."""

    stack: str
    accepted: bool  # False: the run would be REJECTED
    findings: list[Finding]


def check_stack(spec: RunSpec, stack: str, *, config_bucket: str, parameters: Mapping[str, str]) -> StackCheck:
    """Check `spec` against the stack's RunBucketArns and RunTopicArns (its `parameters`), with the
    rule Load run spec applies (trainrun.logic.allowlists)."""
    allowed = stack_allow_lists(config_bucket, parameters)
    findings = check_allowed(spec, allowed)
    return StackCheck(stack=stack, accepted=not has_errors(findings), findings=findings)


def stack_allow_lists(config_bucket: str, parameters: Mapping[str, str]) -> RunAllowLists:
    """The deployed stack's allow-lists, from its parameters, as Load run spec reads them."""
    return RunAllowLists.from_parameters(
        config_bucket=config_bucket,
        bucket_arns=parameters.get(BUCKETS_PARAMETER, ""),
        topic_arns=parameters.get(TOPICS_PARAMETER, ""),
    )


class InputsCheck(_Model):
    """What the head node will read, looked up before the run: the S3 objects and prefixes (as Load
    run spec will, but with the operator's credentials) and a git source's ref."""

    accepted: bool  # False: the run would be REJECTED (S3), or fail at Prepare head node (git)
    findings: list[Finding]


def check_inputs(spec: RunSpec, s3: Any, *, config_bucket: str, parameters: Mapping[str, str]) -> InputsCheck:
    """Look up what the head node will read in the buckets the stack allows (any other is
    check_stack's finding), and the git source's ref."""
    from trainrun.adapters.s3_inputs import look_up_all
    from trainrun.logic.run_inputs import input_findings, run_inputs
    from trainrun.ops.git_source import git_source_findings

    allowed = stack_allow_lists(config_bucket, parameters)
    looked_up = look_up_all(s3, run_inputs(spec, allowed))
    findings = input_findings(looked_up, checker="your credentials")
    findings += git_source_findings(spec)
    return InputsCheck(accepted=not has_errors(findings), findings=findings)


class Plan(_Model):
    name: str
    run_id: str  # the preview run id the commands are rendered for
    cluster_kind: Literal["parallelcluster", "eks"]
    nodes: int
    instance_type: str
    region: str
    region_assumed: bool  # True: the run file names no region, and DEFAULT_REGION is shown
    resources: list[Resource]
    # The ParallelCluster configuration; for kind eks, the EKS and EC2 requests (EksRequests).
    cluster_config: dict[str, Any]
    head_node_commands: list[HeadNodeCommand]  # none on EKS, which has no head node
    # kind eks: the Kubernetes objects of the run, in apply order (trainrun.logic.kubernetes_objects),
    # rendered for the preview run id and placeholder file system names.
    kubernetes_objects: list[dict[str, Any]] = []
    cost: CostEstimate
    # When each state runs and what the compute nodes bill idle, on the AWS clock model; None for
    # kind eks, whose timeline the model does not have yet.
    timeline: Timeline | None
    # `trainrun plan --check`: the capacity validation against an account, the buckets and topic
    # against the stack, and what the head node will read (None: not checked).
    capacity_check: CapacityCheck | None = None
    stack_check: StackCheck | None = None
    inputs_check: InputsCheck | None = None

    @property
    def rejected(self) -> bool:
        """--check found what would reject the run (or fail it before its jobs start)."""
        checks = (self.capacity_check, self.stack_check, self.inputs_check)
        return any(check is not None and not check.accepted for check in checks)


def build_plan(
    spec: RunSpec,
    *,
    prices: PriceTable = PRICES,
    neuron_install_script_uri: str | None = None,
    config_bucket: str = PREVIEW_CONFIG_BUCKET,
) -> Plan:
    """The plan of `spec`. Pure: no AWS calls. Raises ValueError as `render_cluster_config` does."""
    run_id = f"{spec.name}-preview"
    if spec.cluster.kind == "eks":
        return _eks_plan(spec, run_id, prices, config_bucket)
    config = render_cluster_config(
        spec,
        ClusterIds.placeholders(spec),
        tags=run_tags(run_id, PREVIEW_STACK),
        neuron_install_script_uri=neuron_install_script_uri,
        config_bucket=config_bucket,
        run_id=run_id,
    )
    configured_region = config.get("Region")
    region = configured_region if isinstance(configured_region, str) else DEFAULT_REGION
    return Plan(
        name=spec.name,
        run_id=run_id,
        cluster_kind=spec.cluster.kind,
        nodes=spec.capacity.nodes,
        instance_type=spec.capacity.instance_type,
        region=region,
        region_assumed=not isinstance(configured_region, str),
        resources=_resources(spec, run_id),
        cluster_config=config,
        head_node_commands=_head_node_commands(spec, run_id, region, config_bucket),
        cost=estimate_cost(spec, prices=prices, region=region),
        timeline=build_timeline(spec, prices=prices),
    )


def _kubernetes_objects(spec: RunSpec, run_id: str, region: str, config_bucket: str) -> list[dict[str, Any]]:
    from trainrun.logic import kubernetes_objects as objects
    from trainrun.logic.device_plugins import device_plugin_manifests
    from trainrun.model.resources import StorageIds

    storage = StorageIds(file_system_id="fs-PLACEHOLDER", dns_name="fs-PLACEHOLDER.fsx.example", mount_name="mount")
    return objects.run_objects(
        spec, run_id, storage, device_plugin_manifests(), config_bucket=config_bucket, region=region
    )


def _eks_plan(spec: RunSpec, run_id: str, prices: PriceTable, config_bucket: str) -> Plan:
    """The plan of a kind: eks run: its network and file system as a ParallelCluster run's, then the
    EKS cluster, launch template and node group of trainrun.logic.eks_node_group, with placeholder ids."""
    region = run_region(spec)
    requests = render_eks_requests(
        spec, EksIds.placeholders(), cluster_name=cluster_name(run_id), tags=run_tags(run_id, PREVIEW_STACK)
    )
    return Plan(
        name=spec.name,
        run_id=run_id,
        cluster_kind=spec.cluster.kind,
        nodes=spec.capacity.nodes,
        instance_type=spec.capacity.instance_type,
        region=region or DEFAULT_REGION,
        region_assumed=region is None,
        resources=[*_network(spec), *_storage(spec), *_eks_cluster(spec, requests)],
        cluster_config={**requests},
        head_node_commands=[],
        kubernetes_objects=_kubernetes_objects(spec, run_id, region or DEFAULT_REGION, config_bucket),
        cost=estimate_cost(spec, prices=prices, region=region or DEFAULT_REGION),
        timeline=None,
    )


def _job_shape(item: dict[str, Any]) -> str:
    """A Job's shape in one phrase: its pods, what each asks for."""
    if item["kind"] != "Job":
        return ""
    spec = item["spec"]
    limits = spec["template"]["spec"]["containers"][0].get("resources", {}).get("limits", {})
    asks = ", ".join(f"{value} {name}" for name, value in limits.items())
    indexed = "Indexed, " if spec.get("completionMode") == "Indexed" else ""
    return f": {indexed}{spec['completions']} pod(s){' of ' + asks if asks else ''}"


# --- resources -----------------------------------------------------------------------------------


def _resources(spec: RunSpec, run_id: str) -> list[Resource]:
    if spec.cluster.reuse is not None:
        # Nothing is created: the cluster (and what it stands on) is the kept run's, checked at Validate capacity.
        detail = (
            f"the cluster kept by run {spec.cluster.reuse}, with its file system and network: used as they are, "
            f"never deleted by this run (`trainrun down {spec.cluster.reuse}` deletes them); the head-node commands "
            "below run as that cluster's OS user"
        )
        return [Resource(kind="cluster", action="reuse", detail=detail)]
    return [*_network(spec), *_storage(spec), *_cluster(spec, run_id)]


def _network(spec: RunSpec) -> list[Resource]:
    efa_group = "EFA security group: all traffic from and to itself, all traffic out"
    existing = spec.network.existing
    if existing is not None:
        return [
            Resource(
                kind="network",
                action="reuse",
                detail=(
                    f"VPC {existing.vpc_id}, public subnet {existing.public_subnet_id}, private subnet "
                    f"{existing.private_subnet_id}: reused as they are, never deleted (no NAT gateway of the run's)"
                ),
            ),
            Resource(kind="security-group", action="create", detail=f"{efa_group}, in {existing.vpc_id}"),
        ]
    cidr = spec.network.cidr
    public, private = ipaddress.IPv4Network(cidr).subnets(prefixlen_diff=1)
    zone = spec.capacity.availability_zone or "the reservation's zone"
    if spec.cluster.kind == "eks":
        # The control plane's second subnet, in another zone, is cut from the public half
        # (trainrun.adapters.network.ensure_network, control_plane_zone).
        public, control_plane = public.subnets(prefixlen_diff=1)
        subnets = [
            ("public-subnet", f"{public} in {zone}: the NAT gateway; public IPs on launch"),
            ("private-subnet", f"{private} in {zone}: the nodes, the file system and the EKS control plane"),
            (
                "control-plane-subnet",
                f"{control_plane} in another zone of the region: the EKS control plane's, which EKS needs in two "
                "zones; on the private route table",
            ),
        ]
    else:
        subnets = [
            ("public-subnet", f"{public} in {zone}: the head node; public IPs on launch"),
            ("private-subnet", f"{private} in {zone}: the compute nodes and the file system"),
        ]
    parts = [
        ("vpc", f"{cidr}, DNS support and DNS hostnames on"),
        *subnets,
        ("internet-gateway", "attached to the VPC"),
        ("eip", "an Elastic IP for the NAT gateway"),
        ("nat-gateway", "in the public subnet: the compute nodes' way out"),
        ("public-route-table", "0.0.0.0/0 to the internet gateway, for the public subnet"),
        ("private-route-table", "0.0.0.0/0 to the NAT gateway, for the private subnet"),
        ("security-group", efa_group),
        ("s3-endpoint", "S3 gateway endpoint on both route tables"),
    ]
    return [Resource(kind=kind, action="create", detail=detail) for kind, detail in parts]


def _storage(spec: RunSpec) -> list[Resource]:
    fsx = spec.storage.fsx
    if fsx.file_system_id is not None:
        detail = f"FSx for Lustre {fsx.file_system_id}, mounted at {FSX_MOUNT_DIR}: reused as it is, never deleted"
        return [Resource(kind=FILE_SYSTEM_COMPONENT, action="reuse", detail=detail)]
    throughput = fsx.effective_throughput_per_tib
    kept = "kept after the run" if spec.teardown.keep_file_system else "deleted at teardown"
    detail = (
        f"FSx for Lustre {LUSTRE_VERSION}, {fsx.effective_deployment_type}, "
        f"{fsx.effective_storage_capacity_gib} GiB SSD"
        + (f", {throughput} MB/s/TiB" if throughput is not None else "")
        + f", LZ4 compression, in the private subnet, mounted at {FSX_MOUNT_DIR}; {kept}"
    )
    resources = [Resource(kind=FILE_SYSTEM_COMPONENT, action="create", detail=detail)]
    if fsx.data_repository is not None:
        events = ", ".join(event.lower() for event in S3_EVENTS)
        resources.append(
            Resource(
                kind=ASSOCIATION_COMPONENT,
                action="create",
                detail=(
                    f"{fsx.data_repository} linked at {FSX_MOUNT_DIR}{DATA_REPOSITORY_FILE_SYSTEM_PATH}: "
                    f"automatic import and export of {events} objects"
                ),
            )
        )
    return resources


def _cluster(spec: RunSpec, run_id: str) -> list[Resource]:
    capacity = spec.capacity
    target = (
        f"capacity reservation {capacity.reservation_id}"
        if capacity.reservation_id is not None
        else f"the capacity reservations of group {capacity.reservation_group_arn}"
    )
    efa = "EFA on" if capacity.instance_type in EFA_INSTANCE_TYPES else "no EFA"
    return [
        Resource(
            kind="cluster",
            action="create",
            detail=(
                f"ParallelCluster cluster {cluster_name(run_id)} (Slurm, {spec.cluster.os}): head node "
                f"{spec.cluster.head_node_instance_type} in the public subnet ({HEAD_NODE_ROOT_GIB} GiB gp3 root); "
                f"queue {QUEUE_NAME}: {capacity.nodes} x {capacity.instance_type} "
                f"{'static node' if capacity.nodes == 1 else 'static nodes'} ({efa}, "
                f"{COMPUTE_ROOT_GIB} GiB gp3 root each) in {target}"
            ),
        ),
        Resource(
            kind="log-group",
            action="create",
            detail=(
                f"ParallelCluster's CloudWatch log group for the cluster: {LOG_RETENTION_DAYS} days retention, "
                "deleted with the cluster"
            ),
        ),
    ]


def _eks_cluster(spec: RunSpec, requests: EksRequests) -> list[Resource]:
    cluster, template, nodegroup = requests["cluster"], requests["launch_template"], requests["nodegroup"]
    data = template["LaunchTemplateData"]
    target = ", ".join(
        f"{key} {value}" for key, value in data["CapacityReservationSpecification"]["CapacityReservationTarget"].items()
    )
    vpc = cluster["resourcesVpcConfig"]
    endpoints = " and ".join(
        name for name, on in (("public", vpc["endpointPublicAccess"]), ("private", vpc["endpointPrivateAccess"])) if on
    )
    efa = efa_interface_count(spec.capacity.instance_type)
    taint = f"{NEURON_TAINT['key']}={NEURON_TAINT['value']}:{NEURON_TAINT['effect']}"
    nodes = spec.capacity.nodes
    return [
        Resource(
            kind="eks-cluster",
            action="create",
            detail=(
                f"EKS cluster {cluster['name']}: Kubernetes {cluster['version']} ({support_period(cluster['version'])} "
                f"support), {endpoints} API endpoint, access by access entries only (its creator is no admin); "
                "its control plane's interfaces in both subnets, in the EFA security group; the jobs' image "
                f"{spec.cluster.eks_settings.image}"
            ),
        ),
        Resource(
            kind="launch-template",
            action="create",
            detail=(
                f"{template['LaunchTemplateName']}: {data['InstanceType']}, CapacityReservationTarget {target}; "
                + (f"{efa} EFA interfaces (one per network card)" if efa else "one network interface (no EFA)")
                + f" in the EFA security group; IMDSv2 required; {COMPUTE_ROOT_GIB} GiB gp3 root; no placement "
                "group (an instance in one only uses a reservation made for it)"
            ),
        ),
        Resource(
            kind="node-group",
            action="create",
            detail=(
                f"{nodegroup['nodegroupName']}: {nodes} x {spec.capacity.instance_type} "
                f"{'static node' if nodes == 1 else 'static nodes'} on {AMI_TYPE}, in the private subnet; capacity "
                f"type ON_DEMAND, or CAPACITY_BLOCK when the reservation is a Capacity Block; taint {taint}; node "
                "auto repair on"
            ),
        ),
        *(Resource(kind="add-on", action="create", detail=f"{name}: {what}") for name, what in ADD_ONS.items()),
        Resource(
            kind="access-entry",
            action="create",
            detail="for the trainrun workflow's role, the one principal that reaches the cluster's Kubernetes API",
        ),
    ]


def _head_node_commands(spec: RunSpec, run_id: str, region: str, config_bucket: str) -> list[HeadNodeCommand]:
    user = default_user(spec)
    prepare = prepare_script(spec, run_id, jobs_log_group=JOBS_LOG_GROUP_PLACEHOLDER, region=region)
    steps = ["fetch the workload", *(["run setup"] if spec.workload.setup else [])]
    steps += ["stage the dataset"] if spec.workload.dataset else []
    commands = [
        HeadNodeCommand(
            state=State.PREPARE_HEAD_NODE,
            job=None,
            purpose=(
                f"as root: ship the job output files to {JOBS_LOG_GROUP_PLACEHOLDER} (CloudWatch agent); "
                f"as {user}: {', '.join(steps)}"
            ),
            key_lines=_prepare_key_lines(spec, run_id, prepare),
            script=prepare,
            wrapper_script=None,
        )
    ]
    paths = RunPaths(run_id=run_id)
    for job in JOB_KINDS:
        if job == "compile" and spec.workload.compile is None:
            continue
        # Compile's submission also queues train behind it (a Slurm dependency): its script shows both.
        chained_end_key = PLAN_END_KEY if job == "compile" else None
        script = submit_script(
            spec, run_id, job, end_key=PLAN_END_KEY, config_bucket=config_bucket, chained_end_key=chained_end_key
        )
        wrapper = wrapper_script(spec, run_id, job, config_bucket=config_bucket)
        launch = job_commands(spec, run_id, job)
        commands.append(
            HeadNodeCommand(
                state=SUBMIT_STATES[job],
                job=job,
                purpose=(
                    f"as {user}: sbatch the {job} job {_on_nodes(spec.capacity.nodes)} unless Slurm already "
                    f"knows it; its output goes to {paths.output_file(job)}"
                    + ("; then the train job, queued behind it (--dependency=afterok)" if chained_end_key else "")
                ),
                key_lines=[join(launch.sbatch), join(launch.srun), *_resubmission_lines(spec, run_id, job)],
                script=script,
                wrapper_script=wrapper,
            )
        )
    return commands


def _resubmission_lines(spec: RunSpec, run_id: str, job: JobKind) -> list[str]:
    """What a resubmission after an infrastructure failure runs (workload.resume, workload.retries)."""
    if job != "train" or not spec.workload.train_retries:
        return []
    again = job_commands(spec, run_id, job, attempt=2)
    return [
        f"# after an infrastructure failure, up to {_count(spec.workload.train_retries, 'resubmission')}, "
        "each a new Slurm job (TRAINRUN_ATTEMPT=2, 3, ...):",
        join(again.srun),
    ]


def _prepare_key_lines(spec: RunSpec, run_id: str, script: str) -> list[str]:
    """The user switch, verbatim from the script, then the fetch, setup, dataset and checkpoint commands."""
    (switch,) = [line for line in script.splitlines() if line.startswith("runuser ")]
    commands = prepare_commands(spec, run_id)
    fetch = [join(commands.clone)] if commands.clone else [f"{join(commands.download)} | {join(commands.unpack)}"]
    steps = [commands.setup, commands.dataset_download, commands.dataset_unpack, commands.checkpoints_download]
    return [switch, *fetch, *(join(command) for command in steps if command)]


# --- text ----------------------------------------------------------------------------------------


def render_text(plan: Plan) -> str:
    """The plan for a person: resources, the key head-node command lines, the cost (`--json` has it all)."""
    region = f"{plan.region} (assumed: the run file names no region)" if plan.region_assumed else plan.region
    out = [
        f"Plan for {plan.name}: {plan.nodes} x {plan.instance_type} in {region}",
        f"(commands and names shown for the preview run id {plan.run_id}; a real run's id comes from its run file)",
        "",
        "Resources",
    ]
    width = max(len(resource.kind) for resource in plan.resources)
    out += [f"  {r.action:<6}  {r.kind:<{width}}  {r.detail}" for r in plan.resources]
    if plan.cluster_kind == "eks":
        out += [
            "",
            "EKS and EC2 requests: `trainrun cluster-config RUN.yaml` (or cluster_config in --json)",
            "",
            "Kubernetes objects (each checked by the API server's dry run in Create node group, before the "
            "node group exists; the full objects are in --json, kubernetes_objects)",
        ]
        for item in plan.kubernetes_objects:
            where = f" in {item['metadata']['namespace']}" if item["metadata"].get("namespace") else ""
            out.append(f"  {item['kind']} {item['metadata']['name']}{where}{_job_shape(item)}")
        out.append("")
    else:
        out += [
            "",
            "Cluster configuration: `trainrun cluster-config RUN.yaml` (or cluster_config in --json)",
            "",
            "Head node commands (SSM AWS-RunShellScript)",
        ]
        for command in plan.head_node_commands:
            out.append(f"  {command.state}: {command.purpose}")
            for line in command.key_lines:
                out += [f"    {part}" for part in line.splitlines()]
        out += ["  The full scripts are in --json (head_node_commands).", ""]

    cost = plan.cost
    out.append(f"Cost estimate ({cost.currency}, on-demand list prices of {cost.prices_as_of.isoformat()})")
    rows = [
        (
            line.item,
            _quantity(line),
            money(line.unit_price_per_hour),
            money(line.per_hour),
        )
        for line in cost.lines
    ]
    item_width = max(len(row[0]) for row in rows)
    out.append(f"  {'item':<{item_width}}  {'quantity':>12}  {'each per hour':>13}  {'per hour':>10}")
    out += [f"  {a:<{item_width}}  {b:>12}  {c:>13}  {d:>10}" for a, b, c, d in rows]
    partial = " (partial)" if cost.partial else ""
    totals = [
        ("total per hour" + partial, cost.per_hour),
        (f"total for max_runtime {cost.max_runtime}" + partial, cost.for_max_runtime),
    ]
    if cost.budget is not None:
        totals.append(("budget (budget.max_cost_usd)", cost.budget.max_cost_usd))
    out += [f"  {label:<{item_width}}  {'':>12}  {'':>13}  {money(value):>10}" for label, value in totals]
    out += _budget_text(cost)
    out += ["", "Notes"]
    out += [f"  - {note}" for note in cost.notes]
    if plan.timeline is None:
        out += ["", "Timeline: the EKS timeline is not modelled yet (the AWS clock model is ParallelCluster's)."]
    else:
        out += ["", *timeline_text(plan.timeline)]
    out += ["", *_capacity_text(plan.capacity_check), *_stack_text(plan.stack_check)]
    out += _inputs_text(plan.inputs_check)
    return "\n".join(out) + "\n"


def _budget_text(cost: CostEstimate) -> list[str]:
    """What the budget pays for at the estimate's hourly price, and a warning when that is less than
    max_runtime (the budget guard then stops the run first)."""
    budget = cost.budget
    if budget is None:
        return []
    if budget.hours is None:
        return ["  The budget cannot be compared: nothing in the estimate is priced."]
    covers = f"{_about_hours(budget.hours)} of the run at {money(cost.per_hour)} per hour"
    if budget.covers_max_runtime:
        return [f"  The budget covers max_runtime ({cost.max_runtime}): {covers}."]
    return [
        f"  WARNING: the budget does not cover max_runtime ({cost.max_runtime}, {money(cost.for_max_runtime)}): "
        f"it pays for {covers}, provisioning included; then the job gets SIGTERM and the run ends FAILED "
        "(BudgetExceeded). Raise budget.max_cost_usd or shorten workload.max_runtime."
    ]


def _capacity_text(check: CapacityCheck | None) -> list[str]:
    if check is None:
        return ["Capacity: not checked against an account (`trainrun plan --check` does, as will Validate capacity)."]
    return _verdict(f"Capacity check ({check.region}, {check.checked_at:%Y-%m-%d %H:%M} UTC)", check)


def _stack_text(check: StackCheck | None) -> list[str]:
    if check is None:
        return ["Buckets: not checked against a stack (`trainrun plan --check` does, as will Load run spec)."]
    return _verdict(f"Buckets and topic against stack {check.stack}", check)


def _inputs_text(check: InputsCheck | None) -> list[str]:
    if check is None:
        return ["Inputs: not looked up (`trainrun plan --check` does, as will Load run spec)."]
    errors = [finding.code for finding in check.findings if finding.severity == Severity.ERROR]
    # Load run spec rejects the S3 findings; a git source is first tried by the head node's clone.
    late = bool(errors) and all(code in _GIT_CODES for code in errors)
    failure = "FAILS: the run would fail at Prepare head node, after its cluster is created" if late else None
    return _verdict("What the head node will read (workload, dataset, checkpoints)", check, failure=failure)


_GIT_CODES = {Code.GIT_REF_NOT_FOUND, Code.GIT_SOURCE_UNREACHABLE}


def _verdict(heading: str, check: CapacityCheck | StackCheck | InputsCheck, *, failure: str | None = None) -> list[str]:
    """A check's heading with its verdict (`failure`: when not accepted, instead of REJECTED), then
    its findings, one a line."""
    rejected = failure or "REJECTED: the run would end before creating anything"
    verdict = "accepted" if check.accepted else rejected
    return [f"{heading}: {verdict}"] + [
        f"  {finding.severity:<7} {finding.code}: {finding.message}" for finding in check.findings
    ]


def _quantity(line: CostLine) -> str:
    # GiB is a symbol; the other units are nouns: 16 instances, 1 gateway.
    plural = line.quantity != 1 and line.unit != "GiB"
    return f"{line.quantity} {line.unit}{'s' if plural else ''}"


def _on_nodes(nodes: int) -> str:
    if nodes == 1:
        return "on its one node"
    return "over both nodes" if nodes == 2 else f"over all {nodes} nodes"


def _count(count: int, noun: str) -> str:
    """`1 resubmission`, `2 resubmissions`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _about_hours(hours: float) -> str:
    """A duration a person reads: `about 12 minutes` where `0.2 h` would do, never `0.0 h`."""
    minutes = round(hours * 60)
    if minutes < 1:
        return "less than a minute"
    if minutes < 60:
        return f"about {_count(minutes, 'minute')}"
    return f"about {hours:,.1f} h"


def money(value: float | None) -> str:
    """Dollars and cents ($21.50, $0.68); under a dollar, a tenth of a cent when the cents alone
    would hide it ($0.045 for a NAT gateway's hour); under a cent, two significant digits
    ($0.00019 for a GiB-hour of FSx). "-": no price."""
    if value is None:
        return "-"
    if value == 0 or value >= 1:
        return f"${value:,.2f}"
    if value < 0.01:
        return f"${value:.{1 - math.floor(math.log10(value))}f}"
    return f"${value:.2f}" if abs(value - round(value, 2)) < 0.0005 else f"${value:.3f}"
