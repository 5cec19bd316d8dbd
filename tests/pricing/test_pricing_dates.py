"""Honest price dates end to end: an undated bundled price never heads a plan while a
dated, fresh offer for the same GPU exists."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cli import cli


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))


def plan(*extra):
    res = CliRunner().invoke(cli, ["plan", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "100M",
                                   "--format", "json", *extra])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_undated_marketplace_rows_do_not_head_the_plan_while_a_dated_fresh_h100_offer_exists(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ADVISOR_TODAY", "2026-12-01")  # the observation sheet's ages as of its last check
    top = [c["offer"] for c in plan()["candidates"]]
    # the dated observation sheet gives fresh offers; since the age policy (pricing.loader.aged_mask) a dated price
    # past the 60-day limit may rank below a fresh #1, its age stated, but an undated one never does
    assert top and not top[0]["stale"] and not any(o["price_date"] == "date unknown" for o in top)
    assert all("price_age:" in o["notes"] for o in top if o["stale"])
    sheet = tmp_path / "quote.csv"  # a dated quote, dearer per GPU-hour than the undated $1.29 rows
    sheet.write_text("provider,instance_type,gpu_model,gpu_count,vcpus,ram_gb,price_hour,observed_at\n"
                     "acme,1x-h100,H100,1,26,225,2.49,2026-11-28\n")
    # on cost alone (--time-value 0): the question is the price's date, not an 8-GPU box's speed
    top = [c["offer"] for c in plan("--gpu", "H100", "--prices", str(sheet), "--time-value", "0")["candidates"]]
    assert top[0]["provider"] == "acme" and top[0]["price_date"] == "2026-11-28" and not top[0]["stale"]
    assert not any(o["provider"] == "hyperbolic" or o["price_date"] == "date unknown" for o in top)


def _cache(tmp_path, name, rows):
    """A sheet in the fetch cache, written the way refresh/import write one."""
    from pricing import cache
    from pricing.loader import read_sheet

    path = tmp_path / f"{name}.csv"
    path.write_text("provider,region,instance_type,gpu_model,gpu_count,price_hour,source,observed_at\n"
                    + "".join(",".join(map(str, r)) + "\n" for r in rows))
    good, problems = read_sheet(path)
    assert not problems
    cache.write_sheet(name, good, source=name, url=None, kind="import")


def test_two_sheets_pricing_one_instance_keep_the_newer_dated_price_and_say_they_disagree(tmp_path):
    from pricing.loader import load

    # a dated second catalog against the undated bundled $4.29 (lambda/us-east-1/gpu_1x_h100_sxm5)
    _cache(tmp_path, "gpuhunt", [("lambda", "us-east-1", "gpu_1x_h100_sxm5", "H100", 1, 3.29, "gpuhunt", "2026-11-28"),
                                 ("aws", "us-east-1", "p5.48xlarge", "H100", 8, 55.5, "gpuhunt", "2026-11-28")])
    df, _ = load()
    rows = df.set_index(["provider", "region", "instance_type"])
    lam = rows.loc[("lambda", "us-east-1", "gpu_1x_h100_sxm5")]
    assert lam.price_hour == 3.29 and lam.price_origin == "cache:gpuhunt"
    assert "price_disagrees:bundled=4.29" in lam.notes
    p5 = rows.loc[("aws", "us-east-1", "p5.48xlarge")]  # 55.5 vs 55.04: within the 10 % tolerance
    assert p5.price_hour == 55.5 and "price_disagrees" not in str(p5.notes)
    [d] = df.attrs["disagreements"]
    assert (d.kept_origin, d.other_origin, d.other_price) == ("cache:gpuhunt", "bundled", 4.29)
    assert "date unknown" in str(d) and "2026-11-28" in str(d)


def test_a_plan_whose_shown_offer_two_sheets_disagree_on_says_so(tmp_path):
    from advisor.planner import plan

    _cache(tmp_path, "gpuhunt", [("lambda", "us-east-1", "gpu_1x_h100_sxm5", "H100", 1, 3.29, "gpuhunt", "2026-11-28")])
    p = plan("meta-llama/Llama-3.1-8B", tokens=20e6, methods=("lora",), providers=("lambda",), regions=("us-east-1",),
             gpus=("H100",))
    assert p.candidates[0].offer.instance_type == "gpu_1x_h100_sxm5" and p.candidates[0].cost.price_hour == 3.29
    [w] = [w for w in p.warnings if w.startswith("Price sources disagree")]
    assert "$3.29/h" in w and "$4.29/h" in w and "2026-11-28" in w


def test_an_older_dated_fetch_loses_to_a_newer_one_whatever_the_cache_order(tmp_path):
    from pricing.loader import load

    _cache(tmp_path, "a-new", [("acme", "x", "box", "H100", 1, 2.0, "a", "2026-11-29")])
    _cache(tmp_path, "b-old", [("acme", "x", "box", "H100", 1, 3.0, "b", "2026-10-01")])
    df, _ = load(include_bundled=False)
    [row] = df.itertuples()
    assert row.price_hour == 2.0 and row.observed_at == "2026-11-29T00:00:00Z" and "b-old" in row.notes
