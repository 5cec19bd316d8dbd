"""What `estimate` says about one model × stack × shape: memory by component, the fit on a card and
the time model's throughput."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from advisor.model.catalog import check_model_name
from advisor.results.checks import TEXT_CHARS, check_text
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
    params_total: int = Field(ge=0)
    params_trainable: int = Field(ge=0)
    params_active: int = Field(ge=0, description="parameters used per token (MoE: routed experts only)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        """A Hugging Face id, a catalog name or a path: printable, at most 512 characters, no leading '-'."""
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
    generation: int = Field(0, description="GRPO: generation's share at the peak (transformers' KV cache, or "
                                           "vLLM's colocated budget); 0 for SFT and DPO")


class ObjectiveMemory(BaseModel):
    """What a DPO or GRPO step holds beyond SFT, phase by phase (advisor/estimate/objectives/memory.py)."""

    kind: str
    reference: str = Field(description="how the reference model is held, in words")
    rows_per_micro_batch: int = Field(description="rows through the policy per micro-batch (DPO: 2 × pairs)")
    scored_tokens: int = Field(description="positions TRL's fused log-prob head projects per micro-batch")
    phases: dict[str, int] = Field(default_factory=dict, description="device bytes at each phase of the step")
    peak_phase: str = ""
    generation: dict[str, str | int | float | bool] = Field(default_factory=dict)
    vllm: dict[str, str | int | float | bool] = Field(default_factory=dict)
    refusals: list[str] = Field(default_factory=list, description="why vLLM or TRL would refuse to start")


class Reserved(BaseModel):
    """What the caching allocator makes of the run's allocations."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lengths: str = Field(description="'fixed' (every step at --seq-len) or the length distribution replayed")
    expandable_segments: bool
    steps: int
    needed: int = Field(description="reserved bytes the run needs on the card checked: the smallest device the "
                                    "replayed allocator does not fail on (fit check)")
    shows: int = Field(description="what torch.cuda.max_memory_reserved shows: on the card checked (card_bytes) "
                                   "never more than it has, since the allocator frees its cache and retries first; "
                                   "without a card, on a larger one")
    fixed_shape_needed: int = Field(description="needed with every step at --seq-len (same replay)")
    alloc_retries_at_needed: int = Field(description="times the allocator released its cache and retried")
    card_bytes: int | None = Field(None, description="bytes the card checked leaves PyTorch's segments (usable "
                                                     "minus the CUDA context); None without --gpu")


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
    fit: FitCheck | None = None
    throughput: Throughput | None = None
    reserved: Reserved | None = Field(None, description="caching-allocator replay under --lengths "
                                                         "(advisor.alloc_trace); None: fixed shapes")
    objective: ObjectiveMemory | None = Field(None, description="DPO / GRPO: reference, generation, vLLM, phases")
    load: Component | None = Field(None, description="bytes on each GPU once the model is loaded, while it is "
                                                     "sharded (advisor/estimate/phases.py)")
    phases: dict[str, Breakdown] = Field(default_factory=dict, description="per-GPU memory at model loading, the "
                                         "training step, the optimizer step and a checkpoint save")
    peak_phase: str = Field("training step", description="the phase whose figures breakdown and device_total are")


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


class StepNumbers(BaseModel):
    """The time model's numbers for one optimizer step (advisor.estimate.throughput.step_time, and
    advisor.estimate.objectives.timing.step for DPO / GRPO): seconds by component, tokens/s, MFU and the held-out
    band, totals over all GPUs. Frozen: a measured run (advisor.workload.measurements.apply) makes a new record
    with its rate, band and basis. Field order is the order `Throughput.components` lists the seconds in."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokens_per_sec: float
    mfu: float
    internode_gbps: float = Field(description="inter-node network per node the step assumed (0: one node)")
    step_seconds: float
    compute_seconds: float = Field(description="the FLOP-bound part (matmuls + attention), what --mfu scales")
    matmul_seconds: float
    attention_seconds: float
    elementwise_seconds: float
    dequant_seconds: float
    dora_seconds: float
    dispatch_seconds: float
    overhead_seconds: float = Field(description="host time not hidden behind GPU work")
    optimizer_seconds: float
    step_overhead_seconds: float
    comm_seconds: float
    comm_exposed_seconds: float = Field(description="communication not overlapped with compute")
    offload_pcie_seconds: float = Field(description="CPU offload: host-device copies over PCIe")
    offload_exposed_seconds: float = Field(description="CPU offload: copies and host optimizer not hidden")
    cpu_optimizer_seconds: float = Field(description="CPU offload: the optimizer step on the host")
    model_flops_per_token: float
    executed_flops_per_token: float
    kernel_efficiency: float
    kernels_per_micro_batch: float
    tokens_per_step: float
    peak_flops_per_gpu: float
    module_calls_per_micro_batch: float
    sustained_fraction: float
    mfu_cap: float = Field(description="the plausibility cap's MFU")
    capped: bool = Field(description="the step was slowed to the plausibility cap")
    tokens_per_sec_low: float | None = Field(None, description="p10 of held-out error (None: band not asked)")
    tokens_per_sec_high: float | None = Field(None, description="p90 of held-out error")
    interval_rows: int | None = Field(None, description="held-out calibration rows behind the band")
    # DPO / GRPO (advisor/estimate/objectives/timing.py step); None for SFT
    generation_seconds: float | None = Field(None, description="GRPO: generating completions")
    sync_seconds: float | None = Field(None, description="GRPO with vLLM: pushing weights into vLLM")
    nograd_seconds: float | None = Field(None, description="GRPO: old-policy and reference forward passes")
    reference_seconds: float | None = Field(None, description="DPO: the reference model's forward passes")
    train_seconds: float | None = Field(None, description="DPO / GRPO: the policy's forward and backward")
    # a measured run (advisor/workload/measurements.py apply / adjust); None / 0 otherwise
    predicted_tokens_per_sec: float | None = Field(None, description="a measured run: the time model's own rate")
    band_basis: str | None = Field(None, description="a measured run: the run and how it was scaled")
    memory_excess_bytes: int = Field(0, description="a measured run: bytes it needed above the estimate")

    def components(self) -> dict[str, float]:
        """Seconds by component and FLOPs per token, in field order (what `Throughput.components` holds)."""
        return {k: float(v) for k, v in self.model_dump(exclude_none=True).items()
                if k.endswith(("_seconds", "_per_token"))}

    def generation_share(self) -> float:
        """Share of the step spent generating and syncing weights into vLLM (GRPO; 0 otherwise)."""
        gen = (self.generation_seconds or 0.0) + (self.sync_seconds or 0.0)
        return gen / self.step_seconds if self.step_seconds > 0 else 0.0


MemoryEstimate.model_rebuild()
