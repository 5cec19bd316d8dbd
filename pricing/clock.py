"""'Now' for price ages: the one place that asks for GPU_ADVISOR_TODAY (read by pricing.settings).

A price's age (and so whether it is stale) depends on the day it is read. Output that is checked
into the repository (README examples, reference-plan snapshots) must not change as the calendar
moves, so `GPU_ADVISOR_TODAY=YYYY-MM-DD` pins 'today' to that day, 00:00 UTC. Every age and
staleness figure (pricing.loader.age_days, pricing.cache.age_days) takes its 'now' from `now()`.
Validation of dates in the future keeps the real clock: a pinned day must not let a file claim
a date that has not happened yet.
"""

from __future__ import annotations

import datetime as dt

from pricing import settings

ENV = "GPU_ADVISOR_TODAY"


def pinned() -> dt.datetime | None:
    """The pinned day (00:00 UTC) from GPU_ADVISOR_TODAY, or None when it is unset or empty.
    A value that is not a YYYY-MM-DD date from 2000 to 2099 is refused (one line, exit 2): silently falling back
    to the real clock would unpin the very output the variable exists to pin."""
    return settings.today()


def now() -> dt.datetime:
    """The moment ages are measured at: the pinned day, else the current UTC time."""
    return pinned() or dt.datetime.now(dt.UTC)
