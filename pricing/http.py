"""One requests helper for every fetcher: bounded in time and size, bounded retries, clear errors.

A price server is not trusted to behave. Every limit, when hit, is one `FetchError`
naming the URL and the limit (and the environment variable that tunes it); `refresh` adds
that the last good sheet was kept.

The limits (connect and read timeout, per-request deadline, per-source budget, retries, minimum
rate, backoff, Retry-After cap, body sizes, pages) and their GPU_ADVISOR_HTTP_* variables are in
pricing/settings.py, which reads and validates them, and in its table, docs/settings.md.

The per-request deadline is enforced by a watchdog that shuts the socket down when time is
up, so it also ends a stall inside one read (requests' own timeout is per read only). That
needs a session from `session()`; with any other session the deadline is checked between
chunks of the body only.
"""

from __future__ import annotations

import contextlib
import math
import re
import socket
import sys
import threading
import time

from pricing import files, settings as _settings
from pricing.errors import FetchError, PriceInputError
from pricing.units import KiB, MiB

RETRY_STATUS = {429, 500, 502, 503, 504}
CHUNK = 64 * KiB
MIB = MiB

_state = threading.local()  # .watch (request in flight), .budget (source refresh in progress)


def settings() -> dict:
    """The limits above, read now (pricing.settings.http_limits: a value out of range is refused, exit 2)."""
    return _settings.http_limits()


def _size(n: float) -> str:
    return f"{n / MIB:g} MiB" if n >= MIB else f"{n:,.0f} bytes"


