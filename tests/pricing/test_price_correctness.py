"""Prices a budget owner can sign: a marketplace median never replaces a listing's own price (it confirms,
disputes or shows a range), an instance family's sizes scale with their GPUs, a spot price carries its own
observation date, one (provider, instance type) names one GPU identity, and the candidate pairs are built
without a Python loop per pair."""

from __future__ import annotations

import csv

import numpy as np
import pandas as pd
import pytest
from helpers.price_sheets import catalog, sheet

from pricing import crosscheck, loader, observations

VAST = {"provider": "vast", "region": "Germany, DE, EU", "instance_type": "2x-A100_SXM4-32-65536",
        "gpu_model": "A100", "gpu_count": 2.0, "vcpus": 32.0, "ram_gb": 64.0, "price_hour": 1.87}
MEDIAN = {"provider": "vast", "gpu_model": "A100", "gpu_count": "1", "tier": "marketplace-median",
          "price_unit": "gpu", "basis": "aggregate"}


@pytest.fixture(scope="module")
def bundled():
    df, _ = loader.load(include_cache=False)
    return df


def _row(df, provider, region, itype):
    hit = df[(df["provider"] == provider) & (df["region"] == region) & (df["instance_type"] == itype)]
    assert len(hit) == 1, (provider, region, itype)
    return hit.iloc[0]


def test_a_planted_median_never_replaces_the_listings_own_price_and_shows_the_range(tmp_path):
    obs = sheet(tmp_path, {**MEDIAN, "price_hour": "0.588", "observed_at": "2026-10-10", "sample_size": "50"},
                {**MEDIAN, "price_hour": "0.6685", "observed_at": "2026-09-29", "sample_size": "36"})
    out = crosscheck.apply(catalog(VAST), obs)
    r = out.iloc[0]
    assert r["price_hour"] == 1.87  # the listing's own price, not 2 x 0.588
    assert r["price_check"] == "disputed" and pd.isna(r["observed_at"])  # its own (absent) date, so it stays stale
    assert (r["market_low"], r["market_high"]) == pytest.approx((2 * 0.588, 2 * 0.6685))
    assert "market_disputed:1.176@2026-10-10" in r["notes"]
    assert "market_range:1.176-1.337@2026-09-29..2026-10-10" in r["notes"]


def test_a_median_that_agrees_confirms_and_dates_the_listing(tmp_path):
    obs = sheet(tmp_path, {**MEDIAN, "price_hour": "0.93", "observed_at": "2026-10-10", "sample_size": "4"})
    r = crosscheck.apply(catalog(VAST), obs).iloc[0]
    assert r["price_hour"] == 1.87 and r["price_check"] == "confirmed"
    assert str(r["observed_at"])[:10] == "2026-10-10"
    assert "market_thin:4 listings" in r["notes"]  # a thin market is said, not averaged


def test_a_listing_observation_still_replaces_the_catalog_price(tmp_path):
    obs = sheet(tmp_path, {**MEDIAN, "tier": "on-demand", "basis": "listing", "price_hour": "0.80",
                           "observed_at": "2026-10-10"})
    r = crosscheck.apply(catalog(VAST), obs).iloc[0]
    assert r["price_hour"] == pytest.approx(1.60) and "price_disputed:1.87" in r["notes"]


def test_a_median_row_cannot_claim_to_be_a_listing(tmp_path):
    path = tmp_path / "obs.csv"
    row = {**dict.fromkeys(observations.COLUMNS, ""), "provider": "vast", "gpu_model": "A100", "tier":
           "marketplace-median", "price_hour": "0.6", "price_unit": "gpu", "currency": "USD",
           "observed_at": "2026-10-10", "source": "https://example.com/x", "read_at": "2026-12-01",
           "basis": "listing"}
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, list(observations.COLUMNS))
        w.writeheader()
        w.writerow(row)
    _, problems = observations.read(path)
    assert [p.column for p in problems] == ["basis"]


def test_rows_written_before_the_basis_column_are_read_with_it_derived(tmp_path):
    path = tmp_path / "obs.csv"
    head = [c for c in observations.COLUMNS if c not in observations.TRAILING]
    with open(path, "w", newline="") as f:
        f.write(",".join(observations.COLUMNS) + "\n")
        w = csv.writer(f)
        w.writerow([{"provider": "vast", "gpu_model": "A100", "tier": "marketplace-median", "price_hour": "0.6",
                     "price_unit": "gpu", "currency": "USD", "observed_at": "2026-10-10",
                     "source": "https://example.com/x", "read_at": "2026-12-01"}.get(c, "") for c in head])
    obs, problems = observations.read(path)
    assert problems == [] and obs["basis"].tolist() == ["aggregate"]


def test_every_bundled_observation_is_classified_and_only_the_vast_medians_are_aggregates():
    with open(observations.SHEET, newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["basis"] for r in rows} == {"listing", "aggregate"}
    aggregates = [r for r in rows if r["basis"] == "aggregate"]
    assert {(r["provider"], r["tier"]) for r in aggregates} == {("vast", "marketplace-median")}
    assert all(r["sample_size"] for r in aggregates)


