"""Regenerate the smoke-run transcript of docs/budget-owners.md from the commands themselves.

The block after `<!-- smoke run: python scripts/budget_owner_example.py -->` is what a budget owner's whole loop
prints, run for real in an empty folder with scripts/readme_examples.py's fixed environment (no network, an empty
cache and HOME, the pinned day): plan, approve with a cap of $0.00001 (reached after the first step), launch under
it, the bundle's CPU smoke run (`bash run/launch.sh --smoke`: a tiny random model, nothing downloaded; its
`budget cap:` lines), track, `ledger --format json`, and the approval block of the Markdown report. Times, spend
and digests differ from run to run, so tests/advisor/ledger/test_approved_runs.py checks the block's lines against a fresh run with
the figures masked, not byte for byte.

    python scripts/budget_owner_example.py            rewrite the block in docs/budget-owners.md
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "budget-owners.md"
MARKER = re.compile(r"^(<!-- smoke run: python scripts/budget_owner_example\.py -->\n```[^\n]*\n)(.*?)^```$",
                    re.M | re.S)
PLAN = ["plan", "--model", "meta-llama/Llama-3.2-1B", "--tokens", "1M", "--format", "json"]
CAP = "0.00001"
BY = "ana@example.com"
PROJECT = "llama-demo"


def _environment(home: Path) -> dict[str, str]:
    spec = importlib.util.spec_from_file_location("readme_examples", ROOT / "scripts" / "readme_examples.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("readme_examples", module)
    spec.loader.exec_module(module)
    return module.environment(home)


def _run(argv: list[str], home: Path, env: dict[str, str], timeout: int = 900) -> str:
    done = subprocess.run(argv, cwd=home, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"budget owner example failed (exit {done.returncode}): {shlex.join(argv)}\n"
                         f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout


def approval_section(report_md: str) -> str:
    """The report's approval block: from its heading to the next heading."""
    start = report_md.index("## Approved budget")
    return report_md[start:report_md.index("\n## ", start + 1)].strip()


def transcript() -> str:
    """The loop as `$ command` lines, each followed by what it printed on stdout."""
    out: list[str] = []
    with tempfile.TemporaryDirectory(prefix="budget-owner-") as folder:
        home = Path(folder)
        env = _environment(home)

        def advisor(*args: str, shown: bool = True) -> str:
            text = _run([sys.executable, "-m", "advisor", *args], home, env)
            if shown:
                out.append("$ gpu-advisor " + shlex.join(args))
                out.append(text.rstrip("\n"))
            return text

        (home / "plan.json").write_text(advisor(*PLAN, shown=False), encoding="utf-8")
        out.append("$ gpu-advisor " + shlex.join(PLAN) + " > plan.json")
        advisor("approve", "plan.json", "--by", BY, "--cap", CAP, "--project", PROJECT, "-o", "approval.json")
        advisor("launch", "--from", "plan.json", "--approval", "approval.json", "--out", "run")
        smoke = _run(["bash", "run/launch.sh", "--smoke"], home, env)
        out.append("$ bash run/launch.sh --smoke    # its budget cap lines")
        out += [line for line in smoke.splitlines() if line.startswith("budget cap:")]
        advisor("track", "run")
        advisor("ledger", "--format", "json")
        advisor("report", "plan.json", "--approval", "approval.json", "-o", "report.md", shown=False)
        out.append("$ gpu-advisor report plan.json --approval approval.json -o report.md    # its approval block")
        out.append(approval_section((home / "report.md").read_text(encoding="utf-8")))
    return "\n".join(line.rstrip() for text in out for line in text.splitlines()) + "\n"


def block(page: str) -> str:
    """The transcript as the page holds it now."""
    match = MARKER.search(page)
    if match is None:
        raise SystemExit(f"{PAGE}: no '<!-- smoke run: python scripts/budget_owner_example.py -->' block")
    return match.group(2)


def main() -> int:
    block(PAGE.read_text(encoding="utf-8"))
    text = transcript()
    page = PAGE.read_text(encoding="utf-8")  # as it is now: edited while the run ran, the edit is kept
    PAGE.write_text(MARKER.sub(lambda m: m.group(1) + text + "```", page, count=1), encoding="utf-8")
    print(f"{PAGE}: smoke run block rewritten ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
