#!/usr/bin/env python3
"""`gpu-advisor estimate` speed as a whole process (goal < 0.5 s) beside a bare `python -c pass`,
and the in-process cost of one estimate and of a fit search, measured in the same run.

    python benchmarks/bench_estimate.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = [
    ["estimate", "meta-llama/Llama-3.1-8B"],
    ["estimate", "qwen3-30b-a3b", "--method", "qlora", "--grad-checkpointing", "--gpu", "A100-80GB"],
    ["estimate", "--params", "70B", "--gpus", "8", "--sharding", "zero3", "--format", "json"],
]


def best_process(args: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    base = best_process([sys.executable, "-c", "pass"], args.repeat)
    print(f"{'python -c pass':<95} {base:6.3f} s")
    for case in CASES:
        secs = best_process([sys.executable, "-m", "advisor", *case], args.repeat)
        print(f"{'gpu-advisor ' + ' '.join(case):<95} {secs:6.3f} s  ({secs / base:4.1f}× bare python; goal < 0.5 s)")

    from advisor.api import estimate_memory
    from advisor.model.catalog import load_model
    from advisor.stacks import Shape, Stack

    spec = load_model("meta-llama/Llama-3.1-8B")
    n = 200
    t = time.perf_counter()
    for _ in range(n):
        estimate_memory(spec, Stack(method="lora"), Shape(seq_len=2048))
    one = (time.perf_counter() - t) / n
    t = time.perf_counter()
    estimate_memory(spec, Stack(method="lora"), Shape(seq_len=2048), gpu="L4")
    fit = time.perf_counter() - t
    print(f"in-process: one estimate {one * 1e3:.2f} ms; estimate + fit search on L4 {fit * 1e3:.1f} ms "
          f"({fit / one:.0f}× one estimate)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
