"""What the output says about itself holds, on real plans (issue 36): the table follows the ranking it states,
the Pareto front has no dominated point, the terminal, the report and the JSON give the same counts, savings
and front, and every `next:` command the output suggests runs.

Each plan runs once as a user runs it (a fresh `python -m advisor` process, offline, today pinned): JSON saved
with -o, the HTML report with --report, and the terminal table at COLUMNS=200.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from html import unescape
from pathlib import Path

import pytest
from helpers.reference_plans import PLANS, advisor

from advisor.units import money


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> dict:
    from advisor.results import Plan

    out = {}
    for name, args in PLANS.items():
        home = tmp_path_factory.mktemp(name)
        saved = advisor(home, "plan", *shlex.split(args), "--format", "json", "-o", "plan.json", "--report",
                        "report.html")
        table = advisor(home, "plan", *shlex.split(args))
        assert saved.returncode in (0, 3) and table.returncode == saved.returncode, saved.stderr
        data = json.loads((home / "plan.json").read_text(encoding="utf-8"))
        out[name] = {"home": home, "json": data, "plan": Plan.model_validate(data), "saved": saved,
                     "table": table, "report": unescape(re.sub(r"<[^>]+>", " ", (home / "report.html").read_text()))}
    return out


def stated_basis(data: dict):
    """The ranking key and near-tie tolerance as the plan JSON states them: `assumptions.ranking` when the
    planner records it, else each row's cost at its own ranking quantile and the near-tie its notes state."""
    ranking = data["assumptions"].get("ranking")
    share, usd = 0.0, 0.0
    if isinstance(ranking, dict) and ranking.get("near_tie_pct") is not None:
        share = float(ranking["near_tie_pct"]) / 100
    else:
        for c in data["candidates"]:
            for note in c["notes"]:
                m = re.search(r"within (\d+(?:\.\d+)?)% or \$(\d+(?:\.\d+)?)", note)
                if m:
                    share, usd = float(m.group(1)) / 100, float(m.group(2))
    by_time = data["assumptions"].get("sort") == "time"
    stated = data.get("ranking") or {}
    tv = float(stated.get("time_value_usd_per_hour") or 0) if not by_time else 0.0  # total = cost + hours x tv

    def key(c: dict) -> float:
        if by_time:
            return c["timing"]["hours_at_risk"]
        return c["cost"]["usd_at_risk"] + tv * c["timing"]["hours_at_risk"]

    return key, share, usd


@pytest.mark.parametrize("name", PLANS)
def test_the_table_follows_the_ranking_it_states(plans, name):
    p = plans[name]
    data = p["json"]
    key, share, usd = stated_basis(data)
    rows = data["candidates"]
    if not p["plan"].constraints_met:  # the closest first: ranked by how far each misses, said so
        assert "closest" in (data["notice"] or "").lower()
        return
    margin = max(share, float((data.get("ranking") or {}).get("risk_margin_pct") or 0) / 100)
    for i, above in enumerate(rows):
        if above.get("tie_rule") == "fresh price":  # a fresh price heads over cheaper stale ones (DESIGN), said so
            assert above["rank"] == 1 and not above["offer"]["stale"]
            continue
        for below in rows[i + 1:]:  # the near-tie and the risk margin are shares of the compute cost
            tolerance = max(margin * max(below["cost"]["usd_at_risk"], above["cost"]["usd_at_risk"]), usd)
            assert key(above) <= key(below) * 1.08 + tolerance + 1e-9, (name, above["rank"], below["rank"])
    from advisor.explain.claims import ranking_basis

    basis = ranking_basis(p["plan"])
    quantiles = {f"p{round(c['timing']['risk_quantile'] * 100)}" for c in rows}
    assert all(q in basis for q in quantiles), basis  # every quantile a row was ranked at is named
    assert f"ranked by {basis}" in " ".join(p["table"].stdout.split())
    assert f"ranked by {basis}" in " ".join(p["report"].split())


def dominated(points: list[tuple[float, float]]) -> list[tuple]:
    return [(a, b) for a in points for b in points if b != a and b[0] <= a[0] and b[1] <= a[1]]


