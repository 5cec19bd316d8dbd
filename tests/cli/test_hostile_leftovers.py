"""What a killed run leaves behind, and spreadsheet formulas in disguise: a SIGKILLed `launch` leaves its
hidden staging folder, which the next write to that folder removes (a live run's is kept); a CSV cell that
starts with a look-alike of = + - @ is neutralised like the ASCII character."""

from __future__ import annotations

import subprocess
import sys
import unicodedata

import pytest

from advisor.launch.bundle import sweep_staging, write_bundle
from pricing.files import FORMULA_LOOKALIKES, csv_safe

KILLED = """
import os, signal, sys
import advisor.launch.bundle as b
real = b.atomic_write
def once(*a, **k):
    real(*a, **k)
    os.kill(os.getpid(), signal.SIGKILL)
b.atomic_write = once
b.write_bundle({"a.txt": "a", "b.txt": "b"}, sys.argv[1])
"""


def test_a_killed_launch_leaves_a_staging_folder_the_next_run_removes(tmp_path):
    out = tmp_path / "b1"
    done = subprocess.run([sys.executable, "-c", KILLED, str(out)], timeout=120)
    assert done.returncode == -9
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".b1.partial-")
    write_bundle({"a.txt": "a"}, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b1"]


def test_a_live_runs_staging_folder_is_kept(tmp_path):
    import os

    live = tmp_path / f".b2.partial-{os.getpid()}-0123abcd"
    live.mkdir()
    assert sweep_staging(tmp_path / "b2") == [] and live.is_dir()


def test_the_look_alikes_are_every_character_nfkc_folds_to_a_formula_start():
    folded = {chr(c) for c in range(sys.maxunicode + 1)
              if chr(c) not in "=+-@" and unicodedata.normalize("NFKC", chr(c)) in ("=", "+", "-", "@")}
    assert folded <= set(FORMULA_LOOKALIKES)


@pytest.mark.parametrize("first", [*FORMULA_LOOKALIKES, "=", "+", "-", "@"])
def test_a_cell_starting_with_a_look_alike_is_neutralised(first):
    assert csv_safe(first + "1+1") == "'" + first + "1+1"


def test_plain_numbers_and_text_are_left_alone():
    assert [csv_safe(v) for v in ("-0.5", "+3", "hello", "1\uff1d1")] == ["-0.5", "+3", "hello", "1\uff1d1"]
