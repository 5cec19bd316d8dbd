"""One scenario's column of the compare view: its #1 as the answers a budget owner compares (cost and wall time at
the ranked quantile, hardware, stack, memory headroom, price, a managed service, constraints), in words."""

from __future__ import annotations

from advisor.explain.card import cost_band, hardware, time_band, where
from advisor.explain.claims import ranking_quantile
from advisor.explain.price_age import is_stale
from advisor.results import Plan, ranked_cost
from advisor.results.columns import REPORT_COST, REPORT_SHORT_HOURS
from advisor.units import gb, money

ROWS = ("Cost of #1", "Wall time", "Hardware", "Stack", "Memory headroom", "Price", "On spot", "Managed instead",
        "Constraints")


def cells(plan: Plan) -> list[dict]:
    """The scenario's column: one {value, detail} per row of ROWS."""
    managed = _managed(plan)
    if not plan.candidates:
        none = {"value": "nothing fits", "detail": plan.notice or ""}
        return [none] + [{"value": "–", "detail": ""}] * 6 + [managed, _constraints(plan)]
    c = plan.candidates[0]
    q = ranking_quantile(plan)
    free = c.fit.usable_bytes - c.fit.peak_bytes
    return [
        {"value": f"{REPORT_COST.cell(c)} at {q}", "detail": cost_band(c)},
        {"value": f"{REPORT_SHORT_HOURS.cell(c)} at {q}", "detail": time_band(c)},
        {"value": hardware(c), "detail": where(c)},
        {"value": c.label or c.stack.label(), "detail": f"micro-batch {c.shape.micro_batch} × accumulation "
                                                         f"{c.shape.grad_accum} at {c.shape.seq_len:,} tokens"},
        {"value": f"{gb(free)} free", "detail": f"peak {gb(c.fit.peak_bytes)} of {gb(c.fit.usable_bytes)} per GPU"
                                                + (" (tight)" if c.fit.tight else "")},
        {"value": f"{money(c.cost.price_hour)}/h", "detail": f"{c.offer.source or 'unnamed source'}, "
                                                             f"{c.offer.price_date}"
                                                             + (" (stale)" if is_stale(c, plan) else "")},
        _spot(plan),
        managed,
        _constraints(plan),
    ]


def _spot(plan: Plan) -> dict:
    """The spot alternative's cost and hours at the ranking quantile, as the CLI's 'On spot' line gives them."""
    s = plan.spot_alternative
    if s is None:
        return {"value": "none fits" if plan.workload.get("spot") else "not priced",
                "detail": "no spot offer fits this run" if plan.workload.get("spot") else "tick spot to price it"}
    return {"value": f"{money(ranked_cost(s))} at {ranking_quantile(plan)}",
            "detail": f"{s.offer.provider} {s.offer.instance_type}, {REPORT_SHORT_HOURS.cell(s)}, spot price "
                      f"{money(s.cost.price_hour)}/h"}


def _managed(plan: Plan) -> dict:
    if not plan.managed_alternatives:
        return {"value": "none listed", "detail": "no managed service lists this model and method"}
    m = plan.managed_alternatives[0]
    price = money(m.usd) + (f" – {money(m.usd_high)}" if m.usd_high is not None else "")
    return {"value": price, "detail": f"{m.provider} {m.service} ({m.method}), price dated "
                                      f"{m.observed_at or 'unknown'}"}


def _constraints(plan: Plan) -> dict:
    if plan.constraints_met:
        return {"value": "met", "detail": ""}
    return {"value": "not met", "detail": plan.notice or ""}
