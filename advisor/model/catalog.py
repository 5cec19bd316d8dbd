"""Where ModelSpecs come from: the built-in catalog, a local config.json, or the Hugging Face Hub.

`load_model(ref)` accepts a catalog id or alias (any case), a path to a config.json (or a
folder holding one), or a Hub id, whose config.json is fetched once and kept in the user
cache. The catalog is plain JSON read once, so `gpu-advisor estimate` starts fast.
Absent config keys take the defaults of transformers' own config class for that family
(tests/advisor/model/test_models.py checks them against transformers).
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import socket
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from advisor.errors import BadInput
from advisor.model import families
from advisor.model.architecture import build
from advisor.model.spec import MAX_HEADS, MAX_PARAMS, SUPPORTED_FAMILIES, ModelSpec, VisionSpec
from advisor.text import plain, refused_char
from advisor.units import count
from pricing import settings
from pricing.errors import PriceInputError
from pricing.files import atomic_write, cache_dir, load_json, read_regular_file
from pricing.http import redact

MAX_CONFIG_BYTES = 5_000_000  # a config.json is a few kB; refuse anything that is not one

CATALOG_PATH = Path(__file__).resolve().parents[1] / "data" / "models.json"
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$", re.ASCII)  # Hub ids are ASCII; \w alone takes Cyrillic
HUB_TIMEOUT_S = 10

# transformers' config-class defaults for keys absent from config.json, per flat model_type
# (advisor/data/families.json). None means derived: num_key_value_heads = num_attention_heads,
# head_dim = hidden_size // num_attention_heads (also what an explicit null in config.json gives).
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = families.family_defaults()
# SiglipVisionConfig defaults (the tower Gemma 3 uses).
SIGLIP_DEFAULTS: dict[str, Any] = next(
    dict(f.vision_config.defaults) for f in families.table().values() if f.vision_config is not None)


# ----------------------------------------------------------------------------- catalog

@functools.cache
def _catalog() -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Catalog entries and an index from every lower-cased id and alias to its entry."""
    entries = json.loads(CATALOG_PATH.read_text(encoding="utf-8"))["models"]
    index = {}
    for entry in entries:
        for key in (entry["id"], *entry["aliases"]):
            index[key.lower()] = entry
    return entries, index


def _entry_spec(entry: dict[str, Any]) -> ModelSpec:
    return from_hf_config(entry["config"], name=entry["id"], source=entry["source"], aliases=entry["aliases"])


def catalog() -> list[ModelSpec]:
    """Every built-in model, in catalog order."""
    return [_entry_spec(e) for e in _catalog()[0]]


def catalog_names() -> list[str]:
    """All ids and aliases (original case) a catalog lookup accepts."""
    return [key for e in _catalog()[0] for key in (e["id"], *e["aliases"])]


def close_names(ref: str, n: int = 4) -> list[str]:
    """Catalog names that look like `ref`, one per model (for "did you mean"); the closest, however far."""
    import difflib  # only on the error path

    index = _catalog()[1]
    by_lower = {name.lower(): name for name in catalog_names()}
    queries = dict.fromkeys([ref.lower(), ref.lower().rsplit("/", 1)[-1]])  # full id first, then the bare name
    out: dict[str, str] = {}  # model id -> the name that matched
    for cutoff in (0.6, 0.4, 0.0):
        for query in queries:
            for hit in difflib.get_close_matches(query, list(by_lower), n=n, cutoff=cutoff):
                out.setdefault(index[hit]["id"], by_lower[hit])
        if out:
            break
    return list(out.values())[:n]


# ----------------------------------------------------------------------------- loading

def load_model(ref: str | ModelSpec) -> ModelSpec:
    """A ModelSpec from a catalog id/alias, a config.json path or folder, or a Hub id."""
    if isinstance(ref, ModelSpec):
        return ref
    text = str(ref).strip()
    if not text:
        raise BadInput("model: expected a catalog name, a Hugging Face id or a path to a config.json (got '').")
    check_model_name(text)
    entry = _catalog()[1].get(text.lower())
    if entry is not None:
        return _entry_spec(entry)
    path = Path(text).expanduser()
    if path.is_dir():
        path = path / "config.json"
        if not os.path.lexists(path):
            raise BadInput(f"model: folder '{plain(text)}' holds no config.json.")
    if os.path.lexists(path):  # a FIFO, a device, a symlink loop: refused by _read_json as not a regular file
        return _checked(from_hf_config(_read_json(path), name=_local_name(path), source=str(path.resolve())))
    if HUB_ID.match(text) and not text.endswith(".json"):
        return _checked(from_hf_config(fetch_hub_config(text), name=text,
                                       source=redact(f"{hub_endpoint()}/{text}/blob/main/config.json")))
    if text.endswith(".json") or os.sep in text:
        hint = "" if text.isascii() else " (nor a Hugging Face id: those are ASCII letters, digits, '_', '.', '-')"
        raise BadInput(f"model: no such file '{plain(text)}'{hint}.")
    raise BadInput(f"model: unknown model '{plain(text)}'; did you mean: {', '.join(close_names(text))}? Pass a "
                   "catalog name (`gpu-advisor models` lists them), a Hugging Face id or a path to a config.json.")


