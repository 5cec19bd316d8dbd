"""Remedies that search: when no candidate meets --budget / --deadline, re-plan once per limit the user
could lift and say, with the exact flags, which of them meet it and for what, at the table's quantile.

The limits tried (at most REMEDY_MAX_PLANS re-plans, each counted in the plan's assumptions as
`remedy_plans`): more nodes (--max-nodes 8, or double the current limit) and no --max-gpus; any
provider, region, GPU and seller (without --providers / --regions / --gpu / --no-marketplace); spot
capacity (--spot); every method (--methods full,lora,qlora). Without a re-plan, from the closest
candidate: the tokens that would fit (--tokens), and the deadline or budget it needs (--deadline /
--budget). A re-plan runs without its own remedy search (no recursion).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from advisor.model.spec import MAX_NODES
from advisor.planner.request import PlanRequest
from advisor.results import Candidate, Plan, ranked_cost, ranked_hours
from advisor.stacks import METHODS
from advisor.units import BILLION, MILLION, money

REMEDY_MAX_PLANS = 7  # re-plans one remedy search may run (counted, never timed)
WIDER_NODES = 8  # the first node limit tried when the request allows fewer
# Near misses (issue 45): what a deadline or budget up to this much looser buys, and what --allow-stale adds. 35 %:
# the far end of "a little later / a little more" a team would still ask its sponsor for (10-35 % in the issue).
NEAR_MISS_SHARE = 0.35


def levers(request: PlanRequest) -> list[tuple[str, dict]]:
    """(flags, PlanRequest fields to change) for every limit the user set that a re-plan could lift."""
    out: list[tuple[str, dict]] = []
    nodes = WIDER_NODES if request.max_nodes < WIDER_NODES else min(MAX_NODES, request.max_nodes * 2)
    if nodes > request.max_nodes:
        out.append((f"--max-nodes {nodes}" + (" without --max-gpus" if request.max_gpus else ""),
                    {"max_nodes": nodes, "max_gpus": None}))
    elif request.max_gpus is not None:
        out.append(("without --max-gpus", {"max_gpus": None}))
    scoped = [f for f, v in (("--providers", request.providers), ("--regions", request.regions),
                             ("--gpu", request.gpus), ("--no-marketplace", request.no_marketplace)) if v]
    if scoped:
        out.append(("without " + " / ".join(scoped), {"providers": (), "regions": (), "gpus": (),
                                                       "no_marketplace": False}))
    if not request.spot:
        out.append(("--spot", {"spot": True}))
    if set(request.methods) != set(METHODS):
        out.append((f"--methods {','.join(METHODS)}", {"methods": METHODS}))
    return (out + near_miss_levers(request))[:REMEDY_MAX_PLANS]


def near_miss_levers(request: PlanRequest) -> list[tuple[str, dict]]:
    """(flags, fields) for the near misses: the deadline and the budget NEAR_MISS_SHARE looser, and --allow-stale
    (stale prices ranked too). The flags printed are the found row's own figures (`near_misses`)."""
    out: list[tuple[str, dict]] = []
    if request.deadline_hours is not None:
        out.append(("--deadline", {"deadline_hours": request.deadline_hours * (1 + NEAR_MISS_SHARE)}))
    if request.budget is not None:
        out.append(("--budget", {"budget": request.budget * (1 + NEAR_MISS_SHARE)}))
    if not request.allow_stale:
        looser = [(f, u) for f, u in out]
        out.append(("--allow-stale", {"allow_stale": True}))
        if looser:  # both: the stale offers may meet only the looser limit
            out.append((" ".join(f for f, _ in looser) + " --allow-stale",
                        {k: v for _, u in looser for k, v in u.items()} | {"allow_stale": True}))
    return out


def _looser_flags(flags: str, request: PlanRequest) -> str:
    """A near-miss lever's flags as tried: the deadline or budget NEAR_MISS_SHARE looser (`--deadline 17h`)."""
    looser = {}
    if request.deadline_hours is not None:
        looser["--deadline"] = f"--deadline {math.ceil(request.deadline_hours * (1 + NEAR_MISS_SHARE))}h"
    if request.budget is not None:
        looser["--budget"] = f"--budget {math.ceil(request.budget * (1 + NEAR_MISS_SHARE))}"
    return " ".join(looser.get(part, part) for part in flags.split())


def _exact_flags(flags: str, request: PlanRequest, best: Candidate) -> str:
    """A near-miss lever's flags with the found row's own figures: `--deadline 13h` for a 12.1 h run."""
    exact = {"--deadline": f"--deadline {math.ceil(ranked_hours(best))}h",
             "--budget": f"--budget {math.ceil(ranked_cost(best))}"}
    return " ".join(exact.get(part, part) for part in flags.split())


