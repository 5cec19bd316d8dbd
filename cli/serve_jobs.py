"""Plans for `gpu-advisor serve`: computed in the background, at most a few at once, kept in a small cache.

A page never computes a plan in its own request thread: `Planner.start` admits the work (or refuses it
when every slot is taken: the page answers 503) and a worker thread runs it, so a slow plan can
answer with a "Planning..." page that reloads until `Planner.outcome` has the result. Plans run one
at a time (the model engines and their caches are shared per process and not written for
concurrent use, and under the GIL two plans at once only take twice as long each). A finished
plan, or the input error it ended with, is kept by its normalised request (LRU), so the same
inputs again, from the page, its JSON or the bundle, are never planned twice. Counters say how
often each of those happened, for tests and the log: states, not stopwatches.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from advisor.errors import validation_message
from advisor.text import plain
from cli import first_line, os_message
from pricing.http import redact

CACHE_SIZE = 32  # plans kept; one holds ~10 top rows plus best-per tables, ~0.2 MB as JSON
SLOTS = 4  # plans admitted (running or waiting to run): one page compares at most 4 scenarios


class Busy(Exception):
    """Every slot is taken: the page answers 503 with Retry-After."""


@dataclass(frozen=True)
class Outcome:
    """A finished plan, or the one-line reason it could not be made (status 400 or 500)."""

    plan: Any = None
    status: int = 200
    message: str = ""


def classify(exc: BaseException) -> Outcome:
    """An exception as the page shows it: input errors are 400 with their own sentence (as the CLI
    prints them on exit 2), anything else 500 with one line; every URL's password masked (pricing.http.redact)."""
    def shown(text: str) -> str:
        return redact(plain(text))

    if isinstance(exc, click.UsageError):
        return Outcome(status=400, message=shown(exc.format_message()))
    if getattr(exc, "exit_code", None) == 2:
        return Outcome(status=400, message=shown(first_line(exc)))
    if type(exc).__name__ == "ValidationError":
        return Outcome(status=400, message=shown(validation_message(exc)))
    if isinstance(exc, OSError):
        return Outcome(status=500, message=shown(os_message(exc)))
    if isinstance(getattr(exc, "exit_code", None), int):
        return Outcome(status=500, message=shown(first_line(exc)))
    return Outcome(status=500, message=f"internal error: {shown(first_line(exc))} (the server's log has the details)")


class Planner:
    """Admits, runs and caches plans by key. `compute(options)` is `cli.plan.build_plan(**options)`."""

    def __init__(self, compute: Callable[[dict], Any], cache_size: int = CACHE_SIZE, slots: int = SLOTS,
                 debug: bool = False):
        self._compute = compute
        self._cache_size = cache_size
        self._debug = debug
        self._lock = threading.Lock()  # guards the two dicts and the counters
        self._one_at_a_time = threading.Lock()
        self._slots = threading.BoundedSemaphore(slots)
        self._done: OrderedDict[str, Outcome] = OrderedDict()
        self._running: dict[str, threading.Event] = {}
        self.computed = self.hits = self.refused = 0

    def outcome(self, key: str, hit: bool = True) -> Outcome | None:
        """The finished outcome for `key` (counted as a cache hit unless `hit` is False: the request that
        waited for it), or None. A 500 is given once, then forgotten, so a reload tries again (a network
        failure is not an answer to keep)."""
        with self._lock:
            done = self._done.get(key)
            if done is None:
                return None
            self.hits += hit
            if done.status >= 500:
                del self._done[key]
            else:
                self._done.move_to_end(key)
            return done

    def start(self, key: str, options: dict) -> None:
        """Begin planning `key` unless it is cached or already running; Busy when no slot is free."""
        with self._lock:
            if key in self._done or key in self._running:
                return
            if not self._slots.acquire(blocking=False):
                self.refused += 1
                raise Busy()
            event = self._running[key] = threading.Event()
        threading.Thread(target=self._work, args=(key, dict(options), event), name="plan", daemon=True).start()

    def running(self, key: str) -> bool:
        with self._lock:
            return key in self._running

    def get(self, key: str, options: dict, wait: float | None) -> Outcome | None:
        """The outcome, planning it if needed and waiting up to `wait` seconds (None: until done) for
        it; None while still planning. Raises Busy."""
        found = self.outcome(key)
        if found is not None:
            return found
        self.start(key, options)
        with self._lock:
            event = self._running.get(key)
        if event is not None and not event.wait(wait):
            return None
        return self.outcome(key, hit=event is None)

    def _work(self, key: str, options: dict, event: threading.Event) -> None:
        result = Outcome(status=500, message="internal error: the plan stopped (the server's log has the details)")
        try:
            with self._one_at_a_time:
                with self._lock:
                    self.computed += 1
                try:
                    result = Outcome(plan=self._compute(options))
                except Exception as exc:  # noqa: BLE001 - every failure becomes the page's one line
                    result = classify(exc)
                    if result.status >= 500:
                        print(f"gpu-advisor serve: plan failed: {result.message}", file=sys.stderr, flush=True)
                        if self._debug:
                            traceback.print_exc()
        finally:
            with self._lock:
                self._done[key] = result
                while len(self._done) > self._cache_size:
                    self._done.popitem(last=False)
                self._running.pop(key, None)
            self._slots.release()
            event.set()
