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
from advisor.planner.select import Selection, config_frame, reject_nofit, select
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
    rejections = Rejections()

    if offers is None:
        offers = _offers.load(request)
    off = _offers.prepare(offers, request, rejections)
    priced = _offers.priced_tiers(off, request.spot)

    eval_methods = tuple(dict.fromkeys(request.methods + ("full",)))  # full is always evaluated for the baseline
    hardware = off[["gpu_model", "gpu_count"]].drop_duplicates().itertuples(index=False)
    evaluator = Evaluator(engine, request)
    configs = evaluator.configs(hardware, eval_methods)

    counts = engine.counts(_lora_probe())
    weights_gb = counts.params_total * 2 / 1e9
    cfg = config_frame(configs, request, weights_gb, counts.adapters_total * 4 / 1e9)
    priced_counts = priced.groupby(["gpu_model", "gpu_count"]).size().to_dict()
    reject_nofit(cfg, configs, off, priced_counts, request, rejections)

    chosen = _settled_selection(cfg, configs, priced, request, rejections, evaluator)
    return assemble(chosen, configs, priced, request, engine, counts, offers)


def _lora_probe():
    from advisor.stacks import Stack

    return Stack(method="lora")


def _settled_selection(cfg, configs: list[Config], priced, request: PlanRequest, rejections: Rejections,
                       evaluator: Evaluator) -> Selection:
    """Select; check every shown candidate's micro-batch exactly; select again until none changes."""
    for _ in range(SETTLE_ROUNDS):
        chosen = select(cfg, configs, priced, request, rejections.copy())
        rows = {int(r) for r in chosen.scored["row"].to_numpy()[chosen.shown(request.top)]}
        if all([evaluator.settle(configs[r]) for r in sorted(rows)]):
            return chosen
    for c in configs:  # pragma: no cover - only if the estimator is far from affine in the micro-batch
        if c.micro_batch > 0:
            evaluator.settle(c)
    return select(cfg, configs, priced, request, rejections.copy())


def assemble(chosen: Selection, configs: list[Config], priced, request: PlanRequest, engine: Engine, counts,
             offers) -> Plan:
    """The typed Plan: candidates in rank order, Pareto front, best per GPU/provider, baseline."""
    sc = chosen.scored
    position = {int(i): k + 1 for k, i in enumerate(chosen.ranked)}  # place in the full ranking (0: outside)

    def candidate(i, rank: int | None = None) -> Candidate:
        r = sc.iloc[int(i)]
        o = priced.iloc[int(r["offer_row"])]
        cfg = configs[int(r["row"])]
        return to_candidate(cfg, o, r, request, position.get(int(i), 0) if rank is None else rank)

    candidates = [candidate(i, k + 1) for k, i in enumerate(chosen.ranked[:request.top])]
    pareto = [candidate(i) for i in chosen.pareto]
    best_gpu = {c.gpu_model: c for c in (candidate(i) for i in chosen.best["gpu_model"])}
    best_provider = {c.provider: c for c in (candidate(i) for i in chosen.best["provider"])}
    baseline = candidate(chosen.baseline[0]) if len(chosen.baseline) else None
    saving = (baseline.cost_usd - candidates[0].cost_usd) if (baseline and candidates) else None

    b = billing()
    setup = b["setup"]
    assumptions = {
        "headroom": request.headroom, "mfu_override": request.mfu, "sort": request.sort,
        "candidates_scored": chosen.n_scored, "candidates_meeting_constraints": chosen.n_meeting,
        "configs_evaluated": len(configs),
        "memory_estimates": engine.estimates_made,
        "setup_hours": request.setup_hours if request.setup_hours is not None else
        f"{setup['provisioning_hours']} h provisioning + download at {setup['download_gb_s']} GB/s "
        f"+ checkpoint at {setup['checkpoint_write_gb_s']} GB/s",
        "spot_interruptions_per_hour": (b["spot"]["interruptions_per_hour"] if request.interruptions_per_hour is None
                                        else request.interruptions_per_hour),
        "checkpoint_interval_hours": (b["spot"]["checkpoint_interval_hours"] if request.checkpoint_interval_hours
                                      is None else request.checkpoint_interval_hours),
        "billing": "per provider, advisor/data/billing.json", "currency": "USD",
        "time_model": "advisor/throughput.py + advisor/data/mfu.json",
        "precision_rule": "bf16 where supported; fp16 (LoRA/QLoRA) or amp-fp16 (full) on T4/V100",
        "optimizers": ", ".join(_configs.OPTIMIZERS), "lora_rank": 16,
    }
    workload = {"tokens": int(request.tokens), "epochs": request.epochs, "train_tokens": int(request.train_tokens),
                "seq_len": request.seq_len, "global_batch": request.sequences_per_step,
                "global_batch_tokens": request.sequences_per_step * request.seq_len,
                "methods": ",".join(request.methods), "budget_usd": request.budget,
                "deadline_hours": request.deadline_hours, "max_nodes": request.max_nodes,
                "max_gpus": request.max_gpus, "spot": request.spot}
    warnings = list(getattr(offers, "attrs", {}).get("problems", []))[:20]
    spec = engine.spec
    info = ModelInfo(name=spec.name, family=spec.family, source=spec.source, params_total=int(counts.params_total),
                     params_trainable=int(counts.params_total), params_active=int(counts.matmul_active))
    return Plan(model=info, workload=workload, candidates=candidates, pareto=pareto, baseline=baseline,
                best_per_gpu=best_gpu, best_per_provider=best_provider, rejected=chosen.rejections.to_list(),
                assumptions=assumptions, warnings=warnings, command=request.command,
                generated_at=datetime.now(UTC).isoformat(timespec="seconds"), saving_vs_baseline_usd=saving,
                notice=chosen.notice)


