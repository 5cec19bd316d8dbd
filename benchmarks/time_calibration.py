"""Time model vs published throughput, judged on sources it was not fitted to.

Every included row of `benchmarks/throughput_rows.py` (published_throughput.csv + the memory set's
rows with tokens/s) is predicted by `advisor.estimate.throughput.step_time` with the same counts the engine
uses. The few fitted constants (mfu.json `fitted`: training-matmul efficiency, host dispatch time per
kernel, fixed step overhead, ZeRO-3 parameter fetch) are judged by leave-one-source-out
cross-validation: fit on every source but one, predict the held-out source, repeat. The fit is
deterministic: least squares on the log error (each source's rows weighted so a source counts in
proportion to the square root of its row count), by coordinate search on a log grid that halves
its step each round.

Every row carries its source's training framework (benchmarks/data/throughput/frameworks.csv): the
'hf' constants (matmul efficiency, module-call host time, Trainer step overhead) are only seen by
HF-stack rows, the 'tuned' ones by tuned-framework rows, the shared ones (kernel dispatch, ZeRO-3 fetch)
by both. Held-out predictions of 'hf' rows are capped by the plausibility guard built from the other
sources' rows (the best measured MFU per GPU class × method × model size, by any framework).

Printed: each row's held-out prediction, the per-source held-out table (rows, median |error|, signed
median, worst) for all sources and for the HF-stack sources, the overall held-out figures, the
constants fitted on all sources, and the error bands per segment (GPU class × method, and per
framework where it has rows) that `advisor.estimate.throughput.band()` returns. `--write` (the default)
rewrites benchmarks/results/time_calibration.md and mfu.json's `fitted`, `fit`, `bands` and
`plausibility`.

Run: python benchmarks/time_calibration.py [--no-write] [--quiet]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.estimate.engine import Engine  # noqa: E402
from advisor.estimate.throughput import (  # noqa: E402
    MECHANISM_CLASSES,
    MFU_FILE,
    RDMA_GBPS,
    Counts,
    flops_per_token,
    gpu_class,
    mechanism_classes,
    segment,
    size_bucket,
    step_time,
    sustained_fraction,
    table,
)
from benchmarks.throughput_rows import TimeRow, load_rows  # noqa: E402
from pricing.gpus import GPU, get_gpu  # noqa: E402

RESULTS_MD = ROOT / "benchmarks" / "results" / "time_calibration.md"

# The fitted constants and the box the search stays in (physically plausible ranges).
BOUNDS: dict[str, tuple[float, float]] = {
    "matmul_efficiency_hf": (0.3, 1.0),
    "matmul_efficiency_tuned": (0.3, 1.0),
    "dispatch_seconds_per_kernel": (1e-6, 2e-4),
    "module_call_seconds_hf": (1e-7, 2e-4),
    "step_overhead_s_hf": (1e-3, 3.0),
    "step_overhead_s_tuned": (1e-3, 3.0),
    "zero3_param_fetch_s": (1e-6, 1e-2),
    "socket_network_efficiency": (0.2, 1.0),
}
START = {"matmul_efficiency_hf": 0.75, "matmul_efficiency_tuned": 0.75, "dispatch_seconds_per_kernel": 1e-5,
         "module_call_seconds_hf": 1e-5, "step_overhead_s_hf": 0.05, "step_overhead_s_tuned": 0.05,
         "zero3_param_fetch_s": 1e-4, "socket_network_efficiency": 0.5}
ROUNDS, GRID = 12, 9
SHRINK_ROWS = 10  # a segment with n rows trusts its own quantiles with weight n / (n + 10)
# Pretraining-style sources (SOURCES.md: same work per token as a full fine-tune of the architecture, but
# their own training loops); the report also gives the held-out figures without them.
PRETRAINING = ("llmf", "titan", "ibmfsdp", "tinyllama")
FRAMEWORK_NAMES = ("hf", "tuned")


@dataclass
class Case:
    row: TimeRow
    counts: Counts
    gpu: GPU

    @property
    def source(self) -> str:
        return self.row.source

    @property
    def segment(self) -> str:
        return segment(self.gpu, self.row.stack)


def cases(rows: list[TimeRow] | None = None) -> tuple[list[Case], list[TimeRow]]:
    """(cases to fit and judge, excluded rows with their reasons)."""
    rows = load_rows() if rows is None else rows
    out = [Case(r, Engine.of(r.spec).counts(r.stack), _gpu(r)) for r in rows if r.included]
    return out, [r for r in rows if not r.included]


def _gpu(row: TimeRow) -> GPU:
    """The row's card from the GPU table, with its own GPU-to-GPU link where the source's card differs (A800/H800,
    a board's slow PCIe lanes) and the power cap the source set."""
    gpu = get_gpu(row.gpu)
    if row.link_gb_s:
        gpu = dataclasses.replace(gpu, link_gb_s_per_direction=row.link_gb_s)
    return dataclasses.replace(gpu, power_limit_w=row.power_w) if row.power_w else gpu


def predict(case: Case, fitted: dict[str, float] | None = None, caps: dict | None = None) -> float:
    """Predicted tokens/s; `caps` are the plausibility caps to apply ({} — the default while fitting — none)."""
    r = case.row
    return step_time(case.counts, r.stack, r.shape, case.gpu, grad_accum=r.shape.grad_accum or 1, nodes=r.nodes,
                     network_gbps=r.network_gbps, fitted=fitted, with_band=False,
                     caps={} if caps is None else caps, host_vcpus_per_gpu=r.host_vcpus_per_gpu).tokens_per_sec


def log_error(case: Case, fitted: dict[str, float] | None = None, caps: dict | None = None) -> float:
    """log(predicted / measured): positive when the model promises more tokens/s than measured."""
    return math.log(predict(case, fitted, caps) / case.row.tokens_per_sec)


def measured_mfu(case: Case) -> float:
    """Model FLOPs per second over the dense peak of the row's GPUs, as measured."""
    r = case.row
    model_fpt, _ = flops_per_token(case.counts, r.stack, r.shape.seq_len)
    return r.tokens_per_sec * model_fpt / (r.stack.gpus * case.gpu.peak_tflops(r.stack.precision) * 1e12)


def sets_cap(row: TimeRow) -> bool:
    """Whether a row's measured MFU is evidence of what its GPU class can reach (plausibility_caps)."""
    if row.stack.offload != "none":
        return False
    return row.nodes == 1 or (row.network_gbps or RDMA_GBPS) >= RDMA_GBPS


def plausibility_caps(group: list[Case]) -> dict[str, dict]:
    """The best measured run per GPU class × method × model size (and the wider keys `mfu_cap` falls back
    to), by any framework: the most an 'hf' prediction may claim. Compared as the share of the card's
    sustained matmul rate, so a cap carries over between cards of a class. Rows whose pace something other
    than the GPU sets — CPU offload (the host's optimizer step and PCIe), several nodes on a network without RDMA
    (TCP sockets) — say nothing about the most a card can do, and set no cap."""
    best: dict[str, tuple[float, Case]] = {}
    seen: dict[str, int] = {}
    for c in group:
        if not sets_cap(c.row):
            continue
        share = measured_mfu(c) / sustained_fraction(c.gpu)
        cls, method, bucket = gpu_class(c.gpu), c.row.stack.method, size_bucket(c.counts.params_total)
        for key in (f"{cls}/{method}/{bucket}", f"{cls}/{method}", f"*/{method}/{bucket}", f"*/{method}"):
            seen[key] = seen.get(key, 0) + 1
            if key not in best or share > best[key][0]:
                best[key] = (share, c)
    # the best of one or two runs is no ceiling (one short-sequence L40S full fine-tune would cap every Ada full
    # fine-tune): a key needs CAP_MIN_ROWS rows, else mfu_cap falls back to the wider keys
    return {key: {"mfu": round(measured_mfu(c), 4), "sustained_fraction": sustained_fraction(c.gpu), "row": c.row.id,
                  "source": c.source, "framework": c.row.framework, "gpu": c.row.gpu, "rows": seen[key]}
            for key, (_, c) in sorted(best.items()) if seen[key] >= CAP_MIN_ROWS}


CAP_MIN_ROWS = 3


# Huber loss on the log error (Huber 1964): squared within ±HUBER_DELTA (a factor of 1.5), linear beyond, so a
# row some unmodelled mechanism puts off by 3× (a 70B run thrashing a 24 GB card's allocator) pulls the shared
# constants no harder than a few rows off by 60%.
HUBER_DELTA = math.log(1.5)


def huber(e: float, delta: float = HUBER_DELTA) -> float:
    a = abs(e)
    return e * e if a <= delta else delta * (2 * a - delta)


def objective(group: list[Case], fitted: dict[str, float]) -> float:
    """Σ over sources of √n_s × (mean Huber loss of the source's log errors)."""
    by: dict[str, list[float]] = {}
    for c in group:
        by.setdefault(c.source, []).append(huber(log_error(c, fitted)))
    return sum(math.sqrt(len(v)) * sum(v) / len(v) for v in by.values())


def fit(group: list[Case], start: dict[str, float] | None = None) -> dict[str, float]:
    """Deterministic coordinate search on a log grid (GRID points per constant, ROUNDS rounds, the
    half-width halving each round), inside BOUNDS."""
    x = {k: math.log(v) for k, v in (start or START).items()}
    width = {k: math.log(4.0) for k in x}
    best = objective(group, {k: math.exp(v) for k, v in x.items()})
    for _ in range(ROUNDS):
        for k in BOUNDS:
            lo, hi = (math.log(b) for b in BOUNDS[k])
            for i in range(GRID):
                v = min(hi, max(lo, x[k] - width[k] + 2 * width[k] * i / (GRID - 1)))
                trial = {**x, k: v}
                f = objective(group, {kk: math.exp(vv) for kk, vv in trial.items()})
                if f < best - 1e-12:
                    best, x = f, trial
            width[k] /= 2
    return {k: math.exp(v) for k, v in x.items()}


# ----------------------------------------------------------------------------- statistics


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default), pure Python."""
    s = sorted(values)
    if not s:
        return 0.0
    pos = q * (len(s) - 1)
    i = int(math.floor(pos))
    j = min(i + 1, len(s) - 1)
    return s[i] + (s[j] - s[i]) * (pos - i)


def pct(log_err: float) -> float:
    """Signed relative error of tokens/s (predicted − measured) / measured."""
    return math.exp(log_err) - 1.0


def summary(errs: list[float]) -> dict[str, float]:
    """rows, median |error|, signed median, worst (largest |error|, signed), p90 |error| — in relative terms."""
    rel = [pct(e) for e in errs]
    worst = max(rel, key=abs) if rel else 0.0
    return {"rows": len(rel), "median_abs": statistics.median(abs(r) for r in rel) if rel else 0.0,
            "signed_median": statistics.median(rel) if rel else 0.0, "worst": worst,
            "p90_abs": quantile([abs(r) for r in rel], 0.9)}


BAND_QUANTILES = (0.1, 0.2, 0.8, 0.9)  # stored per segment; low/high are the p10/p90


def segment_quantile(seg_errs: list[float], q: float, global_q: float, global_half: float,
                     shrink: int = SHRINK_ROWS) -> float:
    """Quantile q (< 0.5: the slow side, > 0.5: the fast side) of log(measured/predicted) for a segment.

    The segment's own quantile is pulled toward the wider of it and the global quantile with weight
    shrink / (n + shrink), then widened by the sampling error of a quantile read off n rows (it shrinks
    as 1/√n): the global p10-p90 half-width / √(n + 1). For the same errors, fewer rows never give a
    narrower band; a segment without rows gets the global quantile widened by the
    whole half-width. Tails never cross 0, so the interval holds the point estimate."""
    n = len(seg_errs)
    margin = global_half / math.sqrt(n + 1)
    slow = q < 0.5
    if n == 0:
        base = global_q
    else:
        own = quantile(seg_errs, q)
        w = n / (n + shrink)
        base = w * own + (1 - w) * (min(own, global_q) if slow else max(own, global_q))
    return min(base, 0.0) - margin if slow else max(base, 0.0) + margin


def segment_band(seg_errs: list[float], global_lo: float, global_hi: float, shrink: int = SHRINK_ROWS
                 ) -> tuple[float, float]:
    """(low, high) log-ratio band for a segment: its p10 and p90 by `segment_quantile`."""
    half = (global_hi - global_lo) / 2
    return (segment_quantile(seg_errs, 0.1, global_lo, half, shrink),
            segment_quantile(seg_errs, 0.9, global_hi, half, shrink))


# ----------------------------------------------------------------------------- the run


def held_out(all_cases: list[Case]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Leave-one-source-out: (row id -> held-out log(pred/measured), source -> constants fitted without it)."""
    held: dict[str, float] = {}
    folds: dict[str, dict[str, float]] = {}
    for s in sorted({c.source for c in all_cases}):
        train = [c for c in all_cases if c.source != s]
        k = fit(train)
        folds[s] = k
        caps = plausibility_caps(train)  # the guard as the other sources set it
        for c in all_cases:
            if c.source == s:
                held[c.row.id] = log_error(c, k, caps)
    return held, folds


