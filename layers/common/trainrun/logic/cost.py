"""What a run costs: per hour and for its max_runtime (`trainrun plan`), so far (`trainrun status`,
`watch`), and against its budget (the budget guard of Check compile / Check train).

One calculation from the dated list prices of `trainrun.logic.prices`, for the CLI and for the
steps alike (so it lives here, not with the CLI): each line of the estimate is a billable resource
of the run (trainrun.model.run_record.Billed), and a run's cost so far counts each line from the
moment the run record says that resource began to bill. It is an estimate, not a bill: other
regions, discounts, data transfer and the smaller items listed in the notes are left out.
"""

from __future__ import annotations

from datetime import date, datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from trainrun.logic.cluster_config import COMPUTE_ROOT_GIB, HEAD_NODE_ROOT_GIB
from trainrun.logic.eks_versions import support_period
from trainrun.logic.prices import DEFAULT_REGION, HOURS_PER_MONTH, PRICES, PriceTable
from trainrun.model.run_file import RunSpec
from trainrun.model.run_record import Billed, RunRecord

__all__ = [
    "BUDGET_WARNING_FRACTION",
    "DEFAULT_REGION",
    "BudgetEstimate",
    "BudgetLevel",
    "CostEstimate",
    "CostLine",
    "budget_level",
    "estimate_cost",
    "spent",
]

# The share of budget.max_cost_usd at which a run event warns that the budget is nearly spent.
BUDGET_WARNING_FRACTION = 0.8


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class CostLine(_Model):
    item: str
    quantity: int
    unit: str
    unit_price_per_hour: float | None  # None: the price table has no price for it
    per_hour: float | None
    # The run's resource it bills with: a run's cost so far counts the line from that one's creation.
    billed: Billed


class BudgetEstimate(_Model):
    """budget.max_cost_usd against the estimate (`trainrun plan`)."""

    max_cost_usd: float
    # How long the run can last at the estimate's hourly price before the guard stops it.
    hours: float | None  # None: nothing is priced (per_hour 0), so the estimate cannot tell
    covers_max_runtime: bool  # False: the budget runs out before workload.max_runtime


class CostEstimate(_Model):
    currency: str
    prices_as_of: date
    price_source: str
    per_hour: float
    for_max_runtime: float
    max_runtime: str
    max_runtime_hours: float
    lines: list[CostLine]
    partial: bool  # some line has no price: the totals leave it out
    notes: list[str]
    budget: BudgetEstimate | None = None  # None: the run file sets no budget


def estimate_cost(spec: RunSpec, *, prices: PriceTable = PRICES, region: str | None = None) -> CostEstimate:
    """What the run costs per hour and for its max_runtime, by the dated price table (an estimate)."""
    region = region or spec.region or DEFAULT_REGION
    capacity, fsx = spec.capacity, spec.storage.fsx
    lines = [
        _instance_line(
            prices,
            f"compute nodes ({capacity.instance_type}, in the capacity reservation)",
            capacity.instance_type,
            capacity.nodes,
        ),
        _cluster_line(spec, prices),
    ]
    notes = [
        f"Prices: {prices.source}. Other regions' prices differ and are not modelled (this run: {region}).",
        "A capacity reservation is billed at the on-demand rate for as long as it is active, whether instances "
        "run in it or not: the compute line counts only the run's own hours. A Capacity Block is paid up front "
        "at its own rate instead.",
    ]
    if spec.cluster.reuse is not None:
        notes.append(
            f"cluster.reuse: these are the costs of a cluster like the one run {spec.cluster.reuse} kept, billed to "
            "that run (its cost counts them while it is kept), not to this one, which creates nothing billable."
        )
    if fsx.file_system_id is None:
        deployment, throughput = fsx.effective_deployment_type, fsx.effective_throughput_per_tib
        tier = f" {throughput} MB/s/TiB" if throughput is not None else ""
        gib = fsx.effective_storage_capacity_gib
        monthly = prices.fsx_lustre_gb_month.get((deployment, throughput))
        per_month = f": ${monthly:g} per GiB-month / {HOURS_PER_MONTH}" if monthly is not None else ""
        lines.append(
            _line(
                f"FSx for Lustre ({deployment}{tier}{per_month})",
                gib,
                "GiB",
                prices.fsx_lustre_per_gib_hour(deployment, throughput),
                f"FSx for Lustre {deployment}{tier}",
                Billed.FILE_SYSTEM,
            )
        )
        if spec.teardown.keep_file_system:
            notes.append("teardown.keep_file_system: the file system bills on after the run, until you delete it.")
    else:
        notes.append(
            f"The reused file system {fsx.file_system_id} is not counted: it bills whether the run uses it or not."
        )
    if spec.network.existing is None:
        lines.append(
            _line(
                "NAT gateway (per hour)", 1, "gateway", prices.nat_gateway_per_hour, "NAT gateway", Billed.NAT_GATEWAY
            )
        )
        notes.append("NAT gateway data processing (per GB through the gateway) is not included.")
    else:
        notes.append("The reused network is not counted: the run creates no NAT gateway in it.")
    if spec.cluster.os.startswith("rhel"):
        notes.append(f"{spec.cluster.os}: the RHEL licence charges on top of the Linux prices are not included.")
    keep = [outcome for outcome in ("success", "failure") if getattr(spec.teardown, f"on_{outcome}") == "keep"]
    if keep:
        notes.append(
            f"teardown keeps everything on {' and on '.join(keep)}: billing goes on until you delete the resources."
        )

    priced = [line.per_hour for line in lines if line.per_hour is not None]
    missing = [line.item for line in lines if line.per_hour is None]
    per_hour = sum(priced)
    hours = spec.workload.max_runtime_seconds / 3600
    if missing:
        notes.append(f"Partial: the totals leave out {', '.join(missing)}.")
    eks = spec.cluster.kind == "eks"
    notes += [
        f"for_max_runtime is per_hour x workload.max_runtime ({spec.workload.max_runtime}), one job's limit; "
        + ("the compile job has the same limit of its own, and " if spec.workload.compile is not None else "")
        + ("creating the cluster and its node group" if eks else "provisioning, preparing the head node")
        + " and teardown add to the time billed.",
    ]
    if eks:
        notes += [
            f"EKS control plane: ${prices.eks_cluster_per_hour['standard']:.2f} a cluster hour while its Kubernetes "
            f"version is in standard support, ${prices.eks_cluster_per_hour['extended']:.2f} in extended support.",
            f"Not included: EBS root volumes ({COMPUTE_ROOT_GIB} GiB gp3 per node), the add-ons' CloudWatch logs and "
            "metrics, public IPv4 addresses, data transfer, S3, and trainrun's own control plane.",
        ]
    else:
        notes.append(
            f"Not included: EBS root volumes ({HEAD_NODE_ROOT_GIB} GiB gp3 for the head node and {COMPUTE_ROOT_GIB} "
            "GiB per compute node), public IPv4 addresses, data transfer, S3, CloudWatch, and the control plane itself."
        )
    return CostEstimate(
        budget=_budget(spec, per_hour, hours),
        currency=prices.currency,
        prices_as_of=prices.as_of,
        price_source=prices.source,
        per_hour=round(per_hour, 6),
        for_max_runtime=round(per_hour * hours, 6),
        max_runtime=spec.workload.max_runtime,
        max_runtime_hours=hours,
        lines=lines,
        partial=bool(missing),
        notes=notes,
    )


