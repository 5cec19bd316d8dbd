"""Files in and out, in one place: atomic writes, the cache folder, bounded YAML/JSON/CSV
reading and spreadsheet-safe CSV writing.

Everything a user or a server hands us is data, never code, and is read with limits, so a
hostile file fails fast with one line (`PriceInputError`, exit 2) naming the file (`what`) and
the limit, instead of eating minutes, memory or the stack:

=========================  ===============================  ==========================
limit                      default                          applies to
=========================  ===============================  ==========================
``MAX_DOC_BYTES``          5 MB (5,000,000 bytes)           load_yaml / load_json text
``MAX_SHEET_BYTES``        50 MB                            read_text, open_text (CSV sheets)
``MAX_DEPTH``              100 levels of nesting            load_yaml / load_json
``MAX_YAML_NODES``         2,000,000 nodes, aliases         load_yaml (billion laughs)
                           expanded
``MAX_CSV_FIELD``          65,536 characters per field      csv_field_limit()
``MAX_ZIP_MEMBERS``        1,000 entries                    read_zip (members of any kind)
``MAX_ZIP_RATIO``          100 : 1 (members over 1 MiB)     read_zip (unpacked / packed)
=========================  ===============================  ==========================

Every file is opened through `open_regular` (read_regular_file, read_text, open_text): only a
regular file is read (a FIFO, a device, a symlink to /dev/zero or a folder is refused before a
byte is read, and the non-blocking open never waits on a FIFO), its size is checked on the open
descriptor before reading, and every byte read is counted in `BYTES_READ` (so tests can show a
refusal came at the first limit). Each function takes its limit as a keyword (None = the module
default, read at call time), so a caller with other needs passes its own.
A byte-order mark (UTF-8 as Excel writes it, or UTF-16) is accepted everywhere.
`regular_size` applies the same check to a path handed to a third-party reader that opens it itself.

A zip archive (`read_zip`) is bounded before one member is unpacked: entries counted from its end
record (so 50,000 entries are refused without listing them), the sum of the unpacked sizes it declares,
each member's compression ratio, overlapping entries (two names for the same bytes: a quadratic bomb),
encryption and compression methods Python cannot unpack (Zstandard, WinZip AES, ...) are each refused
with one line naming the member; unpacking then counts every byte against the same limits
(`MEMBERS_OPENED`, `UNZIPPED_BYTES`: counters for tests).

CSV cells meant for spreadsheets go through `csv_safe` / `to_csv`, which neutralise formula
cells (see `csv_safe` for the exact rule).
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import os
import re
import stat
import tempfile
from pathlib import Path

from pricing import settings
from pricing.errors import PriceInputError
from pricing.units import MB

MAX_DOC_BYTES = 5_000_000
MAX_SHEET_BYTES = 50_000_000
MAX_DEPTH = 100
MAX_YAML_NODES = 2_000_000
MAX_CSV_FIELD = 65_536
# A gpuhunt catalog.zip holds one CSV (dstackai/gpuhunt .github/scripts/publish_catalog.sh); 1,000
# entries leave room for any folder of catalogs while 50,000 stay out.
MAX_ZIP_MEMBERS = 1_000
# Price CSVs deflate 4-10 : 1 (the bundled pricing/data/snapshot.csv: 7.3 : 1); a member over 1 MiB
# unpacking more than 100 : 1 is a bomb (zeros deflate 1,030 : 1), not a catalog.
MAX_ZIP_RATIO = 100
ZIP_RATIO_FLOOR = 1 << 20


# --------------------------------------------------------------------------- writing
def atomic_write(path, data: bytes | str, mode: int | None = None) -> None:
    """Write `data` (str is UTF-8 encoded) so readers see the old file or the whole new one.

    A temp file in the same folder is written, fsynced, given `mode` (default: 0o666 less the
    umask, i.e. 0o644 usually; pass 0o755 for an executable) and `os.replace`d over `path`.
    On any failure the temp file is removed and the old file is left as it was.
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask  # mkstemp makes 0600; keep the usual file mode
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cache_dir() -> Path:
    """$GPU_ADVISOR_CACHE_DIR, else $XDG_CACHE_HOME/gpu-advisor, else ~/.cache/gpu-advisor (pricing.settings)."""
    return settings.cache_dir()


