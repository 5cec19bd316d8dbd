"""Measured runs: `launch.sh --benchmark` writes measured.json; here it is validated, stored, matched
to plan candidates and turned into their rate, band and memory.

A measurement is shared data (a colleague's file, a ticket attachment), so it is read like a plan
file: a regular file of bounded size and nesting (pricing.files), printable text only (advisor.results'
plan-file rules), the one known schema, strict types (a number is a JSON number: never true or "5"),
finite positive numbers within bounds, a GPU from the GPU table, and a date no later than a day of
clock skew ahead (pricing.schema.FUTURE_SKEW_SECONDS; a run dated 9999 would outrank every real one).

Plausibility (`check_plausible`, where the model is known: a plan, calibrate): the measured tokens/s
must not exceed what the GPUs could do running only the forward pass of the model's matmuls at their
peak dense rate: gpus x peak dense TFLOPs (pricing/data/gpus.csv, the fastest of its bf16, fp16 and
fp32 columns) / (2 x the matmul weights a token passes through). A training step costs at least 2x that
(3x for full fine-tuning: advisor.estimate.throughput.flops_per_token), so a real run stays at or below
half the ceiling; above it the file is wrong (1e10 tokens/s on one L4 made a candidate take 2.8e-7 h).
The floor is PLAUSIBLE_FLOOR (1e-7) of that ceiling, below any run that trains at all (1e-300 tokens/s
priced a run at $2.3e303). A plan names a run by its file name and date, never by the folder it lies
in (a path of the machine, the user's home in it, would reach every shared plan, report and bundle).

Matching (`matches`): the same model, the same GPU model and node count, and the same stack in
every field that moves time or memory (`stack_key`): method, precision, optimizer, checkpointing,
attention, Liger, loss, compile, sharding and GPU count, offload, framework, and for LoRA/QLoRA the
rank, targets, dropout, DoRA, modules_to_save, adapter dtype and 4-bit settings. Left out:
lora_alpha (it scales the adapter's output and costs nothing) and, for full fine-tuning, the
adapter fields (they describe nothing that runs). The shape may differ: the measured rate is scaled
by the time model's own ratio between the two shapes (`apply`).

Band (`apply`): the measured step-time spread (p10-p90 of the timed steps) around the scaled rate,
widened by an extrapolation error that is zero at the measured shape and grows linearly with the
shape distance d = |ln(tokens per micro-batch ratio)| + |ln(accumulation ratio)|, reaching the
time model's own held-out band for the segment (advisor.estimate.throughput.band) at d = ln(16): a shape
16x away from the one measured is as uncertain as a prediction with no measurement.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from advisor.errors import BadInput
from advisor.estimate.engine import Engine
from advisor.estimate.throughput import band
from advisor.model.catalog import check_model_name
from advisor.model.spec import MAX_BATCH, MAX_GPUS, MAX_NODES, MAX_PARAMS, MAX_SEQ_LEN
from advisor.results import StepNumbers, check_gpu
from advisor.results.checks import _check_tree
from advisor.stacks import Shape, Stack
from advisor.text import plain
from advisor.units import TERA
from pricing.cache import cache_dir
from pricing.errors import PriceInputError
from pricing.files import atomic_write, load_json, read_text
from pricing.gpus import get_gpu
from pricing.schema import FUTURE_SKEW_SECONDS

SCHEMA = "gpu-advisor/measurement-1"
MAX_FILE_BYTES = 1_000_000  # a measurement is a few kB (the per-step list included)
MAX_STEPS = 100_000
MAX_BYTES = 2**50  # a petabyte: no GPU or host comes near
MAX_TOKENS_PER_SEC = 1e10
MAX_ALLOC_RETRIES = 10**9
PLAUSIBLE_FLOOR = 1e-7  # the lowest share of the plausibility ceiling a measured rate may be (module docstring)
# The floor whatever the run: PLAUSIBLE_FLOOR of the forward pass of the largest model taken (MAX_PARAMS, 1e14
# parameters: 2e14 FLOPs a token) on a 1 TFLOP/s GPU (the slowest card of pricing/data/gpus.csv does 5.5): 5e-10
# tokens/s. Checked when a run is read, so no run below it is stored, matched or planned with, even one whose
# ceiling cannot be computed (check_plausible).
SLOWEST_TFLOPS = 1.0
MIN_TOKENS_PER_SEC = PLAUSIBLE_FLOOR * SLOWEST_TFLOPS * TERA / (2 * MAX_PARAMS)
EARLIEST_YEAR = 2000  # measured_at before this is not a date of a run of this tool
EXTRAPOLATION_HORIZON = 16.0  # shape ratio at which the band is the time model's own (module docstring)
MEASURED = "measured on"  # how a band_basis from a measured run starts (`is_measured`)
CPU = "cpu"  # gpu_model of a run on the host: valid, stored, never matches a GPU candidate
# Stack fields that do not change what runs (see the module docstring)
IGNORED = ("lora_alpha",)
ADAPTER_FIELDS = ("lora_rank", "lora_alpha", "lora_dropout", "lora_targets", "adapter_dtype", "double_quant",
                  "bnb_saves_inputs", "dora", "modules_to_save")


def _positive(value: float, field: str, upper: float) -> float:
    if not (math.isfinite(value) and 0 < value <= upper):
        raise ValueError(f"{field}: must be a finite number > 0 and at most {upper:g} (got {value})")
    return value


class StepStats(BaseModel):
    """Seconds per timed optimizer step: median, p10, p90 and the steps themselves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    median: float
    p10: float
    p90: float
    count: int = Field(ge=1, le=MAX_STEPS)
    steps: list[float] = Field(default_factory=list, max_length=MAX_STEPS)

    @model_validator(mode="after")
    def _order(self) -> StepStats:
        for name in ("median", "p10", "p90"):
            _positive(getattr(self, name), f"step_seconds.{name}", 1e6)
        for v in self.steps:
            _positive(v, "step_seconds.steps", 1e6)
        if not self.p10 <= self.median <= self.p90:
            raise ValueError("step_seconds: expected p10 <= median <= p90")
        if self.steps and len(self.steps) != self.count:
            raise ValueError(f"step_seconds: {len(self.steps)} steps listed, count says {self.count}")
        return self


