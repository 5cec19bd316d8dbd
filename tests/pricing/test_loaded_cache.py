"""The bundled sheets' loaded frame kept on disk (pricing/loaded_cache.py): a warm load reads it instead of
validating and cross-checking again, gives exactly the cold frame, and anything that is not our own document
for these inputs is ignored and recomputed. Work is counted (loaded_cache.COUNTS, crosscheck.RUNS), never timed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import pandas as pd
import pytest

from pricing import crosscheck, files, loaded_cache, loader

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def on(monkeypatch, tmp_path):
    """The cache on (the suite turns it off: tests/conftest.py), in a temp cache dir, with no join kept in
    this process, so every computation shows in crosscheck.RUNS."""
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(loaded_cache, "ENABLED", True)
    monkeypatch.setattr(loaded_cache, "WRITE", True)
    monkeypatch.setattr(loaded_cache, "COUNTS", dict.fromkeys(loaded_cache.COUNTS, 0))
    monkeypatch.setattr(crosscheck, "_JOINS", OrderedDict())
    return tmp_path


def _fresh_load(cache: Path) -> dict:
    """Load the offers in a new python process; its counters and frame size."""
    code = ("import json\nfrom pricing import crosscheck, loaded_cache, loader\n"
            "df, problems = loader.load()\n"
            "print(json.dumps({'counts': loaded_cache.COUNTS, 'runs': crosscheck.RUNS, 'rows': len(df), "
            "'problems': len(problems)}))\n")
    env = {**os.environ, "GPU_ADVISOR_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_second_process_reads_the_cache_and_runs_no_cross_check(tmp_path):
    cold = _fresh_load(tmp_path / "cache")
    assert cold["counts"]["computed"] == 1 and cold["counts"]["written"] == 1 and cold["runs"]["rule"] == 1
    warm = _fresh_load(tmp_path / "cache")
    assert warm["counts"] == {"computed": 0, "hits": 1, "refused": 0, "written": 0}
    assert warm["runs"] == {"rule": 0, "hits": 0}  # crosscheck.apply never called
    assert (warm["rows"], warm["problems"]) == (cold["rows"], cold["problems"]) and warm["rows"] > 1000


def _observed_calls(monkeypatch) -> list:
    calls: list = []
    real = loader._observed
    monkeypatch.setattr(loader, "_observed", lambda df, inc: calls.append(1) or real(df, inc))
    return calls


def test_the_warm_frame_is_the_cold_frame_exactly(on, monkeypatch):
    calls = _observed_calls(monkeypatch)
    cold = loader.load_offers(discounts=["aws=0.3"])
    assert calls == [1] and loaded_cache.path().is_file()
    warm = loader.load_offers(discounts=["aws=0.3"])
    assert calls == [1] and loaded_cache.COUNTS["hits"] == 1  # _observed ran once, for the cold load
    pd.testing.assert_frame_equal(warm, cold, check_dtype=True, check_exact=True)
    assert warm.attrs == cold.attrs and set(warm.attrs) == {"disagreements", "problems"}


def test_the_stored_step_round_trips_every_column_and_dtype():
    df, problems, disagreements = loader._joined([], True)
    assert problems == [] and disagreements == []
    doc = files.load_json(loaded_cache.encode(df, "k", 0.0), "cache", max_bytes=loaded_cache.MAX_BYTES)
    back = loaded_cache.decode(doc, "k")
    pd.testing.assert_frame_equal(back, df, check_dtype=True, check_exact=True)
    assert loaded_cache.decode(doc, "another key") is None


def _copy_sheet(monkeypatch, tmp_path) -> Path:
    copy = tmp_path / "snapshot.csv"
    shutil.copyfile(loader.SNAPSHOT, copy)
    monkeypatch.setattr(loader, "SNAPSHOT", copy)
    return copy


def test_one_changed_byte_of_a_sheet_recomputes(on, monkeypatch, tmp_path):
    copy = _copy_sheet(monkeypatch, tmp_path)
    first, _ = loader.load()
    loader.load()
    assert loaded_cache.COUNTS["computed"] == 1 and loaded_cache.COUNTS["hits"] == 1
    lines = copy.read_text(encoding="utf-8").splitlines(keepends=True)
    j = lines[0].rstrip("\r\n").split(",").index("price_hour")
    i = next(i for i, line in enumerate(lines[1:], 1) if '"' not in line and line.split(",")[j])
    cells = lines[i].split(",")
    cells[j] = cells[j].replace(cells[j][-1], str((int(cells[j][-1]) + 1) % 10)) if cells[j][-1].isdigit() \
        else cells[j] + "1"  # one byte of one price
    lines[i] = ",".join(cells)
    copy.write_text("".join(lines), encoding="utf-8")
    second, _ = loader.load()
    assert loaded_cache.COUNTS["computed"] == 2 and crosscheck.RUNS["rule"] >= 2
    assert not second.equals(first)


def test_a_changed_pricing_module_recomputes(on, monkeypatch, tmp_path):
    tree = tmp_path / "pricing"
    shutil.copytree(Path(loaded_cache.__file__).parent, tree, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(loaded_cache, "_PRICING", tree)
    sheets = (loader.SNAPSHOT,)
    before = loaded_cache.key(sheets)
    assert loaded_cache.key(sheets) == before  # the same bytes: the same key
    with (tree / "crosscheck.py").open("a", encoding="utf-8") as f:
        f.write("\n")
    assert loaded_cache.key(sheets) != before
    monkeypatch.setattr(loaded_cache, "_PRICING", Path(loaded_cache.__file__).parent)
    monkeypatch.setenv("GPU_ADVISOR_OBSERVATION_TOLERANCE", "0.2")
    assert loaded_cache.key(sheets) != before


def _valid_doc(on) -> dict:
    loader.load()
    return json.loads(loaded_cache.path().read_bytes())


def _hostile(doc: dict, what: str):
    cols = doc["columns"]
    if what == "truncated":
        return json.dumps(doc).encode()[: len(json.dumps(doc)) // 2]
    if what == "not json":
        return b"\x80\x04\x95 this is a pickle stream, not a document"
    if what == "a dict where a price is":
        next(c for c in cols if c["dtype"] == "float64")["values"][0] = {"__reduce__": "os.system"}
    elif what == "a short column":
        cols[0]["values"].pop()
    elif what == "an unknown dtype":
        cols[0]["dtype"] = "category"
    elif what == "an extra field":
        doc["pickle"] = "gASVAAAA"
    elif what == "a clock set back":
        doc["computed_at"] = 4e12
    elif what == "rows over the bound":
        doc["rows"] = loaded_cache.MAX_ROWS + 1
    elif what == "deeply nested":
        cols[0]["values"][0] = [[[[[["x"]]]]]]
    elif what == "a bool in a string column":
        next(c for c in cols if c["dtype"].startswith("string:"))["values"][0] = True
    return json.dumps(doc).encode()


HOSTILE = ["truncated", "not json", "a dict where a price is", "a short column", "an unknown dtype",
           "an extra field", "a clock set back", "rows over the bound", "deeply nested", "a bool in a string column"]


@pytest.mark.parametrize("what", HOSTILE)
def test_a_corrupt_or_hostile_cache_file_is_ignored_and_recomputed(on, what):
    doc = _valid_doc(on)
    cold, _ = loader.load()
    assert loaded_cache.COUNTS["hits"] == 1
    loaded_cache.path().write_bytes(_hostile(doc, what))
    again, _ = loader.load()
    assert loaded_cache.COUNTS["refused"] == 1 and loaded_cache.COUNTS["computed"] == 2
    pd.testing.assert_frame_equal(again, cold, check_dtype=True, check_exact=True)
    assert loaded_cache.path().read_bytes() != _hostile(doc, what)  # written afresh


def test_a_cache_file_over_the_size_bound_is_never_parsed(on, monkeypatch, builds):
    _valid_doc(on)
    parsed = builds["json.loads"]
    monkeypatch.setattr(loaded_cache, "MAX_BYTES", 1000)
    loader.load()
    assert loaded_cache.COUNTS["refused"] == 1 and builds["json.loads"] == parsed


def test_a_folder_in_place_of_the_file_is_ignored(on):
    loaded_cache.path().mkdir(parents=True)
    df, problems = loader.load()
    assert len(df) > 1000 and loaded_cache.COUNTS["computed"] == 1 and loaded_cache.COUNTS["written"] == 0


def test_user_sheets_and_fetched_sheets_bypass_the_cache(on, tmp_path):
    sheet = tmp_path / "mine.csv"
    sheet.write_text("provider,instance_type,gpu_model,gpu_count,price_hour\nacme,box,H100,8,20\n",
                     encoding="utf-8")
    df, _ = loader.load(user_sheets=[sheet])
    assert (df["provider"] == "acme").any()
    assert loaded_cache.COUNTS == {"computed": 0, "hits": 0, "refused": 0, "written": 0}
    assert not loaded_cache.path().exists()
    from pricing import cache

    bundled, _ = loader.load(include_cache=False)
    cache.write_sheet("aws", bundled[bundled["provider"] == "aws"].head(3), source="test", url=None)
    loader.load()
    assert loaded_cache.COUNTS["computed"] == 1  # only the include_cache=False load used it


def test_a_step_with_problems_is_not_kept(on, monkeypatch, tmp_path):
    copy = _copy_sheet(monkeypatch, tmp_path)
    header = copy.read_text(encoding="utf-8").splitlines()[0]
    with copy.open("a", encoding="utf-8") as f:
        f.write(",".join("not-a-number" if h == "price_hour" else "x" for h in header.split(",")) + "\n")
    _, first = loader.load()
    _, second = loader.load()
    assert first and [str(p) for p in second] == [str(p) for p in first]
    assert loaded_cache.COUNTS["computed"] == 2 and loaded_cache.COUNTS["written"] == 0


def test_read_only_mode_reads_a_cache_but_writes_none(on, monkeypatch):
    monkeypatch.setattr(loaded_cache, "WRITE", False)
    loader.load()
    assert not loaded_cache.path().exists()
    monkeypatch.setattr(loaded_cache, "WRITE", True)
    loader.load()
    monkeypatch.setattr(loaded_cache, "WRITE", False)
    loader.load()
    assert loaded_cache.COUNTS == {"computed": 2, "hits": 1, "refused": 0, "written": 1}


def test_the_suite_runs_with_the_cache_off():
    """tests/conftest.py turns it off so a test that patches the loading code sees that code run."""
    assert loaded_cache.ENABLED is False


def test_serve_writes_no_cache_file(tmp_path):
    """`serve` loads the sheets at start as a plan does, yet writes nothing (docs/usage/serve.md)."""
    env = {**os.environ, "GPU_ADVISOR_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT),
           "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "advisor", "serve", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        line = proc.stdout.readline()  # printed after the start-up load
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert line.startswith("Serving gpu-advisor on "), line
    assert not (tmp_path / "cache" / "loaded").exists()
