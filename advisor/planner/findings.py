"""What the planner finds about a candidate and about the plan, as typed rows (advisor/results/facts.py): what a
candidate trades away, how it misses or nearly crosses a constraint, and what the plan's reader must see. The
words for each are written in advisor/explain/."""

from __future__ import annotations

import re

from advisor.estimate.throughput import MIN_CALIBRATED_ROWS
from advisor.planner import configs as _configs
from advisor.planner.configs import TIGHT_FRACTION, Config
from advisor.planner.offers import LISTED_ONLY
from advisor.planner.ranking import RISK_MARGIN_PCT, rocm_cuda_pieces, stack_caveats
from advisor.planner.request import MIN_OPTIMIZER_STEPS, PlanRequest
from advisor.planner.select import Selection
from advisor.results import Candidate
from advisor.results.facts import Finding, FindingKind as K

# Rejection reasons counted after scoring, against the budget or the deadline (advisor/planner/select.py)
CONSTRAINT_REASONS = ("over the budget", "misses the deadline")


def candidate_findings(cfg: Config, request: PlanRequest, spec=None, offer_notes: str | None = None) -> list[Finding]:
    """What this candidate trades away (its stack, fit, software caveats, region availability, batch), in the order
    its notes say it; `offer_notes`: the offer row's tags (a `region-listed-not-availability` row under --regions)."""
    st, out, t = cfg.stack, [], cfg.timed
    if st.method == "full" and st.precision in ("bf16", "fp16") and not st.sharding.startswith("zero"):
        out.append(Finding(kind=K.PURE_LOW_PRECISION, figures={"precision": st.precision}))
    if st.precision.endswith("fp16") and spec is not None and "bf" in str(spec.torch_dtype):
        out.append(Finding(kind=K.FP16_NO_BF16, figures={"gpu": cfg.gpu.name}))
    if st.optimizer in _configs.EIGHT_BIT and "optimizer" not in request.pins:
        out.append(Finding(kind=K.ONLY_8BIT, figures={"optimizer": st.optimizer}))
    if t is not None and not t.calibrated:
        out.append(Finding(kind=K.UNCALIBRATED, figures={"min_rows": MIN_CALIBRATED_ROWS}))
    if cfg.fitted.tight:
        out.append(Finding(kind=K.TIGHT, figures={"fraction": TIGHT_FRACTION, "margin_pct": RISK_MARGIN_PCT}))
    out += [stack_caveat(key, cfg) for key in stack_caveats(cfg.gpu, st)]
    if request.regions and offer_notes is not None and LISTED_ONLY in offer_notes:
        out.append(Finding(kind=K.LISTED_ONLY, figures={"tag": LISTED_ONLY, "regions": ",".join(request.regions)}))
    padding = request.padding_factor(t.micro_batch) if t is not None else 1.0
    if padding > 1.0005:
        out.append(Finding(kind=K.PADDED, figures={"micro_batch": int(t.micro_batch), "factor": float(padding)}))
    if t is not None and t.global_batch != request.sequences_per_step:
        out.append(Finding(kind=K.GLOBAL_BATCH_CHANGED, figures={"runs": int(t.global_batch),
                                                                 "requested": int(request.sequences_per_step),
                                                                 "gpus": int(st.gpus)}))
    return out


def stack_caveat(key: str, cfg: Config) -> Finding:
    """One STACK_CAVEATS key on this row; `rocm-host` names the pieces the bundle installs as CUDA builds."""
    figures = {"caveat": key, "gpu": cfg.gpu.name, "margin_pct": RISK_MARGIN_PCT}
    if key == "rocm-host":
        figures["pieces"] = ",".join(rocm_cuda_pieces(cfg.stack))
    return Finding(kind=K.STACK_CAVEAT, figures=figures)


def placement(stack, gpu_count: int, nodes: int) -> list[Finding]:
    """DPO / GRPO: what runs where (the reference model; where completions are generated)."""
    o = stack.objective
    if o.kind == "dpo":
        ref = o.reference(stack.method)
        return [Finding(kind=K.DPO_REFERENCE, figures={"reference": str(ref),
                                                       "sharded": stack.shard_degree_params > 1})]
    if o.kind != "grpo":
        return []
    return [Finding(kind=K.GRPO_GENERATION, figures={
        "vllm": str(o.vllm), "server_gpus": int(o.vllm_server_gpus), "total_gpus": int(gpu_count * nodes),
        "train_gpus": int(stack.gpus), "utilization": float(o.utilization), "sleep": bool(o.vllm_sleep)})]


def misses(cost: float, hours: float, request: PlanRequest) -> list[Finding]:
    """How far one candidate misses each constraint at the ranking quantile (the 'closest' list)."""
    out = []
    if request.budget is not None and cost > request.budget:
        out.append(Finding(kind=K.MISSES_BUDGET, figures={"budget": float(request.budget), "usd": float(cost)}))
    if request.deadline_hours is not None and hours > request.deadline_hours:
        out.append(Finding(kind=K.MISSES_DEADLINE, figures={"deadline_hours": float(request.deadline_hours),
                                                            "hours": float(hours)}))
    return out


