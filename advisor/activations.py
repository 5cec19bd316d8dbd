"""What autograd saves for backward, tensor by tensor, for one micro-batch.

This follows the forward code of transformers' decoder layers and peft's LoRA layers and
counts every tensor a backward function keeps (deduplicated: one tensor read by q, k and v
is stored once). The per-layer structure follows Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models" (§4.1, activation memory per layer),
re-derived for pre-norm RMSNorm/SwiGLU decoders, GQA, fused-kernel attention and LoRA:
- RMSNorm (LlamaRMSNorm): saves its input upcast to fp32 (pow and mul backward) and, when
  its weight trains, the normalised output in the model dtype (Gemma: fp32, `1 + weight`).
- nn.Linear saves its input only when its weight needs a gradient; a frozen linear keeps
  only its weight (a parameter, counted in weights).
- SDPA / FlashAttention save q, k, v, the output and a fp32 logsumexp per head (Dao et al.
  2022, FlashAttention, §3.1: O(s) extra memory); eager attention also keeps the fp32
  softmax and its 16-bit copy: the b·heads·s² score matrices.
- SwiGLU / GeGLU MLP: gate (activation input), activation output, up, and the product
  (down_proj input, only when down_proj trains).
- peft LoRA (`lora.Linear.forward`): the input cast to the adapter dtype (fp32 by default),
  dropout's bool mask and output when dropout > 0, and the rank-r intermediate.
- Loss (`ForCausalLMLoss`): logits are upcast to fp32; log_softmax keeps its fp32 output
  (b·s·vocab·4 bytes) for backward.
- autocast (amp-*): every linear casts its input to 16-bit separately, and each weight's
  16-bit copy is kept for backward (torch autocast weight cache).
- gradient checkpointing (transformers, reentrant torch.utils.checkpoint): only each
  layer's input is kept; one layer is recomputed at a time during backward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from advisor import families
from advisor.architecture import ATTN_IN, ATTN_OUT, MLP_IN, SHARED_IN, Architecture, Layer
from advisor.stacks import Shape, Stack

FP32 = 4
INT64 = 8
BOOL = 1


# What each saved-tensor term is, for reports and `estimate` tables (keys: the term's tail).
TERMS = {
    "norms.input_fp32": "RMSNorm inputs upcast to fp32 (pow/mul backward)",
    "norms.rsqrt": "RMSNorm reciprocal RMS, fp32, one per token",
    "norms.normalised": "normalised hidden states the norm weight multiplies (weight trains)",
    "linear_inputs.attn_in": "q/k/v projection input (one tensor, shared)",
    "linear_inputs.mlp_in": "gate/up projection input (one tensor, shared)",
    "linear_inputs.mlp_act": "down_proj input (activation × up)",
    "linear_inputs.shared_act": "shared expert's down_proj input",
    "linear_inputs.autocast_casts": "bf16 casts of fp32 inputs, one per linear (autocast)",
    "attention.qkv": "q, k, v after RoPE, kept by the attention kernel",
    "attention.output": "attention output (also o_proj's input)",
    "attention.logsumexp": "fp32 log-sum-exp per head (fused attention kernels)",
    "attention.scores": "eager attention: fp32 softmax and its 16-bit copy, b·heads·s²",
    "attention.mask_copy": "padded batches: SDPA's per-layer copy of the (b, 1, s, s) mask",
    "attention.softcap": "eager attention: tanh soft-capped scores (Gemma 2)",
    "attention.qk_norm": "per-head q/k RMSNorm inputs (and outputs when they train)",
    "mlp.gate_act_up": "gate output, activation output and up output",
    "moe.experts": "routed expert intermediates, per (token, expert) pair",
    "moe.router": "router probabilities (fp32) and top-k indices",
    "moe.shared_expert": "shared expert intermediates and its sigmoid gate",
    "lora.inputs": "adapter inputs (cast to the adapter dtype / after dropout), one per adapter",
    "lora.dropout_masks": "LoRA dropout masks (bool on CUDA)",
    "lora.rank": "rank-r intermediates between lora_A and lora_B",
    "lora.merged_expert_weights": "peft ParamWrapper: experts' weights + B@A, merged per layer",
    "qlora.saved_inputs": "inputs kept by older bitsandbytes 4-bit matmuls",
    "checkpoint.layer_inputs": "each decoder layer's input (gradient checkpointing)",
    "rope.cos_sin": "rotary cos/sin tables, shared by all layers",
    "embedding.indices": "token ids for the embedding backward",
    "final_norm.input_fp32": "final norm input upcast to fp32",
    "final_norm.rsqrt": "final norm reciprocal RMS",
    "final_norm.normalised": "final norm's normalised hidden states",
    "lm_head.input": "lm_head input (lm_head trains)",
    "logits.softcap_tanh": "Gemma 2 final logit soft-capping (tanh output)",
    "loss.log_softmax_fp32": "fp32 log_softmax of the logits, b·s·vocab × 4 B (transformers upcasts logits)",
    "loss.targets": "shifted labels (int64)",
    "autocast_weight_copies": "bf16 copies of every linear weight kept by autocast",
}


def describe(term: str) -> str:
    """Plain-language meaning of an activation term such as 'layers.mlp.gate_act_up'."""
    key = term.removeprefix("activations.").removeprefix("layers.")
    return TERMS.get(key, "saved for backward")


def act_bytes(stack: Stack) -> int:
    """Bytes per element of activations between layers."""
    return 4 if stack.precision == "fp32" else 2


def adapter_bytes(stack: Stack) -> int:
    if stack.precision == "fp32":
        return 4
    return 4 if stack.adapter_dtype == "fp32" else 2


@dataclass
class Saved:
    """Saved-tensor bytes per token, by named term (summed over layers by the caller)."""

    terms: dict[str, float] = field(default_factory=dict)
    fixed: dict[str, float] = field(default_factory=dict)  # bytes per micro-batch, not per token

    def add(self, name: str, nbytes: float) -> None:
        if nbytes:
            self.terms[name] = self.terms.get(name, 0.0) + nbytes

    def add_fixed(self, name: str, nbytes: float) -> None:
        if nbytes:
            self.fixed[name] = self.fixed.get(name, 0.0) + nbytes

    @property
    def total(self) -> float:
        return sum(self.terms.values())

    def bytes_for(self, tokens: int) -> float:
        return self.total * tokens + sum(self.fixed.values())


def _norm(saved: Saved, name: str, h: int, stack: Stack, fp32_norm: bool) -> None:
    """One RMSNorm of width h: its input upcast to fp32, and the normalised tensor the weight
    multiplies when that weight trains (LlamaRMSNorm: model dtype; Gemma's fp32 `1 + weight`
    norms (families.json norm_weight_offset_fp32) and autocast: fp32).
    The norm's result is a separate tensor, saved by the linears that read it (_linears)."""
    saved.add(f"{name}.input_fp32", FP32 * h)
    saved.add(f"{name}.rsqrt", FP32)  # (b, s, 1) fp32 reciprocal RMS
    if stack.method == "full":
        fp32_out = fp32_norm or stack.precision.startswith("amp") or stack.precision == "fp32"
        saved.add(f"{name}.normalised", (FP32 if fp32_out else act_bytes(stack)) * h)


