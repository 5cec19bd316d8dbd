"""Each config's memory fit and step numbers, kept on disk between plans (data only, never code).

Fitting and timing every hardware × stack config is the largest share of a plan's work (issue 51: 0.20 s of the
default plan's 0.9 s, 0.42 s of the 8-node one's 1.2 s, for 1,378 and 4,010 fitted configs), and the answer
depends only on the model, the request's shape and pins, the config and the code — never on prices, budget,
deadline, risk or the tokens to train. So `Evaluator.fit` looks each config up here first, and a plan writes what
it computed for the next one (`gpu-advisor plan` run again with another budget, sheet or node count reuses it).

* Key (one file per key, `<cache>/fits/<key>.json`): a sha256 over this format's version, the Python major.minor,
  every file under advisor/ (sources and data: the estimator, its calibration, the catalog), pricing/*.py and
  pricing/data/gpus.csv, the model spec as JSON, the transformers release the engine applies, the node limit (one
  file per limit) and the request fields the evaluator reads (`REQUEST_FIELDS`; tests/advisor/planner/test_fit_cache.py
  checks by reading advisor/planner/configs.py and objectives.py that no other field is read there). A changed byte
  is a miss.
* Records, per config (GPU model, GPUs per node, nodes, fabric, the stack's field values): the `Fit`, the engine's
  `StepNumbers` and the micro-batch split. The training hours are not stored: `Evaluator.time` computes them from
  the step for this request's tokens and risk, hit or miss.
* Off where the answer is not the estimator's alone: a stand-in memory function (`plan(estimator=...)`) or any
  measured run for the request (`--measured`, the measurement store: advisor/workload/measurements.py).
* Data only: JSON validated whole by pydantic (`_Document`: every field typed, unknown fields refused), read through
  pricing.files (a regular file, at most MAX_BYTES), at most MAX_RECORDS records; a corrupt, truncated or hostile
  file is ignored and recomputed. At most MAX_FILES files are kept (the oldest removed first).
* `WRITE`: False reads, never writes (`gpu-advisor serve` writes no files). `ENABLED`: False turns it off in this
  process (the test suite does, tests/conftest.py). `COUNTS` counts hits, misses and refused files (tests count work
  with it).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from advisor.memo import Memo
from advisor.results import Breakdown, StepNumbers
from advisor.workload import measurements
from pricing import files

VERSION = 1
MAX_BYTES = 40_000_000  # the 8-node default plan writes 4,010 records, about 5 MB
MAX_RECORDS = 50_000
MAX_FILES = 32
ENABLED = True
WRITE = True
COUNTS = {"hits": 0, "misses": 0, "refused": 0, "written": 0}
FORMAT = "gpu-advisor fitted configs"
# What Evaluator.fit / time / settle and advisor/planner/objectives.py read from the request (besides train_tokens,
# risk and padding_factor, which only turn a step into hours, computed every time, and max_gpus / max_nodes, which
# decide which configs are enumerated, not what one holds). sequences_per_step derives from seq_len, global_batch
# and global_batch_tokens.
REQUEST_FIELDS = ("seq_len", "global_batch", "global_batch_tokens", "methods", "headroom", "mfu", "network_gbps",
                  "pins", "padded", "padding", "objective", "vllm_searched")
_ADVISOR = Path(__file__).resolve().parents[1]
_PRICING = _ADVISOR.parent / "pricing"


# A record is four positional lists, in these field orders (names once, not per record: the 8-node plan's 4,010
# records are 2.6 MB this way, 7.6 MB as objects, and validate in a third of the time)
FIT_FIELDS = ("max_micro_batch", "need1", "peak", "cpu_ram", "verified", "tight", "checkpoint_bytes", "peak_phase")
BREAKDOWN_FIELDS = tuple(Breakdown.model_fields)
STEP_FIELDS = tuple(StepNumbers.model_fields)
FitValues = tuple[int, int, int, int, bool, bool, int, str]
BreakdownValues = tuple[tuple(Breakdown.model_fields[f].annotation for f in BREAKDOWN_FIELDS)]
StepValues = tuple[tuple(StepNumbers.model_fields[f].annotation for f in STEP_FIELDS)]


class Record(NamedTuple):
    """One config's answer: Fit's fields, its breakdown and the engine's step (None: it does not fit) and the
    micro-batch split (micro-batch, accumulation, global batch as run), as values in the orders above."""

    fit: FitValues
    breakdown: BreakdownValues | None
    step: StepValues | None
    split: tuple[int, int, int]

    @classmethod
    def of(cls, fitted, timed) -> Record:
        b, t = fitted.breakdown, timed.step if timed else None
        return cls(tuple(getattr(fitted, f) for f in FIT_FIELDS),
                   None if b is None else tuple(getattr(b, f) for f in BREAKDOWN_FIELDS),
                   None if t is None else tuple(getattr(t, f) for f in STEP_FIELDS),
                   (timed.micro_batch, timed.grad_accum, timed.global_batch) if timed else (0, 0, 0))

    @property
    def max_micro_batch(self) -> int:
        return self.fit[0]

    @property
    def tight(self) -> bool:
        return self.fit[5]

    def fit_fields(self) -> dict:
        """Keyword arguments of configs.Fit."""
        b = self.breakdown
        breakdown = None if b is None else Breakdown(**dict(zip(BREAKDOWN_FIELDS, b)))
        return dict(zip(FIT_FIELDS, self.fit), breakdown=breakdown)

    def step_numbers(self) -> StepNumbers | None:
        return None if self.step is None else StepNumbers(**dict(zip(STEP_FIELDS, self.step)))


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["gpu-advisor fitted configs"]
    version: Literal[1]
    key: str
    fields: dict[str, tuple[str, ...]]  # the orders above, checked against this code's on reading
    records: dict[str, tuple[FitValues, BreakdownValues | None, StepValues | None, tuple[int, int, int]]] = Field(
        max_length=MAX_RECORDS)


def _fields() -> dict[str, tuple[str, ...]]:
    return {"fit": FIT_FIELDS, "breakdown": BREAKDOWN_FIELDS, "step": STEP_FIELDS}


def folder() -> Path:
    return files.cache_dir() / "fits"


def _code_digest() -> bytes:
    """sha256 over every file the estimator reads or runs (module docstring), paths and bytes."""
    h = hashlib.sha256()
    named = [(f"advisor/{p.relative_to(_ADVISOR)}", p) for p in _ADVISOR.rglob("*")
             if "__pycache__" not in p.parts and p.is_file()]
    pricing = [*_PRICING.glob("*.py"), _PRICING / "data" / "gpus.csv"]
    named += [(f"pricing/{p.relative_to(_PRICING)}", p) for p in pricing]
    for name, p in sorted(named):
        data = p.read_bytes()
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.digest()


_DIGEST: list[bytes] = []  # computed once per process (a long-lived `serve` does not change its own code)


def key(engine, request) -> str:
    """sha256 over everything a config's record depends on (module docstring)."""
    if not _DIGEST:
        _DIGEST.append(_code_digest())
    fields = request.model_dump(mode="json", include=set(REQUEST_FIELDS) | {"max_nodes"})  # one file per node limit
    h = hashlib.sha256()
    parts = (f"{FORMAT} {VERSION} python {sys.version_info[0]}.{sys.version_info[1]}".encode(), _DIGEST[0],
             engine.spec.model_dump_json().encode(), f"transformers {engine.transformers}".encode(),
             json.dumps(fields, sort_keys=True, default=repr).encode())
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def record_id(cfg, settled: bool = False) -> str:
    """The record's name in the file: the config's hardware and its stack's field values (`settled`: the record
    after Evaluator.settle's exact search)."""
    stack = _STACK_IDS.get(cfg.stack.key)
    if stack is None:  # the stack's values (500 characters) by a 96-bit digest
        stack = _STACK_IDS[cfg.stack.key] = hashlib.blake2b(repr(cfg.stack.key).encode(), digest_size=12).hexdigest()
    return f"{'settled' if settled else 'fit'}|{cfg.gpu.name}|{cfg.per_node}|{cfg.nodes}|{cfg.fabric_gbps!r}|{stack}"


