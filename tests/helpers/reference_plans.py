"""Shared by tests in several folders (moved out of tests/reports/test_claims.py, issue 44)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


TODAY = "2026-12-01"


PLANS = {
    "8b-lora": "--model meta-llama/Llama-3.1-8B --tokens 100M --methods lora",
    "70b-full-4nodes": "--model meta-llama/Llama-3.1-70B --tokens 1B --methods full --max-nodes 4",
    "70b-qlora": "--model meta-llama/Llama-3.1-70B --tokens 100M --methods qlora",
    "budget-miss": "--model meta-llama/Llama-3.1-8B --tokens 1B --budget 20",
    "tiny-data": "--model meta-llama/Llama-3.2-1B --tokens 13028 --methods lora",
}


def env(home: Path, columns: int = 200) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "GPU_ADVISOR_TODAY": TODAY, "PYTHONPATH": str(ROOT),
            "GPU_ADVISOR_CACHE_DIR": str(home / "cache"), "COLUMNS": str(columns), "NO_COLOR": "1"}


def advisor(home: Path, *args: str, columns: int = 200) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True, text=True, cwd=home,
                          env=env(home, columns), timeout=600)
