"""Cross-check catalog prices against the dated observation sheet, by one rule.

The catalogs (the bundled SkyPilot snapshot, the cluster sheet, fetch caches) say what an instance
costs but mostly not when anyone saw that price. pricing/data/observations.csv holds public prices
with the date their source states (pricing.observations). THE RULE, applied by the loader to every
catalog row (never to a user's own sheet: that is their price) and to each price separately
(on-demand `price_hour` against on-demand and marketplace-median observations, `spot_price_hour`
against spot observations):

1. Candidates: observations of the same provider, tier and GPU model, in the row's region (an
   observation without a region speaks for every region of its provider; when the region has none,
   one from a region the provider prices alike, SAME_PRICE_REGIONS), that are either
   (a) of the same product (instance_type, compared without case, or the product it is BILLED_AS), or,
   when the observation names no product the catalogs list for that provider, (b) of the same GPU
   count with price_unit=instance, or (c) a per-GPU price (price_unit=gpu), compared per GPU-hour.
2. The newest observation (by observed_at) decides; equally new ones are taken in the order
   (a), (b), (c), then sheet order.
3. The row's and the observation's prices are compared per GPU-hour. Within TOLERANCE of the
   observed price: *confirmed* (the row keeps its price, takes the observation's date as its
   `observed_at` and carries its source in `checked_by` / `checked_at`). Otherwise *disputed*: the
   observed price replaces the row's (per GPU x gpu_count when per GPU), the old one is kept in
   `catalog_price_hour` (spot: `catalog_spot_price_hour`) and noted `price_disputed:<old>`
   (`spot_disputed:<old>`), and the row takes the observation's date and, as its `source`, the
   observation's citation (the catalog's moves to `catalog_source`); a disputed price that no
   dated price can replace is cleared (a row left with no price stays listed; plans leave it out, saying why).
4. Newest dated wins: a row whose own `observed_at` (a live fetch's API date, a cited page's
   read date) is newer than the observation keeps its price and date; the observation only
   confirms it, or is noted beside it (`observation_older:<price>@<date>`).
5. No candidate: the row is unchanged ("date unknown" and stale when undated, as before), except:
6. Below every region: an on-demand price with no candidate that lies more than TOLERANCE below the
   cheapest region's newest dated price of the same product, observed in at least FLOOR_REGIONS regions, is
   *disputed* (`below_every_region:<price>@<region>`)
   and, with no dated price of its own region to replace it, cleared. A list price under the provider's
   cheapest region is the catalog's error (GCP's A2/A3 rows priced from the DWS GPU SKU, about half list).
   Spot prices are not floored: they move by region and hour.

The row's `observed_at` follows its on-demand price (the price plans rank by default); a row
with only a spot price takes its spot observation's date. `price_check` / `spot_check` say what
happened: confirmed, disputed, dated (own date, nothing newer observed), undated, observation (an
offer the observation sheet itself adds, pricing.observed_offers) or user.

TOLERANCE is 5 % of the observed per-GPU-hour price (GPU_ADVISOR_OBSERVATION_TOLERANCE overrides),
set from the bundled data (OBSERVATIONS.md, "Tolerance"). Of the 731 catalog rows an on-demand
observation matches, 473 agree within 0.1 % and 44 more within 3.4 % (two sources quoting one price:
GCP with or without its bundled local SSD 0.6-0.9 %, a3-megagpu-8g 1.3 %, Paperspace A100 3.18 vs
3.28); none lies between 3.4 % and 5 %, the rest are 6.8 % or more apart. The list-price steps in
the sheet are 6 % and up (RunPod Secure H100 3.29 -> 3.49 on 2026-09-25; H200 4.59 -> 5.29 on
2026-10-10). 15 % would
stamp RunPod's H200 at 4.59 "confirmed 2026-10-10" when RunPod asked 5.29 that day. A false dispute
costs little (the dated price is used); a false confirmation dates a price that has moved.
Regional spreads (AWS p5.48xlarge +25 % in ap-northeast-1) are no tolerance matter: hyperscaler
observations carry their region (or a region the provider prices alike), and region-less ones come from
sellers that price every region alike.
"""

from __future__ import annotations

from pricing import settings

