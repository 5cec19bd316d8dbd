"""Load every price sheet into one validated DataFrame, with precedence and discounts.

Precedence, per (provider, region, instance_type): a user sheet wins; among the fetch cache and
the bundled sheets (`data/snapshot.csv`, `data/clusters.csv`) the newest `observed_at` wins, an
undated row losing to any dated one, ties by sheet (cache newest first, then bundled); prices more
than a tolerance apart are flagged (pricing.agreement). Within one sheet the first row for a key is
kept and every later one is reported (naming both rows); between several user sheets the first
file given wins and the rows it overrides are reported too. Every row keeps `source`,
`fetched_at` (when copied) and `observed_at` (when its source observed the price; None: unknown)
and gains `price_origin` ("user" | "cache:<name>" | "bundled"), `price_per_gpu_hour`, `age_days`
(since observed_at) and `stale` (`stale_mask`, the one rule). Rows that fail validation are dropped with a
reason; the reasons are returned by `load()` and kept in `df.attrs["problems"]` by
`load_offers()` so the CLI can warn; in a user sheet such a row refuses the sheet instead, naming it,
unless `skip_bad_rows` (pricing.spreadsheet: money cells, owned hardware, billing terms, discounts).
CSV rows are numbered as a spreadsheet numbers them (the header is row 1). Files are read through `pricing.files` (size, nesting and
alias limits, CSV field limit, byte-order marks accepted). Nothing here touches the network:
`refresh` fills the cache, loading only reads it.
"""

from __future__ import annotations

import csv
import datetime as dt
import itertools
import math
from pathlib import Path

from pricing import (
    agreement,
    cache,
    clock,
    crosscheck,
    files,
    loaded_cache,
    observations,
    observed_offers,
    spreadsheet,
)
from pricing.errors import PriceInputError, unknown
from pricing.gpus import canonical_name, get_gpu
from pricing.schema import COLUMNS, ORIGIN, Problem, empty_frame, validate

SNAPSHOT = Path(__file__).parent / "data" / "snapshot.csv"
# cluster and multi-GPU sellers outside the SkyPilot catalog, cited row by row (data/CLUSTERS_SOURCES.md)
CLUSTERS = Path(__file__).parent / "data" / "clusters.csv"
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

    header, recs, problems = _stream_csv(path, sheet, what)
    if header is None:
        return None, [], problems
    import numpy as np

    width = len(header)
    # blank lines (or only empty cells) are skipped quietly; ragged ones are reported
    filled = np.fromiter(map(bool, map(str.strip, map("".join, recs))), dtype=bool, count=len(recs))
    sizes = np.fromiter(map(len, recs), dtype=np.int64, count=len(recs))
    for j in np.flatnonzero(filled & (sizes != width)):  # only the ragged lines
        problems.append(Problem(sheet, int(j) + 2, "*", f"has {sizes[j]} fields, header has {width}"))
    keep = filled & (sizes == width)
    numbers = (np.flatnonzero(keep) + 2).tolist()  # spreadsheet rows: the header is row 1
    if not numbers:
        return None, numbers, problems
    if not keep.all():
        recs = list(itertools.compress(recs, keep))
    cells = np.array(recs, dtype=object)  # rows x columns, all the same width by now
    del recs
    cells = np.frompyfunc(str.strip, 1, 1)(cells)  # C-level loop, no Python per cell
    cells[cells == ""] = None
    return pd.DataFrame(cells, columns=header, dtype=object), numbers, problems


MAX_HEADER_CHARS = 65_536  # a header line longer than this is not a price sheet (ours is 300 characters)


