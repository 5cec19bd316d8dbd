"""What the planner says about a plan in words: each candidate's notes (what it trades away), the plan's
warnings, the remedy when nothing meets the budget or the deadline, and where price sources disagree."""

from __future__ import annotations

from advisor.planner import configs as _configs
from advisor.planner.configs import TIGHT_FRACTION, Config
from advisor.planner.request import PlanRequest
from advisor.planner.select import Selection
from advisor.results import Candidate
from advisor.units import BILLION, MILLION


def _disagreeing(disagreements, candidates: list[Candidate]) -> list[str]:
    """Where two price sheets differ by more than the tolerance on an instance a shown candidate
    uses (pricing/agreement.py): say so, with both prices and dates (the newer dated one is used)."""
    shown = {(c.offer.provider, c.offer.region, c.offer.instance_type) for c in candidates}
    return [f"Price sources disagree: {d}." for d in disagreements
            if (d.provider, d.region, d.instance_type) in shown][:10]


def _remedy(c: Candidate, request: PlanRequest) -> str:
    """What would fit on the closest candidate: the largest token count that meets the budget and the
    deadline (training hours scale with tokens; setup does not), and the budget the job needs."""
    t, k = c.timing, c.cost
    scaling = max(t.hours_at_risk - t.setup_hours, 1e-9)  # training, checkpoints, interruptions: ∝ tokens
    shares = []
    if request.budget is not None and k.usd_at_risk:
        shares.append((request.budget / k.usd_at_risk * t.hours_at_risk - t.setup_hours) / scaling)
    if request.deadline_hours is not None:
        shares.append((request.deadline_hours - t.setup_hours) / scaling)
    share = max(min(shares), 0.0) if shares else 1.0
    tokens = request.train_tokens * share
    gpus = f"{c.offer.gpu_count * c.nodes}x {c.offer.gpu_model}"
    scope = (f"~{_tokens(tokens)} tokens would fit on {gpus} ({c.offer.provider} {c.offer.instance_type})"
             if tokens >= MILLION else f"even the setup alone does not fit on {gpus}")
    need = [f"the requested {_tokens(request.train_tokens)} tokens need ${k.usd_at_risk:,.2f}"]
    if request.deadline_hours is not None:
        need.append(f"{t.hours_at_risk:,.1f} h")
    return f"Remedy: {scope}; " + " and ".join(need) + " there."


def _tokens(n: float) -> str:
    return f"{n / BILLION:.3g}B" if n >= BILLION else f"{n / MILLION:.3g}M"


def _warnings(chosen: Selection, candidates: list[Candidate], request: PlanRequest, off, spot, spec) -> list[str]:
    out = []
    if candidates and candidates[0].stack.precision.endswith("fp16") and "bf16" in str(spec.torch_dtype).replace(
            "bfloat16", "bf16"):
        out.append(f"The top pick trains in fp16 ({candidates[0].offer.gpu_model} has no bf16) a model released in "
                   "bf16: "
                   "fp16's narrower range can overflow activations of bf16-trained models (loss scaling helps, "
                   "not always); prefer a bf16 card.")
    if not chosen.constraints_met and chosen.notice.startswith("No candidate meets"):
        for r in chosen.rejections.to_list():
            if r.reason.startswith(("over the budget", "misses the deadline")):
                out.append(f"{r.count:,} options ruled out: {r.reason}.")
        if candidates:
            out.append(f"The closest, {candidates[0].offer.provider} {candidates[0].offer.instance_type}: "
                       + "; ".join(candidates[0].notes[-2:]) + ".")
    if len(off) and off["stale"].fillna(False).astype(bool).all():
        out.append("Every matching price is stale (undated, or older than the threshold): refresh "
                   "with `gpu-advisor prices refresh` or give your own sheet with --prices.")
    if candidates and candidates[0].timing.global_batch != request.sequences_per_step:
        c = candidates[0]
        out.append(f"The top pick runs {c.timing.global_batch} sequences per step, not {request.sequences_per_step}: "
                   f"{c.offer.gpu_count * c.nodes} GPUs do not divide it.")
    if candidates and candidates[0].fit.tight:
        out.append("The top pick is within the estimator's measured error band of its GPU memory limit (tight).")
    if request.spot and spot is None:
        out.append("--spot: no spot price among the matching offers.")
    return out


def _notes(cfg: Config, request: PlanRequest, spec=None) -> list[str]:
    """What this candidate trades away, in words."""
    st, out, t = cfg.stack, [], cfg.timed
    if st.method == "full" and st.precision in ("bf16", "fp16") and not st.sharding.startswith("zero"):
        out.append(f"pure {st.precision} weights (no fp32 master copy): an update smaller than about 1/256 of a "
                   f"weight ({'8' if st.precision == 'bf16' else '11'} significand bits) rounds away, so with learning "
                   "rates near 1e-5 many updates are lost; mixed precision (--precision amp-bf16) avoids it")
    if st.precision.endswith("fp16") and spec is not None and "bf" in str(spec.torch_dtype):
        out.append(f"fp16: {cfg.gpu.name} has no bf16, and the model was released in bf16 (overflow risk; loss "
                   "scaling needed)")
    if st.optimizer in _configs.EIGHT_BIT and "optimizer" not in request.pins:
        out.append(_configs.ONLY_8BIT_NOTE)
    if t is not None and not t.calibrated and t.rank_quantile > 0.5 and RISKS_DEFAULT == request.risk:
        out.append(f"ranked by its p{t.rank_quantile * 100:.0f} hours and cost: the time model has no calibration "
                   "rows for this GPU class and method")
    if cfg.fitted.tight:
        out.append(f"tight: peak within {TIGHT_FRACTION:.0%} of the memory limit, the estimator's measured error band")
    padding = request.padding_factor(t.micro_batch) if t is not None else 1.0
    if padding > 1.0005:
        out.append(f"padded batches of {t.micro_batch} rows compute {padding:.3f}× the kept tokens (the dataset's "
                   "lengths; --packed computes only the kept tokens)")
    if t is not None and t.global_batch != request.sequences_per_step:
        out.append(f"runs {t.global_batch} sequences per step instead of {request.sequences_per_step} "
                   f"({st.gpus} GPUs do not divide it)")
    return out


RISKS_DEFAULT = "p50"