def _cluster_line(spec: RunSpec, prices: PriceTable) -> CostLine:
    """What runs the cluster besides its compute nodes: ParallelCluster's head node, or EKS's control
    plane at the hour of its Kubernetes version's support period (trainrun.logic.eks_versions)."""
    if spec.cluster.kind == "eks":
        support = support_period(spec.cluster.eks_settings.kubernetes_version)
        item = f"EKS control plane ({support} support)"
        return _line(item, 1, "cluster", prices.eks_cluster_per_hour.get(support), item, Billed.CLUSTER)
    head_node = spec.cluster.head_node_instance_type
    return _instance_line(prices, f"head node ({head_node})", head_node, 1)


def _instance_line(prices: PriceTable, item: str, instance_type: str, count: int) -> CostLine:
    """The cluster's instances: the head node and the compute nodes."""
    return _line(item, count, "instance", prices.instance(instance_type), instance_type, Billed.CLUSTER)


def _line(item: str, quantity: int, unit: str, unit_price: float | None, priced_as: str, billed: Billed) -> CostLine:
    if unit_price is None:
        return CostLine(
            item=f"{item}: no price for {priced_as}",
            quantity=quantity,
            unit=unit,
            unit_price_per_hour=None,
            per_hour=None,
            billed=billed,
        )
    return CostLine(
        item=item,
        quantity=quantity,
        unit=unit,
        unit_price_per_hour=unit_price,
        per_hour=round(quantity * unit_price, 6),
        billed=billed,
    )


def _budget(spec: RunSpec, per_hour: float, max_runtime_hours: float) -> BudgetEstimate | None:
    if spec.budget is None:
        return None
    limit = spec.budget.max_cost_usd
    hours = limit / per_hour if per_hour > 0 else None
    return BudgetEstimate(
        max_cost_usd=limit,
        hours=None if hours is None else round(hours, 4),
        covers_max_runtime=hours is None or limit >= per_hour * max_runtime_hours,
    )


# --- the cost so far, and the budget -------------------------------------------------------------


def spent(estimate: CostEstimate, record: RunRecord, until: datetime) -> float:
    """What the run has cost up to `until`: each line's hourly price over the time since the run's
    resource of that kind began to bill (a line whose resource the run has not created costs nothing)."""

    def hours_since(since: datetime | None) -> float:
        return 0.0 if since is None else max((until - since).total_seconds(), 0.0) / 3600

    return sum((line.per_hour or 0.0) * hours_since(record.billed_since(line.billed)) for line in estimate.lines)


def kept_per_hour(estimate: CostEstimate, record: RunRecord, *, cluster_kept: bool) -> float:
    """What a kept run bills by the hour: each line whose resource the run created, but the
    cluster's when only its file system (and network) were kept (teardown.keep_file_system)."""
    return sum(
        line.per_hour or 0.0
        for line in estimate.lines
        if record.billed_since(line.billed) is not None and (cluster_kept or line.billed != Billed.CLUSTER)
    )


class BudgetLevel(StrEnum):
    WITHIN = "within"
    NEARLY_SPENT = "nearly_spent"  # BUDGET_WARNING_FRACTION of it, or more
    SPENT = "spent"


def budget_level(cost: float, max_cost_usd: float) -> BudgetLevel:
    """Where a run's cost so far stands against its budget."""
    if cost >= max_cost_usd:
        return BudgetLevel.SPENT
    if cost >= BUDGET_WARNING_FRACTION * max_cost_usd:
        return BudgetLevel.NEARLY_SPENT
    return BudgetLevel.WITHIN
