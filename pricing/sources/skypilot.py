"""SkyPilot catalog importer (and the fetcher for the public catalog files).

Reads SkyPilot `vms.csv` files — a file, or a folder of them (a user's ~/.sky/catalogs) —
by column name (the order differs per cloud), parses `GpuInfo` with `ast.literal_eval`
(python-repr dicts, a bare name, or junk: all tolerated), and writes rows in our schema.

Rules (PRICE_SOURCES.md §1.3–1.4):
* empty or 0 prices are missing, never free; a row with neither price is dropped with a reason;
* SpotPrice >= Price is not a real spot price: spot is cleared and the row noted `spot_suspect`;
* GCP host rows (a2/a3/a4, no accelerator) are joined to the GPU row of the same region by
  SkyPilot's fixed mapping, price = host + GPUs; a missing host price means a missing price.
* GCP attachable GPUs (T4, V100, P100, P4, and L4 whose g2 hosts are not in the extracts) are
  kept as a GPU-only price named `n1+<n>x<GPU>` / `g2+<n>x<GPU>` with the note
  `gpu_only_price`: the host VM (a few tens of cents an hour) is NOT included. Our call: the
  alternative — guessing a host price per region — would invent numbers that no feed gave us.
"""

from __future__ import annotations

import ast
import csv
import io
import re
from pathlib import Path

from pricing import files, http
from pricing.errors import FetchError
from pricing.gpus import get_gpu
from pricing.instances import lookup, resolve_gpu
from pricing.schema import Problem, empty_frame

ORDER = 10  # place in `prices refresh`'s default order (pricing/sources/__init__.py)
NAME = "skypilot"
# Newest catalog folder per cloud in skypilot-org/skypilot-catalog (PROVENANCE.md).
DEFAULT_URL = "https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/master/catalogs"
CLOUD_FILES = {"aws": "v9/aws", "gcp": "v9/gcp", "lambda": "v9/lambda", "nebius": "v9/nebius",
               "oci": "v9/oci", "cudo": "v9/cudo", "fluidstack": "v9/fluidstack",
               "vast": "v9/vast", "runpod": "v8/runpod", "hyperbolic": "v8/hyperbolic",
               "azure": "v6/azure", "paperspace": "v6/paperspace"}
GCP_HOSTS = [  # host-type regex -> (GPU label, count or None = from the name)
    (r"a2-highgpu-(\d+)g", "A100"), (r"a2-megagpu-(16)g", "A100"),
    (r"a2-ultragpu-(\d+)g", "A100-80GB"), (r"a3-highgpu-(\d+)g", "H100"),
    (r"a3-megagpu-(8)g", "H100-MEGA"), (r"a3-edgegpu-(8)g", "H100"),
    (r"a3-ultragpu-(8)g", "H200"), (r"a4-highgpu-(8)g", "B200"), (r"g2-standard-\d+", "L4"),
]


def cloud_of(path: Path) -> str:
    """`aws_vms_gpu.csv` -> aws; `.../catalogs/v9/gcp/vms.csv` -> gcp."""
    stem = path.stem
    if stem == "vms":
        return path.parent.name.lower()
    return stem.split("_")[0].lower()


def files_in(path: Path) -> list[Path]:
    if path.is_dir():
        found = sorted(p for p in path.rglob("*.csv") if p.stem == "vms" or "_vms" in p.stem)
        return found
    return [path]


def gpu_info(text: str | None) -> dict:
    """Parse GpuInfo: a python-repr dict, a bare GPU name, or junk -> {} (never raises)."""
    if not text or not text.strip():
        return {}
    try:
        val = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return {"Name": text.strip()}
    if isinstance(val, str):
        return {"Name": val}
    if not isinstance(val, dict):
        return {}
    gpus = val.get("Gpus") or [{}]
    first = gpus[0] if isinstance(gpus, list) and gpus and isinstance(gpus[0], dict) else {}
    info = first.get("MemoryInfo")
    mem = info if isinstance(info, dict) else {}
    out = {"Name": first.get("Name"), "Count": first.get("Count"),
           "SizeInMiB": mem.get("SizeInMiB"), "Partition": first.get("GpuPartitionSize")}
    return out