# --------------------------------------------------------------------------- reading
def _size(n: int) -> str:
    return f"{n / MB:g} MB" if n >= MB else f"{n:,} bytes"


def decode(data: bytes, what: str, errors: str = "strict") -> str:
    """Bytes -> text: UTF-8, with or without a byte-order mark; UTF-16 only with its BOM.
    `errors="replace"` turns undecodable bytes into U+FFFD instead of failing."""
    try:
        if data.startswith((b"\xff\xfe", b"\xfe\xff")):
            return data.decode("utf-16", errors)
        return data.decode("utf-8-sig", errors)
    except UnicodeDecodeError as exc:
        raise PriceInputError(f"{what}: not UTF-8 text (bad byte at offset {exc.start}); "
                              "save it as UTF-8") from None


class _Counted(io.RawIOBase):
    """A file object over an open descriptor that adds every byte it hands out to `BYTES_READ`,
    so tests can see that a refusal came before the rest of the file was read."""

    def __init__(self, fd: int):
        self._f = os.fdopen(fd, "rb", buffering=0)

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._f.fileno()

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def readinto(self, b) -> int:
        n = self._f.readinto(b)
        BYTES_READ[0] += n or 0
        return n

    def close(self) -> None:
        self._f.close()
        super().close()


BYTES_READ = [0]  # every byte read through open_regular, process-wide (a counter, for tests)


def file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path, what: str, max_bytes: int):
    """An open binary file (buffered, counting its bytes) if `path` is a regular file no larger
    than `max_bytes`; PriceInputError otherwise. Opened non-blocking, so a FIFO with no writer
    cannot hang the open, and checked with fstat on the descriptor itself (a symlink to
    /dev/zero is a character device, refused before one byte is read)."""
    fd = _open_checked(path, what, max_bytes)
    return io.BufferedReader(_Counted(fd), buffer_size=65_536)


