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
from cli.options import FIELDS, as_args, stack_options
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
        click.option("--spot/--no-spot", default=None,
                     help="also price spot capacity: the best spot option is shown beside the on-demand ranking, "
                          "its saving against the same instance on demand [--no-spot]"),
        click.option("--allow-stale", is_flag=True, default=None,
                     help="rank stale prices (old catalog generation or older than GPU_ADVISOR_STALE_DAYS) even "
                          "when fresh offers exist"),
        click.option("--checkpoint-every", type=click.FloatRange(0, min_open=True), default=None,
                     help="hours between training checkpoints [Young's optimum for the run's failure rate]"),
        click.option("--padded/--packed", default=None, help="batches padded with an attention mask [--packed]"),
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
        click.option("--risk", type=click.Choice(["p50", "p80", "p90"]), default=None,
                     help="rank by hours and cost at this quantile of the time model's held-out error: p80 for "
                          "budgets you must not overrun [p50]"),
        click.option("--top", type=click.IntRange(min=1), default=None, help="candidates to show [10]"),
        click.option("--all-stacks", is_flag=True, default=None,
                     help="rank every stack variant, not just each instance × method's best"),
    ]
    f = stack_options(f, pins=True)  # listed after the workload options
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
        if key in FIELDS and value is not None:
            parts += as_args(key, value)
            continue
        if key in ("spot", "padded") and value is not None:
            parts.append({"spot": ("--spot", "--no-spot"), "padded": ("--padded", "--packed")}[key][not value])
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

HEADER = ["#", "provider region (+ more regions)", "instance", "GPUs", "stack", "mb×acc", "peak/usable",
          "hours (p10-p90)", "cost",
          "on-demand", "spot", "$/M tok", "price source, date"]


def _rows(plan) -> list[list[str]]:
    out = []
    for c in plan.candidates:
        out.append([
            str(c.rank), f"{c.provider} {c.region}" + (f" +{len(c.offer.also_in)}" if c.offer.also_in else ""),
            c.instance_type + (" (spot)" if c.spot else "") + (" TIGHT" if c.fit.tight else ""),
            f"{c.gpu_count * c.nodes}× {c.gpu_model}" + (f" ({c.nodes} nodes)" if c.nodes > 1 else ""),
            c.stack_label, f"{c.micro_batch}×{c.grad_accum}",
            f"{c.peak_memory_bytes / 1e9:.1f}/{c.gpu_memory_bytes / 1e9:.1f} GB",
            _band(c.hours, c.timing.hours_low, c.timing.hours_high), money(c.cost_usd),
            money(c.cost_on_demand_usd), money(c.cost_spot_usd),
            f"{c.usd_per_m_tokens:.3f}", f"{c.price_source[:28]} {c.price_date}" + (" STALE" if c.price_stale else ""),
        ])
    return out


def _band(value: float, low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return f"{value:,.1f}"
    return f"{value:,.1f} ({low:,.1f}-{high:,.1f})"


def _summary(plan) -> list[str]:
    lines = []
    if plan.notice:
        lines.append(f"Note: {plan.notice}")
    w = plan.workload
    if plan.candidates and plan.assumptions.get("risk", "p50") != "p50":
        c = plan.candidates[0]
        lines.append(f"Ranked at {plan.assumptions['risk']}: the top pick may take {c.timing.hours_at_risk:,.1f} h "
                     f"and cost {money(c.cost.usd_at_risk)}.")
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
    s = plan.spot_alternative
    if s is not None:
        lines.append(f"On spot: {s.provider} {s.instance_type}" + (f" ×{s.nodes} nodes" if s.nodes > 1 else "")
                     + f", {s.hours:,.1f} h (expected interruptions included), {money(s.cost_usd)} against "
                       f"{money(s.cost.on_demand_usd)} for the same instance on demand.")
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
    """Rank cloud instances × technique stacks by the cost (or time) of the whole fine-tuning run.

    Stack options (--lora-rank, --precision, --optimizer, --grad-checkpointing, --attention,
    --sharding, ...) pin that setting; every setting not given is searched.

    Exit status: 0 with a plan; 1 runtime failure; 2 bad input; 3 when no candidate fits or none
    meets --budget / --deadline (the closest are still printed, with how far each misses).
    """
    options["command"] = command_line(options, fmt=fmt)
    result = build_plan(**options)
    click.echo(render(result, fmt))
    if report:
        import reports

        for path in reports.write(result, Path(report)):
            click.echo(f"wrote {path}", err=True)
    if not result.constraints_met:
        click.echo(f"error: {plain(result.notice)}", err=True)
        raise SystemExit(3)
