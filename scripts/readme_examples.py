"""Regenerate (or check) every real-output block in README.md and docs/**/*.md from the tool itself.

A block is a fenced code block right after a marker naming the exact command:

    <!-- example: gpu-advisor estimate llama-3.1-8b --gpu L4 -->
    <!-- example, first 8 lines: gpu-advisor plan --model llama-3.1-8b --tokens 100M -->
    <!-- example: gpu-advisor plan --model M --tokens N --format json > p.json && gpu-advisor report p.json -o r.md -->
    <!-- example, own process: gpu-advisor ... -->

A marker may chain commands with `&&` (each a `gpu-advisor` command, run in order in the same
folder); a step ending in `> FILE` writes its stdout to FILE there instead of the block. The block is
the stdout of the other steps.

Each step runs in this process through click's CliRunner against the real `cli` group (what the
console script calls), or, for a marker that says `own process`, as a fresh `python -m advisor ...`.
Both see the same fixed environment, so the output depends only on the code and its bundled data: an
empty temporary cache, HOME and Hugging Face cache, the working folder (no fetched prices, no
network: HF_HUB_OFFLINE=1), none of the caller's settings (every variable of pricing/settings.py's
table and any other GPU_ADVISOR_*/HF_* one is unset; the default staleness rule included, so the
README shows what a new user sees) except GPU_ADVISOR_TODAY=2026-12-01 (TODAY): prices are aged and
marked STALE as of that day (pricing/clock.py), the day the bundled observation sheet was last
checked, so the calendar turns nothing STALE; COLUMNS=200, NO_COLOR=1 and a UTF-8 locale (the output
holds no other date than the sheets' own). The block is the command's stdout (stderr warnings are
left out), trailing spaces removed, cut to the first N lines when the marker says so. One command
named by several markers (the README and a docs page) is run once per process.

    python scripts/readme_examples.py                  rewrite README.md and every docs page with markers, in place
    python scripts/readme_examples.py --check          exit 1 with a diff when a block no longer matches
    python scripts/readme_examples.py FILE [FILE...]   only these files (with or without --check)
    python scripts/readme_examples.py --own-process    run every step as a fresh process (slower; a cross-check)

tests/test_docs.py runs the check.
"""

from __future__ import annotations

import argparse
import difflib
import functools
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
DOCS = ROOT / "docs"
TODAY = "2026-12-01"  # the day pricing/data/observations.csv was last checked (its OBSERVATIONS.md)
MARKER = re.compile(r"^<!-- example(?P<own>, own process)?(?:, first (?P<lines>\d+) lines)?: "
                    r"(?P<command>gpu-advisor .+?) -->\n(?P<fence>```[^\n]*\n)(?P<body>.*?)^```$", re.M | re.S)
OWN_PROCESS = False  # --own-process: every step as a fresh process


@dataclass(frozen=True)
class Example:
    command: str
    lines: int | None
    start: int  # offsets of the block's body in the file's text
    end: int
    own_process: bool = False


def examples(text: str) -> list[Example]:
    """Every marked block, in the file's order."""
    return [Example(m["command"], int(m["lines"]) if m["lines"] else None, m.start("body"), m.end("body"),
                    bool(m["own"])) for m in MARKER.finditer(text)]


def environment(home: Path) -> dict[str, str]:
    """The fixed environment every example runs in (see the module docstring)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
            "GPU_ADVISOR_CACHE_DIR": str(home / "gpu-advisor-cache"), "XDG_CACHE_HOME": str(home / "cache"),
            "HF_HOME": str(home / "hf"), "HF_HUB_OFFLINE": "1", "GPU_ADVISOR_TODAY": TODAY,
            "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb", "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8",
            "PYTHONPATH": str(ROOT)}


def in_process_environment(home: Path) -> dict[str, str | None]:
    """`environment(home)` as CliRunner's overrides: the fixed values, and None (unset for the call) for
    every setting the tool reads (pricing/settings.py's table) and any other GPU_ADVISOR_*/HF_* variable."""
    from pricing.settings import VARIABLES

    fixed = environment(home)
    ours = {*VARIABLES, *(k for k in os.environ if k.startswith(("GPU_ADVISOR_", "HF_", "TRANSFORMERS_")))}
    return {**{k: None for k in ours if k not in fixed}, **fixed}


def steps(command: str) -> list[tuple[list[str], str | None]]:
    """The marker's command as (arguments after `gpu-advisor`, file its stdout goes to or None), per step."""
    out: list[tuple[list[str], str | None]] = []
    words = shlex.split(command)
    while words:
        step = words[:words.index("&&")] if "&&" in words else words
        words = words[len(step) + 1:]
        target = None
        if len(step) >= 2 and step[-2] == ">":
            step, target = step[:-2], step[-1]
        if not step or step[0] != "gpu-advisor" or ">" in step or "&&" in step:
            raise SystemExit(f"readme example: each step must be `gpu-advisor ...` [> FILE]: {command}")
        out.append((step[1:], target))
    return out


def _own_process(args: list[str], home: Path) -> tuple[int, str, str]:
    r = subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True, text=True, cwd=home,
                       env=environment(home), timeout=600)
    return r.returncode, r.stdout, r.stderr