class MeasuredShape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    micro_batch: int = Field(gt=0, le=MAX_BATCH)
    seq_len: int = Field(gt=0, le=MAX_SEQ_LEN)
    grad_accum: int = Field(gt=0, le=MAX_BATCH)

    def shape(self) -> Shape:
        return Shape(micro_batch=self.micro_batch, seq_len=self.seq_len, grad_accum=self.grad_accum)


class Measurement(BaseModel):
    """One measured.json (written by the bundle's train.py --benchmark)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: str = Field(alias="schema")
    model: str
    weights: Literal["pretrained", "random-init"] = "pretrained"
    gpu_model: str
    device_name: str = ""
    gpu_count: int = Field(ge=1, le=MAX_GPUS, description="GPUs per node")
    nodes: int = Field(1, ge=1, le=MAX_NODES)
    stack: Stack
    shape: MeasuredShape
    tokens_per_sec: float = Field(description="the whole job: tokens of the timed steps / their wall time")
    step_seconds: StepStats
    warmup_steps: int = Field(0, ge=0, le=MAX_STEPS)
    wall_seconds: float | None = None
    peak_allocated_bytes: int | None = Field(None, ge=0, le=MAX_BYTES)
    peak_reserved_bytes: int | None = Field(None, ge=0, le=MAX_BYTES)
    device_total_bytes: int | None = Field(None, ge=0, le=MAX_BYTES, description="device memory in use (nvidia-smi)")
    device_capacity_bytes: int | None = Field(None, ge=0, le=MAX_BYTES)
    alloc_retries: int | None = Field(None, ge=0, le=MAX_ALLOC_RETRIES)
    host_peak_rss_bytes: int | None = Field(None, ge=0, le=MAX_BYTES)
    versions: dict[str, str] = Field(default_factory=dict, max_length=64)
    measured_at: str
    _origin: str = PrivateAttr("")  # the file it was read from (not part of the file)
    _stored: bool = PrivateAttr(False)  # read from the store (skipped with a warning when implausible)
    _plausible: bool | None = PrivateAttr(None)  # check_plausible's verdict, once the model is known

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: str) -> str:
        if v != SCHEMA:
            raise ValueError(f"schema: expected {SCHEMA!r} (got {v[:60]!r})")
        return v

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        try:
            return check_model_name(v, "model")
        except BadInput as exc:
            raise ValueError(str(exc)) from None

    @field_validator("gpu_model")
    @classmethod
    def _gpu(cls, v: str) -> str:
        return CPU if v.strip().lower() == CPU else check_gpu(v)

    @field_validator("measured_at")
    @classmethod
    def _when(cls, v: str) -> str:
        try:
            when = dt.datetime.fromisoformat(v)
        except ValueError:
            raise ValueError(f"measured_at: expected an ISO date and time such as 2026-12-01T10:00:00+00:00 "
                             f"(got {v[:40]!r})") from None
        if when.tzinfo is None:
            raise ValueError("measured_at: needs a time zone (UTC: +00:00)")
        latest = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=FUTURE_SKEW_SECONDS)
        if when > latest:
            raise ValueError(f"measured_at: {v[:40]} is in the future (more than a day ahead of this clock)")
        if when.year < EARLIEST_YEAR:
            raise ValueError(f"measured_at: {v[:40]} is before {EARLIEST_YEAR}; not the date of a run")
        return v

    @model_validator(mode="after")
    def _numbers(self) -> Measurement:
        _positive(self.tokens_per_sec, "tokens_per_sec", MAX_TOKENS_PER_SEC)
        if self.tokens_per_sec < MIN_TOKENS_PER_SEC:
            raise ValueError(f"tokens_per_sec: {self.tokens_per_sec:.6g} is below {PLAUSIBLE_FLOOR:g} of what the "
                             f"slowest GPU could do on the largest model ({MIN_TOKENS_PER_SEC:g} tokens/s); not a "
                             "measured rate")
        if self.wall_seconds is not None:
            _positive(self.wall_seconds, "wall_seconds", 1e7)
        if self.stack.gpus != self.gpu_count * self.nodes:
            raise ValueError(f"stack.gpus: {self.stack.gpus} is not gpu_count x nodes "
                             f"({self.gpu_count} x {self.nodes})")
        return self

    @property
    def date(self) -> str:
        return self.measured_at[:10]

    @property
    def origin(self) -> str:
        return self._origin

    @property
    def file_name(self) -> str:
        """The name of the file it was read from, without its folder (a stored run: its hash name)."""
        return plain(Path(self._origin).name)[-120:] if self._origin else ""

    def label(self) -> str:
        """How a plan names the run: 'measured on 2026-12-01 (measured.json, 20 steps)': the file's name
        and the date, never its folder (a path of this machine would reach shared plans and reports)."""
        where = f"{self.file_name}, " if self._origin else ""
        return f"{MEASURED} {self.date} ({where}{self.step_seconds.count} steps)"


def is_measured(band_basis: str) -> bool:
    """Whether a candidate's timing comes from a measured run (its band_basis names the run)."""
    return band_basis.startswith(MEASURED)