_STACK_IDS: dict[tuple, str] = Memo()  # a plan's ~1,400 configs share a few dozen stacks


class Store:
    """The records of one key: read once, looked up per config, written back when the plan computed new ones."""

    def __init__(self, k: str):
        self.key, self.path = k, folder() / f"{k[:32]}.json"
        self.records: dict[str, Record] = self._read()
        self.new = 0

    def _read(self) -> dict[str, Record]:
        if not os.path.lexists(self.path):
            return {}
        try:
            data = files.read_regular_file(self.path, MAX_BYTES, str(self.path))
            doc = _Document.model_validate_json(data)
        except (OSError, ValueError, ValidationError):  # PriceInputError is a ValueError
            COUNTS["refused"] += 1
            return {}
        if doc.key != self.key or doc.fields != _fields():
            COUNTS["refused"] += 1
            return {}
        return {k: Record(*v) for k, v in doc.records.items()}

    def get(self, cfg, settled: bool = False) -> Record | None:
        found = self.records.get(record_id(cfg, settled))
        COUNTS["hits" if found is not None else "misses"] += 1
        return found

    def put(self, cfg, record: Record, settled: bool = False) -> None:
        if len(self.records) < MAX_RECORDS:
            self.records[record_id(cfg, settled)] = record
            self.new += 1

    def save(self) -> None:
        """Write the records when this plan added any (atomically; a read-only or full cache dir is left alone)."""
        if not (WRITE and self.new):
            return
        doc = {"format": FORMAT, "version": VERSION, "key": self.key, "fields": _fields(), "records": self.records}
        try:
            files.atomic_write(self.path, json.dumps(doc, separators=(",", ":"), allow_nan=False))
            COUNTS["written"] += 1
            _prune(self.path)
        except (OSError, ValueError):  # a read-only or full cache dir; a value JSON cannot hold (inf, nan)
            pass
        self.new = 0


def _prune(kept: Path) -> None:
    """At most MAX_FILES record files: the least recently written go first."""
    found = [p for p in kept.parent.glob("*.json") if len(p.stem) == 32 and p != kept]
    if len(found) < MAX_FILES:
        return
    for p in sorted(found, key=lambda p: p.stat().st_mtime)[: len(found) - MAX_FILES + 1]:
        p.unlink(missing_ok=True)


def open_for(engine, request) -> Store | None:
    """The request's store, or None where records are not the estimator's alone (module docstring)."""
    if not ENABLED or engine.custom_memory or measurements.for_request(request):
        return None
    return Store(key(engine, request))
