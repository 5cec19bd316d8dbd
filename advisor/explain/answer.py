"""The report's answer paragraph and the words its tables use for a value, a candidate's GPUs, stack and pricing
tier: written from the plan alone (reports/render.py lays them out)."""

from __future__ import annotations

from advisor.explain.claims import ranked_cost, ranked_hours, ranking_quantile, versus
from advisor.explain.notes import notes_of
from advisor.results import Candidate, Plan
from advisor.units import duration, gb, money, pct


def rate(v: float, key: str) -> str:
    """A `..._per_<unit>_hour` value as a rate: '1.97e-05 per GPU-hour (one per 50,761 GPU-hours)'."""
    unit = key.rsplit("_per_", 1)[1].replace("_", "-").replace("gpu", "GPU")
    text = f"{v:.3g} per {unit}"
    if 0 < v < 0.01:
        text += f" (one per {1 / v:,.0f} {unit}s)"
    return text


def value(v: object, key: str = "") -> str:
    """An assumption or workload value as a reader wants it (the key hints at its unit)."""
    key = key.lower()
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if "_per_" in key:  # a rate (interruptions per GPU-hour), never a duration
            return rate(v, key)
        if "hour" in key:
            return duration(v)
        if "usd" in key or "price" in key or "budget" in key:
            return money(v)
    if v is None:
        return "not set"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:g}" if v >= 1 or v == 0 else f"{v:g} ({pct(v)})"
    return str(v)


def gpus(c: Candidate) -> str:
    per_node = f"{c.offer.gpu_count}× {c.offer.gpu_model}"
    return f"{c.nodes} nodes × {per_node} ({c.nodes * c.offer.gpu_count} GPUs)" if c.nodes > 1 else per_node


def stack(c: Candidate) -> str:
    return c.label or c.stack.label()


def pricing(c: Candidate) -> str:
    return "spot" if c.cost.spot else "on-demand"


def _find(assumptions: dict, *words: str) -> tuple[str, object] | None:
    for key, v in assumptions.items():
        if all(w in key.lower() for w in words):
            return key, v
    return None


def _frac(v: object, key: str) -> str:
    if "hour" in key:
        return value(v, key)
    return pct(v) if isinstance(v, float) and 0 <= v < 1 else value(v, key)


def answer_parts(plan: Plan) -> list[tuple[str, bool]]:
    """The answer paragraph as (text, emphasised) segments, so both formats can bold safely."""
    if not plan.candidates:
        parts: list[tuple[str, bool]] = [
            ("Nothing fits.", True),
            (f" No offer can run {plan.model.name} with the allowed settings. ", False),
        ]
        if plan.rejected:
            top = max(plan.rejected, key=lambda r: r.count)
            parts.append((f"The most common reason ({top.count:,} options): {top.reason}", False))
            parts.append((f" (e.g. {top.example})." if top.example else ".", False))
        parts.append((" See the closest rejections below.", False))
        return parts
    c = plan.candidates[0]
    parts = [
        ("Recommended: " if plan.constraints_met else "Nearest option (it does not meet the constraints): ", False),
        (f"{c.offer.provider} {c.offer.instance_type}", True),
        (f" ({gpus(c)}, {pricing(c)}, {c.offer.region}) with ", False), (stack(c), True),
        (f", micro-batch {c.shape.micro_batch} × grad-accum {c.shape.grad_accum} at {c.shape.seq_len:,} tokens. "
         f"At {ranking_quantile(plan)} (the figure the ranking used) it should cost about ", False),
        (money(ranked_cost(c)), True), (" and take ", False), (duration(ranked_hours(c)), True), (" wall time", False),
    ]
    t = c.timing
    if t.hours_low is not None and t.hours_high is not None:
        parts.append((f" (between {duration(t.hours_low)} and {duration(t.hours_high)}, {money(c.cost.usd_low)} "
                      f"to {money(c.cost.usd_high)}, from "
                      + ("the run " if t.band_basis.startswith("measured on")  # a measured run (advisor/workload/measurements.py MEASURED)
                         else "the time model's held-out error: ")
                      + f"{t.band_basis})", False))
    if c.timing.train_hours:
        parts.append((f": {duration(c.timing.train_hours)} of training plus setup, checkpoints every "
                      f"{duration(t.checkpoint_interval_hours)} and expected interruptions", False))
    tokens = plan.workload.get("tokens")
    per = f" for {tokens:,} tokens" if isinstance(tokens, int) else ""
    parts.append((f"{per} at {c.timing.tokens_per_sec:,.0f} tokens/s. ", False))
    assumed = [f"MFU {pct(c.timing.mfu)}"] if c.timing.mfu else []
    for words, label in ((("headroom",), "memory headroom"), (("setup",), "setup")):
        found = _find(plan.assumptions, *words)
        if found is not None:
            assumed.append(f"{label} {_frac(found[1], found[0])}")
    if assumed:
        parts.append(("It assumes " + ", ".join(assumed) + "; ", False))
    parts.append((f"peak memory is {gb(c.fit.peak_bytes)} per GPU against a limit of {gb(c.fit.limit_bytes)} "
                  f"({gb(c.fit.usable_bytes)} usable less headroom), "
                  f"and the price ({money(c.cost.price_hour)}/h) is from {c.offer.source}, {c.offer.price_date}. ", False))
    said = notes_of(c)
    if said:
        parts.append(("Note: " + "; ".join(said) + ". ", False))
    sp = plan.spot_alternative
    if sp is not None:
        parts.append((f"On spot capacity, {sp.offer.provider} {sp.offer.instance_type} would cost about {money(ranked_cost(sp))} "
                      f"and take {duration(ranked_hours(sp))} with {duration(sp.timing.interruption_hours)} of expected "
                      f"interruptions (spot price dated {sp.offer.price_date}), against {money(ranked_cost(c))} for the "
                      "on-demand #1. ", False))
    b = plan.baseline
    if b is not None and plan.saving_vs_baseline_usd is not None:
        parts.append((f"Against the naive baseline ({stack(b)}), ", False))
        parts.append((versus(c, b, "the baseline"), True))
        parts.append((".", False))
    elif b is not None:
        parts.append(("No candidate meets the constraints, so no saving against the naive baseline is claimed.", False))
    else:
        parts.append(("No naive baseline fits, so there is no saving to compare.", False))
    return parts


