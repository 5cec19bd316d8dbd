"""The one price-sheet schema, and a validator that never drops a row silently.

Every sheet (bundled snapshot, fetch cache, user file, importer output) is a table with
these columns. `validate` checks a frame column by column (vectorised, so loading the
bundled snapshot stays fast) and returns the good rows plus one `Problem` per bad cell,
naming the sheet, the row and the column. `Offer` is the same schema as a pydantic model,
for code that handles single rows.

Range rules (a value outside them is refused with its row and column). The bounds are far
beyond any real offer, so they only catch typos, unit mix-ups and hostile files:

* gpu_count: > 0 and <= 100,000 (one row may price a whole cluster; one instance has <= 8
  GPUs today, a rack 72); a whole number from 1 up, a fraction only below 1 (a GPU slice:
  AWS g6f 1/8 L4, Azure NV*ads_A10_v5 1/6 A10), so 8.5 or 2.5 GPUs are refused.
* gpu_memory_gb: > 0 and <= 4,096 GB per GPU (the largest today has 288 GB).
* price_hour, spot_price_hour: >= 0.01 and <= 1,000 USD per GPU-hour, i.e. price / gpu_count
  (empty = unknown; list prices are about 0.1-15 USD per GPU-hour). The floor is five times below
  the cheapest offer anyone lists (the bundled snapshot's cheapest is Azure's NC4as_T4_v3 at
  $0.05786 per spot GPU-hour, SkyPilot catalog), so a smaller price is a unit mix-up (cents as
  dollars) or a hostile feed (1e-300 would rank first at "$0.00"). One exception: a user sheet
  (`user=True`) may say 0 for hardware it owns, planned at $0/h with a note.
* fetched_at, observed_at: not in the future beyond a day of clock skew (a date in 2099 would
  make a price never stale).
* vcpus: >= 0 and <= 1,024 per GPU; ram_gb: >= 0 and <= 16,384 GB per GPU (whole-instance
  values divided by gpu_count; real ones stay below 128 vCPUs and 2 TB per GPU).
* numbers must be finite (NaN, inf and 1e400 are refused); text cells must be at most
  1,000 characters (provider, region, instance_type and interconnect: 512, the names a plan carries) with no
  control characters and no bidirectional controls (U+200E/F,
  U+202A-U+202E, U+2066-U+2069: they garble terminal tables or make text read backwards; the
  row is dropped with its row number before it can be cached or picked).
* min_billed_hours: >= 0, billing_increment_hours: > 0, both <= 26,280 h (three years).
* in a feed or catalog (not a user sheet, whose box names are the user's own), an instance_type
  that names a GPU (a token such as h100, A100, L40S) other than gpu_model's family is a
  contradiction: the row is dropped with its row number.
* one row per (provider, region, instance_type) in a sheet: the FIRST row for a key is kept,
  each later one is reported ("same ... as row N, which is kept").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pricing.gpus import canonical_name, family, named_family

# name -> kind; order is the order written to CSV and shown in JSON.
COLUMNS: dict[str, str] = {
    "provider": "str",
    "region": "str",
    "instance_type": "str",
    "gpu_model": "str",  # canonical, pricing.gpus.canonical_name
    "gpu_count": "float",  # may be fractional (AWS g6f, Azure NV*ads_A10_v5)
    "gpu_memory_gb": "float",  # per GPU, marketing GB from the GPU table
    "vcpus": "float?",
    "ram_gb": "float?",
    "price_hour": "float?",  # on-demand, whole instance, USD; None when only spot exists
    "spot_price_hour": "float?",
    "currency": "str",
    "source": "str",
    "fetched_at": "datetime",  # when this tool (or the sheet's author) got the row
    # the date the row's source states it observed the price (an API's own timestamp or the fetch time,
    # a catalog file's commit date, a user sheet's column); empty = nobody knows, and then the row is
    # stale (pricing.loader.stale_mask, the one rule)
    "observed_at": "datetime?",
    "interconnect": "str?",
    # Gb/s per instance between instances of one cluster, when the sheet knows the instance type forms
    # multi-node jobs (a private cluster, a provider's cluster product); empty: pricing/data/fabrics.csv decides.
    "cluster_gbps": "float?",
    # billing terms (empty: billed by the hour or finer, no minimum): a run is billed at least
    # min_billed_hours, rounded up to whole billing_increment_hours (a weekly-billed cluster: 168 / 168)
    "min_billed_hours": "float?",
    "billing_increment_hours": "float?",
    "notes": "str?",  # why a value was corrected or a price is partial (e.g. spot_suspect)
}
REQUIRED = ("provider", "region", "instance_type", "gpu_model", "gpu_count")
ORIGIN = "price_origin"  # "user" | "cache:<source>" | "bundled", added by the loader
CURRENCIES = ("USD",)
KEY = ("provider", "region", "instance_type")

MAX_GPU_COUNT = 100_000
MAX_CLUSTER_GBPS = 100_000  # generous: the fastest in pricing/data/fabrics.csv is 6,400 Gb/s (AWS p6-b300)
MAX_GPU_MEMORY_GB = 4_096
MAX_BILLED_HOURS = 26_280  # three years: the longest term a list price is sold for
MAX_PRICE_PER_GPU_HOUR = 1_000.0  # USD, for price_hour and spot_price_hour
MAX_VCPUS_PER_GPU = 1_024
MAX_RAM_GB_PER_GPU = 16_384
MAX_TEXT_CHARS = 1_000
# provider, region, instance_type, interconnect: the names a plan carries, where each is at most 512 characters
# (advisor/results/checks.py NAME_CHARS); one limit, checked here, so a longer one is a dropped row with its row
# number, not a plan that fails on it later as if an option had been given
MAX_NAME_CHARS = 512
NAME_COLUMNS = ("provider", "region", "instance_type", "interconnect")
CONTROL_CHARS = r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]"
MIN_PRICE_PER_GPU_HOUR = 0.01  # USD; see the module docstring for why
FUTURE_SKEW_SECONDS = 86_400  # a date later than now + this is refused
CONTROL_RE = re.compile(CONTROL_CHARS)


@dataclass(frozen=True)
class Problem:
    """One rejected row: where it came from and what was wrong with which column."""

    sheet: str
    row: int  # 1-based data row (header excluded); 0 = the sheet as a whole
    column: str
    message: str
    value: object = None
    kind: str = "bad"  # "bad": the row cannot be used; "duplicate": a readable row another one overrides

    def __str__(self) -> str:
        where = f"row {self.row}" if self.row else "sheet"
        got = "" if self.value is None else f" (got {self.value!r})"
        return f"{self.sheet}: {where}, column '{self.column}': {self.message}{got}"


PER_GPU_MAX = {"vcpus": (MAX_VCPUS_PER_GPU, "vCPUs"), "ram_gb": (MAX_RAM_GB_PER_GPU, "GB of RAM"),
               "price_hour": (MAX_PRICE_PER_GPU_HOUR, "USD/hour"),
               "spot_price_hour": (MAX_PRICE_PER_GPU_HOUR, "USD/hour")}


def empty_frame():
    import pandas as pd

    return pd.DataFrame({c: pd.Series(dtype="float64" if k.startswith("float") else "object")
                         for c, k in COLUMNS.items()})


_DECIMAL = re.compile(r"[0-9.eE+-]*")


def _numbers(raw, present, values):
    """A text column as float64 (unreadable -> NaN). Plain decimals, the usual case, are converted
    at C speed; anything else (words, 'inf', digit separators) goes through pandas' parser."""
    import numpy as np
    import pandas as pd

    if isinstance(values, np.ndarray) and _DECIMAL.fullmatch("".join(values)):
        try:
            out = np.full(len(raw), np.nan)
            out[present] = values.astype(np.float64)
            return pd.Series(out, index=raw.index)
        except ValueError:  # "1.2.3", "e", "+-": pandas names them unreadable below
            pass
    return pd.to_numeric(raw, errors="coerce").astype("float64")


