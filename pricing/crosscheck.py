"""Cross-check catalog prices against the dated observation sheet, by one rule.

The catalogs (the bundled SkyPilot snapshot, the cluster sheet, fetch caches) say what an instance
costs but mostly not when anyone saw that price. pricing/data/observations.csv holds public prices
with the date their source states (pricing.observations). THE RULE, applied by the loader to every
catalog row (never to a user's own sheet: that is their price) and to each price separately
(on-demand `price_hour` against on-demand observations, `spot_price_hour` against spot observations;
rules 1-6 read listing observations only, aggregates follow the AGGREGATE RULE below, and the FAMILY RULE
runs last):

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
with only a spot price takes its spot observation's date. `spot_observed_at` is the spot price's own date:
the spot observation that confirmed or replaced it, else the row's own date, else none ("undated"),
never the on-demand price's date. `price_check` / `spot_check` say what
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

from collections import OrderedDict

from pricing import settings

# The note pricing.loader.split_conflated gives a row whose catalog name also stands for another GPU identity:
# `conflated_instance_type:<the catalog's own name>` (its instance_type then carries the GPU, `... [A100-80GB]`).
CONFLATED = "conflated_instance_type"
TOLERANCE = settings.OBSERVATION_TOLERANCE  # of the observed per-GPU-hour price; why: the module docstring
ENV = "GPU_ADVISOR_OBSERVATION_TOLERANCE"
EPSILON = 1e-9  # a price exactly at the tolerance is within it, whatever binary floats make of the ratio
# which observation tiers check which price column
TIERS = {"price_hour": ("on-demand", "marketplace-median"), "spot_price_hour": ("spot",)}
STATUS = {"price_hour": ("price_check", "checked_by", "checked_at", "catalog_price_hour", "price_disputed"),
          "spot_price_hour": ("spot_check", "spot_checked_by", "spot_checked_at", "catalog_spot_price_hour",
                              "spot_disputed")}
# the range of the aggregate observations that speak for a row's on-demand price (per instance-hour), and the
# date of its spot price (the spot observation's, the row's own, or none: never the on-demand price's date)
MARKET = ("market_low", "market_high")
COLUMNS = (tuple(c for cols in STATUS.values() for c in cols[:4]) + ("catalog_source",) + MARKET
           + ("spot_observed_at",))  # the columns `apply` adds
# AGGREGATE RULE. An observation with basis=aggregate (a marketplace median of other sellers' listings, a price
# index) is no price anyone rents at: it never replaces a row's price. For a row no listing observation
# judged it confirms (within TOLERANCE: the row takes its date, as rule 3) or disputes (the row keeps its own
# price and its own date, `market_disputed:<median>@<date>`), and for every row it matches it gives a range:
# the lowest and highest of the aggregates of that exact GPU identity observed in the STALE_DAYS before the
# newest one (`market_range:<low>-<high>@<first>..<last>`). A market is said, not averaged, when it is
# thin (the newest aggregate summarises fewer than THIN_SAMPLE listings, `market_thin:<n>`) or dispersed
# (the range spans more than DISPERSED of its low end, `market_dispersed`).
# THIN_SAMPLE: vast's H100 median over 7 offers moved from 3.20 to 4.00 (+25 %) in 11 days (OBSERVATIONS.md,
# first pass); over 36-50 offers the A100 median stayed within 0.588-0.669 (14 %) over the same days.
THIN_SAMPLE = 10
# DISPERSED: four observation tolerances; a spread wider than that is no single price (the same H100 medians
# span 25 %, the A100-80GB ones 1.07-1.42 = 32 %).
DISPERSED = 0.20
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
# tests/pricing/test_bundled_prices_dated.py checks the sheet still says so.
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
    for c in MARKET:
        if c not in df:
            df[c] = np.nan
    if "spot_observed_at" not in df:  # a spot price's date is the row's own until a spot observation says more
        spot = df["spot_price_hour"].notna().to_numpy()
        df["spot_observed_at"] = df["observed_at"].where(pd.Series(spot, index=df.index))
    for col, (status, by, at, old, _) in STATUS.items():
        has = df[col].notna().to_numpy()
        fill = np.where(has, base, None)  # type: ignore[call-overload]  # numpy's stubs: None is an object scalar
        df[status] = df[status].where(df[status].notna(), pd.Series(fill, index=df.index)) if status in df else fill
        for c in (by, at, old, "catalog_source"):
            if c not in df:
                df[c] = pd.Series([pd.NaT if c == at else None] * len(df), index=df.index,
                                  dtype="datetime64[ns, UTC]" if c == at else ("float64" if c == old else object))
    return df


def catalog_side(df, origin: str = "price_origin"):
    """(left frame, listed products) of the catalog rows rule 1 pairs: computed once per frame and reused by each
    candidates call on it (the rows' names, regions and counts do not change while the rule runs)."""
    import numpy as np
    import pandas as pd

    catalog = _catalog(df, origin)
    rows = df.loc[catalog]
    provider = rows["provider"].to_numpy(dtype=object)
    itype, region = _lower(catalog_names(rows)), _lower(rows["region"])
    left = pd.DataFrame({"i": np.flatnonzero(catalog), "provider": provider,
                         "gpu_model": rows["gpu_model"].to_numpy(dtype=object), "region": region, "itype": itype,
                         "billed": _billed_as(provider, itype), "group": _price_group(provider, region),
                         "count": rows["gpu_count"].to_numpy(dtype=float)})
    return left, pd.MultiIndex.from_arrays([provider, itype])


def candidates(df, obs, tiers, origin: str = "price_origin", side=None):
    """Every (row position i, observation j) pair that rule 1 allows, with its specificity (0: same
    product, 1: same GPU count, 2: per-GPU price). Only catalog rows (not user rows, not the
    observation sheet's own offers) are paired. Vectorised: one merge on (provider, GPU), then column
    arithmetic, no Python per pair (PAIRS counts the pairs built, for tests). `side`: catalog_side(df, origin),
    when the caller has it already."""
    import numpy as np
    import pandas as pd

    left, listed = side if side is not None else catalog_side(df, origin)
    o = obs[obs["tier"].isin(tiers)]
    o_provider, o_region = o["provider"].to_numpy(dtype=object), _lower(o["region"])
    product = np.where(pd.isna(_lower(o["product"])), "", _lower(o["product"])).astype(object)
    names = pd.MultiIndex.from_arrays([o_provider, product]).isin(listed)
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


def catalog_names(df):
    """Each row's instance name as its catalog spells it: the name a split row was listed under (its CONFLATED
    note), else its instance_type. An observation names a product by that name; the GPU it is for is matched
    separately (every pairing below is on provider and canonical gpu_model first)."""
    itype = df["instance_type"].astype(object)
    if "notes" not in df:
        return itype
    tagged = df["notes"].astype(object).where(df["notes"].notna(), "").astype(str).str.extract(
        rf"(?:^|;){CONFLATED}:([^;]*)", expand=False)
    return tagged.where(tagged.notna(), itype)


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


def best(df, obs, tiers, origin: str = "price_origin", side=None, pairs=None):
    """(row positions, observation positions in `obs`): each row's observation by rules 1-2 (newest,
    then most specific, then sheet order). `pairs`: candidates(...) when the caller has them already."""
    import numpy as np

    m = candidates(df, obs, tiers, origin, side) if pairs is None else pairs
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
    naming user rows; `obs`: pricing.observations.read's frame.

    The join is remembered (`_JOINS`: the last JOIN_CACHE results, frames of at most JOIN_CACHE_ROWS rows, in
    this process) under the content hash of both frames, the tolerance, `origin` and the rule's constants: the
    bundled sheets are static, so a server or a test session that plans again gets a copy of the judged frame
    instead of running the rule again (`RUNS["rule"]` counts the runs, `RUNS["hits"]` the copies)."""
    tol = tolerance() if tol is None else tol
    key = _join_key(df, obs, tol, origin) if len(df) <= JOIN_CACHE_ROWS else None
    hit = _JOINS.get(key) if key is not None else None
    if hit is not None:
        _JOINS.move_to_end(key)
        RUNS["hits"] += 1
        return hit.copy()
    out = _apply(df, obs, tol, origin)
    RUNS["rule"] += 1
    if key is not None:
        _JOINS[key] = out.copy()
        while len(_JOINS) > JOIN_CACHE:
            _JOINS.popitem(last=False)
    return out


JOIN_CACHE = 4  # judged frames kept: the bundled sheet alone, with the fetch cache, with a user's sheet or two
# Frames of more rows are judged afresh: the bundled sheets are ~1,500 rows; hashing a 100,000-row user sheet
# costs 0.26 s and keeping its copy ~70 MB (benchmarks/bench_planner.py's synthetic sheet), more than it saves.
JOIN_CACHE_ROWS = 20_000
_JOINS: OrderedDict = OrderedDict()
RUNS = {"rule": 0, "hits": 0}  # tests count the rule's runs with it, never a stopwatch


def _join_key(df, obs, tol: float, origin: str) -> str | None:
    """A digest of everything `_apply` reads: both frames' cells, column names and dtypes (pandas' row hashes,
    pandas.util.hash_pandas_object), the tolerance, `origin` and the module's rule constants; None when a
    frame cannot be hashed (the rule then simply runs)."""
    import hashlib

    import pandas as pd

    digest = hashlib.sha256(repr((tol, origin, BILLED_AS, SAME_PRICE_REGIONS, FLOOR_REGIONS, THIN_SAMPLE, DISPERSED,
                                  FAMILY_TOLERANCE, EPSILON, TIERS)).encode())
    for frame in (df, obs):
        try:
            rows = pd.util.hash_pandas_object(frame, index=False).to_numpy()
        except (TypeError, ValueError):
            return None
        digest.update(repr([(str(c), str(t)) for c, t in frame.dtypes.items()]).encode())
        digest.update(len(frame).to_bytes(8, "little") + rows.tobytes())
    return digest.hexdigest()


def _apply(df, obs, tol: float, origin: str):
    """The rule itself (`apply` without its memory)."""
    df = prepare(df.reset_index(drop=True), origin)
    if not len(obs) or not len(df):
        return df
    own = df["observed_at"].to_numpy(dtype="datetime64[ns]")  # the rows' own dates: what rule 4 compares with
    aggregate = basis(obs) == "aggregate"
    listings, aggregates = obs[~aggregate].reset_index(drop=True), obs[aggregate].reset_index(drop=True)
    side = catalog_side(df, origin)  # the catalog rows' names do not change while the rule runs
    for col, tiers in TIERS.items():
        rows, picks = best(df, listings, tiers, origin, side)
        df = _judge(df, own, listings, col, rows, picks, tol)
        df = _market(df, own, aggregates, col, tol, origin, side)
    return family_shape(_below_every_region(df, listings, tol, origin), origin)


def basis(obs):
    """Each observation's basis: its `basis` column, else derived from its tier (pricing.observations)."""
    import numpy as np

    from pricing.observations import AGGREGATE_TIERS

    derived = np.where(obs["tier"].isin(AGGREGATE_TIERS).to_numpy(), "aggregate", "listing")
    if "basis" not in obs:
        return derived
    given = obs["basis"].to_numpy(dtype=object)
    return np.where(np.isin(given, ("listing", "aggregate")), given, derived)


