"""`gpu-advisor ledger`: approved against actual, per run and per project (advisor/ledger/summary.py), from the
SQLite file by default or a team's PostgreSQL (`--ledger URL` or GPU_ADVISOR_LEDGER)."""

from __future__ import annotations

import dataclasses
import json

import click

from advisor.ledger.store import open_ledger
from advisor.ledger.summary import project_lines, run_lines
from advisor.text import plain
from cli.output import output_options, render_rows
from pricing import settings

ledger_option = click.option("--ledger", "ledger", default=None, metavar="URL",
                             help="the ledger database: sqlite:///path or postgresql://user@host/db "
                                  "[GPU_ADVISOR_LEDGER, else a SQLite file in the user's data folder]")


def open_from_option(url: str | None):
    return open_ledger(url or settings.ledger_url())


def _money(x: float) -> str:
    """$1,234.56, and -$0.50 for a shortfall (never $-0.00 for a rounding of nothing)."""
    cents = round(x, 2) + 0.0
    return f"-${-cents:,.2f}" if cents < 0 else f"${cents:,.2f}"


def _clean(row: dict) -> dict:
    """Floats at 12 significant digits: the sum of spends prints 0.194, not 0.19399999999999998 (binary noise; a
    sub-cent cap such as $0.00001 keeps its digits)."""
    return {k: float(f"{v:.12g}") if isinstance(v, float) else v for k, v in row.items()}


@click.command()
@click.option("--project", default=None, help="only this project")
@output_options("table", "json", "csv", "md")
@ledger_option
def ledger(project: str | None, fmt: str, ledger: str | None) -> None:
    """Approved vs actual per run and per project: the burn-down and the p50/p90 of what remains."""
    book = open_from_option(ledger)
    runs = run_lines(book.approvals(project), book.runs())
    projects = project_lines(runs)
    if fmt == "json":
        click.echo(json.dumps({"runs": [_clean(dataclasses.asdict(r)) for r in runs],
                               "projects": [_clean(dataclasses.asdict(p)) for p in projects]}, indent=2))
        return
    if fmt == "csv":
        click.echo(render_rows(list(dataclasses.asdict(runs[0]) if runs else ["project"]),
                               [list(dataclasses.asdict(r).values()) for r in runs], "csv"))
        return
    rows = [[r.project, r.run, r.status, r.candidate, _money(r.cap_usd), _money(r.spent_usd),
             f"{r.spent_usd / r.cap_usd:.0%}", f"{r.hours:,.2f}", f"{r.steps:,}/{r.max_steps:,}",
             f"{_money(r.remaining_p50_usd)} / {_money(r.remaining_p90_usd)}"] for r in runs]
    click.echo(render_rows(["project", "run", "status", "approved candidate", "cap", "spent", "of cap", "hours",
                            "steps", "left p50 / p90"], rows, fmt, right=(4, 5, 6, 7, 8, 9)))
    prow = [[p.project, str(p.runs), _money(p.approved_usd), _money(p.spent_usd),
             f"{_money(p.remaining_p50_usd)} / {_money(p.remaining_p90_usd)}", _money(p.headroom_p90_usd)]
            for p in projects]
    click.echo("\n" + render_rows(["project", "runs", "approved", "spent", "left p50 / p90", "headroom at p90"],
                                  prow, fmt, right=(1, 2, 3, 4, 5)))
    if not runs:
        click.echo(f"(no approvals{' in project ' + plain(project) if project else ''} yet: gpu-advisor track "
                   "RUN_DIR records one)", err=True)
