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
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from advisor import techniques
from advisor.estimate.engine import Engine, usable_limit
from advisor.estimate.throughput import (
    MIN_CALIBRATED_ROWS,
    band_quantile,
    liger_runs_on,
    quantile_factor,
    segment,
    table,
)
from advisor.memo import Memo
from advisor.model import families
from advisor.model.architecture import supported_attention
from advisor.planner import fit_cache
from advisor.planner.objectives import global_batch as objective_global_batch, objectives_for, refusal_reason
from advisor.planner.request import RISKS, PlanRequest
from advisor.results import Breakdown, StepNumbers
from advisor.stacks import ADAPTER_METHODS, OPTIMIZER_SHARDINGS, PARAM_SHARDINGS, ZERO_SHARDINGS, Shape, Stack
from advisor.workload import measurements
from pricing.gpus import GPU, get_gpu

# The optimizers searched when --optimizer is not pinned, the 8-bit ones (kept only where they make the run fit) and
# the standard one they are judged against: rows of advisor/data/optimizers.csv (advisor/techniques.py)
OPTIMIZERS = techniques.searched()
EIGHT_BIT = techniques.eight_bit()
STANDARD = next(name for name in OPTIMIZERS if name not in EIGHT_BIT)
# Pins that describe adapters: they shape LoRA/QLoRA stacks, not the full fine-tune (the baseline)
ADAPTER_FIELDS = ("lora_rank", "lora_alpha", "lora_dropout", "lora_targets", "adapter_dtype", "dora",
                  "modules_to_save", "double_quant", "bnb_saves_inputs")
MAX_MICRO_BATCH = 64
# the same stack with the two memory savers (checkpointing and the searched 8-bit optimizer)
LEANEST = {"grad_checkpointing": True, "optimizer": next(name for name in OPTIMIZERS if name in EIGHT_BIT)}
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
    if method in ADAPTER_METHODS or sharding in ZERO_SHARDINGS:
        return half
    return f"amp-{half}"


def stacks_for(gpu, n_gpus: int, methods: Iterable[str], family: str = "llama",
               pins: dict[str, Any] | None = None) -> list[Stack]:
    """Every stack that makes sense on `n_gpus` of `gpu` for a model of `family`, with `pins` fixed.
    A GPU enters only through three traits (FlashAttention, bf16, Liger's Triton kernels), so GPU models that share
    them share the answer (a plan asks for hundreds of GPU × count pairs)."""
    triton = liger_runs_on(gpu)
    key = (bool(gpu.supports_flash_attention), bool(gpu.supports_bf16), triton, n_gpus, tuple(methods), family,
           tuple(sorted((pins or {}).items())))
    try:
        found = _STACKS_FOR.get(key)
    except TypeError:  # an unhashable pin value (a library caller's): the stack itself will refuse it
        return list(_stacks_for(*key[:6], dict(pins or {})))
    if found is None:
        found = _STACKS_FOR[key] = _stacks_for(*key[:6], dict(pins or {}))
    return list(found)


def _attention_for(flash: bool, family: str, pins: dict[str, Any]) -> str | None:
    """The pinned attention kernel (None: the family or the GPU cannot run it), else FlashAttention where both can,
    else SDPA, else eager."""
    allowed = supported_attention(family)
    if "attention" in pins:
        attention = pins["attention"]
        return None if attention not in allowed or (attention == "flash" and not flash) else attention
    if flash and "flash" in allowed:
        return "flash"
    return "sdpa" if "sdpa" in allowed else "eager"


def _stacks_for(flash: bool, bf16: bool, triton: bool, n_gpus: int, methods: tuple[str, ...], family: str,
                pins: dict[str, Any]) -> tuple[Stack, ...]:
    attention = _attention_for(flash, family, pins)
    if attention is None:
        return ()
    objective = pins.get("objective")
    out: list[Stack] = []
    for method in methods:
        if method == "full" and objective is not None and objective.ref_model == "adapter-off":
            continue  # the adapter switched off is a LoRA/QLoRA reference (advisor/stacks.py refuses it for full)
        for sharding, offload in _shardings(method, n_gpus, pins):
            precision = pins.get("precision") or precision_for(method, sharding, bf16)
            if method == "qlora" and precision == "fp32":
                continue
            skip = ("sharding", "offload", "precision") + (ADAPTER_FIELDS if method == "full" else ())
            base = {k: v for k, v in pins.items() if k not in skip}
            base.update(method=method, precision=precision, attention=attention, gpus=n_gpus, sharding=sharding,
                        offload=offload)
            out += _variants(base, _liger_choices(triton, family, pins, method), pins)
    return tuple(out)