_STRICT = {"int_type": "expected a whole number", "float_type": "expected a number",
           "bool_type": "expected true or false", "string_type": "expected text"}


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    ctx = err.get("ctx") or {}
    msg = str(ctx["error"]) if isinstance(ctx.get("error"), Exception) else err.get("msg", "invalid value")
    if err.get("type") in _STRICT:
        got = err.get("input")
        msg = f"{_STRICT[err['type']]} (got {'a JSON ' + type(got).__name__ if not isinstance(got, (str, bool, int, float)) else repr(got)[:40]})"
    return msg if not where or msg.startswith(where.split(".")[0]) else f"{where}: {msg}"


def parse(data: Any, what: str) -> Measurement:
    """A measurement from decoded JSON; BadInput (one line naming `what` and the field) otherwise."""
    if not isinstance(data, dict):
        raise BadInput(f"{what}: expected a JSON object written by launch.sh --benchmark.")
    try:
        _check_tree(data, "measurement")
        return Measurement.model_validate(data, strict=True)  # a number is a JSON number: no true, no "5"
    except ValidationError as exc:
        raise BadInput(f"{what}: {_first_error(exc)}.") from None
    except ValueError as exc:
        raise BadInput(f"{what}: {exc}.") from None


def load(path: str | Path, option: str = "measurement") -> Measurement:
    """Read and validate one measured.json (size, nesting, schema, text, numbers); errors name `option`."""
    what = f"{option} {plain(path)}"
    try:
        data = load_json(read_text(path, what, max_bytes=MAX_FILE_BYTES), what, max_bytes=MAX_FILE_BYTES,
                         max_depth=8)
    except PriceInputError as exc:
        raise BadInput(str(exc)) from None
    m = parse(data, what)
    m._origin = str(path)
    return m


