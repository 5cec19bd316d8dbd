"""Per-GPU memory of a fine-tuning run: every component named, sized and sourced.

Model states follow the ZeRO paper (Rajbhandari et al. 2020, §3 and §5: Ψ parameters,
K bytes of optimizer state per parameter, partitioned by stage). QLoRA's NF4 storage follows
Dettmers et al. 2023 (§3: 4-bit NormalFloat with a 64-element block absmax; double
quantisation stores those constants in 8 bits with a second fp32 level per 256 blocks).
Activations are in `advisor.activations`. The peak is the start of backward: model states,
every saved activation and the fp32 loss gradients are alive together. AdamW is the fused
kernel (HF Trainer's default `adamw_torch_fused` since torch 2.8), which updates in place;
the foreach variant would add one state-sized temporary during step().
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.activations import ActivationEstimate, act_bytes, adapter_bytes, describe, estimate_activations
from advisor.architecture import Architecture, default_attention, supported_attention
from advisor.errors import BadInput
from advisor.modelspec import ModelSpec
from advisor.results import Breakdown, Component, MemoryEstimate, ModelInfo
from advisor.stacks import Shape, Stack

GiB = 2**30
MiB = 2**20

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

PARAM_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "amp-bf16": 4, "amp-fp16": 4}


def nf4_bytes_per_param(double_quant: bool) -> float:
    """NF4 weight + quantisation constants per parameter (Dettmers et al. 2023, §3)."""
    if double_quant:
        return 0.5 + 1 / 64 + 4 / (64 * 256)  # 8-bit absmax per 64, fp32 per 256 blocks
    return 0.5 + 4 / 64  # fp32 absmax per 64-element block


@dataclass
class _States:
    weights: dict[str, Component]
    gradients: dict[str, Component]
    optimizer: dict[str, Component]
    cpu_ram: int


def _trainable(arch: Architecture, stack: Stack) -> tuple[int, int]:
    """(trainable parameters, bytes per trainable parameter)."""
    if stack.method == "full":
        return arch.params_total, PARAM_BYTES[stack.precision]
    return arch.lora_params(stack.lora_rank, stack.lora_targets), adapter_bytes(stack)


def _adafactor_state_elems(arch: Architecture, stack: Stack) -> int:
    """Adafactor (Shazeer & Stern 2018): row + column second-moment factors per matrix."""
    if stack.method != "full":
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
    P = arch.params_total
    pb = PARAM_BYTES[stack.precision]
    n_p, n_g, n_o = stack.shard_degree_params, stack.shard_degree_grads, stack.shard_degree_optimizer
    weights: dict[str, Component] = {}
    compute_b = 4 if stack.precision == "fp32" else 2
    largest_layer = arch.largest_layer_params * arch.scale

    if stack.method == "qlora":
        q = arch.linear_weight_params
        nf4 = nf4_bytes_per_param(stack.double_quant)
        weights["weights.nf4_linears"] = Component(
            bytes=int(q * nf4 / n_p),
            formula=f"{q:,} linear weights × {nf4:.4f} B (NF4{' + double-quant' if stack.double_quant else ''} constants)",
            source="Dettmers et al. 2023, QLoRA §3",
        )
        experts = arch.expert_weight_params
        weights["weights.16bit_rest"] = Component(
            bytes=int((P - q) * 2 / n_p),
            formula=f"{P - q:,} embedding/norm/bias/router{'/fused-expert' if experts else ''} params × 2 B "
            "(not nn.Linear, so bitsandbytes leaves them 16-bit)",
            source="transformers 5 replace_with_bnb_linear swaps nn.Linear only; lm_head kept in 16-bit",
        )
    else:
        weights["weights.base"] = Component(
            bytes=int(P * pb / n_p),
            formula=f"{P:,} params × {pb} B ({stack.precision}){f' / {n_p} shards' if n_p > 1 else ''}",
            source="ZeRO (Rajbhandari et al. 2020) §3: Ψ parameters; stage 3 partitions them",
        )
    trainable, tb = _trainable(arch, stack)
    if stack.method != "full":
        weights["weights.lora_adapters"] = Component(
            bytes=int(trainable * tb / n_p),
            formula=f"{trainable:,} adapter params (r={stack.lora_rank}, {stack.lora_targets}) × {tb} B",
            source="peft LoRA: A (in×r) + B (r×out) per target; fp32 unless autocast_adapter_dtype=False",
        )
    root = (arch.embed_params + arch.lm_head_params + arch.final_norm_params) * arch.scale
    if n_p > 1 or stack.offload in ("params", "both"):
        wb = 0.5 if stack.method == "qlora" else compute_b
        weights["weights.gathered_units"] = Component(
            bytes=int((2 * largest_layer + root) * wb),
            formula="two decoder layers (current + prefetched) and the root unit (embeddings, lm_head, "
            "final norm, kept unsharded from forward to backward) in the compute dtype",
            source="PyTorch FSDP2 fully_shard: per-layer all-gather with prefetch; root not resharded after forward",
        )
    if stack.offload in ("params", "both"):
        for key in ("weights.base", "weights.nf4_linears", "weights.16bit_rest", "weights.lora_adapters"):
            if key in weights:
                weights[key] = Component(bytes=0, formula=weights[key].formula + " (offloaded to CPU)", source=weights[key].source)

    gradients = {
        "gradients.trainable": Component(
            bytes=int(trainable * tb / n_g),
            formula=f"{trainable:,} trainable × {tb} B{f' / {n_g} shards' if n_g > 1 else ''}",
            source="ZeRO §3 (gradients in the parameter dtype); stage 2/3 partitions them",
        )
    }
    if n_g > 1 and stack.sharding in ("fsdp", "zero2", "zero3") and stack.method == "full":
        gradients["gradients.unsharded_buffers"] = Component(
            bytes=int((largest_layer + root) * tb),
            formula="one layer's and the root unit's unsharded gradients before reduce-scatter",
            source="PyTorch FSDP2 / DeepSpeed reduce-scatter per unit (root last)",
        )

    opt = stack.optimizer
    if opt == "adamw":
        per, note = 2 * tb, f"2 states (exp_avg, exp_avg_sq) × {tb} B, parameter dtype (torch.optim.AdamW default)"
    elif opt == "adamw-fp32":
        master = 4 if tb < 4 else 0
        per, note = 8 + master, "2 fp32 states" + (" + fp32 master weights" if master else "")
    elif opt in ("adamw-8bit", "paged-adamw-8bit"):
        per, note = 2 + 8 / 2048, "2 states × 1 B + fp32 absmax per 2048-block (bitsandbytes 8-bit Adam)"
    elif opt == "sgd":
        per, note = tb, f"momentum buffer × {tb} B"
    else:  # adafactor
        per, note = 0.0, "factored second moment (rows + columns per matrix), no first moment"
    deepspeed_mixed = stack.sharding.startswith("zero") and tb == 2 and opt in ("adamw", "adamw-fp32")
    if deepspeed_mixed:
        # DeepSpeed's bf16/fp16 mode always keeps fp32 master weights and fp32 Adam states (ZeRO
        # §3, K = 12) plus an fp32 gradient partition the optimizer reads (DeepSpeed
        # stage_1_and_2.py / stage3.py: single_partition_of_fp32_groups and its .grad).
        per, note = 16, "fp32 master + 2 fp32 Adam states + fp32 gradient partition (DeepSpeed mixed precision)"
    opt_bytes = trainable * per if opt != "adafactor" else _adafactor_state_elems(arch, stack) * tb
    source = {
        "adamw": "ZeRO §3: K = 12 B/param with fp32 master + states (DeepSpeed); torch keeps states in param dtype",
        "adamw-fp32": "ZeRO §3 (mixed precision Adam: K = 12)",
        "adamw-8bit": "Dettmers et al. 2022, 8-bit Optimizers via Block-wise Quantization",
        "paged-adamw-8bit": "Dettmers et al. 2022 + bitsandbytes paged optimizers (unified memory)",
        "sgd": "torch.optim.SGD(momentum>0)",
        "adafactor": "Shazeer & Stern 2018, Adafactor",
    }[opt]
    offload_opt = stack.offload in ("optimizer", "both")
    optimizer = {
        "optimizer.states": Component(
            bytes=0 if offload_opt else int(opt_bytes / n_o),
            formula=note + (f" / {n_o} shards" if n_o > 1 else "") + (" (offloaded to CPU)" if offload_opt else ""),
            source=source,
        )
    }

    cpu = 0
    if offload_opt:
        # ZeRO-Offload (Ren et al. 2021) keeps fp32 master params, fp32 grads and Adam states on CPU.
        cpu += int(trainable * (16 if opt.startswith("adamw") else 8))
    if stack.offload in ("params", "both"):
        cpu += int(P * (0.5 if stack.method == "qlora" else pb))
    return _States(weights, gradients, optimizer, cpu)


def check(arch: Architecture, stack: Stack) -> None:
    """Refuse a stack the model cannot run: an attention kernel transformers lacks for it, LoRA targets it has not."""
    allowed = supported_attention(arch.spec.family)
    if stack.attention not in allowed:
        raise BadInput(
            f"--attention: {arch.spec.name} ({arch.spec.family}) runs with {' or '.join(allowed)} in transformers 5, "
            f"not {stack.attention}."
        )
    if stack.method != "full":
        unknown = arch.unknown_targets(stack.lora_targets)
        if unknown:
            raise BadInput(
                f"--lora-targets: {', '.join(unknown)} not in {arch.spec.name}; its linear modules are "
                f"{', '.join(arch.linear_names())} (or use all-linear)."
            )
        if not arch.lora_targeted(stack.lora_targets):
            raise BadInput("--lora-targets: selects no linear module; use all-linear or module names.")



def estimate_memory(
    model: ModelSpec | str,
    stack: Stack | None = None,
    shape: Shape | None = None,
    gpu: str | None = None,
    headroom: float = 0.10,
) -> MemoryEstimate:
    """Peak per-GPU memory for training `model` with `stack` at `shape` (micro-batch per GPU);
    with `gpu`, the fit on that card (advisor.fit). A fresh copy: callers may change it."""
    from advisor.engine import Engine

    engine = Engine.of(model)
    stack = stack or Stack(attention=default_attention(engine.spec.family))
    est = engine.memory(stack, shape or Shape()).model_copy(deep=True)
    if gpu:
        from advisor.fit import fit_check

        est.fit, warnings = fit_check(engine, stack, est.shape, gpu, headroom, est)
        est.warnings += warnings
    return est


def fit_micro_batch(
    model: ModelSpec | str,
    stack: Stack,
    seq_len: int,
    usable_bytes: int,
    headroom: float = 0.10,
    max_micro_batch: int = 64,
) -> tuple[int, MemoryEstimate]:
    """Largest micro-batch whose device total fits in usable×(1−headroom), and its estimate
    (0 and the micro-batch-1 estimate when none fits). See Engine.max_micro_batch."""
    from advisor.engine import Engine

    engine = Engine.of(model)
    limit = int(usable_bytes * (1 - headroom))
    mb = engine.max_micro_batch(stack, seq_len, limit, cap=max_micro_batch)
    return mb, engine.memory(stack, Shape(micro_batch=max(mb, 1), seq_len=seq_len))


def estimate(arch: Architecture, stack: Stack, shape: Shape) -> MemoryEstimate:
    """Every memory component of `stack` at `shape`, the peak phase, and what nvidia-smi would show."""
    spec = arch.spec
    states = _model_states(arch, stack)
    acts: ActivationEstimate = estimate_activations(arch, stack, shape)
    comps: dict[str, Component] = {**states.weights, **states.gradients, **states.optimizer}
    for key, val in acts.saved.items():
        where = " (summed over decoder layers)" if key.startswith("activations.layers.") else ""
        comps[key] = Component(bytes=val, formula=describe(key) + where, source="advisor.activations (transformers/peft forward code)")
    if acts.recompute:
        comps["activations.recompute_layer"] = Component(
            bytes=acts.recompute,
            formula="one decoder layer's activations rebuilt during backward",
            source="torch.utils.checkpoint (Chen et al. 2016, sublinear memory)",
        )
    W = sum(c.bytes for k, c in comps.items() if k.startswith("weights."))
    G = sum(c.bytes for k, c in comps.items() if k.startswith("gradients."))
    O = sum(c.bytes for k, c in comps.items() if k.startswith("optimizer."))
    A = acts.saved_total + acts.recompute

    tokens = shape.tokens
    a = act_bytes(stack)
    f = spec.moe_intermediate_size * spec.num_experts_per_tok if spec.is_moe else spec.intermediate_size
    transients = {
        "overhead.loss_gradients": Component(
            bytes=acts.loss_transient,
            formula="2 × b·s·vocab × 4 B: fp32 grads of log_softmax output and input",
            source="transformers ForCausalLMLoss upcasts logits to fp32; torch log_softmax backward",
        ),
        "overhead.backward_workspace": Component(
            bytes=int(2 * a * f * tokens),
            formula="gradients of one MLP's gate and up outputs while a layer runs backward",
            source="autograd: a layer's input-gradients are live while it computes backward",
        ),
    }
    if stack.method == "qlora":
        largest = arch.largest_dense_linear
        transients["overhead.dequantised_weight"] = Component(
            bytes=int(largest * 2),
            formula="the largest linear dequantised to 16-bit for its matmul",
            source="bitsandbytes matmul_4bit dequantises per call",
        )
    T = sum(c.bytes for c in transients.values())
    G_peak, A_peak, phase = G, A, "backward start, gradients of earlier micro-batches resident (accumulation)"
    if shape.grad_accum == 1:
        # No accumulation: Trainer's zero_grad(set_to_none=True) leaves no gradient during forward;
        # backward allocates them as it frees activations, lm_head's (or the tied embedding's) first.
        tb = _trainable(arch, stack)[1]
        head = (arch.lm_head_params or arch.embed_params) * tb / stack.shard_degree_grads if stack.method == "full" else 0
        start = A + T + head
        end = G + transients["overhead.backward_workspace"].bytes
        if start >= end:
            G_peak, phase = int(min(head, G)), "backward start: activations saved, only lm_head's gradient allocated"
        else:
            A_peak, T, phase = 0, transients["overhead.backward_workspace"].bytes, "end of backward: all gradients allocated, activations freed"
    peak_allocated = W + G_peak + O + A_peak + T
    dynamic = A + acts.loss_transient
    frag = int(ALLOCATOR_FLOOR_BYTES + ALLOCATOR_DYNAMIC_FRACTION * dynamic)
    ddp_buckets = G if stack.sharding == "ddp" and stack.gpus > 1 else 0
    overhead = dict(transients)
    if ddp_buckets:
        overhead["overhead.ddp_buckets"] = Component(
            bytes=ddp_buckets,
            formula="DDP's flat gradient buckets (a second copy of the gradients)",
            source="torch DDP Reducer, gradient_as_bucket_view=False (accelerate default)",
        )
    if stack.gpus > 1:
        overhead["overhead.nccl_buffers"] = Component(bytes=NCCL_BUFFER_BYTES, formula="communicator buffers", source="NCCL_BUFFSIZE (4 MiB per channel and peer)")
    overhead["overhead.allocator"] = Component(
        bytes=frag,
        formula=f"{ALLOCATOR_FLOOR_BYTES // MiB} MiB + {ALLOCATOR_DYNAMIC_FRACTION:.0%} of activations and loss buffers",
        source="PyTorch caching allocator: block rounding and fragmentation (reserved − allocated)",
    )
    overhead["overhead.cuda_context"] = Component(
        bytes=CUDA_CONTEXT_BYTES, formula="CUDA context and kernel images", source="CUDA lazy module loading, typical 0.3-0.6 GiB"
    )
    comps.update(overhead)
    peak_allocated += ddp_buckets + (NCCL_BUFFER_BYTES if stack.gpus > 1 else 0)
    peak_reserved = peak_allocated + frag
    device_total = peak_reserved + CUDA_CONTEXT_BYTES
    overhead_total = device_total - (W + G_peak + O + A_peak)

    trainable, _ = _trainable(arch, stack)
    warnings = []
    if stack.method == "qlora" and arch.expert_weight_params:
        warnings.append(
            f"QLoRA leaves this MoE's {arch.expert_weight_params / 1e9:.1f}B fused expert weights in 16-bit: "
            "transformers 5 quantises nn.Linear modules only."
        )
    if arch.lora_wraps_experts(stack.lora_targets) and stack.method != "full" and stack.lora_dropout > 0:
        warnings.append(
            "peft wraps this MoE's experts with LoRA ParamWrappers, which refuse lora_dropout != 0; "
            "use --lora-dropout 0 (estimated as if dropout were 0 for the experts)."
        )
    if shape.seq_len > spec.max_position_embeddings:
        warnings.append(
            f"seq_len {shape.seq_len} exceeds {spec.name}'s max_position_embeddings {spec.max_position_embeddings}."
        )
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
        "optimizer_impl": "fused AdamW (adamw_torch_fused)" if stack.optimizer in ("adamw", "adamw-fp32") else stack.optimizer,
    }
    if spec.vision is not None:
        assumptions["vision_tower"] = "weights counted; text-only batches (no image activations)"
    if stack.method != "full":
        assumptions["adapter_dtype"] = "fp32 (peft autocast_adapter_dtype=True)" if adapter_bytes(stack) == 4 else "bf16"
        assumptions["lora"] = f"r={stack.lora_rank}, alpha={stack.lora_alpha}, dropout={stack.lora_dropout}, targets={stack.lora_targets}"
    if spec.params_override:
        assumptions["architecture"] = "synthetic Llama-shaped (from --params) for activations and LoRA shapes"
    return MemoryEstimate(
        model=ModelInfo(
            name=spec.name,
            family=spec.family,
            source=spec.source,
            params_total=arch.params_total,
            params_trainable=trainable,
            params_active=arch.params_active,
        ),
        stack=stack,
        shape=shape,
        breakdown=Breakdown(weights=W, gradients=G_peak, optimizer=O, activations=A_peak, overhead=overhead_total,
                            total=device_total),
        components=comps,
        peak_allocated=peak_allocated,
        peak_reserved=peak_reserved,
        device_total=device_total,
        static_bytes=W + G + O,
        cpu_ram_bytes=states.cpu_ram,
        assumptions=assumptions,
        warnings=warnings,
    )