def per_distinct(values, fn, na=None):
    """`fn(value)` for every cell of a column, computed once per distinct value (a sheet repeats a few
    notes, dates and names over many rows); NA cells (None, NaN) get `na`. An object array."""
    import numpy as np
    import pandas as pd

    codes, uniques = pd.factorize(np.asarray(values, dtype=object))
    out = np.empty(len(uniques) + 1, dtype=object)
    for i, value in enumerate(uniques):
        out[i] = fn(value)
    out[-1] = na  # code -1: NA
    return out[codes]


def mentions(values, text: str):
    """Boolean array: which cells contain `text` (NA cells do not), tested once per distinct value."""
    return per_distinct(values, lambda v: text in str(v), na=False).astype(bool)


def validate(df, sheet: str = "sheet", row_numbers=None, stripped: bool = False, user: bool = False,
             now=None):
    """Return (good_rows, problems). Never raises on bad values; coerces types in the result.

    `stripped`: every cell is already a str without surrounding whitespace, or None (what the
    loader's own sheet reader produces), so the cells are not cleaned a second time.
    `user`: the user's own sheet, where a price of exactly 0 means hardware they own.
    `now`: the time future dates are judged against (default: the current time).

    `row_numbers` maps each frame position to the row number to report (defaults to 1..n);
    `good.attrs["rows"]` lists the row number of each good row. A repeated (provider, region,
    instance_type) keeps its first row; every later one is a problem naming both rows.
    """
    import numpy as np
    import pandas as pd

    problems: list[Problem] = []
    n = len(df)
    rows = list(row_numbers) if row_numbers is not None else list(range(1, n + 1))
    if n == 0:
        return empty_frame(), problems
    missing = [c for c in REQUIRED if c not in df.columns]
    if "price_hour" not in df.columns and "spot_price_hour" not in df.columns:
        missing.append("price_hour")
    if missing:
        problems += [Problem(sheet, 0, c, "required column is missing") for c in missing]
        return empty_frame(), problems

    df = df.reset_index(drop=True)
    bad = np.zeros(n, dtype=bool)
    out: dict[str, Any] = {}  # column -> pandas Series

    def flag(mask, column: str, message: str, values) -> None:
        nonlocal bad
        mask = np.asarray(mask, dtype=bool) & ~bad  # first problem per row is enough
        for i in np.flatnonzero(mask):
            v = values.iloc[i] if hasattr(values, "iloc") else values[i]
            problems.append(Problem(sheet, rows[i], column, message, v))
        bad |= mask

    def text_checks(col: str, raw, present, values) -> None:
        limit = MAX_NAME_CHARS if col in NAME_COLUMNS else MAX_TEXT_CHARS
        if max(map(len, values), default=0) > limit:  # cheap test first
            flag(raw.str.len() > limit, col, f"is longer than {limit:,} characters",
                 raw.str.slice(0, 40) + "...")
        joined = "".join(values)
        if not joined.isprintable() and CONTROL_RE.search(joined):  # isprintable: a fast pre-check
            flag(raw.str.contains(CONTROL_CHARS, regex=True, na=False), col,
                 "contains a control character (tab, newline, escape, ...)", raw)

    def per_value(series, fn):
        """fn applied once per distinct text value; None stays None."""
        return pd.Series(per_distinct(series.to_numpy(), lambda v: fn(v) if isinstance(v, str) else None),
                         dtype="object")

    latest = pd.Timestamp(now or pd.Timestamp.now(tz="UTC")) + pd.Timedelta(seconds=FUTURE_SKEW_SECONDS)
    for col, kind in COLUMNS.items():
        raw, present, values = _column_text(df, col, n, stripped)
        if kind.startswith("str"):
            if not kind.endswith("?"):
                flag(~present, col, "is empty", raw)
            text_checks(col, raw, present, values)
            if col == "gpu_model":  # canonical name, or the row is rejected right here
                canon = per_value(raw, canonical_name)
                flag(present & canon.isna().to_numpy(), col,
                     "is not in the GPU table (pricing/data/gpus.csv)", raw)
                raw = canon
                if not user:  # a feed's own names; a user names their boxes as they like ('t4' for an H100)
                    named = per_value(out["instance_type"], named_family)  # e.g. 'gpu_8x_h100' names H100
                    flag((named.notna() & canon.notna() & (named != per_value(canon, family))).to_numpy(),
                         "instance_type", "names another GPU than gpu_model; the row is dropped", out["instance_type"])
            out[col] = raw
        elif kind.startswith("float"):
            num = _numbers(raw, present, values)
            known = num.notna().to_numpy()
            flag(present & ~known, col, "is not a number", raw)
            flag(known & ~np.isfinite(num.fillna(0)), col, "is not finite", raw)
            if not kind.endswith("?"):
                flag(~present, col, "is empty", raw)
            _range_checks(col, num, known, raw, out.get("gpu_count"), flag, user)
            out[col] = num
        else:  # datetime
            stamp = pd.to_datetime(raw, errors="coerce", utc=True, format="ISO8601")
            if not kind.endswith("?"):
                flag(~present, col, "is empty (ISO date/time expected)", raw)
            flag(present & stamp.isna().to_numpy(), col, "is not an ISO date/time", raw)
            flag((stamp > latest).to_numpy(), col, "is in the future (more than a day ahead of this clock)", raw)
            out[col] = stamp

    price, spot = out["price_hour"], out["spot_price_hour"]
    flag(price.isna() & spot.isna(), "price_hour", "no on-demand or spot price", price)
    cur = per_value(out["currency"], str.upper)
    flag(cur.notna() & ~cur.isin(CURRENCIES), "currency",
         f"unsupported currency; accepted: {', '.join(CURRENCIES)}", out["currency"])
    out["currency"] = cur
    out["provider"] = per_value(out["provider"], str.lower)

    frame = pd.DataFrame(out)
    problems += _repeated_keys(frame, bad, rows, sheet)
    good = frame[~bad].reset_index(drop=True)
    good.attrs["rows"] = np.asarray(rows, dtype=object)[~bad].tolist()
    return good, problems


