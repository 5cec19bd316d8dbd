"""No function on the plan path is over cyclomatic complexity 20 (radon's count: one plus each branch, loop,
boolean operator and comprehension condition), so a change to one rule stays a change to one small function."""

from __future__ import annotations

from pathlib import Path

import pytest

radon = pytest.importorskip("radon.complexity")

ROOT = Path(__file__).resolve().parents[1]
MAX_COMPLEXITY = 20
# The planner's stages after the search, the results, the words and every surface a plan is printed on
PATHS = ("advisor/explain", "advisor/results", "advisor/planner/select.py", "advisor/planner/ranking.py",
         "advisor/planner/assemble.py", "advisor/planner/findings.py", "advisor/planner/remedy.py",
         "advisor/planner/rejections.py", "advisor/planner/pipeline.py", "advisor/planner/__init__.py",
         "advisor/units.py", "reports", "cli/plan.py", "cli/output.py")


def _files():
    for rel in PATHS:
        path = ROOT / rel
        yield from sorted(path.rglob("*.py")) if path.is_dir() else [path]


def over(source: str, name: str) -> list[str]:
    return [f"{name}:{b.lineno} {b.fullname} ({b.complexity})" for b in radon.cc_visit(source)
            if b.complexity > MAX_COMPLEXITY]


def test_no_function_on_the_plan_path_is_over_complexity_20():
    found = [hit for path in _files() for hit in over(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert not found, "\n".join(found)


def test_the_check_counts_a_planted_tangle():
    tangle = "def f(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(MAX_COMPLEXITY)) + \
        "    return -1\n"
    assert over(tangle, "planted.py")