def unseen_class_errors(all_cases: list[Case]) -> list[float]:
    """GPU classes held out whole: the errors behind the band for a class with no calibration rows."""
    unseen: list[float] = []
    for cls in sorted({gpu_class(c.gpu) for c in all_cases}):
        train = [c for c in all_cases if gpu_class(c.gpu) != cls]
        if not train:
            continue
        k = fit(train)
        caps = plausibility_caps(train)
        unseen += [log_error(c, k, caps) for c in all_cases if gpu_class(c.gpu) == cls]
    return unseen


def _band_entry(errs: list[float], rows: int, qs: dict[float, float], half: float) -> dict:
    qv = {q: segment_quantile(errs, q, qs[q], half) for q in BAND_QUANTILES}
    return {"rows": rows, "low": round(math.exp(qv[0.1]), 4), "high": round(math.exp(qv[0.9]), 4),
            "quantiles": {str(q): round(math.exp(v), 4) for q, v in qv.items()}}


def _by_segment(all_cases: list[Case], ratios: dict[str, float], framework: str | None = None) -> dict[str, list]:
    segs: dict[str, list[float]] = {}
    for c in all_cases:
        if framework is None or c.row.framework == framework:
            segs.setdefault(c.segment, []).append(ratios[c.row.id])
    return segs