TOLERANCE = settings.OBSERVATION_TOLERANCE  # of the observed per-GPU-hour price; why: the module docstring
ENV = "GPU_ADVISOR_OBSERVATION_TOLERANCE"
EPSILON = 1e-9  # a price exactly at the tolerance is within it, whatever binary floats make of the ratio
# which observation tiers check which price column
TIERS = {"price_hour": ("on-demand", "marketplace-median"), "spot_price_hour": ("spot",)}
STATUS = {"price_hour": ("price_check", "checked_by", "checked_at", "catalog_price_hour", "price_disputed"),
          "spot_price_hour": ("spot_check", "spot_checked_by", "spot_checked_at", "catalog_spot_price_hour",
                              "spot_disputed")}
COLUMNS = tuple(c for cols in STATUS.values() for c in cols[:4]) + ("catalog_source",)  # the columns `apply` adds
USER, OBSERVATION = "user", "observation"
# Products billed on the same SKUs in the same quantities, so an observation of the second prices the first (rule
# 1a). GCP bills accelerator-optimized VMs "for their attached GPUs, predefined vCPU, memory, and bundled Local SSD"
# (https://docs.cloud.google.com/compute/docs/accelerator-optimized-machines, read 2026-12-02); a3-edgegpu-8g has
# a3-highgpu-8g's GPUs (8x H100 80GB), vCPUs (208), memory (1872 GB) and local SSD (6 TB), and no public price list
# names it (the billing-catalog transcription in the sheet lists no a3-edgegpu-8g).
BILLED_AS = {("gcp", "a3-edgegpu-8g"): "a3-highgpu-8g"}
# Regions a provider prices alike, so an observation in one speaks for the others when a region has none of its own
# (rule 1, after the region's own). GCP's billing catalog as transcribed in the sheet (Cyclenerd pricing.yml, 2026-08-20)
# gives us-central1, us-east1 and us-west1 the same on-demand and spot price in every block read (a2-highgpu-1g/2g,
# a2-ultragpu-8g, a3-highgpu-1g/2g/4g/8g);
# tests/test_bundled_prices_dated.py checks the sheet still says so.
SAME_PRICE_REGIONS = {"gcp": (frozenset({"us-central1", "us-east1", "us-west1"}),)}
# Rule 6 judges a region by the cheapest of the others only when at least this many regions of the product are
# observed: one or two regions say little about a provider's regional floor.
FLOOR_REGIONS = 3


def tolerance() -> float:
    """TOLERANCE, or GPU_ADVISOR_OBSERVATION_TOLERANCE (a fraction from 0 to 10; anything else is refused)."""
    return settings.observation_tolerance()


def prepare(df, origin: str = "price_origin"):
    """The frame with the status columns filled as if nothing matched: user rows 'user', rows
    with a date 'dated', the others 'undated' (rows that already carry a status keep it)."""
    import numpy as np
    import pandas as pd

    df = df.copy()
    user = (df[origin] == "user").to_numpy() if origin in df else np.zeros(len(df), bool)
    dated = df["observed_at"].notna().to_numpy()
    base = np.where(user, USER, np.where(dated, "dated", "undated")).astype(object)
    for col, (status, by, at, old, _) in STATUS.items():
        has = df[col].notna().to_numpy()
        fill = np.where(has, base, None)  # type: ignore[call-overload]  # numpy's stubs: None is an object scalar
        df[status] = df[status].where(df[status].notna(), pd.Series(fill, index=df.index)) if status in df else fill
        for c in (by, at, old, "catalog_source"):
            if c not in df:
                df[c] = pd.Series([pd.NaT if c == at else None] * len(df), index=df.index,
                                  dtype="datetime64[ns, UTC]" if c == at else ("float64" if c == old else object))
    return df