def _open_checked(path, what: str, max_bytes: int) -> int:
    """A descriptor open on `path` once it is known to be a regular file of at most `max_bytes`."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise PriceInputError(f"{what}: file not found") from None
    except IsADirectoryError:
        raise PriceInputError(f"{what}: is a folder, not a regular file; refused") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PriceInputError(f"{what}: is a symbolic link loop, not a regular file; refused") from None
        raise PriceInputError(f"{what}: cannot read: {exc.strerror or exc}") from None
    except ValueError:  # a NUL byte in the path
        raise PriceInputError(f"{what}: not a valid file name") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PriceInputError(f"{what}: is {file_kind(st.st_mode)}, not a regular file; refused")
        if st.st_size > max_bytes:
            raise PriceInputError(f"{what}: file is larger than the {_size(max_bytes)} limit "
                                  f"({_size(st.st_size)})")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def regular_size(path, what: str, max_bytes: int) -> int:
    """The size of `path` if it is a regular file of at most `max_bytes` (checked the way
    `open_regular` checks, nothing read); PriceInputError otherwise. For a path a third-party
    reader (pyarrow, datasets, transformers) will open itself."""
    fd = _open_checked(path, what, max_bytes)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def read_regular_file(path, max_bytes: int, what: str) -> bytes:
    """The bytes of a regular file of at most `max_bytes` (checked before and while reading: a
    file that grows is cut at the limit and refused); PriceInputError otherwise."""
    with open_regular(path, what, max_bytes) as f:
        try:
            data = f.read(max_bytes + 1)
        except OSError as exc:
            raise PriceInputError(f"{what}: cannot read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise PriceInputError(f"{what}: file is larger than the {_size(max_bytes)} limit")
    return data


def read_text(path, what: str | None = None, max_bytes: int | None = None,
              errors: str = "strict") -> str:
    """A regular text file, size-checked before it is read, BOM removed; PriceInputError
    otherwise (not found, a folder/FIFO/device, unreadable, over `max_bytes`, not UTF-8 unless
    `errors="replace"`)."""
    what = what or str(path)
    max_bytes = MAX_SHEET_BYTES if max_bytes is None else max_bytes
    return decode(read_regular_file(path, max_bytes, what), what, errors)


def open_text(path, what: str, max_bytes: int | None = None):
    """A regular file as a streaming text file (UTF-8 with or without BOM, UTF-16 with its BOM;
    newline="" as the csv module wants), so a parser can stop at its first limit without the
    rest of the file ever being read."""
    f = open_regular(path, what, MAX_SHEET_BYTES if max_bytes is None else max_bytes)
    head = f.peek(2)[:2]
    encoding = "utf-16" if head in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig"
    return io.TextIOWrapper(f, encoding=encoding, newline="")


def _text(text: str | bytes, what: str, max_bytes: int) -> str:
    if isinstance(text, (bytes, bytearray)):
        if len(text) > max_bytes:
            raise PriceInputError(f"{what}: larger than the {_size(max_bytes)} limit")
        return decode(bytes(text), what)
    if len(text) > max_bytes or (len(text) * 4 > max_bytes and len(text.encode("utf-8", "surrogatepass"))
                                 > max_bytes):
        raise PriceInputError(f"{what}: larger than the {_size(max_bytes)} limit")
    return text[1:] if text.startswith("\ufeff") else text


def _yaml_loader():
    import yaml

    return getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader


def _yaml_error(exc, what: str) -> PriceInputError:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if problem and mark is not None:
        msg = f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    else:
        msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return PriceInputError(f"{what}: not valid YAML: {msg}")


# The tags SafeLoader builds plain values from (YAML 1.1 types); anything else would name a
# constructor, and the project refuses it in its own words before the library is asked.
_PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in (
    "null", "bool", "int", "float", "binary", "timestamp", "omap", "pairs", "set", "str", "seq", "map",
    "merge", "value"))
_PRINTABLE = re.compile(r"[^!-~]")


def _check_tag(ev, what: str) -> None:
    tag = getattr(ev, "tag", None)
    if tag is None or tag in _PLAIN_TAGS or tag == "!":
        return
    shown = _PRINTABLE.sub("?", tag.replace("tag:yaml.org,2002:", "!!"))[:80]
    mark = ev.start_mark
    raise PriceInputError(f"{what}: not valid YAML: tag {shown} at line {mark.line + 1}, column {mark.column + 1} "
                          "is not allowed (plain data only: no tags that build objects)")


def _check_yaml_events(text: str, what: str, max_nodes: int, max_depth: int) -> None:
    """Walk the event stream (no objects built) and refuse a document whose nesting is deeper
    than `max_depth` or that would expand, aliases followed, into more than `max_nodes` nodes.
    An alias costs the full size of what it points to, so a billion-laughs bomb (a few hundred
    bytes naming 10^9 nodes) is refused after a handful of events."""
    import yaml

    loader = _yaml_loader()(text)
    sizes: dict[str, int] = {}  # anchor -> expanded node count
    stack: list[list] = []  # open collections: [expanded size so far, anchor]
    open_anchors: set[str] = set()
    total = 0
    last_end = 0  # where the last event the parser handed over ended

    def too_deep() -> PriceInputError:
        return PriceInputError(f"{what}: YAML is nested more than {max_depth} levels deep; refused")

    def too_big() -> PriceInputError:
        return PriceInputError(f"{what}: YAML expands to more than {max_nodes:,} values once its "
                               "aliases (*name) are followed; refused (alias bomb?)")

    def add(n: int, anchor: str | None) -> None:
        nonlocal total
        if anchor:
            sizes[anchor] = n
        if stack:
            stack[-1][0] += n
            if stack[-1][0] > max_nodes:
                raise too_big()
        else:
            total += n
            if total > max_nodes:
                raise too_big()

    try:
        while loader.check_event():
            ev = loader.get_event()
            last_end = getattr(ev.end_mark, "index", last_end)
            _check_tag(ev, what)
            if isinstance(ev, yaml.ScalarEvent):
                add(1, ev.anchor)
            elif isinstance(ev, yaml.AliasEvent):
                if ev.anchor in open_anchors:
                    raise PriceInputError(f"{what}: YAML alias *{ev.anchor} refers to a value that "
                                          "contains it (a recursive structure); refused")
                add(sizes.get(ev.anchor, 1), None)
            elif isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                stack.append([1, ev.anchor])
                if ev.anchor:
                    open_anchors.add(ev.anchor)
                if len(stack) > max_depth:
                    raise too_deep()
            elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                n, anchor = stack.pop()
                open_anchors.discard(anchor)
                add(n, anchor)
    except yaml.MarkedYAMLError as exc:
        # libyaml scans up to ~1,000 characters ahead of the events it hands over, so a line of
        # brackets can hit its own nesting limit (1,000 in libyaml 0.2.5, worded as it likes)
        # before our depth check sees level 101; the project words that case itself.
        mark = getattr(exc, "problem_mark", None)
        if mark is not None and _opens_deeper_than(text, last_end, mark.index, max_depth - len(stack)):
            raise too_deep() from None
        raise
    finally:
        loader.dispose()


def _opens_deeper_than(text: str, start: int, end: int, room: int) -> bool:
    """Whether the text the parser had scanned past its last event, text[start:end], opens flow
    collections nested more than `room` levels. Judged by PyYAML's pure-Python parser (no
    nesting limit) on that window alone (about 1 kB, read up to 64 kB: bounded work), and only when
    the window starts a flow collection right after the last event (after at most one ':', '-', '?'
    or ','), so a bracket inside a plain scalar is never taken for nesting."""
    import yaml

    window = text[start:min(end + 1, start + 65_536)].lstrip(" \t\r\n")
    if window[:1] in (":", "-", "?", ","):
        window = window[1:].lstrip(" \t\r\n")
    if room < 0 or window[:1] not in ("[", "{"):
        return False
    loader = yaml.SafeLoader(window)
    depth = 0
    try:
        while loader.check_event():
            ev = loader.get_event()
            if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                if depth > room:
                    return True
            elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                depth -= 1
    except yaml.YAMLError:
        return False
    finally:
        loader.dispose()
    return False


def load_yaml(text: str | bytes, what: str, *, max_bytes: int | None = None,
              max_depth: int | None = None, max_nodes: int | None = None):
    """Parse one YAML document safely (plain data only: SafeLoader, no tags that build objects).

    Refuses, with a one-line `PriceInputError` naming `what` and the limit: text over
    `max_bytes`, nesting deeper than `max_depth`, more than `max_nodes` values once aliases are
    expanded (billion laughs fails in milliseconds), recursive aliases, tags other than YAML's
    plain types, and syntax errors (with line and column). Every refusal but a syntax error's
    detail is worded here, whatever PyYAML or libyaml would say. A leading byte-order mark is ignored.
    """
    import yaml

    max_bytes = MAX_DOC_BYTES if max_bytes is None else max_bytes
    max_depth = MAX_DEPTH if max_depth is None else max_depth
    max_nodes = MAX_YAML_NODES if max_nodes is None else max_nodes
    text = _text(text, what, max_bytes)
    try:
        _check_yaml_events(text, what, max_nodes, max_depth)
        return yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader
    except PriceInputError:
        raise
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, what) from None
    except (ValueError, TypeError, RecursionError, MemoryError) as exc:  # e.g. an int with 10^6 digits
        raise PriceInputError(f"{what}: not valid YAML: {type(exc).__name__}: "
                              f"{(str(exc).splitlines() or [''])[0][:200]}") from None


_JSON_ESCAPE = re.compile(r"\\.", re.S)
_JSON_STRING = re.compile(r'"[^"]*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_depth(text: str, stop_after: int | None = None) -> int:
    """Deepest nesting of [] / {} in JSON text, without parsing it (linear time, no recursion).

    Escapes are dropped first, so every remaining quote delimits a string; brackets inside
    strings are then removed with the strings. Stops counting past `stop_after`."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", _JSON_ESCAPE.sub("", text)))
    depth = deepest = 0
    for ch in brackets:
        if ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop_after is not None and deepest > stop_after:
                    break
        else:
            depth -= 1
    return deepest