def _num(v) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if x == x else None


def _price(v) -> float | None:
    x = _num(v)
    return x if x and x > 0 else None  # empty or 0 = unknown, not free


def memory_gib_per_gpu(cloud: str, size, count: float | None) -> float | None:
    """Per-GPU memory hint in GiB, undoing each cloud's quirk (§1.3)."""
    size = _num(size)
    if not size:
        return None  # Nebius writes 0
    if cloud == "runpod" or size < 1024:  # RunPod v8 writes GB into the MiB field
        return size
    if cloud == "vast" and count:  # Vast writes the total over all GPUs
        return size / count / 1024
    return size / 1024


def _gpu_count(cloud: str, r: dict, info: dict, spec) -> float | None:
    """GPUs per instance: the curated count (Azure ND96isr_H100_v5 says 12), else the row's, else GpuInfo's;
    AWS g6f's fractional L4 from its partition size."""
    count = _num(r.get("AcceleratorCount")) or _num(info.get("Count"))
    if spec and spec.gpu_count:
        count = spec.gpu_count
    if cloud == "aws" and (not count) and info.get("Partition"):
        count = _num(info.get("Partition"))  # g6f: fractional L4
    return count


def _prices(r: dict, notes: str | None) -> tuple[float | None, float | None, list[str]]:
    """(on-demand, spot, notes) of a row: SpotPrice >= Price is no reliable spot price (§1.4)."""
    price, spot = _price(r.get("Price")), _price(r.get("SpotPrice"))
    note = [n for n in (r.get("_note"), notes) if n]
    if price is not None and spot is not None and spot >= price:
        spot = None
        note.append("spot_suspect")
    return price, spot, note


def _offer(i: int, r: dict, cloud: str, source: str, fetched_at: str, sheet: str, notes: str | None,
           seen: set):
    """(row in our schema or None, problem or None) for one catalog row."""
    itype = (r.get("InstanceType") or "").strip()
    region = (r.get("Region") or "").strip()
    if cloud == "vast":  # ", US, NA" when the state is unknown (§7)
        region = region.lstrip(", ").strip()
    info = gpu_info(r.get("GpuInfo"))
    label = (r.get("AcceleratorName") or "").strip()
    if not label and not info.get("Name"):
        return None, None  # CPU-only row: not an offer we price
    spec = lookup(cloud, itype)
    count = _gpu_count(cloud, r, info, spec)
    mem = memory_gib_per_gpu(cloud, info.get("SizeInMiB"), count)
    gpu = resolve_gpu(cloud, itype, label, info.get("Name"), memory_gib_per_gpu=mem)
    if gpu is None:
        return None, Problem(sheet, i, "gpu_model", "GPU not in our GPU table; row skipped", label or info.get("Name"))
    if not count or count <= 0:
        return None, Problem(sheet, i, "gpu_count", "missing or zero GPU count", r.get("AcceleratorCount"))
    price, spot, note = _prices(r, notes)
    if price is None and spot is None:
        return None, Problem(sheet, i, "price_hour", "no on-demand or spot price (empty/0)", r.get("Price"))
    if (itype, region) in seen:
        return None, None  # one row per (type, region): first zone / data centre wins
    seen.add((itype, region))
    return _schema_row(r, cloud, itype, region, gpu, count, spec, (price, spot), source, fetched_at, note), None


def _schema_row(r: dict, cloud: str, itype: str, region: str, gpu: str, count: float, spec, prices,
                source: str, fetched_at: str, note: list[str]) -> dict:
    """A catalog row in our schema; the curated instance table's host size wins over the row's."""
    def host(attr: str, column: str):
        return (getattr(spec, attr) if spec and getattr(spec, attr) else None) or _num(r.get(column))

    return {
        "provider": cloud, "region": region or "default", "instance_type": itype,
        "gpu_model": gpu, "gpu_count": count, "gpu_memory_gb": get_gpu(gpu).memory_gb,
        "vcpus": host("vcpus", "vCPUs"), "ram_gb": host("ram_gb", "MemoryGiB"),
        "price_hour": prices[0], "spot_price_hour": prices[1], "currency": "USD",
        "source": source, "fetched_at": fetched_at,
        "interconnect": spec.interconnect if spec else None,
        "notes": ";".join(note) or None,
    }


