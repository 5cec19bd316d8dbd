"""Count a user's dataset in the model's own tokens: JSONL/JSON, CSV, Parquet or a `datasets` folder.

Files are read by advisor/workload/dataset_files.py with its limits (regular files only, sizes checked
before reading, rows, bytes and nesting bounded), parsed by pyarrow (JSON lines, CSV, Parquet, Arrow), json
(a JSON array) or the `datasets` library (a `save_to_disk` folder): the optional `data` extra. Rows are plain
text (`--text-field`) or chat `messages` (`--messages-field`, lists of {role, content}, or
ShareGPT's {from, value}), rendered through the tokenizer's chat template when it has one
(transformers apply_chat_template, as TRL's SFTTrainer does) and joined as "role: content" lines
otherwise (the result says which). Big datasets are counted on a seeded random sample of rows with a
stated 95 % error bound; small ones exactly. The statistics are advisor/workload/length_stats.py's.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from advisor.errors import BadInput
from advisor.model.catalog import HUB_ID, _catalog, hub_endpoint
from advisor.text import plain
from advisor.units import MiB
from advisor.workload import dataset_files
from advisor.workload.chat_mask import NotPrefixPreserving, assistant_char_spans, token_mask
from advisor.workload.length_stats import LengthStats, length_stats
from pricing import files, settings
from pricing.errors import PriceInputError
from pricing.http import redact

if TYPE_CHECKING:  # numpy is imported where it is used: the CLI's start-up does not load it
    import numpy as np

DEFAULT_SAMPLE = 20_000  # rows tokenized when a dataset is bigger (--sample); every row below it
CHUNK = 10_000  # rows per tokenizer call (progress granularity)
TEXT_FIELDS = ("text", "content", "prompt")  # tried in order when no field is named
MESSAGE_FIELDS = ("messages", "conversations")  # conversations: ShareGPT / LLaMA-Factory's sharegpt format
SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "system": "system", "observation": "tool",
                  "function_call": "assistant"}  # LLaMA-Factory data/README.md (sharegpt tags)
SUFFIXES = dataset_files.SUFFIXES


class DatasetCount(BaseModel):
    """A dataset's token statistics and how they were counted."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset: str
    field: str
    kind: str  # "text" | "messages"
    rendering: str  # "text" | "chat template" | "role: content lines (the tokenizer has no chat template)"
    tokenizer: str
    seed: int
    stats: LengthStats
    # Tokens that carry loss when training truncates rows at seq_len: all kept tokens of plain text; the assistant's
    # turns of chats (advisor/workload/chat_mask.py, as the launch bundle masks them). None when they cannot be told
    # (no chat template, or one that rewrites earlier turns): loss_note says why.
    loss_tokens: float | None = None
    loss_note: str = ""


# ----------------------------------------------------------------------------- reading
# Every file and folder is read by advisor/workload/dataset_files.py, with its limits.

def existing(path: str | Path) -> Path:
    """The dataset's local path, or one line saying it is not there or not a file or folder we read (checked
    before a tokenizer is loaded; nothing is opened: a FIFO cannot block)."""
    p = Path(path).expanduser()
    dataset_files.kind_of(p, f"--dataset {plain(p)}")
    return p


def read_table(path: str | Path, columns: tuple[str, ...] = ()):
    """The dataset as a pyarrow Table (only `columns` where the format can read a subset)."""
    import numpy as np

    p = existing(path)
    source = dataset_files.open_source(p, f"--dataset {plain(p)}", columns)
    if isinstance(source, dataset_files.TableSource):
        return source.table
    pa = dataset_files.need("pyarrow")
    tables = [t for _, t in source.batches(np.arange(source.rows), CHUNK)]
    return pa.concat_tables(tables, promote_options="default") if tables else pa.table({})


def _first(exc: BaseException) -> str:
    return plain((str(exc).strip().splitlines() or [type(exc).__name__])[0])[:200]


