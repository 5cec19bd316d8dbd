"""The price-fetch layer stays readable: no function in pricing/sources/, pricing/refresh.py, pricing/http.py,
pricing/providers.py or scripts/build_snapshot.py above cyclomatic complexity 20 (radon's count, as
`radon cc -s -n D` reports it)."""

from __future__ import annotations

from pathlib import Path

import pytest

radon = pytest.importorskip("radon.complexity", reason="radon is not installed (pip install radon)")

ROOT = Path(__file__).resolve().parents[2]
MAX_COMPLEXITY = 20
FILES = sorted([*(ROOT / "pricing" / "sources").glob("*.py"),
                *(ROOT / p for p in ("pricing/refresh.py", "pricing/http.py", "pricing/providers.py",
                                     "scripts/build_snapshot.py"))])


def too_complex(source: str) -> list[tuple[str, int]]:
    return [(block.fullname, block.complexity) for block in radon.cc_visit(source)
            if block.complexity > MAX_COMPLEXITY]


def test_the_check_catches_a_planted_branchy_function():
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(MAX_COMPLEXITY + 1))
    assert too_complex(f"def branchy(x):\n{branches}    return -1\n") == [("branchy", MAX_COMPLEXITY + 2)]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_fetch_function_is_over_the_complexity_limit(path):
    assert too_complex(path.read_text(encoding="utf-8")) == []
