"""Plan schema 4: every candidate is stored once; the Pareto front, best per GPU/provider, baseline and spot
alternative name stored candidates by reference.

Those views are mostly candidates already in the ranked list (the #1 is usually on the front, the best H100 and
the best of its provider), and schemas 1-3 wrote each of them out again, so one candidate's numbers appeared two
to four times. Stored = `candidates` (the ranked top-N) + `others` (candidates only a view names); a reference
is an index into that list. Plans given with the views as candidates (a schema 1-3 file, the planner's
`Plan(pareto=[...])`) are converted here, before validation, so each stored candidate is validated once.
"""

from __future__ import annotations

import json
from typing import Any

# view (the accessor readers use, and the key schemas 1-3 wrote) -> the schema-4 field holding its reference(s)
VIEWS = {"pareto": "pareto_refs", "baseline": "baseline_ref", "best_per_gpu": "best_per_gpu_refs",
         "best_per_provider": "best_per_provider_refs", "spot_alternative": "spot_alternative_ref"}


def _key(candidate: Any) -> str:
    """Two candidates are the same when every stored value is (a conversion must lose nothing)."""
    dumped = candidate.model_dump(mode="json") if hasattr(candidate, "model_dump") else candidate
    return json.dumps(dumped, sort_keys=True, default=str)


def _is_candidate(value: Any) -> bool:
    return isinstance(value, dict) or hasattr(value, "model_dump")


def to_refs(data: dict, version: int) -> dict:
    """`data` with each view given as candidates replaced by references, the candidates it names that are not
    among `candidates` appended to `others` once; `schema_version` 1-3 becomes `version`. A view of the wrong
    shape is passed on as it is, for validation to refuse under the view's reference field."""
    ranked = data.get("candidates")
    if not any(view in data for view in VIEWS) or not isinstance(ranked, list):
        return data
    out = {k: v for k, v in data.items() if k not in VIEWS}
    extra = out.get("others") or []
    stored: list = list(ranked) + (list(extra) if isinstance(extra, list) else [])
    by_id = {id(c): i for i, c in enumerate(stored)}
    by_key: dict[str, int] = {}

    def ref(c: Any) -> Any:
        if not _is_candidate(c):
            return c
        if id(c) in by_id:
            return by_id[id(c)]
        if not by_key:
            by_key.update((_key(s), i) for i, s in reversed(list(enumerate(stored))) if _is_candidate(s))
        k = _key(c)
        if k not in by_key:
            by_key[k] = len(stored)
            stored.append(c)
        by_id[id(c)] = by_key[k]
        return by_key[k]

    for view, field in VIEWS.items():
        if view not in data:
            continue
        value = data[view]
        if isinstance(value, dict) and view.startswith("best_per"):
            out[field] = {name: ref(c) for name, c in value.items()}
        elif isinstance(value, list):
            out[field] = [ref(c) for c in value]
        else:
            out[field] = None if value is None else ref(value)
    out["others"] = stored[len(ranked):]
    if type(out.get("schema_version")) is int and out["schema_version"] in (1, 2, 3):
        out["schema_version"] = version
    return out
