"""The plan's facts are typed records that round-trip: a plan file's workload and assumptions load as frozen
`Workload` / `Assumptions` records and are written back as the same keys and values (older schemas included, and
keys this version does not name); findings load as `Finding` rows with a closed kind; --sort is a `RankBy`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from advisor.explain import candidate_notes
from advisor.explain.notes import notes_of
from advisor.results import Finding, FindingKind, Plan, RankBy
from advisor.results.facts import Assumptions, Workload

PLANS = Path(__file__).resolve().parents[2] / "data" / "plans"


@pytest.mark.parametrize("name", ["plan_schema2.json", "plan_schema3.json"])
def test_an_older_plan_files_workload_and_assumptions_load_typed_and_write_back_unchanged(name):
    raw = json.loads((PLANS / name).read_text(encoding="utf-8"))
    plan = Plan.model_validate(raw, strict=True)
    assert isinstance(plan.workload, Workload) and isinstance(plan.assumptions, Assumptions)
    assert plan.workload.seq_len == raw["workload"]["seq_len"] and plan.workload["tokens"] == raw["workload"]["tokens"]
    assert plan.assumptions.sort is RankBy(raw["assumptions"]["sort"])
    dumped = json.loads(plan.model_dump_json())
    assert dumped["workload"] == raw["workload"] and dumped["assumptions"] == raw["assumptions"]
    again = Plan.model_validate(dumped, strict=True)
    assert again.model_dump_json() == plan.model_dump_json()
    # no findings were stored then: the words it stored are the words shown, nothing is parsed back
    for c in plan.candidates:
        assert c.findings == [] and notes_of(c) == c.notes


def test_keys_a_record_does_not_name_are_kept_and_unset_ones_are_not_written():
    w = Workload.model_validate({"tokens": 1000, "epochs": 1.0, "dataset": "rows.jsonl", "budget_usd": None})
    assert json.loads(w.model_dump_json()) == {"tokens": 1000, "epochs": 1.0, "dataset": "rows.jsonl",
                                               "budget_usd": None}
    assert {**w} == {"tokens": 1000, "epochs": 1.0, "dataset": "rows.jsonl", "budget_usd": None}
    with pytest.raises(ValidationError):
        w.tokens = 5  # frozen


@pytest.mark.parametrize("bad", [{"tokens": "lots"}, {"seq_len": True}, {"spot": "yes"}, {"tokens": float("nan")}])
def test_a_hand_edited_workload_is_refused_naming_the_key(bad):
    with pytest.raises(ValidationError, match=f"workload.{next(iter(bad))}"):
        Workload.model_validate(bad, strict=True)


def test_an_unknown_sort_or_finding_kind_is_refused():
    with pytest.raises(ValidationError, match="sort: expected cost or time"):
        Assumptions.model_validate({"sort": "banana"}, strict=True)
    with pytest.raises(ValidationError, match="is not a finding"):
        Finding.model_validate({"kind": "vibes", "figures": {}}, strict=True)


def test_a_new_plans_findings_round_trip_and_write_its_notes():
    f = Finding(kind=FindingKind.MISSES_BUDGET, figures={"budget": 20.0, "usd": 25.0})
    again = Finding.model_validate(json.loads(f.model_dump_json()), strict=True)
    assert again == f and again.kind is FindingKind.MISSES_BUDGET
    assert candidate_notes([again]) == ["misses the budget of $20 by $5 (+25%)"]
