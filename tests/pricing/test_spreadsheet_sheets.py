"""Sheets as spreadsheets write them: money cells, owned hardware at 0, bad rows named by
spreadsheet row (header = row 1) and refused unless --skip-bad-rows, discounts for public sheets
only, and each row's own billing increment (per second by default for a user sheet)."""

from __future__ import annotations

import json
import math

import pytest
from helpers.cli_run import gpu_advisor, one_line_error

from pricing.loader import load, read_sheet
from pricing.spreadsheet import OWNED_NOTE, PER_SECOND, plain_number

HEADER = "provider,region,instance_type,gpu_model,gpu_count,price_hour,observed_at"
PLAN = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "100M", "--format", "json"]


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))


def write(tmp_path, *lines, header=HEADER, name="mine.csv"):
    path = tmp_path / name
    path.write_text("\n".join([header, *lines]) + "\n")
    return path


def plan(capsys, *args):
    code, out, err = gpu_advisor(capsys, *PLAN, *args)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("cell, number", [
    ("$39.00", "39.00"), ("US$39", "39"), ("USD 39.5", "39.5"), ("39.00 USD", "39.00"), ("1,234.50", "1234.50"),
    ("$1,234,567", "1234567"), ("-$5", "-5"), ("$-5", "-5"), ("0.00", "0.00"), (" $ 7 ", "7"),
])
def test_money_cells_become_plain_decimals(cell, number):
    assert plain_number(cell) == number


@pytest.mark.parametrize("cell", ["2,5", "12,34", "€39", "39 EUR", "$", "1,2345", "free", "$$5", "1.2.3"])
def test_cells_that_are_not_us_money_are_left_for_the_validator(cell):
    assert plain_number(cell) == cell


def test_a_spreadsheet_export_with_dollars_and_owned_hardware_plans_with_both_rows(tmp_path, capsys):
    path = write(tmp_path, 'acme,us,8xH100-rent,H100,8,"$39.00",2026-11-30',
                 'ours,lab,4xA100,A100-80GB,4,0.00,2026-11-30')
    result = plan(capsys, "--prices", path, "--providers", "acme,ours", "--top", "50")
    offers = {c["offer"]["provider"]: c["offer"] for c in result["candidates"]}
    assert set(offers) == {"acme", "ours"}
    assert offers["acme"]["price_hour"] == 39.0
    assert offers["ours"]["price_hour"] == 0.0 and OWNED_NOTE in offers["ours"]["notes"]
    owned = [c for c in result["candidates"] if c["offer"]["provider"] == "ours"]
    assert all(c["cost"]["usd"] == 0 for c in owned)


def test_thousands_separators_and_currency_in_every_number_column(tmp_path):
    path = write(tmp_path, 'acme,us,big,H100,8,"$1,200.00",2026-11-30,"1,024","$2,000"',
                 header=HEADER + ",ram_gb,spot_price_hour")
    good, problems = read_sheet(path)
    assert problems == []
    assert (good.price_hour[0], good.ram_gb[0], good.spot_price_hour[0]) == (1_200, 1_024, 2_000)


@pytest.mark.parametrize("bad, row, column", [
    ("acme,us,b,H100,8,abc,2026-11-30", 3, "price_hour"),
    ("acme,us,b,H100,eight,20,2026-11-30", 3, "gpu_count"),
    ("acme,us,b,H100,8,2.5 EUR,2026-11-30", 3, "price_hour"),
    ("acme,us,b,H100,8,20,last week", 3, "observed_at"),
    ("acme,us,b,H100,8", 3, "*"),
])
def test_an_unreadable_row_exits_2_naming_its_spreadsheet_row(tmp_path, capsys, bad, row, column):
    path = write(tmp_path, "acme,us,a,H100,8,20,2026-11-30", bad)
    code, out, err = gpu_advisor(capsys, *PLAN, "--prices", path)
    line = one_line_error(code, err)
    assert f"row {row}, column '{column}'" in line and "--skip-bad-rows" in line
    # --skip-bad-rows: the rest plans, the row is still named on stderr
    code, out, err = gpu_advisor(capsys, *PLAN, "--prices", path, "--providers", "acme", "--skip-bad-rows")
    assert code == 0 and f"row {row}" in err
    assert {c["offer"]["instance_type"] for c in json.loads(out)["candidates"]} == {"a"}


