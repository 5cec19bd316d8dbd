"""Render a `Plan` to one self-contained HTML page or GitHub Markdown (+ SVG charts beside it).

Everything shown is computed here into plain strings and rows (`build_context`), so the two
templates only lay it out and cannot disagree. HTML goes through jinja2 autoescape; Markdown
goes through a `finalize` hook that escapes every value (`|`, `<`, `*`, `$` ...), so no value
can break a table or inject markup in either format.
"""

from __future__ import annotations

import os
import shlex
import warnings
from functools import cache
from pathlib import Path
from urllib.parse import quote

from advisor.errors import BadInput
from advisor.explain.answer import answer_parts, gpus, pricing, stack, value
from advisor.explain.approval import ApprovalBlock
from advisor.explain.captions import CHART_TEXT, stale_status
from advisor.explain.card import decision_card
from advisor.explain.claims import (
    counts,
    counts_sentence,
    pareto_basis,
    pareto_points,
    ranked_cost,
    ranking_quantile,
    small_workload,
)
from advisor.explain.notes import misses_constraint, notes_of
from advisor.explain.price_age import is_stale, price_age_days
from advisor.launch.caveats import caveats
from advisor.results import Candidate, Plan
from advisor.results.columns import (
    REPORT_BAND,
    REPORT_COST,
    REPORT_HOURS,
    REPORT_MEMORY,
    REPORT_SHORT_HOURS,
    TIE_MARK,
    ranked_time_value,
    total_column,
)
from advisor.text import md, plain
from advisor.units import gb, money
from pricing.files import atomic_write
from reports import charts

TOP_ROWS = 10
FORMATS = ("html", "md")
SUFFIXES = {".html": "html", ".htm": "html", ".md": "md"}


class Collapsed(str):
    """A long cell (a row's notes): the HTML report shows `summary` and opens the whole text in a <details>;
    Markdown and the text version print the whole text."""

    summary: str


# A notes cell longer than this is collapsed to its first note (cut to SUMMARY_CHARS) and a count of the rest.
COLLAPSE_CHARS = 90
SUMMARY_CHARS = 60


def notes_cell(notes: list[str]) -> str:
    text = "; ".join(notes)
    if len(text) <= COLLAPSE_CHARS:
        return text
    cell = Collapsed(text)
    head = notes[0] if len(notes[0]) <= SUMMARY_CHARS else notes[0][:SUMMARY_CHARS - 1].rstrip() + "…"
    cell.summary = head + (f" (+{len(notes) - 1} more)" if len(notes) > 1 else "")
    return cell


def table(headers: list[str], rows: list[list[str]], flags: list[bool] | None = None,
          numeric: tuple[str, ...] = ()) -> dict:
    """Rows for both templates; `numeric` headers are cells that never wrap (numbers, dates)."""
    return {"headers": headers, "rows": rows, "flags": flags or [False] * len(rows),
            "numeric": [h in numeric for h in headers]}


CANDIDATE_HEADERS = ["#", REPORT_COST.header, REPORT_HOURS.header, "$ per hour", "Instance", "GPUs", "Stack",
                     REPORT_BAND.header, REPORT_MEMORY.header, "Batch (micro × accum × seq)", "Price date", "Notes"]
CANDIDATE_NUMERIC = ("#", REPORT_COST.header, REPORT_HOURS.header, "$ per hour", "Price date")


def _titles(headers: list[str] | tuple[str, ...], plan: Plan) -> list[str]:
    """Headers with the plan's ranking quantile where they name it ("{q}")."""
    q = ranking_quantile(plan)
    return [h.replace("{q}", q) for h in headers]


def _table(headers: list[str], rows: list[list[str]], plan: Plan, flags: list[bool] | None = None,
           numeric: tuple[str, ...] = ()) -> dict:
    return table(_titles(headers, plan), rows, flags, tuple(_titles(numeric, plan)))


