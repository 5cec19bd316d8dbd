"""The allocation sequence of training steps, built from the estimator's own terms, and the two
reserved figures its replay through the caching-allocator model (advisor.estimate.allocator) gives.

A recorded CPU step (benchmarks/alloc_trace.py, torch.profiler profile_memory=True) shows the order
the Hugging Face stack allocates and frees in: model states at load, per decoder layer the tensors
autograd saves, the loss path at the end of forward; backward walks the layers in reverse, freeing
each layer's saved tensors while its input-gradient workspace (and, with checkpointing, the
recomputed layer) lives and its weight gradients appear; AdamW creates its states at the first
step(); Trainer's zero_grad(set_to_none=True) frees the gradients before the next forward (without
accumulation). The sequence here follows that order with each block sized by the estimate at that
step's shape (`advisor.estimate.activations` terms divided over the layers), so a real 8B model needs no run.

Lengths: a batch of a variable-length dataset is padded to its longest row (transformers
DataCollatorWithPadding; TRL's default collator), truncated at --seq-len. Steps draw `micro_batch`
rows from the distribution with a fixed seed (deterministic), as the Trainer's RandomSampler does.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

from advisor.errors import BadInput
from advisor.estimate import phases
from advisor.estimate.activations import lora_target_names
from advisor.estimate.allocator import Event, needed_capacity, replay
from advisor.results import Component, Reserved
from advisor.stacks import Shape
from advisor.text import plain
from advisor.units import MiB
from pricing import files
from pricing.errors import PriceInputError

MAX_LENGTHS_FILE = 16 * MiB  # a histogram is small: refuse to read a huge file
STEPS = 16  # training steps replayed: enough for the long batches of a spread to meet cached short ones
SEED = 0
# A mean/std/max distribution is taken as log-normal with that mean and std (token counts of chat
# and news corpora are right-skewed: shared/calibration and `gpu-advisor tokens` histograms), cut at max.


class LengthSpec(BaseModel):
    """Row lengths in tokens: a log-normal mean/std cut at max, or a histogram of (low, high, rows) bins."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mean: float | None = None
    std: float | None = None
    max: int | None = None
    histogram: tuple[tuple[int, int, int], ...] = ()

    def describe(self) -> str:
        if self.histogram:
            return f"histogram of {sum(r for _, _, r in self.histogram):,} rows in {len(self.histogram)} bins"
        return f"log-normal mean {self.mean:g}, std {self.std:g}, max {self.max}"

    def step_lengths(self, micro_batch: int, seq_len: int, steps: int = STEPS) -> tuple[int, ...]:
        """The padded length of each replayed step: the longest of `micro_batch` drawn rows, cut at seq_len."""
        import numpy as np

        rng = np.random.default_rng(SEED)
        n = steps * micro_batch
        if self.histogram:
            lows, highs, rows = (np.array(c, dtype=float) for c in zip(*self.histogram))
            pick = rng.choice(len(rows), size=n, p=rows / rows.sum())
            rows_len = lows[pick] + rng.random(n) * (highs[pick] - lows[pick])
        else:
            sigma2 = math.log(1 + (self.std / self.mean) ** 2)
            rows_len = np.minimum(rng.lognormal(math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2), n), self.max)
        rows_len = np.clip(np.ceil(rows_len), 1, seq_len).reshape(steps, micro_batch)
        drawn = [int(x) for x in rows_len.max(axis=1)]
        # A run of thousands of steps meets its longest batch, after caching the blocks of shorter ones:
        # the last replayed step is the longest row the distribution allows, cut at seq_len.
        return tuple(drawn[:-1]) + (self.longest(seq_len),)

    def longest(self, seq_len: int) -> int:
        top = max(hi for _, hi, rows in self.histogram if rows) if self.histogram else self.max
        return int(min(top, seq_len))


def parse_lengths(text: str) -> LengthSpec:
    """--lengths: "MEAN,STD,MAX" in tokens, or a JSON file holding a "histogram" of [low, high, rows]
    (what `gpu-advisor tokens --format json` writes)."""
    parts = text.split(",")
    shown = repr(text if len(text) <= 60 else text[:57] + "...")
    path = Path(text)
    try:
        named = os.path.lexists(path)  # anything at that path is the file meant, a FIFO or /dev/zero included
    except (OSError, ValueError):
        named = False
    if len(parts) == 3 and not named:
        return _distribution(parts, shown)
    if not named:
        raise BadInput(f"--lengths: {shown} is neither MEAN,STD,MAX (e.g. 600,300,4096) nor an existing JSON file.")
    return _histogram_file(path, text, shown)