def _variants(base: dict[str, Any], ligers: tuple[bool, ...], pins: dict[str, Any]) -> list[Stack]:
    """The stacks of one method × sharding × precision: each optimizer, checkpointing and Liger choice the pins
    leave open (optimizer outermost, as the planner lists them)."""
    out = []
    for optimizer in (pins["optimizer"],) if "optimizer" in pins else OPTIMIZERS:
        for ckpt in (pins["grad_checkpointing"],) if "grad_checkpointing" in pins else (False, True):
            for liger in ligers:
                fields = dict(base, optimizer=optimizer, grad_checkpointing=ckpt, liger=liger)
                out.append(_stack(tuple(sorted(fields.items()))))
    return out


def no_stack_reason(gpu, n_gpus: int, family: str, pins: dict[str, Any]) -> str:
    """Why the pins leave no stack for this hardware (the plan's rejection reason)."""
    attention = pins.get("attention")
    if attention == "flash" and not gpu.supports_flash_attention:
        return (f"--attention flash: {gpu.name} has no FlashAttention-2 kernel (it needs an Ampere or newer "
                "NVIDIA GPU, or ROCm on MI200/MI300); use --attention sdpa")
    if attention and attention not in supported_attention(family):
        return f"--attention {attention}: transformers has no {attention} attention for the {family} family"
    if pins.get("sharding") == "none" and n_gpus > 1:
        return "--sharding none: several GPUs need ddp, fsdp or a ZeRO stage"
    if pins.get("offload", "none") != "none":
        return f"--offload {pins['offload']}: only FSDP or DeepSpeed ZeRO can offload"
    return "no stack matches the pinned settings on this hardware"


def _liger_choices(triton: bool, family: str, pins: dict[str, Any], method: str) -> tuple[bool, ...]:
    """Liger Kernel where it applies: a family liger-kernel patches (families.json), a GPU its Triton
    kernels are supported on (`triton`: NVIDIA compute capability 8.0+, AMD ROCm — not Turing or Volta, where
    Triton dropped support and its bf16 kernels fail: advisor.estimate.throughput.liger_runs_on), the standard loss, and no
    adapter or trained copy on lm_head (the fused loss reads the base lm_head weight, so those would
    not train). With a frozen lm_head (LoRA/QLoRA) Liger never needs more memory (its norms, SwiGLU
    and loss all keep less) and the time model finds it faster, so only the Liger stack is priced; for
    full fine-tuning its fused loss keeps lm_head's weight gradient, which can outweigh short
    sequences' logits, so both are searched. --no-liger plans without it."""
    if "liger" in pins:
        return (pins["liger"],)
    head = "lm_head" in str(pins.get("lora_targets", "")) or "lm_head" in str(pins.get("modules_to_save", ""))
    if families.traits(family).liger and triton and pins.get("loss", "trl") in ("trl", "standard") and not head:
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
        if offload != "none" and sharding not in OPTIMIZER_SHARDINGS:
            return []
        return [(sharding, offload)]
    if n_gpus == 1:
        out = [("none", "none")] + ([("zero3", "optimizer")] if method == "full" else [])
    else:
        out = [("ddp", "none"), ("fsdp", "none"), ("zero3", "none")]
        if method == "full":
            out.append(("zero3", "optimizer"))
    if "offload" in pins:
        out = [(s, pins["offload"]) for s, _ in out if pins["offload"] == "none" or s in PARAM_SHARDINGS]
    return list(dict.fromkeys(out))


# bounded (advisor.memo): a long-lived process planning ever new pins must not grow without limit
_STACKS: dict[tuple, Stack] = Memo()
_STACKS_FOR: dict[tuple, tuple[Stack, ...]] = Memo()


