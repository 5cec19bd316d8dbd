"""The planner's promises: what fits fits, ranking invariants, constraints, rejections, errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers.planner_inputs import MODEL, OFFERS, offer

from advisor.api import estimate_memory
from advisor.errors import AdvisorError, BadInput
from advisor.planner import plan
from advisor.results import Breakdown, Plan
from advisor.stacks import Shape, Stack


def run(offers=OFFERS, **kw) -> Plan:
    kw.setdefault("tokens", 20e6)
    kw.setdefault("top", 10_000)  # the bound PlanRequest accepts; more than these plans have
    kw.setdefault("time_value", 0)  # these tests are about cost ranking, fronts and views (time value: test_ranking_time_value.py)
    return plan(MODEL, offers=offers, **kw)


@pytest.fixture(scope="module")
def base() -> Plan:
    return run()


def key(c):
    return (c.offer.provider, c.offer.region, c.offer.instance_type, c.cost.spot, c.nodes, c.label)


def test_every_fitting_candidate_fits_per_the_estimator(base):
    assert base.candidates
    for c in base.candidates[:: max(1, len(base.candidates) // 60)]:
        st = c.stack
        stack = Stack(method=st.method, precision=st.precision, optimizer=st.optimizer,
                      grad_checkpointing=st.grad_checkpointing, attention=st.attention,
                      gpus=c.offer.gpu_count * c.nodes, sharding=st.sharding, offload=st.offload,
                      liger=c.stack.liger)
        assert stack == c.stack  # the candidate carries the stack it was estimated with
        est = estimate_memory(MODEL, stack, Shape(micro_batch=c.shape.micro_batch, seq_len=c.shape.seq_len,
                                                  grad_accum=c.shape.grad_accum))
        assert est.device_total == c.fit.peak_bytes
        assert est.device_total <= c.fit.usable_bytes * 0.9
        assert isinstance(c.memory, Breakdown) and c.memory.total == est.breakdown.total


def test_micro_batch_is_the_largest_safe_one_that_keeps_the_global_batch(base):
    from advisor.planner.configs import TIGHT_FRACTION

    checked = 0
    for c in base.candidates:
        per_gpu = c.timing.global_batch // (c.offer.gpu_count * c.nodes)
        assert c.shape.micro_batch * c.shape.grad_accum == per_gpu  # micro-batch × accumulation × GPUs = global batch
        if c.fit.tight:
            continue
        assert c.fit.peak_bytes <= c.fit.usable_bytes * 0.9 * (1 - TIGHT_FRACTION)
        larger = [d for d in range(c.shape.micro_batch + 1, per_gpu + 1) if per_gpu % d == 0]
        if larger:  # the next divisor of the per-GPU batch would leave the estimator's error band
            bigger = estimate_memory(MODEL, c.stack, Shape(micro_batch=larger[0], seq_len=c.shape.seq_len))
            assert bigger.device_total > c.fit.usable_bytes * 0.9 * (1 - TIGHT_FRACTION)
            checked += 1
    assert checked


def ranking_cost(c):
    return c.cost.usd_at_risk  # one quantile for every row, no hidden surcharge (tight is a tie-breaker)


def test_ranked_by_cost_at_the_ranking_quantile_except_near_ties(base):
    from advisor.planner.ranking import NEAR_TIE_PCT

    costs = [ranking_cost(c) for c in base.candidates]
    promoted = [any("near-tie" in n for n in c.notes) for c in base.candidates]
    plain = [k for k, p in zip(costs, promoted) if not p]
    assert plain == sorted(plain)
    for i, _c in enumerate(base.candidates):
        later = costs[i + 1:]
        if promoted[i] and later:  # within a near-tie of the cheapest option it was preferred to
            assert costs[i] <= min(later) * (1 + NEAR_TIE_PCT / 100) + 1e-9
    assert [c.rank for c in base.candidates] == list(range(1, len(costs) + 1))


def test_cheaper_price_never_ranks_worse_at_equal_time():
    twin = pd.concat([OFFERS, pd.DataFrame([offer("aws", "us-east-1", "g6e.cheap", "L40S", 1, 1.50, None, ram=32)])])
    p = run(twin, spot=False)
    rank = {key(c): c.rank for c in p.candidates}
    pairs = 0
    for c in p.candidates:
        if c.offer.instance_type == "g6e.cheap":
            dear = rank[("aws", "us-east-1", "g6e.xlarge", False, 1, c.label)]
            assert c.rank < dear
            pairs += 1
    assert pairs > 0


@pytest.mark.parametrize("constraint", [
    dict(providers=["aws"]), dict(regions=["us-west-1"]), dict(gpus=["A100-80GB"]), dict(spot=False),
    dict(max_gpus=1), dict(methods=("qlora",)), dict(budget=5.0), dict(deadline_hours=3.0),
])
def test_a_constraint_never_adds_candidates(base, constraint):
    p = run(**constraint)
    offer_key = lambda c: key(c)[:5]  # noqa: E731 - one row per offer: the stack shown may differ
    assert {offer_key(c) for c in p.candidates} <= {offer_key(c) for c in base.candidates} or p.notice
    assert p.assumptions["candidates_meeting_constraints"] <= base.assumptions["candidates_meeting_constraints"]


def test_time_falls_as_gpus_are_added_but_not_below_linear():
    h100 = pd.DataFrame([offer("x", "r", f"h100x{n}", "H100", n, 3.0 * n) for n in (1, 2, 4, 8)])
    p = run(h100, methods=("lora",), spot=False, distinct=False)
    best = {}
    for c in p.candidates:
        if c.stack.optimizer == "adamw" and not c.stack.grad_checkpointing and c.stack.sharding in ("none", "ddp"):
            best.setdefault(c.offer.gpu_count, c.timing.train_hours)
    assert sorted(best) == [1, 2, 4, 8]
    for n in (2, 4, 8):
        assert best[n] < best[n // 2]
        assert best[n] >= best[1] / n


def test_ranking_shows_one_row_per_offer_and_node_count_unless_asked_for_all():
    distinct, every = run(), run(distinct=False)
    def key(c):
        return c.offer.provider, c.offer.region, c.offer.instance_type, c.cost.spot, c.nodes

    keys = [key(c) for c in distinct.candidates]
    assert len(keys) == len(set(keys))
    assert len(every.candidates) > len(distinct.candidates)
    # the same offers, each once (near-ties may order them differently from the full ranking)
    assert set(keys) == {key(c) for c in every.candidates}


def test_too_small_gpu_is_rejected_with_the_memory_it_needs():
    a10g = pd.DataFrame([offer("aws", "us-east-1", "g5.xlarge", "A10G", 1, 1.006, 0.45, ram=16)])
    p = run(a10g, methods=("full",))
    assert p.candidates == [] and "Nothing fits" in p.notice
    reason = p.rejected[0].reason
    assert reason.startswith("A10G 24 GB: full fine-tuning needs") and " GB per GPU" in reason
    assert p.rejected[0].count > 0 and "g5.xlarge" in p.rejected[0].example


def test_offload_needs_host_ram():
    small_ram = pd.DataFrame([offer("x", "r", "one-h100", "H100", 1, 3.0, ram=16)])
    p = run(small_ram, methods=("full",))
    assert not any(c.stack.offload != "none" for c in p.candidates)
    assert any("host RAM" in r.reason for r in p.rejected)


def test_budget_nothing_meets_shows_the_closest():
    p = run(budget=0.01, top=5)
    assert "budget" in p.notice and len(p.candidates) == 5
    assert any("over the budget" in r.reason for r in p.rejected)


def test_pareto_front_is_not_dominated(base):
    front = base.pareto
    assert front and front[0].cost.usd == base.candidates[0].cost.usd
    for a in front:  # at the figures the front is drawn at: each row's ranking quantile
        assert not any(c.cost.usd_at_risk <= a.cost.usd_at_risk and c.timing.hours_at_risk < a.timing.hours_at_risk
                       for c in base.candidates)
    assert [c.timing.hours_at_risk for c in front] == sorted((c.timing.hours_at_risk for c in front), reverse=True)


def test_baseline_is_full_finetune_on_cheapest_instance_where_it_fits(base):
    b = base.baseline
    assert b.stack.method == "full" and not b.cost.spot
    full_prices = [c.cost.price_hour for c in run(distinct=False).candidates if c.stack.method == "full" and not c.cost.spot]
    assert b.cost.price_hour == min(full_prices)
    assert base.saving_vs_baseline_usd == pytest.approx(b.cost.usd_at_risk - base.candidates[0].cost.usd_at_risk)


def test_best_per_gpu_and_provider(base):
    assert set(base.best_per_gpu) == {c.offer.gpu_model for c in base.candidates}
    for g, c in base.best_per_gpu.items():
        assert ranking_cost(c) <= min(ranking_cost(x) for x in base.candidates if x.offer.gpu_model == g) + 1e-9
    assert set(base.best_per_provider) == {"aws", "lambda", "runpod", "gcp"}


def test_spot_is_shown_beside_the_on_demand_ranking_and_compared_like_with_like():
    p = run(spot=True, distinct=False)
    assert not any(c.cost.spot for c in p.candidates)  # the ranking compares on-demand prices
    s = p.spot_alternative
    assert s is not None and s.cost.spot and s.cost.usd == pytest.approx(s.cost.spot_usd)
    same = next(c for c in p.candidates if (c.offer.provider, c.offer.region, c.offer.instance_type, c.label) ==
                (s.offer.provider, s.offer.region, s.offer.instance_type, s.label))
    assert s.cost.usd < same.cost.usd and s.timing.hours > same.timing.hours  # cheaper, slower (interruptions)
    assert s.cost.on_demand_usd == pytest.approx(same.cost.usd) and same.cost.spot_usd == pytest.approx(s.cost.usd)
    assert s.timing.interruption_hours > same.timing.interruption_hours
    assert run().spot_alternative is None  # on-demand only unless asked


def test_spot_interruptions_grow_with_the_number_of_instances():
    from advisor.planner.costing import interruption_rate

    one, four = interruption_rate(8, 1, True), interruption_rate(32, 4, True)
    assert four == pytest.approx(4 * one)
    assert interruption_rate(8, 1, False) < one


def test_unknown_provider_bills_per_started_hour():
    p = run(pd.DataFrame([offer("tinycloud", "r", "box", "H100", 1, 2.0)]), methods=("qlora",), setup_hours=0.0)
    c = p.candidates[0]
    assert c.cost.usd == pytest.approx(-(-c.timing.hours // 1) * 2.0)


def test_two_nodes_of_eight_gpus_when_allowed():
    p = run(pd.DataFrame([offer("aws", "us-east-1", "p5.48xlarge", "H100", 8, 98.32, interconnect="nvlink+efa")]),
            methods=("full",), max_nodes=2, tokens=500e6, global_batch=128)
    one = min((c for c in p.candidates if c.nodes == 1), key=lambda c: c.timing.train_hours).timing
    two = min((c for c in p.candidates if c.nodes == 2), key=lambda c: c.timing.train_hours).timing
    assert two.train_hours < one.train_hours
    # twice the GPUs at most halve the hours at equal efficiency: the second node's memory may buy a larger
    # micro-batch (a higher MFU, up to the plausibility cap), never more than 2x at the same MFU
    assert one.train_hours * one.mfu / 2 <= two.train_hours * two.mfu * (1 + 1e-9)


def test_unknown_provider_region_or_gpu_lists_valid_ones():
    with pytest.raises(BadInput, match="--providers.*valid: aws, gcp, lambda, runpod"):
        run(providers=["awz"])
    with pytest.raises(BadInput, match="--regions.*us-east-1"):
        run(regions=["mars-1"])
    with pytest.raises(BadInput, match="--gpu.*valid: A100-80GB, A10G, H100, L40S"):
        run(gpus=["B200"])
    with pytest.raises(Exception, match="unknown GPU") as err:
        run(gpus=["Z9000"])
    assert err.value.exit_code == 2


def test_no_usable_price_sheet_points_to_prices_command():
    with pytest.raises(AdvisorError, match="gpu-advisor prices"):
        run(OFFERS.iloc[0:0])


def test_json_validates_against_plan(base):
    text = base.model_dump_json()
    again = Plan.model_validate_json(text)
    data = json.loads(text)
    assert {"candidates", "others", "pareto_refs", "baseline_ref", "rejected", "assumptions"} <= set(data)
    first = data["candidates"][0]
    assert {"offer", "stack", "shape", "fit", "timing", "cost"} <= set(first)
    for field in ("provider", "region", "instance_type", "gpu_model", "gpu_count", "spot", "method", "precision",
                  "optimizer", "micro_batch", "grad_accum", "peak_memory_bytes", "hours", "cost_usd", "price_date"):
        assert field not in first  # each number once (schema 3): the flat view is computed, not stored
        assert again.candidates[0].flat()[field] == base.candidates[0].flat()[field]
    assert again.candidates[0] == base.candidates[0]


def test_estimator_is_injectable():
    calls = []

    def stand_in(model, stack, shape):
        calls.append(stack)
        return estimate_memory(model, stack, shape).model_copy(update={"device_total": 10**9 * shape.micro_batch})

    p = run(pd.DataFrame([offer("x", "r", "a10g", "A10G", 1, 1.0)]), methods=("full",), estimator=stand_in)
    assert calls and p.candidates and p.candidates[0].fit.peak_bytes == 10**9 * p.candidates[0].shape.micro_batch


def test_an_instance_billed_as_another_at_the_same_price_is_one_offer_and_the_common_type_stays():
    a3 = pd.DataFrame([offer("gcp", "us-central1", "a3-edgegpu-8g", "H100", 8, 88.49, ram=1872),
                       offer("gcp", "us-central1", "a3-highgpu-8g", "H100", 8, 88.49, ram=1872),
                       offer("gcp", "us-west4", "a3-edgegpu-8g", "H100", 8, 99.65, ram=1872)])  # no twin there
    p = run(a3)
    shown = {(c.offer.region, c.offer.instance_type) for c in p.candidates}
    assert ("us-central1", "a3-highgpu-8g") in shown and ("us-central1", "a3-edgegpu-8g") not in shown
    assert ("us-west4", "a3-edgegpu-8g") in shown
    [r] = [r for r in p.rejected if r.reason.startswith("billed as another instance type")]
    assert (r.count, r.example) == (1, "a3-edgegpu-8g")


def test_a_row_a_dated_observation_left_without_a_price_is_ruled_out_with_that_reason():
    rows = pd.DataFrame([offer("gcp", "us-central1", "a3-highgpu-8g", "H100", 8, 88.49, ram=1872),
                         offer("gcp", "asia-east1", "a3-megagpu-8g", "H100", 8, float("nan"), ram=1872)])
    rows["price_check"] = [None, "disputed"]
    p = run(rows)
    assert {c.offer.region for c in p.candidates} == {"us-central1"}
    [r] = [r for r in p.rejected if r.reason.startswith("catalog price disputed by a dated observation")]
    assert (r.count, r.example) == (1, "a3-megagpu-8g")
