"""Planner: every offer × node count × technique stack, priced for the whole run, ranked.

`plan(request: PlanRequest) -> Plan` runs named stages, each a function of typed inputs:

1. offers      (planner.offers)  sheets -> usable instance rows, filters, price tiers
2. configs     (planner.configs) distinct GPU model × GPUs × nodes × stack
3. memory fits (planner.configs) the engine's micro-batch for each config
4. timing      (planner.configs) the engine's throughput at that micro-batch and accumulation
5. pricing     (planner.costing) hours and cost of each offer × config, billed per provider
6. selection   (planner.select)  constraints, ranking, Pareto front, best-per, baseline
7. rejections  (planner.rejections) why every ruled-out option was ruled out
Everything shown is then checked exactly with the engine (`Evaluator.settle`) and re-ranked if
a predicted micro-batch shrank; `assemble` turns positions into typed `Candidate`s.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from advisor.engine import Engine
from advisor.modelspec import ModelSpec
from advisor.planner import configs as _configs
from advisor.planner import offers as _offers
from advisor.planner.costing import billing, score
from advisor.planner.configs import Config, Evaluator, stacks_for
from advisor.planner.rejections import Rejections
from advisor.planner.request import PlanRequest
from advisor.planner.configs import TIGHT_FRACTION
from advisor.planner.select import Selection, config_frame, misses, reject_nofit, select
from advisor.results import Candidate, Cost, MemoryFit, ModelInfo, Offer, Plan, Timing

__all__ = ["PlanRequest", "plan", "stacks_for", "billing", "score"]
SETTLE_ROUNDS = 20


def plan(request: PlanRequest | ModelSpec | str, *, offers=None, estimator=None, **fields: Any) -> Plan:
    """Rank every offer × nodes × stack for the request (or for `model` with the request's fields
    as keyword arguments). `offers`: a price DataFrame instead of the loaded sheets; `estimator`:
    a stand-in memory function (model, stack, shape) -> MemoryEstimate."""
    if not isinstance(request, PlanRequest):
        request = PlanRequest(model=request, **fields)
    spec = request.spec()
    engine = Engine(spec, memory_fn=estimator) if estimator else Engine.of(spec)
    _check_pins(engine, request)
    rejections = Rejections()

    if offers is None:
        offers = _offers.load(request)
    off = _offers.prepare(offers, request, rejections)
    priced = _offers.priced_tiers(off, request.spot)

    eval_methods = tuple(dict.fromkeys(request.methods + ("full",)))  # full is always evaluated for the baseline
    hardware = off[["gpu_model", "gpu_count", "fabric_gbps"]].drop_duplicates().itertuples(index=False)
    evaluator = Evaluator(engine, request)
    configs = evaluator.configs(hardware, eval_methods)
    if request.max_nodes > 1:
        single = off["fabric_gbps"].isna()
        rejections.add("multi-node: no inter-node fabric known for the instance type (pricing/data/fabrics.csv); "
                       "planned on one node only", int(single.sum()), _offers._examples(off.loc[single]))

    counts = engine.counts(_lora_probe(request))
    weights_gb = counts.params_total * 2 / 1e9
    cfg = config_frame(configs, request, weights_gb, counts.adapters_total * 4 / 1e9)
    priced_counts = priced.groupby(["gpu_model", "gpu_count"]).size().to_dict()
    reject_nofit(cfg, configs, off, priced_counts, request, rejections)

    chosen = _settled_selection(cfg, configs, priced, request, rejections, evaluator)
    return assemble(chosen, configs, priced, request, engine, counts, offers, off)


def _lora_probe(request: PlanRequest):
    from advisor.stacks import Stack

    lora = {k: v for k, v in request.pins.items() if k.startswith("lora_") or k in ("dora", "modules_to_save")}
    return Stack(method="lora", **lora)


def _check_pins(engine: Engine, request: PlanRequest) -> None:
    """Refuse pins this model cannot run (an attention kernel transformers lacks for it, LoRA
    targets it has not) before any search, with the estimator's own sentence."""
    from advisor.stacks import Stack

    pins = request.pins
    if "attention" in pins or any(k.startswith("lora_") for k in pins):
        method = next((m for m in request.methods if m != "full"), "full")
        fields = {k: v for k, v in pins.items() if k not in ("sharding", "offload", "precision")}
        engine.check(Stack(method=method, **fields))