def near_misses(request: PlanRequest, top: Candidate, run: Callable[[PlanRequest], Plan]) -> tuple[str, int]:
    """When the plan meets --deadline / --budget: what a slightly looser one (up to NEAR_MISS_SHARE) or
    --allow-stale would pick instead, where that is cheaper in total than #1 by more than a near-tie; ('', runs)
    when nothing is. Re-plans run without remedies of their own."""
    from advisor.planner.ranking import NEAR_TIE_PCT, total

    tv = request.time_value
    mine = total(ranked_cost(top), ranked_hours(top), tv)
    found_text: list[str] = []
    runs = 0
    for flags, update in near_miss_levers(request) if (request.deadline_hours or request.budget) else []:
        runs += 1
        try:
            found = run(request.model_copy(update={**update, "top": 1}))
        except Exception:  # a lever the data cannot serve: nothing to offer
            continue
        best = found.candidates[0] if found.constraints_met and found.candidates else None
        if best is None or _what(best) == _what(top):
            continue
        theirs = total(ranked_cost(best), ranked_hours(best), tv)
        if theirs < mine - NEAR_TIE_PCT / 100 * ranked_cost(top):
            found_text.append(near_miss_words(_exact_flags(flags, request, best), best, mine - theirs, tv))
    return (f"Near misses (figures at {request.risk}): " + "; ".join(found_text) + ".") if found_text else "", runs


def near_miss_words(flags: str, best: Candidate, saving: float, time_value: float) -> str:
    """'--deadline 13h: 64× H200 aws p5en.48xlarge, 12.1 h, $3,483.00 ($8,498.30 less in total than #1)'."""
    stale = " (a stale price)" if best.offer.stale else ""
    what = "in total " if time_value else ""
    return (f"{flags}: {_what(best)}{stale}, {ranked_hours(best):,.1f} h, {money(ranked_cost(best))} "
            f"({money(saving)} less {what}than #1)")


def _what(c: Candidate) -> str:
    gpus = f"{c.offer.gpu_count * c.nodes}× {c.offer.gpu_model}" + (f" ({c.nodes} nodes)" if c.nodes > 1 else "")
    return f"{gpus} {c.offer.provider} {c.offer.instance_type}" + (" on spot" if c.cost.spot else "")


def search(request: PlanRequest, closest: Candidate, run: Callable[[PlanRequest], Plan] | None) -> tuple[str, int]:
    """(the remedy sentence, re-plans run). `run` plans a request without a remedy search of its own; None:
    only what the closest candidate says (tokens, deadline, budget)."""
    q = request.risk
    met: list[tuple[float, str]] = []
    missed: list[str] = []
    runs = 0
    for flags, update in levers(request) if run is not None else []:
        runs += 1
        relaxed = request.model_copy(update={**update, "top": 1})
        try:
            found = run(relaxed)
        except Exception as exc:  # a lever the data cannot serve (no offer left): say so, keep searching
            missed.append(f"{_looser_flags(flags, request)} (no plan: {str(exc)[:80]})")
            continue
        best = found.spot_alternative if update.get("spot") else (found.candidates[0] if found.constraints_met
                                                                  and found.candidates else None)
        if best is not None:
            flags = _exact_flags(flags, request, best)
            met.append((ranked_cost(best), f"{flags}: {_what(best)}, {ranked_hours(best):,.1f} h, {money(ranked_cost(best))}"))
        else:
            missed.append(_looser_flags(flags, request))
    parts = [text for _, text in sorted(met)]
    parts += _analytic(request, closest)
    text = f"Remedy (figures at {q}): " + "; ".join(parts)
    if missed:
        text += "; tried without meeting it: " + ", ".join(missed)
    return text + ".", runs


def _analytic(request: PlanRequest, c: Candidate) -> list[str]:
    """From the closest candidate: the tokens that fit, and the deadline / budget the whole job needs."""
    t = c.timing
    total, setup = ranked_hours(c), t.setup_hours
    scaling = max(total - setup, 1e-9)  # training, checkpoints, interruptions: ∝ tokens
    shares = []
    if request.budget is not None and ranked_cost(c):
        shares.append((request.budget / ranked_cost(c) * total - setup) / scaling)
    if request.deadline_hours is not None:
        shares.append((request.deadline_hours - setup) / scaling)
    share = max(min(shares), 0.0) if shares else 1.0
    tokens = request.tokens * share
    out = []
    where = _what(c)
    if tokens >= MILLION:
        out.append(f"--tokens {_tokens(tokens)} (fewer tokens) fits on {where}")
    else:
        out.append(f"even the setup alone does not fit on {where}")
    need = []
    if request.deadline_hours is not None and total > request.deadline_hours:
        need.append((f"--deadline {math.ceil(total)}h", "a later deadline"))
    if request.budget is not None and ranked_cost(c) > request.budget:
        need.append((f"--budget {math.ceil(ranked_cost(c))}", "a larger budget"))
    if need:
        out.append(f"{' '.join(f for f, _ in need)} ({' and '.join(w for _, w in need)}) for the requested "
                   f"{_tokens(request.train_tokens)} tokens on {where}: {ranked_hours(c):,.1f} h, {money(ranked_cost(c))}")
    return out


def _tokens(n: float) -> str:
    return f"{n / BILLION:.3g}B" if n >= BILLION else f"{n / MILLION:.3g}M"
