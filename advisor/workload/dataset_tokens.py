"""Count a user's dataset in the model's own tokens: JSONL/JSON, CSV, Parquet or a `datasets` folder.

Files are read by pyarrow (JSON lines, CSV, Parquet) or the `datasets` library (a JSON array, a
`save_to_disk` folder), never by a hand-written parser: the optional `data` extra. Rows are plain
text (`--text-field`) or chat `messages` (`--messages-field`, lists of {role, content}, or
ShareGPT's {from, value}), rendered through the tokenizer's chat template when it has one
(transformers apply_chat_template, as TRL's SFTTrainer does) and joined as "role: content" lines
otherwise (the result says which). Big datasets are counted on a seeded random sample of rows with a
stated 95 % error bound; small ones exactly. The statistics are advisor/workload/length_stats.py's.
"""

from __future__ import annotations

import io
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from advisor.errors import BadInput
from advisor.model.catalog import HUB_ID, _catalog, _endpoint
from advisor.text import plain
from advisor.workload.length_stats import LengthStats, length_stats
from pricing import settings

if TYPE_CHECKING:  # numpy is imported where it is used: the CLI's start-up does not load it
    import numpy as np

DEFAULT_SAMPLE = 20_000  # rows tokenized when a dataset is bigger (--sample); every row below it
CHUNK = 10_000  # rows per tokenizer call (progress granularity)
TEXT_FIELDS = ("text", "content", "prompt")  # tried in order when no field is named
MESSAGE_FIELDS = ("messages", "conversations")  # conversations: ShareGPT / LLaMA-Factory's sharegpt format
SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "system": "system", "observation": "tool",
                  "function_call": "assistant"}  # LLaMA-Factory data/README.md (sharegpt tags)
SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".arrow")


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


# ----------------------------------------------------------------------------- reading

def _need(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise BadInput(f"--dataset: reading datasets needs {module.split('.')[0]}: pip install "
                       "'gpu-cost-advisor[data]'.") from None


def existing(path: str | Path) -> Path:
    """The dataset's local path, or one line saying it is not there (checked before a tokenizer is loaded)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise BadInput(f"--dataset {plain(p)}: no such file or folder.")
    return p


def read_table(path: str | Path, columns: tuple[str, ...] = ()):
    """The dataset as a pyarrow Table (only `columns` where the format can read a subset)."""
    p = existing(path)
    what = f"--dataset {plain(p)}"
    if p.is_file() and p.stat().st_size == 0:
        raise BadInput(f"{what}: the dataset has no rows (the file is empty).")
    pa = _need("pyarrow")
    try:
        if p.is_dir():
            return _read_folder(p, what)
        suffix = p.suffix.lower()
        if suffix == ".parquet":
            pq = _need("pyarrow.parquet")
            names = set(pq.read_schema(p).names)
            return pq.read_table(p, columns=[c for c in columns if c in names] or None)
        if suffix == ".csv":
            return _need("pyarrow.csv").read_csv(p)
        if suffix in (".jsonl", ".json"):
            return _read_json(p)
        if suffix == ".arrow":
            with pa.memory_map(str(p)) as source:
                return pa.ipc.open_stream(source).read_all()
    except BadInput:
        raise
    except (pa.ArrowException, ValueError, OSError, TypeError) as exc:
        raise BadInput(f"{what}: cannot be read ({_first(exc)}).") from None
    raise BadInput(f"{what}: unknown format {plain(p.suffix) or '(no suffix)'}; use {', '.join(SUFFIXES)} or a "
                   "folder written by datasets' save_to_disk.")


def _datasets():
    """The datasets library, quiet: its progress bars and info logs would interleave with our output."""
    datasets = _need("datasets")
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    return datasets


def _read_json(p: Path):
    pa_json = _need("pyarrow.json")
    pa = _need("pyarrow")
    with open(p, "rb") as f:
        head = f.read(4096).lstrip()
    if not head.startswith(b"["):  # JSON lines (one object per line)
        return pa_json.read_json(p)
    datasets = _datasets()  # a JSON array: the datasets library's JSON builder reads it
    with tempfile.TemporaryDirectory(prefix="gpu-advisor-ds-") as cache:
        try:
            ds = datasets.Dataset.from_json(str(p), cache_dir=cache, keep_in_memory=True)
        except Exception as exc:  # noqa: BLE001 - DatasetGenerationError and friends: the file is not usable
            cause = exc.__cause__ or exc
            raise BadInput(f"--dataset {plain(p)}: cannot be read as a JSON array ({_first(cause)}).") from None
        return pa.table(ds.data.table)


def _read_folder(p: Path, what: str):
    datasets = _datasets()
    try:
        ds = datasets.load_from_disk(str(p), keep_in_memory=True)
    except FileNotFoundError:
        raise BadInput(f"{what}: the folder is not a dataset written by datasets' save_to_disk.") from None
    if isinstance(ds, datasets.DatasetDict):
        if "train" not in ds:
            raise BadInput(f"{what}: a DatasetDict without a 'train' split (splits: {', '.join(ds)}).")
        ds = ds["train"]
    if getattr(ds, "_indices", None) is not None:  # a select()/shuffle() view: its rows, in its order
        ds = ds.flatten_indices(keep_in_memory=True)
    return ds.data.table


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

class Tokenizer:
    """The model's tokenizer: lengths of texts, and chat messages rendered the way training sees them."""

    def __init__(self, name: str, fast, chat: Any = None):
        self.name, self._fast, self._chat = name, fast, chat

    @property
    def has_chat_template(self) -> bool:
        return self._chat is not None and bool(getattr(self._chat, "chat_template", None))

    def lengths(self, texts: list[str], special_tokens: bool = True) -> np.ndarray:
        # encode_batch_fast (tokenizers >= 0.21) skips the character offsets: the same ids, ~20 % faster
        import numpy as np

        encode = getattr(self._fast, "encode_batch_fast", None) or self._fast.encode_batch
        encodings = encode(texts, add_special_tokens=special_tokens)
        return np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))

    def render(self, messages: list[dict[str, str]]) -> str:
        if self.has_chat_template:
            return self._chat.apply_chat_template(messages, tokenize=False)
        return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


