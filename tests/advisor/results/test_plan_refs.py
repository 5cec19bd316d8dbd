"""Plan schema 4: every candidate is stored once; the Pareto front, best per GPU/provider, baseline
and spot alternative name stored candidates by reference, and schema 2 and 3 plans still load, report and
launch."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from helpers.cli_run import gpu_advisor, one_line_error, saved_plan

from advisor.results import PLAN_SCHEMA_VERSION, Plan
from advisor.results.plan_refs import VIEWS

DATA = Path(__file__).parents[2] / "data" / "plans"


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> Path:
    """The default 8B plan of the bundled sheet, as `plan --format json` writes it (a subprocess)."""
    return saved_plan(tmp_path_factory.mktemp("planned"), "--model", "meta-llama/Llama-3.1-8B", "--tokens", "20M")


def identity(c: dict) -> str:
    """What makes two stored candidates the same run: offer (spot or not), stack and node count."""
    return json.dumps([c["offer"], c["stack"], c["nodes"], c["cost"]["spot"]], sort_keys=True)


def expanded(plan: Plan) -> dict:
    """The plan written as schema 3 did: every view as whole candidates."""
    data = json.loads(plan.model_dump_json())
    for field in ("others", *VIEWS.values()):
        data.pop(field)
    for view in VIEWS:
        value = getattr(plan, view)
        data[view] = ([c.model_dump(mode="json") for c in value] if isinstance(value, list) else
                      {k: c.model_dump(mode="json") for k, c in value.items()} if isinstance(value, dict) else
                      None if value is None else value.model_dump(mode="json"))
    return {**data, "schema_version": 3}


def test_a_real_plan_stores_each_candidate_once_and_every_reference_resolves(planned):
    data = json.loads(planned.read_text())
    assert data["schema_version"] == PLAN_SCHEMA_VERSION == 4
    assert not set(VIEWS) & set(data)  # no view written out as whole candidates
    stored = data["candidates"] + data["others"]
    assert len({identity(c) for c in stored}) == len(stored)
    refs = [*data["pareto_refs"], *data["best_per_gpu_refs"].values(), *data["best_per_provider_refs"].values(),
            *[r for r in (data["baseline_ref"], data["spot_alternative_ref"]) if r is not None]]
    assert data["pareto_refs"] and data["baseline_ref"] is not None and data["best_per_gpu_refs"]
    assert all(0 <= r < len(stored) for r in refs)
    assert set(range(len(data["candidates"]), len(stored))) <= set(refs)  # an `other` is there for a view
    plan = Plan.model_validate_json(planned.read_text())
    # one object, however many views name it (a Pareto point need not be among the ranked rows)
    assert plan.pareto[0] is plan.stored[data["pareto_refs"][0]]
    assert plan.best_per_gpu[plan.candidates[0].offer.gpu_model] is plan.candidates[0]


def test_schema_4_is_smaller_than_the_same_plan_written_as_schema_3(planned):
    plan = Plan.model_validate_json(planned.read_text())
    old = json.dumps(expanded(plan))
    assert len(plan.model_dump_json()) < len(old)
    again = Plan.model_validate_json(old)  # a schema-3 file of the same plan converts to the same plan
    assert again.schema_version == 4 and again.model_dump_json() == plan.model_dump_json()


@pytest.mark.parametrize("name", ["plan_schema2.json", "plan_schema3.json"])
def test_old_plans_convert_on_load_without_losing_a_view(name):
    raw = json.loads((DATA / name).read_text())
    plan = Plan.model_validate(raw, strict=True)
    assert raw["schema_version"] < 4 and plan.schema_version == 4
    for view in VIEWS:
        got, want = getattr(plan, view), raw.get(view)
        if isinstance(want, list):
            assert [c.cost.usd for c in got] == [c.get("cost_usd", c["cost"]["usd"]) for c in want]
        elif view.startswith("best_per"):
            assert {k: c.cost.usd for k, c in got.items()} == {k: c.get("cost_usd", c["cost"]["usd"])
                                                                for k, c in want.items()}
        else:
            assert (got is None) == (want is None)
            assert got is None or got.cost.usd == want.get("cost_usd", want["cost"]["usd"])
    stored = plan.stored
    assert len(stored) < len(raw["candidates"]) + len(raw["pareto"]) + len(raw["best_per_gpu"]) \
        + len(raw["best_per_provider"]) + (raw["baseline"] is not None)
    again = Plan.model_validate_json(plan.model_dump_json())
    assert again.model_dump_json() == plan.model_dump_json()


@pytest.mark.parametrize("name", ["plan_schema2.json", "plan_schema3.json", "schema 4"])
def test_report_and_launch_read_every_schema(tmp_path, capsys, planned, name):
    path = planned if name == "schema 4" else DATA / name
    code, _, err = gpu_advisor(capsys, "report", path, "-o", tmp_path / "r.html")
    assert code == 0, err
    text = (tmp_path / "r.html").read_text()
    plan = Plan.model_validate_json(path.read_text())
    assert plan.baseline.offer.instance_type in text and plan.pareto[-1].offer.instance_type in text
    code, _, err = gpu_advisor(capsys, "launch", "--from", path, "--rank", "2", "--out", tmp_path / "run")
    assert code == 0, err
    readme = (tmp_path / "run" / "README.md").read_text()
    assert f"candidate #2: **{plan.candidates[1].label}**" in readme


@pytest.mark.parametrize("field, value", [("pareto_refs", [0, 999]), ("baseline_ref", -1),
                                          ("best_per_gpu_refs", {"H100": 999}), ("spot_alternative_ref", 999)])
def test_a_reference_to_no_stored_candidate_is_refused(tmp_path, capsys, planned, field, value):
    data = json.loads(planned.read_text())
    data[field] = value
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    code, out, err = gpu_advisor(capsys, "report", path, "-o", tmp_path / "r.md")
    line = one_line_error(code, err)
    assert field in line and out == "" and not (tmp_path / "r.md").exists()


def test_replacing_the_candidates_keeps_what_each_view_named(planned):
    plan = Plan.model_validate_json(planned.read_text())
    front = [c.cost.usd for c in plan.pareto]
    cheaper = [c.model_copy(update={"offer": c.offer.model_copy(update={"price_date": "2026-01-01"})})
               for c in plan.candidates]
    copied = plan.model_copy(update={"candidates": cheaper})
    assert [c.offer.price_date for c in copied.candidates] == ["2026-01-01"] * len(cheaper)
    assert [c.cost.usd for c in copied.pareto] == front and copied.pareto[0].offer.price_date != "2026-01-01"
    assert copied.baseline.model_dump() == plan.baseline.model_dump()
    only = plan.model_copy(update={"candidates": cheaper[:1], "pareto": cheaper[:1]})
    assert only.pareto == only.candidates and copy.deepcopy(only).pareto[0].offer.price_date == "2026-01-01"


def test_each_stored_candidate_is_validated_once_however_many_views_name_it(planned, monkeypatch):
    import advisor.results.candidate as candidate_module

    plan = Plan.model_validate_json(planned.read_text())
    old = expanded(plan)
    written = len(old["candidates"]) + len(old["pareto"]) + len(old["best_per_gpu"]) + len(old["best_per_provider"]) \
        + (old["baseline"] is not None) + (old["spot_alternative"] is not None)
    checked = []
    real = candidate_module.check_gpu
    monkeypatch.setattr(candidate_module, "check_gpu", lambda name: checked.append(name) or real(name))  # once per offer
    for text in (planned.read_text(), json.dumps(old)):
        checked.clear()
        again = Plan.model_validate_json(text)
        assert len(checked) == len(again.stored) == len(plan.stored) < written