def _distribution(parts: list[str], shown: str) -> LengthSpec:
    """MEAN,STD,MAX: a log-normal distribution cut at MAX."""
    try:
        mean, std, top = float(parts[0]), float(parts[1]), int(parts[2])
    except ValueError:
        raise BadInput(f"--lengths: {shown} is neither MEAN,STD,MAX (e.g. 600,300,4096) nor a JSON file.") from None
    if not (0 < mean <= top and 0 <= std < 1e9 and math.isfinite(mean)):
        raise BadInput("--lengths: MEAN,STD,MAX needs 0 < MEAN <= MAX and STD >= 0.")
    return LengthSpec(mean=mean, std=std, max=top)


def _histogram_file(path: Path, text: str, shown: str) -> LengthSpec:
    """A JSON file with a "histogram" of [low, high, rows] bins (at most 4 levels down)."""
    what = f"--lengths {plain(text)}"
    try:  # a regular file only, its size checked before reading, its nesting before parsing (pricing.files)
        data = files.load_json(files.read_regular_file(path, MAX_LENGTHS_FILE, what), what,
                               max_bytes=MAX_LENGTHS_FILE)
    except PriceInputError as exc:
        raise BadInput(str(exc) + ".") from None
    hist = _find_histogram(data)
    try:
        bins = tuple((int(lo), int(hi), int(rows)) for lo, hi, rows in hist)
    except (TypeError, ValueError):
        bins = ()
    if not bins or any(lo < 0 or hi < lo or rows < 0 for lo, hi, rows in bins) or not sum(r for *_, r in bins):
        raise BadInput(f"--lengths: {shown} has no histogram of [low, high, rows] bins with rows.")
    return LengthSpec(histogram=bins)


def _find_histogram(data, depth: int = 0):
    if isinstance(data, dict) and depth < 4:
        if isinstance(data.get("histogram"), list):
            return data["histogram"]
        for v in data.values():
            found = _find_histogram(v, depth + 1)
            if found is not None:
                return found
    return None


Estimator = Callable[[int], object]  # padded length -> MemoryEstimate at that step's shape


def reserved_figures(est_at: Estimator, base, layers: int, lengths: LengthSpec | None, expandable: bool,
                     chunks: tuple[int, int] = (7, 7), card_bytes: int | None = None) -> Reserved:
    """The replayed figures for `base` (the estimate at --seq-len). The replayed sequence's own
    allocated peak at fixed shapes is pinned to the estimator's peak_allocated (one offset), so the
    figures differ from it only by what the allocator adds. With `card_bytes` (what the card checked leaves
    PyTorch's segments) `shows` is what that card shows: the replay on a device of that size, where the
    allocator frees its cached blocks and retries before it fails (c10/cuda/CUDACachingAllocator.cpp
    malloc: release_cached_blocks, alloc_block(isRetry=true)), so never more than the card has."""
    shape = base.shape
    free_grads = shape.grad_accum == 1
    fixed = (shape.seq_len,) * STEPS
    steps = lengths.step_lengths(shape.micro_batch, shape.seq_len) if lengths else fixed
    f_needed, _, f_alloc, _ = _replayed(_sizes(est_at, fixed), layers, free_grads, expandable, chunks)
    sizes = _sizes(est_at, steps)
    needed, shows, _, retries = _replayed(sizes, layers, free_grads, expandable, chunks)
    offset = base.peak_allocated - f_alloc
    shown = max(base.peak_allocated, shows + offset)
    if card_bytes is not None and shown > card_bytes:
        shown = min(card_bytes, max(base.peak_allocated, _shown_on(sizes, layers, free_grads, expandable, chunks,
                                                                   card_bytes - offset) + offset))
    return Reserved(lengths=lengths.describe() if lengths else "fixed", expandable_segments=expandable, steps=STEPS,
                    needed=max(base.peak_allocated, needed + offset), shows=shown,
                    fixed_shape_needed=max(base.peak_allocated, f_needed + offset), alloc_retries_at_needed=retries,
                    card_bytes=card_bytes)


@lru_cache(maxsize=64)
def _shown_on(step_sizes, layers: int, free_grads: bool, expandable: bool, chunks: tuple[int, int],
              capacity: int) -> int:
    """max_memory_reserved of the replay on a device of `capacity` bytes (the card is full when it fails)."""
    r = replay(step_events(step_sizes, layers, free_grads, *chunks), capacity, expandable)
    return capacity if r.oom else r.peak_reserved


def _sizes(est_at: Estimator, steps: tuple[int, ...]) -> tuple[tuple[tuple[str, int], ...], ...]:
    """Each step's components (name, bytes), from the estimate at that step's padded length."""
    cache: dict[int, tuple[tuple[str, int], ...]] = {}
    for s in steps:
        if s not in cache:
            cache[s] = tuple((k, c.bytes) for k, c in est_at(s).components.items())
    return tuple(cache[s] for s in steps)


