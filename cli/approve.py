"""`gpu-advisor approve plan.json --by NAME`: sign one candidate of a saved plan with its caps (advisor/approval.py).

The plan is read and validated as `report` and `launch` read it, its candidate checked as a launcher would check it
(advisor/launch/plan_checks.py), and the approval written atomically to -o (default approval.json)."""

from __future__ import annotations

from pathlib import Path

import click

from advisor.approval import approve as make_approval
from advisor.errors import BadInput
from advisor.explain.approval import hours, usd
from advisor.launch.plan_checks import check_launchable
from advisor.results.checks import NAME_CHARS, check_text
from advisor.text import plain
from cli.launch import pick
from cli.report import load_plan, plan_data
from pricing.files import atomic_write


def _name(value: str, option: str) -> str:
    value = value.strip()
    if not value:
        raise BadInput(f"{option}: give a name (who signs, or the project it is charged to).")
    try:
        return check_text(value, option, NAME_CHARS)
    except ValueError as exc:
        raise BadInput(f"{option}: {exc}.") from None


@click.command()
@click.argument("plan_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--by", "by", required=True, help="who approves (a name or e-mail, recorded in the approval)")
@click.option("--cap", default="p90", show_default=True,
              help="the cost cap: p90 (the plan's cost at the time model's p90, setup included) or a dollar amount")
@click.option("--rank", type=int, default=1, show_default=True, help="the candidate approved (1 = the plan's pick)")
@click.option("--project", default="default", show_default=True, help="the ledger project it is charged to")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=Path("approval.json"),
              show_default=True, help="where the approval is written")
def approve(plan_file: Path, by: str, cap: str, rank: int, project: str, out: Path) -> None:
    """Approve one candidate of a saved plan: its digest, caps, prices and their dates, who and when."""
    plan = load_plan(plan_file, "PLAN_FILE")
    candidate = pick(plan, rank, "PLAN_FILE")
    check_launchable(candidate, "PLAN_FILE")
    approval = make_approval(plan_data(plan_file), plan_file.name, candidate, by=_name(by, "--by"), cap=cap,
                             project=_name(project, "--project"))
    atomic_write(out, approval.model_dump_json(indent=2) + "\n")
    c = approval.caps
    click.echo(f"approved rank {approval.rank} ({plain(approval.provider)} {plain(approval.instance_type)}, "
               f"{plain(approval.stack)}): cap {usd(c.cost_usd)} = {hours(c.hours)} at "
               f"${approval.price.price_hour:,.2f}/h ({'p90' if c.basis == 'p90' else 'given'}); wrote {plain(out)}")
    click.echo(f"Launch under it: gpu-advisor launch --from {plain(plan_file)} --approval {plain(out)} --out run",
               err=True)