def _stream_csv(path: Path, sheet: str, what: str):
    """(header, records, problems) of a CSV sheet, parsed while it is read (csv module, C speed),
    so the first limit stops the reading: a header line over MAX_HEADER_CHARS or a field over
    MAX_CSV_FIELD refuses the whole file (PriceInputError) without the rest being read. Other
    unreadable records are reported by spreadsheet row (header = row 1) and kept as blanks."""
    problems: list[Problem] = []
    with files.open_text(path, what) as f, files.csv_field_limit() as limit:
        try:
            line = f.readline(MAX_HEADER_CHARS + 1)
            if len(line) > MAX_HEADER_CHARS and not line.endswith(("\n", "\r")):
                raise PriceInputError(f"{what}: the header line is longer than {MAX_HEADER_CHARS:,} characters "
                                      "(limit); refused")
            try:
                header = [h.strip() for h in next(csv.reader([line]))]
            except StopIteration:
                return None, [], [Problem(sheet, 0, "*", "sheet is empty")]
            except csv.Error as exc:
                return None, [], [Problem(sheet, 1, "*", f"unreadable CSV header: {_csv_error(exc, limit)}")]
            seen: set[str] = set()
            for j, h in enumerate(header):
                if h in seen:
                    problems.append(Problem(sheet, 1, h, "column appears more than once in the header; "
                                            "the first one is used", kind="duplicate"))
                    header[j] = f"{h}#{j + 1}"  # kept apart, ignored by validation
                seen.add(h)
            reader = csv.reader(f)
            recs: list[list[str]] = []
            while True:
                try:
                    recs.extend(reader)  # C speed; stops at the end or at an unreadable record
                    break
                except csv.Error as exc:
                    if files.is_field_limit_error(exc):
                        raise PriceInputError(f"{what}: row {len(recs) + 2}: a field is longer than {limit:,} "
                                              "characters (limit); refused") from None
                    problems.append(Problem(sheet, len(recs) + 2, "*", f"unreadable CSV line: {exc}"))
                    recs.append([])  # keeps the row numbers right; skipped as blank
        except UnicodeDecodeError as exc:
            raise PriceInputError(f"{what}: not UTF-8 text ({exc.reason}); save it as UTF-8") from None
        except OSError as exc:
            raise PriceInputError(f"{what}: cannot read: {exc.strerror or exc}") from None
    return header, recs, problems


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
    if "observed_at" not in df.columns:  # the author's date for their own prices: fetched_at, else the file's
        df["observed_at"] = df["fetched_at"]  # mtime; with an observed_at column, an empty cell means unknown
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
        df = _derive(spreadsheet.plain_numbers(df), path, mtime)
    flags, more = spreadsheet.discount_flags(df, str(path), numbers)
    # _sheet_frame and _derive clean every cell; a user sheet may price hardware it owns at 0
    good, probs = validate(df, str(path), numbers, stripped=True, user=True)
    rows = good.attrs.get("rows", [])
    good = spreadsheet.owned_and_billed(good)
    good["_discount"] = [flags.get(r, False) for r in rows]
    good.attrs["rows"] = rows
    return good, problems + more + probs