def _market(df, own, agg, col: str, tol: float, origin: str, side=None):
    """The AGGREGATE RULE for one price column: aggregates confirm or dispute the rows no listing judged (the
    row keeps its price), and every matched row gets the aggregates' range."""
    import numpy as np
    import pandas as pd

    tiers = TIERS[col]
    if not agg["tier"].isin(tiers).any():
        return df
    pairs = candidates(df, agg, tiers, origin, side)
    rows, picks = best(df, agg, tiers, origin, pairs=pairs)
    price = df[col].to_numpy(dtype=float)
    keep = ~np.isnan(price[rows])
    rows, picks = rows[keep], picks[keep]
    if not len(rows):
        return df
    status, by, at, old, _ = STATUS[col]
    count = df["gpu_count"].to_numpy(dtype=float)[rows]
    median = agg["per_gpu"].to_numpy(dtype=float)[picks]
    seen = agg["observed_at"].to_numpy(dtype="datetime64[ns]")[picks]
    low, high, first, sizes = _ranges(agg, tiers, pairs, rows, seen)
    out = {c: df[c].to_numpy(dtype=object).copy() for c in (status, by, "notes")}
    stamps = df[at].to_numpy(dtype="datetime64[ns]").copy()
    observed = df["observed_at"].to_numpy(dtype="datetime64[ns]").copy()
    spot_seen = df["spot_observed_at"].to_numpy(dtype="datetime64[ns]").copy()
    olds = df[old].to_numpy(dtype=float).copy()
    agree = np.abs(price[rows] / count / median - 1) <= tol + EPSILON
    mine = own[rows]
    newer = ~np.isnat(mine) & (mine > seen)
    free = np.isin(out[status][rows].astype(str), ("dated", "undated")) & ~newer  # no listing judged it
    judged = free & ~np.isnat(seen)
    out[status][rows[judged]] = np.where(agree[judged], "confirmed", "disputed")
    out[by][rows[judged]] = agg["source"].to_numpy(dtype=object)[picks][judged]
    stamps[rows[judged]] = seen[judged]
    dates = np.full(len(rows), col == "price_hour") | np.isnan(df["price_hour"].to_numpy(dtype=float)[rows])
    move = judged & agree
    observed[rows[move & dates]] = seen[move & dates]
    if col == "spot_price_hour":
        spot_seen[rows[move]] = seen[move]
    olds[rows[judged & ~agree]] = price[rows[judged & ~agree]]  # the catalog's price, kept as the row's price
    for k in range(len(rows)):
        i = rows[k]
        words = [f"market_range:{low[k] * count[k]:.4g}-{high[k] * count[k]:.4g}@{_day(first[k])}..{_day(seen[k])}"]
        if judged[k] and not agree[k]:
            words.insert(0, f"market_disputed:{median[k] * count[k]:.4g}@{_day(seen[k])}")
        if sizes[k] == sizes[k] and sizes[k] < THIN_SAMPLE:
            words.append(f"market_thin:{sizes[k]:g} listings")
        if high[k] > low[k] * (1 + DISPERSED):
            words.append("market_dispersed")
        out["notes"][i] = _note(out["notes"][i], ";".join(words))
    extra = {}
    if col == "price_hour":
        lows, highs = df["market_low"].to_numpy(dtype=float).copy(), df["market_high"].to_numpy(dtype=float).copy()
        lows[rows], highs[rows] = low * count, high * count
        extra = {"market_low": lows, "market_high": highs}
    return df.assign(**out, **extra, **{old: olds, at: pd.DatetimeIndex(stamps).tz_localize("UTC"),
                                        "observed_at": pd.DatetimeIndex(observed).tz_localize("UTC"),
                                        "spot_observed_at": pd.DatetimeIndex(spot_seen).tz_localize("UTC")})


