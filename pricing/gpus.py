"""The GPU table: canonical GPU names, memory, peak throughput and interconnect.

It lives in `pricing` because price sheets normalise provider GPU names against it and
`pricing` sits at the bottom of the dependency graph; `advisor` reads it from here.
The rows in `pricing/data/gpus.csv` were built from vendor datasheets (dense, not sparse,
tensor-core TFLOPS; each row keeps its `source_url` and `confidence`).
`usable_gib` is what `torch.cuda.get_device_properties().total_memory` reports — the
capacity a CUDA OOM message prints — not the marketing number. Dense tensor rates are the ones
PyTorch runs: bf16/fp16 inputs with fp32 accumulation (cuBLAS CUBLAS_COMPUTE_32F), which GeForce
parts execute at half their fp16-accumulate rate (NVIDIA Ada whitepaper, appendix A: RTX 4090
"Peak BF16 Tensor TFLOPS with FP32 Accumulate 165.2/330.4"; GA102 whitepaper: RTX 3090 71/142;
RTX Blackwell whitepaper: RTX 5090 209.5/419). `pcie_p2p` is false for GeForce cards, whose
drivers expose no PCIe peer-to-peer (tinygrad/open-gpu-kernel-modules README for the RTX 4090;
the same patch is what re-enables it on RTX 3090/5090), so NCCL stages their traffic through host
memory (advisor/data/mfu.json `no_p2p_host_staged_gb_s`).
"""

from __future__ import annotations

import csv
import difflib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pricing.units import GB, GiB

DATA = Path(__file__).parent / "data" / "gpus.csv"


@dataclass(frozen=True)
class GPU:
    """One accelerator model, as training sees it."""

    name: str  # canonical id, e.g. "H100", "A100-80GB"
    full_name: str
    vendor: str
    architecture: str
    compute_capability: str
    memory_gb: float  # marketing capacity, GB
    usable_gib: float  # what torch reports as total device memory
    mem_bandwidth_tb_s: float
    dense_bf16_tflops: float | None  # None where bf16 has no tensor cores
    dense_fp16_tflops: float
    fp32_tflops: float
    supports_bf16: bool
    supports_flash_attention: bool
    interconnect: str  # nvlink | pcie | infinity-fabric
    link_gb_s_per_direction: float  # GPU-to-GPU inside one node
    interconnect_text: str
    source_url: str
    confidence: str
    aliases: tuple[str, ...] = ()
    pcie_p2p: bool = True  # PCIe peer-to-peer between cards (false: NCCL copies through host memory)
    power_limit_w: float | None = None  # a power cap set below the card's own (nvidia-smi -pl); None: the card's

    @property
    def usable_bytes(self) -> int:
        return int(self.usable_gib * GiB)

    def memory_words(self, headroom: float) -> str:
        """The one memory vocabulary (every command, table, report and bundle): the card's capacity as sold
        (GB), what torch reports usable (GB), and the limit a run may use after `headroom` (GB):
        'A10G: 24 GB card, 23.7 GB usable, limit 21.3 GB with 10% headroom'."""
        limit = int(self.usable_bytes * (1 - headroom))
        return (f"{self.name}: {self.memory_gb:g} GB card, {self.usable_bytes / GB:.1f} GB usable, limit "
                f"{limit / GB:.1f} GB with {headroom:.0%} headroom")

    def peak_tflops(self, precision: str) -> float:
        """Dense tensor-core peak for the compute dtype of `precision`."""
        if precision in ("bf16", "amp-bf16"):
            return self.dense_bf16_tflops or self.dense_fp16_tflops
        if precision in ("fp16", "amp-fp16"):
            return self.dense_fp16_tflops
        return self.fp32_tflops


def normalise(name: str) -> str:
    """Fold a provider's GPU string to a lookup key (case, vendor prefixes, separators)."""
    s = name.strip().lower()
    s = re.sub(r"^(nvidia|amd)[ _-]+", "", s)
    s = re.sub(r"^(tesla|geforce|instinct)[ _-]+", "", s)
    s = re.sub(r"[\s_\-]+", "", s)
    return s


@lru_cache(maxsize=1)
def _table() -> dict[str, GPU]:
    out: dict[str, GPU] = {}
    with DATA.open(newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            def num(key: str, r: dict = r) -> float | None:  # this row (bound now, called now)
                return float(r[key]) if r[key] not in ("", None) else None

            gpu = GPU(
                name=r["gpu_model"],
                full_name=r["full_name"],
                vendor=r["vendor"],
                architecture=r["architecture"],
                compute_capability=r["compute_capability"],
                memory_gb=float(r["memory_gb"]),
                usable_gib=float(r["usable_gib"]),
                mem_bandwidth_tb_s=float(r["mem_bandwidth_tb_s"]),
                dense_bf16_tflops=num("dense_bf16_tflops"),
                dense_fp16_tflops=float(r["dense_fp16_tflops"]),
                fp32_tflops=float(r["fp32_tflops"]),
                supports_bf16=r["supports_bf16"].lower() == "true",
                supports_flash_attention=r["supports_flash_attention"].lower() == "true",
                interconnect=r["interconnect"],
                link_gb_s_per_direction=float(r["link_gb_s_per_direction"]),
                interconnect_text=r["interconnect_text"],
                source_url=r["source_url"],
                confidence=r["confidence"],
                aliases=tuple(a for a in r["aliases"].split(";") if a),
                pcie_p2p=(r.get("pcie_p2p") or "true").lower() == "true",
            )
            out[gpu.name] = gpu
    return out


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    idx: dict[str, str] = {}
    for gpu in _table().values():
        for key in (gpu.name, gpu.full_name, *gpu.aliases):
            idx.setdefault(normalise(key), gpu.name)
    return idx


def all_gpus() -> list[GPU]:
    return list(_table().values())


def canonical_name(name: str) -> str | None:
    """The canonical id for a provider's GPU string, or None when it is not in the table."""
    return _index().get(normalise(name))


def family(canon: str | None) -> str | None:
    """A canonical GPU's family without memory or form factor: 'H100-PCIE' -> 'H100', 'A100-80GB' -> 'A100'."""
    return re.split(r"[-_ ]", canon, maxsplit=1)[0].upper() if canon else None


def named_family(text: str) -> str | None:
    """The one GPU family a description or instance name names ('H100 (80 GB SXM5)', 'gpu_8x_h100_sxm5',
    'Standard_NC24ads_A100_v4'), judged token by token (tokens with a letter and a digit only);
    None when it names none, or several."""
    found = {family(canonical_name(t)) for t in re.split(r"[^A-Za-z0-9]+", str(text))
             if t and not t.isalpha() and not t.isdigit()} - {None}
    return found.pop() if len(found) == 1 else None


def suggestions(name: str, n: int = 3) -> list[str]:
    keys = difflib.get_close_matches(normalise(name), list(_index()), n=n * 3, cutoff=0.5)
    seen: list[str] = []
    for k in keys:
        c = _index()[k]
        if c not in seen:
            seen.append(c)
    return seen[:n]


class UnknownGPU(ValueError):
    """A GPU name not in the table; the message lists close matches and the valid names."""

    exit_code = 2


def get_gpu(name: str) -> GPU:
    canon = canonical_name(name)
    if canon is None:
        close = suggestions(name)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise UnknownGPU(
            f"--gpu: unknown GPU '{name}'.{hint} Known GPUs: {', '.join(sorted(_table()))}."
        )
    return _table()[canon]
