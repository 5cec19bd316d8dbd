"""Price sheets: validation with row+column reasons, user sheets, precedence, discounts, staleness."""

from __future__ import annotations

import csv
import io
import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pricing import cache
from pricing.loader import load, load_offers, read_sheet
from pricing.schema import COLUMNS, validate

GOOD = {"provider": "aws", "region": "us-east-1", "instance_type": "p5.48xlarge", "gpu_model": "H100",
        "gpu_count": "8", "gpu_memory_gb": "80", "vcpus": "192", "ram_gb": "2048", "price_hour": "55.04",
        "spot_price_hour": "", "currency": "USD", "source": "test", "fetched_at": "2026-11-30T00:00:00Z",
        "interconnect": "nvlink", "notes": ""}


@pytest.fixture(autouse=True)
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))


def write_csv(path, rows, columns=None):
    columns = columns or list(COLUMNS)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


# Each corruption: column -> values that must be rejected for that column.
BAD_VALUES = {
    "provider": [""],
    "instance_type": ["", "   "],
    "gpu_model": ["GTX 480", "H1OO", "", "🙂"],
    "gpu_count": ["0", "-8", "eight", "", "nan", "inf"],
    "gpu_memory_gb": ["-80", "0", "lots"],
    "vcpus": ["-1", "many"],
    "ram_gb": ["-5", "2 TB"],
    "price_hour": ["-1", "-0", "0.001", "55 EUR", "free", "1e400"],  # 0: owned hardware, $55: money
    "currency": ["EUR", "dollars"],
    "fetched_at": ["yesterday", "2026-13-45", "30/11/2026"],
    "observed_at": ["last week", "2026-02-30"],  # empty is fine: unknown
    "min_billed_hours": ["-1", "30000", "a week"],
    "billing_increment_hours": ["0", "-168", "27000"],
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_malformed_row_gets_a_reason_naming_row_and_column(tmp_path, data):
    n = data.draw(st.integers(2, 8), label="rows")
    rows = [dict(GOOD, instance_type=f"type-{i}") for i in range(n)]
    bad_rows = data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n - 1), label="bad")
    expected = {}
    for i in bad_rows:
        col = data.draw(st.sampled_from(sorted(BAD_VALUES)), label="column")
        rows[i][col] = data.draw(st.sampled_from(BAD_VALUES[col]), label="value")
        expected[i + 2] = col  # spreadsheet rows: the header is row 1
    path = write_csv(tmp_path / f"sheet{n}.csv", rows)
    good, problems = read_sheet(path, derive=False)
    assert len(good) == n - len(bad_rows)
    got = {p.row: p.column for p in problems}
    assert got == expected
    for p in problems:
        assert f"row {p.row}" in str(p) and f"column '{p.column}'" in str(p) and str(path) in str(p)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cells=st.lists(st.lists(st.one_of(st.text(max_size=12), st.integers(), st.floats(),
                                         st.none(), st.booleans()), max_size=18), max_size=6))
def test_arbitrary_junk_never_crashes_the_loader(tmp_path, cells):
    path = tmp_path / "junk.json"
    rows = [dict(zip(COLUMNS, r)) for r in cells]
    path.write_text(json.dumps(rows))
    good, problems = read_sheet(path)
    flagged = {p.row for p in problems}
    if rows and 0 not in flagged:  # no sheet-level problem: every row is kept or explained
        assert len(good) + len(flagged) == len(rows)
    for p in problems:
        assert p.column and str(p)


def test_ragged_csv_line_is_reported_with_its_row(tmp_path):
    path = tmp_path / "ragged.csv"
    text = io.StringIO()
    w = csv.DictWriter(text, list(COLUMNS))
    w.writeheader()
    w.writerow(GOOD)
    path.write_text(text.getvalue() + "aws,us-east-1,too,few\n")
    good, problems = read_sheet(path)
    assert len(good) == 1
    assert [(p.row, p.column) for p in problems] == [(3, "*")]  # spreadsheet rows: the header is row 1
    assert "has 4 fields" in str(problems[0])