def _stack(fields: tuple) -> Stack:
    stack = _STACKS.get(fields)
    if stack is None:
        stack = _STACKS[fields] = Stack(**dict(fields))
    return stack


QUANTILES = {"p10": 0.1, "p50": 0.5, "p90": 0.9}  # the hours band every candidate carries


@dataclass(frozen=True)
class StepTime:
    """One config's timing, computed once (Evaluator.time) and never changed: the engine's step
    numbers at the micro-batch and accumulation that reach the global batch, and the training
    hours at each quantile of the time model's held-out error (p10 fast .. p90 slow, and `rank`:
    the quantile the ranking uses). Costing alone turns these into wall hours and cost."""

    step: StepNumbers  # Engine.step's numbers (possibly a measured run's: advisor/workload/measurements.py)
    micro_batch: int
    grad_accum: int
    global_batch: int
    train_hours: dict  # "p10" | "p50" | "p90" | "rank" -> training hours
    rank_quantile: float  # --risk's quantile, the same for every candidate
    calibrated: bool  # the segment (GPU class x method) has held-out calibration rows


@dataclass(frozen=True)
class Fit:
    """One config's memory answer (Evaluator.fit, replaced whole by Evaluator.settle, never edited)."""

    max_micro_batch: int = 0  # the largest that fits (0: none)
    need1: int = 0  # device bytes at micro-batch 1 (of the leanest variant when this one cannot fit)
    peak: int = 0  # device bytes at the candidate's shape (at micro-batch 1 until settled)
    cpu_ram: int = 0  # host RAM per node for offloaded states
    breakdown: Breakdown | None = None
    verified: bool = False  # the micro-batch is the exact search's, not the affine guess
    tight: bool = False
    checkpoint_bytes: int = 0
    peak_phase: str = "training step"  # where need1 peaks (advisor/estimate/phases.py): model loading or the step


@dataclass
class Config:
    """One hardware × stack and the two frozen records the evaluator computed for it: `fitted`
    (memory) and `timed` (step time and training hours per quantile, None when it does not fit)."""

    gpu: GPU
    per_node: int
    nodes: int
    stack: Stack
    limit: int
    fabric_gbps: float | None = None  # across nodes (None: one node)
    fitted: Fit = Fit()
    timed: StepTime | None = None


    def shape(self, seq_len: int, padded: bool = False) -> Shape:
        """The candidate's shape: the timed micro-batch and accumulation (micro-batch 1 before timing)."""
        t = self.timed
        return _shape(t.micro_batch if t else 1, seq_len, t.grad_accum if t else None, padded)


@lru_cache(maxsize=4096)
def _shape(micro_batch: int, seq_len: int, grad_accum: int | None, padded: bool) -> Shape:
    """One shared (frozen) Shape per distinct value: thousands of configs run the same few."""
    return Shape(micro_batch=micro_batch, seq_len=seq_len, grad_accum=grad_accum, padded=padded)


def is_calibrated(gpu, stack: Stack) -> bool:
    """Whether the time model has at least MIN_CALIBRATED_ROWS held-out calibration rows for this GPU class x
    method (mfu.json bands); fewer rows take the band of held-out GPU classes (throughput._band_entry)."""
    entry = ((table().get("bands") or {}).get("segments") or {}).get(segment(gpu, stack))
    return bool(entry and entry.get("rows", 0) >= MIN_CALIBRATED_ROWS)


def _factor(t: StepNumbers, cfg: Config, q: float, bands: dict) -> float:
    """Measured/predicted tokens/s at quantile q: the step's own band at p10/p90; between them, a measured
    run's band (its step-time spread, `band_basis` set by advisor.workload.measurements.apply) interpolated by the
    held-out band's own rule, else the segment's stored held-out quantiles (they hold 0.2 and 0.8), kept in `bands`
    (the evaluator's, per GPU model, stack and quantile)."""
    tps = t.tokens_per_sec
    low, high = t.tokens_per_sec_low, t.tokens_per_sec_high
    if q == 0.1 and low:
        return low / tps
    if q == 0.9 and high:
        return high / tps
    if t.band_basis is not None and low and high:
        return quantile_factor({0.1: low / tps, 0.9: high / tps}, q)
    key = (cfg.gpu.name, cfg.stack.key, q)  # one plan asks the same few segments thousands of times
    found = bands.get(key)
    if found is None:
        found = bands[key] = band_quantile(cfg.gpu, cfg.stack, q)[0]
    return found


