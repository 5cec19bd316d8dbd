"""Every environment variable gpu-advisor reads: one table, each value typed and validated, read when used.

Why here: `pricing` is the bottom layer (docs/DESIGN.md, "Layout"), so `advisor`, `reports` and `cli` can
all import this module, and it imports nothing of the project but `pricing.errors` and the source table
`pricing.sources` (a plain dict), so no import circle can pass through it.

Unset or empty means the default. A value that is set but wrong (not a number, nan, inf, negative, out of
range, not a whole number where one is counted, not a date, not an http(s) URL) is refused with one line
naming the variable and what it accepts (`SettingError`, exit 2): falling back to the default would hide
the mistake (GPU_ADVISOR_STALE_DAYS=nan used to make a 60-day-old price fresh). Values are read from
`os.environ` each time they are asked for, never frozen at import, so a test's `monkeypatch.setenv` and a
long-lived `serve` process see the current value. No other module of the project reads `os.environ`
(tests/pricing/test_settings.py greps for it); the launch bundle's scripts (advisor/launch/templates/) run on the
rented machine, not here, and read their own.

docs/settings.md holds the table `markdown_table()` prints (tests/pricing/test_settings.py compares them).
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from pricing.errors import PricingError
from pricing.sources import KEY_OPTIONAL, SOURCES
from pricing.units import GB, GiB, MiB, TiB

MIB = MiB
DAY_SECONDS = 86_400.0
# A price observed more than this many days ago is stale. 60: in the dated observation sheet, pairs of
# observations of one product 30-60 days apart differ by more than 5 % in 17 % of cases, 60-90 days apart
# in 52 %, 90-180 days apart in 72 % (pricing/data/OBSERVATIONS.md, "Staleness"): past two months a list
# price has more likely moved than not.
STALE_DAYS = 60.0
# Two sheets' prices for one instance disagree beyond this fraction (pricing/agreement.py says why 10 %).
PRICE_TOLERANCE = 0.10
# A catalog price within this fraction of a dated observation is confirmed by it (pricing/crosscheck.py
# says why 5 %, from pricing/data/OBSERVATIONS.md "Tolerance").
OBSERVATION_TOLERANCE = 0.05
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub's constants._is_true reads its flags so
PROXIES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")
MAX_SECRET_CHARS = 4_096


class SettingError(PricingError):
    """An environment variable set to a value outside what it accepts (exit 2). Not a ValueError, so no
    reader's `except ValueError` mistakes it for bad data in a file."""

    exit_code = 2


@dataclass(frozen=True)
class Variable:
    """One environment variable: its name, kind, default and accepted range, and what it changes."""

    name: str
    kind: str  # number | integer | date | path | url | secret | flag | columns | presence
    default: object
    what: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low itself refused (a time limit of 0 s)
    unit: str = ""

    @property
    def accepts(self) -> str:
        """The accepted values in words, as the refusal and docs/settings.md say them."""
        if self.kind in ("number", "integer"):
            what = "a whole number" if self.kind == "integer" else "a number"
            low = f"{'>' if self.low_open else '>='} {_amount(self.low, self.unit)}"
            return f"{what} {low} and <= {_amount(self.high, self.unit)}"
        return {"date": "a date YYYY-MM-DD (2000-01-01 to 2099-12-31)",
                "path": "a file or folder path",
                "url": "an http:// or https:// URL with a host",
                "secret": f"printable characters without spaces, at most {MAX_SECRET_CHARS:,}",
                "flag": "1, ON, YES or TRUE (any case) for on; anything else is off",
                "columns": "a whole number > 0 (anything else: the terminal's own width)",
                "presence": "any non-empty value"}[self.kind]


def _amount(n, unit: str) -> str:
    """TiB bytes -> '1 TiB', 86400 s -> '86,400 s', 10 -> '10'."""
    if unit == "bytes" and n >= MIB:
        return next(f"{n / size:g} {name}" for size, name in ((TiB, "TiB"), (GiB, "GiB"), (MiB, "MiB"))
                    if n >= size)
    return (f"{int(n):,}" if float(n).is_integer() else f"{n:,g}") + (f" {unit}" if unit else "")


def _seconds(name: str, default: float, what: str, low_open: bool = True) -> Variable:
    return Variable(name, "number", default, what, 0.0, DAY_SECONDS, low_open, "s")