def _stream_bytes(stack: Stack, stream: str) -> int:
    """Dtype of the tensor a linear reads: norm outputs stay fp32 under autocast."""
    if stack.precision.startswith("amp") and stream in (ATTN_IN, MLP_IN, SHARED_IN):
        return FP32
    return act_bytes(stack)


def lora_target_names(arch: Architecture, stack: Stack) -> set[str]:
    if stack.method == "full":
        return set()
    return {lin.name for lin in arch.lora_targeted(stack.lora_targets)}


def _linears(saved: Saved, arch: Architecture, layer: Layer, stack: Stack, attn_in_grad: bool) -> None:
    """Inputs saved by the layer's dense linears and their LoRA adapters (experts: _mlp).

    Dropout keeps a bool mask on CUDA (fused native_dropout); on the CPU at::_dropout keeps a
    noise tensor of the input dtype instead (advisor.measure converts that to CUDA terms).
    `attn_in_grad` is False for the first
    layer of a frozen-embedding model: nothing upstream needs a gradient, so the dropout there
    saves nothing."""
    amp = stack.precision.startswith("amp")
    ab = adapter_bytes(stack)
    targets = lora_target_names(arch, stack)
    dropout = stack.lora_dropout > 0
    shared: set[str] = set()  # streams already counted once

    def once(stream: str, nbytes: float, term: str) -> None:
        if stream not in shared:
            shared.add(stream)
            saved.add(term, nbytes)

    fused_attention = stack.attention != "eager"
    for lin in layer.linears:
        if lin.expert:
            continue
        width, sb = lin.in_features, _stream_bytes(stack, lin.stream)
        mask_needed = dropout and (attn_in_grad or lin.stream != ATTN_IN)
        if stack.method == "full":
            if amp and sb == FP32:
                saved.add("linear_inputs.autocast_casts", 2 * width)  # each linear casts separately
            elif lin.stream == ATTN_OUT and fused_attention:
                pass  # o_proj reads the attention kernel's output itself (same storage, counted there)
            else:
                once(lin.stream, sb * width, f"linear_inputs.{lin.stream}")
            continue
        if stack.method == "qlora" and stack.bnb_saves_inputs:
            once(lin.stream, sb * width, "qlora.saved_inputs")
        if lin.name not in targets:
            continue  # frozen linear: backward needs only its weight
        if amp:
            # autocast: lora_A reads its own bf16 cast of the (possibly dropped-out) input
            if mask_needed:
                saved.add("lora.dropout_masks", BOOL * width)
            saved.add("lora.inputs", 2 * width)
            saved.add("lora.rank", 2 * stack.lora_rank)
            continue
        if dropout:
            if mask_needed:
                saved.add("lora.dropout_masks", BOOL * width)
            saved.add("lora.inputs", ab * width)  # dropout output, one per adapter
        elif ab != sb:
            saved.add("lora.inputs", ab * width)  # x.to(adapter dtype), one per adapter
        else:
            once(lin.stream, sb * width, "lora.inputs")
        saved.add("lora.rank", ab * stack.lora_rank)


