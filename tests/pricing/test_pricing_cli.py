"""`gpu-advisor prices ...` through the real click group."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cli import cli


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GPU_ADVISOR_HTTP_BACKOFF", "0.01")
    monkeypatch.setenv("GPU_ADVISOR_HTTP_RETRIES", "1")
    for k in ("LAMBDA_API_KEY", "RUNPOD_API_KEY", "VAST_API_KEY"):
        monkeypatch.delenv(k, raising=False)


def run(*args):
    return CliRunner().invoke(cli, ["prices", *args], catch_exceptions=True)


def test_list_json_rows_use_schema_columns_and_filters_apply():
    res = run("list", "--gpu", "h100", "--min-gpus", "8", "--provider", "aws", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert rows and {r["gpu_model"] for r in rows} == {"H100"} and {r["provider"] for r in rows} == {"aws"}
    assert all(r["gpu_count"] >= 8 for r in rows)
    assert {"provider", "region", "instance_type", "price_hour", "spot_price_hour", "source",
            "fetched_at", "price_origin", "stale"} <= set(rows[0])
    per_gpu = [r["price_per_gpu_hour"] for r in rows]
    assert per_gpu == sorted(per_gpu)


def test_list_spot_sorts_by_spot_and_hides_rows_without_one():
    res = run("list", "--spot", "--sort", "price", "--format", "json", "--gpu", "A100-80GB")
    rows = json.loads(res.output)
    spots = [r["spot_price_hour"] for r in rows]
    assert spots and None not in spots and spots == sorted(spots)


def _lines(lines: list[str], starts: str = "", has: tuple[str, ...] = (), lacks: tuple[str, ...] = ()) -> list[str]:
    """The table's lines that start with `starts`, hold every text in `has` and none in `lacks`."""
    return [line for line in lines if line.startswith(starts) and all(h in line for h in has)
            and not any(x in line for x in lacks)]


def test_table_shows_memory_vcpus_ram_and_the_observation_date_or_that_it_is_unknown(tmp_path, monkeypatch):
    import datetime as dt

    monkeypatch.setenv("GPU_ADVISOR_TODAY", "2026-12-01")  # ages as of the day the sheet was last checked

    today = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    sheet = tmp_path / "mine.csv"
    sheet.write_text("provider,instance_type,gpu_model,gpu_count,vcpus,ram_gb,price_hour,observed_at\n"
                     f"acme,box-8h100,H100,8,208,1800,20.0,{today}\n")
    res = run("list", "--gpu", "H100", "--min-gpus", "8", "--prices", str(sheet), "--all")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split()[5:8] == ["GB/gpu", "vCPUs", "RAM", ] and "observed" in lines[0]
    [mine] = _lines(lines, "acme")
    assert mine.split()[5:8] == ["80", "208", "1,800"] and mine.endswith(today)  # dated, fresh: no STALE
    undated = _lines(lines, has=("bundled", "date unknown"), lacks=("disputed",))
    assert undated and all(line.endswith("date unknown STALE") for line in undated)  # nobody observed these
    market = _lines(lines, "vast", has=("H100_SXM",))
    assert market and all(line.endswith("disputed by market median (own price kept)") for line in market)
    # below every region's price (a listing a market median disputes keeps its own price: not these)
    floored = _lines(lines, has=("date unknown", "disputed"), lacks=("market",))
    assert floored and all(line.split()[8:10] == ["n/a", "n/a"] and "(catalog $" in line for line in floored)
    # a cited page (2026-09-20), confirmed by a dated observation of the same price (2026-10-10)
    [cw] = _lines(lines, "coreweave", has=("HGX-H100-8x",))
    assert cw.split()[-3:] == ["2026-10-10", "confirmed", "2026-10-10"]


@pytest.mark.parametrize("args, field", [(["--gpu", "H1000"], "--gpu"), (["--provider", "awz"], "--provider"),
                                         (["--region", "us-esat-1"], "--region"),
                                         (["--discount", "aws=2"], "--discount")])
def test_unknown_values_are_exit_2_with_the_valid_ones(args, field):
    from cli import main

    with pytest.raises(SystemExit) as ex:
        main(["prices", "list", *args])
    assert ex.value.code == 2


