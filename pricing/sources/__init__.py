"""Price sources: each module turns one provider's feed into our schema (pure `parse_*`)
and has a `fetch(base_url, regions, session, progress)` that does the HTTP (the shape is
pricing.providers.PriceSource).

SOURCES is found, not listed: every module here with a NAME is a source, in the order of its ORDER
(default 100, then by name), with the environment variable of its API key (KEY_ENV) or None; a
source with KEY_OPTIONAL = True is fetched without its key too. Adding a
fetcher is adding its module; its provider's facts are its row in pricing/data/providers.csv.
Modules are read as text (their NAME, KEY_ENV, ORDER assignments), not imported, so `prices --help`
stays fast and an optional dependency (gpuhunt) is only needed when its source runs.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

# A top-level assignment of one of the constants, on one line (a trailing comment allowed). Only these lines are
# parsed: parsing every module whole cost every command's start about 10 ms.
_CONSTANT_LINE = re.compile(r"^(?:NAME|KEY_ENV|KEY_OPTIONAL|ORDER)\s*=.*$", re.M)


def _constants(path: Path) -> dict:
    """The module's top-level NAME / KEY_ENV / KEY_OPTIONAL / ORDER literals."""
    out: dict = {}
    for line in _CONSTANT_LINE.findall(path.read_text(encoding="utf-8")):
        try:
            node = ast.parse(line).body[0]
        except SyntaxError:  # a constant continued on the next line: not one of ours
            continue
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            out[node.targets[0].id] = node.value.value  # type: ignore[attr-defined]
    return out


def _discover() -> list[tuple]:
    found = []
    for path in sorted(Path(__file__).parent.glob("*.py")):
        if path.stem.startswith("_"):
            continue
        c = _constants(path)
        if isinstance(c.get("NAME"), str):
            found.append((c.get("ORDER", 100), c["NAME"], f"{__name__}.{path.stem}", c.get("KEY_ENV"),
                          c.get("KEY_OPTIONAL") is True))
    return sorted(found)


_FOUND = _discover()
# name -> (module, env var with an API key or None)
SOURCES = {name: (module, key) for _, name, module, key, _ in _FOUND}
# sources whose key is optional (KEY_OPTIONAL = True): fetched without it, the key sent when set
KEY_OPTIONAL = frozenset(name for _, name, _, _, optional in _FOUND if optional)
