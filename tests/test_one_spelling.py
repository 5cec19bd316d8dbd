"""Every number a result holds has one spelling: the nested field (`c.cost.usd`, `c.offer.provider`), never a
virtual flat name served by a `__getattr__` proxy (which type checkers read as `Any` and a search for the field
cannot find). The classes are read from the source with `ast`, so a proxy anywhere in the project fails here."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from advisor.results import FLAT, Candidate

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("advisor", "pricing", "reports", "cli", "benchmarks", "scripts")


def proxies(root: Path = ROOT, folders: tuple[str, ...] = FOLDERS) -> list[str]:
    """'file:line Class' for every class that defines __getattr__ (or __getattribute__)."""
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                                item.name in ("__getattr__", "__getattribute__"):
                            found.append(f"{path.relative_to(root)}:{item.lineno} {node.name}")
    return found


def test_no_class_serves_virtual_attributes():
    assert proxies() == []


def test_the_scan_finds_a_planted_proxy(tmp_path):
    (tmp_path / "advisor").mkdir()
    (tmp_path / "advisor" / "m.py").write_text("class C:\n    def __getattr__(self, name):\n        return 1\n")
    assert proxies(tmp_path, ("advisor",)) == ["advisor/m.py:2 C"]


@pytest.mark.parametrize("name", [k for k in FLAT if k not in Candidate.model_fields])
def test_a_flat_column_is_not_an_attribute_of_a_candidate(name):
    """The flat view (CSV columns, schema-1 files) is a projection made by Candidate.flat(), not a second
    spelling on the object."""
    from helpers import plan_factory as pf

    c = pf.single_gpu_plan().candidates[0]
    assert name in c.flat()
    with pytest.raises(AttributeError):
        getattr(c, name)


@pytest.mark.parametrize("name", ["max_micro_batch", "need1", "peak", "cpu_ram", "verified", "tight", "micro_batch",
                                  "grad_accum", "global_batch", "train_hours", "gpu_model", "method"])
def test_a_config_reads_its_records_by_their_own_names(name):
    """The planner's Config holds two records, `fitted` (memory) and `timed` (step time); their fields are read
    through them (`cfg.fitted.max_micro_batch`, `cfg.timed.micro_batch`), never as the config's own."""
    from advisor.planner.configs import Config, Fit
    from advisor.stacks import Stack
    from pricing.gpus import get_gpu

    cfg = Config(gpu=get_gpu("H100"), per_node=1, nodes=1, stack=Stack(method="lora"), limit=80 * 10**9,
                 fitted=Fit(max_micro_batch=4, tight=True))
    with pytest.raises(AttributeError):
        getattr(cfg, name)
    assert cfg.fitted.max_micro_batch == 4 and cfg.fitted.tight and cfg.gpu.name == "H100"


PLANTED = '''
from advisor.planner.configs import Config
from advisor.results import Candidate


def cost(c: Candidate) -> float:
    return c.cost_usd


def micro_batch(cfg: Config) -> int:
    return cfg.max_micro_batch


def nested(c: Candidate, cfg: Config) -> tuple[float, int, str]:
    return c.cost.usd, cfg.fitted.max_micro_batch, cfg.gpu.name


def typed(c: Candidate) -> str:
    return c.cost.usd
'''


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                    reason="mypy is not installed (it is in the test extra: pip install -e '.[test]')")
def test_the_type_checker_sees_every_field_of_a_candidate_and_a_config(tmp_path):
    """mypy checks the two modules that held the proxies, and reading a Candidate or a Config is typed: an old
    flat name is an error, and a nested field has its real type (a float returned as a str is caught), where the
    proxies made every read `Any` and nothing was caught."""
    files = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]["files"]
    assert "advisor/planner/configs.py" in files and "advisor/results" in files  # candidate.py is in advisor/results
    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED, encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), str(planted)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    found = sorted((int(line.split(":")[1]), line.rsplit("[", 1)[-1].rstrip("]"))
                   for line in r.stdout.splitlines() if ": error: " in line)
    lines = PLANTED.splitlines()
    expected = [(lines.index("    return c.cost_usd") + 1, "attr-defined"),
                (lines.index("    return cfg.max_micro_batch") + 1, "attr-defined"),
                (len(lines), "return-value")]  # typed(): a float returned as a str
    assert found == expected, r.stdout + r.stderr