def test_unknown_provider_message_lists_valid_providers(capsys):
    from cli import main

    with pytest.raises(SystemExit):
        main(["prices", "list", "--provider", "awz"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--provider" in err and "aws" in err and "Did you mean aws" in err


def test_user_sheet_and_discount_show_in_list(tmp_path):
    sheet = tmp_path / "mine.csv"
    sheet.write_text("provider,gpu_model,gpu_count,price_per_gpu_hour\nprivate,H100,8,0.5\n")
    res = run("list", "--prices", str(sheet), "--gpu", "H100", "--format", "json", "--discount", "aws=0.5")
    rows = json.loads(res.output)
    assert rows[0]["provider"] == "private" and rows[0]["price_hour"] == 4.0 and rows[0]["price_origin"] == "user"
    assert all("discount 50%" in r["notes"] for r in rows if r["provider"] == "aws")


def test_bad_user_rows_are_warned_about_not_silently_dropped(tmp_path):
    sheet = tmp_path / "bad.csv"
    sheet.write_text("provider,gpu_model,gpu_count,price_hour\nprivate,H100,8,abc\nprivate,H100,8,10\n")
    res = CliRunner().invoke(cli, ["prices", "list", "--prices", str(sheet), "--provider", "private",
                                   "--format", "csv"])
    assert res.exception.exit_code == 2  # the plan would otherwise run without the user's price
    assert "row 2, column 'price_hour': is not a number" in str(res.exception)  # the header is row 1
    res = CliRunner().invoke(cli, ["prices", "list", "--prices", str(sheet), "--provider", "private",
                                   "--format", "csv", "--skip-bad-rows"])
    assert res.exit_code == 0
    assert "row 2, column 'price_hour': is not a number" in res.output  # stderr is mixed in here
    assert res.output.count("private,") == 1


def test_import_writes_cache_sheet_that_list_then_prefers(tmp_path):
    src = tmp_path / "lambda_vms.csv"
    src.write_text("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
                   "gpu_8x_h100_sxm5,H100,8.0,208.0,1800.0,20.00,us-east-1,,\n")
    # dated newer than any observation of it, so the dated observation sheet does not override it
    res = run("import", str(src), "--observed-at", "2026-11-30")
    assert res.exit_code == 0 and "imported 1 offers" in res.output
    rows = json.loads(run("list", "--provider", "lambda", "--region", "us-east-1", "--format", "json",
                          "--gpu", "H100", "--min-gpus", "8").output)
    assert [(r["price_hour"], r["price_origin"]) for r in rows] == [(20.0, "cache:import-lambda_vms")]
    out = run("sources").output
    assert "import-lambda_vms" in out and "bundled" in out and "LAMBDA_API_KEY" in out


def test_refresh_offline_and_missing_keys_fetch_nothing():
    res = run("refresh", "--offline")
    assert res.exit_code == 0 and "offline" in res.output
    res = run("refresh", "--source", "lambda")
    assert res.exit_code == 0 and "lambda: skipped (set LAMBDA_API_KEY to fetch)" in res.output


def test_refresh_against_local_server_then_failure_exits_1(httpserver):
    httpserver.expect_oneshot_request("/prices").respond_with_json(
        {"Items": [{"armSkuName": "Standard_NC4as_T4_v3", "armRegionName": "eastus", "retailPrice": 0.5,
                    "skuName": "NC4as T4 v3", "productName": "Virtual Machines NCasT4_v3 Series",
                    "type": "Consumption", "unitOfMeasure": "1 Hour", "currencyCode": "USD"}],
         "NextPageLink": None})
    res = run("refresh", "--source", "azure", "--region", "eastus", "--endpoint", httpserver.url_for("/prices"))
    assert res.exit_code == 0, res.output
    rows = json.loads(run("list", "--provider", "azure", "--region", "eastus", "--gpu", "T4",
                          "--format", "json").output)
    assert rows[0]["price_hour"] == 0.5 and rows[0]["price_origin"] == "cache:azure"
    httpserver.expect_request("/prices").respond_with_data("nope", status=503)
    res = run("refresh", "--source", "azure", "--region", "eastus", "--endpoint", httpserver.url_for("/prices"))
    assert res.exit_code == 1 and "kept the last good sheet" in str(res.exception)  # the one error line
    assert "failed" not in res.output  # said once, by that line, not also as progress


def test_import_accepts_a_sheet_in_our_schema(tmp_path):
    src = tmp_path / "team.yaml"
    src.write_text("- {provider: coreweave, region: us-east, instance_type: gd-8xh100, gpu_model: H100,\n"
                   "   gpu_count: 8, price_hour: 35.0}\n- {provider: coreweave, gpu_model: K80, gpu_count: 1,"
                   " price_hour: 1}\n")
    res = run("import", str(src))
    assert res.exit_code == 0 and "imported 1 offers" in res.output
    assert "column 'gpu_model': is not in the GPU table" in res.output
    rows = json.loads(run("list", "--provider", "coreweave", "--format", "json").output)
    assert ("gd-8xh100", "cache:import-team") in [(r["instance_type"], r["price_origin"]) for r in rows]


@pytest.mark.slow
def test_bad_input_is_one_line_on_stderr_exit_2_as_a_process(tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, GPU_ADVISOR_CACHE_DIR=str(tmp_path))
    res = subprocess.run([sys.executable, "-m", "advisor", "prices", "list", "--gpu", "H1000"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("error: --gpu: unknown GPU 'H1000'") and res.stderr.count("\n") == 1
    ok = subprocess.run([sys.executable, "-m", "advisor", "prices", "list", "--gpu", "B200", "--format", "csv"],
                        capture_output=True, text=True, env=env, timeout=60)
    assert ok.returncode == 0 and ok.stdout.startswith("provider,region,instance_type,gpu_model")
