"""Tables and numbers as people read them: plan tables that fit 80 and 120 columns, colour only on
a terminal, CSV in cents with the p10-p90 band, counts and memory in one unit, enum options in any case."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli_run import gpu_advisor, one_line_error

from advisor.units import count

ROOT = Path(__file__).resolve().parents[2]

# Spot prices on every row; the long instance name and markup-like source must fold and print as text.
SHEET = """provider,region,instance_type,gpu_model,gpu_count,gpu_memory_gb,vcpus,ram_gb,price_hour,spot_price_hour,currency,source,fetched_at,interconnect
acme,eu-1,acme.h100x1.with-a-very-long-instance-name-that-must-fold,H100,1,80,26,225,2.10,0.90,USD,[bold]acme-list[/bold],2026-11-20T00:00:00Z,
acme,eu-1,acme.l4x1,L4,1,24,8,32,0.60,0.25,USD,[bold]acme-list[/bold],2026-11-20T00:00:00Z,
acme,eu-2,acme.a100x2,A100-80GB,2,80,24,340,3.20,1.40,USD,[bold]acme-list[/bold],2026-11-20T00:00:00Z,
"""


@pytest.fixture(scope="module")
def sheet(tmp_path_factory):
    p = tmp_path_factory.mktemp("sheet") / "acme.csv"
    p.write_text(SHEET)
    return str(p)


def plan(capsys, monkeypatch, sheet, *extra, columns=None):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(columns))
    return gpu_advisor(capsys, "plan", "meta-llama/Llama-3.1-8B", "--tokens", "20M", "--prices", sheet,
                       "--providers", "acme", "--all-stacks", "--top", "6", *extra)


def table_lines(out: str) -> list[str]:
    return out.split("\n\n", 1)[0].splitlines()


@pytest.mark.parametrize("columns", [80, 120])
def test_the_plan_fits_the_terminal_with_rank_cost_hours_and_rate_first(capsys, monkeypatch, sheet, columns):
    code, out, _ = plan(capsys, monkeypatch, sheet, columns=columns)
    assert code == 0
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= columns
    head = table_lines(out)[0].split()
    assert head[:6] == ["#", "cost", "p80", "hours", "p80", "$/h"]  # the ranked figures (the cost band column leaves first)
    ranks = [line.split()[0].rstrip("*") for line in table_lines(out)[1:] if not line.startswith(" ")]
    assert ranks == [str(i) for i in range(1, 7)]
    assert "acme.h100x1.with-a-very-long-instance" in out.replace("\n", "").replace(" ", "")  # folded, not cut
    _, data, _ = plan(capsys, monkeypatch, sheet, "--format", "json")
    labels = [c["label"] for c in json.loads(data)["candidates"]]
    table = "\n".join(table_lines(out))
    for word in ("·", "adamw", "r16", "bf16"):  # every word of every stack label is printed, none cropped
        assert table.count(word) == sum(label.count(word) for label in labels), word


def test_a_narrow_terminal_names_the_columns_it_left_out(capsys, monkeypatch, sheet):
    _, narrow, _ = plan(capsys, monkeypatch, sheet, columns=80)
    _, wide, _ = plan(capsys, monkeypatch, sheet, columns=400)
    assert "Columns left out to fit 80 columns" in narrow and "$/M tok" in narrow
    assert "Columns left out" not in wide and "$/M tok" in table_lines(wide)[0]


def test_in_a_pipe_each_row_is_one_line_without_colour(capsys, monkeypatch, sheet):
    monkeypatch.setenv("NO_COLOR", "")
    code, out, _ = plan(capsys, monkeypatch, sheet)
    lines = table_lines(out)
    assert code == 0 and len(lines) == 7 and "\x1b" not in out
    assert "[bold]acme-list[/bold]" in out  # a price source is data, never rich markup


def test_no_column_repeats_cost_and_spot_shows_only_when_asked(capsys, monkeypatch, sheet):
    _, on_demand, _ = plan(capsys, monkeypatch, sheet)
    head = table_lines(on_demand)[0]
    assert "on-demand" not in head and "spot" not in head
    _, spot, _ = plan(capsys, monkeypatch, sheet, "--spot")
    assert "spot" in table_lines(spot)[0].split()


def test_csv_has_cents_and_the_band_beside_each_value(capsys, monkeypatch, sheet):
    code, out, _ = plan(capsys, monkeypatch, sheet, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and len(rows) == 6
    header = list(rows[0])
    assert header.index("hours_low") == header.index("hours") + 1 and header.index("cost_low") == header.index("cost_usd") + 1
    for row in rows:
        for money in ("cost_usd", "cost_low", "cost_high", "cost_on_demand_usd", "price_hour"):
            assert re.fullmatch(r"\d+(\.\d{1,2})?", row[money]), (money, row[money])
        assert float(row["hours_low"]) <= float(row["hours"]) <= float(row["hours_high"])
        assert float(row["cost_low"]) <= float(row["cost_usd"]) <= float(row["cost_high"])
        assert len(row["hours"].split(".")[-1]) <= 3


def _on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    """Run `gpu-advisor ARGS` with its stdout on a real pseudo-terminal; what the terminal received."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "advisor", *args], stdout=follower, stderr=subprocess.DEVNULL,
                            cwd=ROOT, env={**os.environ, "COLUMNS": "100", **env})
    os.close(follower)
    chunks = []
    while select.select([leader], [], [], 60)[0]:  # a hung command fails the test instead of blocking it
        try:
            data = os.read(leader, 65536)
        except OSError:  # the follower side closed: the command is done
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(leader)
    return b"".join(chunks).decode()


