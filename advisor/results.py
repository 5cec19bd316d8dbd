"""Typed results: the single source that CLI tables, JSON, reports and launch files read.

Bytes are integers (per GPU unless the name says otherwise); GB = 1e9, GiB = 2**30.
A plan `Candidate` carries the full `Stack` and `Shape` it was estimated with, the `Offer` it
runs on and its memory, timing and cost as sub-models; `Candidate.flat()` is the one flat view
(CSV, tables). JSON carries each number once (schema 4: nested only, each candidate stored once, the
views name it by reference, advisor/plan_refs.py); plans saved as schema 1 (flat candidates), 2 (nested
plus flat copies) and 3 (views as whole candidates) still load.
"""

from __future__ import annotations

from typing import Any, Callable

import math

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from advisor.stacks import Shape, Stack
from pricing.managed import ManagedAlternative

# 1: flat candidates; 2: nested offer/stack/shape/fit/timing/cost (+ flat copies); 3: nested only, each
# number once, with timing.setup_hours, risk_quantile, calibrated, offer.also_named and plan.remedy; 4: each
# candidate stored once (`candidates` + `others`), pareto/baseline/best_per_gpu/best_per_provider/
# spot_alternative written as references into them (pareto_refs, baseline_ref, ...; advisor/plan_refs.py)
PLAN_SCHEMA_VERSION = 4

# ----------------------------------------------------------------------------- validation
# A plan is shared (a colleague's file, a ticket attachment) and its text reaches launch scripts,
# YAML, Markdown and terminals, so every text field is checked when a plan is built or loaded:
# no control characters, line breaks or bidirectional overrides (advisor.text.refused_char), and
# a length limit; numbers must be finite and not negative; GPUs must be in the GPU table
# (pricing.gpus); the model a Hugging Face id, a catalog name or a path.
NAME_CHARS = 512  # names: provider, region, instance, GPU, family, label, dict keys
TEXT_CHARS = 20_000  # sentences: sources, notes, warnings, reasons, the command line
# How the note of a candidate promoted by the near-tie rule starts (advisor/planner/ranking.py writes it; the
# report's decision card and the plan table's "Why #1" line read it)
NEAR_TIE_NOTE = "preferred in a near-tie"


def check_text(value: str, field: str, limit: int = NAME_CHARS) -> str:
    """`value` unchanged when it is printable text of at most `limit` characters; else ValueError
    naming `field`, the problem and what is accepted."""
    from advisor.text import refused_char

    bad = refused_char(value)
    if bad:
        raise ValueError(f"control character {bad} refused in {field} (a plan holds printable text only: no "
                         "line breaks, escape sequences or bidirectional overrides)")
    if len(value) > limit:
        raise ValueError(f"{field} is longer than {limit:,} characters")
    return value


def check_number(value: float | None, field: str) -> float | None:
    if value is not None and (not math.isfinite(value) or value < 0):
        raise ValueError(f"{field}: must be a finite number >= 0 (got {value})")
    return value