def test_missing_required_column_is_one_sheet_level_problem(tmp_path):
    path = write_csv(tmp_path / "s.csv", [GOOD], [c for c in COLUMNS if c != "gpu_model"])
    good, problems = read_sheet(path, derive=False)
    assert len(good) == 0 and [(p.row, p.column) for p in problems] == [(0, "gpu_model")]


def test_private_cluster_yaml_with_price_per_gpu_hour_derives_the_rest(tmp_path):
    path = tmp_path / "ours.yaml"
    path.write_text("offers:\n  - provider: private\n    gpu_model: A100 80GB\n    gpu_count: 8\n"
                    "    price_per_gpu_hour: 1.10\n")
    good, problems = read_sheet(path)
    assert problems == []
    row = good.iloc[0]
    assert row.gpu_model == "A100-80GB" and row.gpu_memory_gb == 80
    assert row.price_hour == pytest.approx(8.8) and row.currency == "USD"
    assert row.instance_type == "8xA100 80GB" and row.source == "user:ours.yaml"


def test_user_sheet_beats_cache_beats_bundled_and_each_row_says_where_it_came_from(tmp_path):
    # dated after the observation sheet's newest read, so its date is the newest (pricing.crosscheck rule 4)
    cached = write_csv(tmp_path / "c.csv", [dict(GOOD, price_hour="50", observed_at="2026-11-30"),
                                             dict(GOOD, instance_type="p4d.24xlarge", gpu_model="A100",
                                                  price_hour="30", observed_at="2026-11-30")])
    good, _ = read_sheet(cached)
    cache.write_sheet("aws", good, source="aws", url="http://x")
    user = write_csv(tmp_path / "neg.csv", [dict(GOOD, price_hour="40", source="negotiated")])
    df = load_offers([user])
    key = (df.provider == "aws") & (df.region == "us-east-1")
    p5 = df[key & (df.instance_type == "p5.48xlarge")]
    assert len(p5) == 1 and p5.iloc[0].price_hour == 40 and p5.iloc[0].price_origin == "user"
    p4d = df[key & (df.instance_type == "p4d.24xlarge")]
    assert len(p4d) == 1 and p4d.iloc[0].price_hour == 30 and p4d.iloc[0].price_origin == "cache:aws"
    other = df[(df.provider == "gcp")]
    assert len(other) and set(other.price_origin) == {"bundled"}


def test_discount_multiplies_one_providers_prices_and_says_so():
    base = load()[0]
    df = load(discounts={"aws": 0.3})[0]
    aws_b, aws_d = base[base.provider == "aws"], df[df.provider == "aws"]
    assert aws_d.price_hour.sum() == pytest.approx(0.7 * aws_b.price_hour.sum())
    assert aws_d.notes.str.contains("discount 30%").all()
    gcp = df.provider == "gcp"
    assert df[gcp].price_hour.sum() == pytest.approx(base[base.provider == "gcp"].price_hour.sum())


@pytest.mark.parametrize("bad", [{"aws": 1.5}, {"aws": "x"}, ["aws0.3"], ["nosuchcloud=0.1"]])
def test_bad_discount_is_bad_input_naming_the_option(bad):
    with pytest.raises(ValueError) as err:
        load(discounts=bad)
    assert err.value.exit_code == 2 and "--discount" in str(err.value)


NOW = "2026-12-01T00:00:00Z"


