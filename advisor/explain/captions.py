"""The words beside the report's charts and tables: each chart's title and description (what a screen reader says
and the figure caption), and a stale price's status."""

from __future__ import annotations

from advisor.results import Plan

CHART_TEXT = {
    "memory": ("Peak memory per GPU by component",
               "Stacked horizontal bars: weights, gradients, optimizer states, activations and overhead "
               "per GPU for the top candidates and the naive baseline; a black tick marks each GPU's "
               "usable memory. The table below gives the same numbers."),
    "cost-time": ("Cost against wall time",
                  "Scatter of every candidate's cost (USD) against wall time (hours), both at {q} (the figures "
                  "the table ranks on); the Pareto front "
                  "(options with no cheaper and faster alternative) is joined in orange, the top-ranked "
                  "option (#1) is a blue star and the naive baseline a black cross. The table below lists "
                  "the Pareto front."),
    "lengths": ("Token lengths of the dataset",
                "Histogram of the dataset's rows by token length (plan --dataset), with the plan's seq_len and "
                "the suggested seq_len (p99 rounded up) marked as dashed lines. The table below gives the bins."),
}


def stale_status(plan: Plan) -> str:
    """The price table's status of a stale row."""
    return f"⚠ undated or older than {plan.stale_days:g} days"
