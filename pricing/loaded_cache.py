"""The bundled sheets' loaded frame, kept on disk between runs (data only, never code).

`pricing.loader.load()` with no user sheet and no fetch-cache sheet (the default plan) reads the bundled snapshot
and cluster sheet, validates them, picks a row per key and applies the dated observation sheet (the cross-check):
about 0.45 s of a 1.15 s plan, for a frame of ~1,720 rows that is the same for the same files and code. That frame
(the step before the date-dependent ones: discounts, age_days, stale, which still run every time) is stored in the
user cache dir (pricing.files.cache_dir()) as `loaded/bundled.json`, written atomically (pricing.files.atomic_write).

* Key: a sha256 over every file in pricing/data, the snapshot / cluster / observation sheets actually read (path
  and bytes: a monkeypatched path or GPU_ADVISOR_OBSERVATIONS keys it), the source of every pricing module, the
  python / pandas / numpy major.minor, and the settings this step reads (pricing.settings: the price and observation
  tolerances, GPU_ADVISOR_OBSERVATIONS; the pinned day and the stale limit act after it). A changed byte is a miss.
* Data only: one JSON document (column names, dtypes, values, the key); no pickle, nothing that is code. Read
  through pricing.files (a regular file, at most MAX_BYTES; JSON nesting bounded) and checked column by column
  (dtype from a fixed list, value types, lengths): a corrupt, truncated or hostile file is ignored and recomputed.
* Kept only when the step reported no problem and no disagreement (so the frame's attrs are empty both ways) and
  every value is of a type the format holds; otherwise the load runs as before and nothing is written.
* Dates: the step refuses dates in the future of the real clock; with no problem at `computed_at`, a later
  clock refuses nothing either, so a cache is used only at or after its `computed_at` (a clock set back recomputes).
* `WRITE`: False reads a cache that is there but never writes one (`gpu-advisor serve`, which writes no files).
* `ENABLED`: False turns it off in this process (the test suite does, tests/conftest.py; its own tests turn it on
  with a temp cache dir). `COUNTS` counts computations, hits and refused files (tests count work with it).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

from pricing import files, settings

VERSION = 1
MAX_BYTES = 20_000_000  # the bundled frame is 0.74 MB as JSON (1,720 rows); a file over this is not ours
MAX_ROWS = 200_000
ENABLED = True
WRITE = True  # False: read a cache that is there, never write one (`serve` writes no files: docs/usage/serve.md)
COUNTS = {"computed": 0, "hits": 0, "refused": 0, "written": 0}
_PRICING = Path(__file__).parent
_PLAIN = ("float64", "int64", "bool", "object")


def path() -> Path:
    return files.cache_dir() / "loaded" / "bundled.json"


def key(sheets) -> str:
    """sha256 over everything the cached step depends on (module docstring)."""
    import numpy as np
    import pandas as pd

    from pricing import agreement, crosscheck

    h = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        h.update(f"{label}\0{len(data)}\0".encode())
        h.update(data)

    def major_minor(version: str) -> str:
        return ".".join(version.split(".")[:2])

    add("format", str(VERSION).encode())
    add("python", f"{sys.version_info[0]}.{sys.version_info[1]}".encode())
    add("pandas", major_minor(pd.__version__).encode())
    add("numpy", major_minor(np.__version__).encode())
    add("tolerances", repr((crosscheck.tolerance(), agreement.tolerance())).encode())
    add("observations setting", str(settings.observations_sheet()).encode())
    for p in sorted(_PRICING.glob("*.py")):
        add(f"source:{p.name}", p.read_bytes())
    for p in sorted(q for q in (_PRICING / "data").rglob("*") if q.is_file()):
        add(f"data:{p.relative_to(_PRICING)}", p.read_bytes())
    for p in sheets:
        p = Path(p)
        add(f"sheet:{p.resolve()}", p.read_bytes() if p.is_file() else b"<absent>")
    return h.hexdigest()


def fetch(sheets, compute):
    """The cached step's frame: read from the cache when it holds this key, else `compute()` -> (frame,
    problems, disagreements), stored when it can be. Returns (frame, problems, disagreements)."""
    if not ENABLED:
        return compute()
    try:
        k = key(sheets)
    except OSError:  # an input that cannot be read: the step itself reports it
        return compute()
    hit = _read(k)
    if hit is not None:
        COUNTS["hits"] += 1
        return hit, [], []
    started = time.time()
    df, problems, disagreements = compute()
    COUNTS["computed"] += 1
    if WRITE and df is not None and not problems and not disagreements and not df.attrs:
        doc = encode(df, k, started)
        if doc is not None:
            try:
                files.atomic_write(path(), doc)
                COUNTS["written"] += 1
            except OSError:  # a read-only or full cache dir: the next run computes again
                pass
    return df, problems, disagreements


def _read(k: str):
    p = path()
    if not os.path.lexists(p):
        return None
    try:  # not a regular file, over the size, not JSON, nested too deep: PriceInputError is a ValueError
        doc = files.load_json(files.read_regular_file(p, MAX_BYTES, str(p)), str(p), max_bytes=MAX_BYTES,
                              max_depth=4)
        df = decode(doc, k)
    except (OSError, ValueError, TypeError, KeyError, OverflowError):
        df = None
    if df is None:
        COUNTS["refused"] += 1
    return df


def _dtype_name(s) -> str | None:
    import pandas as pd

    dtype = s.dtype
    if isinstance(dtype, pd.DatetimeTZDtype) and str(dtype.tz) == "UTC" and dtype.unit in ("s", "ms", "us", "ns"):
        return f"datetime:{dtype.unit}"
    if isinstance(dtype, pd.StringDtype):
        nan = isinstance(dtype.na_value, float) and math.isnan(dtype.na_value)
        return f"string:{dtype.storage}:{'nan' if nan else 'na'}"
    name = str(dtype)
    return name if name in _PLAIN else None


def _plain(v) -> bool:
    return v is None or type(v) in (str, bool, int, float)


def encode(df, k: str, computed_at: float) -> bytes | None:
    """The frame as one JSON document, or None when it holds something the format does not (then nothing is
    written): a column name that is not a unique str, an index other than 0..n-1, an unknown dtype or value."""
    import pandas as pd

    names = list(df.columns)
    if not all(type(c) is str for c in names) or len(set(names)) != len(names) or len(df) > MAX_ROWS:
        return None
    if not (isinstance(df.index, pd.RangeIndex) and df.index.start == 0 and df.index.step == 1):
        return None
    columns = []
    for name in names:
        s = df[name]
        dtype = _dtype_name(s)
        if dtype is None:
            return None
        if dtype.startswith("datetime:"):
            ints = s.dt.tz_localize(None).to_numpy().view("int64").tolist()
            values = [None if m else v for v, m in zip(ints, s.isna().tolist(), strict=True)]
        elif dtype.startswith("string:"):
            values = [v if isinstance(v, str) else None for v in s.tolist()]
        else:
            values = s.tolist()
            if dtype == "object" and not all(map(_plain, values)):
                return None
            if dtype == "float64":
                values = [float(v) for v in values]
        columns.append({"name": name, "dtype": dtype, "values": values})
    doc = {"format": "gpu-advisor loaded frame", "version": VERSION, "key": k, "computed_at": computed_at,
           "rows": len(df), "columns": columns}
    return json.dumps(doc, allow_nan=True, separators=(",", ":")).encode()


def _check(values, n: int, ok) -> list:
    if not isinstance(values, list) or len(values) != n or not all(map(ok, values)):
        raise ValueError("bad column")
    return values


def decode(doc, k: str):
    """The frame a document written by `encode` holds for key `k`, or None: anything else (another key, a
    missing or extra field, a wrong type, length or dtype, a value of the wrong type) is refused."""
    import pandas as pd

    if not _header_ok(doc, k):
        return None
    n, cols = doc["rows"], doc["columns"]
    data: dict[str, object] = {}
    for col in cols:
        if not isinstance(col, dict) or set(col) != {"name", "dtype", "values"}:
            return None
        name, dtype, values = col["name"], col["dtype"], col["values"]
        if type(name) is not str or name in data or type(dtype) is not str:
            return None
        series = _column(dtype, values, n)
        if series is None:
            return None
        data[name] = series
    if not data and n:
        return None
    return pd.DataFrame(data, index=pd.RangeIndex(n))


def _header_ok(doc, k: str) -> bool:
    """The document's own fields: its format, version and key, a row count within MAX_ROWS, a column list and a
    finite `computed_at` not in the future (a clock set back: recompute, module docstring)."""
    if not isinstance(doc, dict) or set(doc) != {"format", "version", "key", "computed_at", "rows", "columns"}:
        return False
    if doc["format"] != "gpu-advisor loaded frame" or doc["version"] != VERSION or doc["key"] != k:
        return False
    n, when = doc["rows"], doc["computed_at"]
    if type(n) is not int or not 0 <= n <= MAX_ROWS or type(when) not in (int, float):
        return False
    return isinstance(doc["columns"], list) and math.isfinite(when) and time.time() >= when


_STRINGS = (["python", "nan"], ["pyarrow", "nan"], ["python", "na"], ["pyarrow", "na"])


def _column(dtype: str, values, n: int):
    """One stored column as a Series of its dtype (values checked by type and count first), or None."""
    import numpy as np
    import pandas as pd

    if dtype in _PLAIN_DTYPES:
        ok, numpy_dtype = _PLAIN_DTYPES[dtype]
        _check(values, n, ok)
        if numpy_dtype == "object":
            arr = np.empty(n, dtype=object)
            arr[:] = values
            return pd.Series(arr, dtype="object")
        return pd.Series(np.array(values, dtype=numpy_dtype), dtype=numpy_dtype)
    if dtype.startswith("string:") and dtype.split(":")[1:] in _STRINGS:
        _, storage, na = dtype.split(":")
        _check(values, n, lambda v: v is None or type(v) is str)
        kind = pd.StringDtype(storage, na_value=np.nan) if na == "nan" else pd.StringDtype(storage)
        return pd.Series(values, dtype=kind)
    if dtype.startswith("datetime:") and dtype.split(":", 1)[1] in ("s", "ms", "us", "ns"):
        unit = dtype.split(":", 1)[1]
        _check(values, n, lambda v: v is None or (type(v) is int and -(2**63) < v < 2**63))
        stamps = np.array([np.iinfo(np.int64).min if v is None else v for v in values], dtype="int64")
        return pd.Series(stamps.view(f"datetime64[{unit}]")).dt.tz_localize("UTC")
    return None


# stored dtype -> (what each value must be, the numpy dtype it is rebuilt as)
_PLAIN_DTYPES = {
    "float64": (lambda v: type(v) in (int, float), "float64"),
    "int64": (lambda v: type(v) is int and -(2**63) <= v < 2**63, "int64"),
    "bool": (lambda v: type(v) is bool, "bool"),
    "object": (lambda v: _plain(v), "object"),
}
