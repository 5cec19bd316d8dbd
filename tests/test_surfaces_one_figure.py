"""One figure everywhere (issue 46): for real plans on the bundled sheet, every surface that prints a plan's #1 shows the
decision card's cost and wall time (advisor/explain/card.py decision_card: the ranked figure, at the ranking quantile),
and every printed Pareto front holds no point another point on it beats on both cost and hours.

The surfaces read here: the HTML report's first table, its cost-vs-time chart (the SVG's points, read back through the
chart's own axis mapping) and its Pareto table, opened in headless Chromium at 1280 and 390 px; the web page's compare
view (`gpu-advisor serve`, the same browser); the launch bundle's README and launcher headers; the terminal summary and
the plan JSON. Each plan is built once for the module.
"""

from __future__ import annotations

import json
import math
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import quote

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from helpers.chromium import CHROMIUM, DevTools  # noqa: E402
from helpers.serve_helpers import q, serving  # noqa: E402

import reports  # noqa: E402
from advisor.explain.card import decision_card  # noqa: E402
from advisor.explain.claims import ranked_figures, ranking_quantile  # noqa: E402
from advisor.results import Plan, ranked_cost, ranked_hours  # noqa: E402

# The five plans of issue 46 (serve query spelling: max-nodes, ...); the first three are read on every surface
PLANS = {
    "8b-lora": dict(model="meta-llama/Llama-3.1-8B", tokens="100M"),
    "70b": dict(model="meta-llama/Llama-3.1-70B", tokens="100M"),
    "dpo-8b": dict(model="meta-llama/Llama-3.1-8B", objective="dpo", pairs="20000"),
    "70b-full-4-nodes": dict(model="meta-llama/Llama-3.1-70B", tokens="100M", max_nodes=4, methods="full"),
    "405b-qlora": dict(model="meta-llama/Llama-3.1-405B", tokens="100M", methods="qlora"),
}
EVERY_SURFACE = ("8b-lora", "70b", "dpo-8b")
WIDTHS = (1280, 390)
SVG = "{http://www.w3.org/2000/svg}"
FIGURES = re.compile(r"(\$[\d,]+\.\d\d) / ([\d,]+\.\d) h")


@pytest.fixture(scope="module")
def plans() -> dict[str, Plan]:
    from cli.plan import build_plan

    return {name: build_plan(**kw) for name, kw in PLANS.items()}


def card_figures(plan: Plan) -> tuple[str, str]:
    """The card's cost and wall time as it prints them ('$20.22', '37 min')."""
    figs = {f["label"]: f["value"] for f in decision_card(plan)["figures"]}
    return figs["Cost"], figs["Wall time"]


def beaten(points: list[tuple[float, float]]) -> list[tuple]:
    """Pairs (a, b) of front points where b is cheaper and faster than a: none on a true front."""
    return [(a, b) for a in points for b in points if b[0] < a[0] and b[1] < a[1]]


def parse_figures(text: str) -> list[tuple[float, float]]:
    """'$2,160.80 / 4.7 h; ...' -> [(2160.8, 4.7), ...] (cost, hours) as printed."""
    return [(float(c.lstrip("$").replace(",", "")), float(h.replace(",", ""))) for c, h in FIGURES.findall(text)]