def load_json(text: str | bytes, what: str, *, max_bytes: int | None = None,
              max_depth: int | None = None):
    """Parse JSON with a size limit and a nesting limit checked before parsing (so 100,000
    nested brackets are refused in milliseconds, never a RecursionError). Errors are one-line
    `PriceInputError`s naming `what` and the limit, or the line and column of a syntax error.
    A leading byte-order mark is ignored; NaN/Infinity are parsed as floats (callers validate)."""
    import json

    max_bytes = MAX_DOC_BYTES if max_bytes is None else max_bytes
    max_depth = MAX_DEPTH if max_depth is None else max_depth
    text = _text(text, what, max_bytes)
    if json_depth(text, stop_after=max_depth) > max_depth:
        raise PriceInputError(f"{what}: JSON is nested more than {max_depth} levels deep; refused")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PriceInputError(f"{what}: not valid JSON: {exc.msg} at line {exc.lineno}, "
                              f"column {exc.colno}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # e.g. an int with 10^6 digits
        raise PriceInputError(f"{what}: not valid JSON: {type(exc).__name__}: "
                              f"{(str(exc).splitlines() or [''])[0][:200]}") from None


@contextlib.contextmanager
def csv_field_limit(limit: int | None = None):
    """Within the block, the csv module refuses fields longer than `limit` characters
    (`csv.Error: field larger than field limit (N)`); the previous limit is restored after.
    The setting is process-wide, so keep the block short (parse inside it, then leave)."""
    limit = MAX_CSV_FIELD if limit is None else limit
    old = csv.field_size_limit(limit)
    try:
        yield limit
    finally:
        csv.field_size_limit(old)


def is_field_limit_error(exc: BaseException) -> bool:
    return isinstance(exc, csv.Error) and "field limit" in str(exc)


# --------------------------------------------------------------------------- archives
MEMBERS_OPENED = [0]  # zip members unpacked through read_zip, process-wide (a counter, for tests)
UNZIPPED_BYTES = [0]  # bytes those members unpacked to
LOCAL_HEADERS_READ = [0]  # zip members' local headers read by read_zip (one walk: one per entry)
# Compression methods by number (PKWARE APPNOTE.TXT 4.4.5); Python's zipfile unpacks 0, 8, 12 and 14.
_METHODS = {0: "stored", 8: "deflate", 12: "bzip2", 14: "LZMA", 9: "Deflate64", 10: "PKWARE DCL implode",
            93: "Zstandard", 95: "xz", 96: "JPEG", 97: "WavPack", 98: "PPMd", 99: "WinZip AES encryption"}
_UNPACKED = (0, 8, 12, 14)


def _zip_entries(data: bytes, what: str) -> int:
    """The entry count a zip's end-of-central-directory record declares (ZIP64 included), read
    before zipfile lists the entries, so a zip of 50,000 members is refused without listing them."""
    import struct

    at = data.rfind(b"PK\x05\x06", max(0, len(data) - 65_557))
    if at < 0 or len(data) - at < 22:
        raise PriceInputError(f"{what}: not a readable zip file (no end-of-archive record)")
    entries = struct.unpack_from("<H", data, at + 10)[0]
    if entries == 0xFFFF and at >= 20 and data[at - 20:at - 16] == b"PK\x06\x07":
        z64 = struct.unpack_from("<Q", data, at - 12)[0]
        if z64 + 40 <= len(data) and data[z64:z64 + 4] == b"PK\x06\x06":
            entries = struct.unpack_from("<Q", data, z64 + 32)[0]
    return entries


class _Entry:
    """One chosen member as the single walk over the directory found it: its central-directory
    record, where its packed bytes start in the archive, and why its local header cannot be trusted
    (None when it can), raised only if the member is unpacked, as zipfile would."""

    __slots__ = ("info", "start", "problem")

    def __init__(self, info, start: int, problem: str | None):
        self.info, self.start, self.problem = info, start, problem


def _walk(infos, data: bytes, what: str, suffix: str) -> list[_Entry]:
    """The one pass over a zip's entries: each local header read once (`LOCAL_HEADERS_READ`), the
    spans of every entry collected for the overlap check, and the members named `suffix` chosen
    with where their packed bytes start, so unpacking never reads a header again."""
    import struct

    spans, chosen = [], []
    for info in infos:
        start = info.header_offset
        head = data[start:start + 30]
        LOCAL_HEADERS_READ[0] += 1
        if len(head) < 30 or head[:4] != b"PK\x03\x04":
            raise PriceInputError(f"{what}: member {_member(info)} points outside the archive; refused")
        flags, name_len, extra_len = struct.unpack_from("<H", head, 6)[0], *struct.unpack_from("<HH", head, 26)
        body = start + 30 + name_len + extra_len
        spans.append((start, body + info.compress_size, info))
        if info.filename.lower().endswith(suffix) and not info.is_dir():
            chosen.append(_Entry(info, body, _header_problem(info, flags, data[start + 30:start + 30 + name_len])))
    _no_overlaps(spans, what)
    return chosen


def _header_problem(info, flags: int, raw_name: bytes) -> str | None:
    """What zipfile.ZipFile.open would refuse in a member's local header (CPython Lib/zipfile.py):
    patched data or strong encryption (flag bits 5, 6), or a name other than the directory's."""
    if info.flag_bits & 0x20:
        return "compressed patched data (flag bit 5)"
    if info.flag_bits & 0x40:
        return "strong encryption (flag bit 6)"
    name = raw_name.decode("utf-8" if flags & 0x800 else "cp437", errors="replace")
    if name != info.orig_filename:
        return "file name in directory and header differ"
    return None


def _no_overlaps(spans: list, what: str) -> None:
    """Refuse entries whose bytes overlap another's (several names for the same data: the
    "overlapping files" zip bomb, or two entries at one local header)."""
    spans.sort(key=lambda s: s[0])
    end, previous = -1, None
    for start, stop, info in spans:
        if start < end:
            raise PriceInputError(f"{what}: member {_member(info)} overlaps member {_member(previous)} (two "
                                  "entries for the same bytes: a zip bomb); refused")
        if stop > end:
            end, previous = stop, info


def _member(info) -> str:
    name = info.filename
    shown = name if name.isprintable() else name.encode("unicode_escape").decode("ascii")
    return repr(shown[:120])


def read_zip(data: bytes, what: str, *, suffix: str, max_member_bytes: int, max_total_bytes: int,
             max_members: int | None = None, max_ratio: float | None = None) -> list[tuple[str, bytes]]:
    """(name, bytes) of each member whose name ends with `suffix` (any case), bounded as the module
    docstring says: at most `max_members` entries, `max_member_bytes` per member and
    `max_total_bytes` in all once unpacked, `max_ratio` unpacked per packed byte (members over 1 MiB),
    no overlapping entries, no encryption, only methods Python unpacks. Every refusal is one
    PriceInputError naming `what` and the member.

    The entries are walked once (`_walk`: each local header read once); stored and deflated members
    are then unpacked straight from `data` where that walk found them, the CRC-32 checked as zipfile
    checks it, instead of zipfile.ZipFile.open reading every local header a second time."""
    import zipfile

    max_members = MAX_ZIP_MEMBERS if max_members is None else max_members
    max_ratio = MAX_ZIP_RATIO if max_ratio is None else max_ratio
    declared = _zip_entries(data, what)
    if declared > max_members:
        raise PriceInputError(f"{what}: the zip holds {declared:,} entries, more than the {max_members:,} limit; "
                              "refused")
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, EOFError, OSError) as exc:
        raise PriceInputError(f"{what}: not a readable zip file ({(str(exc).splitlines() or ['?'])[0][:120]})") from None
    with z:
        infos = z.infolist()
        if len(infos) > max_members:
            raise PriceInputError(f"{what}: the zip holds {len(infos):,} entries, more than the {max_members:,} "
                                  "limit; refused")
        chosen = _walk(infos, data, what, suffix)
        total = sum(e.info.file_size for e in chosen)
        if total > max_total_bytes:
            raise PriceInputError(f"{what}: its {suffix} members unpack to {_size(total)}, more than the "
                                  f"{_size(max_total_bytes)} limit for the whole archive; refused")
        for e in chosen:
            _check_member(e.info, what, max_member_bytes, max_ratio)
        out, left = [], max_total_bytes
        for e in chosen:
            raw = _unpack(z, e, data, what, min(max_member_bytes, left), max_ratio)
            left -= len(raw)
            out.append((e.info.filename, raw))
        return out