def _settled_selection(cfg, configs: list[Config], priced, request: PlanRequest, rejections: Rejections,
                       evaluator: Evaluator) -> Selection:
    """Select; check every shown candidate's micro-batch exactly; select again until none changes."""
    for rounds in range(SETTLE_ROUNDS):
        chosen = select(cfg, configs, priced, request, rejections.copy())
        rows = {int(r) for r in chosen.scored["row"].to_numpy()[chosen.shown(request.top)]}
        if all([evaluator.settle(configs[r]) for r in sorted(rows)]):
            return chosen
    for c in configs:  # pragma: no cover - only if the estimator is far from affine in the micro-batch
        if c.max_micro_batch > 0:
            evaluator.settle(c)
    return select(cfg, configs, priced, request, rejections.copy())


def assemble(chosen: Selection, configs: list[Config], priced, request: PlanRequest, engine: Engine, counts,
             offers, off) -> Plan:
    """The typed Plan: candidates in rank order, Pareto front, best per GPU/provider, baseline,
    spot alternative, and the warnings a reader must see."""
    from pricing.cache import stale_days

    sc = chosen.scored
    position = {int(i): k + 1 for k, i in enumerate(chosen.ranked)}  # place in the full ranking (0: outside)
    scored_row, offer_row = _rows(sc), _rows(priced)

    def candidate(i, rank: int | None = None) -> Candidate:
        r = scored_row(int(i))
        o = offer_row(int(r["offer_row"]))
        cfg = configs[int(r["row"])]
        c = to_candidate(cfg, o, r, request, position.get(int(i), 0) if rank is None else rank)
        if not chosen.constraints_met:
            c.notes.extend(misses(c.cost_usd, c.hours, request))
        return c

    candidates = [candidate(i, k + 1) for k, i in enumerate(chosen.ranked[:request.top])]
    pareto = [candidate(i) for i in chosen.pareto]
    best_gpu = {c.gpu_model: c for c in (candidate(i) for i in chosen.best["gpu_model"])}
    best_provider = {c.provider: c for c in (candidate(i) for i in chosen.best["provider"])}
    baseline = candidate(chosen.baseline[0]) if len(chosen.baseline) else None
    spot = candidate(chosen.spot[0]) if len(chosen.spot) else None
    saving = (baseline.cost_usd - candidates[0].cost_usd) if (baseline and candidates) else None

    warnings = list(getattr(offers, "attrs", {}).get("problems", []))[:20]
    warnings += _warnings(chosen, candidates, request, off, spot)
    spec = engine.spec
    info = ModelInfo(name=spec.name, family=spec.family, source=spec.source, params_total=int(counts.params_total),
                     params_trainable=int(counts.params_total), params_active=int(counts.matmul_active))
    return Plan(model=info, workload=_workload(request), candidates=candidates, pareto=pareto, baseline=baseline,
                best_per_gpu=best_gpu, best_per_provider=best_provider, spot_alternative=spot,
                rejected=chosen.rejections.to_list(), assumptions=_assumptions(chosen, configs, request, engine),
                warnings=warnings, command=request.command, stale_days=stale_days(),
                generated_at=datetime.now(UTC).isoformat(timespec="seconds"), saving_vs_baseline_usd=saving,
                notice=chosen.notice, constraints_met=chosen.constraints_met)


def _rows(frame):
    """Row i of a DataFrame as a dict of its cells (DataFrame.iloc builds a Series per call, a
    hundred times slower; a plan reads about fifty rows)."""
    columns = {name: frame[name].to_numpy() for name in frame.columns}
    return lambda i: {name: values[i] for name, values in columns.items()}


