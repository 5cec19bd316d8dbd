"""Load every price sheet into one validated DataFrame, with precedence and discounts.

Precedence, per (provider, region, instance_type): user sheet > fetch cache (newest first)
> bundled snapshot (`data/snapshot.csv`). Within one sheet the first row for a key is kept and
every later one is reported (naming both rows); between several user sheets the first file
given wins and the rows it overrides are reported too. Every row keeps `source` and
`fetched_at` and gains `price_origin` ("user" | "cache:<name>" | "bundled"),
`price_per_gpu_hour`, `age_days` and `stale`. Rows that fail validation are dropped with a
reason; the reasons are returned by `load()` and kept in `df.attrs["problems"]` by
`load_offers()` so the CLI can warn. Files are read through `pricing.files` (size, nesting and
alias limits, CSV field limit, byte-order marks accepted). Nothing here touches the network:
`refresh` fills the cache, loading only reads it.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import itertools
import operator
from pathlib import Path

from pricing import cache, files
from pricing.errors import PriceInputError
from pricing.schema import COLUMNS, ORIGIN, Problem, empty_frame, mentions, validate

SNAPSHOT = Path(__file__).parent / "data" / "snapshot.csv"
KEY = ["provider", "region", "instance_type"]


def _sheet_frame(path: Path):
    """A CSV/YAML/JSON sheet -> (DataFrame of cleaned str/None cells, row numbers, problems).

    Cells are stripped, empty ones are None; structural errors (ragged CSV lines, list items
    that are not mappings) become problems naming the row. Files are read with the limits of
    `pricing.files` (size, nesting, alias expansion, CSV field size); a byte-order mark is fine.
    """
    import pandas as pd

    sheet = str(path)
    what = f"--prices: {path}"
    if path.is_dir():
        raise PriceInputError(f"{what}: is a folder, not a price sheet")
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json", ".csv", ".txt", ""):
        raise PriceInputError(f"--prices: {path}: unsupported file type '{suffix}'; "
                              "accepted: .csv, .yaml, .yml, .json")
    if suffix in (".yaml", ".yml", ".json"):
        raw = files.read_text(path, what, max_bytes=files.MAX_DOC_BYTES)
        data = files.load_json(raw, what) if suffix == ".json" else files.load_yaml(raw, what)
        if isinstance(data, dict) and "offers" in data:
            data = data["offers"]
        if not isinstance(data, list):
            raise PriceInputError(f"--prices: {path} must hold a list of offers "
                                  "(or a mapping with an 'offers' list)")
        recs, numbers, problems = [], [], []
        for i, item in enumerate(data, start=1):
            if not isinstance(item, dict):
                problems.append(Problem(sheet, i, "*", "row is not a mapping", _cell(item)))
                continue
            recs.append({str(k): _cell(v) for k, v in item.items()})
            numbers.append(i)
        if not recs:
            return None, numbers, problems
        df = pd.DataFrame.from_records(recs).astype(object)
        return df.where(df.notna(), None), numbers, problems  # keys a row lacks: None, not NaN

    text = files.read_text(path, what)
    fast = _fast_csv(text)
    if fast is not None:
        return fast
    problems: list[Problem] = []
    with files.csv_field_limit() as limit:
        reader = csv.reader(io.StringIO(text))
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            return None, [], [Problem(sheet, 0, "*", "sheet is empty")]
        except csv.Error as exc:
            return None, [], [Problem(sheet, 0, "*", f"unreadable CSV header: {_csv_error(exc, limit)}")]
        seen: set[str] = set()
        for j, h in enumerate(header):
            if h in seen:
                problems.append(Problem(sheet, 0, h, "column appears more than once in the header; "
                                        "the first one is used"))
                header[j] = f"{h}#{j + 1}"  # kept apart, ignored by validation
            seen.add(h)
        width = len(header)
        try:
            recs = list(reader)  # the whole sheet at C speed; a broken line -> slow path below
        except csv.Error:
            reader = csv.reader(io.StringIO(text))
            next(reader)
            recs = None
        if recs is None:  # record by record, so each unreadable line is reported on its own
            recs, i = [], 0
            while True:
                i += 1
                try:
                    recs.append(next(reader))
                except StopIteration:
                    break
                except csv.Error as exc:
                    problems.append(Problem(sheet, i, "*", f"unreadable CSV line: {_csv_error(exc, limit)}"))
                    recs.append([])  # keeps the row numbers right; skipped as blank below
    del text
    import numpy as np

    # blank lines (or only empty cells) are skipped quietly; ragged ones are reported
    filled = np.fromiter(map(bool, map(str.strip, map("".join, recs))), dtype=bool, count=len(recs))
    sizes = np.fromiter(map(len, recs), dtype=np.int64, count=len(recs))
    for j in np.flatnonzero(filled & (sizes != width)):  # only the ragged lines
        problems.append(Problem(sheet, int(j) + 1, "*", f"has {sizes[j]} fields, header has {width}"))
    keep = filled & (sizes == width)
    numbers = (np.flatnonzero(keep) + 1).tolist()
    if not numbers:
        return None, numbers, problems
    if not keep.all():
        recs = list(itertools.compress(recs, keep))
    cells = np.array(recs, dtype=object)  # rows x columns, all the same width by now
    del recs
    cells = np.frompyfunc(str.strip, 1, 1)(cells)  # C-level loop, no Python per cell
    cells[cells == ""] = None
    return pd.DataFrame(cells, columns=header, dtype=object), numbers, problems


def _fast_csv(text: str):
    """The common case at C speed (pandas' parser): a rectangular CSV with a unique header and no
    blank line. Anything else returns None and takes the careful path, which names each bad line."""
    import numpy as np
    import pandas as pd

    if _field_counts(text) != 1:  # ragged or blank lines, or a field over the limit
        return None
    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, na_filter=False,
                         skip_blank_lines=False, engine="c")
    except (ValueError, csv.Error, pd.errors.ParserError):
        return None
    header = [str(h).strip() for h in df.columns]
    first = next(csv.reader(io.StringIO(text.partition("\n")[0])), [])
    if not len(df) or len(set(header)) != len(header) or [h.strip() for h in first] != header:
        return None  # duplicate or mangled header names: the careful path reports them
    if _may_need_strip(text):
        cells = np.frompyfunc(str.strip, 1, 1)(df.to_numpy(dtype=object))  # C-level loop
    else:
        cells = df.to_numpy(dtype=object, copy=True)  # writable (pandas may hand out a read-only view)
    cells[cells == ""] = None
    if (cells == None).all(axis=1).any():  # noqa: E711 - blank rows: the careful path skips them quietly
        return None
    return pd.DataFrame(cells, columns=header, dtype=object), list(range(1, len(df) + 1)), []


_EDGE_SPACE = (" ,", ", ", " \n", "\n ", " \r", "\t", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f")


def _may_need_strip(text: str) -> bool:
    """False only when no cell can start or end with whitespace: ASCII text without quotes, with no
    space beside a comma or a line break and no other whitespace character (str.strip's set) at all,
    found by substring search at C speed. True sends every cell through str.strip."""
    if not text.isascii() or '"' in text or text[:1].isspace() or text[-1:] == " ":
        return True
    return any(s in text for s in _EDGE_SPACE)


def _field_counts(text: str) -> int:
    """How many different field counts the lines have (1: rectangular; 0: unreadable or maybe a
    field over the CSV limit). Without quotes or lone carriage returns a line's fields are its
    commas + 1, counted at C speed; otherwise the csv module reads the whole text once."""
    if '"' not in text and text.count("\r") == text.count("\r\n"):
        lines = text.split("\n")
        if lines and not lines[-1]:
            lines.pop()  # the final newline
        if max(map(len, lines), default=0) > files.MAX_CSV_FIELD:
            return 0  # maybe one huge field: the careful path names it
        blank = "" in lines or "\r" in lines  # a blank line has no fields at all (not one empty field)
        if blank:
            lines = [line for line in lines if line and line != "\r"]
        return len(set(map(operator.methodcaller("count", ","), lines))) + blank
    try:
        with files.csv_field_limit():
            return len(set(map(len, csv.reader(io.StringIO(text)))))
    except csv.Error:
        return 0


def _csv_error(exc, limit: int) -> str:
    if files.is_field_limit_error(exc):
        return f"a field is longer than {limit:,} characters (limit)"
    return str(exc)


def _cell(v):
    if v is None:
        return None
    if isinstance(v, (dict, list, tuple, set)):
        import reprlib

        return reprlib.repr(v)  # nested values fail validation with (a bounded view of) the value
    v = str(v).strip()
    return v or None


def _derive(df, path: Path, mtime: str):
    """Fill the columns a user sheet may leave out, where they can be derived (vectorised)."""
    import pandas as pd

    from pricing.gpus import canonical_name, get_gpu

    n = len(df)
    df = df.astype(object)  # a copy; plain objects (pandas 3 would infer 'str' columns)
    present: dict[str, object] = {}

    def col(name: str):
        if name not in df.columns:
            df[name] = pd.Series([None] * n, dtype="object", index=df.index)
        return df[name]

    def has(name: str):  # "is this cell filled", computed once per column
        if name not in present:
            present[name] = col(name).notna().to_numpy()
        return present[name]

    model, count = col("gpu_model"), col("gpu_count")
    names = {v for v in pd.unique(model.to_numpy()) if isinstance(v, str)}
    canon = {v: canonical_name(v) for v in names}

    for per_gpu, target in (("price_per_gpu_hour", "price_hour"),
                            ("spot_price_per_gpu_hour", "spot_price_hour")):
        if per_gpu not in df.columns:
            continue
        need = ~has(target) & has(per_gpu) & has("gpu_count")
        if need.any():
            pg = df.loc[need, per_gpu]
            a = pd.to_numeric(pg, errors="coerce")
            b = pd.to_numeric(count[need], errors="coerce")
            product = (a * b).astype(str)
            # an unreadable price or count: keep the user's text so validation names that cell
            df.loc[need, target] = product.where(a.notna() & b.notna(), pg)
    memory = {v: repr(get_gpu(c).memory_gb) for v, c in canon.items() if c}
    fill = ~has("gpu_memory_gb") & has("gpu_model")
    if fill.any():
        mem = model[fill].map(memory)
        df.loc[fill, "gpu_memory_gb"] = mem.astype(object).where(mem.notna(), None)
    fill = ~has("instance_type") & has("gpu_count") & has("gpu_model")
    if fill.any():
        df.loc[fill, "instance_type"] = count[fill].astype(str) + "x" + model[fill].astype(str)
    for name, default in (("region", "default"), ("currency", "USD"),
                          ("source", f"user:{path.name}".strip()), ("fetched_at", mtime)):
        filled = has(name)
        if not filled.all():
            df.loc[~filled, name] = default
    return df


def read_sheet(path, derive: bool = True):
    """One sheet file -> (validated DataFrame, problems). Partial user columns are derived.

    Within the sheet the first row for a (provider, region, instance_type) is kept and each
    later one is reported naming both rows (see pricing.schema.validate)."""
    path = Path(path)
    df, numbers, problems = _sheet_frame(path)
    try:
        stamp = path.stat().st_mtime
    except OSError:
        stamp = 0.0
    mtime = dt.datetime.fromtimestamp(stamp, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if df is None or not len(df):
        if not problems:
            problems.append(Problem(str(path), 0, "*", "sheet has no rows"))
        return empty_frame(), problems
    if derive:
        df = _derive(df, path, mtime)
    good, probs = validate(df, str(path), numbers, stripped=True)  # _sheet_frame and _derive clean every cell
    return good, problems + probs


def _read_trusted(path: Path, sheet: str):
    """Snapshot / cache sheets: our own CSV, read fast with pandas, still validated."""
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except Exception as exc:  # noqa: BLE001 - a damaged cache file is reported, not fatal
        return empty_frame(), [Problem(sheet, 0, "*", f"unreadable sheet: {exc}")]
    return validate(df, sheet)


def _iso(stamps):
    """UTC timestamps -> 'YYYY-MM-DDTHH:MM:SSZ' strings (vectorised; NaT -> None)."""
    import numpy as np
    import pandas as pd

    naive = stamps.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy().astype("datetime64[s]")
    text = pd.Series(np.datetime_as_string(naive, unit="s"), index=stamps.index, dtype="object") + "Z"
    return text.where(stamps.notna(), None)


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


def _across_sheets(users) -> list[Problem]:
    """A key priced in several --prices files: the first file wins; the others are reported."""
    import numpy as np
    import pandas as pd

    keys = pd.concat([df[KEY].assign(_sheet=name, _row=rows) for name, df, rows in users],
                     ignore_index=True)
    dup = keys.duplicated(KEY, keep="first").to_numpy()
    if not dup.any():
        return []
    grouped = keys.groupby(KEY, sort=False, dropna=False)
    first_sheet = grouped["_sheet"].transform("first").to_numpy()
    first_row = grouped["_row"].transform("first").to_numpy()
    out = []
    for j in np.flatnonzero(dup):  # only the repeated keys
        r = keys.iloc[j]
        out.append(Problem(r["_sheet"], int(r["_row"]), "instance_type",
                           f"same provider, region and instance_type as {first_sheet[j]} row "
                           f"{first_row[j]}, which is kept (the first --prices file wins); "
                           "this row is dropped", f"{r['provider']}/{r['region']}/{r['instance_type']}"))
    return out


def load(user_sheets=(), discounts=None, offline: bool = False, include_cache: bool = True,
         include_bundled: bool = True, stale_days: float | None = None, now=None):
    """All offers -> (DataFrame, problems). `offline` is accepted for symmetry: loading never
    touches the network."""
    import numpy as np
    import pandas as pd

    del offline
    frames, problems = [], []
    users = []
    for p in user_sheets or ():
        df, probs = read_sheet(p)
        if not len(df):
            # a sheet the user named that yields nothing is a mistake, not something to skip quietly
            first = str(probs[0]) if probs else "no rows"
            raise PriceInputError(f"--prices: {p} has no usable price row ({first}).")
        rows = df.attrs.pop("rows", None) or list(range(1, len(df) + 1))
        users.append((str(p), df, rows))
        frames.append(df.assign(**{ORIGIN: "user", "_rank": 0}))
        problems += probs
    if len(users) > 1:
        problems += _across_sheets(users)
    if include_cache:
        sheets = cache.cached_sheets()
        sheets.sort(key=lambda s: (s[2] or {}).get("fetched_at", ""), reverse=True)
        for rank, (name, path, _meta) in enumerate(sheets, start=1):
            df, probs = _read_trusted(path, str(path))
            df.attrs.pop("rows", None)
            frames.append(df.assign(**{ORIGIN: f"cache:{name}", "_rank": rank}))
            problems += probs
    if include_bundled and SNAPSHOT.exists():
        df, probs = _read_trusted(SNAPSHOT, str(SNAPSHOT))
        df.attrs.pop("rows", None)
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
    df["stale"] = np.asarray((df["age_days"] > limit).to_numpy() | mentions(df["notes"], "stale"))
    df["fetched_at"] = _iso(df["fetched_at"])
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
