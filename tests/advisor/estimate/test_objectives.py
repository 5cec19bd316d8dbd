"""DPO and GRPO priced like SFT: what `estimate` and `plan` promise about them (advisor/estimate/objectives)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers.cli_run import gpu_advisor, one_line_error

from advisor.api import estimate_memory
from advisor.model.catalog import load_model
from advisor.objective import Objective
from advisor.planner import plan
from advisor.stacks import Shape, Stack
from pricing.gpus import get_gpu

MODEL = "meta-llama/Llama-3.1-8B"
H100 = int(get_gpu("H100").usable_bytes)
DATE = "2026-11-25T00:00:00Z"


def estimate_json(capsys, *args) -> dict:
    code, out, err = gpu_advisor(capsys, "estimate", MODEL, *args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


# --- DPO ---------------------------------------------------------------------------------------------------


def test_dpo_lora_needs_more_memory_than_sft_at_the_same_shape_and_says_how_the_reference_is_held(capsys):
    sft = estimate_json(capsys, "--method", "lora")
    dpo = estimate_json(capsys, "--method", "lora", "--objective", "dpo")
    assert dpo["device_total"] > sft["device_total"]
    assert dpo["objective"]["rows_per_micro_batch"] == 2  # chosen and rejected of one pair
    assert "adapter switched off" in dpo["objective"]["reference"]
    assert dpo["stack"]["objective"]["kind"] == "dpo"
    assert "weights.reference" not in dpo["components"]  # no second copy under LoRA


def test_full_dpo_adds_a_reference_copy_sharded_like_the_policy():
    dpo = Objective(kind="dpo")
    z3 = estimate_memory(MODEL, Stack(method="full", gpus=8, sharding="zero3", objective=dpo), Shape(seq_len=1024))
    ddp = estimate_memory(MODEL, Stack(method="full", gpus=8, sharding="zero2", objective=dpo), Shape(seq_len=1024))
    sft = estimate_memory(MODEL, Stack(method="full", gpus=8, sharding="zero3"), Shape(micro_batch=2, seq_len=1024))
    ref = z3.components["weights.reference"].bytes
    assert ref == pytest.approx(z3.model.params_total * 2 / 8, rel=0.01)  # bf16 copy, 8 shards
    assert ddp.components["weights.reference"].bytes == pytest.approx(z3.model.params_total * 2, rel=0.01)  # stage 0
    assert "sharded like the policy over 8 GPUs" in z3.objective.reference
    assert z3.breakdown.weights > sft.breakdown.weights + 0.9 * ref


def test_precomputed_reference_holds_no_copy_and_runs_no_reference_forward():
    copy = estimate_memory(MODEL, Stack(method="full", objective=Objective(kind="dpo")), Shape(seq_len=512))
    pre = estimate_memory(MODEL, Stack(method="full", objective=Objective(kind="dpo", ref_model="precomputed")),
                          Shape(seq_len=512))
    assert "weights.reference" in copy.components and "weights.reference" not in pre.components
    assert "reference forward" in copy.objective.phases and "reference forward" not in pre.objective.phases


# --- GRPO --------------------------------------------------------------------------------------------------


def test_grpo_colocate_shows_vllms_share_and_a_kv_cache_growing_with_generations_and_completions(capsys):
    def kv(*args):
        d = estimate_json(capsys, "--method", "lora", "--objective", "grpo", "--vllm", "colocate", "--gpu", "H100",
                          *args)
        assert d["breakdown"]["generation"] == d["objective"]["vllm"]["budget"] == -(-H100 * 3 // 10)
        return d["objective"]["generation"]["kv_cache_bytes"]

    base = kv()
    assert kv("--num-generations", "16") == pytest.approx(2 * base, rel=0.01)
    assert kv("--max-completion-length", "1536") == pytest.approx(base * (512 + 1536) / 1024, rel=0.02)


def test_transformers_generation_puts_its_kv_cache_on_the_training_gpu():
    o = Objective(kind="grpo", num_generations=8, max_completion_length=1024)
    est = estimate_memory(MODEL, Stack(method="lora", objective=o), Shape(micro_batch=8, seq_len=512 + 1024,
                                                                            grad_accum=1))
    kv = est.components["generation.kv_cache"].bytes
    # 8 completions x (512 + 1024 - 1) positions x 32 layers x 8 kv heads x 128 x (2 + 2) B
    assert kv == 8 * (512 + 1024 - 1) * 32 * 8 * 128 * 4
    assert est.objective.phases["generation"] > est.components["weights.base"].bytes + kv


def test_trls_fp32_load_keeps_fp32_keys_in_the_generation_cache():
    o = Objective(kind="grpo")
    bf16 = estimate_memory(MODEL, Stack(method="full", precision="bf16", objective=o), Shape(seq_len=1024))
    fp32 = estimate_memory(MODEL, Stack(method="full", precision="amp-bf16", objective=o), Shape(seq_len=1024))
    assert fp32.components["generation.kv_cache"].bytes == pytest.approx(
        1.5 * bf16.components["generation.kv_cache"].bytes, rel=0.001)  # keys 4 B, values 2 B


def test_beta_zero_loads_no_reference_and_beta_adds_a_reference_pass():
    zero = estimate_memory(MODEL, Stack(method="full", objective=Objective(kind="grpo")), Shape(seq_len=1024))
    kl = estimate_memory(MODEL, Stack(method="full", objective=Objective(kind="grpo", beta=0.04)), Shape(seq_len=1024))
    assert "weights.reference" not in zero.components and zero.objective.reference.startswith("no reference")
    assert kl.components["weights.reference"].bytes > 0 and kl.objective.generation["reference_pass"]


def test_vllm_refuses_to_start_when_its_pool_cannot_hold_the_models_context(capsys):
    d = estimate_json(capsys, "--method", "lora", "--objective", "grpo", "--vllm", "colocate", "--gpu", "H100",
                      "--vllm-max-model-length", "model")
    assert d["objective"]["refusals"] and "max_model_len 131,072" in d["objective"]["refusals"][0]
    ok = estimate_json(capsys, "--method", "lora", "--objective", "grpo", "--vllm", "colocate", "--gpu", "H100")
    assert not ok["objective"]["refusals"]


def test_server_mode_leaves_the_training_gpus_free_of_vllm():
    o = Objective(kind="grpo", vllm="server", card_bytes=H100)
    est = estimate_memory(MODEL, Stack(method="lora", objective=o), Shape(seq_len=1024))
    assert est.breakdown.generation == 0 and not any(k.startswith("generation.vllm") for k in est.components)
    assert est.objective.vllm["budget"] == -(-H100 * 9 // 10)  # sized on its own GPU at 0.9


def test_settings_of_another_objective_are_refused_in_one_line(capsys):
    code, _, err = gpu_advisor(capsys, "estimate", MODEL, "--num-generations", "4")
    assert "--num-generations" in one_line_error(code, err)
    code, _, err = gpu_advisor(capsys, "estimate", MODEL, "--objective", "dpo", "--ref-model", "adapter-off")
    assert "--ref-model" in one_line_error(code, err)
    code, _, err = gpu_advisor(capsys, "estimate", MODEL, "--objective", "dpo", "--loss-type", "bogus")
    assert "--loss-type" in one_line_error(code, err)


# --- plan --------------------------------------------------------------------------------------------------


def _offer(provider, instance, gpu, count, price):
    return dict(provider=provider, region="us-east-1", instance_type=instance, gpu_model=gpu, gpu_count=count,
                gpu_memory_gb=get_gpu(gpu).memory_gb, vcpus=16 * count, ram_gb=256 * count, price_hour=price,
                spot_price_hour=None, currency="USD", source=f"test-{provider}", fetched_at=DATE, interconnect="")


OFFERS = pd.DataFrame([_offer("lambda", "gpu_1x_h100", "H100", 1, 3.29), _offer("lambda", "gpu_2x_h100", "H100", 2, 6.58),
                       _offer("aws", "p5.48xlarge", "H100", 8, 98.32)])


@pytest.fixture(scope="module")
def grpo_plan():
    """2,000 prompts × 8 completions of 512 + 512 tokens, every generation setup tried."""
    return plan(load_model(MODEL), offers=OFFERS, tokens=2000 * 8 * 1024, methods=("lora",), top=10_000,
                objective=Objective(kind="grpo"), vllm_searched=True, distinct=False)


def test_grpo_plan_hours_have_a_generation_term(grpo_plan):
    c = grpo_plan.candidates[0]
    assert 0 < c.timing.generation_hours < c.timing.train_hours
    # every run's generation batch holds whole prompt groups, on however many training GPUs (TRL refuses others)
    assert all(x.timing.global_batch % 8 == 0 and x.timing.global_batch % x.stack.gpus == 0
               for x in grpo_plan.candidates)
    assert {x.stack.objective.vllm for x in grpo_plan.candidates} == {"none", "colocate", "server"}


def test_server_mode_rents_and_prices_its_generation_gpus_with_the_training_ones(grpo_plan):
    server = [c for c in grpo_plan.candidates if c.stack.objective.vllm == "server"]
    assert server and all(c.offer.gpu_count >= 2 for c in server)  # never on a one-GPU instance
    for c in server:
        assert c.stack.gpus == c.offer.gpu_count * c.nodes - c.stack.objective.vllm_server_gpus
        assert c.cost.price_hour == pytest.approx(c.offer.price_hour * c.nodes)  # the whole instance is billed
        assert any("serve vLLM" in n for n in c.notes)


def test_colocated_split_fits_the_card(grpo_plan):
    for c in grpo_plan.candidates:
        if c.stack.objective.vllm == "colocate":
            assert c.fit.peak_bytes <= c.fit.limit_bytes
            assert c.fit.peak_bytes > c.stack.objective.utilization * c.fit.usable_bytes  # vLLM's share inside


def test_dpo_plan_counts_pairs(capsys):
    code, out, err = gpu_advisor(capsys, "plan", MODEL, "--objective", "dpo", "--pairs", "10000", "--methods", "lora",
                                 "--gpu", "H100", "--format", "json")
    assert code == 0, err
    p = json.loads(out)
    assert p["workload"]["objective"] == "dpo" and p["workload"]["pairs"] == 10_000
    assert p["workload"]["tokens"] == 10_000 * 2 * 1024  # two rows of TRL's max_length 1024 per pair


def test_a_plan_file_switch_must_be_true_or_false_not_a_quoted_word(tmp_path, capsys):
    path = tmp_path / "plan.yaml"
    path.write_text(f"model: {MODEL}\nobjective: grpo\nprompts: 1000\nvllm: colocate\nvllm_sleep: 'no'\n")
    code, _, err = gpu_advisor(capsys, "plan", "-f", path)
    assert "--vllm-sleep" in one_line_error(code, err)
