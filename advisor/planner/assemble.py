"""The typed Plan from a selection: one `Candidate` per shown row (it only copies what the stages
computed), the views that name them, the plan's workload and assumptions, and the managed alternatives."""

from __future__ import annotations

from datetime import UTC, datetime

from advisor import explain
from advisor.estimate.engine import Engine
from advisor.estimate.throughput import band
from advisor.explain import assumptions as explain_assumptions
from advisor.planner import configs as _configs, ranking
from advisor.planner.configs import TIGHT_FRACTION, Config
from advisor.planner.costing import billing
from advisor.planner.findings import candidate_findings, crossings, misses, placement, plan_findings
from advisor.planner.ranking import offer_identity
from advisor.planner.remedy import search as search_remedy
from advisor.planner.request import PlanRequest
from advisor.planner.select import PARETO_MIN_GAIN_PCT, Selection
from advisor.results import Candidate, Cost, MemoryFit, ModelInfo, Offer, Plan, Timing
from advisor.results.facts import Assumptions, Finding, FindingKind
from advisor.stacks import Stack
from advisor.units import BILLION, MILLION
from advisor.workload.measurements import measured_peak  # measured run: a measured peak above the estimate wins
from pricing import clock, geo
from pricing.cache import stale_days
from pricing.managed import alternatives


def _lora_probe(request: PlanRequest):
    lora = {k: v for k, v in request.pins.items() if k.startswith("lora_") or k in ("dora", "modules_to_save")}
    return Stack(method="lora", **lora)


def assemble(chosen: Selection, configs: list[Config], priced, request: PlanRequest, engine: Engine, counts,
             offers, off) -> Plan:
    """The typed Plan: candidates in rank order, Pareto front, best per GPU/provider, baseline,
    spot alternative, and the warnings a reader must see. One Candidate per scored row, however many
    views name it (the plan stores it once, advisor/results/plan_refs.py)."""
    sc = chosen.scored
    position = {int(i): k + 1 for k, i in enumerate(chosen.ranked)}  # place in the full ranking (0: outside)
    scored_row, offer_row = _rows(sc), _rows(priced)
    suspect = ranking.spot_suspect(priced)
    others = _other_names(chosen, priced)

    built: dict[int, Candidate] = {}

    def candidate(i) -> Candidate:
        if int(i) not in built:
            built[int(i)] = _candidate(i)
        return built[int(i)]

    def _candidate(i) -> Candidate:
        r = scored_row(int(i))
        o = offer_row(int(r["offer_row"]))
        cfg = configs[int(r["row"])]
        extra = [_why_note(chosen, int(i))] if int(i) in chosen.why else []
        if o["spot"] and suspect[int(r["offer_row"])]:
            extra.append(Finding(kind=FindingKind.SPOT_SUSPECT))
        names, regions = others.get(int(r["offer_row"]), ([], []))
        c = to_candidate(cfg, o, r, request, position.get(int(i), 0), engine.spec, extra, names, regions)
        c.tie_rule = chosen.rule.get(int(i), "")
        c.caveats = list(ranking.stack_caveats(cfg.gpu, cfg.stack))
        found = list(c.findings)
        if not c.offer.host_known:
            found.append(Finding(kind=FindingKind.HOST_UNKNOWN, figures={
                "ram_need_bytes": float(chosen.fitting["ram_need"].iat[int(r["cfg_row"])])}))
        if not chosen.constraints_met:
            found += misses(c.cost.usd_at_risk, c.timing.hours_at_risk, request)
        else:
            found += crossings(c, request)
        c.findings, c.notes = found, explain.candidate_notes(found)
        return c

    candidates = [candidate(i) for i in chosen.ranked[:request.top]]  # rank k + 1: their place in `position`
    pareto = [candidate(i) for i in chosen.pareto]
    best_gpu = {c.offer.gpu_model: c for c in (candidate(i) for i in chosen.best["gpu_model"])}
    best_provider = {c.offer.provider: c for c in (candidate(i) for i in chosen.best["provider"])}
    baseline = candidate(chosen.baseline[0]) if len(chosen.baseline) else None
    spot = candidate(chosen.spot[0]) if len(chosen.spot) else None
    saving = (baseline.cost.usd_at_risk - candidates[0].cost.usd_at_risk) if (
        baseline and candidates and chosen.constraints_met) else None  # at the ranking quantile
    remedy = search_remedy(request, candidates[0], None)[0] if candidates and not chosen.constraints_met else ""

    warnings = list(getattr(offers, "attrs", {}).get("problems", []))[:20]
    warnings += explain.disagreeing(getattr(offers, "attrs", {}).get("disagreements", []), candidates)
    found = plan_findings(chosen, candidates, request, off, spot, engine.spec)
    warnings += explain.warnings(found, candidates) + ([remedy] if remedy else [])
    spec = engine.spec
    top_stack = candidates[0].stack if candidates else _lora_probe(request).model_copy(
        update={"method": request.methods[0]})
    trainable = counts.params_total if top_stack.is_full else engine.counts(top_stack).adapters_total
    info = ModelInfo(name=spec.name, family=spec.family, source=spec.source, params_total=int(counts.params_total),
                     params_trainable=int(trainable), params_active=int(counts.matmul_active))
    return Plan(model=info, workload=_workload(request), candidates=candidates, pareto=pareto, baseline=baseline,
                best_per_gpu=best_gpu, best_per_provider=best_provider, spot_alternative=spot,
                rejected=chosen.rejections.to_list(), assumptions=_assumptions(chosen, configs, request, engine),
                warnings=warnings, findings=found, command=request.command, stale_days=stale_days(),
                generated_at=datetime.now(UTC).isoformat(timespec="seconds"), saving_vs_baseline_usd=saving,
                prices_as_of=_pinned_day(),
                notice=chosen.notice, constraints_met=chosen.constraints_met, remedy=remedy,
                ranking=ranking_basis(request, chosen.constraints_met),
                managed_alternatives=_managed(spec, counts, top_stack.method, request))


