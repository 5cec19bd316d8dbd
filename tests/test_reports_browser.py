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
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import plan_factory as pf  # noqa: E402

import reports  # noqa: E402

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
                None)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)"),
]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars"]


class WebSocket:
    """Just enough RFC 6455 for CDP: client text frames (masked), server frames (unmasked)."""

    def __init__(self, url: str, timeout: float = 15.0):
        u = urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self.buf += self._recv()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        assert b" 101 " in head.split(b"\r\n")[0], head

    def _recv(self) -> bytes:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise EOFError("websocket closed")
        return chunk

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            self.buf += self._recv()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send(self, obj: dict) -> None:
        data, mask = json.dumps(obj).encode(), os.urandom(4)
        n = len(data)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + n.to_bytes(2, "big") if n < 65536 else
                                bytes([0x80 | 127]) + n.to_bytes(8, "big"))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self) -> dict:
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = int.from_bytes(self._read(2), "big")
            elif n == 127:
                n = int.from_bytes(self._read(8), "big")
            mask = self._read(4) if b1 & 0x80 else None
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise EOFError("websocket closed by browser")
            if opcode in (0x9, 0xA):  # ping/pong: not used by CDP in practice
                continue
            message += payload
            if b0 & 0x80:
                return json.loads(message)

    def close(self) -> None:
        self.sock.close()


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
    proc = subprocess.Popen(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
         f"--proxy-server=http://127.0.0.1:{proxy.server_address[1]}", "--proxy-bypass-list=<-loopback>",
         "--window-size=1280,2000", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ws = None
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            assert proc.poll() is None, "chromium exited before opening the debugging port"
            assert time.monotonic() < deadline, "chromium did not open its debugging port"
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        while True:
            try:
                targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5))
                page = next(t for t in targets if t["type"] == "page")
                break
            except (OSError, StopIteration):
                assert time.monotonic() < deadline, "no page target"
                time.sleep(0.1)
        ws = WebSocket(page["webSocketDebuggerUrl"])
        next_id = iter(range(1, 10_000))
        events: list[dict] = []

        def call(method: str, **params) -> dict:
            msg_id = next(next_id)
            ws.send({"id": msg_id, "method": method, "params": params})
            while True:
                msg = ws.recv()
                if msg.get("id") == msg_id:
                    assert "error" not in msg, msg
                    return msg.get("result", {})
                events.append(msg)

        for domain in ("Network", "Runtime", "Log", "Page"):
            call(f"{domain}.enable")
        url = html_file.resolve().as_uri()
        call("Page.navigate", url=url)
        deadline = time.monotonic() + 30
        while not any(e.get("method") == "Page.loadEventFired" for e in events):
            assert time.monotonic() < deadline, "page did not finish loading"
            events.append(ws.recv())
        ws.sock.settimeout(settle)  # late requests (lazy images, timers) still get caught
        try:
            while True:
                events.append(ws.recv())
        except (socket.timeout, TimeoutError):
            pass
        requests = [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"]
        errors = [json.dumps(e["params"])[:300] for e in events if
                  (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
                  or e.get("method") == "Runtime.exceptionThrown"
                  or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]
        return {"document": url, "requests": [r for r in requests if r != url], "errors": errors,
                "proxy": list(proxy.seen), "loaded": url in requests}
    finally:
        if ws is not None:
            ws.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        proxy.shutdown()
        proxy.server_close()


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
