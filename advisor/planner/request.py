"""PlanRequest: every input of a plan, parsed and validated once (flags, YAML file or Python).

The CLI only fills a PlanRequest; a library user builds the same object, so counts such as
"50M", hours such as "2d", comma lists and `examples × avg_tokens` mean the same everywhere.
Every refusal is one sentence naming the option and what it accepts (exit 2).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from advisor.errors import BadInput, validation_message
from advisor.model.catalog import load_model, parse_param_count
from advisor.model.spec import (
    MAX_BATCH,
    MAX_EPOCHS,
    MAX_GPUS,
    MAX_HOURS,
    MAX_NODES,
    MAX_SEQ_LEN,
    MAX_TOKENS,
    MAX_USD,
    ModelSpec,
)
from advisor.objective import DPO_MAX_LENGTH, OPTION_FIELDS, SFT, Objective, objective_of, pop_objective
from advisor.planner.ranking import DEFAULT_TIME_VALUE, MAX_TIME_VALUE
from advisor.results.facts import RankBy
from advisor.stacks import METHODS, Stack
from advisor.text import plain, refused_char
from advisor.workload.measurements import gather
from pricing import geo
from pricing.errors import PriceInputError
from pricing.files import load_yaml, read_text

_LIST_FLAGS = {"gpus": "--gpu"}  # list fields whose flag is not the field's name
RISKS = {"p50": 0.5, "p80": 0.8, "p90": 0.9}  # quantile of the run's duration the ranking uses
DEFAULT_RISK = "p80"  # a figure the run stays under four times in five (docs/plans.md "Ranking basis")
DEFAULT_GLOBAL_BATCH = 64  # sequences per optimizer step when none is given, up to LONG_CONTEXT tokens per row
# Long context: the default global batch is set in tokens so a run keeps a sensible number of optimizer steps.
# 2^19 = 524,288 tokens per step is Tulu 3's SFT batch (effective batch 128 × max length 4,096; Lambert et al.
# 2024, "Tulu 3", arXiv:2411.15124, Table "SFT hyperparameters"); 64 sequences of 8,192 tokens is the same size,
# so rows up to 8,192 tokens keep 64 sequences and longer rows take 2^19 / seq_len (at least 1).
DEFAULT_GLOBAL_BATCH_TOKENS = 2**19
MIN_OPTIMIZER_STEPS = 100  # fewer steps than this: the plan warns and names the flag that changes it
MAX_TOP = 10_000  # candidates a plan lists
MIN_USD = 0.01  # the smallest budget: a cent, the finest amount a plan prints (advisor/units.py money)
MIN_HOURS = 1 / 60  # the shortest deadline, a minute: provisioning alone takes minutes (a plan's setup hours)
# Fields that must be whole numbers, booleans or one of a few words in a plan file or a library call
# (pydantic's lax mode would read 2.7 as an error but "yes" as True: a plan file says true/false).
_BOOL_FIELDS = ("spot", "allow_stale", "no_marketplace", "distinct", "padded", "use_stored_measurements", "skip_bad_rows")
_INT_FIELDS = ("seq_len", "global_batch", "global_batch_tokens", "max_gpus", "max_nodes", "top")
# Stack fields a plan may pin (cli/options.py offers the same set; tests check they agree)
PIN_FIELDS = ("lora_rank", "lora_alpha", "lora_dropout", "lora_targets", "adapter_dtype", "dora", "modules_to_save",
              "double_quant", "bnb_saves_inputs", "precision", "optimizer", "grad_checkpointing", "attention",
              "liger", "loss", "compile", "sharding", "offload", "framework")


def parse_count(value: Any, option: str, maximum: float = MAX_TOKENS) -> float | None:
    """'50M', '1.5B', '2e9', 1000 -> a positive number up to `maximum` (None and '' stay None)."""
    if value is None or value == "":
        return None

    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise BadInput(f"--{option}: expected a positive count such as 50M, 1.5B or 2e9 (got a {type(value).__name__}).")
    return float(parse_param_count(value, maximum, f"--{option}"))


def parse_whole(value: Any, option: str, maximum: float = MAX_TOKENS) -> int | None:
    """A count of things that come whole (examples, pairs, prompts): '10k', 5000, 1e6; 1.5 is refused, never
    rounded to 2 (None and '' stay None)."""
    n = parse_count(value, option, maximum)
    if n is None:
        return None
    exact = _exact(value)
    if exact is not None and abs(exact - n) > 1e-9 * n:
        raise BadInput(f"--{option}: expected a whole number (got {plain(value)[:40]!r}).")
    return int(n)


def _exact(value: Any) -> float | None:
    """The number a count spells before rounding ('1.5' -> 1.5, '2.5k' -> 2500.0); None where unreadable."""
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip().replace("_", "").replace(",", "").lower()
    mult = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}.get(text[-1:], 1.0)
    try:
        return float(text[:-1] if mult != 1.0 else text) * mult
    except (ValueError, OverflowError):
        return None


def check_text(option: str, value: Any) -> None:
    """Refuse a value holding a control character, line break or bidirectional override (U+000A, U+0085,
    U+2028, ...) under the option's name, before any work (the plan would refuse it only in its record)."""
    if isinstance(value, str):
        bad = refused_char(value)
        if bad:
            raise BadInput(f"{option}: the control character {bad} is refused (give printable text: no line "
                           "breaks, escape sequences or bidirectional overrides).")


