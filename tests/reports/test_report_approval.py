"""`gpu-advisor report plan.json --approval approval.json`: the report shows who approved which candidate, when, its
caps, the plan digest (this plan's) and the price with its source and date, in HTML and Markdown; an approval that
was edited, or that approved another plan, is refused with one line and no report is written; a library caller who
renders one anyway gets a block that says it is not valid. The HTML block is also checked in Chromium at 390 px."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from helpers.cli_run import gpu_advisor, one_line_error, saved_plan

import reports
from advisor import approval as approvals
from advisor.explain.approval import approval_block
from advisor.results import Plan

sys.path.insert(0, str(Path(__file__).parents[1]))


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    """A real saved plan and its approval, written by the commands a budget owner runs."""
    folder = tmp_path_factory.mktemp("signed")
    plan_file = saved_plan(folder, "--model", "meta-llama/Llama-3.2-1B", "--tokens", "1M")
    approval_file = folder / "approval.json"
    from cli import main

    with pytest.raises(SystemExit) as done:
        main(["approve", str(plan_file), "--by", "Ana <b>Lead</b>", "--project", "llama-demo", "--cap", "1200",
              "-o", str(approval_file)])
    assert done.value.code == 0
    return plan_file, approval_file, approvals.load(approval_file)


def _facts(a: approvals.Approval) -> list[str]:
    """What the block must show, read from the approval file itself."""
    return [a.approved_by, a.approved_at[:10], a.project, a.provider, a.instance_type, a.region, a.stack,
            f"${a.caps.cost_usd:,.2f}", f"{a.caps.hours:,.2f} h", f"{a.caps.stop_hours:,.2f} h",
            a.plan_digest[:19], a.record_digest[:19], a.price.source, a.price.date or "undated",
            f"${a.price.price_hour:,.2f}/h"]


def test_the_html_report_shows_the_approval_block(signed, tmp_path, capsys):
    plan_file, approval_file, a = signed
    out = tmp_path / "r.html"
    code, _, err = gpu_advisor(capsys, "report", plan_file, "--approval", approval_file, "-o", out)
    assert code == 0, err
    html = out.read_text()
    block = re.search(r'<section id="approval".*?</section>', html, re.S)
    assert block, "no approval block"
    import html as html_lib

    text = html_lib.unescape(re.sub(r"<[^>]+>", " ", block.group(0)))
    for fact in _facts(a):
        assert fact in text, fact
    assert "matches this plan" in text and "NOT" not in text
    assert "Ana &lt;b&gt;Lead&lt;/b&gt;" in block.group(0) and "<b>Lead</b>" not in block.group(0)  # escaped
    assert html.index('id="approval"') < html.index('id="answer"')  # the budget owner reads it first


def test_the_markdown_report_shows_the_approval_block(signed, tmp_path, capsys):
    plan_file, approval_file, a = signed
    out = tmp_path / "r.md"
    code, _, err = gpu_advisor(capsys, "report", plan_file, "--approval", approval_file, "-o", out)
    assert code == 0, err
    md = out.read_text()
    block = md[md.index("## Approved budget"):md.index("## The answer")]
    unescaped = re.sub(r"\\(.)", r"\1", block).replace("&lt;", "<").replace("&gt;", ">")
    for fact in _facts(a):
        assert fact in unescaped, fact
    assert "matches this plan" in block and "<b>" not in block  # the approver's markup is text


def test_a_report_without_approval_has_no_block(signed, tmp_path, capsys):
    plan_file, _, _ = signed
    for name in ("r.html", "r.md"):
        assert gpu_advisor(capsys, "report", plan_file, "-o", tmp_path / name)[0] == 0
        text = (tmp_path / name).read_text()
        assert 'id="approval"' not in text and "Approved budget" not in text


def test_an_edited_approval_is_refused_and_no_report_is_written(signed, tmp_path, capsys):
    plan_file, approval_file, _ = signed
    data = json.loads(approval_file.read_text())
    data["caps"]["cost_usd"] *= 2
    data["caps"]["hours"] *= 2  # consistent with the price, so only the record digest catches it
    data["caps"]["stop_hours"] *= 2
    edited = tmp_path / "approval.json"
    edited.write_text(json.dumps(data))
    line = one_line_error(*gpu_advisor(capsys, "report", plan_file, "--approval", edited, "-o",
                                       tmp_path / "r.html")[::2])
    assert "changed after it was written" in line and not (tmp_path / "r.html").exists()


def test_an_approval_of_another_plan_is_refused_and_no_report_is_written(signed, tmp_path, capsys):
    plan_file, approval_file, _ = signed
    data = json.loads(plan_file.read_text())
    data["generated_at"] = "2026-12-02T00:00:00+00:00"  # the same candidates, another plan file
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    for name in ("r.html", "r.md"):
        line = one_line_error(*gpu_advisor(capsys, "report", other, "--approval", approval_file, "-o",
                                           tmp_path / name)[::2])
        assert "another plan" in line and not (tmp_path / name).exists()


@pytest.mark.parametrize("edit,field", [
    (lambda d: d["caps"].update(hours=d["caps"]["hours"] * 2), "caps.hours"),
    (lambda d: d["caps"].update(cost_usd=1e12), "caps.cost_usd"),
    (lambda d: d.update(approved_by="Ana\x1b[31m"), "approved_by"),
    (lambda d: d.pop("plan_digest"), "plan_digest"),
    (lambda d: d["price"].update(price_hour="1.2"), "price.price_hour"),
])
def test_a_malformed_approval_is_one_line_naming_the_field(signed, tmp_path, capsys, edit, field):
    plan_file, approval_file, _ = signed
    data = json.loads(approval_file.read_text())
    edit(data)
    bad = tmp_path / "approval.json"
    bad.write_text(json.dumps(data))
    line = one_line_error(*gpu_advisor(capsys, "report", plan_file, "--approval", bad, "-o", tmp_path / "r.md")[::2])
    assert field in line and "--approval" in line and not (tmp_path / "r.md").exists()


def test_a_library_caller_rendering_another_plans_approval_gets_a_loud_invalid_block(signed):
    plan_file, _, a = signed
    plan = Plan.model_validate_json(plan_file.read_text())
    block = approval_block(a, plan, "sha256:" + "0" * 64, "other.json")
    assert not block.valid and "NOT" in block.title
    for fmt in ("html", "md"):
        text = reports.render(plan, fmt, approval=block)
        assert "NOT APPROVED" in text and "Approved budget" not in text and "does NOT match this plan" in text
    good = approval_block(a, plan, approvals.digest(json.loads(plan_file.read_text())), "plan.json")
    assert good.valid and good.title == "Approved budget"


# ----------------------------------------------------------------------------- in Chromium at 390 px
BLOCK = """(() => {
  const s = document.getElementById('approval');
  const b = s.getBoundingClientRect();
  return JSON.stringify({viewport: document.documentElement.clientWidth, page: document.documentElement.scrollWidth,
    left: b.left, right: b.right, height: b.height, scroll: s.scrollWidth, client: s.clientWidth,
    visible: s.offsetParent !== null, text: s.innerText,
    font: parseFloat(getComputedStyle(s.querySelector('dd')).fontSize)});
})()"""


@pytest.mark.slow
def test_the_approval_block_reads_at_390_px_in_chromium(signed, tmp_path, capsys):
    browser = pytest.importorskip("test_reports_browser")
    if browser.CHROMIUM is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    plan_file, approval_file, a = signed
    out = tmp_path / "r.html"
    assert gpu_advisor(capsys, "report", plan_file, "--approval", approval_file, "-o", out)[0] == 0
    with browser.DevTools(tmp_path / "profile", "--proxy-server=http://127.0.0.1:9", window="390,900") as dt:
        dt.call("Page.enable")
        dt.call("Emulation.setDeviceMetricsOverride", width=390, height=900, deviceScaleFactor=1, mobile=False)
        dt.call("Page.navigate", url=out.resolve().as_uri())
        while not any(e.get("method") == "Page.loadEventFired" for e in dt.events):
            dt.events.append(dt.ws.recv())
        m = json.loads(dt.call("Runtime.evaluate", expression=BLOCK, returnByValue=True)["result"]["value"])
        shot = dt.call("Page.captureScreenshot", format="png")["data"]
    import base64

    (tmp_path / "approval-390.png").write_bytes(base64.b64decode(shot))
    print(f"screenshot: {tmp_path / 'approval-390.png'}")
    assert m["viewport"] == 390 and m["page"] <= 390, "the page scrolls sideways"
    assert m["visible"] and 0 <= m["left"] and m["right"] <= 390 and m["scroll"] <= m["client"], m
    assert m["font"] >= 13 and m["height"] > 0
    for fact in (a.approved_by, f"${a.caps.cost_usd:,.2f}", a.plan_digest[:19], "matches this plan", a.price.source):
        assert fact in m["text"], fact