def parse_rows(rows: list, cloud: str, source: str, fetched_at: str, sheet: str,
               notes: str | None = None):
    """Rows of one catalog file -> (DataFrame in our schema, problems): (row number, dict by column name)
    pairs, or for gcp the dicts themselves (_combine_gcp pairs its host and accelerator rows first)."""
    import pandas as pd

    problems: list[Problem] = []
    out: list[dict] = []
    seen: set[tuple[str, str]] = set()
    if cloud == "gcp":
        rows, gcp_problems = _combine_gcp(rows, sheet)
        problems += gcp_problems
    for i, r in rows:
        row, problem = _offer(i, r, cloud, source, fetched_at, sheet, notes, seen)
        if problem is not None:
            problems.append(problem)
        if row is not None:
            out.append(row)
    if cloud == "vast":
        for o in out:
            _vast_host(o)
    return pd.DataFrame(out), problems


_VAST_TYPE = re.compile(r"\d+x-.+-(?P<cores>\d+(?:\.\d+)?)-(?P<ram_mb>\d+(?:\.\d+)?)")


def _vast_host(offer: dict) -> None:
    """Fill a Vast row's vCPUs and RAM from its instance name where the columns are empty.

    SkyPilot names a Vast type `<n>x-<gpu>-<cpu_cores>-<cpu_ram MB>` and fills vCPUs/MemoryGiB from the
    same offer fields (sky/catalog/data_fetchers/fetch_vast.py, `create_instance_type`; MemoryGiB =
    cpu_ram / 1024). Its search rounds specifications down ("chunked"), and its launch asks Vast for
    `cpu_ram >=` the name's figure "as a guarantor" (sky/provision/vast/utils.py, `launch`), so the
    figures are what a box rented as this type has at least: a floor, not a placeholder."""
    m = _VAST_TYPE.fullmatch(offer["instance_type"])
    if m and offer.get("vcpus") is None:
        offer["vcpus"] = float(m["cores"])
    if m and offer.get("ram_gb") is None:
        offer["ram_gb"] = float(m["ram_mb"]) / 1024


def _combine_gcp(rows: list[dict], sheet: str):
    """Join GCP host rows and accelerator rows (same region) into priced offers."""
    hosts: list[tuple[int, dict]] = []
    gpus: dict[tuple, tuple[int, dict]] = {}  # (accelerator, count, region) -> (row number, row)
    for i, r in enumerate(rows, start=1):
        if (r.get("InstanceType") or "").strip():
            hosts.append((i, r))
        elif (r.get("AcceleratorName") or "").strip():
            key = (r["AcceleratorName"].strip(), _num(r.get("AcceleratorCount")),
                   (r.get("Region") or "").strip())
            gpus.setdefault(key, (i, r))
    out, problems, used = [], [], set()
    for i, h in hosts:
        itype = h["InstanceType"].strip()
        for pattern, label in GCP_HOSTS:  # noqa: B007 - label is read after the break
            m = re.fullmatch(pattern, itype)
            if m:
                break
        else:
            continue  # n1/e2/... host rows without GPUs
        count = float(m.group(1)) if m.groups() else 1.0
        key = (label, count, (h.get("Region") or "").strip())
        if key not in gpus:
            problems.append(Problem(sheet, i, "gpu_model",
                                    f"no {label} x{count:g} GPU row in this region to pair with",
                                    itype))
            continue
        used.add(key)
        _, g = gpus[key]

        def add(a, b):
            pa, pb = _price(a), _price(b)
            return None if pa is None or pb is None else round(pa + pb, 6)

        row = dict(g, InstanceType=itype, vCPUs=h.get("vCPUs"), MemoryGiB=h.get("MemoryGiB"),
                   Price=add(h.get("Price"), g.get("Price")),
                   SpotPrice=add(h.get("SpotPrice"), g.get("SpotPrice")))
        out.append((i, row))
    for key, (i, g) in gpus.items():
        label, n, _ = key
        if key in used or label not in ("T4", "V100", "P100", "P4", "L4"):
            continue
        host = "g2" if label == "L4" else "n1"
        out.append((i, dict(g, InstanceType=f"{host}+{n:g}x{label}", vCPUs=None,
                            MemoryGiB=None, _note="gpu_only_price")))
    return out, problems


