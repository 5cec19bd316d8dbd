"""One requests helper for every fetcher: timeouts, bounded retries, clear errors.

Retries on connection errors, timeouts, 429 and 5xx with exponential backoff, honouring
`Retry-After` (capped so a hostile header cannot stall a refresh). Errors name the URL.
Knobs (for tests and slow links): GPU_ADVISOR_HTTP_TIMEOUT (s), GPU_ADVISOR_HTTP_RETRIES,
GPU_ADVISOR_HTTP_BACKOFF (base seconds), GPU_ADVISOR_HTTP_MAX_WAIT (cap per wait, s).
"""

from __future__ import annotations

import os
import time

from pricing.errors import FetchError

RETRY_STATUS = {429, 500, 502, 503, 504}


def _env(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def settings() -> dict:
    return {
        "timeout": _env("GPU_ADVISOR_HTTP_TIMEOUT", 30.0),
        "retries": int(_env("GPU_ADVISOR_HTTP_RETRIES", 4)),
        "backoff": _env("GPU_ADVISOR_HTTP_BACKOFF", 1.0),
        "max_wait": _env("GPU_ADVISOR_HTTP_MAX_WAIT", 60.0),
    }


def session():
    import requests

    s = requests.Session()
    s.headers["User-Agent"] = "gpu-cost-advisor (price refresh)"
    return s


def _wait(resp, attempt: int, cfg: dict) -> float:
    delay = cfg["backoff"] * (2 ** attempt)
    header = resp.headers.get("Retry-After") if resp is not None else None
    if header:
        try:
            delay = float(header)
        except ValueError:
            import email.utils

            try:
                when = email.utils.parsedate_to_datetime(header).timestamp()
                delay = when - time.time()
            except (TypeError, ValueError):
                pass
    return max(0.0, min(delay, cfg["max_wait"]))


def request(method: str, url: str, *, session=None, stream: bool = False, **kw):
    """A response with status 2xx (body read unless `stream`), or FetchError naming the URL."""
    import requests

    cfg = settings()
    s = session or globals()["session"]()
    kw.setdefault("timeout", cfg["timeout"])
    last = "no attempt made"
    for attempt in range(cfg["retries"] + 1):
        resp = None
        try:
            resp = s.request(method, url, stream=stream, **kw)
            if resp.status_code in RETRY_STATUS:
                last = f"HTTP {resp.status_code}"
            elif resp.status_code >= 400:
                raise FetchError(url, f"HTTP {resp.status_code} {resp.reason or ''}".strip())
            else:
                if not stream:
                    resp.content  # noqa: B018 - read now so a truncated body fails here
                return resp
        except requests.Timeout:
            last = f"timed out after {kw['timeout']} s"
        except requests.ConnectionError as exc:  # includes truncated bodies (IncompleteRead)
            last = f"connection failed or body truncated ({type(exc).__name__})"
        except requests.exceptions.ChunkedEncodingError:
            last = "body truncated (chunked encoding broken)"
        except requests.RequestException as exc:
            raise FetchError(url, f"request failed: {exc}") from None
        if attempt < cfg["retries"]:
            time.sleep(_wait(resp, attempt, cfg))
    raise FetchError(url, f"gave up after {cfg['retries'] + 1} attempt(s); last: {last}")


def _check_length(resp, url: str) -> None:
    expected = resp.headers.get("Content-Length")
    if expected and expected.isdigit() and "Content-Encoding" not in resp.headers:
        if len(resp.content) != int(expected):
            raise FetchError(url, f"body truncated: {len(resp.content)} of {expected} bytes")


def get_json(url: str, *, session=None, method: str = "GET", **kw):
    """Parsed JSON, or a FetchError saying what came back instead (HTML page, empty, junk)."""
    resp = request(method, url, session=session, **kw)
    _check_length(resp, url)
    body = resp.content
    if not body.strip():
        raise FetchError(url, "empty response body (expected JSON)")
    try:
        return resp.json()
    except ValueError:
        head = body[:60].decode("utf-8", "replace").strip().replace("\n", " ")
        kind = "an HTML page" if head.lower().startswith(("<!doctype", "<html")) else "not JSON"
        raise FetchError(url, f"response is {kind} (starts with {head!r})") from None


def get_text(url: str, *, session=None, **kw) -> str:
    resp = request("GET", url, session=session, **kw)
    _check_length(resp, url)
    text = resp.content.decode(resp.encoding or "utf-8", "replace")
    if not text.strip():
        raise FetchError(url, "empty response body")
    if text.lstrip()[:15].lower().startswith(("<!doctype", "<html")):
        raise FetchError(url, "response is an HTML page, not a price file")
    return text


def field(obj, path: str, url: str, kind=None):
    """obj['a']['b'] for path 'a.b', or a FetchError naming the missing/mistyped field."""
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise FetchError(url, f"response has no field '{path}'")
        cur = cur[part]
    if kind is not None and not isinstance(cur, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise FetchError(url, f"field '{path}' is {type(cur).__name__}, expected {names}")
    return cur


def progress(total: int | None, label: str):
    """A rich progress bar on stderr (hidden when stderr is not a terminal); returns (bar, advance)."""
    import sys

    from rich.console import Console
    from rich.progress import Progress

    bar = Progress(console=Console(stderr=True), transient=True, disable=not sys.stderr.isatty())
    task = bar.add_task(label, total=total)
    return bar, (lambda *_: bar.advance(task))
