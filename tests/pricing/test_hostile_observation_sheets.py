"""The dated observation sheet's checker (scripts/check_observations.py, pricing.observations): the bundled
sheet passes, and every hostile or careless row is refused with one line naming the file, the row (as a
spreadsheet numbers it) and the column."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from pricing import files, observations

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_observations.py"
GOOD = {"provider": "runpod", "product": "H100 Secure Cloud", "region": "", "gpu_model": "H100", "gpu_count": "1",
        "tier": "on-demand", "price_hour": "3.99", "price_unit": "gpu", "currency": "USD", "observed_at": "2026-10-10",
        "source": "github:ewyluda/gpu-price-index data/observations/2026/2026-10-10.csv @ab49c808",
        "read_at": "2026-12-01", "vcpus": "", "ram_gb": "", "notes": ""}


def write(path: Path, *rows, header=observations.COLUMNS) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, list(header), extrasaction="ignore")
        w.writeheader()
        w.writerows({**GOOD, **r} for r in rows)
    return path


def checker(path) -> tuple[int, list[str]]:
    done = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout.splitlines()


def test_the_bundled_sheet_passes_the_checker():
    code, lines = checker(observations.SHEET)
    assert code == 0 and len(lines) == 1 and lines[0].endswith(": ok"), lines


@pytest.mark.parametrize("change, column, words", [
    ({"observed_at": "2099-01-01"}, "observed_at", "in the future"),
    ({"read_at": "2099-01-01", "observed_at": "2026-10-10"}, "read_at", "in the future"),
    ({"observed_at": ""}, "observed_at", "is empty"),
    ({"observed_at": "last week"}, "observed_at", "not an ISO date"),
    ({"observed_at": "2026-11-30", "read_at": "2026-11-01"}, "observed_at", "later than read_at"),
    ({"source": ""}, "source", "is empty"),
    ({"source": "a friend said so"}, "source", "must cite"),
    ({"gpu_model": "H1000"}, "gpu_model", "not in the GPU table"),
    ({"price_hour": "nan"}, "price_hour", "not finite"),
    ({"price_hour": "1e400"}, "price_hour", "not finite"),
    ({"price_hour": "-3"}, "price_hour", "between"),
    ({"price_hour": "0.001"}, "price_hour", "between"),
    ({"price_hour": "4000", "price_unit": "gpu"}, "price_hour", "between"),
    ({"price_hour": "abc"}, "price_hour", "not a number"),
    ({"tier": "weekly"}, "tier", "must be one of"),
    ({"price_unit": "month"}, "price_unit", "must be one of"),
    ({"currency": "EUR"}, "currency", "unsupported currency"),
    ({"price_unit": "instance", "gpu_count": ""}, "gpu_count", "required when price_unit is instance"),
    ({"gpu_count": "2.5"}, "gpu_count", "whole number"),
    ({"provider": "Evil Corp"}, "provider", "lowercase id"),
    ({"notes": "tab\there"}, "notes", "control character"),
    ({"product": "H100\u202eSXM"}, "product", "control character"),  # a bidi override reverses the text
    ({"notes": "x" * 1001}, "notes", "longer than 1,000"),
    ({"ram_gb": "99999999"}, "ram_gb", "per GPU"),
])
def test_a_bad_row_is_refused_with_one_line_naming_file_row_and_column(tmp_path, change, column, words):
    path = write(tmp_path / "obs.csv", {}, change)  # the bad row is the sheet's row 3
    code, lines = checker(path)
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"{path}: row 3, column '{column}': ") and words in lines[0]


def test_a_repeated_observation_is_reported_and_the_first_kept(tmp_path):
    path = write(tmp_path / "obs.csv", {}, {}, {"source": "https://www.runpod.io/pricing"})  # another source: kept
    good, problems = observations.read(path)
    assert len(good) == 2 and [(p.row, p.kind) for p in problems] == [(3, "duplicate")]
    assert "as row 2, which is kept" in str(problems[0])


def test_unknown_and_missing_columns_are_named(tmp_path):
    path = write(tmp_path / "obs.csv", {}, header=(*observations.COLUMNS, "discount"))
    assert [str(p).split(": ", 1)[1] for p in observations.read(path)[1]][0].startswith("row 1, column 'discount'")
    path = write(tmp_path / "obs2.csv", {}, header=[c for c in observations.COLUMNS if c != "source"])
    good, problems = observations.read(path)
    assert len(good) == 0 and [(p.row, p.column) for p in problems] == [(1, "source")]


def test_a_huge_file_is_refused_before_it_is_parsed(tmp_path):
    path = write(tmp_path / "obs.csv", {})
    with open(path, "a") as f:
        f.write("x" * (observations.MAX_BYTES + 1))
    before = files.BYTES_READ[0]
    good, problems = observations.read(path)
    assert len(good) == 0 and len(problems) == 1 and problems[0].row == 0
    assert "larger than" in str(problems[0]) and str(path) in str(problems[0])
    assert files.BYTES_READ[0] == before  # refused from its size: not one byte read


def test_a_field_over_the_csv_limit_and_a_fifo_are_refused_in_one_line(tmp_path):
    import os

    path = write(tmp_path / "obs.csv", {"notes": "y" * (files.MAX_CSV_FIELD + 10)})
    code, lines = checker(path)
    assert code == 1 and len(lines) == 1 and "field is longer than" in lines[0]
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    code, lines = checker(fifo)
    assert code == 1 and len(lines) == 1 and "not a regular file" in lines[0]


def test_a_hostile_sheet_given_to_the_loader_leaves_its_bad_rows_out_with_reasons(tmp_path, monkeypatch):
    from pricing.loader import load

    path = write(tmp_path / "obs.csv", {"provider": "acme", "product": "H100 box"},
                 {"provider": "acme", "product": "future box", "observed_at": "2099-01-01"})
    monkeypatch.setenv("GPU_ADVISOR_OBSERVATIONS", str(path))
    df, problems = load(include_cache=False)
    assert set(df[df.provider == "acme"].instance_type) == {"H100 box"}
    assert any(p.sheet == str(path) and p.row == 3 and p.column == "observed_at" for p in problems)
