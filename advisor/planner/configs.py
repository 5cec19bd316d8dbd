"""Stages 2-4 — hardware configs, memory fits and timing, through the one estimation engine.

Memory and time depend on the GPU model, the GPUs in total, the stack and (across nodes) the
fabric, never on price or region, so they are computed once per distinct hardware × stack
*config* and joined to the offers later. Each config's micro-batch is the engine's affine guess
(`exact=False`); the plan checks the guess of everything it shows with the exact search
(`settle`) and re-ranks if one changed, so every number on a shown candidate is the
estimator's own.

The stacks searched are what a senior engineer would sign: full fine-tuning in mixed precision
with fp32 master weights (autocast over fp32 weights, or DeepSpeed's bf16/fp16 mode, which keeps
fp32 masters itself); LoRA/QLoRA with 16-bit frozen weights and peft's fp32 adapters. A setting
the user pins (`PlanRequest.pins`) fixes that dimension; the others are searched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable

from advisor.engine import Engine, usable_limit
from advisor.planner.request import RISKS, PlanRequest
from advisor.results import Breakdown
from advisor.stacks import Shape, Stack

OPTIMIZERS = ("adamw", "adamw-8bit")
# Pins that describe adapters: they shape LoRA/QLoRA stacks, not the full fine-tune (the baseline)
ADAPTER_FIELDS = ("lora_rank", "lora_alpha", "lora_dropout", "lora_targets", "adapter_dtype", "dora",
                  "modules_to_save", "double_quant", "bnb_saves_inputs")
MAX_MICRO_BATCH = 64
LEANEST = {"grad_checkpointing": True, "optimizer": "adamw-8bit"}  # the same stack with the two memory savers
# The estimator's measured error band: on the high-confidence published rows its worst under-estimate
# is 8.1% (benchmarks/results/accuracy.md, "conf=high", row lr-13). A candidate whose peak is within
# this share of the limit is "tight": the planner prefers a micro-batch outside the band.
TIGHT_FRACTION = 0.08


def precision_for(method: str, sharding: str, bf16: bool) -> str:
    """The default recipe. Full fine-tuning: mixed precision with fp32 master weights — autocast
    over fp32 weights (Trainer's bf16=True on an fp32-loaded model, FSDP mixed precision), or, under
    DeepSpeed, its bf16/fp16 mode (fp32 masters and Adam states kept by DeepSpeed; ZeRO paper,
    K = 12). LoRA/QLoRA: 16-bit frozen weights (peft keeps adapters in fp32). Cards without bf16
    (T4, V100) use fp16."""
    half = "bf16" if bf16 else "fp16"
    if method != "full" or sharding.startswith("zero"):
        return half
    return f"amp-{half}"


def stacks_for(gpu, n_gpus: int, methods: Iterable[str], family: str = "llama",
               pins: dict[str, Any] | None = None) -> list[Stack]:
    """Every stack that makes sense on `n_gpus` of `gpu` for a model of `family`, with `pins` fixed.
    A GPU enters only through three traits (FlashAttention, bf16, Triton), so GPU models that share
    them share the answer (a plan asks for hundreds of GPU × count pairs)."""
    triton = gpu.vendor.upper() == "AMD" or float(gpu.compute_capability or 0) >= 7.0
    key = (bool(gpu.supports_flash_attention), bool(gpu.supports_bf16), triton, n_gpus, tuple(methods), family,
           tuple(sorted((pins or {}).items())))
    try:
        found = _STACKS_FOR.get(key)
    except TypeError:  # an unhashable pin value (a library caller's): the stack itself will refuse it
        return list(_stacks_for(*key[:6], dict(pins or {})))
    if found is None:
        found = _STACKS_FOR[key] = _stacks_for(*key[:6], dict(pins or {}))
    return list(found)


def _stacks_for(flash: bool, bf16: bool, triton: bool, n_gpus: int, methods: tuple[str, ...], family: str,
                pins: dict[str, Any]) -> tuple[Stack, ...]:
    from advisor.architecture import supported_attention

    allowed = supported_attention(family)
    if "attention" in pins:
        attention = pins["attention"]
        if attention not in allowed or (attention == "flash" and not flash):
            return ()
    elif flash and "flash" in allowed:
        attention = "flash"
    else:
        attention = "sdpa" if "sdpa" in allowed else "eager"
    out = []
    for method in methods:
        for sharding, offload in _shardings(method, n_gpus, pins):
            precision = pins.get("precision") or precision_for(method, sharding, bf16)
            if method == "qlora" and precision == "fp32":
                continue
            for optimizer in (pins["optimizer"],) if "optimizer" in pins else OPTIMIZERS:
                for ckpt in (pins["grad_checkpointing"],) if "grad_checkpointing" in pins else (False, True):
                    for liger in _liger_choices(triton, family, pins, method):
                        skip = ("sharding", "offload", "precision") + (ADAPTER_FIELDS if method == "full" else ())
                        fields = {k: v for k, v in pins.items() if k not in skip}
                        fields.update(method=method, precision=precision, optimizer=optimizer,
                                      grad_checkpointing=ckpt, attention=attention, gpus=n_gpus, sharding=sharding,
                                      offload=offload, liger=liger)
                        out.append(_stack(tuple(sorted(fields.items()))))
    return tuple(out)


def _liger_choices(triton: bool, family: str, pins: dict[str, Any], method: str) -> tuple[bool, ...]:
    """Liger Kernel where it applies: a family liger-kernel patches (families.json), a GPU its Triton
    kernels run on (`triton`: NVIDIA compute capability 7.0+, AMD ROCm), the standard loss, and no
    adapter or trained copy on lm_head (the fused loss reads the base lm_head weight, so those would
    not train). With a frozen lm_head (LoRA/QLoRA) Liger never needs more memory (its norms, SwiGLU
    and loss all keep less) and the time model finds it faster, so only the Liger stack is priced; for
    full fine-tuning its fused loss keeps lm_head's weight gradient, which can outweigh short
    sequences' logits, so both are searched. --no-liger plans without it."""
    from advisor import families

    if "liger" in pins:
        return (pins["liger"],)
    head = "lm_head" in str(pins.get("lora_targets", "")) or "lm_head" in str(pins.get("modules_to_save", ""))
    if families.traits(family).liger and triton and pins.get("loss", "standard") == "standard" and not head:
        return (False, True) if method == "full" else (True,)
    return (False,)


def _shardings(method: str, n_gpus: int, pins: dict[str, Any]) -> list[tuple[str, str]]:
    if "sharding" in pins:
        sharding = pins["sharding"]
        if n_gpus > 1 and sharding == "none":
            return []
        if n_gpus == 1 and sharding in ("ddp",):
            sharding = "none"
        offload = pins.get("offload", "none")
        if offload != "none" and sharding not in ("fsdp", "zero1", "zero2", "zero3"):
            return []
        return [(sharding, offload)]
    if n_gpus == 1:
        out = [("none", "none")] + ([("zero3", "optimizer")] if method == "full" else [])
    else:
        out = [("ddp", "none"), ("fsdp", "none"), ("zero3", "none")]
        if method == "full":
            out.append(("zero3", "optimizer"))
    if "offload" in pins:
        out = [(s, pins["offload"]) for s, _ in out if pins["offload"] == "none" or s in ("fsdp", "zero3")]
    return list(dict.fromkeys(out))


_STACKS: dict[tuple, Stack] = {}
_STACKS_FOR: dict[tuple, tuple[Stack, ...]] = {}


def _stack(fields: tuple) -> Stack:
    stack = _STACKS.get(fields)
    if stack is None:
        stack = _STACKS[fields] = Stack(**dict(fields))
    return stack


@dataclass
class Config:
    """One hardware × stack: its micro-batch, memory and (when it fits) timing."""

    gpu: object  # pricing.gpus.GPU
    per_node: int
    nodes: int
    stack: Stack
    limit: int
    fabric_gbps: float | None = None  # across nodes (None: one node)
    max_micro_batch: int = 0  # the largest that fits (0: none)
    micro_batch: int = 0  # the one run: a divisor of the per-GPU global batch
    need1: int = 0  # device bytes at micro-batch 1 (of the leanest variant when this one cannot fit)
    peak: int = 0
    cpu_ram: int = 0  # host RAM per node for offloaded states
    breakdown: Breakdown | None = None
    verified: bool = False
    tight: bool = False
    grad_accum: int = 0
    global_batch: int = 0  # sequences per step as run (= the request's where the GPU count allows)
    timing: dict | None = None  # Engine.step's numbers
    train_hours: float = math.nan
    train_hours_low: float = math.nan  # the time model's held-out band (p10 .. p90 of its error)
    train_hours_high: float = math.nan
    train_hours_risk: float = math.nan  # at the request's --risk quantile (= train_hours at p50)
    checkpoint_bytes: int = 0

    @property
    def gpu_model(self) -> str:
        return self.gpu.name

    @property
    def method(self) -> str:
        return self.stack.method

    def shape(self, seq_len: int, padded: bool = False) -> Shape:
        return _shape(max(self.micro_batch, 1), seq_len, self.grad_accum or None, padded)


@lru_cache(maxsize=4096)
def _shape(micro_batch: int, seq_len: int, grad_accum: int | None, padded: bool) -> Shape:
    """One shared (frozen) Shape per distinct value: thousands of configs run the same few."""
    return Shape(micro_batch=micro_batch, seq_len=seq_len, grad_accum=grad_accum, padded=padded)


def node_counts(most: int) -> list[int]:
    """Node counts worth pricing: every count up to 8, then steps of about a third (12, 16, 24, 32,
    48, 64, ...) up to `most` — a cluster of 1,000 nodes is not priced 1,000 times."""
    out, n = list(range(1, min(most, 8) + 1)), 8
    while n < most:
        n = min(most, n + max(1, n // 2) if n % 3 else n + n // 3)
        out.append(n)
    return sorted(set(out))


@lru_cache(maxsize=4096)
def split_batch(global_batch: int, n_gpus: int, max_micro_batch: int) -> tuple[int, int, int]:
    """(micro-batch, accumulation, global batch as run): the requested global batch exactly when the
    GPU count divides it (the largest micro-batch that fits and divides the per-GPU share), else the
    nearest multiple of the GPU count."""
    per_gpu = max(1, round(global_batch / n_gpus))
    mb = max(d for d in range(1, min(per_gpu, max_micro_batch) + 1) if per_gpu % d == 0)
    return mb, per_gpu // mb, per_gpu * n_gpus


class Evaluator:
    """Fits and times configs for one request with one engine."""

    def __init__(self, engine: Engine, request: PlanRequest):
        self.engine, self.request = engine, request
        self.seq_len = request.seq_len
        self._lean: dict[tuple, Stack] = {}
        self._one = Shape(micro_batch=1, seq_len=request.seq_len, padded=request.padded)

    def configs(self, hardware: Iterable[tuple[str, int, float | None]], methods: tuple[str, ...]) -> list[Config]:
        """Every (GPU model, GPUs per node, fabric) × node count × stack the request allows, fitted and
        timed. One node per (GPU model, GPUs per node); more only over a known fabric."""
        from pricing.gpus import get_gpu

        req, rows = self.request, []
        global_batch = req.sequences_per_step
        single: set[tuple[str, int]] = set()
        for gpu_model, per_node, fabric in hardware:
            gpu = get_gpu(gpu_model)
            limit = usable_limit(gpu, req.headroom)
            fabric = None if fabric is None or fabric != fabric else float(fabric)  # NaN: unknown
            for nodes in node_counts(req.max_nodes if fabric else 1):
                if nodes == 1 and (gpu_model, per_node) in single:
                    continue
                single.add((gpu_model, per_node))
                n = per_node * nodes
                if (req.max_gpus is not None and n > req.max_gpus) or n > global_batch:
                    continue
                cap = min(MAX_MICRO_BATCH, max(1, global_batch // n))
                for stack in stacks_for(gpu, n, methods, self.engine.spec.family, req.pins):
                    cfg = Config(gpu=gpu, per_node=per_node, nodes=nodes, stack=stack, limit=limit,
                                 fabric_gbps=fabric if nodes > 1 else None)
                    rows.append(self.fit(cfg, cap))
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
            padded = self.request.padded
            mb = engine.max_micro_batch(cfg.stack, seq, int(cfg.limit * (1 - TIGHT_FRACTION)), cap=cap, exact=False,
                                        padded=padded)
            cfg.tight = mb == 0
            mb = mb or engine.max_micro_batch(cfg.stack, seq, cfg.limit, cap=cap, exact=False, padded=padded)
            one = engine.memory(cfg.stack, self._one) if mb else lean_one
        cfg.max_micro_batch, cfg.need1 = mb, one.device_total
        cfg.cpu_ram = one.cpu_ram_bytes // cfg.nodes  # offloaded shards are spread over the nodes
        cfg.breakdown, cfg.verified = one.breakdown, mb == 0
        cfg.peak = one.device_total
        if mb > 0:
            cfg.checkpoint_bytes = engine.checkpoint_bytes(cfg.stack)
            self.time(cfg)
        return cfg

    def time(self, cfg: Config) -> None:
        """Step time, throughput and training hours at the micro-batch and accumulation that reach
        the global batch."""
        req, n = self.request, cfg.stack.gpus
        cfg.micro_batch, cfg.grad_accum, cfg.global_batch = split_batch(req.sequences_per_step, n, cfg.max_micro_batch)
        network = req.network_gbps if req.network_gbps is not None else cfg.fabric_gbps
        t = self.engine.step(cfg.stack, cfg.shape(self.seq_len, req.padded), cfg.gpu, nodes=cfg.nodes, mfu=req.mfu,
                             network_gbps=network)
        cfg.timing = t
        cfg.train_hours = math.ceil(req.train_tokens / t["tokens_per_step"]) * t["step_seconds"] / 3600
        tps = t["tokens_per_sec"]
        cfg.train_hours_low = cfg.train_hours * tps / t.get("tokens_per_sec_high", tps)
        cfg.train_hours_high = cfg.train_hours * tps / t.get("tokens_per_sec_low", tps)
        cfg.train_hours_risk = cfg.train_hours
        if RISKS[req.risk] > 0.5:
            from advisor.throughput import band_quantile

            factor, _ = band_quantile(cfg.gpu, cfg.stack, 1 - RISKS[req.risk])  # measured/predicted tokens/s
            cfg.train_hours_risk = cfg.train_hours / factor

    def settle(self, cfg: Config) -> bool:
        """Replace a predicted micro-batch by the exact one — outside the estimator's error band of the
        limit when any fits there, else marked tight — and the memory at the candidate's own shape;
        False when the micro-batch changed (the ranking must be redone)."""
        if cfg.verified:
            return True
        engine, seq, req = self.engine, self.seq_len, self.request
        cap = min(MAX_MICRO_BATCH, max(1, req.sequences_per_step // cfg.stack.gpus))
        safe = engine.max_micro_batch(cfg.stack, seq, int(cfg.limit * (1 - TIGHT_FRACTION)), cap=cap, padded=req.padded)
        mb = safe or engine.max_micro_batch(cfg.stack, seq, cfg.limit, cap=cap, padded=req.padded)
        same = mb == cfg.max_micro_batch and cfg.tight == (safe == 0)
        cfg.max_micro_batch, cfg.verified, cfg.tight = mb, True, safe == 0
        if not same:
            self.time(cfg)
        est = engine.memory(cfg.stack, cfg.shape(seq, req.padded))
        cfg.peak, cfg.breakdown, cfg.cpu_ram = est.device_total, est.breakdown, est.cpu_ram_bytes // cfg.nodes
        return same
