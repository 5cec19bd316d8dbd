"""One output convention for every command (cli/output.py `output_options`): `--format` declared once, with the
same spelling and case rules everywhere, and `-o/--out FILE` where a command writes a file. `plan -o plan.json`
writes the chosen format to the file, whole, instead of standard output."""

from __future__ import annotations

import ast
import io
import json
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from helpers.cli_run import gpu_advisor, one_line_error

from cli import cli
from cli.output import OUTPUT_FORMATS, emit, render_table

ROOT = Path(__file__).resolve().parents[2]
SHEET = """provider,region,instance_type,gpu_model,gpu_count,ram_gb,price_hour,fetched_at,source
acme,eu-1,acme.h100x1,H100,1,225,2.10,2026-11-20T00:00:00Z,acme-list
acme,eu-1,acme.l4x1,L4,1,32,0.60,2026-11-20T00:00:00Z,acme-list
"""


@pytest.fixture()
def plan_args(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    sheet = tmp_path / "acme.csv"
    sheet.write_text(SHEET)
    return ["plan", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "20M", "--prices", str(sheet),
            "--providers", "acme"]


def _without_clock(text: str) -> dict:
    data = json.loads(text)
    data.pop("generated_at", None)
    data["assumptions"].pop("memory_estimates", None)
    return data


def test_plan_writes_its_json_to_the_out_file_instead_of_standard_output(tmp_path, capsys, plan_args):
    code, printed, _ = gpu_advisor(capsys, *plan_args, "--format", "json")
    assert code == 0
    out = tmp_path / "plan.json"
    code, stdout, stderr = gpu_advisor(capsys, *plan_args, "--format", "json", "-o", out)
    assert code == 0 and stdout == "" and f"wrote {out}" in stderr
    text = out.read_text()
    assert text.endswith("}\n") and _without_clock(text) == _without_clock(printed)
    words = shlex.split(json.loads(text)["command"])  # the recorded command reproduces the plan, not where it went
    assert "-o" not in words and str(out) not in words
    code, stdout, _ = gpu_advisor(capsys, "report", out, "--out", tmp_path / "r.md")  # the saved plan is usable
    assert code == 0 and (tmp_path / "r.md").is_file()


def test_plan_out_replaces_an_old_file_whole_and_a_refused_plan_leaves_it_alone(tmp_path, capsys, plan_args):
    out = tmp_path / "plan.csv"
    out.write_text("old contents\n" * 10_000)
    code, _, _ = gpu_advisor(capsys, *plan_args, "--format", "CSV", "--out", out)
    assert code == 0 and out.read_text().startswith("rank,") and "old contents" not in out.read_text()
    before = out.read_bytes()
    code, _, err = gpu_advisor(capsys, *plan_args, "--format", "csv", "-o", out, "--tokens", "lots")
    one_line_error(code, err)
    assert out.read_bytes() == before and [p.name for p in tmp_path.iterdir() if ".tmp" in p.name] == []


def test_a_table_written_to_a_file_has_no_colour_or_terminal_width(tmp_path, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("cli.output.sys.stdout", Terminal())
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("COLUMNS", "")  # empty: not set

    def table():
        return render_table(["name", "value"], [["a" * 60, "1"], ["b", "2"]])

    assert "\x1b[" in table()  # on the terminal: colour (so the check below can fail)
    out = tmp_path / "t.txt"
    emit(table, out)
    text = out.read_text()
    assert "\x1b[" not in text and "a" * 60 in text


def test_estimate_and_tokens_take_out_too(tmp_path, capsys):
    code, printed, _ = gpu_advisor(capsys, "estimate", "llama-3.1-8b", "--method", "lora", "--format", "json")
    out = tmp_path / "est.json"
    code, stdout, _ = gpu_advisor(capsys, "estimate", "llama-3.1-8b", "--method", "lora", "--format", "json", "-o", out)
    assert code == 0 and stdout == "" and json.loads(out.read_text()) == json.loads(printed)


def test_report_still_requires_its_out_file(tmp_path, capsys):
    code, _, err = gpu_advisor(capsys, "report", tmp_path / "plan.json")
    assert "--out" in one_line_error(code, err) or "-o" in err


def _walk(cmd: click.Command, path=()):
    yield path, cmd
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            yield from _walk(cmd.get_command(ctx, name), path + (name,))


def test_every_format_option_offers_known_formats_in_one_order_with_one_default():
    seen = {}
    for path, cmd in _walk(cli):
        for p in cmd.params:
            if "--format" in getattr(p, "opts", ()):
                choices = list(p.type.choices)
                assert choices == [f for f in OUTPUT_FORMATS if f in choices], (path, choices)
                assert p.default == "table" and p.name == "fmt" and not p.type.case_sensitive, path
                seen[" ".join(path)] = choices
            if "--out" in getattr(p, "opts", ()) and path != ("launch",):  # launch --out is a folder
                assert p.opts == ["-o", "--out"], path
    assert {"plan", "estimate", "tokens", "models", "calibrate", "prices list", "prices sources"} <= set(seen)


def test_format_is_declared_only_by_the_output_options_decorator():
    """No command module spells its own `--format` option (the spelling lives in cli/output.py)."""
    declared = []
    for path in sorted((ROOT / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "option" and any(
                    isinstance(a, ast.Constant) and a.value == "--format" for a in node.args):
                declared.append(f"{path.name}:{node.lineno}")
    assert len(declared) == 1 and declared[0].startswith("output.py:"), declared


def test_the_old_spellings_still_work(tmp_path, plan_args):
    runner = CliRunner()
    for fmt in ("json", "JSON", "Json"):
        res = runner.invoke(cli, ["models", "--format", fmt])
        assert res.exit_code == 0 and json.loads(res.output)
    res = runner.invoke(cli, ["prices", "list", "--gpu", "H100", "--limit", "2", "--format", "csv"])
    assert res.exit_code == 0 and res.output.startswith("provider,")
