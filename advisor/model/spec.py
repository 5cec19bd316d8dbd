"""ModelSpec: the facts of a causal LM's config.json that memory and time depend on.

One flat, family-agnostic record. `advisor.model.catalog` fills it from the catalog, a local
config.json or the Hub; `advisor.model.architecture` turns it into modules and parameter counts.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from advisor.model import families

# model_type values whose architecture the estimator knows (config.json "model_type"), in the
# order of advisor/data/families.json.
SUPPORTED_FAMILIES: tuple[str, ...] = families.names()

# ----------------------------------------------------------------------------- physical bounds
# What no real model or run comes near, defined once: a value beyond a bound is refused when it
# is parsed (config.json, --params, plan options, plan files), with a message that gives the
# bound, so nonsense can neither produce negative or NaN results nor make the estimator and the
# planner run for minutes. Each is an order of magnitude or more above the largest public model
# or run as of 2026 (in brackets).
MAX_LAYERS = 1_000  # decoder layers [Llama-3.1-405B: 126]
MAX_HIDDEN = 131_072  # hidden size [Llama-3.1-405B: 16,384]; --params 100T needs ~92k
MAX_INTERMEDIATE = 1_048_576  # MLP / expert width [Llama-3.1-405B: 53,248]
MAX_HEADS = 4_096  # attention heads and KV heads [128]
MAX_HEAD_DIM = 4_096  # [256]
MAX_VOCAB = 4_194_304  # [Gemma 3: 262,208]
MAX_POSITIONS = 1_073_741_824  # max_position_embeddings, sliding_window [Llama 4 Scout: 10,485,760]
MAX_EXPERTS = 4_096  # routed experts per MoE layer [Kimi K2: 384]
MAX_IMAGE_SIZE = 65_536  # vision tower input pixels per side [896]
MAX_PARAMS = 10**14  # 100T parameters [Kimi K2: 1.04T]
# Workload and cluster (PlanRequest and the estimate/plan options use these).
MAX_TOKENS = 10**15  # training tokens per epoch [largest pre-training runs: ~4e13]
MAX_EPOCHS = 10_000  # [fine-tuning: 1-20]
MAX_SEQ_LEN = 16_777_216  # tokens per sequence (2^24) [long-context fine-tuning: 1,048,576]
MAX_BATCH = 1_048_576  # sequences per micro-batch, per optimizer step, accumulation steps [~16,384]
MAX_GPUS = 1_048_576  # GPUs in one run [~200,000]
MAX_NODES = 16_384  # instances in one run [Llama 3 405B: 2,048 nodes of 8; ~100k-GPU clusters]
MAX_HOURS = 1_000_000  # setup, deadline, checkpoint interval (114 years)
MAX_USD = 10**12  # budgets


def out_of_bounds(name: str, value: float, low: float, high: float, why: str = "") -> str | None:
    """A one-line reason when `value` is outside [low, high] (None when inside)."""
    if low <= value <= high:
        return None
    return f"{name} must be between {low:,} and {high:,} (got {value:,}){'; ' + why if why else ''}"


def _check(model: BaseModel, bounds: dict[str, tuple[int, int]]) -> None:
    for name, (low, high) in bounds.items():
        problem = out_of_bounds(name, getattr(model, name), low, high)
        if problem:
            raise ValueError(problem)


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

    @model_validator(mode="after")
    def _bounds(self) -> VisionSpec:
        _check(self, {"hidden_size": (1, MAX_HIDDEN), "intermediate_size": (1, MAX_INTERMEDIATE),
                      "num_hidden_layers": (1, MAX_LAYERS), "num_attention_heads": (1, MAX_HEADS),
                      "image_size": (1, MAX_IMAGE_SIZE), "patch_size": (1, self.image_size),
                      "num_channels": (1, 64), "mm_tokens_per_image": (1, MAX_SEQ_LEN)})
        return self


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

    @model_validator(mode="after")
    def _bounds(self) -> ModelSpec:
        """Sizes a real model can have (the bounds above); experts only with an expert count."""
        _check(self, {
            "vocab_size": (1, MAX_VOCAB), "hidden_size": (1, MAX_HIDDEN), "intermediate_size": (1, MAX_INTERMEDIATE),
            "num_hidden_layers": (1, MAX_LAYERS), "num_attention_heads": (1, MAX_HEADS),
            "num_key_value_heads": (1, self.num_attention_heads), "head_dim": (1, MAX_HEAD_DIM),
            "max_position_embeddings": (1, MAX_POSITIONS), "norms_per_layer": (0, 16),
            "num_experts": (0, MAX_EXPERTS), "num_experts_per_tok": (0, max(self.num_experts, 0)),
            "moe_intermediate_size": (0, MAX_INTERMEDIATE), "shared_expert_intermediate_size": (0, MAX_INTERMEDIATE),
            "decoder_sparse_step": (0, MAX_LAYERS),
        })
        if self.sliding_window is not None:
            _check(self, {"sliding_window": (1, MAX_POSITIONS)})
        if self.num_experts and not self.num_experts_per_tok:  # a router that picks no expert computes nothing
            raise ValueError(f"num_experts_per_tok must be between 1 and {self.num_experts:,} (the expert count) "
                             "for a mixture-of-experts model (got 0)")
        if len(self.mlp_only_layers) > self.num_hidden_layers or any(
                not 0 <= i < self.num_hidden_layers for i in self.mlp_only_layers):
            raise ValueError(f"mlp_only_layers must list layer numbers from 0 to {self.num_hidden_layers - 1}")
        if self.params_override is not None:
            _check(self, {"params_override": (1, MAX_PARAMS)})
        return self

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def is_moe_layer(self, layer: int) -> bool:
        if not self.is_moe or layer in self.mlp_only_layers:
            return False
        return (layer + 1) % max(self.decoder_sparse_step, 1) == 0
