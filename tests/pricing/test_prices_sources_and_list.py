"""`prices sources` counts each provider's rows by what the dated observation sheet said of them, and the
counts add up; `prices list` shows the cheapest row per GPU by default (`--all` for every row) with, for a
disputed row, both prices and, for a confirmed row, its confirmation date."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cli import cli

STATUSES = ("confirmed", "disputed", "observation", "dated", "undated", "user")


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GPU_ADVISOR_TODAY", "2026-12-01")
    for k in ("GPU_ADVISOR_OBSERVATIONS", "GPU_ADVISOR_OBSERVATION_TOLERANCE", "GPU_ADVISOR_STALE_DAYS"):
        monkeypatch.delenv(k, raising=False)


def run(*args):
    res = CliRunner().invoke(cli, ["prices", *args])
    assert res.exit_code == 0, res.output
    return res.stdout


def test_prices_sources_counts_add_up_to_the_rows_per_provider_and_in_all():
    from pricing.loader import load

    data = json.loads(run("sources", "--format", "json"))
    assert {"sheets", "fetchers", "providers", "tolerance"} <= set(data) and data["tolerance"] == 0.05
    *providers, total = data["providers"]
    assert total["provider"] == "all" and len(providers) >= 16
    for p in data["providers"]:
        assert sum(p[k] for k in STATUSES) == p["rows"], p
    assert sum(p["rows"] for p in providers) == total["rows"] == len(load()[0])
    for k in STATUSES:
        assert sum(p[k] for p in providers) == total[k]
    runpod = next(p for p in providers if p["provider"] == "runpod")
    assert runpod["confirmed"] and runpod["disputed"] and runpod["newest_observation"] == "2026-11-09"
    assert runpod["observation_sources"] >= 3
    hyperbolic = next(p for p in providers if p["provider"] == "hyperbolic")  # nobody observed it
    assert (hyperbolic["undated"], hyperbolic["newest_observation"], hyperbolic["observation_sources"]) == (3, None, 0)
    assert "observations" in {s["name"] for s in data["sheets"]}
    gcp = next(p for p in providers if p["provider"] == "gcp")  # rule 6's rows, priced n/a, count as disputed
    gone = load()[0].query("provider == 'gcp' and price_hour != price_hour and spot_price_hour != spot_price_hour")
    assert len(gone) == 2 and gcp["disputed"] >= len(gone)


def test_prices_sources_table_shows_one_line_per_provider_and_the_totals():
    out = run("sources")
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:3] == ["provider", "rows", "confirmed"])
    assert lines[head - 1].startswith("providers (") and "tolerance 5% per GPU-hour" in lines[head - 1]
    body = lines[head + 1:]
    total = next(line for line in body if line.split()[0] == "all")
    assert total.split()[-2] == "2026-11-09"
    aws = next(line for line in body if line.split()[0] == "aws").split()
    assert int(aws[1]) == sum(int(x) for x in aws[2:7])  # rows = confirmed + disputed + observed + own + undated
    assert "import-" not in out and "bundled snapshot" in out  # the sheets part is still there


def test_prices_list_shows_the_cheapest_row_per_gpu_unless_all_is_asked():
    default = json.loads(run("list", "--format", "json"))
    every = json.loads(run("list", "--format", "json", "--all"))
    assert len({r["gpu_model"] for r in default}) == len(default) == len({r["gpu_model"] for r in every})
    assert len(every) > 10 * len(default)
    fresh = [r for r in default if not r["stale"]]
    for r in fresh:  # each shown row is the cheapest fresh one of its GPU
        same = [x["price_per_gpu_hour"] for x in every if x["gpu_model"] == r["gpu_model"] and not x["stale"]
                and x["price_per_gpu_hour"] is not None]
        assert r["price_per_gpu_hour"] == min(same)
    assert len(json.loads(run("list", "--format", "json", "--all", "--limit", "7"))) == 7
    table = run("list")  # with --gpu one row per instance type: tests/cli/test_first_hour.py
    assert "the cheapest per GPU of" in table and "--all lists every row" in table


def test_prices_list_shows_both_prices_for_a_disputed_row_and_the_date_for_a_confirmed_one():
    lines = run("list", "--provider", "runpod", "--gpu", "H100", "--all").splitlines()
    assert lines[0].split()[-1] == "check"
    disputed = [line for line in lines if "8x_H100-SXM_SECURE" in line]
    assert disputed and all(line.endswith("disputed (catalog $26.320)") and "$31.920" in line for line in disputed)
    lines = run("list", "--provider", "aws", "--region", "us-east-1", "--gpu", "H100", "--min-gpus", "8").splitlines()
    [p5] = [line for line in lines if "p5.48xlarge" in line]
    assert "$55.040" in p5 and p5.split()[-3:] == ["2026-11-09", "confirmed", "2026-11-09"]
    [row] = json.loads(run("list", "--provider", "aws", "--region", "us-east-1", "--gpu", "H100", "--min-gpus", "8",
                           "--format", "json"))
    assert (row["price_check"], row["checked_at"], row["catalog_price_hour"]) == (
        "confirmed", "2026-11-09T00:00:00Z", None)
    assert row["checked_by"].startswith("https://raw.githubusercontent.com/datareceipts/")


def test_every_existing_list_option_still_works():
    rows = json.loads(run("list", "--gpu", "A100-80GB", "--spot", "--sort", "price", "--format", "json", "--all"))
    assert rows and all(r["spot_price_hour"] is not None for r in rows)
    assert [r["spot_price_hour"] for r in rows] == sorted(r["spot_price_hour"] for r in rows)
    assert run("list", "--format", "csv", "--provider", "lambda").startswith("provider,region,instance_type")
