"""Typed results: the single source that CLI tables, JSON, reports and launch files read.

Bytes are integers (per GPU unless the name says otherwise); GB = 1e9, GiB = 2**30.
A plan `Candidate` carries the full `Stack` and `Shape` it was estimated with, the `Offer` it
runs on and its memory, timing and cost as sub-models; `Candidate.flat()` is the one flat view
(CSV, tables). JSON carries each number once (schema 4: nested only, each candidate stored once, the
views name it by reference, advisor/results/plan_refs.py); plans saved as schema 1 (flat candidates),
2 (nested plus flat copies) and 3 (views as whole candidates) still load.

- `estimate`: what `estimate` says about one model × stack × shape (memory, fit, throughput);
- `candidate`: one priced way to run a job (offer, memory fit, timing, cost) and its flat view;
- `plan`: the planner's answer, the plan file's schema and its versions;
- `plan_refs`: views stored as references, and older schemas converted to them on load;
- `facts`: typed plan facts: `Finding` (a closed `FindingKind` and its figures), `Workload`, `Assumptions`, `RankBy`;
- `columns`: the candidate table's columns, once, for every surface (the ranked figures, named for their quantile);
- `checks`: the text, number and bound checks every result applies to what it holds.

This module only hands the public names on.
"""

from advisor.results.candidate import (
    FLAT,
    Candidate,
    Cost,
    MemoryFit,
    Offer,
    Timing,
    ranked_cost,
    ranked_hours,
)
from advisor.results.checks import (
    NAME_CHARS,
    TEXT_CHARS,
    check_count,
    check_gpu,
    check_number,
    check_text,
    check_workload,
)
from advisor.results.estimate import (
    Breakdown,
    Component,
    FitCheck,
    MemoryEstimate,
    ModelInfo,
    ObjectiveMemory,
    Reserved,
    StepNumbers,
    Throughput,
)
from advisor.results.facts import Finding, FindingKind, RankBy
from advisor.results.plan import (
    KNOWN_SCHEMA_VERSIONS,
    MAX_HISTOGRAM_BINS,
    MAX_HISTOGRAM_ROWS,
    PLAN_SCHEMA_VERSION,
    LengthHistogram,
    Plan,
    Rejection,
)

__all__ = ["ranked_cost", "ranked_hours", "Breakdown", "Candidate", "Component", "Cost", "FLAT", "Finding", "FindingKind", "FitCheck", "KNOWN_SCHEMA_VERSIONS",
           "LengthHistogram", "MAX_HISTOGRAM_BINS", "MAX_HISTOGRAM_ROWS", "MemoryEstimate", "MemoryFit", "ModelInfo",
           "NAME_CHARS", "ObjectiveMemory", "Offer", "PLAN_SCHEMA_VERSION", "Plan", "RankBy", "Rejection", "Reserved",
           "StepNumbers", "TEXT_CHARS", "Throughput", "Timing", "check_count", "check_gpu", "check_number", "check_text",
           "check_workload"]