# --------------------------------------------------------------------------- deadlines
class _Watch:
    """A wall-clock limit for one request: a timer that shuts down the request's socket when
    time is up (so a read blocked on a trickling server returns), plus `check()` between reads."""

    def __init__(self, seconds: float, message: str):
        self.seconds = max(seconds, 0.0)
        self.message = message
        self.end = time.monotonic() + self.seconds
        self.expired = False
        self._conns: list = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(self.seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def attach(self, conn) -> None:
        """Remember the connection and its socket now: http.client drops `conn.sock` once a
        `Connection: close` response owns it, and that is the socket a trickle blocks on."""
        with self._lock:
            self._conns.append((conn, getattr(conn, "sock", None)))
            if self.expired:
                self._shutdown_all()

    def _fire(self) -> None:
        with self._lock:
            self.expired = True
            self._shutdown_all()

    def _shutdown_all(self) -> None:
        for conn, sock in self._conns:
            for s in {id(x): x for x in (sock, getattr(conn, "sock", None)) if x is not None}.values():
                _shutdown(s)

    def check(self, url: str) -> None:
        if self.expired or time.monotonic() >= self.end:
            self.expired = True
            raise FetchError(url, self.message)

    def cancel(self) -> None:
        self._timer.cancel()


def _shutdown(sock) -> None:
    try:  # the plain-socket shutdown, also for TLS: the blocked read sees EOF at once
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except Exception:  # noqa: BLE001 - already closed, or not a socket (proxy tunnel)
        pass


@contextlib.contextmanager
def budget(label: str, seconds: float | None = None):
    """Within the block, all requests together may take `seconds` (default
    GPU_ADVISOR_HTTP_SOURCE_BUDGET); the request that would pass it fails with a FetchError."""
    seconds = settings()["budget"] if seconds is None else seconds
    prev = getattr(_state, "budget", None)
    _state.budget = (time.monotonic() + seconds, seconds, label)
    try:
        yield
    finally:
        _state.budget = prev


def _budget_message(seconds: float, label: str) -> str:
    return (f"stopped: the {label} refresh used up its {seconds:g} s budget "
            "(GPU_ADVISOR_HTTP_SOURCE_BUDGET)")


def _new_watch(cfg: dict, url: str) -> _Watch:
    seconds = cfg["deadline"]
    message = (f"took longer than the {seconds:g} s limit for one request "
               "(GPU_ADVISOR_HTTP_DEADLINE); stopped")
    b = getattr(_state, "budget", None)
    if b is not None:
        end, total, label = b
        left = end - time.monotonic()
        if left <= 0:
            raise FetchError(url, _budget_message(total, label))
        if left < seconds:
            seconds, message = left, _budget_message(total, label)
    return _Watch(seconds, message)


# --------------------------------------------------------------------------- session
_CLASSES: dict = {}


def _pool_classes() -> dict:
    """http/https connection pools whose connections report themselves to the current watch."""
    if not _CLASSES:
        from urllib3.connection import HTTPConnection, HTTPSConnection
        from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

        class _Tracked:
            def _watched(self):
                watch = getattr(_state, "watch", None)
                if watch is not None:
                    watch.attach(self)

            def connect(self):
                result = super().connect()
                self._watched()  # a new connection: its socket exists from here on
                return result

            def request(self, *a, **kw):
                self._watched()
                return super().request(*a, **kw)

        class Conn(_Tracked, HTTPConnection):
            pass

        class SConn(_Tracked, HTTPSConnection):
            pass

        class Pool(HTTPConnectionPool):
            ConnectionCls = Conn

        class SPool(HTTPSConnectionPool):
            ConnectionCls = SConn

        _CLASSES.update(http=Pool, https=SPool)
    return _CLASSES


def session():
    """A requests session whose requests can be cut off by the per-request deadline."""
    import requests
    from requests.adapters import HTTPAdapter

    class Adapter(HTTPAdapter):
        def init_poolmanager(self, *a, **kw):
            super().init_poolmanager(*a, **kw)
            self.poolmanager.pool_classes_by_scheme = dict(_pool_classes())

        def proxy_manager_for(self, proxy, **kw):
            manager = super().proxy_manager_for(proxy, **kw)
            manager.pool_classes_by_scheme = dict(_pool_classes())
            return manager

    class Session(requests.Session):
        def get_redirect_target(self, resp):
            """Redirects stay on the host that was asked (as next-page links do): a price server
            that sends us elsewhere is refused, naming both ends (credentials masked)."""
            target = super().get_redirect_target(resp)
            if target:
                from urllib.parse import urljoin

                where = urljoin(resp.url, target)
                if not same_origin(resp.url, where):
                    raise FetchError(redact(resp.url), f"redirected to another host ({redact(where)}); refused "
                                                       "(redirects are followed on the same host only)")
            return target

    s = Session()
    s.max_redirects = 5  # requests allows 30; a price API needs one at most
    s.mount("http://", Adapter())
    s.mount("https://", Adapter())
    s.headers["User-Agent"] = "gpu-cost-advisor (price refresh)"
    return s


# --------------------------------------------------------------------------- requests
def _retry_after(resp) -> float | None:
    header = resp.headers.get("Retry-After") if resp is not None else None
    if not header:
        return None
    try:
        delay = float(header)
    except ValueError:
        import email.utils

        try:
            delay = email.utils.parsedate_to_datetime(header).timestamp() - time.time()
        except (TypeError, ValueError, OverflowError):
            return None
    if math.isnan(delay):
        return None
    return max(delay, 0.0)


def _wait(resp, attempt: int, cfg: dict, url: str) -> float:
    """Seconds to wait before the next attempt; a Retry-After over the cap fails the fetch."""
    asked = _retry_after(resp)
    if asked is None:
        return min(cfg["backoff"] * (2 ** attempt), cfg["max_wait"])
    if asked > cfg["max_wait"]:
        shown = "forever" if math.isinf(asked) else f"{asked:,.0f} s"
        raise FetchError(url, f"HTTP {resp.status_code}: the server asks to retry after {shown} "
                              f"(Retry-After), more than the {cfg['max_wait']:g} s cap "
                              "(GPU_ADVISOR_HTTP_MAX_WAIT); not waiting")
    return asked


def _sleep(seconds: float, url: str) -> None:
    b = getattr(_state, "budget", None)
    if b is not None:
        end, total, label = b
        if time.monotonic() + seconds > end:
            raise FetchError(url, _budget_message(total, label) + " (the next retry would pass it)")
    time.sleep(seconds)


def _check_declared(resp, url: str, max_bytes: int) -> None:
    declared = resp.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise FetchError(url, f"response is {_size(int(declared))}, larger than the "
                              f"{_size(max_bytes)} limit ({_limit_env(max_bytes)}); not downloaded")


def _limit_env(max_bytes: int) -> str:
    cfg = settings()
    return ("GPU_ADVISOR_HTTP_MAX_STREAM_BYTES" if max_bytes == cfg["max_stream_bytes"]
            and max_bytes != cfg["max_bytes"] else "GPU_ADVISOR_HTTP_MAX_BYTES")


class _Rate:
    """curl's --speed-limit/--speed-time: over every `seconds`-long window the body must bring at
    least `limit` bytes per second on average (raw bytes, before decoding)."""

    def __init__(self, cfg: dict):
        self.limit, self.seconds = cfg["min_rate"], cfg["min_rate_time"]
        self.start, self.got = time.monotonic(), 0

    def check(self, n: int, url: str) -> None:
        self.got += n
        elapsed = time.monotonic() - self.start
        if self.limit <= 0 or elapsed < self.seconds:
            return
        if self.got / elapsed < self.limit:
            raise FetchError(url, f"body arrived at {self.got / elapsed:,.0f} bytes/s over {elapsed:.0f} s, below "
                                  f"the {self.limit:,.0f} bytes/s minimum (GPU_ADVISOR_HTTP_MIN_RATE over "
                                  "GPU_ADVISOR_HTTP_MIN_RATE_TIME); abandoned")
        self.start, self.got = time.monotonic(), 0


def _pieces(resp):
    """Decoded body pieces as soon as any bytes arrive (urllib3's read1: at most one socket read
    each, so a trickle is seen while it trickles instead of blocking to fill a 64 KiB chunk),
    with each piece's raw byte count; urllib3's errors turned into requests' (as iter_content does)."""
    import requests
    from urllib3.exceptions import DecodeError, ProtocolError, ReadTimeoutError

    raw = resp.raw
    if not hasattr(raw, "read1"):  # urllib3 < 2.3: whole chunks only (the deadline still ends a trickle)
        for chunk in resp.iter_content(CHUNK):
            yield chunk, len(chunk)
        return
    try:
        while True:
            before = raw.tell()
            piece = raw.read1(CHUNK, decode_content=True)
            if not piece:  # read1 blocks until a byte or the end: empty is the end
                return
            yield piece, raw.tell() - before
    except ProtocolError as exc:
        raise requests.exceptions.ChunkedEncodingError(exc) from exc
    except DecodeError as exc:
        raise requests.exceptions.ContentDecodingError(exc) from exc
    except ReadTimeoutError as exc:
        raise requests.exceptions.ConnectionError(exc) from exc


def _chunks(resp, url: str, watch: _Watch, max_bytes: int):
    """Decoded body chunks, with the deadline and the minimum rate checked and the decoded size counted."""
    total = 0
    rate = _Rate(settings())
    for chunk, raw_bytes in _pieces(resp):
        total += len(chunk)
        if total > max_bytes:
            raise FetchError(url, f"response is larger than the {_size(max_bytes)} limit "
                                  f"({_limit_env(max_bytes)}) once decoded; stopped reading")
        watch.check(url)
        rate.check(raw_bytes, url)
        if chunk:
            yield chunk
    watch.check(url)
    declared = resp.headers.get("Content-Length", "")
    if declared.isdigit() and "Content-Encoding" not in resp.headers and total != int(declared):
        raise FetchError(url, f"body truncated: {total} of {declared} bytes")


def _retryable(exc: Exception, url: str, watch: _Watch, timeout) -> tuple[str, bool]:
    """(what went wrong, whether no host could be reached at all) for a failure worth another attempt; a
    FetchError for one that is not (the deadline passed, an undecodable body, a malformed request), and any
    exception that is not a request's failure raised as it is."""
    import requests

    if watch.expired:
        raise FetchError(url, watch.message) from None
    if isinstance(exc, requests.Timeout):
        return f"timed out after {timeout} s", False
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return "body truncated (chunked encoding broken)", False
    if isinstance(exc, requests.ConnectionError) and _unreachable(exc):
        return f"cannot reach the host ({_unreachable(exc)})", True
    if isinstance(exc, requests.ConnectionError):  # includes truncated bodies
        return "connection failed or body truncated", False
    if isinstance(exc, requests.exceptions.ContentDecodingError):
        raise FetchError(url, "compressed body could not be decoded") from None
    if isinstance(exc, requests.RequestException):
        raise FetchError(url, f"request failed: {exc}") from None
    raise exc


def _answer(resp, url: str, watch: _Watch, max_bytes: int, stream: bool):
    """The response when its status is final (2xx, body read unless `stream`), None when the status is worth
    a retry; a FetchError for any other error status."""
    if resp.status_code in RETRY_STATUS:
        return None
    if resp.status_code >= 400:
        raise FetchError(url, f"HTTP {resp.status_code} {resp.reason or ''}".strip())
    _check_declared(resp, url, max_bytes)
    if stream:
        resp._pricing_limits = (watch, max_bytes)
        return resp
    body = b"".join(_chunks(resp, url, watch, max_bytes))
    resp._content, resp._content_consumed = body, True
    return resp


def request(method: str, url: str, *, session=None, stream: bool = False, max_bytes: int | None = None,
            **kw):
    """A response with status 2xx, or FetchError naming the URL.

    The body is read here (bounded by the deadline and `max_bytes`, default
    GPU_ADVISOR_HTTP_MAX_BYTES) unless `stream`: then read it with `iter_body(resp, url)`, which
    applies the same limits."""
    cfg = settings()
    max_bytes = cfg["max_bytes"] if max_bytes is None else max_bytes
    s = session or globals()["session"]()
    kw.setdefault("timeout", cfg["timeout"])
    last = "no attempt made"
    unreachable = 0  # attempts that found no host to talk to
    attempts = 0
    for attempt in range(cfg["retries"] + 1):
        attempts += 1
        resp = None
        watch = _new_watch(cfg, url)
        _state.watch = watch
        handed_over = False
        try:
            resp = s.request(method, url, stream=True, **kw)
            done = _answer(resp, url, watch, max_bytes, stream)
            if done is not None:
                handed_over = stream
                return done
            last = f"HTTP {resp.status_code}"
        except FetchError:
            raise
        except Exception as exc:  # noqa: BLE001 - sorted by _retryable; anything after a deadline is that
            last, no_host = _retryable(exc, url, watch, kw["timeout"])
            unreachable += no_host
        finally:
            _state.watch = None
            if not handed_over:
                watch.cancel()
                if resp is not None:
                    resp.close()  # after a full read this only returns the connection
        if unreachable > cfg["connect_retries"]:
            break  # refused or unresolvable after its retry: the source ends now
        if attempt < cfg["retries"]:
            _sleep(_wait(resp, attempt, cfg, url), url)
    raise FetchError(url, f"gave up after {attempts} attempt(s); last: {last}")


def _unreachable(exc) -> str | None:
    """'connection refused' / 'name not resolved' when `exc` (a requests ConnectionError) says no
    connection could be made at all, else None (a reset or a cut body may be worth a retry)."""
    from urllib3.exceptions import NameResolutionError, NewConnectionError

    seen, cur = set(), exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, NameResolutionError):
            return "name not resolved"
        if isinstance(cur, NewConnectionError):
            return "connection refused" if isinstance(getattr(cur, "__cause__", None) or cur.__context__,
                                                       ConnectionRefusedError) else "no connection"
        reason = getattr(cur, "reason", None)
        nxt = reason if isinstance(reason, BaseException) else (cur.args[0] if cur.args and
                                                                 isinstance(cur.args[0], BaseException) else None)
        cur = nxt or cur.__cause__ or cur.__context__
    return None


