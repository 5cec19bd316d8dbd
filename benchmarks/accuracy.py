"""Memory (and time) accuracy of the estimator against published measurements.

    python benchmarks/accuracy.py [--csv PATH] [--out benchmarks/results/accuracy.md]

For every usable row of benchmarks/data/calibration/measured_memory.csv: our estimate of the
same quantity the source measured (allocated -> peak_allocated, reserved -> peak_reserved,
nvidia-smi -> device_total, unknown -> peak_reserved), the measured value and the signed
error; fit-test rows check "fits / OOM" on the card. The same rows go through the other
calculators' formulas (benchmarks/baselines.py). Excluded rows are listed with their reason.
`main()` returns the summary dict (tests call it) and writes the tables as Markdown.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.baselines import BASELINES  # noqa: E402
from benchmarks.calibration_rows import CONF_ORDER, MEASURED_CSV, CalibrationRow, load_rows  # noqa: E402
from pricing.files import atomic_write  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
OURS = "ours"
KIND_FIELD = {
    "allocated": "peak_allocated",
    "reserved": "peak_reserved",
    "nvidia-smi": "device_total",
    "unknown": "peak_reserved",
}

Estimator = Callable[..., Any]  # (spec, stack, shape) -> object with peak_allocated/_reserved/device_total


def default_estimator() -> Estimator:
    from advisor.api import estimate_memory

    return estimate_memory


REPLAY = "ours, allocator replay"


def default_replay() -> Callable[..., Any]:
    """What max_memory_reserved shows on the measured (large) card by the caching-allocator replay at the
    row's fixed shape with the default allocator (the published runs set no expandable segments)."""
    from advisor.api import estimate_memory
    from advisor.estimate.alloc_trace import LengthSpec

    def shows(spec, stack, shape) -> int:
        fixed = LengthSpec(mean=shape.seq_len, std=0, max=shape.seq_len)
        return estimate_memory(spec, stack, shape, lengths=fixed, expandable_segments=False).reserved.shows

    return shows


def default_throughput() -> Callable[..., Any]:
    from advisor.api import estimate_throughput

    return estimate_throughput


def usable_bytes(gpu: str) -> int:
    from pricing.gpus import get_gpu

    return get_gpu(gpu).usable_bytes


def signed_error(estimate: float, measured: float) -> float:
    """Percent; negative = under-estimate (the one that OOMs)."""
    return (estimate - measured) / measured * 100.0


# ----------------------------------------------------------------------------- per row

def evaluate_row(row: CalibrationRow, estimate: Estimator | None, throughput: Callable[..., Any] | None) -> dict:
    """Our number, every baseline's, and the errors for one included row."""
    out: dict[str, Any] = {
        "id": row.id, "conf": row.conf, "kind": row.kind, "model": row.spec.name if row.spec else row.model_ref,
        "stack": row.stack.label() if row.stack else "", "micro_batch": row.shape.micro_batch if row.shape else None,
        "seq_len": row.shape.seq_len if row.shape else None, "gpu": row.gpu, "measured": row.measured_bytes,
        "fit_observed": row.fit_observed, "values": {}, "errors": {}, "fits": {}, "error": None,
        "assumptions": list(row.assumptions),
    }
    if estimate is not None:
        _our_value(out, row, estimate)
    _baseline_values(out, row)
    if row.measured_bytes:
        for name, value in out["values"].items():
            out["errors"][name] = signed_error(value, row.measured_bytes)
    if row.kind == "fit_test" and row.gpu:
        cap = usable_bytes(row.gpu)
        for name, value in out["values"].items():
            need = out.get("device_total", value) if name == OURS else value
            out["fits"][name] = need <= cap
    if throughput is not None and row.tokens_per_sec_total and row.gpu:
        _throughput_value(out, row, throughput)
    return out


