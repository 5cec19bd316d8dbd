#!/usr/bin/env python3
"""Price-sheet speed: import+normalise all reference catalog extracts (goal < 2 s) and
`gpu-advisor prices list` as a process (goal < 0.5 s), beside `python -c pass`.

    python benchmarks/bench_prices.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "tests" / "data" / "skypilot_catalog"  # SkyPilot catalog extracts (see PROVENANCE.md there)


def best(cmd: list[str], repeat: int, env: dict) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, cwd=ROOT)
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    env = dict(os.environ, GPU_ADVISOR_CACHE_DIR=tempfile.mkdtemp())
    code = ("import time; t=time.perf_counter(); from pricing.sources.skypilot import import_path; "
            "from pricing.schema import validate; "
            f"df,p=import_path({str(CATALOG)!r}); g,q=validate(df); "
            "print(f'{time.perf_counter()-t:.3f} {len(g)}')")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                           env=env, check=True).stdout.split() for _ in range(args.repeat)]
    secs = min(float(r[0]) for r in runs)
    print(f"import+normalise reference extracts: {secs:.3f} s for {runs[0][1]} offers "
          f"(in-process, incl. pandas import; goal < 2 s)")
    base = best([sys.executable, "-c", "pass"], args.repeat, env)
    lst = best([sys.executable, "-m", "advisor", "prices", "list"], args.repeat, env)
    gpu = best([sys.executable, "-m", "advisor", "prices", "list", "--gpu", "H100", "--format", "json"],
               args.repeat, env)
    print(f"python -c pass:                      {base:.3f} s")
    print(f"gpu-advisor prices list:             {lst:.3f} s (goal < 0.5 s)")
    print(f"gpu-advisor prices list --gpu H100 --format json: {gpu:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
