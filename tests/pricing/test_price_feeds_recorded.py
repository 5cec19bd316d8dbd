"""The keyless public price feeds, each replayed from a recorded response (tests/data/recorded/, with its
PROVENANCE.md) by a local HTTP server: AWS's offer file plus its spot feed, and vast.ai's offer search
without a key. Nothing here reaches the internet."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from pricing import cache
from pricing.refresh import refresh
from pricing.sources import aws

REC = Path(__file__).parents[1] / "data" / "recorded"
OFFER_PATH = "/offers/v1.0/aws/AmazonEC2/current/ap-northeast-1/index.csv"


@pytest.fixture(autouse=True)
def fast_env(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GPU_ADVISOR_HTTP_BACKOFF", "0.01")
    monkeypatch.setenv("GPU_ADVISOR_HTTP_RETRIES", "1")
    for k in ("LAMBDA_API_KEY", "RUNPOD_API_KEY", "VAST_API_KEY"):
        monkeypatch.delenv(k, raising=False)


def serve_offer_file(httpserver):
    httpserver.expect_request(OFFER_PATH).respond_with_data((REC / "aws_offer_ap-northeast-1.csv").read_text(),
                                                            content_type="text/csv")


def test_aws_spot_feed_fills_the_spot_price_of_the_offer_files_rows(httpserver):
    serve_offer_file(httpserver)
    httpserver.expect_request("/spot.json").respond_with_data((REC / "aws_spot.json").read_text(),
                                                              content_type="application/json")
    df, problems = aws.fetch(httpserver.url_for("/"), ["ap-northeast-1"],
                             spot_url=httpserver.url_for("/spot.json"))
    row = df.set_index("instance_type").loc["p5en.48xlarge"]
    assert (row["price_hour"], row["spot_price_hour"]) == (79.12, 44.5213)
    assert row["fetched_at"] == "2026-11-28T21:14:03Z"  # the on-demand price keeps the offer file's date
    assert str(row["notes"]).startswith("spot_feed:") and "aws-spot-feed:" in row["source"]
    assert problems == []


def test_the_jsonp_wrapper_of_the_public_spot_feed_is_read_too(httpserver):
    serve_offer_file(httpserver)
    body = "callback(" + (REC / "aws_spot.json").read_text().strip() + ");"
    httpserver.expect_request("/spot.js").respond_with_data(body, content_type="text/javascript")
    df, _ = aws.fetch(httpserver.url_for("/"), ["ap-northeast-1"], spot_url=httpserver.url_for("/spot.js"))
    assert df.set_index("instance_type").loc["p5en.48xlarge", "spot_price_hour"] == 44.5213


def test_a_spot_price_above_on_demand_is_refused_not_kept(httpserver):
    serve_offer_file(httpserver)
    feed = json.loads((REC / "aws_spot.json").read_text())
    gpu = feed["config"]["regions"][0]["instanceTypes"][1]["sizes"][1]
    assert gpu["size"] == "p5en.48xlarge"
    gpu["valueColumns"][0]["prices"]["USD"] = "99.5"  # planted: above the 79.12 on-demand price
    httpserver.expect_request("/spot.json").respond_with_json(feed)
    df, problems = aws.fetch(httpserver.url_for("/"), ["ap-northeast-1"], spot_url=httpserver.url_for("/spot.json"))
    assert pd.isna(df.set_index("instance_type").loc["p5en.48xlarge", "spot_price_hour"])
    assert [p.column for p in problems] == ["spot_price_hour"] and "above on-demand" in problems[0].message


def test_a_spot_feed_that_fails_keeps_the_on_demand_rows_and_says_why(httpserver):
    serve_offer_file(httpserver)
    httpserver.expect_request("/spot.json").respond_with_data("<html>gone</html>", status=404)
    df, problems = aws.fetch(httpserver.url_for("/"), ["ap-northeast-1"], spot_url=httpserver.url_for("/spot.json"))
    assert df.set_index("instance_type").loc["p5en.48xlarge", "price_hour"] == 79.12
    assert len(problems) == 1 and "spot feed not read" in problems[0].message and "404" in problems[0].message


def test_a_replaced_aws_endpoint_is_not_asked_for_the_spot_feed(httpserver):
    serve_offer_file(httpserver)
    [out] = refresh(["aws"], ["ap-northeast-1"], endpoint=httpserver.url_for("/"))
    assert out.status == "ok" and out.skipped_rows == 0
    assert [r.path for r, _ in httpserver.log] == [OFFER_PATH]


def test_vast_offers_are_fetched_without_a_key_and_no_authorization_is_sent(httpserver):
    httpserver.expect_request("/api/v0/bundles/").respond_with_data((REC / "vast_bundles.json").read_text(),
                                                                    content_type="application/json")
    [out] = refresh(["vast"], endpoint=httpserver.url_for("/api/v0"))
    assert out.status == "ok", out.message
    assert out.skipped_rows == 1  # the GTX 1080 is not in our GPU table: reported, not kept
    [(request, _)] = httpserver.log
    assert "Authorization" not in request.headers
    df = pd.read_csv(cache.sheet_path("vast")).set_index("instance_type")
    assert df.loc["8x-H100", "price_hour"] == pytest.approx((15.12 + 16.31) / 2)  # median of the two offers
    assert df.loc["1x-RTX4090", "region"] == "Quebec, CA"


def test_vast_sends_the_key_when_one_is_set(httpserver, monkeypatch):
    monkeypatch.setenv("VAST_API_KEY", "vast-secret")
    httpserver.expect_request("/api/v0/bundles/", headers={"Authorization": "Bearer vast-secret"}).respond_with_data(
        (REC / "vast_bundles.json").read_text(), content_type="application/json")
    [out] = refresh(["vast"], endpoint=httpserver.url_for("/api/v0"))
    assert out.status == "ok", out.message
    assert "vast-secret" not in cache.sheet_path("vast").read_text()


def serve_vultr(httpserver):
    httpserver.expect_request("/v2/plans-metal", query_string="per_page=500").respond_with_data(
        (REC / "vultr_plans_metal.json").read_text(), content_type="application/json")
    httpserver.expect_request("/v2/plans", query_string="type=all&per_page=500").respond_with_data(
        (REC / "vultr_plans.json").read_text(), content_type="application/json")


def test_vultr_gpu_plans_become_one_row_per_location_without_a_key(httpserver):
    serve_vultr(httpserver)
    [out] = refresh(["vultr"], endpoint=httpserver.url_for("/v2"))
    assert out.status == "ok", out.message
    assert out.skipped_rows == 1  # the A16 plan: a GPU our table does not list, reported
    assert all("Authorization" not in r.headers for r, _ in httpserver.log)
    df = pd.read_csv(cache.sheet_path("vultr"))
    mi = df[df.instance_type == "vbm-256c-2048gb-8-mi300x-gpu"]
    assert sorted(mi.region) == ["ewr", "lax"] and set(mi.gpu_model) == {"MI300X"}
    assert (mi.price_hour / mi.gpu_count).round(4).tolist() == [1.85, 1.85] and set(mi.vcpus) == {256}
    assert df[df.instance_type == "vbm-112c-2048gb-8-h100-gpu"].region.tolist() == ["sea"]  # "" is no location
    a100 = df.set_index("instance_type").loc["vcg-a100-12c-120g-80vram"]
    assert (a100.gpu_model, a100.gpu_count, a100.ram_gb) == ("A100-80GB", 1, 120)
    assert df.set_index("instance_type").loc["vcg-a100-1c-6g-4vram", "gpu_count"] == 0.05  # a vGPU slice
    kept = set(df.instance_type)
    assert not kept & {"vbm-4c-32gb", "vc2-1c-1gb", "vc2-1c-0.5gb-free", "vcg-l40s-16c-180g-48vram"}


def test_a_vultr_list_without_its_field_is_a_failed_fetch_that_keeps_the_cache(httpserver):
    serve_vultr(httpserver)
    assert refresh(["vultr"], endpoint=httpserver.url_for("/v2"))[0].status == "ok"
    before = cache.sheet_path("vultr").read_bytes()
    httpserver.clear()
    httpserver.expect_request("/v2/plans-metal").respond_with_json({"error": "rate limited"})
    [out] = refresh(["vultr"], endpoint=httpserver.url_for("/v2"))
    assert out.status == "failed" and "plans_metal" in out.message and "kept the last good sheet" in out.message
    assert cache.sheet_path("vultr").read_bytes() == before


@pytest.mark.parametrize("body", ["<!doctype html><html>maintenance</html>", "{\"vers\": 0.01}", "callback(not json);"])
def test_a_spot_feed_that_is_not_the_feed_is_one_problem_and_the_on_demand_rows_stay(httpserver, body):
    serve_offer_file(httpserver)
    httpserver.expect_request("/spot.json").respond_with_data(body)
    df, problems = aws.fetch(httpserver.url_for("/"), ["ap-northeast-1"], spot_url=httpserver.url_for("/spot.json"))
    assert df.set_index("instance_type").loc["p5en.48xlarge", "price_hour"] == 79.12
    assert df["spot_price_hour"].isna().all()
    assert len(problems) == 1 and problems[0].message.startswith("spot feed not read")
