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
from advisor.stacks import METHODS

REMEDY_MAX_PLANS = 5  # re-plans one remedy search may run (counted, never timed)
WIDER_NODES = 8  # the first node limit tried when the request allows fewer


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
    return out[:REMEDY_MAX_PLANS]


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
            missed.append((flags, str(exc)))
            continue
        best = found.spot_alternative if update.get("spot") else (found.candidates[0] if found.constraints_met
                                                                  and found.candidates else None)
        if best is not None:
            met.append((flags, best))
        else:
            missed.append((flags, None))
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
