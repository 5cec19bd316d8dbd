"""'Now' for price ages: the one place that reads GPU_ADVISOR_TODAY.

A price's age (and so whether it is stale) depends on the day it is read. Output that is checked
into the repository (README examples, reference-plan snapshots) must not change as the calendar
moves, so `GPU_ADVISOR_TODAY=YYYY-MM-DD` pins 'today' to that day, 00:00 UTC. Every age and
staleness figure (pricing.loader.age_days, pricing.cache.age_days) takes its 'now' from `now()`.
Validation of dates in the future keeps the real clock: a pinned day must not let a file claim
a date that has not happened yet.
"""

from __future__ import annotations

import datetime as dt
import os
import re

from pricing.errors import PriceInputError

ENV = "GPU_ADVISOR_TODAY"
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def pinned() -> dt.datetime | None:
    """The pinned day (00:00 UTC) from GPU_ADVISOR_TODAY, or None when it is unset or empty.
    A value that is not a YYYY-MM-DD date is refused (one line, exit 2): silently falling back
    to the real clock would unpin the very output the variable exists to pin."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return None

    try:
        if not _DAY.fullmatch(text):
            raise ValueError
        day = dt.date.fromisoformat(text)
    except ValueError:
        raise PriceInputError(f"{ENV}: expected a date like 2026-12-01 (YYYY-MM-DD), got '{text[:40]}'") from None
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)


def now() -> dt.datetime:
    """The moment ages are measured at: the pinned day, else the current UTC time."""
    return pinned() or dt.datetime.now(dt.UTC)
