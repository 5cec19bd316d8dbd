"""Stage 5 — costing: wall hours and cost of every priced offer × fitting config, vectorised.

Cost = billed wall hours × instance price × nodes; wall hours = training + setup (+ on spot:
lost work and restarts per interruption, and the checkpoint writes that make restarts cheap).
Billing increments, setup and spot assumptions live in advisor/data/billing.json, each with
its source or the note that it is an assumption.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

BILLING_FILE = Path(__file__).resolve().parents[1] / "data" / "billing.json"
CPU_RAM_USABLE = 0.9  # share of instance RAM offloaded states may use (OS, dataloader, page cache)


@lru_cache(maxsize=1)
def billing() -> dict:
    return json.loads(BILLING_FILE.read_text())


def setup_hours(weights_gb: float, output_gb, override: float | None = None):
    """Fixed hours per run: provisioning, model download and the final save (or the user's figure)."""
    if override is not None:
        return float(override)
    s = billing()["setup"]
    return s["provisioning_hours"] + weights_gb / s["download_gb_s"] / 3600 + output_gb / s["checkpoint_write_gb_s"] / 3600


def checkpoint_hours(state_gb, nodes):
    """Hours to write one training checkpoint, each node writing its shard in parallel."""
    return state_gb / (billing()["setup"]["checkpoint_write_gb_s"] * nodes) / 3600


def score(priced, cfg, *, spot_rate: float, checkpoint_interval: float):
    """Hours and cost of every (priced offer × fitting config) pair, vectorised.

    `priced`: one row per offer and tier (columns gpu_model, gpu_count, provider, price, price_hour,
    spot_price_hour, ram_gb, spot); `cfg`: one row per fitting config (gpu_model, gpu_count, nodes,
    train_hours, setup_hours, ckpt_hours, cpu_ram). Returns offer_row/cfg_row positions and numbers.
    """
    import numpy as np
    import pandas as pd

    left = pd.DataFrame({"gpu_model": priced["gpu_model"].to_numpy(), "gpu_count": priced["gpu_count"].to_numpy(),
                         "offer_row": np.arange(len(priced))})
    right = pd.DataFrame({"gpu_model": cfg["gpu_model"].to_numpy(), "gpu_count": cfg["gpu_count"].to_numpy(),
                          "cfg_row": np.arange(len(cfg))})
    pairs = left.merge(right, on=["gpu_model", "gpu_count"], how="inner", sort=False)
    oi, ci = pairs["offer_row"].to_numpy(), pairs["cfg_row"].to_numpy()

    nodes = cfg["nodes"].to_numpy(float)[ci]
    train = cfg["train_hours"].to_numpy(float)[ci]
    setup = np.broadcast_to(np.asarray(cfg["setup_hours"], float), (len(cfg),))[ci]
    ckpt = cfg["ckpt_hours"].to_numpy(float)[ci]
    is_spot = priced["spot"].to_numpy(bool)[oi]
    od_price = priced["price_hour"].to_numpy(float)[oi]
    sp_price = priced["spot_price_hour"].to_numpy(float)[oi]
    provider = priced["provider"]
    b = billing()
    inc = provider.map({k: v["increment_s"] for k, v in b["providers"].items()}).fillna(
        b["default"]["increment_s"]).to_numpy(float)[oi]
    mins = provider.map({k: v["minimum_s"] for k, v in b["providers"].items()}).fillna(
        b["default"]["minimum_s"]).to_numpy(float)[oi]

    def billed(h):
        return np.ceil(np.maximum(h * 3600, mins) / inc - 1e-9) * inc / 3600

    hours_od = train + setup
    # spot: lose half a checkpoint interval + a restart per interruption; pay for each checkpoint write
    hours_spot = hours_od + train * spot_rate * (checkpoint_interval / 2 + setup + ckpt) \
        + np.floor(train / checkpoint_interval) * ckpt
    cost_od = billed(hours_od) * od_price * nodes
    with np.errstate(invalid="ignore"):
        cost_spot = billed(hours_spot) * sp_price * nodes  # NaN where no spot price
    ram = pd.to_numeric(priced["ram_gb"], errors="coerce").fillna(0).to_numpy(float)[oi]
    return pd.DataFrame({
        "offer_row": oi, "cfg_row": ci,
        "hours": np.where(is_spot, hours_spot, hours_od),
        "cost_usd": np.where(is_spot, cost_spot, cost_od),
        "cost_on_demand_usd": cost_od, "cost_spot_usd": cost_spot,
        "price_hour": od_price * nodes,
        "ram_ok": cfg["cpu_ram"].to_numpy(float)[ci] <= ram * 1e9 * CPU_RAM_USABLE,
    })