def _unseen_band(unseen: list[float], g: dict[float, float], half: float, segments: dict[str, dict]) -> dict:
    """A class without rows: the errors of whole classes held out (never narrower than the global band), widened as
    a segment without rows is, and never narrower than the least certain calibrated segment (a GPU nobody measured
    is no better known than the worst-known one that was measured)."""
    held_classes = [-e for e in unseen]
    uq = {q: (min if q < 0.5 else max)(quantile(held_classes, q) if held_classes else g[q], g[q])
          for q in BAND_QUANTILES}
    band = {**_band_entry([], 0, uq, half), "held_out_class_rows": len(unseen)}
    u = band["quantiles"]
    for q in BAND_QUANTILES:
        side = min if q < 0.5 else max
        u[str(q)] = side([u[str(q)]] + [b["quantiles"][str(q)] for b in segments.values()])
    band.update(low=u["0.1"], high=u["0.9"])
    return band


def bands_of(all_cases: list[Case], held: dict[str, float], unseen: list[float]) -> dict:
    """The p10-p90 bands per segment, per framework's segment, for all rows and for GPU classes without rows."""
    ratios = {rid: -e for rid, e in held.items()}  # the band is measured/predicted: −log(pred/measured)
    g = {q: quantile(list(ratios.values()), q) for q in BAND_QUANTILES}
    half = (g[0.9] - g[0.1]) / 2
    bands: dict = {"global": {"rows": len(ratios), "low": round(math.exp(min(g[0.1], 0)), 4),
                              "high": round(math.exp(max(g[0.9], 0)), 4)}, "segments": {}, "unseen": {}}
    for seg, errs in sorted(_by_segment(all_cases, ratios).items()):
        bands["segments"][seg] = _band_entry(errs, len(errs), g, half)
        bands["segments"][seg].update(p10_raw=round(math.exp(quantile(errs, 0.1)), 4),
                                      p90_raw=round(math.exp(quantile(errs, 0.9)), 4))
    bands["unseen"] = _unseen_band(unseen, g, half, bands["segments"])
    # per framework, where its rows allow (advisor.estimate.throughput uses a framework's segment from 3 rows on)
    bands["frameworks"] = {fw: {seg: _band_entry(errs, len(errs), g, half)
                                for seg, errs in sorted(_by_segment(all_cases, ratios, fw).items())}
                           for fw in FRAMEWORK_NAMES}
    return bands