def _ranges(agg, tiers, m, rows, newest):
    """Per row in `rows`: (lowest, highest per-GPU figure, first date) of its aggregates observed in the
    STALE_DAYS up to `newest` (its newest aggregate's date), and the newest one's sample size (NaN: not stated).
    `m`: the rows' candidate pairs with the aggregates."""
    import numpy as np
    import pandas as pd

    from pricing.cache import stale_days

    index = np.flatnonzero(agg["tier"].isin(tiers).to_numpy())
    j = index[m["j"].to_numpy()]
    pairs = pd.DataFrame({"i": m["i"].to_numpy(), "per_gpu": agg["per_gpu"].to_numpy(dtype=float)[j],
                          "at": agg["observed_at"].to_numpy(dtype="datetime64[ns]")[j],
                          "size": (agg["sample_size"].to_numpy(dtype=float) if "sample_size" in agg
                                   else np.full(len(agg), np.nan))[j]})
    pairs = pairs.merge(pd.DataFrame({"i": rows, "newest": newest}), on="i")
    pairs = pairs[(pairs["at"] <= pairs["newest"])
                  & (pairs["at"] >= pairs["newest"] - pd.Timedelta(days=stale_days()))]
    g = pairs.groupby("i")
    low, high, first = g["per_gpu"].min(), g["per_gpu"].max(), g["at"].min()
    size = pairs[pairs["at"] == pairs["newest"]].groupby("i")["size"].max()
    return (low.reindex(rows).to_numpy(), high.reindex(rows).to_numpy(), first.reindex(rows).to_numpy(),
            size.reindex(rows).to_numpy())


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
    spot_seen = df["spot_observed_at"].to_numpy(dtype="datetime64[ns]").copy()
    if col == "spot_price_hour":  # the spot price's own date: its observation's, never the on-demand one's
        spot_seen[rows[checked & ~newer]] = seen[checked & ~newer]
    for k in np.flatnonzero(disputed | (newer & ~agree)):
        i = rows[k]
        text = (f"{tag}:{price[i]:.4g}" if disputed[k] else
                f"observation_older:{per_gpu[k] * count[k]:.4g}@{_day(seen[k])}")
        out["notes"][i] = _note(out["notes"][i], text)
    return df.assign(**out, **{old: olds, col: new_price, at: pd.DatetimeIndex(stamps).tz_localize("UTC"),
                               "observed_at": pd.DatetimeIndex(observed).tz_localize("UTC"),
                               "spot_observed_at": pd.DatetimeIndex(spot_seen).tz_localize("UTC")})


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
    itype = catalog_names(df).str.lower().to_numpy()[rows]
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


