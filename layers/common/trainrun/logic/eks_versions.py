"""The Kubernetes versions Amazon EKS creates clusters with, and the one trainrun pins: one table, with sources.

EKS gives each Kubernetes minor version 14 months of standard support from its EKS release, then
12 months of extended support (at an extra cost per cluster hour); "You can create new Amazon EKS
clusters on any version offered in standard or extended support", and on the end of extended
support date "you can no longer create new Amazon EKS clusters with the unsupported version"
(Amazon EKS User Guide, "Understand the Kubernetes version lifecycle on EKS").

The table is as of `TABLE_AS_OF` (the date it was last checked): the version sets below are
computed on that date, not on today's, so a run and its tests answer the same until the table is
next updated. Update the rows, then `TABLE_AS_OF`, when EKS releases a version.

Plain data, importable anywhere (the local EKS stand-in, trainrun.local.eks_emulator, refuses
versions outside `SUPPORTED_KUBERNETES_VERSIONS` and creates `DEFAULT_KUBERNETES_VERSION` when a
request names none).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Literal

__all__ = [
    "CALENDAR",
    "DEFAULT_KUBERNETES_VERSION",
    "STANDARD_SUPPORT_VERSIONS",
    "SUPPORTED_KUBERNETES_VERSIONS",
    "TABLE_AS_OF",
    "KubernetesVersion",
    "support_period",
]

# The release calendar's dates (Amazon EKS User Guide, "Understand the Kubernetes version lifecycle
# on EKS", "Amazon EKS Kubernetes release calendar"; the dates after 1.33 as endoflife.date/amazon-eks
# tracks that calendar).
_USER_GUIDE = "Amazon EKS User Guide, 'Understand the Kubernetes version lifecycle on EKS', release calendar"
_ENDOFLIFE = "endoflife.date/amazon-eks (tracks the Amazon EKS release calendar)"


@dataclass(frozen=True)
class KubernetesVersion:
    """One Kubernetes minor version on EKS: its EKS release and the ends of its two support periods."""

    version: str
    released: date
    end_of_standard_support: date
    end_of_extended_support: date
    source: str

    def creatable(self, on: date) -> bool:
        """CreateCluster takes the version on `on`: released, and extended support not over."""
        return self.released <= on < self.end_of_extended_support

    def standard(self, on: date) -> bool:
        return self.released <= on < self.end_of_standard_support


CALENDAR: tuple[KubernetesVersion, ...] = (
    KubernetesVersion(
        "1.36",
        date(2026, 6, 2),
        date(2027, 8, 2),
        date(2028, 8, 2),
        "devopsdreams.blogspot.com, 'Kubernetes 1.36 on Amazon EKS' (2026-08-16: on EKS June 2, 2026, standard "
        "support through August 2, 2027); extended support's end is the documented 14 + 12 months",
    ),
    KubernetesVersion("1.35", date(2026, 1, 27), date(2027, 3, 27), date(2028, 3, 27), _ENDOFLIFE),
    KubernetesVersion("1.34", date(2025, 10, 2), date(2026, 12, 2), date(2027, 12, 2), _ENDOFLIFE),
    KubernetesVersion("1.33", date(2025, 5, 29), date(2026, 7, 29), date(2027, 7, 29), _USER_GUIDE),
    KubernetesVersion("1.32", date(2025, 1, 23), date(2026, 3, 23), date(2027, 3, 23), _USER_GUIDE),
    KubernetesVersion("1.31", date(2024, 9, 26), date(2025, 11, 26), date(2026, 11, 26), _USER_GUIDE),
)

TABLE_AS_OF = date(2026, 11, 28)

# Newest first, as the calendar lists them.
SUPPORTED_KUBERNETES_VERSIONS: tuple[str, ...] = tuple(v.version for v in CALENDAR if v.creatable(TABLE_AS_OF))
STANDARD_SUPPORT_VERSIONS: tuple[str, ...] = tuple(v.version for v in CALENDAR if v.standard(TABLE_AS_OF))

# trainrun's pinned version: in standard support until March 2027 (1.34's ends December 2, 2026),
# and not the newest: CreateCluster's own default "might not be the latest version available"
# (Amazon EKS API Reference, CreateCluster, version), and the Neuron device plugin and EKS
# optimized Neuron AMIs follow a new Kubernetes version some weeks after EKS releases it.
DEFAULT_KUBERNETES_VERSION = "1.35"


def support_period(version: str) -> Literal["standard", "extended"]:
    """The EKS support period a cluster of `version` is created in, which its control plane's hour depends on."""
    return "standard" if version in STANDARD_SUPPORT_VERSIONS else "extended"
