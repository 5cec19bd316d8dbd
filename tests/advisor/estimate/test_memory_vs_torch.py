"""The memory estimate agrees with what a real PyTorch training step holds.

Small random-initialised transformers models (several families, full and LoRA, with and
without gradient checkpointing, eager and sdpa, bf16 / fp32 / fp16 / amp) run one training step
on the CPU under `benchmarks.measure`, which counts parameter, gradient and optimizer-state bytes
exactly and the bytes autograd saves for backward (saved_tensors_hooks, one count per
storage). The estimator must be within 2 % on weights, gradients and optimizer and within
10 % on activations in every case. The first tests check the harness itself against facts
that hold whatever the estimator says.
"""

from __future__ import annotations

import functools
import warnings

import peft  # noqa: F401
import pytest
import torch  # the test extra installs torch, transformers and peft: missing is a failure
import transformers

from advisor.stacks import Shape, Stack  # noqa: E402
from benchmarks.measure import (  # noqa: E402
    EXCLUDED_STACKS,
    LLAMA_SMALL,
    TOLERANCE,
    VALIDATION_CASES,
    Unmeasurable,
    activation_target,
    measure,
    model_spec,
)

LLAMA = LLAMA_SMALL
SHAPE = Shape(micro_batch=2, seq_len=256)


@functools.cache
def _measured(config_key: str, stack: Stack, shape: Shape):
    config = {"llama": LLAMA}.get(config_key) or _CASES[config_key].config
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return measure(config, stack, shape)


_CASES = {c.name: c for c in VALIDATION_CASES}


def _transformers_param_count(config: dict) -> int:
    cfg = dict(config)
    model_type = cfg.pop("model_type")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(
                transformers.AutoConfig.for_model(model_type, **cfg)
            )
    return model.num_parameters()  # tied embeddings once


# --- the harness measures what it claims ----------------------------------------------------


def test_harness_counts_bf16_adamw_static_memory_exactly():
    """bf16 full fine-tune with torch AdamW: 2 B weights, 2 B grads, 2x2 B states per parameter."""
    m = _measured("llama", Stack(method="full", precision="bf16"), SHAPE)
    params = _transformers_param_count(LLAMA)
    assert m.params_total == m.params_trainable == params
    assert m.weights == m.weights_by_dtype["bfloat16"] == 2 * params
    assert m.gradients == m.weights
    # exp_avg + exp_avg_sq in bf16, plus AdamW's fp32 scalar `step` per parameter tensor
    assert m.optimizer_by_dtype["bfloat16"] == 4 * params
    n_tensors = 3 * 9 + 3  # per layer: q k v o gate up down + 2 norms; embed, final norm, lm_head
    assert m.optimizer_by_dtype["float32"] == 4 * n_tensors


def test_tied_embeddings_are_counted_once():
    case = _CASES["qwen2 full fp32 eager (bias, tied)"]
    m = _measured(case.name, case.stack, case.shape)
    assert m.params_total == _transformers_param_count(case.config)
    assert m.weights == 4 * m.params_total


