"""Where ModelSpecs come from: the built-in catalog, a local config.json, or the Hugging Face Hub.

`load_model(ref)` accepts a catalog id or alias (any case), a path to a config.json (or a
folder holding one), or a Hub id, whose config.json is fetched once and kept in the user
cache. The catalog is plain JSON read once, so `gpu-advisor estimate` starts fast.
Absent config keys take the defaults of transformers' own config class for that family
(tests/test_models.py checks them against transformers).
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

from advisor.errors import BadInput
from advisor.modelspec import SUPPORTED_FAMILIES, ModelSpec, VisionSpec

CATALOG_PATH = Path(__file__).resolve().parent / "data" / "models.json"
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
DEFAULT_ENDPOINT = "https://huggingface.co"  # $HF_ENDPOINT overrides it, as in huggingface_hub
HUB_TIMEOUT_S = 10

# transformers' config-class defaults for keys absent from config.json. None means derived:
# num_key_value_heads = num_attention_heads, head_dim = hidden_size // num_attention_heads
# (also what an explicit null in config.json gives).
_BASE = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
             num_attention_heads=32, num_key_value_heads=None, head_dim=None, max_position_embeddings=2048,
             tie_word_embeddings=False, attention_bias=False, sliding_window=None)
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": _BASE,
    "mistral": {**_BASE, "intermediate_size": 14336, "num_key_value_heads": 8,
                "max_position_embeddings": 131072, "sliding_window": 4096},
    "mixtral": {**_BASE, "intermediate_size": 14336, "num_key_value_heads": 8,
                "max_position_embeddings": 131072, "num_local_experts": 8, "num_experts_per_tok": 2},
    "qwen2": {**_BASE, "vocab_size": 151936, "intermediate_size": 22016, "num_key_value_heads": 32,
              "max_position_embeddings": 32768,
              "use_sliding_window": False, "sliding_window": 4096},
    "qwen2_moe": {**_BASE, "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632,
                  "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
                  "max_position_embeddings": 32768,
                  "use_sliding_window": False, "sliding_window": 4096, "qkv_bias": True, "num_experts": 60,
                  "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
                  "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1, "mlp_only_layers": []},
    "qwen3": {**_BASE, "vocab_size": 151936, "intermediate_size": 22016, "num_key_value_heads": 32, "head_dim": 128,
              "max_position_embeddings": 32768, "use_sliding_window": False, "sliding_window": 4096},
    "qwen3_moe": {**_BASE, "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144,
                  "num_hidden_layers": 24, "num_key_value_heads": 4, "max_position_embeddings": 32768,
                  "use_sliding_window": False, "sliding_window": 4096, "num_experts": 128,
                  "num_experts_per_tok": 8, "moe_intermediate_size": 768, "decoder_sparse_step": 1,
                  "mlp_only_layers": []},
    "gemma": {**_BASE, "vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576,
              "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
              "max_position_embeddings": 8192, "tie_word_embeddings": True},
    "gemma2": {**_BASE, "vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
               "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
               "max_position_embeddings": 8192, "tie_word_embeddings": True, "sliding_window": 4096},
    "gemma3_text": {**_BASE, "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
                    "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
                    "head_dim": 256, "max_position_embeddings": 131072, "tie_word_embeddings": True,
                    "sliding_window": 4096},
    "phi3": {**_BASE, "vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192,
             "max_position_embeddings": 4096},
}
# SiglipVisionConfig defaults (the tower Gemma 3 uses) and Gemma3Config's own.
SIGLIP_DEFAULTS = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                       image_size=224, patch_size=16, num_channels=3)
QK_NORM_FAMILIES = {"qwen3", "qwen3_moe", "gemma3", "gemma3_text"}
FOUR_NORM_FAMILIES = {"gemma2", "gemma3", "gemma3_text"}  # pre/post attention and feed-forward norms


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
    entry = _catalog()[1].get(text.lower())
    if entry is not None:
        return _entry_spec(entry)
    path = Path(text).expanduser()
    if path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise BadInput(f"model: folder '{text}' holds no config.json.")
    if path.is_file():
        return from_hf_config(_read_json(path), name=_local_name(path), source=str(path.resolve()))
    if HUB_ID.match(text) and not text.endswith(".json"):
        return from_hf_config(fetch_hub_config(text), name=text, source=f"{_endpoint()}/{text}/blob/main/config.json")
    if text.endswith(".json") or os.sep in text:
        raise BadInput(f"model: no such file '{text}'.")
    raise BadInput(f"model: unknown model '{text}'; did you mean: {', '.join(close_names(text))}? Pass a "
                   "catalog name (`gpu-advisor models` lists them), a Hugging Face id or a path to a config.json.")


def _local_name(path: Path) -> str:
    return path.parent.name or str(path)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"model: cannot read '{path}' as JSON ({exc}).") from None
    if not isinstance(data, dict):
        raise BadInput(f"model: '{path}' is not a config.json object.")
    return data


def from_hf_config(cfg: dict[str, Any], *, name: str, source: str, aliases: list[str] | tuple = ()) -> ModelSpec:
    """Turn a config.json dict (any supported family) into a ModelSpec."""
    family = cfg.get("model_type")
    if family not in SUPPORTED_FAMILIES:
        raise BadInput(f"model_type: '{family}' in {source} is not supported; supported families: "
                       f"{', '.join(SUPPORTED_FAMILIES)}.")
    if family == "gemma3":
        text = dict(cfg.get("text_config") or {})
        text["model_type"] = "gemma3_text"
        fields = _text_fields(text)
        fields["tie_word_embeddings"] = bool(cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", True)))
        fields["vision"] = _vision_spec(cfg)
        dtype = cfg.get("torch_dtype") or cfg.get("dtype") or text.get("torch_dtype") or text.get("dtype")
    else:
        fields = _text_fields(cfg)
        dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    fields["family"] = family
    fields["qk_norm"] = family in QK_NORM_FAMILIES
    fields["norms_per_layer"] = 4 if family in FOUR_NORM_FAMILIES else 2
    if dtype:
        fields["torch_dtype"] = str(dtype)
    try:
        return ModelSpec(name=name, source=source, aliases=list(aliases), **fields)
    except ValueError as exc:  # pydantic: a config value of the wrong type
        raise BadInput(f"model: config from {source} is invalid: {str(exc).splitlines()[0]}") from None


def _text_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    family = cfg["model_type"]
    d = FAMILY_DEFAULTS[family]

    def get(key: str) -> Any:
        value = cfg.get(key, d.get(key))
        return d.get(key) if value is None and key not in ("num_key_value_heads", "head_dim") else value

    try:
        hidden, heads = int(get("hidden_size")), int(get("num_attention_heads"))
        out: dict[str, Any] = dict(
            vocab_size=int(get("vocab_size")),
            hidden_size=hidden,
            intermediate_size=int(get("intermediate_size")),
            num_hidden_layers=int(get("num_hidden_layers")),
            num_attention_heads=heads,
            num_key_value_heads=int(get("num_key_value_heads") or heads),
            head_dim=int(get("head_dim") or hidden // heads),
            max_position_embeddings=int(get("max_position_embeddings")),
            tie_word_embeddings=bool(get("tie_word_embeddings")),
        )
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise BadInput(f"model: config.json has a missing or non-numeric size ({exc}).") from None
    bad = [k for k, v in out.items() if k != "tie_word_embeddings" and v < 1]
    if bad:
        raise BadInput(f"model: config.json {bad[0]} must be a positive integer (got {out[bad[0]]}).")
    if heads % out["num_key_value_heads"]:
        raise BadInput(f"model: config.json num_key_value_heads ({out['num_key_value_heads']}) must divide "
                       f"num_attention_heads ({heads}).")
    # q/k/v biases: hard-wired on in Qwen2, a `qkv_bias` switch in Qwen2-MoE, `attention_bias` elsewhere.
    if family == "qwen2":
        out["attention_bias"] = True
    elif family == "qwen2_moe":
        out["attention_bias"] = bool(get("qkv_bias"))
    else:
        out["attention_bias"] = bool(get("attention_bias"))
    sliding = get("sliding_window")
    if "use_sliding_window" in d and not get("use_sliding_window"):
        sliding = None
    out["sliding_window"] = int(sliding) if sliding else None
    if family == "mixtral":
        out.update(num_experts=int(get("num_local_experts")), num_experts_per_tok=int(get("num_experts_per_tok")),
                   moe_intermediate_size=out["intermediate_size"])
    elif family in ("qwen2_moe", "qwen3_moe"):
        out.update(num_experts=int(get("num_experts")), num_experts_per_tok=int(get("num_experts_per_tok")),
                   moe_intermediate_size=int(get("moe_intermediate_size")),
                   decoder_sparse_step=int(get("decoder_sparse_step")),
                   mlp_only_layers=[int(i) for i in get("mlp_only_layers") or []])
        if family == "qwen2_moe":
            out["shared_expert_intermediate_size"] = int(get("shared_expert_intermediate_size"))
    return out


def _vision_spec(cfg: dict[str, Any]) -> VisionSpec:
    vision = cfg.get("vision_config") or {}
    values = {k: vision.get(k) if vision.get(k) is not None else v for k, v in SIGLIP_DEFAULTS.items()}
    return VisionSpec(**values, mm_tokens_per_image=int(cfg.get("mm_tokens_per_image") or 256))


def to_hf_config(spec: ModelSpec) -> dict[str, Any]:
    """The config.json dict transformers builds this architecture from (inverse of from_hf_config)."""
    family = spec.family
    text: dict[str, Any] = {
        "model_type": "gemma3_text" if family == "gemma3" else family,
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
    if family == "qwen2_moe":
        text["qkv_bias"] = spec.attention_bias
    elif family != "qwen2":
        text["attention_bias"] = spec.attention_bias
    if family in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        text["use_sliding_window"] = spec.sliding_window is not None
        if spec.sliding_window is not None:
            text["sliding_window"] = spec.sliding_window
    else:
        text["sliding_window"] = spec.sliding_window
    if family == "mixtral":
        text.update(num_local_experts=spec.num_experts, num_experts_per_tok=spec.num_experts_per_tok,
                    intermediate_size=spec.moe_intermediate_size or spec.intermediate_size)
    elif family in ("qwen2_moe", "qwen3_moe"):
        text.update(num_experts=spec.num_experts, num_experts_per_tok=spec.num_experts_per_tok,
                    moe_intermediate_size=spec.moe_intermediate_size, decoder_sparse_step=spec.decoder_sparse_step,
                    mlp_only_layers=list(spec.mlp_only_layers))
        if family == "qwen2_moe":
            text["shared_expert_intermediate_size"] = spec.shared_expert_intermediate_size
    if family != "gemma3":
        return {**text, "torch_dtype": spec.torch_dtype}
    v = spec.vision or VisionSpec(**SIGLIP_DEFAULTS)
    vision = {
        "model_type": "siglip_vision_model", "hidden_size": v.hidden_size, "intermediate_size": v.intermediate_size,
        "num_hidden_layers": v.num_hidden_layers, "num_attention_heads": v.num_attention_heads,
        "image_size": v.image_size, "patch_size": v.patch_size, "num_channels": v.num_channels,
        "vision_use_head": False,  # Gemma 3 uses the patch embeddings, not SigLIP's pooling head
    }
    tie = text.pop("tie_word_embeddings")
    return {"model_type": "gemma3", "text_config": text, "vision_config": vision,
            "mm_tokens_per_image": v.mm_tokens_per_image, "tie_word_embeddings": tie, "torch_dtype": spec.torch_dtype}


# ----------------------------------------------------------------------------- Hub fetch

def cache_dir() -> Path:
    """The user cache: $GPU_ADVISOR_CACHE_DIR, else $XDG_CACHE_HOME/gpu-advisor, else ~/.cache/gpu-advisor."""
    explicit = os.environ.get("GPU_ADVISOR_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "gpu-advisor"


def _truthy(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def fetch_hub_config(repo_id: str) -> dict[str, Any]:
    """config.json of a Hub repo: from the cache, else downloaded once (HF_TOKEN, HF_ENDPOINT) and cached."""
    cached = cache_dir() / "configs" / (repo_id.replace("/", "--") + ".json")
    if cached.is_file():
        return _read_json(cached)
    endpoint = _endpoint()
    try:
        if _truthy("HF_HUB_OFFLINE") or _truthy("TRANSFORMERS_OFFLINE"):
            raise _Offline("HF_HUB_OFFLINE is set")
        _check_reachable(endpoint)
        from huggingface_hub import hf_hub_download

        with tempfile.TemporaryDirectory() as tmp:
            path = hf_hub_download(repo_id, "config.json", cache_dir=tmp, etag_timeout=HUB_TIMEOUT_S,
                                   endpoint=endpoint, token=os.environ.get("HF_TOKEN") or None)
            raw = Path(path).read_bytes()
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("config.json is not a JSON object")
    except Exception as exc:  # noqa: BLE001 - every failure becomes the same actionable line
        raise BadInput(f"model: cannot get config.json for '{repo_id}' from the Hugging Face Hub "
                       f"({_hub_reason(exc)}); pass a local path to its config.json or a catalog name "
                       f"(`gpu-advisor models` lists them); did you mean: {', '.join(close_names(repo_id))}?") from None
    _write_atomic(cached, raw)
    return data


def _endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


class _Offline(ConnectionError):
    pass


def _check_reachable(endpoint: str) -> None:
    """Fail in seconds when offline, instead of huggingface_hub's ~25 s of retries with backoff."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")):
        return  # only the proxy knows whether the Hub is reachable
    url = urlsplit(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=5).close()
    except OSError as exc:
        raise _Offline(f"{endpoint} is unreachable: {exc.strerror or exc}; are you offline?") from None


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


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ----------------------------------------------------------------------------- --params mode