def _check_member(info, what: str, max_bytes: int, max_ratio: float) -> None:
    """What the central directory says about one member, judged before it is unpacked."""
    if info.flag_bits & 0x1:
        raise PriceInputError(f"{what}: member {_member(info)} is encrypted; refused (unpack it yourself)")
    if info.compress_type not in _UNPACKED:
        method = _METHODS.get(info.compress_type, "unknown")
        raise PriceInputError(f"{what}: member {_member(info)} uses compression method {info.compress_type} "
                              f"({method}), which cannot be unpacked here; re-zip it with deflate")
    if info.file_size > max_bytes:
        raise PriceInputError(f"{what}: member {_member(info)} unpacks to {_size(info.file_size)}, more than "
                              f"the {_size(max_bytes)} limit; refused")
    if info.file_size > ZIP_RATIO_FLOOR and info.file_size > max_ratio * max(info.compress_size, 1):
        raise PriceInputError(f"{what}: member {_member(info)} unpacks {info.file_size / max(info.compress_size, 1):,.0f} "
                              f"times its packed size, more than the {max_ratio:g} : 1 limit (a zip bomb); refused")


def _chunks(z, e: _Entry, data: bytes):
    """A member's unpacked bytes in steps of at most 1 MiB, cut at the size the directory declares
    (as zipfile.ZipExtFile cuts them), with zipfile's CRC-32 check at the end. Stored and deflated
    members are read from `data` at the offset the walk found; bzip2 and LZMA go through zipfile."""
    import zlib

    info, step = e.info, 1 << 20
    if e.problem:
        raise ValueError(e.problem)
    if info.compress_type not in (0, 8):
        with z.open(info) as member:
            while chunk := member.read(step):
                yield chunk
        return
    packed = memoryview(data)[e.start:e.start + info.compress_size]
    left, crc = info.file_size, 0
    if info.compress_type == 0:
        for at in range(0, min(len(packed), left), step):
            chunk = bytes(packed[at:at + min(step, left - at)])
            crc = zlib.crc32(chunk, crc)
            yield chunk
    else:
        inflate, tail = zlib.decompressobj(-15), bytes(packed)
        while left > 0:
            chunk = inflate.decompress(tail, min(step, left))
            tail = inflate.unconsumed_tail
            done = inflate.eof or not tail
            if done and not inflate.eof:
                chunk += inflate.flush()  # all input taken: at most one match's output is pending
            chunk = chunk[:left]
            left -= len(chunk)
            crc = zlib.crc32(chunk, crc)
            if chunk:
                yield chunk
            if done:
                break
    if crc != info.CRC:
        raise ValueError(f"Bad CRC-32 for file {info.filename!r}")


