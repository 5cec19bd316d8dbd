"""Cluster and multi-GPU sellers: a cited, dated sheet loaded with the bundled data, whose
billing terms give the hours a run is charged for."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from pricing.loader import CLUSTERS, load, read_sheet


def test_every_cluster_row_is_cited_dated_and_states_its_billing_terms():
    with open(CLUSTERS, newline="") as f:
        raw = list(csv.DictReader(f))
    good, problems = read_sheet(CLUSTERS)
    assert problems == [] and len(good) == len(raw) > 0
    assert all(r["source"].startswith("https://") and r["observed_at"] for r in raw)
    assert good.min_billed_hours.notna().all() and good.billing_increment_hours.notna().all()


def test_cluster_rows_load_with_the_bundled_data_and_count_towards_providers():
    df, problems = load(include_cache=False)
    assert problems == []
    sheet = read_sheet(CLUSTERS)[0]
    clusters = df.merge(sheet[["provider", "region", "instance_type"]])  # the dated observation sheet adds more
    assert len(clusters) == len(sheet) and set(clusters.price_origin) == {"bundled"}


def billed(hours, minimum, step):
    """Hours the planner's costing bills (advisor.planner.costing: offer_billing + billed_hours) for
    rows that state these terms (NaN: the provider's default)."""
    import pandas as pd

    from advisor.planner.costing import billed_hours, offer_billing

    priced = pd.DataFrame({"provider": "acme", "min_billed_hours": np.atleast_1d(minimum).astype(float),
                           "billing_increment_hours": np.atleast_1d(step).astype(float)})
    return billed_hours(np.atleast_1d(np.asarray(hours, float)), *offer_billing(priced))


@pytest.mark.parametrize("hours, minimum, step, expected", [
    (2.4, np.nan, 1 / 3600, 2.4),  # per second: as used
    (2.4, 168, 168, 168),  # a weekly reservation costs at least a week
    (170, 168, 168, 336),  # and is paid in whole weeks
    (2.01, 0, 1 / 60, 2.0 + 1 / 60),  # per minute
    (3.0, np.nan, 1, 3.0),  # an exact hour is not rounded up
])
def test_billed_hours_honour_the_minimum_and_the_increment(hours, minimum, step, expected):
    assert billed(hours, minimum, step)[0] == pytest.approx(expected)


def test_billed_hours_work_on_arrays_with_missing_terms():
    got = billed([0.5, 200.0, 1.2], [168.0, 168.0, np.nan], [168.0, 1 / 3600, 1 / 3600])
    assert got.tolist() == pytest.approx([168.0, 200.0, 1.2])