def _clean(v):
    """A cell as stripped text, or None when empty or missing."""
    import numpy as np

    if v is None or (isinstance(v, float) and np.isnan(v)):
        return None
    v = str(v).strip()
    return v or None


def _column_text(df, col: str, n: int, stripped: bool):
    """(column as stripped str / None, mask of present cells, the present values)."""
    import numpy as np
    import pandas as pd

    if col not in df.columns:
        return pd.Series([None] * n, dtype="object"), np.zeros(n, dtype=bool), []
    values = df[col].to_numpy(dtype=object)
    missing = values == None  # noqa: E711 - elementwise on an object array
    if stripped:
        return pd.Series(values.copy(), dtype="object"), ~missing, values[~missing]
    try:  # str or None (the usual case): C-speed passes only
        kept = np.array(list(map(str.strip, values[~missing])), dtype=object)
    except TypeError:  # NaN, numbers, nested values: one by one
        raw = pd.Series([_clean(v) for v in values.tolist()], dtype="object")
        present = raw.notna().to_numpy()
        return raw, present, raw[present].tolist()
    result = np.full(n, None, dtype=object)
    result[~missing] = kept
    empty = result == ""
    if empty.any():
        result[empty] = None
        missing |= empty
        kept = kept[kept != ""]
    return pd.Series(result, dtype="object"), ~missing, kept


