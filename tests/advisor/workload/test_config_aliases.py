"""Configs read the same whichever way they were written, and families.json says what
transformers 5.24 / peft 0.21.2 say.

For every supported family a small random config is built with transformers' own config class
and written three ways: as the Hub spells it (the catalog's key names), as transformers 5's
`save_pretrained` writes it (e.g. Qwen3-MoE's `num_experts` becomes `num_local_experts`), and
with every attribute_map pair under its other spelling. The estimator reads each file with
`load_model(path)`; transformers reads the same file with `AutoConfig.from_pretrained` and
builds the model on the meta device. The parameter counts must be equal.
"""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import pytest
import torch  # the test extra installs torch and transformers: missing is a failure
import transformers

from advisor.model import architecture, families
from advisor.model.catalog import load_model
from advisor.model.spec import SUPPORTED_FAMILIES

SEEDS = (0, 1, 2)
STYLES = ("hub", "save_pretrained", "swapped_aliases")


# ----------------------------------------------------------------------------- random configs

def _text_config(model_type: str, rng: random.Random) -> dict:
    """A small random config.json (Hub key names) for a flat text model_type."""
    heads = rng.choice([2, 4, 8])
    cfg = {
        "model_type": model_type,
        "vocab_size": rng.choice([512, 1000, 1536]),
        "hidden_size": rng.choice([64, 96, 128]),
        "intermediate_size": rng.choice([96, 160, 352]),
        "num_hidden_layers": rng.randint(1, 4),
        "num_attention_heads": heads,
        "num_key_value_heads": rng.choice([k for k in (1, 2, 4, 8) if heads % k == 0]),
        "max_position_embeddings": 512,
        "tie_word_embeddings": rng.random() < 0.5,
        "torch_dtype": "bfloat16",
    }
    if model_type not in ("mixtral", "phi3", "qwen2", "qwen2_moe"):  # these classes take no head_dim
        cfg["head_dim"] = rng.choice([16, 32, 48])
    if model_type in ("llama", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text"):
        cfg["attention_bias"] = rng.random() < 0.5  # q/k/v and o_proj biases
    if model_type in ("mistral", "mixtral", "phi3"):
        cfg["sliding_window"] = rng.choice([None, 64])
    if model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        cfg["use_sliding_window"] = rng.random() < 0.5
        cfg["sliding_window"] = 64
    if model_type == "phi3":
        cfg["vocab_size"] = 32064 + rng.choice([0, 64])  # Phi3Config pads with token 32000
    if model_type == "mixtral":
        cfg.update(num_local_experts=rng.choice([2, 4, 6]), num_experts_per_tok=rng.choice([1, 2]))
    if model_type in ("qwen2_moe", "qwen3_moe"):
        layers = cfg["num_hidden_layers"]
        cfg.update(num_experts=rng.choice([3, 4, 8]), num_experts_per_tok=rng.choice([1, 2]),
                   moe_intermediate_size=rng.choice([32, 48, 64]), decoder_sparse_step=rng.choice([1, 2]),
                   mlp_only_layers=sorted(rng.sample(range(layers), rng.randint(0, layers - 1))))
    if model_type == "qwen2_moe":
        cfg.update(shared_expert_intermediate_size=rng.choice([32, 96]), qkv_bias=rng.random() < 0.5)
    return cfg


def random_config(family: str, seed: int) -> dict:
    """A small random config.json dict (Hub key names) of `family`."""
    rng = random.Random(f"{family}-{seed}")
    if family != "gemma3":
        return _text_config(family, rng)
    text = _text_config("gemma3_text", rng)
    text.pop("torch_dtype")
    tie = text.pop("tie_word_embeddings")
    patch = rng.choice([8, 16])
    vision_heads = rng.choice([2, 4])
    vision = {"model_type": "siglip_vision_model", "hidden_size": 16 * vision_heads * rng.choice([1, 2]),
              "intermediate_size": rng.choice([64, 160]), "num_hidden_layers": rng.randint(1, 3),
              "num_attention_heads": vision_heads, "image_size": patch * rng.choice([4, 8]), "patch_size": patch,
              "num_channels": 3, "vision_use_head": False}  # as every Gemma 3 checkpoint ships it
    return {"model_type": "gemma3", "text_config": text, "vision_config": vision, "mm_tokens_per_image": 16,
            "tie_word_embeddings": tie, "torch_dtype": "bfloat16"}


def config_object(cfg: dict) -> transformers.PretrainedConfig:
    cfg = dict(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)


def _swap(cfg: dict, attribute_map: dict[str, str]) -> dict:
    """`cfg` with every key of an attribute_map pair written under the pair's other spelling."""
    out = dict(cfg)
    for alias, attr in attribute_map.items():
        if attr in cfg:
            out[alias] = out.pop(attr)
        elif alias in cfg:
            out[attr] = out.pop(alias)
    return out


def write(cfg: dict, style: str, folder: Path) -> Path:
    """config.json for `cfg` in `folder`, written in `style`."""
    folder.mkdir(parents=True, exist_ok=True)
    if style == "save_pretrained":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config_object(cfg).save_pretrained(folder)
        return folder
    if style == "swapped_aliases":
        cfg = _swap(cfg, transformers.CONFIG_MAPPING[cfg["model_type"]].attribute_map)
        for sub in ("text_config", "vision_config"):
            if sub in cfg:
                cfg[sub] = _swap(cfg[sub], transformers.CONFIG_MAPPING[cfg[sub]["model_type"]].attribute_map)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def transformers_model(folder: Path) -> torch.nn.Module:
    """The model transformers builds from `folder`'s config.json, on the meta device."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.AutoConfig.from_pretrained(folder)
        with torch.device("meta"):
            if config.model_type == "gemma3":
                return transformers.AutoModelForImageTextToText.from_config(config)
            return transformers.AutoModelForCausalLM.from_config(config)


def transformers_count(folder: Path) -> int:
    return sum(p.numel() for p in transformers_model(folder).parameters())


# ----------------------------------------------------------------------------- the estimator reads every spelling

@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("family", SUPPORTED_FAMILIES)
def test_param_count_matches_transformers_in_every_key_style(family, style, tmp_path):
    for seed in SEEDS:
        folder = write(random_config(family, seed), style, tmp_path / f"{family}-{style}-{seed}")
        spec = load_model(str(folder))
        assert spec.family == family
        theirs = transformers_count(folder)
        ours = architecture.build(spec).params_total
        assert ours == theirs, f"{family} seed {seed} ({style}): ours {ours:,} vs transformers {theirs:,}"


def test_save_pretrained_qwen3_moe_writes_num_local_experts_and_we_read_it(tmp_path):
    """The reported bug: 8 experts saved by transformers 5 were read as Qwen3MoeConfig's default 128."""
    cfg = {**random_config("qwen3_moe", 0), "num_experts": 8}
    folder = write(cfg, "save_pretrained", tmp_path / "moe")
    saved = json.loads((folder / "config.json").read_text())
    assert saved.get("num_local_experts") == 8 and "num_experts" not in saved
    assert load_model(str(folder)).num_experts == 8


@pytest.mark.parametrize("family", [f for f in SUPPORTED_FAMILIES if families.get(f).moe])
def test_when_both_spellings_are_present_the_one_transformers_keeps_wins(family, tmp_path):
    cfg = random_config(family, 0)
    key = families.get(family).moe["num_experts"]
    other = [name for name in families.get(family).spellings(key) if name != key]
    for second in other:
        folder = tmp_path / f"{family}-{second}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**cfg, key: 3, second: 5}))
        theirs = transformers.AutoConfig.from_pretrained(folder)
        spec = load_model(str(folder))
        assert spec.num_experts == (getattr(theirs, "num_local_experts", None) or theirs.num_experts) == 5
        assert architecture.build(spec).params_total == transformers_count(folder)


def test_dtype_is_read_from_either_spelling_and_dtype_wins_as_in_transformers(tmp_path):
    base = random_config("llama", 0)
    base.pop("torch_dtype")
    for keys, expected in (({"torch_dtype": "float16"}, "float16"), ({"dtype": "float16"}, "float16"),
                           ({"torch_dtype": "float32", "dtype": "float16"}, "float16")):
        folder = tmp_path / "-".join(keys)
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**base, **keys}))
        assert load_model(str(folder)).torch_dtype == expected
        assert str(transformers.AutoConfig.from_pretrained(folder).dtype) == f"torch.{expected}"


