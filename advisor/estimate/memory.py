"""Per-GPU memory of a fine-tuning run: every component named, sized and sourced.

Model states follow the ZeRO paper (Rajbhandari et al. 2020, §3 and §5: Ψ parameters,
K bytes of optimizer state per parameter, partitioned by stage). QLoRA's NF4 storage follows
Dettmers et al. 2023 (§3: 4-bit NormalFloat with a 64-element block absmax; double
quantisation stores those constants in 8 bits with a second fp32 level per 256 blocks).
Activations are in `advisor.estimate.activations`. The peak is the start of backward: model states,
every saved activation and the fp32 loss gradients are alive together. AdamW is the fused
kernel (HF Trainer's default `adamw_torch_fused` since torch 2.8), which updates in place;
the foreach variant would add one state-sized temporary during step().

Techniques: DoRA's magnitude vectors train beside the adapters (peft dora.py); peft's
modules_to_save keeps a trainable copy beside each frozen original (its own weights, gradients and
optimizer state, in the model's dtype); DeepSpeed ZeRO-3 keeps gathered parameters within its live
budget and a contiguous reduce bucket, sized from the values `launch` writes (DEEPSPEED_ZERO3).
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor import techniques
from advisor.errors import BadInput
from advisor.estimate.activations import (
    ActivationEstimate,
    act_bytes,
    adapter_bytes,
    describe,
    dora_transient,
    estimate_activations,
    term_source,
)
from advisor.memo import Memo
from advisor.model import families
from advisor.model.architecture import Architecture, supported_attention
from advisor.model.release import Release, bundled
from advisor.results import Breakdown, Component, MemoryEstimate, ModelInfo
from advisor.stacks import Shape, Stack
from advisor.units import (
    BILLION,
    BYTES_16BIT,
    BYTES_FP32,
    BYTES_INT8,
    NF4_BLOCK,
    NF4_BYTES,
    NF4_DOUBLE_QUANT_BLOCK,
    MiB,
)

# CUDA context + cuBLAS/cuDNN module images once torch initialises a device: 0.3-0.6 GiB with
# lazy module loading (CUDA >= 11.7; shared/reference/GPU_SPECS.md "Memory"; PyTorch notes on
# CUDA_MODULE_LOADING=LAZY). It is outside max_memory_reserved, inside nvidia-smi's figure.
CUDA_CONTEXT_BYTES = 512 * MiB
# Caching-allocator slack (reserved - allocated): blocks are rounded (>1 MiB requests to 2 MiB
# multiples, large segments kept for reuse) and freed activation blocks of varying sizes
# fragment. PyTorch CUDA semantics docs; published runs show 0.5-3 GB
# (shared/calibration/SOURCES.md, "mem_kind"). Modelled as a floor plus a share of the bytes
# that are allocated and freed every step (activations and transients).
ALLOCATOR_FLOOR_BYTES = 256 * MiB
ALLOCATOR_DYNAMIC_FRACTION = 0.08
# NCCL communicator buffers on each GPU for multi-GPU jobs (NCCL_BUFFSIZE defaults to 4 MiB
# per channel and peer; NCCL environment-variable docs).
NCCL_BUFFER_BYTES = 256 * MiB

# Bytes per parameter as the weights are held: 16-bit, or fp32 (fp32 itself and mixed precision's fp32 masters)
PARAM_BYTES = {"bf16": BYTES_16BIT, "fp16": BYTES_16BIT, "fp32": BYTES_FP32, "amp-bf16": BYTES_FP32,
               "amp-fp16": BYTES_FP32}

# DeepSpeed ZeRO-3 buffer settings the estimate uses and `gpu-advisor launch` writes into the bundle's
# ds_config.json (advisor.launch.bundle.deepspeed_json): DeepSpeed's own defaults, deepspeed 0.19.8
# runtime/zero/config.py DeepSpeedZeroConfig (reduce_bucket_size 5e8 line 113, stage3_prefetch_bucket_size 5e7
# line 222, stage3_param_persistence_threshold 1e5 line 228, stage3_max_live_parameters 1e9 line 245,
# stage3_max_reuse_distance 1e9 line 251), written explicitly so a DeepSpeed upgrade cannot move them.
DEEPSPEED_ZERO3 = {
    "reduce_bucket_size": 500_000_000,
    "stage3_prefetch_bucket_size": 50_000_000,
    "stage3_param_persistence_threshold": 100_000,
    "stage3_max_live_parameters": 1_000_000_000,
    "stage3_max_reuse_distance": 1_000_000_000,
    "contiguous_gradients": True,
}


# What each loss path keeps (advisor/estimate/activations.py has the code each follows).
LOSS_WORDS = {
    "trl": "TRL 1.16.0 SFTTrainer's fused LM head (the launch bundle's train.py): no logits kept, 4096 tokens x 32768 "
           "vocabulary entries per tile, recomputed in backward",
    "standard": "transformers ForCausalLMLoss: fp32 logits, log_softmax kept",
    "chunked": "chunked cross-entropy (torchtune CEWithChunkedOutputLoss, 8 chunks): fp32 log_softmax kept, one "
               "chunk's gradients at a time",
    "cce": "Cut Cross-Entropy (cut-cross-entropy 25.1.1): no logits, no log-softmax; blockwise in Triton, recomputed in "
           "backward",
    "liger": "Liger fused linear cross-entropy (no logits kept; one chunk of logits at a time)",
}


def nf4_bytes_per_param(double_quant: bool) -> float:
    """NF4 weight + quantisation constants per parameter (Dettmers et al. 2023, §3)."""
    if double_quant:
        # 8-bit absmax per 64, fp32 per 256 blocks
        return NF4_BYTES + BYTES_INT8 / NF4_BLOCK + BYTES_FP32 / (NF4_BLOCK * NF4_DOUBLE_QUANT_BLOCK)
    return NF4_BYTES + BYTES_FP32 / NF4_BLOCK  # fp32 absmax per 64-element block


# What the launch bundle's QLoRA path runs: TRL 1.16.0 SFTTrainer.__init__ (trl/trainer/sft_trainer.py, the
# `_is_quantized_model` branch) calls get_peft_model and casts only the trainable adapters to bf16; it no longer calls
# peft's prepare_model_for_kbit_training, and neither does advisor/launch/templates/train.py. peft 0.21.2
# utils/other.py prepare_model_for_kbit_training ("cast all non INT8 parameters to fp32": every fp16/bf16 parameter
# whose class is not Params4bit) is what scripts that call it pay: the estimate names that term beside the 16-bit one.
KBIT_CAST_SOURCE = ("peft 0.21.2 src/peft/utils/other.py prepare_model_for_kbit_training (casts every fp16/bf16 "
                    "parameter that is not bitsandbytes Params4bit to fp32); TRL 1.16.0 trl/trainer/sft_trainer.py "
                    "SFTTrainer.__init__ does not call it")


def kbit_cast_params(arch: Architecture) -> int:
    """Parameters prepare_model_for_kbit_training casts to fp32 in a 4-bit model: all but the quantised nn.Linear
    weights (embeddings, norms, biases, lm_head, routers and fused experts)."""
    return arch.params_total - arch.linear_weight_params


def kbit_cast_bytes(arch: Architecture, stack: Stack) -> int:
    """Extra bytes per GPU when those parameters are held in fp32 instead of 16-bit (sharded like the weights)."""
    return int(kbit_cast_params(arch) * (BYTES_FP32 - BYTES_16BIT) / stack.shard_degree_params)


@dataclass
class _States:
    weights: dict[str, Component]
    gradients: dict[str, Component]
    optimizer: dict[str, Component]
    cpu_ram: int


def _zero3_gathered(params: int, unit: float, wb: float) -> dict[str, Component]:
    """DeepSpeed ZeRO-3's gathered (unpartitioned) parameters, from the values `launch` writes (DEEPSPEED_ZERO3).

    The module that runs is gathered whatever the budget; the coordinator keeps a gathered parameter until
    no sub-module needs it and its next use is farther than stage3_max_reuse_distance elements of fetches
    away (deepspeed/runtime/zero/partitioned_param_coordinator.py release_sub_module), and prefetches only
    while fewer than stage3_max_live_parameters elements are available (fetch_sub_module:
    max_params_to_prefetch = min(max_live - available, prefetch_bucket)). At the turn from forward to
    backward the module used last (lm_head) is reused at once and the layers before it within the reuse
    distance stay gathered: the largest module plus min(reuse distance, max live) elements, at most every
    parameter -- on one GPU as well, beside the partition itself. The prefetch bucket adds only what the
    live budget leaves (nothing with DeepSpeed's defaults)."""
    z = DEEPSPEED_ZERO3
    window = min(z["stage3_max_reuse_distance"], z["stage3_max_live_parameters"])
    live = int(min(params, unit + window))
    prefetch = min(z["stage3_prefetch_bucket_size"], max(0, z["stage3_max_live_parameters"] - live),
                   max(0, params - live))
    src = "deepspeed 0.19.8 runtime/zero/config.py DeepSpeedZeroConfig; partitioned_param_coordinator.py"
    return {
        "weights.zero3_live_params": Component(
            bytes=int(live * wb),
            formula=f"{live:,} gathered parameter elements × {wb:g} B: the largest module ({int(unit):,}) + "
            f"min(stage3_max_reuse_distance {z['stage3_max_reuse_distance']:,}, stage3_max_live_parameters "
            f"{z['stage3_max_live_parameters']:,}), at most all {params:,} params, gathered at the forward/backward turn",
            source=src,
        ),
        "weights.zero3_prefetch_bucket": Component(
            bytes=int(prefetch * wb),
            formula=f"{prefetch:,} elements fetched ahead: min(stage3_prefetch_bucket_size "
            f"{z['stage3_prefetch_bucket_size']:,}, live budget left) × {wb:g} B",
            source=src,
        ),
    }


def _trainable(arch: Architecture, stack: Stack) -> tuple[int, int]:
    """(trainable parameters, bytes per trainable parameter): every weight for full fine-tuning; the
    adapters (and DoRA's magnitude vectors, which peft keeps in the adapter dtype) for LoRA/QLoRA. The
    modules_to_save copies train too, in the model's dtype: `_saved_copies`."""
    if stack.is_full:
        return arch.params_total, PARAM_BYTES[stack.precision]
    return arch.lora_params(stack.lora_rank, stack.lora_targets) + _dora_magnitudes(arch, stack), adapter_bytes(stack)


def _dora_magnitudes(arch: Architecture, stack: Stack) -> int:
    return arch.dora_magnitudes(stack.lora_targets) if stack.dora and stack.is_adapter else 0


def _saved_copies(arch: Architecture, stack: Stack) -> tuple[int, int]:
    """(parameters, bytes each) of peft's modules_to_save copies: ModulesToSaveWrapper keeps the frozen
    original AND a trainable deepcopy of it (peft 0.21.2 utils/other.py ModulesToSaveWrapper.update), in
    the dtype the model was loaded in (16-bit for QLoRA's embeddings/lm_head)."""
    if stack.is_full or not stack.saved_modules:
        return 0, 0
    return arch.saved_module_params(stack.saved_modules), PARAM_BYTES[stack.precision]


def _copy_optimizer_bytes(stack: Stack, count: int, pb: int, arch: Architecture) -> tuple[float, str]:
    """Optimizer state of the modules_to_save copies (their own dtype, not the adapters')."""
    row = techniques.get(stack.optimizer)
    if stack.is_zero and pb == 2:
        states = row.state_bytes(BYTES_FP32)
        return count * (8 + states), "fp32 master + fp32 gradient partition + states (DeepSpeed mixed precision)"
    if row.factored:  # one row + one column factor per V×H matrix
        spec = arch.spec
        n = sum(1 for m in stack.saved_modules if m in ("embed_tokens", "lm_head"))
        return n * (spec.vocab_size + spec.hidden_size) * pb + count * row.state_bytes(pb), row.note(pb, copy=True)
    return count * row.state_bytes(pb), row.note(pb, copy=True)


def _adafactor_state_elems(arch: Architecture, stack: Stack) -> int:
    """Adafactor (Shazeer & Stern 2018): row + column second-moment factors per matrix."""
    if stack.is_adapter:
        return sum(lin.count * 2 * stack.lora_rank + lin.count * (lin.in_features + lin.out_features)
                   for lin in arch.lora_targeted(stack.lora_targets))
    spec = arch.spec
    elems = sum(lin.count * (lin.in_features + lin.out_features) for lin in arch.linears())
    elems += spec.vocab_size + spec.hidden_size  # embedding (and an untied lm_head)
    if not spec.tie_word_embeddings:
        elems += spec.vocab_size + spec.hidden_size
    elems += sum(layer.norm_params for layer in arch.layers) + spec.hidden_size  # 1-D: full
    return int(elems * arch.scale)


def _model_states(arch: Architecture, stack: Stack) -> _States:
    """Weights, gradients and optimizer state per GPU, and the host RAM offloaded states take: one
    named part per kind (each cites its source)."""
    trainable, tb = _trainable(arch, stack)
    mags = _dora_magnitudes(arch, stack)
    copies, cb = _saved_copies(arch, stack)
    weights = _weights(arch, stack, trainable, tb, mags, copies, cb)
    gradients = _gradients(arch, stack, trainable, tb, mags, copies, cb)
    optimizer = _optimizer(arch, stack, trainable, tb, copies, cb)
    return _States(weights, gradients, optimizer, _offloaded(arch, stack, trainable, copies))


def _weights(arch: Architecture, stack: Stack, trainable: int, tb: int, mags: int, copies: int,
             cb: int) -> dict[str, Component]:
    """Frozen and trainable weights per GPU: base (or NF4 + 16-bit rest), adapters, DoRA magnitudes,
    modules_to_save copies, and the gathered units of sharded runs."""
    P = arch.params_total
    pb = PARAM_BYTES[stack.precision]
    n_p = stack.shard_degree_params
    weights: dict[str, Component] = {}
    compute_b = BYTES_FP32 if stack.pure_fp32 else BYTES_16BIT
    largest_layer = arch.largest_layer_params * arch.scale

    if stack.is_qlora:
        q = arch.linear_weight_params
        nf4 = nf4_bytes_per_param(stack.double_quant)
        weights["weights.nf4_linears"] = Component(
            bytes=int(q * nf4 / n_p),
            formula=f"{q:,} linear weights × {nf4:.4f} B (NF4{' + double-quant' if stack.double_quant else ''} constants)",
            source="Dettmers et al. 2023, QLoRA §3",
        )
        experts = arch.expert_weight_params
        weights["weights.16bit_rest"] = Component(
            bytes=int((P - q) * BYTES_16BIT / n_p),
            formula=f"{P - q:,} embedding/norm/bias/router{'/fused-expert' if experts else ''} params × 2 B "
            "(not nn.Linear, so bitsandbytes leaves them 16-bit)",
            source="transformers 5 replace_with_bnb_linear swaps nn.Linear only; lm_head kept in 16-bit; kept 16-bit "
            "by the bundle: " + KBIT_CAST_SOURCE,
        )
    else:
        weights["weights.base"] = Component(
            bytes=int(P * pb / n_p),
            formula=f"{P:,} params × {pb} B ({stack.precision}){f' / {n_p} shards' if n_p > 1 else ''}",
            source="ZeRO (Rajbhandari et al. 2020) §3: Ψ parameters; stage 3 partitions them",
        )
    if stack.is_adapter:
        heads = arch.head_targets(stack.lora_targets)
        weights["weights.lora_adapters"] = Component(
            bytes=int((trainable - mags) * tb / n_p),
            formula=f"{trainable - mags:,} adapter params (r={stack.lora_rank}, {stack.lora_targets}) × {tb} B"
            + (f", {' and '.join(heads)} r·(h+V) each" if heads else ""),
            source="peft LoRA: A (in×r) + B (r×out) per target (lora.Embedding: r×V + h×r); fp32 unless "
            "autocast_adapter_dtype=False",
        )
    if mags:
        weights["weights.dora_magnitudes"] = Component(
            bytes=int(mags * tb / n_p),
            formula=f"{mags:,} magnitude elements (one per output feature of every adapted module) × {tb} B; "
            "trained: gradients and optimizer state counted with the adapters",
            source="peft 0.21.2 tuners/lora/dora.py DoraLinearLayer.update_layer: nn.Parameter(‖W + s·BA‖ per row)",
        )
    if copies:
        weights["weights.modules_to_save"] = Component(
            bytes=int(copies * cb / n_p),
            formula=f"{copies:,} params ({', '.join(stack.saved_modules)}: a trainable copy beside the frozen "
            f"original) × {cb} B",
            source="peft 0.21.2 utils/other.py ModulesToSaveWrapper.update: copy.deepcopy(original_module)",
        )
    root = (arch.embed_params + arch.lm_head_params + arch.final_norm_params) * arch.scale
    if stack.sharding == "zero3":
        unit = max(largest_layer, arch.embed_params * arch.scale, arch.lm_head_params * arch.scale)
        weights.update(_zero3_gathered(P, unit, 0.5 if stack.is_qlora else compute_b))
    elif n_p > 1 or stack.offloads_params:
        wb = 0.5 if stack.is_qlora else compute_b
        weights["weights.gathered_units"] = Component(
            bytes=int((2 * largest_layer + root) * wb),
            formula="two decoder layers (current + prefetched) and the root unit (embeddings, lm_head, "
            "final norm, kept unsharded from forward to backward) in the compute dtype",
            source="PyTorch FSDP2 fully_shard: per-layer all-gather with prefetch; root not resharded after forward",
        )
    if stack.offloads_params:
        for key in ("weights.base", "weights.nf4_linears", "weights.16bit_rest", "weights.lora_adapters"):
            if key in weights:
                weights[key] = Component(bytes=0, formula=weights[key].formula + " (offloaded to CPU)", source=weights[key].source)

    return weights


def _gradients(arch: Architecture, stack: Stack, trainable: int, tb: int, mags: int, copies: int,
               cb: int) -> dict[str, Component]:
    """Gradients per GPU: the trainable parameters', the modules_to_save copies', and the unsharded
    buffers before reduce-scatter."""
    n_g = stack.shard_degree_grads
    largest_layer = arch.largest_layer_params * arch.scale
    root = (arch.embed_params + arch.lm_head_params + arch.final_norm_params) * arch.scale
    gradients = {
        "gradients.trainable": Component(
            bytes=int(trainable * tb / n_g),
            formula=f"{trainable:,} trainable{f' (incl. {mags:,} DoRA magnitudes)' if mags else ''} × {tb} B"
            f"{f' / {n_g} shards' if n_g > 1 else ''}",
            source="ZeRO §3 (gradients in the parameter dtype); stage 2/3 partitions them",
        )
    }
    if copies:
        gradients["gradients.modules_to_save"] = Component(
            bytes=int(copies * cb / n_g),
            formula=f"{copies:,} params of the trainable {', '.join(stack.saved_modules)} copies × {cb} B"
            f"{f' / {n_g} shards' if n_g > 1 else ''}",
            source="peft modules_to_save: the copy has requires_grad=True (utils/other.py _set_layer_requires_grad)",
        )
    if n_g > 1 and stack.shards_grads and stack.is_full:
        gradients["gradients.unsharded_buffers"] = Component(
            bytes=int((largest_layer + root) * tb),
            formula="one layer's and the root unit's unsharded gradients before reduce-scatter",
            source="PyTorch FSDP2 / DeepSpeed reduce-scatter per unit (root last)",
        )

    return gradients


def _optimizer(arch: Architecture, stack: Stack, trainable: int, tb: int, copies: int,
               cb: int) -> dict[str, Component]:
    """Optimizer state per GPU by optimizer (and DeepSpeed's fp32 partitions in its 16-bit modes)."""
    n_o = stack.shard_degree_optimizer
    row = techniques.get(stack.optimizer)
    per, note = row.state_bytes(tb), row.note(tb)
    deepspeed_mixed = stack.is_zero and tb == 2
    if deepspeed_mixed:
        # DeepSpeed's bf16/fp16 mode always keeps fp32 master weights and an fp32 gradient partition
        # the optimizer reads (DeepSpeed stage_1_and_2.py / stage3.py: single_partition_of_fp32_groups
        # and its .grad); the optimizer -- DeepSpeed's or the Trainer's client optimizer -- keeps its
        # states for those fp32 partitions (ZeRO §3, K = 12 for Adam).
        per, note = 8 + row.state_bytes(BYTES_FP32), f"fp32 master + fp32 gradient partition + {row.name} states of " \
                                                     "the fp32 partition (DeepSpeed mixed precision)"
    opt_bytes = trainable * per
    if row.factored:
        opt_bytes += _adafactor_state_elems(arch, stack) * (4 if deepspeed_mixed else tb)
    source = row.memory_source
    offload_opt = stack.offloads_optimizer
    optimizer = {
        "optimizer.states": Component(
            bytes=0 if offload_opt else int(opt_bytes / n_o),
            formula=note + (f" / {n_o} shards" if n_o > 1 else "") + (" (offloaded to CPU)" if offload_opt else ""),
            source=source,
        )
    }
    if copies:
        copy_bytes, copy_note = _copy_optimizer_bytes(stack, copies, cb, arch)
        optimizer["optimizer.modules_to_save"] = Component(
            bytes=0 if offload_opt else int(copy_bytes / n_o),
            formula=f"{copies:,} params of the {', '.join(stack.saved_modules)} copies: {copy_note}"
            + (f" / {n_o} shards" if n_o > 1 else "") + (" (offloaded to CPU)" if offload_opt else ""),
            source=source,
        )

    return optimizer


def _offloaded(arch: Architecture, stack: Stack, trainable: int, copies: int) -> int:
    """Host RAM (bytes, over all GPUs) the offloaded states take."""
    P, pb = arch.params_total, PARAM_BYTES[stack.precision]
    offload_opt = stack.offloads_optimizer
    cpu = 0
    if offload_opt:
        # ZeRO-Offload (Ren et al. 2021) keeps fp32 master params, fp32 grads and Adam states on CPU.
        cpu += int((trainable + copies) * techniques.get(stack.optimizer).offload_host_bytes)
    if stack.offloads_params:
        cpu += int(P * (0.5 if stack.is_qlora else pb))
    return cpu




def checkpoint_bytes(arch: Architecture, stack: Stack) -> int:
    """What one resumable training checkpoint holds, over all GPUs: the trainable weights and the
    optimizer state in their real dtypes (fp32 masters and Adam states for mixed precision; 8-bit
    states for 8-bit Adam; LoRA/QLoRA: the adapters and their states only). Gathered working
    copies, gradients and the frozen base weights are not saved: DeepSpeed's fp32 gradient partition,
    counted with its optimizer state in memory, is left out too (its checkpoint holds the 16-bit module
    weights plus, per rank, fp32 masters and optimizer states: deepspeed/runtime/engine.py
    _save_checkpoint and _save_zero_checkpoint)."""
    states = _model_states(arch, stack.model_copy(update={"gpus": 1, "offload": "none"}))
    keys = ("weights.base",) if stack.is_full else (
        "weights.lora_adapters", "weights.dora_magnitudes", "weights.modules_to_save")
    weights = sum(states.weights[key].bytes for key in keys if key in states.weights)
    optimizer = sum(c.bytes for c in states.optimizer.values())
    if stack.is_zero:
        trainable, tb = _trainable(arch, stack)
        copies, cb = _saved_copies(arch, stack)
        optimizer -= 4 * (trainable * (tb == 2) + copies * (cb == 2))  # the fp32 gradient partition
    return int(weights + optimizer)


def check(arch: Architecture, stack: Stack, transformers: Release | None = None) -> None:
    """Refuse a stack the model cannot run: an attention kernel transformers lacks for it (at that release),
    LoRA targets it has not."""
    allowed = supported_attention(arch.spec.family, transformers)
    if stack.attention not in allowed:
        raise BadInput(
            f"--attention: {arch.spec.name} ({arch.spec.family}) runs with {' or '.join(allowed)} in transformers "
            f"{transformers or bundled()}, not {stack.attention}."
        )
    if stack.is_adapter:
        unknown = arch.unknown_targets(stack.lora_targets)
        if unknown:
            raise BadInput(
                f"--lora-targets: {', '.join(unknown)} not in {arch.spec.name}; its linear modules are "
                f"{', '.join(arch.linear_names())}, plus lm_head and embed_tokens (or use all-linear)."
            )
        if not arch.lora_targeted(stack.lora_targets) and not arch.head_targets(stack.lora_targets):
            raise BadInput("--lora-targets: selects no linear module; use all-linear or module names.")
        if stack.dora and arch.lora_wraps_experts(stack.lora_targets):
            # peft 0.21.2 tuners/lora/layer.py ParamWrapper.update_layer: "does not work with use_dora=True"
            raise BadInput(
                f"--dora: peft wraps {arch.spec.name}'s fused experts with LoRA ParamWrappers, which refuse DoRA; "
                "name the attention projections in --lora-targets (e.g. q_proj,k_proj,v_proj,o_proj) instead of "
                "all-linear."
            )
    if stack.liger and not families.traits(arch.spec.family).liger:
        supported = ", ".join(name for name, fam in families.table().items() if fam.liger)
        raise BadInput(
            f"--liger: Liger Kernel has no patch for {arch.spec.family} models (it patches {supported}); "
            "use --loss chunked for a chunked cross-entropy without its kernels."
        )


def _parts(arch: Architecture):
    """A Component builder that returns one shared object per distinct (bytes, formula, source): the
    activations of a micro-batch do not depend on sharding, optimizer or GPU count, so the planner's
    estimates repeat most of their components. (Built by validation: in pydantic 2.13 that is ~2 µs,
    model_construct ~4 µs.)"""
    cache = arch._memo.get("components")
    if cache is None:
        cache = arch._memo["components"] = Memo()

    def part(bytes: int, formula: str = "", source: str = "") -> Component:
        key = (bytes, formula, source)
        c = cache.get(key)
        if c is None:
            c = cache[key] = Component(bytes=bytes, formula=formula, source=source)
        return c

    return part


def estimate(arch: Architecture, stack: Stack, shape: Shape) -> MemoryEstimate:
    """Every memory component of `stack` at `shape`, the peak phase, and what nvidia-smi would show."""
    key = ("states", stack.key)  # model states do not depend on the shape: once per stack
    if key not in arch._memo:
        arch._memo[key] = _model_states(arch, stack)
    states = arch._memo[key]
    part = _parts(arch)
    acts: ActivationEstimate = estimate_activations(arch, stack, shape)
    comps: dict[str, Component] = {**states.weights, **states.gradients, **states.optimizer,
                                   **_activation_parts(acts, part)}
    W = sum(c.bytes for k, c in comps.items() if k.startswith("weights."))
    G = sum(c.bytes for k, c in comps.items() if k.startswith("gradients."))
    O = sum(c.bytes for k, c in comps.items() if k.startswith("optimizer."))  # noqa: E741 - W, G, O, A as summed
    A = acts.saved_total + acts.recompute

    transients = _transients(arch, stack, shape, acts, part)
    G_peak, A_peak, T, phase = _peak_phase(arch, stack, shape, G, A, transients)
    frag = int(ALLOCATOR_FLOOR_BYTES + ALLOCATOR_DYNAMIC_FRACTION * (A + acts.loss_transient))
    comm = _communication(stack, G, part)
    overhead = {**transients, **comm}
    overhead["overhead.allocator"] = part(
        bytes=frag,
        formula=f"{ALLOCATOR_FLOOR_BYTES // MiB} MiB + {ALLOCATOR_DYNAMIC_FRACTION:.0%} of activations and loss buffers",
        source="PyTorch caching allocator: block rounding and fragmentation (reserved − allocated)",
    )
    overhead["overhead.cuda_context"] = part(
        bytes=CUDA_CONTEXT_BYTES, formula="CUDA context and kernel images", source="CUDA lazy module loading, typical 0.3-0.6 GiB"
    )
    comps.update(overhead)
    peak_allocated = W + G_peak + O + A_peak + T + sum(c.bytes for c in comm.values())
    peak_reserved = peak_allocated + frag
    device_total = peak_reserved + CUDA_CONTEXT_BYTES
    return MemoryEstimate(
        model=_model_info(arch, _trainable(arch, stack)[0] + _saved_copies(arch, stack)[0]),
        stack=stack,
        shape=shape,
        breakdown=Breakdown(weights=W, gradients=G_peak, optimizer=O, activations=A_peak,
                            overhead=device_total - (W + G_peak + O + A_peak), total=device_total),
        components=comps,
        peak_allocated=peak_allocated,
        peak_reserved=peak_reserved,
        device_total=device_total,
        static_bytes=W + G + O,
        cpu_ram_bytes=states.cpu_ram,
        assumptions=_assumptions(arch, stack, shape, phase, states.cpu_ram),
        warnings=_warnings(arch, stack, shape),
    )


def _activation_parts(acts: ActivationEstimate, part) -> dict[str, Component]:
    """The saved activations as named components, and the layer a checkpointed backward rebuilds."""
    comps: dict[str, Component] = {}
    for key, val in acts.saved.items():
        where = " (summed over decoder layers)" if key.startswith("activations.layers.") else ""
        comps[key] = part(bytes=val, formula=describe(key) + where, source=term_source(key))
    if acts.recompute:
        comps["activations.recompute_layer"] = part(
            bytes=acts.recompute,
            formula="one decoder layer's activations rebuilt during backward",
            source="torch.utils.checkpoint (Chen et al. 2016, sublinear memory)",
        )
    return comps


def _peak_phase(arch: Architecture, stack: Stack, shape: Shape, G: int, A: int,
                transients: dict[str, Component]) -> tuple[int, int, int, str]:
    """(gradients, activations, transients) at the peak, and the phase it falls in. With accumulation the
    gradients of earlier micro-batches are resident at backward start; without, the peak is either backward start
    (activations saved, only lm_head's gradient allocated) or the end of backward (all gradients, no activations)."""
    T = sum(c.bytes for c in transients.values())
    if shape.grad_accum != 1:
        return G, A, T, "backward start, gradients of earlier micro-batches resident (accumulation)"
    # No accumulation: Trainer's zero_grad(set_to_none=True) leaves no gradient during forward;
    # backward allocates them as it frees activations, lm_head's (or the tied embedding's) first.
    tb = _trainable(arch, stack)[1]
    head = (arch.lm_head_params or arch.embed_params) * tb / stack.shard_degree_grads if stack.is_full else 0
    if "lm_head" in stack.saved_modules and stack.is_adapter:
        head = arch.spec.vocab_size * arch.spec.hidden_size * PARAM_BYTES[stack.precision] / stack.shard_degree_grads
    if stack.liger_loss:
        head = 0  # Liger's fused loss computed lm_head's gradient in forward: a saved activation already
    workspace = transients["overhead.backward_workspace"].bytes
    if A + T + head >= G + workspace:
        return int(min(head, G)), A, T, "backward start: activations saved, only lm_head's gradient allocated"
    return G, 0, workspace, "end of backward: all gradients allocated, activations freed"


def _communication(stack: Stack, G: int, part) -> dict[str, Component]:
    """Buffers of multi-GPU runs, alive at the peak: DDP's gradient buckets, NCCL's, ZeRO-3's reduce bucket."""
    out: dict[str, Component] = {}
    if stack.sharding == "ddp" and stack.gpus > 1 and G:
        out["overhead.ddp_buckets"] = part(
            bytes=G,
            formula="DDP's flat gradient buckets (a second copy of the gradients)",
            source="torch DDP Reducer, gradient_as_bucket_view=False (accelerate default)",
        )
    if stack.gpus > 1:
        out["overhead.nccl_buffers"] = part(bytes=NCCL_BUFFER_BYTES, formula="communicator buffers", source="NCCL_BUFFSIZE (4 MiB per channel and peer)")
    if stack.sharding == "zero3":
        gb = BYTES_FP32 if stack.fp32_weights else BYTES_16BIT
        out["overhead.zero3_reduce_bucket"] = part(
            bytes=DEEPSPEED_ZERO3["reduce_bucket_size"] * gb,
            formula=f"reduce_bucket_size {DEEPSPEED_ZERO3['reduce_bucket_size']:,} elements × {gb} B: the contiguous "
            "gradient bucket, allocated once at optimizer setup whatever the number of trainable parameters",
            source="deepspeed 0.19.8 runtime/zero/stage3.py DeepSpeedZeroOptimizer_Stage3.__init__: "
            "bucket.buffer = torch.empty(self.reduce_bucket_size) when contiguous_gradients (default True)",
        )
    return out


def _model_info(arch: Architecture, trainable: int) -> ModelInfo:
    """The model's record, shared by every stack training as many parameters."""
    info = arch._memo.get(("model_info", trainable))
    if info is None:
        spec = arch.spec
        info = arch._memo["model_info", trainable] = ModelInfo(
            name=spec.name, family=spec.family, source=spec.source, params_total=arch.params_total,
            params_trainable=trainable, params_active=arch.params_active)
    return info


def _transients(arch: Architecture, stack: Stack, shape: Shape, acts: ActivationEstimate, part) -> dict[str, Component]:
    """Short-lived buffers at the peak: the loss path, a backward workspace, DoRA's weight norm, a
    dequantised QLoRA weight."""
    spec = arch.spec
    tokens = shape.tokens
    a = act_bytes(stack)
    f = spec.moe_intermediate_size * spec.num_experts_per_tok if spec.is_moe else spec.intermediate_size
    loss = acts.loss
    liger_mlp = stack.liger and not spec.is_moe
    transients = {
        loss.name: part(bytes=loss.bytes, formula=loss.formula, source=loss.source),
        "overhead.backward_workspace": part(
            bytes=int((1 if liger_mlp else 2) * a * f * tokens),
            formula="the gradient arriving at the SwiGLU product (Liger writes gate's and up's gradients into "
            "their saved tensors)" if liger_mlp else
            "gradients of one MLP's gate and up outputs while a layer runs backward",
            source="liger-kernel ops/swiglu.py _swiglu_backward_kernel stores da, db over a, b" if liger_mlp else
            "autograd: a layer's input-gradients are live while it computes backward",
        ),
    }
    dora_peak = dora_transient(arch, stack)
    if dora_peak:
        transients["overhead.dora_weight_norm"] = part(
            bytes=dora_peak,
            formula="the largest adapted module's eye(in), lora_B(lora_A(eye)), W cast to the adapter dtype and "
            "W + s·BA, built to take ‖W + s·BA‖ every forward (and again in a recomputed layer)",
            source="peft 0.21.2 tuners/lora/dora.py DoraLinearLayer.get_lora_weight / get_weight_norm",
        )
    if stack.is_qlora:
        largest = arch.largest_dense_linear
        transients["overhead.dequantised_weight"] = part(
            bytes=int(largest * BYTES_16BIT),
            formula="the largest linear dequantised to 16-bit for its matmul",
            source="bitsandbytes matmul_4bit dequantises per call",
        )
    return transients


def _warnings(arch: Architecture, stack: Stack, shape: Shape) -> list[str]:
    """What the estimate cannot promise for this model and stack."""
    spec = arch.spec
    warnings = []
    if stack.is_qlora and arch.expert_weight_params:
        warnings.append(
            f"QLoRA leaves this MoE's {arch.expert_weight_params / BILLION:.1f}B fused expert weights in 16-bit: "
            "transformers 5 quantises nn.Linear modules only."
        )
    if arch.lora_wraps_experts(stack.lora_targets) and stack.is_adapter and stack.lora_dropout > 0:
        warnings.append(
            "peft wraps this MoE's experts with LoRA ParamWrappers, which refuse lora_dropout != 0; "
            "use --lora-dropout 0 (estimated as if dropout were 0 for the experts)."
        )
    if shape.seq_len > spec.max_position_embeddings:
        warnings.append(
            f"seq_len {shape.seq_len} exceeds {spec.name}'s max_position_embeddings {spec.max_position_embeddings}."
        )
    return warnings


def _assumptions(arch: Architecture, stack: Stack, shape: Shape, phase: str,
                 cpu_ram: int = 0) -> dict[str, str | int | float | bool]:
    """The settings behind the estimate, in words (shown with every estimate)."""
    spec = arch.spec
    assumptions: dict[str, str | int | float | bool] = {
        "param_dtype": stack.precision,
        "activation_dtype": "fp32" if act_bytes(stack) == 4 else "16-bit",
        "peak_phase": phase,
        "grad_accum": shape.grad_accum if shape.grad_accum else "unknown (assumed > 1)",
        "attention_kernel": {"flash": "FlashAttention-2 (O(s) memory; padded batches unpadded)",
                             "sdpa": ("SDPA with the padding mask: k/v repeated, a mask copy per layer" if shape.padded
                                      else "SDPA fused kernel (O(s) memory), GQA without repeat_kv"),
                             "eager": "eager (b·heads·s² scores)"}[stack.attention],
        "padding": "padded batches with an attention mask" if shape.padded else "none (packed or equal-length sequences)",
        "cuda_context_bytes": CUDA_CONTEXT_BYTES,
        "allocator_fragmentation": f"{ALLOCATOR_FLOOR_BYTES // MiB} MiB + {ALLOCATOR_DYNAMIC_FRACTION:.0%} of dynamic bytes",
        "optimizer_impl": techniques.get(stack.optimizer).label,
    }
    if spec.vision is not None:
        assumptions["vision_tower"] = "weights counted; text-only batches (no image activations)"
    if stack.is_adapter:
        assumptions["adapter_dtype"] = "fp32 (peft autocast_adapter_dtype=True)" if adapter_bytes(stack) == 4 else "bf16"
        assumptions["lora"] = f"r={stack.lora_rank}, alpha={stack.lora_alpha}, dropout={stack.lora_dropout}, targets={stack.lora_targets}"
        if stack.dora:
            assumptions["dora"] = "peft use_dora=True: magnitude vectors train; base and adapter results kept per adapter"
        if stack.is_qlora:
            assumptions["qlora_fp32_casts"] = (
                f"not applied (the bundle's TRL path): the {kbit_cast_params(arch):,} non-quantized params stay 16-bit; "
                f"a script calling peft's prepare_model_for_kbit_training holds them in fp32, "
                f"+{kbit_cast_bytes(arch, stack) / 1e9:.2f} GB per GPU ({KBIT_CAST_SOURCE})")
        if stack.saved_modules:
            assumptions["modules_to_save"] = f"{', '.join(stack.saved_modules)}: frozen original + trainable copy"
    assumptions["loss"] = LOSS_WORDS["liger" if stack.liger_loss else stack.loss]
    if stack.liger:
        assumptions["liger"] = ("Liger RMSNorm, SwiGLU/GeGLU, RoPE and fused linear cross-entropy (use_liger_kernel=True)"
                                if stack.liger_loss else "Liger RMSNorm, SwiGLU/GeGLU and RoPE; the loss is TRL's "
                                "(SFTTrainer turns Liger's fused cross-entropy off)")
    if stack.compile:
        # torch.compile's memory effect is not modelled: AOTAutograd's min-cut partitioner may save fewer or
        # different tensors, but neither the code nor a CPU measurement here shows what it frees for these
        # models, so the estimate stays the eager one (the time model carries compile's speed-up).
        assumptions["compile"] = "torch.compile: memory as eager (no measured or derivable saving)"
    if spec.params_override:
        assumptions["architecture"] = "synthetic Llama-shaped (from --params) for activations and LoRA shapes"
    if stack.offloads:
        assumptions["cpu_offload"] = offload_words(stack, cpu_ram)
    if stack.attention == "eager" and families.traits(spec.family).default_attention == "eager":
        assumptions["attention_default"] = ATTENTION_DEFAULT_WORDS.get(spec.family, "eager: transformers has no SDPA "
                                                                       "for this model class (_supports_sdpa False)")
    return assumptions


# Where a family's default is eager, the installed library's reason (tests/advisor/workload/test_config_aliases.py checks the flag
# against the class; tests/advisor/estimate/test_mechanism_terms.py against the model transformers builds).
ATTENTION_DEFAULT_WORDS = {
    "gemma2": ("eager: what transformers 5.24.0 picks for Gemma 2 (src/transformers/models/gemma2/modeling_gemma2.py "
               "line 353, Gemma2PreTrainedModel `_supports_sdpa = False  # sdpa does not support softcapping`; "
               "attn_implementation='sdpa' is refused); --attention flash runs FlashAttention-2 with its softcap"),
}

OFFLOAD_SOURCE = ("ZeRO-Offload (Ren et al. 2021, arXiv:2101.06840): fp32 master weights, fp32 gradients and Adam "
                  "states on the host (DeepSpeed 0.19.8 deepspeed/runtime/zero/stage_1_and_2.py cpu_offload, "
                  "stage3.py offload_param; torch.distributed.fsdp CPUOffload(offload_params=True))")


def offload_words(stack: Stack, cpu_ram: int) -> str:
    """The CPU-offload term: what leaves the GPU, the host RAM it takes, and its source."""
    moved = {"optimizer": "optimizer states and fp32 masters", "params": "parameters",
             "both": "parameters, optimizer states and fp32 masters"}[stack.offload]
    return (f"{moved} held in host RAM ({cpu_ram / 1e9:.2f} GB over all GPUs), 0 B of them on the GPU; "
            f"the host step and PCIe copies are in throughput.assumptions.offload ({OFFLOAD_SOURCE})")