# ----------------------------------------------------------------------------- the Pareto front, five plans
@pytest.mark.parametrize("name", sorted(PLANS))
def test_no_printed_pareto_front_holds_a_point_another_beats_on_cost_and_hours(plans, name, tmp_path):
    from advisor.explain.summary import summary_lines

    plan = plans[name]
    assert len(plan.pareto) >= 2, name  # a front worth checking
    stored = json.loads(plan.model_dump_json())  # the JSON a --format json plan file holds
    rows = stored["candidates"] + stored["others"]
    front_json = [(rows[i]["cost"]["usd_at_risk"], rows[i]["timing"]["hours_at_risk"]) for i in stored["pareto_refs"]]
    line = next(x for x in summary_lines(plan) if x.startswith("Pareto front"))
    assert ranking_quantile(plan) in line
    html = tmp_path / "r.html"
    reports.write(plan, html)
    table = re.search(r"<caption>Pareto front: no cheaper and faster option exists</caption>(.*?)</table>",
                      html.read_text(encoding="utf-8"), flags=re.S)
    surfaces = {"json": front_json, "terminal": parse_figures(line), "report": parse_figures(table.group(1))}
    for surface, points in surfaces.items():
        assert len(points) == len(plan.pareto), (name, surface)
        assert beaten(points) == [], (name, surface)
    exact = [(ranked_cost(c), ranked_hours(c)) for c in plan.pareto]
    assert sorted(front_json) == sorted(exact)  # the JSON's front is the ranked figures, unrounded
    gain = plan.ranking["pareto_min_gain_pct"] / 100  # the front's own claim: each at least this much faster
    assert gain > 0 and f"at least {plan.ranking['pareto_min_gain_pct']:g}% faster" in line
    for cost, hours in exact:
        assert all(hours <= h * (1 - gain) for k, h in exact if k < cost), (name, cost, hours)
    # the printed fronts are those points, fastest first, at the printed precision
    printed = [tuple(map(float, (f"{k:.2f}", f"{h:.1f}"))) for k, h in sorted(exact, key=lambda p: (p[1], p[0]))]
    assert surfaces["terminal"] == surfaces["report"] == printed


def test_the_front_check_catches_a_beaten_point():
    """Control: a point another beats on both is found."""
    assert beaten([(10.0, 2.0), (12.0, 3.0), (20.0, 1.0)]) == [((12.0, 3.0), (10.0, 2.0))]
    assert parse_figures("$1,012.50 / 4.7 h; $9.00 / 12.0 h") == [(1012.5, 4.7), (9.0, 12.0)]


# ----------------------------------------------------------------------------- the launch bundle
@pytest.mark.parametrize("name", EVERY_SURFACE)
def test_the_bundle_readme_and_launcher_headers_print_the_card_figure(plans, name):
    from cli.launch import bundle_files

    plan = plans[name]
    cost, hours = card_figures(plan)
    qn = ranking_quantile(plan)
    files, _ = bundle_files(plan, plan.candidates[0], "data/train.jsonl")
    readme = files["README.md"].replace("\\", "")  # Markdown escapes '$'
    assert re.search(rf"^\| cost at {qn} \| {re.escape(cost)} \(p10–p90: ", readme, flags=re.M), name
    assert re.search(rf"^\| wall time at {qn} \| {re.escape(hours)} \(", readme, flags=re.M), name
    estimate = f"{cost} and {hours} wall at {qn} (cost p10–p90: "
    header = [x for x in files["slurm.sbatch"].splitlines() if x.startswith("#") and not x.startswith("#SBATCH")]
    assert any(x.startswith(f"# Estimate: {estimate}") for x in header), header
    for launcher in ("dstack.yml", "sky.yaml"):
        assert f"# Estimate: {estimate}" in files[launcher], launcher


# ----------------------------------------------------------------------------- the pages, in Chromium
READ_REPORT = """(() => {
  const visible = e => e && e.getClientRects().length > 0;  // an <svg> has no offsetParent
  const text = e => e ? e.textContent.trim() : null;
  const first = document.querySelector('table');
  const heads = [...first.querySelectorAll('thead th')].map(text);
  const row = first.querySelector('tbody tr');
  const cell = h => text(row.cells[heads.findIndex(x => x.startsWith(h))]);
  const svg = [...document.querySelectorAll('#cost-time figure svg')].find(visible);
  const box = svg.getBoundingClientRect();
  const legend = [...svg.querySelectorAll('text')].filter(t => /recommended|nearest|baseline|Pareto/.test(t.textContent))
    .map(t => { const b = t.getBoundingClientRect(); return {text: t.textContent, left: b.left, right: b.right}; });
  const charts = [...document.querySelectorAll('figure svg')].filter(visible).map(s => s.getBoundingClientRect())
    .map(b => ({left: b.left, right: b.right}));
  return JSON.stringify({viewport: document.documentElement.clientWidth, caption: text(first.querySelector('caption')),
    card: [text(document.getElementById('card-cost')), text(document.getElementById('card-wall-time'))],
    first: [cell('Cost'), cell('Wall time')], heads, svg: svg.outerHTML, variant: svg.getAttribute('class'),
    chart: {left: box.left, right: box.right}, legend, charts});
})()"""
READ_COMPARE = """(() => {
  const rows = Object.fromEntries([...document.querySelectorAll('#compare tbody tr')].map(r =>
    [r.cells[0].textContent.trim(), [...r.cells].slice(1).map(td => td.querySelector('.big').textContent.trim())]));
  const heads = [...document.querySelectorAll('#compare thead th.scenario')].map(th => th.getBoundingClientRect().right);
  const hint = document.getElementById('scroll-hint');
  return JSON.stringify({viewport: document.documentElement.clientWidth, rows, heads,
    hint: hint && hint.offsetParent !== null ? hint.textContent.trim() : null});
})()"""


