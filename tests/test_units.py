"""Units and physical facts have one spelling: byte and count units in pricing/units.py (re-exported by
advisor/units.py), bytes per dtype and NF4's layout in advisor/units.py with their sources. A bare 1e9 or 2**30 in
the code is a unit conversion nobody can search for."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

from advisor import units
from advisor.estimate.memory import PARAM_BYTES, nf4_bytes_per_param

ROOT = Path(__file__).resolve().parents[1]
HOME = {ROOT / "pricing" / "units.py", ROOT / "advisor" / "units.py"}
# A unit conversion: 1e9, 1e6, 1e12, 1_000_000_000, 2**20/30/40 or 1024 * 1024 multiplied or divided by
# (bounds such as `std < 1e9` and DeepSpeed's own config values, written as its source writes them, are not).
BARE = re.compile(r"^(1e9|1e6|1e12|1_000_000_000)$")


def bare_units(path: Path) -> list[str]:
    toks = [t for t in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
            if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE)]
    found = []
    for i, tok in enumerate(toks):
        if tok.type != tokenize.NUMBER:
            continue
        before, after = toks[i - 1].string if i else "", [t.string for t in toks[i + 1:i + 3]]
        power = tok.string == "2" and after[:1] == ["**"] and after[1:2] in (["20"], ["30"], ["40"])
        kib = tok.string == "1024" and after == ["*", "1024"]
        scaled = before in ("*", "/", "//") or after[:1] in (["*"], ["/"], ["//"])
        if (BARE.match(tok.string) and scaled) or power or kib:
            found.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {before} {tok.string} {' '.join(after)}")
    return found


CODE = [p for d in ("advisor", "pricing", "reports", "cli") for p in sorted((ROOT / d).rglob("*.py"))
        if p not in HOME and "templates" not in p.parts]


def test_no_bare_byte_or_count_unit_outside_the_units_modules():
    found = [hit for p in CODE for hit in bare_units(p)]
    assert not found, "use pricing.units / advisor.units (GB, GiB, MiB, BILLION, MILLION, TERA):\n" + "\n".join(found)


def test_the_check_sees_a_bare_unit(tmp_path):
    planted = ROOT / "advisor" / "_planted_units_check.py"
    try:
        planted.write_text("x = 5 * 1e9\ny = 3 * 2**30  # GiB\nz = 'a string / 1e9'\nok = n < 1e9\n")
        assert len(bare_units(planted)) == 2
    finally:
        planted.unlink()


def test_nf4_bytes_per_parameter_follow_the_qlora_layout():
    """QLoRA (arXiv:2305.14314 §3): 4-bit weights, an fp32 absmax per 64 weights, or with double quantisation an
    8-bit absmax per 64 and an fp32 constant per 256 blocks: 0.5 + 4/64 and 0.5 + 1/64 + 4/(64·256) bytes."""
    assert nf4_bytes_per_param(False) == 0.5 + 4 / 64 == 0.5625
    assert nf4_bytes_per_param(True) == pytest.approx(0.516, abs=1e-3)
    assert nf4_bytes_per_param(True) < units.NF4_TRAFFIC_BYTES_PER_PARAM < nf4_bytes_per_param(False)


def test_bytes_per_parameter_by_precision():
    assert PARAM_BYTES == {"bf16": 2, "fp16": 2, "fp32": 4, "amp-bf16": 4, "amp-fp16": 4}
    assert (units.GB, units.GiB, units.MiB) == (10**9, 2**30, 2**20)