MAX_NAME_CHARS = 512


def check_model_name(name: str, what: str = "model") -> str:
    """A model reference as a plan or an option may hold it: a Hugging Face id, a catalog name or a
    path, i.e. printable text (no control characters or line breaks), at most 512 characters, not
    starting with '-' (it would read as an option). Returns it; BadInput otherwise."""
    bad = refused_char(name)
    problem = (f"holds the control character {bad}" if bad else
               f"is longer than {MAX_NAME_CHARS} characters" if len(name) > MAX_NAME_CHARS else
               "starts with '-'" if name.startswith("-") else "is empty" if not name.strip() else None)
    if problem:
        raise BadInput(f"{what + ': ' if what else ''}the model name {problem}; expected a Hugging Face id "
                       f"(org/name), a catalog name or a path (got '{plain(name)[:80]}').")
    return name


def _checked(spec: ModelSpec) -> ModelSpec:
    """Refuse a config whose total parameter count no real model comes near (MAX_PARAMS)."""
    total = build(spec).params_total
    if total > MAX_PARAMS:
        raise BadInput(f"model: config from {plain(spec.source)} describes {human_count(total)} parameters; at most "
                       f"{human_count(MAX_PARAMS)} are accepted.")
    return spec


def _local_name(path: Path) -> str:
    name = path.parent.name or str(path)
    return name if refused_char(name) is None and not name.startswith("-") else plain(name).lstrip("-") or "local-model"


def _read_json(path: Path) -> dict[str, Any]:
    """A config.json, size- and depth-limited (pricing.files), as a dict; BadInput otherwise."""
    try:
        text = read_regular_file(path, MAX_CONFIG_BYTES, f"model: {plain(path)}")
    except PriceInputError as exc:  # not there, not a regular file (a FIFO, /dev/zero), too large
        raise BadInput(f"{exc}.") from None
    try:
        data = load_json(text, "JSON", max_bytes=MAX_CONFIG_BYTES)
    except PriceInputError as exc:
        raise BadInput(f"model: cannot read '{plain(path)}' as a config.json ({plain(exc)}).") from None
    if not isinstance(data, dict):
        raise BadInput(f"model: '{plain(path)}' is not a config.json object.")
    return data


def from_hf_config(cfg: dict[str, Any], *, name: str, source: str, aliases: list[str] | tuple = ()) -> ModelSpec:
    """Turn a config.json dict (any supported family, Hub or transformers-5 key names) into a ModelSpec."""
    family = cfg.get("model_type")
    fam = families.get(family) if isinstance(family, str) else None
    if fam is None:
        raise BadInput(f"model_type: '{plain(family)[:80]}' in {plain(source)} is not supported; supported families: "
                       f"{', '.join(SUPPORTED_FAMILIES)}.")
    cfg = fam.normalise(cfg)
    if fam.text_config is not None:  # a multimodal wrapper: the text model's facts sit in text_config
        text = dict(_section(cfg, "text_config"))
        text["model_type"] = fam.text_config
        fields = _text_fields(text)
        tie = cfg.get("tie_word_embeddings")  # the wrapper's own value decides; text_config's is ignored
        fields["tie_word_embeddings"] = flag("tie_word_embeddings",
                                             fam.defaults["tie_word_embeddings"] if tie is None else tie)
        fields["vision"] = _vision_spec(cfg, fam)
        dtype = _dtype(cfg) or _dtype(text)
    else:
        fields = _text_fields(cfg)
        dtype = _dtype(cfg)
    fields["family"] = family
    fields["qk_norm"] = fam.qk_norm
    fields["norms_per_layer"] = fam.norms_per_layer
    if dtype:
        if not isinstance(dtype, str) or not re.fullmatch(r"[A-Za-z0-9_.]{1,40}", dtype):
            raise BadInput(f"model: config.json torch_dtype must be a dtype name such as bfloat16 (got {_shown(dtype)}).")
        fields["torch_dtype"] = dtype
    try:
        return ModelSpec(name=name, source=source, aliases=list(aliases), **fields)
    except ValidationError as exc:  # a value of the wrong type, or beyond a physical bound
        err = exc.errors()[0]
        ctx_error = (err.get("ctx") or {}).get("error")
        where = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(ctx_error) if ctx_error is not None else f"{where}: {err.get('msg', 'invalid value')}"
        raise BadInput(f"model: config.json from {plain(source)}: {plain(msg)}.") from None


