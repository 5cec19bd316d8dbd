"""Other calculators' memory formulas, for side-by-side comparison with our estimator.

Each baseline takes (model spec, published parameter count, stack, shape) and returns the
per-GPU bytes that calculator would tell its user, or None where the rule does not apply
(e.g. a full-fine-tune rule asked about LoRA). They are deliberately what the sources say,
not improved: the accuracy benchmark shows how far each is from measurements.
"""

from __future__ import annotations

from collections.abc import Callable

from advisor.model.spec import ModelSpec
from advisor.stacks import Shape, Stack

GB = 10**9

Baseline = Callable[[ModelSpec, int, Stack, Shape], "int | None"]


def _param_bytes(precision: str) -> int:
    """Bytes per stored parameter: 16-bit for pure bf16/fp16, fp32 otherwise (amp keeps fp32)."""
    return 2 if precision in ("bf16", "fp16") else 4


def _mixed(stack: Stack) -> bool:
    """Mixed precision: amp (fp32 weights) or 16-bit weights with fp32 master + Adam (DeepSpeed bf16)."""
    return stack.precision.startswith("amp") or stack.optimizer == "adamw-fp32"


def _sharded(stack: Stack) -> bool:
    return stack.gpus > 1 and stack.sharding in ("fsdp", "zero1", "zero2", "zero3")


def _interpolate(table: dict[float, float], billions: float) -> float:
    """Piecewise-linear in model size over a published size table (through 0 below it)."""
    sizes = sorted(table)
    if billions <= sizes[0]:
        return table[sizes[0]] * billions / sizes[0]
    for lo, hi in zip(sizes, sizes[1:]):
        if billions <= hi:
            return table[lo] + (table[hi] - table[lo]) * (billions - lo) / (hi - lo)
    lo, hi = sizes[-2], sizes[-1]
    return table[hi] + (table[hi] - table[lo]) * (billions - hi) / (hi - lo)


def _trainable(spec: ModelSpec, params: int, stack: Stack) -> int:
    if stack.method == "full":
        return params
    from advisor.model.architecture import build

    return build(spec).lora_params(stack.lora_rank, stack.lora_targets)


def seed_simple(spec: ModelSpec, params: int, stack: Stack, shape: Shape) -> int | None:
    """The seed's formula: weights + gradients + optimizer, no activations (DESIGN.md).

    Weights P x bytes(dtype) (QLoRA: 0.5 B/param NF4), gradients and two AdamW states per
    trainable parameter in the parameter dtype (8-bit AdamW: 2 B). A 4B model in pure bf16
    is 8 + 8 + 16 = 32 GB; with LoRA about 8.1 GB. No sharding: None on sharded runs.
    """
    if _sharded(stack):
        return None
    b = _param_bytes(stack.precision)
    weights = params * (0.5 if stack.method == "qlora" else b)
    trainable = _trainable(spec, params, stack)
    opt_per = {"adamw-8bit": 2, "paged-adamw-8bit": 2, "sgd": b, "adamw-fp32": 8}.get(stack.optimizer, 2 * b)
    return round(weights + trainable * (b + opt_per))


def accelerate_estimate(spec: ModelSpec, params: int, stack: Stack, shape: Shape) -> int | None:
    """`accelerate estimate-memory`, column "Training using Adam": 4 x the model size at the dtype.

    Source: accelerate docs, usage_guides/model_size_estimator.md (e.g. bert-base-cased fp32
    1.61 GB; benchmarks/data/calibration/published_estimates.csv accel-* rows). Full training of
    one un-sharded copy only.
    """
    if stack.method != "full" or _sharded(stack):
        return None
    return 4 * params * (4 if _mixed(stack) else _param_bytes(stack.precision))


def zero_16_bytes(spec: ModelSpec, params: int, stack: Stack, shape: Shape) -> int | None:
    """The "16 bytes per parameter" rule: mixed-precision Adam = 2 + 2 + 12 bytes per parameter.

    Rajbhandari et al. 2020 (ZeRO), section 3.1 (16 Psi), with the paper's partitioned
    forms for N_d ranks: ZeRO-1 4 + 12/N, ZeRO-2 2 + 14/N, ZeRO-3 (and FSDP) 16/N. Full
    fine-tuning only; no activations.
    """
    if stack.method != "full":
        return None
    n = stack.gpus
    per = {
        "zero1": 4 + 12 / n,
        "zero2": 2 + 14 / n,
        "zero3": 16 / n,
        "fsdp": 16 / n,
    }.get(stack.sharding, 16)
    return round(params * per)


