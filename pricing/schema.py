"""The one price-sheet schema, and a validator that never drops a row silently.

Every sheet (bundled snapshot, fetch cache, user file, importer output) is a table with
these columns. `validate` checks a frame column by column (vectorised, so loading the
bundled snapshot stays fast) and returns the good rows plus one `Problem` per bad cell,
naming the sheet, the row and the column. `Offer` is the same schema as a pydantic model,
for code that handles single rows.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    "fetched_at": "datetime",
    "interconnect": "str?",
    "notes": "str?",  # why a value was corrected or a price is partial (e.g. spot_suspect)
}
REQUIRED = ("provider", "region", "instance_type", "gpu_model", "gpu_count")
ORIGIN = "price_origin"  # "user" | "cache:<source>" | "bundled", added by the loader
CURRENCIES = ("USD",)


@dataclass(frozen=True)
class Problem:
    """One rejected row: where it came from and what was wrong with which column."""

    sheet: str
    row: int  # 1-based data row (header excluded); 0 = the sheet as a whole
    column: str
    message: str
    value: object = None

    def __str__(self) -> str:
        where = f"row {self.row}" if self.row else "sheet"
        got = "" if self.value is None else f" (got {self.value!r})"
        return f"{self.sheet}: {where}, column '{self.column}': {self.message}{got}"


def empty_frame():
    import pandas as pd

    return pd.DataFrame({c: pd.Series(dtype="float64" if k.startswith("float") else "object")
                         for c, k in COLUMNS.items()})


def validate(df, sheet: str = "sheet", row_numbers=None):
    """Return (good_rows, problems). Never raises on bad values; coerces types in the result.

    `row_numbers` maps each frame position to the row number to report (defaults to 1..n).
    """
    import numpy as np
    import pandas as pd

    from pricing.gpus import canonical_name

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
    out: dict[str, object] = {}

    def flag(mask, column: str, message: str, values) -> None:
        nonlocal bad
        mask = np.asarray(mask, dtype=bool) & ~bad  # first problem per row is enough
        for i in np.flatnonzero(mask):
            v = values.iloc[i] if hasattr(values, "iloc") else values[i]
            problems.append(Problem(sheet, rows[i], column, message, v))
        bad |= mask

    def clean(v):
        if v is None or (isinstance(v, float) and np.isnan(v)):
            return None
        v = str(v).strip()
        return v or None

    def text(col: str):
        values = [None] * n if col not in df.columns else [clean(v) for v in df[col].tolist()]
        return pd.Series(values, dtype="object")

    for col, kind in COLUMNS.items():
        raw = text(col)
        if kind.startswith("str"):
            if not kind.endswith("?"):
                flag(raw.isna(), col, "is empty", raw)
            if col == "gpu_model":  # canonical name, or the row is rejected right here
                names = raw.tolist()
                lookup = {v: canonical_name(v) for v in set(names) if isinstance(v, str)}
                canon = pd.Series([lookup.get(v) for v in names], dtype="object")
                flag(raw.notna() & canon.isna(), col,
                     "is not in the GPU table (pricing/data/gpus.csv)", raw)
                raw = canon
            out[col] = raw
        elif kind.startswith("float"):
            num = pd.to_numeric(raw, errors="coerce")
            flag(raw.notna() & num.isna(), col, "is not a number", raw)
            flag(num.notna() & ~np.isfinite(num.fillna(0)), col, "is not finite", raw)
            if not kind.endswith("?"):
                flag(raw.isna(), col, "is empty", raw)
            if col in ("gpu_count", "gpu_memory_gb", "price_hour", "spot_price_hour"):
                flag(num.notna() & (num <= 0), col, "must be > 0 (empty means unknown)", raw)
            else:
                flag(num.notna() & (num < 0), col, "must be >= 0", raw)
            out[col] = num.astype("float64")
        else:  # datetime
            stamp = pd.to_datetime(raw, errors="coerce", utc=True, format="ISO8601")
            flag(raw.isna(), col, "is empty (ISO date/time expected)", raw)
            flag(raw.notna() & stamp.isna(), col, "is not an ISO date/time", raw)
            out[col] = stamp

    price, spot = out["price_hour"], out["spot_price_hour"]
    flag(price.isna() & spot.isna(), "price_hour", "no on-demand or spot price", price)
    cur = out["currency"].str.upper()
    flag(cur.notna() & ~cur.isin(CURRENCIES), "currency",
         f"unsupported currency; accepted: {', '.join(CURRENCIES)}", out["currency"])
    out["currency"] = cur
    out["provider"] = out["provider"].str.lower()

    good = pd.DataFrame(out)[~bad].reset_index(drop=True)
    return good, problems


def _offer_model():
    from pydantic import BaseModel, Field, field_validator

    from pricing.gpus import canonical_name

    class Offer(BaseModel):
        """One priced instance, as a typed row (same rules as `validate`)."""

        provider: str
        region: str
        instance_type: str
        gpu_model: str
        gpu_count: float = Field(gt=0)
        gpu_memory_gb: float = Field(gt=0)
        vcpus: float | None = Field(default=None, ge=0)
        ram_gb: float | None = Field(default=None, ge=0)
        price_hour: float | None = Field(default=None, gt=0)
        spot_price_hour: float | None = Field(default=None, gt=0)
        currency: str = "USD"
        source: str
        fetched_at: str
        interconnect: str | None = None
        notes: str | None = None
        price_origin: str | None = None

        @field_validator("gpu_model")
        @classmethod
        def _canonical(cls, v: str) -> str:
            c = canonical_name(v)
            if c is None:
                raise ValueError(f"unknown GPU '{v}' (not in pricing/data/gpus.csv)")
            return c

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