def _our_value(out: dict, row: CalibrationRow, estimate: Estimator) -> None:
    try:
        if row.transformers:  # the release the source ran (calibration_rows.RELEASE_BY_SOURCE)
            from advisor.model.release import parse

            est = estimate(row.spec, row.stack, row.shape, transformers=parse(row.transformers))
        else:
            est = estimate(row.spec, row.stack, row.shape)
        field = KIND_FIELD.get(row.kind, "device_total")
        out["values"][OURS] = int(getattr(est, field))
        out["device_total"] = int(est.device_total)
    except Exception as exc:  # noqa: BLE001 - a failing row is reported, not fatal
        out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _baseline_values(out: dict, row: CalibrationRow) -> None:
    for name, fn in BASELINES.items():
        try:
            value = fn(row.spec, row.params, row.stack, row.shape)
        except Exception as exc:  # noqa: BLE001
            value = None
            out["assumptions"].append(f"{name} failed: {exc}")
        if value is not None:
            out["values"][name] = int(value)


def _throughput_value(out: dict, row: CalibrationRow, throughput: Callable[..., Any]) -> None:
    try:
        t = throughput(row.spec, row.stack, row.shape, row.gpu, grad_accum=row.grad_accum, nodes=1)
        out["tps_measured"] = row.tokens_per_sec_total
        out["tps_predicted"] = float(t.tokens_per_sec)
        out["tps_error"] = signed_error(out["tps_predicted"], row.tokens_per_sec_total)
    except Exception as exc:  # noqa: BLE001
        out["tps_failure"] = f"{type(exc).__name__}: {exc}"


# ----------------------------------------------------------------------------- summaries

def summarise(results: list[dict], name: str, ids: set[str] | None = None) -> dict:
    """Median / p90 |error|, share within 10 %, worst under-estimate, fit agreement for `name`."""
    pool = [r for r in results if ids is None or r["id"] in ids]
    errs = [(r["errors"][name], r["id"], r["conf"]) for r in pool if name in r["errors"]]
    fit = [(r["fits"][name], r["fit_observed"] == "fits") for r in pool if name in r["fits"]]
    s: dict[str, Any] = {"rows": len(errs), "fit_rows": len(fit)}
    if errs:
        absolute = sorted(abs(e) for e, _, _ in errs)
        s["median_abs"] = statistics.median(absolute)
        s["p90_abs"] = _percentile(absolute, 90)
        s["within_10"] = sum(a <= 10 for a in absolute) / len(absolute)
        worst = min(errs)
        s["worst_under"] = worst[0]
        s["worst_under_id"] = worst[1]
        high = [e for e in errs if e[2] == "high"]
        if high:
            s["worst_under_high"] = min(high)[0]
            s["worst_under_high_id"] = min(high)[1]
    if fit:
        s["fit_agree"] = sum(pred == obs for pred, obs in fit) / len(fit)
        s["fit_wrong"] = [r["id"] for r in pool if name in r["fits"] and r["fits"][name] != (r["fit_observed"] == "fits")]
    return s


def _percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), on an ascending list."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    k = (len(sorted_values) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def better(ours: dict, theirs: dict) -> dict[str, bool | None]:
    """Per summary figure: is ours at least as good as the baseline on the same rows?"""
    def cmp(key: str, lower_is_better: bool) -> bool | None:
        if key not in ours or key not in theirs:
            return None
        return ours[key] <= theirs[key] if lower_is_better else ours[key] >= theirs[key]

    out = {
        "median_abs": cmp("median_abs", True),
        "p90_abs": cmp("p90_abs", True),
        "within_10": cmp("within_10", False),
        "fit_agree": cmp("fit_agree", False),
    }
    if "worst_under" in ours and "worst_under" in theirs:
        out["worst_under"] = ours["worst_under"] >= theirs["worst_under"]  # closer to 0 from below
    return out


def evaluate(rows: list[CalibrationRow], estimate: Estimator | None = None,
             throughput: Callable[..., Any] | None = None, replay: Callable[..., Any] | None = None) -> dict:
    results = [evaluate_row(r, estimate, throughput) for r in rows if r.included]
    if replay is not None:
        _replay_errors(rows, results, replay)
    summary: dict[str, Any] = {
        "rows_total": len(rows),
        "rows_included": len(results),
        "rows_excluded": len(rows) - len(results),
        "excluded": {r.id: r.excluded for r in rows if not r.included},
        "estimator_errors": {r["id"]: r["error"] for r in results if r["error"]},
        "estimators": {},
        "by_conf": {},
        "versus": {},
        "results": results,
    }
    names = ([OURS] if estimate is not None else []) + list(BASELINES)
    for name in names:
        summary["estimators"][name] = summarise(results, name)
        summary["by_conf"][name] = {c: summarise([r for r in results if r["conf"] == c], name) for c in CONF_ORDER}
    if estimate is not None:
        _ours_apart(summary, results, replay is not None)
        summary["classes"] = class_summaries(rows, results)
    tps = [r for r in results if "tps_error" in r]
    if tps:
        absolute = sorted(abs(r["tps_error"]) for r in tps)
        summary["throughput"] = {
            "rows": len(tps),
            "median_abs": statistics.median(absolute),
            "p90_abs": _percentile(absolute, 90),
            "within_20": sum(a <= 20 for a in absolute) / len(absolute),
        }
    summary["goals"] = goals(summary)
    return summary