# ----------------------------------------------------------------------------- families.json vs transformers / peft

@pytest.mark.parametrize("family", SUPPORTED_FAMILIES)
def test_family_table_matches_transformers_config_class(family):
    fam = families.get(family)
    cls = transformers.CONFIG_MAPPING[family]
    assert cls.__name__ == fam.config_class
    assert cls.__module__.replace(".", "/") + ".py" == fam.config_file
    assert dict(cls.attribute_map) == dict(fam.attribute_map)
    theirs = cls.__dataclass_fields__
    for key, value in fam.defaults.items():
        if value is None:  # absent, or derived in __post_init__ (heads, hidden // heads)
            assert key not in theirs or theirs[key].default is None, (family, key)
            continue
        assert key in theirs, f"{family}: {key} is not a field of {cls.__name__}"
        assert theirs[key].default == value or list(theirs[key].default or []) == list(value), (family, key)
    if fam.vision_config is not None:
        sub = fam.vision_config
        vcls = transformers.CONFIG_MAPPING[sub.model_type]
        assert vcls.__name__ == sub.config_class and dict(vcls.attribute_map) == dict(sub.attribute_map)
        assert {k: getattr(vcls(), k) for k in sub.defaults} == dict(sub.defaults)
    if fam.text_config is not None:
        assert cls.sub_configs_defaults["text_config"].config_class is transformers.CONFIG_MAPPING[fam.text_config]


