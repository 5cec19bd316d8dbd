#!/usr/bin/env python3
"""Check a dated observation sheet (default: pricing/data/observations.csv) before it ships.

    python scripts/check_observations.py [SHEET]

Every row must be cited and dated, with no date more than a day ahead of the clock, observed_at on
or before read_at, a GPU name from pricing/data/gpus.csv, a positive finite price within the price
sheets' per-GPU bounds, a tier, unit and currency from their closed sets and printable text; a
repeated observation is reported too (pricing.observations holds the rules). Prints one line per
problem (file, row as a spreadsheet numbers it, column, what is wrong) and exits 1 if there is any,
else prints a one-line summary and exits 0. The test suite runs it on the bundled sheet.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pricing import observations  # noqa: E402  (the checkout's own package, installed or not)
from pricing.schema import CONTROL_RE  # noqa: E402


def main(argv=None) -> int:

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sheet", type=Path, nargs="?", default=observations.SHEET)
    args = ap.parse_args(argv)
    good, problems = observations.read(args.sheet)
    for p in problems:
        print(CONTROL_RE.sub("?", str(p)))  # one line each, whatever the file holds
    if problems:
        return 1
    if not len(good):
        print(f"{args.sheet}: sheet has no rows")
        return 1
    providers = good["provider"].nunique()
    print(f"{args.sheet}: {len(good)} observations of {providers} providers, "
          f"{good['source'].nunique()} sources, observed {good['observed_at'].min():%Y-%m-%d} to "
          f"{good['observed_at'].max():%Y-%m-%d}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
