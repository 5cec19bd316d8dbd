"""`gpu-advisor serve` over raw sockets: a malformed request gets a whole answer (status line, headers, the
one-line page), never a bare body; two Host headers are a 400 (RFC 9112 section 3.2); request lines, headers
and bodies have deadlines and sizes. The server is the real one on a loopback port, with its deadlines set
short; every loop here is bounded by a count of bytes or connections, and socket timeouts are ceilings that
only stop a hung test."""

from __future__ import annotations

import socket

import pytest
from helpers.serve_helpers import serving

from cli import serve_http

CEILING = 30.0  # seconds a socket waits before the test gives up (never reached when the server behaves)


def no_plans(options):
    raise AssertionError("a refused request never reaches the planner")


@pytest.fixture(scope="module")
def served():
    with serving(compute=no_plans, sheets=[]) as s:
        s.server.header_seconds = 0.5
        s.server.body_seconds = 0.5
        yield s


def exchange(port: int, data: bytes) -> bytes:
    """Send `data`, then read until the server closes (at most 1 MiB)."""
    with socket.create_connection(("127.0.0.1", port), timeout=CEILING) as s:
        s.sendall(data)
        out = b""
        while len(out) < 1 << 20:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        return out


def status_and_headers(reply: bytes) -> tuple[int, dict]:
    head, _, body = reply.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1."), reply[:200]  # a status line, not a bare page
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert int(headers["Content-Length"]) == len(body)
    assert "script-src" not in headers["Content-Security-Policy"] and headers["X-Content-Type-Options"] == "nosniff"
    return int(lines[0].split()[1]), headers


def host(served) -> bytes:
    return f"Host: 127.0.0.1:{served.port}\r\n".encode()


@pytest.mark.parametrize("request_line, status", [
    (b"GET / HTTP/9.x", 400),
    (b"GET / HTTP/1", 400),
    (b"GET / FTP/1.1", 400),
    (b"GET / HTTP/2.0", 505),
    (b"GET /a\rb HTTP/1.1", 400),
    (b"GET /a\x00b HTTP/1.1", 400),
    (b"GET  / HTTP/1.1", 400),
    (b"GET /", 400),  # HTTP/0.9: no headers would come back
    (b"get / HTTP/1.1", 400),
])
def test_a_malformed_request_line_gets_a_whole_400(served, request_line, status):
    code, headers = status_and_headers(exchange(served.port, request_line + b"\r\n" + host(served) + b"\r\n"))
    assert code == status and headers["Connection"] == "close"


def test_two_host_headers_are_a_400_even_when_the_first_is_ours(served):
    reply = exchange(served.port, b"GET / HTTP/1.1\r\n" + host(served) + b"Host: evil.example\r\n\r\n")
    assert status_and_headers(reply)[0] == 400 and b"more than one Host" in reply


@pytest.mark.parametrize("headers, status", [
    (b"Content-Length: 5\r\nContent-Length: 5\r\n", 400),
    (b"Transfer-Encoding: chunked\r\n", 400),
    (b"Content-Length: -1\r\n", 400),
    (b"Content-Length: 99999999999\r\n", 413),
])
def test_a_body_the_server_cannot_take_is_refused(served, headers, status):
    assert status_and_headers(exchange(served.port, b"GET / HTTP/1.1\r\n" + host(served) + headers + b"\r\n"))[0] \
        == status


def test_a_small_body_is_read_and_the_page_served(served):
    reply = exchange(served.port, b"GET / HTTP/1.1\r\n" + host(served) + b"Content-Length: 4\r\n\r\nabcd")
    assert status_and_headers(reply)[0] == 200


def test_an_http_1_1_request_without_host_is_a_400(served):
    assert status_and_headers(exchange(served.port, b"GET / HTTP/1.1\r\n\r\n"))[0] == 400
    assert status_and_headers(exchange(served.port, b"GET / HTTP/1.0\r\n\r\n"))[0] == 200


def slowloris(port: int, payload: bytes) -> tuple[int, bytes]:
    """Send `payload` a byte at a time until the server stops reading; (bytes sent, reply)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=CEILING)
    sent = 0
    try:
        for byte in payload:
            try:
                s.sendall(bytes([byte]))
            except OSError:
                break
            sent += 1
            s.settimeout(0.05)  # a short look for an answer between bytes (a pace, not a measurement)
            try:
                reply = s.recv(65536)
            except TimeoutError:
                continue
            finally:
                s.settimeout(CEILING)
            return sent, reply + _rest(s)
        return sent, _rest(s)
    finally:
        s.close()


def _rest(s) -> bytes:
    out = b""
    while len(out) < 1 << 20:
        try:
            chunk = s.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out


def test_ten_slowloris_connections_are_each_answered_408_and_closed(served):
    """Headers that never end (an endless run of X-a: b lines), ten connections at once: each is answered 408
    and closed once the header deadline passes, long before its 10,000 bytes are sent."""
    import concurrent.futures

    payload = b"GET / HTTP/1.1\r\n" + host(served) + b"X-a: b\r\n" * 1_250
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        results = list(pool.map(lambda _: slowloris(served.port, payload), range(10)))
    for sent, reply in results:
        assert sent < len(payload)
        assert status_and_headers(reply)[0] == 408


def test_a_request_line_that_never_ends_is_answered_408(served):
    sent, reply = slowloris(served.port, b"GET /" + b"a" * 5_000)
    assert sent < 5_005 and status_and_headers(reply)[0] == 408


def test_a_connection_that_sends_nothing_is_closed_silently(served):
    with socket.create_connection(("127.0.0.1", served.port), timeout=CEILING) as s:
        assert s.recv(65536) == b""  # closed at the header deadline, no answer to nobody


def test_a_body_that_never_arrives_is_answered_408(served):
    sent, reply = slowloris(served.port, b"GET / HTTP/1.1\r\n" + host(served) + b"Content-Length: 60000\r\n\r\n"
                            + b"x" * 60_000)
    assert sent < 60_000 and status_and_headers(reply)[0] == 408


def test_the_server_keeps_serving_after_all_of_it(served):
    assert served.get("/").status == 200


def test_the_deadlines_default_to_seconds_a_browser_never_needs():
    assert serve_http.HEADER_SECONDS == serve_http.BODY_SECONDS == 10.0
    assert serve_http.MAX_BODY_BYTES == 65_536