def pick_field(columns: list[str], text_field: str | None, messages_field: str | None, what: str) -> tuple[str, str]:
    """(column, 'text' | 'messages'): the one named, else the first conventional name present."""
    if text_field and messages_field:
        raise BadInput("--text-field and --messages-field: give one of them.")
    named = text_field or messages_field
    if named:
        if named not in columns:
            raise BadInput(f"{what}: no column {plain(named)!r}; columns: {', '.join(map(plain, columns)) or 'none'}.")
        return named, "text" if text_field else "messages"
    for name in MESSAGE_FIELDS:
        if name in columns:
            return name, "messages"
    for name in TEXT_FIELDS:
        if name in columns:
            return name, "text"
    raise BadInput(f"{what}: no text or messages column found; name one with --text-field or --messages-field "
                   f"(columns: {', '.join(map(plain, columns)) or 'none'}).")


# ----------------------------------------------------------------------------- tokenizers

PIECE_CHARS = 1_000_000  # a longer text is tokenized in pieces of about this many characters (Tokenizer.lengths)
CUT_WINDOW = 256  # characters either side of a cut, encoded to measure what the cut changes
_CUT = re.compile(r"(?<=\S) (?=\S)")


def _cuts(text: str) -> list[int]:
    """Where `text` is cut into pieces of about PIECE_CHARS characters: just before a single space between two
    non-spaces (a stretch without one is left whole)."""
    out, start = [], 0
    while len(text) - start > PIECE_CHARS:
        m = _CUT.search(text, start + PIECE_CHARS // 2, start + PIECE_CHARS + PIECE_CHARS // 2)
        if m is None:
            break
        start = m.start()
        out.append(start)
    return out


class Tokenizer:
    """The model's tokenizer: lengths of texts, and chat messages rendered the way training sees them."""

    def __init__(self, name: str, fast, chat: Any = None):
        self.name, self._fast, self._chat = name, fast, chat

    @property
    def has_chat_template(self) -> bool:
        return self._chat is not None and bool(getattr(self._chat, "chat_template", None))

    def lengths(self, texts: list[str], special_tokens: bool = True) -> np.ndarray:
        """Tokens per text. A text over PIECE_CHARS characters is encoded in pieces (special tokens with the
        first only), cut before a space between two words, in memory bounded by the piece (a tokenizers
        Encoding holds about 450 bytes per token: one 8 MB row took 1.9 GB whole). What a cut changes
        (a byte-level BPE: nothing; a SentencePiece-style normalizer that prepends '▁': one more '▁' on the
        piece after it) is measured on the CUT_WINDOW characters either side of each cut and taken off."""
        import numpy as np

        out = np.zeros(len(texts), dtype=np.int64)
        short = [i for i, t in enumerate(texts) if len(t) <= PIECE_CHARS]
        if len(short) == len(texts):
            out[:] = self._encoded([*texts], special_tokens)
            return out
        out[short] = self._encoded([texts[i] for i in short], special_tokens)
        for i in sorted(set(range(len(texts))) - set(short)):
            text = texts[i]
            cuts = _cuts(text)
            bounds = [0, *cuts, len(text)]
            total = int(self._encoded([text[:bounds[1]]], special_tokens)[0])
            total += sum(int(self._encoded([text[a:b]], False)[0]) for a, b in zip(bounds[1:-1], bounds[2:]))
            for c in cuts:  # the cut's own effect: window whole minus its two halves
                left, right = text[max(0, c - CUT_WINDOW):c], text[c:c + CUT_WINDOW]
                whole, a, b = self._encoded([left + right, left, right], False)
                total += int(whole) - int(a) - int(b)
            out[i] = total
        return out

    def _encoded(self, texts: list[str], special_tokens: bool) -> np.ndarray:
        # encode_batch_fast (tokenizers >= 0.21) skips the character offsets: the same ids, ~20 % faster
        import numpy as np

        encode = getattr(self._fast, "encode_batch_fast", None) or self._fast.encode_batch
        with native_errors(f"--tokenizer {plain(self.name)}"):
            encodings = encode(texts, add_special_tokens=special_tokens)
        return np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))

    def render(self, messages: list[dict[str, str]]) -> str:
        if self.has_chat_template:
            return self._chat.apply_chat_template(messages, tokenize=False)
        return "\n".join(f"{m['role']}: {m['content']}" for m in messages)

    def loss_tokens(self, messages: list[dict[str, str]], seq_len: int) -> int:
        """Tokens of the conversation's assistant turns within its first seq_len tokens (NotPrefixPreserving when
        the chat template cannot say where the turns are)."""
        def render(msgs, generation_prompt):
            return self._chat.apply_chat_template(msgs, tokenize=False, add_generation_prompt=generation_prompt)

        text, spans = assistant_char_spans(render, messages)
        offsets = self._fast.encode(text, add_special_tokens=False).offsets
        return sum(token_mask(offsets[:seq_len], spans))