def hf_anatomy_18_bytes(spec: ModelSpec, params: int, stack: Stack, shape: Shape) -> int | None:
    """transformers "Anatomy of Model's Memory": mixed-precision AdamW is 18 bytes per parameter.

    6 B weights (fp32 + 16-bit copy) + 4 B fp32 gradients + 8 B AdamW states; the doc adds
    "activations" without a formula, so none are added. Full, un-sharded training only.
    """
    if stack.method != "full" or _sharded(stack):
        return None
    per = 18 - (8 - 2 if stack.optimizer in ("adamw-8bit", "paged-adamw-8bit") else 0)
    return params * per


# LLaMA-Factory README "Hardware Requirement" (marked '* estimated'), GB by model size in B.
# benchmarks/data/calibration/published_estimates.csv rows lf-cur-01..20.
LLAMA_FACTORY = {
    "full-amp": {7: 120, 14: 240, 30: 600, 70: 1200},
    "full-16": {7: 60, 14: 120, 30: 300, 70: 600},
    "lora-16": {7: 16, 14: 32, 30: 64, 70: 160},
    "qlora-4": {7: 6, 14: 12, 30: 24, 70: 48},
}


def llama_factory(spec: ModelSpec, params: int, stack: Stack, shape: Shape) -> int | None:
    """LLaMA-Factory's hardware table (rule of thumb, no batch or sequence length).

    Interpolated between its sizes; divided over the GPUs of a FSDP / ZeRO-3 run.
    """
    if stack.method == "full":
        row = "full-amp" if _mixed(stack) or stack.precision == "fp32" else "full-16"
    elif stack.method == "lora":
        if stack.precision not in ("bf16", "fp16"):  # frozen 16-bit base only
            return None
        row = "lora-16"
    else:
        row = "qlora-4"
    total = _interpolate(LLAMA_FACTORY[row], params / 1e9) * GB
    if stack.gpus > 1 and stack.sharding in ("fsdp", "zero3"):
        total /= stack.gpus
    return round(total)


# Unsloth docs "Fine-tuning VRAM requirements": 'absolute minimum' GB with Unsloth by size (B).
# benchmarks/data/calibration/published_estimates.csv rows unsloth-req-01..26.
UNSLOTH_QLORA = {3: 3.5, 7: 5, 8: 6, 9: 6.5, 11: 7.5, 14: 8.5, 27: 22, 32: 26, 40: 30, 70: 41,
                 81: 48, 90: 53, 405: 237}
UNSLOTH_LORA = {3: 8, 7: 19, 8: 22, 9: 24, 11: 29, 14: 33, 27: 64, 32: 76, 40: 96, 70: 164,
                81: 192, 90: 212, 405: 950}


def unsloth_minimum(spec: ModelSpec, params: int, stack: Stack, shape: Shape) -> int | None:
    """Unsloth's VRAM table for LoRA (16-bit base) and QLoRA (4-bit) on one GPU.

    A minimum with Unsloth's kernels and offloaded checkpointing, so it is expected to sit
    below plain transformers + peft runs; shown because users read it as a requirement.
    """
    if _sharded(stack) or stack.gpus > 1:
        return None
    if stack.method == "qlora":
        table = UNSLOTH_QLORA
    elif stack.method == "lora" and stack.precision in ("bf16", "fp16"):
        table = UNSLOTH_LORA
    else:
        return None
    return round(_interpolate(table, params / 1e9) * GB)


BASELINES: dict[str, Baseline] = {
    "seed (w+g+opt)": seed_simple,
    "accelerate 4x": accelerate_estimate,
    "16 B/param (ZeRO)": zero_16_bytes,
    "18 B/param (HF anatomy)": hf_anatomy_18_bytes,
    "LLaMA-Factory table": llama_factory,
    "Unsloth minimum": unsloth_minimum,
}
