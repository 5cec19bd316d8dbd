"""A user's dataset read with limits: JSON lines, a JSON array, CSV, Parquet, Arrow or a `save_to_disk` folder.

A dataset is data handed to us, so it is read the way pricing/files.py reads every input: only a regular
file (a FIFO, a device, a socket, a symbolic-link loop or a folder where a file belongs is refused before a
byte is read, naming the path), its size checked before reading, every byte counted
(pricing.files.BYTES_READ), and the parse bounded:

========================  ==================  ===========================================================
limit                     value               why
========================  ==================  ===========================================================
``MAX_ROW_BYTES``         64 MiB per row      a JSON-lines row or a CSV record; the longest chat row in
                                              public SFT sets is a few MB (pyarrow's default 1 MiB
                                              block refused 4 MB rows: "straddles two block boundaries")
``MAX_DEPTH``             100 levels          JSON nesting of one row, checked before pyarrow's parser sees
                                              it (100,000 levels crashed it); chat rows nest 3-10 levels
``MAX_WHOLE_BYTES``       2 GiB               a file parsed whole in memory: CSV, a JSON array, Arrow, the
                                              Parquet columns read, a save_to_disk folder's shards. Bigger
                                              sets: JSON lines, which are streamed
``MAX_STREAM_BYTES``      256 GiB             a JSON-lines file, streamed in 4 MiB blocks (two passes:
                                              count, then read the sampled rows)
``MAX_ROWS``              100,000,000 rows    any format (the lengths of every row are held, 8 bytes each)
``MAX_COLUMNS``           10,000 columns      a CSV header or a table; a training set has a text or messages
                                              column beside a few others (a 100,000-column CSV took pyarrow
                                              and the duplicate-name check minutes)
========================  ==================  ===========================================================

Text is UTF-8: a UTF-16 file (byte-order mark or NUL bytes), a gzip/zip/Parquet file under a text name, and
invalid UTF-8 (overlong forms, surrogates, stray bytes) inside a row are each refused with the file and the
row or line named. Rows are JSON-lines rows or CSV records, so a quoted CSV cell may hold line breaks
(pyarrow's newlines_in_values) and a 10 MB cell is one row. Blank JSON lines (nothing, or a lone carriage
return) are not rows, for pyarrow either; a line ending in a bare carriage return (classic Mac text) ends a
row as pyarrow reads it, so it is read as a line break. Work is counted for tests: bytes through pricing.files.BYTES_READ,
rows handed to a parser in `ROWS_PARSED`.
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import stat
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from advisor.errors import BadInput
from advisor.text import plain
from pricing import files
from pricing.errors import PriceInputError

if TYPE_CHECKING:  # numpy and pyarrow are imported where they are used
    import numpy as np

MIB = 1 << 20
MAX_ROW_BYTES = 64 * MIB
MAX_DEPTH = 100
MAX_WHOLE_BYTES = 2 << 30
MAX_STREAM_BYTES = 256 << 30
MAX_ROWS = 100_000_000
MAX_COLUMNS = 10_000
MAX_META_BYTES = 1_000_000  # state.json, dataset_dict.json, dataset_info.json of a save_to_disk folder
BLOCK = 4 * MIB  # JSON lines are read in blocks of this size
BATCH_BYTES = 256 * MIB  # rows handed to pyarrow at once, at most (and at most `rows` of them)
SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".arrow")
ROWS_PARSED = [0]  # rows handed to a parser (pyarrow, json), process-wide: a counter for tests


# ----------------------------------------------------------------------------- the path itself

def need(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise BadInput(f"--dataset: reading datasets needs {module.split('.')[0]}: pip install "
                       "'gpu-cost-advisor[data]'.") from None


def kind_of(path: Path, what: str) -> str:
    """'file' or 'folder' for an existing dataset path (stat only: a FIFO is never opened); one line
    naming the path otherwise (missing, a FIFO, a device, a socket, a symbolic-link loop)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise BadInput(f"{what}: no such file or folder.") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BadInput(f"{what}: is a symbolic link loop, not a regular file; refused.") from None
        raise BadInput(f"{what}: cannot be read ({plain(exc.strerror or exc)}).") from None
    except ValueError:
        raise BadInput(f"{what}: not a valid file name.") from None
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISREG(mode):
        return "file"
    raise BadInput(f"{what}: is {files.file_kind(mode)}, not a regular file; refused.")