def _range_checks(col: str, num, known, raw, count, flag, user: bool) -> None:
    """Sign, floor and ceiling of one numeric column (the module docstring's range rules); `count` is
    the validated gpu_count, the divisor of the per-GPU limits."""
    import numpy as np

    if col in ("price_hour", "spot_price_hour"):
        zero = ((num == 0) & ~np.signbit(num)).to_numpy() if user else np.zeros(len(num), dtype=bool)
        flag(known & ((num < 0) | np.signbit(num)), col, "must be >= 0 (empty means unknown)", raw)
        flag(known & ~zero & (num / count < MIN_PRICE_PER_GPU_HOUR), col,
             f"is below {MIN_PRICE_PER_GPU_HOUR} USD per GPU-hour (the floor: a unit mix-up?"
             + ("; 0 is allowed for hardware you own)" if user else ")"), raw)
    elif col in ("gpu_count", "gpu_memory_gb", "billing_increment_hours"):
        flag(known & (num <= 0), col, "must be > 0 (empty means unknown)", raw)
    else:
        flag(known & (num < 0), col, "must be >= 0", raw)
    if col == "gpu_count":
        flag(num > MAX_GPU_COUNT, col, f"must be <= {MAX_GPU_COUNT:,} GPUs", raw)
        flag((num >= 1) & (num % 1 != 0), col, "must be a whole number of GPUs (a fraction only "
             "below 1, for a GPU slice)", raw)
    elif col == "cluster_gbps":
        flag(num > MAX_CLUSTER_GBPS, col, f"must be <= {MAX_CLUSTER_GBPS:,} Gb/s per instance", raw)
    elif col in ("min_billed_hours", "billing_increment_hours"):
        flag(num > MAX_BILLED_HOURS, col, f"must be <= {MAX_BILLED_HOURS:,} hours (3 years)", raw)
    elif col == "gpu_memory_gb":
        flag(num > MAX_GPU_MEMORY_GB, col, f"must be <= {MAX_GPU_MEMORY_GB:,} GB per GPU", raw)
    elif col in PER_GPU_MAX:
        limit, unit = PER_GPU_MAX[col]
        flag(num / count > limit, col, f"is more than {limit:,g} {unit} per GPU (gpu_count is the divisor)", raw)


