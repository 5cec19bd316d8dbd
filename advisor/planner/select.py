"""Stages 5-7 — price every fitting config on every matching offer, then pick what the plan shows.

`select` joins configs to priced offers (advisor.planner.costing), applies the budget and the
deadline at each candidate's ranking quantile, checks every host (advisor.planner.host), ranks
(cost then time, or time then cost), keeps one row per distinct offer × node count unless every
stack is asked for, settles near-ties (advisor.planner.ranking), and finds the Pareto front, the
best option per GPU and per provider and the like-with-like baseline; everything vectorised over
candidates. `rejections` says why every ruled-out option was ruled out.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.estimate.phases import LOAD
from advisor.explain import notices
from advisor.planner import costing, host, ranking
from advisor.planner.configs import Config
from advisor.planner.offers import fresh_first
from advisor.planner.rejections import Rejections
from advisor.planner.request import PlanRequest
from advisor.results.facts import RankBy
from advisor.units import GB, gb
from pricing.gpus import get_gpu


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
    why: dict = None  # position -> the near-tie Finding that preferred it (ranking.prefer_in_near_ties)
    rule: dict = None  # position -> the tie rule that promoted it (ranking.TIE_BREAKERS)
    undated_spot: int = 0  # spot offers left out of the spot line and remedies: no spot observation date

    def __post_init__(self):
        self.why = self.why or {}
        self.rule = self.rule or {}

    def shown(self, top: int):
        """Positions of every candidate the plan will show (checked exactly before it is built)."""
        import numpy as np

        parts = [self.ranked[:top], self.pareto, *map(np.asarray, self.best.values()), self.baseline, self.spot]
        return np.concatenate([np.asarray(p) for p in parts]).astype(int)


def config_frame(configs: list[Config], request: PlanRequest, weights_gb: float, adapters_gb: float):
    """One row per config with what costing and the host check need (memory, hours per quantile,
    setup and checkpoint times, host RAM and vCPUs)."""
    import numpy as np
    import pandas as pd

    cfg = pd.DataFrame({
        "gpu_model": [c.gpu.name for c in configs], "gpu_count": [c.per_node for c in configs],
        "nodes": [c.nodes for c in configs], "gpus": [c.stack.gpus for c in configs],
        "fabric_gbps": [np.nan if c.fabric_gbps is None else c.fabric_gbps for c in configs],
        "method": [c.stack.method for c in configs],
        "micro_batch": [c.fitted.max_micro_batch for c in configs], "need1": [c.fitted.need1 for c in configs],
        "usable": [c.gpu.usable_bytes for c in configs], "limit": [c.limit for c in configs],
        "write_hours": costing.checkpoint_write_hours(np.array([c.fitted.checkpoint_bytes for c in configs], float),
                                                      np.array([c.nodes for c in configs], float)),
        "vcpus_need": [host.vcpus_needed(c.per_node) for c in configs],
        "bf16": [c.stack.precision.endswith("bf16") or c.stack.precision == "fp32" for c in configs],
        "caveats": [bool(ranking.stack_caveats(c.gpu, c.stack)) for c in configs],
    })
    cfg["row"] = np.arange(len(cfg))
    is_full = (cfg["method"] == "full").to_numpy()
    out_gb = np.where(is_full, weights_gb, adapters_gb)
    cfg["setup_hours"] = costing.setup_hours(weights_gb, out_gb, request.setup_hours)
    return refresh(cfg, configs, weights_gb)


def refresh(cfg, configs: list[Config], weights_gb: float):
    """The columns `settle` may change (micro-batch, hours, offloaded RAM), read again from the configs."""
    hours = {q: [c.timed.train_hours[q] if c.timed else float("nan") for c in configs] for q in costing.QUANTILES}
    return cfg.assign(micro_batch=[c.fitted.max_micro_batch for c in configs],
                      cpu_ram=[c.fitted.cpu_ram for c in configs],
                      ram_need=[host.ram_needed_bytes(weights_gb * GB, c.per_node, c.stack.sharding, c.fitted.cpu_ram)
                                for c in configs],
                      calibrated=[bool(c.timed and c.timed.calibrated) for c in configs],
                      tight=[c.fitted.tight for c in configs],
                      global_batch=[c.timed.global_batch if c.timed else 0 for c in configs],
                      **{f"train_hours_{q}": v for q, v in hours.items()})


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
        where = f"{g} {get_gpu(g).memory_gb:g} GB" + (f" ×{pn * nodes}" if pn * nodes > 1 else "")  # the card as sold
        leanest = configs[column["row"][best]]
        rejections.add(notices.short_of_memory(where, meth, need1[best], column["limit"][best], request.headroom,
                                               leanest.fitted.peak_phase == LOAD), count,
                       f"{provider} {kind} · {leanest.stack.label()}")


def _host_checks(sc, fitting, priced, asked, rejections: Rejections):
    """Mask of candidates whose host has the RAM and vCPUs the stack needs (advisor.planner.host);
    every other one is rejected with its reason. Offloaded states need a known RAM size."""
    import numpy as np
    import pandas as pd

    oi, ci = sc["offer_row"].to_numpy(), sc["cfg_row"].to_numpy()
    ram_gb = pd.to_numeric(priced["ram_gb"], errors="coerce").to_numpy(float)[oi]
    vcpus = (pd.to_numeric(priced["vcpus"], errors="coerce").to_numpy(float) if "vcpus" in priced
             else np.full(len(priced), np.nan))[oi]
    need = fitting["ram_need"].to_numpy(float)[ci]
    ram_ok, cpu_ok, _ = host.check(need, fitting["vcpus_need"].to_numpy(float)[ci], ram_gb, vcpus)
    offload = fitting["cpu_ram"].to_numpy(float)[ci] > 0
    ram_ok &= ~(offload & np.isnan(ram_gb))
    for ok, what in ((ram_ok, "host RAM"), (cpu_ok & ram_ok, "vCPUs")):
        i = np.flatnonzero(~ok & asked & (ram_ok if what == "vCPUs" else True))
        if len(i):
            o = priced.iloc[oi[i[0]]]
            has = (f"{o['ram_gb']:g} GB" if o["ram_gb"] == o["ram_gb"] else "unknown") if what == "host RAM" else \
                f"{o['vcpus']:g}"
            wants = gb(need[i[0]]) if what == "host RAM" else f"{fitting['vcpus_need'].iat[ci[i[0]]]}"
            rejections.add(f"the instance has too little {what} for loading the model, offloaded states and data "
                           f"loading (e.g. needs {wants}, has {has}; advisor/planner/host.py)", len(i),
                           f"{o['provider']} {o['instance_type']}")
    return ram_ok & cpu_ok


def select(cfg, configs: list[Config], priced, request: PlanRequest, rejections: Rejections) -> Selection:
    """Score every candidate and pick what the plan shows (vectorised over candidates).

    The ranking, the constraints, the Pareto front, the best-per lists and the baseline compare
    on-demand prices at one quantile for every candidate (--risk); with --spot the cheapest plausible
    spot candidate meeting the constraints is kept beside them. A candidate that changes the
    requested global batch is dropped while one that keeps it exists. Near-ties (within
    ranking.NEAR_TIE_PCT) are settled by ranking.TIE_BREAKERS, in order."""
    import numpy as np

    fitting = cfg[cfg["micro_batch"] > 0].reset_index(drop=True)
    sc = costing.score(priced, fitting, spot_rate=request.interruptions_per_hour,
                       checkpoint_interval_hours=request.checkpoint_interval_hours)
    cfg_row, offer_row = sc["cfg_row"].to_numpy(), sc["offer_row"].to_numpy()
    sc["row"] = fitting["row"].to_numpy()[cfg_row]
    asked = fitting["method"].isin(request.methods).to_numpy()[cfg_row]
    host_ok = _host_checks(sc, fitting, priced, asked, rejections) & _recipe(fitting, cfg_row, host_ok_asked=asked,
                                                                            request=request, rejections=rejections)
    is_spot = priced["spot"].to_numpy(bool)[offer_row]
    usable = host_ok & asked
    sel = usable & ~is_spot
    cost, hours = sc["cost_rank"].to_numpy(), sc["hours_rank"].to_numpy()  # one quantile for every row (--risk)
    tight = fitting["tight"].to_numpy(bool)[cfg_row]
    over, late = _over_and_late(cost, hours, sel, request, rejections)
    meets = sel & ~over & ~late
    tie = offer_row * (len(configs) + 1) + sc["row"].to_numpy()  # deterministic ties
    total = ranking.total(cost, hours, request.time_value)  # time has a value: cost + hours x --time-value
    primary = (tie, hours, total) if request.sort is RankBy.COST else (tie, cost, hours)

    notice, met = "", True
    if sel.any() and not meets.any():
        met = False
        notice = notices.unmet(request.budget is not None, request.deadline_hours is not None, request.risk)
        pool = np.flatnonzero(sel)
        ranked = pool[np.lexsort((tie[pool], hours[pool], cost[pool], _violation(cost, hours, request)[pool]))]
    else:
        pool = np.flatnonzero(meets)
        ranked = pool[np.lexsort(tuple(k[pool] for k in primary))]
    order = pool[np.lexsort(tuple(k[pool] for k in primary))]
    identity = ranking.offer_identity(priced)[offer_row]
    if request.distinct and len(ranked):
        ranked = ranking.one_per_offer(ranked, identity, fitting, cfg_row)
    why: dict = {}
    rule: dict = {}
    if met and len(ranked):
        ranked, why, rule = _near_ties(ranked, sc, fitting, priced, request, cost, hours, total)
    if not request.allow_stale:  # a stale price never heads the plan while a fresh one is ranked
        ranked = fresh_first(ranked, priced, offer_row, why, rule)
    if not sel.any():
        met = False
        reasons = rejections.beyond_offers() or rejections.to_list()
        notice = notices.nothing_fits(reasons[0].reason if reasons else None) if len(priced) else notices.NO_OFFER
    pareto = _pareto(pool, tie, tight, cost, hours)
    # best per GPU / provider follow the final ranking (near-tie preferences included), then the rest
    final = np.concatenate((ranked, order[~np.isin(order, ranked)])) if len(ranked) else order
    best = {column: _best_per(priced[column], offer_row, final) for column in ("gpu_model", "provider")}
    baseline = _baseline(fitting, cfg_row, host_ok & ~is_spot, tie, cost, sc, request)
    undated_spot = ranking.undated_spot(priced)[offer_row]
    spot_best = _best_spot(usable & is_spot & ~over & ~late & ~undated_spot,  # a spot price dated on its own
                           primary, ranking.spot_suspect(priced)[offer_row])
    undated_spot_rows = int(len(np.unique(offer_row[usable & is_spot & undated_spot])))
    return Selection(scored=sc, fitting=fitting, ranked=ranked, pareto=pareto, best=best, baseline=baseline,
                     notice=notice, rejections=rejections, n_scored=int(sel.sum()), n_meeting=int(meets.sum()),
                     spot=spot_best, constraints_met=met, why=why, rule=rule, undated_spot=undated_spot_rows)


def _over_and_late(cost, hours, sel, request: PlanRequest, rejections: Rejections):
    """Masks of candidates over --budget and past --deadline at the ranking quantile, each counted as rejected."""
    import numpy as np

    over = cost > request.budget if request.budget is not None else np.zeros(len(cost), bool)
    late = hours > request.deadline_hours if request.deadline_hours is not None else np.zeros(len(cost), bool)
    if request.budget is not None:
        rejections.add(f"over the budget of ${request.budget:,.0f} at {request.risk}", int((over & sel).sum()))
    if request.deadline_hours is not None:
        rejections.add(f"misses the deadline of {request.deadline_hours:g} h at {request.risk}", int((late & sel).sum()))
    return over, late


def _near_ties(ranked, sc, fitting, priced, request: PlanRequest, cost, hours, total):
    """The ranking with near-ties settled by the tie-breakers and risky rows giving way to safe ones within the risk
    margin (ranking.prefer_in_near_ties), on the --sort key (the total with the time value, or the hours)."""
    cfg_row = sc["cfg_row"].to_numpy()
    by_cost = request.sort is RankBy.COST
    prefs = ranking.preferences(sc, fitting, priced, request)
    return ranking.prefer_in_near_ties(ranked, total if by_cost else hours, prefs, max(request.top, 10),
                                       fitting["gpus"].to_numpy()[cfg_row], fitting["nodes"].to_numpy()[cfg_row],
                                       "cheaper" if by_cost else "faster", hours if by_cost else None,
                                       ranking.risky(fitting, cfg_row), cost if by_cost else None)


# A faster option joins the Pareto front only when its wall time is at least this share below every cheaper
# option's: below it the printed hours tie (37 min against 37 min, $19.22 against $22.38 on the 8B plan) and the
# point would read as beaten on cost at equal time. Policy, not measurement; pareto_basis states it.
PARETO_MIN_GAIN_PCT = 1.0


def _pareto(pool, tie, tight, cost, hours):
    """The Pareto front of `pool` on the ranked figures: cheapest first, each at least PARETO_MIN_GAIN_PCT faster
    than every cheaper one."""
    import numpy as np

    by_cost = pool[np.lexsort((tie[pool], tight[pool], hours[pool], cost[pool]))]
    h = hours[by_cost]
    prev = np.concatenate(([np.inf], np.minimum.accumulate(h)[:-1])) if len(h) else h
    return by_cost[h < prev * (1 - PARETO_MIN_GAIN_PCT / 100)]


def _best_spot(mask, primary, suspect):
    """The best spot candidate by the ranking's keys, a plausible spot price first (one position, or none)."""
    import numpy as np

    spot_pool = np.flatnonzero(mask)
    spot_pool = spot_pool[np.lexsort(tuple(k[spot_pool] for k in primary))]
    plausible = spot_pool[~suspect[spot_pool]]
    return (plausible if len(plausible) else spot_pool)[:1]


