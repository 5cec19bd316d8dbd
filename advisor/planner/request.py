"""PlanRequest: every input of a plan, parsed and validated once (flags, YAML file or Python).

The CLI only fills a PlanRequest; a library user builds the same object, so counts such as
"50M", hours such as "2d", comma lists and `examples × avg_tokens` mean the same everywhere.
Every refusal is one sentence naming the option and what it accepts (exit 2).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from advisor.errors import BadInput, validation_message
from advisor.modelspec import ModelSpec
from advisor.stacks import METHODS

DEFAULT_GLOBAL_BATCH = 64  # sequences per optimizer step when none is given


def parse_count(value: Any, option: str) -> float | None:
    """'50M', '1.5B', '2e9', 1000 -> a positive number (None and '' stay None)."""
    if value is None or value == "":
        return None
    from advisor.models import parse_param_count

    try:
        return float(parse_param_count(value))
    except BadInput:
        raise BadInput(f"--{option}: expected a positive count such as 50M, 1.5B or 2e9 (got {value!r}).") from None


def parse_hours(value: Any, option: str = "deadline") -> float | None:
    """'36', '36h', '2d', '90m', '1w' -> hours (None and '' stay None)."""
    if value is None or value == "":
        return None
    text = str(value).strip().lower()
    mult = {"h": 1.0, "d": 24.0, "m": 1 / 60, "w": 168.0}.get(text[-1:], None)
    try:
        hours = float(text[:-1]) * mult if mult else float(text)
    except ValueError:
        raise BadInput(f"--{option}: expected hours such as 36, 36h, 2d or 90m (got {value!r}).") from None
    if not math.isfinite(hours) or hours <= 0:
        raise BadInput(f"--{option}: must be a positive, finite duration (got {value!r}).")
    return hours


def parse_list(value: Any) -> tuple[str, ...]:
    """'a,b' or ['a', 'b,c'] -> ('a', 'b', 'c'); None -> ()."""
    if value is None:
        return ()
    items = value if isinstance(value, (list, tuple)) else [value]
    return tuple(v.strip() for item in items for v in str(item).split(",") if v.strip())


class PlanRequest(BaseModel):
    """What to plan: the model, the workload, the constraints and how to rank."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    model: str | ModelSpec = Field(description="catalog name, Hugging Face id, config.json path or a ModelSpec")
    tokens: float = Field(description="training tokens per epoch")
    epochs: float = 1.0
    seq_len: int = Field(2048, gt=0)
    global_batch: int | None = Field(None, gt=0, description="sequences per optimizer step")
    global_batch_tokens: int | None = Field(None, gt=0)
    methods: tuple[str, ...] = METHODS
    providers: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    spot: bool = True
    max_gpus: int | None = Field(None, gt=0)
    max_nodes: int = Field(1, gt=0)
    budget: float | None = None
    deadline_hours: float | None = None
    headroom: float = 0.10
    mfu: float | None = None
    setup_hours: float | None = None
    sort: str = "cost"
    top: int = Field(10, gt=0)
    interruptions_per_hour: float | None = None
    checkpoint_interval_hours: float | None = None
    network_gbps: float | None = None
    distinct: bool = Field(True, description="one row per offer × node count × method (its best stack)")
    prices: tuple[str, ...] = Field((), description="price sheets that win over the bundled snapshot")
    discount: tuple[str, ...] = Field((), description="provider=fraction, e.g. aws=0.3")
    command: str = ""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:  # one line naming the option, as every other refusal
            raise BadInput(validation_message(exc)) from None

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens(cls, v: Any) -> float:
        n = parse_count(v, "tokens")
        if n is None:
            raise BadInput("--tokens: give the dataset size as --tokens N, or --examples N with --avg-tokens T.")
        return n

    @field_validator("methods", "providers", "regions", "gpus", "prices", "discount", mode="before")
    @classmethod
    def _lists(cls, v: Any) -> tuple[str, ...]:
        return parse_list(v)

    @field_validator("deadline_hours", mode="before")
    @classmethod
    def _deadline(cls, v: Any) -> float | None:
        return parse_hours(v)

    @model_validator(mode="after")
    def _check(self) -> "PlanRequest":
        self.methods = tuple(dict.fromkeys(self.methods)) or METHODS
        check_choice("--methods", self.methods, METHODS)
        for name, value in (("epochs", self.epochs), ("tokens", self.tokens)):
            if not math.isfinite(value) or value <= 0:
                raise BadInput(f"--{name}: must be a positive, finite number (got {value}).")
        if not 0 <= self.headroom < 1:
            raise BadInput(f"--headroom: must be a fraction in [0, 1), got {self.headroom}.")
        if self.mfu is not None and not 0 < self.mfu <= 1:
            raise BadInput(f"--mfu: must be a fraction in (0, 1], got {self.mfu}.")
        if self.sort not in ("cost", "time"):
            raise BadInput(f"--sort: expected cost or time, got {self.sort!r}.")
        if self.budget is not None and not (math.isfinite(self.budget) and self.budget > 0):
            raise BadInput(f"--budget: must be a positive amount of USD (got {self.budget}).")
        if self.setup_hours is not None and not (math.isfinite(self.setup_hours) and self.setup_hours >= 0):
            raise BadInput(f"--setup-hours: must be a finite number of hours >= 0 (got {self.setup_hours}).")
        return self

    @property
    def train_tokens(self) -> float:
        return self.tokens * self.epochs

    @property
    def sequences_per_step(self) -> int:
        """The global batch in sequences (from --global-batch, else --global-batch-tokens, else 64)."""
        if self.global_batch:
            return self.global_batch
        if self.global_batch_tokens:
            return max(1, round(self.global_batch_tokens / self.seq_len))
        return DEFAULT_GLOBAL_BATCH

    def spec(self) -> ModelSpec:
        if isinstance(self.model, ModelSpec):
            return self.model
        from advisor.models import load_model

        return load_model(self.model)

    # ------------------------------------------------------------------ from flags and files

    @classmethod
    def from_options(cls, options: dict[str, Any], plan_file: str | Path | None = None) -> "PlanRequest":
        """Flags over the YAML plan file over the defaults. Keys use the CLI's spelling
        (`examples`, `avg_tokens`, `deadline`, `all_stacks`, `gpu`, `spot`, ...)."""
        merged: dict[str, Any] = {}
        if plan_file:
            merged.update(read_plan_file(Path(plan_file)))
        merged.update({k: v for k, v in options.items() if v is not None and v != ()})
        return cls(**_to_fields(merged))


