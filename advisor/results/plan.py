"""The planner's answer (`Plan`) as plan files store it, and the schema versions this code reads."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from advisor.results.candidate import Candidate
from advisor.results.checks import TEXT_CHARS, _check_tree, check_text
from advisor.results.estimate import ModelInfo
from advisor.results.facts import Assumptions, Finding, Workload
from advisor.results.plan_refs import VIEWS, to_refs
from pricing.managed import ManagedAlternative

# 1: flat candidates; 2: nested offer/stack/shape/fit/timing/cost (+ flat copies); 3: nested only, each
# number once, with timing.setup_hours, risk_quantile, calibrated, offer.also_named and plan.remedy; 4: each
# candidate stored once (`candidates` + `others`), pareto/baseline/best_per_gpu/best_per_provider/
# spot_alternative written as references into them (pareto_refs, baseline_ref, ...; advisor/results/plan_refs.py)
PLAN_SCHEMA_VERSION = 4

# Plan files gpu-advisor reads: 1 (flat candidates), 2 (nested + flat copies), 3 (nested only), 4 (each
# candidate once, views by reference). An unknown version (a future tool's file, 0, -1, "2", true) is refused
# rather than guessed at.
KNOWN_SCHEMA_VERSIONS = (1, 2, 3, PLAN_SCHEMA_VERSION)


class Rejection(BaseModel):
    reason: str
    count: int
    example: str = ""


MAX_HISTOGRAM_BINS = 256  # length_stats writes 24; a shared plan file may not make the report draw more
MAX_HISTOGRAM_ROWS = 10**15  # a count no dataset reaches


class LengthHistogram(BaseModel):
    """`plan --dataset`'s token lengths (advisor.workload.length_stats.LengthStats.histogram and the seq_lens to mark),
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
    workload: Workload
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
    assumptions: Assumptions = Field(default_factory=Assumptions)
    warnings: list[str] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list, description="the plan's own facts behind its warnings "
                                                                      "(advisor/results/facts.py)")
    command: str = ""
    generated_at: str = ""
    prices_as_of: str = Field("", description="the day price ages were measured on when GPU_ADVISOR_TODAY pinned it "
                                              "(pricing.clock); empty: generated_at")
    stale_days: float = Field(30.0, description="prices older than this many days are stale")
    saving_vs_baseline_usd: float | None = None
    notice: str = Field("", description="e.g. 'No candidate meets the budget; showing the closest.'")
    constraints_met: bool = Field(True, description="false when nothing fits or nothing meets the budget/deadline "
                                                     "(the CLI exits 3)")
    remedy: str = Field("", description="when nothing meets the budget/deadline: what scope would, and what the "
                                        "requested job needs")
    ranking: dict[str, str | float | list[str]] = Field(
        default_factory=dict, description="the ranking basis: quantile every row is ranked, shown and constrained at "
                                          "(--risk), sort, near_tie_pct and tie_breakers in order (advisor/planner/"
                                          "ranking.py)")
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
        return to_refs(data, PLAN_SCHEMA_VERSION) if isinstance(data, dict) else data

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Plan:
        """As pydantic's; an update of the candidates or of a view (pareto=[...], baseline=...) stores them
        again, so each view keeps the candidate it named (or is given) and each candidate is stored once."""
        update = {k: (Workload.model_validate(v) if k == "workload" and isinstance(v, Mapping) and
                      not isinstance(v, Workload) else Assumptions.model_validate(v)
                      if k == "assumptions" and isinstance(v, Mapping) and not isinstance(v, Assumptions) else v)
                  for k, v in (update or {}).items()}  # a plain mapping becomes the typed record again
        if not set(update) & {"candidates", "others", *VIEWS}:
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
    def _text_and_numbers(self) -> Plan:
        """The plan's own text and numbers (candidates, offers and the model check themselves)."""
        for name in ("warnings", "ranking"):  # workload and assumptions check themselves (advisor/results/facts.py)
            _check_tree(getattr(self, name), name)
        for name in ("command", "generated_at", "prices_as_of", "notice", "remedy"):
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
