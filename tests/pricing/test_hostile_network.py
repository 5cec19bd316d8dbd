"""Hostile price servers: a local server that stalls, trickles, loops, lies about
sizes and sends compression bombs. Every case must end with one clear line that names the
limit and says the last good sheet was kept, and the cache must be byte for byte what it was
before. Bounded work is counted (requests the server saw, pages, the waits the client slept),
not timed: a loaded CI machine only makes a trickle slower; wall time lives in benchmarks/."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pricing import cache, http
from pricing.errors import FetchError
from pricing.refresh import refresh

AWS_PATH = "/offers/v1.0/aws/AmazonEC2/current/us-east-1/index.csv"
AWS_CSV = (
    '"FormatVersion","v1.0"\n"Publication Date","2026-11-28T21:14:03Z"\n'
    '"SKU","TermType","Unit","PricePerUnit","Currency","Instance Type","vCPU","Memory","GPU",'
    '"Operating System","Tenancy","Pre Installed S/W","CapacityStatus","Region Code"\n'
    '"A1","OnDemand","Hrs","55.04","USD","p5.48xlarge","192","2048 GiB","8","Linux","Shared","NA",'
    '"Used","us-east-1"\n')
SKY_PATH = "/catalogs/v9/nebius/vms.csv"
SKY_CSV = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
           "gpu-h100-sxm_1gpu-16vcpu-200gb,H100,1,16,200,2.95,eu-north1,H100,1.25\n")
CEILING_S = 60  # only an unbounded loop or an ignored deadline gets near it (the trickles stop at 15 s)


def az_item(sku="Standard_NC24ads_A100_v4", price=3.673):
    return {"currencyCode": "USD", "retailPrice": price, "armRegionName": "eastus",
            "productName": "Virtual Machines NCads A100 v4 Series", "skuName": "NC24ads A100 v4",
            "unitOfMeasure": "1 Hour", "type": "Consumption", "armSkuName": sku}


def az_page(items, next_link=None):
    return {"Items": items, "NextPageLink": next_link, "Count": len(items)}


# --------------------------------------------------------------------------- the server
class Hostile:
    """A threaded HTTP server whose routes write raw bytes, slowly if they like."""

    def __init__(self):
        self.routes: dict = {}
        self.hits: dict = {}
        self.stop = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def handle_one_request(self):
                try:
                    super().handle_one_request()
                except (TimeoutError, BrokenPipeError, ConnectionResetError, OSError):
                    self.close_connection = True

            def do_GET(self):
                path = self.path.split("?", 1)[0]
                owner.hits[path] = owner.hits.get(path, 0) + 1
                route = owner.routes.get(path)
                if route is None:
                    respond(self, 404, b"not found")
                else:
                    route(self)
                self.close_connection = True

            do_POST = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # a short poll so that shutdown() at teardown returns at once instead of after 0.5 s
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def url(self, path: str = "", port: int | None = None) -> str:
        return f"http://127.0.0.1:{port or self.server.server_address[1]}{path}"

    def close(self):
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def respond(h, status: int, body: bytes, headers: dict | None = None, length: bool = True):
    head = [f"HTTP/1.1 {status} {'OK' if status < 300 else 'Error'}"]
    hdrs = {"Content-Type": "application/json", "Connection": "close"}
    if length:
        hdrs["Content-Length"] = str(len(body))
    hdrs.update(headers or {})
    head += [f"{k}: {v}" for k, v in hdrs.items()]
    h.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)


def trickle(h, data: bytes, step: int = 3, every: float = 0.1, stop=None):
    """Write `data` a few bytes at a time until done, the client leaves, or 15 s pass."""
    end = time.monotonic() + 15
    for i in range(0, len(data), step):
        if time.monotonic() > end or (stop is not None and stop.is_set()):
            return
        try:
            h.wfile.write(data[i:i + step])
        except OSError:
            return
        time.sleep(every)


def chunked(parts) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


@pytest.fixture()
def waits(monkeypatch) -> list:
    """The seconds the client (the test's own thread) slept between attempts; the server's
    threads sleep too, to trickle, and are not counted."""
    real = time.sleep
    slept: list = []

    def sleep(seconds):
        if threading.current_thread() is threading.main_thread():
            slept.append(seconds)
        real(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    return slept


@pytest.fixture()
def server():
    s = Hostile()
    yield s
    s.close()


@pytest.fixture(autouse=True)
def tight_limits(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    for name, value in {"TIMEOUT": "1", "DEADLINE": "1", "SOURCE_BUDGET": "2.5", "RETRIES": "1",
                        "BACKOFF": "0.01", "MAX_WAIT": "1", "MAX_BYTES": "1000000",
                        "MAX_STREAM_BYTES": "2000000", "MAX_PAGES": "20"}.items():
        monkeypatch.setenv(f"GPU_ADVISOR_HTTP_{name}", value)
    for k in ("LAMBDA_API_KEY", "RUNPOD_API_KEY", "VAST_API_KEY", "GPU_ADVISOR_AZURE_URL"):
        monkeypatch.delenv(k, raising=False)


def good_sheet(server, source: str):
    """Fill the cache with a good sheet for `source`; return (sheet bytes, meta bytes)."""
    if source == "azure":
        server.routes["/good"] = lambda h: respond(h, 200, json.dumps(az_page([az_item()])).encode())
        endpoint = server.url("/good")
    elif source == "aws":
        server.routes["/good" + AWS_PATH] = lambda h: respond(h, 200, AWS_CSV.encode(),
                                                              {"Content-Type": "text/csv"})
        endpoint = server.url("/good")
    else:
        server.routes["/good" + SKY_PATH] = lambda h: respond(h, 200, SKY_CSV.encode())
        endpoint = server.url("/good/catalogs")
    [out] = run(source, endpoint)
    assert out.status == "ok", out.message
    return cache.sheet_path(source).read_bytes(), cache.meta_path(source).read_bytes()


def run(source: str, endpoint: str):
    if source == "skypilot":
        from pricing.sources import skypilot

        old = skypilot.CLOUD_FILES
        skypilot.CLOUD_FILES = {"nebius": "v9/nebius"}
        try:
            return refresh([source], endpoint=endpoint)
        finally:
            skypilot.CLOUD_FILES = old
    return refresh([source], ["eastus"] if source == "azure" else ["us-east-1"], endpoint=endpoint)


def hostile_refresh(server, source: str, endpoint: str, *expect: str):
    """Refresh against the hostile endpoint; check the message and an untouched cache."""
    before = good_sheet(server, source)
    t0 = time.monotonic()
    [out] = run(source, endpoint)
    assert time.monotonic() - t0 < CEILING_S, out.message
    assert out.status == "failed", out.message
    assert "\n" not in out.message and out.message.endswith("(kept the last good sheet)")
    assert server.url() in out.message  # names the URL
    for text in expect:
        assert text in out.message, out.message
    assert (cache.sheet_path(source).read_bytes(), cache.meta_path(source).read_bytes()) == before
    assert [p.name for p in cache.sheets_dir().iterdir() if p.name.endswith(".tmp")] == []
    return out


# --------------------------------------------------------------------------- Retry-After
@pytest.mark.parametrize("header", ["99999", "1e12", "inf",
                                    "Fri, 31 Dec 2100 23:59:59 GMT"])
@pytest.mark.parametrize("status", [429, 503])
def test_huge_retry_after_is_not_honoured_and_the_cap_is_reported(server, waits, header, status):
    server.routes["/bad"] = lambda h: respond(h, status, b"slow down", {"Retry-After": header})
    hostile_refresh(server, "azure", server.url("/bad"), "Retry-After",
                    "1 s cap (GPU_ADVISOR_HTTP_MAX_WAIT)", f"HTTP {status}")
    assert waits == [] and server.hits["/bad"] == 1  # not waited for at all, not retried


@pytest.mark.parametrize("header", ["-5", "nan", "soon", "", "0.2"])
def test_odd_or_small_retry_after_is_bounded_and_the_fetch_gives_up(server, waits, header):
    server.routes["/bad"] = lambda h: respond(h, 503, b"busy", {"Retry-After": header})
    hostile_refresh(server, "azure", server.url("/bad"), "gave up after 2 attempt(s)", "HTTP 503")
    assert server.hits["/bad"] == 2 and len(waits) == 1 and 0 <= waits[0] <= 1.0  # one wait, within the cap


def test_retry_after_within_the_cap_is_still_honoured(server, waits):
    good_sheet(server, "azure")
    state = {"n": 0}

    def flaky(h):
        state["n"] += 1
        if state["n"] == 1:
            respond(h, 429, b"slow down", {"Retry-After": "0.3"})
        else:
            respond(h, 200, json.dumps(az_page([az_item(price=2.5)])).encode())

    server.routes["/flaky"] = flaky
    [out] = run("azure", server.url("/flaky"))
    assert out.status == "ok" and waits == [pytest.approx(0.3)] and state["n"] == 2
    assert ",2.5," in cache.sheet_path("azure").read_text()


# --------------------------------------------------------------------------- trickles
def test_body_trickled_with_content_length_hits_the_request_deadline(server):
    body = json.dumps(az_page([az_item()] * 20)).encode()

    def slow(h):
        respond_head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        h.wfile.write(respond_head)
        trickle(h, body, 3, 0.1, server.stop)

    server.routes["/slow"] = slow
    hostile_refresh(server, "azure", server.url("/slow"), "1 s limit for one request (GPU_ADVISOR_HTTP_DEADLINE)")
    assert server.hits["/slow"] == 1  # a deadline is not retried


def test_chunked_body_trickled_hits_the_request_deadline(server):
    body = chunked([json.dumps(az_page([az_item()] * 20)).encode()])

    def slow(h):
        h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                      b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        trickle(h, body, 2, 0.1, server.stop)

    server.routes["/slow"] = slow
    hostile_refresh(server, "azure", server.url("/slow"), "GPU_ADVISOR_HTTP_DEADLINE")


def test_trickled_headers_hit_the_request_deadline(server):
    def slow(h):
        head = b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 50) for i in range(50))
        trickle(h, head, 2, 0.1, server.stop)

    server.routes["/slow"] = slow
    hostile_refresh(server, "azure", server.url("/slow"), "GPU_ADVISOR_HTTP_DEADLINE")


def test_aws_streamed_file_trickled_hits_the_request_deadline(server):
    body = (AWS_CSV * 50).encode()

    def slow(h):
        h.wfile.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode())
        trickle(h, body, 20, 0.05, server.stop)

    server.routes["/bad" + AWS_PATH] = slow
    hostile_refresh(server, "aws", server.url("/bad"), "GPU_ADVISOR_HTTP_DEADLINE")


def test_a_server_that_never_answers_times_out_per_read(server):
    server.routes["/mute"] = lambda h: server.stop.wait(6)
    out = hostile_refresh(server, "azure", server.url("/mute"))
    assert "timed out" in out.message or "GPU_ADVISOR_HTTP_DEADLINE" in out.message


def test_many_slow_pages_stop_at_the_source_budget(server):
    count = {"n": 0}

    def page(h):
        count["n"] += 1
        time.sleep(0.4)  # each page within the 1 s request deadline ...
        nxt = server.url(f"/p{count['n'] + 1}")
        server.routes[f"/p{count['n'] + 1}"] = page
        respond(h, 200, json.dumps(az_page([az_item()], nxt)).encode())

    server.routes["/p1"] = page
    hostile_refresh(server, "azure", server.url("/p1"), "2.5 s budget (GPU_ADVISOR_HTTP_SOURCE_BUDGET)")
    # ... not the 20-page limit: the budget stops it; at 0.4 s or more a page, at most 7 fit in 2.5 s
    assert 1 <= count["n"] <= 7


def test_budget_covers_retry_waits(server, waits, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_HTTP_RETRIES", "10")
    monkeypatch.setenv("GPU_ADVISOR_HTTP_BACKOFF", "0.5")
    server.routes["/bad"] = lambda h: respond(h, 502, b"bad gateway")
    hostile_refresh(server, "azure", server.url("/bad"), "GPU_ADVISOR_HTTP_SOURCE_BUDGET",
                    "next retry would pass it")
    # the 2.5 s budget, not 10 retries: waits 0.5 s then 1 s (the cap); the next 1 s would pass it
    assert waits == [0.5, 1.0][:len(waits)] and server.hits["/bad"] == len(waits) + 1 <= 3


# --------------------------------------------------------------------------- pagination
def test_next_page_link_pointing_to_itself_stops(server):
    server.routes["/loop"] = lambda h: respond(h, 200, json.dumps(az_page([az_item()], server.url("/loop"))).encode())
    hostile_refresh(server, "azure", server.url("/loop"), "repeats a page already fetched")
    assert server.hits["/loop"] == 1


def test_next_page_link_pointing_to_the_first_page_with_its_query_stops(server):
    from requests.models import PreparedRequest

    first = PreparedRequest()
    first.prepare_url(server.url("/q"), {"$filter": "serviceName eq 'Virtual Machines' and priceType eq "
                                                    "'Consumption' and armRegionName eq 'eastus'"})
    server.routes["/q"] = lambda h: respond(h, 200, json.dumps(az_page([az_item()], first.url)).encode())
    hostile_refresh(server, "azure", server.url("/q"), "repeats a page")


def test_two_pages_pointing_at_each_other_stop(server):
    server.routes["/a"] = lambda h: respond(h, 200, json.dumps(az_page([az_item()], server.url("/b"))).encode())
    server.routes["/b"] = lambda h: respond(h, 200, json.dumps(az_page([az_item()], server.url("/a"))).encode())
    hostile_refresh(server, "azure", server.url("/a"), "repeats a page")
    assert server.hits == {"/good": 1, "/a": 1, "/b": 1}


@pytest.mark.parametrize("link", ["http://example.invalid/api/retail/prices?page=2",
                                  "https://127.0.0.1:{port}/p2", "http://127.0.0.1:1/p2",
                                  "file:///etc/passwd", "//evil.example/p2"])
def test_next_page_link_to_another_host_is_refused(server, link):
    link = link.format(port=server.server.server_address[1])
    server.routes["/p1"] = lambda h: respond(h, 200, json.dumps(az_page([az_item()], link)).encode())
    hostile_refresh(server, "azure", server.url("/p1"), "leaves the price server")


def test_relative_next_page_link_on_the_same_host_is_followed(server):
    server.routes["/p1"] = lambda h: respond(h, 200, json.dumps(az_page([az_item()], "/p2?x=1")).encode())
    server.routes["/p2"] = lambda h: respond(h, 200, json.dumps(az_page([az_item("Standard_NC4as_T4_v3", 0.5)]))
                                             .encode())
    [out] = run("azure", server.url("/p1"))
    assert out.status == "ok" and out.rows == 2


def test_endless_distinct_pages_stop_at_the_page_limit(server, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_HTTP_MAX_PAGES", "5")

    def page(h):
        n = int(h.path.split("?")[0][2:])
        server.routes[f"/p{n + 1}"] = page
        respond(h, 200, json.dumps(az_page([az_item()], server.url(f"/p{n + 1}"))).encode())

    server.routes["/p1"] = page
    hostile_refresh(server, "azure", server.url("/p1"), "more than 5 pages",
                    "GPU_ADVISOR_HTTP_MAX_PAGES")
    assert sum(server.hits.get(f"/p{i}", 0) for i in range(1, 10)) == 5


def test_next_page_link_of_the_wrong_type_is_refused(server):
    server.routes["/p1"] = lambda h: respond(h, 200, json.dumps(az_page([az_item()], {"href": "/p2"})).encode())
    hostile_refresh(server, "azure", server.url("/p1"), "'NextPageLink' is dict")


# --------------------------------------------------------------------------- sizes and bombs
def test_declared_oversized_body_is_not_downloaded(server):
    def big(h):
        h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5000000000\r\nConnection: close\r\n\r\n")
        trickle(h, b"[" * 1000, 100, 0.01, server.stop)

    server.routes["/big"] = big
    hostile_refresh(server, "azure", server.url("/big"), "larger than the", "GPU_ADVISOR_HTTP_MAX_BYTES",
                    "not downloaded")


def test_undeclared_oversized_body_stops_at_the_byte_limit(server):
    def big(h):
        h.wfile.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        part = b"%x\r\n%s\r\n" % (65536, b" " * 65536)
        for _ in range(100):  # 6.5 MB of JSON whitespace, over the 1 MB limit
            try:
                h.wfile.write(part)
            except OSError:
                return
        h.wfile.write(b"0\r\n\r\n")

    server.routes["/big"] = big
    hostile_refresh(server, "azure", server.url("/big"), "larger than the 1,000,000 bytes limit",
                    "stopped reading")


def bomb(size: int, wbits: int = 31, head: bytes = b"", fill: bytes = b" ") -> bytes:
    """`head` then `size` bytes of `fill`, gzip (wbits 31) or zlib (15) compressed, streamed."""
    z = zlib.compressobj(9, zlib.DEFLATED, wbits)
    block = fill * max((1 << 20) // len(fill), 1)
    out = [z.compress(head)]
    for _ in range(size // len(block)):
        out.append(z.compress(block))
    return b"".join(out) + z.flush()


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "gzip, gzip"])
def test_compression_bomb_stops_at_the_decoded_byte_limit(server, encoding):
    body = bomb(100_000_000, 15 if encoding == "deflate" else 31)  # 100 MB of spaces in ~100 KB
    if encoding == "gzip, gzip":
        body = gzip.compress(body)
    assert len(body) < 1_000_000
    server.routes["/bomb"] = lambda h: respond(h, 200, body, {"Content-Encoding": encoding})
    import tracemalloc

    tracemalloc.start()
    try:
        hostile_refresh(server, "azure", server.url("/bomb"), "once decoded", "stopped reading")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100_000_000  # never held the 200 MB


def test_aws_gzip_bomb_stops_at_the_streamed_byte_limit(server):
    body = bomb(50_000_000, head=AWS_CSV.encode(), fill=b"x" * 1023 + b"\n")
    server.routes["/bad" + AWS_PATH] = lambda h: respond(h, 200, body, {"Content-Encoding": "gzip"})
    hostile_refresh(server, "aws", server.url("/bad"), "GPU_ADVISOR_HTTP_MAX_STREAM_BYTES", "once decoded")


def test_aws_endless_line_is_refused(server, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_HTTP_MAX_STREAM_BYTES", "50000000")
    body = bomb(5_000_000, head=AWS_CSV.encode(), fill=b"x")
    server.routes["/bad" + AWS_PATH] = lambda h: respond(h, 200, body, {"Content-Encoding": "gzip"})
    hostile_refresh(server, "aws", server.url("/bad"), "a line is longer than 1,048,576 bytes")


def test_aws_giant_csv_field_is_a_clear_error(server):
    field = b'"' + b"x" * 500_000 + b'"'
    body = AWS_CSV.encode() + b'"A2",' + field + b"\n"
    server.routes["/bad" + AWS_PATH] = lambda h: respond(h, 200, gzip.compress(body), {"Content-Encoding": "gzip"})
    hostile_refresh(server, "aws", server.url("/bad"), "a CSV field is longer than 65,536 characters")


def test_skypilot_body_that_expands_into_one_giant_field_is_a_clear_error(server):
    body = gzip.compress(SKY_CSV.encode() + b'x,H100,1,16,200,2.95,eu,"' + b"G" * 900_000 + b'",1\n')
    server.routes["/bad" + SKY_PATH] = lambda h: respond(h, 200, body, {"Content-Encoding": "gzip",
                                                                        "Content-Type": "text/csv"})
    hostile_refresh(server, "skypilot", server.url("/bad/catalogs"),
                    "a field is longer than 65,536 characters")


def test_corrupt_gzip_is_a_clear_error(server):
    server.routes["/bad"] = lambda h: respond(h, 200, b"\x1f\x8b\x08\x00garbage" * 10, {"Content-Encoding": "gzip"})
    hostile_refresh(server, "azure", server.url("/bad"), "could not be decoded")


def test_json_nested_100000_deep_is_refused_without_recursion_error(server):
    server.routes["/deep"] = lambda h: respond(h, 200, b"[" * 100_000 + b"]" * 100_000)
    hostile_refresh(server, "azure", server.url("/deep"), "nested more than 100 levels")


def test_json_with_a_huge_number_is_a_clear_error(server):
    server.routes["/num"] = lambda h: respond(h, 200, b'{"Items": [], "Count": ' + b"9" * 200_000 + b"}")
    hostile_refresh(server, "azure", server.url("/num"), "not JSON")


# --------------------------------------------------------------------------- errors and truncation
@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_5xx_every_time_gives_up_after_the_retries(server, status):
    server.routes["/bad"] = lambda h: respond(h, status, b"<html>oops</html>", {"Content-Type": "text/html"})
    hostile_refresh(server, "azure", server.url("/bad"), "gave up after 2 attempt(s)", f"HTTP {status}")
    assert server.hits["/bad"] == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410])
def test_4xx_fails_at_once(server, status):
    server.routes["/bad"] = lambda h: respond(h, status, b"no")
    hostile_refresh(server, "azure", server.url("/bad"), f"HTTP {status}")
    assert server.hits["/bad"] == 1


def test_body_shorter_than_its_content_length_is_truncation(server):
    body = json.dumps(az_page([az_item()] * 5)).encode()

    def short(h):
        h.wfile.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                      + body[:100])

    server.routes["/short"] = short
    hostile_refresh(server, "azure", server.url("/short"), "truncated")


def test_chunked_body_cut_mid_chunk_is_truncation(server):
    def cut(h):
        h.wfile.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                      b"400\r\n" + b"{" * 10)

    server.routes["/cut"] = cut
    hostile_refresh(server, "azure", server.url("/cut"), "truncated")


def test_aws_file_cut_mid_line_is_truncation(server):
    body = AWS_CSV.encode()[:-10]
    server.routes["/bad" + AWS_PATH] = lambda h: respond(h, 200, body)
    hostile_refresh(server, "aws", server.url("/bad"), "truncated")


def test_connection_closed_without_a_response(server):
    server.routes["/rst"] = lambda h: h.connection.shutdown(socket.SHUT_RDWR)
    hostile_refresh(server, "azure", server.url("/rst"), "gave up after 2 attempt(s)")


def test_html_page_and_empty_body_are_named(server):
    server.routes["/html"] = lambda h: respond(h, 200, b"<!DOCTYPE html><html>captive portal</html>")
    hostile_refresh(server, "azure", server.url("/html"), "an HTML page")
    server.routes["/empty"] = lambda h: respond(h, 200, b"")
    hostile_refresh(server, "azure", server.url("/empty"), "empty response body")


def test_a_message_from_the_server_cannot_add_lines(server):
    server.routes["/p1"] = lambda h: respond(h, 200, json.dumps(az_page([az_item()], "http://x/\n\nINJECTED")).encode())
    out = hostile_refresh(server, "azure", server.url("/p1"), "leaves the price server")
    assert out.message.count("\n") == 0


def test_first_refresh_failure_says_nothing_was_cached(server):
    server.routes["/bad"] = lambda h: respond(h, 500, b"boom")
    [out] = run("azure", server.url("/bad"))
    assert out.status == "failed" and out.message.endswith("(nothing cached for it yet; the bundled snapshot is used)")
    assert not cache.sheet_path("azure").exists()


# --------------------------------------------------------------------------- the helper itself
def test_request_deadline_holds_for_a_direct_call_too(server):
    server.routes["/slow"] = lambda h: (h.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"),
                                        trickle(h, b"a" * 100000, 5, 0.05, server.stop))
    with pytest.raises(FetchError, match="GPU_ADVISOR_HTTP_DEADLINE"):
        http.get_text(server.url("/slow"))
    assert server.hits["/slow"] == 1


def test_budget_context_limits_direct_calls(server):
    server.routes["/ok"] = lambda h: (time.sleep(0.3), respond(h, 200, b"{}"))
    with http.budget("test", 1.0), pytest.raises(FetchError, match="1 s budget"):
        for _ in range(10):
            http.get_json(server.url("/ok"))
    assert 1 <= server.hits["/ok"] <= 4  # 0.3 s or more each: at most 4 start within the 1 s budget


def test_same_origin_rules():
    assert http.same_origin("https://prices.azure.com:443/api?x=1", "https://PRICES.azure.com/api")
    assert not http.same_origin("http://prices.azure.com/api", "https://prices.azure.com/api")
    assert not http.same_origin("https://prices.azure.com.evil.io/api", "https://prices.azure.com/api")
    assert not http.same_origin("https://prices.azure.com:8443/", "https://prices.azure.com/")
    assert not http.same_origin("https://prices.azure.com:99999/", "https://prices.azure.com/")
