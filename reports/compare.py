"""Scenarios side by side: each plan's #1 as the rows a budget owner compares, differences marked.

One row per question (what it costs, how long, on what, with which stack, how much memory is left,
whose price from when, what a managed service would charge); one column per scenario. A row whose
cells are not all the same is marked `differs`, so the page can highlight what changed between
scenarios. Built from the decision card's own pieces (advisor/explain/card.py) and the ranked figures
(advisor/results/columns.py), never recomputed.
"""

from __future__ import annotations

from advisor.explain.compare import ROWS, cells
from advisor.results import Plan


def compare_table(plans: list[Plan]) -> list[dict]:
    """Rows of {label, cells, differs}: a row differs when its scenarios do not all show the same."""
    columns = [cells(p) for p in plans]
    rows = []
    for i, label in enumerate(ROWS):
        row = [col[i] for col in columns]
        differs = len({(c["value"], c["detail"]) for c in row}) > 1
        rows.append({"label": label, "cells": row, "differs": differs})
    return rows
