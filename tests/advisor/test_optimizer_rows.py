"""Optimizers are data: one row of advisor/data/optimizers.csv each, with its source, and adding an optimizer is
adding a row (estimate, plan and the launch bundle take it with no code change)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from advisor import techniques
from advisor.errors import BadInput

ROOT = Path(__file__).resolve().parents[2]


def _copy_with(tmp_path: Path, **row: object) -> Path:
    """The bundled optimizers.csv plus one row (the other columns empty), written to tmp_path."""
    with techniques.OPTIMIZERS_FILE.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, list(reader)
    rows.append({name: str(row.get(name, "")) for name in fields})
    path = tmp_path / "optimizers.csv"
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


# A made-up optimizer: three fp32 states per parameter (12 B), its own trainer name.
TEST_ROW = dict(name="adamw-test", states=3, state_dtype="fp32", quant_block=0, fp32_master="no", factored="no",
                eight_bit="no", paged="no", searched="no", offload_host_bytes=20, step_bytes_pure16=30,
                step_bytes_amp=40, hf_optim="adamw_test", hf_optim_read="adamw_test",
                state_note="3 fp32 states", copy_note="3 fp32 states", memory_source="a made-up test optimizer",
                source="tests/advisor/test_optimizer_rows.py (made up)")

# Runs in a fresh process: the one path constant points at the copy before anything reads the rows.
_SCRIPT = """
import json, sys
from pathlib import Path
import advisor.techniques as techniques
techniques.OPTIMIZERS_FILE = Path(sys.argv[1])
from click.testing import CliRunner
from cli import cli
out = Path(sys.argv[2])
runs = {
    "estimate": ["estimate", "qwen2.5-0.5b", "--optimizer", "adamw-test", "--format", "json"],
    "plan": ["plan", "--model", "qwen2.5-0.5b", "--tokens", "5M", "--gpu", "A10G", "--providers", "aws",
             "--methods", "full", "--optimizer", "adamw-test", "--format", "json"],
    "launch": ["launch", "--model", "qwen2.5-0.5b", "--tokens", "5M", "--gpu", "A10G", "--providers", "aws",
               "--methods", "full", "--optimizer", "adamw-test", "--out", str(out / "bundle")],
}
print(json.dumps({k: (r.exit_code, r.stdout) for k, r in ((k, CliRunner().invoke(cli, a)) for k, a in runs.items())}))
"""


def test_adding_an_optimizer_is_one_data_row(tmp_path):
    data = _copy_with(tmp_path, **TEST_ROW)
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(data), str(tmp_path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr
    runs = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, (code, output) in runs.items():
        assert code == 0, f"{name}: {output}"

    est = json.loads(runs["estimate"][1])
    assert est["stack"]["optimizer"] == "adamw-test"
    states = est["components"]["optimizer.states"]
    assert states["bytes"] == 12 * est["model"]["params_trainable"]  # 3 states × 4 B, from the row alone
    assert states["formula"] == "3 fp32 states" and states["source"] == "a made-up test optimizer"

    plan = json.loads(runs["plan"][1])
    assert plan["candidates"], "the plan found no candidate with the new optimizer"
    assert {c["stack"]["optimizer"] for c in plan["candidates"]} == {"adamw-test"}

    args = yaml.safe_load((tmp_path / "bundle" / "training_args.yaml").read_text())
    assert args["training"]["optim"] == "adamw_test"


def test_the_new_rows_state_bytes_drive_the_estimate_in_process(tmp_path, monkeypatch):
    """The library reads the rows when it validates and estimates (the CLI's choices are fixed at its import)."""
    from advisor.api import estimate_memory
    from advisor.stacks import Stack

    monkeypatch.setattr(techniques, "OPTIMIZERS_FILE", _copy_with(tmp_path, **TEST_ROW))
    est = estimate_memory("qwen2.5-0.5b", Stack(optimizer="adamw-test", precision="bf16"))
    adamw = estimate_memory("qwen2.5-0.5b", Stack(optimizer="adamw", precision="bf16"))
    trainable = est.model.params_trainable
    assert est.components["optimizer.states"].bytes == 12 * trainable
    assert adamw.components["optimizer.states"].bytes == 4 * trainable  # 2 states × 2 B (bf16 parameters)


def test_every_row_cites_its_source_and_every_trainer_name_reads_back_to_one_row():
    rows = techniques.rows()
    assert rows, "no optimizer rows"
    owners: dict[str, list[str]] = {}
    for row in rows.values():
        assert row.source.strip() and row.memory_source.strip(), row.name
        for name in row.hf_optim_read:
            owners.setdefault(f"optim:{name}", []).append(row.name)
            assert techniques.from_hf_optim(name) == row.name
            assert techniques.from_hf_optim(name.upper()) == row.name  # configs spell them either way
        if row.torchtune_component:
            owners.setdefault(f"torchtune:{row.torchtune_component}", []).append(row.name)
            assert techniques.from_torchtune(row.torchtune_component) == row.name
        assert techniques.from_hf_optim(row.hf_optim) is not None, f"{row.name} writes {row.hf_optim}, read by none"
    assert {k: v for k, v in owners.items() if len(v) > 1} == {}


def test_the_names_the_bundle_writes_are_transformers_optimizer_names():
    from transformers.training_args import OptimizerNames

    known = {o.value for o in OptimizerNames}
    assert {row.name: row.hf_optim for row in techniques.rows().values() if row.hf_optim not in known} == {}


def test_the_searched_and_8bit_sets_come_from_the_rows():
    from advisor.planner import configs

    assert configs.OPTIMIZERS == tuple(r.name for r in techniques.rows().values() if r.searched)
    assert set(configs.EIGHT_BIT) == {r.name for r in techniques.rows().values() if r.eight_bit}
    assert configs.STANDARD not in configs.EIGHT_BIT and configs.LEANEST["optimizer"] in configs.EIGHT_BIT


def test_a_trainer_name_given_to_two_rows_is_refused_in_one_line(tmp_path):
    path = _copy_with(tmp_path, **{**TEST_ROW, "hf_optim_read": "adamw_torch"})
    with pytest.raises(BadInput) as err:
        techniques.load(path)
    assert "optim:adamw_torch" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("column, value", [("states", "two"), ("eight_bit", "maybe"), ("state_dtype", "fp8"),
                                           ("source", " ")])
def test_a_malformed_row_is_refused_naming_the_column(tmp_path, column, value):
    with pytest.raises(BadInput) as err:
        techniques.load(_copy_with(tmp_path, **{**TEST_ROW, column: value}))
    assert column in str(err.value) and "\n" not in str(err.value)


def test_an_unknown_optimizer_is_refused_naming_every_row():
    from pydantic import ValidationError

    from advisor.errors import validation_message
    from advisor.stacks import Stack

    with pytest.raises(ValidationError) as err:
        Stack(optimizer="adamw-nonesuch")
    text = validation_message(err.value)
    assert text.startswith("--optimizer: expected ") and "\n" not in text and "adamw-nonesuch" in text
    assert all(repr(name) in text for name in techniques.names())
