"""Price sheets: validation with row+column reasons, user sheets, precedence, discounts, staleness."""

from __future__ import annotations

import csv
import io
import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

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
    "price_hour": ["-1", "0", "$55", "free", "1e400"],
    "currency": ["EUR", "dollars"],
    "fetched_at": ["yesterday", "2026-13-45", "30/11/2026"],
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
        expected[i + 1] = col
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
    assert [(p.row, p.column) for p in problems] == [(2, "*")]
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
    cached = write_csv(tmp_path / "c.csv", [dict(GOOD, price_hour="50"),
                                             dict(GOOD, instance_type="p4d.24xlarge", gpu_model="A100",
                                                  price_hour="30")])
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


def test_old_prices_are_marked_stale(tmp_path):
    path = write_csv(tmp_path / "old.csv", [dict(GOOD, fetched_at="2026-09-01"),
                                             dict(GOOD, instance_type="new", fetched_at="2026-11-29")])
    df = load_offers([path], include_cache=False, include_bundled=False)
    assert df.set_index("instance_type").stale.to_dict() == {"p5.48xlarge": True, "new": False}
    df = load_offers([path], include_cache=False, include_bundled=False, stale_days=120)
    assert not df.stale.any()


def test_snapshot_rows_from_old_catalogs_are_stale_and_v9_rows_are_not():
    df = load_offers()
    assert df[df.provider == "azure"].stale.all() and df[df.provider == "runpod"].stale.all()
    assert not df[df.provider == "aws"].stale.any()


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

    monkeypatch.setattr("pricing.cache.os.replace", boom)
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
_CSV_TEXT = st.lists(st.lists(st.sampled_from(["a", "1.5", "", " x ", '"q,1"', '"two\nlines"', "é"]),
                              min_size=1, max_size=4), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(rows=_CSV_TEXT, newline=st.sampled_from(["\n", "\r\n", "\r"]), final=st.booleans())
@example(rows=[[""]], newline="\n", final=True)  # one blank line: no fields, not one empty field
@example(rows=[["a"], [""], ["b"]], newline="\r\n", final=False)
def test_field_count_shortcut_agrees_with_the_csv_module(rows, newline, final):
    """Counting commas per line (no quotes, no lone carriage returns) gives what csv.reader gives
    (0: unreadable, the careful path reports it)."""
    from pricing import files
    from pricing.loader import _field_counts

    text = newline.join(",".join(r) for r in rows) + (newline if final else "")
    try:
        with files.csv_field_limit():
            want = len(set(map(len, csv.reader(io.StringIO(text)))))
    except csv.Error:  # e.g. a lone carriage return inside a line
        want = 0
    assert _field_counts(text) == want


def test_field_count_shortcut_hands_a_huge_line_to_the_careful_path():
    from pricing import files
    from pricing.loader import _field_counts

    assert _field_counts("a,b\n" + "x" * (files.MAX_CSV_FIELD + 1) + ",1\n") == 0


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
        m.setattr(loader, "validate", lambda df, sheet, numbers, stripped=False: validate(df, sheet, numbers))
        slow = read_sheet(path)
    pd.testing.assert_frame_equal(fast[0], slow[0])
    assert [str(p) for p in fast[1]] == [str(p) for p in slow[1]]


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.lists(st.text(alphabet="ab1. \t\xa0\u2003\x0b\x1f\"", max_size=5), min_size=1, max_size=4),
                     min_size=1, max_size=5),
       newline=st.sampled_from(["\n", "\r\n"]), final=st.booleans())
@example(rows=[["b", "a "]], newline="\n", final=False)  # the last cell of a text without a final newline
@example(rows=[[" a"]], newline="\r\n", final=True)
def test_strip_shortcut_never_skips_a_cell_with_edge_whitespace(rows, newline, final):
    """_fast_csv skips str.strip only when _may_need_strip says no cell can need it."""
    from pricing.loader import _may_need_strip

    buf = io.StringIO()
    csv.writer(buf, lineterminator=newline).writerows(rows)
    text = buf.getvalue() if final else buf.getvalue()[:-len(newline)]
    if not _may_need_strip(text):
        for cells in csv.reader(io.StringIO(text)):
            assert all(c == c.strip() for c in cells), (text, cells)


@pytest.mark.parametrize("text", ["a\nx\n", "a\nx", "a,b\nx,\n", "a,b\n x,y\n"])
def test_fast_reader_cleans_every_shape_of_sheet(text):
    """One column, an empty cell, with and without cells to strip: the fast reader's cells are
    stripped str or None (pandas may hand out read-only arrays: it must not write into them)."""
    from pricing.loader import _fast_csv

    df, numbers, problems = _fast_csv(text)
    cells = df.to_numpy(dtype=object).ravel().tolist()
    assert all(c is None or (c and c == c.strip()) for c in cells)
    assert (None in cells) == (",\n" in text)
    assert numbers == [1] and problems == []
