"""Planner: every offer × node count × technique stack, priced for the whole run, ranked.

`plan(request: PlanRequest) -> Plan` runs named stages, each a function of typed inputs:

1. offers      (planner.offers)  sheets -> usable instance rows, filters, dominance pruning, tiers
2. configs     (planner.configs) distinct GPU model × GPUs × nodes × stack (8-bit AdamW only if needed)
3. memory fits (planner.configs) the engine's micro-batch for each config: a frozen `Fit`
4. timing      (planner.configs) step time and training hours per quantile: a frozen `StepTime`
5. costing     (planner.costing) the one place wall hours (training, setup, checkpoints,
                                 interruptions) and billed cost are computed, for p10/p50/p90/rank
6. selection   (planner.select, planner.host, planner.ranking) host checks, constraints, ranking,
                                 near-ties, one row per offer, Pareto front, best-per, baseline, spot
7. rejections  (planner.rejections) why every ruled-out option was ruled out, with a count
Everything shown is then checked exactly with the engine (`Evaluator.settle`) and re-ranked if
a predicted micro-batch shrank (planner.pipeline); `assemble` (planner.assemble) turns positions into
typed `Candidate`s, which only copy what the stages computed; planner.findings records what the planner
found about each candidate and the plan as typed `Finding` rows, and advisor/explain/ writes their words
(notes, warnings, the remedy).

This module only hands the planner's public names on.
"""

from advisor.planner.configs import stacks_for
from advisor.planner.costing import billing, score
from advisor.planner.pipeline import plan
from advisor.planner.request import PlanRequest

__all__ = ["PlanRequest", "plan", "stacks_for", "billing", "score"]