def _read_trusted(path: Path, sheet: str):
    """Snapshot / cache sheets: our own CSV, read fast with pandas, still validated."""
    import pandas as pd

    try:
        with files.open_regular(path, sheet, files.MAX_SHEET_BYTES) as f:  # not a FIFO, device or huge file
            df = pd.read_csv(f, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except PriceInputError as exc:
        return empty_frame(), [Problem(sheet, 0, "*", f"unreadable sheet: {str(exc).removeprefix(sheet + ': ')}")]
    except Exception as exc:  # noqa: BLE001 - a damaged cache file is reported, not fatal
        return empty_frame(), [Problem(sheet, 0, "*", f"unreadable sheet: {exc}")]
    good, problems = validate(df, sheet)
    rows = good.attrs.get("rows")
    good = split_conflated(good)
    good.attrs["rows"] = rows
    return good, problems


CONFLATED = crosscheck.CONFLATED  # note on a row whose catalog name also stands for another GPU identity


def _identity(df):
    """A row's GPU identity: its canonical gpu_model (pricing/data/gpus.csv names memory and form factor, A100 /
    A100-80GB / A100-80GB-PCIE), whatever spelling the sheet used."""
    return df["gpu_model"].astype(str).map(lambda g: canonical_name(g) or g)


def split_conflated(df):
    """GPU identity is the canonical GPU model (memory and form factor: SXM/PCIe/NVL, 40/80 GB). A catalog, or two
    sheets together, giving one (provider, instance_type) to two identities (SkyPilot's vast catalog names an A100
    40 GB and an A100 80 GB host both `1x-A100_SXM4-32-65536`, telling them apart only by AcceleratorName) would
    make one name stand for two cards and two prices. Each such row's instance_type gets its identity appended
    (`... [A100-80GB]`) and a note `conflated_instance_type:<catalog name>`, so every key names one GPU. Rows split
    already (one sheet's own pass) are grouped by their catalog name and keep their name."""
    if not len(df):
        return df
    base = crosscheck.catalog_names(df)
    identity = _identity(df)
    kinds = identity.groupby([df["provider"].to_numpy(), base.to_numpy()], sort=False).transform("nunique")
    shared = (kinds > 1).to_numpy() & (base == df["instance_type"]).to_numpy()
    if not shared.any():
        return df
    df = df.copy()
    rows = df.index[shared]
    tags = CONFLATED + ":" + df.loc[rows, "instance_type"].astype(str)
    old = df.loc[rows, "notes"]
    df.loc[rows, "notes"] = old.where(old.notna() & (old != ""), None).str.cat(tags, sep=";").fillna(tags)
    df.loc[rows, "instance_type"] = df.loc[rows, "instance_type"] + " [" + identity.loc[rows] + "]"
    return df


def _read_bundled():
    """The snapshot and the cluster sheet (same header, our own files) validated in one pass (a
    validation costs about the same for 6 rows as for 1,500); the snapshot ranks first."""
    import numpy as np
    import pandas as pd

    parts = []
    for path in (SNAPSHOT, CLUSTERS):
        if path.exists():
            try:
                parts.append(pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig"))
            except Exception as exc:  # noqa: BLE001 - reported, not fatal
                return empty_frame(), [Problem(str(path), 0, "*", f"unreadable sheet: {exc}")]
    if not parts:
        return empty_frame(), []
    sizes = [len(p) for p in parts]
    df, probs = validate(pd.concat(parts, ignore_index=True), "bundled sheets (pricing/data)")
    rank = np.repeat(10**6 + np.arange(len(parts)), sizes)[np.asarray(df.attrs.pop("rows"), dtype=int) - 1]
    return split_conflated(df).assign(**{ORIGIN: "bundled", "_rank": rank}), probs


def _iso(stamps):
    """UTC timestamps -> 'YYYY-MM-DDTHH:MM:SSZ' strings (vectorised; NaT -> None)."""
    import numpy as np
    import pandas as pd

    stamps = pd.to_datetime(stamps, utc=True)  # a column that concat left as objects, too
    naive = stamps.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy().astype("datetime64[s]")
    text = pd.Series(np.datetime_as_string(naive, unit="s"), index=stamps.index, dtype="object") + "Z"
    return text.where(stamps.notna(), None)


def age_days(observed, now=None):
    """Days since each row's observation date (NaN where the source gives none), one decimal. 'Now' is
    `now`, else pricing.clock.now() (GPU_ADVISOR_TODAY pins it)."""
    import pandas as pd


    now = pd.Timestamp(now or clock.now())
    return ((now - observed).dt.total_seconds() / 86400).round(1)


def stale_mask(ages, stale_days: float | None = None):
    """THE staleness rule, for every sheet: a price is stale when its source gives no observation
    date, or that date is more than `stale_days` (GPU_ADVISOR_STALE_DAYS, 60: pricing.cache.STALE_DAYS)
    old. Nothing else decides it: not the provider, the sheet it came from or the catalog generation."""
    import numpy as np

    limit = cache.stale_days() if stale_days is None else stale_days
    ages = np.asarray(ages, dtype=float)
    return np.isnan(ages) | (ages > limit)


# THE AGE POLICY past the limit. A dated price older than the staleness limit still ranks, its age stated, up to
# EXPIRE_FACTOR times the limit (90 days at 60): it is "aged", not gone, so the sheet does not lose every row the
# day one tracker's observations pass the limit (the 2026-10-09/10 rows behind most top rows all pass it on
# 2026-12-09/10). Past that it counts as undated. Why 1.5: of the sheet's pairs of observations of one product
# 60-90 days apart 48 % of 44 differ by more than 5 % (even odds: a price worth ranking with its age said), 90-180
# days apart all 16 do (OBSERVATIONS.md, "Staleness"): past 90 days the price has moved and says nothing of today's.
EXPIRE_FACTOR = 1.5


def aged_mask(ages, stale_days: float | None = None):
    """Rows whose price is stale by age alone: dated, older than the limit, within EXPIRE_FACTOR x the limit.
    They rank with their age stated; a fresh price still heads the plan (advisor.planner.offers)."""
    import numpy as np

    limit = cache.stale_days() if stale_days is None else stale_days
    ages = np.asarray(ages, dtype=float)
    return ~np.isnan(ages) & (ages > limit) & (ages <= EXPIRE_FACTOR * limit)


def _observed(df, include_bundled: bool):
    """The dated observation sheet applied to the chosen rows (pricing.crosscheck, the one rule),
    plus the offers only it prices (pricing.observed_offers) -> (frame, problems). The sheet is
    bundled data: without the bundled sheets (`include_bundled=False`) the rows are only labelled."""
    import pandas as pd


    if not include_bundled:
        return crosscheck.prepare(df, ORIGIN), []
    obs, problems = observations.read()
    df = crosscheck.apply(df, obs, origin=ORIGIN)
    new, most = observed_offers.offers(df, obs, ORIGIN, str(observations.sheet_path()))
    if len(new):
        df = pd.concat([df, new.assign(_discount=False)], ignore_index=True)
    return df, problems + most


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
                           "this row is dropped", f"{r['provider']}/{r['region']}/{r['instance_type']}",
                           kind="duplicate"))
    return out


