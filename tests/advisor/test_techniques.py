"""Techniques a Hugging Face user switches on: each one's memory mechanism, its refusals, and
what a user sees (a named component with formula and source in the table and the JSON).

Liger Kernel's Triton kernels do not run on a CPU: its terms are checked against liger-kernel's source
(the chunk formula) and its own published benchmark. DoRA, LoRA on lm_head / embed_tokens, modules_to_save
and the chunked loss are measured on real PyTorch in tests/advisor/estimate/test_memory_vs_torch.py; here their parameter
counts are checked against peft itself.
"""

from __future__ import annotations

import json
import warnings

import pytest
from click.testing import CliRunner

from advisor.api import estimate_memory
from advisor.errors import BadInput
from advisor.estimate.activations import CHUNKED_LOSS_CHUNKS, liger_chunk_rows
from advisor.estimate.engine import Engine
from advisor.estimate.memory import DEEPSPEED_ZERO3
from advisor.model.architecture import build
from advisor.model.catalog import load_model
from advisor.stacks import Shape, Stack

GB = 10**9
LLAMA_8B = "meta-llama/Llama-3.1-8B"


def run_cli(*args):
    from cli import cli

    return CliRunner().invoke(cli, list(args))


def run_main(*args):
    """The installed entry point as a user runs it: exit code and one line on stderr."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True, text=True, timeout=120)


def comps(est, prefix: str = "") -> dict[str, int]:
    return {k: c.bytes for k, c in est.components.items() if k.startswith(prefix)}


# --- the promise: Liger makes the 8B 32k LoRA fit an H100 --------------------------------


def test_llama_8b_lora_at_32k_fits_an_h100_with_liger_and_shows_the_loss_path():
    args = [LLAMA_8B, "--method", "lora", "--liger", "--loss", "standard", "--seq-len", "32768", "--grad-checkpointing", "--gpu", "H100"]
    table = run_cli("estimate", *args)
    assert table.exit_code == 0, table.output
    assert "H100" in table.output and ": fits;" in table.output
    assert "loss_chunk_logits" in table.output and "loss.flce_grad_input" in table.output
    est = json.loads(run_cli("estimate", *args, "--format", "json").output)
    assert est["fit"]["fits"] is True
    loss = est["components"]["overhead.loss_chunk_logits"]
    assert loss["bytes"] > 0 and "fused_linear_cross_entropy" in loss["source"] and loss["formula"]
    assert "activations.loss.log_softmax_fp32" not in est["components"]  # no logits, no log_softmax kept
    without = json.loads(run_cli("estimate", *[a for a in args if a != "--liger"], "--format", "json").output)
    assert without["fit"]["fits"] is False
    assert without["components"]["activations.loss.log_softmax_fp32"]["bytes"] == 4 * 32768 * 128256


def test_liger_chunk_is_the_kernels_own_formula():
    """fused_linear_cross_entropy_forward: inc_factor = cdiv(V, H); chunk = next_pow2(cdiv(BT, inc_factor))."""
    assert liger_chunk_rows(4096, 128256, 4096) == 128  # cdiv(128256, 4096) = 32
    assert liger_chunk_rows(32768, 128256, 4096) == 1024
    assert liger_chunk_rows(4096 * 4, 32000, 4096) == 2048  # the kernel's own comment: inc_factor 8 -> 2048
    assert liger_chunk_rows(100, 262144, 2048) == 1  # next_pow2(cdiv(100, 128)) = 1
    assert liger_chunk_rows(3, 1000, 4096) == 3  # one chunk covers BT when V < H


def test_liger_published_fused_linear_cross_entropy_memory_grows_as_the_chunk_model_says():
    """Liger's own benchmark (benchmark/data/all_benchmark_data.csv, A100-80GB, liger 0.4.2,
    benchmark_fused_linear_cross_entropy.py: H=4096, V=128256, bf16, max_memory_allocated in MiB) grows
    by 1549 MiB from BT=4096 to 32768, i.e. 56.6 KB per token, while the torch baseline grows by 750 KB
    per token (6·V: bf16 logits, log_softmax and their gradients). Per token the fused loss keeps the
    input and its gradient (2·H each, bf16), the gradient for the input's .grad (2·H) and its share of
    the logits chunk, which liger 0.4.2 also upcast to fp32 (6·V/inc_factor) -- and the matmul's
    BT-chunk of grad_input (2·H). The same rows, in today's kernel without the upcast, are 2·V/inc_factor."""
    liger = {4096: 4245.5478515625, 32768: 5794.6259765625}
    torch_ce = {4096: 6092.2822265625, 32768: 27582.5}
    H, V = 4096, 128256
    per_token = (liger[32768] - liger[4096]) * 2**20 / (32768 - 4096)
    chunk = liger_chunk_rows(32768, V, H) - liger_chunk_rows(4096, V, H)
    modelled = (4 * 2 * H * (32768 - 4096) + chunk * V * 6) / (32768 - 4096)
    assert modelled == pytest.approx(per_token, rel=0.10)
    torch_per_token = (torch_ce[32768] - torch_ce[4096]) * 2**20 / (32768 - 4096)
    assert torch_per_token == pytest.approx(6 * V, rel=0.05)
    # the estimator's Liger loss path per token is a small fraction of the standard one
    arch = build(load_model(LLAMA_8B))
    std = Engine.of(LLAMA_8B).memory(Stack(loss="standard", method="lora"), Shape(seq_len=32768))
    lig = Engine.of(LLAMA_8B).memory(Stack(loss="standard", method="lora", liger=True), Shape(seq_len=32768))
    std_loss = sum(v for k, v in comps(std).items() if "loss" in k)
    lig_loss = sum(v for k, v in comps(lig).items() if "loss" in k)
    assert lig_loss < 0.05 * std_loss
    assert arch.spec.vocab_size == V


