"""`gpu-advisor validate`: run the memory/time accuracy benchmark and print its tables.

The benchmark and the published measurements live beside the package in a source checkout
(`benchmarks/accuracy.py`, `../shared/calibration/`), not in the installed wheel; without
them this command says so in one line.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from advisor.errors import AdvisorError, BadInput

REPO = Path(__file__).resolve().parents[2]


def _accuracy_module():
    if not (REPO / "benchmarks" / "accuracy.py").is_file():
        raise AdvisorError("validate: needs a source checkout (benchmarks/accuracy.py was not found next to advisor/).")
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module("benchmarks.accuracy")


@click.command()
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Published measurements (default ../shared/calibration/measured_memory.csv).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Markdown file to write (default benchmarks/results/accuracy.md).")
@click.option("--no-write", is_flag=True, help="Print only; do not write the Markdown file.")
def validate(csv_path: Path | None, out: Path | None, no_write: bool) -> None:
    """Compare the estimator (and other calculators' rules) with published GPU measurements."""
    accuracy = _accuracy_module()
    path = csv_path or accuracy.MEASURED_CSV
    if not Path(path).is_file():
        raise BadInput(f"--csv: no such file {path} (the calibration data lives in ../shared/calibration).")
    argv = ["--csv", str(path)]
    if out:
        argv += ["--out", str(out)]
    if no_write:
        argv.append("--no-write")
    accuracy.main(argv)
