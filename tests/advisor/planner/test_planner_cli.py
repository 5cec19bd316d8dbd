"""`gpu-advisor plan` as users run it: formats, plan files, user price sheets, errors, speed."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.results import Plan
from cli import cli

ROOT = Path(__file__).resolve().parents[3]

SHEET = """provider,region,instance_type,gpu_model,gpu_count,gpu_memory_gb,vcpus,ram_gb,price_hour,spot_price_hour,currency,source,fetched_at,interconnect
acme,eu-1,acme.h100x1,H100,1,80,26,225,2.10,,USD,acme-list,2026-11-20T00:00:00Z,
acme,eu-1,acme.l4x1,L4,1,24,8,32,0.60,0.25,USD,acme-list,2026-11-20T00:00:00Z,
"""


def invoke(*args):
    return CliRunner().invoke(cli, ["plan", *args], catch_exceptions=False)


@pytest.fixture
def sheet(tmp_path):
    p = tmp_path / "acme.csv"
    p.write_text(SHEET)
    return str(p)


def test_json_output_validates_and_keeps_the_contract(sheet):
    r = invoke("--model", "meta-llama/Llama-3.1-8B", "--tokens", "20M", "--prices", sheet, "--providers", "acme",
               "--format", "json")
    assert r.exit_code == 0, r.output
    plan = Plan.model_validate_json(r.output)
    data = json.loads(r.stdout)
    assert {"candidates", "others", "pareto_refs", "baseline_ref", "rejected", "assumptions"} <= set(data)
    assert {c["offer"]["provider"] for c in data["candidates"]} == {"acme"}
    assert data["candidates"][0]["offer"]["source"] == "acme-list" and data["candidates"][0]["offer"]["price_date"] == "2026-11-20"
    assert plan.command.startswith("gpu-advisor ")


def test_table_is_ranked_and_summarised(sheet):
    r = invoke("meta-llama/Llama-3.1-8B", "--tokens", "20M", "--prices", sheet, "--providers", "acme", "--top", "3")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith("#") and lines[1].startswith("1 ") and lines[2].startswith("2 ")
    assert "Pareto front" in r.output and "Ruled out before scoring" in r.output


def test_csv_for_spreadsheets(sheet):
    r = invoke("meta-llama/Llama-3.1-8B", "--tokens", "20M", "--prices", sheet, "--providers", "acme",
               "--format", "csv", "--top", "5", "--all-stacks")
    rows = list(csv.DictReader(io.StringIO(r.output)))
    assert len(rows) == 5 and float(rows[0]["cost_usd"]) <= float(rows[-1]["cost_usd"])


def test_markdown_table(sheet):
    r = invoke("meta-llama/Llama-3.1-8B", "--tokens", "20M", "--prices", sheet, "--providers", "acme", "--format", "md")
    assert r.output.startswith("| # |") and "|---|" in r.output


def test_plan_file_with_flags_overriding(tmp_path, sheet):
    f = tmp_path / "plan.yaml"
    f.write_text(f"model: meta-llama/Llama-3.1-8B\nexamples: 10000\navg_tokens: 500\nmethods: qlora\n"
                 f"prices: [{sheet}]\nproviders: acme\nspot: false\n")
    r = invoke("-f", str(f), "--format", "json", "--methods", "lora")
    data = json.loads(r.stdout)
    assert data["workload"]["tokens"] == 5_000_000
    assert {c["stack"]["method"] for c in data["candidates"]} == {"lora"}
    assert not any(c["cost"]["spot"] for c in data["candidates"])


def test_an_unmeetable_budget_and_deadline_exit_3_naming_both(sheet):
    r = invoke("meta-llama/Llama-3.1-8B", "--tokens", "2B", "--prices", sheet, "--providers", "acme",
               "--deadline", "1h", "--budget", "1", "--format", "json")
    data = json.loads(r.stdout)
    assert r.exit_code == 3 and "budget and deadline" in data["notice"] and data["candidates"]
    assert not data["constraints_met"]
    text = " ".join(data["warnings"])
    assert "budget of $1" in text and "deadline of 1 h" in text
    reasons = " ".join(x["reason"] for x in data["rejected"])
    assert "over the budget" in reasons and "misses the deadline" in reasons
    assert any(n.startswith("misses the deadline") for n in data["candidates"][0]["notes"])


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "advisor", "plan", *args], capture_output=True, text=True, cwd=ROOT)


def test_unknown_provider_is_one_line_exit_2():
    r = run_cli("meta-llama/Llama-3.1-8B", "--tokens", "1M", "--providers", "nosuchcloud")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "--providers" in r.stderr and "aws" in r.stderr


def test_missing_dataset_size_is_bad_input():
    r = run_cli("meta-llama/Llama-3.1-8B")
    assert r.returncode == 2 and "--tokens" in r.stderr


def test_report_is_written(tmp_path, sheet):
    out = tmp_path / "plan.md"
    r = invoke("meta-llama/Llama-3.1-8B", "--tokens", "20M", "--prices", sheet, "--providers", "acme",
               "--report", str(out))
    assert r.exit_code == 0 and out.exists() and "acme" in out.read_text()


@pytest.mark.slow
def test_whole_bundled_sheet_plans_without_heavy_imports():
    """Speed is measured in benchmarks/bench_planner.py; here the structure that keeps it: a fresh
    process plans over the whole bundled sheet without importing torch, transformers or the Hub."""
    code = ("import sys; from cli import cli; "
            "r = cli.main(['plan', '--model', 'meta-llama/Llama-3.1-8B', '--tokens', '100M', '--format', 'json'], "
            "standalone_mode=False); print('MODULES', sorted(sys.modules), file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert Plan.model_validate_json(r.stdout).candidates
    modules = r.stderr.rsplit("MODULES", 1)[1]
    for heavy in ("torch", "transformers", "huggingface_hub", "accelerate", "peft", "matplotlib"):
        assert f"'{heavy}'" not in modules, heavy


def test_plan_records_the_command_that_reproduces_it(sheet):
    args = ["meta-llama/Llama-3.1-8B", "--tokens", "20M", "--prices", sheet, "--providers", "acme", "--no-spot",
            "--format", "json"]
    first = Plan.model_validate_json(invoke(*args).output)
    assert "--no-spot" in first.command and "--providers acme" in first.command
    import shlex

    again = Plan.model_validate_json(invoke(*shlex.split(first.command)[2:]).output)
    assert [c.cost.usd for c in again.candidates] == [c.cost.usd for c in first.candidates]


def test_a_price_sheet_with_no_usable_row_is_an_error_not_silently_ignored(tmp_path):
    junk = tmp_path / "prices.csv"
    junk.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/usr/sbin/nologin\n")
    proc = subprocess.run([sys.executable, "-m", "advisor", "plan", "--model", "llama-3.1-8b", "--tokens", "1M",
                           "--prices", str(junk)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --prices:") and str(junk) in proc.stderr
    assert proc.stdout == ""


def test_skipped_rows_of_a_partly_bad_sheet_are_warned_about(tmp_path):
    sheet = tmp_path / "prices.csv"
    sheet.write_text("provider,gpu_model,gpu_count,price_per_gpu_hour\nacme,H100,8,1.5\nacme,H100,x,2\n")
    proc = subprocess.run([sys.executable, "-m", "advisor", "plan", "--model", "qwen2.5-0.5b", "--tokens", "1M",
                           "--prices", str(sheet), "--providers", "acme", "--skip-bad-rows"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "row 3, column 'gpu_count'" in proc.stderr  # spreadsheet rows: the header is row 1
    assert "acme" in proc.stdout