def _attention(saved: Saved, arch: Architecture, stack: Stack, s: int, padded: bool = False) -> None:
    spec = arch.spec
    a = act_bytes(stack)
    q = spec.num_attention_heads * spec.head_dim
    kv = spec.num_key_value_heads * spec.head_dim
    heads = spec.num_attention_heads
    fam = families.traits(spec.family)
    if spec.qk_norm:
        saved.add("attention.qk_norm", FP32 * (q + kv))
        if stack.method == "full":
            saved.add("attention.qk_norm", (FP32 if fam.norm_weight_offset_fp32 else a) * (q + kv))
    if stack.attention == "eager":
        rep = heads // max(spec.num_key_value_heads, 1)
        k_saved = q if rep > 1 else kv
        saved.add("attention.qkv", a * (q + 2 * k_saved))
        scores = heads * s  # per token: one row of the b·heads·s·s matrix
        if fam.attention_softcap:
            saved.add("attention.softcap", a * scores)
        if stack.precision == "fp32":
            saved.add("attention.scores", FP32 * scores)
        else:
            saved.add("attention.scores", (FP32 + a) * scores)  # fp32 softmax + 16-bit copy
        return
    # SDPA (flash / memory-efficient kernels) and FlashAttention-2: q, k, v, out, logsumexp.
    if stack.attention == "sdpa" and padded:
        # A padding mask rules out GQA inside SDPA (transformers' use_gqa_in_sdpa): k and v are
        # repeated to every head, and ATen's scaled_dot_product_attention converts the bool
        # mask to a (b, 1, s, s) tensor of the query dtype in every layer, kept for backward.
        saved.add("attention.qkv", a * 3 * q)
        saved.add("attention.mask_copy", a * s)
    else:  # FlashAttention-2 unpads padded batches (varlen): nothing extra
        saved.add("attention.qkv", a * (q + 2 * kv))
    saved.add("attention.output", a * q)
    saved.add("attention.logsumexp", FP32 * heads)