_COUNT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(e[+-]?\d+)?\s*([kmbt]?)\s*$", re.IGNORECASE)
_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def parse_param_count(text: str | int | float) -> int:
    """'7B', '1.5b', '350M', '4000M', '4e9' or 7000000000 -> a positive int parameter count."""
    match = _COUNT.match(str(text).replace("_", "").replace(",", ""))
    value = 0.0
    if match:
        number, exponent, suffix = match.groups()
        value = float(number + (exponent or "")) * _SUFFIX[suffix.lower()]
    if not match or not math.isfinite(value) or round(value) < 1:
        raise BadInput(f"--params: expected a positive parameter count such as 7B, 1.5b, 350M or 4e9 (got {text!r}).")
    return int(round(value))


def synthetic_spec(params: int) -> ModelSpec:
    """A Llama-shaped dense model of about `params` parameters (for --params when no config is known).

    A Llama layer with MHA and a 3.5h SwiGLU MLP holds 4h^2 + 3 * 3.5h^2 = 14.5h^2 weights, so
    P ~= 14.5 * L * h^2. Taking the width/depth ratio h/L ~= 115 (Llama-2: 4096/32 and 5120/40 = 128,
    8192/80 = 102) gives h = (115 P / 14.5)^(1/3). Memory and time use P itself (params_override).
    """
    if params < 1:
        raise BadInput(f"--params: expected a positive parameter count (got {params}).")
    hidden = max(128, 128 * round((115 * params / 14.5) ** (1 / 3) / 128))
    layers = max(1, round(params / (14.5 * hidden * hidden)))
    inter = max(128, 128 * round(3.5 * hidden / 128))
    heads = hidden // 128
    return ModelSpec(
        name=f"{human_count(params)}-param model", family="llama",
        source="--params (synthetic Llama-shaped architecture)",
        vocab_size=32000, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, head_dim=128, max_position_embeddings=4096,
        tie_word_embeddings=False, params_override=params,
    )


def human_count(n: int) -> str:
    """7_241_732_096 -> '7.24B' (three significant figures)."""
    for div, unit in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if n >= div:
            return f"{n / div:.3g}{unit}"
    return str(n)