# FAMILY RULE. Sizes of one instance family that scale the whole machine with the GPUs (the same GPU identity and
# the same vCPUs and RAM per GPU, in one region) are priced per GPU alike: Azure's NC A100 v4 list is 3.673 per GPU
# at every size in eastus (NC24ads 3.673, NC48ads 7.346, NC96ads 14.692, ewyluda tracker 2026-10-10 from Azure's
# retail prices API), GCP's a2-highgpu-1g/2g/4g/8g 3.6734 per GPU (Cyclenerd billing catalog 2026-07-30). Larger
# sizes may be cheaper per GPU (a volume price: Lambda's gpu_8x_h100_sxm5 3.99 per GPU against gpu_1x's 4.29, Azure's
# NC64as_T4_v3 4.352 against 4 x 1.204, both list prices), never dearer. A larger size whose price per GPU lies more
# than FAMILY_TOLERANCE above the family's smallest size is *disputed*
# (`family_disputed:<old>;family_rule:<family> <n> x <per GPU>@<smallest size>`) and priced linearly from the
# smallest size, taking its date. The tolerance is the observation tolerance: the same sources' own rounding.
FAMILY_TOLERANCE = TOLERANCE
# A family name: the instance type with its size digits replaced by '#'. Azure adds lower-case capability letters
# after the size; 'i' marks an isolated size of the same family ("i = isolated size",
# https://learn.microsoft.com/en-us/azure/virtual-machines/vm-naming-conventions, read 2026-12-03), so NC40ads_H100_v5
# and NC80adis_H100_v5 are one family.
_AZURE_SIZE = r"^(Standard_[A-Z]+)\d+([a-z]*)_(.+)$"


