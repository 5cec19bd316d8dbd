"""The transformers release an estimate assumes, and the facts that change with it.

The default is the release the launch bundle pins (advisor/launch/templates/versions.json): `plan` prices
what the bundle runs. `estimate --transformers-version` selects another, for a run on a user's own
stack. What differs below a release is a row of advisor/data/transformers_releases.csv (fact, model_type
or *, below, value, source); a release at or above every row's `below` takes the installed-library facts
(families.json, read from transformers 5.24.0).
"""

from __future__ import annotations

import csv
import json
import re
from functools import cache
from pathlib import Path
from typing import NamedTuple

from advisor.errors import BadInput

RELEASES_FILE = Path(__file__).parents[1] / "data" / "transformers_releases.csv"
VERSIONS_FILE = Path(__file__).parents[1] / "launch" / "templates" / "versions.json"
# bnb_4bit_quant_storage, which FSDP and ZeRO-3 need to shard a QLoRA model, arrived here (PR #29587).
OLDEST = (4, 39, 0)
_VERSION = re.compile(r"(\d{1,3})\.(\d{1,3})(?:\.(\d{1,4}))?")


class Release(NamedTuple):
    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


class Fact(NamedTuple):
    fact: str
    model_type: str
    below: Release
    value: str
    source: str


def parse(text: str, option: str = "--transformers-version") -> Release:
    """A release such as 4.46 or 5.24.0 (no pre-release tags), at least OLDEST."""
    m = _VERSION.fullmatch(str(text).strip())
    if not m:
        raise BadInput(f"{option}: expected a release such as 4.46 or 5.24.0 (got {str(text)[:40]!r}).")
    release = Release(int(m[1]), int(m[2]), int(m[3] or 0))
    if release < OLDEST:
        raise BadInput(f"{option}: {release} is older than {Release(*OLDEST)}, the oldest release modelled "
                       "(FSDP and ZeRO-3 QLoRA need its bnb_4bit_quant_storage).")
    return release


@cache
def bundled() -> Release:
    """The release the launch bundle pins."""
    return parse(json.loads(VERSIONS_FILE.read_text(encoding="utf-8"))["packages"]["transformers"], "versions.json")


@cache
def _facts() -> tuple[Fact, ...]:
    with RELEASES_FILE.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    facts = []
    for r in rows:
        if not (r["fact"] and r["model_type"] and r["value"] and r["source"]):
            raise ValueError(f"{RELEASES_FILE.name}: every column needs a value ({r})")
        facts.append(Fact(r["fact"], r["model_type"], parse(r["below"], RELEASES_FILE.name), r["value"], r["source"]))
    return tuple(facts)


def fact(name: str, model_type: str, release: Release | None) -> Fact | None:
    """The row that holds for `model_type` at `release` (None: the current library's fact holds)."""
    release = release or bundled()
    for row in _facts():
        if row.fact == name and row.model_type in (model_type, "*") and release < row.below:
            return row
    return None


def quantised_load_on_every_gpu(release: Release | None) -> bool:
    """Does every rank load the whole quantised model onto its GPU before FSDP / ZeRO-3 shards it?"""
    return fact("quantised_load", "*", release) is None
