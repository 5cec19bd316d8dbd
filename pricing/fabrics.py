"""Inter-node fabrics: which instance types can form one multi-node training job, and how fast.

`pricing/data/fabrics.csv` (compiled from the providers' instance and network documentation;
every row cites its source, see FABRICS_SOURCES.md beside it) maps a provider's instance-type
glob to its fabric and network bandwidth per node. Instances with no row, or with
`multi_node=false` (marketplaces, single pods, inference-only shapes), are planned on one node.
"""

from __future__ import annotations

import csv
import fnmatch
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).parent / "data" / "fabrics.csv"


@dataclass(frozen=True)
class Fabric:
    provider: str
    pattern: str
    name: str
    gbps_per_node: float | None
    gpudirect_rdma: bool
    multi_node: bool
    source: str
    note: str


@lru_cache(maxsize=1)
def fabrics() -> tuple[Fabric, ...]:
    with DATA.open(newline="", encoding="utf-8") as f:
        return tuple(
            Fabric(r["provider"], r["instance_pattern"], r["fabric"],
                   float(r["gbps_per_node"]) if r["gbps_per_node"] else None,
                   r["gpudirect_rdma"].lower() == "true", r["multi_node"].lower() == "true",
                   r["source_url"], r["note"])
            for r in csv.DictReader(f)
        )


@lru_cache(maxsize=1)
def providers() -> frozenset[str]:
    """Providers the table has rows for (any other provider's instances are single-node)."""
    return frozenset(f.provider for f in fabrics())


@lru_cache(maxsize=8192)
def lookup(provider: str, instance_type: str) -> Fabric | None:
    """The fabric row for this provider's instance type (first matching glob), or None if unknown."""
    provider = provider.lower()
    for fab in fabrics():
        if fab.provider == provider and fnmatch.fnmatchcase(instance_type, fab.pattern):
            return fab
    return None


def cluster_gbps(provider: str, instance_type: str) -> float | None:
    """Network per node (Gb/s) when this instance type is sold as a multi-node cluster, else None."""
    fab = lookup(provider, instance_type)
    if fab is None or not fab.multi_node or not fab.gbps_per_node:
        return None
    return fab.gbps_per_node
