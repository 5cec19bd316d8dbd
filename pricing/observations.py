"""The dated observation sheet: public prices, each with the date its source states and a citation.

`pricing/data/observations.csv` holds one row per observed public price (OBSERVATIONS.md says where
each comes from and how to add one). The catalog rows carry no dates of their own; this sheet is
what dates them (pricing.crosscheck) and what prices the sellers the catalogs lack
(pricing.observed_offers). A price nobody can trace or date is worth nothing here, so every row
must be cited and dated, and anything else wrong refuses the row with one `Problem` naming the
file, the row (as a spreadsheet numbers it: the header is row 1) and the column:

* provider: a lowercase id (letters, digits, '.', '_', '-'), as the price sheets spell it;
* gpu_model: a name in pricing/data/gpus.csv (stored canonical); gpu_count: > 0, a whole number
  from 1 up, a fraction only below 1 (required for price_unit=instance; empty for a per-GPU rate
  card that names no instance size);
* tier and price_unit from the closed sets TIERS and UNITS; currency from pricing.schema.CURRENCIES;
* price_hour: a positive finite number whose per-GPU-hour value lies within the price sheets'
  bounds (pricing.schema MIN_/MAX_PRICE_PER_GPU_HOUR);
* observed_at and read_at: ISO dates, at most a day ahead of the real clock, observed_at <= read_at
  (a price is read on or after the day its source states it);
* source: a URL (http/https), `github:owner/repo path @commit` or `hf:owner/dataset ...`;
* basis: `listing` (a seller's own stated price for a product it rents) or `aggregate` (a statistic over
  other sellers' listings: a marketplace median, a price index, a range); empty is derived from the tier
  (`marketplace-median` is an aggregate, every other tier a listing), and a `marketplace-median` row
  cannot be a listing. An aggregate never prices a row (pricing.crosscheck, AGGREGATE rule); sample_size
  is how many listings it summarises (a whole number from 1, aggregates only; empty: not stated). These
  two columns come last and may be missing from a row written before they existed (the row is padded);
* text cells: the schema's text rules (at most MAX_TEXT_CHARS, no control or bidi characters);
* the same observation twice (DUPLICATE_KEY: same thing, tier, day and source): the first row is
  kept and the later one reported as a duplicate.
The file is read with pricing.files' limits (a regular file, at most MAX_BYTES, CSV fields at most
MAX_CSV_FIELD): a hostile file is refused before it is parsed.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import re
from pathlib import Path
from typing import Any

from pricing import files, settings
from pricing.errors import PriceInputError
from pricing.gpus import canonical_name
from pricing.schema import (
    CONTROL_RE,
    CURRENCIES,
    FUTURE_SKEW_SECONDS,
    MAX_GPU_COUNT,
    MAX_NAME_CHARS,
    MAX_PRICE_PER_GPU_HOUR,
    MAX_RAM_GB_PER_GPU,
    MAX_TEXT_CHARS,
    MAX_VCPUS_PER_GPU,
    MIN_PRICE_PER_GPU_HOUR,
    NAME_COLUMNS,
    Problem,
)

SHEET = Path(__file__).parent / "data" / "observations.csv"
ENV = "GPU_ADVISOR_OBSERVATIONS"  # another observation sheet in place of the bundled one (tests, a team's own)
COLUMNS = ("provider", "product", "region", "gpu_model", "gpu_count", "tier", "price_hour", "price_unit",
           "currency", "observed_at", "source", "read_at", "vcpus", "ram_gb", "notes", "basis", "sample_size")
# the last columns, added after rows were written: a row that stops before them is padded with empty cells
TRAILING = ("basis", "sample_size")
BASES = ("listing", "aggregate")  # a seller's own price for one product | a statistic over other listings
AGGREGATE_TIERS = ("marketplace-median",)  # tiers that are aggregates by definition (basis derived from them)
REQUIRED = ("provider", "gpu_model", "tier", "price_hour", "price_unit", "currency", "observed_at", "source",
            "read_at")
# on-demand: the list price anyone can rent at; spot: interruptible; reserved-*: a committed term;
# community: a seller's peer-hosted tier (RunPod Community Cloud); marketplace-median: the median
# asking price of a marketplace's offers (vast.ai), which is what SkyPilot's vast catalog itself
# records as the price (sky/catalog/data_fetchers/fetch_vast.py takes the median search.totalHour)
TIERS = ("on-demand", "spot", "reserved-1y", "reserved-3y", "community", "marketplace-median")
UNITS = ("instance", "gpu")  # the price is for the whole instance, or per GPU-hour
# one observation: the same source stating the same price for the same thing on the same day (two sources
# on one day are two observations; the first in the sheet breaks the tie, pricing.crosscheck rule 2)
DUPLICATE_KEY = ("provider", "product", "region", "gpu_model", "gpu_count", "tier", "price_unit", "observed_at",
                 "source")
MAX_BYTES = 5_000_000  # the bundled sheet is well under 1 MB; anything near this is not a price list
_PROVIDER = re.compile(r"[a-z0-9][a-z0-9._-]*")
_SOURCE = re.compile(r"(https?://[^\s/]+\.[^\s]+|github:[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+\S*"
                     r"|hf:[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+\S*)(\s.*)?", re.S)
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}([T ][0-9:.]+(Z|[+-]\d{2}:?\d{2})?)?")


def sheet_path() -> Path:
    """The observation sheet the loader reads: $GPU_ADVISOR_OBSERVATIONS, else the bundled one."""
    return settings.observations_sheet() or SHEET


def read(path=None, now=None):
    """(DataFrame of good observations, [Problem]). The frame has the sheet's columns (gpu_model
    canonical, provider lowercase, dates as UTC timestamps, numbers as floats) plus `row` (the
    spreadsheet row number) and `per_gpu` (price per GPU-hour). A file that cannot be read at all
    (missing, not a regular file, over MAX_BYTES, a field over the CSV limit, not UTF-8) is one
    row-0 problem. `now`: the real time future dates are judged against (default: the clock)."""
    path = Path(path) if path is not None else sheet_path()
    sheet = str(path)
    try:
        header, records = _records(path, sheet)
    except PriceInputError as exc:
        return frame([]), [Problem(sheet, 0, "*", str(exc).removeprefix(f"{sheet}: "))]
    problems = [Problem(sheet, 1, c, "required column is missing") for c in REQUIRED if c not in header]
    problems += [Problem(sheet, 1, c, f"unknown column; the sheet's columns are {', '.join(COLUMNS)}")
                 for c in header if c not in COLUMNS]
    if any(p.message == "required column is missing" for p in problems):
        return frame([]), problems
    latest = (now or dt.datetime.now(dt.UTC)) + dt.timedelta(seconds=FUTURE_SKEW_SECONDS)
    good, seen = [], {}
    for number, cells in records:
        short = len(header) - len(cells)
        if 0 < short <= len(TRAILING) and all(h in TRAILING for h in header[len(cells):]):
            cells = [*cells, *[""] * short]  # written before the trailing columns existed
        if len(cells) != len(header):
            problems.append(Problem(sheet, number, "*", f"has {len(cells)} fields, header has {len(header)}"))
            continue
        raw = {h: c.strip() for h, c in zip(header, cells) if h in COLUMNS}
        row, errs = check_row(raw, latest)
        if errs:
            column, message, value = errs[0]  # the first problem of a row is enough
            problems.append(Problem(sheet, number, column, message, value))
            continue
        key = tuple(str(row[c]).lower() for c in DUPLICATE_KEY)
        if key in seen:
            problems.append(Problem(sheet, number, "*", f"same {', '.join(DUPLICATE_KEY)} as row {seen[key]}, "
                                    "which is kept; this row is dropped", kind="duplicate"))
            continue
        seen[key] = number
        good.append({**row, "row": number})
    return frame(good), problems


def frame(rows: list[dict]):
    """Good observation rows -> the typed DataFrame `read` returns (empty rows: an empty frame)."""
    import pandas as pd

    cols = list(COLUMNS) + ["row", "per_gpu"]
    df = pd.DataFrame(rows, columns=cols)
    df["basis"] = df["basis"].astype(object)
    for c in ("gpu_count", "price_hour", "vcpus", "ram_gb", "per_gpu", "sample_size"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    for c in ("observed_at", "read_at"):
        df[c] = pd.to_datetime(df[c], utc=True)
    return df


def _records(path: Path, sheet: str):
    """(header, [(row number, cells)]) of a CSV read within pricing.files' limits; blank lines skipped."""
    with files.open_text(path, sheet, MAX_BYTES) as f, files.csv_field_limit() as limit:
        try:
            rows = list(csv.reader(f))
        except csv.Error as exc:
            why = (f"a field is longer than {limit:,} characters (limit); refused" if files.is_field_limit_error(exc)
                   else f"unreadable CSV: {exc}")
            raise PriceInputError(f"{sheet}: {why}") from None
        except UnicodeDecodeError as exc:
            raise PriceInputError(f"{sheet}: not UTF-8 text ({exc.reason})") from None
    if not rows:
        raise PriceInputError(f"{sheet}: sheet is empty")
    header = [h.strip() for h in rows[0]]
    records = [(i, r) for i, r in enumerate(rows[1:], start=2) if any(c.strip() for c in r)]
    return header, records