def _bad(exc: PriceInputError) -> BadInput:
    text = str(exc)
    return BadInput(text if text.endswith(".") else text + ".")


def _open(path: Path, what: str, max_bytes: int):
    try:
        return files.open_regular(path, what, max_bytes)
    except PriceInputError as exc:
        raise _bad(exc) from None


def _text_head(head: bytes, what: str, name: str) -> None:
    """Refuse a text format whose first bytes say it is not UTF-8 text."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise BadInput(f"{what}: is UTF-16 text (it starts with a UTF-16 byte-order mark); save it as UTF-8.")
    kind = files.binary_kind(head)
    if kind and "NUL" in kind:
        half = len(head) // 2
        even, odd = head[0::2].count(0), head[1::2].count(0)
        if even + odd == len(head):
            raise BadInput(f"{what}: holds only NUL bytes at its start (a sparse or zero-filled file), not {name}; "
                           "refused.")
        if min(even, odd) < half // 10 and max(even, odd) > half * 4 // 10:
            raise BadInput(f"{what}: looks like UTF-16 text without a byte-order mark (every other byte is NUL); "
                           "save it as UTF-8.")
    if kind:
        raise BadInput(f"{what}: is {kind}, not {name}; refused.")


def _first(exc: BaseException) -> str:
    return plain((str(exc).strip().splitlines() or [type(exc).__name__])[0])[:200]


# ----------------------------------------------------------------------------- JSON nesting, UTF-8, rows

_ESCAPE = re.compile(rb"\\.", re.S)
_STRING = re.compile(rb'"[^"\n]*"')
_NOT_BRACKET = re.compile(rb"[^\[\]{}\n]+")


def deepest(chunk: bytes, per_line: bool = True) -> tuple[int, int]:
    """(deepest [] / {} nesting, the 0-based line where it is) of JSON text, without parsing it: escapes
    and strings dropped (a JSON string holds no raw line break), the brackets left counted with numpy,
    from zero again at each line when `per_line` (JSON lines), straight through otherwise."""
    import numpy as np

    s = _NOT_BRACKET.sub(b"", _STRING.sub(b"", _ESCAPE.sub(b"", chunk)))
    if not per_line:
        s = s.replace(b"\n", b"")
    if not s.strip(b"\n"):
        return 0, 0
    arr = np.frombuffer(b"\n" + s, dtype=np.uint8)
    step = np.zeros(len(arr), dtype=np.int32)
    step[(arr == 91) | (arr == 123)] = 1
    step[(arr == 93) | (arr == 125)] = -1
    level = np.cumsum(step, dtype=np.int64)
    newline = arr == 10
    last = np.maximum.accumulate(np.where(newline, np.arange(len(arr)), 0))
    level -= level[last]
    at = int(np.argmax(level))
    return int(level[at]), int(np.count_nonzero(newline[:at + 1])) - 1


class _Lines:
    """Line boundaries of a chunk of whole JSON lines (each ending in a line break) and which are rows."""

    def __init__(self, chunk: bytes):
        import numpy as np

        arr = np.frombuffer(chunk, dtype=np.uint8)
        self.ends = np.flatnonzero(arr == 10)
        self.starts = np.concatenate(([0], self.ends[:-1] + 1)).astype(np.int64)
        lengths = self.ends - self.starts
        first = arr[np.minimum(self.starts, max(len(arr) - 1, 0))] if len(arr) else arr
        # blank lines (nothing, or only a carriage return) are not rows, for pyarrow either
        self.filled = (lengths > 1) | ((lengths == 1) & (first != 13))
        self.lengths = lengths

    def row_of(self, line: int) -> int:
        """0-based row number (within the chunk) of 0-based `line`."""
        import numpy as np

        return int(np.count_nonzero(self.filled[:line]))

    def line_at(self, offset: int) -> int:
        import numpy as np

        return int(np.searchsorted(self.ends, offset, side="left"))


def _check_chunk(chunk: bytes, rows_before: int, what: str) -> tuple[int, int]:
    """(rows, longest row in bytes) of a chunk of whole JSON lines; one line naming the row when one is
    longer than MAX_ROW_BYTES, not UTF-8, or nested deeper than MAX_DEPTH."""
    lines = _Lines(chunk)
    longest = int(lines.lengths.max()) if len(lines.lengths) else 0
    if longest > MAX_ROW_BYTES:
        raise _too_long(what, rows_before + lines.row_of(int(lines.lengths.argmax())) + 1)
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = lines.line_at(exc.start)
        raise BadInput(f"{what}: row {rows_before + lines.row_of(line) + 1} is not UTF-8 text (byte "
                       f"0x{chunk[exc.start]:02X} at byte {exc.start - int(lines.starts[line]) + 1} of the row: "
                       f"{exc.reason}); save the file as UTF-8.") from None
    depth, line = deepest(chunk)
    if depth > MAX_DEPTH:
        raise BadInput(f"{what}: row {rows_before + lines.row_of(line) + 1} is nested more than {MAX_DEPTH} "
                       "levels deep; refused.")
    return int(lines.filled.sum()), longest


class RowTooLong(Exception):
    """A line longer than MAX_ROW_BYTES: the next row after those already yielded."""


def _blocks(f) -> Iterator[bytes]:
    """Whole lines of an open file, in chunks of about BLOCK bytes (the last line gets a line break).
    A line longer than MAX_ROW_BYTES raises RowTooLong as soon as that many bytes of it are read, so a
    file without line breaks (a sparse file of zeros) is read no further than the limit."""
    carry: list[bytes] = []
    held = 0
    while True:
        block = f.read(BLOCK)
        if not block:
            break
        block = _line_breaks(block, f)
        cut = block.rfind(b"\n")
        if cut < 0:
            carry.append(block)
            held += len(block)
            if held > MAX_ROW_BYTES:
                raise RowTooLong()
            continue
        yield b"".join(carry) + block[:cut + 1]
        carry, held = [block[cut + 1:]], len(block) - cut - 1
    if held:
        yield b"".join(carry) + b"\n"


_BARE_CR = re.compile(rb"\r(?!\n)")


def _line_breaks(block: bytes, f) -> bytes:
    """`block` with each bare carriage return (a line that ends in CR alone) read as a line feed, as pyarrow
    splits rows; a CR LF cut between two blocks is kept whole (one more byte read). Scans only when the
    block holds a CR that is not part of CR LF."""
    if block.endswith(b"\r"):
        block += f.read(1)
    crs = block.count(b"\r")
    if crs == 0 or crs == block.count(b"\r\n"):
        return block
    return _BARE_CR.sub(b"\n", block)


def _too_long(what: str, row: int) -> BadInput:
    return BadInput(f"{what}: row {row} is longer than the {MAX_ROW_BYTES // MIB} MiB limit for one row; refused.")


# ----------------------------------------------------------------------------- sources

class Source:
    """A dataset's rows: how many, and batches of the chosen ones as pyarrow tables."""

    rows: int = 0
    what: str = ""

    def batches(self, chosen: np.ndarray, size: int) -> Iterator[tuple[np.ndarray, object]]:
        raise NotImplementedError