def _why_note(chosen: Selection, i: int) -> Finding:
    """The finding of a row a tie rule promoted; for the risk margin, completed with what made the row it passed
    risky (tight, uncalibrated, a stack caveat) in place of that row's position."""
    why = chosen.why[i]
    if why.kind is not FindingKind.SAFE_OVER_RISKY:
        return why
    f = chosen.fitting
    cfg_row = int(chosen.scored["cfg_row"].iat[int(why["beaten"])])
    figures = {k: v for k, v in why.figures.items() if k != "beaten"}
    return Finding(kind=FindingKind.SAFE_OVER_RISKY, figures={
        **figures, "tight": bool(f["tight"].iat[cfg_row]), "uncalibrated": not bool(f["calibrated"].iat[cfg_row]),
        "stack_caveat": bool(f["caveats"].iat[cfg_row])})


def ranking_basis(request: PlanRequest, constraints_met: bool = True) -> dict:
    """What the ranking used, for every reader of the plan (table header, report, web page): the quantile, the
    key (`total` = cost + hours x time value, `cost` with --time-value 0, or `hours`), the time value and its
    source, and, when nothing meets --budget/--deadline, that rows are ordered by how far they miss."""
    tv = float(request.time_value)
    key = "hours" if request.sort == "time" else ("total" if tv else "cost")
    out = {"quantile": request.risk, "sort": request.sort, "key": key, "time_value_usd_per_hour": tv,
           "time_value_source": (explain.TIME_VALUE_SOURCE if tv == ranking.DEFAULT_TIME_VALUE else "--time-value"),
           "near_tie_pct": ranking.NEAR_TIE_PCT, "tie_breakers": list(ranking.TIE_BREAKERS),
           "risk_margin_pct": ranking.RISK_MARGIN_PCT, "band": "p10-p90",
           "pareto_min_gain_pct": PARETO_MIN_GAIN_PCT}
    if not constraints_met:
        out["order"] = "miss"  # closest first: by how far each row misses the budget / deadline (select._violation)
    return out


def _managed(spec, counts, method: str, request: PlanRequest) -> list:
    """Per-token services that list this model for the method (for QLoRA, their LoRA: the same adapter
    comes back), priced for the plan's tokens x epochs (pricing/managed.py)."""
    o = request.objective
    tokens = request.tokens
    if o.kind == "dpo":  # a DPO service bills the pairs' file tokens: prompt + chosen + rejected, not two rows
        prompt, response = o.split(request.seq_len)
        tokens = request.tokens / (2 * request.seq_len) * (prompt + 2 * response)
    for m in (method, "lora") if method == "qlora" else (method,):
        found = alternatives(spec.name, counts.params_total / BILLION, m, tokens, request.epochs, objective=o.kind)
        if found:
            return found
    return []


