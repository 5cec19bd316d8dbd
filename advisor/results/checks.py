"""The checks every result applies to what it holds: printable text of bounded length, finite numbers,
counts within the flags' bounds, GPUs from the GPU table."""

from __future__ import annotations

import math
from typing import Any

from advisor.model.spec import MAX_BATCH, MAX_EPOCHS, MAX_GPUS, MAX_HOURS, MAX_NODES, MAX_SEQ_LEN, MAX_TOKENS, MAX_USD
from advisor.text import refused_char
from pricing.gpus import all_gpus, canonical_name

# ----------------------------------------------------------------------------- validation
# A plan is shared (a colleague's file, a ticket attachment) and its text reaches launch scripts,
# YAML, Markdown and terminals, so every text field is checked when a plan is built or loaded:
# no control characters, line breaks or bidirectional overrides (advisor.text.refused_char), and
# a length limit; numbers must be finite and not negative; GPUs must be in the GPU table
# (pricing.gpus); the model a Hugging Face id, a catalog name or a path.
NAME_CHARS = 512  # names: provider, region, instance, GPU, family, label, dict keys
TEXT_CHARS = 20_000  # sentences: sources, notes, warnings, reasons, the command line


def check_text(value: str, field: str, limit: int = NAME_CHARS) -> str:
    """`value` unchanged when it is printable text of at most `limit` characters; else ValueError
    naming `field`, the problem and what is accepted."""
    bad = refused_char(value)
    if bad:
        raise ValueError(f"control character {bad} refused in {field} (a plan holds printable text only: no "
                         "line breaks, escape sequences or bidirectional overrides)")
    if len(value) > limit:
        raise ValueError(f"{field} is longer than {limit:,} characters")
    return value


def check_number(value: float | None, field: str) -> float | None:
    if value is not None and (not math.isfinite(value) or value < 0):
        raise ValueError(f"{field}: must be a finite number >= 0 (got {value})")
    return value


def _check_tree(value: Any, field: str, depth: int = 0) -> None:
    """Every string (keys too) and float inside a dict/list from a plan file."""
    if isinstance(value, str):
        check_text(value, field, TEXT_CHARS)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{field}: must be a finite number (got {value})")
    elif isinstance(value, dict):
        for k, v in value.items():
            check_text(str(k), f"{field} key", NAME_CHARS)
            _check_tree(v, f"{field}.{k}", depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_tree(v, f"{field}[{i}]", depth + 1)



def check_count(value: Any, field: str, low: int, high: int) -> None:
    """An integer (not a bool) within [low, high]; else ValueError naming `field` and the bounds."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field}: expected a whole number (got {type(value).__name__} {str(value)[:40]!r})")
    if not low <= value <= high:
        raise ValueError(f"{field}: must be between {low:,} and {high:,} (got {value:,})")


def _workload_bounds() -> dict[str, tuple[type, float, float]]:
    """workload key -> (type, low, high): the bounds PlanRequest puts on the same options (advisor.model.spec
    MAX_*), so a hand-edited plan cannot carry what `plan` itself refuses into `launch` (num_train_epochs).
    A low of 0.0 for a float means "more than 0" (epochs), as for --epochs."""
    return {"tokens": (float, 0.0, MAX_TOKENS), "epochs": (float, 0.0, MAX_EPOCHS),
            "train_tokens": (float, 0.0, MAX_TOKENS * MAX_EPOCHS), "seq_len": (int, 1, MAX_SEQ_LEN),
            "global_batch": (int, 1, MAX_BATCH), "global_batch_tokens": (int, 1, MAX_BATCH * MAX_SEQ_LEN),
            "budget_usd": (float, 0.0, MAX_USD), "deadline_hours": (float, 0.0, MAX_HOURS),
            "max_nodes": (int, 1, MAX_NODES), "max_gpus": (int, 1, MAX_GPUS), "spot": (bool, 0, 1),
            "padded": (bool, 0, 1)}


def check_workload(workload: dict) -> None:
    """The workload keys `plan` writes (and `launch` reads) typed and within the flags' bounds; None: unset."""
    for key, (kind, low, high) in _workload_bounds().items():
        value = workload.get(key)
        if value is None:
            continue
        if kind is bool:
            if not isinstance(value, bool):
                raise ValueError(f"workload.{key}: expected true or false (got {str(value)[:40]!r})")
        elif kind is int:
            check_count(value, f"workload.{key}", int(low), int(high))
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value <= high:
            raise ValueError(f"workload.{key}: must be a number more than {low:g} and at most {high:,g} (got "
                             f"{str(value)[:40]!r})")


def check_gpu(name: str) -> str:
    """The canonical GPU name; ValueError when it is not in the GPU table (pricing/data/gpus.csv)."""
    check_text(name, "gpu_model")
    canonical = canonical_name(name)
    if canonical is None:
        raise ValueError(f"gpu_model: {name[:60]!r} is not in the GPU table; known: "
                         f"{', '.join(g.name for g in all_gpus())}")
    return canonical
