"""Stages 5-7 — price every fitting config on every matching offer, then pick what the plan shows.

`select` joins configs to priced offers (advisor.planner.costing), applies the budget and the
deadline, ranks (cost then time, or time then cost), keeps one row per offer × node count ×
method unless every stack is asked for, and finds the Pareto front, the best option per GPU and
per provider and the naive baseline; everything vectorised over candidates. `rejections` says
why every ruled-out option was ruled out.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.planner import costing
from advisor.planner.configs import TIGHT_FRACTION, Config
from advisor.planner.rejections import Rejections
from advisor.planner.request import PlanRequest


@dataclass
class Selection:
    """Positions into `scored` (one row per priced offer × fitting config)."""

    scored: object  # DataFrame: offer_row, cfg_row, row, hours, cost_usd, ...
    fitting: object  # DataFrame of the fitting configs (row = index into the config list)
    ranked: object  # np.ndarray, best first
    pareto: object
    best: dict  # "gpu_model" | "provider" -> list of positions
    baseline: object
    notice: str
    rejections: Rejections
    n_scored: int
    n_meeting: int
    spot: object = ()  # the best spot candidate (with --spot), beside the on-demand ranking
    constraints_met: bool = True

    def shown(self, top: int):
        """Positions of every candidate the plan will show (checked exactly before it is built)."""
        import numpy as np

        parts = [self.ranked[:top], self.pareto, *map(np.asarray, self.best.values()), self.baseline, self.spot]
        return np.concatenate([np.asarray(p) for p in parts]).astype(int)


def config_frame(configs: list[Config], request: PlanRequest, weights_gb: float, adapters_gb: float):
    """One row per config with what costing needs (memory, hours, setup and checkpoint times)."""
    import numpy as np
    import pandas as pd

    cfg = pd.DataFrame({
        "gpu_model": [c.gpu_model for c in configs], "gpu_count": [c.per_node for c in configs],
        "nodes": [c.nodes for c in configs], "gpus": [c.stack.gpus for c in configs],
        "fabric_gbps": [np.nan if c.fabric_gbps is None else c.fabric_gbps for c in configs],
        "method": [c.method for c in configs],
        "micro_batch": [c.max_micro_batch for c in configs], "need1": [c.need1 for c in configs],
        "cpu_ram": [c.cpu_ram for c in configs], "usable": [c.gpu.usable_bytes for c in configs],
        "limit": [c.limit for c in configs], "train_hours": [c.train_hours for c in configs],
        "write_hours": costing.checkpoint_write_hours(np.array([c.checkpoint_bytes for c in configs], float),
                                                      np.array([c.nodes for c in configs], float)),
    })
    cfg["row"] = np.arange(len(cfg))
    is_full = (cfg["method"] == "full").to_numpy()
    out_gb = np.where(is_full, weights_gb, adapters_gb)
    cfg["setup_hours"] = costing.setup_hours(weights_gb, out_gb, request.setup_hours)
    return cfg


def _fmt_gb(b: float) -> str:
    return f"{b / 1e9:.1f} GB"


def reject_nofit(cfg, configs: list[Config], off, priced_counts: dict, request: PlanRequest,
                 rejections: Rejections) -> None:
    """Configs that fit nowhere, counted once per priced offer they would have joined. A few
    thousand configs in a hundred groups: plain lists (pandas' per-group overhead would dominate)."""
    column = {name: cfg[name].tolist() for name in ("gpu_model", "gpu_count", "nodes", "method", "micro_batch",
                                                   "need1", "usable", "limit", "row")}
    n_priced = [priced_counts.get(key, 0) for key in zip(column["gpu_model"], column["gpu_count"])]
    asked = set(request.methods)
    nofit: dict[tuple, list[int]] = {}  # (GPU model, GPUs per node, nodes, method) -> rows, in first-seen order
    fit_groups = set()
    keys = zip(column["gpu_model"], column["gpu_count"], column["nodes"], column["method"])
    for i, (key, mb) in enumerate(zip(keys, column["micro_batch"])):
        if key[3] in asked:
            if mb > 0:
                fit_groups.add(key)
            else:
                nofit.setdefault(key, []).append(i)
    if not nofit:
        return
    first_offer: dict[tuple, tuple[str, str]] = {}
    for g, pn, provider, kind in zip(off["gpu_model"].tolist(), off["gpu_count"].tolist(), off["provider"].tolist(),
                                     off["instance_type"].tolist()):
        first_offer.setdefault((g, pn), (provider, kind))
    need1 = column["need1"]
    for key, rows in nofit.items():
        g, pn, nodes, meth = key
        count = sum(n_priced[i] for i in rows)
        if key in fit_groups:
            rejections.add("stack variants that need more memory than a leaner stack on the same GPU", count)
            continue
        best = min(rows, key=need1.__getitem__)  # the first of the leanest
        provider, kind = first_offer[(g, pn)]
        where = f"{g} {column['usable'][best] / 2**30:.0f} GiB" + (f" ×{pn * nodes}" if pn * nodes > 1 else "")
        rejections.add(f"{where}: {meth} fine-tuning needs {_fmt_gb(need1[best])} per GPU even at micro-batch 1 "
                       f"(limit {_fmt_gb(column['limit'][best])} with {request.headroom:.0%} headroom)", count,
                       f"{provider} {kind} · {configs[column['row'][best]].stack.label()}")


def select(cfg, configs: list[Config], priced, request: PlanRequest, rejections: Rejections) -> Selection:
    """Score every candidate and pick what the plan shows (vectorised over candidates).

    The ranking, the Pareto front, the best-per lists and the baseline compare on-demand prices;
    with --spot the cheapest spot candidate meeting the constraints is kept beside them. A tight
    candidate (within the estimator's error band of the limit) loses to an equal-cost safe one.
    """
    import numpy as np
    import pandas as pd

    cfg = cfg.assign(train_hours=[c.train_hours for c in configs], micro_batch=[c.max_micro_batch for c in configs],
                     cpu_ram=[c.cpu_ram for c in configs], write_hours=cfg["write_hours"])
    methods = request.methods
    fitting = cfg[cfg["micro_batch"] > 0].reset_index(drop=True)
    sc = costing.score(priced, fitting, spot_rate=request.interruptions_per_hour,
                       checkpoint_interval_hours=request.checkpoint_interval_hours)
    cfg_row = sc["cfg_row"].to_numpy()
    sc["row"] = fitting["row"].to_numpy()[cfg_row]
    bad_ram = ~sc["ram_ok"].to_numpy()
    # per-config answers, indexed per candidate (string comparisons over every candidate are slow)
    method = fitting["method"]
    asked = method.isin(methods).to_numpy()[cfg_row]
    full = (method == "full").to_numpy()[cfg_row]
    method_code = pd.factorize(method)[0][cfg_row]
    i = np.flatnonzero(bad_ram & asked)
    if len(i):
        o = priced.iloc[sc["offer_row"].iat[i[0]]]
        ram = "unknown" if o["ram_gb"] != o["ram_gb"] else f"{o['ram_gb']:g} GB"
        rejections.add(f"CPU offload needs more host RAM than the instance has, or its RAM is unknown (e.g. "
                       f"{_fmt_gb(fitting['cpu_ram'].iat[cfg_row[i[0]]])} vs {ram})", len(i),
                       f"{o['provider']} {o['instance_type']}")
    is_spot = priced["spot"].to_numpy(bool)[sc["offer_row"].to_numpy()]
    usable = ~bad_ram & asked
    sel = usable & ~is_spot
    cost, hours = sc["cost_usd"].to_numpy(), sc["hours"].to_numpy()
    if request.risk != "p50":  # rank, filter and compare at the pessimistic quantile of the run's duration
        at_risk = costing.score(priced, fitting.assign(train_hours=[configs[r].train_hours_risk for r in fitting["row"]]),
                                spot_rate=request.interruptions_per_hour,
                                checkpoint_interval_hours=request.checkpoint_interval_hours)
        cost, hours = at_risk["cost_usd"].to_numpy(), at_risk["hours"].to_numpy()
        sc["cost_at_risk"], sc["hours_at_risk"] = cost, hours
    tight = np.array([c.tight for c in configs], dtype=bool)[sc["row"].to_numpy()]

    over = cost > request.budget if request.budget is not None else np.zeros(len(sc), bool)
    late = hours > request.deadline_hours if request.deadline_hours is not None else np.zeros(len(sc), bool)
    if request.budget is not None:
        rejections.add(f"over the budget of ${request.budget:,.0f}", int((over & sel).sum()))
    if request.deadline_hours is not None:
        rejections.add(f"misses the deadline of {request.deadline_hours:g} h", int((late & sel).sum()))
    meets = sel & ~over & ~late
    tie = sc["offer_row"].to_numpy() * (len(configs) + 1) + sc["row"].to_numpy()  # deterministic ties
    # A tight candidate ranks as if it cost (or took) the estimator's error band more: it loses to a
    # safe one that costs about the same, and wins only when clearly cheaper.
    risk = 1 + TIGHT_FRACTION * tight
    primary = (tie, hours * risk, cost * risk) if request.sort == "cost" else (tie, cost * risk, hours * risk)

    notice, met, order = "", True, None
    if sel.any() and not meets.any():
        met = False
        what = " and ".join(x for x, v in (("budget", request.budget), ("deadline", request.deadline_hours))
                            if v is not None)
        notice = f"No candidate meets the {what}; showing the closest."
        pool = np.flatnonzero(sel)
        ranked = pool[np.lexsort((tie[pool], hours[pool], cost[pool], _violation(cost, hours, request)[pool]))]
    else:
        pool = np.flatnonzero(meets)
        ranked = order = pool[np.lexsort(tuple(k[pool] for k in primary))]
    # One row per instance offer × node count × method: its best stack. The variants behind it
    # (another optimizer or attention kernel at a higher cost) stay in the Pareto front and the
    # best-per lists' pool, but would crowd the ranking with near-copies.
    if request.distinct and len(ranked):
        nodes_c = fitting["nodes"].to_numpy(np.int64)[cfg_row]
        group = (sc["offer_row"].to_numpy(np.int64) * 4096 + nodes_c) * 8 + method_code.astype(np.int64)
        _, first = np.unique(group[ranked], return_index=True)
        ranked = ranked[np.sort(first)]
    if not sel.any():
        met = False
        notice = ("Nothing fits: no offer can hold this job with the allowed settings."
                  if len(priced) else "No offer matches the filters.")
    # Pareto front (cost vs hours) over what meets the constraints (or the closest pool)
    by_cost = pool[np.lexsort((tie[pool], hours[pool], tight[pool], cost[pool]))]  # the front itself: true costs
    h = hours[by_cost]
    prev = np.concatenate(([np.inf], np.minimum.accumulate(h)[:-1])) if len(h) else h
    pareto = by_cost[h < prev]
    if order is None:  # the closest pool was ranked by how far it misses; best-per lists by the sort key
        order = pool[np.lexsort(tuple(k[pool] for k in primary))]
    best = {}
    for column in ("gpu_model", "provider"):
        codes = pd.factorize(priced[column])[0]  # integers: np.unique on strings is slow
        _, first = np.unique(codes[sc["offer_row"].to_numpy()[order]], return_index=True)
        best[column] = [order[j] for j in sorted(first)]
    # naive baseline: full fine-tuning, on demand, on the cheapest instance where it fits
    base = np.flatnonzero(~bad_ram & full & ~is_spot)
    baseline = base[np.lexsort((tie[base], cost[base], sc["price_hour"].to_numpy()[base]))][:1]
    spot_pool = np.flatnonzero(usable & is_spot & ~over & ~late)
    spot_best = spot_pool[np.lexsort(tuple(k[spot_pool] for k in primary))][:1]
    return Selection(scored=sc, fitting=fitting, ranked=ranked, pareto=pareto, best=best, baseline=baseline,
                     notice=notice, rejections=rejections, n_scored=int(sel.sum()), n_meeting=int(meets.sum()),
                     spot=spot_best, constraints_met=met)


def _violation(cost, hours, request: PlanRequest):
    """How far each candidate misses the budget and the deadline, as summed fractions."""
    import numpy as np

    viol = np.zeros(len(cost))
    if request.budget is not None:
        viol += np.maximum(cost / request.budget - 1, 0)
    if request.deadline_hours is not None:
        viol += np.maximum(hours / request.deadline_hours - 1, 0)
    return viol


def misses(cost: float, hours: float, request: PlanRequest) -> list[str]:
    """Plain words for how far one candidate misses each constraint (the 'closest' list)."""
    out = []
    if request.budget is not None and cost > request.budget:
        out.append(f"misses the budget of ${request.budget:,.0f} by ${cost - request.budget:,.0f} "
                   f"(+{cost / request.budget - 1:.0%})")
    if request.deadline_hours is not None and hours > request.deadline_hours:
        out.append(f"misses the deadline of {request.deadline_hours:g} h by {hours - request.deadline_hours:,.1f} h "
                   f"(+{hours / request.deadline_hours - 1:.0%})")
    return out
