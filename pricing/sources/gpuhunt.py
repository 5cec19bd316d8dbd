"""dstack's gpuhunt catalog: a second catalog, independent of SkyPilot's, read through the `gpuhunt`
package (optional extra: `pip install 'gpu-cost-advisor[gpuhunt]'`).

gpuhunt publishes one catalog per provider, `{base}/{provider}/version` naming the newest and
`{base}/{provider}/{version}/catalog.zip` holding `{provider}.csv`; the version is
`$(date +%Y%m%d)-<run number>`, the day it was collected (dstackai/gpuhunt,
.github/scripts/publish_catalog.sh), so it is each row's `observed_at`. The CSV rows are parsed by
gpuhunt's own reader (`gpuhunt._internal.storage.load`, the one `gpuhunt.Catalog` uses, also for
`GPUHUNT_CATALOG_DIR`), never by a copy of its format here; the downloads go through pricing.http
(bounded, fail-fast) rather than gpuhunt's unbounded urllib calls.

Mapping: one row per (provider, location, instance): the on-demand item's price is `price_hour`, the
spot item's `spot_price_hour`; CPU-only items are not offers; TPUs and GPUs not in our GPU table are
skipped with a reason, as are rows gpuhunt's reader rejects.
"""

from __future__ import annotations

import csv
import io
import logging
import re
from pathlib import Path

from pricing import files, http
from pricing.errors import FetchError, PriceInputError
from pricing.gpus import get_gpu
from pricing.instances import resolve_gpu
from pricing.schema import Problem, empty_frame

ORDER = 90  # place in `prices refresh`'s default order (pricing/sources/__init__.py)
NAME = "gpuhunt"
DEFAULT_URL = "https://dstack-gpu-pricing.s3.eu-west-1.amazonaws.com/v3"  # gpuhunt's CATALOG_URL
PROVIDERS = ("aws", "azure", "gcp", "lambdalabs", "nebius", "oci", "runpod", "verda", "cloudrift")
RENAME = {"lambdalabs": "lambda", "vastai": "vast"}  # gpuhunt's provider ids -> ours (SkyPilot's)
VERSION_DATE = re.compile(r"(\d{4})(\d{2})(\d{2})(?:-\d+)?")


def _gpuhunt():
    try:
        from gpuhunt._internal import storage
    except ImportError:
        raise PriceInputError("gpuhunt catalogs need the gpuhunt package: pip install "
                              "'gpu-cost-advisor[gpuhunt]'") from None
    return storage


def missing() -> str | None:
    """Why this source cannot run here (the optional package is not installed), or None."""
    try:
        _gpuhunt()
    except PriceInputError as exc:
        return str(exc)
    return None


def version_date(version: str | None) -> str | None:
    """'20261130-412' -> '2026-11-30T00:00:00Z' (the collection day); anything else -> None."""
    m = VERSION_DATE.fullmatch((version or "").strip())
    if not m:
        return None
    y, mo, d = m.groups()
    return f"{y}-{mo}-{d}T00:00:00Z" if 1 <= int(mo) <= 12 and 1 <= int(d) <= 31 else None


class _Collect(logging.Handler):
    """gpuhunt's reader logs the rows it skips; they become Problems instead of vanishing."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def parse_csv(text: str, provider: str, *, source: str, observed_at: str | None, fetched_at: str,
              sheet: str):
    """One provider's gpuhunt CSV -> (DataFrame in our schema, problems)."""
    import pandas as pd

    storage = _gpuhunt()
    log = logging.getLogger(storage.__name__)
    collect = _Collect()
    log.addHandler(collect)
    try:
        with files.csv_field_limit() as limit:
            items = list(storage.load(io.StringIO(text), provider=provider))
    except csv.Error as exc:  # a field over the limit, a NUL byte: the sheet is not a catalog
        why = (f"a field is longer than {limit:,} characters (limit)" if files.is_field_limit_error(exc)
               else f"not CSV text ({(str(exc).splitlines() or ['?'])[0][:80]})")
        raise PriceInputError(f"{sheet}: {why}; refused") from None
    finally:
        log.removeHandler(collect)
    problems = [Problem(sheet, 0, "*", f"gpuhunt skipped a row: {m}") for m in collect.messages]
    ours = RENAME.get(provider, provider)
    rows: dict[tuple, dict] = {}
    for i, item in enumerate(items, start=1):
        if not item.gpu_count or not item.gpu_name:
            continue  # CPU-only: not an offer we price
        vendor = getattr(item.gpu_vendor, "value", item.gpu_vendor)
        gpu = resolve_gpu(ours, item.instance_name, item.gpu_name, memory_gib_per_gpu=item.gpu_memory) \
            if vendor in (None, "nvidia", "amd") else None
        if gpu is None:
            problems.append(Problem(sheet, i, "gpu_name", "GPU not in our GPU table; row skipped",
                                    item.gpu_name))
            continue
        key = (item.location, item.instance_name)
        row = rows.setdefault(key, {
            "provider": ours, "region": item.location, "instance_type": item.instance_name, "gpu_model": gpu,
            "gpu_count": item.gpu_count, "gpu_memory_gb": get_gpu(gpu).memory_gb, "vcpus": item.cpu,
            "ram_gb": item.memory, "price_hour": None, "spot_price_hour": None, "currency": "USD",
            "source": source, "fetched_at": fetched_at, "observed_at": observed_at,
            "notes": " ".join(item.flags) or None})
        column = "spot_price_hour" if item.spot else "price_hour"
        if row[column] is None and item.price and item.price > 0:
            row[column] = item.price  # first item per location wins, like the SkyPilot importer's first zone
    return pd.DataFrame(list(rows.values())), problems