def load_tokenizer(ref: str, model: str | None = None) -> Tokenizer:
    """A local folder (tokenizer.json, with tokenizer_config.json's chat template when present), a
    tokenizer.json file, or a Hub id (HF_TOKEN for gated repos; the local cache when offline). `model`: the
    --model the ref came from (no --tokenizer given), named in the message when it cannot be loaded."""
    text = str(ref).strip()
    p = Path(text).expanduser()
    if p.is_file():
        return Tokenizer(text, _tokenizers_file(p))
    if p.is_dir():
        if not (p / "tokenizer_config.json").is_file() and (p / "tokenizer.json").is_file():
            return Tokenizer(text, _tokenizers_file(p / "tokenizer.json"))
        return _auto(text, p, local=True)

    if not HUB_ID.match(text) or text.endswith(".json"):
        raise BadInput(f"--tokenizer {plain(text)}: no such file or folder.")
    return _auto(text, text, local=False, model=model)


def _tokenizers_file(p: Path):
    tokenizers = _need("tokenizers")
    try:
        return tokenizers.Tokenizer.from_file(str(p))
    except Exception as exc:  # noqa: BLE001 - the Rust library raises plain Exception on a bad file
        raise BadInput(f"--tokenizer {plain(p)}: not a tokenizers JSON file ({_first(exc)}).") from None


def _auto(name: str, where, local: bool, model: str | None = None) -> Tokenizer:
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise BadInput(f"--tokenizer {plain(name)}: loading it needs transformers: pip install "
                       "'gpu-cost-advisor[ml]', or pass a tokenizer.json file.") from None
    if not local:  # a malformed HF_ENDPOINT or HF_TOKEN is refused naming the variable, not the tokenizer
        settings.hf_endpoint()
        settings.hf_token()
    try:
        tok = _from_pretrained(AutoTokenizer, str(where), local)
    except Exception as exc:  # noqa: BLE001 - offline, gated, missing files: one line naming what is missing
        if model is not None and not local:  # the user gave a model, not --tokenizer: name what they gave
            gated = "" if settings.present("HF_TOKEN") else " (set HF_TOKEN first if the repo is gated)"
            raise BadInput(f"--model {plain(model)}: its tokenizer ({plain(name)}) is not in the local Hugging Face "
                           f"cache and the Hub cannot be reached or refuses it; download it once while online "
                           f"(run this command again, or `huggingface-cli download {plain(name)}`){gated}, or give "
                           "a local tokenizer folder or tokenizer.json with --tokenizer.") from None
        hint = ("the folder holds no usable tokenizer.json / tokenizer_config.json" if local else
                "not in the local Hugging Face cache and the Hub cannot be reached or refuses it"
                + ("" if settings.present("HF_TOKEN") else " (set HF_TOKEN for a gated repo)"))
        raise BadInput(f"--tokenizer {plain(name)}: cannot load the tokenizer: {hint}; pass --tokenizer with a "
                       f"local folder or tokenizer.json ({_first(exc)}).") from None
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


