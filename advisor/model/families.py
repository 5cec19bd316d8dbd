"""Model-family facts as data: the one place that knows what each config.json model_type means.

Everything family-specific the estimator needs (transformers' config-class defaults and key
aliases, fused projections, norms, soft-capping, rotary tables, attention kernels, the FSDP
decoder-layer class, MoE key names, peft's expert wrapping, nested text/vision configs) lives
in `advisor/data/families.json`, one entry per model_type, each value with a source note
(`_about`) naming the transformers 5.24 / peft 0.21.2 file it comes from. This module reads
the table once and hands out frozen `Family` records; the rest of the estimator asks for
flags (`traits(spec.family).fused_qkv`), never for family names.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from advisor.stacks import ATTENTIONS

TABLE_PATH = Path(__file__).resolve().parents[1] / "data" / "families.json"
ALL_ATTENTION = ATTENTIONS  # every kernel (advisor.stacks.Attention); a family may allow fewer
_EMPTY: Mapping[str, Any] = MappingProxyType({})


class _Keys:
    """Reading a config dict the way transformers' config class does: its attribute_map aliases."""

    defaults: Mapping[str, Any]
    attribute_map: Mapping[str, str]

    def declared(self, alias: str) -> str:
        """The spelling of an attribute_map pair the config class declares as a field (the one in
        `defaults`; the attribute when neither is)."""
        attr = self.attribute_map[alias]
        return alias if alias in self.defaults and attr not in self.defaults else attr

    def normalise(self, cfg: Mapping[str, Any]) -> dict[str, Any]:
        """`cfg` with every attribute_map spelling folded onto the declared key (the name Hub
        config.json files use). When both spellings are present the undeclared one wins, as in
        transformers: PreTrainedConfig sets extra kwargs after the dataclass fields."""
        out = dict(cfg)
        for alias, attr in self.attribute_map.items():
            declared = self.declared(alias)
            other = attr if declared == alias else alias
            if other in out:
                out[declared] = out.pop(other)
        return out

    def spellings(self, key: str) -> tuple[str, ...]:
        """Every name transformers accepts for config key `key` (the key itself first)."""
        names = [key]
        for alias, attr in self.attribute_map.items():
            if key in (alias, attr):
                names.append(attr if key == alias else alias)
        return tuple(names)


@dataclass(frozen=True)
class BiasRule:
    """Which attention projections carry a bias, and what decides it."""

    key: str | None = "attention_bias"  # config key that switches the q/k/v biases; None: hard-wired
    fixed: bool = False  # the hard-wired q/k/v bias when `key` is None
    o_proj: bool = False  # whether the switch also gives o_proj a bias


@dataclass(frozen=True)
class SubConfig(_Keys):
    """A nested sub-config (Gemma 3's vision tower): its model_type, defaults and key aliases."""

    model_type: str
    config_class: str = ""
    config_file: str = ""
    defaults: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    attribute_map: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    # keys the estimator's config.json always sets (vision_use_head)
    written: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True)
class Family(_Keys):
    """One config.json model_type. The defaults here describe a plain Llama-style decoder: what an
    unknown model_type (a plan file's family, a hand-made ModelSpec) is treated as."""

    model_type: str
    config_class: str = ""
    config_file: str = ""
    modeling_file: str = ""
    # config-class defaults for keys absent from config.json
    defaults: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    # transformers' alias -> attribute, verbatim
    attribute_map: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    attention_bias: BiasRule = BiasRule()
    fused_qkv: bool = False  # one qkv_proj instead of q/k/v_proj
    fused_gate_up: bool = False  # one gate_up_proj instead of gate_proj + up_proj
    qk_norm: bool = False
    norms_per_layer: int = 2
    norm_weight_offset_fp32: bool = False  # Gemma's fp32 `x * (1 + weight)` RMSNorm
    attention_softcap: bool = False  # eager keeps the tanh-capped scores
    final_logit_softcap: bool = False  # the capped logits are kept for backward
    rope_tables: int = 1  # cos/sin tables computed per forward
    attention: tuple[str, ...] = ALL_ATTENTION  # kernels transformers 5 accepts
    default_attention: str = "sdpa"
    decoder_layer_class: str | None = None  # what FSDP wraps
    expert_lora: bool = False  # peft's all-linear wraps the fused experts
    liger: bool = False  # liger-kernel patches this model_type (MODEL_TYPE_TO_APPLY_LIGER_FN)
    moe: Mapping[str, str] | None = None  # ModelSpec field -> config key; None: dense
    sliding_window_switch: str | None = None  # boolean key that turns sliding_window on
    text_config: str | None = None  # model_type of the nested text config, if any
    vision_config: SubConfig | None = None
    about: Mapping[str, str] = field(default_factory=lambda: _EMPTY, repr=False, compare=False)


