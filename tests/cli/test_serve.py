"""`gpu-advisor serve`: the page a budget owner opens says what `gpu-advisor plan` says, refuses bad input
with one line, never plans the same inputs twice, bounds its work, and listens on loopback only.

Servers run in a background thread (tests/helpers/serve_helpers.py) or, for the listening check, as the real
command in a subprocess. Work is bounded by counting plans and cache hits, never by a stopwatch.
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import stat
import subprocess
import sys
import threading
import zipfile
from pathlib import Path
from urllib.parse import parse_qsl, quote

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parents[1]))
from helpers import plan_factory as pf  # noqa: E402
from helpers.serve_helpers import LLAMA, SHEET, q, serving  # noqa: E402

from advisor.explain.card import cost_band, time_band  # noqa: E402
from advisor.results import ranked_cost  # noqa: E402
from advisor.text import md as md_text  # noqa: E402
from advisor.units import money  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BASE = q(model=LLAMA, tokens="100M")


@pytest.fixture(scope="module")
def served():
    """One server with the CLI's own planner, shared by the tests that read real plans."""
    with serving() as s:
        yield s


@pytest.fixture(scope="module")
def cli_json() -> str:
    """What `gpu-advisor plan --format json` prints for BASE, from its own process."""
    r = subprocess.run([sys.executable, "-m", "advisor", "plan", "--model", LLAMA, "--tokens", "100M", "--format",
                        "json"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _unclocked(text: str) -> str:
    """The plan JSON without the two values that say when and in which process it was made."""
    text = re.sub(r'"generated_at": "[^"]*"', '"generated_at": ""', text)
    return re.sub(r'"memory_estimates": \d+', '"memory_estimates": 0', text)


def _card(html: str, name: str) -> str:
    m = re.search(rf'id="card-{name}">([^<]*)<', html)
    assert m, f"no card-{name} in the page"
    return m.group(1)


def _error_line(html: str) -> str:
    [line] = re.findall(r'<p class="error-line" id="error" role="alert">([^<]*)</p>', html)
    return line


# ----------------------------------------------------------------------------- the command itself

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket the process holds, from /proc (no psutil needed)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            addr, port = local.split(":")
            raw = bytes.fromhex(addr)
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, width, 4))  # each 32-bit word is little-endian
            found.append((socket.inet_ntop(socket.AF_INET if width == 4 else socket.AF_INET6, raw), int(port, 16)))
    return found


def _wait_for_port(proc: subprocess.Popen, port: int) -> None:
    """Connect until the server accepts: at most 600 tries, 50 ms apart (a ceiling for a loaded machine)."""
    for _ in range(600):
        assert proc.poll() is None, proc.stderr.read()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            threading.Event().wait(0.05)
    raise AssertionError(f"nothing answered on 127.0.0.1:{port}")


