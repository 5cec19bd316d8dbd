"""The README's test command passes with the newest releases the package index serves: no test compares an
installed distribution's version with a literal or a pin for equality (a pin says what a bundle was validated
with; a test checks the behaviour the pin protects, e.g. that the bundle's config loads with today's release)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _installed_version(node: ast.AST) -> bool:
    """`x.__version__`, `version("pkg")`, `metadata.version(...)` (with any `.split(...)[0]` after it)."""
    while isinstance(node, (ast.Subscript, ast.Call)) and not _is_version_call(node):
        node = node.value if isinstance(node, ast.Subscript) else node.func
        if isinstance(node, ast.Attribute) and node.attr in {"split", "partition", "removesuffix", "strip"}:
            node = node.value
    return _is_version_call(node) or (isinstance(node, ast.Attribute) and node.attr == "__version__")


def _is_version_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "version") or (isinstance(f, ast.Attribute) and f.attr == "version")


def _pin_or_literal(node: ast.AST) -> bool:
    """A string literal, an UPPER_CASE constant, or a lookup in a table of pins (`pins[p]`, `table["packages"]`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    if isinstance(node, ast.Name) and node.id.isupper():
        return True
    text = ast.unparse(node).lower()
    return isinstance(node, (ast.Subscript, ast.Attribute)) and any(w in text for w in ("pin", "packages", "checked"))


def equality_pins(source: str) -> list[str]:
    """Every `==` / `!=` that sets an installed version against a literal or a pin, as source text."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare) or not any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
            continue
        sides = [node.left, *node.comparators]
        if any(_installed_version(s) for s in sides) and any(_pin_or_literal(s) for s in sides):
            found.append(ast.unparse(node))
    return found


def test_no_test_compares_an_installed_version_with_a_pin_or_literal():
    hits = {str(p.relative_to(TESTS)): equality_pins(p.read_text(encoding="utf-8")) for p in TESTS.rglob("*.py")}
    assert {k: v for k, v in hits.items() if v} == {}


def test_the_check_finds_each_shape_of_pinned_version_assertion():
    planted = [
        'assert trl.__version__ == "1.16.0"',
        'assert metadata.version(package).split("+")[0] == table["packages"][package], package',
        'assert version("accelerate") == pins["accelerate"]',
        'assert summary_version == SKYPILOT_CHECKED or sky.__version__ == SKYPILOT_CHECKED',
    ]
    for line in planted:
        assert equality_pins(line), line
    fine = ['assert r["torch"] == torch.__version__', 'assert Version(version("peft")) >= Version("0.1")',
            'assert str(Version(pin)) == pin']
    for line in fine:
        assert not equality_pins(line), line
