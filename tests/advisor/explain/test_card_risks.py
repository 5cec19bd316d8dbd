"""Every claim the decision card makes about its pick holds (issue 46): its risks line reads the same facts as the
plan's warnings, the candidate's findings and the web page's price age, on real plans from the bundled data. A
risk is listed iff a fact about the top pick says it; "none flagged" is printed only when none does."""

from __future__ import annotations

from datetime import date

import pytest

from advisor.explain.card import decision_card
from advisor.explain.price_age import AGEING_DAYS
from advisor.launch.caveats import caveats
from advisor.planner import PlanRequest, plan
from advisor.results import Plan
from advisor.results.facts import FindingKind as K
from reports.render import render

TODAY = "2026-12-01"
OWN_SHEET = """provider,region,instance_type,gpu_model,gpu_count,gpu_memory_gb,vcpus,ram_gb,price_hour,currency,source,fetched_at
lambda,us-east-1,gpu_1x_a100_sxm4_80gb,A100-80GB,1,80,30,200,1.20,USD,quote 2026-11-28,2026-11-28
"""

PLANS = {
    "8b": dict(model="meta-llama/Llama-3.1-8B", tokens=100e6),
    "70b-qlora": dict(model="meta-llama/Llama-3.1-70B", tokens=100e6, methods=("qlora",)),
    "consumer": dict(model="google/medgemma-4b-it", tokens=50e6, methods=("lora",), gpus=("RTX4090", "L4", "A10G", "T4")),
    "gemma-tight": dict(model="google/gemma-3-27b-pt", tokens=50e6, methods=("qlora",), max_gpus=1,
                        gpus=("RTX4090", "RTX3090", "A10G", "A10", "L4", "A5000")),
    "eu-lora": dict(model="meta-llama/Llama-3.1-8B", tokens=200e6, methods=("lora",), regions=("EU",), no_marketplace=True),
    "vast-a100": dict(model="meta-llama/Llama-3.1-8B", tokens=100e6, methods=("lora",), providers=("vast",),
                      gpus=("A100", "A100-80GB")),
}
# The candidate findings that are a risk to the pick's numbers or its launch (each has its own risks line)
CANDIDATE_RISKS = {K.UNCALIBRATED, K.TIGHT, K.STACK_CAVEAT, K.LISTED_ONLY, K.SPOT_SUSPECT, K.FP16_NO_BF16,
                   K.GLOBAL_BATCH_CHANGED, K.HOST_UNKNOWN, K.BAND_CROSSES_BUDGET, K.BAND_CROSSES_DEADLINE}
# A plan warning about the top pick -> the risk the card must list for it
TOP_WARNINGS = {K.PRICE_DISPUTED: K.PRICE_DISPUTED, K.SHOWN_HOST_UNKNOWN: K.HOST_UNKNOWN, K.TOP_TIGHT: K.TIGHT,
                K.TOP_FP16: K.FP16_NO_BF16, K.TOP_GLOBAL_BATCH: K.GLOBAL_BATCH_CHANGED}


def bundled(today: str = TODAY, **fields) -> Plan:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPU_ADVISOR_TODAY", today)
        return plan(PlanRequest(**fields))


@pytest.fixture(scope="module")
def plans() -> dict[str, Plan]:
    return {name: bundled(**fields) for name, fields in PLANS.items()}


@pytest.fixture(scope="module")
def own_sheet(tmp_path_factory) -> Plan:
    sheet = tmp_path_factory.mktemp("own") / "quote.csv"
    sheet.write_text(OWN_SHEET)
    return bundled(model="meta-llama/Llama-3.2-1B", tokens=20e6, methods=("full",), prices=(str(sheet),),
                   providers=("lambda",), gpus=("A100-80GB",), time_value=0)


def price_state(p: Plan) -> str | None:
    """The top pick's price age from its date and the plan's clock, counted here (not through price_age)."""
    c = p.candidates[0]
    try:
        day = date.fromisoformat(c.offer.price_date[:10])
    except ValueError:  # no date, or the planner's "date unknown"
        return "undated_price"
    age = (date.fromisoformat(p.prices_as_of[:10]) - day).days
    if c.offer.stale or age > p.stale_days:
        return "stale_price"
    return "ageing_price" if p.stale_days - age <= AGEING_DAYS else None


def expected_risks(p: Plan) -> set[str]:
    """What the facts say about the top pick: its risky findings, the plan's warnings naming it, its price's age
    and the launch bundle's caveats for it."""
    c = p.candidates[0]
    out = {f.kind.value for f in c.findings if f.kind in CANDIDATE_RISKS}
    out |= {TOP_WARNINGS[f.kind].value for f in p.findings
            if f.kind in TOP_WARNINGS and f.get("rank", 1) == 1}
    out |= {K.UNCALIBRATED.value} if not c.timing.calibrated else set()
    out |= {K.TIGHT.value} if c.fit.tight else set()
    out |= {K.HOST_UNKNOWN.value} if not c.offer.host_known else set()
    out |= {price_state(p)} - {None}
    moe = p.model.params_active < p.model.params_total
    out |= {"launch_caveat"} if caveats(c, p.model.family, moe) else set()
    return out


