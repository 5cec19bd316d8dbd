"""Hostile plan files for `gpu-advisor report`, and hostile text in every Markdown and table output.

A plan's text either is refused on load (control characters, line breaks, escape sequences: one
line, exit 2, nothing written) or stays text: the Markdown report parses (CommonMark) to the same
headings, fences and table shapes as a benign plan's, with no raw HTML, no link and no image
but the charts the tool wrote beside it; the HTML report has no script, handler or external
reference; the SVG charts stay well-formed whatever the labels hold. `plan --format md|table`,
`estimate --format md|table` and `cli.output.render_rows` escape the same way. A deep plan file
is refused before it is parsed (counted, not timed).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import warnings
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers.cli_run import gpu_advisor, one_line_error  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1]))
from helpers import plan_factory as pf  # noqa: E402

HOSTILE_TEXT = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    "<svg onload=alert(1)>",
    "[click](javascript:alert(1))",
    "![t](https://evil.example/t.png)",
    "https://evil.example/x www.evil.example user@evil.example",
    "# Heading",
    "```fence",
    "~~~",
    "| a | b |",
    "--- === +++",
    "1. item",
    "- item",
    "> quote",
    "<!-- c --> &amp; &#x3C;script&#x3E;",
    "*bold* _it_ `code` $x$ \\",
    "{{ 7*7 }} {% if x %}",
    "日本語 · ünïcödé · 🚀 · \u200b",
]
CONTROL_TEXT = [("a\nb", "U+000A"), ("a\r\n# H", "U+000D"), ("\x1b[2J\x1b]0;t\x07", "U+001B"), ("a\x00", "U+0000"),
                ("a\u2029b", "U+2029"), ("a\u202eb", "U+202E"), ("a\x9bb", "U+009B")]


def base_plan() -> dict:
    data = json.loads(pf.single_gpu_plan().model_dump_json())
    data["workload"]["train_tokens"] = 2 * data["workload"]["tokens"]  # as the planner writes it
    return data


def spoil(data: dict, text: str) -> dict:
    """`text` in every free-text field a plan file holds."""
    data = copy.deepcopy(data)
    data["model"]["name"] = "m " + text if text.startswith("-") else text
    data["model"]["source"] = text
    cands = data["candidates"] + data["others"]  # every stored candidate (schema 4)
    for c in cands:
        for f in ("provider", "region", "instance_type", "price_source", "stack_label"):
            c[f] = text
        c["notes"] = [text]
    data["best_per_provider_refs"] = {text: 0}
    data["rejected"] = [{"reason": text, "count": 3, "example": text}]
    data["assumptions"][text] = text
    data["workload"]["dataset"] = text
    data["warnings"] = [text]
    data["notice"] = text
    data["command"] = f"gpu-advisor plan --model {text}"
    return data


def write(tmp_path: Path, data: dict, name: str = "plan.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- Markdown, read as CommonMark

def tokens(text: str):
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table").enable("strikethrough")

    def walk(toks):
        for t in toks:
            yield t
            yield from walk(t.children or [])

    return list(walk(md.parse(text)))


STRUCTURE = ("heading_open", "fence", "code_block", "table_open", "tr_open", "th_open", "bullet_list_open",
             "ordered_list_open", "list_item_open", "blockquote_open", "hr")


def structure(text: str) -> list[str]:
    """Block structure, with each heading's level (text differs between plans, the outline must not)."""
    return [t.tag if t.type == "heading_open" else t.type for t in tokens(text) if t.type in STRUCTURE]


def assert_inert(text: str, allowed_images: set[str] = frozenset()) -> None:
    toks = tokens(text)
    assert not [t for t in toks if t.type in ("html_block", "html_inline", "link_open")]
    images = {t.attrs.get("src") for t in toks if t.type == "image"}
    assert images <= set(allowed_images), images
    rows: list[int] = []
    for t in toks:  # every table row has as many cells as its header
        if t.type == "tr_open":
            rows.append(0)
        elif t.type in ("th_open", "td_open"):
            rows[-1] += 1
        elif t.type == "table_close":
            assert len(set(rows)) == 1, rows
            rows = []