class TableSource(Source):
    def __init__(self, table, what: str):
        self.table, self.what, self.rows = table, what, table.num_rows
        names = list(table.column_names)
        if len(names) > MAX_COLUMNS:
            raise _too_wide(what, len(names))
        twice = sorted(n for n, k in Counter(names).items() if k > 1)
        if twice:
            raise BadInput(f"{what}: column {plain(twice[0])!r} appears more than once; rename one of them.")
        if self.rows > MAX_ROWS:
            raise BadInput(f"{what}: {self.rows:,} rows, more than the {MAX_ROWS:,} limit; refused.")

    def batches(self, chosen, size):
        for start in range(0, len(chosen), size):
            idx = chosen[start:start + size]
            yield idx, self.table.take(idx)


class JsonLinesSource(Source):
    """JSON lines from a file (streamed: pass 1 counts and checks every row, pass 2 parses the chosen
    ones) or from memory (a JSON array turned into lines)."""

    def __init__(self, path: Path | None, what: str, lines: list[bytes] | None = None):
        self.path, self.what, self._lines = path, what, lines
        self.rows, self.longest = 0, 0
        if lines is not None:
            self.rows, self.longest = len(lines), max(map(len, lines), default=0)
            return
        with _open(path, what, MAX_STREAM_BYTES) as f:
            _text_head(f.peek(65_536)[:65_536], what, "JSON lines")
            try:
                for chunk in _blocks(f):
                    n, longest = _check_chunk(chunk, self.rows, what)
                    self.rows += n
                    self.longest = max(self.longest, longest)
                    if self.rows > MAX_ROWS:
                        raise BadInput(f"{what}: more than {MAX_ROWS:,} rows (the limit); refused.")
            except RowTooLong:
                raise _too_long(what, self.rows + 1) from None

    def _chosen_rows(self, chosen) -> Iterator[tuple[int, bytes]]:
        """(position in `chosen`, bytes) of the chosen rows; the rows between them are skipped by number,
        a block at a time (no Python work per skipped row when they are few)."""
        if self._lines is not None:
            for i, r in enumerate(chosen.tolist()):
                yield i, self._lines[r]
            return
        import numpy as np

        want = iter(enumerate(chosen.tolist()))
        nxt = next(want, None)
        row = 0
        with _open(self.path, self.what, MAX_STREAM_BYTES) as f:
            chunks = _blocks(f)
            while nxt is not None:
                try:
                    chunk = next(chunks, None)
                except RowTooLong:
                    chunk = None
                if chunk is None:
                    break
                lines = _Lines(chunk)
                rows_here = np.flatnonzero(lines.filled)
                last = row + len(rows_here)
                while nxt is not None and nxt[1] < last:
                    k = int(rows_here[nxt[1] - row])
                    yield nxt[0], chunk[int(lines.starts[k]):int(lines.ends[k])]
                    nxt = next(want, None)
                row = last
        if nxt is not None:
            raise BadInput(f"{self.what}: the file changed while it was read (it has fewer rows than counted).")

    def batches(self, chosen, size):
        pa_json = need("pyarrow.json")
        batch: list[bytes] = []
        held = 0
        start = 0
        for i, line in self._chosen_rows(chosen):
            batch.append(line)
            held += len(line) + 1
            if len(batch) >= size or held >= BATCH_BYTES:
                yield chosen[start:i + 1], self._parse(pa_json, batch, chosen[start:i + 1])
                start, batch, held = i + 1, [], 0
        if batch:
            yield chosen[start:], self._parse(pa_json, batch, chosen[start:])

    def _parse(self, pa_json, batch: list[bytes], rows):
        pa = need("pyarrow")
        ROWS_PARSED[0] += len(batch)
        body = b"\n".join(batch)
        block = max(MIB, max(map(len, batch)) + 2)  # every row fits a block: no "straddles two blocks"
        try:
            return pa_json.read_json(io.BytesIO(body), read_options=pa_json.ReadOptions(block_size=block))
        except (pa.ArrowException, ValueError) as exc:
            for line, row in zip(batch, rows.tolist()):  # name the row when one alone is at fault
                try:
                    value = json.loads(line)
                except ValueError as bad:
                    raise BadInput(f"{self.what}: row {row + 1} is not valid JSON ({_first(bad)}).") from None
                if not isinstance(value, dict):
                    raise BadInput(f"{self.what}: row {row + 1} is not a JSON object ({{...}}).") from None
                try:  # valid for json, not for pyarrow (a lone surrogate escape such as \ud800)
                    pa_json.read_json(io.BytesIO(line), read_options=pa_json.ReadOptions(block_size=block))
                except (pa.ArrowException, ValueError) as bad:
                    raise BadInput(f"{self.what}: row {row + 1} cannot be read ({_first(bad).split(' in row ')[0]})."
                                   ) from None
            raise BadInput(f"{self.what}: cannot be read ({_first(exc)}).") from None


