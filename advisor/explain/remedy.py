"""The remedy in words: which lifted limits meet the budget / deadline and for what, at the table's quantile,
and what the closest candidate needs (advisor/planner/remedy.py searches; this says what it found)."""

from __future__ import annotations

from dataclasses import dataclass

from advisor.results import Candidate, ranked_cost, ranked_hours
from advisor.units import MILLION, money, tokens


@dataclass(frozen=True)
class Closest:
    """What the closest candidate says without a re-plan: the tokens that fit on it, and the deadline (whole hours)
    or budget (whole dollars) the requested tokens need on it (None: the limit is met or not set)."""

    candidate: Candidate
    tokens_fit: float
    train_tokens: float
    deadline_hours: int | None
    budget_usd: int | None


def what(c: Candidate) -> str:
    gpus = f"{c.offer.gpu_count * c.nodes}× {c.offer.gpu_model}" + (f" ({c.nodes} nodes)" if c.nodes > 1 else "")
    return f"{gpus} {c.offer.provider} {c.offer.instance_type}" + (" on spot" if c.cost.spot else "")


def lever(flags: str, best: Candidate) -> str:
    """One lifted limit that meets the constraints, with what it runs on and its figures."""
    return f"{flags}: {what(best)}, {ranked_hours(best):,.1f} h, {money(ranked_cost(best))}"


def _closest(k: Closest) -> list[str]:
    c, where = k.candidate, what(k.candidate)
    out = [f"--tokens {tokens(k.tokens_fit, flag=True)} (fewer tokens) fits on {where}" if k.tokens_fit >= MILLION
           else f"even the setup alone does not fit on {where}"]
    need = []
    if k.deadline_hours is not None:
        need.append((f"--deadline {k.deadline_hours}h", "a later deadline"))
    if k.budget_usd is not None:
        need.append((f"--budget {k.budget_usd}", "a larger budget"))
    if need:
        out.append(f"{' '.join(f for f, _ in need)} ({' and '.join(w for _, w in need)}) for the requested "
                   f"{tokens(k.train_tokens, flag=True)} tokens on {where}: {ranked_hours(c):,.1f} h, "
                   f"{money(ranked_cost(c))}")
    return out


def remedy(risk: str, met: list[tuple[str, Candidate]], missed: list[tuple[str, str | None]], closest: Closest) -> str:
    """'Remedy (figures at p80): --max-nodes 8: ...; --tokens 40M (fewer tokens) fits on ...; tried without
    meeting it: --spot.' `met`: (flags, best candidate) cheapest first; `missed`: (flags, why there is no plan; None: planned, not met)."""
    parts = [lever(flags, best) for flags, best in met] + _closest(closest)
    text = f"Remedy (figures at {risk}): " + "; ".join(parts)
    if missed:
        text += "; tried without meeting it: " + ", ".join(
            flags + (f" (no plan: {error[:80]})" if error is not None else "") for flags, error in missed)
    return text + "."
