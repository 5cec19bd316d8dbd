"""What the output says about itself, worded once: the ranking basis, a saving, the counts, the Pareto front.

The terminal table (cli/plan.py), the report (reports/render.py) and the decision card (reports/card.py) all
call these, so "ranked by ...", "$X less (Y%)", "N options scored" and the front's points cannot disagree
between them. Every figure is read from the plan: the ranking basis is the one the plan states
(`assumptions["ranking"]` where the planner records it, else the quantile each candidate was ranked at,
`timing.risk_quantile`, and the near-tie findings it carries), never a constant of this module.
"""

from __future__ import annotations

from advisor.explain.notes import NEAR_TIE_NOTE, managed_tokens
from advisor.results import Candidate, Plan, ranked_cost, ranked_hours
from advisor.results.facts import FindingKind as K, RankBy, first
from advisor.units import duration, money

# A difference smaller than this is "the same" (a cent); below DOLLAR no percentage is stated, because
# a share of a few cents (a tiny dataset's $0.07 against $0.17) reads as a big claim about nothing.
CENT = 0.005
DOLLAR = 1.0
# Rejection reasons counted after scoring (constraints): the rest are counted before, per reason.
AFTER_SCORING = ("over the budget", "misses the deadline")


# Where the default --time-value comes from (advisor/planner/ranking.py DEFAULT_TIME_VALUE, BLS wage data cited there),
# as the plan's `ranking` record states it
TIME_VALUE_SOURCE = "one ML engineer's loaded cost per wall-clock hour, from BLS wage data"


def _quantile(q: float) -> str:
    return f"p{round(q * 100)}"


def ranked_by_words(stated: dict, by: str) -> str:
    """'total = cost + hours × $22.22/h (--time-value: ...) at p80 (the cost and hours columns; --risk)', from the
    plan's `ranking` record; an exit-3 table says first that its rows are ordered by how far each misses."""
    q = stated["quantile"]
    tv = stated.get("time_value_usd_per_hour")
    if by == "cost" and isinstance(tv, (int, float)) and tv > 0:
        source = stated.get("time_value_source") or "--time-value"
        by = (f"total = cost + hours × {money(float(tv))}/h (--time-value"
              + (f": {source}" if source != "--time-value" else "") + "; 0 ranks on cost alone)")
    if stated.get("order") == "miss":  # select._violation, then the cost (no time value: every row is late)
        return (f"how far each row misses the budget/deadline at {q}, closest first, then cost at {q} (the cost and "
                "hours columns; --risk)")
    return f"{by} at {q} (the cost and hours columns; --risk)"


def total_words(plan: Plan) -> str:
    """' in total (cost + hours × $22.22/h)' when the plan ranked on the total, else ''."""
    stated = plan.ranking or {}
    tv = stated.get("time_value_usd_per_hour")
    if stated.get("key") != "total" or not isinstance(tv, (int, float)) or tv <= 0:
        return ""
    return f" in total (cost + hours × {money(float(tv))}/h)"


def risk_margin_words(stated: dict) -> str:
    """'; a tight, uncalibrated or stack-caveat row loses to a safe one up to 10% dearer (marked)' ('' if unstated)."""
    margin = stated.get("risk_margin_pct")
    if not isinstance(margin, (int, float)) or margin <= 0:
        return ""
    return (f"; a tight, uncalibrated or stack-caveat row loses to a safe one up to {float(margin):g}% dearer "
            "(marked)")