def _shown(value: Any) -> str:
    """A config value as JSON spells it (true, "4096", NaN, [4096]), short and printable."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return plain(text)[:60]


def whole(key: str, value: Any) -> int:
    """A whole number from a config.json (an integral float such as 32.0 too); a bool, a string, NaN,
    1e309, 2.5, a list or an object is refused with the key named (transformers would take "8" or true
    as they are and fail later, or compute with a truncated value)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
        raise BadInput(f"model: config.json {key} must be a whole number (got {_shown(value)}).")
    return int(value)


def flag(key: str, value: Any) -> bool:
    """A true/false switch from a config.json: the string "false" is not false (bool("false") is True)."""
    if not isinstance(value, bool):
        raise BadInput(f"model: config.json {key} must be true or false (got {_shown(value)}).")
    return value


def _section(cfg: dict[str, Any], key: str) -> dict[str, Any]:
    """A nested config (text_config, vision_config): an object, or {} when absent or null."""
    value = cfg.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadInput(f"model: config.json {key} must be an object (got {_shown(value)}).")
    return value


def _dtype(cfg: dict[str, Any]) -> Any:
    """The weights' dtype: transformers 5's `dtype`, else the Hub's older `torch_dtype`."""
    return next((cfg[k] for k in families.dtype_keys() if cfg.get(k)), None)


def _text_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    fam = families.traits(cfg["model_type"])
    cfg = fam.normalise(cfg)
    d = fam.defaults

    def get(key: str) -> Any:
        value = cfg.get(key, d.get(key))
        return d.get(key) if value is None and key not in ("num_key_value_heads", "head_dim") else value

    def size(key: str, fallback: Any = None) -> int:
        """A whole number from the config; null (or absent) takes `fallback` (derived, as transformers'
        config classes do for num_key_value_heads and head_dim), but 0 or false does not."""
        value = get(key)
        return whole(key, fallback if value is None else value)

    hidden, heads = size("hidden_size"), size("num_attention_heads")
    if not 1 <= heads <= MAX_HEADS:
        raise BadInput(f"model: config.json num_attention_heads must be between 1 and {MAX_HEADS:,} (got {heads:,}).")
    out: dict[str, Any] = dict(
        vocab_size=size("vocab_size"),
        hidden_size=hidden,
        intermediate_size=size("intermediate_size"),
        num_hidden_layers=size("num_hidden_layers"),
        num_attention_heads=heads,
        num_key_value_heads=size("num_key_value_heads", heads),
        head_dim=size("head_dim", hidden // heads),
        max_position_embeddings=size("max_position_embeddings"),
        tie_word_embeddings=flag("tie_word_embeddings", get("tie_word_embeddings")),
    )
    bad = [k for k, v in out.items() if k != "tie_word_embeddings" and v < 1]
    if bad:
        raise BadInput(f"model: config.json {bad[0]} must be a positive integer (got {out[bad[0]]}).")
    if heads % out["num_key_value_heads"]:
        raise BadInput(f"model: config.json num_key_value_heads ({out['num_key_value_heads']}) must divide "
                       f"num_attention_heads ({heads}).")
    # q/k/v biases: a config switch (attention_bias, Qwen2-MoE's qkv_bias) or hard-wired in the modeling code.
    rule = fam.attention_bias
    out["attention_bias"] = flag(rule.key, get(rule.key)) if rule.key else rule.fixed
    sliding = get("sliding_window")
    # null or 0: no window (transformers' mask code skips a falsy sliding_window); anything else a whole number,
    # checked also where a switch (Qwen2's use_sliding_window) turns it off
    window = None if sliding is None or sliding == 0 and not isinstance(sliding, bool) else \
        whole("sliding_window", sliding)
    if fam.sliding_window_switch and not flag(fam.sliding_window_switch, get(fam.sliding_window_switch)):
        window = None
    out["sliding_window"] = window
    for spec_field, key in (fam.moe or {}).items():
        out[spec_field] = _expert_setting(key, get(key), spec_field == "mlp_only_layers")
    return out


def _expert_setting(key: str, value: Any, is_list: bool) -> int | list[int]:
    """A mixture-of-experts setting: a whole number, or (mlp_only_layers) a list of layer numbers."""
    if not is_list:
        return whole(key, value)
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):  # a tuple: the family's frozen default
        raise BadInput(f"model: config.json {key} must be a list of layer numbers (got {_shown(value)}).")
    return [whole(f"{key}[{i}]", v) for i, v in enumerate(value)]


