"""AWS public bulk price files (per region, CSV, no auth) -> our schema (PRICE_SOURCES.md §2).

GET <base>/offers/v1.0/aws/AmazonEC2/current/<region>/index.csv, streamed. The file starts
with metadata lines (FormatVersion, Disclaimer, Publication Date, Version, OfferCode) before
the header; we skip until the line that starts with "SKU". Kept rows: TermType OnDemand,
Operating System Linux, Tenancy Shared, CapacityStatus Used, no pre-installed software,
Unit Hrs, USD, price > 0 (parenthesised properly, unlike SkyPilot's filter). GPU model/count
from our instance table by family, else from the file's GPU column.

Spot: AWS's public spot price feed (SPOT_URL, no auth; the file alexei-led/spotinfo embeds verbatim as
internal/spot/data/spot-price-data.json) gives, per region and instance size, the current lowest Linux
spot price per instance-hour: {"config": {"regions": [{"region": "ap-northeast-1", "instanceTypes":
[{"type": "gpuCurrentGen", "sizes": [{"size": "p5.48xlarge", "valueColumns": [{"name": "linux",
"prices": {"USD": "21.2792"}}]}]}]}]}} (a JSONP `callback(...)` wrapper is tolerated). It is read after
the offer files and fills `spot_price_hour` of the rows it names, noted `spot_feed:<fetch time>` since
the feed states no date of its own (the on-demand price keeps the offer file's publication date). The feed
is fetched only from the public host: a replaced base URL (a mirror, a test server) names the offer
files' host alone. A feed that fails leaves the on-demand rows as they are, with one problem saying why.
"""

from __future__ import annotations

import csv
import datetime as dt

from pricing import files, http
from pricing.errors import FetchError, PriceInputError
from pricing.gpus import get_gpu
from pricing.instances import lookup
from pricing.schema import Problem
from pricing.units import MiB

ORDER = 30  # place in `prices refresh`'s default order (pricing/sources/__init__.py)
NAME = "aws"
DEFAULT_URL = "https://pricing.us-east-1.amazonaws.com"
DEFAULT_REGIONS = ["us-east-1", "us-west-2"]
PATH = "/offers/v1.0/aws/AmazonEC2/current/{region}/index.csv"
SPOT_URL = "https://website.spot.ec2.aws.a2z.com/spot.json"  # the feed behind aws.amazon.com/ec2/spot/pricing/


def _header(lines, url: str) -> tuple[list[str], dict[str, str]]:
    """Read the metadata lines and the header line ("SKU", ...) off `lines`: (header, metadata)."""
    meta: dict[str, str] = {}
    for line in lines:
        rec = next(csv.reader([line]), [])
        if rec and rec[0] == "SKU":
            break
        if len(rec) >= 2:
            meta[rec[0]] = rec[1]
    else:
        raise FetchError(url, "no CSV header line starting with \"SKU\" (not an AWS offer file)")
    need = ["Instance Type", "PricePerUnit", "TermType", "Operating System", "Tenancy"]
    missing = [c for c in need if c not in rec]
    if missing:
        raise FetchError(url, f"offer file has no column(s) {', '.join(missing)}")
    return rec, meta


def _on_demand_linux(r: dict) -> bool:
    """A shared-tenancy Linux on-demand hourly USD price with no pre-installed software or own licence."""
    return (r["TermType"] == "OnDemand" and r["Operating System"] == "Linux"
            and r["Tenancy"] == "Shared" and r.get("CapacityStatus", "Used") == "Used"
            and r.get("Pre Installed S/W", "NA") in ("", "NA")
            and r.get("License Model", "") != "Bring your own license"
            and r.get("Unit", "Hrs") == "Hrs" and r.get("Currency", "USD") == "USD")


def _leading_number(v) -> float | None:
    """'96 GiB' -> 96.0, '1,152' -> 1152.0; None when there is no number."""
    try:
        return float(str(v).split()[0].replace(",", ""))
    except (ValueError, IndexError):
        return None


