"""One priced way to run the job: the offer it runs on, its memory fit, timing and cost, and the one
flat view of them (`FLAT`, `Candidate.flat()`) that CSV reads. Every number has one spelling, its nested
field (`c.cost.usd`); the flat keys are a projection, not attributes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from advisor.model.spec import MAX_BATCH, MAX_GPUS, MAX_NODES, MAX_SEQ_LEN
from advisor.results.checks import TEXT_CHARS, check_count, check_gpu, check_number, check_text
from advisor.results.estimate import Breakdown
from advisor.results.facts import Finding
from advisor.stacks import Shape, Stack


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
    spot_price_date: str = Field("", description="date the spot price was observed (YYYY-MM-DD, 'undated'; '' no spot)")
    stale: bool = False
    interconnect: str = ""
    notes: str = ""
    also_in: list[str] = Field(default_factory=list, description="other regions with this identical offer")
    also_named: list[str] = Field(default_factory=list, description="the same offer (provider, GPU, count, price, "
                                                                    "network) under other instance names")
    country: str = Field("", description="ISO 3166 code of the host's country ('' unknown; pricing/geo.py)")
    country_name: str = Field("", description="the country's name ('' unknown)")
    host_known: bool = Field(True, description="the source lists the host's RAM (what loading the model needs)")
    ram_gb: float | None = Field(None, description="host RAM per node (GB), where listed")
    vcpus: int | None = Field(None, description="host vCPUs per node, where listed")

    @field_validator("provider", "region", "instance_type", "price_date", "spot_price_date", "interconnect", "country",
                     "country_name")
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
    def _numbers(self) -> Offer:
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
    risk_quantile: float = Field(0.5, description="the quantile the ranking used (--risk), the same for every row")
    calibrated: bool = Field(True, description="the time model has held-out calibration rows for this segment")
    band_basis: str = Field("", description="the calibration segment and rows behind the band")
    global_batch: int = Field(0, description="sequences per optimizer step as run (micro-batch × accumulation × GPUs)")
    generation_hours: float = Field(0.0, description="GRPO: the part of train_hours spent generating completions "
                                                     "(and pushing weights into vLLM); 0 for SFT and DPO")


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


def _lora_rank(c: Candidate) -> int | None:
    return None if c.stack.method == "full" else c.stack.lora_rank


# flat key -> where it lives (dotted path) or how it is derived. Order is the flat view's order.
FLAT: dict[str, str | Callable[[Candidate], Any]] = {
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


def _flat_value(c: Candidate, how: str | Callable[[Candidate], Any]) -> Any:
    """One flat key's value: the nested field its dotted path names, or what its function derives."""
    if callable(how):
        return how(c)
    obj: Any = c
    for part in how.split("."):
        obj = getattr(obj, part)
    return obj


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
    notes: list[str] = Field(default_factory=list, description="what this candidate trades away, in words (written "
                                                                "from `findings` by advisor/explain/notes.py)")
    findings: list[Finding] = Field(default_factory=list, description="what this candidate trades away, as typed "
                                                                      "facts (advisor/results/facts.py)")
    tie_rule: str = Field("", description="the near-tie rule that ranked it above a cheaper (or faster) row "
                                          "(advisor/planner/ranking.py TIE_BREAKERS); '' when its figure did")
    caveats: list[str] = Field(default_factory=list, description="software-stack caveats of this GPU and stack "
                                                                 "(advisor/planner/ranking.py STACK_CAVEATS keys)")

    @field_validator("label")
    @classmethod
    def _label(cls, v: str) -> str:
        return check_text(v, "stack_label")

    @field_validator("notes", "caveats")
    @classmethod
    def _notes(cls, v: list[str]) -> list[str]:
        for note in v:
            check_text(note, "notes", TEXT_CHARS)
        return v

    @model_validator(mode="after")
    def _numbers(self) -> Candidate:
        """Counts within the physical bounds; every time, cost, price and memory finite and >= 0."""
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
        if self.stack.gpus + self.stack.objective.server_gpus != gpus:  # GRPO server mode: its GPUs serve vLLM
            raise ValueError(f"stack.gpus: {self.stack.gpus:,} ranks, but the offer has {self.offer.gpu_count:,} "
                             f"GPU(s) per node × {self.nodes:,} node(s) = {gpus:,}; a candidate's memory, time and "
                             "launch files describe one run on all of its GPUs")


    def estimate_args(self) -> list[str]:
        """`gpu-advisor estimate MODEL` options that reproduce this candidate's memory and tokens/s."""
        args = [*self.stack.cli_args(), *self.shape.cli_args(), "--gpu", self.offer.gpu_model, "--nodes", str(self.nodes)]
        if self.network_gbps:
            args += ["--internode-gbps", f"{self.network_gbps:g}"]
        return args

    def flat(self) -> dict[str, Any]:
        """The flat view (one value per column) for CSV and schema-1 readers: each key read from the nested
        field FLAT names (or derived as it says)."""
        return {"rank": self.rank, **{k: _flat_value(self, how) for k, how in FLAT.items()}}

    @model_validator(mode="before")
    @classmethod
    def _from_flat_keys(cls, data: Any) -> Any:
        """Read a schema-1 candidate (flat keys) or a schema-2 one (nested, with flat copies, which win) into the
        nested fields: the only place a flat key is read. Readers use the nested fields; `flat()` writes the
        flat view."""
        if not isinstance(data, dict):
            return data
        if not any(k in data for k in FLAT if k not in cls.model_fields):
            return data
        out = {k: v for k, v in data.items() if k not in FLAT or k in cls.model_fields}
        parts = _nested_parts(out, data)
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


def _nested_parts(out: dict, data: dict) -> dict[str, dict]:
    """The sub-models as dicts (given nested, or as models), with each flat key's value written into the nested
    field its dotted path names (flat copies win)."""
    parts: dict[str, dict] = {}
    for key in _SUB_MODELS:
        value = out.get(key) or {}
        parts[key] = dict(value.model_dump(exclude_defaults=False) if isinstance(value, BaseModel) else value)
    for key, how in FLAT.items():
        if key in data and not callable(how) and "." in how:
            part, field = how.split(".")
            parts[part][field] = data[key]
    return parts


def ranked_cost(c: Candidate) -> float:
    """The cost the candidate was ranked, constrained and shown at: its ranking quantile's (plan.ranking)."""
    return c.cost.usd_at_risk if c.cost.usd_at_risk is not None else c.cost.usd


def ranked_hours(c: Candidate) -> float:
    """The wall hours at the ranking quantile, beside ranked_cost."""
    return c.timing.hours_at_risk if c.timing.hours_at_risk is not None else c.timing.hours
