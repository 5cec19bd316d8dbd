"""The library's entry points: a model (catalog name, Hub id, config.json path or `ModelSpec`) in, typed
results out.

    estimate_memory(model, stack, shape, gpu=...)       -> MemoryEstimate (per GPU, every component sourced)
    estimate_throughput(model, stack, shape, gpu)       -> Throughput (tokens/s with its held-out band)
    fit_micro_batch(model, stack, seq_len, usable)      -> the largest micro-batch under a byte limit
    plan(request | model, **fields)                     -> Plan (advisor.planner)
    load_model(name)                                    -> ModelSpec

The convenience functions here take a model by name and use its shared `Engine`
(advisor.estimate.engine). They used to live inside the estimator modules (memory.py, throughput.py),
which then imported the engine that imports them; the estimator now takes an architecture or an
engine and never imports this module.
"""

from __future__ import annotations

from advisor.estimate.alloc_trace import apply_reserved
from advisor.estimate.engine import Engine
from advisor.estimate.fit import fit_check
from advisor.estimate.memory import CUDA_CONTEXT_BYTES
from advisor.model.architecture import default_attention
from advisor.model.catalog import load_model
from advisor.model.release import Release
from advisor.model.spec import ModelSpec
from advisor.planner import PlanRequest, plan
from advisor.results import MemoryEstimate, Throughput
from advisor.stacks import Shape, Stack
from pricing.gpus import get_gpu

__all__ = ["PlanRequest", "estimate_memory", "estimate_throughput", "fit_micro_batch", "load_model", "plan"]


def estimate_memory(
    model: ModelSpec | str,
    stack: Stack | None = None,
    shape: Shape | None = None,
    gpu: str | None = None,
    headroom: float = 0.10,
    lengths=None,
    expandable_segments: bool = True,
    transformers: Release | None = None,
) -> MemoryEstimate:
    """Peak per-GPU memory for training `model` with `stack` at `shape` (micro-batch per GPU);
    with `lengths` (advisor.estimate.alloc_trace.LengthSpec) the reserved figure from the caching-allocator
    replay; with `gpu`, the fit on that card (advisor.estimate.fit); `transformers`: the release that loads and
    runs it (default: the launch bundle's). A fresh copy: callers may change it."""
    engine = Engine.of(model, transformers)
    stack = stack or Stack(attention=default_attention(engine.spec.family, engine.transformers))
    est = engine.memory(stack, shape or Shape()).model_copy(deep=True)
    card = get_gpu(gpu).usable_bytes if gpu else None
    est = apply_reserved(engine, stack, est, lengths, expandable_segments, CUDA_CONTEXT_BYTES, card)
    if gpu:
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
    engine = Engine.of(model)
    limit = int(usable_bytes * (1 - headroom))
    mb = engine.max_micro_batch(stack, seq_len, limit, cap=max_micro_batch)
    return mb, engine.memory(stack, Shape(micro_batch=max(mb, 1), seq_len=seq_len))


def estimate_throughput(model: ModelSpec | str, stack: Stack, shape: Shape, gpu, *, grad_accum: int | None = None,
                        nodes: int = 1, mfu: float | None = None, network_gbps: float | None = None) -> Throughput:
    """Library entry point: tokens/s of `model` for one setup (see Engine.throughput).
    `grad_accum`, when given, replaces the shape's."""
    if grad_accum is not None:
        shape = shape.model_copy(update={"grad_accum": grad_accum})
    return Engine.of(model).throughput(stack, shape, gpu, nodes=nodes, mfu=mfu, network_gbps=network_gbps)
