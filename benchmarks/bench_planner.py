"""Planner speed: the whole bundled sheet as a process, and 100,000 candidates scored.

Prints (1) wall time of `gpu-advisor plan --model meta-llama/Llama-3.1-8B --tokens 100M` as a
fresh process (goal < 1 s), (2) time to score and rank 100,000 synthetic candidates with the
vectorised `advisor.planner.score` (goal < 2 s), and (3) the same scoring as a plain Python loop
per candidate, measured in the same run, with the speed-up ratio; both must agree.

Run: python benchmarks/bench_planner.py [--candidates N] [--repeat K]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def process_seconds(repeat: int) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds) of the plan command as a fresh process."""
    import resource

    cmd = [sys.executable, "-m", "advisor", "plan", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "100M"]
    best, best_cpu = math.inf, math.inf
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        best = min(best, time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best_cpu = min(best_cpu, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        if r.returncode != 0:
            raise SystemExit(f"plan failed: {r.stderr.strip()}")
    return best, best_cpu


def synthetic(n_candidates: int):
    """Priced offers × fitting configs whose join has about n_candidates rows."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    keys, offers_per_key, cfg_per_key = 50, 40, max(1, n_candidates // (50 * 40))
    providers = ["aws", "gcp", "azure", "lambda", "runpod", "fluidstack", "tinycloud"]
    priced = pd.DataFrame({
        "gpu_model": np.repeat([f"G{k}" for k in range(keys)], offers_per_key),
        "gpu_count": 1,
        "provider": rng.choice(providers, keys * offers_per_key),
        "price_hour": rng.uniform(0.3, 40, keys * offers_per_key),
        "ram_gb": rng.choice([16.0, 64.0, 256.0, 1024.0], keys * offers_per_key),
    })
    priced["spot"] = rng.random(len(priced)) < 0.4
    priced["spot_price_hour"] = np.where(priced["spot"], priced["price_hour"] * 0.4, np.nan)
    priced["price"] = np.where(priced["spot"], priced["spot_price_hour"], priced["price_hour"])
    cfg = pd.DataFrame({
        "gpu_model": np.repeat([f"G{k}" for k in range(keys)], cfg_per_key),
        "gpu_count": 1,
        "nodes": rng.choice([1, 2], keys * cfg_per_key),
        "train_hours": rng.uniform(0.5, 200, keys * cfg_per_key),
        "setup_hours": rng.uniform(0.15, 0.3, keys * cfg_per_key),
        "ckpt_hours": rng.uniform(0.0, 0.1, keys * cfg_per_key),
        "cpu_ram": rng.choice([0.0, 100e9, 600e9], keys * cfg_per_key),
    })
    return priced, cfg


def vectorised(priced, cfg, rate, interval):
    import numpy as np

    from advisor.planner import score

    sc = score(priced, cfg, spot_rate=rate, checkpoint_interval=interval)
    ok = sc["ram_ok"].to_numpy()
    cost, hours = sc["cost_usd"].to_numpy(), sc["hours"].to_numpy()
    idx = np.flatnonzero(ok)
    idx = idx[np.lexsort((hours[idx], cost[idx]))]  # ranked by cost, then time
    h = hours[idx]
    front = idx[h < np.concatenate(([np.inf], np.minimum.accumulate(h)[:-1]))]
    return sc, idx, front


def loop(priced, cfg, rate, interval):
    """The same arithmetic, one candidate at a time (the baseline the vectorised path must beat)."""
    from advisor.planner import billing

    b = billing()
    offers = priced.to_dict("records")
    configs = cfg.to_dict("records")
    by_key: dict = {}
    for j, c in enumerate(configs):
        by_key.setdefault((c["gpu_model"], c["gpu_count"]), []).append(j)
    out = []
    for i, o in enumerate(offers):
        bill = b["providers"].get(o["provider"], b["default"])
        for j in by_key.get((o["gpu_model"], o["gpu_count"]), []):
            c = configs[j]
            od_h = c["train_hours"] + c["setup_hours"]
            sp_h = od_h + c["train_hours"] * rate * (interval / 2 + c["setup_hours"] + c["ckpt_hours"]) \
                + math.floor(c["train_hours"] / interval) * c["ckpt_hours"]
            h = sp_h if o["spot"] else od_h
            secs = max(h * 3600, bill["minimum_s"])
            billed = math.ceil(secs / bill["increment_s"] - 1e-9) * bill["increment_s"] / 3600
            cost = billed * o["price"] * c["nodes"]
            if c["cpu_ram"] <= (o["ram_gb"] or 0) * 1e9 * 0.9:
                out.append((cost, h, i, j))
    out.sort()
    front, best = [], math.inf
    for cost, h, i, j in out:
        if h < best:
            front.append((i, j))
            best = h
    return out, front


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()

    wall, cpu = process_seconds(a.repeat)
    print(f"gpu-advisor plan --model meta-llama/Llama-3.1-8B --tokens 100M (whole bundled sheet): "
          f"{wall:.2f} s wall, {cpu:.2f} s CPU as a process (best of {a.repeat}; goal < 1 s)")

    priced, cfg = synthetic(a.candidates)
    vectorised(priced.head(50), cfg.head(10), 0.02, 1.0)  # warm imports
    t = time.perf_counter()
    sc, ranked, front = vectorised(priced, cfg, 0.02, 1.0)
    vec = time.perf_counter() - t
    t = time.perf_counter()
    ranked_loop, front_loop = loop(priced, cfg, 0.02, 1.0)
    plain = time.perf_counter() - t
    assert len(ranked) == len(ranked_loop) and len(front) == len(front_loop), "vectorised and loop disagree"
    top_vec = sorted(sc["cost_usd"].to_numpy()[ranked[:10]])
    top_loop = [c for c, *_ in ranked_loop[:10]]
    assert all(abs(x - y) < 1e-6 * max(1, y) for x, y in zip(top_vec, top_loop)), "costs disagree"
    print(f"score + rank + Pareto of {len(sc):,} candidates: vectorised {vec:.3f} s (goal < 2 s); "
          f"plain per-candidate loop {plain:.3f} s; speed-up {plain / vec:.1f}x")


if __name__ == "__main__":
    main()
