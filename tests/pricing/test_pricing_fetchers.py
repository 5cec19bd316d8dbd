"""Live fetchers against a real local HTTP server (pytest-httpserver), replaying each
provider's response shape. After every failure the cache must still hold the last good
sheet byte for byte."""

from __future__ import annotations

import json
import time

import pytest
from werkzeug import Response

from pricing import cache
from pricing.refresh import refresh

AZ_PATH = "/api/retail/prices"


def az_item(sku="Standard_NC24ads_A100_v4", price=3.673, sku_name="NC24ads A100 v4",
            product="Virtual Machines NCads A100 v4 Series", region="eastus", **extra):
    item = {"currencyCode": "USD", "tierMinimumUnits": 0.0, "retailPrice": price, "unitPrice": price,
            "armRegionName": region, "location": "US East", "effectiveStartDate": "2026-06-01T00:00:00Z",
            "meterId": "0", "meterName": sku_name, "productId": "DZH318Z0XXXX", "skuId": "DZH318Z0XXXX/00XX",
            "productName": product, "skuName": sku_name, "serviceName": "Virtual Machines",
            "serviceId": "DZH313Z7MMC8", "serviceFamily": "Compute", "unitOfMeasure": "1 Hour",
            "type": "Consumption", "isPrimaryMeterRegion": True, "armSkuName": sku}
    item.update(extra)
    return item


def az_page(items, next_link=None):
    return {"BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail",
            "Items": items, "NextPageLink": next_link, "Count": len(items)}


