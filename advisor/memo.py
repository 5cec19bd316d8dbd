"""A bounded memo: the estimator's caches must not grow with every distinct estimate a long-lived
process (a notebook, a service calling the library) asks for.

`Memo(maxsize)` is a dict that forgets its oldest entry when a new one would pass `maxsize`.
Everything kept in one is a pure function of its key, so a forgotten entry is only computed again;
reads stay plain dict reads (the planner does millions), only inserts pay for the bound.
"""

from __future__ import annotations

from typing import Any

# Entries per cache. The largest plan measured here (llama-3.1-70b, bundled sheet, --max-nodes 16) makes
# 1,200 distinct memory estimates and 1,143 architecture memo entries, so a plan never evicts; a process
# making more keeps the newest. An estimate holds ~18-21 KiB (tracemalloc over 300-9,000 distinct
# estimate_memory calls, 8B LoRA), so one model's caches stay under ~100 MB instead of growing without limit.
MEMO_ENTRIES = 4_096


class Memo(dict):
    """A dict of at most `maxsize` entries (oldest inserted forgotten first)."""

    __slots__ = ("maxsize",)

    def __init__(self, maxsize: int | None = None):
        super().__init__()
        self.maxsize = maxsize or MEMO_ENTRIES  # read at creation, so a test can shrink the bound

    def __setitem__(self, key: Any, value: Any) -> None:
        if key not in self and len(self) >= self.maxsize:
            del self[next(iter(self))]
        super().__setitem__(key, value)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def __reduce__(self):  # pickled/copied with its bound (dataclasses.replace, deepcopy)
        return (type(self), (self.maxsize,), None, None, iter(self.items()))
