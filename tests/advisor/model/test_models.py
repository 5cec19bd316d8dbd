"""Model specs: the built-in catalog, local config.json files, Hub fetches and --params mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from advisor.errors import BadInput
from advisor.model.catalog import (
    FAMILY_DEFAULTS,
    SIGLIP_DEFAULTS,
    catalog,
    catalog_names,
    from_hf_config,
    load_model,
    parse_param_count,
    synthetic_spec,
    to_hf_config,
)
from advisor.model.spec import SUPPORTED_FAMILIES, ModelSpec

REPO = Path(__file__).resolve().parents[3]

# Every model the catalog promises, by Hugging Face id.
REQUIRED_IDS = """
meta-llama/Llama-3.1-8B meta-llama/Llama-3.1-70B meta-llama/Llama-3.1-405B meta-llama/Llama-3.2-1B
meta-llama/Llama-3.2-3B meta-llama/Llama-3.3-70B-Instruct Qwen/Qwen2.5-0.5B Qwen/Qwen2.5-1.5B Qwen/Qwen2.5-3B
Qwen/Qwen2.5-7B Qwen/Qwen2.5-14B Qwen/Qwen2.5-32B Qwen/Qwen2.5-72B Qwen/Qwen3-0.6B Qwen/Qwen3-1.7B Qwen/Qwen3-4B
Qwen/Qwen3-8B Qwen/Qwen3-14B Qwen/Qwen3-32B Qwen/Qwen3-30B-A3B Qwen/Qwen3-235B-A22B Qwen/Qwen1.5-MoE-A2.7B
google/gemma-2-2b google/gemma-2-9b google/gemma-2-27b google/gemma-3-1b-pt google/gemma-3-4b-pt
google/gemma-3-12b-pt google/gemma-3-27b-pt google/medgemma-4b-it google/medgemma-27b-text-it google/gemma-7b
mistralai/Mistral-7B-v0.3 mistralai/Mistral-Nemo-Base-2407 mistralai/Mistral-Small-24B-Base-2501
mistralai/Mixtral-8x7B-v0.1 mistralai/Mixtral-8x22B-v0.1 microsoft/Phi-3-mini-4k-instruct
microsoft/Phi-3.5-mini-instruct microsoft/Phi-3-medium-4k-instruct microsoft/phi-4 HuggingFaceTB/SmolLM2-135M
HuggingFaceTB/SmolLM2-360M HuggingFaceTB/SmolLM2-1.7B deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B
deepseek-ai/DeepSeek-R1-Distill-Qwen-7B deepseek-ai/DeepSeek-R1-Distill-Qwen-14B
deepseek-ai/DeepSeek-R1-Distill-Qwen-32B deepseek-ai/DeepSeek-R1-Distill-Llama-8B
deepseek-ai/DeepSeek-R1-Distill-Llama-70B meta-llama/Llama-2-7b-hf meta-llama/Llama-2-13b-hf
""".split()

LLAMA_TINY = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 128, "intermediate_size": 256,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 1024, "torch_dtype": "bfloat16"}


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Each test gets its own user cache; nothing reads or writes ~/.cache."""
    monkeypatch.setenv("GPU_ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT", "HF_TOKEN"):
        monkeypatch.delenv(var, raising=False)


# ----------------------------------------------------------------------------- catalog

def test_catalog_has_at_least_35_models_covering_every_family():
    specs = catalog()
    assert len(specs) >= 35
    assert {s.family for s in specs} == set(SUPPORTED_FAMILIES)
    lowered = [n.lower() for n in catalog_names()]
    assert len(lowered) == len(set(lowered)), "an id or alias points at two models"


def test_catalog_holds_every_model_the_issue_lists():
    ids = {s.name for s in catalog()}
    assert [i for i in REQUIRED_IDS if i not in ids] == []


