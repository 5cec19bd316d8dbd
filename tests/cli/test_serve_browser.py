"""`gpu-advisor serve` in real Chromium (Debian's, headless, as tests/reports/test_reports_browser.py drives it):
the form, a plan and a comparison at 1280 and 390 px, screenshots of each, the layout measured through
the DevTools protocol, the form submitted by a click, hostile query values, and the "Planning..."
page reloading itself until the plan is there.

Every HTTP request goes to the test's own server on 127.0.0.1 (anything else meets a refused proxy
and is asserted absent); waits are counted in page loads, never in seconds.
"""

from __future__ import annotations

import base64
import json
import sys
import threading
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from helpers import plan_factory as pf  # noqa: E402
from helpers.chromium import CHROMIUM, DevTools  # noqa: E402
from helpers.serve_helpers import LLAMA, q, serving  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)"),
]
WIDTHS = (1280, 390)
BASE = q(model=LLAMA, tokens="100M")
PAGES = {
    "form": "/",
    "plan": f"/plan?{BASE}",
    "compare": "/compare?" + "&".join(f"s={quote(s, safe='/,')}" for s in (BASE, q(model=LLAMA, tokens="300M",
                                                                                        methods="lora"))),
}
HOSTILE = '"><script>window.__pwned=1</script>'
MAX_LOADS = 120  # page loads a wait may take (the "Planning..." page reloads once a second)
# After layout: the page's width against the viewport, and the decision card's three numbers (or, on the
# compare page, the first scenario's numbers) with their size and place.
MEASURE = """(() => {
  const box = e => { const b = e.getBoundingClientRect(); return {left: b.left, right: b.right,
    size: parseFloat(getComputedStyle(e).fontSize), text: e.textContent.trim()}; };
  const nums = [...document.querySelectorAll('#decision .fig-value')];
  const first = [...document.querySelectorAll('#compare tbody tr')].map(r => r.cells[1].querySelector('.big'));
  const wraps = [...document.querySelectorAll('.table-wrap')].map(w => ({scroll: w.scrollWidth, client: w.clientWidth}));
  return JSON.stringify({viewport: document.documentElement.clientWidth, page: document.documentElement.scrollWidth,
    card: nums.map(box), compare: first.slice(0, 2).map(box), wraps});
})()"""


class Browser:
    def __init__(self, served, dt: DevTools, shots: Path):
        self.served, self.dt, self.shots = served, dt, shots

    def evaluate(self, expression: str):
        return self.dt.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def visit(self, path: str, until: str = "true") -> int:
        """Open `path` on the server and wait, in page loads, until `until` (JavaScript) is true there."""
        self.dt.events.clear()
        self.dt.call("Page.navigate", url=self.served.url.rstrip("/") + path)
        return self.wait(until)

    def wait(self, until: str) -> int:
        loads = 0
        while True:
            event = self.dt.ws.recv()
            self.dt.events.append(event)
            if event.get("method") != "Page.loadEventFired":
                continue
            loads += 1
            if self.evaluate(f"Boolean({until})"):
                return loads
            assert loads < MAX_LOADS, f"{until} never held"

    def screenshot(self, name: str) -> Path:
        data = self.dt.call("Page.captureScreenshot", format="png", captureBeyondViewport=False)["data"]
        path = self.shots / f"{name}.png"
        path.write_bytes(base64.b64decode(data))
        return path

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.dt.events if e.get("method") == "Network.requestWillBeSent"]

    def errors(self) -> list[str]:
        return [json.dumps(e["params"])[:300] for e in self.dt.events
                if e.get("method") == "Runtime.exceptionThrown"
                or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]


def _browser(served, root: Path, name: str):
    # Chromium reaches loopback directly; every other address meets a proxy that is not there.
    return DevTools(root / f"profile-{name}", "--proxy-server=http://127.0.0.1:9", window="1280,900")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-browser")
    with serving() as served, _browser(served, root, "main") as dt:
        for domain in ("Page", "Runtime", "Network", "Log"):
            dt.call(f"{domain}.enable")
        print(f"screenshots in {root}")
        yield Browser(served, dt, root)


@pytest.fixture(scope="module")
def layout(browser) -> dict:
    """Each page at each width: its measurements and a screenshot (name-width.png in the test's tmp dir)."""
    out = {}
    for width in WIDTHS:
        browser.dt.call("Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1,
                        mobile=False)
        for name, path in PAGES.items():
            browser.visit(path, "document.querySelector('footer.sheets')")
            out[(name, width)] = json.loads(browser.evaluate(MEASURE))
            out[(name, width)]["shot"] = browser.screenshot(f"{name}-{width}")
            out[(name, width)]["requests"] = browser.requests()
            out[(name, width)]["errors"] = browser.errors()
    browser.dt.call("Emulation.clearDeviceMetricsOverride")
    return out


