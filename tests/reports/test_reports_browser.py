"""The HTML report in a real browser: headless Chromium loads it, and nothing is fetched and
nothing is logged as an error.

How the check works: Chromium starts with `--remote-debugging-port=0` (it writes the port to
DevToolsActivePort in its profile), we attach to the page over the Chrome DevTools Protocol with
the tiny stdlib WebSocket client below, enable the Network, Runtime and Log domains, navigate to
the file and collect every `Network.requestWillBeSent` (any request other than the report
itself), `Runtime.consoleAPICalled` of type error/assert, `Runtime.exceptionThrown` and
`Log.entryAdded` at level error. These are the page's own events, so Chromium's background
traffic (component updater, network time, sign-in, which still happens despite the flags) is not
confused with the report. To keep anything from leaving the machine, all HTTP(S) goes to a local
proxy that refuses it (its log is printed, not asserted: it mixes in that background traffic).
A control page that does fetch and log an error proves the harness sees both. The screenshot is
taken by Chromium's own `--screenshot` flag.
"""

from __future__ import annotations

import base64
import http.server
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from helpers import plan_factory as pf  # noqa: E402
from helpers.chromium import CHROMIUM, FLAGS, DevTools  # noqa: E402

import reports  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)"),
]


class RecordingProxy(http.server.ThreadingHTTPServer):
    """An HTTP proxy on localhost that records every request and answers 403."""

    def __init__(self):
        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _deny(self):
                seen.append(f"{self.command} {self.path}")
                self.send_response(403)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_HEAD = do_CONNECT = do_PUT = do_OPTIONS = _deny

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def load_in_chromium(html_file: Path, profile: Path, settle: float = 1.0) -> dict:
    """Open `html_file` in headless Chromium and return what the page requested and logged."""
    proxy = RecordingProxy()
    try:
        return _load(html_file, profile, settle, proxy)
    finally:
        proxy.shutdown()
        proxy.server_close()


def _load(html_file: Path, profile: Path, settle: float, proxy: RecordingProxy) -> dict:
    with DevTools(profile, f"--proxy-server=http://127.0.0.1:{proxy.server_address[1]}",
                  "--proxy-bypass-list=<-loopback>", window="1280,2000") as dt:
        events = dt.events
        for domain in ("Network", "Runtime", "Log", "Page"):
            dt.call(f"{domain}.enable")
        url = html_file.resolve().as_uri()
        dt.call("Page.navigate", url=url)
        deadline = time.monotonic() + 60  # a ceiling for a stuck browser, not a speed test
        while not any(e.get("method") == "Page.loadEventFired" for e in events):
            assert time.monotonic() < deadline, "page did not finish loading"
            events.append(dt.ws.recv())
        dt.ws.sock.settimeout(settle)  # late requests (lazy images, timers) still get caught
        try:
            while True:
                events.append(dt.ws.recv())
        except TimeoutError:
            pass
        requests = [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"]
        errors = [json.dumps(e["params"])[:300] for e in events if
                  (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
                  or e.get("method") == "Runtime.exceptionThrown"
                  or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]
        return {"document": url, "requests": [r for r in requests if r != url], "errors": errors,
                "proxy": list(proxy.seen), "loaded": url in requests}


def screenshot(html_file: Path, png: Path, profile: Path, size: str = "1280,2000") -> None:
    subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={size}",
                    "--proxy-server=http://127.0.0.1:9", html_file.resolve().as_uri()],
                   check=True, capture_output=True, timeout=60)


@pytest.mark.parametrize("factory", [pf.single_gpu_plan, pf.hostile_plan])
def test_report_opens_in_chromium_without_requests_or_console_errors(tmp_path, factory):
    html = tmp_path / f"{factory.__name__}.html"
    reports.write(factory(), html)
    seen = load_in_chromium(html, tmp_path / "profile")
    assert seen["loaded"], "the report itself was never requested: the harness saw nothing"
    assert seen["requests"] == [], seen["requests"]
    print(f"refused by the containment proxy (browser background traffic): {seen['proxy']}")
    assert seen["errors"] == [], seen["errors"]

    png = tmp_path / f"{factory.__name__}.png"
    screenshot(html, png, tmp_path / "profile-shot")  # same flags; network off via the proxy too
    print(f"screenshot: {png}")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 2000)
    assert len(data) > 50_000  # a rendered page with tables and charts, not a blank canvas