def test_serve_answers_on_loopback_and_listens_nowhere_else():
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "advisor", "serve", "--port", str(port)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_port(proc, port)
        assert proc.stdout.readline().strip() == f"Serving gpu-advisor on http://127.0.0.1:{port}/ (Ctrl-C to stop)"
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
            assert s.recv(64).startswith(b"HTTP/1.0 200")
        assert _listening(proc.pid) == [("127.0.0.1", port)]
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_serve_says_so_when_it_listens_beyond_loopback():
    proc = subprocess.Popen([sys.executable, "-m", "advisor", "serve", "--host", "0.0.0.0", "--port", "0"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert line.startswith("warning: listening on http://0.0.0.0:") and "not a loopback address" in line
        assert proc.stdout.readline().startswith("Serving gpu-advisor on http://0.0.0.0:")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_a_bad_price_sheet_stops_the_server_at_start_with_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("provider,region\nacme\n")
    from cli import cli

    r = CliRunner().invoke(cli, ["serve", "--port", "0", "--prices", str(bad)])
    assert r.exit_code != 0 and "bad.csv" in str(r.exception or r.output)


# ----------------------------------------------------------------------------- the same answer as the CLI

def test_plan_page_shows_the_cli_top_pick_and_cost_and_plan_json_is_the_cli_json(served, cli_json):
    cli = json.loads(cli_json)
    top = cli["candidates"][0]
    page = served.get(f"/plan?{BASE}")
    assert page.status == 200, page.text[:500]
    assert _card(page.text, "cost") == money(top["cost"]["usd_at_risk"])  # the ranked figure (plan.ranking)
    offer = top["offer"]
    assert f"{offer['provider']} · {offer['instance_type']} · {offer['region']}" in page.text
    for link in (f"/plan.json?{BASE}", f"/report.md?{BASE}", f"/bundle.zip?{BASE}&rank=1",
                 "/?" + "s=" + quote(BASE, safe="/,")):
        assert f'href="{link.replace("&", "&amp;")}"' in page.text, link

    got = served.get(f"/plan.json?{BASE}")
    assert got.status == 200 and got.headers["content-type"].startswith("application/json")
    assert got.text.endswith("}\n")
    assert _unclocked(got.text) == _unclocked(cli_json)  # byte for byte, apart from the clock and the engine count
    assert json.loads(got.text)["command"] == cli["command"] == f"gpu-advisor plan --model {LLAMA} --tokens 100M --format json"


def test_the_same_inputs_are_planned_once_for_the_page_its_json_and_its_report(served, monkeypatch):
    import advisor.planner

    calls = []
    real = advisor.planner.plan
    monkeypatch.setattr(advisor.planner, "plan", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    query = q(model=LLAMA, tokens="123M", methods="lora")
    hits = served.planner.hits
    assert served.get(f"/plan?{query}").status == 200
    assert len(calls) == 1
    same = q(tokens="123000000", methods="lora", model=LLAMA)  # the same request, spelled differently
    for path in (f"/plan?{query}", f"/plan?{same}", f"/plan.json?{query}", f"/report.md?{query}"):
        assert served.get(path).status == 200
    assert len(calls) == 1 and served.planner.hits - hits == 4


def test_report_md_and_bundle_zip_are_what_the_cli_writes(served, tmp_path):
    md = served.get(f"/report.md?{BASE}")
    assert md.status == 200 and md.headers["content-type"].startswith("text/markdown")
    plan = json.loads(served.get(f"/plan.json?{BASE}").text)
    assert md_text(plan["candidates"][0]["offer"]["instance_type"]) in md.text  # as the report escapes it

    got = served.get(f"/bundle.zip?{BASE}&rank=1")
    assert got.status == 200 and got.headers["content-type"] == "application/zip"
    assert "attachment" in got.headers["content-disposition"]
    out = tmp_path / "launch"
    from cli import cli

    r = CliRunner().invoke(cli, ["launch", "--model", LLAMA, "--tokens", "100M", "--out", str(out)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    with zipfile.ZipFile(io.BytesIO(got.body)) as z:
        zipped = {i.filename.removeprefix("launch/"): (z.read(i).decode(), (i.external_attr >> 16) & 0o777)
                  for i in z.infolist()}
    written = {p.name: (p.read_text(), stat.S_IMODE(p.stat().st_mode)) for p in out.iterdir()}
    assert sorted(zipped) == sorted(written)
    for name, (text, mode) in written.items():
        assert zipped[name][1] == mode, name
        assert zipped[name][0] == text, name
    assert served.get(f"/bundle.zip?{BASE}&rank=0").status == 400


def test_compare_shows_both_scenarios_top_costs_and_bands_and_marks_what_differs(served):
    other = q(model=LLAMA, tokens="300M", methods="lora")
    page = served.get("/compare?" + "&".join(f"s={quote(s, safe='/,')}" for s in (BASE, other)))
    assert page.status == 200, page.text[:500]
    from advisor.results import Plan

    for query in (BASE, other):
        plan = Plan.model_validate_json(served.get(f"/plan.json?{query}").text)
        c = plan.candidates[0]
        assert money(ranked_cost(c)) in page.text and cost_band(c) in page.text and time_band(c) in page.text
        assert f'href="/plan?{query.replace("&", "&amp;")}"' in page.text
    cost_row = re.search(r"<tr class=\"differs\"><th scope=\"row\">Cost of #1</th>(.*?)</tr>", page.text)
    assert cost_row and cost_row.group(1).count('data-differs="1"') == 2
    assert "Price sheets in use" in page.text and "bundled" in page.text

    one = served.get(f"/compare?s={quote(BASE)}")
    assert one.status == 400 and "2 to 4 scenarios" in _error_line(one.text)
    five = served.get("/compare?" + "&".join([f"s={quote(BASE)}"] * 5))
    assert five.status == 400


def test_the_compare_form_adds_a_scenario_by_a_redirect_to_the_link_that_carries_it(served):
    form = served.get(f"/?s={quote(BASE)}")
    assert form.status == 200 and 'action="/compare"' in form.text
    assert f'<input type="hidden" name="s" value="{BASE.replace("&", "&amp;")}">' in form.text
    added = served.get(f"/compare?s={quote(BASE)}&model={LLAMA}&tokens=300M&budget=&methods=lora")
    assert added.status == 303
    assert added.headers["location"] == "/compare?s=" + quote(BASE, safe="/,") + "&s=" + quote(
        q(model=LLAMA, tokens="300M", methods="lora"), safe="/,")


# ----------------------------------------------------------------------------- refusals

HOSTILE = '<script>window.__pwned=1</script>"\'&'


@pytest.mark.parametrize("query, says", [
    (q(model=LLAMA, tokens="-5"), "tokens: "),  # the query parameter's name, as the link spells it
    (q(model=LLAMA, tokens="1M", methods="bogus"), "methods: "),
    (q(model=LLAMA, tokens="1M", max_nodes="0"), "'max-nodes'"),
    (q(model=LLAMA, tokens="1M", spot="maybe"), "spot"),
    (q(model=LLAMA, tokens="1M", colour="blue"), "unknown parameter 'colour'"),
    (q(model=LLAMA, tokens="1M", prices="/etc/passwd"), "prices: not taken"),
    (q(model=LLAMA, tokens="1M", dataset="/etc/passwd"), "dataset: not taken"),
    (q(model="/etc/passwd", tokens="1M"), "not files on its disk"),
    (q(model=LLAMA, tokens="1M") + "&tokens=2M", "given twice"),
    (q(model=LLAMA, tokens="1M", budget="x" * 700), "budget"),
    (q(model=LLAMA, tokens="1M", pad="x" * 100_000), "longer than"),
])
def test_impossible_values_get_a_one_line_400_page_and_the_server_keeps_serving(served, query, says):
    got = served.get(f"/plan?{query}")
    assert got.status == 400, got.text[:300]
    line = _error_line(got.text)
    assert says.replace("'", "&#39;") in line and "Traceback" not in got.text
    assert served.get("/").status == 200


def test_markup_in_a_query_value_is_shown_escaped_and_never_as_markup(served):
    bad = served.get("/plan?" + q(model=HOSTILE, tokens="1M"))
    assert bad.status == 400
    for text in (bad.text, served.get("/?" + q(model=HOSTILE, tokens="1M")).text):
        assert "<script>" not in text and "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in text
    form = served.get("/?" + q(model=HOSTILE, tokens="1M")).text
    assert 'value="&lt;script&gt;window.__pwned=1&lt;/script&gt;&#34;&#39;&amp;"' in form
    assert "script-src" not in bad.headers["content-security-policy"]  # and no script may run at all
    assert served.get(f"/plan?{BASE}").status == 200


def test_a_request_from_another_host_name_is_refused(served):
    """DNS rebinding: a page elsewhere that resolves its own name to 127.0.0.1 does not get the plans."""
    assert served.get("/", host="evil.example:80").status == 400
    assert served.get("/", host=f"localhost:{served.port}").status == 200


# ----------------------------------------------------------------------------- bounded work, progress

def _gated(plan=None):
    """A stand-in for build_plan that waits for the test's go, counting calls."""
    gate, calls = threading.Event(), []

    def compute(options):
        calls.append(options)
        assert gate.wait(600)
        if isinstance(plan, Exception):
            raise plan
        return plan or pf.single_gpu_plan()

    return gate, calls, compute


def test_a_slow_plan_shows_planning_until_it_is_ready_then_the_page():
    gate, calls, compute = _gated()
    with serving(compute, sheets=[], patience=0) as s:
        first = s.get(f"/plan?{BASE}")
        assert first.status == 202 and 'http-equiv="refresh"' in first.text and "Planning…" in first.text
        again = s.get(f"/plan?{BASE}")  # the reload: still planning, not planned again
        assert again.status == 202 and len(calls) == 1
        gate.set()
        key = s.app.scenario_of(parse_qsl(BASE)).key
        assert s.planner.get(key, {}, wait=600) is not None
        done = s.get(f"/plan?{BASE}")
        assert done.status == 200 and 'id="card-cost"' in done.text and "refresh" not in done.text
        assert len(calls) == 1 and s.planner.computed == 1


def test_more_plans_than_slots_get_503_with_retry_after_and_then_are_served():
    gate, calls, compute = _gated()
    with serving(compute, sheets=[], patience=0, slots=1) as s:
        assert s.get(f"/plan?{BASE}").status == 202
        busy = s.get("/plan?" + q(model=LLAMA, tokens="5M"))
        assert busy.status == 503 and busy.headers["retry-after"].isdigit()
        assert s.planner.refused == 1 and len(calls) == 1
        gate.set()
        assert s.planner.get(s.app.scenario_of(parse_qsl(BASE)).key, {}, wait=600).status == 200
        assert s.get("/plan?" + q(model=LLAMA, tokens="5M")).status in (200, 202)


def test_a_failing_plan_is_a_one_line_500_logged_on_stderr(capfd):
    gate, _, compute = _gated(RuntimeError("boom\nsecond line"))
    gate.set()
    with serving(compute, sheets=[]) as s:
        got = s.get(f"/plan?{BASE}")
        assert got.status == 500 and "Traceback" not in got.text
        assert _error_line(got.text) == "internal error: boom (the server&#39;s log has the details)"
        assert "plan failed: internal error: boom" in capfd.readouterr().err
        assert s.get("/").status == 200


def test_the_server_names_its_price_sheets_and_their_dates_and_plans_with_them(tmp_path):
    sheet = tmp_path / "acme.csv"
    sheet.write_text(SHEET)
    with serving(server_args=[f"--prices={sheet}"]) as s:
        page = s.get("/plan?" + q(model=LLAMA, tokens="20M", providers="acme"))
        assert page.status == 200, page.text[:300]
        assert "acme.csv: your sheet (--prices), 2 rows, newest price dated 2026-11-20" in page.text
        assert "acme-list, dated 2026-11-20" in page.text  # the pick's own price line
        plan = json.loads(s.get("/plan.json?" + q(model=LLAMA, tokens="20M", providers="acme")).text)
        assert plan["command"].endswith(f"--prices {sheet} --format json")
        for path in ("/", "/compare?s=a&s=b"):
            assert "acme.csv" in s.get(path).text