def candidates(df, obs, tiers, origin: str = "price_origin"):
    """Every (row position i, observation j) pair that rule 1 allows, with its specificity (0: same
    product, 1: same GPU count, 2: per-GPU price). Only catalog rows (not user rows, not the
    observation sheet's own offers) are paired. Vectorised: one merge on (provider, GPU), then column
    arithmetic, no Python per pair (PAIRS counts the pairs built, for tests)."""
    import numpy as np
    import pandas as pd

    catalog = _catalog(df, origin)
    rows = df.loc[catalog]
    provider = rows["provider"].to_numpy(dtype=object)
    itype, region = _lower(rows["instance_type"]), _lower(rows["region"])
    o = obs[obs["tier"].isin(tiers)]
    o_provider, o_region = o["provider"].to_numpy(dtype=object), _lower(o["region"])
    product = np.where(pd.isna(_lower(o["product"])), "", _lower(o["product"])).astype(object)
    names = pd.MultiIndex.from_arrays([o_provider, product]).isin(pd.MultiIndex.from_arrays([provider, itype]))
    left = pd.DataFrame({"i": np.flatnonzero(catalog), "provider": provider,
                         "gpu_model": rows["gpu_model"].to_numpy(dtype=object), "region": region, "itype": itype,
                         "billed": _billed_as(provider, itype), "group": _price_group(provider, region),
                         "count": rows["gpu_count"].to_numpy(dtype=float)})
    right = pd.DataFrame({"j": np.arange(len(o)), "provider": o_provider,
                          "gpu_model": o["gpu_model"].to_numpy(dtype=object), "o_region": o_region,
                          "product": product, "unit": o["price_unit"].to_numpy(dtype=object),
                          "o_count": o["gpu_count"].to_numpy(dtype=float), "names": names,
                          "o_group": _price_group(o_provider, o_region)})
    m = left.merge(right, on=["provider", "gpu_model"])
    PAIRS["built"] += len(m)
    if not len(m):
        return m.assign(spec=pd.Series(dtype=int), near=pd.Series(dtype=int))
    o_region, names = m["o_region"].to_numpy(dtype=object), m["names"].to_numpy(bool)
    same = pd.isna(o_region) | (o_region == m["region"].to_numpy(dtype=object))
    group = m["group"].to_numpy(dtype=object)
    alike = ~same & pd.notna(group) & (group == m["o_group"].to_numpy(dtype=object))
    unit = m["unit"].to_numpy(dtype=object)
    spec = np.select([names & (m["product"].to_numpy(dtype=object) == m["billed"].to_numpy(dtype=object)),
                      ~names & (unit == "instance") & (m["o_count"].to_numpy() == m["count"].to_numpy()),
                      ~names & (unit == "gpu")], [0, 1, 2], -1)
    m = m.assign(spec=spec, near=np.where(same, 0, 1))[(same | alike) & (spec >= 0)]
    return m.reset_index(drop=True)


PAIRS = {"built": 0}  # candidate pairs built since import: tests count work with it, never a stopwatch


def _billed_as(provider, itype):
    """Each row's product as billed (BILLED_AS), else its own (lower-cased) instance type."""
    out = itype.copy()
    for (p, x), billed in BILLED_AS.items():
        out[(provider == p) & (itype == x)] = billed
    return out


def _price_group(provider, region):
    """A label shared by the regions a provider prices alike (SAME_PRICE_REGIONS); None elsewhere."""
    import numpy as np

    out = np.full(len(region), None, dtype=object)
    for p, groups in SAME_PRICE_REGIONS.items():
        for k, group in enumerate(groups):
            out[(provider == p) & np.isin(region.astype(str), sorted(group))] = f"{p}#{k}"
    return out


def _lower(values):
    """Lower-cased text cells as an object array; empty cells (and non-text ones) are None."""
    import numpy as np
    import pandas as pd

    s = pd.Series(np.asarray(values, dtype=object), dtype=object)
    text = s.where(s.map(lambda v: isinstance(v, str) and v != ""))  # one call per cell: ~2,000 cells, not pairs
    low = np.asarray(text.str.lower(), dtype=object)
    return np.where(pd.isna(low), None, low)


def _catalog(df, origin: str):
    """Mask of the rows the rule checks: not a user's own, not an offer the observation sheet added."""
    import numpy as np

    user = (df[origin] == "user").to_numpy() if origin in df else np.zeros(len(df), bool)
    added = (df["price_check"] == OBSERVATION).to_numpy() if "price_check" in df else np.zeros(len(df), bool)
    return ~user & ~added


def best(df, obs, tiers, origin: str = "price_origin"):
    """(row positions, observation positions in `obs`): each row's observation by rules 1-2 (newest,
    then most specific, then sheet order)."""
    import numpy as np

    m = candidates(df, obs, tiers, origin)
    if not len(m):
        return np.array([], int), np.array([], int)
    index = np.flatnonzero(obs["tier"].isin(tiers).to_numpy())  # positions in `obs` of the tier's rows
    j = index[m["j"].to_numpy()]
    stamp = obs["observed_at"].to_numpy(dtype="datetime64[ns]")[j].astype("int64")
    order = np.lexsort((j, m["spec"].to_numpy(), -stamp, m["near"].to_numpy(), m["i"].to_numpy()))
    i = m["i"].to_numpy()[order]
    first = np.r_[True, i[1:] != i[:-1]]
    return i[first], j[order][first]