def _mlp(saved: Saved, arch: Architecture, layer: Layer, stack: Stack) -> None:
    spec = arch.spec
    a = act_bytes(stack)
    full = stack.method == "full"
    if layer.moe:
        e, k = spec.num_experts, spec.num_experts_per_tok
        fe = spec.moe_intermediate_size or spec.intermediate_size
        h = spec.hidden_size
        # grouped_mm experts (transformers 5 default), per routed (token, expert) pair: trained
        # experts keep the gathered input, gate_up output, activation, product and the down
        # output (scaled by the routing weight); frozen experts only the activation's inputs
        # and the down output.
        wrapped = arch.lora_wraps_experts(stack.lora_targets) and not full
        if full:
            saved.add("moe.experts", k * a * (2 * h + 4 * fe))
        elif wrapped:
            saved.add("moe.experts", k * a * (2 * h + 3 * fe))
            # peft ParamWrapper adds B@A to each expert weight for the forward: the merged
            # [E, 2f, h] and [E, h, f] weights (and the reshaped factors) stay saved.
            saved.add_fixed("lora.merged_expert_weights", a * (e * 3 * fe * h + arch.expert_lora_params_per_layer(stack.lora_rank)))
        else:
            saved.add("moe.experts", k * a * (2 * fe + h))
        shared = spec.shared_expert_intermediate_size
        # router: fp32 softmax probabilities and top-k indices; its input when the router
        # trains (the same tensor the shared expert's linears keep, if there is one)
        saved.add("moe.router", FP32 * e + INT64 * k + (a * h if (full or wrapped) and not shared else 0))
        if shared:
            # shared expert's gate/activation/up, then sigmoid(shared_expert_gate) * output
            saved.add("moe.shared_expert", a * (3 * shared + h + 1))
        return
    f = spec.intermediate_size
    # gate (activation input), activation output, up (both read by the product)
    saved.add("mlp.gate_act_up", 3 * a * f)
    del full


def layer_saved(arch: Architecture, layer: Layer, stack: Stack, shape: Shape, first: bool = False) -> Saved:
    """Bytes per token one decoder layer saves for backward."""
    spec = arch.spec
    fp32_norm = families.traits(spec.family).norm_weight_offset_fp32
    h = spec.hidden_size
    saved = Saved()
    # With frozen embeddings (LoRA) and no checkpointing, the first layer's input needs no
    # gradient: its input norm saves nothing (peft enables input grads only for checkpointing).
    input_grad = not (first and stack.method != "full" and not stack.grad_checkpointing)
    for i in range(spec.norms_per_layer):  # input/post-attention (+ Gemma's pre/post feed-forward)
        if i > 0 or input_grad:
            _norm(saved, "norms", h, stack, fp32_norm)
    _attention(saved, arch, stack, shape.seq_len, shape.padded)
    _linears(saved, arch, layer, stack, input_grad)
    _mlp(saved, arch, layer, stack)
    return saved


@dataclass
class ActivationEstimate:
    saved: dict[str, int]  # bytes saved at the end of forward, by term
    recompute: int  # one layer's activations rebuilt during backward (checkpointing)
    loss_transient: int  # fp32 logits gradients alive at the start of backward

    @property
    def saved_total(self) -> int:
        return sum(self.saved.values())


def estimate_activations(arch: Architecture, stack: Stack, shape: Shape) -> ActivationEstimate:
    """Saved-for-backward bytes of one micro-batch: the per-token census (`_census`, computed once per
    stack, sequence length and padding) scaled to the micro-batch's tokens."""
    census = _census(arch, stack, shape.seq_len, shape.padded)
    tokens = shape.micro_batch * shape.seq_len
    saved = {}
    for key, val in census.per_token.items():
        per = shape.seq_len if key in PER_POSITION else tokens
        saved[f"activations.{key}"] = int(round(val * per))
    for key, val in census.fixed.items():
        saved[f"activations.{key}"] = saved.get(f"activations.{key}", 0) + int(val)
    if census.weight_copies:
        saved["activations.autocast_weight_copies"] = int(census.weight_copies)
    recompute = int(max(s.bytes_for(tokens) for s in census.layer_kinds)) if stack.grad_checkpointing else 0
    # Backward of the loss: grad of log_softmax output and its input, both fp32 (b·s·vocab).
    loss_transient = int(2 * FP32 * arch.spec.vocab_size * tokens)
    return ActivationEstimate(saved=saved, recompute=recompute, loss_transient=loss_transient)


