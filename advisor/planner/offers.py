"""Stage 1 — offers: the price sheets' rows the plan may rent, and the tiers it prices them at.

Loads the sheets (user > cache > bundled, `pricing.load_offers`), drops rows without a usable
on-demand price, canonicalises GPU names, applies the provider / region / GPU filters (an
unknown name is an error listing the valid ones) and the GPU-count limits, and records every
row it leaves out in the plan's rejections. Prices a senior engineer would not sign are left
out with their reason: GPU-only prices without their host VM, and undated or long-stale prices while a
fresh offer exists (`--allow-stale` keeps them; a price merely past the limit ranks, its age stated). Each row gains the date its source observed the
price and the inter-node fabric it can form clusters over (pricing.fabrics, or the sheet's own
`cluster_gbps`); identical offers in several regions become one row that lists the others.
"""

from __future__ import annotations

from advisor.errors import AdvisorError
from advisor.planner.costing import offer_billing
from advisor.planner.ranking import marketplace
from advisor.planner.rejections import Rejections
from advisor.planner.request import PlanRequest, check_choice
from advisor.results.facts import Finding, FindingKind
from pricing import geo, load_offers
from pricing.cache import stale_days
from pricing.crosscheck import BILLED_AS
from pricing.fabrics import cluster_gbps, providers
from pricing.gpus import canonical_name, get_gpu
from pricing.loader import EXPIRE_FACTOR, aged_mask
from pricing.schema import mentions, per_distinct


def load(request: PlanRequest):
    """The offers DataFrame for a request: bundled + cached sheets, and the user's own."""
    from pathlib import Path

    return load_offers(user_sheets=[Path(p) for p in request.prices], discounts=list(request.discount) or None,
                       skip_bad_rows=request.skip_bad_rows)


def prepare(offers, request: PlanRequest, rejections: Rejections):
    """Usable instance rows (one per provider × region × instance type), filtered as asked."""
    if offers is None or len(offers) == 0:
        raise AdvisorError("No usable price sheet: no offers loaded; run `gpu-advisor prices` to fetch or import one.")
    off, names = _priced_rows(offers)
    sold = off["gpu_model"].unique()  # --gpu names are checked against every sheet row, before other filters
    off = _by_provider(off, request)
    off = _by_region(off, request, rejections)
    off = _by_seller(off, request, rejections)
    off = _by_gpu(off, request, sold)
    off = _known_and_priced(off, names, rejections)
    off = _complete_prices(off, rejections)
    off = _fresh_only(off, request, rejections)
    if len(off) == 0:
        why = "; ".join(f"{r.count} × {r.reason}" for r in rejections.to_list())
        raise AdvisorError("No usable offer: every row matching the filters was left out" + (f" ({why})." if why else "."))
    off = off.assign(price_date=_observed(off), spot_price_date=_spot_observed(off), fabric_gbps=_fabric(off))
    off = _one_of_billed_alike(off, request.spot, rejections)
    off = collapse_regions(off, request.spot)
    off = cheapest(off, max(request.top, 10), request.spot, rejections)
    _note_gpu_counts(off, request, rejections)
    return off


def _priced_rows(offers):
    """A copy of the sheet with every optional column, numeric prices and GPU counts, only the rows with a usable
    on-demand price (or a disputed one, kept to be counted) and canonical GPU names; with the {label: canonical
    name or None} map it used."""
    import pandas as pd

    off = offers.copy()
    if "observed_at" not in off and "fetched_at" in off:  # a library user's own frame: its dates are its own
        off["observed_at"] = off["fetched_at"]
    for column, default in OPTIONAL_COLUMNS.items():  # a DataFrame from a library user may leave these out
        if column not in off:
            off[column] = default
    off["price_hour"] = pd.to_numeric(off["price_hour"], errors="coerce")
    off["spot_price_hour"] = pd.to_numeric(off.get("spot_price_hour"), errors="coerce")
    off["gpu_count"] = pd.to_numeric(off["gpu_count"], errors="coerce")
    # a catalog price a dated observation disputed with nothing dated to replace it (pricing.crosscheck): kept
    # through the filters so the plan can say how many such rows it left out
    cleared = off["price_hour"].isna() & off.get("price_check", pd.Series(None, index=off.index)).eq("disputed")
    priced = off["price_hour"].notna() & (off["price_hour"] >= 0)
    off = off[(priced | cleared) & (off["gpu_count"] >= 1)]
    if not off["price_hour"].notna().any():
        raise AdvisorError("No usable price sheet: no offer has an on-demand price; run `gpu-advisor prices`.")
    off["gpu_count"] = off["gpu_count"].astype(int)
    names = {g: canonical_name(str(g)) for g in off["gpu_model"].unique()}  # once per distinct label
    off["gpu_model"] = off["gpu_model"].map({g: c or str(g) for g, c in names.items()})
    return off, names


