"""The plan's notice, the first line a reader sees when nothing meets the constraints or nothing fits."""

from __future__ import annotations

NO_OFFER = "No offer matches the filters."


def unmet(budget: bool, deadline: bool, risk: str) -> str:
    """'No candidate meets the budget and deadline at p80; showing the closest.'"""
    what = " and ".join(x for x, v in (("budget", budget), ("deadline", deadline)) if v)
    return f"No candidate meets the {what} at {risk}; showing the closest."


def nothing_fits(reason: str | None) -> str:
    """Nothing fits, with the reason most options were ruled out for (None: no reason counted)."""
    return ("Nothing fits: no offer can hold this job with the allowed settings"
            + (f" (most options ruled out: {reason})." if reason else "."))
