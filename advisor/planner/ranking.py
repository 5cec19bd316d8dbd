"""Ranking rules a senior engineer signs: one row per distinct offer, near-ties settled by what
matters more than a few dollars, and spot prices that look like placeholders kept off the headline.

- One offer, one row: the same provider, GPU, GPU count, price and network under several instance
  names (or regions) is one offer; only its best stack and method is ranked (per node count).
- Near-ties: within NEAR_TIE_SHARE or NEAR_TIE_USD of the cheapest remaining candidate (or the
  fastest, with --sort time), prefer a fit clear of the memory limit (not tight: outside the estimator's
  error band), a calibrated time model, a card with bf16, unquantized base weights (LoRA over QLoRA: NF4
  changes the model being tuned) and a non-marketplace seller, in that order, then a clearly faster run;
  the promoted candidate says why.
- Spot sanity: a spot price that is a fixed fraction of on-demand across many instance types of one
  provider (a catalog placeholder, not a market price), or a row noted `spot_suspect`, is suspect.
"""

from __future__ import annotations

from advisor.planner.costing import offer_billing
from advisor.results import NEAR_TIE_NOTE
from pricing.schema import mentions

NEAR_TIE_SHARE = 0.05  # DESIGN.md "Recommendation policy": a near-tie is within 5 % ...
NEAR_TIE_USD = 1.0  # ... or within $1
FASTER = 1.25  # "clearly faster": hours buckets of 25 %
# Sellers that list third-party hosts at prices their suppliers set: vast.ai (hosts rented from individuals);
# Hyperbolic's GPU Marketplace ("Suppliers set their own price", https://docs.hyperbolic.xyz/docs/gpu-marketplace-pricing).
MARKETPLACES = ("vast", "hyperbolic")
SUSPECT_SHARE_ROWS = 5  # instance types of one provider at one exact spot/on-demand ratio: a placeholder


def offer_identity(priced):
    """An integer per offer row and tier: equal for the same provider, GPU, GPU count, price (and spot
    price, on the spot tier), fabric and billing terms."""
    import numpy as np
    import pandas as pd

    spot = priced["spot"].to_numpy(bool)
    spot_price = np.where(spot, priced["spot_price_hour"].round(6).fillna(-1).to_numpy(float), -1.0)  # its tier's

    inc, mins = offer_billing(priced)  # other billing terms (a sheet row's own increment): another offer
    keys = [priced["provider"].astype(str).str.lower(), priced["gpu_model"], priced["gpu_count"],
            priced["price_hour"].round(6), spot_price, priced["fabric_gbps"].fillna(-1), spot, inc, mins]
    return pd.MultiIndex.from_arrays(keys).factorize()[0]


def one_per_offer(ranked, identity, fitting, cfg_row):
    """The first (best) candidate of each distinct offer × node count, in rank order: its best stack
    and method (the others stay in the Pareto front and best-per pools)."""
    import numpy as np

    nodes = fitting["nodes"].to_numpy(np.int64)[cfg_row]
    group = identity.astype(np.int64) * 4096 + nodes
    _, first = np.unique(group[ranked], return_index=True)
    return ranked[np.sort(first)]


def marketplace(priced):
    import numpy as np

    return priced["provider"].astype(str).str.lower().isin(MARKETPLACES).to_numpy() | np.asarray(
        mentions(priced["notes"], "marketplace"), bool)


def preferences(sc, fitting, priced, request):
    """Per candidate, the categorical preferences a near-tie is settled by (True is worse), in order: a
    tight fit (an OOM risk no dollar saving in a near-tie is worth), an uncalibrated time model, no bf16,
    4-bit base weights, a marketplace seller."""
    ci, oi = sc["cfg_row"].to_numpy(), sc["offer_row"].to_numpy()
    return {"clear of the memory limit": fitting["tight"].to_numpy(bool)[ci],
            "calibrated": ~fitting["calibrated"].to_numpy(bool)[ci], "bf16": ~fitting["bf16"].to_numpy(bool)[ci],
            "unquantized": (fitting["method"] == "qlora").to_numpy(bool)[ci],
            "non-marketplace": marketplace(priced)[oi]}


def prefer_in_near_ties(ranked, key, hours, prefs: dict, sort: str, window: int):
    """Re-order the first `window` positions: repeatedly take, among the candidates within a near-tie
    (NEAR_TIE_SHARE or NEAR_TIE_USD) of the best remaining key, those the categorical preferences
    favour; among them, within NEAR_TIE_SHARE of their best key, a clearly faster one (FASTER), then
    the best key. Returns (ranked, why by position)."""
    import math

    import numpy as np

    names = list(prefs)
    head, tail = list(ranked[:window * 4]), ranked[window * 4:]
    out, why = [], {}
    while head and len(out) < window:
        best = key[head[0]]
        tied = [j for j in head if key[j] <= best + max(NEAR_TIE_SHARE * best, NEAR_TIE_USD if sort == "cost" else 0)]
        top = min(tuple(bool(prefs[n][j]) for n in names) for j in tied)
        group = [j for j in tied if tuple(bool(prefs[n][j]) for n in names) == top]
        near = [j for j in group if key[j] <= key[group[0]] * (1 + NEAR_TIE_SHARE)]
        pick = min(near, key=lambda j: (math.floor(math.log(max(hours[j], 1e-9)) / math.log(FASTER)), key[j]))
        if pick != head[0]:
            beaten = head[0]
            reasons = [n for n in names if prefs[n][pick] < prefs[n][beaten]]
            if hours[pick] * FASTER <= hours[beaten]:
                reasons.append(f"faster ({hours[pick]:.1f} h against {hours[beaten]:.1f} h)")
            why[int(pick)] = (f"{NEAR_TIE_NOTE} (within 5% or $1 of a cheaper option) for being "
                              + ", ".join(reasons or ["equal on every tie-breaker and quicker"]))
        out.append(pick)
        head.remove(pick)
    return np.concatenate([np.asarray(out + head, dtype=int), tail]).astype(int), why


def spot_suspect(priced):
    """Mask of rows whose spot price is suspect: noted `spot_suspect`, or the same exact fraction of
    on-demand as SUSPECT_SHARE_ROWS or more instance types of the provider (a placeholder)."""
    import numpy as np
    import pandas as pd

    noted = np.asarray(mentions(priced["notes"], "spot_suspect"), bool)
    ratio = (pd.to_numeric(priced["spot_price_hour"], errors="coerce") / priced["price_hour"]).round(4)
    frame = pd.DataFrame({"p": priced["provider"].astype(str).str.lower(), "r": ratio,
                          "k": priced["instance_type"].astype(str)})
    kinds = frame.dropna().groupby(["p", "r"])["k"].nunique()
    fixed = pd.MultiIndex.from_frame(frame[["p", "r"]]).isin(kinds[kinds >= SUSPECT_SHARE_ROWS].index)
    return noted | (fixed & ratio.notna().to_numpy())


SPOT_SUSPECT_NOTE = ("spot price looks like a placeholder (a fixed fraction of on-demand across many instance "
                     "types, or flagged spot_suspect): check availability before planning on it")