@pytest.mark.parametrize("spec", catalog(), ids=lambda s: s.name)
def test_every_catalog_model_loads_by_id_any_case_and_by_alias(spec):
    assert spec.source == f"https://huggingface.co/{spec.name}/blob/main/config.json"
    assert spec.aliases and spec.aliases[0] == spec.aliases[0].lower() and "/" not in spec.aliases[0]
    for ref in (spec.name, spec.name.upper(), spec.name.lower(), *spec.aliases, spec.aliases[0].upper()):
        assert load_model(ref) == spec
    # Sane shapes: grouped-query heads divide the query heads, MoE fields only on MoE families.
    assert spec.num_attention_heads % spec.num_key_value_heads == 0
    assert spec.is_moe == (spec.family in ("mixtral", "qwen2_moe", "qwen3_moe"))
    assert (spec.vision is not None) == (spec.family == "gemma3")
    assert ModelSpec.model_validate(spec.model_dump()) == spec


def test_llama_3_1_8b_matches_its_config_json():
    s = load_model("meta-llama/Llama-3.1-8B")
    assert (s.vocab_size, s.hidden_size, s.intermediate_size, s.num_hidden_layers) == (128256, 4096, 14336, 32)
    assert (s.num_attention_heads, s.num_key_value_heads, s.head_dim) == (32, 8, 128)
    assert s.max_position_embeddings == 131072 and not s.tie_word_embeddings and s.family == "llama"


def test_family_traits_follow_the_architecture():
    assert load_model("qwen2.5-7b").attention_bias  # Qwen2 always has q/k/v biases
    assert load_model("qwen3-8b").qk_norm and load_model("qwen3-8b").head_dim == 128
    g3 = load_model("gemma-3-27b")
    assert g3.qk_norm and g3.norms_per_layer == 4 and g3.tie_word_embeddings and g3.head_dim == 128
    assert load_model("gemma-3-4b").head_dim == 256
    assert g3.vision is not None and g3.vision.hidden_size == 1152 and g3.vision.patch_size == 14
    assert load_model("medgemma-27b").vision is None  # the text-only MedGemma
    assert load_model("gemma-2-9b").norms_per_layer == 4 and not load_model("gemma-2-9b").qk_norm
    for tied in ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "llama-3.2-1b", "llama-3.2-3b", "qwen3-4b"):
        assert load_model(tied).tie_word_embeddings, tied
    mixtral = load_model("mixtral-8x7b")
    assert (mixtral.num_experts, mixtral.num_experts_per_tok, mixtral.moe_intermediate_size) == (8, 2, 14336)
    moe = load_model("qwen3-30b-a3b")
    assert (moe.num_experts, moe.num_experts_per_tok, moe.moe_intermediate_size) == (128, 8, 768)
    assert load_model("qwen1.5-moe-a2.7b").shared_expert_intermediate_size == 5632


def test_instruct_variant_ids_resolve_to_the_same_architecture():
    assert load_model("meta-llama/Llama-3.1-8B-Instruct").name == "meta-llama/Llama-3.1-8B"


@pytest.mark.parametrize("spec", catalog(), ids=lambda s: s.name)
def test_catalog_entry_survives_a_round_trip_through_config_json(spec):
    back = from_hf_config(to_hf_config(spec), name=spec.name, source=spec.source, aliases=spec.aliases)
    assert back == spec


