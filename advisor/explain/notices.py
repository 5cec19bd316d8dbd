"""The plan's notice, the first line a reader sees when nothing meets the constraints or nothing fits."""

from __future__ import annotations

from advisor.units import gb

NO_OFFER = "No offer matches the filters."


def unmet(budget: bool, deadline: bool, risk: str) -> str:
    """'No candidate meets the budget and deadline at p80; showing the closest.'"""
    what = " and ".join(x for x, v in (("budget", budget), ("deadline", deadline)) if v)
    return f"No candidate meets the {what} at {risk}; showing the closest."


def nothing_fits(reason: str | None) -> str:
    """Nothing fits, with the reason most options were ruled out for (None: no reason counted)."""
    return ("Nothing fits: no offer can hold this job with the allowed settings"
            + (f" (most options ruled out: {reason})." if reason else "."))


def short_of_memory(where: str, method: str, need: int, limit: int, headroom: float, at_loading: bool) -> str:
    """Why a GPU holds no config of a method: what the leanest needs, and when (model loading or the step)."""
    when = (" at model loading (each rank loads the whole quantised model before it is sharded)" if at_loading
            else " even at micro-batch 1")
    return f"{where}: {method} fine-tuning needs {gb(need)} per GPU{when} (limit {gb(limit)} with {headroom:.0%} headroom)"
