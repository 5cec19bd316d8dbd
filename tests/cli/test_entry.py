"""The process entry (`gpu-advisor`, `python -m advisor`: cli.run) gives what cli.main gives although
it runs without the cyclic garbage collector: the same output, the same exit codes, files written
whole, exit handlers run and other threads finished."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from cli import cli

ROOT = Path(__file__).resolve().parents[2]

SHEET = """provider,region,instance_type,gpu_model,gpu_count,ram_gb,price_hour,fetched_at,source
acme,eu-1,acme.h100x1,H100,1,225,2.10,2026-11-20T00:00:00Z,acme-list
acme,eu-1,acme.l4x1,L4,1,32,0.60,2026-11-20T00:00:00Z,acme-list
"""


def _process(*args, code: str | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "advisor", *args] if code is None else [sys.executable, "-c", code, *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)


def _without_clock(text: str) -> dict:
    """The plan without its clock time and the count of estimates its engine made (an engine is
    shared within a process, so in the test session it may have made them for an earlier test)."""
    data = json.loads(text)
    data.pop("generated_at", None)
    data["assumptions"].pop("memory_estimates", None)
    return data


def test_process_output_and_files_match_the_in_process_command(tmp_path):
    sheet = tmp_path / "acme.csv"
    sheet.write_text(SHEET)
    args = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "20M", "--prices", str(sheet),
            "--providers", "acme", "--format", "json"]
    report = tmp_path / "out" / "plan.md"
    report.parent.mkdir()
    r = _process(*args, "--report", str(report))
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith("\n")
    here = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert _without_clock(r.stdout) == _without_clock(here.output)
    text = report.read_text()
    assert "acme" in text and text.endswith("\n")
    charts = sorted(report.parent.glob("*.svg"))
    assert [c.name for c in charts] == ["plan-cost-time.svg", "plan-memory.svg"]
    for chart in charts:  # written whole: every chart parses as XML
        import xml.etree.ElementTree as ET

        ET.fromstring(chart.read_text())


def test_exit_codes_and_one_line_errors_survive_the_fast_exit(tmp_path):
    bad = _process("plan", "--model", "no-such/model-anywhere", "--tokens", "1M")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: ")
    assert bad.stdout == ""
    unmet = _process("plan", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "100M", "--budget", "0.01",
                     "--deadline", "1h", "--format", "json")
    here = CliRunner().invoke(cli, ["plan", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "100M", "--budget",
                                    "0.01", "--deadline", "1h", "--format", "json"])
    assert unmet.returncode == here.exit_code != 0
    assert _without_clock(unmet.stdout)["constraints_met"] is False


def test_exit_handlers_run_and_a_live_thread_gets_the_ordinary_exit(tmp_path):
    """The exit stays the interpreter's own (no hard exit to save time): atexit handlers run, and a
    thread still working finishes its file."""
    marker = tmp_path / "thread.txt"
    code = ("import atexit, sys, threading, time\n"
            "atexit.register(lambda: print('handler ran', file=sys.stderr))\n"
            "def work():\n"
            "    time.sleep(0.3)\n"
            f"    open({str(marker)!r}, 'w').write('done')\n"
            "if '--thread' in sys.argv:\n"
            "    sys.argv.remove('--thread')\n"
            "    threading.Thread(target=work).start()\n"
            "from cli import run\n"
            "run()\n")
    r = _process("models", code=code)
    assert r.returncode == 0 and "handler ran" in r.stderr and r.stdout.strip()
    r = _process("--thread", "models", "--no-such-option", code=code)
    assert r.returncode == 2 and "handler ran" in r.stderr
    assert marker.read_text() == "done"


def test_help_lists_every_command_without_importing_any():
    """`gpu-advisor --help` writes the command list from cli.COMMANDS: no command module, nor the planner or
    the price loader they import, is loaded to list them (start-up: benchmarks/bench_startup.py)."""
    code = ("import sys\nsys.argv = ['gpu-advisor', '--help']\nfrom cli import run\ntry:\n    run()\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "print('MODULES', ' '.join(sorted(sys.modules)), file=sys.stderr)")
    r = _process(code=code)
    assert r.returncode == 0, r.stderr
    loaded = r.stderr.split("MODULES", 1)[1].split()
    heavy = [m for m in loaded if m.startswith(("advisor.planner", "pricing.loader", "pandas", "numpy"))
             or (m.startswith("cli.") and m != "cli")]
    assert not heavy, heavy
    from cli import COMMANDS

    assert all(f"  {name}  " in r.stdout for name in COMMANDS)
    via_module = _process("--help")  # python -m advisor
    assert via_module.returncode == 0 and via_module.stdout == r.stdout


def test_the_help_table_is_each_command_s_own_short_help():
    """cli.COMMANDS carries the first sentence of each command's help, so `--help` shows what the command
    itself says; a docstring that changes without the table fails here."""
    import click

    from cli import COMMANDS, _short

    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == list(COMMANDS)
    for name, (_, text) in COMMANDS.items():
        command = cli.get_command(ctx, name)
        for limit in (30, 45, 60, 80, 120, 400):
            assert _short(text, limit) == command.get_short_help_str(limit), (name, limit)
