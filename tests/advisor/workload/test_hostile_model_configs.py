"""Hostile config.json values: strictly typed, one line with exit 2.

A string where a switch or a count goes ("false", "4096", "8") is not read the way Python's bool/int
would read it: it is refused with the key named. 0, false or -0.0 heads are not "derived" (only null
is, as in transformers' config classes). NaN, 1e309, [4096], {} or a text_config that is a list end
in one line, never "internal error". The estimator's memo caches stay bounded in a long-lived process.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from helpers.cli_run import gpu_advisor, one_line_error

from advisor.model.catalog import _catalog


def _config(model_type: str, has: str | None = None) -> dict:
    """A catalog model's config.json (as on the Hub) of that model_type."""
    return copy.deepcopy(next(e["config"] for e in _catalog()[0] if e["config"].get("model_type") == model_type
                              and (has is None or e["config"].get(has))))


LLAMA, MIXTRAL, GEMMA3 = _config("llama"), _config("mixtral"), _config("gemma3")
MISTRAL = _config("mistral", has="sliding_window")
NAN, INF = float("nan"), float("inf")

# (base config, the change, the key the one line names)
REFUSED = {
    'tie_word_embeddings "false"': (LLAMA, {"tie_word_embeddings": "false"}, "tie_word_embeddings"),
    "tie_word_embeddings 0": (LLAMA, {"tie_word_embeddings": 0}, "tie_word_embeddings"),
    "num_key_value_heads 0": (LLAMA, {"num_key_value_heads": 0}, "num_key_value_heads"),
    "num_key_value_heads false": (LLAMA, {"num_key_value_heads": False}, "num_key_value_heads"),
    "num_key_value_heads -0.0": (LLAMA, {"num_key_value_heads": -0.0}, "num_key_value_heads"),
    'num_key_value_heads "8"': (LLAMA, {"num_key_value_heads": "8"}, "num_key_value_heads"),
    "head_dim false": (LLAMA, {"head_dim": False}, "head_dim"),
    "head_dim 0": (LLAMA, {"head_dim": 0}, "head_dim"),
    'attention_bias "false"': (LLAMA, {"attention_bias": "false"}, "attention_bias"),
    'sliding_window "4096"': (MISTRAL, {"sliding_window": "4096"}, "sliding_window"),
    "sliding_window 4096.5": (MISTRAL, {"sliding_window": 4096.5}, "sliding_window"),
    "sliding_window true": (MISTRAL, {"sliding_window": True}, "sliding_window"),
    'sliding_window "abc"': (MISTRAL, {"sliding_window": "abc"}, "sliding_window"),
    "sliding_window NaN": (MISTRAL, {"sliding_window": NAN}, "sliding_window"),
    "sliding_window 1e309": (MISTRAL, {"sliding_window": INF}, "sliding_window"),
    "sliding_window [4096]": (MISTRAL, {"sliding_window": [4096]}, "sliding_window"),
    "sliding_window {}": (MISTRAL, {"sliding_window": {}}, "sliding_window"),
    'sliding_window "abc", switched off': (_config("qwen2"), {"sliding_window": "abc", "use_sliding_window": False},
                                           "sliding_window"),
    'use_sliding_window "false"': (_config("qwen2"), {"use_sliding_window": "false"}, "use_sliding_window"),
    "num_experts_per_tok 0": (MIXTRAL, {"num_experts_per_tok": 0}, "num_experts_per_tok"),
    "num_experts_per_tok true": (MIXTRAL, {"num_experts_per_tok": True}, "num_experts_per_tok"),
    "num_experts_per_tok 1.5": (MIXTRAL, {"num_experts_per_tok": 1.5}, "num_experts_per_tok"),
    'num_experts_per_tok "8"': (MIXTRAL, {"num_experts_per_tok": "8"}, "num_experts_per_tok"),
    "num_local_experts NaN": (MIXTRAL, {"num_local_experts": NAN}, "num_local_experts"),
    'mm_tokens_per_image "256"': (GEMMA3, {"mm_tokens_per_image": "256"}, "mm_tokens_per_image"),
    "mm_tokens_per_image 2.5": (GEMMA3, {"mm_tokens_per_image": 2.5}, "mm_tokens_per_image"),
    "text_config [1]": (GEMMA3, {"text_config": [1]}, "text_config"),
    'text_config "x"': (GEMMA3, {"text_config": "x"}, "text_config"),
    "vision_config [1]": (GEMMA3, {"vision_config": [1]}, "vision_config"),
    'vision_config.patch_size "14"': (GEMMA3, {"vision_config": {"patch_size": "14"}}, "patch_size"),
    "hidden_size NaN": (LLAMA, {"hidden_size": NAN}, "hidden_size"),
    "vocab_size 1e309": (LLAMA, {"vocab_size": INF}, "vocab_size"),
    "torch_dtype [1]": (LLAMA, {"torch_dtype": [1]}, "torch_dtype"),
}


