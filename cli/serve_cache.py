"""Rendered pages of `gpu-advisor serve`, kept per plan: a warm plan's page is rendered once.

The plans themselves are cached once for every route by `cli.serve_jobs.Planner` (/plan, /plan.json,
/report.*, /bundle.zip and /compare all ask the same Planner by the same normalised key). What a page adds on
top (the decision card and table through the report templates, or the plan's JSON) depends only on the plan's
outcome and the query that links it, so `Pages` keeps those bytes by (route, query), bounded (LRU of
PAGES), and gives them out only while the planner still answers with the very outcome they were made from:
a plan evicted and made again, or an error forgotten, is rendered afresh. `rendered` and `served` count the
two cases, for tests and the log (work counted, never timed).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

PAGES = 64  # pages kept: two routes for each of the planner's 32 plans; a page is ~30-200 kB


class Pages:
    """(route, query) -> (outcome, response), at most `size`, least recently used out first."""

    def __init__(self, size: int = PAGES):
        if size < 1:
            raise ValueError("size: at least one page")
        self._size = size
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[str, str], tuple[Any, Any]] = OrderedDict()
        self.rendered = self.served = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._kept)

    def get(self, route: str, query: str, outcome: Any, render: Callable[[], Any]) -> Any:
        """The response rendered for `outcome` under (route, query): kept bytes when `outcome` is the one they
        were rendered from, else `render()`, kept for next time."""
        key = (route, query)
        with self._lock:
            entry = self._kept.get(key)
            if entry is not None and entry[0] is outcome:
                self._kept.move_to_end(key)
                self.served += 1
                return entry[1]
        response = render()  # outside the lock: two threads may render one page at once, never block on it
        with self._lock:
            self.rendered += 1
            self._kept[key] = (outcome, response)
            self._kept.move_to_end(key)
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)
        return response