def test_eager_attention_saves_the_score_matrix_sdpa_does_not():
    """Eager keeps softmax in fp32 plus its bf16 cast: 6 B per score, per head, per layer."""
    eager = _measured("llama", Stack(precision="bf16", attention="eager"), SHAPE)
    sdpa = _measured("llama", Stack(precision="bf16", attention="sdpa"), SHAPE)
    scores = LLAMA["num_hidden_layers"] * SHAPE.micro_batch * LLAMA["num_attention_heads"] * SHAPE.seq_len**2
    assert 6 * scores <= eager.activations - sdpa.activations <= 6.5 * scores
    assert not any(s.numel == scores // LLAMA["num_hidden_layers"] for s in sdpa.saved)


def test_lora_dropout_saves_one_mask_per_adapted_input():
    plain = _measured("llama", Stack(method="lora", lora_dropout=0.0), SHAPE)
    dropped = _measured("llama", Stack(method="lora", lora_dropout=0.05), SHAPE)
    assert plain.dropout_mask_elements == 0
    assert dropped.activations > plain.activations
    masks = [s for s in dropped.saved if s.op == "dropout"]
    # layers 1-2: q/k/v share one input (one mask each: 3), o, gate, up (2 shared -> 2), down;
    # layer 0's q/k/v input needs no grad under LoRA, so no mask there
    assert len(masks) == 3 * 3 + 3 * 4 - 3
    assert dropped.activations_cuda < dropped.activations  # bool masks on CUDA, fp32 noise on CPU


def test_checkpointing_keeps_only_layer_inputs_in_forward():
    m = _measured("llama", Stack(grad_checkpointing=True), SHAPE)
    layer_bytes = sum(v for k, v in m.activations_by_module.items() if ".layers.*" in k)
    tokens = SHAPE.micro_batch * SHAPE.seq_len
    assert layer_bytes == LLAMA["num_hidden_layers"] * tokens * LLAMA["hidden_size"] * 2
    full = _measured("llama", Stack(grad_checkpointing=False), SHAPE)
    # one recomputed layer saves what a layer saves without checkpointing
    per_layer = sum(v for k, v in full.activations_by_module.items() if ".layers.*" in k) / 3
    assert 0.9 * per_layer <= m.recompute_max_layer <= 1.1 * per_layer


def test_autocast_weight_copies_are_counted_as_saved():
    """amp-bf16 saves a bf16 copy of every linear weight it multiplies (autocast's cache); under TRL's fused
    LM head the head's weight is multiplied outside autocast, so its copy is not saved."""
    m = _measured("llama", Stack(precision="amp-bf16", loss="standard"), SHAPE)
    h, i, L = LLAMA["hidden_size"], LLAMA["intermediate_size"], LLAMA["num_hidden_layers"]
    kv = LLAMA["num_key_value_heads"] * LLAMA["head_dim"]
    linear = L * (2 * h * h + 2 * h * kv + 3 * h * i) + h * LLAMA["vocab_size"]
    assert m.weight_copies == 2 * linear
    assert m.weights == 4 * m.params_total
    fused = _measured("llama", Stack(precision="amp-bf16", loss="trl"), SHAPE)
    assert fused.weight_copies == 2 * (linear - h * LLAMA["vocab_size"])


def test_doras_weight_norm_graph_dies_within_forward_and_is_not_counted():
    """peft's DoRA builds lora_B(lora_A(eye(in))) with grad on, reads it detached and drops it: the eye
    matrix is saved by lora_A but freed before backward. The harness tells it from what backward reads."""
    dora = _measured("llama", Stack(method="lora", dora=True, lora_dropout=0.0, loss="standard"), SHAPE)
    plain = _measured("llama", Stack(method="lora", lora_dropout=0.0, loss="standard"), SHAPE)
    h, i, L = LLAMA["hidden_size"], LLAMA["intermediate_size"], LLAMA["num_hidden_layers"]
    eyes = L * 4 * (6 * h * h + i * i)  # q, k, v, o, gate, up read h-wide inputs; down reads i-wide ones
    assert eyes <= dora.transient_graphs <= 1.1 * eyes
    assert plain.transient_graphs == 0
    assert not any(s.transient for s in dora.saved)


def test_chunked_loss_keeps_every_chunks_fp32_log_softmax():
    m = _measured("llama", Stack(method="lora", lora_dropout=0.0, loss="chunked"), SHAPE)
    tokens, vocab = SHAPE.micro_batch * SHAPE.seq_len, LLAMA["vocab_size"]
    chunks = [s for s in m.saved if s.op in ("log_softmax", "cross_entropy") and s.dtype == "float32"
              and s.numel % vocab == 0]
    assert len(chunks) == 8 and sum(s.storage_bytes for s in chunks) == 4 * tokens * vocab


def test_modules_to_save_keeps_the_original_and_a_trainable_copy():
    base = _measured("llama", Stack(method="lora", lora_dropout=0.0), SHAPE)
    mts = _measured("llama", Stack(method="lora", lora_dropout=0.0, modules_to_save="embed_tokens,lm_head"), SHAPE)
    copy = 2 * LLAMA["vocab_size"] * LLAMA["hidden_size"]
    assert mts.params_total == base.params_total + copy
    assert mts.params_trainable == base.params_trainable + copy
    assert mts.gradients == base.gradients + 2 * copy  # bf16 copies, bf16 gradients


@pytest.mark.parametrize("name", [n for n, _, _ in EXCLUDED_STACKS])
def test_stacks_the_cpu_cannot_run_are_refused_with_a_reason(name):
    stack = next(s for n, s, _ in EXCLUDED_STACKS if n == name)
    with pytest.raises(Unmeasurable, match=r"\w"):
        measure(LLAMA, stack, SHAPE)


def test_validation_matrix_covers_the_promised_ground():
    """Six+ families incl. MoE and a 256k vocabulary; every dimension in several families."""
    families = {c.config["model_type"] for c in VALIDATION_CASES}
    assert len(families) >= 6 and {"qwen3_moe", "gemma3_text"} <= families
    vocabs = [c.config["vocab_size"] for c in VALIDATION_CASES]
    assert min(vocabs) <= 4096 and max(vocabs) >= 262144
    seqs = [c.shape.seq_len for c in VALIDATION_CASES]
    assert min(seqs) <= 64 and max(seqs) >= 1024
    assert {c.shape.micro_batch for c in VALIDATION_CASES} >= {1, 2, 4}

    def fams(pred) -> int:
        return len({c.config["model_type"] for c in VALIDATION_CASES if pred(c.stack)})

    assert fams(lambda s: s.method == "lora") >= 4 and fams(lambda s: s.method == "full") >= 4
    assert fams(lambda s: s.grad_checkpointing) >= 3 and fams(lambda s: not s.grad_checkpointing) >= 3
    assert fams(lambda s: s.attention == "eager") >= 3 and fams(lambda s: s.attention == "sdpa") >= 3
    assert fams(lambda s: s.precision == "amp-bf16") >= 3 and fams(lambda s: s.precision == "bf16") >= 3
    assert fams(lambda s: s.precision == "fp32") >= 2
    assert fams(lambda s: s.method == "lora" and s.lora_dropout > 0) >= 2
    # the techniques of advisor/stacks.py (Liger, chunked loss, compile, DoRA, modules_to_save) that run on a CPU
    assert fams(lambda s: s.dora) >= 2
    assert any("lm_head" in c.stack.lora_targets for c in VALIDATION_CASES)
    assert any("embed_tokens" in c.stack.lora_targets for c in VALIDATION_CASES)
    assert any(c.stack.saved_modules for c in VALIDATION_CASES)
    assert any(c.stack.loss == "chunked" for c in VALIDATION_CASES)


# --- the estimator agrees with the measurement ----------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", [c.name for c in VALIDATION_CASES])
def test_estimate_matches_pytorch(name):
    from advisor import api

    case = _CASES[name]
    m = _measured(case.name, case.stack, case.shape)
    est = api.estimate_memory(model_spec(case.config, case.name), case.stack, case.shape)
    measured = {
        "weights": m.weights,
        "gradients": m.gradients,
        "optimizer": m.optimizer,
        "activations": activation_target(m, case.stack),
    }
    errors = {}
    for comp, value in measured.items():
        guess = getattr(est.breakdown, comp)
        err = (guess - value) / value
        if abs(err) > TOLERANCE[comp]:
            errors[comp] = f"measured {value:,d} estimated {guess:,d} ({err:+.1%})"
    if errors:
        top = sorted(m.activations_by_module.items(), key=lambda kv: -kv[1])[:6]
        pytest.fail(f"{name}: {errors}; largest saved activations by module: {top}")