def apply(df, obs, tol: float | None = None, origin: str = "price_origin"):
    """The rule (module docstring) on a loaded frame -> the frame with prices, dates and statuses set. A row a
    dispute left with no price stays, priced n/a and `disputed` (`prices list` shows its catalog price beside);
    the planner leaves it out with that reason (advisor.planner.offers).

    `df`: one row per (provider, region, instance_type), `observed_at` as UTC timestamps, `origin`
    naming user rows; `obs`: pricing.observations.read's frame."""
    tol = tolerance() if tol is None else tol
    df = prepare(df.reset_index(drop=True), origin)
    if not len(obs) or not len(df):
        return df
    own = df["observed_at"].to_numpy(dtype="datetime64[ns]")  # the rows' own dates: what rule 4 compares with
    for col, tiers in TIERS.items():
        rows, picks = best(df, obs, tiers, origin)
        df = _judge(df, own, obs, col, rows, picks, tol)
    return _below_every_region(df, obs, tol, origin)


def _judge(df, own, obs, col: str, rows, picks, tol: float):
    """Rules 3-4 for one price column: each row position in `rows` against the observation at the
    same position in `picks` -> the frame with prices, dates, sources, statuses and notes updated."""
    import numpy as np
    import pandas as pd

    status, by, at, old, tag = STATUS[col]
    price = df[col].to_numpy(dtype=float)
    keep = ~np.isnan(price[rows])
    rows, picks = rows[keep], picks[keep]
    if not len(rows):
        return df
    count = df["gpu_count"].to_numpy(dtype=float)[rows]
    per_gpu = obs["per_gpu"].to_numpy(dtype=float)[picks]
    seen = obs["observed_at"].to_numpy(dtype="datetime64[ns]")[picks]
    source = obs["source"].to_numpy(dtype=object)[picks]
    agree = np.abs(price[rows] / count / per_gpu - 1) <= tol + EPSILON
    mine = own[rows]
    newer = ~np.isnat(mine) & (np.isnat(seen) | (mine > seen))  # rule 4: the row's own date wins
    dates = np.full(len(rows), col == "price_hour") | np.isnan(df["price_hour"].to_numpy(dtype=float)[rows])
    checked = agree | ~newer  # rows whose status, source and date the observation sets
    disputed = ~agree & ~newer
    out = {c: df[c].to_numpy(dtype=object).copy() for c in (status, by, "notes", "source", "catalog_source")}
    stamps = df[at].to_numpy(dtype="datetime64[ns]").copy()
    olds, new_price = df[old].to_numpy(dtype=float).copy(), price.copy()
    out[status][rows[checked]] = np.where(agree[checked], "confirmed", "disputed")
    out[by][rows[checked]] = source[checked]
    stamps[rows[checked]] = seen[checked]
    olds[rows[disputed]] = price[rows[disputed]]
    new_price[rows[disputed]] = np.where(np.isnat(seen[disputed]), np.nan, per_gpu[disputed] * count[disputed])
    swap = disputed & dates  # the row's price is now the observation's: so is its source
    out["catalog_source"][rows[swap]] = out["source"][rows[swap]]
    out["source"][rows[swap]] = source[swap]
    move = checked & dates & ~newer & ~np.isnat(seen)  # a newer own date stays (rule 4)
    observed = df["observed_at"].to_numpy(dtype="datetime64[ns]").copy()
    observed[rows[move]] = seen[move]
    for k in np.flatnonzero(disputed | (newer & ~agree)):
        i = rows[k]
        text = (f"{tag}:{price[i]:.4g}" if disputed[k] else
                f"observation_older:{per_gpu[k] * count[k]:.4g}@{_day(seen[k])}")
        out["notes"][i] = _note(out["notes"][i], text)
    return df.assign(**out, **{old: olds, col: new_price, at: pd.DatetimeIndex(stamps).tz_localize("UTC"),
                               "observed_at": pd.DatetimeIndex(observed).tz_localize("UTC")})


