"""`prices refresh`: run fetchers, validate, and replace cached sheets only on full success.

Each source's base URL is `--endpoint` (one source at a time), else $GPU_ADVISOR_<NAME>_URL,
else the provider's public URL. Sources that need a key (LAMBDA_API_KEY, RUNPOD_API_KEY) are
skipped with a one-line notice when it is absent (vast's VAST_API_KEY is optional: its offer search
is public); keys go only into request
headers, never into sheets, metadata, messages or logs. A fetch that fails at any point —
HTTP error after retries, timeout, truncated body, malformed payload, zero valid rows, a limit
of pricing.http (per-request deadline, per-source budget, Retry-After cap, size, pages) — leaves
the last good cached sheet untouched, byte for byte, and its message says so.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from pricing import cache, http, settings
from pricing.errors import FetchError, PriceInputError, unknown
from pricing.schema import validate
from pricing.sources import KEY_OPTIONAL, SOURCES


@dataclass
class Outcome:
    source: str
    status: str  # ok | skipped | failed
    message: str
    rows: int = 0
    skipped_rows: int = 0


def base_url(name: str, endpoint: str | None = None) -> str:
    module = importlib.import_module(SOURCES[name][0])
    return endpoint or settings.source_url(name) or module.DEFAULT_URL


def stamp(df):
    """A live feed's dates: what the fetcher recorded (the response's own timestamp, e.g. AWS's
    publication date, else the time of the fetch) is when the price was observed; fetched_at
    becomes now, when we fetched it."""
    import datetime as dt

    df = df.copy()
    if "observed_at" not in df.columns:
        df["observed_at"] = df["fetched_at"] if "fetched_at" in df.columns else None
    df["fetched_at"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return df


def _redacted(df):
    """A fetched frame whose text cells name no URL password (sources put the URL in `source`)."""
    df = df.copy()
    for col in ("source", "notes"):
        if col in df.columns:
            df[col] = df[col].map(http.redact)
    return df


def _check_args(names: list[str], endpoint: str | None) -> None:
    bad = [n for n in names if n not in SOURCES]
    if bad:
        raise unknown("--source", bad[0], SOURCES)
    if endpoint and len(names) != 1:
        raise PriceInputError("--endpoint: give exactly one --source with it "
                              f"(got {len(names)}: {', '.join(names)})")


def _skipped(name: str, key_env: str | None, key: str) -> tuple[str, str] | None:
    """(the outcome's message, the progress notice's reason) when `name` is not fetched now (no key, a
    missing optional package), else None."""
    if key_env and not key and name not in KEY_OPTIONAL:
        return f"set {key_env} to fetch {name} prices", f"set {key_env} to fetch"
    module = importlib.import_module(SOURCES[name][0])
    why = getattr(module, "missing", lambda: None)()
    return (why, why) if why else None


def _failure(exc: Exception, name: str, url: str, key: str) -> str:
    """One line for a failed source (no URL password, no key), saying what the cache still holds."""
    if isinstance(exc, FetchError):
        msg = str(exc)
    elif isinstance(exc, OSError):  # the cache folder is a file, the disk is full, no permission
        where = exc.filename or cache.sheets_dir()
        msg = f"cannot write the cache at {where}: {exc.strerror or exc}"
    else:  # e.g. a payload our parser did not expect: still one line, still the old sheet
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        msg = f"{url}: unexpected {type(exc).__name__}: {first}"
    msg = http.redact(" ".join(msg.split()))  # one line, whatever the server sent; no URL password
    if key:
        msg = msg.replace(key, "***")
    kept = ("kept the last good sheet" if cache.sheet_path(name).exists()
            else "nothing cached for it yet; the bundled snapshot is used")
    return f"{msg} ({kept})"


def _fetch_one(name: str, key_env: str | None, key: str, regions, endpoint, notify) -> Outcome:
    """Fetch, validate and cache one source; any failure is an Outcome that keeps the cache as it was."""
    module = importlib.import_module(SOURCES[name][0])
    url = base_url(name, endpoint)
    kwargs = {"key": key} if key_env else {}
    sess = http.session()
    try:
        notify(f"{name}: fetching {http.redact(url)} ...")  # plain text, on a terminal or not
        bar, advance = http.progress(None, name, plain=notify)
        with bar, http.budget(name):
            df, problems = module.fetch(url, list(regions) or None, session=sess,
                                        progress=advance, **kwargs)
        df = stamp(_redacted(df))
        good, more = validate(df, f"{name} feed")
        problems = list(problems) + more
        if not len(good):
            raise FetchError(url, "no valid GPU offers in the response; cache left as it was")
        cache.write_sheet(name, good, source=name, url=http.redact(url))
    except Exception as exc:  # noqa: BLE001 - any failure of one source: report, keep the cache
        return Outcome(name, "failed", _failure(exc, name, url, key))  # printed once, in the command's error line
    finally:
        sess.close()
    notify(f"{name}: {len(good)} offers cached" +
           (f", {len(problems)} rows skipped" if problems else ""))
    return Outcome(name, "ok", f"{len(good)} offers cached", len(good), len(problems))


def refresh(sources=None, regions=(), endpoint: str | None = None, offline: bool = False,
            notify=None) -> list[Outcome]:
    names = list(sources or SOURCES)
    _check_args(names, endpoint)
    notify = notify or (lambda msg: None)
    if not offline:
        http.settings()  # a GPU_ADVISOR_HTTP_* value out of range is refused here (exit 2), not as each source's failure
    out: list[Outcome] = []
    for name in names:
        if offline:
            out.append(Outcome(name, "skipped", "offline: kept the cached/bundled sheet"))
            continue
        key_env = SOURCES[name][1]
        key = (settings.api_key(key_env) or "") if key_env else ""
        skip = _skipped(name, key_env, key)
        if skip:
            out.append(Outcome(name, "skipped", skip[0]))
            notify(f"{name}: skipped ({skip[1]})")
            continue
        out.append(_fetch_one(name, key_env, key, regions, endpoint, notify))
    return out