def _by_provider(off, request: PlanRequest):
    """--providers: only their rows (an unknown name is an error listing the sheet's)."""
    if not request.providers:
        return off
    wanted = [p.lower() for p in request.providers]
    check_choice("--providers", wanted, off["provider"].unique())
    return off[off["provider"].str.lower().isin(wanted)]


def _by_region(off, request: PlanRequest, rejections: Rejections):
    """--regions: country / continent codes (pricing.geo), or the providers' own region names."""
    if not request.regions:
        return off
    countries, continents, region_names = geo.parse_codes(request.regions)
    if region_names:
        check_choice("--regions", region_names, off["region"].unique())
    keep = off["region"].str.lower().isin([r.lower() for r in region_names]).to_numpy()
    if countries or continents:
        keep = keep | geo.matches(off["region"].astype(str), countries, continents)
    rejections.add(f"--regions {','.join(request.regions)}: host elsewhere or in an unknown country",
                   int((~keep).sum()))
    return listed_only(off[keep], request, rejections)


def _by_seller(off, request: PlanRequest, rejections: Rejections):
    """--no-marketplace: no marketplace or community host."""
    if not request.no_marketplace:
        return off
    peer = marketplace(off)
    rejections.add("--no-marketplace: a marketplace or community host", int(peer.sum()),
                   _examples(off.loc[peer]))
    return off[~peer]


def _by_gpu(off, request: PlanRequest, sold):
    """--gpu: only those GPU models (checked against every GPU the sheets sell)."""
    if not request.gpus:
        return off
    want = [get_gpu(g).name for g in request.gpus]
    check_choice("--gpu", want, sold)
    return off[off["gpu_model"].isin(want)]


def _known_and_priced(off, names: dict, rejections: Rejections):
    """Rows whose GPU the GPU table knows and whose on-demand price stands (a disputed one is counted out)."""
    known = off["gpu_model"].isin({c for c in names.values() if c})
    for g, n in off.loc[~known, "gpu_model"].value_counts().items():
        rejections.add(f"{g}: GPU not in the GPU table (pricing/data/gpus.csv)", n, g)
    off = off[known].reset_index(drop=True)
    gone = off["price_hour"].isna()
    rejections.add(DISPUTED, int(gone.sum()), _examples(off.loc[gone]))
    return off[~gone].reset_index(drop=True)


def _note_gpu_counts(off, request: PlanRequest, rejections: Rejections) -> None:
    """Count the instances the GPU-count limits will leave out (--max-gpus, more GPUs than sequences per step);
    the rows stay: advisor/planner/configs.py applies the limits per configuration."""
    if request.max_gpus is not None:
        over = off["gpu_count"] > request.max_gpus
        rejections.add(f"--max-gpus {request.max_gpus} excludes larger instances", int(over.sum()),
                       _examples(off.loc[over]))
    big = off["gpu_count"] > request.sequences_per_step
    rejections.add(f"more GPUs than sequences in the global batch ({request.sequences_per_step})", int(big.sum()),
                   _examples(off.loc[big]))


DISPUTED = ("catalog price disputed by a dated observation, with no dated price for its region to replace it "
            "(`prices list --all` shows both; pricing/data/OBSERVATIONS.md)")
OPTIONAL_COLUMNS = {"spot_price_hour": None, "notes": "", "stale": False, "source": "", "fetched_at": "",
                    "observed_at": None,
                    "interconnect": "", "cluster_gbps": float("nan"), "ram_gb": float("nan")}
GPU_ONLY = "gpu_only_price"  # note the SkyPilot importer puts on attachable-GPU rows (PRICE_SOURCES.md)


