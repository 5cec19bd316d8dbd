"""Each config's fit and step kept on disk between plans (advisor/planner/fit_cache.py): a plan that reads them
estimates nothing and gives exactly the plan computed from scratch, for other budgets, risks and token counts too;
anything that is not our own document for this key is ignored and recomputed. Work is counted, never timed."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.planner_inputs import MODEL, OFFERS

from advisor.planner import configs, fit_cache, pipeline
from advisor.planner.request import PlanRequest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture()
def on(monkeypatch, tmp_path):
    """The store on (the suite turns it off: tests/conftest.py), in a temp cache dir, counting from zero."""
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(fit_cache, "ENABLED", True)
    monkeypatch.setattr(fit_cache, "WRITE", True)
    monkeypatch.setattr(fit_cache, "COUNTS", dict.fromkeys(fit_cache.COUNTS, 0))
    return tmp_path / "cache" / "fits"


def _plan(monkeypatch=None, **kw) -> dict:
    """The plan as JSON, less the two fields that say how it was computed (the engine's count of estimates made,
    the time), and the configs the evaluator fitted itself."""
    seen = []

    class Counting(configs.Evaluator):
        def configs(self, *args, **kwargs):
            rows = super().configs(*args, **kwargs)
            seen.append(self)
            return rows

    real, pipeline.Evaluator = pipeline.Evaluator, Counting
    try:
        plan = pipeline.plan(MODEL, offers=OFFERS, search_remedies=False, **{"tokens": 20e6, **kw})
    finally:
        pipeline.Evaluator = real
    data = json.loads(plan.model_dump_json())
    data["assumptions"].pop("memory_estimates")
    data.pop("generated_at")
    return {"plan": data, "estimated": sum(e.estimated for e in seen)}


def _cold(**kw) -> dict:
    enabled, fit_cache.ENABLED = fit_cache.ENABLED, False
    try:
        return _plan(**kw)
    finally:
        fit_cache.ENABLED = enabled


@pytest.mark.parametrize("first, then", [
    ({}, {}),
    ({}, {"budget": 40.0, "risk": "p90", "tokens": 50e6}),  # other hours and ranking: the same records
    ({"methods": ("lora", "qlora"), "seq_len": 4096}, {"methods": ("lora", "qlora"), "seq_len": 4096,
                                                         "deadline_hours": 30.0}),
])
def test_a_plan_from_stored_fits_estimates_nothing_and_is_the_plan_computed_afresh(on, first, then):
    written = _plan(**first)
    assert written["estimated"] > 0 and fit_cache.COUNTS["written"] == 1
    assert written["plan"] == _cold(**first)["plan"]  # writing changes nothing either
    read = _plan(**then)
    assert read["estimated"] == 0 and fit_cache.COUNTS["hits"] > 0
    assert read["plan"] == _cold(**then)["plan"]
    assert fit_cache.COUNTS["written"] == 1  # nothing new to keep


def test_a_field_the_records_depend_on_is_a_new_key(on):
    _plan()
    misses = fit_cache.COUNTS["misses"]
    changed = _plan(seq_len=1024)
    assert changed["estimated"] > 0 and fit_cache.COUNTS["misses"] > misses
    assert len(list(on.glob("*.json"))) == 2
    assert changed["plan"] == _cold(seq_len=1024)["plan"]


def _request_reads(path: Path) -> set[str]:
    """Attributes read from `req` / `request` / `self.request` in a module."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("req", "request"):
                out.add(node.attr)
            elif isinstance(base, ast.Attribute) and base.attr == "request":
                out.add(node.attr)
    return out