def _unpack(z, e: _Entry, data: bytes, what: str, limit: int, max_ratio: float) -> bytes:
    """One member's bytes (`_chunks`), each step counted against `limit` and the ratio."""
    import bz2  # noqa: F401 - zipfile raises its errors
    import lzma
    import zipfile
    import zlib

    info = e.info
    MEMBERS_OPENED[0] += 1
    parts, got = [], 0
    try:
        for chunk in _chunks(z, e, data):
            got += len(chunk)
            UNZIPPED_BYTES[0] += len(chunk)
            if got > limit:
                raise PriceInputError(f"{what}: member {_member(info)} unpacks to more than {_size(limit)} "
                                      "(the limit left for the archive); refused")
            if got > ZIP_RATIO_FLOOR and got > max_ratio * max(info.compress_size, 1):
                raise PriceInputError(f"{what}: member {_member(info)} unpacks more than {max_ratio:g} times "
                                      "its packed size (a zip bomb); refused")
            parts.append(chunk)
    except PriceInputError:
        raise
    except (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, OSError, RuntimeError,
            NotImplementedError, ValueError) as exc:
        raise PriceInputError(f"{what}: member {_member(info)} cannot be unpacked: corrupt or unsupported data "
                              f"({(str(exc).splitlines() or [type(exc).__name__])[0][:120]})") from None
    return b"".join(parts)