def test_staleness_is_decided_by_the_observation_date_alone(tmp_path):
    path = write_csv(tmp_path / "old.csv", [
        dict(GOOD, observed_at="2026-09-01"),
        dict(GOOD, instance_type="new", observed_at="2026-11-29"),
        dict(GOOD, instance_type="undated", observed_at=""),  # nobody knows: stale however new the fetch
        dict(GOOD, instance_type="fetched-new-observed-old", fetched_at="2026-11-30", observed_at="2026-10-01"),
        dict(GOOD, instance_type="noted", observed_at="2026-11-29", notes="stale:catalog-v6-2024-era")])
    df = load_offers([path], include_cache=False, include_bundled=False, now=NOW).set_index("instance_type")
    assert df.stale.to_dict() == {"p5.48xlarge": True, "new": False, "undated": True,
                                  "fetched-new-observed-old": True, "noted": False}
    assert df.age_days["new"] == 2.0 and df.age_days.isna()["undated"]
    assert df.observed_at["new"] == "2026-11-29T00:00:00Z" and df.observed_at["undated"] is None
    df = load_offers([path], include_cache=False, include_bundled=False, stale_days=120, now=NOW)
    assert df.set_index("instance_type").stale.to_dict()["p5.48xlarge"] is False
    assert df.set_index("instance_type").stale.to_dict()["undated"] is True  # no threshold dates an undated price


def test_a_user_sheet_without_an_observed_at_column_is_dated_by_its_fetched_at(tmp_path):
    cols = [c for c in COLUMNS if c != "observed_at"]
    path = write_csv(tmp_path / "mine.csv", [dict(GOOD, fetched_at="2026-11-20")], cols)
    [row] = load_offers([path], include_cache=False, include_bundled=False, now=NOW).itertuples()
    assert row.observed_at == "2026-11-20T00:00:00Z" and not row.stale


