"""The GPU measurement harness, run on the CPU with a tiny config: mechanics only."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import gpu_measure

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_measure.py"


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == gpu_measure.COLUMNS
        return list(reader)


@pytest.mark.slow
def test_cpu_tiny_run_writes_a_row_per_case_with_versions_and_skips_explained(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--steps", "2",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert path.parent == tmp_path and path.name.startswith("gpu_measure_cpu-tiny_")
    rows = read(path)
    assert [r["case"] for r in rows] == [c.id for c in gpu_measure.tiny_matrix()]
    import torch
    import transformers

    for r in rows:
        assert r["torch"] == torch.__version__ and r["transformers"] == transformers.__version__ and r["date"]
        if r["method"] == "qlora" or r["attention"] == "flash":
            assert r["status"] == "skipped" and ("bitsandbytes" in r["reason"] or "Flash" in r["reason"])
        else:
            assert r["status"] == "ok", r["reason"]
            assert float(r["tokens_per_sec"]) > 0 and float(r["step_seconds"]) > 0
    # checkpointing trades memory for recompute: the estimator's prediction must reflect it
    full = {r["grad_checkpointing"]: r for r in rows if r["method"] == "lora" and r["attention"] == "sdpa"}
    if full["True"]["est_peak_allocated"]:
        assert int(full["True"]["est_peak_allocated"]) < int(full["False"]["est_peak_allocated"])


def test_budget_stops_starting_new_cases_and_records_them(tmp_path):
    path = gpu_measure.main(["--device", "cpu", "--tiny", "--budget-seconds", "0", "--out", str(tmp_path)])
    rows = read(path)
    assert len(rows) == len(gpu_measure.tiny_matrix())
    assert all(r["status"] == "skipped" for r in rows)
    assert any(r["reason"].startswith("budget:") for r in rows)


def test_cuda_requested_without_a_gpu_is_one_clear_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--device cuda" in proc.stderr


def test_h200_plan_fits_the_eight_minute_budget():
    plan = [gpu_measure.planned_seconds(c, gpu_measure.params_of(gpu_measure.spec_for(c)), 3)
            for c in gpu_measure.cuda_matrix()]
    assert 0 < sum(plan) <= 480
    methods = {c.method for c in gpu_measure.cuda_matrix()}
    assert methods == {"full", "lora", "qlora"}