# A tokenizer.json is at most a few tens of MB (google/gemma-3-27b-it's, 262,144 tokens, is 33.4 MB:
# https://huggingface.co/google/gemma-3-27b-it/blob/main/tokenizer.json); the other files are smaller.
MAX_TOKENIZER_BYTES = 128 * MiB
# Files of a tokenizer folder that transformers' AutoTokenizer may open (each checked first: a regular file
# within MAX_TOKENIZER_BYTES), tokenizer.json also parsed with our limits before transformers sees it.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model", "spiece.model", "config.json",
                   "chat_template.jinja", "chat_template.json", "generation_config.json")


@contextlib.contextmanager
def native_errors(what: str):
    """Run a call into the tokenizers library (Rust) so that its failures are one line naming `what`: a
    Rust panic (pyo3's PanicException, a BaseException, e.g. Oniguruma's backtracking limit,
    "retry-limit-in-match over", on a regex such as `(a+)+$`) becomes BadInput, and what Rust prints
    on stderr meanwhile is held back (and passed on unchanged when nothing failed)."""

    try:
        saved = os.dup(2)
    except OSError:  # no stderr to guard
        saved = None
    held = tempfile.TemporaryFile() if saved is not None else None
    if held is not None:
        os.dup2(held.fileno(), 2)
    failed = False
    try:
        yield
    except BaseException as exc:
        if type(exc).__name__ != "PanicException":
            raise
        failed = True
        raise BadInput(f"{what}: the tokenizers library stopped on this tokenizer ({_first(exc)}); its rules "
                       "cannot be used (a regular expression past the library's backtracking limit?).") from None
    finally:
        if held is not None:
            os.dup2(saved, 2)
            os.close(saved)
            if not failed:
                held.seek(0)
                rest = held.read(1 << 20)
                if rest:
                    os.write(2, rest)
            held.close()


def load_tokenizer(ref: str, model: str | None = None) -> Tokenizer:
    """A local folder (tokenizer.json, with tokenizer_config.json's chat template when present), a
    tokenizer.json file, or a Hub id (HF_TOKEN for gated repos; the local cache when offline). Local
    files are read like every input: regular files only, sizes and JSON nesting bounded. `model`: the --model
    the ref came from (no --tokenizer given), named in the message when it cannot be loaded."""
    text = str(ref).strip()
    p = Path(text).expanduser()
    what = f"--tokenizer {plain(text)}"
    if os.path.lexists(p) or text.endswith(".json") or not HUB_ID.match(text):
        if dataset_files.kind_of(p, what) == "file":
            return Tokenizer(text, _tokenizers_file(p, what))
        for name in TOKENIZER_FILES:  # a FIFO or /dev/zero in the folder is refused before anything opens it
            if os.path.lexists(p / name):
                try:
                    files.regular_size(p / name, f"{what}: {name}", MAX_TOKENIZER_BYTES)
                except PriceInputError as exc:
                    raise BadInput(str(exc) + ".") from None
        if not os.path.lexists(p / "tokenizer_config.json") and os.path.lexists(p / "tokenizer.json"):
            return Tokenizer(text, _tokenizers_file(p / "tokenizer.json", f"{what}: tokenizer.json"))
        if os.path.lexists(p / "tokenizer.json"):
            _tokenizers_file(p / "tokenizer.json", f"{what}: tokenizer.json")  # its rules, checked by us first
        return _auto(text, p, local=True)
    return _auto(text, text, local=False, model=model)


