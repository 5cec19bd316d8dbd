"""The linter and the type checker run with the tests (configured in pyproject.toml: [tool.ruff], [tool.mypy]),
so the README's one test command is also the lint and type check."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    assert importlib.util.find_spec("ruff"), "ruff is in the test extra: pip install -e '.[test]'"
    r = _run("ruff", "check", ".")
    assert r.returncode == 0, f"ruff check . found:\n{r.stdout}{r.stderr}"


def test_ruff_sees_a_planted_problem(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import os\nimport sys\n\nx = sys.argv\n")
    r = _run("ruff", "check", "--config", str(ROOT / "pyproject.toml"), str(planted), cwd=tmp_path)
    assert r.returncode == 1 and "F401" in r.stdout


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                    reason="mypy is not installed (it is in the test extra: pip install -e '.[test]')")
def test_mypy_finds_nothing_in_the_typed_packages():
    r = _run("mypy")  # files and options: [tool.mypy] in pyproject.toml
    assert r.returncode == 0, f"mypy found:\n{r.stdout}{r.stderr}"
