"""Device memory at each phase of a run, not only the training step: model loading, the step, the
optimizer step and a checkpoint save. The largest is the peak the fit check uses.

Only loading can out-grow the step, and only where every rank first holds the whole model: a QLoRA
model under FSDP or ZeRO-3. bitsandbytes quantises on the GPU, so transformers places the whole
quantised model on each rank's GPU (transformers 5.24.0 quantizers/quantizer_bnb_4bit.py
`update_device_map`: device_map None -> {"": torch.cuda.current_device()}; modeling_utils.py:4862 keeps
the rank-0-only, meta-elsewhere load for unquantised models: `... and not is_quantized`). accelerate
then shards it in place, keeping every original tensor referenced until fully_shard returns
(accelerate 1.16.0 utils/fsdp_utils.py `fsdp2_prepare_model`: Params4bit models skip the move to meta,
"bypassing the move to meta will still cause the VRAM spike"; `original_sd = model.state_dict()` is
held across the fully_shard calls, and torch 2.13 _fully_shard/_fsdp_param.py `_init_sharded_param`
allocates each padded shard with `new_zeros` on the parameter's device, or on the CPU under
CPUOffloadPolicy). ZeRO-3 has no zero.Init for a quantised model (modeling_utils.py:1435
`needs_zero3_init = is_deepspeed_zero3_enabled() and not _is_quantized`), so its ranks too hold the
whole model until deepspeed.initialize partitions it.
"""

from __future__ import annotations

from advisor.estimate import memory
from advisor.model import release
from advisor.model.architecture import Architecture
from advisor.model.release import Release
from advisor.results import Breakdown, Component, MemoryEstimate
from advisor.stacks import Stack
from advisor.units import BYTES_16BIT, GB

LOAD, STEP, OPTIMIZER_STEP, CHECKPOINT = "model loading", "training step", "optimizer step", "checkpoint save"
# Buffers that live from setup to the end of the run (not freed between phases).
_PERSISTENT = ("overhead.ddp_buckets", "overhead.nccl_buffers", "overhead.zero3_reduce_bucket")
# Loading allocates whole tensors and frees none per step: the allocator's floor, not its activation share.
_LOAD_OVERHEAD = memory.ALLOCATOR_FLOOR_BYTES + memory.CUDA_CONTEXT_BYTES
_TRANSFORMERS = "transformers 5.24.0 quantizers/quantizer_bnb_4bit.py update_device_map; modeling_utils.py:4862"
_ACCELERATE = "accelerate 1.16.0 utils/fsdp_utils.py fsdp2_prepare_model (original_sd held across fully_shard)"


def load_term(arch: Architecture, stack: Stack, transformers: Release | None = None) -> Component:
    """Bytes allocated on each GPU when the model has been loaded and is being sharded (once per stack)."""
    every_gpu = release.quantised_load_on_every_gpu(transformers)
    key = ("load", stack.key, every_gpu)
    term = arch._memo.get(key)
    if term is None:
        term = arch._memo[key] = _load_term(arch, stack, every_gpu, transformers)
    return term


