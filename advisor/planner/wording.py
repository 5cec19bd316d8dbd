"""What the planner says about a plan in words: each candidate's notes (what it trades away), the plan's
warnings, the remedy when nothing meets the budget or the deadline, and where price sources disagree."""

from __future__ import annotations

from advisor.estimate.throughput import MIN_CALIBRATED_ROWS
from advisor.planner import configs as _configs
from advisor.planner.configs import TIGHT_FRACTION, Config
from advisor.planner.offers import LISTED_ONLY
from advisor.planner.ranking import RISK_MARGIN_PCT, stack_caveats
from advisor.planner.request import MIN_OPTIMIZER_STEPS, PlanRequest
from advisor.planner.select import Selection
from advisor.results import NEAR_TIE_NOTE, Candidate
from advisor.units import BILLION, MILLION, money


def _disagreeing(disagreements, candidates: list[Candidate]) -> list[str]:
    """Where two price sheets differ by more than the tolerance on an instance a shown candidate
    uses (pricing/agreement.py): say so, with both prices and dates (the newer dated one is used)."""
    shown = {(c.offer.provider, c.offer.region, c.offer.instance_type) for c in candidates}
    return [f"Price sources disagree: {d}." for d in disagreements
            if (d.provider, d.region, d.instance_type) in shown][:10]


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
        out.append(f"The top pick runs a global batch of {c.timing.global_batch} sequences, not "
                   f"{request.sequences_per_step}: no run that keeps it fits ({c.offer.gpu_count * c.nodes} GPUs do not "
                   "divide it); --global-batch sets one they do.")
    steps = request.optimizer_steps
    if steps < MIN_OPTIMIZER_STEPS:
        per = request.sequences_per_step * request.seq_len
        out.append(f"Only {steps} optimizer steps: {_tokens(request.train_tokens)} tokens at {per:,} tokens per step "
                   f"({request.sequences_per_step} × {request.seq_len:,}); fewer than {MIN_OPTIMIZER_STEPS} steps "
                   "rarely trains well. Take smaller steps with --global-batch-tokens (e.g. "
                   f"--global-batch-tokens {_tokens(max(request.seq_len, request.train_tokens / MIN_OPTIMIZER_STEPS))}) "
                   "or --global-batch, or train on more tokens or --epochs.")
    if candidates and chosen.constraints_met:
        crossed = crossings(candidates[0], request)
        if crossed:
            out.append(f"The top pick meets the constraints at {request.risk}, but its " + "; its ".join(crossed) + ".")
    for c in candidates[:3]:
        if not c.offer.host_known:
            out.append(f"#{c.rank} ({c.offer.provider} {c.offer.instance_type}): {HOST_UNKNOWN_NOTE} — the source lists no host "
                       "RAM or vCPUs, so the loading check could not run; check the host before renting.")
        old = _disputed(c.offer.notes)
        if old is not None:
            out.append(f"#{c.rank} ({c.offer.provider} {c.offer.instance_type}): the catalog's ${old:,.2f}/h is disputed by a dated "
                       f"observation; priced at {money(c.offer.price_hour)}/h ({c.offer.price_date}, "
                       f"{c.offer.source[:60]}).")
    if candidates and candidates[0].fit.tight:
        out.append("The top pick is within the estimator's measured error band of its GPU memory limit (tight).")
    if request.spot and spot is None:
        out.append(no_spot_words(chosen.undated_spot))
    return out


def _disputed(notes: str) -> float | None:
    """The catalog price a dated observation disputed (pricing.crosscheck notes `price_disputed:<old>`)."""
    import re

    m = re.search(r"price_disputed:([0-9.]+)", notes or "")
    return float(m.group(1)) if m else None


def listed_only_note(request: PlanRequest) -> str:
    """A row kept under --regions though its sheet lists every region whatever the capacity."""
    return (f"region listed, availability unknown: the sheet lists this instance in every region whatever its "
            f"capacity ({LISTED_ONLY}); no row with known availability in --regions {','.join(request.regions)} "
            "remained, so check capacity there before planning on it")