def test_harness_catches_a_page_that_fetches_and_logs_an_error(tmp_path):
    """Control: the checks above can fail."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><img src="http://example.invalid/pixel.png">'
                   '<script>console.error("boom")</script></body></html>')
    seen = load_in_chromium(bad, tmp_path / "profile")
    assert any("example.invalid/pixel.png" in r for r in seen["requests"])
    assert any("boom" in e for e in seen["errors"])


# ----------------------------------------------------------------------------- layout at 1280 and 390 px
# Real plans on the bundled sheet, each built once: the three a team lead reads.
LAYOUT_PLANS = {
    "8b-lora": dict(model="llama-3.1-8b", tokens="100M", methods="lora"),
    "70b-qlora": dict(model="llama-3.1-70b", tokens="100M", methods="qlora"),
    "unmeetable-budget": dict(model="llama-3.1-70b", tokens="100M", methods="qlora", budget=5.0, deadline="2d"),
}
WIDTHS = (1280, 390)
# Runs in the page after layout: where the decision card, the cost and hours cells of the first table's top rows
# and the chart text ended up, and whether anything is wider than its box.
MEASURE = """(() => {
  const box = e => { const b = e.getBoundingClientRect(); return {left: b.left, right: b.right, width: b.width}; };
  const table = document.querySelector('#candidates table');
  const heads = table ? [...table.querySelectorAll('thead th')].map(th => th.textContent.trim()) : [];
  const rows = table ? [...table.querySelectorAll('tbody tr')].slice(0, 3) : [];
  const cells = rows.map(r => ['Cost', 'Wall time'].map(h => {
    const td = r.cells[heads.findIndex(t => t === h || t.startsWith(h + ' p'))];  // 'Cost p80': the quantile named
    return {...box(td), text: td.textContent.trim(), visible: td.offsetParent !== null};
  }));
  const wraps = [...document.querySelectorAll('.table-wrap')].map(w =>
    ({label: w.getAttribute('aria-label'), scroll: w.scrollWidth, client: w.clientWidth}));
  const chartText = [...document.querySelectorAll('figure svg text')].map(t => t.getBoundingClientRect().height)
    .filter(h => h > 0);
  const card = document.getElementById('decision');
  return JSON.stringify({
    viewport: document.documentElement.clientWidth, page: document.documentElement.scrollWidth,
    height: document.documentElement.scrollHeight,
    card: {...box(card), scroll: card.scrollWidth, client: card.clientWidth},
    figures: [...card.querySelectorAll('.fig-value')].map(e => parseFloat(getComputedStyle(e).fontSize)),
    cells, wraps, chartText: chartText.length ? Math.min(...chartText) : null,
    firstTableFont: table ? parseFloat(getComputedStyle(table.querySelector('td')).fontSize) : null,
    text: document.documentElement.textContent});
})()"""


@pytest.fixture(scope="module")
def layout(tmp_path_factory) -> dict:
    """Each report written once and opened in one headless Chromium at 1280 and 390 px (DevTools protocol:
    Emulation.setDeviceMetricsOverride): a screenshot per width and the MEASURE results after layout."""
    from cli.plan import build_plan

    root = tmp_path_factory.mktemp("layout")
    pages = {}
    for name, kw in LAYOUT_PLANS.items():
        plan = build_plan(**kw)
        reports.write(plan, root / f"{name}.html")
        pages[name] = plan
    results = measure_in_chromium([root / f"{n}.html" for n in LAYOUT_PLANS], root / "profile", WIDTHS, root)
    print(f"screenshots in {root}")
    return {"plans": pages, "measured": results, "root": root}


def measure_in_chromium(files: list[Path], profile: Path, widths: tuple[int, ...], shots: Path) -> dict:
    with DevTools(profile, "--proxy-server=http://127.0.0.1:9", window="1280,900") as dt:
        dt.call("Page.enable")
        out = {}
        for width in widths:
            dt.call("Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1, mobile=False)
            for f in files:
                dt.events.clear()
                dt.call("Page.navigate", url=f.resolve().as_uri())
                while not any(e.get("method") == "Page.loadEventFired" for e in dt.events):
                    dt.events.append(dt.ws.recv())
                value = dt.call("Runtime.evaluate", expression=MEASURE, returnByValue=True)["result"]["value"]
                shot = dt.call("Page.captureScreenshot", format="png", captureBeyondViewport=False)["data"]
                (shots / f"{f.stem}-{width}.png").write_bytes(base64.b64decode(shot))
                out[(f.stem, width)] = json.loads(value)
        return out


@pytest.mark.parametrize("name", sorted(LAYOUT_PLANS))
def test_at_1280_px_cost_and_hours_of_the_top_rows_are_on_screen_and_nothing_scrolls_sideways(layout, name):
    m = layout["measured"][(name, 1280)]
    assert m["viewport"] == 1280 and m["page"] <= m["viewport"], "the page scrolls sideways"
    assert len(m["cells"]) == 3
    for cost, hours in m["cells"]:
        for cell in (cost, hours):
            assert cell["visible"] and 0 <= cell["left"] and cell["right"] <= m["viewport"], (name, cell)
    assert m["cells"][0][0]["text"].startswith("$")
    wide = [w for w in m["wraps"] if w["scroll"] > w["client"]]
    assert wide == [], wide  # no table needs its horizontal scroll bar
    png = layout["root"] / f"{name}-1280.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png.read_bytes()[16:20], "big") == 1280


# Page height in screens of 900 px (issue 36: 10.1-12.0 at 1280 px and 27.5-30.4 at 390 px before the decision-first
# layout with long tables collapsed; 5.0-6.4 and 11.0-12.7 after, measured with this harness on 2026-12-01).
MAX_SCREENS = {1280: 7.5, 390: 15}


@pytest.mark.parametrize("name", sorted(LAYOUT_PLANS))
@pytest.mark.parametrize("width", WIDTHS)
def test_the_report_is_a_few_screens_long_with_long_lists_collapsed(layout, name, width):
    m = layout["measured"][(name, width)]
    print(f"{name} at {width} px: {m['height'] / 900:.2f} screens")
    assert m["height"] / 900 <= MAX_SCREENS[width], (name, width, m["height"])


@pytest.mark.parametrize("name", sorted(LAYOUT_PLANS))
def test_at_390_px_the_card_and_first_table_read_without_zoom(layout, name):
    m = layout["measured"][(name, 390)]
    assert m["viewport"] == 390 and m["page"] <= m["viewport"], "the page scrolls sideways"
    card = m["card"]
    assert 0 <= card["left"] and card["right"] <= 390 and card["scroll"] <= card["client"], card
    assert min(m["figures"]) >= 20  # the three big numbers
    assert m["firstTableFont"] >= 13
    for cost, hours in m["cells"]:
        for cell in (cost, hours):
            assert cell["visible"] and 0 <= cell["left"] and cell["right"] <= 390, (name, cell)
    assert m["chartText"] is not None and m["chartText"] >= 9, m["chartText"]  # px of the smallest chart label


def test_the_unmeetable_report_says_so_shows_the_nearest_option_and_the_remedy_and_never_recommends(layout):
    plan = layout["plans"]["unmeetable-budget"]
    assert not plan.constraints_met and plan.remedy  # the planner's own verdict (exit 3)
    for width in WIDTHS:
        text = layout["measured"][("unmeetable-budget", width)]["text"]
        assert "recommend" not in text.lower()
        assert plan.notice in text and plan.remedy.removeprefix("Remedy:").strip() in text
        assert "Nearest option" in text and plan.candidates[0].offer.instance_type in text
    met = layout["measured"][("70b-qlora", 1280)]["text"]
    assert "Recommended" in met