def binary_kind(head: bytes) -> str | None:
    """What the first bytes of a file meant to be text say it is instead (a zip, gzip, ...), or None."""
    for magic, kind in ((b"PK\x03\x04", "a zip archive"), (b"PK\x05\x06", "an empty zip archive"),
                        (b"\x1f\x8b", "a gzip file"), (b"PAR1", "a Parquet file"), (b"ARROW1", "an Arrow file"),
                        (b"BZh", "a bzip2 file"), (b"\xfd7zXZ\x00", "an xz file"), (b"(\xb5/\xfd", "a Zstandard file")):
        if head.startswith(magic):
            return kind
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return None  # UTF-16 text with its byte-order mark: callers decide
    if b"\x00" in head:
        return "binary data (it holds NUL bytes)"
    return None


# --------------------------------------------------------------------------- CSV out
# Their look-alikes too: every character Unicode's NFKC folds to = + - or @ (fullwidth, small, super- and
# subscript forms; spreadsheets with an East Asian input method read a fullwidth ＝ as =), and U+2212 MINUS SIGN.
FORMULA_LOOKALIKES = ("\u207a", "\u207c", "\u208a", "\u208c", "\ufb29", "\ufe62", "\ufe63", "\ufe66", "\ufe6b",
                      "\uff0b", "\uff0d", "\uff1d", "\uff20", "\u2212")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", *FORMULA_LOOKALIKES)
_PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")  # ASCII digits only
_FORMULA_RE = "^[" + "".join(re.escape(c) for c in FORMULA_START) + "]"


def csv_safe(value):
    """A cell value that a spreadsheet shows as text instead of running it as a formula.

    Rule (OWASP "CSV injection", as spreadsheet exporters do it): a *string* that starts with
    ``=``, ``+``, ``-``, ``@`` (or a look-alike: FORMULA_LOOKALIKES), a tab or a carriage return gets a
    single quote in front
    (``=HYPERLINK(..)`` -> ``'=HYPERLINK(..)``), unless the whole string is a plain decimal
    number such as ``-0.5``, ``+3`` or ``-1e-3`` (left alone: it is a number either way).
    Non-strings (numbers, None, dates) are returned unchanged.
    """
    if isinstance(value, str) and value.startswith(FORMULA_START) and not _PLAIN_NUMBER.fullmatch(value):
        return "'" + value
    return value


def to_csv(df, float_format: str | None = "%.6g", **kw) -> str:
    """`df.to_csv(index=False)` with every text cell passed through `csv_safe` (vectorised).

    Line breaks inside a text cell are written as "\n", which makes the writer quote the cell
    (a bare "\r" would otherwise be written unquoted and start a new row in a spreadsheet).
    Use this for any CSV a person may open in a spreadsheet (e.g. `prices list --format csv`);
    not for the cache, which must round-trip values exactly."""
    import pandas as pd

    out = df.copy(deep=False)
    for col in out.columns:
        s = out[col]
        if s.dtype != object and not isinstance(s.dtype, pd.StringDtype):
            continue
        try:
            starts = s.str.contains(_FORMULA_RE, regex=True, na=False)
            breaks = s.str.contains("\r", regex=False, na=False)
        except AttributeError:  # an object column without strings (.str refuses it)
            continue
        if not (starts.any() or breaks.any()):
            continue
        numeric = s.str.fullmatch(_PLAIN_NUMBER.pattern, na=False)
        mask = (starts & ~numeric).astype(bool)
        s = s.astype(object)
        s[mask] = "'" + s[mask].astype(str)
        breaks = breaks.astype(bool)
        s[breaks] = s[breaks].str.replace("\r\n", "\n", regex=False).str.replace("\r", "\n", regex=False)
        out[col] = s
    kw.setdefault("index", False)
    buf = io.StringIO()
    out.to_csv(buf, float_format=float_format, **kw)
    return buf.getvalue()
