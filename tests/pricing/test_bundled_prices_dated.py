"""The bundled prices, checked against the bundled dated observation sheet: every catalog row a
dated observation speaks for is within the tolerance of it or disputed (and then priced at it), rows nobody
observed stay undated and stale, vast rows carry their host size, and more than 16 providers are priced."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from pricing import crosscheck, observations

TODAY = "2026-12-01"  # the day the observation sheet was last checked (OBSERVATIONS.md)


@pytest.fixture(scope="module")
def loaded():
    import os

    from pricing.loader import load

    old = {k: os.environ.get(k) for k in ("GPU_ADVISOR_TODAY", "GPU_ADVISOR_OBSERVATIONS",
                                          "GPU_ADVISOR_OBSERVATION_TOLERANCE", "GPU_ADVISOR_STALE_DAYS")}
    os.environ["GPU_ADVISOR_TODAY"] = TODAY
    for k in list(old)[1:]:
        os.environ.pop(k, None)
    try:
        df, problems = load(include_cache=False)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return df, problems


@pytest.fixture(scope="module")
def offers(loaded):
    return loaded[0]


@pytest.fixture(scope="module")
def left_out(loaded):
    """{(provider, region, instance_type)} of the catalog rows rule 6 disputed with no price left: listed, priced n/a."""
    df, problems = loaded
    assert problems == []
    gone = df[df.price_hour.isna() & df.spot_price_hour.isna()]
    assert (gone.price_check == "disputed").all() and gone.notes.str.contains("below_every_region").all()
    return set(zip(gone.provider, gone.region, gone.instance_type))


@pytest.fixture(scope="module")
def sheet():
    obs, problems = observations.read()
    assert problems == []
    return obs


def newest(sheet, provider, product, region, tier):
    """The newest observation naming this product (or the one it is billed as) in this region (or in every
    region), else in a region the provider prices alike; or None."""
    product = crosscheck.BILLED_AS.get((provider, product.lower()), product.lower())
    o = sheet[(sheet.provider == provider) & (sheet["product"].str.lower() == product) & (sheet.tier == tier)]
    alike = {r for g in crosscheck.SAME_PRICE_REGIONS.get(provider, ()) if region in g for r in g}
    for here in (o[o.region.isna() | (o.region == region)], o[o.region.isin(alike)]):
        if len(here):
            return here.sort_values(["observed_at", "row"], ascending=[False, True]).iloc[0]
    return None


def cheapest_region(sheet, provider, product):
    """The cheapest per-GPU price among each region's newest on-demand observation of the product (rule 6)."""
    product = crosscheck.BILLED_AS.get((provider, product.lower()), product.lower())
    o = sheet[(sheet.provider == provider) & (sheet["product"].str.lower() == product) & (sheet.tier == "on-demand")
              & sheet.region.notna()].sort_values(["observed_at", "row"], ascending=[False, True])
    return o.drop_duplicates("region").per_gpu.min()


def judged(rows, sheet, tier: str):
    """For each row: (row, the observation the rule must use or None), judged independently of the code."""
    for r in rows.itertuples():
        yield r, newest(sheet, r.provider, r.instance_type, r.region, tier)


