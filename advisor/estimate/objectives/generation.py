"""GRPO's generation inside the training process (transformers `generate`, no vLLM) and the batch GRPO buffers.

`_generate_single_turn` (trl 1.16.0 grpo_trainer.py:1813-1889) left-pads the local generation batch -- B_gen =
per_device_train_batch_size × steps_per_generation completions (grpo_trainer.py:1272-1278, 1522-1551) -- and calls
`generate(max_new_tokens=max_completion_length)` under torch.no_grad inside `unwrap_model_for_generation`
(trl/models/utils.py:106-154), which switches gradient checkpointing off and, under ZeRO-3 with
ds3_gather_for_generation (default True, grpo_config.py:498), gathers every parameter on every GPU
(deepspeed.zero.GatheredParameters, models/utils.py:141-150). Generation starts a step: the previous step's
gradients are gone (Trainer's zero_grad(set_to_none=True)).

transformers' DynamicCache grows each layer's keys and values by torch.cat per token (cache_utils.py:136-137): at
the last token every row holds prompt + completion positions. With TRL's default fp32 weights under bf16 autocast
the keys come out fp32 (RoPE multiplies bf16 k_proj output by fp32 cos/sin) and the values bf16; with bf16 weights
both are bf16 (CPU-verified with trl 1.16.0, /work/staging/rl/cpu_check/probe_output.txt; a type-promotion rule,
so expected the same on CUDA -- scripts/device_check.sh checks it).
"""

from __future__ import annotations

from advisor.estimate.activations import act_bytes
from advisor.model.architecture import Architecture
from advisor.stacks import Stack

SRC = ("trl 1.16.0 grpo_trainer.py:1813-1889 (_generate_single_turn), trl/models/utils.py:106-154; "
       "transformers 5.24.0 cache_utils.py:136-137 (DynamicCache torch.cat)")


def kv_dtypes(stack: Stack) -> tuple[int, int]:
    """(key bytes, value bytes) per element of transformers' cache for this stack's weights and autocast.

    fp32 weights (TRL's default load): accelerate wraps the prepared model's forward in autocast, so a full model's
    generate runs k/v projections in 16-bit and RoPE promotes only the keys to fp32 (4 + 2 B; research probe,
    /work/staging/rl/cpu_check); a PEFT model generates through its base model's unwrapped forward, outside
    autocast, so both stay fp32 (4 + 4 B; benchmarks/rl_census.py measures it)."""
    if stack.precision == "fp32":
        return 4, 4
    if stack.precision.startswith("amp"):
        return (4, 4) if stack.method != "full" else (4, 2)
    return 2, 2


def kv_per_token(arch: Architecture, key_bytes: int, value_bytes: int) -> int:
    """Cache bytes per token of one sequence: layers × kv heads × head_dim × (key + value bytes)."""
    spec = arch.spec
    return spec.num_hidden_layers * spec.num_key_value_heads * spec.head_dim * (key_bytes + value_bytes)


def hf_kv_cache(arch: Architecture, stack: Stack, batch: int, prompt: int, completion: int) -> tuple[int, str]:
    """transformers' KV cache at the last generated token of `batch` rows: prompt + completion - 1 positions (the
    last token is sampled, never fed back)."""
    kb, vb = kv_dtypes(stack)
    per = kv_per_token(arch, kb, vb)
    tokens = prompt + completion - 1
    spec = arch.spec
    return batch * tokens * per, (
        f"{batch:,} completions × ({prompt:,} prompt + {completion:,} completion - 1) tokens × {spec.num_hidden_layers} "
        f"layers × {spec.num_key_value_heads} kv heads × {spec.head_dim} × ({kb} B key + {vb} B value)")


def hf_transient(arch: Architecture, stack: Stack, batch: int, prompt: int, completion: int) -> tuple[int, str]:
    """The largest short-lived buffer of generate: the prefill's one-layer working set over batch × prompt tokens,
    or, while decoding, one layer's keys and values copied by torch.cat plus the last position's logits (the
    model's, the fp32 copy generate takes, generation/utils.py:3248, and the sampling probabilities)."""
    spec = arch.spec
    a = act_bytes(stack)
    f = spec.moe_intermediate_size * spec.num_experts_per_tok if spec.is_moe else spec.intermediate_size
    prefill = batch * prompt * (3 * f + 3 * spec.hidden_size) * a
    kb, vb = kv_dtypes(stack)
    layer_kv = batch * (prompt + completion) * spec.num_key_value_heads * spec.head_dim * (kb + vb)
    decode = layer_kv + batch * spec.vocab_size * (a + 4 + 4)
    if prefill >= decode:
        return int(prefill), "prefill: one layer's working set over the prompts (3 × intermediate + 3 × hidden)"
    return int(decode), "decode: one layer's keys/values copied by torch.cat + last-position logits (fp32 copy, probs)"


def zero3_gather(arch: Architecture, stack: Stack, pb: int) -> int:
    """ZeRO-3 + ds3_gather_for_generation: the rest of every parameter gathered for the whole generate call."""
    if stack.sharding != "zero3" or stack.gpus <= 1:
        return 0
    return int(arch.params_total * pb * (1 - 1 / stack.gpus))


def buffered_batch(batch: int, seq: int, completion: int, per_token_vectors: int) -> tuple[int, str]:
    """What GRPO keeps between generation and the last micro-step that uses it (grpo_trainer.py:1522-1551,
    2441-2504): prompt/completion ids and masks (int64) over the padded width, and fp32 per-token vectors
    (old-policy, reference and vLLM sampling log-probs as the run uses them)."""
    ids = batch * seq * 8 * 2
    vectors = batch * completion * 4 * per_token_vectors
    advantages = batch * 4 + 8  # one fp32 advantage per completion, num_items_in_batch (int64)
    return ids + vectors + advantages, (
        f"{batch:,} completions × {seq:,} positions × (ids + mask, int64) + {per_token_vectors} fp32 per-token "
        f"vector(s) × {completion:,} + advantages")
