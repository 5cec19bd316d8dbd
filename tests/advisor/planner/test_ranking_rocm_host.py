"""An AMD row's bundle installs CUDA builds (issue 46): requirements.txt pins PyPI's torch (a CUDA build) and a flash
stack builds flash-attn's CUDA kernels, so an MI300X row cannot launch as written on its ROCm host. Every AMD row
carries the `rocm-host` stack caveat (ranking.STACK_CAVEATS), says which pieces, and the risk margin prices it."""

from __future__ import annotations

import pandas as pd
import pytest

from advisor.explain.card import decision_card
from advisor.planner import PlanRequest, configs, plan, ranking
from advisor.results import Plan
from advisor.results.facts import FindingKind as K
from advisor.stacks import Stack
from pricing.gpus import get_gpu

TODAY = "2026-12-01"


def bundled(**fields) -> Plan:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPU_ADVISOR_TODAY", TODAY)
        return plan(PlanRequest(**fields))


def every_row(p: Plan):
    return list({id(c): c for c in [*p.candidates, *p.pareto, *p.best_per_gpu.values()]}.values())


def rocm_findings(c):
    return [f for f in c.findings if f.kind is K.STACK_CAVEAT and f["caveat"] == "rocm-host"]


def test_the_caveat_names_the_cuda_pieces_of_the_stack():
    assert ranking.rocm_cuda_pieces(Stack(method="lora", attention="flash")) == ("torch", "flash-attn")
    assert ranking.rocm_cuda_pieces(Stack(method="lora", attention="sdpa")) == ("torch",)
    assert "rocm-host" in ranking.stack_caveats(get_gpu("MI300X"), Stack(method="full"))
    assert "rocm-host" in ranking.stack_caveats(get_gpu("MI250X"), Stack(method="lora"))
    for nvidia in ("H100", "A100-80GB", "GH200", "RTX4090"):
        assert "rocm-host" not in ranking.stack_caveats(get_gpu(nvidia), Stack(method="lora"))


@pytest.fixture(scope="module")
def lora_8b() -> Plan:
    return bundled(model="meta-llama/Llama-3.1-8B", tokens=100e6, methods=("lora",))


def test_every_amd_row_of_a_real_plan_carries_it_and_no_nvidia_row_does(lora_8b):
    rows = every_row(lora_8b)
    amd = [c for c in rows if get_gpu(c.offer.gpu_model).vendor.upper() == "AMD"]
    assert amd, "the bundled data has no AMD row in this plan"
    for c in rows:
        found = rocm_findings(c)
        if c in amd:
            assert "rocm-host" in c.caveats and len(found) == 1
            assert found[0]["pieces"] == ",".join(ranking.rocm_cuda_pieces(c.stack))
            note = next(n for n in c.notes if n.startswith("stack caveat: ROCm host"))
            assert ("flash-attn" in note) == (c.stack.attention == "flash")
        else:
            assert "rocm-host" not in c.caveats and not found


def test_an_amd_top_pick_lists_the_caveat_as_a_risk(lora_8b):
    top = lora_8b.candidates[0]
    if get_gpu(top.offer.gpu_model).vendor.upper() != "AMD":
        pytest.skip(f"the 8B LoRA plan's #1 is {top.offer.gpu_model} now, not an AMD row")
    assert K.STACK_CAVEAT.value in decision_card(lora_8b)["risk_kinds"]


def _sheet(*rows) -> pd.DataFrame:
    return pd.DataFrame([dict(provider=provider, region="us-east-1", instance_type=instance, gpu_model=gpu, gpu_count=1,
                              gpu_memory_gb=get_gpu(gpu).memory_gb, vcpus=32, ram_gb=500, price_hour=price,
                              spot_price_hour=None, currency="USD", source=f"test-{provider}",
                              fetched_at="2026-11-25T00:00:00Z", interconnect="")
                         for provider, instance, gpu, price in rows])


@pytest.mark.parametrize(("a100_price", "first"), [(1.05, "A100-80GB"), (1.2, "MI300X")])
def test_a_calibrated_mi300x_still_loses_to_a_safe_row_within_the_margin(monkeypatch, a100_price, first):
    """With the MI300X's time model calibrated (as a measured run makes it), the ROCm caveat alone makes the row
    risky: a safe A100-80GB row 5 % dearer heads the plan; 20 % dearer (past the 10 % margin) it does not."""
    real = configs.is_calibrated
    monkeypatch.setattr(configs, "is_calibrated", lambda gpu, stack: gpu.name == "MI300X" or real(gpu, stack))
    sheet = _sheet(("amdcloud", "1x-MI300X", "MI300X", 1.0), ("nvcloud", "1x-A100", "A100-80GB", a100_price))
    p = plan("meta-llama/Llama-3.1-8B", offers=sheet, tokens=20e6, methods=("lora",), time_value=0)
    amd = next(c for c in every_row(p) if c.offer.gpu_model == "MI300X")
    assert amd.timing.calibrated and not amd.fit.tight and amd.caveats == ["rocm-host"]
    assert p.candidates[0].offer.gpu_model == first
    if first == "A100-80GB":
        assert p.candidates[0].tie_rule == ranking.RISK_RULE
