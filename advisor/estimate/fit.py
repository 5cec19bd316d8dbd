"""Does a run fit on a GPU, how large may it grow, and if not, which change makes it fit.

Built on the engine's one micro-batch and sequence search (advisor.estimate.engine); the suggestions
re-estimate each candidate change with the same engine, so every number they print is the
estimator's own.
"""

from __future__ import annotations

from advisor.errors import BadInput
from advisor.estimate.engine import MAX_SEARCH_MICRO_BATCH, Engine, usable_limit
from advisor.estimate.throughput import liger_runs_on
from advisor.model import families
from advisor.model.architecture import supported_attention
from advisor.results import FitCheck, MemoryEstimate
from advisor.stacks import Shape, Stack
from advisor.units import GB
from pricing.gpus import get_gpu


def fit_check(engine: Engine, stack: Stack, shape: Shape, gpu_name: str, headroom: float,
              est: MemoryEstimate) -> tuple[FitCheck, list[str]]:
    """The fit of `est` on `gpu_name` with `headroom` kept free, and warnings about the card."""
    if not 0 <= headroom < 1:
        raise BadInput("--headroom: must be a fraction in [0, 1), e.g. 0.1.")
    gpu = get_gpu(gpu_name)
    limit = usable_limit(gpu, headroom)
    mb = engine.max_micro_batch(stack, shape.seq_len, limit, cap=MAX_SEARCH_MICRO_BATCH)
    fits = est.device_total <= limit
    check = FitCheck(
        gpu=gpu.name,
        usable_bytes=gpu.usable_bytes,
        headroom_fraction=headroom,
        fits=fits,
        free_bytes=gpu.usable_bytes - est.device_total,
        max_micro_batch=mb,
        max_seq_len=engine.max_seq_len(stack, shape.micro_batch, limit),
        suggestions=[] if fits else fit_suggestions(engine, stack, shape, gpu, limit, max_micro_batch=mb),
    )
    warnings = []
    if "bf16" in stack.precision and not gpu.supports_bf16:
        warnings.append(f"{gpu.name} has no native bf16 (emulated, slow): use --precision fp16 or amp-fp16.")
    if stack.attention == "flash" and not gpu.supports_flash_attention:
        warnings.append(f"FlashAttention-2 does not run on {gpu.name}: use --attention sdpa.")
    if stack.liger and not liger_runs_on(gpu):
        warnings.append(f"Liger Kernel's Triton kernels are not supported on {gpu.name} (compute capability "
                        f"{gpu.compute_capability}; Triton targets 8.0+): use --no-liger.")
    return check, warnings


# One change to a run: its option label, the Stack fields and the Shape fields it sets.
Change = tuple[str, dict, dict]

# Memory savers combined one after another when no single change is enough (same GPU count).
COMBINED_SAVERS: tuple[Change, ...] = (("--grad-checkpointing", {"grad_checkpointing": True}, {}),
                                       ("--optimizer adamw-8bit", {"optimizer": "adamw-8bit"}, {}),
                                       ("--batch-size 1", {}, {"micro_batch": 1}),
                                       ("--method lora", {"method": "lora"}, {}),
                                       ("--method qlora", {"method": "qlora"}, {}))


def fit_suggestions(engine: Engine, stack: Stack, shape: Shape, gpu, limit: int, most: int = 4,
                    max_micro_batch: int = 1) -> list[str]:
    """Single changes, least disruptive first (same model quality before cheaper compute), that bring
    the run under `limit` bytes per GPU on `gpu` -- each with the memory it would need. When none is
    enough, one combination of memory savers, pruned to the changes it needs."""
    singles = (_same_model_changes(engine, stack, shape, gpu, max_micro_batch)
               + _scale_changes(stack) + _method_changes(stack))
    out = []
    for change in singles:
        total = _need(engine, stack, shape, [change])
        if total is not None and total <= limit:
            out.append(_text([change], total))
        if len(out) == most:
            break
    if out:
        return out
    combined = _combination(engine, stack, shape, limit)
    if combined is not None:
        return [combined]
    return [f"nothing on one {gpu.name} at this sequence length; try --seq-len, more GPUs, or a larger card"]


