"""ModelSpec: the facts of a causal LM's config.json that memory and time depend on.

One flat, family-agnostic record. `advisor.models` fills it from the catalog, a local
config.json or the Hub; `advisor.architecture` turns it into modules and parameter counts.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from advisor import families

# model_type values whose architecture the estimator knows (config.json "model_type"), in the
# order of advisor/data/families.json.
SUPPORTED_FAMILIES: tuple[str, ...] = families.names()


class VisionSpec(BaseModel):
    """A SigLIP-style vision tower (Gemma 3 / MedGemma) plus its projector into the LM."""

    model_config = ConfigDict(extra="forbid")

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    image_size: int
    patch_size: int
    num_channels: int = 3
    mm_tokens_per_image: int = 256


class ModelSpec(BaseModel):
    """Architecture facts of one decoder-only causal LM (text part), plus provenance."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Hugging Face id, or a label for --params / local configs")
    aliases: list[str] = Field(default_factory=list)
    family: str = Field(description="config.json model_type of the text model")
    source: str = Field(description="where these facts come from (URL of config.json, path, ...)")

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # q/k/v biases (families.json attention_bias rule)
    qk_norm: bool = False  # per-head RMSNorm on q and k (families.json qk_norm)
    norms_per_layer: int = 2  # RMSNorms per decoder layer (families.json norms_per_layer)
    sliding_window: int | None = None

    # Mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE). num_experts == 0 means dense.
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0  # Qwen2-MoE's always-on expert (+ its gate)
    decoder_sparse_step: int = 1
    mlp_only_layers: list[int] = Field(default_factory=list)

    vision: VisionSpec | None = None
    torch_dtype: str = "bfloat16"

    # Set only in --params mode: the given parameter count overrides the synthetic shape's.
    params_override: int | None = None

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def is_moe_layer(self, layer: int) -> bool:
        if not self.is_moe or layer in self.mlp_only_layers:
            return False
        return (layer + 1) % max(self.decoder_sparse_step, 1) == 0
