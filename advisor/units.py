"""Units and numbers as people read them: the byte constants, and the one formatter of each kind.

Bytes are integers internally; GB (10^9) and GiB (2^30) are shown with their unit. Money, sizes and
durations look the same in the CLI, the reports and the launch README.
"""

from __future__ import annotations

import math

from pricing.units import BILLION, GB, MB, MILLION, TERA, GiB, KiB, MiB, TiB

__all__ = ["BILLION", "GB", "MB", "MILLION", "TERA", "GiB", "KiB", "MiB", "TiB"]  # re-exported: one definition

# Bytes per element of each dtype: IEEE 754 binary32 (4), binary16 and bfloat16 (2), int8 (1); what
# torch.finfo(dtype).bits / 8 and torch.iinfo(torch.int8).bits / 8 give.
BYTES_FP32 = 4
BYTES_16BIT = 2  # bf16 and fp16
BYTES_INT8 = 1
# NF4, QLoRA's 4-bit NormalFloat (Dettmers et al. 2023, arXiv:2305.14314, §3 and "Double Quantization"):
# 4 bits per weight, one absmax constant per block of 64 weights, fp32, or with double quantisation 8-bit with
# one fp32 constant per 256 of those blocks (bitsandbytes blocksize 64; compress_statistics blocksize 256).
NF4_BYTES = 0.5
NF4_BLOCK = 64
NF4_DOUBLE_QUANT_BLOCK = 256
# The time model's NF4 weight bytes moved per parameter when weights travel (FSDP/ZeRO-3 gathers, parameter
# offload over PCIe): the 0.5 B weight plus its constants, rounded up to 0.53, between the exact
# advisor.estimate.memory.nf4_bytes_per_param with double quantisation (0.516) and without (0.5625). A time-model
# figure (communication volume), not a memory one; changing it moves every sharded or offloaded QLoRA time.
NF4_TRAFFIC_BYTES_PER_PARAM = 0.53


def money(v: float | None, digits: int = 2) -> str:
    """'$1,234.56' ('n/a' when unknown)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    return f"${v:,.{digits}f}"


def count(n: float) -> str:
    """7_241_732_096 -> '7.24B', 999_885_952 -> '1.00B' (three significant figures, never '1e+03M')."""
    n = int(n)
    for div, unit in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if abs(n) >= div * 0.9995:  # rounds to at least 1.00 of this unit
            v = n / div
            digits = 2 if abs(v) < 9.995 else 1 if abs(v) < 99.95 else 0
            return f"{v:,.{digits}f}{unit}"
    return str(n)


def tokens(n: float, flag: bool = False) -> str:
    """A token count as people say it, never rounded to nothing: 13_028 -> '13.0k', 100_000_000 -> '100M',
    1_000_000_000 -> '1.0B', 850 -> '850'. `flag`: as a --tokens value reads, in M or B to three significant
    figures (30_700_000 -> '30.7M', 2_000_000_000 -> '2B')."""
    if flag:
        return f"{n / 10**9:.3g}B" if n >= 10**9 else f"{n / 10**6:.3g}M"
    n = int(round(n))
    for div, unit in ((10**9, "B"), (10**6, "M"), (10**3, "k")):
        if abs(n) >= div:
            v = n / div
            return f"{v:,.{1 if abs(v) < 100 else 0}f}{unit}"
    return f"{n:,}"


def gb(n: float, digits: int = 1) -> str:
    """Bytes as GB (10^9), with the unit."""
    return f"{n / GB:,.{digits}f} GB"


def gib(n: float, digits: int = 1) -> str:
    """Bytes as GiB (2^30), with the unit."""
    return f"{n / GiB:,.{digits}f} GiB"


def duration(h: float) -> str:
    """Hours as people say them: '45 min', '6.2 h', '130.0 h (5.4 days)'."""
    if h < 1:
        return f"{h * 60:.0f} min"
    if h < 48:
        return f"{h:.1f} h"
    return f"{h:,.1f} h ({h / 24:.1f} days)"


def pct(x: float) -> str:
    return f"{x * 100:.0f}%"
