"""Typed results: the single source that CLI tables, JSON, reports and launch files read.

Bytes are integers (per GPU unless the name says otherwise); GB = 1e9, GiB = 2**30.
A plan `Candidate` carries the full `Stack` and `Shape` it was estimated with, the `Offer` it
runs on and its memory, timing and cost as sub-models; `Candidate.flat()` is the one flat view
(CSV, tables), and the same flat fields are written beside the nested ones in JSON, so plans
saved before schema 2 (flat candidates) still load and scripts reading flat keys keep working.
"""

from __future__ import annotations

from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from advisor.stacks import Shape, Stack

PLAN_SCHEMA_VERSION = 2  # 1: flat candidates; 2: nested offer/stack/shape/fit/timing/cost (+ flat keys)


class Component(BaseModel):
    """One named memory term, with how it was computed and where the formula comes from."""

    bytes: int
    formula: str = ""
    source: str = ""


class ModelInfo(BaseModel):
    name: str
    family: str
    source: str
    params_total: int
    params_trainable: int
    params_active: int = Field(description="parameters used per token (MoE: routed experts only)")


class Breakdown(BaseModel):
    """Peak per-GPU memory by component, bytes. `total` is what the device must hold."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    overhead: int
    total: int


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
    cpu_ram_bytes: int = Field(0, description="host RAM needed per node for offloaded states")
    assumptions: dict[str, str | int | float | bool] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    fit: "FitCheck | None" = None
    throughput: "Throughput | None" = None


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
    spot_allowance_hours: float = 0.0
    hours: float = Field(description="wall hours: training + setup + checkpoints + spot allowance")


class Cost(BaseModel):
    spot: bool = False
    price_hour: float = Field(0.0, description="USD per hour of all nodes at the tier used for `usd`")
    usd: float
    on_demand_usd: float | None = None
    spot_usd: float | None = None
    usd_per_m_tokens: float = 0.0


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

    @model_serializer(mode="wrap")
    def _with_flat_keys(self, handler):
        data = handler(self)
        data.update({k: v for k, v in self.flat().items() if k not in data})
        return data

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


class Plan(BaseModel):
    """The planner's answer: ranked candidates, Pareto front, baseline and what was ruled out."""

    schema_version: int = PLAN_SCHEMA_VERSION
    model: ModelInfo
    workload: dict[str, str | int | float | bool | None]
    candidates: list[Candidate]
    pareto: list[Candidate]
    baseline: Candidate | None = None
    best_per_gpu: dict[str, Candidate] = Field(default_factory=dict)
    best_per_provider: dict[str, Candidate] = Field(default_factory=dict)
    spot_alternative: Candidate | None = Field(None, description="with --spot: the best spot candidate, beside "
                                                                 "the on-demand headline")
    rejected: list[Rejection] = Field(default_factory=list)
    assumptions: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    command: str = ""
    generated_at: str = ""
    stale_days: float = Field(30.0, description="prices older than this many days are stale")
    saving_vs_baseline_usd: float | None = None
    notice: str = Field("", description="e.g. 'No candidate meets the budget; showing the closest.'")


MemoryEstimate.model_rebuild()
