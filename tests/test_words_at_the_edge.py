"""Facts are rows, words are written once: outside advisor/explain/ no code reads a candidate's notes back (to
recover a fact from a sentence), none matches text against a note's wording, and the modules that build a plan, its
results and its tables hold no sentence about it. Read from the sources with `ast`; each rule is shown to catch a
planted violation."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("advisor", "reports", "cli")
EXPLAIN = "advisor/explain/"
# `.notes` that is another record's, not a candidate's: a training config's reading notes (TrainingConfig.notes,
# advisor/workload/training_config.py) and the CLI that prints them
OTHER_NOTES = ("advisor/workload/", "cli/workload_sources.py")
# Modules that build the plan, hold its results or lay out its tables: no sentence about the plan in them
SENTENCE_FREE = ("advisor/results/", "advisor/planner/findings.py", "advisor/planner/ranking.py",
                 "advisor/planner/remedy.py", "advisor/planner/select.py", "advisor/planner/assemble.py",
                 "advisor/planner/__init__.py", "cli/plan.py", "reports/render.py", "reports/compare.py")
# The words of a sentence: five or more, three of them plain words (paths, keys and flags are not sentences)
SENTENCE_WORDS = 5
PLAIN_WORD = re.compile(r"^[A-Za-z][a-z'-]*[,;:.]?$")


def _sources(root: Path = ROOT):
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            yield path.relative_to(root).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def note_reads(rel: str, tree: ast.AST) -> list[str]:
    """`<x>.notes` read (not written) where x is not an offer (Offer.notes holds the price sheet's tags)."""
    if rel.startswith(EXPLAIN) or rel.startswith(OTHER_NOTES):
        return []
    return [f"{rel}:{n.lineno}: {ast.unparse(n)}" for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and n.attr == "notes" and isinstance(n.ctx, ast.Load)
            and not (isinstance(n.value, ast.Attribute) and n.value.attr == "offer")]


def _note_wordings() -> set[str]:
    """The names explain gives a note's fixed wording (`NEAR_TIE_NOTE`, ...), read from advisor/explain/notes.py."""
    tree = ast.parse((ROOT / EXPLAIN / "notes.py").read_text(encoding="utf-8"))
    return {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
            if isinstance(t, ast.Name) and t.id.endswith("_NOTE")}


def note_wording(rel: str, tree: ast.AST) -> list[str]:
    """A note's wording used outside explain/: matching text against what a note says."""
    if rel.startswith(EXPLAIN):
        return []
    wordings, out = _note_wordings(), []
    for n in ast.walk(tree):
        names = [a.name for a in n.names] if isinstance(n, ast.ImportFrom) else \
            [n.id] if isinstance(n, ast.Name) else [n.attr] if isinstance(n, ast.Attribute) else []
        out += [f"{rel}:{n.lineno}: {name}" for name in names if name in wordings]
    return out


def _exempt(tree: ast.AST) -> set[int]:
    """Docstrings, error messages (raise / assert) and field or option help: words about the code, not a plan."""
    out: set[int] = set()
    for n in ast.walk(tree):
        body = getattr(n, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            out.add(id(body[0].value))
        for p in _exempt_parts(n):
            out.update(id(x) for x in ast.walk(p))
    return out


def _exempt_parts(n: ast.AST) -> list[ast.AST]:
    """The parts of node `n` whose strings are words about the code: messages, help, names of rules and keys."""
    parts = [n] if isinstance(n, (ast.Raise, ast.Assert)) else \
        [n.value] if isinstance(n, ast.keyword) and n.arg in ("description", "help", "out_help") else []
    # rejection reasons are counted by their text (advisor/planner/rejections.py); not yet findings
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add" and \
            isinstance(n.func.value, ast.Name) and n.func.value.id == "rejections":
        parts.append(n)
    # the command to run next (cli/output.py next_step): words about the CLI, not about the plan
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "next_step":
        parts.append(n)
    # names of rules and keys (ranking.TIE_BREAKERS, a dict's keys): identifiers with spaces, not sentences
    if isinstance(n, ast.Dict):
        parts += [k for k in n.keys if k is not None]
    if isinstance(n, ast.Assign) and all(isinstance(t, ast.Name) and t.id.isupper() for t in n.targets) and \
            isinstance(n.value, ast.Tuple):
        parts.append(n.value)
    return parts


def sentences(rel: str, tree: ast.AST) -> list[str]:
    """String literals (f-string parts included) that read as a sentence, in a module that must hold none."""
    if not rel.startswith(SENTENCE_FREE):
        return []
    skip = _exempt(tree)
    return [f"{rel}:{n.lineno}: {n.value[:60]!r}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip
            and len(n.value.split()) >= SENTENCE_WORDS
            and sum(bool(PLAIN_WORD.match(w)) for w in n.value.split()) >= 3]


RULES = (note_reads, note_wording, sentences)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_no_code_outside_explain_reads_a_note_or_writes_a_sentence_about_a_plan(rule):
    found = [hit for rel, tree in _sources() for hit in rule(rel, tree)]
    assert not found, "\n".join(found)


PLANTED = {
    note_reads: ("reports/render.py", "def misses(c):\n    return any(n.startswith('misses') for n in c.notes)\n"),
    note_wording: ("cli/plan.py", "from advisor.explain import NEAR_TIE_NOTE\n"),
    sentences: ("advisor/planner/assemble.py", "def say(c):\n    return f'#{c.rank} fits only with 8-bit AdamW on "
                                               "this card'\n"),
}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_each_rule_catches_a_planted_violation(rule):
    rel, source = PLANTED[rule]
    assert rule(rel, ast.parse(source)), f"{rule.__name__} missed {source!r}"
    assert not rule(EXPLAIN + "notes.py", ast.parse(source))  # the same code inside explain/ is where words live


def test_the_rules_leave_offer_tags_docstrings_and_errors_alone():
    source = ('def f(c):\n    """What this candidate trades away, in words, for the reader."""\n'
              '    if "marketplace" in c.offer.notes:\n        raise ValueError("the sheet says this is a marketplace host")\n')
    assert not any(rule("advisor/planner/ranking.py", ast.parse(source)) for rule in RULES)
