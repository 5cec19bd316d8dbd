"""Managed fine-tuning beside self-hosting: the bundled, cited sheet and a user's own."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from pricing.errors import PriceInputError
from pricing.managed import SHEET, alternatives, rows

HEADER = ("provider,service,min_params_b,max_params_b,models,methods,usd_per_m_tokens,usd_per_m_tokens_high,"
          "min_charge_usd,source,observed_at,date_read,note\n")


def sheet(tmp_path, *lines) -> Path:
    path = tmp_path / "managed.csv"
    path.write_text(HEADER + "".join(line + "\n" for line in lines))
    return path


def test_bundled_rows_are_cited_and_dated():
    with open(SHEET, newline="") as f:
        raw = list(csv.DictReader(f))
    assert raw and all(r["source"].startswith("https://") and r["date_read"] for r in raw)
    assert len(rows()) == len(raw)  # every row parses


def test_the_same_tokens_times_epochs_are_priced_for_a_listed_model_and_method():
    [alt] = alternatives("meta-llama/Llama-3.1-8B", 8.03, "lora", 100e6, epochs=2)
    assert alt.provider == "together" and alt.billed_m_tokens == 200
    assert alt.usd == pytest.approx(200 * alt.usd_per_m_tokens)
    assert alt.usd_high == pytest.approx(200 * alt.usd_per_m_tokens_high) and alt.usd_high > alt.usd
    assert alt.source.startswith("https://") and alt.observed_at


def test_methods_and_sizes_the_service_does_not_list_get_nothing():
    assert alternatives("meta-llama/Llama-3.1-8B", 8.03, "qlora", 100e6) == []  # no service sells QLoRA
    assert alternatives("some/huge-model", 400.0, "lora", 100e6) == []  # above every bracket


def test_a_named_model_list_is_matched_by_name_and_a_minimum_charge_applies(tmp_path):
    path = sheet(tmp_path,
                 "acme,FT,0,16,togethercomputer/Meta-Llama-3.1-8B-Instruct-Reference;Qwen/Qwen3-8B,lora,2.0,,50,"
                 "https://example.org/p,2026-11-01,2026-11-02,",
                 "nomodels,FT,0,16,,lora,0.01,,0,https://example.org/q,,2026-11-02,")
    [alt] = alternatives("meta-llama/Llama-3.1-8B-Instruct", 8.03, "lora", 10e6, path=path)
    assert alt.provider == "acme" and alt.usd == 50  # 10 M tokens x $2 = $20, below the $50 minimum
    assert alternatives("meta-llama/Llama-3.1-8B", 8.03, "lora", 10e6, path=path) == []  # the base is not listed
    assert alternatives("Qwen/Qwen3-8B", 8.2, "lora", 100e6, path=path)[0].usd == 200


@pytest.mark.parametrize("line, column", [
    ("a,FT,0,16,any-hf,lora;sft,1,,0,https://x,,,", "methods"),
    ("a,FT,0,16,any-hf,lora,cheap,,0,https://x,,,", "usd_per_m_tokens"),
    ("a,FT,0,16,any-hf,lora,2,1,0,https://x,,,", "usd_per_m_tokens_high"),
    ("a,FT,0,16,any-hf,lora,1,,0,,,,", "source"),
    ("a,FT,0,16,any-hf,lora,1,,0,https://x,,,cheap \x1b[2J today", "note"),
    ("a\u202e,FT,0,16,any-hf,lora,1,,0,https://x,,,", "provider"),
    ("a,FT,0,16,any-hf,lora,1,,0,https://x,,," + "n" * 1001, "note")])
def test_a_bad_cell_is_bad_input_naming_its_row_and_column(tmp_path, line, column):
    with pytest.raises(PriceInputError) as err:
        alternatives("x/y", 8, "lora", 1e6, path=sheet(tmp_path, line))
    assert "row 1" in str(err.value) and column in str(err.value) and err.value.exit_code == 2


def test_a_managed_sheet_with_a_control_character_is_one_line_before_any_plan(tmp_path, monkeypatch, capsys):
    """The user-editable sheet follows the price sheets' text rule: an escape sequence in a note is
    refused in one line naming the file, row and column, and never reaches the terminal."""
    from helpers.cli_run import gpu_advisor, one_line_error

    monkeypatch.setenv("GPU_ADVISOR_MANAGED_SHEET", str(sheet(tmp_path, "a,FT,0,16,any-hf,lora,1,,0,https://x,,,x\x1b[2Jy")))
    code, out, err = gpu_advisor(capsys, "plan", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "10M",
                                 "--methods", "lora")
    line = one_line_error(code, err)
    assert "managed.csv: row 1" in line and "'note'" in line and "U+001B" in line and out == ""
