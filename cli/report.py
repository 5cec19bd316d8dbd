"""`gpu-advisor report PLAN.json -o OUT.html|OUT.md`: a report from a saved plan.

PLAN.json is what `gpu-advisor plan --format json` prints (`Plan.model_dump_json()`), so a
plan can be costed once and reported, forwarded or re-rendered later without re-planning.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from advisor.errors import BadInput


def load_plan(path: Path):
    """Read and validate a saved plan; any problem is one BadInput line naming the file."""
    from pydantic import ValidationError

    from advisor.results import Plan

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"PLAN_FILE: {path} does not exist; give a file written by "
                       "`gpu-advisor plan --format json`.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"PLAN_FILE: cannot read {path}: {exc}.") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"PLAN_FILE: {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                       f"{exc.msg}).") from None
    try:
        return Plan.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ())) or "(top level)"
        raise BadInput(f"PLAN_FILE: {path} is not a plan from `gpu-advisor plan --format json`: "
                       f"field {field}: {err.get('msg', 'invalid')} ({exc.error_count()} problem(s)).") from None


@click.command()
@click.argument("plan_file", metavar="PLAN.json", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Report file: .html/.htm (one self-contained page) or .md (charts as SVG beside it).")
def report(plan_file: Path, out: Path) -> None:
    """Render a saved plan (from `gpu-advisor plan --format json`) as an HTML or Markdown report."""
    plan = load_plan(plan_file)
    import reports

    for path in reports.write(plan, out, plan_file=plan_file.name):
        click.echo(str(path))
