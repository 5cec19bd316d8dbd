"""One figure per row on every surface: the terminal table, the HTML report's candidate tables and CSV print, for
the same row, the figure the ranking used (ranked_cost / ranked_hours at the plan's quantile), name that quantile in
their headers, and list the rows in rank order. Real plans, each planned once as a user plans it (a fresh
`python -m advisor` process, offline, today pinned), then rendered by the surfaces it feeds."""

from __future__ import annotations

import csv
import io
import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

from advisor.results import Plan, ranked_cost, ranked_hours
from advisor.units import duration, money

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from helpers.reference_plans import env  # noqa: E402  (the fixed, offline environment of the surface tests)

PLANS = {
    "8b-default": "--model meta-llama/Llama-3.1-8B --tokens 100M",
    "70b-qlora": "--model meta-llama/Llama-3.1-70B --tokens 100M --methods qlora",
    "8b-dpo": "--model meta-llama/Llama-3.1-8B --objective dpo --pairs 20000",
}


@pytest.fixture(scope="module", params=list(PLANS))
def planned(request, tmp_path_factory) -> Plan:
    home = tmp_path_factory.mktemp(request.param)
    out = home / "plan.json"
    r = subprocess.run([sys.executable, "-m", "advisor", "plan", *PLANS[request.param].split(), "--format", "json",
                        "-o", str(out)], capture_output=True, text=True, cwd=home, env=env(home), timeout=900)
    assert r.returncode == 0, r.stderr
    return Plan.model_validate_json(out.read_text(encoding="utf-8"))


def terminal_rows(plan: Plan, monkeypatch) -> tuple[str, dict[int, tuple[str, str]]]:
    """The terminal table's header line and, per rank, its cost and hours cells as printed."""
    from cli.plan import render

    monkeypatch.setenv("COLUMNS", "400")
    lines = render(plan, "table").splitlines()
    rows = {}
    for line in lines[1:]:
        m = re.match(r"^(\d+)\*?\s+(\$[\d,]+\.\d\d)\s+\S+\s+([\d,]+\.\d)\b", line)
        if m:
            rows[int(m.group(1))] = (m.group(2), m.group(3))
    return lines[0], rows


def report_tables(plan: Plan) -> list[list[list[str]]]:
    """Every table of the HTML report whose second column is a cost: header row first, cells as text."""
    import reports

    page = reports.render(plan, "html")
    tables = []
    for body in re.findall(r"<table\b.*?</table>", page, flags=re.S):
        rows = [[unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in re.findall(r"<t[hd]\b.*?</t[hd]>", tr, re.S)]
                for tr in re.findall(r"<tr\b.*?</tr>", body, flags=re.S)]
        if rows and len(rows[0]) > 2 and rows[0][1].startswith("Cost"):
            tables.append(rows)
    return tables


def test_terminal_report_and_csv_print_the_ranked_figure_of_each_row(planned, monkeypatch):
    from cli.plan import render

    q = planned.ranking["quantile"]
    assert q == "p80" and planned.candidates
    by_rank = {c.rank: c for c in planned.candidates}
    # terminal
    header, printed = terminal_rows(planned, monkeypatch)
    assert f"cost {q}" in header and f"hours {q}" in header
    assert sorted(printed) == sorted(by_rank)
    # report: the short table and the one in detail
    tables = report_tables(planned)
    assert len(tables) >= 2
    for rows in tables:
        assert rows[0][1:3] == [f"Cost {q}", f"Wall time {q}"]
        assert [int(r[0].rstrip("*")) for r in rows[1:]] == sorted(by_rank)[:len(rows) - 1]  # in rank order
    # CSV
    data = list(csv.DictReader(io.StringIO(render(planned, "csv"))))
    assert [int(r["rank"]) for r in data] == sorted(by_rank)
    for row in data:
        c = by_rank[int(row["rank"])]
        cost, hours = printed[c.rank]
        assert cost == money(ranked_cost(c)) and hours == f"{ranked_hours(c):,.1f}"
        # CSV keeps cents and thousandths of an hour of the same figure
        assert abs(float(row[f"cost_{q}_usd"]) - ranked_cost(c)) <= 0.005
        assert abs(float(row[f"hours_{q}"]) - ranked_hours(c)) <= 0.0005
        for rows in tables:
            cells = next(r for r in rows[1:] if int(r[0].rstrip("*")) == c.rank)
            assert cells[1].removesuffix(" ✗") == cost
            assert cells[2] in (duration(ranked_hours(c)), f"{ranked_hours(c):,.1f} h")
    # and the figure is the ranked one, not the median, wherever the two differ
    assert any(ranked_cost(c) != c.cost.usd for c in planned.candidates)


def test_the_card_and_the_first_row_agree(planned):
    from advisor.explain.card import decision_card

    figures = decision_card(planned)["figures"]
    first = report_tables(planned)[0][1]
    assert figures[0]["value"] == first[1] and figures[1]["value"] == first[2]
