"""List prices for `trainrun plan`'s cost estimate: one table, with its source and its date.

These are public on-demand list prices in US dollars, the same in us-east-1 (N. Virginia) and
us-west-2 (Oregon), for Linux (no OS licence). They are not fetched from AWS (the plan makes no
AWS calls) and they age: check the AWS pricing pages before trusting an estimate, and update the
table (and `PRICES_AS_OF`) when they change. Other regions' prices differ and are not modelled.

- EC2 on-demand: https://aws.amazon.com/ec2/pricing/on-demand/
- FSx for Lustre: https://aws.amazon.com/fsx/lustre/pricing/ (SSD storage, per GB-month; FSx bills
  the provisioned capacity, which a run file gives in GiB)
- NAT gateway: https://aws.amazon.com/vpc/pricing/ (per hour; data processing is per GB on top)

An instance type missing from the table is not an error: the estimate names it and says it is
partial.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from types import MappingProxyType

# The region the plan shows (and prices) when the run file names none.
DEFAULT_REGION = "us-west-2"

CURRENCY = "USD"
# The date the prices below were the published on-demand list prices.
PRICES_AS_OF = date(2025, 1, 1)
PRICED_REGIONS = ("us-east-1", "us-west-2")
# AWS converts monthly prices to hourly ones with 730 hours a month.
HOURS_PER_MONTH = 730

_INSTANCES_PER_HOUR: dict[str, float] = {
    # Trainium (the run's compute nodes).
    "trn1.2xlarge": 1.34375,
    "trn1.32xlarge": 21.50,
    "trn1n.32xlarge": 24.78,
    # Trn2 launched in December 2024 in fewer regions (us-east-2 first); least certain price here.
    "trn2.48xlarge": 44.70,
    # Head nodes.
    "c5.large": 0.085,
    "c5.xlarge": 0.17,
    "c5.2xlarge": 0.34,
    "c5.4xlarge": 0.68,
    "c5.9xlarge": 1.53,
    "c5.12xlarge": 2.04,
    "c5.18xlarge": 3.06,
    "c5.24xlarge": 4.08,
    "c6i.large": 0.085,
    "c6i.xlarge": 0.17,
    "c6i.2xlarge": 0.34,
    "c6i.4xlarge": 0.68,
    "c6i.8xlarge": 1.36,
    "c6i.12xlarge": 2.04,
    "c6i.16xlarge": 2.72,
    "c6i.24xlarge": 4.08,
    "c6i.32xlarge": 5.44,
    "m5.large": 0.096,
    "m5.xlarge": 0.192,
    "m5.2xlarge": 0.384,
    "m5.4xlarge": 0.768,
    "m5.8xlarge": 1.536,
    "m5.12xlarge": 2.304,
    "m5.16xlarge": 3.072,
    "m5.24xlarge": 4.608,
    "m6i.large": 0.096,
    "m6i.xlarge": 0.192,
    "m6i.2xlarge": 0.384,
    "m6i.4xlarge": 0.768,
    "m6i.8xlarge": 1.536,
    "m6i.12xlarge": 2.304,
    "m6i.16xlarge": 3.072,
    "m6i.24xlarge": 4.608,
    "m6i.32xlarge": 6.144,
}

# SSD storage per GB-month, by (deployment type, throughput in MB/s per TiB); scratch file
# systems have no throughput tier (None).
_FSX_LUSTRE_GB_MONTH: dict[tuple[str, int | None], float] = {
    ("SCRATCH_1", None): 0.140,
    ("SCRATCH_2", None): 0.140,
    ("PERSISTENT_1", 50): 0.145,
    ("PERSISTENT_1", 100): 0.210,
    ("PERSISTENT_1", 200): 0.290,
    ("PERSISTENT_2", 125): 0.145,
    ("PERSISTENT_2", 250): 0.210,
    ("PERSISTENT_2", 500): 0.340,
    ("PERSISTENT_2", 1000): 0.600,
}


@dataclass(frozen=True)
class PriceTable:
    """Hourly and monthly list prices, with where they come from and when they held."""

    as_of: date
    source: str
    currency: str
    instance_per_hour: Mapping[str, float] = field(repr=False)
    fsx_lustre_gb_month: Mapping[tuple[str, int | None], float] = field(repr=False)
    nat_gateway_per_hour: float
    # An EKS cluster's control plane an hour, by the support period of its Kubernetes version.
    eks_cluster_per_hour: Mapping[str, float] = field(repr=False)

    def instance(self, instance_type: str) -> float | None:
        """The on-demand price of one instance for an hour, or None when the table lacks the type."""
        return self.instance_per_hour.get(instance_type)

    def fsx_lustre_per_gib_hour(self, deployment_type: str, throughput_per_tib: int | None) -> float | None:
        """The price of one GiB of FSx for Lustre storage for an hour (GB-month / 730), or None."""
        monthly = self.fsx_lustre_gb_month.get((deployment_type, throughput_per_tib))
        return None if monthly is None else monthly / HOURS_PER_MONTH


PRICES = PriceTable(
    as_of=PRICES_AS_OF,
    source=(
        f"on-demand prices, {'/'.join(PRICED_REGIONS)}, as published by AWS on {PRICES_AS_OF.isoformat()}; "
        "check the AWS pricing pages (aws.amazon.com/ec2/pricing/on-demand, aws.amazon.com/fsx/lustre/pricing, "
        "aws.amazon.com/vpc/pricing, aws.amazon.com/eks/pricing)"
    ),
    currency=CURRENCY,
    instance_per_hour=MappingProxyType(_INSTANCES_PER_HOUR),
    fsx_lustre_gb_month=MappingProxyType(_FSX_LUSTRE_GB_MONTH),
    nat_gateway_per_hour=0.045,
    # Amazon EKS pricing: the same in every commercial region.
    eks_cluster_per_hour=MappingProxyType({"standard": 0.10, "extended": 0.60}),
)
