"""Shared by tests in several folders (moved out of tests/advisor/planner/test_planner.py, issue 44)."""

from __future__ import annotations

import pandas as pd

from advisor.model.catalog import load_model
from pricing.gpus import get_gpu

MODEL = load_model("meta-llama/Llama-3.1-8B")


DATE = "2026-11-25T00:00:00Z"


def offer(provider, region, instance, gpu, count, price, spot=None, ram=None, **kw):
    return dict(provider=provider, region=region, instance_type=instance, gpu_model=gpu, gpu_count=count,
                gpu_memory_gb=get_gpu(gpu).memory_gb, vcpus=8 * count, ram_gb=ram or 128 * count,
                price_hour=price, spot_price_hour=spot, currency="USD", source=f"test-{provider}", fetched_at=DATE,
                interconnect=kw.get("interconnect", ""),
                spot_price_date=DATE[:10] if spot is not None else "")  # a spot price dated on its own


OFFERS = pd.DataFrame([
    offer("aws", "us-east-1", "g5.xlarge", "A10G", 1, 1.006, 0.45, ram=16),
    offer("aws", "us-east-1", "g6e.xlarge", "L40S", 1, 1.861, 0.84, ram=32),
    offer("aws", "us-east-1", "p5.48xlarge", "H100", 8, 98.32, 39.0, ram=2048),
    offer("lambda", "us-west-1", "gpu_1x_a100_sxm4_80gb", "A100-80GB", 1, 1.79),
    offer("lambda", "us-west-1", "gpu_1x_h100_sxm5", "H100", 1, 3.29),
    offer("runpod", "US", "1x A100 80GB SXM", "A100-80GB", 1, 1.89, 1.05),
    offer("gcp", "us-central1", "a2-ultragpu-2g", "A100-80GB", 2, 10.14, 3.2),
])