def _with_total(plan: Plan, headers: list[str], rows: list[list[str]], numeric: tuple[str, ...]):
    """Headers, rows and numeric columns with the figure the rows rank on (cost + hours x --time-value) after the
    hours, where the plan ranks on it: a reader sees why a dearer row stands above a cheaper one."""
    tv = ranked_time_value(plan.ranking)
    if not tv:
        return headers, rows, numeric
    total = total_column(tv)
    title = total.header.replace("total", "Total")  # cost + hours × --time-value: the ranking line says so
    rows = [[*row[:3], total.cell(c), *row[3:]] for row, c in zip(rows, plan.candidates, strict=False)]
    return [*headers[:3], title, *headers[3:]], rows, (*numeric, title)


def candidate_table(plan: Plan) -> dict:
    """Rank, cost, hours, the ranked total and $/h first (what a reader compares), then where, what and how sure;
    the Pareto front and $ per M tokens have their own table and the CSV/JSON. Cost and hours are the ranked figures
    (advisor/results/columns.py)."""
    rows, flags = [], []
    for c in plan.candidates[:TOP_ROWS]:
        stale = is_stale(c, plan)
        where = (f"{c.offer.provider} {c.offer.instance_type} · {c.offer.region}" + (f" (+{len(c.offer.also_in)} more)"
                 if c.offer.also_in else "") + f" · {pricing(c)}")
        rows.append([_rank(c), REPORT_COST.cell(c) + (" ✗" if misses_constraint(c) else ""), REPORT_HOURS.cell(c),
                     money(c.cost.price_hour), where, gpus(c), stack(c), REPORT_BAND.cell(c), REPORT_MEMORY.cell(c),
                     f"{c.shape.micro_batch} × {c.shape.grad_accum} × {c.shape.seq_len:,}", c.offer.price_date + (" ⚠" if stale else ""),
                     notes_cell(notes_of(c))])
        flags.append(stale)
    headers, rows, numeric = _with_total(plan, CANDIDATE_HEADERS, rows, CANDIDATE_NUMERIC)
    return _table(headers, rows, plan, flags, numeric)


def _rank(c: Candidate) -> str:
    return str(c.rank) + (TIE_MARK if c.tie_rule else "")


def launch_caveats(plan: Plan) -> list[dict]:
    """What `gpu-advisor launch` would warn about for the shown rows (advisor.launch.caveats, the one list),
    each caveat once with the ranks it applies to."""
    moe = plan.model.params_active < plan.model.params_total
    ranks: dict[str, list[str]] = {}
    for c in plan.candidates[:TOP_ROWS]:
        for note in caveats(c, plan.model.family, moe):
            ranks.setdefault(note, []).append(f"#{c.rank}")
    return [{"ranks": ", ".join(r), "text": note} for note, r in ranks.items()]


def best_tables(plan: Plan) -> tuple[dict, dict]:
    """The best option per GPU and per provider, cheapest first, at the ranked figures."""
    gpu_rows = [[g, str(c.rank), c.offer.provider, c.offer.instance_type, stack(c), REPORT_SHORT_HOURS.cell(c),
                 REPORT_COST.cell(c)] for g, c in sorted(plan.best_per_gpu.items(), key=lambda kv: ranked_cost(kv[1]))]
    prov_rows = [[p, str(c.rank), c.offer.instance_type, gpus(c), stack(c), REPORT_SHORT_HOURS.cell(c),
                  REPORT_COST.cell(c)]
                 for p, c in sorted(plan.best_per_provider.items(), key=lambda kv: ranked_cost(kv[1]))]
    ranked = [REPORT_SHORT_HOURS.header, REPORT_COST.header]
    return (_table(["GPU", "Rank", "Provider", "Instance", "Stack", *ranked], gpu_rows, plan),
            _table(["Provider", "Rank", "Instance", "GPUs", "Stack", *ranked], prov_rows, plan))