def _check_tree(value: Any, field: str, depth: int = 0) -> None:
    """Every string (keys too) and float inside a dict/list from a plan file."""
    if isinstance(value, str):
        check_text(value, field, TEXT_CHARS)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{field}: must be a finite number (got {value})")
    elif isinstance(value, dict):
        for k, v in value.items():
            check_text(str(k), f"{field} key", NAME_CHARS)
            _check_tree(v, f"{field}.{k}", depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_tree(v, f"{field}[{i}]", depth + 1)


# Plan files gpu-advisor reads: 1 (flat candidates), 2 (nested + flat copies), 3 (nested only), 4 (each
# candidate once, views by reference). An unknown version (a future tool's file, 0, -1, "2", true) is refused
# rather than guessed at.
KNOWN_SCHEMA_VERSIONS = (1, 2, 3, PLAN_SCHEMA_VERSION)


def check_count(value: Any, field: str, low: int, high: int) -> None:
    """An integer (not a bool) within [low, high]; else ValueError naming `field` and the bounds."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field}: expected a whole number (got {type(value).__name__} {str(value)[:40]!r})")
    if not low <= value <= high:
        raise ValueError(f"{field}: must be between {low:,} and {high:,} (got {value:,})")


def _workload_bounds() -> dict[str, tuple[type, float, float]]:
    """workload key -> (type, low, high): the bounds PlanRequest puts on the same options (advisor.model.spec
    MAX_*), so a hand-edited plan cannot carry what `plan` itself refuses into `launch` (num_train_epochs).
    A low of 0.0 for a float means "more than 0" (epochs), as for --epochs."""
    from advisor.model.spec import (MAX_BATCH, MAX_EPOCHS, MAX_GPUS, MAX_HOURS, MAX_NODES, MAX_SEQ_LEN, MAX_TOKENS,
                                    MAX_USD)

    return {"tokens": (float, 0.0, MAX_TOKENS), "epochs": (float, 0.0, MAX_EPOCHS),
            "train_tokens": (float, 0.0, MAX_TOKENS * MAX_EPOCHS), "seq_len": (int, 1, MAX_SEQ_LEN),
            "global_batch": (int, 1, MAX_BATCH), "global_batch_tokens": (int, 1, MAX_BATCH * MAX_SEQ_LEN),
            "budget_usd": (float, 0.0, MAX_USD), "deadline_hours": (float, 0.0, MAX_HOURS),
            "max_nodes": (int, 1, MAX_NODES), "max_gpus": (int, 1, MAX_GPUS), "spot": (bool, 0, 1),
            "padded": (bool, 0, 1)}


def check_workload(workload: dict) -> None:
    """The workload keys `plan` writes (and `launch` reads) typed and within the flags' bounds; None: unset."""
    for key, (kind, low, high) in _workload_bounds().items():
        value = workload.get(key)
        if value is None:
            continue
        if kind is bool:
            if not isinstance(value, bool):
                raise ValueError(f"workload.{key}: expected true or false (got {str(value)[:40]!r})")
        elif kind is int:
            check_count(value, f"workload.{key}", int(low), int(high))
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value <= high:
            raise ValueError(f"workload.{key}: must be a number more than {low:g} and at most {high:,g} (got "
                             f"{str(value)[:40]!r})")


def check_gpu(name: str) -> str:
    """The canonical GPU name; ValueError when it is not in the GPU table (pricing/data/gpus.csv)."""
    from pricing.gpus import all_gpus, canonical_name

    check_text(name, "gpu_model")
    canonical = canonical_name(name)
    if canonical is None:
        raise ValueError(f"gpu_model: {name[:60]!r} is not in the GPU table; known: "
                         f"{', '.join(g.name for g in all_gpus())}")
    return canonical


class Component(BaseModel):
    """One named memory term, with how it was computed and where the formula comes from."""

    bytes: int
    formula: str = ""
    source: str = ""


class ModelInfo(BaseModel):
    name: str
    family: str
    source: str
    params_total: int = Field(ge=0)
    params_trainable: int = Field(ge=0)
    params_active: int = Field(ge=0, description="parameters used per token (MoE: routed experts only)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        """A Hugging Face id, a catalog name or a path: printable, at most 512 characters, no leading '-'."""
        from advisor.model.catalog import check_model_name

        return check_model_name(v, "")

    @field_validator("family")
    @classmethod
    def _family(cls, v: str) -> str:
        import re

        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", v):
            raise ValueError(f"model.family: expected a config.json model_type such as llama or qwen2 (letters, "
                             f"digits, '_', '.', '-'; got {v[:60]!r})")
        return v

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        return check_text(v, "model.source", TEXT_CHARS)


class Breakdown(BaseModel):
    """Peak per-GPU memory by component, bytes. `total` is what the device must hold."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    overhead: int
    total: int


class Reserved(BaseModel):
    """What the caching allocator makes of the run's allocations."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lengths: str = Field(description="'fixed' (every step at --seq-len) or the length distribution replayed")
    expandable_segments: bool
    steps: int
    needed: int = Field(description="reserved bytes the run needs on the card checked: the smallest device the "
                                    "replayed allocator does not fail on (fit check)")
    shows: int = Field(description="what torch.cuda.max_memory_reserved shows on a larger card")
    fixed_shape_needed: int = Field(description="needed with every step at --seq-len (same replay)")
    alloc_retries_at_needed: int = Field(description="times the allocator released its cache and retried")


class MemoryEstimate(BaseModel):
    """Everything `estimate` says about one model × stack × shape."""

    model_config = ConfigDict(protected_namespaces=())

    model: ModelInfo
    stack: Stack
    shape: Shape
    breakdown: Breakdown
    components: dict[str, Component] = Field(
        description="every term behind the breakdown (weights.nf4, activations.logits, overhead.cuda_context, ...)"
    )
    peak_allocated: int = Field(description="torch.cuda.max_memory_allocated at peak")
    peak_reserved: int = Field(description="torch.cuda.max_memory_reserved at peak (allocator rounding/fragmentation)")
    device_total: int = Field(description="as nvidia-smi shows it: reserved + CUDA context")
    static_bytes: int = Field(description="weights + gradients + optimizer (the 'simple' number)")
    cpu_ram_bytes: int = Field(0, description="host RAM the offloaded states need, over all GPUs (each node holds "
                                              "its ranks' share: divide by the node count)")
    assumptions: dict[str, str | int | float | bool] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    fit: "FitCheck | None" = None
    throughput: "Throughput | None" = None
    reserved: "Reserved | None" = Field(None, description="caching-allocator replay under --lengths "
                                                         "(advisor.alloc_trace); None: fixed shapes")


class FitCheck(BaseModel):
    gpu: str
    usable_bytes: int
    headroom_fraction: float
    fits: bool
    free_bytes: int
    max_micro_batch: int = Field(description="largest micro-batch that fits at this seq_len (0: none)")
    max_seq_len: int = Field(description="longest sequence that fits at this micro-batch (0: none)")
    suggestions: list[str] = Field(default_factory=list,
                                   description="when it does not fit: single changes that make it fit, cheapest first")


class Throughput(BaseModel):
    """Time model output for one setup (totals over all GPUs)."""

    tokens_per_sec: float
    mfu: float
    step_seconds: float = Field(description="one optimizer step of micro_batch × seq_len × gpus × grad_accum tokens")
    flops_per_token: float
    grad_accum: int = 1
    nodes: int = 1
    compute_seconds_per_step: float = 0.0
    comm_seconds_per_step: float = 0.0
    tokens_per_sec_low: float = Field(0.0, description="p10 of held-out calibration error for this GPU class × "
                                                        "method (the pessimistic end; ≤ tokens_per_sec)")
    tokens_per_sec_high: float = Field(0.0, description="p90 of held-out calibration error (≥ tokens_per_sec)")
    interval_basis: dict[str, str | int | float] = Field(
        default_factory=dict, description="segment (GPU class/method), calibration rows behind the band, "
                                          "low/high factors and a sentence saying where they come from")
    components: dict[str, float] = Field(default_factory=dict)
    assumptions: dict[str, str | int | float | bool] = Field(default_factory=dict)


# ----------------------------------------------------------------------------- plan candidates


class Offer(BaseModel):
    """The instance a candidate runs on, with where its price comes from and when it was seen."""

    provider: str
    region: str
    instance_type: str
    gpu_model: str
    gpu_count: int = Field(description="GPUs per node (instance)")
    price_hour: float = Field(0.0, description="on-demand USD per instance-hour (0: no on-demand price)")
    spot_price_hour: float | None = None
    source: str = ""
    price_date: str = Field("", description="date the source observed the price (YYYY-MM-DD)")
    stale: bool = False
    interconnect: str = ""
    notes: str = ""
    also_in: list[str] = Field(default_factory=list, description="other regions with this identical offer")
    also_named: list[str] = Field(default_factory=list, description="the same offer (provider, GPU, count, price, "
                                                                    "network) under other instance names")

    @field_validator("provider", "region", "instance_type", "price_date", "interconnect")
    @classmethod
    def _name(cls, v: str, info) -> str:
        return check_text(v, info.field_name)

    @field_validator("source", "notes")
    @classmethod
    def _text(cls, v: str, info) -> str:
        return check_text(v, info.field_name, TEXT_CHARS)

    @field_validator("also_in", "also_named")
    @classmethod
    def _regions(cls, v: list[str]) -> list[str]:
        for region in v:
            check_text(region, "also_in")
        return v

    @field_validator("gpu_model")
    @classmethod
    def _gpu(cls, v: str) -> str:
        return check_gpu(v)

    @model_validator(mode="after")
    def _numbers(self) -> "Offer":
        from advisor.model.spec import MAX_GPUS

        if not 1 <= self.gpu_count <= MAX_GPUS:
            raise ValueError(f"gpu_count: must be between 1 and {MAX_GPUS:,} (got {self.gpu_count})")
        check_number(self.price_hour, "price_hour")
        check_number(self.spot_price_hour, "spot_price_hour")
        return self


class MemoryFit(BaseModel):
    """Peak device memory per GPU against what the GPU offers."""

    peak_bytes: int = Field(description="estimated device memory per GPU (as nvidia-smi shows it)")
    usable_bytes: int = Field(description="what torch reports as the GPU's total memory")
    limit_bytes: int = Field(0, description="usable × (1 − headroom): the most a candidate may need")
    tight: bool = Field(False, description="within the estimator's measured error band of the limit")


class Timing(BaseModel):
    tokens_per_sec: float = 0.0
    mfu: float = 0.0
    step_seconds: float = 0.0
    train_hours: float = 0.0
    setup_hours: float = 0.0
    checkpoint_hours: float = Field(0.0, description="writing periodic checkpoints during training")
    checkpoint_interval_hours: float = Field(0.0, description="hours of training between checkpoints")
    interruption_hours: float = Field(0.0, description="expected work lost and restarts (hardware failures, and "
                                                       "spot reclaims on spot)")
    hours: float = Field(description="wall hours: training + setup + checkpoints + expected interruptions")
    hours_low: float | None = Field(None, description="wall hours if training runs at the p90 of the time model's "
                                                      "held-out error (faster)")
    hours_high: float | None = Field(None, description="... at its p10 (slower): the band to budget with")
    hours_at_risk: float | None = Field(None, description="wall hours at the ranking quantile (ranking key)")
    risk_quantile: float = Field(0.5, description="the quantile the ranking used: --risk, or 0.8 for an "
                                                  "uncalibrated segment at the default p50")
    calibrated: bool = Field(True, description="the time model has held-out calibration rows for this segment")
    band_basis: str = Field("", description="the calibration segment and rows behind the band")
    global_batch: int = Field(0, description="sequences per optimizer step as run (micro-batch × accumulation × GPUs)")


class Cost(BaseModel):
    spot: bool = False
    price_hour: float = Field(0.0, description="USD per hour of all nodes at the tier used for `usd`")
    usd: float
    on_demand_usd: float | None = None
    spot_usd: float | None = None
    usd_per_m_tokens: float = 0.0
    usd_low: float | None = Field(None, description="cost at hours_low (same tier and billing)")
    usd_high: float | None = Field(None, description="cost at hours_high")
    usd_at_risk: float | None = Field(None, description="cost at the ranking quantile (ranking key)")


def _lora_rank(c: "Candidate") -> int | None:
    return None if c.stack.method == "full" else c.stack.lora_rank


# flat key -> where it lives (dotted path) or how it is derived. Order is the flat view's order.
FLAT: dict[str, str | Callable[["Candidate"], Any]] = {
    "provider": "offer.provider", "region": "offer.region", "instance_type": "offer.instance_type",
    "gpu_model": "offer.gpu_model", "gpu_count": "offer.gpu_count", "nodes": "nodes", "spot": "cost.spot",
    "method": "stack.method", "precision": "stack.precision", "optimizer": "stack.optimizer",
    "grad_checkpointing": "stack.grad_checkpointing", "attention": "stack.attention",
    "sharding": "stack.sharding", "offload": "stack.offload", "lora_rank": _lora_rank,
    "micro_batch": "shape.micro_batch", "grad_accum": "shape.grad_accum", "seq_len": "shape.seq_len",
    "peak_memory_bytes": "fit.peak_bytes", "gpu_memory_bytes": "fit.usable_bytes",
    "headroom_bytes": lambda c: c.fit.usable_bytes - c.fit.peak_bytes,
    "tokens_per_sec": "timing.tokens_per_sec", "mfu": "timing.mfu", "hours": "timing.hours",
    "train_hours": "timing.train_hours", "cost_usd": "cost.usd", "cost_on_demand_usd": "cost.on_demand_usd",
    "cost_spot_usd": "cost.spot_usd", "usd_per_m_tokens": "cost.usd_per_m_tokens",
    "price_hour": "cost.price_hour", "price_source": "offer.source", "price_date": "offer.price_date",
    "price_stale": "offer.stale", "stack_label": "label",
}
_SUB_MODELS = ("offer", "stack", "shape", "fit", "timing", "cost")


class Candidate(BaseModel):
    """One priced way to run the job: an offer × node count × stack × shape, with its numbers."""

    rank: int = 0
    offer: Offer
    nodes: int = 1
    network_gbps: float | None = Field(None, description="inter-node fabric per node (Gb/s) the time model used")
    stack: Stack
    shape: Shape
    fit: MemoryFit
    memory: Breakdown | None = None
    timing: Timing
    cost: Cost
    label: str = Field("", description="stack label as tables show it (with the node count)")
    notes: list[str] = Field(default_factory=list, description="what this candidate trades away, in words")

    @field_validator("label")
    @classmethod
    def _label(cls, v: str) -> str:
        return check_text(v, "stack_label")

    @field_validator("notes")
    @classmethod
    def _notes(cls, v: list[str]) -> list[str]:
        for note in v:
            check_text(note, "notes", TEXT_CHARS)
        return v

    @model_validator(mode="after")
    def _numbers(self) -> "Candidate":
        """Counts within the physical bounds; every time, cost, price and memory finite and >= 0."""
        from advisor.model.spec import MAX_BATCH, MAX_GPUS, MAX_NODES, MAX_SEQ_LEN

        if not 1 <= self.nodes <= MAX_NODES:
            raise ValueError(f"nodes: must be between 1 and {MAX_NODES:,} (got {self.nodes})")
        self._consistent(MAX_GPUS)
        check_text(self.timing.band_basis, "timing.band_basis", TEXT_CHARS)
        check_count(self.shape.seq_len, "shape.seq_len", 1, MAX_SEQ_LEN)
        check_count(self.shape.micro_batch, "shape.micro_batch", 1, MAX_BATCH)
        if self.shape.grad_accum is not None:
            check_count(self.shape.grad_accum, "shape.grad_accum", 1, MAX_BATCH)
        if self.rank < 0:
            raise ValueError(f"rank: must be >= 0 (got {self.rank})")
        check_number(self.network_gbps, "network_gbps")
        for part in (self.fit, self.memory, self.timing, self.cost):
            if part is None:
                continue
            for name, value in part.__dict__.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    check_number(value, name)
        return self

    def _consistent(self, max_gpus: int) -> None:
        """One run: the offer's GPUs per node × nodes are the stack's ranks (memory assumed that sharding,
        launch writes that num_processes), and no more GPUs than any run has."""
        gpus = self.offer.gpu_count * self.nodes
        if gpus > max_gpus:
            raise ValueError(f"offer.gpu_count × nodes: {self.offer.gpu_count:,} × {self.nodes:,} = {gpus:,} GPUs, "
                             f"more than {max_gpus:,} in one run")
        if self.stack.gpus != gpus:
            raise ValueError(f"stack.gpus: {self.stack.gpus:,} ranks, but the offer has {self.offer.gpu_count:,} "
                             f"GPU(s) per node × {self.nodes:,} node(s) = {gpus:,}; a candidate's memory, time and "
                             "launch files describe one run on all of its GPUs")

    def __getattr__(self, name: str) -> Any:
        how = FLAT.get(name)
        if how is None or name in type(self).model_fields:
            return super().__getattr__(name)  # type: ignore[misc]
        if callable(how):
            return how(self)
        obj: Any = self
        for part in how.split("."):
            obj = getattr(obj, part)
        return obj

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> "Candidate":
        """As pydantic's, and flat keys (`price_date`, `provider`, ...) update the nested field they name."""
        flat = {k: v for k, v in (update or {}).items() if k in FLAT and k not in type(self).model_fields}
        if not flat:
            return super().model_copy(update=update, deep=deep)
        base = super().model_copy(update={k: v for k, v in update.items() if k not in flat}, deep=deep)
        return type(self).model_validate({**{k: getattr(base, k) for k in type(self).model_fields}, **flat})

    def estimate_args(self) -> list[str]:
        """`gpu-advisor estimate MODEL` options that reproduce this candidate's memory and tokens/s."""
        args = [*self.stack.cli_args(), *self.shape.cli_args(), "--gpu", self.offer.gpu_model, "--nodes", str(self.nodes)]
        if self.network_gbps:
            args += ["--internode-gbps", f"{self.network_gbps:g}"]
        return args

    def flat(self) -> dict[str, Any]:
        """The flat view (one value per column) for CSV, tables and schema-1 readers."""
        return {"rank": self.rank, **{k: getattr(self, k) for k in FLAT}}

    @model_validator(mode="before")
    @classmethod
    def _from_flat_keys(cls, data: Any) -> Any:
        """Accept schema-1 (flat) candidates and flat overrides: flat keys win over nested ones."""
        if not isinstance(data, dict):
            return data
        if not any(k in data for k in FLAT if k not in cls.model_fields):
            return data
        out = {k: v for k, v in data.items() if k not in FLAT or k in cls.model_fields}
        parts: dict[str, dict] = {}
        for key in _SUB_MODELS:
            value = out.get(key) or {}
            parts[key] = dict(value.model_dump(exclude_defaults=False) if isinstance(value, BaseModel) else value)
        for key, how in FLAT.items():
            if key not in data or callable(how) or "." not in how:
                continue
            part, field = how.split(".")
            parts[part][field] = data[key]
        if "lora_rank" in data and data["lora_rank"] is not None:
            parts["stack"]["lora_rank"] = data["lora_rank"]
        if "stack_label" in data:
            out["label"] = data["stack_label"]
        gpus_per_node = parts["offer"].get("gpu_count", 1) or 1
        parts["stack"].setdefault("gpus", int(gpus_per_node) * int(out.get("nodes", 1) or 1))
        if "cost_usd" in data:
            parts["timing"].setdefault("hours", data.get("hours", 0.0))
        for key in _SUB_MODELS:
            out[key] = parts[key]
        return out


class Rejection(BaseModel):
    reason: str
    count: int
    example: str = ""


MAX_HISTOGRAM_BINS = 256  # length_stats writes 24; a shared plan file may not make the report draw more
MAX_HISTOGRAM_ROWS = 10**15  # a count no dataset reaches


class LengthHistogram(BaseModel):
    """`plan --dataset`'s token lengths (advisor.length_stats.LengthStats.histogram and the seq_lens to mark),
    carried in the plan so the report can draw them (reports/charts.py length_histogram_chart)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bins: tuple[tuple[int, int, int], ...] = Field(min_length=1, max_length=MAX_HISTOGRAM_BINS,
                                                   description="(lowest, highest tokens, rows) per bin, ascending")
    seq_len: int = Field(gt=0, le=10_000_000)
    suggested_seq_len: int = Field(gt=0, le=10_000_000)
    exact: bool
    counted_rows: int = Field(ge=1, le=MAX_HISTOGRAM_ROWS)

    @property
    def histogram(self) -> tuple[tuple[int, int, int], ...]:
        return self.bins  # the name length_histogram_chart reads on LengthStats

    @field_validator("bins", mode="before")
    @classmethod
    def _json_lists(cls, v: Any) -> Any:
        """JSON has no tuples: a saved plan's [[low, high, rows], ...] (strict loading refuses lists)."""
        if isinstance(v, list) and len(v) <= MAX_HISTOGRAM_BINS:
            return tuple(tuple(b) if isinstance(b, list) else b for b in v)
        return v

    @field_validator("bins")
    @classmethod
    def _bins(cls, bins: tuple[tuple[int, int, int], ...]) -> tuple[tuple[int, int, int], ...]:
        """Ascending, non-overlapping bins of non-negative lengths and row counts."""
        previous = -1
        for i, (low, high, rows) in enumerate(bins):
            if not (previous < low <= high <= 10_000_000 and 0 <= rows <= MAX_HISTOGRAM_ROWS):
                raise ValueError(f"workload_lengths.bins[{i}]: expected ascending (low, high, rows) with "
                                 f"0 <= low <= high and rows >= 0 (got {low}, {high}, {rows})")
            previous = high
        return bins


class Plan(BaseModel):
    """The planner's answer: ranked candidates, Pareto front, baseline and what was ruled out."""

    schema_version: int = PLAN_SCHEMA_VERSION
    model: ModelInfo
    workload: dict[str, str | int | float | bool | None]
    candidates: list[Candidate] = Field(description="the ranked top-N, best first")
    others: list[Candidate] = Field(default_factory=list, description="candidates only the views below name "
                                                                      "(each stored once)")
    # views: indexes into candidates + others (stored); read them through .pareto, .baseline, ...
    pareto_refs: list[int] = Field(default_factory=list, description="the Pareto front (cost vs hours)")
    baseline_ref: int | None = None
    best_per_gpu_refs: dict[str, int] = Field(default_factory=dict)
    best_per_provider_refs: dict[str, int] = Field(default_factory=dict)
    spot_alternative_ref: int | None = Field(None, description="with --spot: the best spot candidate, beside "
                                                               "the on-demand headline")
    rejected: list[Rejection] = Field(default_factory=list)
    assumptions: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    command: str = ""
    generated_at: str = ""
    stale_days: float = Field(30.0, description="prices older than this many days are stale")
    saving_vs_baseline_usd: float | None = None
    notice: str = Field("", description="e.g. 'No candidate meets the budget; showing the closest.'")
    constraints_met: bool = Field(True, description="false when nothing fits or nothing meets the budget/deadline "
                                                     "(the CLI exits 3)")
    remedy: str = Field("", description="when nothing meets the budget/deadline: what scope would, and what the "
                                        "requested job needs")
    managed_alternatives: list[ManagedAlternative] = Field(
        default_factory=list, description="per-token fine-tuning services that list this model and method, "
                                          "priced for the same tokens x epochs (pricing/managed.py)")
    workload_lengths: LengthHistogram | None = Field(None, description="with plan --dataset: the dataset's token "
                                                                        "lengths, drawn in the report")

    @property
    def stored(self) -> list[Candidate]:
        """Every distinct candidate the plan holds, once: the ranked ones, then the others."""
        return [*self.candidates, *self.others]

    def ref(self, index: int | None) -> Candidate | None:
        """The stored candidate a view names (None for no reference)."""
        return None if index is None else self.stored[index]

    @property
    def pareto(self) -> list[Candidate]:
        return [self.stored[i] for i in self.pareto_refs]

    @property
    def baseline(self) -> Candidate | None:
        return self.ref(self.baseline_ref)

    @property
    def best_per_gpu(self) -> dict[str, Candidate]:
        return {name: self.stored[i] for name, i in self.best_per_gpu_refs.items()}

    @property
    def best_per_provider(self) -> dict[str, Candidate]:
        return {name: self.stored[i] for name, i in self.best_per_provider_refs.items()}

    @property
    def spot_alternative(self) -> Candidate | None:
        return self.ref(self.spot_alternative_ref)

    @model_validator(mode="before")
    @classmethod
    def _views_to_refs(cls, data: Any) -> Any:
        """Views given as candidates (a schema 1-3 file, or Plan(pareto=[...])) become references."""
        from advisor.plan_refs import to_refs

        return to_refs(data, PLAN_SCHEMA_VERSION) if isinstance(data, dict) else data

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> "Plan":
        """As pydantic's; an update of the candidates or of a view (pareto=[...], baseline=...) stores them
        again, so each view keeps the candidate it named (or is given) and each candidate is stored once."""
        from advisor.plan_refs import VIEWS

        if not set(update or {}) & {"candidates", "others", *VIEWS}:
            return super().model_copy(update=update, deep=deep)
        data = {k: getattr(self, k) for k in type(self).model_fields if k != "others" and k not in VIEWS.values()}
        data.update({view: getattr(self, view) for view in VIEWS}, **(update or {}))
        copied = type(self).model_validate(data)
        return copied.model_copy(deep=True) if deep else copied

    def _check_refs(self) -> None:
        """Every reference names a stored candidate."""
        n = len(self.candidates) + len(self.others)
        refs = [(f"pareto_refs[{k}]", i) for k, i in enumerate(self.pareto_refs)]
        refs += [(f"{field}[{check_text(name, f'{field} key')!r}]", i)
                 for field in ("best_per_gpu_refs", "best_per_provider_refs")
                 for name, i in getattr(self, field).items()]
        refs += [(field, getattr(self, field)) for field in ("baseline_ref", "spot_alternative_ref")
                 if getattr(self, field) is not None]
        for where, i in refs:
            if not 0 <= i < n:
                raise ValueError(f"{where}: {i} names no stored candidate (candidates + others hold {n})")

    def managed_summary(self) -> str:
        """One sentence: the cheapest managed per-token service for the same tokens beside the self-hosted
        top pick ("" when no service lists the model and method). The table, report and card all print it."""
        from advisor.text import money

        if not self.managed_alternatives:
            return ""
        m = self.managed_alternatives[0]
        price = money(m.usd) + (f"-{money(m.usd_high)}" if m.usd_high is not None else "")
        dated = m.observed_at or "date unknown"
        text = (f"A managed service, {m.provider} {m.service} ({m.method}), would cost {price} for the same "
                f"{m.billed_m_tokens:,.0f}M tokens (price dated {dated}, {m.source.split(' ')[0]})")
        if self.candidates and self.constraints_met:
            top = self.candidates[0].cost_usd
            if top <= m.usd:
                text += f"; self-hosting saves {money(m.usd - top)} or more, but you run it"
            else:
                text += f"; it is cheaper than self-hosting by up to {money(top - m.usd)}"
        return text + "."

    @field_validator("schema_version", mode="before")
    @classmethod
    def _schema(cls, v: Any) -> int:
        """Only the versions this code reads (a bool or a string is not a version)."""
        if isinstance(v, bool) or not isinstance(v, int) or v not in KNOWN_SCHEMA_VERSIONS:
            import json

            shown = json.dumps(v)[:20] if isinstance(v, (bool, int, float, str)) else type(v).__name__
            raise ValueError(f"schema_version {shown} is not one this gpu-advisor reads (known: "
                             f"{', '.join(map(str, KNOWN_SCHEMA_VERSIONS))}); re-plan with this version")
        return v

    @model_validator(mode="after")
    def _text_and_numbers(self) -> "Plan":
        """The plan's own text and numbers (candidates, offers and the model check themselves)."""
        for name in ("workload", "assumptions", "warnings"):
            _check_tree(getattr(self, name), name)
        check_workload(self.workload)
        for name in ("command", "generated_at", "notice", "remedy"):
            check_text(getattr(self, name), name, TEXT_CHARS)
        self._check_refs()
        for i, m in enumerate(self.managed_alternatives):
            _check_tree(m.model_dump(), f"managed_alternatives[{i}]")
            for name in ("usd", "usd_high", "usd_per_m_tokens", "billed_m_tokens", "min_charge_usd"):
                value = getattr(m, name)
                if value is not None and not (math.isfinite(value) and value >= 0):
                    raise ValueError(f"managed_alternatives[{i}].{name}: must be a finite number >= 0 (got {value})")
        for i, r in enumerate(self.rejected):
            check_text(r.reason, f"rejected[{i}].reason", TEXT_CHARS)
            check_text(r.example, f"rejected[{i}].example", TEXT_CHARS)
            if r.count < 0:
                raise ValueError(f"rejected[{i}].count: must be >= 0 (got {r.count})")
        if not (math.isfinite(self.stale_days) and self.stale_days >= 0):
            raise ValueError(f"stale_days: must be a finite number >= 0 (got {self.stale_days})")
        if self.saving_vs_baseline_usd is not None and not math.isfinite(self.saving_vs_baseline_usd):
            raise ValueError(f"saving_vs_baseline_usd: must be finite (got {self.saving_vs_baseline_usd})")
        return self


MemoryEstimate.model_rebuild()
