"""The estimator's promises: the seed's numbers, sharding, offload, fit checks, bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from advisor.api import estimate_memory, fit_micro_batch
from advisor.errors import BadInput
from advisor.estimate.memory import nf4_bytes_per_param
from advisor.model.catalog import load_model, synthetic_spec
from advisor.stacks import Shape, Stack

GB = 10**9


def static(est) -> int:
    b = est.breakdown
    return b.weights + b.gradients + b.optimizer


def test_seed_full_finetune_4b_bf16_adamw_is_32gb_static():
    est = estimate_memory(synthetic_spec(4 * 10**9), Stack(method="full", precision="bf16", optimizer="adamw"))
    assert est.breakdown.weights == 8 * GB
    assert est.breakdown.gradients == 8 * GB
    assert est.breakdown.optimizer == 16 * GB
    assert est.static_bytes == 32 * GB


def test_seed_lora_r8_4b_is_about_8_12gb_static():
    spec = synthetic_spec(4 * 10**9)
    bf16 = estimate_memory(spec, Stack(method="lora", lora_rank=8, adapter_dtype="bf16"))
    assert static(bf16) == pytest.approx(8.12 * GB, rel=0.005)
    # peft's default fp32 adapters double the adapter, gradient and optimizer bytes
    fp32 = estimate_memory(spec, Stack(method="lora", lora_rank=8))
    extra = static(fp32) - 8 * GB
    assert extra == pytest.approx(2 * (static(bf16) - 8 * GB), rel=0.01)


def test_qlora_8b_fits_24gb_card_with_checkpointing():
    est = estimate_memory(
        "meta-llama/Llama-3.1-8B",
        Stack(method="qlora", grad_checkpointing=True, optimizer="paged-adamw-8bit"),
        Shape(micro_batch=1, seq_len=2048),
        gpu="A10G",
    )
    assert est.fit.fits
    assert est.breakdown.weights < 6.5 * GB  # NF4: ~0.52 B/param for linears, 16-bit embeddings
    assert est.fit.max_micro_batch >= 1


def test_full_finetune_8b_bf16_adamw_does_not_fit_one_80gb_gpu():
    est = estimate_memory("llama-3.1-8b", Stack(method="full"), Shape(micro_batch=1, seq_len=2048), gpu="H100")
    assert not est.fit.fits
    assert est.static_bytes == pytest.approx(8.03e9 * 8, rel=0.01)


def test_nf4_double_quant_saves_about_0_37_bits_per_param():
    # QLoRA paper §3: double quantisation reduces constants from 0.5 to ~0.127 bits/param
    saved_bits = (nf4_bytes_per_param(False) - nf4_bytes_per_param(True)) * 8
    assert saved_bits == pytest.approx(0.373, abs=0.01)


def test_fsdp_shards_model_states_across_gpus():
    one = estimate_memory("llama-3.1-8b", Stack(method="full"))
    eight = estimate_memory("llama-3.1-8b", Stack(method="full", gpus=8, sharding="fsdp"))
    assert eight.components["optimizer.states"].bytes == one.components["optimizer.states"].bytes // 8
    assert eight.components["gradients.trainable"].bytes == one.components["gradients.trainable"].bytes // 8
    # plus one layer's and the root unit's unsharded gradients before reduce-scatter
    assert "gradients.unsharded_buffers" in eight.components
    assert eight.breakdown.gradients < one.breakdown.gradients / 3
    assert eight.breakdown.activations == one.breakdown.activations  # per-GPU micro-batch unchanged


def test_zero_stages_shard_progressively():
    def states(sharding):
        e = estimate_memory("qwen2.5-7b", Stack(method="full", gpus=4, sharding=sharding))
        return e.breakdown.weights, e.breakdown.gradients, e.breakdown.optimizer

    w1, g1, o1 = states("zero1")
    w2, g2, o2 = states("zero2")
    w3, g3, o3 = states("zero3")
    assert o1 == o2 == o3
    assert g2 < g1 and w3 < w2 == w1


def test_optimizer_offload_moves_states_to_cpu_ram():
    est = estimate_memory("llama-3.1-8b", Stack(method="full", gpus=2, sharding="zero3", offload="optimizer"))
    assert est.breakdown.optimizer == 0
    assert est.cpu_ram_bytes >= 8.03e9 * 12  # fp32 master + two fp32 Adam states at least


def test_eager_attention_grows_quadratically_and_sdpa_linearly():
    spec = load_model("qwen2.5-0.5b")
    def acts(attn, s):
        return estimate_memory(spec, Stack(attention=attn), Shape(seq_len=s)).breakdown.activations
    assert acts("sdpa", 4096) / acts("sdpa", 2048) == pytest.approx(2.0, rel=0.01)
    assert acts("eager", 4096) / acts("eager", 2048) > 2.5


def test_gradient_checkpointing_cuts_activations():
    spec = load_model("llama-3.1-8b")
    off = estimate_memory(spec, Stack(method="lora"), Shape(seq_len=4096))
    on = estimate_memory(spec, Stack(method="lora", grad_checkpointing=True), Shape(seq_len=4096))
    assert on.breakdown.activations < off.breakdown.activations / 4


def test_large_vocab_logits_dominate_small_gemma():
    est = estimate_memory("google/gemma-3-1b-it", Stack(loss="standard", method="lora", grad_checkpointing=True), Shape(seq_len=4096))
    logits = est.components["activations.loss.log_softmax_fp32"].bytes
    assert logits > 0.4 * est.breakdown.activations


def test_fit_micro_batch_is_the_largest_that_fits():
    spec = load_model("qwen2.5-1.5b")
    stack = Stack(method="lora", grad_checkpointing=True)
    usable = int(22.06 * 2**30)
    mb, est = fit_micro_batch(spec, stack, 2048, usable, 0.10)
    assert mb >= 1
    assert est.device_total <= usable * 0.9
    over = estimate_memory(spec, stack, Shape(micro_batch=mb + 1, seq_len=2048))
    assert over.device_total > usable * 0.9


def test_unknown_lora_target_lists_the_linear_modules():
    with pytest.raises(BadInput) as err:
        estimate_memory("llama-3.1-8b", Stack(method="lora", lora_targets="q_proj,query_key_value"))
    assert "query_key_value" in str(err.value) and "gate_proj" in str(err.value)


def test_qlora_with_fp32_compute_is_rejected():
    with pytest.raises(ValueError, match="--precision: QLoRA computes in 16-bit"):
        Stack(method="qlora", precision="fp32")


def test_sequence_above_model_maximum_warns():
    est = estimate_memory("qwen2.5-0.5b", Stack(), Shape(seq_len=10**6))
    assert any("max_position_embeddings" in w for w in est.warnings)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True, text=True, timeout=60)


def test_cli_json_contract():
    out = run_cli("estimate", "meta-llama/Llama-3.1-8B", "--method", "qlora", "--gpu", "L4", "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert {"name", "params_total", "params_trainable"} <= set(data["model"])
    assert {"weights", "gradients", "optimizer", "activations", "overhead", "total"} <= set(data["breakdown"])
    assert all(isinstance(v, int) for v in data["breakdown"].values())
    assert data["assumptions"] and data["fit"]["gpu"] == "L4"


def test_cli_params_mode_accepts_suffixes():
    for text in ("4B", "4e9", "4000M"):
        out = run_cli("estimate", "--params", text, "--format", "json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["breakdown"]["weights"] == 8 * GB


@pytest.mark.parametrize(
    "args, field",
    [
        (("--params", "4B", "--batch-size", "0"), "--batch-size"),
        (("--params", "4B", "--method", "dora"), "--method"),
        (("--params", "4B", "--method", "qlora", "--precision", "fp32"), "--precision"),
        (("--params", "4B", "--gpu", "H1000"), "--gpu"),
        (("--params", "-3B",), "--params"),
        (("llama-3.1-8b", "--method", "lora", "--lora-targets", "wq"), "--lora-targets"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(args, field):
    out = run_cli("estimate", *args)
    assert out.returncode == 2
    assert field in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_estimate_command_imports_no_torch_transformers_or_pandas():
    code = (
        "import sys\n"
        "from cli import main\n"
        "try:\n"
        "    main(['estimate', 'llama-3.1-8b', '--gpu', 'A10G', '--format', 'json'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'pandas', 'peft', 'matplotlib') if m in sys.modules)\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in out.stderr, out.stderr


def test_estimate_json_reports_throughput_for_the_gpu():
    out = run_cli("estimate", "qwen2.5-7b", "--method", "lora", "--gpu", "H100", "--gpus", "8", "--format", "json")
    assert out.returncode == 0, out.stderr
    t = json.loads(out.stdout)["throughput"]
    assert t["tokens_per_sec"] > 0 and 0 < t["mfu"] < 1 and t["step_seconds"] > 0


def test_qlora_keeps_fused_moe_experts_in_16bit():
    dense_like = estimate_memory("mixtral-8x7b", Stack(method="qlora", lora_dropout=0.0, grad_checkpointing=True))
    expert_bytes = dense_like.components["weights.16bit_rest"].bytes
    assert expert_bytes > 45e9 * 2  # 45B expert weights stay bf16 (transformers 5 quantises nn.Linear only)
    assert any("fused expert weights in 16-bit" in w for w in dense_like.warnings)


def test_lora_on_moe_counts_peft_expert_adapters_and_merged_weights():
    spec = load_model("qwen3-30b-a3b")
    est = estimate_memory(spec, Stack(method="lora", lora_dropout=0.0), Shape(seq_len=512))
    attn_only = estimate_memory(spec, Stack(method="lora", lora_dropout=0.0, lora_targets="q_proj,k_proj,v_proj,o_proj"),
                                Shape(seq_len=512))
    assert est.model.params_trainable > 10 * attn_only.model.params_trainable
    merged = est.components["activations.layers.lora.merged_expert_weights"].bytes
    assert merged > 0.9 * 2 * 30e9 * 0.95  # every layer keeps its merged bf16 expert weights without checkpointing


def test_fit_check_warns_about_bf16_and_flash_on_cards_without_them():
    est = estimate_memory("qwen2.5-0.5b", Stack(precision="bf16", attention="flash"), Shape(seq_len=512), gpu="T4")
    assert any("no native bf16" in w for w in est.warnings)
    assert any("FlashAttention-2 does not run on T4" in w for w in est.warnings)
    ok = estimate_memory("qwen2.5-0.5b", Stack(precision="fp16", attention="sdpa"), Shape(seq_len=512), gpu="T4")
    assert not ok.warnings


def test_padded_batches_cost_sdpa_a_mask_copy_per_layer_but_not_flash():
    spec = load_model("llama-3.1-8b")
    def acts(attention, padded):
        shape = Shape(micro_batch=4, seq_len=4096, padded=padded)
        return estimate_memory(spec, Stack(method="lora", attention=attention), shape).breakdown.activations
    extra = acts("sdpa", True) - acts("sdpa", False)
    mask_copies = 32 * 4 * 4096 * 4096 * 2  # (b, 1, s, s) bf16 per layer
    assert extra > mask_copies  # plus k/v repeated to all 32 heads
    assert acts("flash", True) == acts("flash", False)  # FlashAttention-2 unpads


def test_attention_follows_what_transformers_supports_per_model():
    # Gemma 2 has no SDPA (soft-capping): the default is eager, and asking for sdpa is bad input
    assert estimate_memory("gemma-2-9b").stack.attention == "eager"
    with pytest.raises(BadInput, match="eager or flash"):
        estimate_memory("gemma-2-9b", Stack(attention="sdpa"))
    # the multimodal Gemma 3 class has no FlashAttention path
    with pytest.raises(BadInput, match="eager or sdpa"):
        estimate_memory("google/medgemma-4b-it", Stack(attention="flash"))
    from advisor.planner import stacks_for
    from pricing.gpus import get_gpu

    assert {s.attention for s in stacks_for(get_gpu("H100"), 1, ["lora"], "gemma3")} == {"sdpa"}
    assert {s.attention for s in stacks_for(get_gpu("T4"), 1, ["lora"], "gemma2")} == {"eager"}


def test_a_run_that_does_not_fit_says_what_would_make_it_fit():
    est = estimate_memory("llama-3.1-8b", Stack(method="full"), Shape(seq_len=2048), gpu="A100-80GB")
    assert not est.fit.fits and est.fit.suggestions
    first = est.fit.suggestions[0]
    assert first.startswith("--grad-checkpointing")
    # each suggestion is true: applying it gives the memory it quotes and fits
    fixed = estimate_memory("llama-3.1-8b", Stack(method="full", grad_checkpointing=True), Shape(seq_len=2048))
    assert f"{fixed.device_total / 1e9:.1f} GB" in first and fixed.device_total <= est.fit.usable_bytes * 0.9
    # when no single change is enough, one combined, pruned change is offered
    big = estimate_memory("llama-3.1-70b", Stack(method="full"), Shape(seq_len=2048), gpu="H100")
    assert big.fit.suggestions == [s for s in big.fit.suggestions if "--method qlora" in s]
    assert "--method lora" not in big.fit.suggestions[0]
    assert estimate_memory("qwen2.5-0.5b", Stack(), Shape(seq_len=512), gpu="H100").fit.suggestions == []