_VARIABLES: tuple[Variable, ...] = (
    Variable("GPU_ADVISOR_CACHE_DIR", "path", None,
             "the cache folder (fetched sheets, Hub configs, stored measured runs); "
             "default `$XDG_CACHE_HOME/gpu-advisor`, else `~/.cache/gpu-advisor`"),
    Variable("XDG_CACHE_HOME", "path", None, "the cache root when GPU_ADVISOR_CACHE_DIR is unset (default ~/.cache)"),
    Variable("GPU_ADVISOR_LEDGER", "secret", None,
             "the approvals-and-spend ledger's database URL (`sqlite:///path` or `postgresql://user:pass@host/db`; "
             "`--ledger` wins); default the SQLite file `$XDG_DATA_HOME/gpu-advisor/ledger.sqlite`"),
    Variable("XDG_DATA_HOME", "path", None, "the ledger's folder root when GPU_ADVISOR_LEDGER is unset "
             "(default ~/.local/share)"),
    Variable("GPU_ADVISOR_STALE_DAYS", "number", STALE_DAYS,
             "a price observed longer ago than this (or undated) is stale: never the headline while a fresh one "
             "exists", 0.0, 36_500.0, unit="days"),
    Variable("GPU_ADVISOR_TODAY", "date", None,
             "pins 'today' for price ages (README examples, reference plans); future dates keep the real clock"),
    Variable("GPU_ADVISOR_OBSERVATIONS", "path", None,
             "another dated observation sheet in place of the bundled pricing/data/observations.csv"),
    Variable("GPU_ADVISOR_OBSERVATION_TOLERANCE", "number", OBSERVATION_TOLERANCE,
             "a catalog price within this fraction of a dated observation is confirmed, else disputed",
             0.0, 10.0),
    Variable("GPU_ADVISOR_PRICE_TOLERANCE", "number", PRICE_TOLERANCE,
             "two sheets' prices for one instance further apart than this fraction are said to disagree",
             0.0, 10.0),
    Variable("GPU_ADVISOR_MANAGED_SHEET", "path", None,
             "another managed fine-tuning price sheet in place of pricing/data/managed_finetuning.csv"),
    _seconds("GPU_ADVISOR_HTTP_TIMEOUT", 30.0, "connecting, and each single read of the socket"),
    _seconds("GPU_ADVISOR_HTTP_DEADLINE", 300.0,
             "one request, wall clock: connect, headers and every read of the body"),
    _seconds("GPU_ADVISOR_HTTP_SOURCE_BUDGET", 900.0,
             "everything one source's refresh does over the network: requests, pages, retries, waits"),
    Variable("GPU_ADVISOR_HTTP_RETRIES", "integer", 4,
             "retries after a connection error, a timeout, a truncated body, 429 or 5xx", 0, 100),
    Variable("GPU_ADVISOR_HTTP_CONNECT_RETRIES", "integer", 1,
             "retries when the host cannot be reached at all (refused, DNS failure)", 0, 100),
    Variable("GPU_ADVISOR_HTTP_MIN_RATE", "number", 1024.0,
             "a body slower than this on average over GPU_ADVISOR_HTTP_MIN_RATE_TIME is abandoned (curl's "
             "--speed-limit); 0 turns the check off", 0.0, GB, unit="bytes/s"),
    _seconds("GPU_ADVISOR_HTTP_MIN_RATE_TIME", 30.0, "the window of GPU_ADVISOR_HTTP_MIN_RATE (curl's --speed-time)"),
    _seconds("GPU_ADVISOR_HTTP_BACKOFF", 1.0, "the first retry's wait (doubles each time)", low_open=False),
    _seconds("GPU_ADVISOR_HTTP_MAX_WAIT", 60.0,
             "the longest Retry-After honoured; a server asking for longer fails the fetch at once", low_open=False),
    Variable("GPU_ADVISOR_HTTP_MAX_BYTES", "integer", 64 * MIB,
             "a body held in memory (JSON, CSV), counted after gzip/deflate decoding", 1, TiB, unit="bytes"),
    Variable("GPU_ADVISOR_HTTP_MAX_STREAM_BYTES", "integer", 2048 * MIB,
             "a body parsed while it streams (AWS offer files), counted after decoding", 1, TiB, unit="bytes"),
    Variable("GPU_ADVISOR_HTTP_MAX_PAGES", "integer", 1000,
             "pages followed for one query (Azure)", 1, 1_000_000),
    *(Variable(f"GPU_ADVISOR_{name.upper()}_URL", "url", None,
               "a price source's base URL in place of its public one (`prices refresh --endpoint` for one run)")
      for name in SOURCES),
    *(Variable(key, "secret", None, "a price source's API key; without it `prices refresh` skips that source")
      for name, (_, key) in SOURCES.items() if key and name not in KEY_OPTIONAL),
    *(Variable(key, "secret", None, "a price source's API key, sent when set; the source is public and fetched "
               "without it too") for name, (_, key) in SOURCES.items() if key and name in KEY_OPTIONAL),
    Variable("HF_ENDPOINT", "url", "https://huggingface.co",
             "the Hugging Face Hub a model's config.json and tokenizer come from (as huggingface_hub reads it)"),
    Variable("HF_TOKEN", "secret", None, "the Hugging Face token for gated or private repos"),
    *(Variable(name, "flag", False, "on: never ask the Hub (the local caches only)")
      for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")),
    *(Variable(name, "presence", None, "a proxy: requests uses it; the Hub reachability probe is skipped "
               "(only the proxy knows)") for name in PROXIES),
    Variable("COLUMNS", "columns", None, "the width terminal tables fit (also in a pipe)"),
    Variable("NO_COLOR", "presence", None, "set: no colour in terminal tables (no-color.org)"),
)
VARIABLES: dict[str, Variable] = {v.name: v for v in _VARIABLES}


def _raw(name: str) -> str:
    return os.environ.get(name, "").strip()


def _refuse(var: Variable, got: str | None = None) -> SettingError:
    """The one line a wrong value gets; `got` is shown only for numbers and dates (never a URL or a key)."""
    shown = "" if got is None else f" (got '{got[:40]}')"
    default = (_amount(var.default, var.unit) if var.kind in ("number", "integer") else
               var.default if isinstance(var.default, str) else None)
    return SettingError(f"{var.name}: expected {var.accepts}{shown}; unset it for the default"
                        + (f" ({default})" if default is not None else ""))


def number(name: str) -> float:
    """A number or whole-number variable, checked against its range (the default when unset or empty)."""
    var = VARIABLES[name]
    text = _raw(name)
    if not text:
        return var.default  # type: ignore[return-value]
    try:
        value = float(text)
    except ValueError:
        raise _refuse(var, text) from None
    low_ok = value > var.low if var.low_open else value >= var.low  # type: ignore[operator]
    if not math.isfinite(value) or not low_ok or value > var.high or (  # type: ignore[operator]
            var.kind == "integer" and not value.is_integer()):
        raise _refuse(var, text)
    return int(value) if var.kind == "integer" else value


def path(name: str) -> Path | None:
    """A path variable (`~` expanded by callers where they did so before), None when unset or empty."""
    text = os.environ.get(name, "")
    return Path(text) if text else None


def url(name: str) -> str | None:
    """An http(s) URL variable, None when unset or empty. The refusal never shows the value (a URL may carry
    a password)."""
    text = _raw(name)
    if not text:
        return None
    try:
        parts = urlsplit(text)
        ok = (parts.scheme in ("http", "https") and bool(parts.hostname)
              and all(ch.isprintable() and not ch.isspace() for ch in text))
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        ok = False
    if not ok:
        raise _refuse(VARIABLES[name])
    return text


def secret(name: str) -> str | None:
    """An API key or token, None when unset or empty; the refusal never shows it."""
    text = os.environ.get(name, "")
    if not text:
        return None
    if len(text) > MAX_SECRET_CHARS or not text.isprintable() or any(ch.isspace() for ch in text):
        raise _refuse(VARIABLES[name])
    return text


def flag(name: str) -> bool:
    return _raw(name).upper() in _TRUE


def present(name: str) -> bool:
    return bool(os.environ.get(name))


# ----------------------------------------------------------------------------- the settings, by use
def cache_dir() -> Path:
    """$GPU_ADVISOR_CACHE_DIR, else $XDG_CACHE_HOME/gpu-advisor, else ~/.cache/gpu-advisor."""
    mine = path("GPU_ADVISOR_CACHE_DIR")
    if mine is not None:
        return mine.expanduser()
    base = path("XDG_CACHE_HOME") or Path.home() / ".cache"
    return base.expanduser() / "gpu-advisor"


def ledger_url() -> str:
    """$GPU_ADVISOR_LEDGER, else a SQLite file under $XDG_DATA_HOME/gpu-advisor (~/.local/share/gpu-advisor)."""
    mine = secret("GPU_ADVISOR_LEDGER")
    if mine:
        return mine
    base = path("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return f"sqlite:///{base.expanduser() / 'gpu-advisor' / 'ledger.sqlite'}"


def stale_days() -> float:
    return number("GPU_ADVISOR_STALE_DAYS")


def price_tolerance() -> float:
    return number("GPU_ADVISOR_PRICE_TOLERANCE")


def observation_tolerance() -> float:
    return number("GPU_ADVISOR_OBSERVATION_TOLERANCE")


def today() -> dt.datetime | None:
    """The pinned day (00:00 UTC) from GPU_ADVISOR_TODAY, or None when it is unset or empty."""
    text = _raw("GPU_ADVISOR_TODAY")
    if not text:
        return None
    try:
        if not _DAY.fullmatch(text):
            raise ValueError
        day = dt.date.fromisoformat(text)
        if not 2000 <= day.year <= 2099:
            raise ValueError
    except ValueError:
        raise SettingError(f"GPU_ADVISOR_TODAY: expected a date like 2026-12-01 (YYYY-MM-DD, 2000 to 2099), "
                           f"got '{text[:40]}'") from None
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)


def observations_sheet() -> Path | None:
    return path("GPU_ADVISOR_OBSERVATIONS")


def managed_sheet() -> Path | None:
    return path("GPU_ADVISOR_MANAGED_SHEET")


HTTP = {"timeout": "TIMEOUT", "deadline": "DEADLINE", "budget": "SOURCE_BUDGET", "retries": "RETRIES",
        "connect_retries": "CONNECT_RETRIES", "min_rate": "MIN_RATE", "min_rate_time": "MIN_RATE_TIME",
        "backoff": "BACKOFF", "max_wait": "MAX_WAIT", "max_bytes": "MAX_BYTES",
        "max_stream_bytes": "MAX_STREAM_BYTES", "max_pages": "MAX_PAGES"}


def http_limits() -> dict:
    """pricing.http's limits by key ('timeout', 'retries', ...), each from its GPU_ADVISOR_HTTP_* variable."""
    return {key: number(f"GPU_ADVISOR_HTTP_{suffix}") for key, suffix in HTTP.items()}


def source_url(source: str) -> str | None:
    """GPU_ADVISOR_<SOURCE>_URL for a price source, None when unset."""
    return url(f"GPU_ADVISOR_{source.upper()}_URL")


def api_key(name: str) -> str | None:
    """A price source's API key (LAMBDA_API_KEY, ...), None when unset."""
    return secret(name)


def hf_endpoint() -> str:
    return (url("HF_ENDPOINT") or str(VARIABLES["HF_ENDPOINT"].default)).rstrip("/")


def hf_token() -> str | None:
    return secret("HF_TOKEN")


def hf_offline() -> bool:
    return flag("HF_HUB_OFFLINE") or flag("TRANSFORMERS_OFFLINE")


def proxy_set() -> bool:
    return any(present(name) for name in PROXIES)


def terminal_columns() -> int | None:
    """COLUMNS when it is a whole number > 0 (shells export it; a stray value is not the user's mistake)."""
    text = _raw("COLUMNS")
    return int(text) if text.isdigit() and int(text) > 0 else None


def no_color() -> bool:
    return present("NO_COLOR")


def markdown_table() -> str:
    """The table docs/settings.md holds: every variable, its default, what it accepts and what it changes."""
    def default(v: Variable) -> str:
        if v.default is None or v.default is False:
            return "unset"
        if isinstance(v.default, (int, float)) and v.kind in ("number", "integer"):
            return _amount(v.default, v.unit)
        return str(v.default)

    rows = ["| variable | default | accepts | what it changes |", "|---|---|---|---|"]
    groups: list[list[Variable]] = []  # neighbours that differ only in name share a row
    for v in _VARIABLES:
        if groups and (groups[-1][0].kind, groups[-1][0].what, groups[-1][0].default) == (v.kind, v.what, v.default):
            groups[-1].append(v)
        else:
            groups.append([v])
    rows += [f"| {', '.join(f'`{v.name}`' for v in g)} | {default(g[0])} | {g[0].accepts} | {g[0].what} |"
             for g in groups]
    return "\n".join(rows)
