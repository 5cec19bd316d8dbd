"""Stages 2-4 — hardware configs, memory fits and timing, through the one estimation engine.

Memory and time depend on the GPU model, the GPUs in total and the stack, never on price or
region, so they are computed once per distinct hardware × stack *config* and joined to the
offers later. Each config's micro-batch is the engine's affine guess (`exact=False`); the plan
checks the guess of everything it shows with the exact search (`settle`) and re-ranks if one
shrank, so every number on a shown candidate is the estimator's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable

from advisor.engine import Engine, usable_limit
from advisor.planner.request import PlanRequest
from advisor.results import Breakdown
from advisor.stacks import Shape, Stack

OPTIMIZERS = ("adamw", "adamw-8bit")
MAX_MICRO_BATCH = 64
LEANEST = {"grad_checkpointing": True, "optimizer": "adamw-8bit"}  # the same stack with the two memory savers


def stacks_for(gpu, n_gpus: int, methods: Iterable[str], family: str = "llama") -> list[Stack]:
    """Every stack that makes sense on `n_gpus` of `gpu` for a model of `family` (DESIGN.md "Candidates")."""
    from advisor.architecture import supported_attention

    allowed = supported_attention(family)
    if gpu.supports_flash_attention and "flash" in allowed:
        attention = "flash"
    else:
        attention = "sdpa" if "sdpa" in allowed else "eager"
    return _stacks(gpu.supports_bf16, attention, n_gpus, tuple(methods))


@lru_cache(maxsize=1024)
def _stacks(bf16: bool, attention: str, n_gpus: int, methods: tuple[str, ...]) -> list[Stack]:
    out = []
    for method in methods:
        if bf16:
            precision = "bf16"
        else:  # T4/V100: no bf16; full FT needs fp32 master weights with fp16 compute
            precision = "amp-fp16" if method == "full" else "fp16"
        if n_gpus == 1:
            shardings = [("none", "none")] + ([("zero3", "optimizer")] if method == "full" else [])
        else:
            shardings = [("ddp", "none"), ("fsdp", "none"), ("zero3", "none")]
            if method == "full":
                shardings.append(("zero3", "optimizer"))
        for optimizer in OPTIMIZERS:
            for ckpt in (False, True):
                for sharding, offload in shardings:
                    out.append(Stack(method=method, precision=precision, optimizer=optimizer,
                                     grad_checkpointing=ckpt, attention=attention, gpus=n_gpus,
                                     sharding=sharding, offload=offload))
    return out


@dataclass
class Config:
    """One hardware × stack: its micro-batch, memory and (when it fits) timing."""

    gpu: object  # pricing.gpus.GPU
    per_node: int
    nodes: int
    stack: Stack
    limit: int
    micro_batch: int = 0
    need1: int = 0  # device bytes at micro-batch 1 (of the leanest variant when this one cannot fit)
    peak: int = 0
    cpu_ram: int = 0
    breakdown: Breakdown | None = None
    verified: bool = False
    grad_accum: int = 0
    timing: dict | None = None  # Engine.step's numbers
    train_hours: float = math.nan
    extra: dict = field(default_factory=dict)

    @property
    def gpu_model(self) -> str:
        return self.gpu.name

    @property
    def method(self) -> str:
        return self.stack.method

    def shape(self, seq_len: int) -> Shape:
        return Shape(micro_batch=max(self.micro_batch, 1), seq_len=seq_len, grad_accum=self.grad_accum or None)


class Evaluator:
    """Fits and times configs for one request with one engine."""

    def __init__(self, engine: Engine, request: PlanRequest):
        self.engine, self.request = engine, request
        self.seq_len = request.seq_len
        self._lean: dict[tuple, Stack] = {}
        self._one = Shape(micro_batch=1, seq_len=request.seq_len)

    def configs(self, hardware: Iterable[tuple[str, int]], methods: tuple[str, ...]) -> list[Config]:
        """Every (GPU model, GPUs per node) × node count × stack the request allows, fitted and timed."""
        from pricing.gpus import get_gpu

        req, rows = self.request, []
        global_batch = req.sequences_per_step
        for gpu_model, per_node in hardware:
            gpu = get_gpu(gpu_model)
            limit = usable_limit(gpu, req.headroom)
            for nodes in range(1, req.max_nodes + 1):
                n = per_node * nodes
                if (req.max_gpus is not None and n > req.max_gpus) or n > global_batch:
                    continue
                cap = min(MAX_MICRO_BATCH, max(1, global_batch // n))
                for stack in stacks_for(gpu, n, methods, self.engine.spec.family):
                    rows.append(self.fit(Config(gpu=gpu, per_node=per_node, nodes=nodes, stack=stack, limit=limit),
                                         cap))
        return rows

    def fit(self, cfg: Config, cap: int) -> Config:
        """The predicted micro-batch; a stack whose leanest variant (checkpointing + 8-bit states)
        does not fit at micro-batch 1 is not estimated on its own."""
        engine, seq = self.engine, self.seq_len
        lean = self._lean.get(cfg.stack.key)
        if lean is None:
            lean = self._lean[cfg.stack.key] = cfg.stack.model_copy(update=LEANEST)
        lean_one = engine.memory(lean, self._one)
        if lean_one.device_total > cfg.limit:
            one, mb = lean_one, 0
        else:
            mb = engine.max_micro_batch(cfg.stack, seq, cfg.limit, cap=cap, exact=False)
            one = engine.memory(cfg.stack, self._one) if mb else lean_one
        cfg.micro_batch, cfg.need1 = mb, one.device_total
        cfg.peak = one.device_total + max(mb - 1, 0) * (engine.micro_batch_slope(cfg.stack, seq) if mb > 1 else 0)
        cfg.cpu_ram, cfg.breakdown, cfg.verified = one.cpu_ram_bytes, one.breakdown, mb == 0
        if mb > 0:
            self.time(cfg)
        return cfg

    def time(self, cfg: Config) -> None:
        """Step time, throughput and training hours at the config's micro-batch, with the gradient
        accumulation that reaches the global batch."""
        req, n = self.request, cfg.stack.gpus
        cfg.grad_accum = max(1, math.ceil(req.sequences_per_step / (cfg.micro_batch * n)))
        t = self.engine.step(cfg.stack, cfg.shape(self.seq_len), cfg.gpu, nodes=cfg.nodes, mfu=req.mfu,
                             network_gbps=req.network_gbps)
        cfg.timing = t
        cfg.train_hours = math.ceil(req.train_tokens / t["tokens_per_step"]) * t["step_seconds"] / 3600

    def settle(self, cfg: Config) -> bool:
        """Replace a predicted micro-batch by the exact one and the estimate at the candidate's own
        shape; False when the micro-batch had to change (the ranking must be redone)."""
        if cfg.verified:
            return True
        engine, seq = self.engine, self.seq_len
        mb = engine.max_micro_batch(cfg.stack, seq, cfg.limit, cap=cfg.micro_batch)
        same = mb == cfg.micro_batch
        cfg.micro_batch, cfg.verified = mb, True
        if not same:
            self.time(cfg)
        est = engine.memory(cfg.stack, cfg.shape(seq))
        cfg.peak, cfg.breakdown, cfg.cpu_ram = est.device_total, est.breakdown, est.cpu_ram_bytes
        return same
