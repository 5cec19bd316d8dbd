"""vLLM as GRPO's generator: colocated inside the training GPUs, or as a server on GPUs of its own.

Colocate (trl 1.16.0 trl/generation/vllm_generation.py:337-368): every training process builds
`LLM(model=..., gpu_memory_utilization=util, max_model_len=vllm_max_model_length, max_num_seqs=b·tp·spg,
max_num_batched_tokens=4096, enable_sleep_mode=..., quantization="bitsandbytes" when the policy is 4-bit)`
(max_num_seqs: grpo_trainer.py:1124-1126). vLLM re-reads the checkpoint, so it holds its own copy of the weights in
the checkpoint's dtype (no dtype is passed: "auto"), 4-bit when the policy is QLoRA.

vLLM 0.33.0 (vllm-0.33.0 wheel) sizes itself from the card, not from the model:
- budget = ceil(total × util) (vllm/v1/worker/utils.py:724-726); it refuses to start when free memory at start-up
  is below it (:761-770) -- in colocate the trainer's weights and CUDA context already count as used;
- the KV pool is what the budget leaves after its weights, the profiled activation peak, non-torch memory and the
  CUDA-graph estimate (gpu_worker.py:753-757), in blocks of 16 tokens (config/cache.py:185);
  page bytes = kv heads / tp × 16 × (head_dim + head_dim) × dtype bytes per layer (v1/kv_cache_interface.py:585-601);
- it refuses to start when the pool cannot hold one request of max_model_len tokens (v1/core/
  kv_cache_planning.py:50-87); max_model_len defaults to the model's context when vllm_max_model_length is unset;
- requests beyond what the pool holds wait (waves), they do not run out of memory.
Sleep mode (vllm_enable_sleep_mode): TRL puts vLLM to sleep at level 2 after each generation
(vllm_generation.py:365-368, 750-752): weights and KV cache are discarded (device_allocator/sleep_mode_backend.py
:127-137) and re-pushed from the trainer at the next step (:486-492, 704-705); what stays is non-torch memory.

Server (`trl vllm-serve` -> `vllm serve`, trl/scripts/vllm_serve.py:92-160, 195-276): its own GPUs at
gpu_memory_utilization 0.9, tensor_parallel 1 and data_parallel 1 by default; the trainer's GPUs hold nothing of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from advisor.estimate.memory import NCCL_BUFFER_BYTES, nf4_bytes_per_param
from advisor.model.architecture import Architecture
from advisor.objective import Objective
from advisor.stacks import Stack
from advisor.units import GiB, MiB

BLOCK_TOKENS = 16  # vllm/config/cache.py:185 (block_size default)
COLOCATE_BATCHED_TOKENS = 4096  # trl vllm_generation.py:359 max_num_batched_tokens
# `vllm serve` scheduler defaults the memo could not pin to a line of vLLM 0.33 (uncalibrated; the GPU check
# measures them): chunked-prefill token budget and concurrent sequences.
SERVER_BATCHED_TOKENS = 8192
SERVER_MAX_SEQS = 128
# Non-torch memory after start-up (cuBLAS workspace, NCCL): 0.15 GiB in vLLM's own log of a TRL colocate run
# (https://github.com/vllm-project/vllm/issues/17117, 79.14 GiB card, util 0.25); NCCL buffers added when tp > 1.
NON_TORCH_BYTES = int(0.15 * GiB)
# CUDA-graph memory (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, gpu_worker.py:707-724): captured batch sizes up to
# min(2 × max_num_seqs, 512). Not derivable without the GPU; taken as 256 MiB (vLLM start-up logs report 0.1-1 GiB).
# Uncalibrated: scripts/device_check.sh reads vLLM's own figure.
CUDAGRAPH_BYTES = 256 * MiB
# What a sleeping (level 2) vLLM keeps: the 17117 log freed 19.51 of 19.78 GiB -> 0.27 GiB stayed.
SLEEP_RESIDUAL_BYTES = int(0.27 * GiB)
KV_DTYPE_BYTES = 2  # kv_cache_dtype "auto" = the checkpoint's dtype (bf16 for the usual checkpoints)
SRC = "vllm 0.33.0 v1/worker/utils.py:716-772, gpu_worker.py:641-820, v1/core/kv_cache_planning.py:50-87"


@dataclass(frozen=True)
class Share:
    """vLLM on one GPU: its budget and what fills it, the generation batch it serves, and refusals."""

    budget: int
    weights: int
    activation_peak: int
    non_torch: int
    cudagraph: int
    kv_pool: int
    kv_per_token: int  # per GPU (kv heads / tp)
    max_model_len: int
    max_num_seqs: int
    tensor_parallel: int
    sequences: int  # completions this vLLM generates per generation step
    tokens_per_sequence: int  # prompt + completion, rounded up to whole blocks
    concurrency: int  # sequences decoded at once (the pool's and max_num_seqs' limit)
    waves: int
    kv_needed: int  # the pool the batch would need to run in one wave
    refusals: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, int | str]:
        out = {k: v for k, v in self.__dict__.items() if k != "refusals"}
        return {k: int(v) for k, v in out.items()}


def _blocks(tokens: int) -> int:
    return -(-tokens // BLOCK_TOKENS) * BLOCK_TOKENS


def weights(arch: Architecture, stack: Stack, tp: int) -> int:
    """vLLM's copy of the weights per GPU: the checkpoint's 16-bit dtype, or bitsandbytes 4-bit for a QLoRA policy
    (vllm_generation.py:337-344), split over tensor-parallel ranks."""
    P = arch.params_total
    if stack.method == "qlora":
        q = arch.linear_weight_params
        return int((q * nf4_bytes_per_param(True) + (P - q) * 2) / tp)
    return int(P * 2 / tp)


def kv_bytes_per_token(arch: Architecture, tp: int) -> int:
    """L × 2 (K and V) × kv heads / tp × head_dim × dtype bytes (kv_cache_interface.py:585-601, per block / 16)."""
    spec = arch.spec
    return spec.num_hidden_layers * 2 * max(spec.num_key_value_heads // tp, 1) * spec.head_dim * KV_DTYPE_BYTES


def activation_peak(arch: Architecture, tokens: int, seqs: int, tp: int) -> int:
    """vLLM's profiling run (gpu_model_runner.py:6072-6143): one forward of max_num_batched_tokens tokens -- one
    layer's working set, merged gate_up and its activation (3 × intermediate / tp) beside 3 × hidden, 16-bit --
    and a sampler run over max_num_seqs rows of vocabulary logits (16-bit logits, fp32 probabilities and logprobs)."""
    spec = arch.spec
    f = spec.moe_intermediate_size * spec.num_experts_per_tok if spec.is_moe else spec.intermediate_size
    return int(tokens * (3 * f / tp + 3 * spec.hidden_size) * 2 + seqs * spec.vocab_size * (2 + 4 + 4))


def max_model_len(arch: Architecture, objective: Objective, seq_len: int) -> int:
    """vllm_max_model_length, or prompt + completion (what `launch` writes), or the model's context ("model":
    TRL's default when the config does not set it)."""
    m = objective.vllm_max_model_length
    if m is None:
        return seq_len
    return arch.spec.max_position_embeddings if m == 0 else m


