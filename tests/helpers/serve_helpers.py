"""A `gpu-advisor serve` server in a background thread for the serve tests, and small HTTP helpers.

`serving(...)` builds the server the command builds (cli.serve_app.App over cli.serve_jobs.Planner and
cli.serve_http.Server) on a free loopback port, yields it, and always shuts it down.
"""

from __future__ import annotations

import contextlib
import http.client
import threading
import urllib.parse
from dataclasses import dataclass

from cli.serve_app import App
from cli.serve_http import Server
from cli.serve_jobs import Planner

LLAMA = "meta-llama/Llama-3.1-8B"
SHEET = """provider,region,instance_type,gpu_model,gpu_count,ram_gb,price_hour,fetched_at,source
acme,eu-1,acme.h100x1,H100,1,225,2.10,2026-11-20T00:00:00Z,acme-list
acme,eu-1,acme.l4x1,L4,1,32,0.60,2026-11-20T00:00:00Z,acme-list
"""


@dataclass
class Reply:
    status: int
    headers: dict
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


class Served:
    """A running server: `get(path)` asks it over a real socket."""

    def __init__(self, server: Server, app: App, planner: Planner):
        self.server, self.app, self.planner = server, app, planner
        self.port = server.server_address[1]
        self.url = server.url

    def get(self, target: str, host: str | None = None) -> Reply:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)  # a ceiling, not a speed test
        try:
            conn.putrequest("GET", target, skip_host=host is not None)
            if host is not None:
                conn.putheader("Host", host)
            conn.endheaders()
            r = conn.getresponse()
            return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()


@contextlib.contextmanager
def serving(compute=None, server_args=(), sheets=None, patience: float = 600.0, slots: int = 4):
    """The server of `gpu-advisor serve` on a free port. `compute` defaults to the CLI's build_plan;
    `patience` (seconds a page waits for its plan) is a ceiling here, so pages come complete unless a
    test sets it to 0 to see the "Planning..." state."""
    from cli.plan import build_plan
    from cli.serve import price_sheets

    planner = Planner(compute or (lambda options: build_plan(**options)), slots=slots)
    if sheets is None:
        sheets = price_sheets(tuple(a.split("=", 1)[1] for a in server_args if a.startswith("--prices=")), (), False)
    app = App(planner, list(server_args), sheets, patience=patience)
    server = Server("127.0.0.1", 0, app)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Served(server, app, planner)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=60)


def q(**options) -> str:
    """A query from keyword options (max_nodes -> max-nodes), as the pages spell them."""
    return urllib.parse.urlencode({k.replace("_", "-"): v for k, v in options.items()}, safe="/,")