def _other_names(chosen: Selection, priced) -> dict[int, tuple[list[str], list[str]]]:
    """Per offer row shown: the other instance names and the other regions of the same offer
    (ranking.offer_identity)."""
    ident = offer_identity(priced)
    shown = {int(o) for o in chosen.scored["offer_row"].to_numpy()[chosen.shown(10_000)]}
    groups: dict[int, list[int]] = {}
    for row, key in enumerate(ident):
        groups.setdefault(int(key), []).append(row)
    names, regions = priced["instance_type"].astype(str).to_numpy(), priced["region"].astype(str).to_numpy()
    out = {}
    for row in shown:
        mates = [m for m in groups[int(ident[row])] if m != row]
        out[row] = (sorted({f"{names[m]} ({regions[m]})" for m in mates if names[m] != names[row]})[:20],
                    sorted({regions[m] for m in mates if names[m] == names[row] and regions[m] != regions[row]}))
    return out


def _rows(frame):
    """Row i of a DataFrame as a dict of its cells (DataFrame.iloc builds a Series per call, a
    hundred times slower; a plan reads about fifty rows)."""
    columns = {name: frame[name].to_numpy() for name in frame.columns}
    return lambda i: {name: values[i] for name, values in columns.items()}


def _workload(request: PlanRequest) -> dict:
    return {"tokens": int(request.tokens), "epochs": request.epochs, "train_tokens": int(request.train_tokens),
            "seq_len": request.seq_len, "global_batch": request.sequences_per_step,
            "global_batch_tokens": request.sequences_per_step * request.seq_len,
            "methods": ",".join(request.methods), "budget_usd": request.budget,
            "deadline_hours": request.deadline_hours, "max_nodes": request.max_nodes,
            "max_gpus": request.max_gpus, "spot": request.spot, "padded": request.padded,
            "pins": ", ".join(f"{k}={v}" for k, v in request.pins.items()) or None, **_objective_workload(request)}


