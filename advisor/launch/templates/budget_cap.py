"""The approved budget, held by the trainer itself (written by `gpu-advisor launch --approval`, beside train.py).

A scheduler's time limit kills a job where it stands; this TrainerCallback stops it cleanly first: it counts the
wall time the run has been billed (since this process started, plus every earlier segment of the same run from the
log, so a restart or a spot reclaim keeps counting), prices it at the approved price, warns once at
`warn_share` of the cost cap, and at `stop_hours` (the cap less the time a checkpoint takes) asks the Trainer to
save a checkpoint and stop. Every rank decides together (the flag is all-reduced), so no rank waits in a collective
for one that stopped. Each event is one JSON line in budget_cap.log.jsonl, which `gpu-advisor track` reads.

Standalone: the standard library, torch and transformers (what train.py already imports).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from transformers import TrainerCallback

HERE = Path(__file__).resolve().parent
CAP_FILE = HERE / "budget_cap.json"
LOG_FILE = HERE / "budget_cap.log.jsonl"
STARTED = time.monotonic()  # import time: train.py imports this before building the model


def _earlier_hours(log: Path) -> float:
    """Wall hours of the run's earlier segments: the last `hours` each earlier process logged."""
    if not log.exists():
        return 0.0
    last: dict[str, float] = {}
    for line in log.read_text(encoding="utf-8").splitlines():
        try:
            event = json.loads(line)
            last[str(event["segment"])] = float(event["segment_hours"])
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by a kill: the segment's earlier lines still count
    return sum(last.values())


class BudgetCap(TrainerCallback):
    def __init__(self, cap: dict, log: Path = LOG_FILE, clock=time.monotonic, started: float | None = None):
        self.cost_cap = float(cap["cost_usd"])
        self.price_hour = float(cap["price_hour"])
        self.stop_hours = float(cap["stop_hours"])
        self.warn_share = float(cap.get("warn_share", 0.8))
        self.approval = str(cap.get("approval", ""))
        self.log, self.clock = log, clock
        self.started = STARTED if started is None else started
        self.before = _earlier_hours(log)
        self.segment = f"{time.time():.0f}-{id(self):x}"
        self.warned = False

    @classmethod
    def from_file(cls, path: Path = CAP_FILE) -> BudgetCap:
        return cls(json.loads(path.read_text(encoding="utf-8")))

    def hours(self) -> float:
        return self.before + (self.clock() - self.started) / 3600

    def _write(self, state, event: str, **extra) -> None:
        if not state.is_world_process_zero:
            return
        hours = self.hours()
        record = {"event": event, "segment": self.segment, "segment_hours": hours - self.before, "hours": hours,
                  "cost_usd": hours * self.price_hour, "cap_usd": self.cost_cap, "step": state.global_step,
                  "max_steps": state.max_steps, "approval": self.approval, "at": time.time(), **extra}
        with self.log.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def on_train_begin(self, args, state, control, **kw):
        self._write(state, "start")

    def on_log(self, args, state, control, logs=None, **kw):
        self._write(state, "log", **{k: v for k, v in (logs or {}).items() if isinstance(v, (int, float))})

    def on_step_end(self, args, state, control, **kw):
        spent = self.hours() * self.price_hour
        if not self.warned and spent >= self.warn_share * self.cost_cap:
            self.warned = True
            self._write(state, "warn")
            if state.is_world_process_zero:
                print(f"budget cap: {_usd(spent)} spent of the {_usd(self.cost_cap)} cap approved "
                      f"({self.warn_share:.0%} reached)", flush=True)
        if _all_agree(self.hours() >= self.stop_hours):
            control.should_save = True
            control.should_training_stop = True
            self._write(state, "stop")
            if state.is_world_process_zero:
                print(f"budget cap: stopping at step {state.global_step} of {state.max_steps} with a checkpoint: "
                      f"{_usd(spent)} spent of the {_usd(self.cost_cap)} cap approved, at its "
                      f"{self.stop_hours:.4g} h stop mark (approval {self.approval[:19]})", flush=True)
        return control

    def on_train_end(self, args, state, control, **kw):
        self._write(state, "end")


def _usd(x: float) -> str:
    """$1,234.56; a cap below a cent with its own digits ($0.00001), never a cap of "$0.00"."""
    return f"${x:,.2f}" if x >= 0.01 else "$" + (f"{x:.6f}".rstrip("0").rstrip(".") or "0")


def _all_agree(stop: bool) -> bool:
    """True on every rank when any rank's clock says stop (a max all-reduce); the flag itself on one process."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return stop
    if not (dist.is_available() and dist.is_initialized()):
        return stop
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    flag = torch.tensor([1 if stop else 0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def callbacks() -> list:
    """[BudgetCap] when this bundle carries an approval's caps, else []."""
    return [BudgetCap.from_file()] if CAP_FILE.exists() else []