# ----------------------------------------------------------------------------- opening

def open_source(path: Path, what: str, columns: tuple[str, ...] = ()) -> Source:
    """The dataset at `path` as a Source, every limit of the module docstring applied."""
    if kind_of(path, what) == "folder":
        return TableSource(_saved_folder(path, what), what)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise BadInput(f"{what}: unknown format {plain(path.suffix) or '(no suffix)'}; use {', '.join(SUFFIXES)} "
                       "or a folder written by datasets' save_to_disk.")
    with _open(path, what, MAX_STREAM_BYTES) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.peek(65_536)[:65_536]
    if size == 0:
        raise BadInput(f"{what}: the dataset has no rows (the file is empty).")
    array = suffix in (".jsonl", ".json") and head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"[")
    if suffix in (".jsonl", ".json") and not array:
        return JsonLinesSource(path, what)
    if size > MAX_WHOLE_BYTES:
        raise BadInput(f"{what}: {size / (1 << 30):.1f} GiB, more than the {MAX_WHOLE_BYTES >> 30} GiB limit for "
                       f"{'a JSON array' if array else 'a ' + suffix[1:] + ' file'} (read whole); convert it to JSON "
                       "lines, which are streamed.")
    if array:
        return _json_array(path, what)
    pa = need("pyarrow")
    try:
        if suffix == ".csv":
            return TableSource(_csv(path, what, head, size), what)
        if suffix == ".parquet":
            return TableSource(_parquet(path, what, columns), what)
        return TableSource(_arrow(path, what), what)
    except BadInput:
        raise
    except (pa.ArrowException, ValueError, OSError, TypeError) as exc:
        raise BadInput(f"{what}: cannot be read ({_first(exc)}).") from None


