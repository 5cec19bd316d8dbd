"""Vast.ai marketplace offers -> our schema (public; VAST_API_KEY optional; PRICE_SOURCES.md §7).

GET <base>/bundles/?q=<json>. The offer search answers without a key (dstack's gpuhunt 0.1.34,
gpuhunt/providers/vastai.py, posts its query to https://console.vast.ai/api/v0/bundles/ with no
credentials); VAST_API_KEY, when set, is sent as a bearer token. Offers are single hosts whose prices move by the minute, so
we aggregate: one row per (num_gpus, gpu_name, geolocation) with the median `dph_total`
(whole offer incl. storage) as on-demand and the median `min_bid` as spot. RAM is
`cpu_ram` MB / 1024; GPU memory (per GPU, MB) only disambiguates the model.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import statistics
from typing import TypeGuard

from pricing import http
from pricing.gpus import get_gpu
from pricing.http import field
from pricing.instances import resolve_gpu
from pricing.schema import Problem

ORDER = 60  # place in `prices refresh`'s default order (pricing/sources/__init__.py)
NAME = "vast"
DEFAULT_URL = "https://console.vast.ai/api/v0"
KEY_ENV = "VAST_API_KEY"
KEY_OPTIONAL = True  # fetched without a key too (pricing/refresh.py)
QUERY = {"verified": {"eq": True}, "rentable": {"eq": True}, "type": "on-demand",
         "order": [["dph_total", "asc"]], "limit": 5000}


def _number(v) -> TypeGuard[float]:
    """A JSON number (JSON true is not 1)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _key(o, i: int, url: str):
    """(group key (GPU count, GPU model, place), None) for a usable offer, else (None, its problem)."""
    if not isinstance(o, dict):
        return None, Problem(url, i, "offers", "offer is not an object", o)
    n, price = o.get("num_gpus"), o.get("dph_total")
    if not _number(n) or n <= 0 or n % 1:
        return None, Problem(url, i, "num_gpus", "missing, <= 0 or not a whole number", n)
    if not _number(price) or price <= 0:
        return None, Problem(url, i, "dph_total", "missing or <= 0", price)
    mem = o.get("gpu_ram")
    gpu = resolve_gpu("vast", "", o.get("gpu_name"),
                      memory_gib_per_gpu=mem / 1024 if isinstance(mem, (int, float)) else None)
    if gpu is None:
        return None, Problem(url, i, "gpu_name", "GPU not in our GPU table", o.get("gpu_name"))
    return (int(n), gpu, str(o.get("geolocation") or "unknown")), None


def _row(n: int, gpu: str, region: str, items: list[dict], url: str, fetched_at: str) -> dict:
    """One row for a group of offers: the median ask (and median minimum bid) of its offers."""
    price = statistics.median(o["dph_total"] for o in items)
    bids = [o["min_bid"] for o in items if isinstance(o.get("min_bid"), (int, float)) and o["min_bid"] > 0]
    spot = statistics.median(bids) if bids else None
    rams = [o["cpu_ram"] / 1024 for o in items if isinstance(o.get("cpu_ram"), (int, float))]
    cpus = [o["cpu_cores_effective"] for o in items if isinstance(o.get("cpu_cores_effective"), (int, float))]
    return {"provider": "vast", "region": region, "instance_type": f"{n}x-{gpu}",
            "gpu_model": gpu, "gpu_count": float(n), "gpu_memory_gb": get_gpu(gpu).memory_gb,
            "vcpus": min(cpus) if cpus else None, "ram_gb": round(min(rams), 1) if rams else None,
            "price_hour": round(price, 4),
            "spot_price_hour": round(spot, 4) if spot and spot < price else None,
            "currency": "USD", "source": f"vast-bundles:{url}", "fetched_at": fetched_at,
            "interconnect": None, "notes": f"median of {len(items)} marketplace offers"}


def parse(payload, url: str, fetched_at: str):
    import pandas as pd

    offers = field(payload, "offers", url, list)
    groups: dict[tuple, list[dict]] = {}
    problems = []
    for i, o in enumerate(offers, start=1):
        key, problem = _key(o, i, url)
        if problem is not None:
            problems.append(problem)
            continue
        groups.setdefault(key, []).append(o)
    rows = [_row(n, gpu, region, items, url, fetched_at) for (n, gpu, region), items in sorted(groups.items())]
    return pd.DataFrame(rows), problems


def fetch(base_url: str, regions=None, session=None, progress=None, key: str = ""):
    url = base_url.rstrip("/") + "/bundles/"
    payload = http.get_json(url, session=session, params={"q": json.dumps(QUERY)},
                            headers={"Authorization": f"Bearer {key}"} if key else {})
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    df, problems = parse(payload, url, now)
    if regions and len(df):
        df = df[df["region"].str.contains("|".join(map(re.escape, regions)), case=False, regex=True)]
    return df, problems
