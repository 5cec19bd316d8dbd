"""Vultr's public plan lists -> our schema (no key).

GET <base>/plans-metal?per_page=500 (bare metal, `plans_metal`) and <base>/plans?type=all&per_page=500
(cloud plans, `plans`): Vultr's plan lists answer without a key (dstack's gpuhunt 0.1.34,
gpuhunt/providers/vultr.py, reads both without one and sends a key only to list a VDM plan's regions).
Each plan has `id`, `type`, `hourly_cost` (USD per instance-hour), `ram` (MB), `cpu_threads` (bare metal) or
`vcpu_count`, `locations` (region ids) and, on cloud GPU plans, `gpu_type` (`NVIDIA_A100`) and `gpu_vram_gb`
(the plan's share of GPU memory). One row per plan and location:
* bare-metal GPU plans name their GPUs in the id: `vbm-112c-2048gb-8-h100-gpu` is 8x H100,
  `vbm-72c-480gb-gh200-gpu` one GH200;
* cloud GPU plans give the GPU family in `gpu_type` and the plan's GPU memory in `gpu_vram_gb`: the GPU
  count is that memory over the GPU's own (a fraction below one GPU: a vGPU slice);
* plans with `deploy_ondemand` false, no GPU, a price of 0 (the free tier) or a GPU not in our table are left out
  (the last reported).
The lists state no date: rows are dated by the fetch (pricing.refresh.stamp). No spot tier.
"""

from __future__ import annotations

import datetime as dt
import re

from pricing import http
from pricing.gpus import get_gpu
from pricing.http import field
from pricing.instances import resolve_gpu
from pricing.schema import Problem

ORDER = 70  # place in `prices refresh`'s default order (pricing/sources/__init__.py)
NAME = "vultr"
DEFAULT_URL = "https://api.vultr.com/v2"
PATHS = (("/plans-metal?per_page=500", "plans_metal"), ("/plans?type=all&per_page=500", "plans"))
# Plan-id labels whose GPU is not what the label alone resolves to, as dstack's gpuhunt 0.1.34 records them
# (gpuhunt/providers/vultr.py: BARE_METAL_GPU_DETAILS lists vbm-64c-2048gb-8-l40-gpu as 8x L40S 48 GB;
# get_gpu_memory: "VULTR A100 instances have 80GB").
LABEL_GPU = {"l40": "L40S"}
LABEL_MEMORY_GB = {"a100": 80.0}
_METAL = re.compile(r"vbm-\d+c-\d+gb-(?:(?P<n>\d+)-)?(?P<gpu>[a-z0-9]+)-gpu")


def _gpus(plan: dict) -> tuple[str | None, float | None, str | None]:
    """(GPU model, GPU count, the label that named it) of a plan; (None, None, label) for a GPU we cannot
    name, (None, None, None) for a plan without GPUs."""
    m = _METAL.fullmatch(str(plan.get("id", "")))
    if m:
        gpu = resolve_gpu("vultr", str(plan["id"]), LABEL_GPU.get(m["gpu"], m["gpu"]),
                          memory_gib_per_gpu=LABEL_MEMORY_GB.get(m["gpu"]))
        return gpu, float(m["n"] or 1), m["gpu"]
    label = plan.get("gpu_type")
    vram = plan.get("gpu_vram_gb")
    if not isinstance(label, str) or "_" not in label or not isinstance(vram, (int, float)) or vram <= 0:
        return None, None, None
    name = label.split("_", 1)[1]
    gpu = resolve_gpu("vultr", str(plan.get("id")), LABEL_GPU.get(name.lower(), name),
                      memory_gib_per_gpu=LABEL_MEMORY_GB.get(name.lower()))
    if gpu is None:
        return None, None, label
    full = get_gpu(gpu).memory_gb
    share = vram / full
    return gpu, (round(share) if share >= 1 else round(share, 4)), label


def _rows(plan: dict, i: int, url: str, fetched_at: str):
    """(rows, problem or None) for one plan: one row per location."""
    price = plan.get("hourly_cost")
    if plan.get("deploy_ondemand") is False or not isinstance(price, (int, float)) or isinstance(price, bool):
        return [], None
    gpu, count, label = _gpus(plan)
    if gpu is None or count is None:
        return [], (Problem(url, i, "id", "GPU not in our GPU table", label) if label else None)
    if price <= 0:
        return [], None  # the free tier
    ram = plan.get("ram")
    cpus = plan.get("cpu_threads", plan.get("vcpu_count"))
    return [{"provider": "vultr", "region": loc, "instance_type": str(plan["id"]), "gpu_model": gpu,
             "gpu_count": count, "gpu_memory_gb": get_gpu(gpu).memory_gb,
             "vcpus": cpus if isinstance(cpus, (int, float)) else None,
             "ram_gb": ram / 1024 if isinstance(ram, (int, float)) else None,
             "price_hour": float(price), "spot_price_hour": None, "currency": "USD",
             "source": f"vultr-plans:{url}", "fetched_at": fetched_at, "interconnect": None,
             "notes": None if count >= 1 else "fractional GPU (a vGPU slice of one card)"}
            for loc in plan.get("locations") or [] if isinstance(loc, str) and loc], None


def parse(pages: list[tuple[dict, str, str]], fetched_at: str):
    """[(payload, list field, url)] -> (DataFrame in our schema, problems)."""
    import pandas as pd

    rows, problems = [], []
    for payload, key, url in pages:
        for i, plan in enumerate(field(payload, key, url, list), start=1):
            if not isinstance(plan, dict):
                problems.append(Problem(url, i, key, "plan is not an object", plan))
                continue
            got, problem = _rows(plan, i, url, fetched_at)
            rows += got
            if problem is not None:
                problems.append(problem)
    return pd.DataFrame(rows), problems


def fetch(base_url: str, regions=None, session=None, progress=None):
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    pages = []
    for path, key in PATHS:
        url = base_url.rstrip("/") + path
        payload = http.get_json(url, session=session)
        field(payload, key, url, list)  # the list is there before the next request is made
        pages.append((payload, key, url))
        if progress:
            progress(key)
    df, problems = parse(pages, now)
    if regions and len(df):
        df = df[df["region"].isin(regions)]
    return df, problems