def _offer(r: dict, i: int, url: str, region: str, stamp: str, seen: set):
    """(row in our schema or None, problem or None) for one kept line of the offer file."""
    itype = r["Instance Type"]
    spec = lookup("aws", itype)
    gpus = r.get("GPU", "")
    if spec is None and gpus in ("", "0", "NA"):
        return None, None  # not a GPU instance
    try:
        price = float(r["PricePerUnit"])
    except ValueError:
        return None, Problem(url, i, "PricePerUnit", "is not a number", r["PricePerUnit"])
    if price <= 0 or itype in seen:
        return None, None
    if spec is None or not spec.gpu_model:
        return None, Problem(url, i, "Instance Type", "GPU family not in pricing/data/instances.csv", itype)
    seen.add(itype)
    try:
        count = spec.gpu_count or float(gpus)
    except ValueError:
        return None, Problem(url, i, "GPU", "is not a number", gpus)
    return {"provider": "aws", "region": r.get("Region Code") or region,
            "instance_type": itype, "gpu_model": spec.gpu_model, "gpu_count": count,
            "gpu_memory_gb": get_gpu(spec.gpu_model).memory_gb,
            "vcpus": spec.vcpus or _leading_number(r.get("vCPU")),
            "ram_gb": spec.ram_gb or _leading_number(r.get("Memory")),
            "price_hour": price, "spot_price_hour": None, "currency": "USD",
            "source": f"aws-offer-file:{url}", "fetched_at": stamp,
            "interconnect": spec.interconnect, "notes": None}, None


def parse_lines(lines, region: str, url: str, fetched_at: str):
    """Lines of one offer file -> (DataFrame, problems). Raises FetchError if no header."""
    import pandas as pd

    lines = iter(lines)
    header, meta = _header(lines, url)
    stamp = meta.get("Publication Date") or fetched_at
    rows, problems, seen = [], [], set[str]()
    for i, rec in enumerate(csv.reader(lines), start=1):
        if len(rec) != len(header):
            problems.append(Problem(url, i, "*", f"has {len(rec)} fields, header has {len(header)}"))
            continue
        r = dict(zip(header, rec))
        if not _on_demand_linux(r):
            continue
        row, problem = _offer(r, i, url, region, stamp, seen)
        if problem is not None:
            problems.append(problem)
        if row is not None:
            rows.append(row)
    return pd.DataFrame(rows), problems


MAX_LINE = MiB  # no line of a real offer file comes near this


def _lines(chunks, url: str):
    """Decoded lines of a streamed body; a body that stops mid-line is a truncated download,
    a line over MAX_LINE bytes is refused (a hostile body could be one endless line)."""
    tail = b""
    for chunk in chunks:
        parts = (tail + chunk).split(b"\n")
        tail = parts.pop()
        if len(tail) > MAX_LINE:
            raise FetchError(url, f"a line is longer than {MAX_LINE:,} bytes; not an AWS offer file")
        for part in parts:
            if len(part) > MAX_LINE:
                raise FetchError(url, f"a line is longer than {MAX_LINE:,} bytes; not an AWS offer file")
            yield part.rstrip(b"\r").decode("utf-8", "replace")
    if tail.strip():
        raise FetchError(url, "download truncated: the file ends mid-line")


def _spot_price(size: dict) -> float | None:
    for col in size.get("valueColumns") or []:
        if isinstance(col, dict) and col.get("name") == "linux":
            try:
                value = float(str((col.get("prices") or {}).get("USD")))
            except ValueError:  # "N/A*": not offered as spot there
                return None
            return value if value > 0 else None
    return None