def assert_rule(r, ob, price: str, old: str, status: str, at: str):
    catalog = getattr(r, old) if getattr(r, status) == "disputed" else getattr(r, price)
    gap = abs(catalog / r.gpu_count / ob.per_gpu - 1)
    if gap <= crosscheck.TOLERANCE + 1e-9:
        assert getattr(r, status) == "confirmed" and getattr(r, price) == catalog, r
    else:
        assert getattr(r, status) == "disputed" and getattr(r, price) == pytest.approx(ob.per_gpu * r.gpu_count), r
    assert getattr(r, at) == ob.observed_at.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_every_gcp_a3_h100_row_is_within_tolerance_of_a_dated_observation_or_disputed(offers, sheet, left_out):
    catalog = pd.read_csv(observations.SHEET.parent / "snapshot.csv")
    a3 = catalog[(catalog.provider == "gcp") & catalog.instance_type.str.match(r"a3-(high|mega|edge)gpu-")]
    assert len(a3) == 91
    statuses = []
    for c in a3.itertuples():
        ob = newest(sheet, "gcp", c.instance_type, c.region, "on-demand")
        [r] = offers[(offers.provider == "gcp") & (offers.region == c.region)
                     & (offers.instance_type == c.instance_type)].itertuples()
        if (c.provider, c.region, c.instance_type) in left_out:  # rule 6: below every region's list price
            assert ob is None and c.price_hour / c.gpu_count < cheapest_region(sheet, "gcp", c.instance_type) * 0.95
            assert (r.price_check, r.catalog_price_hour) == ("disputed", c.price_hour)
            statuses.append("disputed")
            continue
        assert ob is not None, r  # every one is dated now: the billing catalog per region, GCP's page for us-central1
        assert_rule(r, ob, "price_hour", "catalog_price_hour", "price_check", "checked_at")
        statuses.append(r.price_check)
    assert set(statuses) == {"confirmed", "disputed"} and statuses.count("disputed") >= 40
    low = offers[offers.catalog_price_hour.notna() & offers.price_hour.notna()
                 & offers.instance_type.isin(a3.instance_type) & (offers.provider == "gcp")]
    assert len(low) and (low.catalog_price_hour / low.price_hour < 0.6).all()  # the half-price band (DWS SKU)
    [h8] = offers[(offers.provider == "gcp") & (offers.region == "us-central1")
                  & (offers.instance_type == "a3-highgpu-8g")].itertuples()
    assert (h8.price_hour, h8.catalog_price_hour, h8.observed_at) == (88.49, 43.0662, "2026-10-10T00:00:00Z")
    [edge] = offers[(offers.provider == "gcp") & (offers.region == "asia-northeast3")
                    & (offers.instance_type == "a3-edgegpu-8g")].itertuples()  # billed as a3-highgpu-8g there
    assert (edge.price_check, edge.observed_at[:10]) == ("confirmed", "2026-08-20")


def test_the_regions_gcp_prices_alike_are_priced_alike_in_the_sheet(sheet):
    [group] = crosscheck.SAME_PRICE_REGIONS["gcp"]
    seen = sheet[(sheet.provider == "gcp") & sheet.region.isin(group)]
    pairs = 0
    for _, same in seen.groupby(["source", "observed_at", "product", "tier"]):
        if same.region.nunique() > 1:
            pairs += 1
            assert same.per_gpu.max() / same.per_gpu.min() - 1 < 1e-6, same
    assert pairs >= 8  # a3-highgpu-1g/2g/4g/8g on-demand and spot in us-central1 and us-west1


def test_every_p5en_spot_row_a_dated_observation_speaks_for_is_within_tolerance_or_disputed(offers, sheet):
    p5en = offers[(offers.instance_type == "p5en.48xlarge") & offers.spot_check.notna()]
    assert len(p5en) == 10
    for r, ob in judged(p5en, sheet, "spot"):
        assert ob is not None, r  # every region: dstack's offers and AWS's spot feed, August 2026
        assert_rule(r, ob, "spot_price_hour", "catalog_spot_price_hour", "spot_check", "spot_checked_at")
    assert set(p5en.spot_check) == {"confirmed", "disputed"}  # ap-south-1 20.21 vs 21.14 in the catalog: 4.6 %
    [east] = p5en[p5en.region == "us-east-1"].itertuples()
    assert east.spot_check == "disputed" and east.catalog_spot_price_hour == 14.8209 and east.spot_price_hour > 26.6


@pytest.mark.parametrize("provider, region, itype, price, status, day", [
    ("aws", "us-east-1", "p5.48xlarge", 55.04, "confirmed", "2026-11-09"),
    ("aws", "us-east-1", "p5en.48xlarge", 63.296, "confirmed", "2026-10-10"),
    ("lambda", "us-east-1", "gpu_8x_h100_sxm5", 31.92, "confirmed", "2026-10-10"),
    ("azure", "eastus", "Standard_ND96isr_H100_v5", 98.32, "confirmed", "2026-11-09"),
    ("oci", "eu-amsterdam-1", "BM.GPU.H100.8", 80.0, "confirmed", "2026-10-10"),
    ("runpod", "CA", "8x_H100-SXM_SECURE", 31.92, "disputed", "2026-11-09"),  # 3.29 -> 3.99 per GPU
    ("nebius", "eu-north1", "gpu-h100-sxm_1gpu-16vcpu-200gb", 3.85, "disputed", "2026-09-25"),
])
def test_issue_31s_examples_are_confirmed_or_disputed_at_their_dated_price(offers, provider, region, itype, price,
                                                                           status, day):
    [r] = offers[(offers.provider == provider) & (offers.instance_type == itype) & (offers.region == region)].itertuples()
    assert (r.price_hour, r.price_check, r.observed_at[:10]) == (pytest.approx(price), status, day)
    assert r.checked_by.startswith(("github:", "https://"))