@lru_cache(maxsize=64)
def _replayed(step_sizes, layers: int, free_grads: bool, expandable: bool,
              chunks: tuple[int, int] = (7, 7)) -> tuple[int, int, int, int]:
    """(needed capacity, shown reserved, allocated peak, retries at the needed capacity) of the replay."""
    events = step_events(step_sizes, layers, free_grads, *chunks)
    needed, shows = needed_capacity(events, expandable)
    return needed, shows.peak_reserved, shows.peak_allocated, replay(events, needed, expandable).num_alloc_retries


ONCE = ("overhead.ddp_buckets", "overhead.nccl_buffers", "overhead.zero3_reduce_bucket")
PER_LAYER_BACKWARD = ("overhead.backward_workspace", "activations.recompute_layer", "overhead.dora_weight_norm",
                      "overhead.dequantised_weight")


def step_events(step_sizes, layers: int, free_grads: bool = False, weight_chunks: int = 7,
                train_chunks: int = 7) -> list[Event]:
    """The allocation/free sequence of len(step_sizes) training steps (see the module docstring). Model
    states are `weight_chunks` tensors per layer (its linear weights) and gradients and optimizer
    states `train_chunks` per layer (one per trainable tensor: the weights, or LoRA's A and B): the
    tensor sizes decide the pool and segment they land in."""
    ids = itertools.count(1)
    first = dict(step_sizes[0])
    events = _load_events(ids, first, layers, weight_chunks)
    grads: list[int] = []
    for step, sizes in enumerate(step_sizes):
        terms = _StepTerms.of(dict(sizes), layers, train_chunks)
        saved = _forward(ids, events, terms.layer, layers)
        _head_and_loss(ids, events, terms.head, terms.loss)
        _backward(ids, events, saved, terms, grads, layers * train_chunks, train_chunks)
        if step == 0:  # AdamW's states come at the first step()
            events += _optimizer_states(ids, first, layers * train_chunks)
        if free_grads:  # Trainer's zero_grad(set_to_none=True) before the next forward
            events += [(g, 0) for g in grads]
            grads = []
    return events


def _is_layer_activation(key: str) -> bool:
    """A tensor every decoder layer saves for backward (or, checkpointed, the layer's input)."""
    return key.startswith("activations.layers.") or key == "activations.checkpoint.layer_inputs"