def _vision_spec(cfg: dict[str, Any], fam: families.Family) -> VisionSpec:
    sub = fam.vision_config
    vision = sub.normalise(_section(cfg, "vision_config"))
    values = {k: whole(f"vision_config.{k}", vision.get(k) if vision.get(k) is not None else v)
              for k, v in sub.defaults.items()}
    tokens = cfg.get("mm_tokens_per_image")
    tokens = whole("mm_tokens_per_image", fam.defaults["mm_tokens_per_image"] if tokens is None else tokens)
    try:
        return VisionSpec(**values, mm_tokens_per_image=tokens)
    except (TypeError, ValueError, OverflowError) as exc:  # ValidationError is a ValueError
        errors = getattr(exc, "errors", None)
        err = errors()[0] if errors else {}
        ctx_error = (err.get("ctx") or {}).get("error")
        msg = str(ctx_error) if ctx_error is not None else (err.get("msg") or str(exc))
        raise BadInput(f"model: config.json vision_config: {plain(msg)}.") from None


def to_hf_config(spec: ModelSpec) -> dict[str, Any]:
    """The config.json dict transformers builds this architecture from (inverse of from_hf_config),
    in the key names Hub config.json files use (transformers 5 reads them and their aliases)."""
    fam = families.traits(spec.family)
    text_fam = families.traits(fam.text_config) if fam.text_config else fam
    text: dict[str, Any] = {
        "model_type": text_fam.model_type,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "max_position_embeddings": spec.max_position_embeddings,
        "tie_word_embeddings": spec.tie_word_embeddings,
    }
    if text_fam.attention_bias.key:
        text[text_fam.attention_bias.key] = spec.attention_bias
    if text_fam.sliding_window_switch:
        text[text_fam.sliding_window_switch] = spec.sliding_window is not None
        if spec.sliding_window is not None:
            text["sliding_window"] = spec.sliding_window
    else:
        text["sliding_window"] = spec.sliding_window
    for spec_field, key in (text_fam.moe or {}).items():
        value = getattr(spec, spec_field)
        if spec_field == "mlp_only_layers":
            value = list(value)
        elif key in text:  # an expert size that is the dense size's key (Mixtral's intermediate_size)
            value = value or text[key]
        text[key] = value
    if fam.vision_config is None:
        return {**text, "torch_dtype": spec.torch_dtype}
    sub = fam.vision_config
    v = spec.vision or VisionSpec(**sub.defaults)
    vision = {"model_type": sub.model_type, **{k: getattr(v, k) for k in sub.defaults}, **sub.written}
    tie = text.pop("tie_word_embeddings")
    return {"model_type": fam.model_type, "text_config": text, "vision_config": vision,
            "mm_tokens_per_image": v.mm_tokens_per_image, "tie_word_embeddings": tie, "torch_dtype": spec.torch_dtype}


# ----------------------------------------------------------------------------- Hub fetch

def fetch_hub_config(repo_id: str) -> dict[str, Any]:
    """config.json of a Hub repo: from the cache, else downloaded once (HF_TOKEN, HF_ENDPOINT) and cached."""
    cached = cache_dir() / "configs" / (repo_id.replace("/", "--") + ".json")
    if cached.is_file():
        return _read_json(cached)
    endpoint, token = hub_endpoint(), settings.hf_token()  # a malformed one is refused here, naming the variable
    try:
        if settings.hf_offline():
            raise _Offline("HF_HUB_OFFLINE is set")
        _check_reachable(endpoint)
        from huggingface_hub import hf_hub_download

        with tempfile.TemporaryDirectory() as tmp:
            path = hf_hub_download(repo_id, "config.json", cache_dir=tmp, etag_timeout=HUB_TIMEOUT_S,
                                   endpoint=endpoint, token=token)
            raw = Path(path).read_bytes()

        data = load_json(raw, "config.json", max_bytes=MAX_CONFIG_BYTES)
        if not isinstance(data, dict):
            raise ValueError("config.json is not a JSON object")
    except Exception as exc:  # noqa: BLE001 - every failure becomes the same actionable line
        raise BadInput(redact(f"model: cannot get config.json for '{repo_id}' from the Hugging Face Hub "
                              f"({_hub_reason(exc)}); pass a local path to its config.json or a catalog name "
                              f"(`gpu-advisor models` lists them); did you mean: {', '.join(close_names(repo_id))}?")
                       ) from None
    atomic_write(cached, raw)
    return data