# --------------------------------------------------------------------------- the store


def store_dir() -> Path:
    """<cache>/measurements (pricing.cache.cache_dir: $GPU_ADVISOR_CACHE_DIR, else the XDG cache)."""
    return cache_dir() / "measurements"


def store(m: Measurement) -> Path:
    """Write `m` into the store, named by its content's hash (storing the same run twice keeps one)."""
    text = m.model_dump_json(by_alias=True, indent=2) + "\n"
    path = store_dir() / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    atomic_write(path, text)
    return path


def stored() -> list[Measurement]:
    """Every valid measurement in the store; a file that no longer validates is skipped with a warning."""
    import warnings

    folder = store_dir()
    if not folder.is_dir():
        return []
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            m = load(path)
        except BadInput as exc:
            warnings.warn(f"measurement store: skipped {exc}", stacklevel=2)
            continue
        m._stored = True
        out.append(m)
    return out


def gather(files: Iterable[str | Path], use_store: bool = True) -> list[Measurement]:
    """The measurements a plan uses: the given files (validated: a bad one is exit 2), then the store."""
    given = [load(f, "--measured") for f in files]
    return given + (stored() if use_store else [])


# --------------------------------------------------------------------------- matching and scaling


def stack_key(stack: Stack) -> tuple:
    """The stack fields a measurement must share with a candidate (module docstring: which and why)."""
    skip = set(IGNORED) | (set(ADAPTER_FIELDS) if stack.is_full else set())
    return tuple((k, v) for k, v in stack.model_dump().items() if k not in skip)


def matches(m: Measurement, model: str, gpu_model: str, nodes: int, stack: Stack) -> bool:
    return (m.gpu_model == gpu_model and m.nodes == nodes and m.model.casefold() == model.casefold()
            and stack_key(m.stack) == stack_key(stack))


def distance(m: Measurement, shape: Shape) -> float:
    """|ln tokens-per-micro-batch ratio| + |ln accumulation ratio| between the measured shape and `shape`."""
    s = m.shape
    return (abs(math.log(shape.micro_batch * shape.seq_len / (s.micro_batch * s.seq_len)))
            + abs(math.log((shape.grad_accum or 1) / s.grad_accum)))


def best(found: Iterable[Measurement], shape: Shape) -> Measurement | None:
    """The nearest shape first; then the newest run (dates are checked on reading: none lies ahead of the
    clock, so the newest is the newest real run)."""
    ranked = sorted(found, key=lambda m: (distance(m, shape), -dt.datetime.fromisoformat(m.measured_at).timestamp()))
    return ranked[0] if ranked else None


def apply(step: StepNumbers, m: Measurement, at_measured: StepNumbers, shape: Shape,
          model_band: tuple[float, float]) -> StepNumbers:
    """A new step record (Engine.step's) for the candidate at `shape` from measurement `m`:
    tokens/s = measured × predicted(shape) / predicted(measured shape) (`at_measured` is Engine.step
    at the measured shape, same stack and GPU), step seconds and MFU to match, the band of the module
    docstring, and `band_basis` naming the run."""
    ratio = step.tokens_per_sec / at_measured.tokens_per_sec
    tps = m.tokens_per_sec * ratio
    w = min(1.0, distance(m, shape) / math.log(EXTRAPOLATION_HORIZON))
    s = m.step_seconds
    low = tps * s.median / s.p90 * model_band[0] ** w
    high = tps * s.median / s.p10 * model_band[1] ** w
    return step.model_copy(update={
        "tokens_per_sec": float(tps), "step_seconds": float(step.tokens_per_step / tps),
        "mfu": float(step.mfu * tps / step.tokens_per_sec), "tokens_per_sec_low": float(low),
        "tokens_per_sec_high": float(high), "predicted_tokens_per_sec": step.tokens_per_sec,
        "band_basis": m.label() + (f"; scaled from micro-batch {m.shape.micro_batch} x seq {m.shape.seq_len} x "
                                   f"accumulation {m.shape.grad_accum} by the time model" if w else "")})


