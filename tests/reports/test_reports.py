"""Plan reports, read the way a manager or engineer reads them: parse the HTML/Markdown and
check what is on the page, in what order, and that no value can become markup."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from helpers import plan_factory as pf  # noqa: E402

import reports  # noqa: E402
from advisor.errors import BadInput  # noqa: E402
from advisor.explain.claims import ranking_quantile  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
H2_WITH_CANDIDATES = [
    "The answer", "Top candidates", "Memory per GPU", "Cost vs time", "Best per GPU model and per provider",
    "Why the rest were rejected", "Assumptions and prices", "Reproduce", "Launch the top pick",
]
H2_NOTHING_FITS = ["The answer", "Why nothing fits", "Assumptions and prices", "Reproduce"]


class Page(HTMLParser):
    """What a reader sees: headings, paragraph classes, tables (caption, header, rows), all text."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.headings: list[tuple[str, str]] = []
        self.tables: list[dict] = []
        self.by_class: dict[str, list[str]] = {}
        self.text_parts: list[str] = []
        self._stack: list[tuple[str, dict, list[str]]] = []
        self._in_style = False
        self._row: list[str] | None = None
        self.feed(html)
        self.close()

    @property
    def text(self) -> str:
        return " ".join(" ".join(self.text_parts).split())

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        self._in_style = tag == "style"
        if tag == "table":
            self.tables.append({"caption": "", "headers": [], "rows": []})
        elif tag == "tr":
            self._row = []
        if tag in ("meta", "br", "hr", "img", "input", "link"):
            return
        self._stack.append((tag, a, []))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        self._in_style = False
        while self._stack:
            t, a, buf = self._stack.pop()
            text = " ".join("".join(buf).split())
            if self._stack:
                self._stack[-1][2].append(" " + "".join(buf) + " ")
            if t in ("h1", "h2", "h3"):
                self.headings.append((t, text))
            for cls in a.get("class", "").split():
                self.by_class.setdefault(cls, []).append(text)
            if t == "caption" and self.tables:
                self.tables[-1]["caption"] = text
            if t in ("th", "td") and self._row is not None:
                self._row.append(text)
            if t == "tr" and self._row is not None and self.tables:
                is_header = any(tag == "th" for tag, _ in self.tags[-len(self._row) - 1:])
                key = "headers" if (is_header and not self.tables[-1]["headers"]) else "rows"
                if key == "headers":
                    self.tables[-1]["headers"] = self._row
                else:
                    self.tables[-1]["rows"].append(self._row)
                self._row = None
            if t == tag:
                break

    def handle_data(self, data):
        if self._in_style:
            return
        self.text_parts.append(data)
        if self._stack:
            self._stack[-1][2].append(data)

    def h2(self) -> list[str]:
        return [t for level, t in self.headings if level == "h2"]

    def table(self, caption: str) -> dict:
        found = [t for t in self.tables if t["caption"] == caption]
        assert found, f"no table captioned {caption!r}; have {[t['caption'] for t in self.tables]}"
        return found[0]


def html_page(plan) -> tuple[str, Page]:
    html = reports.render(plan, "html")
    return html, Page(html)


def money(v: float) -> str:
    return f"${v:,.2f}"


def test_single_gpu_report_answers_first_and_in_the_promised_order():
    plan = pf.single_gpu_plan()
    html, page = html_page(plan)
    assert page.h2() == H2_WITH_CANDIDATES
    top = plan.candidates[0]
    answer = page.by_class["answer"][0]
    assert f"{top.offer.provider} {top.offer.instance_type}" in answer
    assert top.label in answer
    assert money(top.cost.usd) in answer
    assert f"{top.timing.hours:.1f} h" in answer
    assert f"MFU {top.timing.mfu * 100:.0f}%" in answer and "headroom 10%" in answer
    assert f"costs {money(plan.saving_vs_baseline_usd)} less (" in answer and "than the baseline (" in answer
    assert plan.baseline.offer.instance_type in answer
    assert page.headings[0] == ("h1", f"GPU plan: {plan.model.name}")