def test_liger_norms_save_their_input_not_an_fp32_copy_and_swiglu_two_tensors():
    shape = Shape(micro_batch=1, seq_len=1024)
    std = estimate_memory(LLAMA_8B, Stack(loss="standard", method="full"), shape)
    lig = estimate_memory(LLAMA_8B, Stack(loss="standard", method="full", liger=True), shape)
    spec = load_model(LLAMA_8B)
    h, f, L, T = spec.hidden_size, spec.intermediate_size, spec.num_hidden_layers, 1024
    assert comps(std)["activations.layers.norms.input_fp32"] == 2 * L * T * 4 * h
    assert comps(lig)["activations.layers.norms.input"] == 2 * L * T * 2 * h
    assert "activations.layers.norms.normalised" not in lig.components  # weight grad from X and rstd
    assert comps(std)["activations.layers.mlp.gate_act_up"] == L * T * 3 * 2 * f
    assert comps(lig)["activations.layers.mlp.gate_up"] == L * T * 2 * 2 * f
    # full fine-tuning: lm_head's gradient is computed in forward and kept, the logits never are
    assert comps(lig)["activations.loss.flce_grad_weight"] == spec.vocab_size * h * 2
    assert "activations.lm_head.input" not in lig.components


def test_liger_is_refused_for_a_family_liger_does_not_patch():
    with pytest.raises(BadInput, match=r"--liger: Liger Kernel has no patch for qwen2_moe"):
        Engine.of("Qwen/Qwen1.5-MoE-A2.7B").memory(Stack(method="lora", liger=True), Shape())
    result = run_main("estimate", "Qwen/Qwen1.5-MoE-A2.7B", "--method", "lora", "--liger")
    assert result.returncode == 2 and "--loss chunked" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_liger_with_a_lora_adapter_on_lm_head_is_refused():
    result = run_main("estimate", LLAMA_8B, "--method", "lora", "--liger", "--lora-targets", "q_proj,lm_head")
    assert result.returncode == 2 and "lm_head" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_every_supported_family_has_a_cited_liger_fact():
    from advisor.model import families

    for _name, fam in families.table().items():
        assert isinstance(fam.liger, bool)
        assert "MODEL_TYPE_TO_APPLY_LIGER_FN" in fam.about["liger"]
    assert not families.traits("qwen2_moe").liger and families.traits("llama").liger