def test_every_vast_listing_keeps_its_catalog_price(bundled):
    # vast's only observations are aggregates (medians of other hosts' offers): no vast price may move
    snap = pd.read_csv(loader.SNAPSHOT)
    snap = snap[snap["provider"] == "vast"]
    vast = bundled[(bundled["provider"] == "vast") & (bundled["price_origin"] == "bundled")]
    name = vast["instance_type"].str.replace(r" \[.*\]$", "", regex=True)
    got = dict(zip(zip(vast["region"], name, vast["gpu_model"]), vast["price_hour"]))
    want = dict(zip(zip(snap["region"], snap["instance_type"], snap["gpu_model"]), snap["price_hour"]))
    assert len(want) == len(snap) and got == want
    a100 = _row(bundled, "vast", "Germany, DE, EU", "2x-A100_SXM4-32-65536 [A100]")
    assert a100["price_hour"] == 1.87 and a100["market_low"] < a100["market_high"]


def test_azure_two_gpu_sizes_are_priced_linearly_naming_the_family_rule(bundled):
    for itype, one, linear in (("Standard_NC48ads_A100_v4", "Standard_NC24ads_A100_v4", 7.346),
                               ("Standard_NC80adis_H100_v5", "Standard_NC40ads_H100_v5", 13.96)):
        r, base = _row(bundled, "azure", "eastus", itype), _row(bundled, "azure", "eastus", one)
        assert r["price_hour"] == pytest.approx(2 * base["price_hour"]) == pytest.approx(linear)
        assert f"family_rule:{crosscheck.family('azure', itype)} 2 x" in r["notes"]
        assert r["price_check"] == "disputed"


def test_family_names_join_isolated_azure_sizes_and_count_sizes_elsewhere():
    assert crosscheck.family("azure", "Standard_NC80adis_H100_v5") == crosscheck.family(
        "azure", "Standard_NC40ads_H100_v5")
    assert crosscheck.family("gcp", "a2-highgpu-2g") == crosscheck.family("gcp", "a2-highgpu-8g")


def test_a_larger_size_cheaper_per_gpu_is_a_volume_price_not_a_dispute():
    df = crosscheck.prepare(catalog(*({"provider": "lambda", "instance_type": f"gpu_{n}x_h100_sxm5",
                                       "gpu_count": float(n), "vcpus": 26.0 * n, "ram_gb": 225.0 * n,
                                       "price_hour": p} for n, p in ((1, 4.29), (8, 31.92)))))
    out = crosscheck.family_shape(df)
    assert out["price_hour"].tolist() == [4.29, 31.92]
    dearer = crosscheck.family_shape(df.assign(price_hour=[4.29, 40.0]))
    assert dearer["price_hour"].tolist() == [4.29, pytest.approx(34.32)]
    assert "family_disputed:40" in dearer["notes"].iloc[1]


def test_every_spot_price_carries_its_own_observation_date(bundled):
    nc24 = _row(bundled, "azure", "eastus", "Standard_NC24ads_A100_v4")
    assert nc24["observed_at"][:10] == "2026-11-09" and nc24["spot_observed_at"][:10] == "2026-10-10"
    p5 = _row(bundled, "aws", "us-west-2", "p5.48xlarge")  # spot from the catalog, observed by nobody
    assert p5["observed_at"][:10] == "2026-10-10" and p5["spot_observed_at"] is None
    a2 = _row(bundled, "gcp", "us-central1", "a2-highgpu-2g")
    assert a2["spot_observed_at"][:10] == "2026-07-30"  # the billing catalog's spot, not the on-demand Oct date
    priced = bundled["spot_price_hour"].notna()
    assert bundled.loc[~priced, "spot_observed_at"].isna().all()


def test_the_planner_offer_carries_the_spot_date():
    from advisor.planner.offers import _spot_observed

    off = pd.DataFrame({"spot_price_hour": [0.68, np.nan, 9.37],
                        "spot_observed_at": ["2026-10-10T00:00:00Z", None, None]})
    assert _spot_observed(off).tolist() == ["2026-10-10", "", "undated"]


def test_no_provider_instance_type_names_two_gpu_identities(bundled):
    identities = bundled.groupby(["provider", "instance_type"])[["gpu_model", "gpu_memory_gb"]].nunique()
    assert (identities.max(axis=1) == 1).all()
    split = bundled[bundled["notes"].fillna("").str.contains(loader.CONFLATED)]
    assert set(split["instance_type"]) >= {"1x-A100_SXM4-32-65536 [A100]", "1x-A100_SXM4-32-65536 [A100-80GB]"}