def _open(dt: DevTools, url: str, until: str = "true") -> None:
    dt.events.clear()
    dt.call("Page.navigate", url=url)
    while True:
        event = dt.ws.recv()
        if event.get("method") == "Page.loadEventFired" and dt.call(
                "Runtime.evaluate", expression=f"Boolean({until})", returnByValue=True)["result"].get("value"):
            return


def _read(dt: DevTools, script: str) -> dict:
    return json.loads(dt.call("Runtime.evaluate", expression=script, returnByValue=True)["result"]["value"])


@pytest.fixture(scope="module")
def pages(plans, tmp_path_factory) -> dict:
    """The three plans' reports and one compare view of them, each read in one Chromium at both widths."""
    if CHROMIUM is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    root = tmp_path_factory.mktemp("surfaces")
    for name in EVERY_SURFACE:
        reports.write(plans[name], root / f"{name}.html")
    scenarios = [q(**PLANS[name]) for name in EVERY_SURFACE]
    out: dict = {}
    with serving() as served, DevTools(root / "profile", "--proxy-server=http://127.0.0.1:9", window="1280,900") as dt:
        for domain in ("Page", "Runtime"):
            dt.call(f"{domain}.enable")
        compare = served.url.rstrip("/") + "/compare?" + "&".join(f"s={quote(s, safe='/,')}" for s in scenarios)
        for width in WIDTHS:
            dt.call("Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1, mobile=False)
            for name in EVERY_SURFACE:
                _open(dt, (root / f"{name}.html").resolve().as_uri())
                out[(name, width)] = _read(dt, READ_REPORT)
            _open(dt, compare, "document.getElementById('compare')")
            out[("compare", width)] = _read(dt, READ_COMPARE)
        out["served"] = [Plan.model_validate_json(served.get(f"/plan.json?{s}").text) for s in scenarios]
    return out


def svg_points(svg: str) -> dict[str, list[tuple[float, float]]]:
    """The cost-vs-time chart's drawn points, in SVG coordinates, by series (the chart's gids): scatter marks are
    <use x y>, the front a path 'M x y L x y ...'."""
    root = ET.fromstring(svg)
    out: dict[str, list[tuple[float, float]]] = {}
    for g in root.iter(f"{SVG}g"):
        series = next((s for s in ("candidates", "front", "top", "baseline") if (g.get("id") or "").endswith(
            f"cost-time-{s}")), None)
        if series is None:
            continue
        if series == "front":
            d = next(p.get("d") for p in g.iter(f"{SVG}path") if p.get("clip-path"))  # the line, not a marker
            nums = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", d)]
            out[series] = list(zip(nums[::2], nums[1::2]))
        else:
            out[series] = [(float(u.get("x")), float(u.get("y"))) for u in g.iter(f"{SVG}use")]
    return out


def worst_fit(pairs: list[tuple[float, float]]) -> float:
    """Largest distance (SVG units) of a drawn coordinate from the straight line through (value, coordinate):
    a chart that plots these values keeps every point on the axis' own line."""
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in pairs) / sum((x - mx) ** 2 for x in xs)
    return max(abs(my + slope * (x - mx) - y) for x, y in pairs)


