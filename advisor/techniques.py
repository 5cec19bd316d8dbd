"""Optimizers as data: one row of advisor/data/optimizers.csv per optimizer, loaded once into frozen rows.

A row says what the optimizer keeps per trainable parameter and how that scales, what one step moves, and the
names every trainer and config format uses for it, with the code it was read from (`source`). The estimator, the
time model, the config readers, the planner and the launch bundle ask these rows; adding an optimizer is one row.

Columns:
  name                 our name (`--optimizer`, Stack.optimizer)
  states               per-parameter state tensors (AdamW: exp_avg, exp_avg_sq; SGD: the momentum buffer)
  state_dtype          param (the parameter's dtype, torch's default), fp32, or int8 (block-wise quantised)
  quant_block          int8 states: elements per fp32 absmax constant (bitsandbytes: 2048)
  fp32_master          yes: keeps fp32 master weights when the parameters are 16-bit
  factored             yes: factored second moment (Adafactor: one row + one column factor per matrix)
  eight_bit, paged     8-bit states; states in CUDA unified memory (bitsandbytes paged optimizers)
  searched             the planner tries it when --optimizer is not pinned
  package              the pip package the step imports beyond torch (launch requirements.txt)
  offload_host_bytes   host RAM per trainable parameter under optimizer CPU offload
  step_bytes_pure16    memory traffic of one step per trainable parameter, pure 16-bit weights
  step_bytes_amp       the same with fp32 master weights (mixed precision, DeepSpeed's 16-bit modes)
  hf_optim             the transformers TrainingArguments `optim` the bundle writes (TRL, axolotl's `optimizer`
                       and LLaMA-Factory's `optim` take the same names)
  hf_optim_read        `optim` names a config may give that train this optimizer (space-separated)
  torchtune_component  torchtune's optimizer._component_ (empty: none)
  impl                 what the estimate's assumptions call it (empty: the name)
  state_note           the memory formula of the states ({b}: bytes per parameter); copy_note: modules_to_save's
  memory_source        the source the memory component cites
  source               where each figure and name above was read (repository + path + commit, paper)
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from advisor.errors import BadInput

OPTIMIZERS_FILE = Path(__file__).parent / "data" / "optimizers.csv"
STATE_DTYPES = ("param", "fp32", "int8")
_STATE_BYTES = {"fp32": 4, "int8": 1}
_ABSMAX_BYTES = 4  # one fp32 constant per quantisation block


@dataclass(frozen=True)
class OptimizerRow:
    """One optimizer's facts (a row of optimizers.csv)."""

    name: str
    states: int
    state_dtype: str
    quant_block: int
    fp32_master: bool
    factored: bool
    eight_bit: bool
    paged: bool
    searched: bool
    package: str
    offload_host_bytes: float
    step_bytes_pure16: float
    step_bytes_amp: float
    hf_optim: str
    hf_optim_read: tuple[str, ...]
    torchtune_component: str
    impl: str
    state_note: str
    copy_note: str
    memory_source: str
    source: str

    def state_bytes(self, param_bytes: int) -> float:
        """Bytes of state per trainable parameter held in `param_bytes`-byte dtype: the states in their dtype,
        the int8 states' fp32 absmax per block, and fp32 master weights where the parameters are 16-bit."""
        each = param_bytes if self.state_dtype == "param" else _STATE_BYTES[self.state_dtype]
        per = self.states * each
        if self.quant_block:
            per += self.states * _ABSMAX_BYTES / self.quant_block
        if self.fp32_master and param_bytes < 4:
            per += 4
        return per

    def note(self, param_bytes: int, *, copy: bool = False) -> str:
        """The memory formula's words for states over `param_bytes`-byte parameters."""
        text = (self.copy_note if copy else self.state_note).replace("{b}", str(param_bytes))
        return text + (" + fp32 master weights" if self.fp32_master and param_bytes < 4 else "")

    def step_bytes(self, mixed: bool) -> float:
        """Memory traffic of one optimizer step per trainable parameter."""
        return self.step_bytes_amp if mixed else self.step_bytes_pure16

    @property
    def label(self) -> str:
        """What the estimate's assumptions call the implementation."""
        return self.impl or self.name


