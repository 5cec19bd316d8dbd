"""One scenario's column of the compare view: its #1 as the answers a budget owner compares (cost and wall time at
the ranked quantile, hardware, stack, memory headroom, price, a managed service, constraints), in words."""

from __future__ import annotations

from advisor.explain.card import cost_band, hardware, time_band, where
from advisor.explain.claims import ranking_quantile
from advisor.explain.price_age import is_stale
from advisor.results import Plan
from advisor.results.columns import REPORT_COST, REPORT_SHORT_HOURS
from advisor.units import gb, money

ROWS = ("Cost of #1", "Wall time", "Hardware", "Stack", "Memory headroom", "Price", "Managed instead", "Constraints")


def cells(plan: Plan) -> list[dict]:
    """The scenario's column: one {value, detail} per row of ROWS."""
    managed = _managed(plan)
    if not plan.candidates:
        none = {"value": "nothing fits", "detail": plan.notice or ""}
        return [none] + [{"value": "–", "detail": ""}] * 5 + [managed, _constraints(plan)]
    c = plan.candidates[0]
    free = c.fit.usable_bytes - c.fit.peak_bytes
    return [
        {"value": REPORT_COST.cell(c), "detail": f"at {ranking_quantile(plan)} · {cost_band(c)}"},
        {"value": REPORT_SHORT_HOURS.cell(c), "detail": f"at {ranking_quantile(plan)} · {time_band(c)}"},
        {"value": hardware(c), "detail": where(c)},
        {"value": c.label or c.stack.label(), "detail": f"micro-batch {c.shape.micro_batch} × accumulation "
                                                         f"{c.shape.grad_accum} at {c.shape.seq_len:,} tokens"},
        {"value": f"{gb(free)} free", "detail": f"peak {gb(c.fit.peak_bytes)} of {gb(c.fit.usable_bytes)} per GPU"
                                                + (" (tight)" if c.fit.tight else "")},
        {"value": f"{money(c.cost.price_hour)}/h", "detail": f"{c.offer.source or 'unnamed source'}, "
                                                             f"{c.offer.price_date}"
                                                             + (" (stale)" if is_stale(c, plan) else "")},
        managed,
        _constraints(plan),
    ]


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