def test_top_candidates_table_lists_cheapest_first_with_formatted_numbers():
    plan = pf.single_gpu_plan()
    _, page = html_page(plan)
    t = page.table("Top candidates in detail")
    q = ranking_quantile(plan)  # the columns name the quantile they are ranked at
    assert t["headers"][:4] == ["#", f"Cost {q}", f"Wall time {q}", "$ per hour"]  # what a reader compares, first
    assert len(t["rows"]) == min(10, len(plan.candidates))
    cost_col, time_col = t["headers"].index(f"Cost {q}"), t["headers"].index(f"Wall time {q}")
    costs = [float(r[cost_col].lstrip("$").replace(",", "")) for r in t["rows"]]
    assert costs == sorted(costs)
    assert all(re.fullmatch(r"\$[\d,]+\.\d\d", r[cost_col]) for r in t["rows"])
    assert all(re.fullmatch(r"(\d+ min|[\d,]+\.\d h( \([\d.]+ days\))?)", r[time_col]) for r in t["rows"])
    assert [r[3] for r in t["rows"]] == [money(c.cost.price_hour) for c in plan.candidates[:10]]
    instance = t["headers"].index("Instance")
    assert all(r[instance].startswith(f"{c.offer.provider} {c.offer.instance_type} · {c.offer.region}")
               for r, c in zip(t["rows"], plan.candidates))


def test_memory_chart_is_inline_svg_with_title_and_a_text_table():
    plan = pf.single_gpu_plan()
    html, page = html_page(plan)
    svgs = re.findall(r"<svg\b.*?</svg>", html, flags=re.S)
    assert len(svgs) == 4  # memory and cost-time, each wide and in its phone version (shown below 600 px)
    for svg in svgs:
        root = ET.fromstring(svg)
        assert root.get("role") == "img" and root.get("aria-labelledby")
        names = [el.tag.rsplit("}", 1)[-1] for el in root]
        assert names[:2] == ["title", "desc"]
    assert [ET.fromstring(s).get("class") for s in svgs] == ["chart wide", "chart narrow"] * 2
    for svg in svgs[:2]:
        labels = " ".join(t.text or "" for t in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text"))
        for comp in ("weights", "gradients", "optimizer", "activations", "overhead", "usable GPU memory"):
            assert comp in labels
        assert "baseline" in labels and "#1" in labels
    t = page.table("Peak memory per GPU by component")
    assert [r[0] for r in t["rows"]] == ["#1", "#2", "#3", "#4", "#5", "baseline"]
    top = plan.candidates[0].memory
    assert t["rows"][0][3:8] == [f"{getattr(top, k) / 1e9:,.1f} GB" for k in
                                 ("weights", "gradients", "optimizer", "activations", "overhead")]
    # the page never loads anything: no external references at all
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html)
    assert "<script" not in html and "@import" not in html and "url(http" not in html


