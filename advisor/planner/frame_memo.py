"""Figures of one priced frame, computed once per frame: every selection round, the spot tier and the assembly ask
for the same offer identities, suspect and undated spot prices and billing terms (issue 51: per default plan 6
calls of `costing.offer_billing`, 3 each of `ranking.offer_identity` and `ranking.spot_suspect`, 0.03 s).

Keyed by the frame object itself through a weak reference: a frame that is gone, or another frame at a reused
address, is never answered from here, and nothing is kept once the frame is freed. The planner never changes a
priced frame after `offers.priced_tiers` built it; the answers are numpy arrays made read-only, so no caller
edits the copy the next one reads."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import wraps

_MEMO: dict[int, tuple[weakref.ref, dict[str, object]]] = {}
COUNTS = {"computed": 0, "hits": 0}  # tests count work with it


def _read_only(value):
    import numpy as np

    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif isinstance(value, tuple):
        for v in value:
            _read_only(v)
    return value


def per_frame(fn: Callable) -> Callable:
    """`fn(frame)` computed once per frame object (module docstring)."""
    name = f"{fn.__module__}.{fn.__qualname__}"

    @wraps(fn)
    def once(frame):
        key = id(frame)
        entry = _MEMO.get(key)
        if entry is None or entry[0]() is not frame:
            try:
                ref = weakref.ref(frame, lambda _, key=key: _MEMO.pop(key, None))
            except TypeError:  # not weak-referenceable: computed every time
                return fn(frame)
            entry = _MEMO[key] = (ref, {})
        answers = entry[1]
        if name in answers:
            COUNTS["hits"] += 1
            return answers[name]
        COUNTS["computed"] += 1
        answers[name] = found = _read_only(fn(frame))
        return found

    return once