def _read(p: Path, what: str) -> bytes:
    try:
        return files.read_regular_file(p, MAX_TOKENIZER_BYTES, what)
    except PriceInputError as exc:
        raise BadInput(str(exc) + ".") from None


def _tokenizers_file(p: Path, what: str):
    """A tokenizers Tokenizer from a tokenizer.json read with limits: a regular file, at most
    MAX_TOKENIZER_BYTES, UTF-8, JSON nested at most pricing.files.MAX_DEPTH levels, before Rust parses it."""
    tokenizers = dataset_files.need("tokenizers")
    data = _read(p, what)
    if dataset_files.deepest(data, per_line=False)[0] > files.MAX_DEPTH:
        raise BadInput(f"{what}: JSON is nested more than {files.MAX_DEPTH} levels deep; refused.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{what}: not UTF-8 text (byte {exc.start + 1}: {exc.reason}).") from None
    try:
        with native_errors(what):
            return tokenizers.Tokenizer.from_str(text)
    except BadInput:
        raise
    except Exception as exc:  # noqa: BLE001 - the Rust library raises plain Exception on a bad file
        raise BadInput(f"{what}: not a tokenizers JSON file ({_first(exc)}).") from None


def _auto(name: str, where, local: bool, model: str | None = None) -> Tokenizer:
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise BadInput(f"--tokenizer {plain(name)}: loading it needs transformers (the data extra, no torch): "
                       f"pip install '{DATA_EXTRA}', or pass a tokenizer.json file.") from None
    if not local:  # a malformed HF_ENDPOINT or HF_TOKEN is refused naming the variable, not the tokenizer
        settings.hf_endpoint()
        settings.hf_token()
    try:
        with native_errors(f"--tokenizer {plain(name)}"):
            tok = _from_pretrained(AutoTokenizer, str(where), local)
    except BadInput:
        raise
    except Exception as exc:  # noqa: BLE001 - offline, gated, missing files: one line naming what is missing
        if model is not None and not local:  # the user gave a model, not --tokenizer: name what they gave
            gated = "" if settings.present("HF_TOKEN") else " (set HF_TOKEN first if the repo is gated)"
            raise BadInput(redact(
                f"--model {plain(model)}: its tokenizer ({plain(name)}) is not in the local Hugging Face cache and "
                f"the Hub cannot be reached or refuses it; download it once while online (run this command again, "
                f"or `hf download {plain(name)}`){gated}, or give a local tokenizer folder or "
                f"tokenizer.json with --tokenizer ({_first(exc)}).")) from None
        hint = ("the folder holds no usable tokenizer.json / tokenizer_config.json" if local else
                "not in the local Hugging Face cache and the Hub cannot be reached or refuses it"
                + ("" if settings.present("HF_TOKEN") else " (set HF_TOKEN for a gated repo)"))
        raise BadInput(redact(f"--tokenizer {plain(name)}: cannot load the tokenizer: {hint}; pass --tokenizer with a "
                              f"local folder or tokenizer.json ({_first(exc)}).")) from None
    fast = getattr(tok, "backend_tokenizer", None)
    if fast is None:
        raise BadInput(f"--tokenizer {plain(name)}: only fast (tokenizers-backed) tokenizers are supported.")
    return Tokenizer(name, fast, tok)


def _from_pretrained(auto, where: str, local: bool):
    """The local Hugging Face cache first (works offline, no retries); the Hub only when it misses, with
    huggingface_hub's retry chatter kept off the terminal (the failure is reported as one line)."""
    import logging

    token = settings.hf_token()
    try:
        with _hub_offline():
            return auto.from_pretrained(where, token=token, local_files_only=True)
    except Exception:  # noqa: BLE001 - not cached: ask the Hub below
        if local:
            raise
    _hub_reachable()
    hub_log = logging.getLogger("huggingface_hub")
    level = hub_log.level
    hub_log.setLevel(logging.CRITICAL)
    try:
        return auto.from_pretrained(where, token=token)
    finally:
        hub_log.setLevel(level)