@pytest.mark.parametrize("name", list(PLANS))
def test_risks_line_lists_a_risk_iff_a_fact_about_the_top_pick_says_it(plans, name):
    p = plans[name]
    card = decision_card(p)
    assert set(card["risk_kinds"]) == expected_risks(p)
    assert len(card["risks"]) == len(card["risk_kinds"])
    assert bool(card["risks"]) == bool(expected_risks(p))


def test_a_disputed_top_price_is_a_risk_with_both_prices(plans):
    """8B default: runpod's catalog $26.32/h is disputed by a dated $31.92/h; the card says both."""
    p = plans["8b"]
    disputed = [f for f in p.findings if f.kind is K.PRICE_DISPUTED and f["rank"] == 1]
    assert disputed, "the bundled data no longer disputes the 8B plan's #1 price; pick another plan"
    said = decision_card(p)["risks"][decision_card(p)["risk_kinds"].index(K.PRICE_DISPUTED.value)]
    assert f"${disputed[0]['catalog_price_hour']:,.2f}/h" in said
    assert f"${disputed[0]['price_hour']:,.2f}/h" in said


def test_a_marketplace_median_disputing_the_listed_price_is_a_warning_and_a_risk(plans):
    """vast's A100 listings keep their $1.87/h while the marketplace median says otherwise (the A100 40 GB's $1.18/h):
    each shown row gets the warning, and the card of #1 lists it with both prices."""
    p = plans["vast-a100"]
    market = [f for f in p.findings if f.kind is K.PRICE_DISPUTED and f.get("by") == "market"]
    by_rank = {c.rank: c for c in p.candidates}
    assert {int(f["rank"]) for f in market} == {c.rank for c in p.candidates[:3] if "market_disputed:" in c.offer.notes}
    assert any(f["rank"] == 1 for f in market), "the bundled vast A100 #1 is no longer market-disputed"
    for f in market:
        assert f["price_hour"] == by_rank[int(f["rank"])].offer.price_hour  # the row keeps its listed price
    top = next(f for f in market if f["rank"] == 1)
    card = decision_card(p)
    said = card["risks"][card["risk_kinds"].index(K.PRICE_DISPUTED.value)]
    assert f"${top['price_hour']:,.2f}/h" in said and f"${top['market_price_hour']:,.2f}/h" in said


def test_an_ageing_price_becomes_a_risk_as_the_clock_nears_the_limit():
    """One plan, two days: the pick's October price is fresh enough on 2026-11-15 and near the limit on 12-01."""
    fields = PLANS["70b-qlora"]
    early, late = bundled("2026-11-15", **fields), bundled(TODAY, **fields)
    assert early.candidates[0].offer.price_date == late.candidates[0].offer.price_date == "2026-10-10"
    assert "ageing_price" not in decision_card(early)["risk_kinds"]
    assert "ageing_price" in decision_card(late)["risk_kinds"]


def test_none_flagged_only_when_every_claim_of_it_holds(plans, own_sheet):
    """The report's "none flagged (calibrated hardware, memory not tight, fresh dated price, verified
    combination)" appears only on a card with no risks, and each of its four claims holds there."""
    for p in [own_sheet, *plans.values()]:
        card = decision_card(p)
        said_none = "none flagged" in render(p, "html")
        c = p.candidates[0]
        clean = not expected_risks(p)
        assert (card["risks"] == []) == clean == said_none
        if clean:
            assert c.timing.calibrated and not c.fit.tight and price_state(p) is None
            assert not any(f.kind is K.STACK_CAVEAT for f in c.findings)
    assert not expected_risks(own_sheet), "the fresh quote plan should have a clean top pick"


def test_the_web_card_says_the_risks_its_price_line_implies():
    """`serve`: the plan page's price line says how old #1's price is; its card lists that age as a risk when it is
    near or past the limit, and a disputed price as a risk, with the same words as the report's card."""
    import html
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[2]))
    from helpers.serve_helpers import LLAMA, q, serving

    with serving() as s:
        for query, fields in ((q(model=LLAMA, tokens="100M"), PLANS["8b"]),
                              (q(model="meta-llama/Llama-3.1-70B", tokens="100M", methods="qlora"),
                               PLANS["70b-qlora"])):
            page = s.get("/plan?" + query)
            assert page.status == 200
            text = html.unescape(page.text)
            card = decision_card(bundled(**fields))
            assert card["risks"] and "none flagged" not in text
            for risk in card["risks"]:
                assert risk in text
            if "ageing_price" in card["risk_kinds"]:
                assert "days old" in text