def price_table(plan: Plan) -> dict:
    """Every distinct price the plan used, with its source, date and age."""
    seen: dict[tuple, Candidate] = {}
    pool = list(plan.candidates) + ([plan.baseline] if plan.baseline else [])
    pool += list(plan.best_per_gpu.values()) + list(plan.best_per_provider.values())
    for c in pool:
        key = (c.offer.provider, c.offer.region, c.offer.instance_type, c.cost.spot, c.nodes,
               round(c.cost.price_hour, 6), c.offer.source, c.offer.price_date)
        seen.setdefault(key, c)
    rows, flags = [], []
    for c in sorted(seen.values(), key=lambda c: (c.offer.provider, c.offer.instance_type, c.cost.spot, c.nodes)):
        age = price_age_days(c, plan)
        stale = is_stale(c, plan)
        node_note = f" ({c.nodes} nodes)" if c.nodes > 1 else ""
        rows.append([c.offer.provider, c.offer.region, c.offer.instance_type + node_note, pricing(c),
                     money(c.cost.price_hour), c.offer.source, c.offer.price_date,
                     "unknown" if age is None else f"{age:,}",
                     stale_status(plan) if stale else "ok"])
        flags.append(stale)
    return table(["Provider", "Region", "Instance", "Pricing", "$ per hour", "Source", "Date", "Age (days)",
                  "Status"], rows, flags)


def memory_table(plan: Plan) -> dict:
    rows = []
    for tag, c in charts.memory_rows(plan):
        m = c.memory
        parts = [gb(getattr(m, k)) for k in charts.COMPONENTS] if m else ["n/a"] * len(charts.COMPONENTS)
        rows.append([tag, f"{c.offer.provider} {c.offer.instance_type}", stack(c), *parts, gb(c.fit.peak_bytes),
                     gb(c.fit.usable_bytes), gb(c.fit.limit_bytes),
                     "yes" if c.fit.peak_bytes <= c.fit.limit_bytes else "no"])
    return table(["", "Instance", "Stack", "Weights", "Gradients", "Optimizer", "Activations", "Overhead",
                  "Peak", "Usable", "Limit (usable less headroom)", "Fits"], rows)


def pareto_table(plan: Plan) -> dict:
    """The front as the terminal lists it (reports.claims.pareto_points): the same points, order and figures."""
    rows = [[str(c.rank) if c in plan.candidates else "", f"{c.offer.provider} {c.offer.instance_type}", gpus(c), stack(c),
             pricing(c), figures] for c, figures in pareto_points(plan)]
    return table(["#", "Instance", "GPUs", "Stack", "Pricing", "Cost / wall time"], rows)


SHORT_HEADERS = ["#", REPORT_COST.header, REPORT_SHORT_HOURS.header, "GPUs", "Instance", "Stack"]


def short_table(plan: Plan) -> dict:
    """The first table a reader sees: what to compare (cost, time at the ranked quantile, in rank order), on what,
    how; the full one is below it."""
    rows = [[_rank(c), REPORT_COST.cell(c) + (" ✗" if misses_constraint(c) else ""), REPORT_SHORT_HOURS.cell(c),
             gpus(c), f"{c.offer.provider} {c.offer.instance_type}", stack(c)]
            for c in plan.candidates[:TOP_ROWS]]
    headers, rows, numeric = _with_total(plan, SHORT_HEADERS, rows, ("#", REPORT_COST.header, REPORT_SHORT_HOURS.header))
    return _table(headers, rows, plan, [is_stale(c, plan) for c in plan.candidates[:TOP_ROWS]], numeric)


def lengths_table(plan: Plan) -> dict | None:
    """The length histogram's bins as text (plan --dataset); None for a plan without a dataset."""
    h = plan.workload_lengths
    if h is None:
        return None
    rows = [[f"{low:,}-{high:,}", f"{rows:,}"] for low, high, rows in h.bins]
    return table(["Tokens per row", "Rows" + ("" if h.exact else f" (from {h.counted_rows:,} sampled)")], rows,
                 numeric=("Tokens per row",))