def parse_spot(payload, url: str) -> dict[tuple[str, str], float]:
    """The spot feed -> {(region, instance type): Linux spot USD per instance-hour}. FetchError when the
    payload is not the feed."""
    regions = http.field(payload, "config.regions", url, list)
    out: dict[tuple[str, str], float] = {}
    for region in regions:
        if not isinstance(region, dict) or not isinstance(region.get("region"), str):
            continue
        for family in region.get("instanceTypes") or []:
            for size in (family.get("sizes") or []) if isinstance(family, dict) else []:
                price = _spot_price(size) if isinstance(size, dict) else None
                if price is not None and isinstance(size.get("size"), str):
                    out[(region["region"], size["size"])] = price
    return out


def _spot_json(text: str, url: str):
    """The feed's JSON, with or without its JSONP `callback(...);` wrapper."""
    body = text.strip()
    if body.startswith("callback(") and body.endswith((")", ");")):
        body = body[len("callback("):].rstrip(";").rstrip()[:-1]
    return files.load_json(body, url, max_bytes=http.settings()["max_bytes"])


def add_spot(df, spot_url: str, session=None):
    """`df` with the spot feed's prices filled in where it names the row's region and instance type,
    and the problems: one when the feed could not be read (the on-demand rows stay as they are), one per
    row whose spot price is above its on-demand price (not kept)."""
    fetched = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        spot = parse_spot(_spot_json(http.get_text(spot_url, session=session), spot_url), spot_url)
    except (FetchError, PriceInputError) as exc:
        return df, [Problem(spot_url, 0, "spot_price_hour", f"spot feed not read, on-demand prices kept: {exc}")]
    df, problems = df.copy(), []
    for i, row in df.iterrows():
        price = spot.get((row["region"], row["instance_type"]))
        if price is None:
            continue
        if price > row["price_hour"]:  # AWS caps spot at on-demand: higher is not a spot price
            problems.append(Problem(spot_url, 0, "spot_price_hour", f"above on-demand {row['price_hour']}",
                                    f"{row['region']}/{row['instance_type']}={price}"))
            continue
        df.at[i, "spot_price_hour"] = price
        df.at[i, "notes"] = f"spot_feed:{fetched}"
        df.at[i, "source"] = f"{row['source']} + aws-spot-feed:{spot_url}"
    return df, problems


def fetch(base_url: str, regions=None, session=None, progress=None, spot_url: str | None = None):
    """Stream each region's offer file and parse it line by line, within the streamed-body
    limits of pricing.http (deadline, GPU_ADVISOR_HTTP_MAX_STREAM_BYTES) and a CSV field limit;
    then the spot feed (`spot_url`, default SPOT_URL when `base_url` is the public host, else none)."""
    import pandas as pd

    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    frames, problems = [], []
    for region in regions or DEFAULT_REGIONS:
        url = base_url.rstrip("/") + PATH.format(region=region)
        resp = http.request("GET", url, session=session, stream=True,
                            max_bytes=http.settings()["max_stream_bytes"])
        try:
            with files.csv_field_limit() as limit:
                df, probs = parse_lines(_lines(http.iter_body(resp, url), url), region, url, now)
        except FetchError:
            raise
        except csv.Error as exc:
            if files.is_field_limit_error(exc):
                raise FetchError(url, f"a CSV field is longer than {limit:,} characters; "
                                      "not an AWS offer file") from None
            raise FetchError(url, f"unreadable CSV: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - a broken stream is a failed fetch
            raise FetchError(url, f"download truncated or broken mid-way ({type(exc).__name__})") from None
        finally:
            resp.close()
        if not len(df):
            raise FetchError(url, "offer file has no on-demand Linux GPU rows")
        frames.append(df)
        problems += probs
        if progress:
            progress(region)
    df = pd.concat(frames, ignore_index=True)
    spot_url = spot_url or (SPOT_URL if base_url.rstrip("/") == DEFAULT_URL else None)
    if spot_url:
        df, spot_problems = add_spot(df, spot_url, session=session)
        problems += spot_problems
        if progress:
            progress("spot feed")
    return df, problems
