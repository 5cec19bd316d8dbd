"""The layers of docs/DESIGN.md ("Layout") hold: cli -> reports -> advisor -> pricing, never upward; no
module imports another in a circle; and the project's own modules are imported at the top of a module.

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
    # + advisor.explain: every sentence about a plan, written from the results
    "reports": {"advisor.results", "advisor.explain", "advisor.text", "advisor.units", "advisor.errors", "advisor.stacks",
                "advisor.launch.caveats", "pricing.files"},
    "cli": {"advisor", "pricing", "reports"},
}
# the one shim allowed to reach up: `python -m advisor` delegates to the CLI package
EXCEPTIONS = {("advisor/__main__.py", "cli")}
# Imports of the project's own modules inside functions: a few, each for a reason its line gives (a package
# face that loads its contents on first use, an optional import in a script the bundle carries). Deferral is
# for heavy third-party modules (pandas, numpy, torch, PyYAML, jinja2, matplotlib ...), imported inside the
# functions that use them; an import of the project inside a function hides a dependency, and an import
# circle with it.
MAX_DEFERRED = 20


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


def modules(root: Path = ROOT):
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
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


# ----------------------------------------------------------------------------- the module graph


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def own_imports(path: Path, root: Path, known: set[str]) -> list[tuple[str, int, bool, str]]:
    """(module imported, line, inside a function, the statement) for each name a module takes from the
    project: `from a.b import c` is module a.b.c when that is a module, else a.b (a package's face)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inside = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    here = module_name(path, root)
    out = []
    for node in ast.walk(tree):
        for name in _imported(node, path, here, known):
            if name.split(".")[0] not in PACKAGES:
                continue
            while name and name not in known:  # `import advisor.x.y` runs advisor.x.y's module
                name = name.rpartition(".")[0]
            if name and name != here:
                out.append((name, node.lineno, id(node) in inside, ast.unparse(node)))
    return out


def _imported(node: ast.AST, path: Path, here: str, known: set[str]) -> list[str]:
    """The dotted names an import statement takes (none for any other node)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: from the module's package, up level - 1 packages
        package = here.split(".") if path.name == "__init__.py" else here.split(".")[:-1]
        base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def import_graph(root: Path = ROOT) -> dict[str, list[tuple[str, int, bool, str]]]:
    paths = {module_name(p, root): p for _, p in modules(root)}
    known = set(paths)
    return {name: own_imports(path, root, known) for name, path in paths.items()}


def circles(graph: dict[str, list[tuple[str, int, bool, str]]]) -> list[list[str]]:
    """Each set of modules that import each other in a loop (strongly connected, Tarjan), as one loop through it."""
    edges = {m: sorted({t for t, *_ in out if t in graph}) for m, out in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(_loop(sorted(group)[0], group, edges))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _loop(start: str, group: set[str], edges: dict[str, list[str]]) -> list[str]:
    """The shortest import path from `start` back to itself inside its group."""
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in edges[v]:
            if w == start:
                return paths[v] + [start]
            if w in group and w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return [start]


def _plant(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in PACKAGES:
        (root / package).mkdir(exist_ok=True)
        (root / package / "__init__.py").touch()
    return root


def test_no_module_imports_another_in_a_circle():
    graph = import_graph()
    lines = []
    for loop in circles(graph):
        steps = [f"{a} -> {b} (line {next(ln for t, ln, *_ in graph[a] if t == b)})" for a, b in zip(loop, loop[1:])]
        lines.append("; ".join(steps))
    assert not lines, "import circles (imports inside functions count):\n" + "\n".join(lines)


def test_the_circle_check_catches_a_circle_hidden_inside_a_function(tmp_path):
    root = _plant(tmp_path, {
        "advisor/engine.py": "from advisor.estimate import memory\n",
        "advisor/estimate/__init__.py": "",
        "advisor/estimate/memory.py": "def estimate_memory():\n    from advisor.engine import Engine\n",
        "advisor/planner/__init__.py": "from advisor.planner.select import select\n",
        "advisor/planner/select.py": "from advisor.planner import costing\nfrom advisor.planner import plan\n",
        "advisor/planner/costing.py": "",
        "reports/render.py": "from reports.card import card\n",
        "reports/card.py": "import reports.render\n",
    })
    assert sorted(circles(import_graph(root))) == [["advisor.engine", "advisor.estimate.memory", "advisor.engine"],
                                                  ["advisor.planner", "advisor.planner.select", "advisor.planner"],
                                                  ["reports.card", "reports.render", "reports.card"]]
    # a package face that hands on its submodules, and submodules that import each other by name, are no circle
    (root / "advisor/planner/select.py").write_text("from advisor.planner import costing\n")
    assert [loop[0] for loop in circles(import_graph(root))] == ["advisor.engine", "reports.card"]


def deferred(root: Path = ROOT) -> list[str]:
    """Every name taken from the project's own modules inside a function, as 'file:line: statement'."""
    graph = import_graph(root)
    paths = {module_name(p, root): p for _, p in modules(root)}
    return [f"{paths[m].relative_to(root)}:{line}: {statement}"
            for m, out in sorted(graph.items()) for _, line, inside, statement in out if inside]


def test_the_projects_own_modules_are_imported_at_the_top():
    found = deferred()
    assert len(found) <= MAX_DEFERRED, (f"{len(found)} imports of the project's own modules inside functions "
                                        f"(at most {MAX_DEFERRED}):\n" + "\n".join(found))


def test_the_count_sees_an_import_inside_a_method(tmp_path):
    root = _plant(tmp_path, {
        "advisor/memo.py": "",
        "advisor/stacks.py": "",
        "advisor/engine.py": ("import numpy as np\nfrom advisor.memo import Memo\n\n\nclass Engine:\n"
                              "    def memory(self):\n        import pandas as pd\n"
                              "        from advisor import memo, stacks\n"),
    })
    assert deferred(root) == ["advisor/engine.py:8: from advisor import memo, stacks"] * 2