def build_context(plan: Plan, plan_file: str = "plan.json") -> dict:
    best_gpu, best_provider = best_tables(plan)
    prices = price_table(plan)
    stale_count = sum(prices["flags"])
    top = plan.candidates[0] if plan.candidates else None
    rejected = sorted(plan.rejected, key=lambda r: -r.count)
    return {
        "title": f"GPU plan: {plan.model.name}",
        "model": plan.model,
        "generated_at": plan.generated_at or "unknown time",
        "has_candidates": top is not None,
        "n_candidates": counts(plan)["meeting"],
        "counts": counts_sentence(plan, shown=min(TOP_ROWS, len(plan.candidates))),
        "small_workload": small_workload(plan),
        "short": short_table(plan),
        "pareto_basis": pareto_basis(plan),
        "notice": plan.notice,
        "warnings": plan.warnings,
        "answer": answer_parts(plan),
        "card": decision_card(plan),
        "constraints_met": plan.constraints_met,
        "launch_caveats": launch_caveats(plan),
        "top_stale": top is not None and is_stale(top, plan),
        "candidates": candidate_table(plan),
        "shown": min(TOP_ROWS, len(plan.candidates)),
        "memory": memory_table(plan),
        "pareto": pareto_table(plan),
        "lengths": lengths_table(plan),
        "best_gpu": best_gpu,
        "best_provider": best_provider,
        "rejected": table(["Reason", "Options ruled out", "Example"],
                          [[r.reason, f"{r.count:,}", r.example] for r in rejected]),
        "rejected_before": len(counts(plan)["ruled_out"]),
        "workload": table(["Setting", "Value"], [[k, value(v, k)] for k, v in plan.workload.items()]),
        "assumptions": table(["Assumption", "Value"], [[k, value(v, k)] for k, v in plan.assumptions.items()]),
        "prices": prices,
        "stale_count": stale_count,
        "stale_days": f"{plan.stale_days:g}",
        "command": plan.command,
        "plan_file": plain(plan_file),
        "plan_file_word": _word(plan_file),
        "launch": f"gpu-advisor launch --from {_word(plan_file)} --rank 1 --out launch/",
        "svg_css": charts.SVG_CSS,
    }


# ---------- templates ----------------------------------------------------------------------

class Raw(str):
    """A Markdown fragment built by us (code fence); passed through `md_escape` untouched."""


def md_escape(v: object) -> str:
    """Every value a Markdown template prints: escaped (advisor.text.md) unless we built it (Raw).
    One space at either end survives (the answer paragraph is built from segments)."""
    if v is None:
        return ""
    if isinstance(v, Raw):
        return str(v)
    text = str(v)
    core = md(text)
    if not core:
        return " " if text[:1].isspace() else ""
    return (" " if text[:1].isspace() else "") + core + (" " if text[-1:].isspace() else "")


def md_code(text: str) -> Raw:
    """A fenced code block whose fence is longer than any backtick run inside."""
    longest = max((len(run) for run in text.split("\n") for run in _runs(run, "`")), default=0)
    fence = "`" * max(3, longest + 1)
    return Raw(f"{fence}\n{text}\n{fence}")


def _runs(s: str, ch: str) -> list[str]:
    out, cur = [], ""
    for c in s:
        if c == ch:
            cur += c
        else:
            if cur:
                out.append(cur)
            cur = ""
    return out + ([cur] if cur else [])