# Terms sized per sequence position, shared by the micro-batch's rows (not per token).
PER_POSITION = {"rope.cos_sin"}


@dataclass
class _Census:
    per_token: dict[str, float]  # bytes per token (PER_POSITION terms: per position), by term
    fixed: dict[str, float]  # bytes per micro-batch
    weight_copies: float  # autocast's 16-bit weight copies (independent of the batch)
    layer_kinds: list[Saved]  # one per distinct decoder-layer kind (checkpointing recomputes the largest)


def _census(arch: Architecture, stack: Stack, seq_len: int, padded: bool) -> _Census:
    key = ("census", stack.key, seq_len, padded)
    if key not in arch._memo:
        arch._memo[key] = _count(arch, stack, Shape(micro_batch=1, seq_len=seq_len, padded=padded))
    return arch._memo[key]


def _count(arch: Architecture, stack: Stack, shape: Shape) -> _Census:
    spec = arch.spec
    a = act_bytes(stack)
    h, v = spec.hidden_size, spec.vocab_size
    amp = stack.precision.startswith("amp")
    fam = families.traits(spec.family)
    totals: dict[str, float] = {}
    fixed: dict[str, float] = {}
    by_kind: dict[tuple, Saved] = {}  # layers of one kind (dense / MoE) save the same bytes
    counts: dict[tuple, int] = {}
    for i, layer in enumerate(arch.layers):
        key = (layer.moe, len(layer.linears), i == 0)
        if key not in by_kind:
            by_kind[key] = layer_saved(arch, layer, stack, shape, first=i == 0)
        counts[key] = counts.get(key, 0) + 1
    if not stack.grad_checkpointing:
        for i, layer in enumerate(arch.layers):  # summed in layer order, as the per-term totals are reported
            s = by_kind[(layer.moe, len(layer.linears), i == 0)]
            for k, val in s.terms.items():
                totals[f"layers.{k}"] = totals.get(f"layers.{k}", 0.0) + val
            for k, val in s.fixed.items():
                fixed[f"layers.{k}"] = fixed.get(f"layers.{k}", 0.0) + val
    else:
        # Reentrant checkpointing keeps each layer's input hidden states (residual stream).
        stream = FP32 if amp else a
        totals["checkpoint.layer_inputs"] = len(arch.layers) * stream * h

    # Rotary cos/sin, computed once per forward and shared by every layer.
    # Shape (1, s, head_dim): one copy per sequence position, not per batch row.
    # (families.json rope_tables: Gemma 3 computes a local and a global table)
    totals["rope.cos_sin"] = 2 * a * spec.head_dim * fam.rope_tables
    if stack.method == "full":
        totals["embedding.indices"] = INT64
    # Final norm, lm_head input, loss.
    fin = Saved()
    _norm(fin, "final_norm", h, stack, fam.norm_weight_offset_fp32)
    for k, val in fin.terms.items():
        totals[k] = totals.get(k, 0.0) + val
    if stack.method == "full":  # lm_head (or the tied embedding) trains: keeps its input
        totals["lm_head.input"] = 2 * h if amp else a * h
    if fam.final_logit_softcap:
        totals["logits.softcap_tanh"] = a * v
    totals["loss.log_softmax_fp32"] = FP32 * v
    totals["loss.targets"] = INT64

    copies = 0.0
    if amp:
        # bf16 copies of every linear weight, lm_head included. With checkpointing the layers run
        # under no_grad in forward, so only lm_head's copy is kept (the recomputed layer's own
        # copies are not counted separately).
        layers_w = 0 if stack.grad_checkpointing else arch.linear_weights_unscaled * arch.scale
        copies = 2 * (layers_w + v * h)
    return _Census(totals, fixed, copies, list(by_kind.values()))
