"""RunPod GPU types (GraphQL) -> our schema (needs RUNPOD_API_KEY; PRICE_SOURCES.md §6).

POST <base> with the gpuTypes query. Prices are per GPU: an n-GPU instance costs
securePrice × n (secure cloud; community cloud is a different, cheaper tier we skip on
purpose because hosts are unvetted); spot = secureSpotPrice × n. Commitment prices
(oneWeek/oneMonth/threeMonth) are excluded. GraphQL answers HTTP 200 with an `errors` array
on failure: that is a failed fetch. Region is "any" (the API prices GPU types, not places).
"""

from __future__ import annotations

import datetime as dt
from typing import TypeGuard

from pricing import http
from pricing.errors import FetchError
from pricing.gpus import get_gpu
from pricing.http import field
from pricing.instances import resolve_gpu
from pricing.schema import Problem

ORDER = 50  # place in `prices refresh`'s default order (pricing/sources/__init__.py)
NAME = "runpod"
DEFAULT_URL = "https://api.runpod.io/graphql"
KEY_ENV = "RUNPOD_API_KEY"
QUERY = ("query GpuTypes { gpuTypes { id displayName manufacturer memoryInGb maxGpuCount "
         "secureCloud securePrice secureSpotPrice } }")
COUNTS = (1, 2, 4, 8)


def _number(v) -> TypeGuard[float]:
    """A JSON number (JSON true is not 1)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _rows(t: dict, gpu: str, price: float, spot, url: str, fetched_at: str) -> list[dict]:
    """One secure-cloud row per GPU count up to the type's maxGpuCount (8 when not stated)."""
    top = t.get("maxGpuCount")
    top = top if isinstance(top, int) and not isinstance(top, bool) else 8
    rows = []
    for n in (c for c in COUNTS if c <= top):
        s = spot * n if _number(spot) and 0 < spot < price else None
        rows.append({"provider": "runpod", "region": "any", "instance_type": f"{n}x_{gpu}_SECURE",
                     "gpu_model": gpu, "gpu_count": float(n), "gpu_memory_gb": get_gpu(gpu).memory_gb,
                     "vcpus": None, "ram_gb": None, "price_hour": round(price * n, 4),
                     "spot_price_hour": None if s is None else round(s, 4), "currency": "USD",
                     "source": f"runpod-graphql:{url}", "fetched_at": fetched_at,
                     "interconnect": None, "notes": None})
    return rows


def parse(payload, url: str, fetched_at: str):
    import pandas as pd

    if isinstance(payload, dict) and payload.get("errors"):
        first = payload["errors"][0]
        msg = first.get("message", first) if isinstance(first, dict) else first
        raise FetchError(url, f"GraphQL error: {msg}")
    types = field(payload, "data.gpuTypes", url, list)
    rows, problems = [], []
    for i, t in enumerate(types, start=1):
        if not isinstance(t, dict):
            problems.append(Problem(url, i, "gpuTypes", "entry is not an object", t))
            continue
        name = t.get("displayName") or t.get("id")
        price, spot = t.get("securePrice"), t.get("secureSpotPrice")
        if not t.get("secureCloud") or not _number(price) or price <= 0:
            continue  # not offered on secure cloud
        gpu = resolve_gpu("runpod", "", name, t.get("id"), memory_gib_per_gpu=t.get("memoryInGb"))
        if gpu is None:
            problems.append(Problem(url, i, "displayName", "GPU not in our GPU table", name))
            continue
        rows += _rows(t, gpu, price, spot, url, fetched_at)
    return pd.DataFrame(rows), problems


def fetch(base_url: str, regions=None, session=None, progress=None, key: str = ""):
    payload = http.get_json(base_url, session=session, method="POST", json={"query": QUERY},
                            headers={"Authorization": f"Bearer {key}"})
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return parse(payload, base_url, now)