@pytest.mark.parametrize("name", PLANS)
def test_the_pareto_front_has_no_dominated_point_at_the_figures_it_was_ranked_on(plans, name):
    data = plans[name]["json"]
    stored = data["candidates"] + data.get("others", [])
    front = [stored[i] for i in data["pareto_refs"]]
    points = [(round(c["cost"]["usd_at_risk"], 6), round(c["timing"]["hours_at_risk"], 6)) for c in front]
    assert dominated(points) == []


def test_the_table_prints_the_figures_the_rows_were_ranked_on(plans):
    """The cost column is the ranked figure (one quantile for every row), so the front above holds for it too."""
    for p in plans.values():
        rows = {line.split()[0].rstrip("*"): line for line in p["table"].stdout.splitlines()
                if line[:1].isdigit()}
        for c in p["plan"].candidates:
            assert money(c.cost.usd_at_risk) in rows[str(c.rank)].split()[1], (c.rank, rows[str(c.rank)])


@pytest.mark.parametrize("name", PLANS)
def test_terminal_and_report_list_the_same_pareto_points(plans, name):
    from advisor.explain.claims import pareto_points

    p = plans[name]
    figures = [f for _, f in pareto_points(p["plan"])]
    text = " ".join(p["table"].stdout.split())
    line = re.search(r"Pareto front \((\d+) options.*?fastest first\): (.*?)(?: Ruled out|$)", text)
    if not figures:
        assert line is None
        return
    assert line and int(line.group(1)) == len(figures)
    assert re.findall(r"\$[\d,]+\.\d\d / [\d,]+\.\d h", line.group(2)) == figures
    report = " ".join(p["report"].split())
    front = report[report.index("Pareto front: no cheaper and faster option exists"):]  # the table, not the chart legend
    assert [f for f in re.findall(r"\$[\d,]+\.\d\d / [\d,]+\.\d h", front)] == figures


@pytest.mark.parametrize("name", PLANS)
def test_counts_and_savings_agree_between_json_terminal_and_report(plans, name):
    from advisor.explain.claims import AFTER_SCORING, difference
    from advisor.units import money

    p = plans[name]
    data, plan = p["json"], p["plan"]
    scored = data["assumptions"]["candidates_scored"]
    meeting = data["assumptions"]["candidates_meeting_constraints"]
    missing = [r["count"] for r in data["rejected"] if r["reason"].startswith(AFTER_SCORING)]
    if data["workload"]["budget_usd"] is None or data["workload"]["deadline_hours"] is None:
        assert meeting + sum(missing) == scored  # one constraint: every scored option meets it or misses it
    said = f"{scored:,} options scored (offer × stack pairs that fit), {meeting:,} meet the constraints"
    for text in (p["table"].stdout, p["report"]):
        flat = " ".join(text.split())
        assert said in flat
        assert "options were ruled out" not in flat and " × stale" not in flat  # no total over unlike units
    if plan.baseline is not None and plan.constraints_met and plan.candidates:
        saving = difference(plan.candidates[0].cost.usd_at_risk, plan.baseline.cost.usd_at_risk)
        baseline = f"than the baseline ({plan.baseline.offer.provider} {plan.baseline.offer.instance_type}: " \
                   f"{money(plan.baseline.cost.usd_at_risk)}"
        for text in (p["table"].stdout, p["report"]):
            flat = " ".join(text.split())
            assert f"costs {saving} {baseline}" in flat or (saving == "the same" and "costs the same" in flat)
        for text in (p["table"].stdout, p["report"]):  # never the other convention ("saves $X (Y%)")
            assert not re.search(r"saves \$[\d,.]+ \(\d+%\)", text)


def test_a_saving_between_tiny_amounts_has_no_percentage():
    from advisor.explain.claims import difference

    assert difference(0.17, 0.07) == "$0.10 more"
    assert difference(3.99, 4.83) == "$0.84 less (17%)"
    assert difference(5.0, 5.001) == "the same"


def test_data_smaller_than_one_global_batch_warns_in_terminal_and_report(plans):
    p = plans["tiny-data"]
    for text in (p["table"].stdout, p["report"]):
        flat = " ".join(text.split())
        assert "13,028 tokens per epoch) is smaller than one global batch (131,072 tokens)" in flat
    assert "0M tokens" not in p["table"].stdout + p["report"]
    for name in ("8b-lora", "70b-qlora"):
        assert "smaller than one global batch" not in plans[name]["table"].stdout