def check_row(raw: dict, latest) -> tuple[dict, list[tuple[str, str, object]]]:
    """One row's cells -> (typed row, [(column, message, value)]); an empty list means the row is good."""

    errs: list[tuple[str, str, object]] = []
    cells: dict[str, Any] = {c: (raw.get(c) or None) for c in COLUMNS}
    for c, v in cells.items():  # the schema's text rules, for every cell (names: the plan's 512 characters)
        limit = MAX_NAME_CHARS if c in NAME_COLUMNS else MAX_TEXT_CHARS
        if v is not None and len(v) > limit:
            errs.append((c, f"is longer than {limit:,} characters", v[:40] + "..."))
        elif v is not None and CONTROL_RE.search(v):
            errs.append((c, "contains a control character (tab, newline, escape, bidi control, ...)", v))
    errs += [(c, "is empty", None) for c in REQUIRED if cells[c] is None]
    if errs:
        return {}, errs
    row = dict(cells)
    row["provider"] = cells["provider"].lower()
    if not _PROVIDER.fullmatch(row["provider"]):
        errs.append(("provider", "must be a lowercase id (letters, digits, '.', '_', '-')", cells["provider"]))
    canon = canonical_name(cells["gpu_model"])
    if canon is None:
        errs.append(("gpu_model", "is not in the GPU table (pricing/data/gpus.csv)", cells["gpu_model"]))
    row["gpu_model"] = canon
    if cells["tier"] not in TIERS:
        errs.append(("tier", f"must be one of {', '.join(TIERS)}", cells["tier"]))
    if cells["price_unit"] not in UNITS:
        errs.append(("price_unit", f"must be one of {', '.join(UNITS)}", cells["price_unit"]))
    if cells["currency"].upper() not in CURRENCIES:
        errs.append(("currency", f"unsupported currency; accepted: {', '.join(CURRENCIES)}", cells["currency"]))
    row["currency"] = cells["currency"].upper()
    if not _SOURCE.fullmatch(cells["source"]):
        errs.append(("source", "must cite a URL (https://...), github:owner/repo path @commit or hf:owner/dataset",
                     cells["source"]))
    errs += _numbers(row, cells)
    errs += _basis(row, cells)
    errs += _dates(row, cells, latest)
    return row, errs