def parse_hours(value: Any, option: str = "deadline") -> float | None:
    """'36', '36h', '2d', '90m', '1w' -> hours (None and '' stay None)."""
    if value is None or value == "":
        return None
    text = str(value).strip().lower()
    mult = {"h": 1.0, "d": 24.0, "m": 1 / 60, "w": 168.0}.get(text[-1:], None)
    try:
        hours = float(text[:-1]) * mult if mult else float(text)
    except (ValueError, OverflowError):
        raise BadInput(f"--{option}: expected hours such as 36, 36h, 2d or 90m (got {plain(value)[:80]!r}).") from None
    if not math.isfinite(hours) or hours <= 0:
        raise BadInput(f"--{option}: must be a positive, finite duration (got {plain(value)[:80]!r}).")
    if hours < MIN_HOURS:
        raise BadInput(f"--{option}: at least one minute (1m; got {plain(value)[:80]!r}).")
    if hours > MAX_HOURS:
        raise BadInput(f"--{option}: at most {MAX_HOURS:,} hours (got {plain(value)[:80]!r}).")
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
    seq_len: int = Field(2048, gt=0, le=MAX_SEQ_LEN)
    global_batch: int | None = Field(None, gt=0, le=MAX_BATCH, description="sequences per optimizer step")
    global_batch_tokens: int | None = Field(None, gt=0, le=MAX_BATCH * MAX_SEQ_LEN)
    methods: tuple[str, ...] = METHODS
    providers: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    spot: bool = Field(False, description="also price spot capacity, shown beside the on-demand ranking")
    allow_stale: bool = Field(False, description="rank stale prices even when a fresh offer exists")
    no_marketplace: bool = Field(False, description="leave out marketplace and community hosts (peer-run machines)")
    max_gpus: int | None = Field(None, gt=0, le=MAX_GPUS)
    max_nodes: int = Field(1, gt=0, le=MAX_NODES)
    budget: float | None = None
    deadline_hours: float | None = None
    headroom: float = 0.10
    mfu: float | None = None
    setup_hours: float | None = None
    sort: RankBy | str = RankBy.COST  # a string until checked (_check), then the RankBy
    risk: str = Field(DEFAULT_RISK, description="the one quantile of the time model's held-out error every candidate "
                                                "is ranked, shown and checked against --budget/--deadline at "
                                                "(p50, p80, p90; docs/plans.md says why p80 is the default)")
    time_value: float = Field(DEFAULT_TIME_VALUE, description="USD per wall-clock hour of waiting: rows rank on "
                                                            "cost + hours x this, both at --risk (0: cost alone)")
    top: int = Field(10, gt=0, le=MAX_TOP)
    interruptions_per_hour: float | None = Field(None, description="spot interruptions per instance-hour")
    checkpoint_interval_hours: float | None = Field(None, description="hours between checkpoints (default: Young's optimum)")
    network_gbps: float | None = None
    distinct: bool = Field(True, description="one row per offer × node count × method (its best stack)")
    prices: tuple[str, ...] = Field((), description="price sheets that win over the bundled snapshot")
    discount: tuple[str, ...] = Field((), description="provider=fraction, e.g. aws=0.3")
    skip_bad_rows: bool = Field(False, description="leave out unreadable rows of the user's price sheets")
    command: str = ""
    pins: dict[str, Any] = Field(default_factory=dict, description="stack settings the user fixed (Stack fields); "
                                                                   "every other dimension is searched")
    padded: bool = False
    # SFT (default), DPO or GRPO and their settings (advisor/objective.py). Tokens, seq_len and the
    # global batch count rows through the policy: DPO 2 per pair (prompt + response each), GRPO completions
    # (prompt + completion each). With GRPO an unset `vllm` is searched (none, colocate, server).
    objective: Objective = Field(default_factory=lambda: SFT)
    vllm_searched: bool = Field(False, description="GRPO: the planner tries each vLLM mode (--vllm not given)")
    # plan --dataset --padded: computed tokens per kept token with padded batches of 1, 2, ... rows (the dataset's
    # lengths, advisor.workload.length_stats.padding_factors); each candidate is timed at its own micro-batch's factor.
    # Empty: the tokens are what is computed. Set by cli/workload_sources.py, never read from a plan file.
    padding: tuple[float, ...] = Field((), max_length=1024)
    # measured runs (advisor/workload/measurements.py): measured.json files, and whether the store applies too
    measured: tuple[str, ...] = Field((), description="measured.json files (launch.sh --benchmark) whose rate "
                                                      "replaces the time model's for matching candidates")
    use_stored_measurements: bool = Field(True, description="also apply the measurement store's runs "
                                                            "(gpu-advisor calibrate); false: --no-measured")
    _measurements: Any = PrivateAttr(None)  # read once per request (advisor.workload.measurements.for_request)

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

    @field_validator(*_BOOL_FIELDS, mode="before")
    @classmethod
    def _strict_bool(cls, v: Any, info) -> Any:
        """true/false only: a quoted 'no' or 'off' in a YAML file is a string, not a switch."""
        if isinstance(v, bool):
            return v
        raise BadInput(f"--{info.field_name.replace('_', '-')}: expected true or false (got {v!r:.80}).")

    @field_validator(*_INT_FIELDS, mode="before")
    @classmethod
    def _whole(cls, v: Any, info) -> Any:
        """Whole numbers only (a float that is one, such as 2048.0, is accepted; NaN, inf, 2.5, '1e9' are not)."""
        if v is None or isinstance(v, int) and not isinstance(v, bool):
            return v
        name = info.field_name.replace("_", "-")
        if isinstance(v, float) and math.isfinite(v) and v.is_integer():
            return int(v)
        if isinstance(v, str) and v.strip().lstrip("+").isdigit():
            return int(v.strip())
        raise BadInput(f"--{name}: expected a whole number (got {v!r:.80}).")

    @field_validator("epochs", "budget", "headroom", "mfu", "setup_hours", "interruptions_per_hour",
                     "checkpoint_interval_hours", "network_gbps", "time_value", mode="before")
    @classmethod
    def _number(cls, v: Any, info) -> Any:
        """A finite number (a YAML 'many', .nan or .inf is refused here, naming the option)."""
        name = {"checkpoint_interval_hours": "checkpoint-every"}.get(info.field_name, info.field_name.replace("_", "-"))
        if v is None:
            return v
        if isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                raise BadInput(f"--{name}: expected a number (got {v!r:.80}).") from None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise BadInput(f"--{name}: expected a number (got {v!r:.80}).")
        if not math.isfinite(v):
            raise BadInput(f"--{name}: must be a finite number (got {v}).")
        return v

    @field_validator("methods", "providers", "regions", "gpus", "prices", "discount", mode="before")
    @classmethod
    def _lists(cls, v: Any, info) -> tuple[str, ...]:
        """A comma list (or a list of them); a value that is only commas names nothing and is refused, never
        read as 'not given' (which would run unfiltered)."""
        option = _LIST_FLAGS.get(info.field_name, f"--{info.field_name}")
        for item in v if isinstance(v, (list, tuple)) else [v]:
            check_text(option, item)
        out = parse_list(v)
        raw = "".join(str(x) for x in (v if isinstance(v, (list, tuple)) else [v]) if x is not None)
        if not out and raw.strip():
            raise BadInput(f"{option}: {plain(raw)[:40]!r} names nothing; give a comma list of names, or leave "
                           "the option out.")
        return out

    @field_validator("model", "sort", "risk", mode="before")
    @classmethod
    def _text(cls, v: Any, info) -> Any:
        check_text(f"--{info.field_name}", v)
        return v

    @field_validator("regions", mode="after")
    @classmethod
    def _regions(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        """Two-letter codes must be ISO countries or continents; longer words are region names (checked
        against the sheets when planning)."""
        for code in v:
            if len(code) <= 2 and code.upper() not in geo.CONTINENTS and code.upper() not in geo.countries():
                raise BadInput(f"--regions: {code!r:.20} is neither an ISO 3166 country code (DE, US, JP) nor a "
                               f"continent ({', '.join(geo.CONTINENTS)}).")
        return v

    @field_validator("measured", mode="before")
    @classmethod
    def _measured(cls, v: Any) -> tuple[str, ...]:
        """File paths as given (a path may hold a comma); each is read and validated when planning."""
        if v is None:
            return ()
        return tuple(str(x) for x in (v if isinstance(v, (list, tuple)) else [v]))

    @field_validator("deadline_hours", mode="before")
    @classmethod
    def _deadline(cls, v: Any) -> float | None:
        return parse_hours(v)

    @field_validator("pins", mode="before")
    @classmethod
    def _pins(cls, v: Any) -> dict[str, Any]:
        """Only Stack fields a plan may pin (not method: --methods; not gpus: searched), validated by
        building a stack from them so a bad value is refused before any work."""
        pins = {k: val for k, val in dict(v or {}).items() if val is not None}
        bad = sorted(set(pins) - set(PIN_FIELDS))
        if bad:
            raise BadInput(f"--{bad[0].replace('_', '-')}: not a stack setting a plan can pin; pins: "
                           f"{', '.join(PIN_FIELDS)}.")
        for key, val in pins.items():  # 'BF16' in a plan file means bf16, as on the command line
            choices = _choices(Stack.model_fields[key].annotation)
            if choices and isinstance(val, str):
                pins[key] = check_choice(f"--{key.replace('_', '-')}", (val,), choices)[0]
        probe = {"method": "lora", **pins}
        if pins.get("precision") == "fp32":
            probe["method"] = "full"
        try:
            Stack(**probe)
        except ValidationError as exc:
            raise BadInput(validation_message(exc)) from None
        return pins

    @model_validator(mode="after")
    def _check(self) -> PlanRequest:
        self.methods = tuple(dict.fromkeys(check_choice("--methods", self.methods, METHODS))) or METHODS
        self.sort = self.sort.lower() if isinstance(self.sort, str) else self.sort
        self.risk = self.risk.lower() if isinstance(self.risk, str) else self.risk
        for key, value in self.pins.items():  # a switch is true/false, not 'no' (which pydantic reads as False)
            if Stack.model_fields[key].annotation is bool and not isinstance(value, bool):
                raise BadInput(f"--{key.replace('_', '-')}: expected true or false (got {value!r:.80}).")
        for check in (_check_workload, _check_money_and_time, _check_rates, _check_words, _check_objective,
                      _check_global_batch):
            check(self)
        if self.measured:  # a bad measured.json is refused before any planning (exit 2)
            self._measurements = gather(self.measured, self.use_stored_measurements)
        return self

    @property
    def train_tokens(self) -> float:
        return self.tokens * self.epochs

    def padding_factor(self, micro_batch: int) -> float:
        """Computed tokens per kept token at this micro-batch (1 for packed batches or --tokens)."""
        return self.padding[min(micro_batch, len(self.padding)) - 1] if self.padding else 1.0

    @property
    def sequences_per_step(self) -> int:
        """The global batch in sequences (from --global-batch, else --global-batch-tokens, else 64 sequences
        or DEFAULT_GLOBAL_BATCH_TOKENS tokens, whichever is fewer sequences: long rows keep enough steps)."""
        if self.global_batch:
            return self.global_batch
        if self.global_batch_tokens:
            return max(1, round(self.global_batch_tokens / self.seq_len))
        if not self.objective.is_sft:  # DPO/GRPO rows: TRL's own defaults count sequences (GRPO: groups)
            return DEFAULT_GLOBAL_BATCH
        return max(1, min(DEFAULT_GLOBAL_BATCH, DEFAULT_GLOBAL_BATCH_TOKENS // self.seq_len))

    @property
    def optimizer_steps(self) -> int:
        """Optimizer steps the whole run takes at the requested global batch."""
        return max(1, math.ceil(self.train_tokens / (self.sequences_per_step * self.seq_len)))

    def spec(self) -> ModelSpec:
        if isinstance(self.model, ModelSpec):
            return self.model

        return load_model(self.model)

    # ------------------------------------------------------------------ from flags and files

    @classmethod
    def from_options(cls, options: dict[str, Any], plan_file: str | Path | None = None) -> PlanRequest:
        """Flags over the YAML plan file over the defaults. Keys use the CLI's spelling
        (`examples`, `avg_tokens`, `deadline`, `all_stacks`, `gpu`, `spot`, ...)."""
        merged: dict[str, Any] = {}
        if plan_file:  # the file's dataset / config keys are read by cli/workload_sources.py
            merged.update({k: v for k, v in read_plan_file(Path(plan_file)).items() if k not in SOURCE_FILE_KEYS})
        merged.update({k: v for k, v in options.items() if v is not None and v != ()})
        return cls(**_to_fields(merged))


def _check_workload(r: PlanRequest) -> None:
    """Epochs, tokens and the padding factors: positive, finite, in range."""
    for name, value in (("epochs", r.epochs), ("tokens", r.tokens)):
        if not math.isfinite(value) or value <= 0:
            raise BadInput(f"--{name}: must be a positive, finite number (got {value}).")
    if r.epochs > MAX_EPOCHS:
        raise BadInput(f"--epochs: at most {MAX_EPOCHS:,} (got {r.epochs:g}).")
    if r.tokens > MAX_TOKENS:
        raise BadInput(f"--tokens: at most {MAX_TOKENS:,} tokens per epoch (got {r.tokens:.3g}).")
    if not all(math.isfinite(f) and f >= 1.0 for f in r.padding):
        raise BadInput("--padded: padding factors must be finite and at least 1 (computed >= kept tokens).")


def _check_money_and_time(r: PlanRequest) -> None:
    """The budget (a cent to MAX_USD), the deadline (a minute up: parse_hours), setup and checkpoint hours."""
    if r.budget is not None and not (math.isfinite(r.budget) and r.budget > 0):
        raise BadInput(f"--budget: must be a positive amount of USD (got {r.budget}).")
    if r.budget is not None and r.budget > MAX_USD:
        raise BadInput(f"--budget: at most {MAX_USD:,} USD (got {r.budget:.3g}).")
    if r.budget is not None and r.budget < MIN_USD:
        raise BadInput(f"--budget: at least {MIN_USD} USD, the smallest amount a plan shows (got {r.budget:.3g}).")
    for name, value in (("setup-hours", r.setup_hours), ("checkpoint-every", r.checkpoint_interval_hours)):
        if value is not None and value > MAX_HOURS:
            raise BadInput(f"--{name}: at most {MAX_HOURS:,} hours (got {value:g}).")
    if r.checkpoint_interval_hours is not None and r.checkpoint_interval_hours <= 0:
        raise BadInput(f"--checkpoint-every: must be a positive number of hours (got {r.checkpoint_interval_hours:g}).")
    if r.setup_hours is not None and not (math.isfinite(r.setup_hours) and r.setup_hours >= 0):
        raise BadInput(f"--setup-hours: must be a finite number of hours >= 0 (got {r.setup_hours}).")
    if not 0 <= r.time_value <= MAX_TIME_VALUE:
        raise BadInput(f"--time-value: must be between 0 and {MAX_TIME_VALUE:,.0f} USD per hour (got {r.time_value:g}).")


def _check_rates(r: PlanRequest) -> None:
    """Fractions and rates in their ranges."""
    if r.interruptions_per_hour is not None and not 0 <= r.interruptions_per_hour <= 1000:
        raise BadInput(f"interruptions_per_hour: must be between 0 and 1,000 (got {r.interruptions_per_hour:g}).")
    if r.network_gbps is not None and not 0 < r.network_gbps <= 100_000:
        raise BadInput(f"network_gbps: must be between 0 and 100,000 Gb/s (got {r.network_gbps:g}).")
    if not 0 <= r.headroom < 1:
        raise BadInput(f"--headroom: must be a fraction in [0, 1), got {r.headroom}.")
    if r.mfu is not None and not 0 < r.mfu <= 1:
        raise BadInput(f"--mfu: must be a fraction in (0, 1], got {r.mfu}.")


def _check_words(r: PlanRequest) -> None:
    if r.sort not in ("cost", "time"):
        raise BadInput(f"--sort: expected cost or time, got {plain(r.sort)[:40]!r}.")
    r.sort = RankBy(r.sort)
    if r.risk not in RISKS:
        raise BadInput(f"--risk: expected one of {', '.join(RISKS)}, got {plain(r.risk)[:40]!r}.")


def _check_objective(r: PlanRequest) -> None:
    """The row length of a DPO / GRPO request, and GRPO's whole prompt groups per step."""
    o = r.objective
    if "seq_len" not in r.model_fields_set and not o.is_sft:  # a library caller's objective sets the row
        r.seq_len = o.grpo_seq_len() if o.kind == "grpo" else DPO_MAX_LENGTH
    if o.kind != "grpo":
        return
    if r.sequences_per_step % o.num_generations:
        raise BadInput(f"--global-batch: GRPO's global batch counts completions, {r.sequences_per_step} is not a "
                       f"multiple of --num-generations {o.num_generations} (TRL refuses it: "
                       "grpo_config.py:1131-1135).")
    if r.seq_len != o.grpo_seq_len():
        raise BadInput(f"--seq-len: {r.seq_len} differs from --max-prompt-length + --max-completion-length "
                       f"({o.grpo_seq_len()}); give one or the other.")


def _check_global_batch(r: PlanRequest) -> None:
    """--global-batch-tokens holds whole rows of --seq-len: at least one, at most MAX_BATCH (never rounded
    up to a row, or past the batch the shapes allow, without saying so)."""
    n = r.global_batch_tokens
    if n is None or r.global_batch:
        return
    if n < r.seq_len:
        raise BadInput(f"--global-batch-tokens: {n:,} tokens is less than one row of --seq-len {r.seq_len:,}; give "
                       f"at least {r.seq_len:,} (or --global-batch N sequences).")
    if n / r.seq_len > MAX_BATCH:
        raise BadInput(f"--global-batch-tokens: at most {MAX_BATCH:,} rows of --seq-len {r.seq_len:,} per step "
                       f"({MAX_BATCH * r.seq_len:,} tokens; got {n:,}).")


# CLI/plan-file spelling -> PlanRequest field
_ALIASES = {"deadline": "deadline_hours", "gpu": "gpus", "model_arg": "model", "checkpoint_every": "checkpoint_interval_hours",
            "bnb_legacy": "bnb_saves_inputs"}
# `plan --dataset / --from-config ...` as plan-file keys (paths relative to the plan file's folder)
SOURCE_FILE_KEYS = ("dataset", "text_field", "messages_field", "tokenizer", "from_config")
FILE_KEYS = ("model", "tokens", "examples", "avg_tokens", "pairs", "prompts", *OPTION_FIELDS, "epochs", "seq_len",
             "global_batch", "global_batch_tokens",
             "methods", "budget", "deadline", "providers", "regions", "no_marketplace", "gpu", "spot", "max_gpus", "max_nodes",
             "headroom", "mfu", "prices", "discount", "sort", "top", "setup_hours", "all_stacks", "allow_stale",
             "skip_bad_rows", "checkpoint_every", "padded", "risk", "time_value", "measured", "no_measured", *PIN_FIELDS,
             *SOURCE_FILE_KEYS)


def _objective(out: dict[str, Any]) -> None:
    """The objective options (CLI / plan-file spelling) -> `objective`, its row length -> `seq_len`, and the
    workload in the units of the objective (--pairs: DPO preference pairs; --prompts: GRPO prompts) -> tokens
    through the policy."""
    given = out.get("objective")
    vllm_given = out.get("vllm") not in (None, "") or isinstance(given, Objective)
    if isinstance(given, Objective):
        objective = given
        out.pop("objective")
        pop_objective(out)
    else:
        objective = objective_of(pop_objective(out))
    seq = out.get("seq_len")
    if objective.kind == "grpo":
        objective = _grpo_row(out, objective, seq)
        out.setdefault("vllm_searched", not vllm_given)
    elif objective.kind == "dpo" and seq in (None, ""):
        out["seq_len"] = DPO_MAX_LENGTH  # DPOConfig.max_length default (trl/trainer/dpo_config.py:195)
    pairs, prompts = out.pop("pairs", None), out.pop("prompts", None)
    if pairs not in (None, "") and objective.kind != "dpo":
        raise BadInput("--pairs: preference pairs are DPO's unit; add --objective dpo (or give --tokens).")
    if prompts not in (None, "") and objective.kind != "grpo":
        raise BadInput("--prompts: prompts are GRPO's unit; add --objective grpo (or give --tokens).")
    n_pairs, n_prompts = parse_whole(pairs, "pairs"), parse_whole(prompts, "prompts")
    if out.get("tokens") in (None, ""):
        row = int(out.get("seq_len") or (objective.grpo_seq_len() if objective.kind == "grpo" else 2048))
        if n_pairs is not None:
            out["tokens"] = _tokens_of("pairs", n_pairs, 2, row, "2 rows")
        elif n_prompts is not None:
            out["tokens"] = _tokens_of("prompts", n_prompts, objective.num_generations, row,
                                       f"{objective.num_generations} completions")
    elif n_pairs is not None or n_prompts is not None:
        raise BadInput(f"--{'pairs' if n_pairs is not None else 'prompts'}: give the workload as --tokens or in "
                       "the objective's units, not both.")
    out["objective"] = objective


def _grpo_row(out: dict[str, Any], objective: Objective, seq: Any) -> Objective:
    """A GRPO row is prompt + completion: --seq-len sets the prompt beside --max-completion-length, else the
    objective's row is the sequence length."""
    if seq in (None, ""):
        out["seq_len"] = objective.grpo_seq_len()
        return objective
    if objective.prompt_length is not None:
        return objective
    seq = int(seq)
    if seq <= objective.max_completion_length:
        raise BadInput(f"--seq-len: {seq} leaves no prompt beside --max-completion-length "
                       f"{objective.max_completion_length}.")
    return objective.model_copy(update={"prompt_length": seq - objective.max_completion_length})


def _tokens_of(option: str, count: int, rows: int, row: int, each: str) -> float:
    """Tokens per epoch through the policy for `count` units of `rows` rows of `row` tokens, at most MAX_TOKENS
    (refused under the option the user gave, not --tokens)."""
    tokens = float(count) * rows * row
    if tokens > MAX_TOKENS:
        raise BadInput(f"--{option}: {count:.3g} {option} are {tokens:.3g} tokens per epoch ({each} of {row:,} "
                       f"tokens each); at most {MAX_TOKENS:.0e} tokens are accepted.".replace("e+", "e"))
    return tokens


def _to_fields(options: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    pins = dict(options.pop("pins", None) or {})
    for key, value in options.items():
        key = _ALIASES.get(key, key)
        if key in PIN_FIELDS:
            if value is not None:
                pins[key] = value
        else:
            out[key] = value
    out["pins"] = pins
    _objective(out)
    if "no_measured" in out:  # --no-measured: ignore the measurement store
        if not isinstance(out["no_measured"], bool):
            raise BadInput(f"--no-measured: expected true or false (got {out['no_measured']!r:.80}).")
        out["use_stored_measurements"] = not out.pop("no_measured")
    if "all_stacks" in out:
        if not isinstance(out["all_stacks"], bool):
            raise BadInput(f"--all-stacks: expected true or false (got {out['all_stacks']!r:.80}).")
        out["distinct"] = not out.pop("all_stacks")
    _examples(out)
    if out.get("global_batch_tokens") not in (None, ""):
        out["global_batch_tokens"] = int(parse_count(out["global_batch_tokens"], "global-batch-tokens") or 0) or None
    if not out.get("model"):
        raise BadInput("--model: which model? Pass a catalog name, Hugging Face id or config.json path.")
    return out


def _examples(out: dict[str, Any]) -> None:
    """--examples × --avg-tokens -> tokens; both checked whenever given (never dropped beside --tokens)."""
    examples, avg = out.pop("examples", None), out.pop("avg_tokens", None)
    e, a = parse_whole(examples, "examples"), parse_count(avg, "avg-tokens")
    if out.get("tokens") not in (None, ""):
        if e is not None or a is not None:
            raise BadInput(f"--{'examples' if e is not None else 'avg-tokens'}: give the dataset size as --tokens N "
                           "or as --examples N with --avg-tokens T, not both.")
        return
    if e is None or a is None:
        raise BadInput("--tokens: give the dataset size as --tokens N, or --examples N with --avg-tokens T.")
    if e * a > MAX_TOKENS:
        raise BadInput(f"--examples: {e:.3g} examples × --avg-tokens {a:.3g} are {e * a:.3g} tokens per epoch; at "
                       f"most {MAX_TOKENS:.0e} are accepted.".replace("e+", "e"))
    out["tokens"] = e * a


MAX_PLAN_FILE_BYTES = 1_000_000  # a plan file is a few lines


def read_plan_file(path: Path) -> dict[str, Any]:
    """The fields of a YAML plan file, checked against the plan options. Read as data with
    pricing.files.load_yaml (size, nesting and alias limits; no tags that build objects)."""
    what = f"--file {plain(path)}"
    try:
        data = load_yaml(read_text(path, what, max_bytes=MAX_PLAN_FILE_BYTES), what,
                         max_bytes=MAX_PLAN_FILE_BYTES, max_depth=20, max_nodes=100_000)
    except PriceInputError as exc:
        raise BadInput(str(exc)) from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise BadInput(f"{what}: must hold a mapping of plan fields (field: value lines).")
    out = {}
    for key, value in data.items():
        k = str(key).replace("-", "_")
        if k == "deadline_hours":
            k = "deadline"
        if k not in FILE_KEYS:
            raise BadInput(f"{what}: unknown field {plain(key)[:80]!r}; valid: {', '.join(sorted(FILE_KEYS))}.")
        out[k] = value
    return out


def check_choice(option: str, wanted, valid) -> tuple[str, ...]:
    """`wanted` in the spelling of `valid`, matched in any case ('LoRA' -> 'lora'); names not in
    `valid` are refused under the option the user typed, listing the valid ones."""
    valid = sorted(set(valid))
    low = {v.lower(): v for v in valid}
    bad = [w for w in wanted if str(w).lower() not in low]
    if bad:
        raise BadInput(f"{option}: unknown value {', '.join(repr(b) for b in bad)}; valid: {', '.join(valid)}.")
    return tuple(low[str(w).lower()] for w in wanted)


def _choices(annotation) -> tuple[str, ...]:
    """The string values a Literal (or Optional Literal) field takes; () for any other type."""
    from typing import Literal, get_args, get_origin

    if get_origin(annotation) is Literal:
        args = get_args(annotation)
        return args if all(isinstance(a, str) for a in args) else ()
    return tuple(c for a in get_args(annotation) for c in _choices(a))
