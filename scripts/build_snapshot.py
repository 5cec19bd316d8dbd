#!/usr/bin/env python3
"""Rebuild the bundled price snapshot (pricing/data/snapshot.csv) from SkyPilot catalog files.

    python scripts/build_snapshot.py [FOLDER] [--date 2026-11-30] [--with-cache DIR]
    # FOLDER defaults to tests/data/skypilot_catalog; DIR is a `prices refresh` cache ($GPU_ADVISOR_CACHE_DIR)

Reads every `*_vms*.csv` / `vms.csv` in the folder with our SkyPilot importer, takes the
source path and commit of each file from PROVENANCE.md (when present), validates, and writes
the sheet atomically. Dates: `fetched_at` is `--date` (when the extracts were copied);
`observed_at` is the file's commit date as PROVENANCE.md's "Commit dates" table states it
(`git log -1 --format=%cI <commit> -- <path>` on a checkout of the catalog), and empty where
the table says `unknown` or has no row: a copy date is never passed off as an observation
date. Staleness then follows from the date alone (pricing.loader.stale_mask).
Rows the importer rejects are listed on stderr with their reason.

`--with-cache DIR` adds the sheets `gpu-advisor prices refresh` fetched into DIR (its `sheets/*.csv`,
every row dated by its feed): for each (provider, region, instance_type) the newest `observed_at` wins, an
undated catalog row losing to any dated fetched one, as the loader's precedence does. The scheduled
workflow (.github/workflows/refresh-prices.yml) runs the refreshers and then this, so the pull request it
opens is the dated snapshot.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CATALOG = ROOT / "tests" / "data" / "skypilot_catalog"  # the extracts the bundled snapshot is built from

# Lambda: every type is written for all 17 regions regardless of capacity (PRICE_SOURCES.md §1.4).
NOTES = {"lambda": "region-listed-not-availability"}
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(T[0-9:]+(Z|[+-]\d{2}:\d{2})?)?")


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


def commit_dates(folder: Path) -> dict[str, str | None]:
    """file name -> its commit date (ISO) from PROVENANCE.md's "Commit dates" table, None for `unknown`.
    Any other value is an error: a date must be read from git, never guessed."""
    out: dict[str, str | None] = {}
    prov = folder / "PROVENANCE.md"
    text = prov.read_text() if prov.exists() else ""
    _, _, section = text.partition("## Commit dates")
    for line in section.split("\n## ")[0].splitlines():
        m = re.match(r"\|\s*(\S+\.csv)\s*\|\s*([^|]+?)\s*\|", line)
        if not m:
            continue
        value = m.group(2)
        if value.lower() == "unknown":
            out[m.group(1)] = None
        elif ISO_DATE.fullmatch(value):
            out[m.group(1)] = value if "T" in value else f"{value}T00:00:00Z"
        else:
            raise ValueError(f"PROVENANCE.md: commit date of {m.group(1)} is neither ISO nor 'unknown': {value!r}")
    return out


def cached_frames(cache_dir: Path) -> tuple[list, list]:
    """The fetched sheets in a refresh cache, validated as any sheet: ([frame], [problem])."""
    import pandas as pd

    from pricing.schema import validate

    frames, problems = [], []
    for path in sorted((cache_dir / "sheets").glob("*.csv")):
        good, probs = validate(pd.read_csv(path, dtype=str, keep_default_na=False).replace("", None),
                               f"cache:{path.stem}")
        frames.append(good)
        problems += probs
    return frames, problems


def newest_per_key(df):
    """One row per (provider, region, instance_type): the newest observed_at, undated last, first row on ties."""
    from pricing.schema import KEY

    order = df.sort_values("observed_at", ascending=False, na_position="last", kind="stable")
    return order.drop_duplicates(list(KEY), keep="first")


def build(folder: Path, date: str, out: Path, cache_dir: Path | None = None) -> tuple[int, list]:
    import pandas as pd

    from pricing import cache
    from pricing.schema import COLUMNS, validate
    from pricing.sources import skypilot

    prov, dates = provenance(folder), commit_dates(folder)
    frames, problems = [], []
    for f in skypilot.files_in(folder):
        cloud = skypilot.cloud_of(f)
        src, commit = prov.get(f.name, (f.name, "unknown"))
        df, probs = skypilot.import_path(f, fetched_at=f"{date}T00:00:00Z",
                                         source=f"skypilot-catalog@{commit[:12]}:{src}",
                                         notes_by_cloud={cloud: NOTES.get(cloud)},
                                         observed_at=dates.get(f.name))  # None: the commit date is not known
        frames.append(df)
        problems += probs
    df = pd.concat([f for f in frames if len(f)], ignore_index=True)
    good, probs = validate(df, "snapshot")
    problems += probs
    if cache_dir is not None:
        fetched, probs = cached_frames(cache_dir)
        problems += probs
        good = newest_per_key(pd.concat([*[f for f in fetched if len(f)], good], ignore_index=True))
    good = good.sort_values(["provider", "gpu_model", "instance_type", "region"], kind="stable")
    for col in ("fetched_at", "observed_at"):
        good[col] = good[col].dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    data = good[list(COLUMNS)].to_csv(index=False, float_format="%.6g").encode()
    cache.atomic_write(out, data)
    return len(good), problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, nargs="?", default=CATALOG,
                    help="folder of SkyPilot vms.csv files (+ PROVENANCE.md); default: the in-repo extracts")
    ap.add_argument("--date", default="2026-11-30", help="fetched_at (copy date) for every row; observed_at comes from PROVENANCE.md")
    ap.add_argument("--out", type=Path, default=ROOT / "pricing" / "data" / "snapshot.csv")
    ap.add_argument("--with-cache", type=Path, default=None, metavar="DIR",
                    help="also take the sheets `prices refresh` fetched into DIR (newest observed_at wins)")
    args = ap.parse_args(argv)
    if not args.folder.is_dir():
        print(f"error: folder: not a directory: {args.folder}", file=sys.stderr)
        return 2
    if args.with_cache is not None and not (args.with_cache / "sheets").is_dir():
        print(f"error: --with-cache: no sheets/ folder in {args.with_cache} (run `gpu-advisor prices refresh` "
              "with GPU_ADVISOR_CACHE_DIR set to it first)", file=sys.stderr)
        return 2
    try:
        n, problems = build(args.folder, args.date, args.out, args.with_cache)
    except ValueError as exc:  # a PROVENANCE.md date that is not a date
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for p in problems:
        print(f"skipped: {p}", file=sys.stderr)
    print(f"wrote {n} offers to {args.out} ({len(problems)} rows skipped, reasons above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
