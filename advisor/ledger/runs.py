"""What a run left in its bundle folder, read as data: the approval it ran under (approval.json), the budget
callback's log (budget_cap.log.jsonl: billed hours and spend at each event), the Trainer's state (the newest
trainer_state.json under the output folder: steps done of max_steps) and measured.json where a --benchmark ran.
Every file is size-bounded and validated; a folder without an approval is refused with one line."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from advisor import approval as approvals
from advisor.approval import Approval
from advisor.errors import BadInput
from advisor.text import plain
from pricing.files import read_text
from pricing.units import MiB

MAX_FILE_BYTES = 16 * MiB  # an approval, a trainer state or a measured run is kilobytes; a log line per step
MAX_LOG_LINES = 1_000_000
MAX_STATES = 10_000  # checkpoint folders looked at


@dataclass(frozen=True)
class RunActuals:
    """What one run spent, as its files say."""

    approval: Approval
    run: str
    status: str  # 'stopped at cap' | 'finished' | 'running or killed' | 'not started'
    hours: float
    cost_usd: float
    steps: int
    max_steps: int
    tokens_per_sec: float | None


def _approval(folder: Path) -> Approval:
    path = folder / "approval.json"
    if not path.is_file():
        raise BadInput(f"RUN_DIR: {plain(folder.name or folder)} has no approval.json; track reads a bundle written by "
                       "`gpu-advisor launch --approval`.")
    return approvals.load(path, "RUN_DIR")


def _events(folder: Path) -> list[dict]:
    path = folder / "budget_cap.log.jsonl"
    if not path.is_file():
        return []
    events = []
    for i, line in enumerate(read_text(path, "RUN_DIR: budget_cap.log.jsonl", max_bytes=MAX_FILE_BYTES).splitlines()):
        if i >= MAX_LOG_LINES:
            break
        try:
            event = json.loads(line)
        except ValueError:
            continue  # the line a kill cut short
        if isinstance(event, dict) and all(isinstance(event.get(k), (int, float)) and math.isfinite(event[k])
                                           and event[k] >= 0 for k in ("hours", "cost_usd", "step")):
            events.append(event)
    return events


def _trainer_state(folder: Path) -> dict:
    """The newest trainer_state.json (most global steps) under the bundle's output folders."""
    best: dict = {}
    for i, path in enumerate(sorted(folder.glob("*/checkpoint-*/trainer_state.json"))
                             + sorted(folder.glob("*/trainer_state.json"))):
        if i >= MAX_STATES:
            break
        try:
            state = json.loads(read_text(path, "RUN_DIR: trainer_state.json", max_bytes=MAX_FILE_BYTES))
        except Exception:  # noqa: BLE001 - a half-written checkpoint: the others still count
            continue
        if isinstance(state, dict) and isinstance(state.get("global_step"), int) and \
                state["global_step"] >= best.get("global_step", -1):
            best = state
    return best


def _tokens_per_sec(folder: Path, state: dict) -> float | None:
    measured = folder / "measured.json"
    if measured.is_file():
        try:
            value = json.loads(read_text(measured, "RUN_DIR: measured.json", max_bytes=MAX_FILE_BYTES))["tokens_per_sec"]
            if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
                return float(value)
        except Exception:  # noqa: BLE001 - a measured.json of another shape: the trainer's own figure below
            pass
    for entry in reversed(state.get("log_history") or []):
        value = entry.get("train_tokens_per_second") if isinstance(entry, dict) else None
        if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
            return float(value)
    return None


def read_run(folder: Path) -> RunActuals:
    if not folder.is_dir():
        raise BadInput(f"RUN_DIR: {plain(folder)} is not a folder.")
    approval = _approval(folder)
    events = _events(folder)
    state = _trainer_state(folder)
    last = events[-1] if events else {}
    kinds = {e.get("event") for e in events}
    status = ("stopped at cap" if "stop" in kinds else "finished" if last.get("event") == "end"
              else "running or killed" if events else "not started")
    steps = int(state.get("global_step", last.get("step", 0)) or 0)
    max_steps = int(state.get("max_steps", last.get("max_steps", 0)) or 0)
    hours = float(last.get("hours", 0.0))
    return RunActuals(approval=approval, run=folder.resolve().name, status=status, hours=hours,
                      cost_usd=hours * approval.price.price_hour, steps=steps, max_steps=max_steps,
                      tokens_per_sec=_tokens_per_sec(folder, state))
