"""One estimation engine per model: memory, fit limits and throughput from one architecture.

`Engine(spec)` builds the module inventory once and answers, for any stack and shape:
- `memory(stack, shape)`: the per-GPU `MemoryEstimate` (advisor.estimate.memory), memoised;
- `max_micro_batch(stack, seq_len, limit)` / `max_seq_len(stack, micro_batch, limit)`: the
  largest shape under a byte limit — the one search every command uses;
- `throughput(stack, shape, gpu, nodes=...)`: the typed `Throughput` (advisor.estimate.throughput) with
  the shape's gradient accumulation and the node count, so `estimate`, `plan` and `launch` give
  the same tokens/s for the same setup.
`usable_limit(gpu, headroom)` is the one place the byte limit of a GPU is computed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from advisor.estimate.memory import check, checkpoint_bytes, estimate
from advisor.estimate.objectives import memory as objective_memory, timing as objective_timing
from advisor.estimate.phases import with_phases
from advisor.estimate.throughput import counts, step_time, throughput
from advisor.memo import Memo
from advisor.model.architecture import Architecture, build
from advisor.model.catalog import load_model
from advisor.model.release import Release, bundled
from advisor.model.spec import ModelSpec
from advisor.results import MemoryEstimate, StepNumbers, Throughput
from advisor.stacks import Shape, Stack

MemoryFn = Callable[[ModelSpec, Stack, Shape], MemoryEstimate]
MAX_SEARCH_MICRO_BATCH = 1024
# The settings that change only model states, never activations: the micro-batch slope ignores them.
_ONE_PLAIN_GPU = {"gpus": 1, "sharding": "none", "offload": "none", "optimizer": "adamw"}


def usable_limit(gpu, headroom: float) -> int:
    """Bytes a run may need on `gpu`: what torch reports as usable, less the headroom share."""
    return int(gpu.usable_bytes * (1 - headroom))


class Engine:
    """Memory, limits and throughput of one model; caches the architecture and every answer."""

    def __init__(self, spec: ModelSpec, memory_fn: MemoryFn | None = None, transformers: Release | None = None):
        self.spec = spec
        self.transformers: Release = transformers or bundled()  # the release whose loader and defaults apply
        self.arch: Architecture = build(spec)
        self._memory_fn = memory_fn  # a stand-in estimator (tests, what-if studies)
        # bounded (advisor.memo): a long-lived process asking for ever new shapes must not grow without limit
        self._memory: dict[tuple, MemoryEstimate] = Memo()
        self._checked: dict[tuple, bool] = Memo()
        self._slopes: dict[tuple, int] = Memo()
        self._twins: dict[tuple, Stack] = Memo()
        self._answers: dict[tuple, int] = Memo()
        self._checkpoints: dict[tuple, int] = Memo()  # by the stack's own key

    @classmethod
    def of(cls, model: ModelSpec | str, transformers: Release | None = None) -> Engine:
        """The engine of a model (catalog name, Hub id, path or spec) at a transformers release (default: the
        bundle's), shared between callers."""
        if isinstance(model, str):
            model = load_model(model)
        return _engine(model.model_dump_json(), transformers or bundled())

    @property
    def custom_memory(self) -> bool:
        """A stand-in memory function answers, not the estimator (advisor/planner/fit_cache.py keeps none of it)."""
        return self._memory_fn is not None

    # ---------------------------------------------------------------- memory

    def check(self, stack: Stack) -> None:
        """Refuse a stack this model cannot run (attention kernel, LoRA targets), once per stack."""
        if stack.key not in self._checked:
            check(self.arch, stack, self.transformers)
            self._checked[stack.key] = True

    def memory(self, stack: Stack, shape: Shape) -> MemoryEstimate:
        """Per-GPU memory of `stack` at `shape` (shared object: copy before changing it)."""
        return self._estimate(stack, shape.micro_batch, shape.seq_len, shape.grad_accum, shape.padded, shape)

    def _estimate(self, stack: Stack, mb: int, seq_len: int, grad_accum: int | None, padded: bool = False,
                  shape: Shape | None = None) -> MemoryEstimate:
        key = (stack.key, mb, seq_len, grad_accum, padded)
        est = self._memory.get(key)
        if est is None:
            self.check(stack)
            shape = shape or Shape(micro_batch=mb, seq_len=seq_len, grad_accum=grad_accum, padded=padded)
            if self._memory_fn is not None:
                est = self._memory_fn(self.spec, stack, shape)
            elif not stack.objective.is_sft:  # DPO / GRPO: advisor/estimate/objectives/memory.py
                est = objective_memory.estimate(self.arch, stack, shape)
            else:
                est = estimate(self.arch, stack, shape)
            if self._memory_fn is None:
                est = with_phases(self.arch, stack, est, self.transformers)
            self._memory[key] = est
        return est

    @property
    def estimates_made(self) -> int:
        """Distinct memory estimates computed so far (the planner reports it)."""
        return len(self._memory)

    def device_total(self, stack: Stack, shape: Shape) -> int:
        return self.memory(stack, shape).device_total

    def max_micro_batch(self, stack: Stack, seq_len: int, limit: int, cap: int = MAX_SEARCH_MICRO_BATCH,
                        grad_accum: int | None = None, exact: bool = True, padded: bool = False) -> int:
        """Largest micro-batch ≤ cap whose device total fits in `limit` bytes (0: not even one).

        Memory is affine in the micro-batch (activations per sequence), so two estimates give a
        guess; with `exact` the guess is then checked against the estimator and corrected by
        bisection, so the answer is the estimator's own. `exact=False` returns the guess (the
        planner ranks thousands of configs on guesses and checks what it shows).
        """
        def total(mb: int) -> int:
            return self._estimate(stack, mb, seq_len, grad_accum, padded).device_total

        one = total(1)
        if one > limit:
            return 0
        if cap <= 1:
            return 1
        slope = max(self.micro_batch_slope(stack, seq_len, grad_accum, padded), 1)
        guess = int(min(cap, max(1, 1 + (limit - one) // slope)))
        if not exact:
            return guess
        if total(guess) > limit:  # bisect down in [1, guess)
            lo, hi = 1, guess - 1
        elif guess == cap or total(guess + 1) > limit:
            return guess
        else:  # bisect up in (guess, cap]
            lo, hi = guess + 1, cap
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if total(mid) <= limit:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def micro_batch_slope(self, stack: Stack, seq_len: int, grad_accum: int | None = None, padded: bool = False) -> int:
        """Bytes one more sequence per micro-batch adds. It depends only on what sets the
        activations (not on sharding, optimizer or GPU count), so it is measured once per kind."""
        key = (stack.key, seq_len, grad_accum, padded)
        slope = self._slopes.get(key)
        if slope is None:
            twin = self._twins.get(stack.key)
            if twin is None:
                twin = self._twins[stack.key] = stack.model_copy(update=_ONE_PLAIN_GPU)
            one = self._estimate(twin, 1, seq_len, grad_accum, padded).device_total
            slope = self._slopes[key] = self._estimate(twin, 2, seq_len, grad_accum, padded).device_total - one
        return slope

    def max_seq_len(self, stack: Stack, micro_batch: int, limit: int, cap: int | None = None) -> int:
        """Longest sequence ≤ cap (default: the model's max_position_embeddings) that fits (0: none)."""
        cap = cap or max(self.spec.max_position_embeddings, 1)

        def fits(s: int) -> bool:
            return self.device_total(stack, Shape(micro_batch=micro_batch, seq_len=s)) <= limit

        if not fits(1):
            return 0
        lo, hi = 1, cap
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid - 1
        return lo

    # ---------------------------------------------------------------- time

    def checkpoint_bytes(self, stack: Stack) -> int:
        """Bytes one resumable training checkpoint holds (advisor.estimate.memory.checkpoint_bytes)."""
        found = self._checkpoints.get(stack.key)
        if found is None:
            fields = dict(stack.__dict__, gpus=1, offload="none")  # what a checkpoint holds does not depend on them
            key = ("checkpoint", *fields.values())
            if key not in self._answers:
                self._answers[key] = checkpoint_bytes(self.arch, stack)
            found = self._checkpoints[stack.key] = self._answers[key]
        return found

    def counts(self, stack: Stack):
        """Parameter counts the FLOPs and traffic terms need (advisor.estimate.throughput.Counts)."""
        return counts(self.arch, stack)

    def step(self, stack: Stack, shape: Shape, gpu, *, nodes: int = 1, mfu: float | None = None,
             network_gbps: float | None = None) -> StepNumbers:
        """The time model's numbers for one step (seconds by component, tokens_per_sec, mfu, and the
        held-out band tokens_per_sec_low / tokens_per_sec_high with the calibration rows behind it,
        interval_rows): the frozen record `throughput` reports from, without building the typed result
        (the planner times thousands). `gpu` is a pricing.gpus.GPU. DPO / GRPO: advisor/estimate/objectives/timing.py."""
        if not stack.objective.is_sft:
            return objective_timing.step(self.arch, stack, shape, gpu, nodes=nodes, mfu=mfu, network_gbps=network_gbps)
        return step_time(self.counts(stack), stack, shape, gpu, grad_accum=shape.grad_accum or 1, nodes=nodes,
                         gpus_per_node=max(1, stack.gpus // nodes), mfu=mfu, network_gbps=network_gbps)

    def throughput(self, stack: Stack, shape: Shape, gpu, *, nodes: int = 1, mfu: float | None = None,
                   network_gbps: float | None = None) -> Throughput:
        """Tokens per second over all `stack.gpus` GPUs, at the shape's gradient accumulation, with its
        held-out band (advisor.estimate.throughput.band)."""
        if not stack.objective.is_sft:
            return objective_timing.throughput(self.arch, stack, shape, gpu, nodes=nodes, mfu=mfu,
                                               network_gbps=network_gbps)
        return throughput(self.counts(stack), stack, shape, gpu, nodes=nodes, mfu=mfu, network_gbps=network_gbps)


@lru_cache(maxsize=16)
def _engine(spec_json: str, transformers: Release) -> Engine:
    return Engine(ModelSpec.model_validate_json(spec_json), transformers=transformers)