def _warnings(chosen: Selection, candidates: list[Candidate], request: PlanRequest, off, spot) -> list[str]:
    out = []
    if not chosen.constraints_met and chosen.notice.startswith("No candidate meets"):
        for r in chosen.rejections.to_list():
            if r.reason.startswith(("over the budget", "misses the deadline")):
                out.append(f"{r.count:,} options ruled out: {r.reason}.")
        if candidates:
            out.append(f"The closest, {candidates[0].provider} {candidates[0].instance_type}: "
                       + "; ".join(candidates[0].notes[-2:]) + ".")
    if len(off) and off["stale"].fillna(False).astype(bool).all():
        out.append("Every matching price is stale (old catalog generation or older than the threshold): refresh "
                   "with `gpu-advisor prices refresh` or give your own sheet with --prices.")
    if candidates and candidates[0].timing.global_batch != request.sequences_per_step:
        c = candidates[0]
        out.append(f"The top pick runs {c.timing.global_batch} sequences per step, not {request.sequences_per_step}: "
                   f"{c.gpu_count * c.nodes} GPUs do not divide it.")
    if candidates and candidates[0].fit.tight:
        out.append("The top pick is within the estimator's measured error band of its GPU memory limit (tight).")
    if request.spot and spot is None:
        out.append("--spot: no spot price among the matching offers.")
    return out


def _workload(request: PlanRequest) -> dict:
    return {"tokens": int(request.tokens), "epochs": request.epochs, "train_tokens": int(request.train_tokens),
            "seq_len": request.seq_len, "global_batch": request.sequences_per_step,
            "global_batch_tokens": request.sequences_per_step * request.seq_len,
            "methods": ",".join(request.methods), "budget_usd": request.budget,
            "deadline_hours": request.deadline_hours, "max_nodes": request.max_nodes,
            "max_gpus": request.max_gpus, "spot": request.spot, "padded": request.padded,
            "pins": ", ".join(f"{k}={v}" for k, v in request.pins.items()) or None}


def _assumptions(chosen: Selection, configs: list[Config], request: PlanRequest, engine: Engine) -> dict:
    b = billing()
    setup, ckpt, rel = b["setup"], b["checkpoint"], b["reliability"]
    return {
        "headroom": request.headroom, "mfu_override": request.mfu, "sort": request.sort, "risk": request.risk,
        "hours_band": "p10-p90 of the time model's held-out error for the GPU class and method "
                      "(benchmarks/results/time_calibration.md)",
        "candidates_scored": chosen.n_scored, "candidates_meeting_constraints": chosen.n_meeting,
        "configs_evaluated": len(configs), "memory_estimates": engine.estimates_made,
        "setup_hours": request.setup_hours if request.setup_hours is not None else
        f"{setup['provisioning_hours']} h provisioning + download at {setup['download_gb_s']} GB/s + final save",
        "checkpoints": (f"every {request.checkpoint_interval_hours:g} h" if request.checkpoint_interval_hours else
                        "Young's optimum interval sqrt(2 x write time x MTBF)")
        + f", written at {ckpt['write_gb_s_per_node']} GB/s per node",
        "hardware_interruptions_per_gpu_hour": rel["hardware_interruptions_per_gpu_hour"],
        "spot_interruptions_per_instance_hour": (rel["spot_interruptions_per_instance_hour"]
                                                 if request.interruptions_per_hour is None
                                                 else request.interruptions_per_hour),
        "pricing": "on-demand ranking" + ("; best spot option beside it" if request.spot else ""),
        "stale_prices": "ranked" if request.allow_stale else "left out while fresh offers exist",
        "billing": "per provider, advisor/data/billing.json", "currency": "USD",
        "time_model": "advisor/throughput.py + advisor/data/mfu.json",
        "precision_rule": "full: mixed precision with fp32 master weights (amp, or DeepSpeed bf16/fp16 mode); "
                          "LoRA/QLoRA: 16-bit frozen weights, fp32 adapters; fp16 where the GPU has no bf16",
        "tight_band": f"{TIGHT_FRACTION:.0%} of the limit (worst under-estimate on high-confidence measurements)",
        "optimizers": request.pins.get("optimizer") or ", ".join(_configs.OPTIMIZERS),
        "multi_node": "only over a known inter-node fabric (pricing/data/fabrics.csv or the sheet's cluster_gbps)",
    }