# --- chunked loss -----------------------------------------------------------------------------


def test_chunked_loss_keeps_the_fp32_log_softmax_but_one_chunk_of_gradients():
    shape = Shape(micro_batch=2, seq_len=4096)
    std = estimate_memory(LLAMA_8B, Stack(loss="standard", method="lora"), shape)
    chk = estimate_memory(LLAMA_8B, Stack(method="lora", loss="chunked"), shape)
    key = "activations.loss.log_softmax_fp32"
    assert comps(std)[key] == comps(chk)[key]  # torchtune's chunks all keep their fp32 log_softmax
    V, T = 128256, 2 * 4096
    assert comps(std)["overhead.loss_gradients"] == 2 * 4 * V * T
    assert comps(chk)["overhead.loss_gradients"] == (2 * 4 + 2) * V * T // CHUNKED_LOSS_CHUNKS
    assert "CEWithChunkedOutputLoss" in chk.components["overhead.loss_gradients"].source
    assert chk.device_total < std.device_total


def test_liger_and_chunked_loss_together_are_refused():
    with pytest.raises(ValueError, match="--loss chunked"):
        Stack(liger=True, loss="chunked")


# --- DoRA -------------------------------------------------------------------------------------


def test_dora_trains_one_magnitude_per_output_feature_of_every_adapted_linear():
    spec = load_model(LLAMA_8B)
    arch = build(spec)
    per_layer = 4096 + 1024 + 1024 + 4096 + 14336 + 14336 + 4096
    assert arch.dora_magnitudes("all-linear") == spec.num_hidden_layers * per_layer
    lora = estimate_memory(LLAMA_8B, Stack(method="lora"))
    dora = estimate_memory(LLAMA_8B, Stack(method="lora", dora=True))
    mags = arch.dora_magnitudes("all-linear")
    assert comps(dora)["weights.dora_magnitudes"] == 4 * mags
    assert dora.breakdown.gradients - lora.breakdown.gradients == 4 * mags  # fp32 like the adapters
    assert dora.breakdown.optimizer - lora.breakdown.optimizer == 8 * mags
    assert dora.model.params_trainable == lora.model.params_trainable + mags


def test_dora_keeps_base_and_adapter_results_and_with_dropout_an_fp32_copy_of_each_weight():
    shape = Shape(micro_batch=1, seq_len=2048)
    d0 = estimate_memory(LLAMA_8B, Stack(method="lora", dora=True, lora_dropout=0.0), shape)
    d5 = estimate_memory(LLAMA_8B, Stack(method="lora", dora=True, lora_dropout=0.05), shape)
    arch = build(load_model(LLAMA_8B))
    outs = arch.dora_magnitudes("all-linear")
    assert comps(d0)["activations.layers.dora.base_result"] == 2048 * outs * 2  # the base output, bf16
    assert comps(d5)["activations.layers.dora.base_result"] == 2048 * outs * 4  # F.linear in fp32
    assert "activations.layers.dora.weight_copies" not in d0.components
    linear_weights = sum(lin.weight_params for lin in arch.linears())
    # every layer but the first: layer 0's q/k/v input needs no gradient (frozen embedding, no checkpointing)
    first_qkv = 4096 * (4096 + 1024 + 1024)
    assert comps(d5)["activations.layers.dora.weight_copies"] == 4 * (linear_weights - first_qkv)
    assert comps(d0)["overhead.dora_weight_norm"] > 0


def test_dora_works_with_qlora_as_peft_allows_and_is_refused_where_peft_refuses_it():
    est = estimate_memory(LLAMA_8B, Stack(method="qlora", dora=True))
    assert comps(est)["weights.dora_magnitudes"] > 0
    with pytest.raises(ValueError, match="--dora"):
        Stack(method="full", dora=True)
    with pytest.raises(BadInput, match="ParamWrappers"):
        Engine.of("mixtral-8x7b").memory(Stack(method="lora", dora=True), Shape())
    ok = Engine.of("mixtral-8x7b").memory(Stack(method="lora", dora=True, lora_targets="q_proj,v_proj"), Shape())
    assert ok.device_total > 0