def _user_frames(user_sheets, skip_bad_rows: bool):
    """([frame per --prices sheet], problems): each sheet read and validated; one that yields nothing, or has a
    bad row (unless `skip_bad_rows`), is refused (PriceInputError); keys repeated across sheets are reported."""
    frames, problems, users = [], [], []
    for p in user_sheets or ():
        df, probs = read_sheet(p)
        if not len(df):
            # a sheet the user named that yields nothing is a mistake, not something to skip quietly
            first = str(probs[0]) if probs else "no rows"
            raise PriceInputError(f"--prices: {p} has no usable price row ({first}).")
        bad = [q for q in probs if q.kind == "bad"]
        if bad and not skip_bad_rows:
            more = f" (and {len(bad) - 1} more bad row(s))" if len(bad) > 1 else ""
            raise PriceInputError(f"--prices: {bad[0]}{more}; fix it, or pass --skip-bad-rows to leave such "
                                  "rows out")
        rows = df.attrs.pop("rows", None) or list(range(1, len(df) + 1))
        users.append((str(p), df, rows))
        frames.append(df.assign(**{ORIGIN: "user", "_rank": 0}))
        problems += probs
    if len(users) > 1:
        problems += _across_sheets(users)
    return frames, problems


def _cache_frames():
    """([frame per fetch-cache sheet, newest fetch first], problems)."""
    frames, problems = [], []
    sheets = cache.cached_sheets()
    sheets.sort(key=lambda s: (s[2] or {}).get("fetched_at", ""), reverse=True)
    for rank, (name, path, _meta) in enumerate(sheets, start=1):
        df, probs = _read_trusted(path, str(path))
        df.attrs.pop("rows", None)
        frames.append(df.assign(**{ORIGIN: f"cache:{name}", "_rank": rank}))
        problems += probs
    return frames, problems


def _discounted(df, discounts):
    """Negotiated rates (`--discount aws=0.3`) on the public sheets' prices; a user's own row only when its
    apply_discount says yes. An unknown provider is refused, naming the ones loaded."""
    found = sorted(df["provider"].unique())
    for prov, frac in parse_discounts(discounts or {}).items():
        if prov not in found:
            raise unknown("--discount", prov, found)
        # public sheets only: a user's row is discounted only when its apply_discount says yes
        own = df[ORIGIN].eq("user").to_numpy() & ~df["_discount"].fillna(False).astype(bool).to_numpy()
        mask = (df["provider"] == prov).to_numpy() & ~own
        df.loc[mask, "price_hour"] *= 1 - frac
        df.loc[mask, "spot_price_hour"] *= 1 - frac
        tag = f"discount {frac:.0%}"
        df.loc[mask, "notes"] = df.loc[mask, "notes"].map(lambda n, tag=tag: f"{n};{tag}" if n else tag)
    return df


def _joined(frames, include_bundled: bool):
    """The step of `load()` that depends only on the sheets (not on the date or the discounts): `frames` (user and
    fetch-cache sheets) and the bundled sheets concatenated, one row chosen per key, the observation sheet applied
    -> (frame, or None when no sheet has a row; problems; disagreements)."""
    import pandas as pd

    problems = []
    if include_bundled:
        df, probs = _read_bundled()
        frames = [*frames, df]
        problems += probs
    frames = [f for f in frames if len(f)]
    if not frames:
        return None, problems, []
    df = split_conflated(pd.concat(frames, ignore_index=True))  # one name, one card across sheets too
    df, disagreements = agreement.choose(df, KEY, ORIGIN)  # the newer dated row per key; user rows first
    if "_discount" not in df.columns:
        df["_discount"] = False
    df = df.drop(columns="_rank").reset_index(drop=True)
    df, more = _observed(df, include_bundled)
    return df, problems + more, disagreements


