"""The decision card: what a manager reads in a minute, at the top of every report.

Three big numbers (cost with its p10-p90, wall time with its band, the hardware and where), the stack,
why this option (against the runner-up and the naive baseline) and the risks in plain words. When no
candidate meets the budget or deadline the card says so, shows the nearest option, how far it misses
and the plan's remedy, and never calls anything recommended. Built from the plan alone (HTML and
Markdown lay out the same dict).
"""

from __future__ import annotations

from advisor.explain.claims import (
    knee_words,
    managed_summary,
    ranked_cost,
    ranked_hours,
    ranking_quantile,
    total_words,
    versus,
)
from advisor.explain.notes import note
from advisor.explain.spot import spot_line
from advisor.explain.warnings import risk_items, risks
from advisor.results import Candidate, Plan
from advisor.results.facts import FindingKind as K, RankBy, first, found
from advisor.units import duration, money


def where(c: Candidate) -> str:
    tier = "spot" if c.cost.spot else "on-demand"
    nodes = f"{c.nodes} × " if c.nodes > 1 else ""
    return f"{c.offer.provider} · {nodes}{c.offer.instance_type} · {c.offer.region} · host in {country(c)} · {tier}"


def country(c: Candidate) -> str:
    """The host's country, by name and ISO code, or 'an unknown country' (pricing/geo.py)."""
    code, name = c.offer.country, c.offer.country_name
    return f"{name} ({code})" if name and code else "an unknown country"


def hardware(c: Candidate) -> str:
    total = c.nodes * c.offer.gpu_count
    return f"{total}× {c.offer.gpu_model}" + (f" ({c.nodes} nodes)" if c.nodes > 1 else "")


def cost_band(c: Candidate) -> str:
    if c.cost.usd_low is None or c.cost.usd_high is None:
        return "no band"
    return f"p10–p90: {money(c.cost.usd_low)} – {money(c.cost.usd_high)}"


def time_band(c: Candidate) -> str:
    t = c.timing
    if t.hours_low is None or t.hours_high is None:
        return "no band"
    return f"p10–p90: {duration(t.hours_low)} – {duration(t.hours_high)}"


def why(plan: Plan) -> str:
    """One line: what ranked this option first, against the runner-up and the naive baseline."""
    c = plan.candidates[0]
    by_time = plan.assumptions.get("sort") == RankBy.TIME
    parts = [("Fastest" if by_time else "Cheapest" + total_words(plan)) + f" option that fits at {ranking_quantile(plan)}"
             if plan.constraints_met else "Closest to the constraints"]
    tie = first(c.findings, K.NEAR_TIE, K.SAFE_OVER_RISKY)
    if tie is not None:  # not the cheapest (or fastest) row: say what it was preferred for instead
        said = note(tie)
        parts[0] = said[0].upper() + said[1:] if plan.constraints_met else f"{parts[0]}, {said}"
    if len(plan.candidates) > 1:
        parts.append(versus(c, plan.candidates[1], "the runner-up"))
    b = plan.baseline
    if b is not None and plan.constraints_met and plan.saving_vs_baseline_usd is not None:
        parts.append(versus(c, b, "the naive baseline"))
    knee = knee_words(plan) if plan.constraints_met else ""
    parts += [knee[0].lower() + knee[1:]] if knee else []
    return "; ".join(parts) + "."


def _objective(c: Candidate) -> str:
    """DPO / GRPO: what runs where (the planner's note) and, for GRPO, the hours spent generating."""
    placed = first(c.findings, K.DPO_REFERENCE, K.GRPO_GENERATION)
    if placed is None:
        return ""
    text = f". {note(placed)}"
    if c.timing.generation_hours:
        text += f"; generation {duration(c.timing.generation_hours)} of {duration(c.timing.train_hours)} training"
    return text


def spot(plan: Plan) -> str:
    """The CLI's 'On spot: ...' line where the plan priced spot (--spot); a plan that asked and found none says so."""
    if plan.spot_alternative is not None:
        return spot_line(plan, plan.spot_alternative)
    return "On spot: no spot offer fits this run (spot capacity was priced)." if plan.workload.get("spot") else ""


def decision_card(plan: Plan) -> dict:
    """The card as plain strings: status, headline, three figures, stack, why, misses, remedy and risks."""
    remedy = plan.remedy.removeprefix("Remedy:").strip()
    if not plan.candidates:
        top = max(plan.rejected, key=lambda r: r.count) if plan.rejected else None
        return {"status": "none", "headline": "Nothing fits",
                "lede": (f"No offer can run {plan.model.name} with the allowed settings"
                         + (f"; most often: {top.reason}." if top else ".")),
                "figures": [], "stack": "", "why": "", "misses": [], "remedy": remedy, "risks": [], "risk_kinds": [],
                "managed": managed_summary(plan), "spot": ""}
    c = plan.candidates[0]
    met = plan.constraints_met
    return {
        "status": "recommended" if met else "nearest",
        "headline": "Best option" if met else (plan.notice or "No candidate meets the constraints"),
        "lede": "" if met else "Nearest option, which does not meet them:",
        "figures": [
            {"label": "Cost", "value": money(ranked_cost(c)), "detail": f"at {ranking_quantile(plan)} · {cost_band(c)}"},
            {"label": "Wall time", "value": duration(ranked_hours(c)), "detail": f"at {ranking_quantile(plan)} · {time_band(c)}"},
            {"label": "Hardware", "value": hardware(c), "detail": where(c)},
        ],
        "stack": f"{c.label or c.stack.label()} · micro-batch {c.shape.micro_batch} × accumulation "
                 f"{c.shape.grad_accum} at {c.shape.seq_len:,} tokens" + _objective(c),
        "why": why(plan),
        "misses": [note(f) for f in found(c.findings, K.MISSES_BUDGET, K.MISSES_DEADLINE)] if not met else [],
        "remedy": remedy if not met else "",
        "risks": risks(plan, c),
        "risk_kinds": [what for what, _ in risk_items(plan, c)],
        "managed": managed_summary(plan),
        "spot": spot(plan),
    }
