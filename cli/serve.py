"""`gpu-advisor serve`: the plan as a local web page for the people who decide, with shareable links.

The page is rendered from the same `build_plan` and the same report templates as the CLI, so it can
never disagree with `gpu-advisor plan`; the browser gets HTML and no estimator logic. It binds to
127.0.0.1 unless told otherwise, reads only the price sheets given here (checked once, at start),
and writes no files. The pieces: cli/serve_query.py (query -> the plan command's own validation),
cli/serve_jobs.py (background plans, one cache for every route, bound), cli/serve_cache.py (a warm plan's
page and JSON bytes, rendered once), cli/serve_app.py (pages), cli/serve_http.py (HTTP).
"""

from __future__ import annotations

import gc
from pathlib import Path

import click

from advisor.errors import AdvisorError, BadInput
from advisor.planner import fit_cache
from advisor.text import plain
from cli.plan import build_plan
from cli.serve_app import App
from cli.serve_http import Server
from cli.serve_jobs import Planner
from cli.serve_ledger import LedgerView
from pricing import loaded_cache, settings
from pricing.loader import load, read_sheet, sources_status


def price_sheets(prices: tuple[str, ...], discounts: tuple[str, ...], skip_bad_rows: bool) -> list[dict]:
    """Every sheet a plan will read, with its rows and newest price date, after loading them once as a plan
    does: a bad sheet or discount stops the server at start (exit 2), not every page."""
    load(user_sheets=prices, discounts=list(discounts), skip_bad_rows=skip_bad_rows)
    out = []
    for p in prices:
        df, _ = read_sheet(p)
        dates = [str(d)[:10] for d in df["observed_at"].dropna()] if "observed_at" in df else []
        out.append({"name": Path(p).name, "kind": "your sheet (--prices)", "rows": len(df),
                    "date": f"newest price dated {max(dates)}" if dates else "undated"})
    for s in sources_status():
        out.append({"name": s["name"], "kind": s["kind"], "rows": s["rows"],
                    "date": f"newest price dated {str(s['fetched_at'])[:10]}" if s["fetched_at"] else "undated"})
    return out


@click.command()
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="TCP port (0: any free port; the URL printed names it)")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="address to listen on; anything but loopback lets other machines plan with your price sheets")
@click.option("--prices", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="extra price sheet (CSV/JSON/YAML) for every plan; repeatable; wins over the bundled one")
@click.option("--discount", multiple=True, help="provider=fraction for every plan, e.g. aws=0.3; repeatable")
@click.option("--skip-bad-rows", is_flag=True, help="leave out rows of a --prices sheet that cannot be read")
@click.option("--ledger", default=None, metavar="URL",
              help="the ledger /project shows (sqlite:///path or postgresql://...) [GPU_ADVISOR_LEDGER, else the "
                   "user's SQLite file]")
@click.option("--token", default=None, help="beyond loopback, /project needs this token (Authorization: Bearer)")
@click.pass_context
def serve(ctx: click.Context, port: int, host: str, prices: tuple[str, ...], discount: tuple[str, ...],
          skip_bad_rows: bool, ledger: str | None, token: str | None) -> None:
    """A local web page: a plan form, the decision card and ranked table for any inputs, 2-4 scenarios side by
    side, and the plan JSON, Markdown report and launch bundle as downloads. Every page's URL carries its
    inputs (the same names as `gpu-advisor plan`'s options), so a link reproduces the page. Ctrl-C stops it."""
    token = _token(token)
    gc.enable()  # cli.run turns the collector off for short commands; a server runs for days
    loaded_cache.WRITE = False  # the page writes no files: the loader's cache is read if there, never written
    fit_cache.WRITE = False  # nor the planner's stored fits (advisor/planner/fit_cache.py)
    sheets = price_sheets(prices, discount, skip_bad_rows)
    server_args = [*(f"--prices={p}" for p in prices), *(f"--discount={d}" for d in discount),
                   *(["--skip-bad-rows"] if skip_bad_rows else [])]
    debug = bool((ctx.find_root().obj or {}).get("debug"))
    planner = Planner(lambda options: build_plan(**options), debug=debug)
    app = App(planner, server_args, sheets, discounts=", ".join(discount))
    try:
        server = Server(host, port, app)
        app.ledger = LedgerView(ledger or settings.ledger_url(), server.loopback, token)
    except OSError as exc:  # the port is taken, the address is not this machine's, ...
        raise AdvisorError(f"--host/--port: cannot listen on {plain(host)}:{port}: "
                           f"{(exc.strerror or str(exc)).lower()}.") from None
    if not server.loopback:
        click.echo(f"warning: listening on {plain(server.url)}, not a loopback address: anyone who can reach it "
                   "can plan with these price sheets.", err=True)
    click.echo(f"Serving gpu-advisor on {server.url} (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        click.echo("stopped", err=True)
    finally:
        server.server_close()


def _token(token: str | None) -> str | None:
    """A token of at least 16 printable characters without spaces (a guessable one protects nothing)."""
    if token is None:
        return None
    if len(token) < 16 or any(ch.isspace() or not ch.isprintable() for ch in token):
        raise BadInput("--token: at least 16 printable characters without spaces.")
    return token