@contextlib.contextmanager
def _hub_offline():
    """huggingface_hub in offline mode for the local-cache lookup: `local_files_only` alone still reaches the
    network, because every request's headers name the calling agent from a registry fetched from the Hub
    (huggingface_hub 2.4.0, utils/_headers.py `_http_user_agent` -> utils/_detect_agent.py `_fetch_registry`,
    skipped only when `constants.HF_HUB_OFFLINE`); with no network that lookup's name resolution alone took
    about 30 s before the one-line refusal."""
    from huggingface_hub import constants

    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before


DATA_EXTRA = "gpu-cost-advisor[data]"  # tokenizers, pyarrow, datasets and transformers without torch (pyproject.toml)
HUB_PROBE_S = 3.0  # the whole reachability probe, name resolution included


def _hub_reachable(timeout: float = HUB_PROBE_S) -> None:
    """Before huggingface_hub's retries (about 45 s of back-off when offline): nothing is asked under
    HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE, and otherwise one TCP connection to the Hub's host must open
    within `timeout` seconds. The probe runs in a thread because a socket timeout does not bound name
    resolution, which on a machine with no network can take half a minute. Behind a proxy only the proxy
    knows, so nothing is probed."""
    if settings.hf_offline():
        raise ConnectionError("HF_HUB_OFFLINE is set")
    if settings.proxy_set():
        return
    import socket
    import threading
    from urllib.parse import urlsplit

    url = urlsplit(hub_endpoint())
    address = (url.hostname or "", url.port or (443 if url.scheme == "https" else 80))
    failed: list[BaseException | None] = []

    def probe() -> None:
        try:
            socket.create_connection(address, timeout=timeout).close()
            failed.append(None)
        except OSError as exc:
            failed.append(exc)

    thread = threading.Thread(target=probe, name="hub-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    if not failed:
        raise ConnectionError(f"{redact(hub_endpoint())} cannot be reached within {timeout:g} s")
    if failed[0] is not None:
        raise ConnectionError(f"{redact(hub_endpoint())} cannot be reached: {type(failed[0]).__name__}")


def tokenizer_ref(model: str | None, tokenizer: str | None) -> str:
    """What to load: --tokenizer, else the model's folder, else its catalog Hub id, else the model id."""
    if tokenizer:
        return tokenizer
    if not model:
        raise BadInput("--tokenizer: which tokenizer? Pass --model (its tokenizer is used) or --tokenizer.")
    p = Path(model).expanduser()
    if p.is_file():
        return str(p.parent)
    if p.is_dir():
        return str(p)

    entry = _catalog()[1].get(model.strip().lower())
    return entry["id"] if entry else model


# ----------------------------------------------------------------------------- counting

def _messages(value: Any, row: int, what: str) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise BadInput(f"{what}: row {row}: messages must be a non-empty list of {{role, content}} objects.")
    out = []
    for m in value:
        if not isinstance(m, dict):
            raise BadInput(f"{what}: row {row}: a message is not an object.")
        role = m.get("role", SHAREGPT_ROLES.get(m.get("from"), m.get("from")))
        content = m.get("content", m.get("value"))
        if not isinstance(role, str) or not isinstance(content, str):
            raise BadInput(f"{what}: row {row}: each message needs text 'role' and 'content' (or 'from' and 'value').")
        out.append({"role": role, "content": content})
    return out


def _texts(values: list, kind: str, tok: Tokenizer, rows: np.ndarray, what: str) -> list[str]:
    if kind == "text":
        for v, r in zip(values, rows):
            if not isinstance(v, str):
                raise BadInput(f"{what}: row {int(r) + 1}: the text is {'empty (null)' if v is None else 'not text'}.")
        return values
    return [tok.render(_messages(v, int(r) + 1, what)) for v, r in zip(values, rows)]


def _values(table, field: str, rows: np.ndarray, what: str) -> list:
    """The column's values as Python objects; text that is not UTF-8 (possible in Parquet and Arrow
    files, whose strings pyarrow does not re-check) is named by its row."""
    column = table.column(field)
    try:
        return column.to_pylist()
    except UnicodeDecodeError:
        for i, r in enumerate(rows.tolist()):
            try:
                column.slice(i, 1).to_pylist()
            except UnicodeDecodeError as exc:
                raise BadInput(f"{what}: row {r + 1}: the text is not UTF-8 ({exc.reason}).") from None
        raise


def _choose(rows: int, sample: int | None, seed: int) -> np.ndarray:
    """The rows counted, ascending: all of them, or a seeded uniform sample without replacement."""
    import numpy as np

    if sample is None or rows <= sample:
        return np.arange(rows)
    return np.sort(np.random.default_rng(seed).choice(rows, size=sample, replace=False))


def count_dataset(path: str | Path, tokenizer: Tokenizer, *, text_field: str | None = None,
                  messages_field: str | None = None, seq_len: int = 2048, micro_batch: int = 1,
                  group_by_length: bool = False, sample: int | None = DEFAULT_SAMPLE, seed: int = 0,
                  progress: Callable[[int, int], None] | None = None, padding_up_to: int = 0) -> DatasetCount:
    """Token statistics of the dataset at `path` (`sample=None`: every row; `padding_up_to`: see length_stats)."""
    import numpy as np

    what = f"--dataset {plain(path)}"
    if sample is not None and sample < 1:
        raise BadInput(f"--sample: must be at least 1 row (got {sample}).")
    named = tuple(x for x in (text_field, messages_field) if x)
    source = dataset_files.open_source(existing(path), what, named or MESSAGE_FIELDS + TEXT_FIELDS)
    rows = source.rows
    chosen = _choose(rows, sample, seed)
    batches = source.batches(chosen, CHUNK)
    first = next(batches, None)
    field, kind = pick_field(list(first[1].column_names) if first else [], text_field, messages_field, what)
    if rows == 0:
        raise BadInput(f"{what}: the dataset has no rows.")
    lengths = np.empty(len(chosen), dtype=np.int64)
    special = kind == "text"  # a chat template writes its own special tokens
    loss, note = (0, "") if kind == "text" or tokenizer.has_chat_template else (
        None, "the tokenizer has no chat template, so the assistant's turns cannot be told apart")
    done = 0
    for idx, table in itertools.chain([first], batches):
        values = _values(table, field, idx, what)
        lengths[done:done + len(idx)] = tokenizer.lengths(_texts(values, kind, tokenizer, idx, what), special)
        done += len(idx)
        if kind == "messages" and loss is not None:
            try:
                loss += sum(tokenizer.loss_tokens(_messages(v, int(r) + 1, what), seq_len) for v, r in zip(values, idx))
            except NotPrefixPreserving as exc:
                loss, note = None, f"the chat template cannot be masked from its turns ({exc})"
        if progress:
            progress(done, len(chosen))
    rendering = "text" if kind == "text" else (
        "chat template" if tokenizer.has_chat_template else "role: content lines (the tokenizer has no chat template)")
    stats = length_stats(lengths, rows, seq_len, micro_batch, group_by_length, padding_up_to)
    if kind == "text":
        loss_tokens = stats.kept_tokens
    else:
        loss_tokens = None if loss is None else loss * rows / len(chosen)  # the sample's share, scaled like kept tokens
    return DatasetCount(dataset=str(path), field=field, kind=kind, rendering=rendering, tokenizer=tokenizer.name,
                        seed=seed, stats=stats, loss_tokens=loss_tokens, loss_note=note)


def terminal_progress(label: str):
    """A rich progress bar on stderr when it is a terminal, else None (no output in pipes and tests)."""
    if not sys.stderr.isatty():
        return None, None
    from rich.console import Console
    from rich.progress import Progress

    bar = Progress(transient=True, console=Console(stderr=True))
    task = bar.add_task(label, total=None)

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return bar, update