def test_cost_time_chart_marks_the_pareto_front():
    plan = pf.big_plan()
    html, page = html_page(plan)
    svgs = re.findall(r"<svg\b.*?</svg>", html, flags=re.S)
    for svg in svgs[2:]:  # wide and narrow
        labels = " ".join(t.text or "" for t in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text"))
        assert "Pareto front" in labels and "candidates (500)" in labels and "naive baseline" in labels
    front = page.table("Pareto front: no cheaper and faster option exists")
    assert len(front["rows"]) == len(plan.pareto)
    from advisor.explain.claims import pareto_points, ranked_hours

    hours = [ranked_hours(c) for c in sorted(plan.pareto, key=ranked_hours)]  # fastest first, as ranked
    assert [r[5] for r in front["rows"]] == [figures for _, figures in pareto_points(plan)]
    assert [float(r[5].split(" / ")[1].removesuffix(" h")) for r in front["rows"]] == [round(h, 1) for h in hours]


def test_500_candidate_report_shows_ten_and_counts_all():
    plan = pf.big_plan()
    _, page = html_page(plan)
    assert len(page.table("Top candidates in detail")["rows"]) == 10
    assert "500 options scored (offer × stack pairs that fit), 500 meet the constraints; shown: 10, ranked by" in page.text
    assert page.h2() == H2_WITH_CANDIDATES


def test_multi_node_plan_names_nodes_and_total_gpus():
    plan = pf.multi_node_plan()
    _, page = html_page(plan)
    t = page.table("Top candidates in detail")
    gpus_col = t["headers"].index("GPUs")
    multi = [c for c in plan.candidates[:10] if c.nodes > 1]
    assert multi
    for c in multi:
        row = t["rows"][c.rank - 1]
        assert row[gpus_col] == f"2 nodes × 8× {c.offer.gpu_model} (16 GPUs)"
    assert "fsdp×16" in page.text
    best = page.table("Best-ranked option on each GPU model")
    assert {r[0] for r in best["rows"]} == set(plan.best_per_gpu)
    prov = page.table("Best-ranked option at each provider")
    assert {r[0] for r in prov["rows"]} == set(plan.best_per_provider)


def test_nothing_fits_says_so_and_shows_closest_rejections():
    plan = pf.nothing_fits_plan()
    html, page = html_page(plan)
    assert page.h2() == H2_NOTHING_FITS
    answer = page.by_class["answer"][0]
    assert answer.startswith("Nothing fits.")
    worst = max(plan.rejected, key=lambda r: r.count)
    assert worst.reason in answer
    assert page.by_class["notice"][0].endswith(plan.notice)
    t = page.table("Rejected options by reason")
    assert [r[0] for r in t["rows"]] == [r.reason for r in sorted(plan.rejected, key=lambda r: -r.count)]
    assert [r[1] for r in t["rows"]] == [f"{r.count:,}" for r in sorted(plan.rejected, key=lambda r: -r.count)]
    assert "<svg" not in html and "gpu-advisor launch" not in html
    assert plan.command in page.text


def test_rejections_listed_with_counts_and_examples():
    plan = pf.single_gpu_plan()
    _, page = html_page(plan)
    rows = page.table("Rejected options by reason")["rows"]
    assert {(r[0], r[2]) for r in rows} == {(r.reason, r.example) for r in plan.rejected}
    assert f"{len(plan.rejected)} reasons, with how many options each ruled out" in page.text  # no total of unlike units


def test_stale_price_warning_present_only_when_a_price_is_older_than_30_days():
    stale, fresh = pf.single_gpu_plan(stale=True), pf.single_gpu_plan(stale=False)
    _, page = html_page(stale)
    assert any("older than 30 days" in w for w in page.by_class["warning"])
    prices = page.table("Every price used, with source and date")
    flagged = {r[0] for r in prices["rows"] if r[-1].startswith("⚠")}
    assert flagged == {"runpod"}
    assert [r for r in prices["rows"] if r[0] == "runpod"][0][7] == "77"  # age in days

    _, page = html_page(fresh)
    assert "older than 30 days" not in page.text.replace(
        "Rows shaded yellow use a price that is undated or older than 30 days", "")
    assert "warning" not in page.by_class
    assert not any("stale" in a.get("class", "") for _, a in page.tags)


def test_stale_warning_computed_from_price_date_when_flag_missing():
    plan = pf.single_gpu_plan(stale=False)
    def dated(c, day):
        return c.model_copy(update={"offer": c.offer.model_copy(update={"price_date": day})})

    old = [dated(c, "2026-10-29") if c.offer.provider == "aws" else c for c in plan.candidates]  # 32 days
    edge = [dated(c, "2026-10-31") if c.offer.provider == "aws" else c for c in plan.candidates]  # 30 days
    _, page = html_page(plan.model_copy(update={"candidates": old}))
    assert {r[0] for r in page.table("Every price used, with source and date")["rows"]
            if r[-1].startswith("⚠")} == {"aws"}
    _, page = html_page(plan.model_copy(update={"candidates": edge}))
    assert "warning" not in page.by_class


def test_assumptions_source_dates_and_commands_shown():
    plan = pf.single_gpu_plan()
    _, page = html_page(plan)
    rows = dict((r[0], r[1]) for r in page.table("Assumptions behind the estimates")["rows"])
    assert rows["headroom"] == "0.1 (10%)" and rows["setup_hours"] == "15 min"
    sources = {r[5] for r in page.table("Every price used, with source and date")["rows"]}
    assert sources == {c.offer.source for c in plan.candidates} | {plan.baseline.offer.source}
    assert plan.command in page.text
    assert "gpu-advisor launch --from plan.json --rank 1 --out launch/" in page.text


def test_budget_notice_is_shown_above_the_answer():
    plan = pf.single_gpu_plan().model_copy(update={"notice": "No candidate meets the budget; showing the closest."})
    html, page = html_page(plan)
    assert page.by_class["notice"] == ["Note: No candidate meets the budget; showing the closest."]
    assert html.index('class="notice"') < html.index('class="answer')


def test_html_is_self_contained_responsive_and_printable():
    html, page = html_page(pf.single_gpu_plan())
    metas = [a for t, a in page.tags if t == "meta"]
    assert {"name": "viewport", "content": "width=device-width, initial-scale=1"} in metas
    assert "@media print" in html and "overflow-x:auto" in html
    assert not [t for t, _ in page.tags if t in ("script", "link", "img", "iframe", "object", "embed")]
    assert sum(1 for t, a in page.tags if t == "div" and "table-wrap" in a.get("class", "")) == len(page.tables)


def test_same_plan_renders_byte_identical():
    plan = pf.multi_node_plan()
    assert reports.render(plan, "html") == reports.render(plan, "html")


# ---------- hostile strings -----------------------------------------------------------------

def test_hostile_names_render_as_text_in_html_and_svg():
    plan = pf.hostile_plan()
    html, page = html_page(plan)
    tags = {t for t, _ in page.tags}
    assert not tags & {"script", "img", "iframe", "marquee", "b", "i"}
    assert not [k for _, a in page.tags for k in a if k.lower().startswith("on")]
    assert sum(1 for t, _ in page.tags if t == "svg") == 4  # ours only (two charts, wide and narrow), not the hostile one
    assert "<script" not in html.lower() and "<img" not in html.lower()
    text = page.text
    assert pf.HOSTILE in text  # shown, as text
    assert '"><img src=x onerror=alert(2)>|x|' in text
    assert "Llama</title><script>alert(3)</script>" in page.headings[0][1]
    for svg in re.findall(r"<svg\b.*?</svg>", html, flags=re.S):
        root = ET.fromstring(svg)  # still well-formed
        assert not [el for el in root.iter() if el.tag.rsplit("}", 1)[-1] in ("script", "foreignObject")]
    memory_svg = ET.fromstring(re.findall(r"<svg\b.*?</svg>", html, flags=re.S)[0])
    assert any(pf.HOSTILE in (t.text or "") for t in memory_svg.iter("{http://www.w3.org/2000/svg}text"))


def test_clean_svg_drops_scripts_handlers_and_external_links():
    from reports.charts import clean_svg

    evil = ('<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" onload="x()">'
            '<script>alert(1)</script><style>body{display:none}</style><foreignObject><p>x</p></foreignObject>'
            '<a href="http://evil"><text>t</text></a><use xlink:href="http://evil/#a"/><use xlink:href="#m1"/>'
            '<path id="m1" d="M0 0" clip-path="url(#c1)" onclick="y()"/></svg>')
    out = clean_svg(evil, id_prefix="k", title="T", desc="D")
    root = ET.fromstring(out)
    names = [el.tag.rsplit("}", 1)[-1] for el in root.iter()]
    assert "script" not in names and "style" not in names and "foreignObject" not in names and "a" not in names
    assert "onload" not in out and "onclick" not in out and "evil" not in out
    assert 'xlink:href="#k-m1"' in out and 'id="k-m1"' in out and "url(#k-c1)" in out
    with pytest.raises(ValueError):
        clean_svg("<svg><g></svg>", id_prefix="k", title="T", desc="D")


# ---------- Markdown ------------------------------------------------------------------------

def md_cells(line: str) -> list[str]:
    """Split a GFM table row on unescaped pipes."""
    cells, cur, i = [], "", 0
    line = line.strip()
    while i < len(line):
        ch = line[i]
        if ch == "\\" and i + 1 < len(line):
            cur += line[i:i + 2]
            i += 2
            continue
        if ch == "|":
            cells.append(cur)
            cur = ""
        else:
            cur += ch
        i += 1
    cells.append(cur)
    return [c.strip() for c in cells[1:-1]]


def md_tables(md: str) -> list[list[list[str]]]:
    tables, cur = [], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            cur.append(md_cells(line))
        elif cur:
            tables.append(cur)
            cur = []
    return tables


@pytest.mark.parametrize("factory", [pf.single_gpu_plan, pf.multi_node_plan, pf.nothing_fits_plan,
                                     pf.big_plan, pf.hostile_plan])
def test_markdown_tables_parse_with_equal_columns(factory):
    md = reports.render(factory(), "md")
    tables = md_tables(md)
    assert len(tables) >= 3
    for t in tables:
        assert all(re.fullmatch(r"-{3,}", c) for c in t[1]), t[1]
        assert {len(r) for r in t} == {len(t[0])}, [len(r) for r in t]


def test_markdown_headings_follow_the_html_order():
    md = reports.render(pf.single_gpu_plan(), "md")
    assert re.findall(r"^## (.+)$", md, flags=re.M) == H2_WITH_CANDIDATES
    md = reports.render(pf.nothing_fits_plan(), "md")
    assert re.findall(r"^## (.+)$", md, flags=re.M) == H2_NOTHING_FITS


def test_markdown_escapes_hostile_values():
    md = reports.render(pf.hostile_plan(), "md")
    outside_code = re.sub(r"^(`{3,})\n.*?\n\1$", "", md, flags=re.M | re.S)  # code blocks show text verbatim
    assert "alert(5)" not in outside_code
    for raw in ("<script", "<img", "<iframe", "<b>", "<svg", "<marquee"):
        assert raw not in outside_code
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md
    row = next(r for t in md_tables(md) for r in t if r and r[0] == "1")
    assert row[4].startswith('&lt;script&gt;alert(1)&lt;/script&gt; "&gt;&lt;img src=x onerror=alert(2)&gt;\\|x\\| · ')
    fence = re.search(r"^(`{3,})\n(gpu-advisor plan .*)\n\1$", md, flags=re.M)
    assert fence and len(fence.group(1)) == 4  # longer than the ``` inside the command
    assert "\\$5.41" in md  # a lone $ cannot start GitHub maths


def test_markdown_write_puts_linked_svgs_beside_it(tmp_path):
    out = tmp_path / "my report.md"
    written = reports.write(pf.single_gpu_plan(), out)
    assert written == [out, tmp_path / "my report-memory.svg", tmp_path / "my report-cost-time.svg"]
    md = out.read_text()
    assert "](my%20report-memory.svg)" in md and "](my%20report-cost-time.svg)" in md
    for svg in written[1:]:
        root = ET.parse(svg).getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in written)  # no temp files left