def _repeated_keys(frame, bad, rows, sheet: str) -> list[Problem]:
    """One row per (provider, region, instance_type): among the rows not already bad, the first is
    kept and each later one is marked bad (in place) and reported with both row numbers."""
    import numpy as np

    pos = np.flatnonzero(~bad)
    keys = frame.loc[pos, list(KEY)]
    dup = np.asarray(keys.duplicated(keep="first"))
    if not dup.any():
        return []
    row_no = np.asarray(rows, dtype=object)
    first = keys.assign(_row=row_no[pos]).groupby(list(KEY), sort=False, dropna=False)["_row"]
    first = np.asarray(first.transform("first"), dtype=object)
    out = []
    for j in np.flatnonzero(dup):  # only the duplicates
        i = pos[j]
        out.append(Problem(sheet, rows[i], "instance_type", f"same provider, region and instance_type as row "
                           f"{first[j]}, which is kept; this row is dropped",
                           "/".join(str(v) for v in keys.iloc[j]), kind="duplicate"))
        bad[i] = True
    return out


def _offer_model():
    from pydantic import BaseModel, Field, field_validator, model_validator

    class Offer(BaseModel):
        """One priced instance, as a typed row (same rules as `validate`)."""

        provider: str
        region: str
        instance_type: str
        gpu_model: str
        gpu_count: float = Field(gt=0, le=MAX_GPU_COUNT, allow_inf_nan=False)
        gpu_memory_gb: float = Field(gt=0, le=MAX_GPU_MEMORY_GB, allow_inf_nan=False)
        vcpus: float | None = Field(default=None, ge=0, allow_inf_nan=False)
        ram_gb: float | None = Field(default=None, ge=0, allow_inf_nan=False)
        price_hour: float | None = Field(default=None, ge=0, allow_inf_nan=False)
        spot_price_hour: float | None = Field(default=None, ge=0, allow_inf_nan=False)
        currency: str = "USD"
        source: str
        fetched_at: str
        observed_at: str | None = None  # None: the source gives no date (the row is stale)
        interconnect: str | None = None
        min_billed_hours: float | None = Field(default=None, ge=0, le=MAX_BILLED_HOURS, allow_inf_nan=False)
        billing_increment_hours: float | None = Field(default=None, gt=0, le=MAX_BILLED_HOURS, allow_inf_nan=False)
        notes: str | None = None
        price_origin: str | None = None

        @field_validator("gpu_model")
        @classmethod
        def _canonical(cls, v: str) -> str:
            c = canonical_name(v)
            if c is None:
                raise ValueError(f"unknown GPU '{v}' (not in pricing/data/gpus.csv)")
            return c

        @field_validator("provider", "region", "instance_type", "currency", "source", "interconnect",
                         "notes")
        @classmethod
        def _text(cls, v, info):
            limit = MAX_NAME_CHARS if info.field_name in NAME_COLUMNS else MAX_TEXT_CHARS
            if v is not None and (len(v) > limit or re.search(CONTROL_CHARS, v)):
                raise ValueError(f"at most {limit} characters, no control characters")
            return v

        @model_validator(mode="after")
        def _per_gpu(self):
            if self.gpu_count >= 1 and self.gpu_count % 1:
                raise ValueError("gpu_count: a whole number of GPUs (a fraction only below 1)")
            for col in ("price_hour", "spot_price_hour"):
                v = getattr(self, col)
                if v is not None and v != 0 and v / self.gpu_count < MIN_PRICE_PER_GPU_HOUR:
                    raise ValueError(f"{col}: below {MIN_PRICE_PER_GPU_HOUR} USD per GPU-hour")
            for col, (limit, unit) in PER_GPU_MAX.items():
                v = getattr(self, col)
                if v is not None and v / self.gpu_count > limit:
                    raise ValueError(f"{col}: more than {limit:,g} {unit} per GPU")
            return self

        @property
        def price_per_gpu_hour(self) -> float | None:
            return None if self.price_hour is None else self.price_hour / self.gpu_count

    return Offer


def __getattr__(name: str):
    if name == "Offer":  # pydantic is imported only when a caller wants single rows
        model = _offer_model()
        globals()["Offer"] = model
        return model
    raise AttributeError(name)
