"""Start-up: `gpu-advisor --help` against a bare interpreter, measured in one run.

Prints, after a line with the date, CPU count and Python version (paste the output whole, that line
included), the wall time of `python -m advisor --help` and of `python -c pass`, run alternately after one
untimed run of each (best and median of --repeat each), their ratio (median over median: how many bare
interpreter starts the help costs), and the project modules `--help` imported. These machines are noisy,
so the ratio is the figure to compare; a noisy neighbour slows both alike.

Run: python benchmarks/bench_startup.py [--repeat K]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_planner import alternate  # noqa: E402

HELP = [sys.executable, "-m", "advisor", "--help"]
BARE = [sys.executable, "-c", "pass"]
IMPORTED = [sys.executable, "-c", "import sys, runpy; sys.argv = ['gpu-advisor', '--help']\n"
            "try:\n    runpy.run_module('advisor', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('advisor', 'pricing', 'reports', 'cli'))), file=sys.stderr)"]


def _environment() -> dict[str, str]:
    """As an installed tool runs: from compiled bytecode (a cache of the benchmark's own, warmed by the
    untimed runs), the project first on the path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "gpu-advisor-bench-pycache")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def interleaved(repeat: int, env: dict[str, str]) -> dict[str, list[float]]:
    """`--help` against a bare interpreter, alternately (bench_planner.alternate)."""
    return alternate({"help": HELP, "bare": BARE}, repeat, env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    env = _environment()
    print(f"{dt.date.today()}  {os.cpu_count()} CPUs  Python {sys.version.split()[0]}")
    runs = interleaved(args.repeat, env)
    median = {name: statistics.median(times) for name, times in runs.items()}
    for name, label in (("help", "gpu-advisor --help"), ("bare", "python -c pass")):
        print(f"{label:<20} best {min(runs[name]) * 1000:6.0f} ms   median {median[name] * 1000:6.0f} ms")
    print(f"ratio (median --help / median bare): {median['help'] / median['bare']:.2f}")
    loaded = subprocess.run(IMPORTED, capture_output=True, text=True, cwd=ROOT, env=env).stderr.split()
    print(f"project modules --help imports: {len(loaded)} "
          f"({sum(m.startswith('cli.') for m in loaded)} under cli, "
          f"{sum(m.startswith(('advisor.planner', 'pricing.loader')) for m in loaded)} under advisor.planner "
          "or pricing.loader)")


if __name__ == "__main__":
    main()
