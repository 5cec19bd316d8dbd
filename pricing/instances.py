"""The curated instance-spec table, and GPU-name resolution for provider feeds.

Provider feeds are unreliable about GPU names, counts and memory (PRICE_SOURCES.md §9–11:
Azure lists 12 H100s on an 8-GPU ND96isr_H100_v5, RunPod writes GB into a MiB field, Vast
writes totals, Nebius writes 0). So the GPU model comes from our own GPU table, corrected
by `data/instances.csv` (known instance types -> GPU model, count, vCPUs, RAM, interconnect)
and by the memory the feed reports, which only ever disambiguates (A100 40 vs 80 GB, H100
SXM vs NVL); `gpu_memory_gb` is always the table's marketing figure.
"""

from __future__ import annotations

import csv
import fnmatch
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pricing.gpus import canonical_name, normalise

DATA = Path(__file__).parent / "data" / "instances.csv"

# Provider labels our GPU table does not list as aliases (PRICE_SOURCES.md §9).
EXTRA_ALIASES = {
    "t4g": "T4",  # AWS g5g: NVIDIA T4G, the Arm-host build of the T4
    "h100sxm5": "H100",
    "h100pcie": "H100-PCIE",
    "h100nvl": "H100-NVL",
    "a100pcie": "A100-PCIE",
    "a10080gbpcie": "A100-80GB-PCIE",
    "rtx6000ada": "RTX6000-Ada",
}


@dataclass(frozen=True)
class InstanceSpec:
    provider: str
    pattern: str
    gpu_model: str | None
    gpu_count: float | None
    vcpus: float | None
    ram_gb: float | None
    interconnect: str | None
    note: str


@lru_cache(maxsize=1)
def specs() -> tuple[InstanceSpec, ...]:
    def num(v: str) -> float | None:
        return float(v) if v else None

    with DATA.open(newline="", encoding="utf-8") as f:
        return tuple(
            InstanceSpec(r["provider"], r["pattern"], r["gpu_model"] or None, num(r["gpu_count"]),
                         num(r["vcpus"]), num(r["ram_gb"]), r["interconnect"] or None, r["note"])
            for r in csv.DictReader(f)
        )


@lru_cache(maxsize=4096)
def lookup(provider: str, instance_type: str) -> InstanceSpec | None:
    """The first curated entry whose glob matches this provider's instance type."""
    for s in specs():
        if s.provider == provider and fnmatch.fnmatchcase(instance_type, s.pattern):
            return s
    return None


def gpu_name(name: str | None) -> str | None:
    """Canonical GPU id for a feed's label, via the GPU table and the extra provider aliases."""
    if not name:
        return None
    return canonical_name(name) or EXTRA_ALIASES.get(normalise(name))


def resolve_gpu(provider: str, instance_type: str, *labels: str | None,
                memory_gib_per_gpu: float | None = None) -> str | None:
    """The canonical GPU of an offer: curated table first, then the feed's labels + memory."""
    spec = lookup(provider, instance_type)
    if spec and spec.gpu_model:
        return spec.gpu_model
    canon = next((c for c in (gpu_name(lb) for lb in labels) if c), None)
    if canon is None:
        return None
    text = " ".join(str(x) for x in (instance_type, *labels) if x).lower()
    pcie = "pcie" in text or "pci" in text.replace("pcie", "pci")
    mem = memory_gib_per_gpu if memory_gib_per_gpu and memory_gib_per_gpu > 0 else None
    return _form_factor(canon, pcie, mem)


PCIE_PART = {"A100": "A100-PCIE", "A100-80GB": "A100-80GB-PCIE", "H100": "H100-PCIE"}  # the same GPU, PCIe card


def _form_factor(canon: str, pcie: bool, mem: float | None) -> str:
    """A GPU name refined by what the feed says of its memory and form factor (identity = model + memory + form)."""
    if canon in ("A100", "A100-PCIE") and mem and mem > 60:  # Cudo/Vast label 80 GB parts "A100"
        return "A100-80GB-PCIE" if pcie else "A100-80GB"
    if canon == "H100" and mem and 88 < mem < 110:  # 94 GB: the NVL part (Vast 95830 MiB)
        return "H100-NVL"
    return PCIE_PART.get(canon, canon) if pcie else canon
