"""`gpu-advisor plan`: which instance and technique stack trains this model cheapest (or fastest).

A thin layer: options (also readable from a YAML plan file, flags win) -> `advisor.planner.PlanRequest`
-> `advisor.planner.plan` -> table / json / md / csv (cli/output.py). `plan_options` and `build_plan`
are reused by `gpu-advisor launch`.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from advisor.text import money, plain
from cli.output import render_rows

FORMATS = ("table", "json", "md", "csv")


def plan_options(f):
    """The workload, constraint and pricing options of `plan` (shared with `launch`)."""
    options = [
        click.argument("model_arg", metavar="[MODEL]", required=False),
        click.option("--model", "model", default=None, help="catalog name, Hugging Face id or config.json path"),
        click.option("-f", "--file", "plan_file", type=click.Path(dir_okay=False), default=None,
                     help="YAML plan file with the same fields (flags override it)"),
        click.option("--tokens", default=None, help="training tokens per epoch, e.g. 50M"),
        click.option("--examples", default=None, help="dataset size in examples (with --avg-tokens)"),
        click.option("--avg-tokens", default=None, help="average tokens per example"),
        click.option("--epochs", type=float, default=None, help="epochs [1]"),
        click.option("--seq-len", type=click.IntRange(min=1), default=None, help="sequence length [2048]"),
        click.option("--global-batch", type=click.IntRange(min=1), default=None, help="sequences per optimizer step [64]"),
        click.option("--global-batch-tokens", default=None, help="tokens per optimizer step (instead of --global-batch)"),
        click.option("--methods", default=None, help="comma list of full,lora,qlora [all]"),
        click.option("--budget", type=float, default=None, help="maximum cost in USD"),
        click.option("--deadline", default=None, help="maximum wall time: 36, 36h, 2d"),
        click.option("--providers", default=None, help="comma list, e.g. aws,gcp,lambda"),
        click.option("--regions", default=None, help="comma list, e.g. us-east-1,us-central1"),
        click.option("--gpu", default=None, help="one GPU model or a comma list, e.g. H100,A100-80GB"),
        click.option("--spot/--no-spot", default=None, help="consider spot prices [--spot]"),
        click.option("--max-gpus", type=click.IntRange(min=1), default=None, help="most GPUs in total"),
        click.option("--max-nodes", type=click.IntRange(min=1), default=None, help="most instances [1]"),
        click.option("--headroom", type=click.FloatRange(0, 1, max_open=True), default=None,
                     help="share of usable GPU memory kept free [0.10]"),
        click.option("--mfu", type=click.FloatRange(0, 1, min_open=True), default=None,
                     help="kernel efficiency instead of the calibrated table (advisor/data/mfu.json)"),
        click.option("--setup-hours", type=click.FloatRange(0), default=None,
                     help="fixed hours per run instead of the modelled provisioning + download + save"),
        click.option("--prices", multiple=True, type=click.Path(exists=True, dir_okay=False),
                     help="extra price sheet (CSV/JSON/YAML); repeatable; wins over the bundled one"),
        click.option("--discount", multiple=True, help="provider=fraction, e.g. aws=0.3; repeatable"),
        click.option("--sort", type=click.Choice(["cost", "time"]), default=None, help="rank by [cost] or time"),
        click.option("--top", type=click.IntRange(min=1), default=None, help="candidates to show [10]"),
        click.option("--all-stacks", is_flag=True, default=None,
                     help="rank every stack variant, not just each instance × method's best"),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def build_plan(**options):
    """Options as `plan_options` parses them (or a plain dict) -> the `Plan` (advisor.planner)."""
    from advisor.planner import PlanRequest, plan

    options = dict(options)
    plan_file = options.pop("plan_file", None)
    request = PlanRequest.from_options(options, plan_file)
    result = plan(request)
    for w in result.warnings:
        click.echo(f"warning: {plain(w)}", err=True)
    return result


def command_line(options: dict, **extra) -> str:
    """The `gpu-advisor plan ...` line that reproduces these options (flags as given)."""
    parts = ["gpu-advisor", "plan"]
    model = options.get("model") or options.get("model_arg")
    if model:
        parts += ["--model", model]
    flags = {"plan_file": "--file"}
    for key, value in {**options, **extra}.items():
        if key == "spot" and value is not None:
            parts.append("--spot" if value else "--no-spot")
            continue
        if key in ("model", "model_arg", "command") or value is None or value == () or value is False:
            continue
        if key == "fmt":
            if value != "table":
                parts += ["--format", value]
            continue
        flag = flags.get(key) or "--" + key.replace("_", "-")
        if value is True:
            parts.append(flag)
            continue
        for v in value if isinstance(value, (list, tuple)) else [value]:
            parts += [flag, str(v)]
    return " ".join(shlex.quote(p) for p in parts)


# --------------------------------------------------------------------------- formatting

HEADER = ["#", "provider region", "instance", "GPUs", "stack", "mb×acc", "peak/usable", "hours", "cost",
          "on-demand", "spot", "$/M tok", "price source, date"]


def _rows(plan) -> list[list[str]]:
    out = []
    for c in plan.candidates:
        out.append([
            str(c.rank), f"{c.provider} {c.region}", c.instance_type + (" (spot)" if c.spot else ""),
            f"{c.gpu_count * c.nodes}× {c.gpu_model}" + (f" ({c.nodes} nodes)" if c.nodes > 1 else ""),
            c.stack_label, f"{c.micro_batch}×{c.grad_accum}",
            f"{c.peak_memory_bytes / 1e9:.1f}/{c.gpu_memory_bytes / 1e9:.1f} GB",
            f"{c.hours:,.1f}", money(c.cost_usd), money(c.cost_on_demand_usd), money(c.cost_spot_usd),
            f"{c.usd_per_m_tokens:.3f}", f"{c.price_source[:28]} {c.price_date}" + (" STALE" if c.price_stale else ""),
        ])
    return out


def _summary(plan) -> list[str]:
    lines = []
    if plan.notice:
        lines.append(f"Note: {plan.notice}")
    w = plan.workload
    lines.append(f"{plan.model.name}: {w['train_tokens']:,} training tokens, seq {w['seq_len']}, "
                 f"global batch {w['global_batch']} sequences; {plan.assumptions.get('candidates_scored', 0):,} "
                 "candidates scored.")
    if plan.baseline is not None:
        b = plan.baseline
        line = (f"Naive baseline (full fine-tuning on the cheapest instance where it fits): {b.provider} "
                f"{b.instance_type}, {b.hours:,.1f} h, {money(b.cost_usd)}")
        if plan.saving_vs_baseline_usd is not None:
            line += f"; the top pick saves {money(plan.saving_vs_baseline_usd)}"
        lines.append(line + ".")
    if plan.pareto:
        lines.append("Pareto front (cost vs time): " + "; ".join(
            f"{money(c.cost_usd)} / {c.hours:,.1f} h ({c.gpu_count * c.nodes}× {c.gpu_model} {c.provider})"
            for c in plan.pareto[:6]))
    if plan.rejected:
        lines.append("Rejected: " + "; ".join(f"{r.count:,} × {r.reason}" for r in plan.rejected[:6]))
    return lines


def render(plan, fmt: str) -> str:
    """The plan as JSON, CSV (the candidates' flat view), a Markdown table or a text table."""
    from advisor.text import md

    if fmt == "json":
        return plan.model_dump_json(indent=2)
    if fmt == "csv":
        flat = [c.flat() for c in plan.candidates]
        columns = list(flat[0]) if flat else list(_flat_columns())
        return render_rows(columns, ([row[k] for k in columns] for row in flat), "csv")
    rows = _rows(plan)
    summary = _summary(plan)
    if not rows:  # nothing to rank: the summary says why (notice and rejections)
        return "\n".join(plain(x) for x in summary)
    if fmt == "md":
        return render_rows(HEADER, rows, "md") + "\n\n" + "\n".join(f"- {md(x)}" for x in summary)
    return render_rows(HEADER, rows, "table") + "\n\n" + "\n".join(plain(x) for x in summary)


def _flat_columns():
    from advisor.results import FLAT

    return ("rank", *FLAT)


@click.command()
@plan_options
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--report", type=click.Path(dir_okay=False), default=None, help="also write an HTML/Markdown report")
def plan(fmt: str, report: str | None, **options) -> None:
    """Rank cloud instances × technique stacks by the cost (or time) of the whole fine-tuning run."""
    options["command"] = command_line(options, fmt=fmt)
    result = build_plan(**options)
    click.echo(render(result, fmt))
    if report:
        import reports

        for path in reports.write(result, Path(report)):
            click.echo(f"wrote {path}", err=True)