def fsdp_load_bytes(whole: int, ranks: int, offload: bool) -> int:
    """Bytes alive on one GPU while fully_shard shards a model every rank holds whole: the originals (kept
    referenced by accelerate's original_sd) and this rank's new padded shards (on the CPU under offload)."""
    return whole + (0 if offload else whole // ranks)


def _weights(arch: Architecture, stack: Stack) -> int:
    states = memory._model_states(arch, stack)
    return sum(c.bytes for k, c in states.weights.items()
               if k not in ("weights.gathered_units", "weights.zero3_live_params", "weights.zero3_prefetch_bucket"))


def _load_term(arch: Architecture, stack: Stack, every_gpu: bool, transformers: Release | None) -> Component:
    n = stack.gpus
    if stack.is_qlora and stack.shards_params and n > 1 and not every_gpu:
        staged = release.fact("quantised_load", "*", transformers)
        return Component(
            bytes=_weights(arch, stack) + arch.largest_dense_linear * BYTES_16BIT,
            formula="this rank's shards plus one linear in 16-bit while it is quantised (layer by layer, each moved "
                    "to the CPU before sharding)",
            source=staged.source if staged else "")
    if stack.is_qlora and stack.shards_params and n > 1:
        whole = _weights(arch, stack.model_copy(update={"gpus": 1, "offload": "none"}))
        if stack.sharding == "fsdp":
            shards = fsdp_load_bytes(whole, n, stack.offloads_params) - whole
            where = "on the CPU (CPUOffloadPolicy)" if stack.offloads_params else f"1/{n} on the GPU"
            return Component(
                bytes=whole + shards,
                formula=f"the whole quantised model on every rank ({whole / GB:.2f} GB: NF4 linears, 16-bit rest, "
                        f"adapters) while fully_shard builds its shards ({where})",
                source=f"{_TRANSFORMERS}; {_ACCELERATE}; torch 2.13 _fsdp_param.py _init_sharded_param")
        return Component(
            bytes=whole,
            formula=f"the whole quantised model on every rank ({whole / GB:.2f} GB) until deepspeed.initialize "
                    "partitions it",
            source=f"{_TRANSFORMERS}; modeling_utils.py:1435 needs_zero3_init excludes quantised models")
    held = _weights(arch, stack)
    if stack.is_qlora:
        largest = arch.largest_dense_linear * BYTES_16BIT
        return Component(
            bytes=held + largest,
            formula="the quantised model plus the largest linear in 16-bit while bitsandbytes quantises it",
            source=f"{_TRANSFORMERS}; bitsandbytes Params4bit.cuda quantises each weight on the GPU")
    if stack.sharding == "fsdp" and n > 1:
        tensor = max(arch.embed_params, arch.lm_head_params, arch.largest_dense_linear) * memory.PARAM_BYTES[
            stack.precision]
        return Component(
            bytes=(0 if stack.offloads_params else held) + tensor,
            formula="this rank's shards plus one whole tensor broadcast from rank 0 (the largest)",
            source="accelerate 1.16.0 utils/fsdp_utils.py fsdp2_load_full_state_dict (fsdp_cpu_ram_efficient_loading)")
    return Component(bytes=held, formula="the weights as the step holds them",
                     source="transformers loads on the CPU; the Trainer, FSDP or DeepSpeed places them")


def with_phases(arch: Architecture, stack: Stack, est: MemoryEstimate,
                transformers: Release | None = None) -> MemoryEstimate:
    """`est` (fresh, not yet shared) with its phases, its peak phase and, where loading is larger than the
    step, the loading figures as its peak; its assumptions name the transformers release they hold for."""
    load = load_term(arch, stack, transformers)
    _release_words(arch, est, transformers)
    b = est.breakdown
    persistent = sum(est.components[k].bytes for k in _PERSISTENT if k in est.components)
    floor = memory.ALLOCATOR_FLOOR_BYTES + memory.CUDA_CONTEXT_BYTES + persistent
    grads = est.static_bytes - b.weights - b.optimizer
    est.load = load
    est.phases = {
        LOAD: Breakdown(weights=load.bytes, gradients=0, optimizer=0, activations=0, overhead=_LOAD_OVERHEAD,
                        total=load.bytes + _LOAD_OVERHEAD),
        STEP: b,
        # Fused AdamW (the bundle's optim) updates in place: every gradient resident, activations freed.
        OPTIMIZER_STEP: Breakdown(weights=b.weights, gradients=grads, optimizer=b.optimizer, activations=0,
                                  overhead=floor, total=b.weights + grads + b.optimizer + floor),
        # After zero_grad(set_to_none=True); SHARDED_STATE_DICT / DeepSpeed write each rank's shards as held.
        CHECKPOINT: Breakdown(weights=b.weights, gradients=0, optimizer=b.optimizer, activations=0, overhead=floor,
                              total=b.weights + b.optimizer + floor),
    }
    return peak_of(est)


def _release_words(arch: Architecture, est: MemoryEstimate, transformers: Release | None) -> None:
    chosen = transformers or release.bundled()
    est.assumptions["transformers"] = (f"{chosen} (the launch bundle's)" if chosen == release.bundled()
                                       else f"{chosen} (--transformers-version; the launch bundle runs "
                                            f"{release.bundled()})")
    row = release.fact("default_attention", arch.spec.family, chosen)
    if row is not None and "attention_default" in est.assumptions:
        est.assumptions["attention_default"] = f"{row.value} at transformers {chosen} ({row.source})"


def peak_of(est: MemoryEstimate) -> MemoryEstimate:
    """`est` with its largest phase as its breakdown, device total and peak figures (the step wins a tie).
    The step's own figures come back from phases[STEP] and the allocator term, so a replay that changes the
    step can switch to it (`at_step`) and call this again."""
    if not est.phases:
        return est
    name = max(est.phases, key=lambda k: (est.phases[k].total, k == STEP))
    if name == STEP:
        return at_step(est)
    top = est.phases[name]
    if est.peak_phase == STEP:
        est.assumptions["step_peak_phase"] = est.assumptions.get("peak_phase", "")
    what = est.load.formula if name == LOAD and est.load is not None else name
    est.assumptions["peak_phase"] = (f"{name}: {what}, {top.total / GB:.2f} GB against the training step's "
                                     f"{est.phases[STEP].total / GB:.2f} GB")
    est.peak_phase = name
    est.breakdown = top
    est.device_total = top.total
    est.peak_reserved = top.total - memory.CUDA_CONTEXT_BYTES
    est.peak_allocated = est.peak_reserved - memory.ALLOCATOR_FLOOR_BYTES
    return est


def at_step(est: MemoryEstimate) -> MemoryEstimate:
    """`est` with the training step's figures as its peak figures."""
    if not est.phases or est.peak_phase == STEP:
        return est
    step = est.phases[STEP]
    est.assumptions["peak_phase"] = est.assumptions.pop("step_peak_phase", "")
    est.peak_phase = STEP
    est.breakdown = step
    est.device_total = step.total
    est.peak_reserved = step.total - memory.CUDA_CONTEXT_BYTES
    est.peak_allocated = est.peak_reserved - est.components["overhead.allocator"].bytes
    return est