def axis_fit(plan: Plan, drawn: dict, svg: str, figure) -> tuple[float, float]:
    """How far the drawn points sit from the chart's axis lines when each point's value is `figure(c)` (hours, cost)."""
    from advisor.explain.claims import pareto_points

    series = {"candidates": list(plan.candidates), "front": [c for c, _ in pareto_points(plan)],
              "top": plan.candidates[:1], "baseline": [plan.baseline] if plan.baseline else []}
    texts = " ".join(t.text or "" for t in ET.fromstring(svg).iter(f"{SVG}text"))
    log_x, log_y = ("hours), log scale" in texts), ("USD), log scale" in texts)
    pairs_x, pairs_y = [], []
    for key, cands in series.items():
        assert len(drawn.get(key, [])) == len(cands), key
        for c, (px, py) in zip(cands, drawn[key]):
            hours, cost = figure(c)
            pairs_x.append((math.log(hours) if log_x else hours, px))
            pairs_y.append((math.log(cost) if log_y else cost, py))
    return worst_fit(pairs_x), worst_fit(pairs_y)


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", EVERY_SURFACE)
def test_the_report_table_chart_and_front_show_the_card_figure(plans, pages, name, width):
    plan, m = plans[name], pages[(name, width)]
    cost, hours = card_figures(plan)
    assert m["card"] == [cost, hours]
    assert m["caption"] in ("Top candidates", "Closest candidates (none meets the constraints)")
    assert m["first"][0].removesuffix(" ✗") == cost and m["first"][1] == hours, (m["heads"], m["first"])
    # the chart drawn at the ranked figures: every point on the axes' lines, which p50 figures are not
    assert m["variant"] == ("chart wide" if width == 1280 else "chart narrow")
    drawn = svg_points(m["svg"])
    ranked = axis_fit(plan, drawn, m["svg"], lambda c: (ranked_hours(c), ranked_cost(c)))
    p50 = axis_fit(plan, drawn, m["svg"], lambda c: (c.timing.hours, c.cost.usd))
    assert max(ranked) < 0.05, ranked  # SVG units (pt), six decimals written
    assert max(p50) > 1.0, p50  # control: the median figures would put points off the line
    legend = " | ".join(t["text"] for t in m["legend"])
    assert f"#1{'' if plan.constraints_met else ', misses'}): {cost} / {ranked_hours(plan.candidates[0]):,.1f} h" in legend
    if plan.baseline is not None:
        assert f"naive baseline: {ranked_figures(plan.baseline)}" in legend
    # nothing cut: each visible chart and its legend inside the viewport
    for box in m["charts"] + m["legend"]:
        assert 0 <= box["left"] and box["right"] <= m["viewport"], (width, box)


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_the_compare_view_shows_each_scenario_card_figure_with_its_quantile(plans, pages, width):
    m = pages[("compare", width)]
    served = pages["served"]
    for i, name in enumerate(EVERY_SURFACE):
        plan = served[i]
        assert (ranked_cost(plan.candidates[0]), ranked_hours(plan.candidates[0])) == (
            ranked_cost(plans[name].candidates[0]), ranked_hours(plans[name].candidates[0]))  # the same plan
        cost, hours = card_figures(plan)
        qn = ranking_quantile(plan)
        assert m["rows"]["Cost of #1"][i] == f"{cost} at {qn}", (name, m["rows"]["Cost of #1"])
        assert m["rows"]["Wall time"][i] == f"{hours} at {qn}"
    hidden = [right for right in m["heads"] if right > m["viewport"]]
    # a scenario past the right edge is announced: the table scrolls sideways
    assert not hidden or (m["hint"] and "scrolls sideways" in m["hint"] and "3 scenarios" in m["hint"]), m
    if width == 390:
        assert hidden, "three scenarios do not fit 390 px: the check above saw the hint"
    else:
        assert m["hint"] is None
