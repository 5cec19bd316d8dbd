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

from advisor.explain import remedy as remedy_words
from advisor.model.spec import MAX_NODES
from advisor.planner.request import PlanRequest
from advisor.results import Candidate, Plan, ranked_cost, ranked_hours
from advisor.results.facts import Finding, FindingKind
from advisor.stacks import METHODS

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


def _identity(c: Candidate) -> tuple:
    """What a near miss must differ from #1 in: the GPUs, nodes, seller, instance type and spot tier."""
    return c.offer.gpu_count * c.nodes, c.offer.gpu_model, c.nodes, c.offer.provider, c.offer.instance_type, c.cost.spot


def near_miss(flags: str, best: Candidate, saving: float, request: PlanRequest) -> Finding:
    """One near miss as a finding: the exact flags, the row it would pick and how much less in total it costs."""
    return Finding(kind=FindingKind.NEAR_MISS, figures={
        "flags": flags, "gpus": int(best.offer.gpu_count * best.nodes), "gpu_model": best.offer.gpu_model,
        "nodes": int(best.nodes), "provider": best.offer.provider, "instance_type": best.offer.instance_type,
        "spot": bool(best.cost.spot), "stale": bool(best.offer.stale), "hours": float(ranked_hours(best)),
        "usd": float(ranked_cost(best)), "saving_usd": float(saving), "time_value": float(request.time_value),
        "risk": request.risk})


def near_misses(request: PlanRequest, top: Candidate,
                run: Callable[[PlanRequest], Plan]) -> tuple[list[Finding], int]:
    """When the plan meets --deadline / --budget: what a slightly looser one (up to NEAR_MISS_SHARE) or
    --allow-stale would pick instead, where that is cheaper in total than #1 by more than a near-tie, as NEAR_MISS
    findings (advisor/explain/warnings.py words them), and the re-plans run. Re-plans run without remedies of
    their own."""
    from advisor.planner.ranking import NEAR_TIE_PCT, total

    tv = request.time_value
    mine = total(ranked_cost(top), ranked_hours(top), tv)
    out: list[Finding] = []
    runs = 0
    for flags, update in near_miss_levers(request) if (request.deadline_hours or request.budget) else []:
        runs += 1
        try:
            found = run(request.model_copy(update={**update, "top": 1}))
        except Exception:  # a lever the data cannot serve: nothing to offer
            continue
        best = found.candidates[0] if found.constraints_met and found.candidates else None
        if best is None or _identity(best) == _identity(top):
            continue
        theirs = total(ranked_cost(best), ranked_hours(best), tv)
        if theirs < mine - NEAR_TIE_PCT / 100 * ranked_cost(top):
            out.append(near_miss(_exact_flags(flags, request, best), best, mine - theirs, request))
    return out, runs


def search(request: PlanRequest, closest: Candidate, run: Callable[[PlanRequest], Plan] | None) -> tuple[str, int]:
    """(the remedy sentence, re-plans run). `run` plans a request without a remedy search of its own; None:
    only what the closest candidate says (tokens, deadline, budget)."""
    met: list[tuple[str, Candidate]] = []
    missed: list[tuple[str, str | None]] = []
    runs = 0
    for flags, update in levers(request) if run is not None else []:
        runs += 1
        relaxed = request.model_copy(update={**update, "top": 1})
        try:
            found = run(relaxed)
        except Exception as exc:  # a lever the data cannot serve (no offer left): say so, keep searching
            missed.append((_looser_flags(flags, request), str(exc)))
            continue
        best = found.spot_alternative if update.get("spot") else (found.candidates[0] if found.constraints_met
                                                                  and found.candidates else None)
        if best is not None:
            met.append((_exact_flags(flags, request, best), best))
        else:
            missed.append((_looser_flags(flags, request), None))
    met.sort(key=lambda m: (ranked_cost(m[1]), remedy_words.lever(*m)))
    return remedy_words.remedy(request.risk, met, missed, _analytic(request, closest)), runs


def _analytic(request: PlanRequest, c: Candidate) -> remedy_words.Closest:
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
    deadline = math.ceil(total) if request.deadline_hours is not None and total > request.deadline_hours else None
    budget = (math.ceil(ranked_cost(c)) if request.budget is not None and ranked_cost(c) > request.budget
              else None)
    return remedy_words.Closest(candidate=c, tokens_fit=request.tokens * share, train_tokens=request.train_tokens,
                                deadline_hours=deadline, budget_usd=budget)
