"""`gpu-advisor report PLAN.json -o OUT.html|OUT.md`: a report from a saved plan.

PLAN.json is what `gpu-advisor plan --format json` prints (`Plan.model_dump_json()`), so a
plan can be costed once and reported, forwarded or re-rendered later without re-planning.
"""

from __future__ import annotations

from pathlib import Path

import click

import reports
from advisor import approval as approvals
from advisor.data_file import first_problem, read_json
from advisor.errors import BadInput
from advisor.explain.approval import approval_block
from advisor.results import Plan
from advisor.text import plain
from cli.output import output_options

MAX_PLAN_BYTES = 5_000_000  # the README's limit: ~1,600 candidates at ~3 KB each (the default --top 10 is ~40 KB)


def plan_data(path: Path, what: str = "PLAN_FILE") -> dict:
    """A plan file's JSON object, size and nesting limited (pricing.files.load_json): what an approval's digest is
    taken of, and what load_plan validates."""
    name = plain(path)
    data = read_json(path, what, MAX_PLAN_BYTES, "a file written by `gpu-advisor plan --format json`")
    if not isinstance(data, dict):
        raise BadInput(f"{what}: {name} is not a plan from `gpu-advisor plan --format json` (expected a JSON "
                       "object).")
    return data


def load_plan(path: Path, what: str = "PLAN_FILE"):
    """Read and validate a saved plan: size and nesting limited (pricing.files.load_json), every
    field checked (advisor.results validators: printable text, GPUs in the GPU table, a model name
    that is a Hub id, a catalog name or a path, finite numbers). Any problem is one BadInput line
    naming the option (`what`), the file and the field."""
    from pydantic import ValidationError

    from advisor.launch.plan_checks import check_consistent

    name = plain(path)
    data = plan_data(path, what)
    try:
        plan = Plan.model_validate(data, strict=True)  # a file: no "2" or true where a number goes
    except ValidationError as exc:
        field, msg = first_problem(exc)
        raise BadInput(f"{what}: {name} is not a plan gpu-advisor can use: field {field[:120]}: "
                       f"{msg[:300]} ({exc.error_count()} problem(s)).") from None
    shown = [(f"candidates[{i}]", c) for i, c in enumerate(plan.candidates)]
    shown += [(key, c) for key in ("baseline", "spot_alternative") if (c := getattr(plan, key)) is not None]
    for field, c in shown:  # a band that does not bracket its estimate, a rate of 1e-300, a price dated "yesterday"
        check_consistent(c, f"{what}: {name}: {field}")
    return plan


@click.command()
@click.argument("plan_file", metavar="PLAN.json", type=click.Path(dir_okay=False, path_type=Path))
@output_options(out_required=True,
                out_help="Report file: .html/.htm (one self-contained page) or .md (charts as OUT-memory.svg, "
                         "OUT-cost-time.svg and, for plan --dataset, OUT-lengths.svg beside it; existing ones are "
                         "replaced and named on stderr).")
@click.option("--approval", "approval_file", type=click.Path(dir_okay=False, path_type=Path),
              help="approval.json from `gpu-advisor approve` for this plan: the report shows who approved which "
                   "candidate, its caps and prices (an approval of another plan, or an edited one, is refused).")
def report(plan_file: Path, out: Path, approval_file: Path | None) -> None:
    """Render a saved plan (from `gpu-advisor plan --format json`) as an HTML or Markdown report.

    The plan file is data: every field is validated on load (printable text only, GPUs from the
    GPU table, finite numbers) and every value is escaped in the report. Prints the files written.
    """
    plan = load_plan(plan_file)
    block = None
    if approval_file is not None:
        approval = approvals.load(approval_file)
        data = plan_data(plan_file)
        if not 1 <= approval.rank <= len(plan.candidates):
            raise BadInput(f"--approval: it approved rank {approval.rank}, and this plan has "
                           f"{len(plan.candidates)} candidate(s); it is not this plan's approval.")
        approvals.check_against(approval, data, plan.candidates[approval.rank - 1], rank_option=None)
        block = approval_block(approval, plan, approvals.digest(data), plan_file.name)

    for path in reports.write(plan, out, plan_file=plan_file.name, approval=block):
        click.echo(plain(path))
