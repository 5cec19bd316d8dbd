"""Speed: render the 500-candidate plan to HTML with both charts (goal: under 2 s).

Run: python3 benchmarks/bench_report.py [--repeat N]
Prints the first (cold: imports matplotlib and jinja2) and the best warm time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

GOAL_S = 2.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import plan_factory

    import reports

    plan = plan_factory.big_plan(500)
    times = []
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        html = reports.render(plan, "html")
        times.append(time.perf_counter() - t0)
    cold, warm = times[0], min(times[1:] or times)
    ok = cold < GOAL_S
    print(f"report html, {len(plan.candidates)} candidates, {len(html) / 1e3:.0f} kB: "
          f"cold {cold:.2f} s, warm best {warm:.2f} s (goal < {GOAL_S:.0f} s cold) -> {'OK' if ok else 'SLOW'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
