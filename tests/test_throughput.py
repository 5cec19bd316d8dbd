"""The time model: FLOPs per token, efficiencies, QLoRA dequantisation, communication, calibration."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.errors import BadInput
from advisor.modelspec import ModelSpec
from advisor.stacks import Shape, Stack
from advisor.throughput import counts, estimate_throughput, flops_per_token, gpu_class, table
from pricing.gpus import all_gpus, get_gpu

# Llama-3.1-8B config.json values (https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json)
LLAMA_8B = ModelSpec(name="llama-3.1-8b-test", family="llama", source="test", vocab_size=128256, hidden_size=4096,
                     intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                     head_dim=128, max_position_embeddings=131072)
P_8B = 8_030_261_248  # parameters of Llama-3.1-8B (embeddings untied)


def tps(stack: Stack, gpu: str = "A100-80GB", mb: int = 4, seq: int = 2048, **kw) -> float:
    return estimate_throughput(LLAMA_8B, stack, Shape(micro_batch=mb, seq_len=seq), gpu, **kw).tokens_per_sec


def test_parameter_count_matches_llama_8b():
    assert counts(LLAMA_8B, Stack()).params_total == pytest.approx(P_8B, rel=0.001)


def test_full_finetune_costs_about_6_flops_per_parameter_per_token():
    model, executed = flops_per_token(counts(LLAMA_8B, Stack()), Stack(), 2048)
    # 6·N without the input embedding lookup (~0.5B params) plus attention at s=2048 (~3% of 6N)
    assert 6 * 7.5e9 < model < 6 * 8.4e9
    assert executed == model  # no recompute without checkpointing


def test_lora_skips_weight_gradients_so_costs_about_two_thirds():
    c = counts(LLAMA_8B, Stack(method="lora"))
    full, _ = flops_per_token(counts(LLAMA_8B, Stack()), Stack(), 512)
    lora, _ = flops_per_token(c, Stack(method="lora"), 512)
    assert lora / full == pytest.approx(4 / 6, abs=0.03)


def test_checkpointing_recomputes_one_forward():
    stack = Stack(method="full", grad_checkpointing=True)
    model, executed = flops_per_token(counts(LLAMA_8B, stack), stack, 512)
    assert (executed - model) / model == pytest.approx(1 / 3, abs=0.01)


def test_attention_flops_grow_with_sequence_length():
    c = counts(LLAMA_8B, Stack())
    short, _ = flops_per_token(c, Stack(), 1024)
    long, _ = flops_per_token(c, Stack(), 32768)
    # attention per token grows linearly in s: 12·L·d_attn·s/2 (causal) more at 32k
    assert long - short == pytest.approx(12 * 32 * 4096 * (32768 - 1024) / 2, rel=1e-9)


def test_faster_gpu_trains_faster():
    stack = Stack(method="lora", attention="flash", grad_checkpointing=True)
    assert tps(stack, "H100") > 2 * tps(stack, "A100-80GB") * 0.9 > tps(stack, "A10G")


def test_qlora_pays_for_dequantisation():
    lora = estimate_throughput(LLAMA_8B, Stack(method="lora"), Shape(micro_batch=1, seq_len=512), "A10G")
    qlora = estimate_throughput(LLAMA_8B, Stack(method="qlora"), Shape(micro_batch=1, seq_len=512), "A10G")
    assert qlora.components["dequant_seconds"] > 0 == lora.components["dequant_seconds"]
    assert qlora.tokens_per_sec < lora.tokens_per_sec


def test_zero3_moves_1_5x_the_bytes_of_ddp():
    """ZeRO paper §7: DDP all-reduce 2Ψ per step, ZeRO-3 3Ψ (gather fwd + gather bwd + reduce-scatter)."""
    shape = Shape(micro_batch=1, seq_len=2048)
    ddp = estimate_throughput(LLAMA_8B, Stack(gpus=8, sharding="ddp"), shape, "H100")
    z3 = estimate_throughput(LLAMA_8B, Stack(gpus=8, sharding="zero3"), shape, "H100")
    assert z3.components["comm_seconds"] / ddp.components["comm_seconds"] == pytest.approx(1.5, rel=0.01)


def test_more_gpus_are_faster_but_not_superlinear():
    one = tps(Stack(method="lora"), "H100", mb=2, grad_accum=8)
    eight = tps(Stack(method="lora", gpus=8, sharding="ddp"), "H100", mb=2, grad_accum=1)
    assert one < eight <= 8 * one


def test_second_node_adds_network_time():
    stack = Stack(gpus=16, sharding="fsdp")
    shape = Shape(micro_batch=1, seq_len=2048)
    two = estimate_throughput(LLAMA_8B, stack, shape, "H100", nodes=2)
    one_fast_net = estimate_throughput(LLAMA_8B, stack, shape, "H100", nodes=2, network_gbps=3200)
    assert two.comm_seconds_per_step > one_fast_net.comm_seconds_per_step
    assert two.assumptions["internode_gbps"] == table()["internode_gbps"]["hpc"]


def test_mfu_override_replaces_the_table():
    lo = estimate_throughput(LLAMA_8B, Stack(), Shape(micro_batch=4), "H100", mfu=0.2)
    hi = estimate_throughput(LLAMA_8B, Stack(), Shape(micro_batch=4), "H100", mfu=0.4)
    assert hi.compute_seconds_per_step == pytest.approx(lo.compute_seconds_per_step / 2)
    assert lo.assumptions["kernel_efficiency_source"] == "--mfu"
    with pytest.raises(BadInput, match="--mfu"):
        estimate_throughput(LLAMA_8B, Stack(), Shape(), "H100", mfu=1.5)


def test_reported_mfu_is_below_the_kernel_efficiency():
    t = estimate_throughput(LLAMA_8B, Stack(grad_checkpointing=True), Shape(micro_batch=2), "A100-80GB")
    assert 0.1 < t.mfu < t.assumptions["kernel_efficiency"]


def test_every_gpu_has_an_efficiency_class():
    eff = table()["kernel_efficiency"]
    for gpu in all_gpus():
        assert gpu_class(gpu) in eff, gpu.name
    assert gpu_class(get_gpu("H100")) == "hopper" and gpu_class(get_gpu("A10G")) == "ampere-workstation"


def test_throughput_for_a_catalog_model_name():
    t = estimate_throughput("meta-llama/Llama-3.1-8B", Stack(method="qlora"), Shape(), "L4")
    assert t.tokens_per_sec > 0 and t.step_seconds > 0


def test_calibration_median_error_within_20_percent():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "time_calibration.py"
    spec = importlib.util.spec_from_file_location("time_calibration", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    summary = mod.run(quiet=True)
    assert summary["rows"] >= 30
    assert summary["median_abs_error"] <= 0.20