def test_colour_on_a_terminal_only_and_never_with_no_color():
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    coloured = _on_a_terminal(["models", "--family", "qwen2"], {**env, "NO_COLOR": ""})
    plain = _on_a_terminal(["models", "--family", "qwen2"], {"NO_COLOR": "1"})
    assert "\x1b[" in coloured and "Qwen/Qwen2.5-7B" in coloured
    assert "\x1b" not in plain and "Qwen/Qwen2.5-7B" in plain


@pytest.mark.parametrize("n, text", [(999_885_952, "1.00B"), (7_241_732_096, "7.24B"), (999_600, "1.00M"),
                                     (13_015_864_320, "13.0B"), (494_032_768, "494M"), (999, "999")])
def test_counts_read_as_people_write_them(n, text):
    assert count(n) == text


def test_every_count_keeps_three_figures_without_an_exponent():
    units = {"T": 1e12, "B": 1e9, "M": 1e6, "K": 1e3, "": 1}
    for n in [int(10 ** (k / 7)) for k in range(0, 90)] + [10**e - 1 for e in range(1, 13)]:
        text = count(n)
        assert "e" not in text
        value, unit = re.fullmatch(r"([\d.,]+)([TBMK]?)", text).groups()
        assert abs(float(value.replace(",", "")) * units[unit] - n) <= 0.005 * n + 0.5, (n, text)


def test_models_prints_gemma_3_1b_as_a_billion(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    code, out, _ = gpu_advisor(capsys, "models", "--family", "gemma3_text")
    line = next(line for line in out.splitlines() if line.startswith("google/gemma-3-1b"))
    assert code == 0 and "1.00B" in line and "e+" not in out
    assert max(len(x) for x in out.splitlines()) <= 120
    monkeypatch.setenv("COLUMNS", "70")
    code, out, _ = gpu_advisor(capsys, "models", "--family", "gemma3_text")
    assert code == 0 and max(len(x) for x in out.splitlines()) <= 70 and "aliases left out" in out


def test_estimate_says_none_fits_and_uses_one_memory_unit(capsys):
    code, out, _ = gpu_advisor(capsys, "estimate", "qwen2.5-7b", "--method", "lora", "--gpu", "RTX4090")
    assert code == 0
    assert "largest micro-batch at seq 2048: none (even 1 does not fit)" in out
    assert out.count("GiB") == 1  # said once, for nvidia-smi users; everything else in GB
    assert "RTX4090: 24 GB card, 25.8 GB usable, limit 23.2 GB with 10% headroom" in out


def test_enum_options_take_any_case(capsys, monkeypatch, sheet, tmp_path):
    code, out, _ = plan(capsys, monkeypatch, sheet, "--methods", "LoRA", "--precision", "BF16", "--sort", "Time",
                        "--format", "JSON")
    assert code == 0 and '"method": "lora"' in out and '"method": "full"' not in out
    code, out, _ = gpu_advisor(capsys, "estimate", "qwen2.5-0.5b", "--method", "QLoRA", "--format", "JSON")
    assert code == 0 and '"method": "qlora"' in out
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(f"model: meta-llama/Llama-3.1-8B\ntokens: 20M\nmethods: [QLoRA]\nprecision: BF16\n"
                         f"prices: [{sheet}]\nproviders: acme\n")
    code, out, _ = gpu_advisor(capsys, "plan", "-f", plan_file, "--format", "json")
    assert code == 0 and '"method": "qlora"' in out and '"precision": "bf16"' in out


def test_an_unknown_method_is_refused_under_the_option_typed(capsys, sheet):
    code, _, err = gpu_advisor(capsys, "plan", "meta-llama/Llama-3.1-8B", "--tokens", "20M", "--prices", sheet,
                               "--methods", "LoRa2")
    line = one_line_error(code, err)
    assert "--methods" in line and "'LoRa2'" in line and "lora" in line