def load(user_sheets=(), discounts=None, offline: bool = False, include_cache: bool = True,
         include_bundled: bool = True, stale_days: float | None = None, now=None, skip_bad_rows: bool = False):
    """All offers -> (DataFrame, problems). `offline` is accepted for symmetry: loading never
    touches the network. A user sheet with a row that cannot be used is refused (PriceInputError
    naming the first such row, as a spreadsheet numbers it) unless `skip_bad_rows`: the plan would
    otherwise run without a price the user meant to give."""
    import pandas as pd

    del offline
    frames, problems = _user_frames(user_sheets, skip_bad_rows)
    if include_cache:
        more, probs = _cache_frames()
        frames += more
        problems += probs
    if include_bundled and not frames and not problems:
        # the bundled sheets alone (the default plan): this step is the same for the same files and code
        sheets = (SNAPSHOT, CLUSTERS, observations.sheet_path())
        df, probs, disagreements = loaded_cache.fetch(sheets, lambda: _joined([], True))
    else:
        df, probs, disagreements = _joined(frames, include_bundled)
    problems += probs
    if df is None:
        out = empty_frame()
        for c in (ORIGIN, "price_per_gpu_hour", "age_days", "stale", *crosscheck.COLUMNS):
            out[c] = pd.Series(dtype="object")
        return out, problems

    df = _discounted(df, discounts)
    df["price_per_gpu_hour"] = df["price_hour"] / df["gpu_count"]
    df["age_days"] = age_days(df["observed_at"], now)
    df["stale"] = stale_mask(df["age_days"], stale_days)
    df["fetched_at"] = _iso(df["fetched_at"])
    for col in ("observed_at", "checked_at", "spot_checked_at", "spot_observed_at"):
        df[col] = _iso(df[col])
    cols = list(COLUMNS) + [ORIGIN, "price_per_gpu_hour", "age_days", "stale"] + list(crosscheck.COLUMNS)
    out = df[cols]
    out.attrs["disagreements"] = disagreements  # pricing.agreement.Disagreement, one per pair of sheets
    return out, problems


def load_offers(user_sheets=(), discounts=None, offline: bool = False, include_cache: bool = True,
                **kw):  # kw: include_bundled, stale_days, now, skip_bad_rows (see load)
    """Validated offers DataFrame (schema columns + price_origin, price_per_gpu_hour, age_days,
    stale); rejected rows are listed as strings in `df.attrs["problems"]`."""
    df, problems = load(user_sheets, discounts, offline, include_cache, **kw)
    df.attrs["problems"] = [str(p) for p in problems]
    return df


def provider_checks() -> list[dict]:
    """Per provider of the offers `load()` gives (bundled sheets and cache, no user sheet): rows, and how
    many the observation sheet confirmed, disputed or added, or left dated by their own source or
    undated; the newest observation and how many sources observed it (pricing.crosscheck.summary)."""

    df, _ = load()
    obs, _ = observations.read()
    return crosscheck.summary(df, obs)


def sources_status() -> list[dict]:
    """Each sheet the loader would read: name, kind, rows, fetched_at, age, stale, path."""
    out = []
    limit = cache.stale_days()

    def entry(name, kind, path, rows, fetched):
        age = cache.age_days(fetched)
        out.append({"name": name, "kind": kind, "rows": rows, "fetched_at": fetched,
                    "age_days": None if age is None else round(age, 1),
                    "stale": bool(stale_mask([math.nan if age is None else age], limit)[0]),
                    "path": str(path)})

    for name, path, meta in cache.cached_sheets():
        meta = meta or {}
        rows = meta.get("rows")
        if rows is None:
            try:
                rows = max(files.read_regular_file(path, files.MAX_SHEET_BYTES, str(path)).count(b"\n") - 1, 0)
            except PriceInputError:
                rows = 0
        entry(name, f"cache ({meta.get('kind', 'fetch')})", path, rows, meta.get("fetched_at"))
    if SNAPSHOT.exists():
        with SNAPSHOT.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
        dated = [r["observed_at"] for r in rows if r.get("observed_at")]
        entry("bundled", f"bundled snapshot ({len(rows) - len(dated)} undated)", SNAPSHOT, len(rows),
              max(dated, default=None))
    if CLUSTERS.exists():
        with CLUSTERS.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        dated = [r["observed_at"] for r in rows if r.get("observed_at")]
        entry("clusters", "bundled cluster sheet", CLUSTERS, len(rows), max(dated, default=None))

    obs, _ = observations.read()
    if len(obs):
        entry("observations", "dated observations", observations.sheet_path(), len(obs),
              obs["observed_at"].max().strftime("%Y-%m-%dT%H:%M:%SZ"))
    return out