def share(arch: Architecture, stack: Stack, seq_len: int, generation_batch: int, card_bytes: int,
          server: bool = False) -> Share:
    """vLLM's share of one GPU of `card_bytes` (colocate: the training GPU; server: one of its own GPUs)."""
    o = stack.objective
    util = o.utilization
    tp = o.vllm_tensor_parallel_size if not server else server_tp(arch, stack, seq_len, card_bytes)
    budget = math.ceil(card_bytes * util)
    w = weights(arch, stack, tp)
    if server:
        seqs, batched = SERVER_MAX_SEQS, SERVER_BATCHED_TOKENS
        dp = max(o.vllm_server_gpus // tp, 1)
        sequences = -(-generation_batch // dp)  # the global generation batch, split over data-parallel replicas
    else:
        # every process builds max_num_seqs = per_device_train_batch_size × tp × steps_per_generation; a TP group
        # gathers its ranks' prompts (vllm_generation.py:685-702)
        seqs, batched, sequences = generation_batch * tp, COLOCATE_BATCHED_TOKENS, generation_batch * tp
    act = activation_peak(arch, batched, seqs, tp)
    non_torch = NON_TORCH_BYTES + (NCCL_BUFFER_BYTES if tp > 1 else 0)
    pool = max(budget - w - act - non_torch - CUDAGRAPH_BYTES, 0)
    per_tok = kv_bytes_per_token(arch, tp)
    mml = max_model_len(arch, o, seq_len)
    need_one = _blocks(mml) * per_tok
    tokens = _blocks(seq_len)
    fits = pool // max(tokens * per_tok, 1)
    concurrency = int(max(min(seqs, fits, sequences), 0))
    refusals = []
    if pool <= 0:
        refusals.append(f"vLLM's budget ({util:g} × {card_bytes / GiB:.1f} GiB = {budget / GiB:.1f} GiB) does not even "
                        f"hold its {w / GiB:.1f} GiB of weights and {(act + non_torch + CUDAGRAPH_BYTES) / GiB:.1f} GiB "
                        f"of activations and graphs: raise --vllm-gpu-memory-utilization"
                        + (" or --vllm-server-gpus" if server else ""))
    elif pool < need_one:
        refusals.append(f"vLLM refuses to start: one request of max_model_len {mml:,} tokens needs "
                        f"{need_one / GiB:.2f} GiB of KV cache, its pool holds {pool / GiB:.2f} GiB "
                        "(kv_cache_planning.py:50-87); set --vllm-max-model-length to prompt + completion or raise "
                        "--vllm-gpu-memory-utilization")
    waves = -(-sequences // concurrency) if concurrency else 0
    return Share(budget=budget, weights=w, activation_peak=act, non_torch=non_torch, cudagraph=CUDAGRAPH_BYTES,
                 kv_pool=pool, kv_per_token=per_tok, max_model_len=mml, max_num_seqs=seqs, tensor_parallel=tp,
                 sequences=sequences, tokens_per_sequence=tokens, concurrency=concurrency, waves=waves,
                 kv_needed=sequences * tokens * per_tok, refusals=tuple(refusals))


def server_tp(arch: Architecture, stack: Stack, seq_len: int, card_bytes: int) -> int:
    """Tensor-parallel size of the server: the smallest power of two (dividing its GPUs) whose share of the weights,
    activations and one full-length request fit under 0.9 × the card; the rest of its GPUs are data-parallel."""
    o = stack.objective
    gpus = o.vllm_server_gpus
    tp = 1
    while tp < gpus and gpus % (tp * 2) == 0:
        budget = card_bytes * o.utilization
        need = (weights(arch, stack, tp) + activation_peak(arch, SERVER_BATCHED_TOKENS, SERVER_MAX_SEQS, tp)
                + NON_TORCH_BYTES + CUDAGRAPH_BYTES + _blocks(seq_len) * kv_bytes_per_token(arch, tp))
        if need <= budget:
            break
        tp *= 2
    return tp
