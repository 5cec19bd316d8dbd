"""The planner's pipeline: `plan(request)` runs the stages advisor/planner/__init__.py lists, then checks
every shown row's micro-batch exactly and selects again until none changes, before `assemble` builds the
typed Plan."""

from __future__ import annotations

from typing import Any

from advisor import explain
from advisor.estimate.engine import Engine
from advisor.model.spec import ModelSpec
from advisor.planner import configs as _configs, offers as _offers, remedy
from advisor.planner.assemble import _lora_probe, assemble
from advisor.planner.configs import Config, Evaluator
from advisor.planner.rejections import Rejections
from advisor.planner.request import PlanRequest
from advisor.planner.select import Selection, config_frame, refresh, reject_nofit, select
from advisor.results import Plan
from advisor.stacks import Stack
from advisor.units import BYTES_16BIT, BYTES_FP32, GB

SETTLE_ROUNDS = 20


def plan(request: PlanRequest | ModelSpec | str, *, offers=None, estimator=None, search_remedies: bool = True,
         **fields: Any) -> Plan:
    """Rank every offer × nodes × stack for the request (or for `model` with the request's fields
    as keyword arguments). `offers`: a price DataFrame instead of the loaded sheets; `estimator`:
    a stand-in memory function (model, stack, shape) -> MemoryEstimate. When no candidate meets the
    budget or deadline, the remedy re-plans once per limit the user could lift (advisor.planner.remedy;
    `search_remedies=False`: only the closest candidate's figures)."""
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
    rejections.end_offer_stage()

    hardware = off[["gpu_model", "gpu_count", "fabric_gbps"]].drop_duplicates().itertuples(index=False)
    evaluator = Evaluator(engine, request)
    configs = evaluator.configs(hardware, request.methods, off.groupby(["gpu_model", "gpu_count"]).size().to_dict())
    for reason, (n, example) in evaluator.excluded.items():
        rejections.add(reason, n, example)
    configs, needless = _configs.drop_needless_8bit(configs, request)
    priced_counts = priced.groupby(["gpu_model", "gpu_count"]).size().to_dict()
    # counted like every other stack-level reason: once per priced offer the config would have joined
    rejections.add("8-bit AdamW variants left out: a standard-AdamW stack fits the same hardware (8-bit only "
                   "when pinned or when it is what makes the run fit)",
                   sum(priced_counts.get((c.gpu.name, c.per_node), 0) for c in needless))
    if request.max_nodes > 1:
        single = off["fabric_gbps"].isna()
        rejections.add("multi-node: no inter-node fabric known for the instance type (pricing/data/fabrics.csv); "
                       "planned on one node only", int(single.sum()), _offers._examples(off.loc[single]))

    counts = engine.counts(_lora_probe(request))
    weights_gb = counts.params_total * BYTES_16BIT / GB
    request_weights_gb = weights_gb  # the 16-bit checkpoint a node loads (host RAM rule)
    cfg = config_frame(configs, request, weights_gb, counts.adapters_total * BYTES_FP32 / GB)
    reject_nofit(cfg, configs, off, priced_counts, request, rejections)

    chosen = _settled_selection(cfg, configs, priced, request, rejections, evaluator, request_weights_gb)
    evaluator.save()
    result = assemble(chosen, configs, priced, request, engine, counts, offers, off)
    if search_remedies and result.remedy and result.candidates:
        loaded = offers

        def replan(relaxed: PlanRequest) -> Plan:
            return plan(relaxed, offers=loaded, estimator=estimator, search_remedies=False)

        text, runs = remedy.search(request, result.candidates[0], replan)
        result.warnings = [text if w == result.remedy else w for w in result.warnings]
        result.remedy = text
        result.assumptions = result.assumptions.model_copy(update={"remedy_plans": runs})
    elif search_remedies and result.constraints_met and result.candidates and (request.deadline_hours or request.budget):
        near, runs = remedy.near_misses(request, result.candidates[0], lambda relaxed: plan(
            relaxed, offers=offers, estimator=estimator, search_remedies=False))
        result.findings = list(result.findings) + near
        result.warnings += explain.warnings(near, result.candidates)
        result.assumptions = result.assumptions.model_copy(update={"near_miss_plans": runs})
    return result


def _check_pins(engine: Engine, request: PlanRequest) -> None:
    """Refuse pins this model cannot run (an attention kernel transformers lacks for it, LoRA
    targets it has not) before any search, with the estimator's own sentence."""
    pins = request.pins
    if "attention" in pins or any(k.startswith("lora_") for k in pins):
        method = next((m for m in request.methods if m != "full"), "full")
        fields = {k: v for k, v in pins.items() if k not in ("sharding", "offload", "precision")}
        engine.check(Stack(method=method, **fields))


def _settled_selection(cfg, configs: list[Config], priced, request: PlanRequest, rejections: Rejections,
                       evaluator: Evaluator, weights_gb: float) -> Selection:
    """Select; check every shown candidate's micro-batch exactly; select again until none changes."""
    for rounds in range(SETTLE_ROUNDS):
        cfg = refresh(cfg, configs, weights_gb) if rounds else cfg
        chosen = select(cfg, configs, priced, request, rejections.copy())
        rows = {int(r) for r in chosen.scored["row"].to_numpy()[chosen.shown(request.top)]}
        if all([evaluator.settle(configs[r]) for r in sorted(rows)]):
            return chosen
    for c in configs:  # pragma: no cover - only if the estimator is far from affine in the micro-batch
        if c.fitted.max_micro_batch > 0:
            evaluator.settle(c)
    return select(refresh(cfg, configs, weights_gb), configs, priced, request, rejections.copy())
