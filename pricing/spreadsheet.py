"""User sheets as spreadsheets write them: money cells, owned hardware, own billing.

A sheet exported from Excel, Numbers or Google Sheets writes `$39.00`, `1,234.50` or `USD 39`
where our schema wants `39.0`, and `0.00` for hardware the team owns. These helpers turn such
cells into plain decimals before validation (so the one validator still names every cell it
cannot read), and add what only a user's own sheet means:

* a price of exactly 0 is hardware you own: planned at $0/h, with a note saying so;
* `billing_increment_hours` and `min_billed_hours` default to one second (1/3600 h) for a user row
  that leaves them empty: your own or negotiated capacity is not billed by the started hour (the
  planner's assumption for an unknown provider) unless the row says so;
* `--discount` applies to public sheets only; a user row opts in with `apply_discount` = yes
  (yes/no, true/false, 1/0; empty: no), since a negotiated rate in your sheet is already net.
"""

from __future__ import annotations

import re

from pricing.schema import COLUMNS, Problem, per_distinct

# the numeric cells a user sheet may hold (schema columns and the per-GPU shorthands the loader derives from)
NUMBER_COLUMNS = tuple(c for c, k in COLUMNS.items() if k.startswith("float")) + (
    "price_per_gpu_hour", "spot_price_per_gpu_hour")
PER_SECOND = 1 / 3600  # hours: the default billing increment of a user row
OWNED_NOTE = "owned hardware: price 0 in your sheet, planned at $0/h"
DISCOUNT_COLUMN = "apply_discount"
_YES, _NO = {"yes", "y", "true", "1"}, {"no", "n", "false", "0"}

# a US-style money or count cell: an optional USD/$/US$ before or after a signed number whose
# thousands are grouped by commas (1,234,567.89) or not grouped at all
_MONEY = re.compile(r"(?i)^(?:(?:US\$|\$|USD)\s*(?P<s1>[+-]?)|(?P<s2>[+-]?)\s*(?:US\$|\$)?)\s*"
                    r"(?P<n>(?:\d{1,3}(?:,\d{3})+|\d*)(?:\.\d*)?)\s*(?:USD)?$")
_HINTS = ("$", ",", "U", "u")  # a column without any of these is plain already


def plain_number(text):
    """`$39.00` -> '39.00', `1,234.5` -> '1234.5', `USD 7` -> '7'; anything else unchanged (then the
    validator names it). A decimal comma (`2,5`) is left as it is: it is ambiguous, not money."""
    if not isinstance(text, str):
        return text
    m = _MONEY.match(text.strip())
    if not m or not any(ch.isdigit() for ch in m["n"]):
        return text
    return (m["s1"] or m["s2"] or "") + m["n"].replace(",", "")


def plain_numbers(df):
    """The frame with every money/count cell of NUMBER_COLUMNS as a plain decimal (a copy if any
    changed). Columns with no '$', ',' or 'USD' are skipped without a look at each cell."""
    changed = {}
    for col in NUMBER_COLUMNS:
        if col not in df.columns:
            continue
        values = df[col].to_numpy(dtype=object)
        if any(h in "".join(v for v in values if isinstance(v, str)) for h in _HINTS):
            changed[col] = per_distinct(values, plain_number, na=None)
    if not changed:
        return df
    import pandas as pd

    # object columns (pandas 3 would infer 'str' and turn None into NaN)
    return df.assign(**{c: pd.Series(v, index=df.index, dtype="object") for c, v in changed.items()})


def discount_flags(df, sheet: str, numbers) -> tuple[dict[int, bool], list[Problem]]:
    """{row number: True} for the rows whose `apply_discount` says yes; a value that is neither
    yes nor no is a problem naming its row (the row is then not discounted)."""
    if DISCOUNT_COLUMN not in df.columns:
        return {}, []
    flags, problems = {}, []
    for number, value in zip(numbers, df[DISCOUNT_COLUMN].tolist()):
        if value is None:
            continue
        word = str(value).strip().lower()
        if word in _YES:
            flags[number] = True
        elif word not in _NO:
            problems.append(Problem(sheet, number, DISCOUNT_COLUMN, "must be yes or no (empty: no)", value))
    return flags, problems


def owned_and_billed(good):
    """Validated user rows: a price of 0 gains OWNED_NOTE; empty billing terms become per second."""
    import numpy as np

    good = good.copy()
    zero = ((good["price_hour"] == 0) | (good["spot_price_hour"] == 0)).to_numpy()
    if zero.any():
        notes = good["notes"].to_numpy(dtype=object).copy()
        notes[zero] = [f"{n};{OWNED_NOTE}" if n else OWNED_NOTE for n in notes[zero]]
        good["notes"] = notes
    for col in ("billing_increment_hours", "min_billed_hours"):  # no stated term: per second, no minimum
        hours = good[col].to_numpy(dtype=float)
        good[col] = np.where(np.isnan(hours), PER_SECOND, hours)
    return good