def summaries(all_cases: list[Case], held: dict[str, float]) -> dict:
    """Held-out figures per source, overall, fine-tuning sources only and per framework."""
    sources = sorted({c.source for c in all_cases})
    per_source = {s: summary([held[c.row.id] for c in all_cases if c.source == s]) for s in sources}
    overall = summary(list(held.values()))
    overall["source_median_of_medians"] = statistics.median(v["median_abs"] for v in per_source.values())
    return {"sources": sources, "per_source": per_source, "overall": overall,
            "finetune": summary([held[c.row.id] for c in all_cases if c.source not in PRETRAINING]),
            "by_framework": {fw: summary([held[c.row.id] for c in all_cases if c.row.framework == fw])
                             for fw in FRAMEWORK_NAMES},
            "framework_of": {c.source: c.row.framework for c in all_cases}}


def run(quiet: bool = False, write: bool = False, rows: list[TimeRow] | None = None) -> dict:
    """Leave-one-source-out, the all-source fit, bands; returns the figures (and writes them with `write`)."""
    all_cases, excluded = cases(rows)
    held, folds = held_out(all_cases)
    final = fit(all_cases)
    all_caps = plausibility_caps(all_cases)
    insample = {c.row.id: log_error(c, final, all_caps) for c in all_cases}
    unseen = unseen_class_errors(all_cases)
    result = {
        "date": dt.date.today().isoformat(), "rows": len(all_cases), **summaries(all_cases, held),
        "in_sample": summary(list(insample.values())), "fitted": final, "folds": folds,
        "bands": bands_of(all_cases, held, unseen), "held": held, "excluded": [(r.id, r.excluded) for r in excluded],
        "unseen_rows": len(unseen), "groups": group_summaries(all_cases, held), "caps": all_caps,
    }
    if not quiet:
        print_report(all_cases, result)
    if write:
        write_outputs(all_cases, result)
    return result


