"""Stage 5 — costing: wall hours and cost of every priced offer × fitting config, vectorised.

Wall hours = training + setup + periodic checkpoint writes + the expected cost of interruptions
(the work since the last checkpoint and a restart, per interruption). Interruptions: hardware
failures on any capacity (a rate per GPU-hour), plus spot reclaims per instance-hour on spot;
a job on N instances stops when any of them does. The checkpoint interval is the user's, or
Young's optimum sqrt(2 · write time · MTBF) for the run's failure rate. Cost = billed wall hours
× instance price × nodes, at each provider's billing increment. Every constant lives in
advisor/data/billing.json with its source, or the note that it is an assumption.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from advisor.planner.frame_memo import per_frame
from advisor.units import GB
from pricing import providers

BILLING_FILE = Path(__file__).resolve().parents[1] / "data" / "billing.json"
CPU_RAM_USABLE = 0.9  # share of instance RAM offloaded states may use (OS, dataloader, page cache)


@lru_cache(maxsize=1)
def billing() -> dict:
    """billing.json, with each provider's billing terms from its row in pricing/data/providers.csv."""
    data = json.loads(BILLING_FILE.read_text(encoding="utf-8"))
    data["providers"] = providers.billing_table()
    return data


def billing_increment(provider: str) -> tuple[float, float]:
    """(increment, minimum) in seconds for a provider (unknown: the default, per started hour)."""
    b = billing()
    entry = b["providers"].get(str(provider).lower(), b["default"])
    return entry["increment_s"], entry["minimum_s"]


def setup_hours(weights_gb: float, output_gb, override: float | None = None):
    """Fixed hours per run: provisioning, model download and the final save (or the user's figure)."""
    if override is not None:
        return float(override)
    b = billing()
    s, write = b["setup"], b["checkpoint"]["write_gb_s_per_node"]
    return s["provisioning_hours"] + weights_gb / s["download_gb_s"] / 3600 + output_gb / write / 3600


def checkpoint_write_hours(state_bytes, nodes):
    """Hours to write one resumable checkpoint, each node writing its shard in parallel."""
    return state_bytes / GB / (billing()["checkpoint"]["write_gb_s_per_node"] * nodes) / 3600


def interruption_rate(gpus, nodes, spot, spot_rate: float | None = None):
    """Expected interruptions per wall hour: hardware failures per GPU (Llama 3, section 3.3.4),
    plus spot reclaims per instance on spot capacity."""
    r = billing()["reliability"]
    per_instance = r["spot_interruptions_per_instance_hour"] if spot_rate is None else spot_rate
    return r["hardware_interruptions_per_gpu_hour"] * gpus + spot * per_instance * nodes


def checkpoint_interval(write_hours, rate, train_hours, override: float | None = None):
    """Hours between checkpoints: the user's, else Young's first-order optimum sqrt(2·δ·M)
    (J. W. Young 1974, CACM 17(9):530) with M = 1/rate, kept between the configured minimum and
    the training time (a run shorter than the interval writes no intermediate checkpoint) and at most
    max_interval_hours (billing.json: failures Young's rate does not see -- out-of-memory steps, NaN
    losses, time limits -- lose at most that much work, so a run over an hour checkpoints before its end),
    unless writing that often would take more than max_write_share of the training time -- but never
    longer than half a run over max_interval_hours, which always checkpoints before its end."""
    import numpy as np

    if override is not None:
        return np.broadcast_to(float(override), np.shape(train_hours)).astype(float)
    ckpt = billing()["checkpoint"]
    low, high, share = ckpt["min_interval_hours"], ckpt["max_interval_hours"], ckpt["max_write_share"]
    write = np.asarray(write_hours, float)
    young = np.sqrt(2 * write / np.maximum(rate, 1e-12))
    train = np.asarray(train_hours, float)
    cap = np.where(train > high, np.minimum(np.maximum(high, write / share), train / 2), train)
    return np.clip(young, low, np.maximum(cap, low))


def wall_hours(train, setup, write, rate, interval):
    """(wall hours, checkpoint-writing hours, expected interruption hours) for arrays of runs."""
    import numpy as np

    ckpt = np.floor(train / interval) * write
    lost = rate * train * (interval / 2 + setup + write)
    return train + setup + ckpt + lost, ckpt, lost


QUANTILES = ("p50", "p10", "p90", "rank")  # training-hours columns `score` turns into hours and cost


@per_frame
def offer_billing(priced):
    """(increment, minimum) billed seconds per offer row: the row's own `billing_increment_hours` /
    `min_billed_hours` where the sheet gives them (cluster sellers bill by the week), else the
    provider's entry in billing.json, else the default (per started hour)."""
    import numpy as np
    import pandas as pd

    b = billing()
    provider = priced["provider"].astype(str).str.lower()
    inc = provider.map({k: v["increment_s"] for k, v in b["providers"].items()}).fillna(
        b["default"]["increment_s"]).to_numpy(float, copy=True)
    mins = provider.map({k: v["minimum_s"] for k, v in b["providers"].items()}).fillna(
        b["default"]["minimum_s"]).to_numpy(float, copy=True)
    for column, default in (("billing_increment_hours", inc), ("min_billed_hours", mins)):
        if column in priced:
            own = pd.to_numeric(priced[column], errors="coerce").to_numpy(float) * 3600
            default[:] = np.where(np.isfinite(own) & (own > 0), own, default)
    return inc, mins