def _basis(row: dict, cells: dict) -> list[tuple[str, str, object]]:
    """basis (derived from the tier when empty) and sample_size (aggregates only, a whole number from 1)."""
    basis = (cells["basis"] or "").lower() or ("aggregate" if cells["tier"] in AGGREGATE_TIERS else "listing")
    row["basis"] = basis
    if basis not in BASES:
        return [("basis", f"must be one of {', '.join(BASES)}", cells["basis"])]
    if basis == "listing" and cells["tier"] in AGGREGATE_TIERS:
        return [("basis", f"tier {cells['tier']} is a statistic over listings: basis must be aggregate",
                 cells["basis"])]
    size, why = _number(cells, "sample_size")
    row["sample_size"] = size
    if why:
        return [("sample_size", why, cells["sample_size"])]
    if size is not None and (basis != "aggregate" or size < 1 or size % 1):
        return [("sample_size", "must be a whole number from 1, on an aggregate row only", cells["sample_size"])]
    return []


def _number(cells: dict, col: str):
    """(value or None, error message or None) for one numeric cell."""
    text = cells[col]
    if text is None:
        return None, None
    try:
        value = float(text)
    except ValueError:
        return None, "is not a number"
    if not math.isfinite(value):
        return None, "is not finite"
    return value, None