def _flag(path: Path, line: int, column: str, text: str) -> bool:
    if text not in ("yes", "no"):
        raise BadInput(f"{path}: line {line}: {column}: expected yes or no (got {text!r}).")
    return text == "yes"


def _number(path: Path, line: int, column: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadInput(f"{path}: line {line}: {column}: expected a number (got {text!r}).") from None
    if value < 0:
        raise BadInput(f"{path}: line {line}: {column}: expected a number >= 0 (got {text!r}).")
    return int(value) if value.is_integer() else value


def _row(path: Path, line: int, r: dict[str, str]) -> OptimizerRow:
    if r["state_dtype"] not in STATE_DTYPES:
        raise BadInput(f"{path}: line {line}: state_dtype: expected one of {', '.join(STATE_DTYPES)} "
                       f"(got {r['state_dtype']!r}).")
    if not r["name"] or not r["source"].strip():
        raise BadInput(f"{path}: line {line}: every optimizer needs a name and a source.")
    flags = {c: _flag(path, line, c, r[c]) for c in ("fp32_master", "factored", "eight_bit", "paged", "searched")}
    nums = {c: _number(path, line, c, r[c]) for c in ("offload_host_bytes", "step_bytes_pure16", "step_bytes_amp")}
    return OptimizerRow(
        name=r["name"], states=int(_number(path, line, "states", r["states"])), state_dtype=r["state_dtype"],
        quant_block=int(_number(path, line, "quant_block", r["quant_block"])), **flags, **nums,
        package=r["package"], hf_optim=r["hf_optim"], hf_optim_read=tuple(r["hf_optim_read"].split()),
        torchtune_component=r["torchtune_component"], impl=r["impl"], state_note=r["state_note"],
        copy_note=r["copy_note"], memory_source=r["memory_source"], source=r["source"],
    )


@lru_cache(maxsize=4)
def load(path: Path | None = None) -> dict[str, OptimizerRow]:
    """Every optimizer row by name, read once per file (default OPTIMIZERS_FILE). A name, or a config name in
    `hf_optim_read` / `torchtune_component`, given to two rows is refused."""
    path = path or OPTIMIZERS_FILE
    with path.open(encoding="utf-8", newline="") as f:
        rows = [_row(path, i, r) for i, r in enumerate(csv.DictReader(f), start=2)]
    out: dict[str, OptimizerRow] = {}
    seen: dict[str, str] = {}
    for row in rows:
        for key in (row.name, *(f"optim:{n}" for n in row.hf_optim_read),
                    *((f"torchtune:{row.torchtune_component}",) if row.torchtune_component else ())):
            if key in seen:
                raise BadInput(f"{path}: {key} belongs to both {seen[key]} and {row.name}.")
            seen[key] = row.name
        out[row.name] = row
    return out


def rows() -> dict[str, OptimizerRow]:
    """The rows of OPTIMIZERS_FILE (read at the first call; a test may point OPTIMIZERS_FILE at a copy)."""
    return load(OPTIMIZERS_FILE)


def get(name: str) -> OptimizerRow:
    """The row of one of our optimizer names (KeyError for an unknown one: Stack validation names them first)."""
    return rows()[name]


def names() -> tuple[str, ...]:
    """Our optimizer names, in the file's order."""
    return tuple(rows())


def searched() -> tuple[str, ...]:
    """The optimizers the planner tries when --optimizer is not pinned."""
    return tuple(r.name for r in rows().values() if r.searched)


def eight_bit() -> tuple[str, ...]:
    """The 8-bit optimizers (the planner keeps an unpinned one only where it is what makes the run fit)."""
    return tuple(r.name for r in rows().values() if r.eight_bit)


def from_hf_optim(name: str) -> str | None:
    """Our optimizer for a transformers / TRL / axolotl / LLaMA-Factory `optim` name (case-insensitive); None
    where no row reads it."""
    low = name.lower()
    return next((r.name for r in rows().values() if low in r.hf_optim_read), None)


def from_torchtune(component: str) -> str | None:
    """Our optimizer for a torchtune optimizer._component_; None where no row names it."""
    return next((r.name for r in rows().values() if r.torchtune_component and r.torchtune_component == component),
                None)
