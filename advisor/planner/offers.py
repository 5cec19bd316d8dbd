"""Stage 1 — offers: the price sheets' rows the plan may rent, and the tiers it prices them at.

Loads the sheets (user > cache > bundled, `pricing.load_offers`), drops rows without a usable
on-demand price, canonicalises GPU names, applies the provider / region / GPU filters (an
unknown name is an error listing the valid ones) and the GPU-count limits, and records every
row it leaves out in the plan's rejections.
"""

from __future__ import annotations

from advisor.errors import AdvisorError
from advisor.planner.rejections import Rejections
from advisor.planner.request import PlanRequest, check_choice


def load(request: PlanRequest):
    """The offers DataFrame for a request: bundled + cached sheets, and the user's own."""
    from pathlib import Path

    from pricing import load_offers

    return load_offers(user_sheets=[Path(p) for p in request.prices], discounts=list(request.discount) or None)


def prepare(offers, request: PlanRequest, rejections: Rejections):
    """Usable instance rows (one per provider × region × instance type), filtered as asked."""
    import pandas as pd

    from pricing.gpus import canonical_name, get_gpu

    if offers is None or len(offers) == 0:
        raise AdvisorError("No usable price sheet: no offers loaded; run `gpu-advisor prices` to fetch or import one.")
    off = offers.copy()
    off["price_hour"] = pd.to_numeric(off["price_hour"], errors="coerce")
    off["spot_price_hour"] = pd.to_numeric(off.get("spot_price_hour"), errors="coerce")
    off["gpu_count"] = pd.to_numeric(off["gpu_count"], errors="coerce")
    off = off[off["price_hour"].notna() & (off["price_hour"] > 0) & (off["gpu_count"] >= 1)]
    if len(off) == 0:
        raise AdvisorError("No usable price sheet: no offer has an on-demand price; run `gpu-advisor prices`.")
    off["gpu_count"] = off["gpu_count"].astype(int)
    off["gpu_model"] = off["gpu_model"].map(lambda g: canonical_name(str(g)) or str(g))

    if request.providers:
        providers = [p.lower() for p in request.providers]
        check_choice("--providers", providers, off["provider"].unique())
        off = off[off["provider"].str.lower().isin(providers)]
    if request.regions:
        check_choice("--regions", request.regions, off["region"].unique())
        off = off[off["region"].str.lower().isin([r.lower() for r in request.regions])]
    if request.gpus:
        want = [get_gpu(g).name for g in request.gpus]
        check_choice("--gpu", want, off["gpu_model"].unique())
        off = off[off["gpu_model"].isin(want)]
    known = off["gpu_model"].map(lambda g: canonical_name(g) is not None)
    for g, n in off.loc[~known, "gpu_model"].value_counts().items():
        rejections.add(f"{g}: GPU not in the GPU table (pricing/data/gpus.csv)", n, g)
    off = off[known].reset_index(drop=True)

    if request.max_gpus is not None:
        over = off["gpu_count"] > request.max_gpus
        rejections.add(f"--max-gpus {request.max_gpus} excludes larger instances", int(over.sum()),
                       _examples(off.loc[over]))
    big = off["gpu_count"] > request.sequences_per_step
    rejections.add(f"more GPUs than sequences in the global batch ({request.sequences_per_step})", int(big.sum()),
                   _examples(off.loc[big]))
    return off


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
    return ", ".join(sorted(rows["instance_type"].astype(str).unique())[:3])