def to_candidate(cfg: Config, o, r, request: PlanRequest, rank: int) -> Candidate:
    """One priced config as a typed Candidate (offer row `o`, scored row `r`)."""
    import numpy as np

    stack, nodes = cfg.stack, cfg.nodes
    stale = o.get("stale", False)
    t = cfg.timing
    cost_spot = None if np.isnan(r["cost_spot_usd"]) else float(r["cost_spot_usd"])
    spot_price = o.get("spot_price_hour")
    return Candidate(
        rank=rank,
        offer=Offer(provider=str(o["provider"]), region=str(o["region"]), instance_type=str(o["instance_type"]),
                    gpu_model=str(o["gpu_model"]), gpu_count=int(o["gpu_count"]), price_hour=float(o["price_hour"]),
                    spot_price_hour=None if spot_price is None or spot_price != spot_price else float(spot_price),
                    source=str(o.get("source", "")), price_date=str(o.get("fetched_at", ""))[:10],
                    stale=bool(stale) if isinstance(stale, (bool, np.bool_)) else False,
                    interconnect=str(o.get("interconnect") or ""), notes=str(o.get("notes") or "")),
        nodes=nodes,
        network_gbps=t["internode_gbps"] or None,
        stack=stack,
        shape=cfg.shape(request.seq_len),
        fit=MemoryFit(peak_bytes=int(cfg.peak), usable_bytes=int(cfg.gpu.usable_bytes), limit_bytes=int(cfg.limit)),
        memory=cfg.breakdown,
        timing=Timing(tokens_per_sec=float(t["tokens_per_sec"]), mfu=float(t["mfu"]), step_seconds=float(t["step_seconds"]),
                      train_hours=float(cfg.train_hours), hours=float(r["hours"])),
        cost=Cost(spot=bool(o["spot"]), price_hour=float(o["price"]) * nodes, usd=float(r["cost_usd"]),
                  on_demand_usd=float(r["cost_on_demand_usd"]), spot_usd=cost_spot,
                  usd_per_m_tokens=float(r["cost_usd"]) / (request.train_tokens / 1e6)),
        label=stack.label() + (f" · {nodes} nodes" if nodes > 1 else ""),
    )
