"""`gpu-advisor plan`: which instance and technique stack trains this model cheapest (or fastest).

A thin layer: options (also readable from a YAML plan file, flags win) -> `advisor.planner.PlanRequest`
-> `advisor.planner.plan` -> table / json / md / csv (cli/output.py). `plan_options` and `build_plan`
are reused by `gpu-advisor launch`.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from advisor import planner
from advisor.explain.claims import ranking_quantile
from advisor.explain.summary import left_out_line, summary_lines
from advisor.planner import PlanRequest
from advisor.results import FLAT
from advisor.results.columns import CSV_RANKED, TERMINAL, ranked_time_value, total_column
from advisor.text import md, plain
from cli.objective_options import objective_options
from cli.options import FIELDS, as_args, choice, stack_options
from cli.output import OUTPUT_FORMATS, emit, next_step, output_options, render_rows, render_table, terminal_width
from cli.workload_sources import apply as apply_sources, source_options


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
        click.option("--pairs", default=None, help="DPO: preference pairs per epoch (each 2 rows of --seq-len tokens)"),
        click.option("--prompts", default=None,
                     help="GRPO: prompts per epoch (each --num-generations completions of prompt + completion tokens)"),
        click.option("--epochs", type=float, default=None, help="epochs [1]"),
        click.option("--seq-len", type=click.IntRange(min=1), default=None, help="sequence length [2048]"),
        click.option("--global-batch", type=click.IntRange(min=1), default=None, help="sequences per optimizer step [64; long context: 2^19 tokens]"),
        click.option("--global-batch-tokens", default=None, help="tokens per optimizer step (instead of --global-batch)"),
        click.option("--methods", default=None, help="comma list of full,lora,qlora [all]"),
        click.option("--budget", type=float, default=None, help="maximum cost in USD"),
        click.option("--deadline", default=None, help="maximum wall time: 36, 36h, 2d"),
        click.option("--providers", default=None, help="comma list, e.g. aws,gcp,lambda"),
        click.option("--regions", default=None,
                     help="where the host may be: ISO country or continent codes (DE, US, EU, NA, AS) or region "
                          "names (us-east-1), comma list"),
        click.option("--no-marketplace", is_flag=True, default=None,
                     help="leave out marketplace and community hosts (vast, Hyperbolic, RunPod Community, ...)"),
        click.option("--gpu", default=None, help="one GPU model or a comma list, e.g. H100,A100-80GB"),
        click.option("--spot/--no-spot", default=None,
                     help="also price spot capacity: the best spot option is shown beside the on-demand ranking, "
                          "its saving against the on-demand #1 [--no-spot]"),
        click.option("--allow-stale", is_flag=True, default=None,
                     help="rank stale prices (undated, or older than GPU_ADVISOR_STALE_DAYS) even "
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
        click.option("--skip-bad-rows", is_flag=True, default=None,
                     help="leave out rows of a --prices sheet that cannot be read (default: refuse the sheet, "
                          "naming the row)"),
        click.option("--sort", type=choice(["cost", "time"]), default=None, help="rank by [cost] or time"),
        click.option("--risk", type=choice(["p50", "p80", "p90"]), default=None,
                     help="the one quantile of the time model's held-out error every row is ranked, shown and "
                          "checked against --budget/--deadline at [p80]"),
        click.option("--time-value", type=float, default=None, metavar="USD/h",
                     help="what an hour of waiting costs: rows rank on cost + hours x this, both at --risk "
                          "[22.22, one engineer's loaded cost per wall-clock hour, BLS]; 0 ranks on cost alone"),
        click.option("--top", type=click.IntRange(min=1), default=None, help="candidates to show [10]"),
        click.option("--all-stacks", is_flag=True, default=None,
                     help="rank every stack variant, not just each offer's best"),
        click.option("--measured", multiple=True, type=click.Path(dir_okay=False),
                     help="measured.json from `launch.sh --benchmark`: its rate and spread replace the time model's "
                          "for matching candidates (same model, GPU, nodes, stack); repeatable"),
        click.option("--no-measured", is_flag=True, default=None,
                     help="ignore the measurement store (runs stored by `gpu-advisor calibrate`)"),
    ]
    f = stack_options(f, pins=True)  # listed after the workload options
    f = objective_options(f)
    for option in reversed(options):
        f = option(f)
    return f


def build_plan(**options):
    """Options as `plan_options` (+ `source_options`) parse them, or a plain dict -> the `Plan` (advisor.planner).
    The dataset / config sources (flags or plan-file keys) are read first, for `plan` and `launch` alike."""
    options = dict(options)
    record = apply_sources(options)  # --dataset / --from-config -> tokens, seq_len, pins (flags win)
    plan_file = options.pop("plan_file", None)
    request = PlanRequest.from_options(options, plan_file)
    result = planner.plan(request)
    for w in result.warnings:
        click.echo(f"warning: {plain(w)}", err=True)
    return record(result) if record else result


def command_line(options: dict, **extra) -> str:
    """The `gpu-advisor plan ...` line that reproduces these options (flags as given)."""
    parts = ["gpu-advisor", "plan"]
    model = options.get("model") or options.get("model_arg")
    if model:
        parts += ["--model", model]
    for key, value in {**options, **extra}.items():
        parts += _flag_args(key, value)
    return " ".join(shlex.quote(p) for p in parts)


def _flag_args(key: str, value) -> list[str]:
    """One option as the flags that give it (nothing for an unset one, the model, or the default format)."""
    if key in FIELDS and value is not None:
        return as_args(key, value)
    if key in ("vllm_sleep", "importance_sampling") and value is not None:
        return ["--" + ("" if value else "no-") + key.replace("_", "-")]
    if key in ("spot", "padded") and value is not None:
        return [{"spot": ("--spot", "--no-spot"), "padded": ("--padded", "--packed")}[key][not value]]
    if key in ("model", "model_arg", "command") or value is None or value == () or value is False:
        return []
    if key == "fmt":
        return ["--format", value] if value != "table" else []
    flag = {"plan_file": "--file"}.get(key) or "--" + key.replace("_", "-")
    if value is True:
        return [flag]
    return [a for v in (value if isinstance(value, (list, tuple)) else [value]) for a in (flag, str(v))]


# --------------------------------------------------------------------------- formatting

# Table columns, most important first; `_DROP` says which leave first when the terminal is narrow.
# "cost" and "hours" are the figures the ranking used (plan.ranking["quantile"], --risk), the p10-p90 band beside
# them; the header names the quantile (`_titles`).
HEADER = ["#", "cost", "cost band", "hours", "$/h", "GPUs", "instance", "stack", "region", "mb×acc",
          "GB peak/limit", "$/M tok", "price source, date"]
_DROP = ["cost band", "$/M tok", "mb×acc", "region", "price source, date", "GB peak/limit", "on-demand", "spot"]


def _columns(plan) -> list[str]:
    """HEADER, plus on-demand where some row's cost is not the on-demand cost (a spot row) and
    spot where spot was asked for and found (--spot): never a column that repeats `cost`."""
    cols = list(HEADER)
    extra = ["total"] if ranked_time_value(plan.ranking) else []  # the figure rows rank on: cost + hours x --time-value
    if any(c.cost.on_demand_usd is not None and c.cost.on_demand_usd != c.cost.usd for c in plan.candidates):
        extra.append("on-demand")
    if plan.spot_alternative is not None and any(c.cost.spot_usd is not None for c in plan.candidates):
        extra.append("spot")
    return cols[:5] + extra + cols[5:]


def render(plan, fmt: str) -> str:
    """The plan as JSON, CSV (the candidates' flat view), a Markdown table or a text table that
    fits the terminal (cli.output.render_table)."""
    if fmt == "json":
        return plan.model_dump_json(indent=2)
    if fmt == "csv":
        return _csv(plan)
    tv = ranked_time_value(plan.ranking)
    columns = [total_column(tv) if k == "total" else TERMINAL[k] for k in _columns(plan)]
    rows = [[col.cell(c) for col in columns] for c in plan.candidates]
    summary = summary_lines(plan)
    titles = [col.title(ranking_quantile(plan)) for col in columns]
    if not rows:  # nothing to rank: the summary says why (notice and rejections)
        return "\n".join(_wrap(plain(x)) for x in summary)
    if fmt == "md":
        return render_rows(titles, rows, "md") + "\n\n" + "\n".join(f"- {md(x)}" for x in summary)
    left_out: list[str] = []
    keys = [col.key for col in columns]
    table = render_table(titles, rows, right=[i for i, col in enumerate(columns) if col.right],
                         drop=[keys.index(k) for k in _DROP if k in keys], left_out=left_out)
    if left_out:
        summary.append(left_out_line(terminal_width(), left_out))
    return table + "\n\n" + "\n".join(_wrap(plain(x)) for x in summary)


def _csv(plan) -> str:
    """Rank, the ranked figures (named for their quantile, advisor/results/columns.py), then the flat view."""
    columns = list(_flat_columns())
    q = ranking_quantile(plan)
    header = [columns[0], *(col.title(q) for col in CSV_RANKED), *columns[1:]]
    rows = ([row["rank"], *(col.value(c) for col in CSV_RANKED), *(_csv_value(k, row[k]) for k in columns[1:])]
            for c, row in zip(plan.candidates, map(_csv_row, plan.candidates)))
    return render_rows(header, rows, "csv")


def _wrap(line: str) -> str:
    """A summary line folded to the terminal width (left whole in a pipe or file without COLUMNS)."""
    import textwrap

    width = terminal_width()
    return line if width is None else textwrap.fill(line, width=max(width, 20), subsequent_indent="  ")


# CSV: money in cents, hours and rates at a precision people can use; the p10-p90 band beside
# the value it bounds.
_CSV_BANDS = {"hours": ("hours_low", "hours_high"), "cost_usd": ("cost_low", "cost_high")}
_CSV_DIGITS = {"cost_usd": 2, "cost_on_demand_usd": 2, "cost_spot_usd": 2, "price_hour": 2, "cost_low": 2,
               "cost_high": 2, "usd_per_m_tokens": 4, "hours": 3, "train_hours": 3, "hours_low": 3,
               "hours_high": 3, "tokens_per_sec": 0, "mfu": 4}


def _csv_row(c) -> dict:
    row = c.flat()
    row.update(hours_low=c.timing.hours_low, hours_high=c.timing.hours_high, cost_low=c.cost.usd_low,
               cost_high=c.cost.usd_high)
    return row


def _csv_value(key: str, value):
    if isinstance(value, float) and not isinstance(value, bool):
        digits = _CSV_DIGITS.get(key, 4)
        return round(value) if digits == 0 else round(value, digits)
    return value


def _flat_columns():
    out = ["rank"]
    for key in FLAT:
        out += [key, *_CSV_BANDS.get(key, ())]
    return tuple(out)


@click.command()
@plan_options
@source_options
@output_options(*OUTPUT_FORMATS, out=True, out_help="write the plan in --format to FILE (whole, atomically) instead of "
                                            "standard output, e.g. -o plan.json --format json for report and launch")
@click.option("--report", type=click.Path(dir_okay=False), default=None,
              help="also write an HTML/Markdown report, and the plan it names as REPORT.plan.json beside it "
                   "(unless -o saves the plan as JSON)")
def plan(fmt: str, out: Path | None, report: str | None, **options) -> None:
    """Rank cloud instances × technique stacks by the cost (or time) of the whole fine-tuning run.

    Stack options (--lora-rank, --precision, --optimizer, --grad-checkpointing, --attention,
    --sharding, ...) pin that setting; every setting not given is searched.

    Exit status: 0 with a plan; 1 runtime failure; 2 bad input; 3 when no candidate fits or none
    meets --budget / --deadline (the closest are still printed, with how far each misses).
    """
    options["command"] = command_line(options, fmt=fmt)
    result = build_plan(**options)
    emit(lambda: render(result, fmt), out)
    saved = out if out is not None and fmt == "json" else None
    if report:
        if saved is None:  # the report names a plan file and `launch --from` it: leave one beside the report
            saved = plan_file_for(Path(report))
            emit(lambda: render(result, "json"), saved)
        import reports  # only for --report: a terminal table never loads the report renderer (tests/cli/test_speed.py)

        for path in reports.write(result, Path(report), plan_file=str(saved)):
            click.echo(f"wrote {plain(path)}", err=True)
    if not result.constraints_met:
        click.echo(f"error: {plain(result.notice)}", err=True)
        raise SystemExit(3)
    if saved is not None:
        next_step(f"gpu-advisor launch --from {shlex.quote(str(saved))} --rank 1 --out launch/",
                  "the training bundle for the #1", fmt, out)
    else:
        next_step(f"{options['command']} --report report.html",
                  "a report to share, with the plan saved as report.plan.json for launch --from", fmt, out)


def plan_file_for(report: Path) -> Path:
    """Where `plan --report R.html` saves the plan its report names: R.plan.json beside it."""
    return report.with_name(report.stem + ".plan.json")
