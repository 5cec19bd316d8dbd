"""dstack's gpuhunt catalog as a second source: catalogs written in the test by gpuhunt's
own writer, imported from local files and refreshed from a local HTTP server."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from click.testing import CliRunner

gpuhunt = pytest.importorskip("gpuhunt")
from gpuhunt._internal import storage  # noqa: E402 - the package's own catalog writer

from cli import cli  # noqa: E402
from pricing import cache  # noqa: E402
from pricing.refresh import refresh  # noqa: E402
from pricing.sources import gpuhunt as source  # noqa: E402


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GPU_ADVISOR_HTTP_BACKOFF", "0.01")
    monkeypatch.setenv("GPU_ADVISOR_HTTP_RETRIES", "1")


def item(provider, name, location, price, gpu=None, count=0, mem=None, spot=False, cpu=96, ram=1152.0, **kw):
    if count:
        kw.setdefault("gpu_vendor", gpuhunt.AcceleratorVendor.NVIDIA)
    return gpuhunt.CatalogItem(provider=provider, instance_name=name, location=location, price=price, cpu=cpu,
                               memory=ram, gpu_count=count, gpu_name=gpu, gpu_memory=mem, spot=spot,
                               disk_size=None, **kw)


AWS = [item("aws", "p4de.24xlarge", "us-east-1", 40.97, "A100", 8, 80.0),
       item("aws", "p4de.24xlarge", "us-east-1", 15.02, "A100", 8, 80.0, spot=True),
       item("aws", "p5.48xlarge", "us-east-1", 55.04, "H100", 8, 80.0, cpu=192, ram=2048.0),
       item("aws", "m5.large", "us-east-1", 0.096, cpu=2, ram=8.0)]  # CPU-only: not an offer
LAMBDA = [item("lambdalabs", "gpu_1x_h100_sxm5", "us-east-3", 3.29, "H100", 1, 80.0, cpu=26, ram=225.0),
          item("lambdalabs", "gpu_8x_v5e", "us-east-3", 9.6, "v5litepod", 8, 16.0,
               gpu_vendor=gpuhunt.AcceleratorVendor.GOOGLE)]  # a TPU: skipped with a reason


def catalog_dir(tmp_path):
    folder = tmp_path / "gpuhunt"
    folder.mkdir()
    storage.dump(AWS, str(folder / "aws.csv"))
    storage.dump(LAMBDA, str(folder / "lambdalabs.csv"))
    return folder


def test_import_merges_on_demand_and_spot_maps_names_and_reports_skipped_rows(tmp_path):
    df, problems = source.import_path(catalog_dir(tmp_path), observed_at="2026-11-28T00:00:00Z")
    rows = df.set_index("instance_type")
    assert set(rows.index) == {"p4de.24xlarge", "p5.48xlarge", "gpu_1x_h100_sxm5"}
    p4de = rows.loc["p4de.24xlarge"]
    assert (p4de.gpu_model, p4de.gpu_count, p4de.price_hour, p4de.spot_price_hour) == ("A100-80GB", 8, 40.97, 15.02)
    assert rows.loc["gpu_1x_h100_sxm5"].provider == "lambda" and rows.loc["p5.48xlarge"].vcpus == 192
    assert set(df.observed_at) == {"2026-11-28T00:00:00Z"}
    assert [p.value for p in problems] == ["v5litepod"]


def test_a_row_gpuhunts_reader_rejects_is_reported_not_dropped_silently(tmp_path):
    folder = catalog_dir(tmp_path)
    text = (folder / "aws.csv").read_text().replace("55.04", "fifty")
    (folder / "aws.csv").write_text(text)
    df, problems = source.import_path(folder / "aws.csv")
    assert "p5.48xlarge" not in set(df.instance_type)
    assert any("gpuhunt skipped a row" in str(p) and "price" in str(p) for p in problems)
    assert df.observed_at.isna().all()  # no date given and none in the path: unknown


def test_prices_import_of_a_gpuhunt_folder_then_list_shows_it_dated(tmp_path):
    res = CliRunner().invoke(cli, ["prices", "import", str(catalog_dir(tmp_path)), "--observed-at", "2026-11-28"])
    assert res.exit_code == 0, res.output
    assert "imported 3 offers" in res.output
    rows = json.loads(CliRunner().invoke(cli, ["prices", "list", "--provider", "lambda", "--gpu", "H100",
                                               "--format", "json"]).stdout)
    mine = [r for r in rows if r["instance_type"] == "gpu_1x_h100_sxm5"]
    assert mine and mine[0]["price_origin"] == "cache:import-gpuhunt"
    assert mine[0]["observed_at"] == "2026-11-28T00:00:00Z"


def test_import_without_a_date_says_the_rows_are_undated(tmp_path):
    res = CliRunner().invoke(cli, ["prices", "import", str(catalog_dir(tmp_path))])
    assert res.exit_code == 0 and "3 have no observation date" in res.output


def zipped(items, provider) -> bytes:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/{provider}.csv"
        storage.dump(items, path)
        text = open(path).read()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(f"{provider}.csv", text)
    return out.getvalue()


def test_refresh_reads_the_newest_version_and_dates_rows_by_it(httpserver, monkeypatch):
    monkeypatch.setattr(source, "PROVIDERS", ("aws", "lambdalabs"))
    for provider, items in (("aws", AWS), ("lambdalabs", LAMBDA)):
        httpserver.expect_request(f"/v3/{provider}/version").respond_with_data("20261128-412\n")
        httpserver.expect_request(f"/v3/{provider}/20261128-412/catalog.zip").respond_with_data(
            zipped(items, provider), content_type="application/zip")
    [out] = refresh(["gpuhunt"], endpoint=httpserver.url_for("/v3"))
    assert out.status == "ok" and out.rows == 3, out.message
    import pandas as pd

    df = pd.read_csv(cache.sheet_path("gpuhunt"))
    assert set(df.observed_at) == {"2026-11-28T00:00:00Z"} and (df.fetched_at > "2026-11-28").all()
    before = cache.sheet_path("gpuhunt").read_bytes()
    httpserver.clear()
    httpserver.expect_request("/v3/aws/version").respond_with_data("20261129-413")
    httpserver.expect_request("/v3/aws/20261129-413/catalog.zip").respond_with_data(b"not a zip")
    [out] = refresh(["gpuhunt"], endpoint=httpserver.url_for("/v3"))
    assert out.status == "failed" and "not a readable zip" in out.message
    assert cache.sheet_path("gpuhunt").read_bytes() == before


def test_a_zip_under_its_version_folder_is_dated_by_that_version(tmp_path):
    folder = tmp_path / "aws" / "20261127-7"
    folder.mkdir(parents=True)
    (folder / "catalog.zip").write_bytes(zipped(AWS, "aws"))
    df, _ = source.import_path(folder / "catalog.zip")
    assert set(df.provider) == {"aws"} and set(df.observed_at) == {"2026-11-27T00:00:00Z"}


def import_two_more_providers(tmp_path) -> None:
    """`prices import` of a gpuhunt folder with two providers the bundled sheet lacks (verda, cloudrift)."""
    folder = catalog_dir(tmp_path)
    storage.dump([item("verda", "1H100.80S.32V", "FIN-01", 2.29, "H100", 1, 80.0, cpu=32, ram=185.0)],
                 str(folder / "verda.csv"))
    storage.dump([item("cloudrift", "rtx49-7c-kn.1", "us-east-nc-nr-1", 0.39, "RTX4090", 1, 24.0, cpu=7, ram=56.0)],
                 str(folder / "cloudrift.csv"))
    res = CliRunner().invoke(cli, ["prices", "import", str(folder), "--observed-at", "2026-11-28"])
    assert res.exit_code == 0, res.output


def test_bundled_clusters_and_a_gpuhunt_import_cover_at_least_15_providers(tmp_path):
    from pricing.loader import load

    import_two_more_providers(tmp_path)
    df, problems = load()
    assert problems == [] and df.provider.nunique() >= 15, sorted(df.provider.unique())


def test_a_plan_over_bundled_clusters_and_gpuhunt_ranks_offers_of_at_least_15_providers(tmp_path):
    """The planner sees every sheet: the best option per provider spans >= 15 providers."""
    from advisor.planner import plan

    import_two_more_providers(tmp_path)
    p = plan("meta-llama/Llama-3.2-1B", tokens=20e6, methods=("lora",), allow_stale=True)
    providers = set(p.best_per_provider)
    assert len(providers) >= 15, sorted(providers)
    assert {"verda", "cloudrift", "coreweave", "hyperstack"} <= providers  # gpuhunt and the cluster sheet
