"""Managed fine-tuning: what a per-token service would charge for the same run.

The sheet (`pricing/data/managed_finetuning.csv`, user-editable; `GPU_ADVISOR_MANAGED_SHEET` names
another) has one row per (provider, service, model-size bracket): the methods it sells, the models it
lists, the price per million training tokens (a range where the source gives one), the minimum charge,
the source and its dates. `alternatives()` prices the same tokens x epochs on every row that lists the
model and the method, and nothing else: a service that does not list the model is not an alternative.

Model lists (`models`): Hugging Face ids or catalog names separated by ';', compared case-insensitively
without the organisation and with Meta's old 'Meta-' prefix and Together's '-Reference' suffix removed
(Together names meta-llama/Llama-3.1-8B-Instruct 'Meta-Llama-3.1-8B-Instruct-Reference'); `any-hf`: the
service fine-tunes any Hugging Face model of the bracket (Together's "bring your own model"); empty: the
source names none, so the row matches nothing until you add the models the service lists for you.
Brackets: min_params_b < params_b <= max_params_b.

Objectives (`objectives`, ';'-separated: sft, dpo, grpo; empty = sft, so older sheets keep their meaning): which
training objective a row's price is for. `unit`: m_tokens (default: USD per million billed tokens) or hour (USD
per hour of the service's own training loop: OpenAI's reinforcement fine-tuning); an hourly row is priced only when
the caller gives the hours.
"""

from __future__ import annotations

import csv
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Literal, overload

from pydantic import BaseModel, ConfigDict

from pricing import files, settings
from pricing.errors import PriceInputError
from pricing.schema import CONTROL_RE, MAX_TEXT_CHARS
from pricing.units import MILLION

SHEET = Path(__file__).parent / "data" / "managed_finetuning.csv"
ANY = "any-hf"
METHODS = ("full", "lora", "qlora", "dora")
COLUMNS = ("provider", "service", "min_params_b", "max_params_b", "models", "methods", "usd_per_m_tokens",
           "usd_per_m_tokens_high", "min_charge_usd", "source", "observed_at", "date_read", "note", "objectives", "unit")
OBJECTIVES = ("sft", "dpo", "grpo")
UNITS = ("m_tokens", "hour")


class ManagedAlternative(BaseModel):
    """A managed service's price for the run: usd (the low end where the source gives a range)."""

    model_config = ConfigDict(frozen=True)

    provider: str
    service: str
    method: str
    usd: float
    usd_high: float | None = None  # the high end of a stated range; None when the price is exact
    usd_per_m_tokens: float
    usd_per_m_tokens_high: float | None = None
    billed_m_tokens: float
    min_charge_usd: float = 0.0
    source: str
    observed_at: str | None = None  # the date the source states for the price; None: undated
    date_read: str | None = None  # when the sheet's author read the source
    note: str | None = None
    objective: str = "sft"
    unit: str = "m_tokens"  # what usd_per_m_tokens is per: a million billed tokens, or an hour ("hour")
    billed_hours: float | None = None


def _key(name: str) -> str:
    name = name.strip().lower().rsplit("/", 1)[-1]
    name = re.sub(r"^meta-(?=llama)", "", name)
    return re.sub(r"-reference$", "", name)


@overload
def _num(row: dict, col: str, where: str, required: Literal[True]) -> float: ...


@overload
def _num(row: dict, col: str, where: str, required: bool = False) -> float | None: ...


def _num(row: dict, col: str, where: str, required: bool = False) -> float | None:
    text = (row.get(col) or "").strip()
    if not text:
        if required:
            raise PriceInputError(f"{where}: column '{col}' is empty")
        return None
    try:
        value = float(text)
    except ValueError:
        raise PriceInputError(f"{where}: column '{col}' is not a number (got {text!r})") from None
    if not math.isfinite(value) or value < 0:
        raise PriceInputError(f"{where}: column '{col}' must be a finite number >= 0 (got {text!r})")
    return value


def sheet_path() -> Path:
    return settings.managed_sheet() or SHEET


def _check_text(row: dict, where: str) -> None:
    """The price sheets' text rule (pricing.schema): printable, at most MAX_TEXT_CHARS per cell, so
    nothing from this user-editable sheet reaches a plan, table or report that a sheet row could not."""
    for col, value in row.items():
        if not isinstance(value, str):  # csv puts surplus fields in a list under None
            raise PriceInputError(f"{where}: more fields than the header has")
        bad = CONTROL_RE.search(value)
        if bad:
            raise PriceInputError(f"{where}: column '{col}' holds control character U+{ord(bad.group()):04X} "
                                  "(printable text only)")
        if len(value) > MAX_TEXT_CHARS:
            raise PriceInputError(f"{where}: column '{col}' is longer than {MAX_TEXT_CHARS:,} characters")


