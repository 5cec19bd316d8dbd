"""Facts about a plan as typed rows: a `Finding` is one thing the planner found about a candidate (or about the
whole plan), its kind from a closed set and the figures it rests on. Readers that need a fact read the finding;
the words for it are written once, from these rows, in advisor/explain/.

`RankBy` is the closed set of `--sort` values: what the ranking orders by first.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

from advisor.results.checks import _check_tree, check_workload

Figure = bool | int | float | str | None


class RankBy(StrEnum):
    """What the ranking orders by first (--sort): the cost of the whole run, or its wall time."""

    COST = "cost"
    TIME = "time"

    @property
    def other(self) -> RankBy:
        return RankBy.TIME if self is RankBy.COST else RankBy.COST


class FindingKind(StrEnum):
    """What a finding says. Candidate kinds first, then the plan's own (a warning)."""

    # about one candidate (its notes, in the order the planner records them)
    PURE_LOW_PRECISION = "pure_low_precision"  # full fine-tuning in pure bf16/fp16, no fp32 master copy
    FP16_NO_BF16 = "fp16_no_bf16"  # fp16 on a card without bf16, a model released in bf16
    ONLY_8BIT = "only_8bit"  # 8-bit AdamW is what makes the run fit
    UNCALIBRATED = "uncalibrated"  # fewer than the calibrated minimum of held-out rows for the GPU class and method
    TIGHT = "tight"  # peak within the estimator's error band of the memory limit
    STACK_CAVEAT = "stack_caveat"  # a software stack that does not install or run as assumed (ROCm bnb, aarch64)
    LISTED_ONLY = "listed_only"  # kept under --regions though the sheet lists it everywhere (availability unknown)
    PADDED = "padded"  # padded batches compute more than the kept tokens
    GLOBAL_BATCH_CHANGED = "global_batch_changed"  # runs another global batch than requested
    DPO_REFERENCE = "dpo_reference"  # DPO: where the reference model lives
    GRPO_GENERATION = "grpo_generation"  # GRPO: where completions are generated
    NEAR_TIE = "near_tie"  # ranked above a cheaper (or faster) row by a tie rule
    SAFE_OVER_RISKY = "safe_over_risky"  # a safe row ranked above a cheaper risky one within the risk margin
    FRESH_FIRST = "fresh_first"  # a fresh price heads the plan above cheaper rows priced past the staleness limit
    SPOT_SUSPECT = "spot_suspect"  # the spot price looks like a placeholder
    HOST_UNKNOWN = "host_unknown"  # the source lists no host RAM: the loading check could not run
    MISSES_BUDGET = "misses_budget"  # over --budget at the ranking quantile
    MISSES_DEADLINE = "misses_deadline"  # over --deadline at the ranking quantile
    BAND_CROSSES_BUDGET = "band_crosses_budget"  # meets --budget at the quantile, its p90 does not
    BAND_CROSSES_DEADLINE = "band_crosses_deadline"  # meets --deadline at the quantile, its p90 does not
    # about the plan (its warnings)
    TOP_FP16 = "top_fp16"  # the top pick trains in fp16 a model released in bf16
    RULED_OUT_BY_CONSTRAINT = "ruled_out_by_constraint"  # options over the budget / past the deadline
    CLOSEST = "closest"  # nothing meets the constraints: the closest candidate and how it misses
    ALL_STALE = "all_stale"  # every matching price is stale
    TOP_GLOBAL_BATCH = "top_global_batch"  # the top pick runs another global batch than requested
    FEW_STEPS = "few_steps"  # fewer optimizer steps than rarely trains well
    TOP_BAND_CROSSES = "top_band_crosses"  # the top pick's p90 crosses a constraint it meets at the quantile
    SHOWN_HOST_UNKNOWN = "shown_host_unknown"  # a shown candidate's host RAM is unknown
    PRICE_DISPUTED = "price_disputed"  # a dated observation disputes a shown candidate's catalog price
    TOP_TIGHT = "top_tight"  # the top pick is a tight fit
    NO_SPOT = "no_spot"  # --spot, and no matching offer has a (dated) spot price
    NEAR_MISS = "near_miss"  # a slightly looser deadline/budget or --allow-stale picks a row cheaper in total


class Finding(BaseModel):
    """One fact: its kind and the figures it rests on (numbers in their base units, names as plain strings)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: FindingKind
    figures: dict[str, Figure] = Field(default_factory=dict)

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, v: object) -> object:
        """A plan file's kind is its string (strict loading takes only the enum itself)."""
        if isinstance(v, str) and not isinstance(v, FindingKind):
            try:
                return FindingKind(v)
            except ValueError:
                raise ValueError(f"kind: {v[:40]!r} is not a finding this gpu-advisor knows") from None
        return v

    @field_validator("figures")
    @classmethod
    def _figures(cls, v: dict[str, Figure]) -> dict[str, Figure]:
        """Short names, short strings and finite numbers: a figure is a fact, not a paragraph."""
        for name, value in v.items():
            if len(name) > 40 or (isinstance(value, str) and len(value) > 2_000):
                raise ValueError(f"figures[{name[:40]!r}]: too long for a figure")
            if isinstance(value, float) and value != value:
                raise ValueError(f"figures[{name[:40]!r}]: not a number")
        return v

    def __getitem__(self, name: str) -> Figure:
        return self.figures[name]

    def get(self, name: str, default: Figure = None) -> Figure:
        return self.figures.get(name, default)