def _complete_prices(off, rejections: Rejections):
    """GPU-only prices (GCP attachable GPUs, priced without their n1/g2 host VM) cannot be compared
    with whole-instance prices. The host's price would come from the same catalog's host rows
    (SkyPilot lists them separately); the bundled extract has none for n1/g2, so these rows are left
    out with that reason rather than ranked cheap."""
    if "notes" not in off:
        return off

    partial = mentions(off["notes"], GPU_ONLY)
    rejections.add("GPU-only price without its host VM (the sheet has no host price to add; import the "
                   "provider's full catalog or give the whole instance's price with --prices)", int(partial.sum()),
                   _examples(off.loc[partial]))
    return off.loc[~partial].reset_index(drop=True)


def _fresh_only(off, request: PlanRequest, rejections: Rejections):
    """The age policy (pricing.loader.aged_mask): while a fresh offer exists, undated prices and prices older than
    EXPIRE_FACTOR x the limit are left out; a price merely past the limit ranks, stale, its age in its notes (a
    fresh price still heads the plan: fresh_first). With only stale rows left, all are kept (the plan warns)."""
    import numpy as np

    stale = off["stale"].fillna(False).astype(bool).to_numpy() if "stale" in off else None
    if stale is None or request.allow_stale or not stale.any() or stale.all():
        return off
    ages = off["age_days"].to_numpy(dtype=float) if "age_days" in off else np.full(len(off), np.nan)
    aged = stale & aged_mask(ages)
    out = stale & ~aged
    rejections.add(f"stale price (undated, or older than {EXPIRE_FACTOR * stale_days():g} days) while fresh "
                   "offers exist; --allow-stale ranks them too", int(out.sum()), _examples(off.loc[out]))
    off = off.assign(notes=_aged_notes(off, aged, ages))
    return off.loc[~out].reset_index(drop=True)


def _aged_notes(off, aged, ages):
    """Each aged row's notes with `price_age:<days> days (over the <limit>-day limit)` added."""
    notes = off["notes"].to_numpy(dtype=object).copy()
    for i in aged.nonzero()[0]:
        tag = f"price_age:{ages[i]:.0f} days (over the {stale_days():g}-day limit)"
        notes[i] = f"{notes[i]};{tag}" if isinstance(notes[i], str) and notes[i] else tag
    return notes


FRESH_RULE = "fresh price"  # the rule name a candidate promoted by fresh_first carries (Candidate.tie_rule)


def fresh_first(ranked, priced, offer_row, why: dict, rule: dict):
    """A stale price never heads the plan while a fresh one is ranked (DESIGN, recommendation policy): the best
    fresh candidate moves to the top, saying why. `ranked`: candidate indexes, best first."""
    import numpy as np

    if not len(ranked) or "stale" not in priced:
        return ranked
    stale = priced["stale"].fillna(False).astype(bool).to_numpy()[offer_row]
    if not stale[ranked[0]] or stale[ranked].all():
        return ranked
    pick = int(ranked[np.argmax(~stale[ranked])])
    why[pick] = Finding(kind=FindingKind.FRESH_FIRST, figures={"stale_days": float(stale_days())})
    rule[pick] = FRESH_RULE
    return np.concatenate(([pick], ranked[ranked != pick])).astype(int)


def _observed(off):
    """The date each price was observed by its source (`observed_at`, pricing.loader), or "date
    unknown" where the source gives none: never the day a snapshot was copied (`fetched_at`)."""
    import numpy as np

    if "observed_at" not in off:
        return np.full(len(off), DATE_UNKNOWN, dtype=object)
    return per_distinct(off["observed_at"], lambda stamp: str(stamp)[:10] or DATE_UNKNOWN, na=DATE_UNKNOWN)


DATE_UNKNOWN = "date unknown"


