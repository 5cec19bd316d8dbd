"""Tests live in folders that mirror the packages (issue 44): tests/pricing/ tests pricing/, tests/advisor/planner/
tests advisor/planner/, and so on; only checks over the whole repository stay at tests/ root. Shared helpers live
in the tests/helpers/ package, never in a test module another test imports from."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# Checks over the whole repository or every surface at once: they stay at tests/ root
PROJECT_WIDE = {"test_complexity", "test_docs", "test_function_length", "test_layers", "test_lint",
                "test_suite_follows_the_index", "test_words_at_the_edge", "test_one_spelling", "test_units",
                "test_one_figure_per_row", "test_layout",
                "test_surfaces_one_figure"}  # every surface a plan is printed on, at once
NOT_TESTS = ("helpers", "data")  # tests/helpers/: shared helpers; tests/data/: recorded inputs


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if p.relative_to(TESTS).parts[0] not in NOT_TESTS)


def misplaced(files: list[Path], tests: Path, root: Path, project_wide: set[str]) -> list[str]:
    """Test files whose folder under tests/ is not a package folder of the repository (tests/x/y/ for x/y/ holding
    Python), and root-level test files that are not project-wide checks."""
    out = []
    for path in files:
        folder = path.parent.relative_to(tests)
        if folder == Path("."):
            if path.stem not in project_wide:
                out.append(f"{path.relative_to(tests)}: at tests/ root but not a project-wide check")
        elif not (root / folder).is_dir() or not any((root / folder).glob("*.py")):
            out.append(f"{path.relative_to(tests)}: {folder.as_posix()}/ is not a package folder of the repository")
    return out


def test_every_test_file_lives_in_a_folder_mirroring_a_package():
    files = _test_files()
    assert len(files) > len(PROJECT_WIDE)  # the walk found the suite
    assert not misplaced(files, TESTS, ROOT, PROJECT_WIDE), "\n".join(misplaced(files, TESTS, ROOT, PROJECT_WIDE))
    assert {p.stem for p in files if p.parent == TESTS} == PROJECT_WIDE  # each project-wide check exists


def test_the_check_names_a_test_in_a_folder_no_package_has(tmp_path):
    (tmp_path / "pricing").mkdir()
    (tmp_path / "pricing" / "gpus.py").write_text("")
    tests = tmp_path / "tests"
    for rel in ("pricing/test_a.py", "pricng/test_b.py", "test_c.py", "test_wide.py"):
        (tests / rel).parent.mkdir(parents=True, exist_ok=True)
        (tests / rel).write_text("")
    files = sorted(tests.rglob("test_*.py"))
    assert misplaced(files, tests, tmp_path, {"test_wide"}) == [
        "pricng/test_b.py: pricng/ is not a package folder of the repository",
        "test_c.py: at tests/ root but not a project-wide check"]


def test_test_file_names_are_unique_across_folders():
    """pytest imports test files without __init__.py by their basename (rootdir-relative `prepend` mode): two
    test_x.py in two folders would collide."""
    twice = [name for name, n in Counter(p.name for p in TESTS.rglob("*.py") if p.name != "__init__.py").items()
             if n > 1 and name != "conftest.py"]
    assert not twice


def test_no_test_module_imports_from_another_test_module():
    """Shared fixtures and helpers come from tests/helpers/ (or conftest.py), so a test file can move alone."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(TESTS)}:{node.lineno} {n}" for n in names
                      if n.split(".")[0].startswith("test_") or n.split(".")[0] == "conftest"]
    assert not found, "\n".join(found)