def crossings(c: Candidate, request: PlanRequest) -> list[Finding]:
    """A row that meets --budget / --deadline at the ranking quantile but whose p90 crosses it."""
    out = []
    if request.budget is not None and c.cost.usd_high is not None and c.cost.usd_high > request.budget:
        out.append(Finding(kind=K.BAND_CROSSES_BUDGET, figures={
            "usd_p90": c.cost.usd_high, "budget": float(request.budget), "risk": request.risk,
            "usd": c.cost.usd_at_risk or c.cost.usd}))
    if request.deadline_hours is not None and c.timing.hours_high is not None and \
            c.timing.hours_high > request.deadline_hours:
        out.append(Finding(kind=K.BAND_CROSSES_DEADLINE, figures={
            "hours_p90": c.timing.hours_high, "deadline_hours": float(request.deadline_hours), "risk": request.risk,
            "hours": c.timing.hours_at_risk or c.timing.hours}))
    return out


def disputed(notes: str) -> float | None:
    """The catalog price a dated observation disputed (pricing.crosscheck tags an offer `price_disputed:<old>`)."""
    m = re.search(r"price_disputed:([0-9.]+)", notes or "")
    return float(m.group(1)) if m else None


def market_disputed(notes: str) -> tuple[float, str] | None:
    """(median $/h, its date) of the marketplace aggregate that disputes a row's own price (pricing.crosscheck's
    AGGREGATE RULE tags it `market_disputed:<median>@<date>`; the row keeps its listed price)."""
    m = re.search(r"market_disputed:([0-9.]+)@([0-9-]+)", notes or "")
    return (float(m.group(1)), m.group(2)) if m else None


def _shown(c: Candidate) -> dict:
    return {"rank": c.rank, "provider": c.offer.provider, "instance_type": c.offer.instance_type}


def _top(chosen: Selection, top: Candidate, request: PlanRequest, spec) -> list[Finding]:
    """What the plan says about its #1 before anything else: fp16, and the closest when nothing meets the limits."""
    out = []
    if top.stack.precision.endswith("fp16") and "bf16" in str(spec.torch_dtype).replace("bfloat16", "bf16"):
        out.append(Finding(kind=K.TOP_FP16, figures={"gpu": top.offer.gpu_model}))
    return out


def _unmet(chosen: Selection, top: Candidate | None) -> list[Finding]:
    """Options scored, none meets the constraints: how many each constraint ruled out, and the closest."""
    if chosen.constraints_met or not chosen.n_scored:
        return []
    out = [Finding(kind=K.RULED_OUT_BY_CONSTRAINT, figures={"count": r.count, "reason": r.reason})
           for r in chosen.rejections.to_list() if r.reason.startswith(CONSTRAINT_REASONS)]
    return out + ([Finding(kind=K.CLOSEST, figures=_shown(top))] if top is not None else [])


def _recipe(top: Candidate | None, request: PlanRequest) -> list[Finding]:
    """The #1's global batch, and a run of too few optimizer steps."""
    out = []
    if top is not None and top.timing.global_batch != request.sequences_per_step:
        out.append(Finding(kind=K.TOP_GLOBAL_BATCH, figures={
            "runs": top.timing.global_batch, "requested": request.sequences_per_step,
            "gpus": top.offer.gpu_count * top.nodes}))
    if request.optimizer_steps < MIN_OPTIMIZER_STEPS:
        out.append(Finding(kind=K.FEW_STEPS, figures={
            "steps": request.optimizer_steps, "train_tokens": float(request.train_tokens),
            "sequences_per_step": request.sequences_per_step, "seq_len": request.seq_len,
            "min_steps": MIN_OPTIMIZER_STEPS}))
    return out


def _hosts_and_prices(candidates: list[Candidate]) -> list[Finding]:
    """The first three rows: an unknown host, a disputed catalog price."""
    out = []
    for c in candidates[:3]:
        if not c.offer.host_known:
            out.append(Finding(kind=K.SHOWN_HOST_UNKNOWN, figures=_shown(c)))
        old, market = disputed(c.offer.notes), market_disputed(c.offer.notes)
        if old is not None:
            out.append(Finding(kind=K.PRICE_DISPUTED, figures={
                **_shown(c), "catalog_price_hour": old, "price_hour": c.offer.price_hour,
                "price_date": c.offer.price_date, "source": c.offer.source}))
        elif market is not None:  # an aggregate disputes it: the row keeps its own price, the median beside it
            out.append(Finding(kind=K.PRICE_DISPUTED, figures={
                **_shown(c), "by": "market", "market_price_hour": market[0], "market_date": market[1],
                "price_hour": c.offer.price_hour, "price_date": c.offer.price_date, "source": c.offer.source}))
    return out


def plan_findings(chosen: Selection, candidates: list[Candidate], request: PlanRequest, off, spot,
                  spec) -> list[Finding]:
    """What the plan's reader must see (its warnings), in the order they are said."""
    top = candidates[0] if candidates else None
    out = (_top(chosen, top, request, spec) if top is not None else []) + _unmet(chosen, top)
    if len(off) and off["stale"].fillna(False).astype(bool).all():
        out.append(Finding(kind=K.ALL_STALE))
    out += _recipe(top, request)
    if top is not None and chosen.constraints_met and crossings(top, request):
        out.append(Finding(kind=K.TOP_BAND_CROSSES, figures={"risk": request.risk}))
    out += _hosts_and_prices(candidates)
    if top is not None and top.fit.tight:
        out.append(Finding(kind=K.TOP_TIGHT))
    if request.spot and spot is None:
        out.append(Finding(kind=K.NO_SPOT, figures={"undated": int(chosen.undated_spot)}))
    return out