@pytest.mark.parametrize("family", SUPPORTED_FAMILIES)
def test_family_table_matches_transformers_model_class(family):
    fam = families.get(family)
    cfg = random_config(family, 0)
    if family != "gemma3":
        cfg["num_hidden_layers"] = 2
    model = transformers_model_from(cfg)
    cls = type(model)
    kernels = {"eager"} | {k for k, on in (("sdpa", cls._supports_sdpa), ("flash", cls._supports_flash_attn)) if on}
    assert set(fam.attention) == kernels, family
    assert fam.default_attention == ("sdpa" if "sdpa" in kernels else "eager")
    assert fam.decoder_layer_class in model._no_split_modules
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    assert fam.fused_qkv == ("qkv_proj" in names) and fam.fused_gate_up == ("gate_up_proj" in names)
    assert fam.qk_norm == ("q_norm" in names)
    assert (fam.norms_per_layer == 4) == ("pre_feedforward_layernorm" in names)
    text = model.config.get_text_config()
    assert fam.attention_softcap == (getattr(text, "attn_logit_softcapping", None) is not None)
    assert fam.final_logit_softcap == (getattr(text, "final_logit_softcapping", None) is not None)
    norm = type(model.get_decoder().norm)
    assert fam.norm_weight_offset_fp32 == ("1.0 + self.weight.float()" in _source(norm)), family


def transformers_model_from(cfg: dict) -> torch.nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = config_object(cfg)
        with torch.device("meta"):
            if config.model_type == "gemma3":
                return transformers.AutoModelForImageTextToText.from_config(config)
            return transformers.AutoModelForCausalLM.from_config(config)


def _source(obj) -> str:
    import inspect

    return inspect.getsource(obj)


def test_expert_lora_follows_peft_conversion_table():
    from peft.utils.transformers_weight_conversion import _MODEL_TO_CONVERSION_PATTERN, _MOE_TARGET_MODULE_MAPPING

    for name, fam in families.table().items():
        wraps = _MOE_TARGET_MODULE_MAPPING.get(_MODEL_TO_CONVERSION_PATTERN.get(name)) is not None
        assert fam.expert_lora == (wraps and fam.moe is not None), name


def test_every_table_value_has_a_source_note():
    raw = json.loads(families.TABLE_PATH.read_text())
    for name, entry in raw["families"].items():
        keys = {k for k in entry if not k.startswith("_")}
        assert keys == set(entry["_about"]), name
        assert all(len(note) > 20 for note in entry["_about"].values()), name
        assert "transformers" in entry["_about"]["defaults"] and "transformers" in entry["_about"]["attention"]


def test_unknown_family_gets_plain_decoder_traits():
    fam = families.traits("falcon_h1")
    assert fam.attention == ("flash", "sdpa", "eager") and fam.decoder_layer_class is None
    assert not (fam.fused_qkv or fam.qk_norm or fam.expert_lora or fam.moe)
    assert families.get("falcon_h1") is None
