"""Ranking rules a senior engineer signs: one row per distinct offer, near-ties settled by what
matters more than a few percent, and spot prices that look like placeholders kept off the headline.

- One offer, one row: the same provider, GPU, GPU count, price and network under several instance
  names (or regions) is one offer; only its best stack and method is ranked (per node count).
- Every candidate is ranked at one quantile of the time model's held-out error (--risk, default p80):
  the figure the table's cost and hours columns show.
- Near-ties are relative only: within NEAR_TIE_PCT percent of the cheapest remaining candidate (or the
  fastest, with --sort time), the tie-breakers pick, in TIE_BREAKERS order: the requested global batch
  kept exactly; fewer GPUs and nodes; clear of the memory limit (not tight); a calibrated time model; a
  non-marketplace seller; a known host (its RAM listed); a dated price before an undated one;
  then bf16 and unquantized base weights. A candidate promoted over a cheaper one says which rule did it
  (a mark in the table, its note, and `Why #1`). Since each pick is within NEAR_TIE_PCT of the cheapest
  candidate still unplaced, no row is more than NEAR_TIE_PCT dearer than any row below it.
- Spot sanity: a spot price that is a fixed fraction of on-demand across many instance types of one
  provider (a catalog placeholder, not a market price), or a row noted `spot_suspect`, is suspect.
"""

from __future__ import annotations

from advisor.planner.costing import offer_billing
from advisor.results.facts import Finding, FindingKind
from pricing.schema import mentions

NEAR_TIE_PCT = 3.0  # DESIGN.md "Recommendation policy": a near-tie is within 3 % (relative only)
# The tie-breakers, in order (docs/plans.md "How the table ranks"); each names a preference where True is worse.
TIE_BREAKERS = ("requested global batch kept", "fewer GPUs and nodes", "clear of the memory limit", "calibrated",
                "non-marketplace", "known host", "dated price", "bf16", "unquantized")
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
    """Per candidate, the tie-breakers (TIE_BREAKERS order) as sort keys, lower is better: the requested
    global batch not kept, the GPU count (then nodes), a tight fit, an uncalibrated time model, a
    marketplace seller, an unknown host, an undated price, no bf16, 4-bit base weights."""
    import numpy as np
    import pandas as pd

    ci, oi = sc["cfg_row"].to_numpy(), sc["offer_row"].to_numpy()
    gpus = fitting["gpus"].to_numpy(np.int64)[ci] if "gpus" in fitting else (
        fitting["gpu_count"].to_numpy(np.int64) * fitting["nodes"].to_numpy(np.int64))[ci]
    nodes = fitting["nodes"].to_numpy(np.int64)[ci]
    ram = pd.to_numeric(priced["ram_gb"], errors="coerce").to_numpy(float)
    return {"requested global batch kept": fitting["global_batch"].to_numpy(np.int64)[ci] != request.sequences_per_step,
            "fewer GPUs and nodes": gpus * 1024 + nodes,
            "clear of the memory limit": fitting["tight"].to_numpy(bool)[ci],
            "calibrated": ~fitting["calibrated"].to_numpy(bool)[ci],
            "non-marketplace": marketplace(priced)[oi],
            "known host": np.isnan(ram)[oi],
            "dated price": undated(priced)[oi],
            "bf16": ~fitting["bf16"].to_numpy(bool)[ci],
            "unquantized": (fitting["method"] == "qlora").to_numpy(bool)[ci]}


def undated(priced):
    """Mask of offer rows whose price has no observation date."""
    import numpy as np

    if "price_date" not in priced:
        return np.ones(len(priced), bool)
    dates = priced["price_date"].astype(str).to_numpy()
    return ~np.char.startswith(dates.astype("U"), "20")


# A tie rule never promotes a row that takes this many times the wall time of the cheaper row it passes:
# at a 3 % price difference nobody trades 4.5 h for 16 h to rent fewer GPUs or a safer host.
SLOWER_LIMIT = 2.0


def prefer_in_near_ties(ranked, key, prefs: dict, window: int, gpus=None, nodes=None, what: str = "cheaper",
                        hours=None):
    """Re-order the first `window` positions: repeatedly take, among the candidates within NEAR_TIE_PCT
    of the best remaining key (and, given `hours`, under SLOWER_LIMIT times its wall time), the one the
    tie-breakers (in `prefs` order) favour, then the best key.
    Returns (ranked, why by position, rule by position): `why` is the finding that a rule promoted a candidate
    over a cheaper (or faster) one (with both rows' figures), `rule` names it (the table's mark)."""
    import numpy as np

    names = list(prefs)
    head, tail = list(ranked[:window * 4]), ranked[window * 4:]
    out, why, rule = [], {}, {}
    share = NEAR_TIE_PCT / 100
    while head and len(out) < window:
        best = key[head[0]]
        tied = [j for j in head if key[j] <= best * (1 + share)
                and (hours is None or j == head[0] or hours[j] < SLOWER_LIMIT * hours[head[0]])]
        pick = min(tied, key=lambda j: (tuple(prefs[n][j] for n in names), key[j]))
        if key[pick] > best:
            beaten = head[0]
            name = next((n for n in names if prefs[n][pick] < prefs[n][beaten]), "equal on every tie-breaker")
            g = gpus if gpus is not None else np.zeros(len(key), int)
            n = nodes if nodes is not None else np.ones(len(key), int)
            why[int(pick)] = Finding(kind=FindingKind.NEAR_TIE, figures={
                "rule": name, "within_pct": NEAR_TIE_PCT, "what": what, "here_pct": float(100 * (key[pick] / best - 1)),
                "gpus": int(g[pick]), "nodes": int(n[pick]), "beaten_gpus": int(g[beaten]),
                "beaten_nodes": int(n[beaten])})
            rule[int(pick)] = name
        out.append(pick)
        head.remove(pick)
    return np.concatenate([np.asarray(out + head, dtype=int), tail]).astype(int), why, rule


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