@pytest.fixture(autouse=True)
def fast_env(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GPU_ADVISOR_HTTP_BACKOFF", "0.01")
    monkeypatch.setenv("GPU_ADVISOR_HTTP_RETRIES", "2")
    monkeypatch.setenv("GPU_ADVISOR_HTTP_TIMEOUT", "0.5")
    monkeypatch.setenv("GPU_ADVISOR_HTTP_MAX_WAIT", "1")
    for k in ("LAMBDA_API_KEY", "RUNPOD_API_KEY", "VAST_API_KEY"):
        monkeypatch.delenv(k, raising=False)


def good_azure(httpserver):
    """Serve a 2-page Azure answer and refresh, leaving a good cached sheet."""
    page2 = httpserver.url_for("/page2")
    httpserver.expect_oneshot_request(AZ_PATH).respond_with_json(
        az_page([az_item(), az_item(price=0.4565, sku_name="NC24ads A100 v4 Spot")], page2))
    httpserver.expect_oneshot_request("/page2").respond_with_json(az_page([
        az_item("Standard_ND96isr_H100_v5", 98.32, "ND96isr H100 v5", "Virtual Machines NDsr H100 v5 Series")]))
    [out] = refresh(["azure"], ["eastus"], endpoint=httpserver.url_for(AZ_PATH))
    assert out.status == "ok", out.message
    return cache.sheet_path("azure").read_bytes()


def test_azure_follows_next_page_link_and_files_spot_into_its_column(httpserver):
    good_azure(httpserver)
    import pandas as pd

    df = pd.read_csv(cache.sheet_path("azure")).set_index("instance_type")
    a100 = df.loc["Standard_NC24ads_A100_v4"]
    assert (a100.price_hour, a100.spot_price_hour, a100.gpu_model) == (3.673, 0.4565, "A100-80GB-PCIE")
    h100 = df.loc["Standard_ND96isr_H100_v5"]
    assert h100.gpu_count == 8 and h100.gpu_model == "H100"  # not the catalog's 12
    meta = cache.read_meta("azure")
    assert meta["rows"] == 2 and meta["url"].endswith(AZ_PATH)


def test_azure_drops_windows_reservation_devtest_and_low_priority_items(httpserver):
    items = [az_item(price=3.0),
             az_item(price=9.9, product="Virtual Machines NCads A100 v4 Series Windows"),
             az_item(price=9.8, product="Virtual Machines NCads H100 v5 Series Win"),
             az_item(price=1.0, type="Reservation", reservationTerm="1 Year"),
             az_item(price=1.1, type="DevTestConsumption"),
             az_item(price=0.2, sku_name="NC24ads A100 v4 Low Priority")]
    httpserver.expect_request(AZ_PATH).respond_with_json(az_page(items))
    [out] = refresh(["azure"], ["eastus"], endpoint=httpserver.url_for(AZ_PATH))
    assert out.status == "ok"
    text = cache.sheet_path("azure").read_text()
    assert ",3," in text and "9.9" not in text and "9.8" not in text and ",1.1," not in text
    row = text.splitlines()[1].split(",")
    assert row[9] == ""  # no spot price: the low-priority item is not a spot price


def test_retry_after_429_is_honoured_then_200_succeeds(httpserver, monkeypatch):
    from pricing import http

    httpserver.expect_oneshot_request(AZ_PATH).respond_with_response(
        Response("slow down", status=429, headers={"Retry-After": "0.3"}))
    httpserver.expect_oneshot_request(AZ_PATH).respond_with_json(az_page([az_item()]))
    waits: list[float] = []
    real = http.time.sleep
    monkeypatch.setattr(http.time, "sleep", lambda s: (waits.append(s), real(s)))
    [out] = refresh(["azure"], ["eastus"], endpoint=httpserver.url_for(AZ_PATH))
    assert out.status == "ok"
    assert waits and max(waits) >= 0.3  # waited as the server said, not the 0.01 s backoff


@pytest.mark.parametrize("failure", ["500s", "timeout", "malformed-json", "html-page", "empty-page",
                                     "truncated", "missing-field", "page2-fails"])
def test_failed_fetch_keeps_last_good_sheet_byte_for_byte(httpserver, failure, monkeypatch):
    before = good_azure(httpserver)
    meta_before = cache.meta_path("azure").read_bytes()
    httpserver.clear()
    r = httpserver.expect_request(AZ_PATH)
    if failure == "500s":
        r.respond_with_data("boom", status=500)
    elif failure == "timeout":  # one attempt, so the single-threaded server drains quickly
        monkeypatch.setenv("GPU_ADVISOR_HTTP_RETRIES", "0")
        monkeypatch.setenv("GPU_ADVISOR_HTTP_TIMEOUT", "0.2")
        r.respond_with_handler(lambda req: (time.sleep(0.5), Response("{}"))[1])
    elif failure == "malformed-json":
        r.respond_with_data('{"Items": [ {"armSkuName": ', content_type="application/json")
    elif failure == "html-page":
        r.respond_with_data("<!DOCTYPE html><html><body>Service Unavailable</body></html>",
                            content_type="text/html")
    elif failure == "empty-page":
        r.respond_with_data("", content_type="application/json")
    elif failure == "truncated":
        body = json.dumps(az_page([az_item()] * 5)).encode()
        r.respond_with_response(Response(iter([body[:200]]), headers={"Content-Length": str(len(body))},
                                         content_type="application/json"))
    elif failure == "missing-field":
        r.respond_with_json({"BillingCurrency": "USD", "Count": 0})
    elif failure == "page2-fails":
        r.respond_with_json(az_page([az_item(price=1.0)], httpserver.url_for("/page2")))
        httpserver.expect_request("/page2").respond_with_data("bad gateway", status=502)
    [out] = refresh(["azure"], ["eastus"], endpoint=httpserver.url_for(AZ_PATH))
    if failure == "timeout":
        time.sleep(0.5)  # let the server finish the slow request before the next test
        assert "timed out" in out.message
    assert out.status == "failed"
    assert httpserver.url_for("/").rstrip("/") in out.message  # the error names the URL
    assert cache.sheet_path("azure").read_bytes() == before
    assert cache.meta_path("azure").read_bytes() == meta_before
    leftovers = [p.name for p in cache.sheets_dir().iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_error_message_names_the_missing_field(httpserver):
    httpserver.expect_request(AZ_PATH).respond_with_json({"Count": 0})
    [out] = refresh(["azure"], ["eastus"], endpoint=httpserver.url_for(AZ_PATH))
    assert "'Items'" in out.message


def test_env_var_replaces_the_base_url_like_endpoint(httpserver, monkeypatch):
    httpserver.expect_request(AZ_PATH).respond_with_json(az_page([az_item()]))
    monkeypatch.setenv("GPU_ADVISOR_AZURE_URL", httpserver.url_for(AZ_PATH))
    [out] = refresh(["azure"], ["eastus"])
    assert out.status == "ok" and out.rows == 1


AWS_CSV = '''"FormatVersion","v1.0"
"Disclaimer","This pricing list is for informational purposes only."
"Publication Date","2026-11-28T21:14:03Z"
"Version","20261128211403"
"OfferCode","AmazonEC2"
"SKU","OfferTermCode","RateCode","TermType","PriceDescription","EffectiveDate","Unit","PricePerUnit","Currency","Instance Type","vCPU","Memory","GPU","GPU Memory","Operating System","Tenancy","Pre Installed S/W","CapacityStatus","Region Code"
"A1","JRTCKXETXF","A1.J.6Y","OnDemand","$55.04 per On Demand Linux p5.48xlarge Instance Hour","2026-11-01","Hrs","55.0400000000","USD","p5.48xlarge","192","2048 GiB","8","640 GB HBM3","Linux","Shared","NA","Used","us-east-1"
"A2","JRTCKXETXF","A2.J.6Y","OnDemand","Windows","2026-11-01","Hrs","60.0000000000","USD","p5.48xlarge","192","2048 GiB","8","640 GB HBM3","Windows","Shared","NA","Used","us-east-1"
"A3","JRTCKXETXF","A3.J.6Y","OnDemand","Dedicated","2026-11-01","Hrs","58.0000000000","USD","p5.48xlarge","192","2048 GiB","8","640 GB HBM3","Linux","Dedicated","NA","Used","us-east-1"
"A4","4NA7Y494T4","A4.4.6Y","Reserved","1yr","2026-11-01","Hrs","30.0000000000","USD","p5.48xlarge","192","2048 GiB","8","640 GB HBM3","Linux","Shared","NA","Used","us-east-1"
"A5","JRTCKXETXF","A5.J.6Y","OnDemand","reservation","2026-11-01","Hrs","0.0000000000","USD","p5.48xlarge","192","2048 GiB","8","640 GB HBM3","Linux","Shared","NA","UnusedCapacityReservation","us-east-1"
"A6","JRTCKXETXF","A6.J.6Y","OnDemand","g5","2026-11-01","Hrs","1.0060000000","USD","g5.xlarge","4","16 GiB","1","24 GB","Linux","Shared","NA","Used","us-east-1"
"A7","JRTCKXETXF","A7.J.6Y","OnDemand","sql","2026-11-01","Hrs","2.5000000000","USD","g5.xlarge","4","16 GiB","1","24 GB","Linux","Shared","SQL Std","Used","us-east-1"
"A8","JRTCKXETXF","A8.J.6Y","OnDemand","cpu","2026-11-01","Hrs","0.0960000000","USD","m5.large","2","8 GiB","","","Linux","Shared","NA","Used","us-east-1"
'''


def test_aws_offer_file_skips_metadata_and_keeps_linux_shared_on_demand(httpserver):
    path = "/offers/v1.0/aws/AmazonEC2/current/us-east-1/index.csv"
    httpserver.expect_request(path).respond_with_data(AWS_CSV, content_type="text/csv")
    [out] = refresh(["aws"], ["us-east-1"], endpoint=httpserver.url_for("/"))
    assert out.status == "ok", out.message
    import pandas as pd

    df = pd.read_csv(cache.sheet_path("aws")).set_index("instance_type")
    assert sorted(df.index) == ["g5.xlarge", "p5.48xlarge"]
    assert df.loc["p5.48xlarge", "price_hour"] == 55.04
    assert df.loc["g5.xlarge", "gpu_model"] == "A10G" and df.loc["g5.xlarge", "ram_gb"] == 16
    assert df.loc["p5.48xlarge", "observed_at"] == "2026-11-28T21:14:03Z"  # the offer file's publication date
    assert df.loc["p5.48xlarge", "fetched_at"] > "2026-11-28T21:14:03Z"  # when we fetched it


def test_aws_truncated_download_keeps_last_good_sheet(httpserver):
    path = "/offers/v1.0/aws/AmazonEC2/current/us-east-1/index.csv"
    httpserver.expect_oneshot_request(path).respond_with_data(AWS_CSV, content_type="text/csv")
    assert refresh(["aws"], ["us-east-1"], endpoint=httpserver.url_for("/"))[0].status == "ok"
    before = cache.sheet_path("aws").read_bytes()
    body = AWS_CSV.encode()
    httpserver.expect_request(path).respond_with_response(
        Response(iter([body[:900]]), headers={"Content-Length": str(len(body))}, content_type="text/csv"))
    [out] = refresh(["aws"], ["us-east-1"], endpoint=httpserver.url_for("/"))
    assert out.status == "failed" and "truncated" in out.message
    assert cache.sheet_path("aws").read_bytes() == before
    # a chunked body that simply stops mid-line is caught too
    httpserver.clear()
    httpserver.expect_request(path).respond_with_response(
        Response(iter([body[:900]]), content_type="text/csv"))
    [out] = refresh(["aws"], ["us-east-1"], endpoint=httpserver.url_for("/"))
    assert out.status == "failed" and "truncated" in out.message
    assert cache.sheet_path("aws").read_bytes() == before


def test_keyed_sources_are_skipped_with_one_line_notice_without_keys():
    notices = []
    outs = refresh(["lambda", "runpod"], notify=notices.append)  # vast's key is optional (its search is public)
    assert [o.status for o in outs] == ["skipped"] * 2
    assert notices == ["lambda: skipped (set LAMBDA_API_KEY to fetch)",
                       "runpod: skipped (set RUNPOD_API_KEY to fetch)"]
    assert not cache.sheets_dir().exists()


LAMBDA = {"data": {
    "gpu_8x_h100_sxm5": {"instance_type": {"name": "gpu_8x_h100_sxm5", "description": "8x H100 (80 GB SXM5)",
                                           "gpu_description": "H100 (80 GB SXM5)", "price_cents_per_hour": 3192,
                                           "specs": {"vcpus": 208, "memory_gib": 1800, "storage_gib": 22000, "gpus": 8}},
                         "regions_with_capacity_available": [{"name": "us-east-1", "description": "Virginia, USA"}]},
    "gpu_1x_h100_pcie": {"instance_type": {"name": "gpu_1x_h100_pcie", "description": "1x H100 (80 GB PCIe)",
                                           "gpu_description": "H100 (80 GB PCIe)", "price_cents_per_hour": 329,
                                           "specs": {"vcpus": 26, "memory_gib": 200, "storage_gib": 1000, "gpus": 1}},
                         "regions_with_capacity_available": []},
    "cpu_4x_general": {"instance_type": {"name": "cpu_4x_general", "description": "CPU", "gpu_description": "",
                                         "price_cents_per_hour": 20,
                                         "specs": {"vcpus": 4, "memory_gib": 16, "storage_gib": 100, "gpus": 0}},
                       "regions_with_capacity_available": []}}}


def test_lambda_prices_cents_with_bearer_key_never_stored(httpserver, monkeypatch):
    monkeypatch.setenv("LAMBDA_API_KEY", "secret-lambda-key")
    httpserver.expect_request("/api/v1/instance-types",
                              headers={"Authorization": "Bearer secret-lambda-key"}).respond_with_json(LAMBDA)
    [out] = refresh(["lambda"], endpoint=httpserver.url_for("/api/v1"))
    assert out.status == "ok", out.message
    text = cache.sheet_path("lambda").read_text()
    assert "secret-lambda-key" not in text + cache.meta_path("lambda").read_text()
    import pandas as pd

    df = pd.read_csv(cache.sheet_path("lambda")).set_index("instance_type")
    assert df.loc["gpu_8x_h100_sxm5", "price_hour"] == 31.92
    assert df.loc["gpu_1x_h100_pcie", "gpu_model"] == "H100-PCIE"
    assert df.loc["gpu_1x_h100_pcie", "region"] == "any"


def test_runpod_graphql_errors_are_a_failed_fetch_and_prices_multiply_per_gpu(httpserver, monkeypatch):
    monkeypatch.setenv("RUNPOD_API_KEY", "rp-key")
    httpserver.expect_oneshot_request("/graphql", method="POST").respond_with_json(
        {"data": {"gpuTypes": [{"id": "NVIDIA H100 80GB HBM3", "displayName": "H100 SXM", "manufacturer": "Nvidia",
                                "memoryInGb": 80, "maxGpuCount": 8, "secureCloud": True, "communityCloud": True,
                                "securePrice": 3.29, "communityPrice": 2.99, "secureSpotPrice": 2.39,
                                "communitySpotPrice": 1.99, "oneWeekPrice": 3.09}]}})
    [out] = refresh(["runpod"], endpoint=httpserver.url_for("/graphql"))
    assert out.status == "ok", out.message
    import pandas as pd

    df = pd.read_csv(cache.sheet_path("runpod")).set_index("instance_type")
    assert df.loc["8x_H100_SECURE", "price_hour"] == pytest.approx(26.32)
    assert df.loc["8x_H100_SECURE", "spot_price_hour"] == pytest.approx(19.12)
    before = cache.sheet_path("runpod").read_bytes()
    httpserver.expect_request("/graphql", method="POST").respond_with_json(
        {"errors": [{"message": "Unauthorized"}], "data": None})
    [out] = refresh(["runpod"], endpoint=httpserver.url_for("/graphql"))
    assert out.status == "failed" and "Unauthorized" in out.message
    assert cache.sheet_path("runpod").read_bytes() == before


def test_vast_offers_are_aggregated_to_median_per_gpu_count_and_place(httpserver, monkeypatch):
    monkeypatch.setenv("VAST_API_KEY", "vk")
    offers = [{"id": i, "gpu_name": "H100 SXM", "num_gpus": 8, "gpu_ram": 81559, "cpu_cores_effective": 64.0,
               "cpu_ram": 1031912, "dph_total": p, "min_bid": p / 2, "geolocation": "Texas, US"}
              for i, p in enumerate([14.0, 15.0, 40.0])]
    offers.append({"id": 9, "gpu_name": "H100 NVL", "num_gpus": 1, "gpu_ram": 95830, "dph_total": 1.98,
                   "geolocation": "Ohio, US"})
    offers.append({"id": 10, "gpu_name": "GTX 1080", "num_gpus": 1, "dph_total": 0.05, "geolocation": "X"})
    httpserver.expect_request("/api/v0/bundles/").respond_with_json({"offers": offers})
    [out] = refresh(["vast"], endpoint=httpserver.url_for("/api/v0"))
    assert out.status == "ok" and out.skipped_rows == 1  # the GTX 1080 is reported, not kept
    import pandas as pd

    df = pd.read_csv(cache.sheet_path("vast")).set_index("instance_type")
    assert df.loc["8x-H100", "price_hour"] == 15.0 and df.loc["8x-H100", "spot_price_hour"] == 7.5
    assert df.loc["1x-H100-NVL", "gpu_memory_gb"] == 94


def test_skypilot_catalog_fetch_uses_the_importer(httpserver):
    src = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
           "gpu-h100-sxm_1gpu-16vcpu-200gb,H100,1,16,200,2.95,eu-north1,\"{'Gpus': [{'Name': 'H100', "
           "'Manufacturer': 'NVIDIA', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 0}}], 'TotalGpuMemoryInMiB': 0}\",1.25\n")
    httpserver.expect_request("/catalogs/v9/nebius/vms.csv").respond_with_data(src)
    from pricing.sources import skypilot

    df, problems = skypilot.fetch(httpserver.url_for("/catalogs"), clouds=["nebius"])
    assert len(df) == 1 and problems == []
    assert (df.gpu_memory_gb[0], df.spot_price_hour[0]) == (80, 1.25)