@pytest.fixture(scope="module")
def benign_md(tmp_path_factory):
    """The report of the same plan with plain words in every field, rendered once."""
    import reports
    from advisor.results import Plan

    folder = tmp_path_factory.mktemp("benign")
    reports.write(Plan.model_validate(spoil(base_plan(), "plain words")), folder / "r.md")
    return (folder / "r.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_markdown_report_of_a_hostile_plan_is_text_with_the_benign_outline(tmp_path, capsys, benign_md, text):
    code, out, err = gpu_advisor(capsys, "report", write(tmp_path, spoil(base_plan(), text)), "-o", tmp_path / "r.md")
    assert code == 0, err
    assert out.split() == [str(tmp_path / n) for n in ("r.md", "r-memory.svg", "r-cost-time.svg")]
    report = (tmp_path / "r.md").read_text(encoding="utf-8")
    assert_inert(report, allowed_images={"r-memory.svg", "r-cost-time.svg"})
    assert structure(report) == structure(benign_md)
    for name in ("r-memory.svg", "r-cost-time.svg"):
        root = ET.parse(tmp_path / name).getroot()  # well-formed
        assert not [el for el in root.iter() if el.tag.rsplit("}", 1)[-1] in ("script", "foreignObject", "a")]
        assert not [k for el in root.iter() for k in el.attrib if k.lower().startswith("on")]


class Tags(HTMLParser):
    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


@pytest.mark.parametrize("text", HOSTILE_TEXT[:6])
def test_html_report_of_a_hostile_plan_has_no_active_content(tmp_path, capsys, text):
    code, _, err = gpu_advisor(capsys, "report", write(tmp_path, spoil(base_plan(), text)), "-o", tmp_path / "r.html")
    assert code == 0, err
    page = Tags((tmp_path / "r.html").read_text(encoding="utf-8"))
    names = [t for t, _ in page.tags]
    assert not {"script", "img", "iframe", "object", "embed", "link", "a", "foreignobject"} & set(names)
    assert names.count("svg") == 4  # two charts, each wide and in its phone version
    for _, attrs in page.tags:
        assert not [k for k in attrs if k.lower().startswith("on")]
        for k in ("href", "src", "xlink:href"):
            assert attrs.get(k) is None or attrs[k].startswith("#"), attrs


@pytest.mark.parametrize("where", ["model.name", "provider", "region", "instance_type", "price_source",
                                   "stack_label", "notes", "warnings", "notice", "command", "rejected",
                                   "assumptions key", "workload value", "best_per_gpu key"])
@pytest.mark.parametrize("text, codepoint", CONTROL_TEXT)
def test_control_characters_anywhere_in_a_plan_are_refused(tmp_path, capsys, where, text, codepoint):
    data = base_plan()
    c = data["candidates"][1]
    {"model.name": lambda: data["model"].update(name=text),
     "provider": lambda: c.update(provider=text), "region": lambda: c.update(region=text),
     "instance_type": lambda: c.update(instance_type=text), "price_source": lambda: c.update(price_source=text),
     "stack_label": lambda: c.update(stack_label=text), "notes": lambda: c.update(notes=["ok", text]),
     "warnings": lambda: data.update(warnings=[text]), "notice": lambda: data.update(notice=text),
     "command": lambda: data.update(command=text), "rejected": lambda: data.update(
         rejected=[{"reason": "r", "count": 1, "example": text}]),
     "assumptions key": lambda: data["assumptions"].update({text: 1}),
     "workload value": lambda: data["workload"].update(dataset=text),
     "best_per_gpu key": lambda: data.update(best_per_gpu_refs={text: 1}),
     }[where]()
    code, out, err = gpu_advisor(capsys, "report", write(tmp_path, data), "-o", tmp_path / "r.md")
    line = one_line_error(code, err)
    assert line.startswith("error: PLAN_FILE:") and codepoint in line
    assert out == "" and os.listdir(tmp_path) == ["plan.json"]


@pytest.mark.parametrize("mutate, expect", [
    (lambda d: d["candidates"][0].update(gpu_model="RTX9999"), "GPU table"),
    (lambda d: d["candidates"][0].update(cost_usd=float("nan")), "finite"),
    (lambda d: d["candidates"][0].update(hours=float("-inf")), "finite"),
    (lambda d: d["candidates"][0].update(peak_memory_bytes=-1), ">= 0"),
    (lambda d: d["model"].update(params_total=-9_330_000_000), "params_total"),
    (lambda d: d["model"].update(name="--help"), "starts with '-'"),
    (lambda d: d.update(saving_vs_baseline_usd=float("inf")), "finite"),
    (lambda d: d["assumptions"].update(mfu_full=float("nan")), "finite"),
    (lambda d: d.update(candidates="all"), "candidates"),
])
def test_impossible_values_in_a_plan_are_refused(tmp_path, capsys, mutate, expect):
    data = base_plan()
    mutate(data)
    code, _, err = gpu_advisor(capsys, "report", write(tmp_path, data), "-o", tmp_path / "r.html")
    assert expect in one_line_error(code, err)
    assert not (tmp_path / "r.html").exists()


def test_deeply_nested_plan_json_is_refused_before_parsing(tmp_path, capsys, builds):
    path = tmp_path / "plan.json"
    path.write_text('{"model": ' + "[" * 200_000 + "]" * 200_000 + "}")
    code, _, err = gpu_advisor(capsys, "report", path, "-o", tmp_path / "r.html")
    assert "nested more than" in one_line_error(code, err) and str(path) in err
    assert builds.of(path.read_text()) == [] and not (tmp_path / "r.html").exists()


# --------------------------------------------------------------------------- charts take any label

def test_charts_stay_well_formed_whatever_a_label_holds():
    """Text that validation refuses can still reach the charts from Python (model_construct skips
    validators): every character XML forbids is dropped from labels, so the SVG parses."""
    from advisor.results import Offer
    from reports import charts

    plan = pf.single_gpu_plan()
    nasty = "a\x00b\x01\x07\x08\x0b\x0c\x1b[31m\x7f\x85\ud800\udfff\ufffe\uffff<&>\"'\u2028]]>"
    cands = []
    for c in plan.candidates:
        offer = Offer.model_construct(**{**c.offer.__dict__, "provider": nasty, "instance_type": nasty})
        cands.append(c.model_copy(update={"offer": offer}))
    plan = plan.model_copy(update={"candidates": cands, "pareto": cands[:1]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no glyph warnings leak either
        for svg in (charts.memory_chart(plan), charts.cost_time_chart(plan)):
            clean = charts.clean_svg(svg, id_prefix="c", title="t", desc="d")
            ET.fromstring(clean)
            clean.encode("utf-8")


# --------------------------------------------------------------------------- files beside a report

def test_existing_chart_files_beside_a_markdown_report_are_named_when_replaced(tmp_path, capsys):
    plan = write(tmp_path, base_plan())
    (tmp_path / "r-memory.svg").write_text("mine")
    code, out, err = gpu_advisor(capsys, "report", plan, "-o", tmp_path / "r.md")
    assert code == 0
    lines = err.strip().splitlines()
    assert lines == [f"warning: replaced {tmp_path / 'r-memory.svg'} (the report's chart beside r.md)"]
    assert (tmp_path / "r-memory.svg").read_text() != "mine"


def test_a_folder_where_a_chart_goes_is_refused(tmp_path, capsys):
    plan = write(tmp_path, base_plan())
    (tmp_path / "r-cost-time.svg").mkdir()
    code, _, err = gpu_advisor(capsys, "report", plan, "-o", tmp_path / "r.md")
    assert "r-cost-time.svg" in one_line_error(code, err)
    assert not (tmp_path / "r.md").exists()


@pytest.mark.parametrize("out, code_", [("missing/r.md", 2), ("r.txt", 2), ("r", 2), ("folder", 2)])
def test_bad_report_paths_are_one_line(tmp_path, capsys, out, code_):
    (tmp_path / "folder").mkdir()
    plan = write(tmp_path, base_plan())
    code, _, err = gpu_advisor(capsys, "report", plan, "-o", tmp_path / out)
    one_line_error(code, err, code_)


def test_unwritable_report_is_plain_words_exit_1(tmp_path, capsys, monkeypatch):
    import importlib

    render_module = importlib.import_module("reports.render")  # `reports.render` is also the function

    def fail(path, *a, **k):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(render_module, "atomic_write", fail)
    code, _, err = gpu_advisor(capsys, "report", write(tmp_path, base_plan()), "-o", tmp_path / "r.html")
    line = one_line_error(code, err, 1)
    assert "permission denied" in line and "PermissionError" not in line and "Errno" not in line


def test_hostile_report_and_plan_file_names_stay_on_one_line(tmp_path, capsys):
    plan = write(tmp_path, base_plan(), name="p\x1b[2J`x`\n.json")
    code, out, err = gpu_advisor(capsys, "report", plan, "-o", tmp_path / "r\x1b]0;t\x07\n.md")
    assert code == 0, err
    assert "\x1b" not in out and len(out.strip().splitlines()) == 3
    report = next(p for p in tmp_path.iterdir() if p.suffix == ".md").read_text(encoding="utf-8")
    assert "\x1b" not in report
    assert_inert(report, allowed_images={"r%1B%5D0%3Bt%07%0A-memory.svg", "r%1B%5D0%3Bt%07%0A-cost-time.svg"})


# --------------------------------------------------------------------------- plan / estimate / tables

def hostile_plan_object(text: str):
    from advisor.results import Plan

    return Plan.model_validate(spoil(base_plan(), text))


@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_plan_markdown_output_is_text(text):
    from cli.plan import render

    out = render(hostile_plan_object(text), "md")
    assert_inert(out)
    kinds = structure(out)
    assert kinds.count("table_open") == 1 and "h1" not in kinds and "fence" not in kinds


@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_plan_table_output_keeps_one_line_per_row(text):
    from cli.plan import render

    plan = hostile_plan_object(text)
    lines = render(plan, "table").splitlines()
    assert len(lines) == 1 + len(plan.candidates) + 1 + len(render(plan, "table").split("\n\n", 1)[1].splitlines())
    assert all("\x1b" not in line for line in lines)


def test_render_rows_neutralises_terminal_markdown_and_csv():
    from cli.output import render_rows

    rows = [["aws\x1b[2J\x1b]0;title\x07", "us\neast\r1"], ["=HYPERLINK(\"http://x\")", "<script>|x|"]]
    table = render_rows(["provider", "region"], rows, "table")
    assert len(table.splitlines()) == 3 and "\x1b" not in table and "\r" not in table
    md = render_rows(["provider", "region"], rows, "md")
    assert len(md.splitlines()) == 4
    assert_inert(md)
    csv_text = render_rows(["provider", "region"], rows, "csv")
    assert "'=HYPERLINK" in csv_text


@pytest.mark.parametrize("text", HOSTILE_TEXT[:8])
def test_estimate_markdown_and_table_escape_the_model_name_and_source(text):
    from advisor.api import estimate_memory
    from advisor.model.catalog import load_model
    from advisor.stacks import Shape, Stack
    from cli.estimate import render_markdown, render_table

    spec = load_model("qwen2.5-0.5b").model_copy(update={"name": "m " + text, "source": text})
    est = estimate_memory(spec, Stack(method="lora"), Shape(micro_batch=1, seq_len=512), gpu="A10G")
    md = render_markdown(est)
    assert_inert(md)
    assert structure(md).count("h3") == 1 and "h1" not in structure(md)
    assert "\x1b" not in render_table(est)
