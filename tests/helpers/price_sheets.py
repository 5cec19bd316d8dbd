"""Shared by tests in several folders (moved out of tests/pricing/test_price_observations.py, issue 44)."""

from __future__ import annotations

import csv

import numpy as np
import pandas as pd

from pricing import observations

OBS = {"provider": "aws", "product": "", "region": "", "gpu_model": "H100", "gpu_count": "8", "tier": "on-demand",
       "price_hour": "55.04", "price_unit": "instance", "currency": "USD", "observed_at": "2026-10-01",
       "source": "https://example.com/prices", "read_at": "2026-12-01", "vcpus": "", "ram_gb": "", "notes": ""}


ROW = {"provider": "aws", "region": "us-east-1", "instance_type": "p5.48xlarge", "gpu_model": "H100", "gpu_count": 8.0,
       "vcpus": 192.0, "ram_gb": 2048.0, "price_hour": 55.04, "spot_price_hour": np.nan, "source": "catalog",
       "notes": None, "observed_at": None, "price_origin": "bundled"}


def sheet(tmp_path, *rows, name="obs.csv"):
    """An observation sheet on disk (each row: OBS with changes), read as the loader reads it."""
    path = tmp_path / name
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, list(observations.COLUMNS))
        w.writeheader()
        w.writerows({**OBS, **r} for r in rows)
    obs, problems = observations.read(path)
    assert problems == []
    return obs


def catalog(*rows):
    df = pd.DataFrame([{**ROW, **r} for r in rows])
    return df.assign(observed_at=pd.to_datetime(df["observed_at"], utc=True))