def _objective_workload(request: PlanRequest) -> dict:
    """The workload in the objective's own units (DPO pairs, GRPO prompts) beside its tokens."""
    o = request.objective
    if o.is_sft:
        return {}
    out = {"objective": o.kind, "objective_settings": o.label("lora" if "full" not in request.methods else "full")}
    if o.kind == "dpo":
        out["pairs"] = int(request.tokens // (2 * request.seq_len))
    else:
        out.update(prompts=int(request.tokens // (o.num_generations * request.seq_len)),
                   num_generations=o.num_generations, generation="searched" if request.vllm_searched else o.vllm)
    return out


def _assumptions(chosen: Selection, configs: list[Config], request: PlanRequest, engine: Engine) -> Assumptions:
    """The counts and settings the plan assumed, with the assumption wording of advisor/explain/assumptions.py."""
    b = billing()
    rel = b["reliability"]
    words = explain_assumptions.words(b["setup"], b["checkpoint"], request.checkpoint_interval_hours, request.spot,
                                      request.allow_stale, TIGHT_FRACTION)
    return Assumptions(
        headroom=request.headroom, mfu_override=request.mfu, sort=request.sort, risk=request.risk,
        hours_band=words["hours_band"], candidates_scored=chosen.n_scored,
        candidates_meeting_constraints=chosen.n_meeting, configs_evaluated=len(configs),
        memory_estimates=engine.estimates_made,
        setup_hours=request.setup_hours if request.setup_hours is not None else words["setup_hours"],
        checkpoints=words["checkpoints"],
        hardware_interruptions_per_gpu_hour=rel["hardware_interruptions_per_gpu_hour"],
        spot_interruptions_per_instance_hour=(rel["spot_interruptions_per_instance_hour"]
                                              if request.interruptions_per_hour is None
                                              else request.interruptions_per_hour),
        pricing=words["pricing"], stale_prices=words["stale_prices"], billing=words["billing"], currency="USD",
        time_model=words["time_model"], precision_rule=words["precision_rule"], tight_band=words["tight_band"],
        optimizers=request.pins.get("optimizer") or ", ".join(_configs.OPTIMIZERS), multi_node=words["multi_node"],
    )


def _offer(o, also_named: list[str], also_regions: list[str]) -> Offer:
    import numpy as np

    stale = o.get("stale", False)
    spot_price = o.get("spot_price_hour")
    also = o.get("also_in")
    ram, cpus = o.get("ram_gb"), o.get("vcpus")
    known = isinstance(ram, (int, float, np.number)) and ram == ram  # host RAM listed (what loading needs)
    cpus_known = isinstance(cpus, (int, float, np.number)) and cpus == cpus
    return Offer(provider=str(o["provider"]), region=str(o["region"]), instance_type=str(o["instance_type"]),
                 gpu_model=str(o["gpu_model"]), gpu_count=int(o["gpu_count"]), price_hour=float(o["price_hour"]),
                 spot_price_hour=None if spot_price is None or spot_price != spot_price else float(spot_price),
                 source=str(o.get("source", "")), price_date=str(o.get("price_date") or "date unknown")[:40],
                 spot_price_date=str(o.get("spot_price_date") or "")[:40] if spot_price == spot_price else "",
                 stale=bool(stale) if isinstance(stale, (bool, np.bool_)) else False,
                 interconnect=str(o.get("interconnect") or ""), notes=str(o.get("notes") or ""),
                 also_in=list(dict.fromkeys((list(also) if isinstance(also, (list, tuple)) else []) + also_regions)),
                 also_named=also_named, country=geo.country_of(str(o["region"])),
                 country_name=geo.countries().get(geo.country_of(str(o["region"])), ("", ""))[0], host_known=known,
                 ram_gb=float(ram) if known else None, vcpus=int(cpus) if cpus_known else None)


def to_candidate(cfg: Config, o, r, request: PlanRequest, rank: int, spec=None, extra_findings=(),
                 also_named=(), also_regions=()) -> Candidate:
    """One priced config as a typed Candidate (offer row `o`, scored row `r`): it only copies what
    the evaluator (StepTime) and costing (the scored row) computed."""
    import numpy as np

    stack, nodes, t = cfg.stack, cfg.nodes, cfg.timed
    step = t.step
    cost_spot = None if np.isnan(r["cost_spot_usd"]) else float(r["cost_spot_usd"])
    network = request.network_gbps if request.network_gbps is not None else cfg.fabric_gbps
    usd = float(r["cost_usd"])

    found = candidate_findings(cfg, request, spec, str(o.get("notes") or "")) + placement(stack, cfg.per_node, nodes) + list(extra_findings)
    peak, tight = measured_peak(int(cfg.fitted.peak), int(cfg.limit), cfg.fitted.tight, step, TIGHT_FRACTION)
    return Candidate(
        rank=rank, offer=_offer(o, list(also_named), list(also_regions)), nodes=nodes, network_gbps=network if nodes > 1 else None,
        stack=stack, shape=cfg.shape(request.seq_len, request.padded),
        fit=MemoryFit(peak_bytes=peak, usable_bytes=int(cfg.gpu.usable_bytes), limit_bytes=int(cfg.limit),
                      tight=tight),
        memory=cfg.fitted.breakdown,
        timing=Timing(tokens_per_sec=step.tokens_per_sec, mfu=step.mfu,
                      step_seconds=step.step_seconds, train_hours=float(r["train_hours"]),
                      setup_hours=float(r["setup_hours"]), checkpoint_hours=float(r["checkpoint_hours"]),
                      checkpoint_interval_hours=float(r["checkpoint_interval_hours"]),
                      interruption_hours=float(r["interruption_hours"]), hours=float(r["hours"]),
                      hours_low=float(r["hours_p10"]), hours_high=float(r["hours_p90"]),
                      hours_at_risk=float(r["hours_rank"]), risk_quantile=t.rank_quantile,
                      calibrated=t.calibrated, band_basis=_band_basis(cfg), global_batch=t.global_batch,
                      generation_hours=float(r["train_hours"]) * step.generation_share()),
        cost=Cost(spot=bool(o["spot"]), price_hour=float(o["price"]) * nodes, usd=usd,
                  on_demand_usd=float(r["cost_on_demand_usd"]), spot_usd=cost_spot,
                  usd_per_m_tokens=usd / (request.train_tokens / MILLION), usd_low=float(r["cost_p10"]),
                  usd_high=float(r["cost_p90"]), usd_at_risk=float(r["cost_rank"])),
        label=stack.label() + (f" · {nodes} nodes" if nodes > 1 else ""),
        findings=found, notes=explain.candidate_notes(found),
    )


def _band_basis(cfg: Config) -> str:
    # a measured step (advisor/workload/measurements.py) carries its own basis, preferred when present
    return str(cfg.timed.step.band_basis or band(cfg.gpu, cfg.stack)[2])


def _pinned_day() -> str:
    """GPU_ADVISOR_TODAY as the moment the offers' ages were measured, for the report to age them alike."""
    day = clock.pinned()
    return day.isoformat(timespec="seconds") if day else ""