def _hardware(c: Config) -> tuple:
    """What an 8-bit variant is judged on: the same GPU model, GPUs per node, nodes, fabric and method."""
    return c.gpu.name, c.per_node, c.nodes, c.fabric_gbps, c.stack.method


def _standard_fits(configs: list[Config]) -> set[tuple]:
    """The hardware (`_hardware`) on which a standard-AdamW stack fits."""
    return {_hardware(c) for c in configs if c.stack.optimizer == STANDARD and c.fitted.max_micro_batch > 0}


def drop_needless_8bit(configs: list[Config], request: PlanRequest) -> tuple[list[Config], list[Config]]:
    """Standard AdamW by default (DESIGN.md): an unpinned 8-bit AdamW config is kept only where no
    standard-AdamW stack of the same method fits the same hardware (GPU model, GPUs per node,
    nodes, fabric): then 8-bit is what makes the run fit. Returns (kept, dropped); `Evaluator.configs` left the
    dropped ones unfitted."""
    if "optimizer" in request.pins:
        return configs, []
    fits = _standard_fits(configs)
    needless = [c.stack.optimizer in EIGHT_BIT and _hardware(c) in fits for c in configs]
    return ([c for c, x in zip(configs, needless) if not x], [c for c, x in zip(configs, needless) if x])


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
        self._bands: dict[tuple, float] = {}  # (GPU model, stack, quantile) -> the held-out band's factor
        self._one = Shape(micro_batch=1, seq_len=request.seq_len, padded=request.padded)
        self.excluded: dict[str, list] = {}  # reason -> [hardware configs, example]: for the plan's rejections
        self.estimated = 0  # configs fitted (and timed where they fit) by `configs`, not read from the store
        self.store = fit_cache.open_for(engine, request)  # earlier plans' records (None: not kept for this request)

    def _exclude(self, reason: str, example: str, hardware: tuple = ()) -> None:
        entry = self.excluded.setdefault(reason, [0, example])
        entry[0] += self._offers.get(hardware, 1)

    def configs(self, hardware: Iterable[tuple[str, int, float | None]], methods: tuple[str, ...],
                offers: dict | None = None) -> list[Config]:
        """Every (GPU model, GPUs per node, fabric) × node count × stack the request allows, fitted and
        timed. One node per (GPU model, GPUs per node); more only over a known fabric. `offers`: how many
        offers each (GPU model, GPUs per node) has, to count what a pin rules out in offers.

        Standard AdamW first: an unpinned 8-bit AdamW config is fitted only where no standard-AdamW stack of
        its method fits its hardware (elsewhere `drop_needless_8bit` drops it unfitted), so the plan estimates
        each hardware's 8-bit variants only when they may be what makes the run fit. `estimated` counts the
        configs fitted."""
        self._offers = offers or {}
        self.estimated = 0
        rows: list[Config] = []
        deferred: list[tuple[Config, int]] = []
        single: set[tuple[str, int]] = set()
        for gpu_model, per_node, fabric in hardware:
            fabric = None if fabric is None or fabric != fabric else float(fabric)  # NaN: unknown
            for nodes in node_counts(self.request.max_nodes if fabric else 1):
                if nodes == 1 and (gpu_model, per_node) in single:
                    continue
                single.add((gpu_model, per_node))
                for cfg, cap in self._hardware_configs(gpu_model, per_node, nodes, fabric, methods):
                    rows.append(cfg)
                    if "optimizer" not in self.request.pins and cfg.stack.optimizer in EIGHT_BIT:
                        deferred.append((cfg, cap))
                    else:
                        self.fit(cfg, cap)
        fits = _standard_fits(rows)
        for cfg, cap in deferred:
            if _hardware(cfg) not in fits:
                self.fit(cfg, cap)
        return rows

    def _hardware_configs(self, gpu_model: str, per_node: int, nodes: int, fabric: float | None,
                          methods: tuple[str, ...]) -> Iterable[tuple[Config, int]]:
        """The unfitted configs of `nodes` × `per_node` of `gpu_model` and the micro-batch cap of each; none (and
        the reason recorded) where the request rules the hardware out."""
        req, gpu = self.request, get_gpu(gpu_model)
        global_batch = req.sequences_per_step
        n = per_node * nodes
        where = f"{n}x {gpu_model}" + (f" on {nodes} nodes" if nodes > 1 else "")
        if req.max_gpus is not None and n > req.max_gpus:
            if nodes > 1:  # single instances over the limit: already counted with the offers
                self._exclude(f"--max-gpus {req.max_gpus}: more GPUs in total", where)
            return
        if n > global_batch:
            if nodes > 1:
                self._exclude(f"more GPUs than sequences in the global batch ({global_batch})", where)
            return
        setups = objectives_for(req, gpu, n)  # SFT/DPO: one; GRPO: each generation setup (advisor/planner/objectives.py)
        if not setups:
            self._exclude(f"--vllm server: {req.objective.vllm_server_gpus} GPU(s) serve vLLM, so the instance "
                          "needs more to train as well", where, (gpu_model, per_node))
        limit = usable_limit(gpu, req.headroom)
        family = self.engine.spec.family
        for objective, n_train in setups:
            pins = req.pins if objective.is_sft else {**req.pins, "objective": objective}
            cap = min(MAX_MICRO_BATCH, max(1, global_batch // n_train))
            stacks = stacks_for(gpu, n_train, methods, family, pins)
            if not stacks:
                self._exclude(no_stack_reason(gpu, n_train, family, req.pins), where, (gpu_model, per_node))
            refused = refusal_reason(self.engine.memory(stacks[0], self._one)) if stacks and \
                objective.vllm != "none" else None  # vLLM would not start: the same for every stack here
            if refused:
                self._exclude(refused, where, (gpu_model, per_node))
                continue
            for stack in stacks:
                yield Config(gpu=gpu, per_node=per_node, nodes=nodes, stack=stack, limit=limit,
                             fabric_gbps=fabric if nodes > 1 else None), cap

    def fit(self, cfg: Config, cap: int) -> Config:
        """The predicted micro-batch; a stack whose leanest variant (checkpointing + 8-bit states)
        does not fit at micro-batch 1 is not estimated on its own. A record of an earlier plan
        (advisor/planner/fit_cache.py) answers instead where there is one."""
        record = self.store.get(cfg) if self.store else None
        if record is not None:
            self._restore(cfg, record)
            return cfg
        self.estimated += 1
        engine, seq = self.engine, self.seq_len
        lean = self._lean.get(cfg.stack.key)
        if lean is None:
            lean = self._lean[cfg.stack.key] = cfg.stack.model_copy(update=LEANEST)
        lean_one = engine.memory(lean, self._one)
        tight = False
        if lean_one.device_total > cfg.limit:
            one, mb = lean_one, 0
        else:
            padded = self.request.padded
            mb = engine.max_micro_batch(cfg.stack, seq, int(cfg.limit * (1 - TIGHT_FRACTION)), cap=cap, exact=False,
                                        padded=padded)
            tight = mb == 0
            mb = mb or engine.max_micro_batch(cfg.stack, seq, cfg.limit, cap=cap, exact=False, padded=padded)
            one = engine.memory(cfg.stack, self._one) if mb else lean_one
        cfg.fitted = Fit(max_micro_batch=mb, need1=one.device_total, peak=one.device_total,
                         cpu_ram=one.cpu_ram_bytes // cfg.nodes,  # offloaded shards are spread over the nodes
                         breakdown=one.breakdown, verified=mb == 0, tight=tight,
                         checkpoint_bytes=engine.checkpoint_bytes(cfg.stack) if mb > 0 else 0,
                         peak_phase=one.peak_phase)
        if mb > 0:
            self.time(cfg)
        if self.store:
            self.store.put(cfg, fit_cache.Record.of(cfg.fitted, cfg.timed))
        return cfg

    def _restore(self, cfg: Config, record: fit_cache.Record) -> None:
        """`cfg.fitted` and `cfg.timed` from a stored record: the hours computed for this request, as `time` does."""
        cfg.fitted = Fit(**record.fit_fields())
        step = record.step_numbers()
        cfg.timed = None if step is None else self._step_time(cfg, step, *record.split)

    def save(self) -> None:
        """Keep what this plan computed for the next one (fit_cache.Store.save)."""
        if self.store:
            self.store.save()

    def time(self, cfg: Config) -> None:
        """Step time at the micro-batch and accumulation that reach the global batch, and training
        hours per quantile (`StepTime`, frozen)."""
        req, n = self.request, cfg.stack.gpus
        mb, accum, global_batch = split_batch(objective_global_batch(req, n), n, cfg.fitted.max_micro_batch)
        network = req.network_gbps if req.network_gbps is not None else cfg.fabric_gbps
        t = self.engine.step(cfg.stack, _shape(mb, self.seq_len, accum, req.padded), cfg.gpu, nodes=cfg.nodes,
                             mfu=req.mfu, network_gbps=network)
        # measured run (advisor/workload/measurements.py): a matching measured.json replaces `t`, before hours
        if req.measured or req.use_stored_measurements:
            t = measurements.adjust(t, req, self.engine, cfg.stack, _shape(mb, self.seq_len, accum, req.padded), cfg.gpu,
                                    cfg.nodes, lambda s: self.engine.step(cfg.stack, s, cfg.gpu, nodes=cfg.nodes,
                                                                          mfu=req.mfu, network_gbps=network))
        cfg.timed = self._step_time(cfg, t, mb, accum, global_batch)

    def _step_time(self, cfg: Config, t: StepNumbers, mb: int, accum: int, global_batch: int) -> StepTime:
        """The engine's step turned into training hours per quantile for this request's tokens and risk."""
        req = self.request
        computed = req.train_tokens * req.padding_factor(mb)  # padded batches compute their padding too
        p50 = math.ceil(computed / t.tokens_per_step) * t.step_seconds / 3600
        calibrated = t.band_basis is not None or is_calibrated(cfg.gpu, cfg.stack)  # a measured run calibrates it
        q = RISKS[req.risk]  # one ranking quantile for every candidate (DESIGN.md "Recommendation policy")
        bands = self._bands
        hours = {"p50": p50, "p10": p50 / _factor(t, cfg, 0.9, bands), "p90": p50 / _factor(t, cfg, 0.1, bands),
                 "rank": p50 / _factor(t, cfg, 1 - q, bands) if q > 0.5 else p50}
        return StepTime(step=t, micro_batch=mb, grad_accum=accum, global_batch=global_batch, train_hours=hours,
                        rank_quantile=q, calibrated=calibrated)

    def settle(self, cfg: Config) -> bool:
        """Replace a predicted micro-batch by the exact one — outside the estimator's error band of the
        limit when any fits there, else marked tight — and the memory at the candidate's own shape;
        False when the micro-batch changed (the ranking must be redone). An earlier plan's settled record answers where
        there is one (advisor/planner/fit_cache.py)."""
        if cfg.fitted.verified:
            return True
        record = self.store.get(cfg, settled=True) if self.store else None
        if record is not None:
            same = record.max_micro_batch == cfg.fitted.max_micro_batch and record.tight == cfg.fitted.tight
            self._restore(cfg, record)
            return same
        engine, seq, req = self.engine, self.seq_len, self.request
        cap = min(MAX_MICRO_BATCH, max(1, req.sequences_per_step // cfg.stack.gpus))
        safe = engine.max_micro_batch(cfg.stack, seq, int(cfg.limit * (1 - TIGHT_FRACTION)), cap=cap, padded=req.padded)
        mb = safe or engine.max_micro_batch(cfg.stack, seq, cfg.limit, cap=cap, padded=req.padded)
        same = mb == cfg.fitted.max_micro_batch and cfg.fitted.tight == (safe == 0)
        cfg.fitted = replace(cfg.fitted, max_micro_batch=mb, verified=True, tight=safe == 0)
        if not same:
            self.time(cfg)
        est = engine.memory(cfg.stack, cfg.shape(seq, req.padded))
        cfg.fitted = replace(cfg.fitted, peak=est.device_total, breakdown=est.breakdown,
                             cpu_ram=est.cpu_ram_bytes // cfg.nodes)
        if self.store:
            self.store.put(cfg, fit_cache.Record.of(cfg.fitted, cfg.timed), settled=True)
        return same
