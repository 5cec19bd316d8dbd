"""Our parameter counts agree with transformers' own models, for every family and catalog entry.

transformers builds each architecture on the meta device (no memory, no weights), and
`sum(p.numel() for p in model.parameters())` counts tied embeddings once. A wrong count here
means every memory and time estimate for that model is wrong.
"""

from __future__ import annotations

import warnings

import pytest
import torch  # the test extra installs torch and transformers: missing is a failure
import transformers

from advisor.model import architecture
from advisor.model.catalog import catalog, from_hf_config, to_hf_config

TOLERANCE = 0.001  # 0.1 %

# Small made-up configs, one or more per supported family, in config.json form.
_SMALL = dict(vocab_size=1000, hidden_size=128, intermediate_size=352, num_hidden_layers=3,
              num_attention_heads=4, max_position_embeddings=512)
SMALL_CONFIGS = {
    "llama": {"model_type": "llama", **_SMALL, "num_key_value_heads": 2},
    "llama-tied-headdim": {"model_type": "llama", **_SMALL, "num_key_value_heads": 1, "head_dim": 48,
                           "tie_word_embeddings": True},
    "mistral": {"model_type": "mistral", **_SMALL, "num_key_value_heads": 2, "sliding_window": 64},
    "mistral-nemo-like": {"model_type": "mistral", **_SMALL, "num_key_value_heads": 2, "head_dim": 64},
    "mixtral": {"model_type": "mixtral", **_SMALL, "num_key_value_heads": 2, "num_local_experts": 4,
                "num_experts_per_tok": 2},
    "qwen2": {"model_type": "qwen2", **_SMALL, "num_key_value_heads": 2, "tie_word_embeddings": True},
    "qwen2_moe": {"model_type": "qwen2_moe", **_SMALL, "num_key_value_heads": 4, "num_experts": 6,
                  "num_experts_per_tok": 2, "moe_intermediate_size": 64, "shared_expert_intermediate_size": 96,
                  "decoder_sparse_step": 1, "mlp_only_layers": [1]},
    "qwen2_moe-sparse-step": {"model_type": "qwen2_moe", **_SMALL, "num_hidden_layers": 4, "num_key_value_heads": 2,
                              "num_experts": 4, "num_experts_per_tok": 1, "moe_intermediate_size": 64,
                              "shared_expert_intermediate_size": 64, "decoder_sparse_step": 2},
    "qwen3": {"model_type": "qwen3", **_SMALL, "num_key_value_heads": 2, "head_dim": 64, "tie_word_embeddings": True},
    "qwen3_moe": {"model_type": "qwen3_moe", **_SMALL, "num_key_value_heads": 2, "head_dim": 64, "num_experts": 8,
                  "num_experts_per_tok": 2, "moe_intermediate_size": 48, "mlp_only_layers": [0]},
    "gemma": {"model_type": "gemma", **_SMALL, "num_key_value_heads": 1, "head_dim": 64},
    "gemma2": {"model_type": "gemma2", **_SMALL, "num_key_value_heads": 2, "head_dim": 64, "sliding_window": 32},
    "gemma3_text": {"model_type": "gemma3_text", **_SMALL, "num_key_value_heads": 2, "head_dim": 64,
                    "sliding_window": 32},
    "gemma3": {"model_type": "gemma3", "mm_tokens_per_image": 16,
               "text_config": {"model_type": "gemma3_text", **_SMALL, "num_key_value_heads": 2, "head_dim": 64},
               "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 96, "intermediate_size": 160,
                                 "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 64,
                                 "patch_size": 16, "vision_use_head": False}},
    # Phi3Config pads with token 32000, so the vocabulary must be larger than that.
    "phi3": {"model_type": "phi3", **_SMALL, "vocab_size": 32064, "num_key_value_heads": 2},
}


def transformers_counts(cfg: dict) -> tuple[int, int]:
    """(total, active-per-token) parameters of the transformers model built from a config.json dict.

    Active: each MoE layer's fused expert tensors (first dim = experts) count k/E of their size.
    """
    cfg = dict(cfg)
    model_type = cfg.pop("model_type")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.for_model(model_type, **cfg)
        with torch.device("meta"):
            if model_type == "gemma3":
                model = transformers.Gemma3ForConditionalGeneration(config)
            else:
                model = transformers.AutoModelForCausalLM.from_config(config)
    text = config.get_text_config()
    experts = getattr(text, "num_local_experts", None) or getattr(text, "num_experts", 0)
    total, active = 0, 0.0
    for name, p in model.named_parameters():
        total += p.numel()
        if ".mlp.experts." in name:
            assert p.shape[0] == experts, name
            active += p.numel() * text.num_experts_per_tok / experts
        else:
            active += p.numel()
    return total, round(active)


def assert_close(ours: int, theirs: int, what: str) -> None:
    assert abs(ours - theirs) <= TOLERANCE * theirs, f"{what}: ours {ours:,} vs transformers {theirs:,}"


def check(cfg: dict, label: str) -> None:
    spec = from_hf_config(cfg, name=label, source="test")
    arch = architecture.build(spec)
    total, active = transformers_counts(to_hf_config(spec))
    assert_close(arch.params_total, total, f"{label} params_total")
    assert_close(arch.params_active, active, f"{label} params_active")


@pytest.mark.parametrize("label", list(SMALL_CONFIGS))
def test_small_config_param_count_matches_transformers(label):
    cfg = SMALL_CONFIGS[label]
    # The test config itself (not only our round trip of it) must give transformers' count.
    assert transformers_counts(cfg) == transformers_counts(to_hf_config(from_hf_config(cfg, name=label, source="t")))
    check(cfg, label)


def test_every_supported_family_has_a_small_config():
    from advisor.model.spec import SUPPORTED_FAMILIES

    assert {c["model_type"] for c in SMALL_CONFIGS.values()} == set(SUPPORTED_FAMILIES)


@pytest.mark.slow
@pytest.mark.parametrize("spec", catalog(), ids=lambda s: s.name)
def test_catalog_model_param_count_matches_transformers(spec):
    arch = architecture.build(spec)
    total, active = transformers_counts(to_hf_config(spec))
    assert_close(arch.params_total, total, f"{spec.name} params_total")
    assert_close(arch.params_active, active, f"{spec.name} params_active")