def _numbers(row: dict, cells: dict) -> list[tuple[str, str, object]]:
    errs = []
    for col in ("gpu_count", "price_hour", "vcpus", "ram_gb"):
        row[col], why = _number(cells, col)
        if why:
            errs.append((col, why, cells[col]))
    if errs:
        return errs
    count, price = row["gpu_count"], row["price_hour"]
    if count is None and row["price_unit"] == "instance":
        errs.append(("gpu_count", "is empty (required when price_unit is instance)", None))
    elif count is not None and (count <= 0 or count > MAX_GPU_COUNT or (count >= 1 and count % 1)):
        errs.append(("gpu_count", f"must be > 0 and <= {MAX_GPU_COUNT:,}, a whole number from 1 up (a fraction "
                     "only below 1)", cells["gpu_count"]))
    if errs:
        return errs
    per_gpu = price if row["price_unit"] == "gpu" else price / count
    row["per_gpu"] = per_gpu
    if not MIN_PRICE_PER_GPU_HOUR <= per_gpu <= MAX_PRICE_PER_GPU_HOUR:
        errs.append(("price_hour", f"must be between {MIN_PRICE_PER_GPU_HOUR} and {MAX_PRICE_PER_GPU_HOUR:,g} USD "
                     "per GPU-hour (price_unit and gpu_count decide the per-GPU figure)", cells["price_hour"]))
    for col, limit in (("vcpus", MAX_VCPUS_PER_GPU), ("ram_gb", MAX_RAM_GB_PER_GPU)):
        v = row[col]
        if v is not None and (v < 0 or v / (count or 1) > limit):
            errs.append((col, f"must be >= 0 and at most {limit:,} per GPU", cells[col]))
    return errs


def _stamp(text: str):
    """An ISO date or date-time as an aware UTC datetime (a naive one is taken as UTC), or None."""
    if not _DATE.fullmatch(text):
        return None
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)


def _dates(row: dict, cells: dict, latest) -> list[tuple[str, str, object]]:
    errs = []
    for col in ("observed_at", "read_at"):
        text = cells[col]
        stamp = _stamp(text)
        if stamp is None:
            errs.append((col, "is not an ISO date (YYYY-MM-DD)", text))
        elif stamp > latest:
            errs.append((col, "is in the future (more than a day ahead of this clock)", text))
        row[col] = stamp
    if not errs and row["observed_at"] > row["read_at"]:
        errs.append(("observed_at", "is later than read_at (a price is read after its source states it)",
                     cells["observed_at"]))
    return errs