def _reference_pairs(df, obs, tiers):
    """Rule 1 written pair by pair, as the loop the vectorised candidates replaced."""
    catalog_rows = [(i, r) for i, r in enumerate(df.to_dict("records"))]
    o = obs[obs["tier"].isin(tiers)].reset_index(drop=True)
    products = {(r["provider"], r["instance_type"].lower()) for _, r in catalog_rows}
    out = set()
    for i, r in catalog_rows:
        billed = crosscheck.BILLED_AS.get((r["provider"], r["instance_type"].lower()), r["instance_type"].lower())
        for j, x in o.iterrows():
            pair = _reference_pair(r, x, billed, products)
            if pair is not None:
                out.add((i, j, *pair))
    return out


def _reference_pair(r, x, billed, products):
    """(spec, near) where observation `x` prices catalog row `r` under rule 1, else None."""
    if (x["provider"], x["gpu_model"]) != (r["provider"], r["gpu_model"]):
        return None
    region = x["region"].lower() if isinstance(x["region"], str) and x["region"] else None
    product = x["product"].lower() if isinstance(x["product"], str) and x["product"] else ""
    same = region is None or region == r["region"].lower()
    alike = any(region in g and r["region"].lower() in g
                for g in crosscheck.SAME_PRICE_REGIONS.get(r["provider"], ())) and not same
    spec = _reference_spec(r, x, product, billed, (x["provider"], product) in products)
    if (same or alike) and spec >= 0:
        return spec, 0 if same else 1
    return None


def _reference_spec(r, x, product, billed, names):
    """How specific the match is: 0 the billed product named, 1 a whole instance of the same GPU count, 2 a
    per-GPU price; -1 no match."""
    return (0 if names and product == billed else 1 if not names and x["price_unit"] == "instance"
            and x["gpu_count"] == r["gpu_count"] else 2 if not names and x["price_unit"] == "gpu" else -1)


def test_vectorised_pairs_match_the_rule_pair_by_pair_and_are_counted(tmp_path):
    obs = sheet(tmp_path,
                {"provider": "gcp", "product": "a3-highgpu-8g", "region": "us-central1", "observed_at": "2026-10-01"},
                {"provider": "gcp", "product": "a3-highgpu-8g", "region": "europe-west4", "observed_at": "2026-10-01"},
                {"provider": "gcp", "product": "", "region": "", "price_unit": "gpu", "gpu_count": "",
                 "price_hour": "11"},
                {"provider": "aws", "product": "", "region": "us-east-1"})
    df = catalog({"provider": "gcp", "region": "us-east1", "instance_type": "a3-edgegpu-8g"},
                 {"provider": "gcp", "region": "europe-west4", "instance_type": "A3-HIGHGPU-8G"},
                 {}, {"region": "eu-west-1"})
    before = crosscheck.PAIRS["built"]
    m = crosscheck.candidates(crosscheck.prepare(df), obs, ("on-demand",))
    got = set(zip(m["i"], m["j"], m["spec"], m["near"]))
    assert got == _reference_pairs(df, obs, ("on-demand",))
    assert crosscheck.PAIRS["built"] - before == 2 * 3 + 2 * 1  # gcp rows x gcp observations, aws x aws: one merge


def test_the_age_policy_ages_prices_past_the_limit_and_expires_them_at_one_and_a_half_limits():
    ages = [np.nan, 10, 60, 61, 90, 91]
    assert loader.stale_mask(ages, 60).tolist() == [True, False, False, True, True, True]
    assert loader.aged_mask(ages, 60).tolist() == [False, False, False, True, True, False]


def test_a_fresh_price_heads_the_plan_over_a_cheaper_aged_one():
    from advisor.planner.offers import fresh_first

    priced = pd.DataFrame({"stale": [True, False, True]})
    why, rule = {}, {}
    ranked = fresh_first(np.array([2, 0, 1]), priced, np.array([0, 1, 2]), why, rule)
    assert ranked.tolist() == [1, 2, 0] and rule == {1: "fresh price"}
    assert fresh_first(np.array([1, 0]), priced, np.array([0, 1, 2]), {}, {}).tolist() == [1, 0]


def test_past_the_limit_prices_rank_with_their_age_and_a_fresh_one_heads(monkeypatch, tmp_path):
    import json

    from click.testing import CliRunner

    from cli import cli

    # 2026-12-15: the 2026-10-09/10 observations behind most top rows are 66 days old, past the 60-day limit
    monkeypatch.setenv("GPU_ADVISOR_TODAY", "2026-12-15")
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    res = CliRunner().invoke(cli, ["plan", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "100M", "--format",
                                   "json"])
    assert res.exit_code == 0, res.output
    top = [c["offer"] for c in json.loads(res.stdout)["candidates"][:10]]
    assert not top[0]["stale"] and top[0]["price_date"] >= "2026-10-16"  # a fresh price heads
    aged = [o for o in top if o["stale"]]
    assert aged, "prices past the limit still rank"
    assert all("price_age:" in o["notes"] and o["price_date"][:4] == "2026" for o in aged)