@cache
def _env(fmt: str):
    import jinja2

    loader = jinja2.FileSystemLoader(str(Path(__file__).parent / "templates"))
    if fmt == "html":
        return jinja2.Environment(loader=loader, autoescape=True, trim_blocks=True, lstrip_blocks=True,
                                  undefined=jinja2.StrictUndefined)
    env = jinja2.Environment(loader=loader, autoescape=False, finalize=md_escape, trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.globals["md_code"] = md_code
    env.globals["Raw"] = Raw
    return env


def _charts(plan: Plan, narrow: bool = False) -> dict[str, str]:
    """Each chart's sanitised SVG by key; `narrow`: the phone versions (the HTML page shows them below 600 px)."""
    out = {}
    lengths = charts.length_histogram_chart(plan.workload_lengths, narrow) if plan.workload_lengths else None
    for key, svg in (("memory", charts.memory_chart(plan, narrow=narrow)),
                     ("cost-time", charts.cost_time_chart(plan, narrow)), ("lengths", lengths)):
        if svg is not None:
            title, desc = CHART_TEXT[key]
            out[key] = charts.clean_svg(svg, id_prefix=f"chart-{key}" + ("-narrow" if narrow else ""), title=title,
                                        desc=desc.replace("{q}", ranking_quantile(plan)),
                                        variant="narrow" if narrow else "wide")
    return out


def render(plan: Plan, fmt: str, *, chart_dir: Path | None = None, chart_stem: str = "plan",
           plan_file: str = "plan.json", approval: ApprovalBlock | None = None) -> str:
    """The report as a string. HTML inlines its charts; Markdown writes them as
    `<chart_stem>-memory.svg` / `<chart_stem>-cost-time.svg` into `chart_dir` and links them
    (without `chart_dir` it omits the images and keeps their data tables)."""
    if fmt not in FORMATS:
        raise BadInput(f"report format: expected one of {', '.join(FORMATS)}, got {fmt!r}.")
    ctx = build_context(plan, plan_file) | {"approval": approval}  # report_approval.*.j2 (report --approval)
    svgs = _charts(plan)
    if fmt == "html":
        from markupsafe import Markup

        ctx["charts"] = {k: Markup(v) for k, v in svgs.items()}
        ctx["charts_narrow"] = {k: Markup(v) for k, v in _charts(plan, narrow=True).items()}
        return _env("html").get_template("report.html.j2").render(**ctx)
    links = {}
    if chart_dir is not None:
        for key, svg in svgs.items():
            name = f"{chart_stem}-{key}.svg"
            atomic_write(Path(chart_dir) / name, '<?xml version="1.0" encoding="utf-8"?>\n' + svg + "\n")
            links[key] = {"alt": CHART_TEXT[key][0], "href": Raw(quote(name))}
    ctx["charts"] = links
    ctx["command_block"] = md_code(plan.command) if plan.command else None
    ctx["launch_block"] = md_code(ctx["launch"])
    ctx["report_block"] = md_code(f"gpu-advisor report {_word(plan_file)} -o report.md")
    return _env("md").get_template("report.md.j2").render(**ctx)


def _word(text: str) -> str:
    """A file name as one shell word on one line (for the commands the report shows)."""
    return plain(shlex.quote(str(text)))


def chart_paths(path: Path) -> list[Path]:
    return [path.with_name(f"{path.stem}-{k}.svg") for k in CHART_TEXT]


class ReportWarning(UserWarning):
    """A file beside the report was replaced (the CLI prints it as one `warning:` line)."""


def write(plan: Plan, path: Path, *, plan_file: str = "plan.json", approval: ApprovalBlock | None = None) -> list[Path]:
    """Write the report to `path` (.html/.htm or .md, atomically). Returns every file written:
    the report first, then (Markdown) its chart SVGs, `<stem>-memory.svg` and
    `<stem>-cost-time.svg` beside it. A chart file that already exists there is replaced and
    named in a ReportWarning, so nothing beside the report is overwritten silently."""
    path = Path(path)
    fmt = SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise BadInput(f"--report/-o {plain(path.name)}: the suffix picks the format; expected "
                       f"{', '.join(SUFFIXES)}, got {plain(path.suffix) or 'no suffix'!r}.")
    if not path.parent.is_dir():
        raise BadInput(f"--report/-o {plain(path)}: folder {plain(path.parent)} does not exist.")
    if path.is_dir():
        raise BadInput(f"--report/-o {plain(path)}: is a folder; give a file name ending in .html or .md.")
    existing = [p for p in chart_paths(path) if os.path.lexists(p)] if fmt == "md" else []
    for p in existing:
        if p.is_dir():
            raise BadInput(f"--report/-o {plain(path)}: {plain(p.name)} beside it is a folder; the Markdown "
                           "report writes its chart there; move it or choose another report name.")
    text = render(plan, fmt, chart_dir=path.parent if fmt == "md" else None, chart_stem=path.stem,
                  plan_file=plan_file, approval=approval)
    for p in existing:
        if _linked(text, p.name):
            warnings.warn(f"replaced {plain(p)} (the report's chart beside {plain(path.name)})", ReportWarning,
                          stacklevel=2)
    atomic_write(path, text)
    written = [path]
    if fmt == "md":
        written += [p for p in chart_paths(path) if _linked(text, p.name)]
    return written


def _linked(text: str, name: str) -> bool:
    return f"({quote(name)})" in text