def _spot_observed(off):
    """The date each spot price was observed (`spot_observed_at`, pricing.crosscheck): the spot observation's or
    the row's own, "undated" where none; never the on-demand price's date. No spot price: ""."""
    import numpy as np

    has = off["spot_price_hour"].notna().to_numpy()
    if "spot_observed_at" not in off:  # a frame given to plan(): a row's own date dates its spot price too,
        own = _observed(off)  # except a bundled catalog row's, which dates only its on-demand price; a spot
        if "price_origin" in off:  # observation that checked it (pricing.crosscheck spot_check) dates it then
            bundled = off["price_origin"].astype(str).eq("bundled").to_numpy()
            checked = (off["spot_check"].isin(("confirmed", "disputed", "observation")).to_numpy()
                       if "spot_check" in off else np.zeros(len(off), bool))
            when = (per_distinct(off["spot_checked_at"], lambda stamp: str(stamp)[:10] or "undated", na="undated")
                    if "spot_checked_at" in off else np.full(len(off), "undated", dtype=object))
            own = np.where(bundled, np.where(checked, when, "undated"), own)
        return np.where(has, own, "")
    dates = per_distinct(off["spot_observed_at"], lambda stamp: str(stamp)[:10] or "undated", na="undated")
    return np.where(has, dates, "")


def _fabric(off):
    """Gb/s per node between instances of one cluster, or NaN where no multi-node fabric is known."""
    import numpy as np

    out = np.full(len(off), np.nan)
    names = off["provider"].astype(str).to_numpy()
    listed = np.flatnonzero(np.isin(names, list(providers())))  # only the providers the table names
    kinds = off["instance_type"].astype(str).to_numpy()
    for i in listed:
        gbps = cluster_gbps(names[i], kinds[i])
        out[i] = np.nan if gbps is None else gbps
    own = off["cluster_gbps"].to_numpy(dtype=float)  # the sheet's own statement wins
    return np.where(np.isnan(own), out, own)


def _one_of_billed_alike(off, spot: bool, rejections: Rejections):
    """An instance billed as another (pricing.crosscheck.BILLED_AS: a3-edgegpu-8g as a3-highgpu-8g) is the same
    offer when that one is listed in its region at the same price: the listed one stays (the common type, the one
    launchers know: SkyPilot maps H100:8 on GCP to a3-highgpu-8g)."""
    import numpy as np

    prices = ["price_hour", "spot_price_hour"] if spot else ["price_hour"]
    listed = set(map(tuple, off[["provider", "region", "instance_type", *prices]].astype(str).to_numpy()))
    same = np.array([(p, r, BILLED_AS.get((p, str(t).lower()), ""), *map(str, v)) in listed
                     for p, r, t, *v in off[["provider", "region", "instance_type", *prices]].to_numpy()], dtype=bool)
    rejections.add("billed as another instance type listed in the same region at the same price (that one is "
                   "kept; pricing/crosscheck.py BILLED_AS)", int(same.sum()), _examples(off.loc[same]))
    return off[~same].reset_index(drop=True)


LISTED_ONLY = "region-listed-not-availability"  # a sheet that lists every region whatever the capacity


def listed_only(off, request: PlanRequest, rejections: Rejections):
    """With --regions: rows whose sheet lists the instance in every region regardless of capacity (noted
    LISTED_ONLY; scripts/build_snapshot.py) do not show availability in that region; they are left out while a
    row with known availability remains, else kept, each saying so (advisor.explain.notes, LISTED_ONLY)."""
    import numpy as np

    listed = np.asarray(mentions(off["notes"], LISTED_ONLY), bool) if "notes" in off else np.zeros(len(off), bool)
    if not listed.any() or listed.all():
        return off
    rejections.add(f"--regions {','.join(request.regions)}: the sheet lists this instance in every region whatever "
                   f"its capacity ({LISTED_ONLY}), so availability there is unknown", int(listed.sum()),
                   _examples(off.loc[listed]))
    return off[~listed]


def collapse_regions(off, spot: bool):
    """One row per identical offer (provider, instance, GPUs, prices, source) found in several
    regions: the first region alphabetically, with the others listed in `also_in`. Rows come out
    in the order of their region (stable), as sorting the frame by region would give."""
    keys = ["provider", "instance_type", "gpu_model", "gpu_count", "price_hour", "source"]
    if spot:
        keys.append("spot_price_hour")
    import numpy as np
    import pandas as pd

    off = off.reset_index(drop=True)
    regions = off["region"].to_numpy(dtype=object)
    rank = pd.factorize(regions, sort=True)[0]
    rank = np.where(rank < 0, len(rank), rank)  # a missing region sorts last
    gid = off.groupby(keys, dropna=False, sort=False).ngroup().to_numpy()
    order = np.lexsort((np.arange(len(off)), rank, gid))  # rows of one group together, regions in order
    starts = np.flatnonzero(np.r_[True, np.diff(gid[order]) != 0])
    sizes = np.diff(np.r_[starts, len(order)])
    first_rows = order[starts]
    also = np.empty(len(starts), dtype=object)
    also.fill(())  # one region (the usual case): an empty tuple, shared
    for k in np.flatnonzero(sizes > 1):  # only the offers listed in several regions
        also[k] = regions[order[starts[k] + 1:starts[k] + sizes[k]]].tolist()
    shown = np.lexsort((first_rows, rank[first_rows]))  # by region, then by position
    out = off.iloc[first_rows[shown]].copy()
    out["also_in"] = also[shown]
    return out.reset_index(drop=True)