@pytest.mark.parametrize("name", sorted(PAGES))
@pytest.mark.parametrize("width", WIDTHS)
def test_pages_fit_the_width_fetch_only_from_the_server_and_log_no_error(layout, browser, name, width):
    m = layout[(name, width)]
    assert m["viewport"] == width and m["page"] <= m["viewport"], f"{name} scrolls sideways at {width} px"
    data = m["shot"].read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(data[16:20], "big") == width
    assert m["requests"] and all(u.startswith(browser.served.url) for u in m["requests"]), m["requests"]
    assert m["errors"] == [], m["errors"]


@pytest.mark.parametrize("width", WIDTHS)
def test_the_decision_card_numbers_are_readable_and_on_screen(layout, width):
    m = layout[("plan", width)]
    assert [f["text"][:1] for f in m["card"]][:1] == ["$"] and len(m["card"]) == 3
    for f in m["card"]:
        assert f["size"] >= 14 and 0 <= f["left"] and f["right"] <= width, f
    first = layout[("compare", width)]["compare"]
    assert len(first) == 2 and first[0]["text"].startswith("$")
    for f in first:  # the first scenario's cost and hours, before any sideways scroll of the table
        assert f["size"] >= 14 and 0 <= f["left"] and f["right"] <= width, f


def test_at_1280_px_no_table_needs_its_own_scroll_bar(layout):
    for name in ("plan", "compare"):
        wide = [w for w in layout[(name, 1280)]["wraps"] if w["scroll"] > w["client"]]
        assert wide == [], (name, wide)


def test_the_form_submitted_in_the_browser_lands_on_the_plan_with_its_inputs_in_the_url(browser):
    browser.visit("/", "document.getElementById('submit')")
    browser.evaluate("(() => { const t = document.getElementById('f-tokens'); t.focus(); t.select(); })()")
    browser.dt.call("Input.insertText", text="200M")  # typed, as a person would
    browser.evaluate("document.getElementById('f-methods').value = 'lora'")
    x, y = json.loads(browser.evaluate("(() => { const b = document.getElementById('submit').getBoundingClientRect();"
                                       " b.y > innerHeight && scrollTo(0, b.y); const c = document.getElementById('submit')"
                                       ".getBoundingClientRect(); return JSON.stringify([c.x + c.width / 2, c.y + c.height / 2]); })()"))
    browser.dt.events.clear()
    for kind in ("mousePressed", "mouseReleased"):
        browser.dt.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)
    browser.wait("location.pathname === '/plan' && document.getElementById('card-cost')")
    url = urlsplit(browser.evaluate("location.href"))
    assert dict(parse_qsl(url.query)) == {"model": LLAMA, "tokens": "200M", "methods": "lora"}  # empty fields dropped
    plan = json.loads(browser.served.get(f"/plan.json?{url.query}").text)
    from advisor.units import money

    assert browser.evaluate("document.getElementById('card-cost').textContent") == money(plan["candidates"][0]["cost"]["usd_at_risk"])


def test_a_hostile_query_value_is_shown_as_text_and_runs_no_script(browser):
    browser.visit("/?" + q(model=HOSTILE, tokens="1M"), "document.getElementById('f-model')")
    assert browser.evaluate("document.getElementById('f-model').value") == HOSTILE
    assert browser.evaluate("typeof window.__pwned") == "undefined"
    browser.visit("/plan?" + q(model=HOSTILE, tokens="1M"), "document.getElementById('error')")
    assert HOSTILE in browser.evaluate("document.getElementById('asked').textContent")
    assert browser.evaluate("document.scripts.length") == 0 and browser.evaluate("typeof window.__pwned") == "undefined"


def test_the_planning_page_reloads_itself_until_the_plan_is_there(tmp_path):
    """No script: a meta refresh. The first load is the "Planning..." page (the plan is held back until
    then), the plan comes on a later reload of the same URL."""
    gate = threading.Event()

    def compute(options):
        assert gate.wait(600)
        return pf.single_gpu_plan()

    with serving(compute, sheets=[], patience=0) as served, _browser(served, tmp_path, "wait") as dt:
        dt.call("Page.enable")
        dt.call("Runtime.enable")
        b = Browser(served, dt, tmp_path)
        assert b.visit(f"/plan?{BASE}") == 1
        assert b.evaluate("document.getElementById('planning').textContent") == "Planning…"
        b.screenshot("planning")
        gate.set()
        loads = b.wait("document.getElementById('card-cost')")
        assert 1 <= loads < MAX_LOADS and served.planner.computed == 1
        assert urlsplit(b.evaluate("location.href")).query == BASE