def test_bundled_rows_claim_no_observation_date_their_source_does_not_give():
    """The snapshot's observed_at is the catalog file's commit date from PROVENANCE.md, or empty."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("build_snapshot", root / "scripts" / "build_snapshot.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    folder = root / "tests" / "data" / "skypilot_catalog"
    dates, prov = build.commit_dates(folder), build.provenance(folder)
    by_source = {f"skypilot-catalog@{commit[:12]}:{path}": dates.get(name) for name, (path, commit) in prov.items()}
    with open(root / "pricing" / "data" / "snapshot.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and all((r["observed_at"] or None) == by_source[r["source"]] for r in rows)
    df = load_offers(include_cache=False)
    assert df[df.observed_at.isna()].stale.all()  # undated => stale, whatever the provider


def test_validate_reports_spot_only_rows_as_good_and_priceless_rows_as_bad():
    import pandas as pd

    df = pd.DataFrame([dict(GOOD, price_hour="", spot_price_hour="44.8"),
                       dict(GOOD, instance_type="x", price_hour="", spot_price_hour="")])
    good, problems = validate(df, "t")
    assert len(good) == 1 and good.price_hour.isna().all()
    assert [(p.row, p.column) for p in problems] == [(2, "price_hour")]


def test_offer_model_checks_a_single_row():
    from pydantic import ValidationError

    from pricing.schema import Offer

    o = Offer(**dict(GOOD, spot_price_hour=None, notes=None))
    assert o.gpu_model == "H100" and o.price_per_gpu_hour == pytest.approx(6.88)
    with pytest.raises(ValidationError):
        Offer(**dict(GOOD, spot_price_hour=None, gpu_model="GTX 480"))


def test_cache_write_is_atomic_and_leaves_no_temp_files(tmp_path, monkeypatch):
    good, _ = read_sheet(write_csv(tmp_path / "a.csv", [GOOD]))
    cache.write_sheet("x", good, source="x", url=None)
    first = cache.sheet_path("x").read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr("pricing.files.os.replace", boom)  # the one atomic writer
    with pytest.raises(OSError):
        cache.write_sheet("x", good.assign(price_hour=1.0), source="x", url=None)
    assert cache.sheet_path("x").read_bytes() == first
    assert [p.name for p in cache.sheets_dir().iterdir() if ".tmp" in p.name] == []


def test_cache_dir_follows_env_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("GPU_ADVISOR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "gpu-advisor"
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.cache_dir() == tmp_path / "mine"


# ----------------------------------------------------------- fast paths agree with the careful ones
@settings(max_examples=300, deadline=None)
@given(cells=st.lists(st.one_of(st.none(), st.sampled_from(
    ["1", "-0", ".5", "5.", "+3", "1e400", "1e-400", "1.2.3", "e", "+-", "inf", "nan", "1_000", "0x10", "٣", "2,5",
     "12", "7.25", "1E3"])), min_size=1, max_size=12))
def test_number_shortcut_agrees_with_pandas(cells):
    """Plain decimals are converted at C speed; the result equals pandas.to_numeric(errors='coerce')."""
    import numpy as np
    import pandas as pd

    from pricing.schema import _numbers

    raw = pd.Series(cells, dtype="object")
    present = raw.notna().to_numpy()
    values = np.array([c for c in cells if c is not None], dtype=object)
    got = _numbers(raw, present, values).to_numpy()
    want = pd.to_numeric(raw, errors="coerce").astype("float64").to_numpy()
    np.testing.assert_array_equal(got, want)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(st.sampled_from(["aws", "gcp"]), st.sampled_from(["us-1", "eu-1", "ap-1", "b"]),
                               st.sampled_from(["i1", "i2"]), st.sampled_from([1.0, 2.0])), min_size=1, max_size=12),
       spot=st.booleans())
def test_collapse_regions_matches_sorting_the_frame_by_region(rows, spot):
    """One row per identical offer, first region alphabetically, the others listed in order; rows in
    the order a stable sort by region gives (the reference implementation, written plainly)."""
    import pandas as pd

    from advisor.planner.offers import collapse_regions

    off = pd.DataFrame(rows, columns=["provider", "region", "instance_type", "price_hour"]).assign(
        gpu_model="H100", gpu_count=8, source="s", spot_price_hour=float("nan"))
    got = collapse_regions(off, spot)
    keys = ["provider", "instance_type", "gpu_model", "gpu_count", "price_hour", "source"]
    ref = off.sort_values("region", kind="stable").reset_index(drop=True)
    first, also = {}, {}
    for i, r in ref.iterrows():
        k = tuple(r[c] for c in keys)
        if k in first:
            also[k].append(r["region"])
        else:
            first[k], also[k] = i, []
    want = [(ref.loc[i, "provider"], ref.loc[i, "region"], ref.loc[i, "instance_type"], ref.loc[i, "price_hour"],
             also[k]) for k, i in sorted(first.items(), key=lambda kv: kv[1])]
    assert [(r.provider, r.region, r.instance_type, r.price_hour, list(r.also_in)) for r in got.itertuples()] == want


PADDING = st.sampled_from(["", " ", "  ", "\t", " \t "])
DERIVABLE = ["gpu_memory_gb", "instance_type", "region", "currency", "source", "fetched_at", "interconnect", "notes"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), fmt=st.sampled_from(["csv", "json", "yaml"]))
def test_the_readers_cells_need_no_second_cleaning(tmp_path, monkeypatch, data, fmt):
    """read_sheet validates with `stripped=True` (no second strip of every cell): for padded, empty and
    missing cells in every format, the result is what a validation that cleans every cell gives."""
    import pandas as pd
    import yaml

    from pricing import loader

    dropped = data.draw(st.sets(st.sampled_from(DERIVABLE)), label="dropped columns")
    columns = [c for c in COLUMNS if c not in dropped]
    rows = []
    for i in range(data.draw(st.integers(1, 6), label="rows")):
        row = {}
        for c in columns:
            good = GOOD.get(c, "")
            value = data.draw(st.sampled_from([good, "", f"{good}-{i}" if c == "instance_type" else good]))
            row[c] = data.draw(PADDING) + value + data.draw(PADDING)
        rows.append(row)
    path = tmp_path / f"sheet.{fmt}"
    if fmt == "csv":
        write_csv(path, rows, columns)
    else:
        path.write_text(json.dumps(rows) if fmt == "json" else yaml.safe_dump(rows))
    fast = read_sheet(path)
    with monkeypatch.context() as m:
        m.setattr(loader, "validate", lambda df, sheet, numbers, stripped=False, **kw: validate(df, sheet, numbers, **kw))
        slow = read_sheet(path)
    pd.testing.assert_frame_equal(fast[0], slow[0])
    assert [str(p) for p in fast[1]] == [str(p) for p in slow[1]]