def _provider_of(name: str) -> str:
    return Path(name).stem.lower()


def is_catalog(path: Path) -> bool:
    """A gpuhunt catalog: a catalog.zip, a `{provider}.csv` with gpuhunt's header, or a folder of them."""
    if path.is_dir():
        return any(is_catalog(p) for p in sorted(path.glob("*.csv"))[:50] + sorted(path.glob("*.zip"))[:50])
    if path.suffix.lower() == ".zip":
        return True
    if path.suffix.lower() != ".csv":
        return False

    try:
        with files.open_regular(path, str(path), files.MAX_SHEET_BYTES) as f:  # no FIFO or device
            head = {h.strip() for h in f.readline(65_536).decode("utf-8", "replace").split(",")}
    except ValueError:  # PriceInputError: not a catalog; the importer's own read names why
        return False
    return {"instance_name", "location", "price", "gpu_name", "spot"} <= head


def import_path(path, observed_at: str | None = None):
    """A local gpuhunt catalog (file or folder; GPUHUNT_CATALOG_DIR's layout) -> (DataFrame, problems).

    `observed_at`: the collection date, when the caller knows it; else the version in the path
    (`.../aws/20261130-412/catalog.zip`), else unknown."""
    import datetime as dt

    import pandas as pd

    path = Path(path)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    found = sorted(p for p in path.iterdir() if p.suffix.lower() in (".csv", ".zip")) if path.is_dir() else [path]
    frames, problems = [], []
    for f in found:
        stamp = observed_at or version_date(f.parent.name)
        if f.suffix.lower() == ".zip":
            provider = f.parent.parent.name.lower() if version_date(f.parent.name) else None
            for name, text in _zip_csvs(files.read_regular_file(f, files.MAX_SHEET_BYTES, str(f)), str(f)):
                prov = provider or _provider_of(name)
                df, probs = parse_csv(text, prov, source=f"gpuhunt:{prov}:{f.name}", observed_at=stamp,
                                      fetched_at=now, sheet=f"{f}:{name}")
                frames.append(df)
                problems += probs
            continue
        prov = _provider_of(f.name)
        text = _csv_text(files.read_regular_file(f, files.MAX_SHEET_BYTES, str(f)), str(f))
        df, probs = parse_csv(text, prov, source=f"gpuhunt:{prov}:{f.name}", observed_at=stamp,
                              fetched_at=now, sheet=str(f))
        frames.append(df)
        problems += probs
    frames = [x for x in frames if len(x)]
    return (pd.concat(frames, ignore_index=True) if frames else empty_frame()), problems


def _zip_csvs(data: bytes, where: str, max_bytes: int | None = None):
    """(name, text) of each CSV in a catalog.zip: pricing.files.read_zip's bounds (entries, unpacked
    bytes per member and in all, ratio, overlaps, encryption, methods), GPU_ADVISOR_HTTP_MAX_BYTES
    for a member and for the whole archive; a member that is not CSV text is refused by name."""
    limit = max_bytes or http.settings()["max_bytes"]
    out = []
    for name, raw in files.read_zip(data, where, suffix=".csv", max_member_bytes=limit, max_total_bytes=limit):
        out.append((Path(name).name, _csv_text(raw, f"{where}: member {name!r}")))
    return out


def _csv_text(raw: bytes, what: str) -> str:
    """CSV bytes as text; a zip, gzip or other binary file under a .csv name is refused by name."""
    kind = files.binary_kind(raw[:65_536])
    if kind:
        raise PriceInputError(f"{what}: is {kind}, not CSV text; refused")
    return files.decode(raw, what, errors="replace")


def fetch(base_url: str, regions=None, session=None, progress=None, providers=None):
    """The newest published catalog of each provider, dated by its version."""
    import datetime as dt

    import pandas as pd

    _gpuhunt()
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    base = base_url.rstrip("/")
    frames, problems = [], []
    for provider in providers or PROVIDERS:
        version = http.get_text(f"{base}/{provider}/version", session=session).strip()
        if not re.fullmatch(r"[\w.-]{1,64}", version):
            raise FetchError(f"{base}/{provider}/version", "not a gpuhunt catalog version")
        url = f"{base}/{provider}/{version}/catalog.zip"
        data = http.request("GET", url, session=session).content
        try:
            texts = _zip_csvs(data, url)
        except PriceInputError as exc:
            raise FetchError(url, str(exc).split(": ", 1)[-1]) from None
        for _name, text in texts:
            df, probs = parse_csv(text, provider, source=f"gpuhunt:{url}",
                                  observed_at=version_date(version) or now, fetched_at=now, sheet=url)
            frames.append(df)
            problems += probs
        if progress:
            progress(provider)
    frames = [x for x in frames if len(x)]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if regions and len(df):
        df = df[df["region"].isin(regions)]
    return df, problems