def _ours_apart(summary: dict, results: list[dict], replayed: bool) -> None:
    """Ours by measured quantity (allocated and reserved are different quantities: their errors apart), by the
    allocator replay, and against each baseline on the rows it covers."""
    summary["by_kind"] = {k: summarise([r for r in results if r["kind"] == k], OURS) for k in KIND_FIELD}
    if replayed:
        summary["by_kind_replay"] = {k: summarise([r for r in results if r["kind"] == k], REPLAY)
                                     for k in KIND_FIELD if k != "allocated"}
    for name in BASELINES:
        ids = {r["id"] for r in results if name in r["values"] and OURS in r["values"]}
        o, t = summarise(results, OURS, ids), summarise(results, name, ids)
        summary["versus"][name] = {"rows": len(ids), "ours": o, "theirs": t, "ours_better": better(o, t)}


# ----------------------------------------------------------------------------- issue 48's mechanism classes

def source_of(row_id: str) -> str:
    """A row's source: its id's prefix (lf-06 -> lf), as SOURCES.md names them."""
    return row_id.rsplit("-", 1)[0]


def _row_classes(row: CalibrationRow) -> list[str]:
    from advisor.estimate.throughput import mechanism_classes
    from pricing.gpus import get_gpu

    if row.stack is None:
        return []
    # no card named: the row cannot be placed among the no-P2P cards (H100 has P2P), the other classes can
    return mechanism_classes(get_gpu(row.gpu or "H100"), row.stack)


def class_summaries(rows: list[CalibrationRow], results: list[dict]) -> dict[str, dict]:
    """Per mechanism class (consumer multi-GPU without P2P, DoRA, QLoRA, CPU offload): the memory rows with our
    error (rows, sources, median |error|, signed median) and the time model's leave-one-source-out figures that
    benchmarks/time_calibration.py wrote (mfu.json fit.held_out_by_group). The memory estimator fits nothing to
    the published rows, so each memory error is already held out."""
    from advisor.estimate.throughput import MECHANISM_CLASSES, table

    by_id = {r.id: r for r in rows}
    members: dict[str, list[dict]] = {name: [] for name in MECHANISM_CLASSES}
    for r in results:
        if OURS in r["errors"]:
            for name in _row_classes(by_id[r["id"]]):
                members[name].append(r)
    time_groups = (table().get("fit") or {}).get("held_out_by_group") or {}
    out = {}
    for name, pool in members.items():
        errs = [r["errors"][OURS] for r in pool]
        memory: dict[str, Any] = {"rows": len(errs), "sources": sorted({source_of(r["id"]) for r in pool})}
        if errs:
            memory.update(median_abs=statistics.median(abs(e) for e in errs), signed_median=statistics.median(errs))
        out[name] = {"memory": memory, "time": time_groups.get(name) or {"rows": 0, "sources": 0}}
    return out


def thin(rows: int, sources: int) -> bool:
    """Fewer than 3 rows or a single source: the figure is not evidence enough for a band of its own."""
    from advisor.estimate.throughput import THIN_CLASS_ROWS, THIN_CLASS_SOURCES

    return rows < THIN_CLASS_ROWS or sources < THIN_CLASS_SOURCES


