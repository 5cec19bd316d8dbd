"""Every sentence about a plan, written once, from results only (advisor/results: the candidates, the plan and
their typed findings): each candidate's notes, the plan's warnings, the remedy, and the lines the terminal, the
report and the decision card print. Nothing outside this package builds such a sentence, and nothing reads one
back to recover a fact: readers read the findings (advisor/results/facts.py).

- `notes`: a candidate's findings in words; `warnings`: the plan's findings in words, and where price sheets disagree;
- `remedy`: what a remedy search found; `notices`: the plan's first line when nothing meets or fits;
- `assumptions`: the plan's worded assumptions; `summary`: the lines under the terminal table;
- `claims`: what the output says about itself (ranking basis, savings, counts, Pareto front, a managed service);
- `card`: the decision card; `answer`: the report's answer paragraph; `compare`: a scenario's compare column;
- `captions`: the report's chart captions; `price_age`: how old a shown price is.

This module only hands the public names on.
"""

from advisor.explain.claims import TIME_VALUE_SOURCE
from advisor.explain.notes import (
    HOST_UNKNOWN_NOTE,
    NEAR_TIE_NOTE,
    ONLY_8BIT_NOTE,
    SPOT_SUSPECT_NOTE,
    candidate_notes,
    note,
    tie_words,
)
from advisor.explain.warnings import disagreeing, warning, warnings

__all__ = ["HOST_UNKNOWN_NOTE", "NEAR_TIE_NOTE", "ONLY_8BIT_NOTE", "SPOT_SUSPECT_NOTE", "TIME_VALUE_SOURCE",
           "candidate_notes", "disagreeing", "note", "tie_words", "warning", "warnings"]