# CLI/plan-file spelling -> PlanRequest field
_ALIASES = {"deadline": "deadline_hours", "gpu": "gpus", "model_arg": "model"}
FILE_KEYS = ("model", "tokens", "examples", "avg_tokens", "epochs", "seq_len", "global_batch", "global_batch_tokens",
             "methods", "budget", "deadline", "providers", "regions", "gpu", "spot", "max_gpus", "max_nodes",
             "headroom", "mfu", "prices", "discount", "sort", "top", "setup_hours", "all_stacks")


def _to_fields(options: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in options.items():
        out[_ALIASES.get(key, key)] = value
    if "all_stacks" in out:
        out["distinct"] = not out.pop("all_stacks")
    examples, avg = out.pop("examples", None), out.pop("avg_tokens", None)
    if out.get("tokens") in (None, ""):
        e, a = parse_count(examples, "examples"), parse_count(avg, "avg-tokens")
        if e is None or a is None:
            raise BadInput("--tokens: give the dataset size as --tokens N, or --examples N with --avg-tokens T.")
        out["tokens"] = e * a
    if out.get("global_batch_tokens") not in (None, ""):
        out["global_batch_tokens"] = int(parse_count(out["global_batch_tokens"], "global-batch-tokens") or 0) or None
    if not out.get("model"):
        raise BadInput("--model: which model? Pass a catalog name, Hugging Face id or config.json path.")
    return out


def read_plan_file(path: Path) -> dict[str, Any]:
    """The fields of a YAML plan file, checked against the plan options."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise BadInput(f"--file: cannot read {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise BadInput(f"--file: {path} must hold a mapping of plan fields.")
    out = {}
    for key, value in data.items():
        k = str(key).replace("-", "_")
        if k == "deadline_hours":
            k = "deadline"
        if k not in FILE_KEYS:
            raise BadInput(f"--file: unknown field {key!r} in {path}; valid: {', '.join(sorted(FILE_KEYS))}.")
        out[k] = value
    return out


def check_choice(option: str, wanted, valid) -> None:
    """Refuse names not in `valid` (case-insensitive), listing the valid ones."""
    valid = sorted(set(valid))
    low = {v.lower() for v in valid}
    bad = [w for w in wanted if w.lower() not in low]
    if bad:
        raise BadInput(f"{option}: unknown value {', '.join(repr(b) for b in bad)}; valid: {', '.join(valid)}.")
