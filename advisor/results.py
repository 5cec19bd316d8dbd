"""Typed results: the single source that CLI tables, JSON, reports and launch files read.

Bytes are integers (per GPU unless the name says otherwise); GB = 1e9, GiB = 2**30.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from advisor.stacks import Shape, Stack


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
    compute_seconds_per_step: float = 0.0
    comm_seconds_per_step: float = 0.0
    components: dict[str, float] = Field(default_factory=dict)
    assumptions: dict[str, str | int | float | bool] = Field(default_factory=dict)


class Candidate(BaseModel):
    """One priced way to run the job: an offer × node count × stack × micro-batch."""

    rank: int = 0
    provider: str
    region: str
    instance_type: str
    gpu_model: str
    gpu_count: int = Field(description="GPUs per node (instance)")
    nodes: int = 1
    spot: bool = False
    method: str
    precision: str
    optimizer: str
    grad_checkpointing: bool
    attention: str
    sharding: str
    offload: str = "none"
    lora_rank: int | None = None
    micro_batch: int
    grad_accum: int
    seq_len: int
    peak_memory_bytes: int = Field(description="estimated device memory per GPU")
    gpu_memory_bytes: int = Field(description="usable device memory per GPU")
    headroom_bytes: int = 0
    tokens_per_sec: float = 0.0
    mfu: float = 0.0
    hours: float = Field(description="wall hours including setup and spot allowance")
    train_hours: float = 0.0
    cost_usd: float
    cost_on_demand_usd: float | None = None
    cost_spot_usd: float | None = None
    usd_per_m_tokens: float = 0.0
    price_hour: float = Field(0.0, description="price per instance-hour used for cost_usd")
    price_source: str
    price_date: str
    price_stale: bool = False
    stack_label: str = ""
    memory: Breakdown | None = None


class Rejection(BaseModel):
    reason: str
    count: int
    example: str = ""


class Plan(BaseModel):
    """The planner's answer: ranked candidates, Pareto front, baseline and what was ruled out."""

    model: ModelInfo
    workload: dict[str, str | int | float | bool | None]
    candidates: list[Candidate]
    pareto: list[Candidate]
    baseline: Candidate | None = None
    best_per_gpu: dict[str, Candidate] = Field(default_factory=dict)
    best_per_provider: dict[str, Candidate] = Field(default_factory=dict)
    rejected: list[Rejection] = Field(default_factory=list)
    assumptions: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    command: str = ""
    generated_at: str = ""
    saving_vs_baseline_usd: float | None = None
    notice: str = Field("", description="e.g. 'No candidate meets the budget; showing the closest.'")


MemoryEstimate.model_rebuild()