def iter_body(resp, url: str):
    """Decoded chunks of a response from `request(..., stream=True)`, under its limits."""
    import requests

    watch, max_bytes = getattr(resp, "_pricing_limits", None) or (
        _Watch(settings()["deadline"], "took too long"), settings()["max_bytes"])
    try:
        yield from _chunks(resp, url, watch, max_bytes)
    except FetchError:
        raise
    except Exception as exc:  # noqa: BLE001
        if watch.expired:
            raise FetchError(url, watch.message) from None
        if isinstance(exc, requests.RequestException):
            raise FetchError(url, f"download truncated or broken mid-way ({type(exc).__name__})") from None
        raise
    finally:
        watch.cancel()


def _text_of(resp) -> str:
    text = resp.content.decode(resp.encoding or "utf-8", "replace")
    return text[1:] if text.startswith("\ufeff") else text


def get_json(url: str, *, session=None, method: str = "GET", **kw):
    """Parsed JSON, or a FetchError saying what came back instead (HTML page, empty, junk,
    nested too deep, too large)."""
    resp = request(method, url, session=session, **kw)
    body = resp.content
    if not body.strip():
        raise FetchError(url, "empty response body (expected JSON)")
    text = body.decode("utf-8-sig", "replace")
    try:
        return files.load_json(text, "response", max_bytes=sys.maxsize)  # size: bounded above
    except PriceInputError as exc:
        msg = str(exc).split(": ", 1)[-1]
        if not msg.startswith("not valid JSON"):
            raise FetchError(url, msg) from None
        head = body[:60].decode("utf-8", "replace").strip().replace("\n", " ")
        kind = "an HTML page" if head.lower().startswith(("<!doctype", "<html")) else "not JSON"
        raise FetchError(url, f"response is {kind} (starts with {head!r})") from None


