"""HTTP for `gpu-advisor serve`: the standard library's ThreadingHTTPServer, kept small and strict.

GET only, HTTP/1.0 and 1.1. The request line is capped (MAX_REQUEST_LINE: four scenarios' queries fit many
times over) and must be `METHOD target HTTP/1.x` with single spaces and no control character in it; any other
line, an HTTP/0.9 request, two Host (or Content-Length) headers, a body in a chunked or unreadable encoding
or past MAX_BODY_BYTES each get a 400 (413, 505) page with its status line and headers, never a bare body.
Every request has a deadline: its request line and headers must arrive within `header_seconds`, a body
within `body_seconds` more (a slowloris client dribbling a byte at a time is answered 408 and closed, not
held for ever), beside the idle read timeout. The deadlines are Server settings, so a test can make them
short. On a loopback address the Host header must name that address (a page elsewhere cannot reach the
plans, and the company's price sheets behind them, by DNS rebinding). Every answer carries a
Content-Security-Policy without scripts (the pages have none), nosniff and no referrer. The log is one
plain line per request on stderr.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import socketserver
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from advisor.text import plain
from cli.serve_app import Response
from pricing.http import redact

MAX_REQUEST_LINE = 8192  # bytes of "GET /path?query HTTP/1.1"
MAX_DRAIN = 1 << 20  # bytes read past the cap before answering (a client still sending sees the answer)
MAX_HEADER_LINES = 100
READ_TIMEOUT = 30  # seconds a connection may sit idle while sending its request
HEADER_SECONDS = 10.0  # the request line and every header, from the first wait for them (a browser: milliseconds)
BODY_SECONDS = 10.0  # a body, after its headers (GET carries none; one is read and dropped, up to MAX_BODY_BYTES)
MAX_BODY_BYTES = 65_536
_REQUEST_LINE = re.compile(r"([A-Z]{1,20}) ([\x21-\x7e]{1,8192}) (HTTP/\d{1,3}\.\d{1,3})")
CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; base-uri 'none'; "
       "frame-ancestors 'none'")


class Handler(BaseHTTPRequestHandler):
    server_version = "gpu-advisor"
    timeout = READ_TIMEOUT

    def version_string(self) -> str:
        return self.server_version  # not the Python version

    def handle_one_request(self) -> None:
        """One request under the header deadline (then the body deadline), its line checked by
        `_request_line` before the stdlib reads its headers; every refusal is a whole answer."""
        self.request_version, self.command = "HTTP/1.1", None  # an error before the line is read still has headers
        self.requestline = "(no request line)"
        with _Deadline(self.connection, self.server.header_seconds) as deadline:
            try:
                line = self.rfile.readline(MAX_REQUEST_LINE + 1)
                if len(line) > MAX_REQUEST_LINE:
                    self._drain(line)
                    self._refuse(400, f"the request is longer than {MAX_REQUEST_LINE:,} characters; a plan's query "
                                      "is a few hundred.", "(request line too long)")
                    return
                if not line or not line.strip():
                    self.close_connection = True  # closed, idle past the deadline, or a stray blank line
                    return
                if deadline.expired and not line.endswith(b"\n"):
                    self._refuse(408, f"the request line did not arrive within {self.server.header_seconds:g} "
                                      "seconds.", plain(line.decode("latin-1"))[:120])
                    return
                problem = self._request_line(line)
                if problem:
                    self._refuse(*problem)
                    return
                self.raw_requestline = line
                if not self.parse_request():
                    return
                if deadline.expired:
                    self._refuse(408, f"the request's headers did not arrive within {self.server.header_seconds:g} "
                                      "seconds.")
                    return
                problem = self._headers_problem()
                if problem:
                    self._refuse(*problem)
                    return
            except TimeoutError:
                self.close_connection = True
                return
        if self._skip_body():
            self._dispatch()

    def _dispatch(self) -> None:
        try:
            if self.command != "GET":
                self.send_error(405, "only GET")
                return
            self.do_GET()
            self.wfile.flush()
        except TimeoutError:
            self.close_connection = True

    def _request_line(self, line: bytes) -> tuple[int, str, str] | None:
        """(status, why, what the log shows) for a request line that is not `METHOD target HTTP/1.x`."""
        text = line.decode("latin-1")
        body = text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text
        shown = plain(body)[:120] or "(empty)"
        m = _REQUEST_LINE.fullmatch(body)
        if m is None:
            return 400, ("the request line is not 'METHOD target HTTP/1.1' (single spaces, no control characters, "
                         "HTTP/1.0 or 1.1)."), shown
        if m.group(3) not in ("HTTP/1.0", "HTTP/1.1"):
            major = int(m.group(3)[5:].split(".")[0])
            return (505 if major >= 2 else 400), f"{plain(m.group(3))} is not served; use HTTP/1.1.", shown
        return None

    def _headers_problem(self) -> tuple[int, str] | None:
        """Two Host or Content-Length headers (RFC 9112 section 3.2: a 400), a body this server cannot read
        safely (chunked, a bad length) or past MAX_BODY_BYTES."""
        for name in ("Host", "Content-Length", "Transfer-Encoding"):
            if len(self.headers.get_all(name) or ()) > 1:
                return 400, f"the request has more than one {name} header."
        if self.headers.get("Transfer-Encoding") is not None:
            return 400, "a request body in a transfer encoding (chunked) is not taken; GET has no body."
        length = self.headers.get("Content-Length")
        if length is not None and not (length.strip().isdigit() and len(length.strip()) <= 18):
            return 400, "the Content-Length header is not a number of bytes."
        if length is not None and int(length) > MAX_BODY_BYTES:
            return 413, f"the request body is larger than {MAX_BODY_BYTES:,} bytes; GET has no body."
        return None

    def _skip_body(self) -> bool:
        """Read and drop a (small) body within the body deadline, so the next request on the connection
        starts where this one ends; False when the answer was a refusal."""
        n = int(self.headers.get("Content-Length") or 0)
        if n == 0:
            return True
        with _Deadline(self.connection, self.server.body_seconds) as deadline:
            try:
                got = len(self.rfile.read(n))
            except TimeoutError:
                got = -1
        if got == n and not deadline.expired:
            return True
        self._refuse(408, f"the request's body did not arrive within {self.server.body_seconds:g} seconds.")
        return False

    def _refuse(self, status: int, why: str, shown: str | None = None) -> None:
        """A whole answer (status line, headers, the one-line page) and the connection closed."""
        if self.request_version not in ("HTTP/1.0", "HTTP/1.1"):
            self.request_version = "HTTP/1.1"  # never a bare HTTP/0.9 body
        self.command = self.command or "-"
        if shown is not None:
            self.requestline = shown
        self.close_connection = True
        self._send(self.server.app.error(status, "Bad input" if status < 500 else "Error", why))

    def _drain(self, line: bytes) -> None:
        """Read the rest of an over-long request (bounded) so the client reads our answer, not a reset."""
        left = MAX_DRAIN
        while line and not line.endswith(b"\n") and left > 0:
            line = self.rfile.readline(min(left, 65536))
            left -= len(line)
        for _ in range(MAX_HEADER_LINES):
            line = self.rfile.readline(65537)
            if line in (b"\r\n", b"\n", b""):
                break

    def do_GET(self) -> None:
        app = self.server.app
        if self.request_version == "HTTP/1.1" and self.headers.get("Host") is None:
            self._send(app.error(400, "Bad input", "an HTTP/1.1 request needs a Host header."))
            return
        if not self.server.host_allowed(self.headers.get("Host")):
            self._send(app.error(400, "Bad input", "the Host header does not name this server's address."))
            return
        url = urlsplit(self.path)
        try:
            response = app.handle(url.path, url.query, self.headers.get("Authorization"))
        except Exception as exc:  # noqa: BLE001 - never a traceback in the page
            print(f"gpu-advisor serve: internal error: {redact(plain(exc))[:300]}", file=sys.stderr, flush=True)
            response = _last_resort()
        self._send(response)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's errors (bad request syntax, too many headers, 405) as our one-line page, with its
        status line and headers (the stdlib leaves them out while it takes the request for HTTP/0.9)."""
        self.log_error("code %d, message %s", code, message)
        text = message or self.responses.get(code, ("error",))[0]
        self._refuse(code, plain(text)[:200])

    def _send(self, response) -> None:
        try:
            self.send_response(response.status)
            headers = {"Content-Type": response.content_type, "Content-Length": str(len(response.body)),
                       "Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                       "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY", "Cache-Control": "no-cache",
                       **response.headers}
            if self.close_connection:
                headers["Connection"] = "close"
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(response.body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the stdlib's signature
        print(f"{self.address_string()} {plain(format % args)[:300]}", file=sys.stderr, flush=True)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 32

    def __init__(self, host: str, port: int, app, header_seconds: float = HEADER_SECONDS,
                 body_seconds: float = BODY_SECONDS):
        self.app = app
        self.header_seconds, self.body_seconds = header_seconds, body_seconds
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), Handler)
        self.loopback = ipaddress.ip_address(self.server_address[0]).is_loopback
        port = self.server_address[1]
        self.hosts = {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"{_bracket(host)}:{port}"}

    def server_bind(self) -> None:
        """TCPServer's bind without HTTPServer's reverse DNS lookup of the address (slow, and not needed)."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def host_allowed(self, host: str | None) -> bool:
        return not self.loopback or host is None or host.lower() in self.hosts

    @property
    def url(self) -> str:
        host = self.server_address[0]
        return f"http://{_bracket(host)}:{self.server_address[1]}/"


class _Deadline:
    """Stops reading from `sock` once `seconds` have passed (its read side is shut down, so a blocked read
    returns at once); `expired` says whether it fired. One timer thread per request in flight."""

    def __init__(self, sock, seconds: float):
        self.sock, self.expired = sock, False
        self.timer = threading.Timer(seconds, self._fire)
        self.timer.daemon = True

    def _fire(self) -> None:
        self.expired = True
        try:
            self.sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass

    def __enter__(self) -> _Deadline:
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()


def _last_resort():
    """The 500 answer when even the error page could not be rendered: one line of plain text."""
    return Response(500, b"internal error (the server's log has the details)\n", "text/plain; charset=utf-8")


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host