def ceiling(m: Measurement, engine, gpu) -> float:
    """The most tokens/s the run's GPUs could do on this model (module docstring): all of them running only
    the forward pass of the matmuls a token passes through, at their peak dense rate."""
    peak = max(x for x in (gpu.dense_bf16_tflops, gpu.dense_fp16_tflops, gpu.fp32_tflops) if x) * TERA
    forward = 2.0 * engine.counts(m.stack).matmul_active
    return m.gpu_count * m.nodes * peak / forward


def check_plausible(m: Measurement, engine, gpu, what: str) -> None:
    """BadInput naming `what` when the measured tokens/s is above the ceiling or below PLAUSIBLE_FLOOR of it."""
    try:
        top = ceiling(m, engine, gpu)
    except BadInput:
        raise
    except ValueError:  # a stack this model cannot run (e.g. LoRA targets it lacks): it times no candidate
        return
    gpus = m.gpu_count * m.nodes
    on = f"{gpus} x {gpu.name} on {engine.spec.name}"
    if m.tokens_per_sec > top:
        raise BadInput(f"{what}: tokens_per_sec {m.tokens_per_sec:,.6g} is more than {on} could do ({top:,.6g} tokens/s: "
                       "the forward pass alone at the GPUs' peak dense rate); not a measured rate.")
    if m.tokens_per_sec < top * PLAUSIBLE_FLOOR:
        raise BadInput(f"{what}: tokens_per_sec {m.tokens_per_sec:.6g} is below {PLAUSIBLE_FLOOR:g} of what {on} could "
                       f"do ({top:,.6g} tokens/s); not a measured rate.")


def plausible(m: Measurement, engine, gpu) -> bool:
    """Whether `m` passes `check_plausible`: a stored run that does not is skipped with a warning, a
    --measured file that does not stops the plan (exit 2)."""
    import warnings

    what = f"stored measurement {m.file_name}" if m._stored else f"--measured {plain(m.origin)}"
    try:
        check_plausible(m, engine, gpu, what)
    except BadInput as exc:
        if not m._stored:
            raise
        warnings.warn(f"measurement store: skipped {exc}", stacklevel=2)
        return False
    return True


def memory_excess(m: Measurement, estimate_at_measured) -> int:
    """Bytes the run needed above the estimate at the measured shape (0 when the estimate was safe),
    compared like with like: device total (nvidia-smi) if measured, else reserved, else allocated."""
    for measured, estimated in ((m.device_total_bytes, estimate_at_measured.device_total),
                                (m.peak_reserved_bytes, estimate_at_measured.peak_reserved),
                                (m.peak_allocated_bytes, estimate_at_measured.peak_allocated)):
        if measured is not None:
            return max(0, int(measured) - int(estimated))
    return 0


def adjust(step: StepNumbers, request, engine, stack: Stack, shape: Shape, gpu, nodes: int,
           predict: Callable[[Shape], StepNumbers]) -> StepNumbers:
    """The planner's one call (advisor/planner/configs.py Evaluator.time): `step` replaced by the best
    matching measurement's, with `memory_excess_bytes` for the fit; `step` itself when none matches.
    `predict(shape)` is Engine.step for this config at another shape."""
    runs = for_request(request)
    for m in runs:  # every run of this model is judged once, whichever candidate it would time
        if m._plausible is None and m.gpu_model != CPU and m.model.casefold() == engine.spec.name.casefold():
            m._plausible = plausible(m, engine, get_gpu(m.gpu_model))
    found = [m for m in runs if matches(m, engine.spec.name, gpu.name, nodes, stack) and m._plausible]
    m = best(found, shape)
    if m is None:
        return step

    low, high, _ = band(gpu, stack)
    out = apply(step, m, predict(m.shape.shape()), shape, (low, high))
    return out.model_copy(update={"memory_excess_bytes": int(memory_excess(m, engine.memory(stack, m.shape.shape())))})