class _StepTerms(NamedTuple):
    """One step's components sorted by when they live: per layer in forward, once at the head, per layer in
    backward, the loss's backward buffers; and the gradient bytes of one trainable tensor."""

    layer: list[int]
    head: list[int]
    backward: list[int]
    loss: list[int]
    grad_per_tensor: int

    @classmethod
    def of(cls, comp: dict[str, int], layers: int, train_chunks: int) -> _StepTerms:
        by_phase: dict[str, list[int]] = {"layer": [], "head": [], "backward": [], "loss": []}
        for k, n in comp.items():
            phase = _phase(k) if n else None
            if phase is not None:
                by_phase[phase].append(n // layers if phase == "layer" else n)
        grads = sum(n for k, n in comp.items() if k.startswith("gradients.")) // (layers * train_chunks)
        return cls(**by_phase, grad_per_tensor=grads)


def _phase(key: str) -> str | None:
    """When a component's tensors live in the replayed step: 'layer' (saved per layer in forward), 'backward'
    (per layer while it runs backward), 'head' (saved once, after the layers), 'loss' (the loss's backward
    buffers), or None (not replayed per step)."""
    if _is_layer_activation(key):
        return "layer"
    if key in PER_LAYER_BACKWARD:
        return "backward"
    if key.startswith("activations."):
        return "head"
    if key.startswith("overhead.loss"):
        return "loss"
    return None


def _load_events(ids, first: dict[str, int], layers: int, weight_chunks: int) -> list[Event]:
    """Model states at load: each weight term in `weight_chunks` tensors per layer, the once-only buffers whole."""
    events: list[Event] = []
    for key, n in first.items():
        if n and key.startswith("weights."):
            events += _chunks(ids, n, layers * weight_chunks)
        elif n and key in ONCE:
            events.append((next(ids), n))
    return events


def _forward(ids, events: list[Event], layer_terms: list[int], layers: int) -> list[list[Event]]:
    """Each layer's saved tensors, allocated layer by layer; returned per layer for the backward to free."""
    saved = []
    for _ in range(layers):
        mine = [(next(ids), n) for n in layer_terms]
        events += mine
        saved.append(mine)
    return saved


def _head_and_loss(ids, events: list[Event], head_terms: list[int], loss: list[int]) -> None:
    """The head's saved tensors, then the loss's backward buffers (fp32 logits gradients), both freed before the
    layers run backward."""
    head = [(next(ids), n) for n in head_terms]
    events += head
    lossbuf = [(next(ids), n) for n in loss]
    events += lossbuf
    events += [(i, 0) for i, _ in head] + [(i, 0) for i, _ in lossbuf]


def _backward(ids, events: list[Event], saved: list[list[Event]], terms: _StepTerms, grads: list[int],
              grad_tensors: int, train_chunks: int) -> None:
    """Last layer first: its backward workspace, its gradients (until all `grad_tensors` exist; they stay), then
    the workspace and the layer's saved tensors freed. Appends the new gradients' ids to `grads`."""
    for mine in reversed(saved):
        work = [(next(ids), n) for n in terms.backward]
        events += work
        if terms.grad_per_tensor and len(grads) < grad_tensors:
            new = [(next(ids), terms.grad_per_tensor) for _ in range(train_chunks)]
            grads += [g for g, _ in new]
            events += new
        events += [(i, 0) for i, _ in reversed(work)] + [(i, 0) for i, _ in reversed(mine)]


def _optimizer_states(ids, first: dict[str, int], tensors: int) -> list[Event]:
    """The optimizer's states, in `tensors` tensors per term."""
    events: list[Event] = []
    for k, n in first.items():
        if n and k.startswith("optimizer."):
            events += _chunks(ids, n, tensors)
    return events


def apply_reserved(engine, stack, est, lengths: LengthSpec | None, expandable: bool, context_bytes: int,
                   card_bytes: int | None = None):
    """`est` (a fresh copy) with its reserved figure, allocator slack and device total from the replay
    under `lengths`; the fit check then uses the needed figure. Without lengths the estimate keeps
    its fixed-shape figure and says so. `card_bytes`: the card checked (its usable bytes), whose
    reserved figure never shows more than the card leaves PyTorch after the CUDA context."""
    if lengths is None:
        est.assumptions["lengths"] = "fixed shapes (every step at --seq-len)"
        return est
    est = phases.at_step(est)  # the replay pins the step's allocated peak
    shape = est.shape
    layers = engine.spec.num_hidden_layers
    at = lambda s: engine.memory(stack, Shape(micro_batch=shape.micro_batch, seq_len=s,  # noqa: E731
                                              grad_accum=shape.grad_accum, padded=shape.padded))
    segments = None if card_bytes is None else card_bytes - context_bytes
    r = reserved_figures(at, est, layers, lengths, expandable, tensor_counts(engine.arch, stack), segments)
    slack = r.needed - est.peak_allocated
    old = est.components["overhead.allocator"].bytes
    est.components["overhead.allocator"] = Component(
        bytes=slack,
        formula=f"caching-allocator replay of {r.steps} steps ({r.lengths}; expandable_segments "
                f"{'on' if expandable else 'off'}): smallest device that does not fail, minus peak allocated",
        source="advisor.allocator (c10/cuda/CUDACachingAllocator.cpp @001074d2)")
    est.reserved = r
    est.peak_reserved = r.needed
    est.device_total = r.needed + context_bytes
    b = est.breakdown
    est.breakdown = b.model_copy(update={"overhead": b.overhead - old + slack, "total": est.device_total})
    est.assumptions["lengths"] = f"{r.lengths}, padded per batch, cut at --seq-len"
    est.assumptions["allocator_fragmentation"] = (
        f"caching-allocator replay: needs {r.needed - est.peak_allocated:,} B above peak allocated, shows "
        f"{r.shows - est.peak_allocated:,} B " + ("on the card checked (the allocator frees its cache and retries "
                                                   "before it fails)" if card_bytes is not None else "on a larger card"))
    est.assumptions["allocator"] = "expandable_segments:True" if expandable else "default (no expandable segments)"
    if est.phases:
        est.phases = {**est.phases, phases.STEP: est.breakdown}
    return phases.peak_of(est)


def _chunks(ids, total: int, count: int) -> list[Event]:
    return [(next(ids), max(1, total // count)) for _ in range(count)]


def tensor_counts(arch, stack) -> tuple[int, int]:
    """(weight tensors, trainable tensors) per decoder layer: its linear weights; LoRA's A and B per
    targeted linear (peft lora.Linear), or every weight for full fine-tuning."""
    weights = max(1, len(arch.linear_names()))
    if stack.is_full:
        return weights, weights
    return weights, max(2, 2 * len(lora_target_names(arch, stack)))
