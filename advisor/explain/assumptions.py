"""The plan's assumptions in words: the band, setup, checkpoints, pricing, stale prices, billing, the time model,
the precision rule, the tight band and multi-node runs (the plan's `assumptions` record carries them)."""

from __future__ import annotations


def words(setup: dict, checkpoint: dict, checkpoint_interval_hours: float | None, spot: bool, allow_stale: bool,
          tight_fraction: float) -> dict[str, str]:
    """Each worded assumption by its key; `setup` and `checkpoint` are advisor/data/billing.json's blocks."""
    every = (f"every {checkpoint_interval_hours:g} h" if checkpoint_interval_hours else
             "Young's optimum interval sqrt(2 x write time x MTBF), at most "
             f"{checkpoint['max_interval_hours']:g} h")
    return {
        "hours_band": "p10-p90 of the time model's held-out error for the GPU class and method "
                      "(benchmarks/results/time_calibration.md)",
        "setup_hours": f"{setup['provisioning_hours']} h provisioning + download at {setup['download_gb_s']} GB/s "
                       "+ final save",
        "checkpoints": every + f", written at {checkpoint['write_gb_s_per_node']} GB/s per node",
        "pricing": "on-demand ranking" + ("; best spot option beside it" if spot else ""),
        "stale_prices": "ranked" if allow_stale else "left out while fresh offers exist",
        "billing": "per provider, advisor/data/billing.json",
        "time_model": "advisor/throughput.py + advisor/data/mfu.json",
        "precision_rule": "full: mixed precision with fp32 master weights (amp, or DeepSpeed bf16/fp16 mode); "
                          "LoRA/QLoRA: 16-bit frozen weights, fp32 adapters; fp16 where the GPU has no bf16",
        "tight_band": f"{tight_fraction:.0%} of the limit (worst under-estimate on high-confidence measurements)",
        "multi_node": "only over a known inter-node fabric (pricing/data/fabrics.csv or the sheet's cluster_gbps)",
    }