def for_request(request) -> list[Measurement]:
    """The request's measurements (`--measured` files, then the store unless `--no-measured`), read once
    per request."""
    cached = getattr(request, "_measurements", None)
    if cached is None:
        cached = gather(request.measured, request.use_stored_measurements)
        request._measurements = cached
    return cached


def measured_peak(peak: int, limit: int, tight: bool, step: StepNumbers, tight_fraction: float) -> tuple[int, bool]:
    """(peak, tight) of a candidate: its estimated peak plus what the matching run needed above the
    estimate (`adjust`'s memory_excess_bytes); tight when that leaves less than the estimator's error
    band below the limit."""
    excess = step.memory_excess_bytes
    if excess <= 0:
        return peak, tight
    peak += excess
    return peak, tight or peak > limit * (1 - tight_fraction)


# --------------------------------------------------------------------------- estimate vs measured


class MemoryCheck(BaseModel):
    """One memory figure, measured against estimated (like with like)."""

    kind: Literal["peak_allocated", "peak_reserved", "device_total"]
    measured_bytes: int | None
    estimated_bytes: int
    ratio: float | None = Field(None, description="measured / estimated")
    safe: bool | None = Field(None, description="the estimate was at least what the run needed")


class Calibration(BaseModel):
    """What `gpu-advisor calibrate` prints: the estimate for the measured setup beside the run."""

    model_config = ConfigDict(frozen=True)

    model: str
    gpu_model: str
    nodes: int
    stack: str
    shape: str
    measured_at: str
    steps: int
    measured_tokens_per_sec: float
    estimated_tokens_per_sec: float | None = Field(None, description="the time model at this setup (None on a CPU run)")
    tokens_per_sec_ratio: float | None = Field(None, description="measured / estimated")
    estimated_band: tuple[float, float] | None = Field(None, description="the time model's p10-p90 tokens/s")
    within_band: bool | None = None
    measured_step_seconds: StepStats
    estimated_step_seconds: float | None = None
    memory: list[MemoryCheck]
    memory_safe: bool | None = Field(None, description="every measured figure at or below its estimate")
    stored_at: str = ""


def compare(m: Measurement, engine=None) -> Calibration:
    """The estimate (memory: advisor.estimate.memory via Engine.memory; time: Engine.step) at the measured
    model, GPU, stack and shape, beside the measurement."""
    engine = engine or Engine.of(m.model)
    shape = m.shape.shape()
    est = engine.memory(m.stack, shape)
    checks = []
    for kind, measured in (("peak_allocated", m.peak_allocated_bytes), ("peak_reserved", m.peak_reserved_bytes),
                           ("device_total", m.device_total_bytes)):
        estimated = int(getattr(est, kind))
        checks.append(MemoryCheck(kind=kind, measured_bytes=measured, estimated_bytes=estimated,
                                  ratio=measured / estimated if measured is not None and estimated else None,
                                  safe=None if measured is None else estimated >= measured))
    known = [c.safe for c in checks if c.safe is not None]
    step = None
    if m.gpu_model != CPU:
        check_plausible(m, engine, get_gpu(m.gpu_model), f"measurement {plain(m.origin) or 'file'}")
        step = engine.step(m.stack, shape, get_gpu(m.gpu_model), nodes=m.nodes)
    predicted = step.tokens_per_sec if step else None
    band_ = (step.tokens_per_sec_low, step.tokens_per_sec_high) if step else None
    return Calibration(
        model=m.model, gpu_model=m.gpu_model, nodes=m.nodes, stack=m.stack.label(),
        shape=f"micro-batch {shape.micro_batch} x seq {shape.seq_len} x accumulation {shape.grad_accum}",
        measured_at=m.measured_at, steps=m.step_seconds.count, measured_tokens_per_sec=m.tokens_per_sec,
        estimated_tokens_per_sec=predicted, tokens_per_sec_ratio=m.tokens_per_sec / predicted if predicted else None,
        estimated_band=band_, within_band=band_[0] <= m.tokens_per_sec <= band_[1] if band_ else None,
        measured_step_seconds=m.step_seconds, estimated_step_seconds=step.step_seconds if step else None,
        memory=checks, memory_safe=all(known) if known else None)