@lru_cache(maxsize=4)
def _rows(path: str, stamp: float) -> tuple[dict, ...]:
    text = files.read_text(Path(path), path)
    out = []
    for i, row in enumerate(csv.DictReader(text.splitlines()), start=1):
        out.append(_row(row, f"{path}: row {i}"))
    return tuple(out)


def _row(row: dict, where: str) -> dict:
    """One sheet row, parsed and checked (PriceInputError naming the row and column)."""
    _check_text(row, where)
    missing = [c for c in ("provider", "service", "methods", "source") if not (row.get(c) or "").strip()]
    if missing:
        raise PriceInputError(f"{where}: column '{missing[0]}' is empty")
    methods = _choices(row, "methods", METHODS, where, "")
    objectives = _choices(row, "objectives", OBJECTIVES, where, "sft")
    unit = (row.get("unit") or "m_tokens").strip().lower()
    if unit not in UNITS:
        raise PriceInputError(f"{where}: unit must be one of {', '.join(UNITS)} (got {row['unit']!r})")
    low = _num(row, "usd_per_m_tokens", where, required=True)
    high = _num(row, "usd_per_m_tokens_high", where)
    if high is not None and high < low:
        raise PriceInputError(f"{where}: usd_per_m_tokens_high is below usd_per_m_tokens")
    return {**{c: (row.get(c) or "").strip() or None for c in COLUMNS}, "methods": methods,
            "models": {_key(m) for m in (row.get("models") or "").split(";") if m.strip()},
            "min_params_b": _num(row, "min_params_b", where) or 0.0,
            "max_params_b": _num(row, "max_params_b", where), "usd_per_m_tokens": low,
            "usd_per_m_tokens_high": high, "min_charge_usd": _num(row, "min_charge_usd", where) or 0.0,
            "objectives": objectives, "unit": unit}


def _choices(row: dict, column: str, allowed, where: str, default: str) -> set[str]:
    """A ';'-separated cell as a set of lower-case names, each in `allowed` (empty: {default}, if any)."""
    got = {v.strip().lower() for v in (row.get(column) or default).split(";") if v.strip()}
    got = got or ({default} if default else set())
    if not got <= set(allowed):
        raise PriceInputError(f"{where}: {column} must be among {', '.join(allowed)} (got {row[column]!r})")
    return got


def rows(path: Path | None = None) -> tuple[dict, ...]:
    """The sheet's rows, parsed and checked (a bad cell is a PriceInputError naming row and column)."""
    path = path or sheet_path()
    try:
        stamp = path.stat().st_mtime
    except OSError:
        return ()
    return _rows(str(path), stamp)


def alternatives(model_name: str, params_b: float, method: str, train_tokens: float, epochs: float = 1.0,
                 path: Path | None = None, objective: str = "sft", hours: float | None = None) -> list[ManagedAlternative]:
    """Every listed service's price for `train_tokens` x `epochs` of `model_name` with `method` and `objective`,
    cheapest first.

    Billed tokens = training tokens x epochs (validation tokens, which these services also bill, are
    not part of a plan; for DPO the caller passes the tokens of the pairs' files: prompt + chosen + rejected);
    cost = billed M tokens x rate, at least the minimum charge. Hourly rows: `hours` x rate (skipped without hours)."""
    method = method.lower()
    billed = train_tokens * epochs / MILLION
    key = _key(model_name)
    out = []
    for r in rows(path):
        in_bracket = r["min_params_b"] < params_b and (r["max_params_b"] is None or params_b <= r["max_params_b"])
        listed = ANY in r["models"] or key in r["models"]
        if method not in r["methods"] or not in_bracket or not listed or objective not in r["objectives"]:
            continue
        if r["unit"] == "hour" and hours is None:
            continue
        low, high = r["usd_per_m_tokens"], r["usd_per_m_tokens_high"]
        amount = hours if r["unit"] == "hour" else billed
        out.append(ManagedAlternative(
            provider=r["provider"], service=r["service"], method=method,
            usd=max(amount * low, r["min_charge_usd"]),
            usd_high=None if high is None else max(amount * high, r["min_charge_usd"]),
            usd_per_m_tokens=low, usd_per_m_tokens_high=high, billed_m_tokens=billed,
            min_charge_usd=r["min_charge_usd"], source=r["source"], observed_at=r["observed_at"],
            date_read=r["date_read"], note=r["note"], objective=objective, unit=r["unit"],
            billed_hours=hours if r["unit"] == "hour" else None))
    return sorted(out, key=lambda a: (a.usd, a.provider))
