"""Time model vs published throughput: predicted and measured tokens/s per calibration row.

Uses the same row interpretation as the memory benchmark (`benchmarks/calibration_rows.py`:
model, stack, shape, GPU, gradient accumulation and whether tokens/s is per GPU or total) and
prints, per row, `advisor.throughput.estimate_throughput`'s prediction, the published figure and
the signed error, then the median |error| (goal <= 20 %). Rows that cannot be modelled are listed
with the reason; none are dropped silently.

Run: python benchmarks/time_calibration.py [--mfu X] [--csv PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.throughput import estimate_throughput  # noqa: E402
from benchmarks.calibration_rows import MEASURED_CSV as CSV_PATH, load_rows  # noqa: E402


def run(mfu: float | None = None, csv: Path = CSV_PATH, quiet: bool = False) -> dict:
    """Predict every row with a published tokens/s; returns {'rows', 'median_abs_error', 'p90_abs_error', 'excluded'}."""
    rows = [r for r in load_rows(csv) if r.tokens_per_sec_total]
    errors, excluded = [], []
    for r in rows:
        if not r.included or r.gpu is None:
            excluded.append((r.id, r.excluded or "GPU not stated"))
            continue
        t = estimate_throughput(r.spec, r.stack, r.shape, r.gpu, grad_accum=r.grad_accum, nodes=1, mfu=mfu)
        err = (t.tokens_per_sec - r.tokens_per_sec_total) / r.tokens_per_sec_total
        errors.append(err)
        if not quiet:
            print(f"{r.id:<12} {r.gpu:<12} {r.stack.label():<58} {r.shape.micro_batch:>3}×{r.shape.seq_len:<6} "
                  f"{t.tokens_per_sec:>10.0f} {r.tokens_per_sec_total:>10.0f} {err:>+7.1%}")
    abs_err = sorted(abs(e) for e in errors)
    summary = {
        "rows": len(errors),
        "median_abs_error": statistics.median(abs_err) if abs_err else None,
        "p90_abs_error": abs_err[int(0.9 * (len(abs_err) - 1))] if abs_err else None,
        "excluded": excluded,
    }
    if not quiet:
        for rid, why in excluded:
            print(f"excluded {rid}: {why}")
        if abs_err:
            print(f"\n{len(errors)} rows: median |error| {summary['median_abs_error']:.1%}, p90 {summary['p90_abs_error']:.1%} "
                  f"(goal: median <= 20%)")
    return summary


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mfu", type=float, default=None, help="override the calibrated efficiency table")
    p.add_argument("--csv", type=Path, default=CSV_PATH)
    args = p.parse_args(argv)
    return run(args.mfu, args.csv)


if __name__ == "__main__":
    main()