def _notes(cfg: Config, request: PlanRequest, spec=None, offer_notes: str | None = None) -> list[str]:
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
    if t is not None and not t.calibrated:
        out.append(uncalibrated_note())
    if cfg.fitted.tight:
        out.append(f"tight: peak within {TIGHT_FRACTION:.0%} of the memory limit, the estimator's measured error band; "
                   f"loses to a safe row up to {RISK_MARGIN_PCT:g}% dearer")
    out.extend(caveat_note(key, cfg.gpu.name) for key in stack_caveats(cfg.gpu, st))
    padding = request.padding_factor(t.micro_batch) if t is not None else 1.0
    if request.regions and offer_notes is not None and LISTED_ONLY in offer_notes:
        out.append(listed_only_note(request))
    if padding > 1.0005:
        out.append(f"padded batches of {t.micro_batch} rows compute {padding:.3f}× the kept tokens (the dataset's "
                   "lengths; --packed computes only the kept tokens)")
    if t is not None and t.global_batch != request.sequences_per_step:
        out.append(f"runs a global batch of {t.global_batch} sequences instead of {request.sequences_per_step} "
                   f"({st.gpus} GPUs do not divide it; no run that keeps it fits)")
    return out


HOST_UNKNOWN_NOTE = "host RAM unknown"


def no_spot_words(undated: int) -> str:
    """--spot found no spot price to show: none at all, or only undated ones (left out of the spot line)."""
    if not undated:
        return "--spot: no spot price among the matching offers."
    return (f"--spot: no dated spot price among the matching offers; {undated:,} spot price{'s' if undated != 1 else ''} "
            "without an observation date of its own left out of the spot line and remedies (an undated spot price "
            "can be far from today's market).")


def uncalibrated_note() -> str:
    """A row whose time model has fewer than MIN_CALIBRATED_ROWS held-out rows for its GPU class and method."""
    return (f"uncalibrated: the time model has fewer than {MIN_CALIBRATED_ROWS} held-out rows for this GPU class and "
            "method (the band of held-out GPU classes, wider; ranked at its quantile)")


def caveat_note(key: str, gpu_name: str = "") -> str:
    """One software-stack caveat (ranking.STACK_CAVEATS) in words, with what it costs the row in the ranking."""
    words = {
        "rocm-bitsandbytes": "ROCm: bitsandbytes (QLoRA's NF4 weights, 8-bit optimizers) supports AMD GPUs only "
                             "experimentally (huggingface.co/docs/bitsandbytes installation)",
        "aarch64-host": f"aarch64 host: {gpu_name or 'this GPU'}'s Grace CPU is ARM; flash-attn has no prebuilt aarch64 "
                        "wheel (builds from source, Dao-AILab/flash-attention#1866), and bitsandbytes' and vLLM's "
                        "aarch64 wheels differ from x86_64's",
    }.get(key, key)
    return f"stack caveat: {words}; loses to a safe row up to {RISK_MARGIN_PCT:g}% dearer"


def risk_promotion_note(risks: list[str], pct: float) -> str:
    """A safe row placed above a cheaper risky one by the risk margin (ranking.RISK_MARGIN_PCT)."""
    what = ", ".join(risks) or "risky"
    return (f"{NEAR_TIE_NOTE} (within the {RISK_MARGIN_PCT:g}% risk margin of a cheaper option that is {what}, "
            f"{max(pct, 0.0):.1f}% dearer here) for: a safe row (calibrated, clear of the memory limit, no stack "
            "caveat)")


def crossings(c: Candidate, request: PlanRequest) -> list[str]:
    """A row that meets --budget / --deadline at the ranking quantile but whose p90 crosses it: say so."""
    out = []
    if request.budget is not None and c.cost.usd_high is not None and c.cost.usd_high > request.budget:
        out.append(f"band crosses the budget: {money(c.cost.usd_high)} at p90 against ${request.budget:,.0f} "
                   f"(met at {request.risk}: {money(c.cost.usd_at_risk or c.cost.usd)})")
    if request.deadline_hours is not None and c.timing.hours_high is not None and \
            c.timing.hours_high > request.deadline_hours:
        out.append(f"band crosses the deadline: {c.timing.hours_high:,.1f} h at p90 against "
                   f"{request.deadline_hours:g} h (met at {request.risk}: "
                   f"{c.timing.hours_at_risk or c.timing.hours:,.1f} h)")
    return out
