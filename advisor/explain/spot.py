"""The spot alternative in words: its hours and cost at the table's quantile, its interruption allowance and
its own price date, against the on-demand #1 (the terminal's line, the card's and the web page's)."""

from __future__ import annotations

from advisor.explain.claims import ranked_cost, ranked_hours, ranking_quantile
from advisor.results import Candidate, Plan
from advisor.units import money


def spot_line(plan: Plan, s: Candidate) -> str:
    """The spot alternative against the plan's on-demand #1, at the table's quantile, with its interruption
    allowance and the spot price's date."""
    q = ranking_quantile(plan)
    what = (f"On spot: {s.offer.provider} {s.offer.instance_type}" + (f" ×{s.nodes} nodes" if s.nodes > 1 else "")
            + f", {ranked_hours(s):,.1f} h and {money(ranked_cost(s))} at {q} (including {s.timing.interruption_hours:,.2f} h "
            f"of expected interruptions at p50; spot price {money(s.cost.price_hour)}/h, "
            f"{getattr(s.offer, 'spot_price_date', '') or s.offer.price_date})")  # the spot quote's own date
    top = plan.candidates[0] if plan.candidates else None
    if top is None or top.cost.spot:
        return what + "."
    diff = ranked_cost(top) - ranked_cost(s)
    share = f" ({abs(diff) / ranked_cost(top):.0%})" if ranked_cost(top) > 0 else ""
    verdict = (f"saves {money(diff)}{share}" if diff > 0.005 else f"costs {money(-diff)} more{share}" if diff < -0.005
               else "costs the same")
    return (what + f": {verdict} against the on-demand #1 ({top.offer.provider} {top.offer.instance_type}, "
            f"{money(ranked_cost(top))}, {ranked_hours(top):,.1f} h).")