# ----------------------------------------------------------------------------- groups the issues judge by

# GPU classes of consumer and mid cards (GA102 RTX 3090 / A10G / A5000, AD10x RTX 4090 / L4 / L40S, Turing T4)
CONSUMER_CLASSES = ("ampere-workstation", "ada", "turing")
# The cards issue 33 names, reported one by one (others of their classes are in the class figures)
CONSUMER_CARDS = ("RTX3090", "RTX4090", "L4", "A10G", "T4", "L40S")
GOAL_ROWS, GOAL_SOURCES = 8, 3  # a group's figure counts as calibrated from this many rows and sources


def _groups_of(c: Case) -> list[str]:
    """Every group a row counts in: its GPU class, consumer and mid cards (with its card), the issue-48 mechanism
    classes (consumer multi-GPU without P2P, DoRA, QLoRA, CPU offload) and the HF stack on H100/A100."""
    cls = gpu_class(c.gpu)
    out = [f"class:{cls}"]
    if cls in CONSUMER_CLASSES:
        out += ["consumer and mid cards", f"card:{c.row.gpu}"]
    out += mechanism_classes(c.gpu, c.row.stack)
    if cls in ("hopper", "ampere-datacenter") and c.row.framework == "hf" and c.row.stack.offload == "none":
        out.append("H100/A100 HF stack")
    return out


def _group_figures(cs: list[Case], held: dict[str, float]) -> dict:
    if not cs:
        return {"rows": 0, "sources": [], "status": "uncalibrated"}
    v = summary([held[c.row.id] for c in cs])
    srcs = sorted({c.source for c in cs})
    ok = len(cs) >= GOAL_ROWS and len(srcs) >= GOAL_SOURCES
    return {"rows": len(cs), "sources": srcs, "median_abs": v["median_abs"], "signed_median": v["signed_median"],
            "worst": v["worst"], "status": "calibrated" if ok else "thin (fewer than 8 rows or 3 sources)"}


def group_summaries(all_cases: list[Case], held: dict[str, float]) -> dict[str, dict]:
    """Held-out figures per group (rows, sources, median |error|, signed median), 'uncalibrated' where a group has
    no rows: consumer and mid cards together and per GPU class and card, the issue-48 mechanism classes, and the
    HF-stack runs on H100/A100 without offload (the figure earlier issues were judged on)."""
    members: dict[str, list[Case]] = {}
    for c in all_cases:
        for name in _groups_of(c):
            members.setdefault(name, []).append(c)
    cards = sorted({name for name in members if name.startswith("card:")} - {f"card:{g}" for g in CONSUMER_CARDS})
    names = (["consumer and mid cards", *MECHANISM_CLASSES, "H100/A100 HF stack"]
             + [f"card:{g}" for g in CONSUMER_CARDS] + cards
             + [f"class:{cls}" for cls in table()["mamf_fraction"]])
    return {name: _group_figures(members.get(name, []), held) for name in names}


def group_table(result: dict) -> list[str]:
    lines = ["| group | rows | sources | median \\|error\\| | signed median | status |", "|---|---:|---:|---:|---:|---|"]
    for name, g in result["groups"].items():
        if not g["rows"]:
            lines.append(f"| {name} | 0 | 0 | | | uncalibrated |")
            continue
        lines.append(f"| {name} | {g['rows']} | {len(g['sources'])} | {g['median_abs']:.1%} | "
                     f"{_f(g['signed_median'])} | {g['status']} |")
    return lines


# ----------------------------------------------------------------------------- output


def _f(x: float) -> str:
    return f"{x:+.1%}"