def _need(engine: Engine, stack: Stack, shape: Shape, changes: list[Change]) -> int | None:
    """Bytes per GPU of the run with `changes` applied in order; None when they make an impossible stack."""
    st, sh = stack.model_dump(), shape.model_dump()
    for _, stack_update, shape_update in changes:
        st.update(stack_update)
        sh.update(shape_update)
    try:  # validated: a change that makes an impossible stack (QLoRA in fp32) is skipped
        return engine.device_total(Stack(**st), Shape(**sh))
    except ValueError:
        return None


def _text(changes: list[Change], total: int) -> str:
    return f"{' '.join(label for label, _, _ in changes)}: {total / GB:.1f} GB per GPU"


def _same_model_changes(engine: Engine, stack: Stack, shape: Shape, gpu, max_micro_batch: int) -> list[Change]:
    """Changes that train the same model on the same GPUs: recomputation, fused kernels, 8-bit states, a smaller
    micro-batch."""
    out: list[Change] = []
    head = "lm_head" in stack.lora_targets or "lm_head" in stack.modules_to_save
    if not stack.grad_checkpointing:
        out.append(("--grad-checkpointing", {"grad_checkpointing": True}, {}))
    if (not stack.liger and stack.loss in ("trl", "standard") and not head and families.traits(engine.spec.family).liger
            and liger_runs_on(gpu)):
        out.append(("--liger", {"liger": True}, {}))  # same model, same batch: smaller loss path and norms
    if (stack.attention == "eager" and gpu.supports_flash_attention
            and "flash" in supported_attention(engine.spec.family)):
        out.append(("--attention flash", {"attention": "flash"}, {}))
    if stack.optimizer in ("adamw", "adamw-fp32", "sgd"):
        out.append(("--optimizer adamw-8bit", {"optimizer": "adamw-8bit"}, {}))
    if shape.micro_batch > 1:
        mb = max(1, min(max_micro_batch, shape.micro_batch - 1))  # the largest that fits, if any
        out.append((f"--batch-size {mb} (raise gradient accumulation instead)", {}, {"micro_batch": mb}))
    return out


def _scale_changes(stack: Stack) -> list[Change]:
    """More GPUs sharing the state (FSDP)."""
    return [(f"--gpus {n} --sharding fsdp (per-GPU share)", {"gpus": n, "sharding": "fsdp"}, {})
            for n in (2, 4, 8) if stack.gpus < n]


def _method_changes(stack: Stack) -> list[Change]:
    """A cheaper method (adapters, then a 4-bit base), and for full fine-tuning both main memory savers at once."""
    out: list[Change] = []
    if stack.method == "full":
        out.append(("--method lora", {"method": "lora"}, {}))
    if stack.method in ("full", "lora"):
        out.append(("--method qlora", {"method": "qlora"}, {}))
    if stack.method == "full" and (not stack.grad_checkpointing or stack.optimizer != "adamw-8bit"):
        out.append(("--grad-checkpointing --optimizer adamw-8bit",
                    {"grad_checkpointing": True, "optimizer": "adamw-8bit"}, {}))
    return out


def _combination(engine: Engine, stack: Stack, shape: Shape, limit: int) -> str | None:
    """No single change is enough: the memory savers combined one after another (same GPU count) until the run
    fits, then without any the combination does not need; None when even all of them are not enough."""
    chosen: list[Change] = []
    for step in COMBINED_SAVERS:
        chosen.append(step)
        total = _need(engine, stack, shape, chosen)
        if total is not None and total <= limit:
            for item in list(chosen):
                rest = [c for c in chosen if c is not item]
                t = _need(engine, stack, shape, rest)
                if t is not None and t <= limit:
                    chosen, total = rest, t
            return _text(chosen, total)
    return None
