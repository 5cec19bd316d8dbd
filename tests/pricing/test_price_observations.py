"""The cross-check rule (pricing.crosscheck) on small sheets: a catalog price that agrees with
the newest dated observation is confirmed and takes its date; one that does not is replaced by the dated
price and keeps its own beside it; nothing observed stays undated; a user's own sheet is never touched."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers.price_sheets import OBS, catalog, sheet

from pricing import crosscheck, observed_offers
from pricing.settings import SettingError


def check(tmp_path, rows, obs_rows, tol=None):
    return crosscheck.apply(catalog(*rows), sheet(tmp_path, *obs_rows), tol=tol)


def test_a_catalog_price_that_agrees_is_confirmed_and_takes_the_observation_date_and_source(tmp_path):
    [r] = check(tmp_path, [{}], [{"product": "p5.48xlarge", "region": "us-east-1"}]).itertuples()
    assert (r.price_check, r.price_hour, r.source) == ("confirmed", 55.04, "catalog")  # its own source kept
    assert r.checked_by == OBS["source"] and str(r.checked_at.date()) == str(r.observed_at.date()) == "2026-10-01"


def test_a_catalog_price_that_disagrees_is_replaced_by_the_dated_price_and_kept_beside_it(tmp_path):
    [r] = check(tmp_path, [{"provider": "runpod", "instance_type": "8x_H100-SXM_SECURE", "price_hour": 26.32}],
                [{"provider": "runpod", "gpu_count": "", "price_unit": "gpu", "price_hour": "3.99"}]).itertuples()
    assert r.price_check == "disputed" and r.price_hour == pytest.approx(31.92)  # per GPU x 8
    assert r.catalog_price_hour == 26.32 and "price_disputed:26.32" in r.notes
    assert (r.source, r.catalog_source) == (OBS["source"], "catalog")  # the price's source is the observation's
    assert str(r.observed_at.date()) == "2026-10-01"


def test_a_row_nobody_observed_stays_undated(tmp_path):
    [r] = check(tmp_path, [{"gpu_model": "A100", "instance_type": "p4d.24xlarge", "price_hour": 21.96}],
                [{}]).itertuples()
    assert (r.price_check, r.price_hour, r.checked_by) == ("undated", 21.96, None) and pd.isna(r.observed_at)


@pytest.mark.parametrize("per_gpu, status", [(10.5, "confirmed"), (9.5, "confirmed"),  # exactly 5 % off
                                             (10.51, "disputed"), (9.49, "disputed")])
def test_the_tolerance_is_5_percent_of_the_observed_per_gpu_price_on_both_sides(tmp_path, per_gpu, status):
    [r] = check(tmp_path, [{"price_hour": per_gpu * 8}], [{"price_hour": "80"}]).itertuples()
    assert crosscheck.TOLERANCE == 0.05 and r.price_check == status


def test_the_tolerance_comes_from_one_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_OBSERVATION_TOLERANCE", "0.2")
    assert crosscheck.tolerance() == 0.2
    [r] = check(tmp_path, [{"price_hour": 11.9 * 8}], [{"price_hour": "80"}]).itertuples()
    assert r.price_check == "confirmed"
    for bad in ("abc", "nan", "-1", "inf", "11"):  # not a fraction from 0 to 10: refused, naming the variable
        monkeypatch.setenv("GPU_ADVISOR_OBSERVATION_TOLERANCE", bad)
        with pytest.raises(SettingError, match="GPU_ADVISOR_OBSERVATION_TOLERANCE: expected a number >= 0"):
            crosscheck.tolerance()


def test_an_observation_with_a_region_speaks_for_that_region_only_and_one_without_for_all(tmp_path):
    rows = [{"region": "us-east-1", "price_hour": 50.0}, {"region": "ap-northeast-1", "price_hour": 60.0}]
    east, tokyo = check(tmp_path, rows, [{"region": "us-east-1"}]).itertuples()
    assert (east.price_check, tokyo.price_check) == ("disputed", "undated")
    east, tokyo = check(tmp_path, rows, [{}]).itertuples()
    assert (east.price_check, tokyo.price_check) == ("disputed", "disputed")


GCP = {"provider": "gcp", "instance_type": "a3-highgpu-8g", "vcpus": 208.0, "ram_gb": 1872.0}
A3 = {"provider": "gcp", "product": "a3-highgpu-8g", "region": "us-central1", "price_hour": "88.49"}


def test_an_instance_billed_as_another_is_judged_by_that_ones_observations(tmp_path):
    rows = [{**GCP, "region": "us-central1", "instance_type": "a3-edgegpu-8g", "price_hour": 43.07},
            {**GCP, "region": "us-central1", "instance_type": "a3-megagpu-8g", "price_hour": 92.21},
            {**GCP, "region": "us-east4", "price_hour": 88.56}]  # the catalog lists a3-highgpu-8g: a named product
    edge, mega, _ = check(tmp_path, rows, [A3]).itertuples()
    assert crosscheck.BILLED_AS[("gcp", "a3-edgegpu-8g")] == "a3-highgpu-8g"
    assert (edge.price_check, edge.price_hour, edge.catalog_price_hour) == ("disputed", 88.49, 43.07)
    assert mega.price_check == "undated"  # billed on other SKUs: nobody observed it


def test_a_region_priced_alike_speaks_only_where_the_region_has_no_observation_of_its_own(tmp_path):
    rows = [{**GCP, "region": "us-west1", "price_hour": 88.0}, {**GCP, "region": "us-east5", "price_hour": 99.0}]
    west, east5 = check(tmp_path, rows, [A3]).itertuples()
    assert (west.price_check, west.checked_by) == ("confirmed", OBS["source"])  # us-central1 prices us-west1 alike
    assert east5.price_check == "undated"  # not in a same-price group, and above every observed region
    own = {**A3, "region": "us-west1", "price_hour": "70", "observed_at": "2026-08-01", "source": "https://example.com/own"}
    [west] = check(tmp_path, rows[:1], [A3, own]).itertuples()  # its own region's older price beats the group's
    assert (west.price_check, west.price_hour, west.checked_by) == ("disputed", 70.0, "https://example.com/own")


def test_a_list_price_below_every_observed_regions_is_disputed_and_left_out(tmp_path):
    dear = {**A3, "region": "europe-west4", "price_hour": "112.54", "observed_at": "2026-08-20"}
    east = {**A3, "region": "us-east4", "price_hour": "88.56", "observed_at": "2026-08-20"}
    rows = [{**GCP, "region": "asia-east1", "price_hour": 44.56},  # half GCP's cheapest region: the DWS band
            {**GCP, "region": "asia-east2", "price_hour": 84.10},  # within 5 % of the cheapest: not disputed
            {**GCP, "region": "asia-south1", "price_hour": np.nan, "spot_price_hour": 20.0}]  # spot is never floored
    assert crosscheck.FLOOR_REGIONS == 3
    df = crosscheck.apply(catalog(*rows), sheet(tmp_path, A3, dear))  # two regions: too few to judge
    assert list(df.price_check[:2]) == ["undated"] * 2 and df.spot_check[2] == "undated"
    far, near, spot = crosscheck.apply(catalog(*rows), sheet(tmp_path, A3, dear, east)).itertuples()
    assert (far.price_check, far.catalog_price_hour, far.checked_by) == ("disputed", 44.56, OBS["source"])
    assert np.isnan(far.price_hour) and np.isnan(far.spot_price_hour)  # listed, priced n/a: plans leave it out
    assert (near.region, near.price_check, near.price_hour) == ("asia-east2", "undated", 84.10)
    assert (spot.spot_check, spot.spot_price_hour) == ("undated", 20.0)
    both = catalog({**rows[0], "spot_price_hour": 30.0})  # a spot price left: the row stays, on-demand cleared
    [r] = crosscheck.apply(both, sheet(tmp_path, A3, dear, east)).itertuples()
    assert (r.price_check, r.catalog_price_hour, r.spot_price_hour) == ("disputed", 44.56, 30.0) and np.isnan(r.price_hour)
    assert "below_every_region:88.49@us-central1" in r.notes and r.checked_by == OBS["source"]


def test_products_counts_and_per_gpu_prices_match_as_the_rule_says(tmp_path):
    rows = [{"instance_type": "p5.48xlarge"}, {"instance_type": "p5.4xlarge", "gpu_count": 1.0, "price_hour": 6.88}]
    # a catalog product name: that instance type only
    big, small = check(tmp_path, rows, [{"product": "p5.48xlarge"}]).itertuples()
    assert (big.price_check, small.price_check) == ("confirmed", "undated")
    # no catalog product: the same GPU count for an instance price ...
    big, small = check(tmp_path, rows, [{"product": "8x H100 box"}]).itertuples()
    assert (big.price_check, small.price_check) == ("confirmed", "undated")
    # ... and every count for a per-GPU price, compared per GPU-hour
    big, small = check(tmp_path, rows, [{"price_unit": "gpu", "price_hour": "6.88", "gpu_count": ""}]).itertuples()
    assert (big.price_check, small.price_check) == ("confirmed", "confirmed")


@pytest.mark.parametrize("order", [1, -1])
def test_the_newest_observation_wins_whatever_the_sheet_order(tmp_path, order):
    old, new = {"observed_at": "2026-08-01", "price_hour": "70"}, {"observed_at": "2026-10-01", "price_hour": "55.04"}
    [r] = check(tmp_path, [{}], [old, new][::order]).itertuples()
    assert r.price_check == "confirmed" and str(r.checked_at.date()) == "2026-10-01"


def test_equally_new_observations_prefer_the_one_naming_the_instance(tmp_path):
    generic = {"price_unit": "gpu", "gpu_count": "", "price_hour": "9"}  # per GPU: would dispute
    named = {"product": "p5.48xlarge", "source": "https://example.com/p5"}
    [r] = check(tmp_path, [{}], [generic, named]).itertuples()
    assert r.price_check == "confirmed" and r.checked_by == "https://example.com/p5"


def test_a_row_with_its_own_newer_date_is_not_overridden(tmp_path):
    rows = [{"observed_at": "2026-11-30", "price_hour": 40.0, "price_origin": "cache:aws"},
            {"observed_at": "2026-11-30", "price_hour": 55.0, "price_origin": "cache:aws", "region": "us-west-2"}]
    moved, same = check(tmp_path, rows, [{}]).itertuples()
    assert (moved.price_check, moved.price_hour) == ("dated", 40.0) and "observation_older:55.04@2026-10-01" in moved.notes
    assert same.price_check == "confirmed" and str(same.observed_at.date()) == "2026-11-30"  # newest dated wins


def test_spot_prices_are_checked_against_spot_observations_only(tmp_path):
    rows = [{"spot_price_hour": 14.82}, {"region": "us-west-2", "price_hour": np.nan, "spot_price_hour": 17.8}]
    spot = {"tier": "spot", "price_hour": "27.2"}
    both, only_spot = check(tmp_path, rows, [spot]).itertuples()
    assert both.spot_check == "disputed" and both.spot_price_hour == 27.2 and both.catalog_spot_price_hour == 14.82
    assert both.price_check == "undated" and pd.isna(both.observed_at)  # the date follows the on-demand price
    assert "spot_disputed:14.82" in both.notes and both.source == "catalog"
    assert only_spot.spot_check == "disputed" and str(only_spot.observed_at.date()) == "2026-10-01"


def test_a_disputed_price_no_dated_price_can_replace_is_cleared_and_kept_beside(tmp_path):
    obs = sheet(tmp_path, {"price_hour": "80"}).assign(observed_at=pd.NaT)  # the reader refuses such rows
    [r] = crosscheck.apply(catalog({}), obs).itertuples()
    assert (r.price_check, r.catalog_price_hour) == ("disputed", 55.04) and np.isnan(r.price_hour)


def test_observations_the_catalog_lacks_become_offers_with_unknown_hosts_said(tmp_path):
    obs = sheet(tmp_path, {"provider": "acme", "product": "H100 SXM", "price_unit": "gpu", "price_hour": "2.5",
                           "gpu_count": ""},
                {"provider": "acme", "product": "H100 SXM", "tier": "community", "price_unit": "gpu", "price_hour": "2",
                 "gpu_count": "", "vcpus": "16", "ram_gb": "128"},
                {"provider": "acme", "product": "H100 SXM", "tier": "reserved-1y", "price_unit": "gpu",
                 "price_hour": "1.5", "gpu_count": ""},
                {"product": "p5.48xlarge"})  # answers to a catalog row: not an offer
    df = crosscheck.apply(catalog({}), obs)
    new, problems = observed_offers.offers(df, obs)
    assert problems == [] and sorted(new["instance_type"]) == ["H100 SXM", "H100 SXM [community]"]
    listed, community = new.sort_values("instance_type").itertuples()
    assert (listed.region, listed.gpu_count, listed.price_hour, listed.price_check) == ("unknown", 1, 2.5, "observation")
    assert np.isnan(listed.vcpus) and np.isnan(listed.ram_gb) and observed_offers.HOST_UNKNOWN in listed.notes
    assert (community.vcpus, community.ram_gb) == (16, 128) and "marketplace" in community.notes


def test_a_users_own_sheet_is_never_overridden(tmp_path, monkeypatch):
    from pricing.loader import load

    monkeypatch.setenv("GPU_ADVISOR_OBSERVATIONS", str(tmp_path / "obs.csv"))
    sheet(tmp_path, {"product": "p5.48xlarge", "region": "us-east-1", "price_hour": "80"})
    mine = tmp_path / "mine.csv"
    mine.write_text("provider,region,instance_type,gpu_model,gpu_count,price_hour\n"
                    "aws,us-east-1,p5.48xlarge,H100,8,30\n")
    df, _ = load([mine], include_cache=False)
    [r] = df[(df.instance_type == "p5.48xlarge") & (df.region == "us-east-1")].itertuples()
    assert (r.price_hour, r.price_origin, r.price_check) == (30.0, "user", "user")


def test_the_loader_applies_the_rule_for_every_consumer(tmp_path, monkeypatch):
    from pricing.loader import load

    monkeypatch.setenv("GPU_ADVISOR_OBSERVATIONS", str(tmp_path / "obs.csv"))
    monkeypatch.setenv("GPU_ADVISOR_TODAY", "2026-12-01")
    sheet(tmp_path, {"product": "p5.48xlarge", "region": "us-east-1", "observed_at": "2026-11-01"})
    df, problems = load(include_cache=False)
    [r] = df[(df.instance_type == "p5.48xlarge") & (df.region == "us-east-1")].itertuples()
    assert (r.price_check, r.observed_at, r.checked_at, r.age_days, r.stale) == (
        "confirmed", "2026-11-01T00:00:00Z", "2026-11-01T00:00:00Z", 30.0, False)
    assert not any("obs.csv" in str(p) for p in problems)
