"""When two sheets price the same instance: keep the newer dated price, and say so when they disagree.

Two catalogs (SkyPilot's, dstack's gpuhunt), a live fetch and the bundled snapshot can all list the
same (provider, region, instance_type). A user's own sheet always wins (it is their price). Among the
others the row with the newest `observed_at` is kept; an undated row loses to any dated one; equal
dates (or none) fall back to sheet precedence (fetch cache, newest first, then the bundled snapshot).
Where the kept on-demand price differs from another sheet's by more than TOLERANCE, the kept row's
`notes` gains `price_disagrees:<origin>=<price>` and the pair is listed, so a plan can say so.

TOLERANCE is 10 % (GPU_ADVISOR_PRICE_TOLERANCE): list prices of one instance move in steps well
above that when a provider reprices (e.g. Lambda's H100 went from $2.49 to $2.99 per GPU-hour), while
rounding and per-minute vs per-hour conversions stay far below it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pricing import settings

TOLERANCE = settings.PRICE_TOLERANCE
NOTE = "price_disagrees"


def tolerance() -> float:
    """TOLERANCE, or GPU_ADVISOR_PRICE_TOLERANCE (a fraction from 0 to 10; anything else is refused)."""
    return settings.price_tolerance()


@dataclass(frozen=True)
class Disagreement:
    """Two sheets' on-demand prices for one instance, more than the tolerance apart."""

    provider: str
    region: str
    instance_type: str
    kept_origin: str
    kept_price: float
    kept_observed: str | None
    other_origin: str
    other_price: float
    other_observed: str | None

    @property
    def ratio(self) -> float:
        return self.kept_price / self.other_price

    def __str__(self) -> str:
        def when(d):
            return d[:10] if d else "date unknown"

        return (f"{self.provider}/{self.region}/{self.instance_type}: {self.kept_origin} ${self.kept_price:.4g}/h "
                f"({when(self.kept_observed)}) vs {self.other_origin} ${self.other_price:.4g}/h "
                f"({when(self.other_observed)}); the newer dated price is used")


def choose(df, key, origin: str, tol: float | None = None):
    """One row per key (the newer dated one, user rows first) -> (frame, [Disagreement]).

    `df` has the key columns, `origin` ("user" | "cache:..." | "bundled"), `_rank` (sheet precedence)
    and `observed_at` (UTC timestamps, NaT = unknown)."""
    import numpy as np
    import pandas as pd

    tol = tolerance() if tol is None else tol
    user = (df[origin] == "user").to_numpy()  # user rows: first, in file order (the first file wins)
    order = pd.DataFrame({
        "other": ~user,
        "undated": df["observed_at"].isna().to_numpy() & ~user,
        "newest": np.where(user, 0, _negated_times(df["observed_at"])),
        "rank": df["_rank"].to_numpy()}, index=df.index)
    df = df.loc[order.sort_values(["other", "undated", "newest", "rank"], kind="stable").index]
    repeated = df.duplicated(list(key), keep=False).to_numpy()
    found: list[Disagreement] = []
    if repeated.any():
        found = _disagreements(df[repeated], list(key), origin, tol)
    kept = df.drop_duplicates(list(key), keep="first")
    if found:
        tags: dict[tuple, list[str]] = {}
        for d in found:
            tags.setdefault((d.provider, d.region, d.instance_type), []).append(
                f"{NOTE}:{d.other_origin}={d.other_price:.4g}")
        keys = list(zip(*(kept[k].to_numpy() for k in key)))
        extra = np.array([";".join(tags.get(k, [])) or None for k in keys], dtype=object)
        notes = kept["notes"].to_numpy(dtype=object)
        kept = kept.assign(notes=[";".join(x for x in (n, e) if x) or None for n, e in zip(notes, extra)])
    return kept, found


def _negated_times(stamps):
    """Minus each timestamp in ns (newest sorts first); NaT -> 0 (those sort by the `undated` column)."""
    import numpy as np

    values = stamps.to_numpy(dtype="datetime64[ns]", na_value=np.datetime64("NaT"))
    ns = values.astype("int64")
    return np.where(np.isnat(values), 0, -ns)


def _disagreements(dups, key: list[str], origin: str, tol: float) -> list[Disagreement]:
    import pandas as pd

    out = []
    for values, group in dups.groupby(key, sort=False, dropna=False):
        first = group.iloc[0]
        for _, other in group.iloc[1:].iterrows():
            a, b = first["price_hour"], other["price_hour"]
            if pd.isna(a) or pd.isna(b) or b <= 0 or abs(a / b - 1) <= tol:
                continue
            provider, region, instance_type = values
            out.append(Disagreement(provider, region, instance_type, first[origin], float(a), _iso(first["observed_at"]),
                                    other[origin], float(b), _iso(other["observed_at"])))
    return out


def _iso(stamp) -> str | None:
    import pandas as pd

    return None if pd.isna(stamp) else stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