def _first_n(group, prices, n: int):
    """Mask of the n cheapest rows of each group (NaN prices last)."""
    import numpy as np

    order = np.lexsort((np.nan_to_num(prices, nan=np.inf), group))
    g = group[order]
    start = np.r_[0, np.flatnonzero(np.diff(g)) + 1]
    first = np.repeat(start, np.diff(np.r_[start, len(g)]))
    mask = np.zeros(len(group), dtype=bool)
    mask[order] = (np.arange(len(g)) - first) < n
    return mask & ~np.isnan(prices)


def cheapest(off, top: int, spot: bool, rejections: Rejections):
    """Dominance pruning: an offer is left out only when `top` others of the same kind (GPU model,
    GPUs per instance, fabric), billing (increment and minimum) and seller type (marketplace or not)
    are at least as cheap and have at least its host RAM and vCPUs (unknown host sizes compared only
    with unknown ones), on demand and on spot alike; each provider's cheapest is always kept. Hours
    depend on the hardware and stack, never on the offer, and every later stage (host checks,
    costing, near-ties, spot) reads only these attributes, so a left-out offer can never rank above
    the kept ones: `--top` never changes whether a plan exists or its #1."""
    import numpy as np
    import pandas as pd

    if len(off) <= 4 * top:
        return off
    inc, mins = offer_billing(off)
    kind = pd.MultiIndex.from_arrays([off["gpu_model"], off["gpu_count"], off["fabric_gbps"].fillna(-1), inc, mins,
                                      marketplace(off)]).factorize()[0]
    ram = pd.to_numeric(off["ram_gb"], errors="coerce").to_numpy(float)
    cpus = pd.to_numeric(off["vcpus"], errors="coerce").to_numpy(float) if "vcpus" in off else np.full(len(off), np.nan)
    known = ~(np.isnan(ram) | np.isnan(cpus))
    provider = off["provider"].factorize()[0]
    keep = np.zeros(len(off), dtype=bool)
    for price in ("price_hour", "spot_price_hour") if spot else ("price_hour",):
        prices = off[price].to_numpy(float)
        keep |= _first_n(kind * (provider.max() + 1) + provider, prices, 1)
        keep |= _first_n(kind * 2 + known, np.where(known, np.nan, prices), top)  # unknown host sizes
        for g in np.unique(kind[known]):
            rows = np.flatnonzero((kind == g) & known & ~np.isnan(prices))
            for r, c in set(zip(ram[rows], cpus[rows])):  # every host size a check could ask for
                able = rows[(ram[rows] >= r) & (cpus[rows] >= c)]
                keep[able[np.argsort(prices[able], kind="stable")[:top]]] = True
    rejections.add(f"offers dominated by {top} others of the same GPU, GPU count, fabric, billing and seller type "
                   "that cost no more and have at least their host RAM and vCPUs", int((~keep).sum()),
                   _examples(off.loc[~keep]))
    return off.loc[keep].reset_index(drop=True)


def priced_tiers(off, spot: bool):
    """One row per offer and price tier: on demand, and spot where asked for and published."""
    import numpy as np
    import pandas as pd

    frames = [off.assign(spot=False, price=off["price_hour"])]
    if spot:
        sp = off[off["spot_price_hour"].notna() & (off["spot_price_hour"] > 0)]
        frames.append(sp.assign(spot=True, price=sp["spot_price_hour"]))
    priced = pd.concat(frames, ignore_index=True)
    priced["offer_id"] = np.arange(len(priced))
    return priced


def _examples(rows) -> str:
    import pandas as pd

    return ", ".join(sorted(pd.unique(rows["instance_type"].astype(str))[:100])[:3])