HUB_ENV = ("HF_ENDPOINT", "HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")  # read via pricing.settings


def hub_endpoint() -> str:
    """$HF_ENDPOINT (huggingface_hub's own variable), else https://huggingface.co; a malformed one is refused
    naming the variable, its value never shown (pricing.settings.url)."""
    return settings.hf_endpoint()


class _Offline(ConnectionError):
    pass


def _check_reachable(endpoint: str) -> None:
    """Fail in seconds when offline, instead of huggingface_hub's ~25 s of retries with backoff."""
    if settings.proxy_set():
        return  # only the proxy knows whether the Hub is reachable
    url = urlsplit(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=5).close()
    except OSError as exc:
        raise _Offline(f"{redact(endpoint)} is unreachable: {exc.strerror or exc}; are you offline?") from None


def _hub_reason(exc: Exception) -> str:
    """What went wrong, in words a user can act on."""
    from huggingface_hub import errors

    if isinstance(exc, _Offline):
        return str(exc)
    if isinstance(exc, errors.GatedRepoError):
        return "the repo is gated: accept its licence on huggingface.co and set HF_TOKEN"
    if isinstance(exc, errors.RepositoryNotFoundError):
        return "no such repo, or it is private: check the id or set HF_TOKEN"
    if isinstance(exc, errors.RemoteEntryNotFoundError):
        return "the repo has no config.json"
    if isinstance(exc, (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled, ConnectionError, TimeoutError)):
        return "the Hub is unreachable, are you offline?"
    if isinstance(exc, ValueError):
        return f"its config.json is not a JSON object: {exc}"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:120]}"


# ----------------------------------------------------------------------------- --params mode

_COUNT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(e[+-]?\d+)?\s*([kmbt]?)\s*$", re.IGNORECASE)
_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def parse_param_count(text: str | int | float, maximum: float | None = MAX_PARAMS, option: str = "--params") -> int:
    """'7B', '1.5b', '350M', '4000M', '4e9' or 7000000000 -> a positive int count, at most `maximum`
    (default MAX_PARAMS; None: no bound)."""
    raw = str(text)[:100]
    match = _COUNT.match(raw.replace("_", "").replace(",", ""))
    value = 0.0
    if match:
        number, exponent, suffix = match.groups()
        try:
            value = float(number + (exponent or "")) * _SUFFIX[suffix.lower()]
        except OverflowError:
            value = math.inf
    if not match or math.isnan(value) or value < 0.5:
        raise BadInput(f"{option}: expected a positive count such as 7B, 1.5b, 350M or 4e9 (got {plain(raw)!r}).")
    if maximum is not None and value > maximum:
        raise BadInput(f"{option}: at most {maximum:.0e} is accepted (got {plain(raw)!r}).".replace("e+", "e"))
    if not math.isfinite(value):
        raise BadInput(f"{option}: expected a finite count (got {plain(raw)!r}).")
    return int(round(value))


def synthetic_spec(params: int) -> ModelSpec:
    """A Llama-shaped dense model of about `params` parameters (for --params when no config is known).

    A Llama layer with MHA and a 3.5h SwiGLU MLP holds 4h^2 + 3 * 3.5h^2 = 14.5h^2 weights, so
    P ~= 14.5 * L * h^2. Taking the width/depth ratio h/L ~= 115 (Llama-2: 4096/32 and 5120/40 = 128,
    8192/80 = 102) gives h = (115 P / 14.5)^(1/3). Memory and time use P itself (params_override).
    """
    if not 1 <= params <= MAX_PARAMS:
        raise BadInput(f"--params: expected a parameter count from 1 to {human_count(MAX_PARAMS)} (got {params}).")
    hidden = max(128, 128 * round((115 * params / 14.5) ** (1 / 3) / 128))
    layers = max(1, round(params / (14.5 * hidden * hidden)))
    inter = max(128, 128 * round(3.5 * hidden / 128))
    heads = hidden // 128
    return ModelSpec(
        name=f"{human_count(params)}-param model", family=families.synthetic_family(),
        source="--params (synthetic Llama-shaped architecture)",
        vocab_size=32000, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, head_dim=128, max_position_embeddings=4096,
        tie_word_embeddings=False, params_override=params,
    )


def human_count(n: int) -> str:
    """7_241_732_096 -> '7.24B' (advisor.units.count, the one count formatter)."""
    return count(n)