def to_candidate(cfg: Config, o, r, request: PlanRequest, rank: int) -> Candidate:
    """One priced config as a typed Candidate (offer row `o`, scored row `r`)."""
    import numpy as np

    stack, nodes = cfg.stack, cfg.nodes
    stale = o.get("stale", False)
    t = cfg.timing
    cost_spot = None if np.isnan(r["cost_spot_usd"]) else float(r["cost_spot_usd"])
    spot_price = o.get("spot_price_hour")
    network = request.network_gbps if request.network_gbps is not None else cfg.fabric_gbps
    also = o.get("also_in")
    hours, usd = float(r["hours"]), float(r["cost_usd"])
    return Candidate(
        rank=rank,
        offer=Offer(provider=str(o["provider"]), region=str(o["region"]), instance_type=str(o["instance_type"]),
                    gpu_model=str(o["gpu_model"]), gpu_count=int(o["gpu_count"]), price_hour=float(o["price_hour"]),
                    spot_price_hour=None if spot_price is None or spot_price != spot_price else float(spot_price),
                    source=str(o.get("source", "")), price_date=str(o.get("price_date") or o.get("fetched_at", ""))[:40],
                    stale=bool(stale) if isinstance(stale, (bool, np.bool_)) else False,
                    interconnect=str(o.get("interconnect") or ""), notes=str(o.get("notes") or ""),
                    also_in=list(also) if isinstance(also, (list, tuple)) else []),
        nodes=nodes,
        network_gbps=network if nodes > 1 else None,
        stack=stack,
        shape=cfg.shape(request.seq_len, request.padded),
        fit=MemoryFit(peak_bytes=int(cfg.peak), usable_bytes=int(cfg.gpu.usable_bytes), limit_bytes=int(cfg.limit),
                      tight=cfg.tight),
        memory=cfg.breakdown,
        timing=Timing(tokens_per_sec=float(t["tokens_per_sec"]), mfu=float(t["mfu"]), step_seconds=float(t["step_seconds"]),
                      train_hours=float(cfg.train_hours), checkpoint_hours=float(r["checkpoint_hours"]),
                      checkpoint_interval_hours=float(r["checkpoint_interval_hours"]),
                      interruption_hours=float(r["interruption_hours"]), hours=hours,
                      hours_low=hours + cfg.train_hours_low - cfg.train_hours,
                      hours_high=hours + cfg.train_hours_high - cfg.train_hours,
                      hours_at_risk=float(r.get("hours_at_risk", hours)), band_basis=_band_basis(cfg),
                      global_batch=cfg.global_batch),
        cost=Cost(spot=bool(o["spot"]), price_hour=float(o["price"]) * nodes, usd=usd,
                  on_demand_usd=float(r["cost_on_demand_usd"]), spot_usd=cost_spot,
                  usd_per_m_tokens=usd / (request.train_tokens / 1e6),
                  # cost scales with billed hours; the band and the risk figure scale it by the hours
                  usd_low=usd * (hours + cfg.train_hours_low - cfg.train_hours) / hours,
                  usd_high=usd * (hours + cfg.train_hours_high - cfg.train_hours) / hours,
                  usd_at_risk=float(r.get("cost_at_risk", usd))),
        label=stack.label() + (f" · {nodes} nodes" if nodes > 1 else ""),
        notes=_notes(cfg, request),
    )


def _band_basis(cfg: Config) -> str:
    from advisor.throughput import band

    return band(cfg.gpu, cfg.stack)[2]


def _notes(cfg: Config, request: PlanRequest) -> list[str]:
    """What this candidate trades away, in words."""
    st, out = cfg.stack, []
    if st.method == "full" and st.precision in ("bf16", "fp16") and not st.sharding.startswith("zero"):
        out.append(f"pure {st.precision} weights (no fp32 master copy): an update smaller than about 1/256 of a "
                   f"weight ({'8' if st.precision == 'bf16' else '11'} significand bits) rounds away, so with learning "
                   "rates near 1e-5 many updates are lost; mixed precision (--precision amp-bf16) avoids it")
    if cfg.tight:
        out.append(f"tight: peak within {TIGHT_FRACTION:.0%} of the memory limit, the estimator's measured error band")
    if cfg.global_batch != request.sequences_per_step:
        out.append(f"runs {cfg.global_batch} sequences per step instead of {request.sequences_per_step} "
                   f"({st.gpus} GPUs do not divide it)")
    return out
