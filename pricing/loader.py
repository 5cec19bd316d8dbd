"""Load every price sheet into one validated DataFrame, with precedence and discounts.

Precedence, per (provider, region, instance_type): user sheet > fetch cache (newest first)
> bundled snapshot (`data/snapshot.csv`). Every row keeps `source` and `fetched_at` and gains
`price_origin` ("user" | "cache:<name>" | "bundled"), `price_per_gpu_hour`, `age_days` and
`stale`. Rows that fail validation are dropped with a reason; the reasons are returned by
`load()` and kept in `df.attrs["problems"]` by `load_offers()` so the CLI can warn.
Nothing here touches the network: `refresh` fills the cache, loading only reads it.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from pathlib import Path

from pricing import cache
from pricing.errors import PriceInputError
from pricing.schema import COLUMNS, ORIGIN, Problem, empty_frame, validate

SNAPSHOT = Path(__file__).parent / "data" / "snapshot.csv"
KEY = ["provider", "region", "instance_type"]


def _rows_from_file(path: Path) -> tuple[list[dict], list[Problem]]:
    """Raw rows (str values) of a CSV/YAML/JSON sheet; structural errors become problems."""
    sheet = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PriceInputError(f"--prices: file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PriceInputError(f"--prices: cannot read {path}: {exc}") from None
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml", ".json"):
        try:
            if suffix == ".json":
                data = json.loads(text)
            else:
                import yaml

                data = yaml.safe_load(text)
        except Exception as exc:  # noqa: BLE001 - any parse error is the user's file
            raise PriceInputError(f"--prices: {path} is not valid {suffix[1:].upper()}: "
                                  f"{str(exc).splitlines()[0]}") from None
        if isinstance(data, dict) and "offers" in data:
            data = data["offers"]
        if not isinstance(data, list):
            raise PriceInputError(f"--prices: {path} must hold a list of offers "
                                  "(or a mapping with an 'offers' list)")
        rows, problems = [], []
        for i, item in enumerate(data, start=1):
            if not isinstance(item, dict):
                problems.append(Problem(sheet, i, "*", "row is not a mapping", item))
                rows.append(None)
                continue
            rows.append({str(k): v for k, v in item.items()})
        return rows, problems
    if suffix not in (".csv", ".txt", ""):
        raise PriceInputError(f"--prices: {path}: unsupported file type '{suffix}'; "
                              "accepted: .csv, .yaml, .yml, .json")
    reader = csv.reader(io.StringIO(text))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        return [], [Problem(sheet, 0, "*", "sheet is empty")]
    except csv.Error as exc:
        return [], [Problem(sheet, 0, "*", f"unreadable CSV header: {exc}")]
    rows, problems = [], []
    i = 0
    while True:
        i += 1
        try:
            rec = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            problems.append(Problem(sheet, i, "*", f"unreadable CSV line: {exc}"))
            rows.append(None)
            continue
        if not any(c.strip() for c in rec):
            rows.append(None)  # blank line: nothing to report
            continue
        if len(rec) != len(header):
            problems.append(Problem(sheet, i, "*", f"has {len(rec)} fields, header has {len(header)}"))
            rows.append(None)
            continue
        rows.append(dict(zip(header, rec)))
    return rows, problems


def _cell(v):
    if v is None:
        return None
    if isinstance(v, (dict, list, tuple, set)):
        return repr(v)  # nested values fail validation with the value shown
    v = str(v).strip()
    return v or None


def _derive(row: dict, path: Path, mtime: str) -> dict:
    """Fill the columns a user sheet may leave out, where they can be derived."""
    from pricing.gpus import canonical_name, get_gpu

    r = {k: _cell(v) for k, v in row.items()}
    gpu = canonical_name(r["gpu_model"]) if r.get("gpu_model") else None

    def times(per_gpu: str, target: str) -> None:
        if r.get(target) is None and r.get(per_gpu) is not None and r.get("gpu_count") is not None:
            try:
                r[target] = repr(float(r[per_gpu]) * float(r["gpu_count"]))
            except ValueError:
                r[target] = r[per_gpu]  # let validation name the bad cell
    times("price_per_gpu_hour", "price_hour")
    times("spot_price_per_gpu_hour", "spot_price_hour")
    if r.get("gpu_memory_gb") is None and gpu:
        r["gpu_memory_gb"] = repr(get_gpu(gpu).memory_gb)
    if r.get("instance_type") is None and r.get("gpu_count") and r.get("gpu_model"):
        r["instance_type"] = f"{r['gpu_count']}x{r['gpu_model']}"
    r.setdefault("region", None)
    r["region"] = r["region"] or "default"
    r["currency"] = r.get("currency") or "USD"
    r["source"] = r.get("source") or f"user:{path.name}"
    r["fetched_at"] = r.get("fetched_at") or mtime
    return r


def read_sheet(path, derive: bool = True):
    """One sheet file -> (validated DataFrame, problems). Partial user columns are derived."""
    import pandas as pd

    path = Path(path)
    rows, problems = _rows_from_file(path)
    mtime = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    keep = [(i, r) for i, r in enumerate(rows, start=1) if r is not None]
    if not keep:
        if not problems:
            problems.append(Problem(str(path), 0, "*", "sheet has no rows"))
        return empty_frame(), problems
    recs = [_derive(r, path, mtime) if derive else r for _, r in keep]
    df = pd.DataFrame.from_records(recs)
    good, probs = validate(df, str(path), [i for i, _ in keep])
    return good, problems + probs


def _read_trusted(path: Path, sheet: str):
    """Snapshot / cache sheets: our own CSV, read fast with pandas, still validated."""
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except Exception as exc:  # noqa: BLE001 - a damaged cache file is reported, not fatal
        return empty_frame(), [Problem(sheet, 0, "*", f"unreadable sheet: {exc}")]
    return validate(df, sheet)


def parse_discounts(items) -> dict[str, float]:
    """`["aws=0.3", "gcp=15%"]` or a mapping -> {"aws": 0.3, "gcp": 0.15}."""
    if isinstance(items, dict):
        pairs = list(items.items())
    else:
        pairs = []
        for item in items or ():
            if "=" not in item:
                raise PriceInputError(f"--discount: expected PROVIDER=FRACTION like aws=0.3 (got '{item}')")
            k, v = item.split("=", 1)
            pairs.append((k, v))
    out = {}
    for k, v in pairs:
        text = str(v).strip()
        try:
            frac = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
        except ValueError:
            raise PriceInputError(f"--discount: '{k}={v}': fraction must be a number in [0, 1)") from None
        if not 0 <= frac < 1:
            raise PriceInputError(f"--discount: '{k}={v}': fraction must be in [0, 1) (0.3 = 30% off)")
        out[str(k).strip().lower()] = frac
    return out


def load(user_sheets=(), discounts=None, offline: bool = False, include_cache: bool = True,
         include_bundled: bool = True, stale_days: float | None = None, now=None):
    """All offers -> (DataFrame, problems). `offline` is accepted for symmetry: loading never
    touches the network."""
    import numpy as np
    import pandas as pd

    del offline
    frames, problems = [], []
    for p in user_sheets or ():
        df, probs = read_sheet(p)
        if not len(df):
            # a sheet the user named that yields nothing is a mistake, not something to skip quietly
            first = str(probs[0]) if probs else "no rows"
            raise PriceInputError(f"--prices: {p} has no usable price row ({first}).")
        frames.append(df.assign(**{ORIGIN: "user", "_rank": 0}))
        problems += probs
    if include_cache:
        sheets = cache.cached_sheets()
        sheets.sort(key=lambda s: (s[2] or {}).get("fetched_at", ""), reverse=True)
        for rank, (name, path, _meta) in enumerate(sheets, start=1):
            df, probs = _read_trusted(path, str(path))
            frames.append(df.assign(**{ORIGIN: f"cache:{name}", "_rank": rank}))
            problems += probs
    if include_bundled and SNAPSHOT.exists():
        df, probs = _read_trusted(SNAPSHOT, str(SNAPSHOT))
        frames.append(df.assign(**{ORIGIN: "bundled", "_rank": 10**6}))
        problems += probs
    frames = [f for f in frames if len(f)]
    if not frames:
        out = empty_frame()
        for c in (ORIGIN, "price_per_gpu_hour", "age_days", "stale"):
            out[c] = pd.Series(dtype="object")
        return out, problems
    df = pd.concat(frames, ignore_index=True).sort_values("_rank", kind="stable")
    df = df.drop_duplicates(KEY, keep="first").drop(columns="_rank").reset_index(drop=True)

    found = sorted(df["provider"].unique())
    for prov, frac in parse_discounts(discounts or {}).items():
        if prov not in found:
            from pricing.errors import unknown

            raise unknown("--discount", prov, found)
        mask = df["provider"] == prov
        df.loc[mask, "price_hour"] *= 1 - frac
        df.loc[mask, "spot_price_hour"] *= 1 - frac
        tag = f"discount {frac:.0%}"
        df.loc[mask, "notes"] = df.loc[mask, "notes"].map(lambda n: f"{n};{tag}" if n else tag)

    now = now or dt.datetime.now(dt.UTC)
    limit = cache.stale_days() if stale_days is None else stale_days
    df["price_per_gpu_hour"] = df["price_hour"] / df["gpu_count"]
    df["age_days"] = ((pd.Timestamp(now) - df["fetched_at"]).dt.total_seconds() / 86400).round(1)
    notes = df["notes"].fillna("")
    df["stale"] = np.asarray((df["age_days"] > limit) | notes.str.contains("stale", regex=False))
    df["fetched_at"] = df["fetched_at"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    cols = list(COLUMNS) + [ORIGIN, "price_per_gpu_hour", "age_days", "stale"]
    return df[cols], problems


def load_offers(user_sheets=(), discounts=None, offline: bool = False, include_cache: bool = True,
                **kw):
    """Validated offers DataFrame (schema columns + price_origin, price_per_gpu_hour, age_days,
    stale); rejected rows are listed as strings in `df.attrs["problems"]`."""
    df, problems = load(user_sheets, discounts, offline, include_cache, **kw)
    df.attrs["problems"] = [str(p) for p in problems]
    return df


def sources_status() -> list[dict]:
    """Each sheet the loader would read: name, kind, rows, fetched_at, age, stale, path."""
    out = []
    limit = cache.stale_days()

    def entry(name, kind, path, rows, fetched):
        age = cache.age_days(fetched)
        out.append({"name": name, "kind": kind, "rows": rows, "fetched_at": fetched,
                    "age_days": None if age is None else round(age, 1),
                    "stale": age is not None and age > limit, "path": str(path)})

    for name, path, meta in cache.cached_sheets():
        meta = meta or {}
        rows = meta.get("rows")
        if rows is None:
            with path.open() as f:
                rows = max(sum(1 for _ in f) - 1, 0)
        entry(name, f"cache ({meta.get('kind', 'fetch')})", path, rows, meta.get("fetched_at"))
    if SNAPSHOT.exists():
        with SNAPSHOT.open(newline="") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
        stamp = max((r["fetched_at"] for r in rows), default=None)
        entry("bundled", "bundled snapshot", SNAPSHOT, len(rows), stamp)
    return out