def _recipe(fitting, cfg_row, host_ok_asked, request: PlanRequest, rejections: Rejections):
    """Mask of candidates that keep the requested global batch exactly; when none can (no GPU count
    that fits divides it), every candidate stays and says the batch it runs (findings.candidate_findings)."""
    import numpy as np

    exact = fitting["global_batch"].to_numpy()[cfg_row] == request.sequences_per_step
    if not (exact & host_ok_asked).any():
        return np.ones(len(exact), bool)
    rejections.add(f"would change the requested global batch of {request.sequences_per_step} (the GPU count does not "
                   "divide it) while runs that keep it exist", int((~exact & host_ok_asked).sum()))
    return exact


def _best_per(column, offer_row, order) -> list:
    import numpy as np
    import pandas as pd

    codes = pd.factorize(column)[0]  # integers: np.unique on strings is slow
    _, first = np.unique(codes[offer_row[order]], return_index=True)
    return [order[j] for j in sorted(first)]


BASELINE_METHODS = ("full", "lora", "qlora")  # the naive baseline's method: the first of these the user allowed


def baseline_method(request: PlanRequest) -> str:
    """Full fine-tuning when allowed, else the plainest method the user allowed: like with like."""
    return next(m for m in BASELINE_METHODS if m in request.methods)


def _baseline(fitting, cfg_row, ok, tie, cost, sc, request: PlanRequest):
    """The naive baseline: the baseline method, on demand, on the cheapest instance where it fits."""
    import numpy as np

    method = (fitting["method"] == baseline_method(request)).to_numpy()[cfg_row]
    base = np.flatnonzero(ok & method)
    return base[np.lexsort((tie[base], cost[base], sc["price_hour"].to_numpy()[base]))][:1]


def _violation(cost, hours, request: PlanRequest):
    """How far each candidate misses the budget and the deadline, as summed fractions."""
    import numpy as np

    viol = np.zeros(len(cost))
    if request.budget is not None:
        viol += np.maximum(cost / request.budget - 1, 0)
    if request.deadline_hours is not None:
        viol += np.maximum(hours / request.deadline_hours - 1, 0)
    return viol
