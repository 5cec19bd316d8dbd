"""A top line signed as printed (issue 32): one ranking basis in sight, relative near-ties settled by stated
rules, the training recipe kept, constraints checked at the risk quantile with the band said, remedies that
search, spot compared with #1, and where the data may go."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.explain import note
from advisor.planner import plan, ranking, remedy
from advisor.planner.offers import FRESH_RULE
from advisor.results import FindingKind, Plan
from pricing.gpus import get_gpu

ROOT = Path(__file__).resolve().parents[3]
TODAY = "2026-12-01"
DATE = "2026-11-25T00:00:00Z"


def bundled(**fields) -> Plan:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPU_ADVISOR_TODAY", TODAY)
        return plan(**fields)


@pytest.fixture(scope="module")
def default_8b() -> Plan:
    return bundled(request="meta-llama/Llama-3.1-8B", tokens=100e6)


@pytest.fixture(scope="module")
def full_70b() -> Plan:
    return bundled(request="meta-llama/Llama-3.1-70B", tokens=1e9, methods=("full",), max_nodes=4)


def offer(provider, instance, gpu, count, price, region="r1", ram=None, vcpus=None, **kw):
    row = dict(provider=provider, region=region, instance_type=instance, gpu_model=gpu, gpu_count=count,
               gpu_memory_gb=get_gpu(gpu).memory_gb, vcpus=vcpus if vcpus is not None else 16 * count,
               ram_gb=ram if ram is not None else 200 * count, price_hour=price, spot_price_hour=kw.pop("spot", None),
               currency="USD", source=f"test-{provider}", fetched_at=DATE, interconnect="")
    row.update(kw)
    return row


# ----------------------------------------------------------------- one ranking basis, near-ties, Pareto

@pytest.mark.parametrize("name", ["default_8b", "full_70b"])
def test_no_row_is_more_than_the_near_tie_dearer_than_a_row_below_it_without_a_mark(name, request):
    p = request.getfixturevalue(name)
    q = p.ranking["quantile"]
    assert q == "p80" and p.ranking["near_tie_pct"] == ranking.NEAR_TIE_PCT
    assert all(c.timing.risk_quantile == 0.8 for c in p.candidates)  # one quantile, calibrated or not
    tv = p.ranking["time_value_usd_per_hour"]
    assert p.ranking["key"] == "total" and tv == ranking.DEFAULT_TIME_VALUE
    totals = [c.cost.usd_at_risk + c.timing.hours_at_risk * tv for c in p.candidates]  # what the rows rank on
    for i, c in enumerate(p.candidates):
        below = range(i + 1, len(totals))
        cheaper = [j for j in below if totals[j] < totals[i] * (1 - 1e-9)]
        if cheaper:
            if c.tie_rule == FRESH_RULE:  # a stale price never heads the plan while a fresh one ranks (DESIGN)
                assert c.rank == 1 and not c.offer.stale
                continue
            assert c.tie_rule in (*ranking.TIE_BREAKERS, ranking.RISK_RULE), (c.rank, totals[i])
            share = (ranking.RISK_MARGIN_PCT if c.tie_rule == ranking.RISK_RULE else ranking.NEAR_TIE_PCT) / 100
            for j in cheaper:  # a share of the compute cost (the time value never widens a near-tie)
                assert totals[i] <= totals[j] + share * max(p.candidates[j].cost.usd_at_risk, c.cost.usd_at_risk) + 1e-6
            assert any(n.startswith("preferred in a near-tie") for n in c.notes)


@pytest.mark.parametrize("name", ["default_8b", "full_70b"])
def test_the_pareto_front_has_no_dominated_point_at_the_ranked_figures(name, request):
    p = request.getfixturevalue(name)
    front = [(c.cost.usd_at_risk, c.timing.hours_at_risk) for c in p.pareto]
    assert len(front) >= 2
    for a in front:
        assert not any(b != a and b[0] <= a[0] and b[1] <= a[1] for b in front), (a, front)
    shown = [(c.cost.usd_at_risk, c.timing.hours_at_risk) for c in p.candidates]
    for cost, hours in shown:  # no shown row beats a front point on both
        assert not any(cost < a[0] and hours < a[1] for a in front)


def test_the_table_shows_the_ranked_figure_with_its_band_and_names_the_quantile(default_8b):
    from cli.plan import render

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "100000")
        text = render(default_8b, "table")
    head = text.splitlines()[0]
    assert "cost p80" in head and "p10-p90" in head and "hours p80" in head
    c = default_8b.candidates[0]
    first = text.splitlines()[1].split()
    assert first[1:4] == [f"${c.cost.usd_at_risk:,.2f}", f"${c.cost.usd_low:,.2f}-${c.cost.usd_high:,.2f}",
                          f"{c.timing.hours_at_risk:,.1f}"]
    assert first[4] == f"({c.timing.hours_low:,.1f}-{c.timing.hours_high:,.1f})"
    assert ("ranked by total = cost + hours × $22.22/h (--time-value: one ML engineer's loaded cost per wall-clock "
            "hour, from BLS wage data; 0 ranks on cost alone) at p80 (the cost and hours columns; --risk), band "
            "p10-p90 beside") in " ".join(text.split())
    assert "fewer GPUs and nodes" in text


def _frames(n, **over):
    """Synthetic fitting / priced / scored frames of n candidates, every preference equal unless overridden."""
    fitting = pd.DataFrame({"global_batch": [64] * n, "gpus": [1] * n, "nodes": [1] * n, "tight": [False] * n,
                            "calibrated": [True] * n, "caveats": [False] * n, "bf16": [True] * n,
                            "method": ["lora"] * n})
    priced = pd.DataFrame({"provider": ["acme"] * n, "notes": [""] * n, "ram_gb": [200.0] * n,
                           "vcpus": [32.0] * n, "price_date": ["2026-11-01"] * n})
    for k, v in over.items():
        (fitting if k in fitting else priced)[k] = v
    sc = pd.DataFrame({"cfg_row": range(n), "offer_row": range(n)})
    return sc, fitting, priced


class _Req:
    sequences_per_step = 64


# For each rule: the cheaper candidate's (worse) value and the dearer one's (better) value.
RULES = {
    "requested global batch kept": {"global_batch": [63, 64]},
    "fewer GPUs and nodes": {"gpus": [4, 2]},
    "clear of the memory limit": {"tight": [True, False]},
    "calibrated": {"calibrated": [False, True]},
    "no stack caveat": {"caveats": [True, False]},
    "non-marketplace": {"provider": ["vast", "acme"]},
    "known host": {"ram_gb": [np.nan, 200.0]},
    "dated price": {"price_date": ["date unknown", "2026-11-01"]},
    "bf16": {"bf16": [False, True]},
    "unquantized": {"method": ["qlora", "lora"]},
}


@pytest.mark.parametrize("rule", list(RULES))
def test_each_tie_breaker_promotes_a_dearer_row_only_within_the_near_tie_and_says_so(rule):
    assert list(RULES) == list(ranking.TIE_BREAKERS)  # the stated order
    sc, fitting, priced = _frames(2, **RULES[rule])
    prefs = ranking.preferences(sc, fitting, priced, _Req())
    assert list(prefs) == list(ranking.TIE_BREAKERS)
    inside = np.array([100.0, 100.0 + ranking.NEAR_TIE_PCT * 0.9])
    ranked, why, rules = ranking.prefer_in_near_ties(np.arange(2), inside, prefs, 10,
                                                      fitting["gpus"].to_numpy(), fitting["nodes"].to_numpy())
    assert list(ranked) == [1, 0] and rules == {1: rule}
    assert why[1].kind is FindingKind.NEAR_TIE and why[1]["rule"] == rule and "near-tie" in note(why[1])
    outside = np.array([100.0, 100.0 + ranking.NEAR_TIE_PCT * 1.1])
    ranked, why, rules = ranking.prefer_in_near_ties(np.arange(2), outside, prefs, 10)
    assert list(ranked) == [0, 1] and not rules


def test_an_earlier_rule_wins_over_a_later_one():
    """Fewer GPUs (rule 2) beats calibrated (rule 4): the 2-GPU uncalibrated row before the 4-GPU calibrated one."""
    sc, fitting, priced = _frames(2, gpus=[4, 2], calibrated=[True, False])
    prefs = ranking.preferences(sc, fitting, priced, _Req())
    ranked, _, rules = ranking.prefer_in_near_ties(np.arange(2), np.array([10.0, 10.2]), prefs, 10)
    assert list(ranked) == [1, 0] and rules[1] == "fewer GPUs and nodes"


# ----------------------------------------------------------------- the recipe kept

def test_no_top_row_of_the_default_8b_plan_changes_the_global_batch_without_saying_so(default_8b):
    for c in default_8b.candidates[:10]:
        assert c.timing.global_batch == 64 or any("global batch" in n for n in c.notes), c.rank


def test_a_gpu_count_that_does_not_divide_the_batch_is_dropped_while_one_that_does_exists():
    model = "meta-llama/Llama-3.1-8B"
    sheet = pd.DataFrame([offer("acme", "3x-H100", "H100", 3, 3 * 1.5), offer("beta", "2x-H100", "H100", 2, 2 * 2.5)])
    p = plan(model, offers=sheet, tokens=50e6, methods=("lora",))
    assert {c.offer.gpu_count for c in p.candidates} == {2}
    assert any("would change the requested global batch" in r.reason for r in p.rejected)
    only = plan(model, offers=sheet.iloc[:1], tokens=50e6, methods=("lora",))  # the only way to run
    c = only.candidates[0]
    assert c.timing.global_batch == 63 and any("global batch of 63" in n for n in c.notes)


def test_the_64k_plan_takes_at_least_100_optimizer_steps_by_default_or_warns():
    from advisor.planner import PlanRequest

    r = PlanRequest(model="microsoft/Phi-3.5-mini-instruct", tokens="100M", seq_len=65536, methods="lora")
    assert r.optimizer_steps >= 100 and r.sequences_per_step * r.seq_len == 2**19
    short = PlanRequest(model="microsoft/Phi-3.5-mini-instruct", tokens="10M", seq_len=65536, methods="lora")
    assert short.optimizer_steps < 100
    p = bundled(request=short)
    warning = next(w for w in p.warnings if w.startswith("Only "))
    assert "--global-batch-tokens" in warning
    assert PlanRequest(model="x", tokens=1e6).sequences_per_step == 64  # short context unchanged


# ----------------------------------------------------------------- constraints at the risk quantile, remedies

def test_a_budget_is_met_at_the_risk_quantile_or_the_band_crossing_is_said():
    p = bundled(request="meta-llama/Llama-3.1-70B", tokens=1e9, methods=("qlora",), budget=500)
    if p.constraints_met:
        c = p.candidates[0]
        assert c.cost.usd_at_risk <= 500
        if c.cost.usd_high > 500:
            assert any(n.startswith("band crosses the budget") for n in c.notes)
            assert any("band crosses the budget" in w for w in p.warnings)
            from advisor.explain.card import decision_card

            assert any("band crosses" in r.lower() for r in decision_card(p)["risks"])
    else:
        assert "p80" in p.notice and p.remedy


def test_the_deadline_remedy_searches_more_nodes_with_the_exact_flag_and_bounded_work():
    p = bundled(request="meta-llama/Llama-3.1-70B", tokens=2e9, methods=("full",), deadline_hours=12)
    assert not p.constraints_met
    assert "--max-nodes 8" in p.remedy and "at p80" in p.remedy
    assert 1 <= p.assumptions["remedy_plans"] <= remedy.REMEDY_MAX_PLANS


def test_the_remedy_levers_cover_every_limit_the_user_set():
    from advisor.planner import PlanRequest

    r = PlanRequest(model="x", tokens=1e6, methods="lora", providers="aws", max_gpus=4, deadline_hours=5)
    flags = [f for f, _ in remedy.levers(r)]
    assert flags[0] == "--max-nodes 8 without --max-gpus"
    assert any("--providers" in f for f in flags) and "--spot" in flags
    assert any(f.startswith("--methods ") for f in flags) and len(flags) <= remedy.REMEDY_MAX_PLANS


# ----------------------------------------------------------------- spot, regions, marketplace, hosts

def test_the_spot_line_states_its_saving_against_the_on_demand_number_one():
    from advisor.explain.spot import spot_line

    sheet = pd.DataFrame([offer("acme", "1x-H100", "H100", 1, 3.0, spot=1.2, observed_at="2026-11-20"),
                          offer("beta", "1x-A100", "A100-80GB", 1, 1.4)])
    p = plan("meta-llama/Llama-3.1-8B", offers=sheet, tokens=50e6, methods=("lora",), spot=True)
    s, top = p.spot_alternative, p.candidates[0]
    assert s is not None and not top.cost.spot
    line = spot_line(p, s)
    assert f"against the on-demand #1 ({top.offer.provider} {top.offer.instance_type}, ${top.cost.usd_at_risk:,.2f}" in line
    assert "expected interruptions" in line and s.offer.price_date in line


def test_regions_keep_the_host_in_a_country_or_continent_and_the_card_names_it():
    from advisor.explain.card import decision_card

    sheet = pd.DataFrame([offer("aws", "p5", "H100", 1, 2.0, region="us-east-1"),
                          offer("aws", "p5", "H100", 1, 2.5, region="eu-central-1"),
                          offer("vast", "1x-H100", "H100", 1, 1.5, region="Japan, JP, AS")])
    de = plan("meta-llama/Llama-3.1-8B", offers=sheet, tokens=20e6, methods=("lora",), regions="DE")
    assert {c.offer.country for c in de.candidates} == {"DE"}
    assert "Germany (DE)" in decision_card(de)["figures"][2]["detail"]
    eu_us = plan("meta-llama/Llama-3.1-8B", offers=sheet, tokens=20e6, methods=("lora",), regions="US,EU")
    assert {c.offer.country for c in eu_us.candidates} == {"DE", "US"}
    anywhere = plan("meta-llama/Llama-3.1-8B", offers=sheet, tokens=20e6, methods=("lora",))
    assert anywhere.candidates[0].offer.provider == "vast"
    no_peer = plan("meta-llama/Llama-3.1-8B", offers=sheet, tokens=20e6, methods=("lora",), no_marketplace=True)
    assert all(c.offer.provider != "vast" for c in no_peer.candidates)


@pytest.mark.parametrize("code", ["XX", "E1"])
def test_a_bad_region_code_is_one_line_and_exit_2(code):
    r = subprocess.run([sys.executable, "-m", "advisor", "plan", "--model", "meta-llama/Llama-3.1-8B", "--tokens",
                        "1M", "--regions", code], capture_output=True, text=True, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--regions" in r.stderr


def test_an_unknown_host_is_labelled_and_loses_a_near_tie_to_a_known_one():
    from cli.plan import render

    sheet = pd.DataFrame([offer("acme", "1x-H100", "H100", 1, 2.00, ram=float("nan")),
                          offer("beta", "1x-H100b", "H100", 1, 2.03)])
    p = plan("meta-llama/Llama-3.1-8B", offers=sheet, tokens=50e6, methods=("lora",))
    known, unknown = p.candidates[:2]
    assert (known.offer.provider, unknown.offer.provider) == ("beta", "acme") and known.tie_rule == "known host"
    assert not unknown.offer.host_known and any("host RAM unknown" in n for n in unknown.notes)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "100000")
        assert "HOST?" in render(p, "table")
    alone = plan("meta-llama/Llama-3.1-8B", offers=sheet.iloc[:1], tokens=50e6, methods=("lora",))
    assert any("host RAM unknown" in w for w in alone.warnings)  # #1 says so


def test_a_marketplace_median_confirms_prices_but_is_never_an_offer():
    from pricing import load_offers

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPU_ADVISOR_TODAY", TODAY)
        df = load_offers()
    assert not df["instance_type"].astype(str).str.contains("marketplace-median").any()


def test_a_tie_rule_never_promotes_a_row_that_takes_twice_the_wall_time_of_the_one_it_passes():
    """Fewer GPUs win a near-tie at similar speed, but not 16 h against 4.5 h for 2% less money."""
    key = np.array([100.0, 102.0])  # #0 cheaper, #1 within the near-tie and on fewer GPUs
    prefs = {n: np.zeros(2, int) for n in ranking.TIE_BREAKERS}
    prefs["fewer GPUs and nodes"] = np.array([2 * 1024 + 1, 1 * 1024 + 1])
    close = np.array([4.5, 5.0])
    ranked, why, _ = ranking.prefer_in_near_ties(np.array([0, 1]), key, prefs, 2, hours=close)
    assert list(ranked) == [1, 0] and why  # similar speed: the simpler row wins and says why
    slow = np.array([4.5, 4.5 * ranking.SLOWER_LIMIT])
    ranked, why, _ = ranking.prefer_in_near_ties(np.array([0, 1]), key, prefs, 2, hours=slow)
    assert list(ranked) == [0, 1] and not why  # twice the wall time: the cheaper, faster row keeps #1