def ranking_basis(plan: Plan) -> str:
    """'cost at p50 (p80 where the time model is uncalibrated); near-ties (marked) ...' as the plan states it."""
    by = "time" if plan.assumptions.get("sort") == RankBy.TIME else "cost"
    stated = plan.ranking or plan.assumptions.get("ranking")
    if isinstance(stated, str) and stated.strip():
        return stated.strip()
    if isinstance(stated, dict) and stated.get("quantile"):
        text = ranked_by_words(stated, by)
        if stated.get("band"):
            text += f", band {stated['band']} beside"
        tie = stated.get("near_tie_pct")
        if tie:
            text += f"; near-ties within {float(tie):g}%"
            breakers = stated.get("tie_breakers")
            if isinstance(breakers, (list, tuple)) and breakers:
                text += " settled by " + ", then ".join(str(b) for b in breakers)
            text += " (marked)"
        text += risk_margin_words(stated)
        return text
    risk = str(plan.assumptions.get("risk") or "p50")
    quantiles = {_quantile(c.timing.risk_quantile) for c in plan.candidates}
    others = sorted(quantiles - {risk})
    text = f"{by} at {risk}" + (f" ({', '.join(others)} where the time model is uncalibrated)" if others else "")
    if any(c.tie_rule or first(c.findings, K.NEAR_TIE, K.SAFE_OVER_RISKY) for c in plan.candidates):
        text += f"; a row marked '{NEAR_TIE_NOTE}' is ranked above a slightly cheaper one"
    return text


def ranking_quantile(plan: Plan) -> str:
    """The quantile every row was ranked and is shown at (plan.ranking; older plan files: assumptions)."""
    return str(plan.ranking.get("quantile") or plan.assumptions.get("risk") or "p50")


def difference(pick_usd: float, other_usd: float) -> str:
    """The one way a saving is stated: '$2.30 less (41%)' / '$0.74 more (19%)' / 'the same', the share
    always of the other (named) row's cost; no share when that cost is under a dollar."""
    diff = other_usd - pick_usd
    if abs(diff) < CENT:
        return "the same"
    share = f" ({abs(diff) / other_usd:.0%})" if other_usd >= DOLLAR else ""
    return f"{money(abs(diff))} {'less' if diff > 0 else 'more'}{share}"


def versus(pick: Candidate, other: Candidate, name: str, subject: str = "it") -> str:
    """'it costs $2.30 less (41%) than the naive baseline (aws g5.xlarge: $5.60, 3.1 h)'."""
    said = difference(ranked_cost(pick), ranked_cost(other))
    what = (f"{name} ({other.offer.provider} {other.offer.instance_type}: {money(ranked_cost(other))}, "
            f"{duration(ranked_hours(other))})")
    if said == "the same":
        return f"{subject} costs the same as {what}"
    return f"{subject} costs {said} than {what}"


def counts(plan: Plan) -> dict:
    """Scored, meeting the constraints, missing them (after scoring) and ruled out before scoring, per reason.
    scored = meeting + missing whenever one constraint is set (an option can miss both budget and deadline)."""
    scored = int(plan.assumptions.get("candidates_scored") or len(plan.candidates))
    meeting = plan.assumptions.get("candidates_meeting_constraints")
    meeting = int(meeting) if meeting is not None else (scored if plan.constraints_met else 0)
    after = [r for r in plan.rejected if r.reason.startswith(AFTER_SCORING)]
    before = sorted((r for r in plan.rejected if not r.reason.startswith(AFTER_SCORING)), key=lambda r: -r.count)
    return {"scored": scored, "meeting": meeting, "shown": len(plan.candidates), "missing": after,
            "ruled_out": before}


def counts_sentence(plan: Plan, shown: int | None = None) -> str:
    """'626 options scored, 626 meet the constraints; the table shows the best 10, ranked by ...'."""
    n = counts(plan)
    text = f"{n['scored']:,} options scored (offer × stack pairs that fit), {n['meeting']:,} meet the constraints"
    for r in n["missing"]:
        text += f", {r.count:,} {r.reason}"
    return text + f"; shown: {n['shown'] if shown is None else shown:,}, ranked by {ranking_basis(plan)}"


def ranked_figures(c: Candidate) -> str:
    """'$2,160.80 / 4.7 h': cost and wall hours at the ranking quantile, as the front and the chart print them."""
    return f"{money(ranked_cost(c))} / {ranked_hours(c):,.1f} h"


def pareto_points(plan: Plan) -> list[tuple[Candidate, str]]:
    """The front, fastest first, each with the figures it was computed on ('$2,160.80 / 4.7 h')."""
    return [(c, ranked_figures(c)) for c in sorted(plan.pareto, key=lambda c: (ranked_hours(c), ranked_cost(c)))]