def found(findings: list[Finding], *kinds: FindingKind) -> list[Finding]:
    """The findings of these kinds, in recorded order."""
    return [f for f in findings if f.kind in kinds]


def first(findings: list[Finding], *kinds: FindingKind) -> Finding | None:
    """The first finding of these kinds (None when there is none)."""
    return next((f for f in findings if f.kind in kinds), None)


class _Record(BaseModel):
    """A frozen record a plan file stores as a JSON object: the keys it was given (a field never set is not
    written, so older files and new ones serialize as they were), read by attribute or, as a plain mapping, by key;
    keys this version does not name are kept (an older or newer file's)."""

    model_config = ConfigDict(frozen=True, extra="allow")
    FIELD: ClassVar[str] = "record"  # the Plan field it is, as error messages name it

    @model_validator(mode="before")
    @classmethod
    def _text_and_numbers(cls, data: Any) -> Any:
        """Every key and string readable, every float finite (a plan file is data from anywhere)."""
        if isinstance(data, dict):
            _check_tree(data, cls.FIELD)
        return data

    @model_serializer(mode="wrap")
    def _given(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        given = self.model_fields_set | set(self.model_extra or {})
        return {k: v for k, v in data.items() if k in given}

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump()

    def get(self, key: str, default: Any = None) -> Any:
        return self.as_dict().get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]

    def __contains__(self, key: object) -> bool:
        return key in self.as_dict()

    def keys(self):
        return self.as_dict().keys()

    def items(self):
        return self.as_dict().items()

    def values(self):
        return self.as_dict().values()

    def __len__(self) -> int:
        return len(self.as_dict())


Number = int | float


class Workload(_Record):
    """The job the plan prices: tokens, epochs, shape, the user's limits and pins, and the objective's own units
    (DPO pairs, GRPO prompts); `plan --dataset` adds the dataset's keys."""

    FIELD: ClassVar[str] = "workload"

    tokens: Number | None = None
    epochs: Number | None = None
    train_tokens: Number | None = None
    seq_len: int | None = None
    global_batch: int | None = None
    global_batch_tokens: int | None = None
    methods: str | None = None
    budget_usd: Number | None = None
    deadline_hours: Number | None = None
    max_nodes: int | None = None
    max_gpus: int | None = None
    spot: bool | None = None
    padded: bool | None = None
    pins: str | None = None
    objective: str | None = None
    objective_settings: str | None = None
    pairs: int | None = None
    prompts: int | None = None
    num_generations: int | None = None
    generation: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _bounds(cls, data: Any) -> Any:
        """The keys `plan` writes and `launch` reads, within the flags' bounds (advisor/results/checks.py)."""
        if isinstance(data, dict):
            check_workload(data)
        return data


class Assumptions(_Record):
    """What the plan assumed and counted: headroom, the ranking basis (sort, risk), the counts, setup, checkpoints,
    interruption rates, and how prices, precision, optimizers and multi-node runs were chosen."""

    FIELD: ClassVar[str] = "assumptions"

    headroom: Number | None = None
    mfu_override: Number | None = None
    sort: RankBy | None = None
    risk: str | None = None
    hours_band: str | None = None
    candidates_scored: int | None = None
    candidates_meeting_constraints: int | None = None
    configs_evaluated: int | None = None
    memory_estimates: int | None = None
    setup_hours: Number | str | None = None
    checkpoints: str | None = None
    hardware_interruptions_per_gpu_hour: Number | None = None
    spot_interruptions_per_instance_hour: Number | None = None
    pricing: str | None = None
    stale_prices: str | None = None
    billing: str | None = None
    currency: str | None = None
    time_model: str | None = None
    precision_rule: str | None = None
    tight_band: str | None = None
    optimizers: str | None = None
    multi_node: str | None = None
    remedy_plans: int | None = None
    near_miss_plans: int | None = None

    @field_validator("sort", mode="before")
    @classmethod
    def _sort(cls, v: object) -> object:
        """A plan file's --sort is its string (strict loading takes only the enum itself)."""
        if isinstance(v, str) and not isinstance(v, RankBy):
            try:
                return RankBy(v.lower())
            except ValueError:
                raise ValueError(f"sort: expected cost or time (got {v[:40]!r})") from None
        return v
