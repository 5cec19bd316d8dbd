"""Byte and count units, defined once for every layer (`pricing` is the bottom one: advisor, reports and cli
import these through advisor.units). GB is 10^9 bytes (what cloud vendors and GPU spec sheets print), GiB is
2^30 (what nvidia-smi and PyTorch's allocator count); bytes are integers everywhere and become GB or GiB only
where a number is printed (advisor.units formats them).
"""

from __future__ import annotations

KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40
MB = 1e6
GB = 1e9
# Counts: the M and B of '20M tokens' and '8B parameters'; T of TFLOP/s and TB/s (10^12).
MILLION = 1e6
BILLION = 1e9
TERA = 1e12