# --- LoRA on lm_head / embed_tokens, modules_to_save: counts against peft itself -----------------

TINY = {"model_type": "llama", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
        "tie_word_embeddings": False}


def _peft_trainable(targets, dora=False, modules_to_save=None) -> int:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(TINY)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(cfg.pop("model_type"), **cfg))
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=targets, use_dora=dora,
                                                 modules_to_save=modules_to_save, task_type="CAUSAL_LM"))
    del torch
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("targets,dora,saved", [
    ("all-linear", False, ""),
    ("q_proj,v_proj,lm_head", False, ""),
    ("q_proj,embed_tokens", False, ""),
    ("all-linear", True, ""),
    ("q_proj,v_proj,lm_head", True, ""),
    ("q_proj,v_proj", False, "embed_tokens,lm_head"),
])
def test_trainable_parameters_equal_peft_for_heads_dora_and_modules_to_save(targets, dora, saved):
    from benchmarks.measure import model_spec

    stack = Stack(loss="standard", method="lora", lora_rank=8, lora_targets=targets, dora=dora, modules_to_save=saved)
    est = estimate_memory(model_spec(TINY), stack)
    peft_targets = "all-linear" if targets == "all-linear" else targets.split(",")
    expected = _peft_trainable(peft_targets, dora, saved.split(",") if saved else None)
    assert est.model.params_trainable == expected


def test_all_linear_still_leaves_lm_head_out_as_peft_does():
    arch = build(load_model(LLAMA_8B))
    assert arch.head_targets("all-linear") == ()
    names = ",".join(arch.linear_names())
    assert arch.lora_params(16, names) == arch.lora_params(16, "all-linear")
    assert arch.lora_params(16, names + ",lm_head") == arch.lora_params(16, "all-linear") + 16 * (4096 + 128256)
    with pytest.raises(BadInput, match="all-linear"):  # peft's all-linear is a whole value, not a list item
        Engine.of(LLAMA_8B).memory(Stack(loss="standard", method="lora", lora_targets="all-linear,lm_head"), Shape())


def test_modules_to_save_trains_a_copy_beside_the_frozen_original():
    lora = estimate_memory(LLAMA_8B, Stack(loss="standard", method="lora"))
    mts = estimate_memory(LLAMA_8B, Stack(loss="standard", method="lora", modules_to_save="embed_tokens,lm_head"))
    copy = 2 * 128256 * 4096  # two V×H matrices
    assert comps(mts)["weights.modules_to_save"] == 2 * copy  # bf16, beside the untouched originals
    assert comps(mts)["gradients.modules_to_save"] == 2 * copy
    assert comps(mts)["optimizer.modules_to_save"] == 4 * copy  # torch AdamW: two bf16 states
    assert comps(lora)["weights.base"] == comps(mts)["weights.base"]
    assert comps(mts)["activations.lm_head.input"] > 0 and comps(mts)["activations.embedding.indices"] > 0
    assert "activations.lm_head.input" not in lora.components


@pytest.mark.parametrize("kw,match", [
    (dict(method="full", modules_to_save="lm_head"), "--modules-to-save: only with"),
    (dict(method="lora", modules_to_save="norm"), "--modules-to-save: norm not accepted"),
    (dict(method="lora", modules_to_save="lm_head", lora_targets="q_proj,lm_head"), "also in --lora-targets"),
])
def test_impossible_modules_to_save_are_refused_with_one_sentence(kw, match):
    with pytest.raises(ValueError, match=match):
        Stack(**kw)


def test_an_unknown_lora_target_still_names_the_accepted_ones():
    with pytest.raises(BadInput, match=r"lm_head and embed_tokens"):
        Engine.of(LLAMA_8B).memory(Stack(method="lora", lora_targets="q_proj,wte"), Shape())


# --- DeepSpeed ZeRO-3 buffers and compile -------------------------------------------------------