def _write(tmp_path: Path, cfg: dict) -> Path:
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(cfg), encoding="utf-8")  # NaN / Infinity as Python's json writes them
    return path


def _estimate(capsys, path: Path, *args) -> tuple[int, str, str]:
    return gpu_advisor(capsys, "estimate", path, "--format", "json", *args)


@pytest.mark.parametrize("case", REFUSED)
def test_mistyped_config_value_is_one_line_exit_2_naming_the_key(tmp_path, capsys, case):
    base, change, key = REFUSED[case]
    cfg = {**copy.deepcopy(base), **change}
    if "vision_config" in change and isinstance(change["vision_config"], dict):
        cfg["vision_config"] = {**base["vision_config"], **change["vision_config"]}
    code, out, err = _estimate(capsys, _write(tmp_path, cfg))
    line = one_line_error(code, err)
    assert key in line and "internal error" not in line and out == ""


def _params(capsys, tmp_path, cfg) -> int:
    code, out, err = _estimate(capsys, _write(tmp_path, cfg))
    assert code == 0, err
    return json.loads(out)["model"]["params_total"]


def test_tied_embeddings_as_a_real_bool_change_the_count_by_one_embedding(tmp_path, capsys):
    untied = _params(capsys, tmp_path, {**LLAMA, "tie_word_embeddings": False})
    tied = _params(capsys, tmp_path, {**LLAMA, "tie_word_embeddings": True})
    assert untied - tied == LLAMA["vocab_size"] * LLAMA["hidden_size"]  # the lm_head matrix, shared when tied


def test_null_kv_heads_is_multi_head_attention_as_in_transformers(tmp_path, capsys):
    """LlamaConfig: num_key_value_heads=None -> num_attention_heads (k and v as wide as q)."""
    gqa = _params(capsys, tmp_path, LLAMA)
    mha = _params(capsys, tmp_path, {**LLAMA, "num_key_value_heads": None})
    h, heads, kv, layers = (LLAMA[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                               "num_hidden_layers"))
    head_dim = LLAMA.get("head_dim") or h // heads
    assert mha - gqa == layers * 2 * h * head_dim * (heads - kv)


def test_integral_float_sizes_from_older_exporters_still_load(tmp_path, capsys):
    as_floats = {**LLAMA, **{k: float(LLAMA[k]) for k in ("hidden_size", "num_key_value_heads", "vocab_size")}}
    assert _params(capsys, tmp_path, as_floats) == _params(capsys, tmp_path, LLAMA)


def test_zero_sliding_window_means_no_window_as_null_does(tmp_path, capsys):
    """transformers' masks skip a falsy sliding_window: 0 and null give the same estimate."""
    args = ("--seq-len", "16384", "--attention", "eager")
    estimates = []
    for window in (None, 0, 4096):
        code, out, err = _estimate(capsys, _write(tmp_path, {**MISTRAL, "sliding_window": window}), *args)
        assert code == 0, err
        estimates.append(json.loads(out)["device_total"])
    assert estimates[0] == estimates[1]


def test_every_catalog_model_still_loads():
    from advisor.model.catalog import catalog

    assert len(catalog()) == len(_catalog()[0])


# ----------------------------------------------------------------------------- bounded memo caches


def test_a_long_lived_process_keeps_a_bounded_number_of_estimates(monkeypatch):
    """N distinct estimates on one engine keep at most the bound in every memo, and an evicted answer
    computed again is the same answer."""
    import advisor.memo
    from advisor.estimate.engine import Engine
    from advisor.model.catalog import load_model
    from advisor.stacks import Shape, Stack

    monkeypatch.setattr(advisor.memo, "MEMO_ENTRIES", 64)
    engine = Engine(load_model("llama-3.1-8b"))
    stacks = [Stack(method="lora", lora_rank=r) for r in (8, 16)]
    first = engine.memory(stacks[0], Shape(seq_len=128)).device_total
    for i in range(300):  # 300 distinct (stack, seq_len) estimates
        engine.memory(stacks[i % 2], Shape(seq_len=129 + i))
        engine.micro_batch_slope(stacks[i % 2], 129 + i)
    memos = {"engine._memory": engine._memory, "engine._slopes": engine._slopes, "engine._checked": engine._checked,
             "arch._memo": engine.arch._memo, "components": engine.arch._memo.get("components", {})}
    assert {name: len(m) <= 64 for name, m in memos.items()} == dict.fromkeys(memos, True)
    assert len(engine._memory) == 64 and (stacks[0].key, 1, 128, None, False) not in engine._memory  # evicted
    assert engine.memory(stacks[0], Shape(seq_len=128)).device_total == first  # recomputed, same bytes
    assert engine.memory(stacks[0], Shape(seq_len=128)) == Engine(load_model("llama-3.1-8b")).memory(
        stacks[0], Shape(seq_len=128))