def _replay_errors(rows: list[CalibrationRow], results: list[dict], replay: Callable[..., Any]) -> None:
    """The replayed reserved figure (plus the CUDA context for nvidia-smi rows) and its error, per row
    that measured something reserved."""
    from advisor.estimate.memory import CUDA_CONTEXT_BYTES

    by_id = {r.id: r for r in rows}
    for out in results:
        row = by_id[out["id"]]
        if out["kind"] not in ("reserved", "unknown", "nvidia-smi") or out["error"] or not row.measured_bytes:
            continue
        try:
            value = int(replay(row.spec, row.stack, row.shape)) + (CUDA_CONTEXT_BYTES if out["kind"] == "nvidia-smi" else 0)
        except Exception as exc:  # noqa: BLE001 - reported beside the row, not fatal
            out["assumptions"].append(f"allocator replay failed: {exc}")
            continue
        out["errors"][REPLAY] = signed_error(value, row.measured_bytes)


def goals(summary: dict) -> dict[str, bool | None]:
    ours = summary["estimators"].get(OURS)
    if not ours or "median_abs" not in ours:
        return {}
    high = summary["by_conf"][OURS]["high"]
    out: dict[str, bool | None] = {
        "median_abs_le_10": ours["median_abs"] <= 10,
        "no_high_conf_under_worse_than_-10": high.get("worst_under", 0) >= -10 if high.get("rows") else None,
        "best_on_every_summary": all(
            v is not False for vs in summary["versus"].values() for v in vs["ours_better"].values()
        ),
    }
    if "throughput" in summary:
        out["throughput_median_abs_le_20"] = summary["throughput"]["median_abs"] <= 20
    return out


# ----------------------------------------------------------------------------- rendering

def _gb(b: int | None) -> str:
    return "" if b is None else f"{b / 1e9:.2f}"


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:+.1f}%"