def _in_process(args: list[str], home: Path) -> tuple[int, str, str]:
    """The step through click's CliRunner against the real `cli` group, in `home` as the working folder."""
    from click.testing import CliRunner

    from cli import cli

    before = os.getcwd()
    os.chdir(home)
    try:
        r = CliRunner().invoke(cli, args, prog_name="gpu-advisor", env=in_process_environment(home))
    finally:
        os.chdir(before)
    err = r.stderr
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        err += f"{type(r.exception).__name__}: {r.exception}"
    return r.exit_code, r.stdout, err


STARTED = {"in process": 0, "own process": 0}  # steps run so far, by how


@functools.cache
def printed(command: str, own_process: bool = False) -> str:
    """Everything the command's steps print on stdout (run once per process and way of running)."""
    out = []
    how = "own process" if own_process else "in process"
    with tempfile.TemporaryDirectory(prefix="readme-example-") as folder:
        home = Path(folder)
        for args, target in steps(command):
            STARTED[how] += 1
            code, stdout, stderr = (_own_process if own_process else _in_process)(args, home)
            if code != 0:
                raise SystemExit(f"readme example failed (exit {code}): {command}\n{stderr.strip()}")
            if target is None:
                out.append(stdout)
            else:
                (home / target).write_text(stdout, encoding="utf-8")
    return "".join(out)


def run(example: Example) -> str:
    """The block's text as the command prints it now."""
    text = printed(example.command, example.own_process or OWN_PROCESS)
    lines = [line.rstrip() for line in text.rstrip("\n").splitlines()]
    return "\n".join(lines[:example.lines] if example.lines else lines) + "\n"


def regenerate(text: str) -> str:
    """The text with every marked block replaced by the command's current output."""
    out, pos = [], 0
    for ex in examples(text):
        out += [text[pos:ex.start], run(ex)]
        pos = ex.end
    return "".join(out) + text[pos:]


def files() -> list[Path]:
    """README.md and every docs page (docs/**/*.md) that has at least one marked block."""
    docs = sorted(p for p in DOCS.rglob("*.md") if examples(p.read_text(encoding="utf-8")))
    return [README, *docs]


def diff(path: Path = README) -> str:
    """A unified diff from the file as it is to the file as the tool would write it ('' if equal)."""
    text = path.read_text(encoding="utf-8")
    new = regenerate(text)
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return "".join(difflib.unified_diff(text.splitlines(True), new.splitlines(True), f"{name} (as written)",
                                        f"{name} (as the tool prints it now)"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path, metavar="FILE",
                    help="Markdown files to regenerate or check (default: README.md and every docs page with markers)")
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 with a diff on a mismatch")
    ap.add_argument("--own-process", action="store_true", help="run every step as a fresh process")
    # --readme FILE: the older spelling of FILE
    ap.add_argument("--readme", type=Path, action="append", default=[], help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    global OWN_PROCESS
    OWN_PROCESS = a.own_process
    paths = [p.resolve() for p in [*a.readme, *a.files]] or files()
    status = 0
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if not examples(text):
            print(f"{path}: no '<!-- example: gpu-advisor ... -->' blocks found", file=sys.stderr)
            status = 1
            continue
        if a.check:
            d = diff(path)
            sys.stdout.write(d or f"{path}: every example block matches the tool\n")
            status = status or (1 if d else 0)
            continue
        new = regenerate(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
        print(f"{path}: {len(examples(text))} example block(s) {'rewritten' if new != text else 'already match'}")
    print(f"steps run: {STARTED['in process']} in this process, {STARTED['own process']} as their own process",
          file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # the tool of this tree, in this process
    sys.exit(main())
