"""Refresh that fails fast: an unreachable host ends a source after one retry, a body
that trickles below the minimum rate is abandoned, progress is printed also off a terminal, and
every failure keeps the last good sheet byte for byte. Work is bounded by counting attempts and
bytes, never by a stopwatch."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import urllib3.util.connection
from click.testing import CliRunner

from pricing import cache, http
from pricing.errors import FetchError
from pricing.refresh import refresh

ITEM = {"armSkuName": "Standard_NC4as_T4_v3", "armRegionName": "eastus", "retailPrice": 0.5,
        "skuName": "NC4as T4 v3", "productName": "Virtual Machines NCasT4_v3 Series",
        "type": "Consumption", "unitOfMeasure": "1 Hour", "currencyCode": "USD"}


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GPU_ADVISOR_HTTP_BACKOFF", "0.01")
    monkeypatch.setenv("GPU_ADVISOR_HTTP_RETRIES", "4")  # the default: other failures get 5 attempts
    for k in ("LAMBDA_API_KEY", "RUNPOD_API_KEY", "VAST_API_KEY"):
        monkeypatch.delenv(k, raising=False)


@pytest.fixture()
def connects(monkeypatch):
    """Every TCP connection attempt urllib3 makes, counted on the way to the real call."""
    calls = []
    real = urllib3.util.connection.create_connection

    def counted(address, *a, **kw):
        calls.append(address)
        return real(address, *a, **kw)

    monkeypatch.setattr(urllib3.util.connection, "create_connection", counted)
    monkeypatch.setattr("urllib3.connection.connection.create_connection", counted)
    return calls


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens here now: connecting is refused
    return port


def good_azure(httpserver) -> bytes:
    httpserver.expect_oneshot_request("/prices").respond_with_json({"Items": [ITEM], "NextPageLink": None})
    [out] = refresh(["azure"], ["eastus"], endpoint=httpserver.url_for("/prices"))
    assert out.status == "ok", out.message
    return cache.sheet_path("azure").read_bytes()


def test_closed_port_ends_the_source_after_one_retry_and_keeps_the_last_good_sheet(httpserver, connects):
    before = good_azure(httpserver)
    connects.clear()
    url = f"http://127.0.0.1:{closed_port()}/prices"
    [out] = refresh(["azure"], ["eastus"], endpoint=url)
    assert out.status == "failed" and "connection refused" in out.message
    assert out.message.endswith("(kept the last good sheet)")
    assert len(connects) == 2  # one attempt + one retry, not the 5 a 503 gets
    assert cache.sheet_path("azure").read_bytes() == before


def test_a_503_still_gets_every_retry(httpserver, connects):
    httpserver.expect_request("/prices").respond_with_data("busy", status=503)
    with pytest.raises(FetchError, match="gave up after 5 attempt"):
        http.get_json(httpserver.url_for("/prices"))


def test_unresolvable_host_ends_after_one_retry(connects):
    with pytest.raises(FetchError, match="name not resolved"):
        http.get_text("http://price-host.invalid/vms.csv")
    assert len(connects) == 2


def test_whole_refresh_against_a_closed_port_is_two_attempts_per_source(monkeypatch, connects):
    from pricing.sources import KEY_OPTIONAL, SOURCES

    keyless = [n for n, (_, key) in SOURCES.items() if not key or n in KEY_OPTIONAL]
    assert {"skypilot", "azure", "aws", "vast", "gpuhunt"} <= set(keyless)
    port = closed_port()
    for name in keyless:
        monkeypatch.setenv(f"GPU_ADVISOR_{name.upper()}_URL", f"http://127.0.0.1:{port}/x")
    from cli import cli

    res = CliRunner().invoke(cli, ["prices", "refresh"])
    assert res.exit_code == 1 and f"{len(keyless)} source(s) failed" in str(res.exception)
    assert len(connects) == 2 * len(keyless)  # 2 each; sources that need a key are skipped without it
    # a plain progress line for every source, though stderr is not a terminal here
    for name in keyless:
        assert f"{name}: fetching http://127.0.0.1:{port}/x" in res.stderr


def test_progress_steps_are_plain_lines_off_a_terminal(httpserver):
    from cli import cli

    httpserver.expect_oneshot_request("/prices").respond_with_json({"Items": [ITEM], "NextPageLink": None})
    res = CliRunner().invoke(cli, ["prices", "refresh", "--source", "azure", "--region", "eastus",
                                   "--endpoint", httpserver.url_for("/prices")])
    assert res.exit_code == 0, res.output
    lines = res.stderr.splitlines()
    assert lines[0].startswith("azure: fetching ") and "azure: eastus done (1)" in lines
    assert "\x1b" not in res.stderr  # no bar, no escape codes


class Trickle:
    """A server that sends the headers of a large body at once, then the body a few bytes at a time,
    counting what it sent and how many requests came."""

    def __init__(self, body: bytes, step: int, every: float):
        self.sent, self.hits, self.stop = 0, 0, threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                owner.hits += 1
                self.wfile.write(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode())
                for i in range(0, len(body), step):
                    if owner.stop.is_set():
                        return
                    try:
                        self.wfile.write(body[i:i + step])
                        self.wfile.flush()
                    except OSError:
                        return
                    owner.sent += len(body[i:i + step])
                    time.sleep(every)
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/prices"

    def close(self):
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def test_a_body_below_the_minimum_rate_is_abandoned_without_a_retry(httpserver, monkeypatch):
    before = good_azure(httpserver)
    body = json.dumps({"Items": [ITEM] * 400, "NextPageLink": None}).encode()  # ~100 kB
    server = Trickle(body, step=20, every=0.02)  # ~1 kB/s, far below the 50 kB/s asked for
    monkeypatch.setenv("GPU_ADVISOR_HTTP_MIN_RATE", "50000")
    monkeypatch.setenv("GPU_ADVISOR_HTTP_MIN_RATE_TIME", "0.5")
    monkeypatch.setenv("GPU_ADVISOR_HTTP_DEADLINE", "120")  # the rate rule ends it, not the deadline
    try:
        [out] = refresh(["azure"], ["eastus"], endpoint=server.url)
    finally:
        server.close()
    assert out.status == "failed" and "GPU_ADVISOR_HTTP_MIN_RATE" in out.message
    assert server.hits == 1 and server.sent < len(body) / 2
    assert cache.sheet_path("azure").read_bytes() == before


def test_a_body_above_the_minimum_rate_is_read_whole(monkeypatch):
    body = json.dumps({"Items": [ITEM] * 40, "NextPageLink": None}).encode()
    server = Trickle(body, step=2000, every=0.01)
    monkeypatch.setenv("GPU_ADVISOR_HTTP_MIN_RATE", "1000")
    monkeypatch.setenv("GPU_ADVISOR_HTTP_MIN_RATE_TIME", "0.05")
    try:
        got = http.get_json(server.url)
    finally:
        server.close()
    assert len(got["Items"]) == 40 and server.hits == 1