def test_catalog_is_read_once_without_heavy_imports():
    """Start-up cost is a structure, not a stopwatch: one JSON read, no pandas/torch on the path."""
    code = ("import sys, advisor.model.catalog as m; m.load_model('llama-3.1-8b'); m.catalog(); m.load_model('qwen3-8b'); "
            "m.catalog_names(); print(m._catalog.cache_info().misses); print(sorted(sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    misses, modules = out.splitlines()
    assert misses == "1"
    for heavy in ("pandas", "torch", "transformers", "huggingface_hub", "requests"):
        assert f"'{heavy}'" not in modules, heavy


# ----------------------------------------------------------------------------- unknown names

def test_unknown_name_suggests_close_catalog_names():
    with pytest.raises(BadInput) as err:
        load_model("llama-3.1-8")
    msg = str(err.value)
    assert "did you mean" in msg and "llama-3.1-8b" in msg and "\n" not in msg


def test_missing_local_file_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        load_model(str(tmp_path / "nope" / "config.json"))


# ----------------------------------------------------------------------------- local config.json

def write_config(folder: Path, cfg: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_local_config_file_and_folder_load_the_same_spec(tmp_path):
    path = write_config(tmp_path / "my-llama", LLAMA_TINY)
    by_file, by_folder = load_model(str(path)), load_model(str(path.parent))
    assert by_file == by_folder
    assert by_file.name == "my-llama" and by_file.source == str(path.resolve())
    assert (by_file.num_key_value_heads, by_file.head_dim, by_file.max_position_embeddings) == (2, 32, 1024)


def test_local_gemma3_multimodal_config_reads_text_and_vision_parts(tmp_path):
    cfg = {"model_type": "gemma3", "torch_dtype": "bfloat16", "mm_tokens_per_image": 64,
           "text_config": {"model_type": "gemma3_text", "hidden_size": 640, "intermediate_size": 2048,
                           "num_hidden_layers": 4, "sliding_window": 512},
           "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 256, "intermediate_size": 512,
                             "num_hidden_layers": 3, "num_attention_heads": 4, "image_size": 224,
                             "patch_size": 14, "vision_use_head": False}}
    spec = load_model(str(write_config(tmp_path / "g3", cfg)))
    assert spec.family == "gemma3" and spec.hidden_size == 640 and spec.num_hidden_layers == 4
    # Absent text keys take Gemma3TextConfig's defaults.
    assert (spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim, spec.vocab_size) == (8, 4, 256, 262208)
    assert spec.qk_norm and spec.norms_per_layer == 4 and spec.tie_word_embeddings and spec.sliding_window == 512
    assert spec.vision.model_dump() == dict(hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                                            num_attention_heads=4, image_size=224, patch_size=14, num_channels=3,
                                            mm_tokens_per_image=64)


def test_local_qwen3_moe_config_reads_expert_fields(tmp_path):
    cfg = {"model_type": "qwen3_moe", "hidden_size": 512, "num_hidden_layers": 6, "num_attention_heads": 8,
           "num_key_value_heads": 2, "head_dim": 64, "num_experts": 16, "num_experts_per_tok": 4,
           "moe_intermediate_size": 128, "decoder_sparse_step": 2, "mlp_only_layers": [0]}
    spec = load_model(str(write_config(tmp_path / "moe", cfg)))
    assert (spec.num_experts, spec.num_experts_per_tok, spec.moe_intermediate_size) == (16, 4, 128)
    assert spec.qk_norm and spec.is_moe
    assert [spec.is_moe_layer(i) for i in range(6)] == [False, True, False, True, False, True]


def test_unsupported_model_type_lists_supported_families(tmp_path):
    path = write_config(tmp_path / "falcon", {"model_type": "falcon", "hidden_size": 64})
    with pytest.raises(BadInput) as err:
        load_model(str(path))
    assert "falcon" in str(err.value) and "qwen3_moe" in str(err.value) and "gemma3_text" in str(err.value)


def test_broken_config_json_is_bad_input(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(BadInput, match="cannot read"):
        load_model(str(path))
    for bad, field in (({"hidden_size": "big"}, "hidden_size must be a whole number"), ({"num_hidden_layers": 0}, "num_hidden_layers"),
                       ({"num_attention_heads": 6, "num_key_value_heads": 4}, "num_key_value_heads")):
        path.write_text(json.dumps({**LLAMA_TINY, **bad}))
        with pytest.raises(BadInput, match=field):
            load_model(str(path))


@pytest.mark.parametrize("family", [f for f in SUPPORTED_FAMILIES if f != "gemma3"])
def test_absent_config_keys_take_transformers_defaults(family):
    transformers = pytest.importorskip("transformers")
    for cfg in ({"model_type": family},
                {"model_type": family, "hidden_size": 2048, "num_attention_heads": 64}):
        ours = from_hf_config(cfg, name="t", source="t")
        theirs = transformers.AutoConfig.for_model(**cfg)
        for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                    "num_key_value_heads", "max_position_embeddings", "tie_word_embeddings"):
            assert getattr(ours, key) == getattr(theirs, key), (family, key)
        # transformers' attention modules fall back to hidden // heads where the config has no head_dim
        head_dim = getattr(theirs, "head_dim", None) or theirs.hidden_size // theirs.num_attention_heads
        assert ours.head_dim == head_dim, family
        sliding = getattr(theirs, "sliding_window", None) or None
        assert ours.sliding_window == sliding, family
        for key in ("num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size"):
            if hasattr(theirs, key):
                assert getattr(ours, key) == getattr(theirs, key), (family, key)
    assert set(FAMILY_DEFAULTS) == set(SUPPORTED_FAMILIES) - {"gemma3"}


def test_absent_gemma3_vision_keys_take_siglip_defaults():
    transformers = pytest.importorskip("transformers")
    vision = transformers.SiglipVisionConfig()
    assert {k: getattr(vision, k) for k in SIGLIP_DEFAULTS} == SIGLIP_DEFAULTS


# ----------------------------------------------------------------------------- Hub fetch

@pytest.fixture
def hub(httpserver, monkeypatch):
    """A local stand-in for huggingface.co: HEAD and GET /{repo}/resolve/main/config.json."""
    monkeypatch.setenv("HF_ENDPOINT", httpserver.url_for("").rstrip("/"))

    def serve(repo_id: str, cfg: dict) -> None:
        headers = {"ETag": '"0123abcd"', "X-Repo-Commit": "a" * 40}
        httpserver.expect_request(f"/{repo_id}/resolve/main/config.json").respond_with_data(
            json.dumps(cfg), headers=headers, content_type="application/json")

    return serve


def config_requests(httpserver) -> list[str]:
    return [f"{req.method} {req.path}" for req, _ in httpserver.log if req.path.endswith("config.json")]


def test_hub_id_not_in_catalog_is_fetched_once_then_served_from_cache(hub, httpserver, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    hub("acme/tiny-llama", LLAMA_TINY)
    spec = load_model("acme/tiny-llama")
    assert spec.name == "acme/tiny-llama" and spec.hidden_size == 128 and spec.num_key_value_heads == 2
    assert "GET /acme/tiny-llama/resolve/main/config.json" in config_requests(httpserver)
    assert any(req.headers.get("Authorization") == "Bearer hf_test_token" for req, _ in httpserver.log)
    cached = tmp_path / "cache" / "configs" / "acme--tiny-llama.json"
    assert json.loads(cached.read_text()) == LLAMA_TINY
    assert not list(cached.parent.glob("*.tmp"))
    # Second load: no network at all (the endpoint now points at a port nothing listens on;
    # the shared test server itself stays up for the tests that follow).
    httpserver.clear_log()
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    again = load_model("acme/tiny-llama")
    assert again.model_dump(exclude={"source"}) == spec.model_dump(exclude={"source"})
    assert "acme/tiny-llama" in again.source
    assert httpserver.log == []


def test_hub_repo_without_config_is_bad_input_naming_the_repo(hub, httpserver):
    # The server answers 404 for everything not registered.
    httpserver.expect_request("/acme/missing/resolve/main/config.json").respond_with_data("nope", status=404)
    with pytest.raises(BadInput) as err:
        load_model("acme/missing")
    assert "acme/missing" in str(err.value) and "local path" in str(err.value) and "\n" not in str(err.value)


def test_hub_fetch_offline_fails_fast_with_one_clear_line(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    start = time.perf_counter()
    with pytest.raises(BadInput) as err:
        load_model("meta-llama/Llama-3.1-8b-typo")
    assert time.perf_counter() - start < 60  # a ceiling for an endless retry loop, not a speed test
    msg = str(err.value)
    assert "\n" not in msg and "unreachable" in msg and "local path" in msg and "catalog name" in msg
    assert "meta-llama/Llama-3.1-8B" in msg  # did you mean


def test_hf_hub_offline_is_respected_without_touching_the_network(monkeypatch, httpserver):
    monkeypatch.setenv("HF_ENDPOINT", httpserver.url_for("").rstrip("/"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BadInput, match="HF_HUB_OFFLINE"):
        load_model("acme/anything")
    assert httpserver.log == []


# ----------------------------------------------------------------------------- --params mode

@pytest.mark.parametrize("text, expected", [
    ("4B", 4_000_000_000), ("4e9", 4_000_000_000), ("4000M", 4_000_000_000), ("1.5b", 1_500_000_000),
    ("350M", 350_000_000), ("7_000_000_000", 7_000_000_000), (" 70b ", 70_000_000_000), ("0.5T", 500_000_000_000),
])
def test_param_counts_parse_in_every_usual_spelling(text, expected):
    assert parse_param_count(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "0", "0B", "-7B", "7X", "1e999", "nan", "7 B B", "B"])
def test_junk_param_counts_are_bad_input(text):
    with pytest.raises(BadInput, match="--params"):
        parse_param_count(text)


@pytest.mark.parametrize("params", [10**8, 10**9, 7 * 10**9, 70 * 10**9])
def test_synthetic_spec_is_llama_shaped_and_near_the_requested_size(params):
    spec = synthetic_spec(params)
    assert spec.params_override == params and spec.family == "llama"
    assert spec.source == "--params (synthetic Llama-shaped architecture)"
    h, L = spec.hidden_size, spec.num_hidden_layers
    assert h % 128 == 0 and spec.intermediate_size % 128 == 0 and spec.num_attention_heads * 128 == h
    assert spec.num_key_value_heads == spec.num_attention_heads and not spec.tie_word_embeddings
    # The shape is plausible (its transformer blocks hold about P); params_override gives the exact count.
    blocks = L * (4 * h * h + 3 * h * spec.intermediate_size)
    assert abs(blocks - params) / params < 0.25


def test_synthetic_7b_has_the_shape_of_a_7b_llama():
    spec = synthetic_spec(parse_param_count("7B"))
    assert (spec.hidden_size, spec.num_hidden_layers, spec.intermediate_size) == (3840, 33, 13440)


# ----------------------------------------------------------------------------- CLI

def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, cwd=REPO, timeout=120)


def test_models_command_lists_the_catalog_with_parameter_counts():
    out = run_cli("models", "--format", "json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert len(rows) == len(catalog())
    llama = next(r for r in rows if r["name"] == "meta-llama/Llama-3.1-8B")
    assert "llama-3.1-8b" in llama["aliases"] and llama["family"] == "llama"
    if "params" in llama:  # present once advisor/model/architecture.py exists
        assert 8.0e9 < llama["params"] < 8.1e9
    table = run_cli("models", "--family", "gemma3")
    assert table.returncode == 0 and "medgemma-4b" in table.stdout and "llama" not in table.stdout


def test_models_command_rejects_an_unknown_family():
    out = run_cli("models", "--family", "falcon")
    assert out.returncode == 2 and "falcon" in out.stderr


def test_estimate_with_unknown_model_exits_2_with_did_you_mean():
    out = run_cli("estimate", "not-a-model")
    assert out.returncode == 2, out.stderr
    assert "did you mean:" in out.stderr and "catalog name" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