def billed_hours(hours, increment_s, minimum_s):
    """Hours a provider bills for `hours` of use: at least the minimum, rounded up to the increment."""
    import numpy as np

    return np.ceil(np.maximum(hours * 3600, minimum_s) / increment_s - 1e-9) * increment_s / 3600


def _pairs(priced, cfg):
    """(offer rows, config rows) of every offer × fitting config on the same GPU model and count; a
    multi-node config joins only offers over its fabric."""
    import numpy as np
    import pandas as pd

    left = pd.DataFrame({"gpu_model": priced["gpu_model"].to_numpy(), "gpu_count": priced["gpu_count"].to_numpy(),
                         "offer_row": np.arange(len(priced))})
    right = pd.DataFrame({"gpu_model": cfg["gpu_model"].to_numpy(), "gpu_count": cfg["gpu_count"].to_numpy(),
                          "cfg_row": np.arange(len(cfg))})
    pairs = left.merge(right, on=["gpu_model", "gpu_count"], how="inner", sort=False)
    oi, ci = pairs["offer_row"].to_numpy(), pairs["cfg_row"].to_numpy()
    if "fabric_gbps" in cfg and "fabric_gbps" in priced:
        cf = cfg["fabric_gbps"].to_numpy(float)[ci]
        of = priced["fabric_gbps"].to_numpy(float)[oi]
        keep = np.isnan(cf) | (cf == of)
        oi, ci = oi[keep], ci[keep]
    return oi, ci


def score(priced, cfg, *, spot_rate: float | None = None, checkpoint_interval_hours: float | None = None):
    """Hours and cost of every (priced offer × fitting config) pair, vectorised: the one place
    wall hours and cost are computed, for every quantile of the training hours alike.

    `priced`: one row per offer and tier (gpu_model, gpu_count, provider, price_hour, spot_price_hour,
    spot, fabric_gbps, optional billing_increment_hours / min_billed_hours); `cfg`: one row per fitting
    config (gpu_model, gpu_count, nodes, gpus, fabric_gbps, setup_hours, write_hours and the training
    hours train_hours_<q> for q in QUANTILES). Returns offer_row / cfg_row positions and, per pair,
    hours_<q> and cost_<q> at the pair's tier (on demand, or spot for a spot row) with billing
    increments applied, the p50 parts (setup, checkpoints, interruptions) and both tiers' p50 cost.
    """
    import numpy as np
    import pandas as pd

    oi, ci = _pairs(priced, cfg)
    nodes = cfg["nodes"].to_numpy(float)[ci]
    gpus = cfg["gpus"].to_numpy(float)[ci] if "gpus" in cfg else nodes * cfg["gpu_count"].to_numpy(float)[ci]
    setup = np.broadcast_to(np.asarray(cfg["setup_hours"], float), (len(cfg),))[ci]
    write = cfg["write_hours"].to_numpy(float)[ci] if "write_hours" in cfg else np.zeros(len(ci))
    is_spot = priced["spot"].to_numpy(bool)[oi]
    od_price = priced["price_hour"].to_numpy(float)[oi]
    sp_price = priced["spot_price_hour"].to_numpy(float)[oi]
    inc, mins = (x[oi] for x in offer_billing(priced))

    def tier(train, spot: bool):
        rate = interruption_rate(gpus, nodes, spot, spot_rate)
        interval = checkpoint_interval(write, rate, train, checkpoint_interval_hours)
        return (*wall_hours(train, setup, write, rate, interval), interval)

    out = {"offer_row": oi, "cfg_row": ci}
    for q in QUANTILES:
        train = cfg[f"train_hours_{q}"].to_numpy(float)[ci]
        hours_od, ckpt_od, lost_od, int_od = tier(train, False)
        hours_sp, ckpt_sp, lost_sp, int_sp = tier(train, True)
        cost_od = billed_hours(hours_od, inc, mins) * od_price * nodes
        with np.errstate(invalid="ignore"):
            cost_sp = billed_hours(hours_sp, inc, mins) * sp_price * nodes  # NaN where no spot price
        out[f"hours_{q}"] = np.where(is_spot, hours_sp, hours_od)
        out[f"cost_{q}"] = np.where(is_spot, cost_sp, cost_od)
        if q == "p50":
            out.update(train_hours=train, setup_hours=setup, cost_on_demand_usd=cost_od, cost_spot_usd=cost_sp,
                       hours_spot=hours_sp, checkpoint_hours=np.where(is_spot, ckpt_sp, ckpt_od),
                       interruption_hours=np.where(is_spot, lost_sp, lost_od),
                       checkpoint_interval_hours=np.where(is_spot, int_sp, int_od))
    out.update(hours=out["hours_p50"], cost_usd=out["cost_p50"], price_hour=od_price * nodes)
    return pd.DataFrame(out)
