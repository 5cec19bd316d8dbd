"""`gpu-advisor plan`: which instance and technique stack trains this model cheapest (or fastest).

A thin layer: options (also readable from a YAML plan file, flags win) -> `advisor.planner.plan`
-> table / json / md / csv. `plan_options` and `build_plan` are reused by `gpu-advisor launch`.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from advisor.errors import BadInput

FORMATS = ("table", "json", "md", "csv")
# option name -> (default, type) for the plan file and for build_plan(**options)
DEFAULTS = {
    "model": None, "tokens": None, "examples": None, "avg_tokens": None, "epochs": 1.0, "seq_len": 2048,
    "global_batch": None, "global_batch_tokens": None, "methods": "full,lora,qlora", "budget": None,
    "deadline": None, "providers": None, "regions": None, "gpu": None, "spot": True, "max_gpus": None,
    "max_nodes": 1, "headroom": 0.10, "mfu": None, "prices": (), "discount": (), "sort": "cost", "top": 10,
    "setup_hours": None, "all_stacks": False,
}


def _count(text, field: str) -> float | None:
    """'50M', '1.5B', '2e9', 1000 -> a number (None stays None)."""
    if text is None or text == "":
        return None
    from advisor.models import parse_param_count

    try:
        return float(parse_param_count(text))
    except BadInput:
        raise BadInput(f"--{field}: expected a positive count such as 50M, 1.5B or 2e9 (got {text!r}).") from None


def _hours(text) -> float | None:
    """'36', '36h', '2d', '90m' -> hours."""
    if text is None or text == "":
        return None
    s = str(text).strip().lower()
    mult = {"h": 1.0, "d": 24.0, "m": 1 / 60, "w": 168.0}.get(s[-1:], None)
    try:
        value = float(s[:-1]) * mult if mult else float(s)
    except ValueError:
        raise BadInput(f"--deadline: expected hours such as 36, 36h, 2d or 90m (got {text!r}).") from None
    if value <= 0:
        raise BadInput(f"--deadline: must be positive (got {text!r}).")
    return value


def _list(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for item in value for v in str(item).split(",") if str(v).strip()]
    return [v.strip() for v in str(value).split(",") if v.strip()]


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


def _merge(options: dict) -> dict:
    """Flags over the plan file over the defaults."""
    merged = dict(DEFAULTS)
    path = options.get("plan_file")
    if path:
        import yaml

        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise BadInput(f"--file: cannot read {path}: {str(exc).splitlines()[0]}") from None
        if not isinstance(data, dict):
            raise BadInput(f"--file: {path} must hold a mapping of plan fields.")
        for key, value in data.items():
            k = str(key).replace("-", "_")
            if k == "deadline_hours":
                k = "deadline"
            if k not in DEFAULTS:
                raise BadInput(f"--file: unknown field {key!r} in {path}; valid: {', '.join(sorted(DEFAULTS))}.")
            merged[k] = value
    if options.get("model_arg") and not options.get("model"):
        options = {**options, "model": options["model_arg"]}
    for key, value in options.items():
        if key in DEFAULTS and value is not None and value != ():
            merged[key] = value
    return merged


def build_plan(**options):
    """Options as `plan_options` parses them (or a plain dict) -> the `Plan`."""
    from advisor.planner import plan

    o = _merge(options)
    if not o["model"]:
        raise BadInput("--model: which model? Pass a catalog name, Hugging Face id or config.json path.")
    tokens = _count(o["tokens"], "tokens")
    if tokens is None:
        examples, avg = _count(o["examples"], "examples"), _count(o["avg_tokens"], "avg-tokens")
        if examples is None or avg is None:
            raise BadInput("--tokens: give the dataset size as --tokens N, or --examples N with --avg-tokens T.")
        tokens = examples * avg
    offers = None
    if o["prices"] or o["discount"]:
        from pricing import load_offers

        offers = load_offers(user_sheets=[Path(p) for p in _list(o["prices"])], discounts=_list(o["discount"]) or None)
        problems = offers.attrs.get("problems", [])
        if problems:
            click.echo(f"warning: {len(problems)} price row(s) skipped: " + "; ".join(problems[:3])
                       + (" ..." if len(problems) > 3 else ""), err=True)
    gbt = _count(o["global_batch_tokens"], "global-batch-tokens")
    return plan(
        o["model"], tokens=tokens, epochs=float(o["epochs"]), seq_len=int(o["seq_len"]),
        global_batch=int(o["global_batch"]) if o["global_batch"] else None,
        global_batch_tokens=int(gbt) if gbt else None, methods=_list(o["methods"]), offers=offers,
        providers=_list(o["providers"]), regions=_list(o["regions"]), gpus=_list(o["gpu"]), spot=bool(o["spot"]),
        max_gpus=int(o["max_gpus"]) if o["max_gpus"] else None, max_nodes=int(o["max_nodes"]),
        budget=float(o["budget"]) if o["budget"] is not None else None, deadline_hours=_hours(o["deadline"]),
        headroom=float(o["headroom"]), mfu=float(o["mfu"]) if o["mfu"] is not None else None,
        setup_hours=float(o["setup_hours"]) if o["setup_hours"] is not None else None, sort=o["sort"],
        top=int(o["top"]), command=options.get("command") or "", distinct=not o["all_stacks"],
    )


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

COLUMNS = ("rank", "provider", "region", "instance_type", "gpu_model", "gpu_count", "nodes", "spot", "method",
           "precision", "optimizer", "grad_checkpointing", "attention", "sharding", "offload", "micro_batch",
           "grad_accum", "peak_memory_bytes", "gpu_memory_bytes", "tokens_per_sec", "hours", "cost_usd",
           "cost_on_demand_usd", "cost_spot_usd", "usd_per_m_tokens", "price_hour", "price_source", "price_date")


def _money(x) -> str:
    return "-" if x is None else f"${x:,.2f}" if x < 1000 else f"${x:,.0f}"


def _rows(plan) -> list[list[str]]:
    out = []
    for c in plan.candidates:
        out.append([
            str(c.rank), f"{c.provider} {c.region}", c.instance_type + (" (spot)" if c.spot else ""),
            f"{c.gpu_count * c.nodes}× {c.gpu_model}" + (f" ({c.nodes} nodes)" if c.nodes > 1 else ""),
            c.stack_label, f"{c.micro_batch}×{c.grad_accum}",
            f"{c.peak_memory_bytes / 1e9:.1f}/{c.gpu_memory_bytes / 1e9:.1f} GB",
            f"{c.hours:,.1f}", _money(c.cost_usd), _money(c.cost_on_demand_usd), _money(c.cost_spot_usd),
            f"{c.usd_per_m_tokens:.3f}", f"{c.price_source[:28]} {c.price_date}" + (" STALE" if c.price_stale else ""),
        ])
    return out


HEADER = ["#", "provider region", "instance", "GPUs", "stack", "mb×acc", "peak/usable", "hours", "cost",
          "on-demand", "spot", "$/M tok", "price source, date"]


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
                f"{b.instance_type}, {b.hours:,.1f} h, {_money(b.cost_usd)}")
        if plan.saving_vs_baseline_usd is not None:
            line += f"; the top pick saves {_money(plan.saving_vs_baseline_usd)}"
        lines.append(line + ".")
    if plan.pareto:
        lines.append("Pareto front (cost vs time): " + "; ".join(
            f"{_money(c.cost_usd)} / {c.hours:,.1f} h ({c.gpu_count * c.nodes}× {c.gpu_model} {c.provider})"
            for c in plan.pareto[:6]))
    if plan.rejected:
        lines.append("Rejected: " + "; ".join(f"{r.count:,} × {r.reason}" for r in plan.rejected[:6]))
    return lines


def render(plan, fmt: str) -> str:
    if fmt == "json":
        return plan.model_dump_json(indent=2)
    if fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        wr = csv.writer(buf, lineterminator="\n")
        wr.writerow(COLUMNS)
        for c in plan.candidates:
            d = c.model_dump()
            wr.writerow(["" if d[k] is None else d[k] for k in COLUMNS])
        return buf.getvalue().rstrip("\n")
    rows = _rows(plan)
    if not rows:  # nothing to rank: the summary says why (notice and rejections)
        return "\n".join(_summary(plan))
    if fmt == "md":
        def cell(s: str) -> str:
            return s.replace("|", "\\|")

        out = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
        out += ["| " + " | ".join(cell(x) for x in r) + " |" for r in rows]
        return "\n".join(out + [""] + [f"- {cell(x)}" for x in _summary(plan)])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(HEADER)]
    out = ["  ".join(h.ljust(w) for h, w in zip(HEADER, widths))]
    out += ["  ".join(x.ljust(w) for x, w in zip(r, widths)) for r in rows]
    return "\n".join(out + [""] + _summary(plan))


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
