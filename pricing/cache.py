"""The fetch cache: one CSV sheet + one metadata JSON per source, written atomically.

Location: $GPU_ADVISOR_CACHE_DIR, else $XDG_CACHE_HOME/gpu-advisor, else ~/.cache/gpu-advisor
(`pricing.files.cache_dir`). Every write (`pricing.files.atomic_write`) goes to a temp file in
the same folder, is fsynced, then `os.replace`d over the old file, so a crash or a failed
fetch can never leave a half-written or emptied sheet (SkyPilot writes its cached catalog in
place; we don't). Callers only write after a fetch has fully succeeded and validated.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

from pricing import clock, files, settings
from pricing.schema import COLUMNS

# A price observed more than this many days ago is stale (GPU_ADVISOR_STALE_DAYS overrides; why 60 days:
# pricing.settings.STALE_DAYS).
STALE_DAYS = settings.STALE_DAYS


def cache_dir() -> Path:
    """$GPU_ADVISOR_CACHE_DIR, else $XDG_CACHE_HOME/gpu-advisor, else ~/.cache/gpu-advisor."""
    return files.cache_dir()


def sheets_dir() -> Path:
    return cache_dir() / "sheets"


def stale_days() -> float:
    """GPU_ADVISOR_STALE_DAYS, else STALE_DAYS; a value that is not a number of days from 0 is refused."""
    return settings.stale_days()


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "sheet"


def sheet_path(name: str) -> Path:
    return sheets_dir() / f"{safe_name(name)}.csv"


def meta_path(name: str) -> Path:
    return sheets_dir() / f"{safe_name(name)}.json"


def atomic_write(path: Path, data: bytes | str, mode: int | None = None) -> None:
    """Write so readers see either the old file or the whole new one (see pricing.files)."""
    files.atomic_write(path, data, mode)


def write_sheet(name: str, df, *, source: str, url: str | None, kind: str = "fetch") -> dict:
    """Store a validated sheet and its metadata; returns the metadata."""
    cols = [c for c in COLUMNS if c in df.columns]
    frame = df[cols].copy()
    for col in ("fetched_at", "observed_at"):
        if col in frame and hasattr(frame[col], "dt"):
            frame[col] = frame[col].dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    data = frame.to_csv(index=False, float_format="%.6g").encode()
    meta = {
        "name": safe_name(name), "source": source, "url": url, "kind": kind,
        "fetched_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "rows": int(len(frame)),
    }
    atomic_write(sheet_path(name), data)
    atomic_write(meta_path(name), (json.dumps(meta, indent=2) + "\n").encode())
    return meta


def read_meta(name: str) -> dict | None:
    try:
        meta = files.load_json(files.read_regular_file(meta_path(name), 1_000_000, str(meta_path(name))),
                              str(meta_path(name)), max_bytes=1_000_000)
    except (OSError, ValueError):  # PriceInputError is a ValueError
        return None
    return meta if isinstance(meta, dict) else None


def cached_sheets() -> list[tuple[str, Path, dict | None]]:
    """(name, csv path, metadata) of every sheet in the cache, sorted by name."""
    folder = sheets_dir()
    if not folder.is_dir():
        return []
    return [(p.stem, p, read_meta(p.stem)) for p in sorted(folder.glob("*.csv"))]


def age_days(stamp: str | None, now: dt.datetime | None = None) -> float | None:
    if not stamp:
        return None
    try:
        t = dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)

    return ((now or clock.now()) - t).total_seconds() / 86400
