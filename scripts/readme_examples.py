"""Regenerate (or check) every real-output block in README.md from the tool itself.

A block is a fenced code block right after a marker naming the exact command:

    <!-- example: gpu-advisor estimate llama-3.1-8b --gpu L4 -->
    <!-- example, first 8 lines: gpu-advisor plan --model llama-3.1-8b --tokens 100M -->

The command runs as a fresh process (`python -m advisor ...`, the console script's code) in a
fixed environment, so the output depends only on the code and its bundled data: an empty
temporary cache, HOME and Hugging Face cache (no fetched prices, no network: HF_HUB_OFFLINE=1),
none of the caller's GPU_ADVISOR_*/HF_* settings (the default staleness rule included, so the README
shows what a new user sees) except GPU_ADVISOR_TODAY=2026-12-01 (TODAY): prices are aged and marked
STALE as of that day (pricing/clock.py), the day the bundled observation sheet was last checked, so the
calendar turns nothing STALE; COLUMNS=200, NO_COLOR=1 and a UTF-8 locale (the output holds no other
date than the sheets' own). The block is the command's stdout (stderr warnings are left out), trailing
spaces removed, cut to the first N lines when the marker says so.

    python scripts/readme_examples.py            rewrite README.md in place
    python scripts/readme_examples.py --check    exit 1 with a diff when a block no longer matches

tests/test_docs.py runs the check.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TODAY = "2026-12-01"  # the day pricing/data/observations.csv was last checked (its OBSERVATIONS.md)
MARKER = re.compile(r"^<!-- example(?:, first (?P<lines>\d+) lines)?: (?P<command>gpu-advisor .+?) -->\n"
                    r"(?P<fence>```[^\n]*\n)(?P<body>.*?)^```$", re.M | re.S)


@dataclass(frozen=True)
class Example:
    command: str
    lines: int | None
    start: int  # offsets of the block's body in the README text
    end: int


def examples(text: str) -> list[Example]:
    """Every marked block, in README order."""
    return [Example(m["command"], int(m["lines"]) if m["lines"] else None, m.start("body"), m.end("body"))
            for m in MARKER.finditer(text)]


def environment(home: Path) -> dict[str, str]:
    """The fixed environment every example runs in (see the module docstring)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
            "GPU_ADVISOR_CACHE_DIR": str(home / "gpu-advisor-cache"), "XDG_CACHE_HOME": str(home / "cache"),
            "HF_HOME": str(home / "hf"), "HF_HUB_OFFLINE": "1", "GPU_ADVISOR_TODAY": TODAY,
            "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb", "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8",
            "PYTHONPATH": str(ROOT)}


def run(example: Example) -> str:
    """The block's text as the command prints it now."""
    args = shlex.split(example.command)[1:]
    with tempfile.TemporaryDirectory(prefix="readme-example-") as home:
        r = subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True, text=True,
                           cwd=home, env=environment(Path(home)), timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"readme example failed (exit {r.returncode}): {example.command}\n{r.stderr.strip()}")
    lines = [line.rstrip() for line in r.stdout.rstrip("\n").splitlines()]
    return "\n".join(lines[:example.lines] if example.lines else lines) + "\n"


def regenerate(text: str) -> str:
    """The README text with every marked block replaced by the command's current output."""
    out, pos = [], 0
    for ex in examples(text):
        out += [text[pos:ex.start], run(ex)]
        pos = ex.end
    return "".join(out) + text[pos:]


def diff(path: Path = README) -> str:
    """A unified diff from the README as it is to the README as the tool would write it ('' if equal)."""
    text = path.read_text(encoding="utf-8")
    new = regenerate(text)
    return "".join(difflib.unified_diff(text.splitlines(True), new.splitlines(True), f"{path.name} (as written)",
                                        f"{path.name} (as the tool prints it now)"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 with a diff on a mismatch")
    ap.add_argument("--readme", type=Path, default=README)
    a = ap.parse_args(argv)
    text = a.readme.read_text(encoding="utf-8")
    if not examples(text):
        print(f"{a.readme}: no '<!-- example: gpu-advisor ... -->' blocks found", file=sys.stderr)
        return 1
    if a.check:
        d = diff(a.readme)
        sys.stdout.write(d or f"{a.readme}: every example block matches the tool\n")
        return 1 if d else 0
    new = regenerate(text)
    if new != text:
        a.readme.write_text(new, encoding="utf-8")
    print(f"{a.readme}: {len(examples(text))} example block(s) {'rewritten' if new != text else 'already match'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
