"""The lines the terminal prints under the plan table (and `--format md` lists): the workload, the counts, why #1,
the near-tie marks, the host's country, the baseline, spot, a managed service, measured rows, the Pareto front and
what was ruled out; each line written from the plan alone."""

from __future__ import annotations

from advisor.explain import claims
from advisor.explain.card import why
from advisor.explain.notes import job_tokens, note
from advisor.explain.spot import spot_line
from advisor.results import Candidate, Plan
from advisor.results.columns import TIE_MARK
from advisor.results.facts import FindingKind as K, first
from advisor.units import money
from advisor.workload.measurements import is_measured  # measured run: say which rows follow one


def _head(plan: Plan) -> list[str]:
    """The notice, the workload, the counts, the small-workload warning and the objective's line."""
    lines = [f"Note: {plan.notice}"] if plan.notice else []
    w = plan.workload
    unit = {"dpo": "pairs", "grpo": "completions"}.get(w.get("objective"), "sequences")
    lines.append(f"{plan.model.name}: {job_tokens(w)}, seq {w['seq_len']}, "
                 f"global batch {w['global_batch']} {unit}.")
    lines.append(claims.counts_sentence(plan) + ".")
    lines += [f"Warning: {x}" for x in claims.small_workload(plan)]
    objective = objective_line(plan)
    return lines + ([objective] if objective else [])


def _why_first(plan: Plan) -> list[str]:
    """Why #1 (when a near-tie rule put it there), the marked rows, and where #1's host is."""
    lines = []
    if plan.candidates and first(plan.candidates[0].findings, K.NEAR_TIE, K.SAFE_OVER_RISKY) is not None:
        lines.append(f"Why #1: {why(plan)}")
    marked = [c for c in plan.candidates if c.tie_rule]
    if marked:
        fresh = any(first(c.findings, K.FRESH_FIRST) is not None for c in marked)
        how = ("a near-tie rule, or to head the plan with a fresh price over cheaper stale ones" if fresh
               else "a near-tie rule")
        lines.append(f"{TIE_MARK} ranked above a cheaper row by {how}: " + "; ".join(
            f"#{c.rank} {c.tie_rule}" for c in marked[:10]) + ".")
    if plan.candidates and plan.candidates[0].offer.country:
        c = plan.candidates[0]
        lines.append(f"#1's host is in {place(c)} ({c.offer.provider} {c.offer.region}); --regions keeps the data in a "
                     "country or continent.")
    return lines


def baseline_line(plan: Plan) -> str:
    """The naive baseline, and the top pick against it where a saving is claimed."""
    b = plan.baseline
    if b is None:
        return ""
    method = "full fine-tuning" if b.stack.method == "full" else f"{b.stack.method.upper()} (the method asked for)"
    line = f"Naive baseline: {method} on the cheapest instance where it fits"
    if plan.saving_vs_baseline_usd is not None and plan.candidates:
        line += "; the top pick " + claims.versus(plan.candidates[0], b, "the baseline", subject="").strip()
    else:
        line += (f": {b.offer.provider} {b.offer.instance_type}, {money(claims.ranked_cost(b))}, "
                 f"{claims.ranked_hours(b):,.1f} h at {claims.ranking_quantile(plan)}")
    return line + "."


def _tail(plan: Plan) -> list[str]:
    """Measured rows, the Pareto front and what was ruled out before scoring."""
    lines = []
    measured = [c for c in plan.candidates if is_measured(c.timing.band_basis)]
    if measured:
        lines.append("Measured: " + "; ".join(f"#{c.rank} {c.timing.tokens_per_sec:,.0f} tokens/s, "
                                               f"{c.timing.band_basis}" for c in measured[:6]) + ".")
    if plan.pareto:
        lines.append(f"Pareto front ({len(plan.pareto)} options no other beats on both cost and time; cost / hours "
                     f"{claims.pareto_basis(plan)}, fastest first): " + "; ".join(
                         f"{figures} ({c.offer.gpu_count * c.nodes}× {c.offer.gpu_model} {c.offer.provider})"
                         for c, figures in claims.pareto_points(plan)))
        knee = claims.knee_words(plan)
        lines += [knee + "."] if knee else []
    ruled_out = claims.counts(plan)["ruled_out"]
    if ruled_out:
        more = len(ruled_out) - 6
        lines.append("Ruled out before scoring (options per reason): " + "; ".join(
            f"{r.reason}: {r.count:,}" for r in ruled_out[:6]) + (f"; {more} more reasons (--format "
                                                                  "json or --report lists all)" if more > 0 else ""))
    return lines


def summary_lines(plan: Plan) -> list[str]:
    """Every line under the plan table, in order."""
    lines = _head(plan) + _why_first(plan)
    baseline = baseline_line(plan)
    lines += [baseline] if baseline else []
    if plan.spot_alternative is not None:
        lines.append(spot_line(plan, plan.spot_alternative))
    managed = claims.managed_summary(plan)
    lines += [managed] if managed else []
    return lines + _tail(plan)


def place(c: Candidate) -> str:
    name = c.offer.country_name
    return f"{name} ({c.offer.country})" if name else c.offer.country


def objective_line(plan: Plan) -> str:
    """DPO / GRPO: the workload in its own units, and what the top pick runs where and spends generating."""
    w = plan.workload
    kind = w.get("objective")
    if not kind:
        return ""
    if kind == "dpo":
        line = f"DPO: {w.get('pairs', 0):,} preference pairs per epoch (2 rows each through the policy)"
    else:
        line = (f"GRPO: {w.get('prompts', 0):,} prompts per epoch × {w.get('num_generations')} completions "
                f"(generation {w.get('generation')})")
    if plan.candidates:
        c = plan.candidates[0]
        placed = first(c.findings, K.DPO_REFERENCE, K.GRPO_GENERATION)
        line += f"; #1: {note(placed).split(': ', 1)[-1]}" if placed is not None else ""
        if kind == "grpo":
            line += (f"; generation {c.timing.generation_hours:,.1f} h of its {c.timing.train_hours:,.1f} training "
                     "hours (uncalibrated: band widened)")
    return line + "."


def left_out_line(width: int | None, left_out: list[str]) -> str:
    """The columns a narrow terminal dropped, and how to see them."""
    return (f"Columns left out to fit {width} columns: {', '.join(left_out)} "
            "(a wider terminal, COLUMNS=200, or --format csv/md/json shows them).")