def _below_every_region(df, obs, tol: float, origin: str):
    """Rule 6 on the rows rules 1-5 left undated: an on-demand price more than `tol` below the cheapest region's
    newest dated list price of the same product (or the product it is billed as) is disputed. No observation of its
    own region can replace it, so it is cleared (a regional list price is no evidence for another region's)."""
    import numpy as np
    import pandas as pd

    o = obs[(obs["tier"] == "on-demand") & obs["region"].notna() & obs["product"].notna()
            & obs["observed_at"].notna()]
    todo = (_catalog(df, origin) & (df["price_check"] == "undated").to_numpy()
            & df["price_hour"].notna().to_numpy())
    if not len(o) or not todo.any():
        return df
    o = o.assign(key=o["product"].str.lower()).sort_values("observed_at", ascending=False, kind="stable")
    newest = o.drop_duplicates(["provider", "gpu_model", "key", "region"])  # per region: its newest (rule 2)
    keys = ["provider", "gpu_model", "key"]
    regions = newest.groupby(keys)["region"].transform("size")
    floors = newest[regions >= FLOOR_REGIONS].sort_values("per_gpu", kind="stable").drop_duplicates(keys)
    rows = np.flatnonzero(todo)
    itype = df["instance_type"].str.lower().to_numpy()[rows]
    provider = df["provider"].to_numpy()[rows]
    left = pd.DataFrame({"i": rows, "provider": provider, "gpu_model": df["gpu_model"].to_numpy()[rows],
                         "key": [BILLED_AS.get((p, t), t) for p, t in zip(provider, itype)]})
    m = left.merge(floors[[*keys, "per_gpu", "source", "observed_at", "region"]], on=keys)
    count = df["gpu_count"].to_numpy(dtype=float)[m["i"]]
    price, olds = df["price_hour"].to_numpy(dtype=float).copy(), df["catalog_price_hour"].to_numpy(dtype=float).copy()
    m = m[price[m["i"]] / count / m["per_gpu"].to_numpy() - 1 < -tol - EPSILON]
    if not len(m):
        return df
    i = m["i"].to_numpy()
    out = {c: df[c].to_numpy(dtype=object).copy() for c in ("price_check", "checked_by", "notes")}
    stamps = df["checked_at"].to_numpy(dtype="datetime64[ns]").copy()
    out["price_check"][i], out["checked_by"][i] = "disputed", m["source"].to_numpy(dtype=object)
    stamps[i] = m["observed_at"].to_numpy(dtype="datetime64[ns]")
    for k, low, region in zip(i, m["per_gpu"].to_numpy() * df["gpu_count"].to_numpy(dtype=float)[i], m["region"]):
        out["notes"][k] = _note(out["notes"][k], f"price_disputed:{price[k]:.4g};below_every_region:{low:.4g}@{region}")
    olds[i], price[i] = price[i], np.nan
    return df.assign(**out, price_hour=price, catalog_price_hour=olds,
                     checked_at=pd.DatetimeIndex(stamps).tz_localize("UTC"))


def _note(old, new: str) -> str:
    return f"{old};{new}" if isinstance(old, str) and old else new


def _day(stamp) -> str:
    import pandas as pd

    return "undated" if pd.isna(stamp) else pd.Timestamp(stamp).strftime("%Y-%m-%d")


def summary(df, obs) -> list[dict]:
    """Per provider of the loaded frame, then one 'all' entry: rows, and how many the rule confirmed,
    disputed, added (observation), left with their own date (dated) or undated, judged on each row's
    on-demand price (a spot-only row: its spot price), so the five counts add up to the rows; the
    same for spot prices; the newest observation date and the number of distinct observation sources."""
    out = [_counts(provider, rows, obs[obs["provider"] == provider] if len(obs) else obs)
           for provider, rows in df.groupby("provider", sort=True)]
    return out + [_counts("all", df, obs)]


def _counts(name: str, rows, obs) -> dict:
    import pandas as pd

    status = rows["price_check"].fillna(rows["spot_check"]).fillna("undated")
    spot = rows["spot_check"]
    newest = obs["observed_at"].max() if len(obs) else pd.NaT
    entry = {"provider": name, "rows": int(len(rows))}
    entry.update({k: int((status == k).sum()) for k in ("confirmed", "disputed", OBSERVATION, "dated", "undated",
                                                       USER)})
    entry.update({"spot_confirmed": int((spot == "confirmed").sum()), "spot_disputed": int((spot == "disputed").sum()),
                  "newest_observation": None if pd.isna(newest) else newest.strftime("%Y-%m-%d"),
                  "observation_sources": int(obs["source"].nunique()) if len(obs) else 0})
    return entry