def test_every_request_field_the_evaluator_reads_is_in_the_key_or_recomputed_per_plan():
    reads = set()
    for module in ("configs.py", "objectives.py"):
        reads |= _request_reads(ROOT / "advisor" / "planner" / module)
    # hours and ranking (recomputed from the stored step every plan), which configs are enumerated (not what one
    # holds), measured runs (no store at all then), and the property derived from key fields
    recomputed = {"train_tokens", "risk", "padding_factor", "max_gpus", "max_nodes", "measured",
                  "use_stored_measurements", "sequences_per_step"}
    assert reads - recomputed <= set(fit_cache.REQUEST_FIELDS), reads - recomputed - set(fit_cache.REQUEST_FIELDS)
    assert {"seq_len", "global_batch", "global_batch_tokens"} <= set(fit_cache.REQUEST_FIELDS)  # sequences_per_step
    assert set(fit_cache.REQUEST_FIELDS) <= set(PlanRequest.model_fields)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other key", "other fields", "wrong type", "deep",
                                    "directory"])
def test_a_file_that_is_not_our_document_for_this_key_is_ignored_and_recomputed(on, damage):
    cold = _plan()
    (path,) = on.glob("*.json")
    text = path.read_text()
    doc = json.loads(text)
    if damage == "garbage":
        path.write_bytes(os.urandom(2000))
    elif damage == "truncated":
        path.write_text(text[: len(text) // 2])
    elif damage == "other key":
        path.write_text(json.dumps({**doc, "key": "0" * 64}))
    elif damage == "other fields":
        path.write_text(json.dumps({**doc, "fields": {**doc["fields"], "fit": doc["fields"]["fit"][::-1]}}))
    elif damage == "wrong type":
        first = next(iter(doc["records"]))
        doc["records"][first][0][0] = "__import__('os')"
        path.write_text(json.dumps(doc))
    elif damage == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    else:
        path.unlink()
        path.mkdir()
    again = _plan()
    assert fit_cache.COUNTS["refused"] == 1 and again["estimated"] == cold["estimated"]
    assert again["plan"] == cold["plan"]


def test_no_store_for_a_stand_in_estimator_or_a_measured_run(on, tmp_path):
    real = configs.Engine.of(MODEL)

    def stand_in(model, stack, shape):
        return real.memory(stack, shape)

    _plan(estimator=stand_in)
    measured = ROOT / "docs" / "usage" / "measured.json"
    _plan(measured=(str(measured),))
    assert not on.exists() or not list(on.glob("*.json"))
    assert fit_cache.COUNTS == dict.fromkeys(fit_cache.COUNTS, 0)


def test_serve_reads_and_never_writes(on, monkeypatch):
    monkeypatch.setattr(fit_cache, "WRITE", False)
    _plan()
    assert not on.exists()


def test_at_most_max_files_are_kept(on, monkeypatch):
    monkeypatch.setattr(fit_cache, "MAX_FILES", 2)
    for seq_len in (512, 1024, 2048):
        _plan(seq_len=seq_len, methods=("qlora",))
    assert len(list(on.glob("*.json"))) == 2


def test_a_changed_byte_of_the_estimator_or_its_data_is_a_new_key(tmp_path, monkeypatch):
    tree = tmp_path / "advisor"
    shutil.copytree(ROOT / "advisor", tree, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(fit_cache, "_ADVISOR", tree)
    before = fit_cache._code_digest()
    assert fit_cache._code_digest() == before
    mfu = tree / "data" / "mfu.json"
    mfu.write_bytes(mfu.read_bytes() + b" ")
    assert fit_cache._code_digest() != before


def test_a_second_process_reads_what_the_first_wrote(tmp_path):
    code = ("import json\nfrom advisor.planner import fit_cache, pipeline\n"
            "p = pipeline.plan('meta-llama/Llama-3.1-8B', tokens=20e6, gpus=('A100-80GB',), search_remedies=False)\n"
            "print(json.dumps({'counts': fit_cache.COUNTS, 'top': p.candidates[0].model_dump(mode='json')}))\n")
    env = {**os.environ, "GPU_ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT),
           "HF_HUB_OFFLINE": "1"}

    def run() -> dict:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    cold, warm = run(), run()
    assert cold["counts"]["misses"] > 0 and cold["counts"]["written"] == 1
    assert warm["counts"]["misses"] == 0 and warm["counts"]["hits"] == cold["counts"]["misses"]
    assert warm["top"] == cold["top"]