def get_text(url: str, *, session=None, **kw) -> str:
    resp = request("GET", url, session=session, **kw)
    text = _text_of(resp)
    if not text.strip():
        raise FetchError(url, "empty response body")
    if text.lstrip()[:15].lower().startswith(("<!doctype", "<html")):
        raise FetchError(url, "response is an HTML page, not a price file")
    return text


_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@?#]*@")


def redact(text: str) -> str:
    """Text with the credentials of every URL in it masked: `http://user:pw@host/p` ->
    `http://***@host/p`. Applied to whatever is stored or printed from a URL (cached sheets and
    their metadata, messages), so a password in GPU_ADVISOR_<SOURCE>_URL or --endpoint stays in
    the request alone."""
    return _USERINFO.sub(r"\1***@", text) if isinstance(text, str) and "@" in text else text


def same_origin(url: str, other: str) -> bool:
    """Same scheme, host and port (default ports filled in)."""
    from urllib.parse import urlsplit

    def key(u: str):
        p = urlsplit(u)
        scheme = p.scheme.lower()
        try:
            port = p.port
        except ValueError:
            return None
        return scheme, (p.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)

    a = key(url)
    return a is not None and a == key(other)


def field(obj, path: str, url: str, kind=None):
    """obj['a']['b'] for path 'a.b', or a FetchError naming the missing/mistyped field."""
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise FetchError(url, f"response has no field '{path}'")
        cur = cur[part]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if kind is not None and (not isinstance(cur, kind) or (isinstance(cur, bool) and bool not in kinds)):
        # JSON true is a Python int: never read as 1 where a number goes
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise FetchError(url, f"field '{path}' is {type(cur).__name__}, expected {names}")
    return cur


def progress(total: int | None, label: str, plain=None):
    """Progress on stderr: a rich bar on a terminal; elsewhere (a log, CI, a pipe) one plain line
    per step through `plain(text)` when given. Returns (bar, advance)."""
    import contextlib
    import sys

    if not sys.stderr.isatty():
        steps = [0]

        def advance(step=None, *_):
            steps[0] += 1
            if plain is not None:
                plain(f"{label}: {step if step else 'step'} done ({steps[0]}{f'/{total}' if total else ''})")

        return contextlib.nullcontext(), advance
    from rich.console import Console
    from rich.progress import Progress

    bar = Progress(console=Console(stderr=True), transient=True)
    task = bar.add_task(label, total=total)
    return bar, (lambda *_: bar.advance(task))
