"""HTTP for `gpu-advisor serve`: the standard library's ThreadingHTTPServer, kept small and strict.

GET only. The request line is capped (MAX_REQUEST_LINE: four scenarios' queries fit many times over)
and a longer one gets the one-line 400 page, not a traceback or a hung thread; every connection has
a read timeout. On a loopback address the Host header must name that address (a page elsewhere
cannot reach the plans, and the company's price sheets behind them, by DNS rebinding). Every answer
carries a Content-Security-Policy without scripts (the pages have none), nosniff and no referrer.
The log is one plain line per request on stderr.
"""

from __future__ import annotations

import ipaddress
import socket
import socketserver
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from advisor.text import plain
from cli.serve_app import Response
from pricing.http import redact

MAX_REQUEST_LINE = 8192  # bytes of "GET /path?query HTTP/1.1"
MAX_DRAIN = 1 << 20  # bytes read past the cap before answering (a client still sending sees the answer)
MAX_HEADER_LINES = 100
READ_TIMEOUT = 30  # seconds a connection may sit idle while sending its request
CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; base-uri 'none'; "
       "frame-ancestors 'none'")


class Handler(BaseHTTPRequestHandler):
    server_version = "gpu-advisor"
    timeout = READ_TIMEOUT

    def version_string(self) -> str:
        return self.server_version  # not the Python version

    def handle_one_request(self) -> None:
        """BaseHTTPRequestHandler's, with our cap on the request line (the stdlib's is 64 KiB, answered
        with its own page)."""
        try:
            line = self.rfile.readline(MAX_REQUEST_LINE + 1)
            if len(line) > MAX_REQUEST_LINE:
                self._drain(line)
                self.command, self.request_version, self.requestline = "GET", "HTTP/1.0", "(request line too long)"
                self._send(self.server.app.error(400, "Bad input", f"the request is longer than {MAX_REQUEST_LINE:,} "
                                                 "characters; a plan's query is a few hundred."))
                self.close_connection = True
                return
            if not line:
                self.close_connection = True
                return
            self.raw_requestline = line
            if not self.parse_request():
                return
            if self.command != "GET":
                self.send_error(405, "only GET")
                return
            self.do_GET()
            self.wfile.flush()
        except TimeoutError:
            self.close_connection = True

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
        if not self.server.host_allowed(self.headers.get("Host")):
            self._send(app.error(400, "Bad input", "the Host header does not name this server's address."))
            return
        url = urlsplit(self.path)
        try:
            response = app.handle(url.path, url.query)
        except Exception as exc:  # noqa: BLE001 - never a traceback in the page
            print(f"gpu-advisor serve: internal error: {redact(plain(exc))[:300]}", file=sys.stderr, flush=True)
            response = _last_resort()
        self._send(response)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's errors (bad request syntax, 405, 414) as our one-line page."""
        self.log_error("code %d, message %s", code, message)
        text = message or self.responses.get(code, ("error",))[0]
        self.close_connection = True
        self._send(self.server.app.error(code, "Bad input" if code < 500 else "Error", text))

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

    def __init__(self, host: str, port: int, app):
        self.app = app
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


def _last_resort():
    """The 500 answer when even the error page could not be rendered: one line of plain text."""
    return Response(500, b"internal error (the server's log has the details)\n", "text/plain; charset=utf-8")


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host