def _json_array(path: Path, what: str) -> JsonLinesSource:
    """A JSON array of objects (or of strings: a 'text' column, as the datasets library reads it) as JSON
    lines in memory: size, UTF-8 and nesting checked before json parses it."""
    try:
        data = files.read_regular_file(path, MAX_WHOLE_BYTES, what)
    except PriceInputError as exc:
        raise _bad(exc) from None
    _text_head(data[:65_536], what, "a JSON array")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise BadInput(f"{what}: line {line} is not UTF-8 text (byte 0x{data[exc.start]:02X}: {exc.reason}); "
                       "save the file as UTF-8.") from None
    depth, _ = deepest(data, per_line=False)
    if depth > MAX_DEPTH + 1:  # the array itself is one level
        raise BadInput(f"{what}: JSON is nested more than {MAX_DEPTH} levels deep; refused.")
    try:
        rows = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"{what}: cannot be read as a JSON array ({_first(exc)}).") from None
    if not isinstance(rows, list):
        raise BadInput(f"{what}: cannot be read as a JSON array (it is not one).")
    if len(rows) > MAX_ROWS:
        raise BadInput(f"{what}: {len(rows):,} rows, more than the {MAX_ROWS:,} limit; refused.")
    ROWS_PARSED[0] += len(rows)
    lines = []
    for i, row in enumerate(rows):
        if isinstance(row, str):
            row = {"text": row}
        if not isinstance(row, dict):
            raise BadInput(f"{what}: element {i + 1} of the array is not an object ({{...}}) or a text.")
        lines.append(json.dumps(row, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    return JsonLinesSource(None, what, lines)


def _too_wide(what: str, columns: int) -> BadInput:
    return BadInput(f"{what}: more than the {MAX_COLUMNS:,} columns a dataset may have (at least {columns:,}); keep "
                    "the text or messages column and a few others.")


def _header_columns(head: bytes) -> int:
    """Columns of the CSV header line in the file's first bytes (a lower bound when the line is longer)."""
    import csv

    line = head.split(b"\n", 1)[0].decode("utf-8", errors="replace")
    try:
        return len(next(csv.reader([line]), []))
    except csv.Error:
        return 0


def _csv(path: Path, what: str, head: bytes, size: int):
    """CSV records, quoted cells with line breaks included (newlines_in_values), each at most MAX_ROW_BYTES;
    UTF-8 checked first, naming the line; a header of more than MAX_COLUMNS refused before pyarrow reads it."""
    pa, pa_csv = need("pyarrow"), need("pyarrow.csv")
    _text_head(head, what, "CSV text")
    if _header_columns(head) > MAX_COLUMNS:
        raise _too_wide(what, _header_columns(head))
    with _open(path, what, MAX_WHOLE_BYTES) as f:
        line = 1
        try:
            for chunk in _blocks(f):
                try:
                    chunk.decode("utf-8")
                except UnicodeDecodeError as exc:
                    at = line + chunk.count(b"\n", 0, exc.start)
                    raise BadInput(f"{what}: line {at} is not UTF-8 text (byte 0x{chunk[exc.start]:02X}: "
                                   f"{exc.reason}); save the file as UTF-8.") from None
                line += chunk.count(b"\n")
        except RowTooLong:  # a quoted cell may span lines: 64 MiB without a line break is no row of ours
            raise BadInput(f"{what}: line {line} is longer than the {MAX_ROW_BYTES // MIB} MiB limit for one row; "
                           "refused.") from None
    block = min(MAX_ROW_BYTES, max(MIB, size + 1))
    with _open(path, what, MAX_WHOLE_BYTES) as f:
        try:
            table = pa_csv.read_csv(f, read_options=pa_csv.ReadOptions(block_size=block),
                                    parse_options=pa_csv.ParseOptions(newlines_in_values=True))
        except pa.ArrowInvalid as exc:
            if "straddl" in str(exc):
                raise BadInput(f"{what}: a row is longer than the {MAX_ROW_BYTES // MIB} MiB limit for one row; "
                               "refused.") from None
            raise
    ROWS_PARSED[0] += table.num_rows
    return table


def _parquet(path: Path, what: str, columns: tuple[str, ...]):
    """The columns asked for, once the file's own metadata says they fit MAX_WHOLE_BYTES and MAX_ROWS."""
    pq = need("pyarrow.parquet")
    with _open(path, what, MAX_STREAM_BYTES) as f:
        pf = pq.ParquetFile(f)
        meta = pf.metadata
        names = pf.schema_arrow.names
        wanted = [c for c in columns if c in names] or names
        if meta.num_rows > MAX_ROWS:
            raise BadInput(f"{what}: {meta.num_rows:,} rows, more than the {MAX_ROWS:,} limit; refused.")
        index = {meta.schema.column(i).path.split(".")[0] for i in range(meta.num_columns)}
        unpacked = sum(meta.row_group(g).column(i).total_uncompressed_size
                       for g in range(meta.num_row_groups) for i in range(meta.num_columns)
                       if meta.schema.column(i).path.split(".")[0] in set(wanted) & index)
        if unpacked > MAX_WHOLE_BYTES:
            raise BadInput(f"{what}: its columns {', '.join(map(plain, wanted))} unpack to "
                           f"{unpacked / (1 << 30):.1f} GiB, more than the {MAX_WHOLE_BYTES >> 30} GiB limit; "
                           "refused.")
        table = pf.read(columns=wanted)
    ROWS_PARSED[0] += table.num_rows
    return table


def _arrow(path: Path, what: str):
    """An Arrow IPC stream (what datasets writes) or file."""
    pa = need("pyarrow")
    with _open(path, what, MAX_WHOLE_BYTES) as f:
        head = f.peek(8)[:8]
        reader = pa.ipc.open_file(f) if head.startswith(b"ARROW1") else pa.ipc.open_stream(f)
        table = reader.read_all()
    ROWS_PARSED[0] += table.num_rows
    return table


# ----------------------------------------------------------------------------- save_to_disk folders

def _meta(path: Path, what: str, required: bool = True):
    """A small JSON file of a save_to_disk folder, read with the limits (None when absent and optional)."""
    if not required and not os.path.lexists(path):
        return None
    try:
        return files.load_json(files.read_regular_file(path, MAX_META_BYTES, f"{what}: {path.name}"),
                               f"{what}: {path.name}", max_bytes=MAX_META_BYTES, max_depth=20)
    except PriceInputError as exc:
        raise _bad(exc) from None


def _train_split(folder: Path, what: str) -> tuple[Path, str]:
    """A DatasetDict folder's 'train' split (its dataset_dict.json checked), or the folder itself."""
    splits = folder / "dataset_dict.json"
    if not os.path.lexists(splits):
        return folder, what
    meta = _meta(splits, what)
    names = meta.get("splits") if isinstance(meta, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise BadInput(f"{what}: dataset_dict.json has no list of split names; refused.")
    if "train" not in names:
        raise BadInput(f"{what}: a DatasetDict without a 'train' split (splits: {', '.join(map(plain, names))}).")
    folder, what = folder / "train", f"{what}/train"
    if kind_of(folder, what) != "folder":
        raise BadInput(f"{what}: is not a folder; refused.")
    return folder, what


def _check_shards(folder: Path, what: str, shards) -> None:
    """state.json's data files: plain names of regular files in the folder, at most MAX_WHOLE_BYTES in all."""
    if not isinstance(shards, list) or not shards or not all(
            isinstance(s, dict) and isinstance(s.get("filename"), str) for s in shards):
        raise BadInput(f"{what}: state.json lists no data files; refused.")
    total = 0
    for s in shards:
        name = s["filename"]
        if Path(name).name != name or name in ("", ".", ".."):
            raise BadInput(f"{what}: state.json names {plain(name)!r}, not a file of the folder; refused.")
        try:
            total += files.regular_size(folder / name, f"{what}: {plain(name)}", MAX_WHOLE_BYTES)
        except PriceInputError as exc:
            raise _bad(exc) from None
        if total > MAX_WHOLE_BYTES:
            raise BadInput(f"{what}: its data files are larger than the {MAX_WHOLE_BYTES >> 30} GiB limit; refused.")


def _saved_folder(folder: Path, what: str):
    """The 'train' split (or the one dataset) of a save_to_disk folder, every file it names checked first:
    a regular file inside the folder, the shards together at most MAX_WHOLE_BYTES."""
    folder, what = _train_split(folder, what)
    if not os.path.lexists(folder / "state.json"):
        raise BadInput(f"{what}: the folder is not a dataset written by datasets' save_to_disk.")
    state = _meta(folder / "state.json", what)
    _meta(folder / "dataset_info.json", what, required=False)
    _check_shards(folder, what, state.get("_data_files") if isinstance(state, dict) else None)
    datasets = need("datasets")
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    pa = need("pyarrow")
    try:
        ds = datasets.load_from_disk(str(folder), keep_in_memory=True)
    except FileNotFoundError:
        raise BadInput(f"{what}: the folder is not a dataset written by datasets' save_to_disk.") from None
    except (pa.ArrowException, ValueError, OSError, TypeError, KeyError) as exc:
        raise BadInput(f"{what}: cannot be read ({_first(exc)}).") from None
    if isinstance(ds, datasets.DatasetDict):  # a dict without dataset_dict.json: not what save_to_disk writes
        raise BadInput(f"{what}: the folder is not a dataset written by datasets' save_to_disk.")
    if getattr(ds, "_indices", None) is not None:  # a select()/shuffle() view: its rows, in its order
        ds = ds.flatten_indices(keep_in_memory=True)
    ROWS_PARSED[0] += ds.num_rows
    return ds.data.table