def test_write_picks_format_from_suffix_and_rejects_others(tmp_path):
    plan = pf.nothing_fits_plan()
    assert reports.write(plan, tmp_path / "r.HTM") == [tmp_path / "r.HTM"]
    assert (tmp_path / "r.HTM").read_text().startswith("<!DOCTYPE html>")
    with pytest.raises(BadInput, match=r"\.html, \.htm, \.md"):
        reports.write(plan, tmp_path / "r.pdf")
    with pytest.raises(BadInput):
        reports.render(plan, "pdf")


def test_write_replaces_existing_report_atomically(tmp_path, monkeypatch):
    out = tmp_path / "r.html"
    out.write_text("old report")

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)  # the one atomic writer (pricing.files) renames with os.replace
    with pytest.raises(OSError):
        reports.write(pf.single_gpu_plan(), out)
    assert out.read_text() == "old report" and os.listdir(tmp_path) == ["r.html"]


# ---------- CLI -----------------------------------------------------------------------------

def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advisor", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_cli_report_from_saved_plan_json(tmp_path):
    plan = pf.multi_node_plan()
    (tmp_path / "plan.json").write_text(plan.model_dump_json())
    res = run_cli("report", "plan.json", "-o", "out.html", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "out.html"
    page = Page((tmp_path / "out.html").read_text())
    assert f"{plan.candidates[0].offer.provider} {plan.candidates[0].offer.instance_type}" in page.by_class["answer"][0]
    res = run_cli("report", "plan.json", "-o", "out.md", cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.split() == ["out.md", "out-memory.svg", "out-cost-time.svg"]


@pytest.mark.parametrize("content, expect", [
    ("{not json", "not valid JSON"),
    (json.dumps({"model": {"name": "x"}, "candidates": []}), "is not a plan"),
    (json.dumps([1, 2]), "is not a plan"),
])
def test_cli_rejects_bad_plan_file_with_one_line(tmp_path, content, expect):
    (tmp_path / "plan.json").write_text(content)
    res = run_cli("report", "plan.json", "-o", "out.html", cwd=tmp_path)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: PLAN_FILE") and expect in lines[0]
    assert not (tmp_path / "out.html").exists()
