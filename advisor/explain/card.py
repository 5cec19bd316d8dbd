"""The decision card: what a manager reads in a minute, at the top of every report.

Three big numbers (cost with its p10-p90, wall time with its band, the hardware and where), the stack,
why this option (against the runner-up and the naive baseline) and the risks in plain words. When no
candidate meets the budget or deadline the card says so, shows the nearest option, how far it misses
and the plan's remedy, and never calls anything recommended. Built from the plan alone (HTML and
Markdown lay out the same dict).
"""

from __future__ import annotations

import re

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
from advisor.explain.price_age import days_to_stale, is_ageing, is_stale, price_age_days
from advisor.launch.caveats import caveats
from advisor.results import Candidate, Plan
from advisor.results.facts import FindingKind as K, RankBy, first, found
from advisor.units import duration, gb, money

# Fewer held-out rows than this behind a band: said as a risk (one row is an anecdote, not an error band).
FEW_CALIBRATION_ROWS = 3


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


def _age_days(c: Candidate, plan: Plan) -> int | None:
    return price_age_days(c, plan)


# The top pick's own findings that are risks to its three numbers or to launching it as written, said in the risks
# line with the candidate's own note (the rest say what it trades away, where it runs, or why it ranks where it does).
RISK_KINDS = (K.STACK_CAVEAT, K.LISTED_ONLY, K.SPOT_SUSPECT, K.FP16_NO_BF16, K.GLOBAL_BATCH_CHANGED)


def _price_risk(plan: Plan, c: Candidate) -> tuple[str, str] | None:
    """The top pick's price age as a risk: undated, stale, or near the staleness limit (price_age.is_ageing)."""
    age = _age_days(c, plan)
    if age is None:  # no date, or the planner's "date unknown"
        return ("undated_price", f"Undated price: {money(c.cost.price_hour)}/h from {c.offer.source or 'an unnamed source'} "
                "has no observation date" + (" and its sheet marks it stale" if c.offer.stale else "")
                + "; check it with the provider before you buy.")
    if is_stale(c, plan):
        why_stale = (f"is {age:,} day{'s' if age != 1 else ''} old" if age > plan.stale_days
                     else "is marked stale by its sheet (an old catalog generation)")
        return ("stale_price", f"Stale price: {money(c.cost.price_hour)}/h from {c.offer.source} ({c.offer.price_date}) "
                f"{why_stale}; check it with the provider before you buy.")
    if is_ageing(c, plan):
        left = days_to_stale(c, plan)
        return ("ageing_price", f"Ageing price: {money(c.cost.price_hour)}/h from {c.offer.source} ({c.offer.price_date}) "
                f"is {age:,} days old, {left:,} day{'s' if left != 1 else ''} from the {plan.stale_days:g}-day "
                "staleness limit; check it with the provider before you buy.")
    return None


def _disputed(plan: Plan) -> list[tuple[str, str]]:
    """The plan's warning that a dated observation disputes the top pick's catalog price, as a risk."""
    return [(K.PRICE_DISPUTED.value, f"Disputed price: the catalog says ${f['catalog_price_hour']:,.2f}/h, a dated "
             f"observation {money(f['price_hour'])}/h ({f['price_date']}); priced at the observation, check it with "
             "the provider before you buy.")
            for f in found(plan.findings, K.PRICE_DISPUTED) if f.get("rank") == 1]


def risk_items(plan: Plan, c: Candidate) -> list[tuple[str, str]]:
    """(what, words) for everything that could make the three numbers wrong or the run not launch as written, most
    serious first; `what` is the finding kind (or the price-age state, or `launch_caveat`) each line says."""
    out: list[tuple[str, str]] = []
    t = c.timing
    if not t.calibrated:
        out.append((K.UNCALIBRATED.value, "Uncalibrated hardware: the time model has no published measurements for "
                    f"this GPU class and method ({t.band_basis or 'no segment'}); its band is wider, and hours and cost "
                    "may be further off than it."))
    else:
        rows = re.search(r"(\d+) held-out", t.band_basis)
        if rows and int(rows.group(1)) < FEW_CALIBRATION_ROWS:
            out.append(("thin_calibration", f"Thin calibration: the time band rests on {rows.group(1)} published "
                        f"measurement(s) ({t.band_basis})."))
    if c.fit.tight:
        out.append((K.TIGHT.value, f"Tight memory: {gb(c.fit.peak_bytes)} per GPU against a limit of "
                    f"{gb(c.fit.limit_bytes)} is within the estimator's error of the limit; it may run out of memory. "
                    "Run `launch.sh --benchmark` first."))
    price = _price_risk(plan, c)
    out += [price] if price else []
    out += _disputed(plan)
    out += [(f.kind.value, f"The band crosses a constraint: {note(f).removeprefix('band crosses ')}.")
            for f in found(c.findings, K.BAND_CROSSES_BUDGET, K.BAND_CROSSES_DEADLINE)]
    out += [(f.kind.value, f"{note(f)[0].upper()}{note(f)[1:]}.") for f in found(c.findings, *RISK_KINDS)]
    if not c.offer.host_known:
        out.append((K.HOST_UNKNOWN.value, "Host unknown: the price source lists no host RAM or vCPUs, so the loading "
                    "check could not run; check the host before renting."))
    moe = plan.model.params_active < plan.model.params_total
    out += [("launch_caveat", f"Launch caveat: {words}") for words in caveats(c, plan.model.family, moe)]
    return out


def risks(plan: Plan, c: Candidate) -> list[str]:
    """What could make the three numbers wrong, in plain words, most serious first."""
    return [words for _, words in risk_items(plan, c)]


def _objective(c: Candidate) -> str:
    """DPO / GRPO: what runs where (the planner's note) and, for GRPO, the hours spent generating."""
    placed = first(c.findings, K.DPO_REFERENCE, K.GRPO_GENERATION)
    if placed is None:
        return ""
    text = f". {note(placed)}"
    if c.timing.generation_hours:
        text += f"; generation {duration(c.timing.generation_hours)} of {duration(c.timing.train_hours)} training"
    return text


def decision_card(plan: Plan) -> dict:
    """The card as plain strings: status, headline, three figures, stack, why, misses, remedy and risks."""
    remedy = plan.remedy.removeprefix("Remedy:").strip()
    if not plan.candidates:
        top = max(plan.rejected, key=lambda r: r.count) if plan.rejected else None
        return {"status": "none", "headline": "Nothing fits",
                "lede": (f"No offer can run {plan.model.name} with the allowed settings"
                         + (f"; most often: {top.reason}." if top else ".")),
                "figures": [], "stack": "", "why": "", "misses": [], "remedy": remedy, "risks": [], "risk_kinds": [],
                "managed": managed_summary(plan)}
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
    }