def test_a_row_after_a_quoted_multiline_cell_keeps_its_spreadsheet_number(tmp_path):
    path = write(tmp_path, 'acme,us,a,H100,8,20,2026-11-30', 'acme,us,"b\nc",H100,8,20,2026-11-30',
                 'acme,us,d,H100,8,oops,2026-11-30')
    good, problems = read_sheet(path)
    assert sorted((p.row, p.column) for p in problems) == [(3, "instance_type"), (4, "price_hour")]


def test_duplicates_are_still_warnings_not_refusals(tmp_path, capsys):
    path = write(tmp_path, "acme,us,a,H100,8,20,2026-11-30", "acme,us,a,H100,8,30,2026-11-30")
    code, out, err = gpu_advisor(capsys, *PLAN, "--prices", path, "--providers", "acme")
    assert code == 0 and "row 3" in err and "row 2, which is kept" in err


# --------------------------------------------------------------------------- discounts
def test_a_discount_applies_to_public_sheets_only_unless_the_row_opts_in(tmp_path):
    path = write(tmp_path, "aws,us-east-1,mine-a,H100,8,20,2026-11-30,",
                 "aws,us-east-1,mine-b,H100,8,20,2026-11-30,yes",
                 "aws,us-east-1,mine-c,H100,8,20,2026-11-30,no", header=HEADER + ",apply_discount")
    plain, _ = load([path])
    cut, _ = load([path], discounts=["aws=0.3"])
    price = cut.set_index("instance_type").price_hour
    assert price["mine-a"] == 20 and price["mine-c"] == 20  # a negotiated rate is already net
    assert math.isclose(price["mine-b"], 14)
    key = ["provider", "region", "instance_type"]
    both = plain.merge(cut, on=key, suffixes=("", "_cut"))
    public = both[(both.provider == "aws") & (both.price_origin != "user") & both.price_hour.notna()]
    assert len(public) > 10
    assert ((public.price_hour_cut - public.price_hour * 0.7).abs() < 1e-9).all()


def test_an_apply_discount_that_is_not_yes_or_no_is_a_bad_row(tmp_path, capsys):
    path = write(tmp_path, "aws,us-east-1,mine,H100,8,20,2026-11-30,maybe", header=HEADER + ",apply_discount")
    code, out, err = gpu_advisor(capsys, "prices", "list", "--prices", path, "--discount", "aws=0.3")
    assert "row 2, column 'apply_discount'" in one_line_error(code, err)


# --------------------------------------------------------------------------- billing increments
def test_a_user_row_is_billed_per_second_unless_it_says_otherwise(tmp_path, capsys):
    path = write(tmp_path, "acme,us,per-second,H100,8,20,2026-11-30,",
                 "acme,us,hourly,H100,8,20,2026-11-30,1",
                 "acme,us,weekly,H100,8,20,2026-11-30,168", header=HEADER + ",billing_increment_hours")
    good, _ = read_sheet(path)
    assert dict(zip(good.instance_type, good.billing_increment_hours)) == {
        "per-second": PER_SECOND, "hourly": 1, "weekly": 168}
    result = plan(capsys, "--prices", path, "--providers", "acme", "--top", "50", "--methods", "lora")
    best = {}
    for c in result["candidates"]:
        best.setdefault(c["offer"]["instance_type"], c)
    second, hourly, weekly = best["per-second"], best["hourly"], best["weekly"]
    hours = second["timing"]["hours"]
    assert hours % 1 and 0 < hours < 168  # a run that does not end on a whole hour
    assert math.isclose(second["cost"]["usd"], 20 * hours, rel_tol=1e-3)
    assert math.isclose(hourly["cost"]["usd"], 20 * math.ceil(hourly["timing"]["hours"]), rel_tol=1e-6)
    assert math.isclose(weekly["cost"]["usd"], 20 * 168, rel_tol=1e-6)
