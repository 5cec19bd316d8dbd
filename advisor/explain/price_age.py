"""How old a shown price is: the days since its source observed it, and whether a report calls it stale
(the plan's threshold, or the sheet's own mark), and whether it is near that threshold. The decision card, the web
page's price line and the report's tables read the same functions."""

from __future__ import annotations

from datetime import UTC, datetime

from advisor.results import Candidate, Plan

# A dated price this many days or fewer from the staleness limit is "ageing": the card says so rather than call it
# fresh. 14 days is a policy, not a measurement: about the time between a plan and the booking it leads to (sign-off,
# quota request), so a price that ageing is likely stale by the time it is paid. The measured drift behind the limit
# itself is in pricing/data/OBSERVATIONS.md ("Staleness").
AGEING_DAYS = 14


def _parse(ts: str) -> datetime | None:
    try:
        d = datetime.fromisoformat(ts.strip().replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    return d if d.tzinfo else d.replace(tzinfo=UTC)


def price_age_days(c: Candidate, plan: Plan) -> int | None:
    """Days from the price's date to the day the plan measured ages on (its pinned day, as the plan's own table
    did, else the moment it was generated)."""
    now = _parse(plan.prices_as_of) or _parse(plan.generated_at) or datetime.now(UTC)
    when = _parse(c.offer.price_date)
    return None if when is None else (now - when).days


def is_stale(c: Candidate, plan: Plan) -> bool:
    """Stale as the sheet said when planned, or older than the plan's stale threshold now."""
    age = price_age_days(c, plan)
    return c.offer.stale or (age is not None and age > plan.stale_days)


def days_to_stale(c: Candidate, plan: Plan) -> int | None:
    """Whole days until the price passes the plan's staleness limit (0 or less: past it; None: undated)."""
    age = price_age_days(c, plan)
    return None if age is None else int(plan.stale_days) - age


def is_ageing(c: Candidate, plan: Plan) -> bool:
    """Dated, not yet stale, and at most AGEING_DAYS from the staleness limit."""
    left = days_to_stale(c, plan)
    return not is_stale(c, plan) and left is not None and left <= AGEING_DAYS
