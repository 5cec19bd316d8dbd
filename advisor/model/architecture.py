"""From a ModelSpec to modules: every linear layer, norm and embedding with its shape.

Memory and FLOPs both need the same facts (which linears exist, their in/out sizes, which
ones LoRA targets and bitsandbytes quantises), so they are derived here once. Parameter
counts must equal transformers' own count of the same config (tests/advisor/estimate/test_param_counts.py).
Module names are the ones peft matches against (`q_proj`, `gate_up_proj`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from advisor.memo import Memo
from advisor.model import families, release
from advisor.model.release import Release
from advisor.model.spec import ModelSpec

# Model types whose routed experts (3-D parameters) and router peft 0.21 wraps with LoRA
# ParamWrappers under target_modules="all-linear" (families.json expert_lora: peft's
# _MOE_TARGET_MODULE_MAPPING with transformers 5's fused experts).
EXPERT_LORA_FAMILIES = tuple(name for name, f in families.table().items() if f.expert_lora)

# Attention implementations transformers 5 accepts per model class (families.json attention: its
# _supports_sdpa / _supports_flash_attn flags), for the families that do not take all three.
ALL_ATTENTION = families.ALL_ATTENTION
ATTENTION_SUPPORT = {name: f.attention for name, f in families.table().items() if f.attention != ALL_ATTENTION}


def supported_attention(family: str, transformers: Release | None = None) -> tuple[str, ...]:
    """The kernels transformers accepts for `family` at that release (default: the bundle's)."""
    row = release.fact("attention", family, transformers)
    return tuple(row.value.split()) if row else families.traits(family).attention


def default_attention(family: str, transformers: Release | None = None) -> str:
    """What transformers picks when none is asked for at that release: SDPA, else eager."""
    row = release.fact("default_attention", family, transformers)
    return row.value if row else families.traits(family).default_attention

# Modules outside the decoder layers that peft's LoRA can adapt when named in target_modules.
HEAD_TARGETS = ("lm_head", "embed_tokens")

# Input streams a linear reads from; linears sharing a stream share one saved input tensor.
ATTN_IN, ATTN_OUT, MLP_IN, MLP_ACT, SHARED_IN, SHARED_ACT = (
    "attn_in",
    "attn_out",
    "mlp_in",
    "mlp_act",
    "shared_in",
    "shared_act",
)


@dataclass(frozen=True)
class Linear:
    """One nn.Linear (or `count` identical ones, e.g. experts) inside a decoder layer."""

    name: str
    in_features: int
    out_features: int
    bias: bool = False
    count: int = 1
    stream: str = ATTN_IN
    expert: bool = False  # routed expert weights: 3-D parameters in transformers 5, not nn.Linear
    tokens_fraction: float = 1.0  # share of the layer's tokens this module sees (routed experts)

    @property
    def params(self) -> int:
        return self.count * (self.in_features * self.out_features + (self.out_features if self.bias else 0))

    @property
    def weight_params(self) -> int:
        return self.count * self.in_features * self.out_features


@dataclass(frozen=True)
class Layer:
    """One decoder layer: its linears, norms and other small parameters."""

    linears: tuple[Linear, ...]
    norm_params: int  # RMSNorm weights (incl. q/k norms)
    other_params: int = 0  # MoE router weights
    moe: bool = False

    @property
    def params(self) -> int:
        return sum(lin.params for lin in self.linears) + self.norm_params + self.other_params


@dataclass
class Architecture:
    spec: ModelSpec
    layers: list[Layer]
    embed_params: int
    lm_head_params: int  # 0 when tied to the embeddings
    final_norm_params: int
    vision_linears: tuple[Linear, ...] = ()
    vision_other_params: int = 0  # patch/position embeddings, layer norms, projector
    notes: list[str] = field(default_factory=list)
    _memo: dict = field(default_factory=Memo, repr=False, compare=False)  # per-targets results (the planner asks thousands of times)

    # ---- parameter counts -------------------------------------------------------------
    @cached_property
    def params_layers(self) -> int:
        return sum(layer.params for layer in self.layers)

    @cached_property
    def params_vision(self) -> int:
        return sum(lin.params for lin in self.vision_linears) + self.vision_other_params

    @cached_property
    def params_architecture(self) -> int:
        return (
            self.embed_params
            + self.lm_head_params
            + self.final_norm_params
            + self.params_layers
            + self.params_vision
        )

    @property
    def scale(self) -> float:
        """--params mode: stretch the synthetic shape's count to the given one."""
        if self.spec.params_override:
            return self.spec.params_override / self.params_architecture
        return 1.0

    @property
    def params_total(self) -> int:
        return self.spec.params_override or self.params_architecture

    @cached_property
    def params_active(self) -> int:
        """Parameters a token passes through: MoE layers count only top-k routed experts."""
        total = self.params_total
        for layer in self.layers:
            for lin in layer.linears:
                if lin.expert and lin.count:
                    inactive = lin.count - self.spec.num_experts_per_tok
                    total -= round(lin.params / lin.count * inactive * self.scale)
        return total

    @cached_property
    def largest_layer_params(self) -> int:
        return max((layer.params for layer in self.layers), default=0)

    @cached_property
    def largest_dense_linear(self) -> int:
        """Weight elements of the biggest non-expert linear (what bitsandbytes dequantises at once)."""
        return max((lin.in_features * lin.out_features for lin in self.linears() if not lin.expert), default=0)

    @cached_property
    def linear_weights_unscaled(self) -> int:
        return sum(lin.weight_params for lin in self.linears())

    def linears(self, include_vision: bool = True) -> list[Linear]:
        out = [lin for layer in self.layers for lin in layer.linears]
        if include_vision:
            out += list(self.vision_linears)
        return out

    @cached_property
    def linear_weight_params(self) -> int:
        """Weights bitsandbytes quantises in QLoRA: every nn.Linear except lm_head. transformers 5
        replaces only nn.Linear with Linear4bit (integrations/bitsandbytes.py), so fused MoE experts
        (3-D parameters) and routers stay in the 16-bit compute dtype."""
        return round(sum(lin.weight_params for lin in self.linears() if not lin.expert) * self.scale)

    @cached_property
    def expert_weight_params(self) -> int:
        return round(sum(lin.weight_params for lin in self.linears() if lin.expert) * self.scale)

    # ---- LoRA ---------------------------------------------------------------------------
    def linear_names(self) -> list[str]:
        names: list[str] = []
        for lin in self.linears():
            if not lin.expert and lin.name not in names:
                names.append(lin.name)
        return names

    def lora_targeted(self, targets: str) -> list[Linear]:
        """The linears a peft LoraConfig(target_modules=targets) wraps, per layer and in vision."""
        key = ("targeted", targets)
        if key not in self._memo:
            if targets.strip() == "all-linear":
                # peft's all-linear: every nn.Linear but the output embedding. Routed experts are
                # 3-D nn.Parameters in transformers 5 (e.g. MixtralExperts), so not nn.Linear.
                self._memo[key] = [lin for lin in self.linears() if not lin.expert]
            else:
                wanted = {t.strip() for t in targets.split(",") if t.strip()}
                self._memo[key] = [lin for lin in self.linears() if not lin.expert and lin.name in wanted]
        return self._memo[key]

    def unknown_targets(self, targets: str) -> list[str]:
        if targets.strip() == "all-linear":
            return []
        known = set(self.linear_names()) | set(HEAD_TARGETS)
        return [t.strip() for t in targets.split(",") if t.strip() and t.strip() not in known]

    def head_targets(self, targets: str) -> tuple[str, ...]:
        """lm_head / embed_tokens when named in `targets`. peft wraps them only by name: all-linear leaves the
        output embedding out (peft/tuners/tuners_utils.py _maybe_include_all_linear_layers removes
        model.get_output_embeddings()), and an nn.Embedding is never a linear."""
        if targets.strip() == "all-linear":
            return ()
        wanted = {t.strip() for t in targets.split(",")}
        return tuple(name for name in HEAD_TARGETS if name in wanted)

    def head_lora_params(self, rank: int, targets: str) -> int:
        """Adapters on the model's ends: lm_head (peft lora.Linear: A r×h, B V×r) and embed_tokens (peft
        lora.Embedding: lora_embedding_A r×V, lora_embedding_B h×r) -- r·(h+V) each."""
        v, h = self.spec.vocab_size, self.spec.hidden_size
        return sum(rank * (h + v) for _ in self.head_targets(targets))

    def dora_magnitudes(self, targets: str) -> int:
        """DoRA's trainable magnitude vectors: one element per output feature of every adapted linear (peft
        tuners/lora/dora.py DoraLinearLayer.update_layer: nn.Parameter(weight_norm), weight_norm =
        linalg.norm(W + s·BA, dim=1)), lm_head's V; an adapted embedding keeps one per hidden unit
        (DoraEmbeddingLayer, fan_in_fan_out=True)."""
        key = ("dora", targets)
        if key not in self._memo:
            total = sum(lin.count * lin.out_features for lin in self.lora_targeted(targets))
            heads = self.head_targets(targets)
            total += self.spec.vocab_size if "lm_head" in heads else 0
            total += self.spec.hidden_size if "embed_tokens" in heads else 0
            self._memo[key] = total
        return self._memo[key]

    def saved_module_params(self, modules: tuple[str, ...]) -> int:
        """Parameters of the trainable copies peft's ModulesToSaveWrapper makes (peft/utils/other.py
        ModulesToSaveWrapper.update: copy.deepcopy(original_module)); a tied lm_head gets its own copy too."""
        v, h = self.spec.vocab_size, self.spec.hidden_size
        return sum(v * h for m in modules if m in HEAD_TARGETS)

    def lora_wraps_experts(self, targets: str) -> bool:
        return targets.strip() == "all-linear" and families.traits(self.spec.family).expert_lora and self.spec.is_moe

    def expert_lora_params_per_layer(self, rank: int) -> int:
        """peft ParamWrapper on fused experts: gate_up A (2rE×h), B (2f×2rE); down A (rE×f),
        B (h×rE); plus the router gate A (r×h), B (E×r). Checked against peft 0.21.2."""
        spec = self.spec
        e, h = spec.num_experts, spec.hidden_size
        fe = spec.moe_intermediate_size or spec.intermediate_size
        return rank * e * (3 * h + 5 * fe) + rank * (h + e)

    def lora_params(self, rank: int, targets: str) -> int:
        """Trainable adapter parameters: A (in×r) + B (r×out) for every targeted linear, the vision
        tower's included (peft LoRA, no bias), plus peft's expert wrappers. The one adapter count."""
        key = ("lora_params", rank, targets)
        if key not in self._memo:
            self._memo[key] = round(self._lora(rank, targets, vision=True, expert_share=1.0)) + self.head_lora_params(rank, targets)
        return self._memo[key]

    def lora_params_per_token(self, rank: int, targets: str) -> float:
        """Adapter weights one text token multiplies: no vision tower (text-only batches), and the
        expert wrappers' share of the experts each token is routed to (FLOPs, not storage)."""
        spec = self.spec
        share = spec.num_experts_per_tok / spec.num_experts if spec.is_moe else 1.0
        heads = self.head_targets(targets)
        head = rank * (spec.hidden_size + spec.vocab_size) if "lm_head" in heads else 0
        head += rank * spec.hidden_size if "embed_tokens" in heads else 0  # lora_embedding_A is a lookup
        return self._lora(rank, targets, vision=False, expert_share=share) + head

    def _lora(self, rank: int, targets: str, vision: bool, expert_share: float) -> float:
        skip = set(map(id, self.vision_linears)) if not vision else set()
        total: float = sum(lin.count * rank * (lin.in_features + lin.out_features)
                           for lin in self.lora_targeted(targets) if id(lin) not in skip)
        if self.lora_wraps_experts(targets):
            moe_layers = sum(1 for layer in self.layers if layer.moe)
            total += moe_layers * self.expert_lora_params_per_layer(rank) * expert_share
        return total


def _layer_linears(spec: ModelSpec, layer: int) -> tuple[list[Linear], int, bool]:
    h, hd = spec.hidden_size, spec.head_dim
    q_out, kv_out = spec.num_attention_heads * hd, spec.num_key_value_heads * hd
    bias = spec.attention_bias
    fam = families.traits(spec.family)
    lins: list[Linear] = []
    if fam.fused_qkv:
        lins.append(Linear("qkv_proj", h, q_out + 2 * kv_out, bias, stream=ATTN_IN))
    else:
        lins += [
            Linear("q_proj", h, q_out, bias, stream=ATTN_IN),
            Linear("k_proj", h, kv_out, bias, stream=ATTN_IN),
            Linear("v_proj", h, kv_out, bias, stream=ATTN_IN),
        ]
    lins.append(Linear("o_proj", q_out, h, bias and fam.attention_bias.o_proj, stream=ATTN_OUT))

    other = 0
    moe = spec.is_moe_layer(layer)
    if moe:
        e, fe = spec.num_experts, spec.moe_intermediate_size or spec.intermediate_size
        frac = spec.num_experts_per_tok / e
        # transformers 5 stores experts fused: gate_up_proj [E, 2f, h], down_proj [E, h, f]
        lins += [
            Linear("experts.gate_up_proj", h, 2 * fe, False, e, MLP_IN, expert=True, tokens_fraction=frac),
            Linear("experts.down_proj", fe, h, False, e, MLP_ACT, expert=True, tokens_fraction=frac),
        ]
        other += e * h  # router weight [E, h] (a Parameter used with F.linear)
        if spec.shared_expert_intermediate_size:
            fs = spec.shared_expert_intermediate_size
            lins += [
                Linear("gate_proj", h, fs, False, stream=MLP_IN),
                Linear("up_proj", h, fs, False, stream=MLP_IN),
                Linear("down_proj", fs, h, False, stream=SHARED_ACT),
                Linear("shared_expert_gate", h, 1, False, stream=MLP_IN),
            ]
    else:
        f = spec.intermediate_size
        if fam.fused_gate_up:
            lins.append(Linear("gate_up_proj", h, 2 * f, False, stream=MLP_IN))
        else:
            lins += [Linear("gate_proj", h, f, False, stream=MLP_IN), Linear("up_proj", h, f, False, stream=MLP_IN)]
        lins.append(Linear("down_proj", f, h, False, stream=MLP_ACT))
    return lins, other, moe


def _vision(spec: ModelSpec) -> tuple[tuple[Linear, ...], int]:
    """SigLIP vision tower (Gemma 3) + Gemma3MultiModalProjector."""
    v = spec.vision
    if v is None:
        return (), 0
    hv, iv = v.hidden_size, v.intermediate_size
    per_layer = [
        Linear("q_proj", hv, hv, True, stream="vision"),
        Linear("k_proj", hv, hv, True, stream="vision"),
        Linear("v_proj", hv, hv, True, stream="vision"),
        Linear("out_proj", hv, hv, True, stream="vision"),
        Linear("fc1", hv, iv, True, stream="vision"),
        Linear("fc2", iv, hv, True, stream="vision"),
    ]
    linears = tuple(Linear(lin.name, lin.in_features, lin.out_features, lin.bias, v.num_hidden_layers, lin.stream) for lin in per_layer)
    patches = (v.image_size // v.patch_size) ** 2
    other = (
        v.num_channels * v.patch_size**2 * hv + hv  # patch embedding conv (+bias)
        + patches * hv  # position embedding
        + v.num_hidden_layers * 4 * hv  # two LayerNorms (weight+bias) per layer
        + 2 * hv  # post_layernorm
        + hv * spec.hidden_size  # projector: mm_input_projection_weight
        + hv  # projector: mm_soft_emb_norm
    )
    return linears, other


def build(spec: ModelSpec) -> Architecture:
    """The module inventory of `spec`."""
    h, hd = spec.hidden_size, spec.head_dim
    norm = spec.norms_per_layer * h + (2 * hd if spec.qk_norm else 0)
    layers = []
    for i in range(spec.num_hidden_layers):
        lins, other, moe = _layer_linears(spec, i)
        layers.append(Layer(tuple(lins), norm, other, moe))
    vis_lin, vis_other = _vision(spec)
    return Architecture(
        spec=spec,
        layers=layers,
        embed_params=spec.vocab_size * h,
        lm_head_params=0 if spec.tie_word_embeddings else spec.vocab_size * h,
        final_norm_params=h,
        vision_linears=vis_lin,
        vision_other_params=vis_other,
    )