def pareto_knee(plan: Plan) -> Candidate | None:
    """The front's knee: the point farthest below the straight line joining its cheapest and its fastest ends,
    cost and hours each scaled to [0, 1] over the front (the Kneedle idea: Satopaa et al. 2011, "Finding a
    'Kneedle' in a Haystack", ICDCS workshops); None with fewer than three points."""
    points = pareto_points(plan)
    if len(points) < 3:
        return None
    costs = [ranked_cost(c) for c, _ in points]
    hours = [ranked_hours(c) for c, _ in points]
    c_span, h_span = (max(costs) - min(costs)) or 1.0, (max(hours) - min(hours)) or 1.0
    # scaled, both ends sit at x + y = 1; the knee is the point with the smallest x + y
    score = [(k - min(costs)) / c_span + (h - min(hours)) / h_span for k, h in zip(costs, hours)]
    return points[min(range(len(points)), key=score.__getitem__)][0]


def knee_words(plan: Plan) -> str:
    """'The Pareto front's knee ... is 32× H200 aws p5en.48xlarge: $2,931.87 and 11.6 h, against #1's ...' ('' when
    the knee is #1)."""
    knee = pareto_knee(plan)
    if knee is None or not plan.candidates or not plan.constraints_met:
        return ""
    top = plan.candidates[0]
    share = float((plan.ranking or {}).get("near_tie_pct") or 0) / 100
    close = (abs(ranked_cost(knee) - ranked_cost(top)) <= share * ranked_cost(top)
             and abs(ranked_hours(knee) - ranked_hours(top)) <= share * ranked_hours(top))
    if close:  # #1 itself, or a near-tie of it (the same trade, another seller)
        return ""
    gpus = f"{knee.offer.gpu_count * knee.nodes}× {knee.offer.gpu_model}"
    return (f"The Pareto front's knee (where a little more money stops buying much time) is {gpus} "
            f"{knee.offer.provider} {knee.offer.instance_type}: {money(ranked_cost(knee))} and {ranked_hours(knee):,.1f} h, "
            f"against #1's {money(ranked_cost(top))} and {ranked_hours(top):,.1f} h")


def pareto_basis(plan: Plan) -> str:
    """What the front's figures are: the ranking quantile's, the table's."""
    gain = (plan.ranking or {}).get("pareto_min_gain_pct")  # a plan saved before the rule has none
    return (f"at {ranking_quantile(plan)}, the figures each option was ranked on (as in the table)"
            + (f"; an option joins only when at least {gain:g}% faster than every cheaper one" if gain else ""))


def small_workload(plan: Plan) -> list[str]:
    """Warnings about the workload's size against one optimizer step (the planner's own are in plan.warnings)."""
    w = plan.workload
    tokens, batch = w.get("tokens") or w.get("train_tokens"), w.get("global_batch_tokens")
    if isinstance(tokens, int) and isinstance(batch, int) and 0 < tokens < batch:
        return [f"The data ({tokens:,} tokens per epoch) is smaller than one global batch ({batch:,} tokens): "
                f"the run is a single partial optimizer step. Lower --global-batch (or --global-batch-tokens) "
                f"or add data."]
    return []


def managed_summary(plan: Plan) -> str:
    """One sentence: the cheapest managed per-token service for the same tokens beside the self-hosted
    top pick ("" when no service lists the model and method). The table, report and card all print it."""
    if not plan.managed_alternatives:
        return ""
    m = plan.managed_alternatives[0]
    price = money(m.usd) + (f"-{money(m.usd_high)}" if m.usd_high is not None else "")
    dated = m.observed_at or "date unknown"
    text = (f"A managed service, {m.provider} {m.service} ({m.method}), would cost {price} for "
            f"{managed_tokens(plan.workload, m.billed_m_tokens)} (price dated {dated}, {m.source.split(' ')[0]})")
    if plan.candidates and plan.constraints_met:
        top = ranked_cost(plan.candidates[0])  # at the ranking quantile, the figure the table shows
        if top <= m.usd:
            text += f"; self-hosting saves {money(m.usd - top)} or more, but you run it"
        else:
            text += f"; it is cheaper than self-hosting by up to {money(top - m.usd)}"
    return text + "."
