"""How old a shown price is: the days since its source observed it, and whether a report calls it stale
(the plan's threshold, or the sheet's own mark). The decision card and the report's tables read the same
two functions."""

from __future__ import annotations

from datetime import UTC, datetime

from advisor.results import Candidate, Plan


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
