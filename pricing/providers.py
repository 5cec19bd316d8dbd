"""One row per provider (pricing/data/providers.csv), and the shape of a price fetcher (`PriceSource`).

A provider's facts are data, read here once: what kind of seller it is, whether its prices are set by the
hosts it lists (a marketplace), how it bills, what the launchers call it, and whether it publishes a
price endpoint anyone may read without a key. The planner (marketplace tie-breaker, billing), the launch
bundle (sky.yaml's cloud, dstack's backend) and `prices refresh` read these rows; adding a provider is one
row here (plus, if it has a public price feed, one fetcher module in pricing/sources/).

Columns of providers.csv:

| column | meaning |
|---|---|
| name | the id price sheets use (lowercase): `aws`, `runpod`, `vast` |
| display_name | the seller's own name |
| kind | `cloud` (general-purpose cloud), `neocloud` (GPU-focused cloud), `marketplace` (lists others' machines), `serverless` (bills a function's GPU seconds, no machine to rent) |
| marketplace | `yes` when hosts set their own prices (vast.ai, Hyperbolic's GPU Marketplace, Akash); the planner prefers a non-marketplace seller in a near-tie |
| increment_s, minimum_s, billing_note | billed seconds per increment and the minimum; empty = unknown, billed per started hour (advisor/data/billing.json `default`); the note says where the figure comes from or that it is an assumption |
| skypilot | SkyPilot's cloud name for it in the release sky.yaml is checked against (`sorted(sky.utils.registry.CLOUD_REGISTRY)` in skypilot 0.9.2; tests/advisor/launch/test_sky_yaml.py compares); empty = no such cloud |
| dstack | dstack's backend name (dstack 0.22.5 `dstack/_internal/core/models/backends/base.py` BackendType); empty = none |
| aliases | other spellings price sheets use, `;`-separated (`lambdalabs`, `vast.ai`) |
| price_endpoint | a public price endpoint that needs no key, if any (space-separated when several); `prices refresh` has a fetcher for it |
| source | where the row's facts can be checked: the seller's pricing page or the document named |
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

DATA = Path(__file__).parent / "data" / "providers.csv"
KINDS = ("cloud", "neocloud", "marketplace", "serverless")
# SkyPilot 0.9.2 launch targets that are not rented from a provider (sky/clouds/kubernetes.py, vsphere.py):
# part of the cloud registry sky.yaml is checked against, but no price sheet names them.
SKYPILOT_TARGETS = frozenset({"kubernetes", "vsphere"})


class PriceSource(Protocol):
    """What a fetcher module in pricing/sources/ provides (each is a module, not a class; see
    pricing/sources/__init__.py): NAME, DEFAULT_URL, optional KEY_ENV / ORDER / missing(), and
    `fetch(base_url, regions, session=, progress=, [key=]) -> (DataFrame in pricing.schema's columns,
    [pricing.schema.Problem])`, its parsing a pure function of the response so it can be tested on a
    recorded one."""

    NAME: str
    DEFAULT_URL: str

    def fetch(self, base_url: str, regions: list[str] | None = None, session: Any = None,
              progress: Any = None) -> tuple[Any, list]: ...


@dataclass(frozen=True)
class Provider:
    name: str
    display_name: str
    kind: str
    marketplace: bool
    increment_s: float | int | None
    minimum_s: float | int | None
    billing_note: str
    skypilot: str
    dstack: str
    aliases: tuple[str, ...]
    price_endpoint: str
    source: str


def _num(text: str, where: str) -> float | int | None:
    if not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}: not a number: {text!r}") from None
    if not value > 0:
        raise ValueError(f"{where}: must be > 0: {text!r}")
    return int(value) if value.is_integer() else value  # seconds as billing.json wrote them


def _row(r: dict, line: int) -> Provider:
    where = f"{DATA.name} line {line}"
    name = (r.get("name") or "").strip().lower()
    kind = (r.get("kind") or "").strip()
    if not name or kind not in KINDS:
        raise ValueError(f"{where}: needs a name and a kind in {', '.join(KINDS)} (got {name!r}, {kind!r})")
    flag = (r.get("marketplace") or "").strip().lower()
    if flag not in ("yes", "no"):
        raise ValueError(f"{where}: marketplace must be yes or no (got {flag!r})")
    return Provider(
        name=name, display_name=(r.get("display_name") or name).strip(), kind=kind, marketplace=flag == "yes",
        increment_s=_num(r.get("increment_s") or "", where), minimum_s=_num(r.get("minimum_s") or "", where),
        billing_note=(r.get("billing_note") or "").strip(), skypilot=(r.get("skypilot") or "").strip(),
        dstack=(r.get("dstack") or "").strip(),
        aliases=tuple(a.strip().lower() for a in (r.get("aliases") or "").split(";") if a.strip()),
        price_endpoint=(r.get("price_endpoint") or "").strip(), source=(r.get("source") or "").strip())


@lru_cache(maxsize=1)
def providers() -> dict[str, Provider]:
    """name -> Provider, in file order. A malformed row is a ValueError naming its line."""
    out: dict[str, Provider] = {}
    with DATA.open(encoding="utf-8", newline="") as fh:
        for line, r in enumerate(csv.DictReader(fh), start=2):
            p = _row(r, line)
            if p.name in out:
                raise ValueError(f"{DATA.name} line {line}: provider {p.name!r} is listed twice")
            out[p.name] = p
    return out


@lru_cache(maxsize=1)
def _by_spelling() -> dict[str, Provider]:
    table: dict[str, Provider] = {}
    for p in providers().values():
        for spelling in (*p.aliases, p.name):  # a provider's own name wins over another's alias
            table[spelling] = p
    return table


def get(name: str) -> Provider | None:
    """The provider a price sheet's name (or alias, any case) means, or None when unknown."""
    return _by_spelling().get(str(name).strip().lower())


def is_marketplace(name: str) -> bool:
    p = get(name)
    return bool(p and p.marketplace)


def marketplaces() -> tuple[str, ...]:
    """Every spelling of a marketplace seller (lowercase)."""
    return tuple(s for s, p in _by_spelling().items() if p.marketplace)


def billing_table() -> dict[str, dict]:
    """name -> {increment_s, minimum_s, note} for the providers whose billing is known, in the shape of
    advisor/data/billing.json's `providers` block (the planner's costing reads it from here)."""
    return {p.name: {"increment_s": p.increment_s, "minimum_s": p.minimum_s, "note": p.billing_note}
            for p in providers().values() if p.increment_s is not None and p.minimum_s is not None}


def sky_cloud(name: str) -> str:
    """The cloud name sky.yaml gives SkyPilot for a price sheet's provider (its own lowercase name when the
    provider is unknown or SkyPilot has no cloud for it)."""
    p = get(name)
    return p.skypilot if p and p.skypilot else str(name).lower()


def skypilot_clouds() -> frozenset[str]:
    """SkyPilot's clouds as providers.csv records them, plus its non-provider targets."""
    return frozenset(p.skypilot for p in providers().values() if p.skypilot) | SKYPILOT_TARGETS


def dstack_backend(name: str) -> str | None:
    """dstack's backend name for a provider, or None when dstack has no backend for it."""
    p = get(name)
    return p.dstack if p and p.dstack else None


def dstack_backends() -> frozenset[str]:
    return frozenset(p.dstack for p in providers().values() if p.dstack)


def reload() -> None:
    """Forget the rows read (after DATA changed, e.g. in a test)."""
    providers.cache_clear()
    _by_spelling.cache_clear()
