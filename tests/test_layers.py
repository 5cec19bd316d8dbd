"""The layers of docs/DESIGN.md ("Layout") hold: cli -> reports -> advisor -> pricing, never upward.

Every module's imports (top-level and inside functions) are read from its source with `ast`,
so a lazy import inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pricing", "advisor", "reports", "cli")
# what each package may import from the others
ALLOWED = {
    "pricing": set(),
    "advisor": {"pricing"},
    # reports render result types: advisor.results (+ the shared formatters and errors) and the
    # one atomic file writer; never the planner, the engine or the CLI
    # + advisor.launch.caveats: what a launch bundle for a candidate differs in, a pure function of the result
    "reports": {"advisor.results", "advisor.text", "advisor.units", "advisor.errors", "advisor.stacks",
                "advisor.launch.caveats", "pricing.files"},
    "cli": {"advisor", "pricing", "reports"},
}
# the one shim allowed to reach up: `python -m advisor` delegates to the CLI package
EXCEPTIONS = {("advisor/__main__.py", "cli")}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def modules():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield package, path


def allowed(package: str, name: str) -> bool:
    top = name.split(".")[0]
    if top not in PACKAGES or top == package:
        return True
    return any(name == a or name.startswith(a + ".") for a in ALLOWED[package])


@pytest.mark.parametrize("package,path", list(modules()), ids=lambda v: str(v).split("/main/")[-1])
def test_no_package_imports_upward(package, path):
    rel = str(path.relative_to(ROOT))
    bad = sorted(n for n in imports(path) if not allowed(package, n) and (rel, n.split(".")[0]) not in EXCEPTIONS)
    # `from advisor import results` is reported as both 'advisor' and 'advisor.results': judge the longer name
    bad = [n for n in bad if not any(other.startswith(n + ".") and allowed(package, other)
                                     for other in imports(path))]
    assert not bad, f"{rel} imports {bad}, above its layer ({package} may use {sorted(ALLOWED[package]) or 'nothing'})"


def test_the_design_doc_it_names_is_in_the_repository():
    design = (ROOT / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    assert "No package imports upward" in design and all(f"`{p}`" in design for p in ("pricing", "advisor", "reports"))


def test_the_layer_test_catches_an_upward_import(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text("def f():\n    from reports import render\n")
    assert not all(allowed("advisor", n) for n in imports(bad))
    assert all(allowed("cli", n) for n in imports(bad))