def test_vast_h100_marketplace_rows_are_disputed_by_the_dated_median_and_keep_their_own_price(offers):
    # Changed with the aggregate rule (pricing/crosscheck.py): the median of other hosts' offers used to replace each
    # listing's price; it is a statistic over other listings, so it only disputes it and shows the market's range.
    vast = offers[(offers.provider == "vast") & (offers.gpu_model == "H100")]
    assert len(vast) and (vast.price_check == "disputed").all()
    assert (vast.price_hour == vast.catalog_price_hour).all()  # the listing's own $1.80 per GPU-hour stays
    assert (vast.price_hour < vast.market_low).all() and vast.notes.str.contains("market_disputed:").all()
    assert vast.observed_at.isna().all()  # undated, so stale: an aggregate dates only a listing it agrees with


def test_every_vast_row_has_vcpus_and_ram_from_the_catalog(offers):
    snapshot = pd.read_csv(observations.SHEET.parent / "snapshot.csv")
    vast = snapshot[snapshot.provider == "vast"]
    assert len(vast) == 55 and vast.vcpus.notna().all() and vast.ram_gb.notna().all()
    assert ((vast.vcpus == 32) & (vast.ram_gb == 64)).all()  # the type name's `-32-65536`: 32 cores, 65,536 MB


def test_the_snapshot_is_what_the_build_script_writes_from_the_catalog_extracts(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "snapshot.csv"
    done = subprocess.run([sys.executable, str(root / "scripts" / "build_snapshot.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == (root / "pricing" / "data" / "snapshot.csv").read_bytes()


def test_the_bundled_data_prices_at_least_16_providers(offers):
    priced = offers[offers.price_hour.notna() | offers.spot_price_hour.notna()]
    assert priced.provider.nunique() >= 16
    added = set(priced[priced.price_check == "observation"].provider) - {"aws", "azure", "gcp", "runpod", "vast"}
    assert {"digitalocean", "scaleway", "verda", "crusoe", "civo", "together"} <= added


def test_no_bundled_row_is_dated_in_the_future_or_without_a_source(offers):
    dated = offers[offers.observed_at.notna()]
    assert (dated.observed_at <= "2026-12-02").all()
    checked = offers[offers.price_check.isin(["confirmed", "disputed", "observation"])]
    assert checked.checked_by.notna().all() and checked.checked_at.notna().all()


def test_the_default_8b_plan_heads_with_a_dated_price_and_no_undated_row_in_its_top_ten(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from cli import cli

    monkeypatch.setenv("GPU_ADVISOR_TODAY", TODAY)
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    res = CliRunner().invoke(cli, ["plan", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "100M", "--format", "json"])
    assert res.exit_code == 0, res.output
    top = [c["offer"] for c in json.loads(res.stdout)["candidates"][:10]]
    # #1 used to be vast 2x-A100 priced at a marketplace median ($1.18 for a $1.87 listing); now no row's price is
    # an aggregate's (pricing/crosscheck.py, aggregate rule): a dated #1 keeps its own price
    assert top[0]["price_date"] >= "2026-09-01" and "market_disputed" not in top[0]["notes"]
    # since the age policy (pricing.loader.aged_mask) a dated price past the 60-day limit may rank below a fresh #1
    # with its age in its notes; an undated one may not, and #1 is fresh (within 60 days of 2026-12-01)
    assert not any(o["price_date"] == "date unknown" for o in top) and top[0]["price_date"] >= "2026-10-02"
    assert all("price_age:" in o["notes"] for o in top if o["stale"])