def source_table(result: dict, framework: str | None = None) -> list[str]:
    """Per-source held-out table (every source, or one framework's), with its total row."""
    lines = ["| source | framework | rows | median \\|error\\| | signed median | worst |",
             "|---|---|---:|---:|---:|---:|"]
    for s in result["sources"]:
        fw = result["framework_of"][s]
        if framework and fw != framework:
            continue
        v = result["per_source"][s]
        lines.append(f"| {s} | {fw} | {v['rows']} | {v['median_abs']:.1%} | {_f(v['signed_median'])} | "
                     f"{_f(v['worst'])} |")
    o = result["by_framework"][framework] if framework else result["overall"]
    label = f"all {framework} sources" if framework else "all sources"
    lines.append(f"| **{label}** | | **{o['rows']}** | **{o['median_abs']:.1%}** | **{_f(o['signed_median'])}** | "
                 f"{_f(o['worst'])} |")
    return lines


def print_report(all_cases: list[Case], result: dict) -> None:
    print(f"{'row':<12} {'gpu':<10} {'stack':<60} {'shape':>13} {'held-out':>9} {'measured':>9} {'error':>7}")
    for c in all_cases:
        r = c.row
        e = result["held"][r.id]
        pred = r.tokens_per_sec * math.exp(e)
        print(f"{r.id:<12} {r.gpu:<10} {r.stack.label()[:60]:<60} {r.shape.micro_batch:>4}×{r.shape.seq_len:<6}"
              f"ga{r.shape.grad_accum:<2} {pred:>9.0f} {r.tokens_per_sec:>9.0f} {_f(pct(e)):>7}")
    print()
    for rid, why in result["excluded"]:
        print(f"excluded {rid}: {why}")
    print("\nleave-one-source-out (each source predicted by constants fitted on the others):")
    for line in source_table(result):
        print(line)
    print("\nHF-stack sources only (the default prediction, what `launch` runs):")
    for line in source_table(result, "hf"):
        print(line)
    o, i = result["overall"], result["in_sample"]
    print(f"\nheld-out: {o['rows']} rows, {len(result['sources'])} sources: median |error| {o['median_abs']:.1%}, "
          f"signed median {_f(o['signed_median'])}, p90 |error| {o['p90_abs']:.1%} (goal: ≤ 20 %, |signed| ≤ 10 %)")
    h = result["by_framework"]["hf"]
    print(f"held-out, HF-stack sources ({h['rows']} rows): median |error| {h['median_abs']:.1%}, signed median "
          f"{_f(h['signed_median'])} (goal: ≤ 15 %, |signed| ≤ 10 %)")
    print("held-out by group:")
    for line in group_table(result):
        print("  " + line)
    ft = result["finetune"]
    print(f"held-out, fine-tuning sources only ({ft['rows']} rows): median |error| {ft['median_abs']:.1%}, "
          f"signed median {_f(ft['signed_median'])}")
    print(f"in-sample (all sources fitted): median |error| {i['median_abs']:.1%}, signed {_f(i['signed_median'])}")
    print("fitted on all sources: " + ", ".join(f"{k}={v:.4g}" for k, v in result["fitted"].items()))
    print("bands (measured/predicted, p10-p90 of held-out error):")
    for seg, b in result["bands"]["segments"].items():
        print(f"  {seg:<28} rows {b['rows']:>3}  ×{b['low']:.2f} .. ×{b['high']:.2f}")
    u = result["bands"]["unseen"]
    print(f"  {'(GPU class not calibrated)':<28} rows   0  ×{u['low']:.2f} .. ×{u['high']:.2f}")