_FAMILY_KEYS = {f for f in Family.__dataclass_fields__ if f not in ("model_type", "about")}


def _thawed(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thawed(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thawed(v) for v in value]
    return value


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _family(model_type: str, raw: dict[str, Any]) -> Family:
    about = raw.get("_about") or {}
    keys = {k for k in raw if not k.startswith("_")}
    unknown = keys - _FAMILY_KEYS
    if unknown:
        raise ValueError(f"families.json: {model_type} has unknown keys {sorted(unknown)}")
    missing = (_FAMILY_KEYS - keys) | {k for k in keys if not about.get(k)}
    if missing:
        raise ValueError(f"families.json: {model_type} lacks a value or an _about note for {sorted(missing)}")
    values = {k: raw[k] for k in keys}
    bias = raw["attention_bias"]
    values["attention_bias"] = BiasRule(key=bias.get("key"), fixed=bias.get("fixed", False),
                                        o_proj=bias.get("o_proj", False))
    values["attention"] = tuple(raw["attention"])
    vision = raw.get("vision_config")
    values["vision_config"] = SubConfig(**{k: _frozen(v) for k, v in vision.items()}) if vision else None
    text = raw.get("text_config")
    values["text_config"] = text["model_type"] if text else None
    for key in ("defaults", "attribute_map", "moe"):
        values[key] = _frozen(values[key]) if values[key] is not None else None
    fam = Family(model_type=model_type, about=MappingProxyType(dict(about)), **values)
    if not set(fam.attention) <= set(ALL_ATTENTION) or fam.default_attention not in fam.attention:
        raise ValueError(f"families.json: {model_type} attention {fam.attention} / default {fam.default_attention}")
    return fam


@functools.cache
def _load() -> tuple[Mapping[str, Family], Mapping[str, Any]]:
    data = json.loads(TABLE_PATH.read_text(encoding="utf-8"))
    fams = {name: _family(name, raw) for name, raw in data["families"].items()}
    for fam in fams.values():
        if fam.text_config is not None and fam.text_config not in fams:
            raise ValueError(f"families.json: {fam.model_type}.text_config names unknown {fam.text_config!r}")
    return MappingProxyType(fams), _frozen(data["common"])


def table() -> Mapping[str, Family]:
    """Every supported model_type, in table order."""
    return _load()[0]


def names() -> tuple[str, ...]:
    """The model_type values the estimator supports, in table order."""
    return tuple(table())


def get(model_type: str) -> Family | None:
    return table().get(model_type)


@functools.cache
def traits(model_type: str) -> Family:
    """The family's facts; an unknown model_type gets a plain Llama-style decoder's (no flags,
    every attention kernel, no FSDP layer class)."""
    return table().get(model_type) or Family(model_type=model_type)


def family_defaults() -> dict[str, dict[str, Any]]:
    """Config-class defaults per model_type whose config is flat (the multimodal wrapper reads its
    text part with its text family's defaults)."""
    return {name: _thawed(f.defaults) for name, f in table().items() if f.text_config is None}


def decoder_layers() -> dict[str, str]:
    """model_type -> the decoder-layer class FSDP wraps."""
    return {name: f.decoder_layer_class for name, f in table().items() if f.decoder_layer_class}


def dtype_keys() -> tuple[str, ...]:
    """config.json keys that hold the weights' dtype, in transformers' precedence (dtype, then the
    pre-v5 torch_dtype)."""
    amap = _load()[1]["attribute_map"]
    return tuple(dict.fromkeys([*amap.values(), *amap]))


def synthetic_family() -> str:
    """The model_type of --params mode's synthetic architecture."""
    return _load()[1]["synthetic_family"]