def read_text(text: str, cloud: str, source: str, fetched_at: str, sheet: str,
              notes: str | None = None):
    """One vms.csv as text -> (DataFrame, problems). An unreadable file (no Price column, a
    field over pricing.files.MAX_CSV_FIELD characters, broken quoting) is one row-0 problem."""
    with files.csv_field_limit() as limit:
        try:
            reader = csv.DictReader(io.StringIO(text))
            fields = reader.fieldnames
            rows = list(reader) if fields and "Price" in fields else None
        except csv.Error as exc:
            why = (f"a field is longer than {limit:,} characters" if files.is_field_limit_error(exc)
                   else f"unreadable CSV ({exc})")
            return parse_rows([], cloud, source, fetched_at, sheet)[0], [Problem(sheet, 0, "*", why)]
    if rows is None:
        return parse_rows([], cloud, source, fetched_at, sheet)[0], [
            Problem(sheet, 0, "Price", "not a SkyPilot vms.csv (no Price column)")]
    if cloud == "gcp":
        return parse_rows(rows, cloud, source, fetched_at, sheet, notes)
    return parse_rows(list(enumerate(rows, start=1)), cloud, source, fetched_at, sheet, notes)


def import_path(path, fetched_at: str | None = None, source: str | None = None,
                notes_by_cloud: dict[str, str] | None = None, observed_at: str | None = None):
    """Import one vms.csv or a folder of them -> (DataFrame in our schema, problems).

    A vms.csv states no date, so `observed_at` is what the caller knows (the file's commit date), or
    None: unknown, never the file's mtime (that is when it was copied, kept as fetched_at)."""
    import datetime as dt

    import pandas as pd

    path = Path(path)
    frames, problems = [], []
    for f in files_in(path):
        cloud = cloud_of(f)
        stamp = fetched_at or dt.datetime.fromtimestamp(f.stat().st_mtime, dt.UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
        text = files.read_text(f, str(f), errors="replace")  # size-limited, BOM dropped
        (df, probs) = read_text(text, cloud,
                                source or f"skypilot:{f.name}", stamp, str(f),
                                (notes_by_cloud or {}).get(cloud))
        df["observed_at"] = observed_at
        frames.append(df)
        problems += probs
    frames = [f for f in frames if len(f)]
    return (pd.concat(frames, ignore_index=True) if frames else empty_frame()), problems


def fetch(base_url: str, regions=None, session=None, progress=None, clouds=None):
    """Download the public catalog files (no credentials) and parse them with the importer."""
    import datetime as dt

    import pandas as pd

    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    frames, problems = [], []
    for cloud in clouds or CLOUD_FILES:
        url = f"{base_url.rstrip('/')}/{CLOUD_FILES[cloud]}/vms.csv"
        text = http.get_text(url, session=session)
        if progress:
            progress(cloud)
        df, probs = read_text(text, cloud, f"skypilot:{url}", now, url)
        sheet_level = [p for p in probs if p.row == 0]
        if sheet_level:
            if sheet_level[0].column == "Price":
                raise FetchError(url, "response is not a SkyPilot vms.csv (no 'Price' column)")
            raise FetchError(url, f"response is not a usable vms.csv: {sheet_level[0].message}")
        frames.append(df)
        problems += probs
    df = pd.concat(frames, ignore_index=True)
    if regions and len(df):
        df = df[df["region"].isin(regions)]
    return df, problems
