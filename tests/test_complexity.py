"""No function in any Python file we write is over cyclomatic complexity 20 (radon's count: one plus each branch,
loop, boolean operator and comprehension condition), so a change to one rule stays a change to one small function:
the product (its launch templates included), the scripts, the benchmarks and the tests themselves."""

from __future__ import annotations

from pathlib import Path

import pytest

radon = pytest.importorskip("radon.complexity")  # the test extra installs radon (pyproject.toml)

ROOT = Path(__file__).resolve().parents[1]
MAX_COMPLEXITY = 20
# Every top-level folder of Python we own. The launch bundle's Python templates (advisor/launch/templates/*.py) and
# the report's templates (reports/templates) sit inside their packages. None of these folders holds a vendored or
# generated .py file (tests/data holds recorded JSON/CSV only), so nothing in them is excluded for that reason.
OWNED = ("advisor", "pricing", "reports", "cli", "scripts", "benchmarks", "tests")
# Top-level folders that hold other people's Python or build output, never ours (hidden ones, such as .git, .venv
# and the tools' caches, are skipped by their leading dot).
NOT_OURS = ("build", "dist", "venv", "env", "node_modules")


def _not_ours(path: Path) -> bool:
    return path.name.startswith(".") or path.name in NOT_OURS or path.name.endswith(".egg-info")


def _files() -> list[Path]:
    files = sorted(ROOT.glob("*.py"))
    for folder in OWNED:
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


def over(source: str, name: str) -> list[str]:
    return [f"{name}:{b.lineno} {b.fullname} ({b.complexity})" for b in radon.cc_visit(source)
            if b.complexity > MAX_COMPLEXITY]


def test_no_function_we_own_is_over_complexity_20():
    found = [hit for path in _files() for hit in over(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert not found, "\n".join(found)


def test_the_check_reads_every_folder_of_python_in_the_repository():
    """A new top-level folder of Python joins OWNED (or NOT_OURS, with why): the check cannot miss it silently."""
    unlisted = [p.name for p in sorted(ROOT.iterdir()) if p.is_dir() and not _not_ours(p) and p.name not in OWNED
                and next(p.rglob("*.py"), None) is not None]
    assert not unlisted, f"folders of Python the complexity check does not read: {unlisted}"
    checked = {p.relative_to(ROOT).parts[0] for p in _files()}
    assert checked == set(OWNED)  # each folder listed holds Python the check reads
    assert ROOT / "advisor" / "launch" / "templates" / "train.py" in _files()
    assert Path(__file__).resolve() in _files()


def test_the_check_counts_a_planted_tangle():
    tangle = "def f(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(MAX_COMPLEXITY)) + \
        "    return -1\n"
    assert over(tangle, "planted.py")
    assert not over(tangle.replace("    if x == 0:\n        return 0\n", ""), "planted.py")