def family(provider: str, instance_type: str) -> str:
    """The family an instance type belongs to (FAMILY RULE): its name with the size digits replaced by '#'."""
    import re

    m = re.match(_AZURE_SIZE, instance_type) if provider == "azure" else None
    if m:
        return f"{m[1]}#{m[2].replace('i', '')}_{m[3]}"
    return re.sub(r"\d+", "#", instance_type)


def family_shape(df, origin: str = "price_origin", tol: float | None = None):
    """The FAMILY RULE on a checked frame -> the frame with off-family sizes disputed and priced linearly."""
    import numpy as np
    import pandas as pd

    tol = FAMILY_TOLERANCE if tol is None else tol
    count = df["gpu_count"].to_numpy(dtype=float)
    todo = _catalog(df, origin) & df["price_hour"].notna().to_numpy() & (count >= 1)
    if not todo.any():
        return df
    rows = df[todo]
    keys = pd.DataFrame({"pos": np.flatnonzero(todo), "provider": rows["provider"].to_numpy(),
                         "region": rows["region"].to_numpy(), "gpu": rows["gpu_model"].to_numpy(),
                         "family": [family(p, t) for p, t in zip(rows["provider"], catalog_names(rows))],
                         "cpu": (rows["vcpus"] / rows["gpu_count"]).round(3).to_numpy(),
                         "ram": (rows["ram_gb"] / rows["gpu_count"]).round(1).to_numpy(),
                         "n": rows["gpu_count"].to_numpy(dtype=float),
                         "per_gpu": (rows["price_hour"] / rows["gpu_count"]).to_numpy(dtype=float)})
    group = ["provider", "region", "gpu", "family", "cpu", "ram"]
    keys = keys[keys.groupby(group, dropna=True)["n"].transform("nunique") > 1].sort_values("n", kind="stable")
    base = keys.groupby(group, sort=False).head(1)[[*group, "pos", "n", "per_gpu"]]
    ref = keys.merge(base, on=group, suffixes=("", "_base"))
    off = ref[(ref["n"] > ref["n_base"]) & (ref["per_gpu"] / ref["per_gpu_base"] - 1 > tol + EPSILON)]
    if not len(off):
        return df
    k, b = off["pos"].to_numpy(), off["pos_base"].to_numpy()
    price = df["price_hour"].to_numpy(dtype=float).copy()
    out = {c: df[c].to_numpy(dtype=object).copy() for c in ("price_check", "notes", "source", "checked_by")}
    observed = df["observed_at"].to_numpy(dtype="datetime64[ns]").copy()
    itype = df["instance_type"].to_numpy(dtype=object)
    old = price[k]
    price[k] = off["per_gpu_base"].to_numpy() * off["n"].to_numpy()
    observed[k] = observed[b]  # the linear price is the smallest size's: so are its date and source
    out["source"][k] = out["checked_by"][k] = out["source"][b]
    out["price_check"][k] = "disputed"
    for i, was, name, n, per_gpu, base_row in zip(k, old, off["family"], off["n"], off["per_gpu_base"], b):
        rule = f"family_rule:{name} {n:g} x {per_gpu:.4g}@{itype[base_row]}"
        out["notes"][i] = _note(out["notes"][i], f"family_disputed:{was:.4g};{rule}")
    return df.assign(**out, price_hour=price, observed_at=pd.DatetimeIndex(observed).tz_localize("UTC"))