def markdown(all_cases: list[Case], result: dict) -> str:
    o, i = result["overall"], result["in_sample"]
    hf, tuned = result["by_framework"]["hf"], result["by_framework"]["tuned"]
    out = [
        "# Time model: leave-one-source-out calibration",
        "",
        f"Generated by `python benchmarks/time_calibration.py` on {result['date']}. Every fitted constant "
        "(advisor/data/mfu.json `fitted`) is refitted on all sources but one and the held-out source is "
        "predicted with it; the table is the error on rows the constants never saw. Error = (predicted − "
        "measured) / measured tokens/s; positive means the model promises more speed than was measured.",
        "",
        "## HF-stack sources (the default `--framework hf`: what `gpu-advisor launch` runs)",
        "",
        *source_table(result, "hf"),
        "",
        f"HF-stack held out: {hf['rows']} rows, median |error| **{hf['median_abs']:.1%}**, signed median "
        f"**{_f(hf['signed_median'])}** (tuned sources: median |error| {tuned['median_abs']:.1%}, signed "
        f"{_f(tuned['signed_median'])}). "
        "Predictions of held-out rows are capped by the plausibility guard built from the other sources.",
        "",
        "## By group (consumer and mid cards, CPU offload, GPU class, card)",
        "",
        "Leave-one-source-out, as above, gathered by the group a row belongs to (a CPU-offload row on an RTX 4090 "
        "counts in both). A group is calibrated from 8 rows of 3 sources; 'uncalibrated' where it has none.",
        "",
        *group_table(result),
        "",
        "## All sources",
        "",
        *source_table(result),
        "",
        f"Held-out over all {o['rows']} rows from {len(result['sources'])} sources: median |error| "
        f"**{o['median_abs']:.1%}**, signed median **{_f(o['signed_median'])}**, p90 |error| {o['p90_abs']:.1%}; "
        f"median of the per-source medians {o['source_median_of_medians']:.1%}. Fine-tuning sources only "
        f"(without the pretraining-style {', '.join(PRETRAINING)}): {result['finetune']['rows']} rows, median |error| "
        f"{result['finetune']['median_abs']:.1%}, signed {_f(result['finetune']['signed_median'])}. "
        "In-sample (fitted on every "
        f"source) for comparison: median |error| {i['median_abs']:.1%}, signed {_f(i['signed_median'])}.",
        "",
        "## Fitted constants (all sources)",
        "",
        "| constant | value | range searched |",
        "|---|---:|---|",
    ]
    for k, v in result["fitted"].items():
        lo, hi = BOUNDS[k]
        out.append(f"| `{k}` | {v:.4g} | {lo:g} – {hi:g} |")
    out += ["", "Per held-out source, the constants fitted without it:", "",
            "| held out | " + " | ".join(f"`{k}`" for k in BOUNDS) + " |",
            "|---|" + "---:|" * len(BOUNDS)]
    for s, k in result["folds"].items():
        out.append(f"| {s} | " + " | ".join(f"{k[n]:.4g}" for n in BOUNDS) + " |")
    out += ["", "## Error bands (what `advisor.throughput.band()` returns)", "",
            "Measured / predicted tokens/s, p10 – p90 of the held-out errors of the segment (GPU class × method), "
            f"pulled toward the wider of the segment's and the global band with weight {SHRINK_ROWS} / "
            f"(rows + {SHRINK_ROWS}), then widened by the sampling error of a quantile read off few rows (the "
            "global half-width / √(rows + 1)); GPU classes without rows get the band of whole GPU classes held "
            "out, widened by the global half-width.", "",
            "| segment | rows | low | high | raw p10 | raw p90 |", "|---|---:|---:|---:|---:|---:|"]
    for seg, b in result["bands"]["segments"].items():
        out.append(f"| {seg} | {b['rows']} | ×{b['low']:.2f} | ×{b['high']:.2f} | ×{b['p10_raw']:.2f} | "
                   f"×{b['p90_raw']:.2f} |")
    g, u = result["bands"]["global"], result["bands"]["unseen"]
    out.append(f"| all rows | {g['rows']} | ×{g['low']:.2f} | ×{g['high']:.2f} | | |")
    out.append(f"| GPU class not calibrated | 0 | ×{u['low']:.2f} | ×{u['high']:.2f} | | |")
    out += ["", "## Plausibility caps (mfu.json `plausibility`)", "",
            "The best measured MFU per GPU class × method × model size, by any framework: an `hf` prediction is "
            "never faster (rescaled from the measured card's sustained matmul rate to the predicted card's).", "",
            "| key | MFU | row | source | framework | GPU |", "|---|---:|---|---|---|---|"]
    for key, cap in result["caps"].items():
        out.append(f"| {key} | {cap['mfu']:.3f} | {cap['row']} | {cap['source']} | {cap['framework']} | {cap['gpu']} |")
    out += ["", "## Rows (held-out prediction)", "",
            "| row | framework | GPU | stack | micro-batch × seq | accum | nodes | predicted | measured | error |",
            "|---|---|---|---|---|---:|---:|---:|---:|---:|"]
    for c in all_cases:
        r = c.row
        e = result["held"][r.id]
        out.append(f"| {r.id} | {r.framework} | {r.gpu} | {r.stack.label()} | "
                   f"{r.shape.micro_batch} × {r.shape.seq_len} | "
                   f"{r.shape.grad_accum} | {r.nodes} | {r.tokens_per_sec * math.exp(e):,.0f} | "
                   f"{r.tokens_per_sec:,.0f} | {_f(pct(e))} |")
    out += ["", "## Excluded rows", "", "| row | why |", "|---|---|"]
    for rid, why in result["excluded"]:
        out.append(f"| {rid} | {why} |")
    return "\n".join(out) + "\n"


