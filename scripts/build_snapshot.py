#!/usr/bin/env python3
"""Rebuild the bundled price snapshot (pricing/data/snapshot.csv) from SkyPilot catalog files.

    python scripts/build_snapshot.py [FOLDER] [--date 2026-11-30]   # FOLDER defaults to tests/data/skypilot_catalog

Reads every `*_vms*.csv` / `vms.csv` in the folder with our SkyPilot importer, takes the
source path and commit of each file from PROVENANCE.md (when present), marks clouds whose
catalog is older than the v9 generation as stale, validates, and writes the sheet atomically.
Rows the importer rejects are listed on stderr with their reason.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CATALOG = ROOT / "tests" / "data" / "skypilot_catalog"  # the extracts the bundled snapshot is built from

# PROVENANCE.md: Azure/Paperspace come from catalog v6 (2024-era), RunPod from v8 (2025-era).
# Lambda: every type is written for all 17 regions regardless of capacity (PRICE_SOURCES.md §1.4).
NOTES = {"azure": "stale:catalog-v6-2024-era", "paperspace": "stale:catalog-v6-2024-era",
         "runpod": "stale:catalog-v8-2025-era", "lambda": "region-listed-not-availability"}


def provenance(folder: Path) -> dict[str, tuple[str, str]]:
    """file name -> (source path, commit) from the PROVENANCE.md table."""
    out = {}
    prov = folder / "PROVENANCE.md"
    if prov.exists():
        for line in prov.read_text().splitlines():
            m = re.match(r"\|\s*(\S+\.csv)\s*\|\s*(\S+)\s*\|\s*([0-9a-f]{7,40})\s*\|", line)
            if m:
                out[m.group(1)] = (m.group(2), m.group(3))
    return out


def build(folder: Path, date: str, out: Path) -> tuple[int, list]:
    import pandas as pd

    from pricing import cache
    from pricing.schema import COLUMNS, validate
    from pricing.sources import skypilot

    prov = provenance(folder)
    frames, problems = [], []
    for f in skypilot.files_in(folder):
        cloud = skypilot.cloud_of(f)
        src, commit = prov.get(f.name, (f.name, "unknown"))
        df, probs = skypilot.import_path(f, fetched_at=f"{date}T00:00:00Z",
                                         source=f"skypilot-catalog@{commit[:12]}:{src}",
                                         notes_by_cloud={cloud: NOTES.get(cloud)})
        frames.append(df)
        problems += probs
    df = pd.concat([f for f in frames if len(f)], ignore_index=True)
    good, probs = validate(df, "snapshot")
    problems += probs
    good = good.sort_values(["provider", "gpu_model", "instance_type", "region"], kind="stable")
    good["fetched_at"] = good["fetched_at"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    data = good[list(COLUMNS)].to_csv(index=False, float_format="%.6g").encode()
    cache.atomic_write(out, data)
    return len(good), problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, nargs="?", default=CATALOG,
                    help="folder of SkyPilot vms.csv files (+ PROVENANCE.md); default: the in-repo extracts")
    ap.add_argument("--date", default="2026-11-30", help="fetched_at date for every row")
    ap.add_argument("--out", type=Path, default=ROOT / "pricing" / "data" / "snapshot.csv")
    args = ap.parse_args(argv)
    if not args.folder.is_dir():
        print(f"error: folder: not a directory: {args.folder}", file=sys.stderr)
        return 2
    n, problems = build(args.folder, args.date, args.out)
    for p in problems:
        print(f"skipped: {p}", file=sys.stderr)
    print(f"wrote {n} offers to {args.out} ({len(problems)} rows skipped, reasons above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