def test_zero3_counts_live_parameters_and_the_reduce_bucket_from_the_written_values():
    est = estimate_memory(LLAMA_8B, Stack(method="full", sharding="zero3", gpus=8))
    window = min(DEEPSPEED_ZERO3["stage3_max_live_parameters"], DEEPSPEED_ZERO3["stage3_max_reuse_distance"])
    lm_head = 128256 * 4096  # the largest module, gathered whatever the budget
    assert comps(est)["weights.zero3_live_params"] == (lm_head + window) * 2
    assert comps(est)["overhead.zero3_reduce_bucket"] == DEEPSPEED_ZERO3["reduce_bucket_size"] * 2
    assert "weights.gathered_units" not in est.components  # the FSDP2 model is for FSDP only
    assert "stage3_max_live_parameters" in est.components["weights.zero3_live_params"].formula
    fsdp = estimate_memory(LLAMA_8B, Stack(method="full", sharding="fsdp", gpus=8))
    assert "weights.zero3_live_params" not in fsdp.components


def test_zero3_on_one_gpu_still_gathers_parameters_beside_the_partition():
    one = estimate_memory("Qwen/Qwen2.5-1.5B", Stack(method="full", sharding="zero3"))
    embed = 151936 * 1536  # Qwen2.5-1.5B's largest module (tied embeddings)
    assert comps(one)["weights.zero3_live_params"] == min(one.model.params_total, embed + 10**9) * 2
    none = estimate_memory("Qwen/Qwen2.5-1.5B", Stack(method="full"))
    assert one.device_total > none.device_total  # ZeRO-3 on one GPU shards nothing and gathers everything


def test_compile_leaves_memory_as_eager_and_says_so():
    eager = estimate_memory(LLAMA_8B, Stack(method="lora"))
    comp = estimate_memory(LLAMA_8B, Stack(method="lora", compile=True))
    assert comp.device_total == eager.device_total
    assert "torch.compile" in comp.assumptions["compile"]


# --- every new term is a named, sourced component in JSON and the table --------------------------


def test_every_new_component_has_a_formula_and_a_source_and_shows_in_the_table():
    from cli.estimate import render_table

    stacks = [
        Stack(loss="standard", method="lora", liger=True, grad_checkpointing=True),
        Stack(loss="standard", method="lora", dora=True, lora_targets="q_proj,v_proj,lm_head", modules_to_save="embed_tokens"),
        Stack(method="lora", loss="chunked", sharding="zero3", gpus=2),
    ]
    seen = set()
    for stack in stacks:
        est = estimate_memory(LLAMA_8B, stack, Shape(seq_len=4096))
        table = render_table(est)
        for key, comp in est.components.items():
            if any(t in key for t in ("dora", "modules_to_save", "zero3", "loss_chunk", "flce", "lm_head.lora")):
                assert comp.formula and comp.source, key
                seen.add(key.split(".", 1)[0])
        assert "dora_magnitudes" in table or "liger" in table or "zero3" in table
    assert seen >= {"weights", "gradients", "optimizer", "activations", "overhead"}


# --- the accuracy benchmark maps the published rows these options explain ------------------------


def test_published_rows_with_trained_embeddings_lm_head_adapters_or_a_chunked_loss_are_mapped():
    from benchmarks.calibration_rows import load_rows

    rows = {r.id: r for r in load_rows()}
    emb = [r for r in rows.values() if r.id.startswith("qwen-") and r.stack and r.stack.saved_modules]
    assert len(emb) == 18 and all(r.included for r in emb)  # Qwen's "LoRA (emb)": wte + lm_head trained
    assert emb[0].stack.saved_modules == ("embed_tokens", "lm_head")
    lit = rows["lc-03"]  # LitGPT gemma-2b LoRA on every linear incl. lm_head, chunked cross-entropy
    assert lit.included and lit.stack.lora_targets.endswith(",lm_head") and lit.stack.loss == "chunked"
    assert rows["lr-11"].stack.loss == "chunked"  # lit-gpt 2023: lm_head_chunk_size=128 + chunked_cross_entropy
    assert not any("modules_to_save" in (r.excluded or "") for r in rows.values())
