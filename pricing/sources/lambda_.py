"""Lambda Cloud instance types -> our schema (needs LAMBDA_API_KEY; PRICE_SOURCES.md §5).

GET <base>/instance-types with `Authorization: Bearer <key>`. Price is integer cents per
hour for the whole instance; GPU count from specs.gpus; model from the type name
(`gpu_8x_h100_sxm5`) checked against `gpu_description` ("H100 (80 GB SXM5)"). One row per
region with capacity; a type with no capacity anywhere is kept once as region "any".
No spot tier.
"""

from __future__ import annotations

import datetime as dt
import re

from pricing import http
from pricing.gpus import get_gpu, named_family
from pricing.http import field
from pricing.instances import lookup, resolve_gpu
from pricing.schema import Problem

ORDER = 40  # place in `prices refresh`'s default order (pricing/sources/__init__.py)
NAME = "lambda"
DEFAULT_URL = "https://cloud.lambda.ai/api/v1"
KEY_ENV = "LAMBDA_API_KEY"


def parse(payload, url: str, fetched_at: str):
    import pandas as pd

    data = field(payload, "data", url, dict)
    rows, problems = [], []
    for i, (name, entry) in enumerate(sorted(data.items()), start=1):
        try:
            it = field(entry, "instance_type", url, dict)
            cents = field(it, "price_cents_per_hour", url, (int, float))
            specs = field(it, "specs", url, dict)
            count = field(specs, "gpus", url, (int, float))
        except Exception as exc:  # noqa: BLE001 - one bad entry is a problem, not a crash
            problems.append(Problem(url, i, "data." + str(name), str(exc).split(": ", 1)[-1]))
            continue
        if not count:
            continue  # CPU-only type
        if count % 1:
            problems.append(Problem(url, i, "specs.gpus", "must be a whole number of GPUs", count))
            continue
        desc = str(it.get("gpu_description", ""))
        m = re.match(r"gpu_\d+x_([a-z0-9]+)", name)
        mem = re.search(r"(\d+)\s*GB", desc)
        gpu = resolve_gpu("lambda", name, m.group(1) if m else None, desc.split(" (")[0],
                          memory_gib_per_gpu=float(mem.group(1)) if mem else None)
        if gpu is None:
            problems.append(Problem(url, i, "gpu_description", "GPU not in our GPU table", desc))
            continue
        said, typed = named_family(desc), named_family(name)
        if said and typed and said != typed:  # an h100 type described as "A10": neither is to be trusted
            problems.append(Problem(url, i, "gpu_description", f"names {said} but the instance type {name} "
                                    f"names {typed}; row dropped", desc))
            continue
        if cents <= 0:
            problems.append(Problem(url, i, "price_cents_per_hour", "must be > 0", cents))
            continue
        regions = [r.get("name") for r in entry.get("regions_with_capacity_available") or []
                   if isinstance(r, dict) and r.get("name")] or ["any"]
        spec = lookup("lambda", name)
        for region in regions:
            rows.append({"provider": "lambda", "region": region, "instance_type": name,
                         "gpu_model": gpu, "gpu_count": float(count),
                         "gpu_memory_gb": get_gpu(gpu).memory_gb, "vcpus": specs.get("vcpus"),
                         "ram_gb": specs.get("memory_gib"), "price_hour": cents / 100,
                         "spot_price_hour": None, "currency": "USD", "source": f"lambda-api:{url}",
                         "fetched_at": fetched_at, "interconnect": spec.interconnect if spec else None,
                         "notes": "no capacity at fetch time" if region == "any" else None})
    return pd.DataFrame(rows), problems


def fetch(base_url: str, regions=None, session=None, progress=None, key: str = ""):
    url = base_url.rstrip("/") + "/instance-types"
    payload = http.get_json(url, session=session, headers={"Authorization": f"Bearer {key}"})
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    df, problems = parse(payload, url, now)
    if regions and len(df):
        df = df[df["region"].isin(regions)]
    return df, problems
