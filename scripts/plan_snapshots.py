"""Run the reference plans (DEVELOPERS.md's dozen plus those the issues quote) and save what they print.

Each plan runs as a fresh process in the fixed, offline environment of scripts/readme_examples.py (today
pinned to its TODAY, so price ages do not move with the calendar), and
its JSON (with `generated_at` removed) and its table go to FOLDER/<name>.json and FOLDER/<name>.txt. Two
folders compare byte for byte, which is how a behaviour-preserving change is checked:

    python scripts/plan_snapshots.py before/              # on the old commit
    python scripts/plan_snapshots.py after/               # on the new one
    python scripts/plan_snapshots.py --compare before/ after/

`--only NAME[,NAME]` runs a subset; `--list` prints the plans.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from readme_examples import environment  # noqa: E402  (one fixed environment for both scripts)

# A dated sheet of one's own: what a team with a negotiated quote would pass with --prices.
OWN_SHEET = """provider,region,instance_type,gpu_model,gpu_count,gpu_memory_gb,vcpus,ram_gb,price_hour,currency,source,fetched_at
acme,us-east,acme-8xh100,H100,8,80,192,2048,21.60,USD,quote 2026-11-28,2026-11-28
acme,us-east,acme-1xh100,H100,1,80,24,256,2.70,USD,quote 2026-11-28,2026-11-28
"""

PLANS: dict[str, str] = {
    "8b-lora": "plan --model meta-llama/Llama-3.1-8B --tokens 100M --methods lora",
    "8b-default": "plan --model meta-llama/Llama-3.1-8B --tokens 100M",
    "8b-full": "plan --model meta-llama/Llama-3.1-8B --tokens 100M --methods full",
    "70b-qlora": "plan --model meta-llama/Llama-3.1-70B --tokens 100M --methods qlora",
    "70b-full-4nodes": "plan --model meta-llama/Llama-3.1-70B --tokens 1B --methods full --max-nodes 4",
    "moe-lora": "plan --model Qwen/Qwen3-30B-A3B --tokens 100M --methods lora",
    "1b": "plan --model meta-llama/Llama-3.2-1B --tokens 100M",
    "8b-32k": "plan --model meta-llama/Llama-3.1-8B --tokens 100M --seq-len 32768 --methods lora",
    "phi-64k": "plan --model microsoft/Phi-3.5-mini-instruct --tokens 100M --seq-len 65536 --methods lora",
    "budget-miss": "plan --model meta-llama/Llama-3.1-8B --tokens 1B --budget 20",
    "aws-only": "plan --model meta-llama/Llama-3.1-8B --tokens 100M --methods lora --providers aws",
    "gcp-only": "plan --model meta-llama/Llama-3.1-8B --tokens 100M --methods lora --providers gcp",
    "consumer": "plan --model google/medgemma-4b-it --tokens 50M --methods lora --gpu RTX4090,L4,A10G,T4",
    "own-sheet": "plan --model meta-llama/Llama-3.1-8B --tokens 100M --methods lora --prices {own_sheet}",
    "8b-spot": "plan --model meta-llama/Llama-3.1-8B --tokens 1B --methods lora --spot",
    "70b-qlora-budget": "plan --model meta-llama/Llama-3.1-70B --tokens 1B --methods qlora --budget 500",
    "70b-full-deadline": "plan --model meta-llama/Llama-3.1-70B --tokens 2B --methods full --deadline 12h",
    "405b-qlora": "plan --model meta-llama/Llama-3.1-405B --tokens 100M --methods qlora",
    "mistral-full-h100": "plan --model mistral-7b --methods full --gpu H100 --tokens 100M",
}


def run(name: str, command: str, folder: Path) -> int:
    """Run one plan twice (JSON and table) and write both; returns the JSON run's exit status."""
    with tempfile.TemporaryDirectory(prefix="plan-snapshot-") as home:
        sheet = Path(home) / "own_sheet.csv"
        sheet.write_text(OWN_SHEET, encoding="utf-8")
        args = shlex.split(command.format(own_sheet=sheet))
        env = environment(Path(home))
        outs = {}
        for fmt in ("json", "table"):
            r = subprocess.run([sys.executable, "-m", "advisor", *args, "--format", fmt], capture_output=True,
                               text=True, cwd=home, env=env, timeout=900)
            outs[fmt] = r
    js = outs["json"]
    text = js.stdout
    if js.stdout.strip().startswith("{"):
        data = json.loads(js.stdout)
        data.pop("generated_at", None)
        text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    (folder / f"{name}.json").write_text(f"exit {js.returncode}\n{text}{js.stderr}".replace(home, "<home>"),
                                         encoding="utf-8")
    tb = outs["table"]
    (folder / f"{name}.txt").write_text(f"$ gpu-advisor {command}\nexit {tb.returncode}\n{tb.stdout}"
                                        f"--- stderr\n{tb.stderr}".replace(home, "<home>"), encoding="utf-8")
    return js.returncode


def compare(a: Path, b: Path) -> int:
    """Print which snapshots differ between two folders; exit 1 when any does."""
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    bad = [n for n in names if not ((a / n).exists() and (b / n).exists() and filecmp.cmp(a / n, b / n, False))]
    for n in names:
        print(f"{'DIFFERS' if n in bad else 'same   '} {n}")
    print(f"{len(names) - len(bad)} of {len(names)} files byte-identical")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, nargs="?")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--only", default="")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    if a.list:
        for name, cmd in PLANS.items():
            print(f"{name:20} gpu-advisor {cmd}")
        return 0
    if a.compare:
        return compare(*a.compare)
    if a.folder is None:
        ap.error("give FOLDER, --compare BEFORE AFTER or --list")
    a.folder.mkdir(parents=True, exist_ok=True)
    only = [n for n in a.only.split(",") if n]
    for name, cmd in PLANS.items():
        if not only or name in only:
            print(f"{name}: exit {run(name, cmd, a.folder)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
