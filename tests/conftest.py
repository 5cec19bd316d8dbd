"""Shared fixtures. Bounded work is asserted by counting work, never by a stopwatch (wall time
lives in benchmarks/): a refused bomb or deep document never reaches the object builders."""

from __future__ import annotations

import os

import pytest

# fixtures shared by tests in several folders (tests/helpers/)
pytest_plugins = ["helpers.slurm"]

# Price ages are measured on a pinned day (pricing/clock.py), so the suite gives the same answer as the calendar
# moves past the bundled observations' 60-day limit: 2026-12-01, the day the observation sheet was last checked
# (pricing/data/OBSERVATIONS.md). Tests of the real clock unset it themselves (tests/pricing/test_price_clock.py).
os.environ.setdefault("GPU_ADVISOR_TODAY", "2026-12-01")


def pytest_report_header(config) -> list[str]:
    """The resolved version of every installed distribution (what `pip freeze` prints), so a CI log
    says exactly what the suite ran against (README "Dependencies")."""
    from importlib.metadata import distributions

    names = sorted({f"{d.metadata['Name']}=={d.version}" for d in distributions() if d.metadata["Name"]},
                   key=str.lower)
    return ["resolved versions: " + " ".join(names)]


class Builds:
    """The texts handed to yaml.load and json.loads while a test ran (the calls that turn text
    into objects: where a bomb expands or a deep document recurses)."""

    def __init__(self):
        self.texts: list[tuple[str, str]] = []  # (builder, text)

    def __getitem__(self, builder: str) -> int:
        """How many calls `builder` ("yaml.load" or "json.loads") received."""
        return sum(1 for name, _ in self.texts if name == builder)

    def of(self, document: str | bytes) -> list[str]:
        """The builders that received `document` (with or without a byte-order mark)."""
        doc = document.decode("utf-8", "replace") if isinstance(document, bytes) else document
        doc = doc.removeprefix("\ufeff")
        return [name for name, text in self.texts if text.removeprefix("\ufeff") == doc]


@pytest.fixture()
def builds(monkeypatch) -> Builds:
    """Records every yaml.load / json.loads call; a document refused for its size, nesting,
    aliases or tags must reach neither (`assert builds.of(text) == []`)."""
    import json

    import yaml

    seen = Builds()
    real_yaml, real_json = yaml.load, json.loads

    def text_of(arg) -> str:
        if isinstance(arg, (bytes, bytearray)):
            return bytes(arg).decode("utf-8", "replace")
        return arg if isinstance(arg, str) else getattr(arg, "name", repr(type(arg)))

    def yaml_load(stream, *a, **kw):
        seen.texts.append(("yaml.load", text_of(stream)))
        return real_yaml(stream, *a, **kw)

    def json_loads(s, *a, **kw):
        seen.texts.append(("json.loads", text_of(s)))
        return real_json(s, *a, **kw)

    monkeypatch.setattr(yaml, "load", yaml_load)
    monkeypatch.setattr(json, "loads", json_loads)
    return seen


def _no_hypothesis_stopwatch() -> None:
    """Hypothesis fails an example that takes over 200 ms by default: a stopwatch on a loaded CI
    machine. Every property test here runs without it (a test may still set its own)."""
    from hypothesis import settings

    settings.register_profile("no-stopwatch", deadline=None)
    settings.load_profile("no-stopwatch")


_no_hypothesis_stopwatch()


# The loader's on-disk cache of the bundled frame (pricing/loaded_cache.py) is off in this process: a test that
# patches the loading code must see that code run, and no test reads another's cache. Its own tests
# (tests/pricing/test_loaded_cache.py) turn it on in a temp cache dir.
def _no_loaded_cache() -> None:
    from advisor.planner import fit_cache
    from pricing import loaded_cache

    loaded_cache.ENABLED = False
    fit_cache.ENABLED = False  # the same for each config's stored fit (advisor/planner/fit_cache.py)


_no_loaded_cache()