def render(summary: dict, source: Path, today: str) -> str:
    """The Markdown report (also what is printed)."""
    names = list(summary["estimators"])
    lines = [
        "# Memory estimate accuracy",
        "",
        f"Date: {today}. Data: `{_display(source)}` ({summary['rows_total']} published rows; "
        f"{summary['rows_included']} used, {summary['rows_excluded']} excluded with reasons below). "
        "Memory in GB (1e9). Error = (estimate - measured) / measured; negative is an under-estimate.",
        "Each row is compared like with like: max_memory_allocated with our peak_allocated, reserved "
        "with peak_reserved, nvidia-smi with device_total, unstated metric with peak_reserved. "
        "Fit tests: our device_total against the card's usable memory.",
        "",
        "## Summary (all rows each estimator applies to)",
        "",
        "| estimator | rows | median abs err | p90 abs err | within 10% | worst under-estimate | fit tests agree |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [_summary_line(name, summary["estimators"][name]) for name in names]
    lines += _render_versus(summary) + _render_by_kind(summary) + _render_by_conf(summary, names)
    lines += _render_throughput(summary) + _render_classes(summary) + _render_tail(summary)
    return "\n".join(lines) + "\n"


def _render_versus(summary: dict) -> list[str]:
    if not summary["versus"]:
        return []
    lines = ["", "## Ours vs each baseline on the rows the baseline covers", "",
             "| baseline | rows + fit tests | median abs (ours / theirs) | p90 abs (ours / theirs) | within 10% (ours / theirs) "
             "| worst under (ours / theirs) | fit agree (ours / theirs) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, v in summary["versus"].items():
        o, t = v["ours"], v["theirs"]
        lines.append(
            f"| {name} | {t['rows']} + {t['fit_rows']} fit | {_f(o, 'median_abs')} / {_f(t, 'median_abs')} | "
            f"{_f(o, 'p90_abs')} / {_f(t, 'p90_abs')} | {_share(o, 'within_10')} / {_share(t, 'within_10')} | "
            f"{_f(o, 'worst_under', signed=True)} / {_f(t, 'worst_under', signed=True)} | "
            f"{_share(o, 'fit_agree')} / {_share(t, 'fit_agree')} |"
        )
    return lines


def _worst_id(s: dict) -> str:
    return f"{' (' + s['worst_under_id'] + ')' if s.get('worst_under_id') else ''}"


def _render_by_kind(summary: dict) -> list[str]:
    if not summary.get("by_kind"):
        return []
    lines = ["", "## Ours by measured quantity (allocated and reserved errors apart)", "",
             "The published rows give no length distribution: reserved figures are for fixed shapes, by the "
             "formula slack (`peak_reserved`) and by the caching-allocator replay (`reserved.shows` of "
             "`estimate --lengths MEAN,0,MEAN`, default allocator); `estimate --lengths` replays variable "
             "lengths.", "",
             "| measured | compared with | rows | median abs err | p90 abs err | within 10% | worst under-estimate |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for kind, s in summary["by_kind"].items():
        lines.append(f"| {kind} | {KIND_FIELD[kind]} | {s['rows']} | {_f(s, 'median_abs')} | {_f(s, 'p90_abs')} | "
                     f"{_share(s, 'within_10')} | {_f(s, 'worst_under', signed=True)}{_worst_id(s)} |")
    for kind, s in summary.get("by_kind_replay", {}).items():
        lines.append(f"| {kind} | allocator replay, `shows` at fixed shapes | {s['rows']} | {_f(s, 'median_abs')} | "
                     f"{_f(s, 'p90_abs')} | {_share(s, 'within_10')} | {_f(s, 'worst_under', signed=True)}"
                     f"{_worst_id(s)} |")
    return lines


def _render_by_conf(summary: dict, names: list[str]) -> list[str]:
    lines = ["", "## By confidence", ""]
    for conf in CONF_ORDER:
        lines += [f"### conf={conf}", "",
                  "| estimator | rows | median abs err | p90 abs err | within 10% | worst under-estimate | fit tests agree |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        lines += [_summary_line(name, summary["by_conf"][name][conf]) for name in names]
        lines.append("")
        lines += _row_table([r for r in summary["results"] if r["conf"] == conf], names)
        lines.append("")
    return lines


def _render_throughput(summary: dict) -> list[str]:
    if "throughput" not in summary:
        return []
    t = summary["throughput"]
    lines = ["## Throughput (tokens/s, total over the run's GPUs)", "",
             f"{t['rows']} rows; median abs error {t['median_abs']:.1f}%, p90 {t['p90_abs']:.1f}%, "
             f"within 20%: {t['within_20']:.0%}.", "",
             "| row | gpu | stack | mb x seq | measured tok/s | predicted tok/s | error |",
             "|---|---|---|---|---:|---:|---:|"]
    for r in summary["results"]:
        if "tps_error" in r:
            lines.append(f"| {r['id']} | {r['gpu']} | {r['stack']} | {r['micro_batch']}x{r['seq_len']} | "
                         f"{r['tps_measured']:.0f} | {r['tps_predicted']:.0f} | {_pct(r['tps_error'])} |")
    lines.append("")
    return lines


def _class_cells(fig: dict, scale: float, thin_words: str) -> str:
    """rows | sources | median |error| | signed median | status, for one class's memory or time figures."""
    rows = fig.get("rows", 0)
    sources = fig["sources"] if isinstance(fig["sources"], int) else len(fig["sources"])
    if not rows:
        return "0 | 0 | | | no rows: uncalibrated"
    status = thin_words if thin(rows, sources) else "calibrated"
    return (f"{rows} | {sources} | {fig['median_abs'] * scale:.1f}% | {fig['signed_median'] * scale:+.1f}% | "
            f"{status}")


TIME_THIN = "thin: the time band widens to the held-out GPU classes' (advisor.estimate.throughput.band)"


def _render_classes(summary: dict) -> list[str]:
    """Issue 48's mechanism classes: memory (this file's rows) and time (leave-one-source-out) apart."""
    if not summary.get("classes"):
        return []
    lines = ["## Held out per mechanism class (issue 48)", "",
             "Memory: the rows above (nothing is fitted to them, so every error is held out). Time: leave-one-source-"
             "out figures of `benchmarks/time_calibration.py` (mfu.json `fit.held_out_by_group`). Thin: fewer than 3 "
             "rows or one source.", "",
             "| class | measured | rows | sources | median abs err | signed median | status |",
             "|---|---|---:|---:|---:|---:|---|"]
    for name, c in summary["classes"].items():
        lines.append(f"| {name} | memory | {_class_cells(c['memory'], 1.0, 'thin')} |")
        time = c["time"]
        time = {**time, "median_abs": time.get("median_abs_error", 0.0)} if time.get("rows") else time
        lines.append(f"| {name} | time | {_class_cells(time, 100.0, TIME_THIN)} |")
    lines.append("")
    return lines


def _render_tail(summary: dict) -> list[str]:
    lines = []
    if summary.get("goals"):
        lines += ["## Goals", ""] + [f"- {k}: {'yes' if v else 'NO' if v is False else 'n/a'}"
                                     for k, v in summary["goals"].items()] + [""]
    if summary["estimator_errors"]:
        lines += ["## Rows the estimator failed on", ""]
        lines += [f"- {k}: {v}" for k, v in summary["estimator_errors"].items()] + [""]
    notes = [(r["id"], a) for r in summary["results"] for a in r["assumptions"] if not a.startswith("unit GB (notes")]
    if notes:
        lines += ["## Assumptions made while mapping rows", "", "| row | assumption |", "|---|---|"]
        lines += [f"| {i} | {a} |" for i, a in notes] + [""]
    lines += ["## Excluded rows", "", "| row | reason |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in summary["excluded"].items()]
    return lines


def _f(s: dict, key: str, signed: bool = False) -> str:
    if key not in s:
        return "–"
    return f"{s[key]:+.1f}%" if signed else f"{s[key]:.1f}%"


def _share(s: dict, key: str) -> str:
    return f"{s[key]:.0%}" if key in s else "–"


def _summary_line(name: str, s: dict) -> str:
    worst = f"{s['worst_under']:+.1f}% ({s['worst_under_id']})" if "worst_under" in s else "–"
    fit = f"{s['fit_agree']:.0%} of {s['fit_rows']}" if "fit_agree" in s else "–"
    return (f"| {name} | {s['rows']} | {_f(s, 'median_abs')} | {_f(s, 'p90_abs')} | {_share(s, 'within_10')} | "
            f"{worst} | {fit} |")


def _row_table(results: list[dict], names: list[str]) -> list[str]:
    if not results:
        return ["(no rows)"]
    short = {n: n.split(" (")[0] for n in names}
    head = "| row | kind | model | stack | mb x seq | measured GB | " + " | ".join(short[n] for n in names) + " |"
    lines = [head, "|" + "---|" * 6 + "---:|" * len(names)]
    for r in results:
        cells = []
        for n in names:
            if n in r["errors"]:
                cells.append(f"{_gb(r['values'][n])} ({_pct(r['errors'][n])})")
            elif n in r["fits"]:
                ok = r["fits"][n] == (r["fit_observed"] == "fits")
                cells.append(f"{_gb(r['values'][n])} {'fits' if r['fits'][n] else 'OOM'} {'✓' if ok else '✗'}")
            elif n == OURS and r["error"]:
                cells.append("error")
            else:
                cells.append("–")
        measured = _gb(r["measured"]) if r["measured"] else f"{r['fit_observed']} on {r['gpu']}"
        model = r["model"].split("/")[-1]
        lines.append(f"| {r['id']} | {r['kind']} | {model} | {r['stack']} | {r['micro_batch']}x{r['seq_len']} | "
                     f"{measured} | " + " | ".join(cells) + " |")
    return lines


def _display(path: Path) -> str:
    try:
        return os.path.relpath(path.resolve(), Path(__file__).resolve().parents[1])
    except ValueError:
        return str(path)


# ----------------------------------------------------------------------------- entry point

def main(argv: list[str] | None = None, *, estimate: Estimator | None = None,
         throughput: Callable[..., Any] | None = None) -> dict:
    """Run the benchmark, print the tables, write the Markdown; returns the summary dict."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=MEASURED_CSV, help="measured_memory.csv to read")
    parser.add_argument("--out", type=Path, default=RESULTS / "accuracy.md", help="Markdown file to write")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--quiet", action="store_true", help="do not print the tables")
    args = parser.parse_args(argv)
    if not args.csv.is_file():
        print(f"error: --csv: no such file {args.csv} (the calibration data lives in benchmarks/data/calibration)",
              file=sys.stderr)
        raise SystemExit(2)
    replay = default_replay() if estimate is None else None  # the replay re-runs the real estimator
    estimate = estimate or default_estimator()
    throughput = throughput or default_throughput()
    summary = evaluate(load_rows(args.csv), estimate, throughput, replay)
    today = dt.date.today().isoformat()
    text = render(summary, args.csv, today)
    if not args.quiet:
        print(text)
    if not args.no_write:
        atomic_write(args.out, text)
    summary["date"] = today
    summary["markdown"] = text
    return summary


if __name__ == "__main__":
    main()