def write_outputs(all_cases: list[Case], result: dict) -> None:
    from pricing.files import atomic_write

    atomic_write(RESULTS_MD, markdown(all_cases, result))
    data = json.loads(MFU_FILE.read_text())
    o = result["overall"]
    fitted = data["fitted"]
    for k, v in result["fitted"].items():
        fitted[k]["value"] = float(f"{v:.4g}")
    fitted["_about"] = (f"Fitted by benchmarks/time_calibration.py on {result['date']} over {result['rows']} rows of "
                        f"{len(result['sources'])} sources (least squares on log error, each source weighted by "
                        "√rows, deterministic coordinate search on a log grid). Leave-one-source-out held-out "
                        f"median |error| {o['median_abs']:.1%}, signed median {o['signed_median']:+.1%} (HF-stack "
                        f"sources: {result['by_framework']['hf']['median_abs']:.1%}, "
                        f"{result['by_framework']['hf']['signed_median']:+.1%}); "
                        "per-source figures in `fit` and benchmarks/results/time_calibration.md.")
    data["fit"] = {
        "date": result["date"], "method": "leave-one-source-out; least squares on log(predicted/measured), source "
                                          "weight √rows; coordinate search on a log grid, 12 rounds × 9 points",
        "rows": result["rows"], "sources": result["sources"],
        "held_out": {"median_abs_error": round(o["median_abs"], 4), "signed_median": round(o["signed_median"], 4),
                     "p90_abs_error": round(o["p90_abs"], 4)},
        "held_out_finetune_sources": {"rows": result["finetune"]["rows"],
                                      "median_abs_error": round(result["finetune"]["median_abs"], 4),
                                      "signed_median": round(result["finetune"]["signed_median"], 4)},
        "held_out_per_source": {s: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in d.items()}
                                for s, d in result["per_source"].items()},
        "in_sample": {"median_abs_error": round(result["in_sample"]["median_abs"], 4),
                      "signed_median": round(result["in_sample"]["signed_median"], 4)},
        "held_out_by_framework": {fw: {"rows": v["rows"], "median_abs_error": round(v["median_abs"], 4),
                                       "signed_median": round(v["signed_median"], 4)}
                                  for fw, v in result["by_framework"].items()},
        "source_frameworks": result["framework_of"],
        "held_out_by_group": {name: ({"rows": 0, "sources": 0, "status": g["status"]} if not g["rows"] else
                                     {"rows": g["rows"], "sources": len(g["sources"]),
                                      "median_abs_error": round(g["median_abs"], 4),
                                      "signed_median": round(g["signed_median"], 4), "status": g["status"]})
                              for name, g in result["groups"].items()},
    }
    data["_plausibility"] = ("Plausibility guard: the best measured MFU (model FLOPs / dense peak) per GPU class × "
                             "method × model size bucket (<3B, 3-15B, 15-45B, >45B), by any framework, with the row "
                             "that set it; keys without a size, and '*' classes, are the fallbacks. An 'hf' "
                             "prediction is capped at it, rescaled by the card's sustained matmul fraction over the "
                             "measured card's (advisor.throughput.mfu_cap). Written by benchmarks/time_calibration.py "
                             "from the calibration rows.")
    data["plausibility"] = {"caps": result["caps"]}
    data["_bands"] = ("Held-out error bands per segment (GPU class/method): tokens/s × low .. × high is the p10-p90 "
                      "of measured/predicted on rows whose source was held out, pulled toward the wider of the "
                      "segment's and the global band with weight 10/(rows+10) and widened by the global half-width "
                      "/ √(rows+1) (sampling error of a quantile from few rows); `unseen` is for GPU classes without "
                      "rows (whole classes held out, widened by the global half-width, and never narrower than the "
                      "least certain calibrated segment). Written by "
                      "benchmarks/time_calibration.py.")
    data["bands"] = result["bands"]
    atomic_write(MFU_FILE, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    table.cache_clear()


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--no-write", dest="write", action="store_false",
                   help="print only; leave mfu.json and benchmarks/results/time_calibration.md as they are")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    return run(quiet=args.quiet, write=args.write)


if __name__ == "__main__":
    main()