def test_token_counts_are_never_rounded_to_nothing():
    from advisor.units import tokens

    assert tokens(13_028) == "13.0k" and tokens(100_000_000) == "100M" and tokens(999) == "999"
    assert tokens(1_000_000_000) == "1.0B" and tokens(50_000_000) == "50.0M"


def _next(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if x.startswith("next: ")]
    assert lines and stderr.rstrip().splitlines()[-1] == lines[-1], stderr  # the last line
    return lines[-1].removeprefix("next: ").split("  (")[0]


def _run_suggested(home: Path, command: str) -> subprocess.CompletedProcess:
    words = shlex.split(command)
    assert words[0] == "gpu-advisor"
    return advisor(home, *words[1:])


def test_plan_report_leaves_the_plan_file_the_report_names_and_launch_reads_it(plans):
    p = plans["8b-lora"]
    home = p["home"]
    other = home / "fresh"
    other.mkdir()
    done = advisor(other, "plan", *shlex.split(PLANS["8b-lora"]), "--report", "r.html")
    assert done.returncode == 0, done.stderr
    assert (other / "r.plan.json").is_file()
    html = (other / "r.html").read_text(encoding="utf-8")
    assert "Saved plan: <code>r.plan.json</code>" in html and "launch --from r.plan.json" in html
    suggested = _next(done.stderr)
    assert suggested == "gpu-advisor launch --from r.plan.json --rank 1 --out launch/"
    launched = _run_suggested(other, suggested)
    assert launched.returncode == 0, launched.stderr
    assert (other / "launch").is_dir() and any((other / "launch").iterdir())


def test_every_suggested_next_command_runs(plans):
    p = plans["8b-lora"]
    home = p["home"] / "next"
    home.mkdir()
    first = _next(p["table"].stderr)  # plan (table) -> the same plan with --report
    assert first.endswith("--report report.html") and first.startswith("gpu-advisor plan --model")
    done = _run_suggested(home, first)
    assert done.returncode == 0, done.stderr
    second = _next(done.stderr)  # -> launch --from the plan file beside the report
    assert _run_suggested(home, second).returncode == 0
    saved = _next(p["saved"].stderr)  # plan -o plan.json (+ --report): launch from that file
    assert saved == "gpu-advisor launch --from plan.json --rank 1 --out launch/"
    est = advisor(home, "estimate", "mistral-7b", "--gpu", "H100")
    assert est.returncode == 0
    assert _run_suggested(home, _next(est.stderr)).returncode == 0


def test_plan_writes_its_json_with_o(tmp_path):
    done = advisor(tmp_path, "plan", *shlex.split(PLANS["tiny-data"]), "--format", "json", "-o", "plan.json")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "plan.json").read_text())["candidates"]
    assert done.stdout == ""


@pytest.mark.parametrize("name", PLANS)
def test_the_reports_first_table_shows_the_figure_rows_rank_on_and_the_same_tie_marks(plans, name):
    """A row above a cheaper one is explained on the page as in the terminal: the total it ranks on (cost + hours x
    the time value) beside cost and hours, and the near-tie mark."""
    from advisor.explain.claims import ranking_quantile
    from advisor.explain.notes import misses_constraint
    from advisor.results.columns import REPORT_COST, REPORT_SHORT_HOURS, TERMINAL, ranked_time_value, total_column

    p = plans[name]
    tv = ranked_time_value(p["plan"].ranking)
    report = " ".join(p["report"].split())
    terminal_ranks = {line.split()[0] for line in p["table"].stdout.splitlines() if line[:1].isdigit()}
    for c in p["plan"].candidates[:10]:
        rank = TERMINAL["#"].cell(c)
        assert rank in terminal_ranks
        cost = REPORT_COST.cell(c) + (" ✗" if misses_constraint(c) else "")  # over a budget or deadline
        cells = [rank, cost, REPORT_SHORT_HOURS.cell(c)] + ([total_column(tv).cell(c)] if tv else [])
        assert " ".join(cells) in report, (name, cells)
    if tv:
        assert f"Total {ranking_quantile(p['plan'])}" in report
