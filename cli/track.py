"""`gpu-advisor track RUN_DIR`: record what a run under an approval actually spent (advisor/ledger/runs.py reads
its files) in the ledger, and store its measured.json like `calibrate` does, so later plans use the measurement."""

from __future__ import annotations

import datetime as dt
import os
import socket
from pathlib import Path

import click

from advisor.explain.approval import usd
from advisor.ledger.runs import read_run
from advisor.text import plain
from advisor.workload import measurements
from cli.ledger import ledger_option, open_from_option


def approval_row(a) -> dict:
    return {"digest": a.record_digest, "project": a.project, "plan_digest": a.plan_digest,
            "candidate": f"{a.provider} {a.instance_type} x{a.nodes} · {a.stack}"[:600],
            "approved_by": a.approved_by, "approved_at": a.approved_at, "price_hour": a.price.price_hour,
            "price_source": a.price.source[:2000], "price_date": a.price.date, "cap_usd": a.caps.cost_usd,
            "cap_hours": a.caps.hours, "estimate_usd": a.estimate_cost_usd, "estimate_hours": a.estimate_hours,
            "estimate_p50_usd": a.estimate_p50_usd, "estimate_p90_usd": a.estimate_p90_usd}


@click.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@ledger_option
def track(run_dir: Path, ledger: str | None) -> None:
    """Record a run's actual hours, tokens/s and cost against its approval in the ledger."""
    actual = read_run(run_dir)
    book = open_from_option(ledger)
    book.add_approval(approval_row(actual.approval))
    book.add_run({"approval": actual.approval.record_digest, "run": actual.run[:200],
                  "observed_at": dt.datetime.now(dt.UTC).isoformat(timespec="microseconds"),
                  "observer": f"{socket.gethostname()[:60]}:{os.getpid()}", "status": actual.status,
                  "hours": actual.hours, "cost_usd": actual.cost_usd, "steps": actual.steps,
                  "max_steps": actual.max_steps, "tokens_per_sec": actual.tokens_per_sec})
    a = actual.approval
    click.echo(f"{plain(actual.run)}: {actual.status}, {actual.hours:,.3f} h, {usd(actual.cost_usd)} of "
               f"{usd(a.caps.cost_usd)} approved ({actual.cost_usd / a.caps.cost_usd:.0%}), step {actual.steps:,}"
               f" of {actual.max_steps:,}" + (f", {actual.tokens_per_sec:,.0f} tokens/s" if actual.tokens_per_sec
                                              else ""))
    measured = run_dir / "measured.json"
    if measured.is_file():
        path = measurements.store(measurements.load(measured, "RUN_DIR: measured.json"))
        click.echo(f"stored the run's measured.json for planning: {plain(path)}", err=True)