def _hub_reachable(timeout: float = 5.0) -> None:
    """One quick request before huggingface_hub's retries (about 45 s of back-off when offline)."""
    import requests

    try:
        requests.head(_endpoint(), timeout=timeout)
    except requests.RequestException as exc:
        raise ConnectionError(f"{_endpoint()} cannot be reached: {type(exc).__name__}") from None


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


def _choose(rows: int, sample: int | None, seed: int) -> np.ndarray:
    """The rows counted, ascending: all of them, or a seeded uniform sample without replacement."""
    import numpy as np

    if sample is None or rows <= sample:
        return np.arange(rows)
    return np.sort(np.random.default_rng(seed).choice(rows, size=sample, replace=False))


def _jsonl_sample(p: Path, sample: int, seed: int, what: str):
    """(table of the sampled rows, rows in the file, their row numbers) for a JSON-lines file bigger than
    the sample, else None. Rows are found by their line breaks (a JSON-lines row is one line: JSON text
    has no raw line break inside a string) and only the sampled lines are parsed, by pyarrow."""
    import numpy as np

    if p.suffix.lower() not in (".jsonl", ".json") or not p.is_file() or p.stat().st_size == 0:
        return None
    with open(p, "rb") as f:
        if f.read(4096).lstrip().startswith(b"["):
            return None
    data = np.memmap(p, dtype=np.uint8, mode="r")
    breaks = np.flatnonzero(data == 10)
    starts = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks, [len(data)]))
    # blank lines (nothing, or only a carriage return) are not rows, for pyarrow either
    filled = (ends - starts > 1) | ((ends - starts == 1) & (data[np.minimum(starts, len(data) - 1)] != 13))
    starts, ends = starts[filled], ends[filled]
    rows = len(starts)
    if rows <= sample:
        return None
    chosen = _choose(rows, sample, seed)
    body = b"\n".join(bytes(data[a:b]) for a, b in zip(starts[chosen], ends[chosen]))
    pa, pa_json = _need("pyarrow"), _need("pyarrow.json")
    try:
        table = pa_json.read_json(io.BytesIO(body))
    except (pa.ArrowException, ValueError) as exc:
        raise BadInput(f"{what}: cannot be read ({_first(exc)}).") from None
    return table, rows, chosen


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
    picked = _jsonl_sample(Path(path).expanduser(), sample, seed, what) if sample is not None else None
    if picked is not None:  # only the sampled lines of a big JSONL were parsed
        table, rows, chosen = picked
        positions = np.arange(len(chosen))
    else:
        table = read_table(path, named or MESSAGE_FIELDS + TEXT_FIELDS)
        rows = table.num_rows
        chosen = _choose(rows, sample, seed)
        positions = chosen
    field, kind = pick_field(list(table.column_names), text_field, messages_field, what)
    if rows == 0:
        raise BadInput(f"{what}: the dataset has no rows.")
    column = table.column(field)
    lengths = np.empty(len(chosen), dtype=np.int64)
    special = kind == "text"  # a chat template writes its own special tokens
    for start in range(0, len(chosen), CHUNK):
        idx = chosen[start:start + CHUNK]
        values = column.take(positions[start:start + CHUNK]).to_pylist()
        lengths[start:start + len(idx)] = tokenizer.lengths(_texts(values, kind, tokenizer, idx, what), special)
        if progress:
            progress(start + len(idx), len(chosen))
    rendering = "text" if kind == "text" else (
        "chat template" if tokenizer.has_chat_template else "role: content lines (the tokenizer has no chat template)")
    return DatasetCount(dataset=str(path), field=field, kind=kind, rendering=rendering, tokenizer=tokenizer.name,
                        seed=seed, stats=length_stats(lengths, rows, seq_len, micro_batch, group_by_length,
                                                      padding_up_to))


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
