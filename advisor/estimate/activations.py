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

Techniques, each from the code that implements it:
- Liger Kernel (TrainingArguments use_liger_kernel; liger-kernel, linkedin/Liger-Kernel):
  LigerRMSNormFunction saves its input X in the input dtype and a fp32 RSTD per row
  (src/liger_kernel/ops/rms_norm.py, commit 43c5fe1b, forward: ctx.save_for_backward(X, W, RSTD)),
  never an fp32 copy nor the normalised output; LigerSiLUMulFunction saves gate and up and
  recomputes silu in backward (src/liger_kernel/ops/swiglu.py, commit 3baaa6bb:
  ctx.save_for_backward(a, b)); LigerRopeFunction rotates q/k in place and saves only cos/sin
  (src/liger_kernel/ops/rope.py, commit dc4af7da) -- what HF's rotary already saves, so RoPE
  changes no saved byte; the fused linear cross-entropy (src/liger_kernel/ops/
  fused_linear_cross_entropy.py, commit 00eba634) computes the loss and its gradients chunk by
  chunk inside forward and saves only grad_input (BT×H, input dtype) and, when lm_head's weight
  trains, grad_weight (V×H, weight dtype): no logits, no log_softmax. Its transient is one
  chunk of logits: chunk = next_pow2(ceil(BT / ceil(V/H))) rows × V. Not modelled: Liger's
  MoE experts (LigerExperts) and q/k norms (patched for Gemma 3 only) are counted as in HF.
- chunked loss (--loss chunked): torchtune's CEWithChunkedOutputLoss (torchtune/modules/loss/
  ce_chunked_output_loss.py, num_output_chunks=8) applied to the model's logits: each of 8
  sequence chunks is upcast to fp32 and put through F.cross_entropy on its own. Eagerly, every
  chunk's fp32 log_softmax is still saved (4·V per token, as the standard loss), but backward
  holds one chunk's fp32 gradients at a time instead of the whole b·s·V.
- TRL's fused LM head (--loss trl, the default: what the launch bundle's train.py runs, TRL 1.16.0 SFTTrainer;
  trl/trainer/sft_trainer.py calls add_fused_lm_head(outputs=("log_probs", "entropy", "is_top1")), and compute_loss
  takes -log_probs as the per-token loss; trl/trainer/utils.py _fused_forward): the backbone's last hidden states
  at positions with a label (hidden_states[mask], a copy on CUDA) go through trl/kernels/chunked_logprob.py
  ChunkedLogProbFunction, which projects 4096 tokens × 32768 vocabulary entries at a time into one reused tile and
  folds it into online-logsumexp statistics; it saves hidden, weight, bias, targets (labels[mask], int64), log_z and
  the entropy (fp32 per token), never the logits. Backward recomputes each tile and accumulates grad_hidden (and
  grad_weight when lm_head trains) in fp32. Liger's fused loss is switched off under it (sft_trainer.py).
- Cut Cross-Entropy (--loss cce; Apple's cut-cross-entropy 25.1.1, cut_cross_entropy/cce.py
  LinearCrossEntropyFunction, used by axolotl's CutCrossEntropyPlugin): Triton kernels compute the log-sum-exp and
  the target logit blockwise in on-chip memory; forward saves e (the lm_head input), c (the weight), lse (fp32),
  the targets (the batch's own labels), the int32 indices of valid positions (utils._build_flat_valids) and a fp32
  per-vocabulary logit average (cce_lse_forward_kernel return_logit_avg) -- no logits, no log-softmax. Backward
  (cce_backward.py cce_backward_kernel) recomputes the blocks and writes de = zeros_like(e) and, when lm_head trains,
  dc = zeros_like(c, dtype=e.dtype).
- DoRA (peft 0.21.2 tuners/lora/variants.py DoraLinearVariant.forward, tuners/lora/dora.py
  DoraLinearLayer.forward): besides LoRA's tensors, the base result (dropout 0: the base
  layer's output; dropout > 0: F.linear(dropout(x), W.to(x.dtype)), which also saves the cast
  weight when the adapter dtype differs) and the adapter result lora_B(lora_A(x)), each read by
  a multiplication with the trainable magnitude/‖W+sBA‖ scale.
- LoRA on lm_head / embed_tokens (peft lora.Linear / lora.Embedding) and peft modules_to_save
  (a trainable copy of embed_tokens / lm_head): lm_head's input (adapter cast or the copy's
  input), the embedding's token ids and rank-r lookup, and -- once the embedding output needs a
  gradient -- the first layer's tensors as in any other layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from advisor.model import families
from advisor.model.architecture import ATTN_IN, ATTN_OUT, MLP_IN, SHARED_IN, Architecture, Layer
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
    "loss.flce_grad_input": "Liger fused linear cross-entropy: gradient w.r.t. the last hidden states, computed in forward",
    "loss.trl_hidden": "TRL fused LM head: the hidden states of labelled positions (hidden_states[mask])",
    "loss.trl_targets": "TRL fused LM head: labels[mask] (int64) and the label mask (bool)",
    "loss.trl_logz_entropy": "TRL fused LM head: log-sum-exp and entropy per token (fp32)",
    "loss.cce_hidden": "Cut Cross-Entropy: e, the lm_head input, kept for the blockwise backward",
    "loss.cce_lse_valids": "Cut Cross-Entropy: lse (fp32) and the valid positions' indices (int32)",
    "loss.cce_logit_avg": "Cut Cross-Entropy: per-vocabulary logit average (fp32), orders the backward's blocks",
    "loss.flce_grad_weight": "Liger fused linear cross-entropy: lm_head's weight gradient, computed in forward",
    "norms.input": "RMSNorm inputs in the activation dtype (Liger RMSNorm saves X and a fp32 rstd)",
    "final_norm.input": "final norm input in the activation dtype (Liger RMSNorm)",
    "mlp.gate_up": "gate and up outputs (Liger SwiGLU/GeGLU recomputes the activation in backward)",
    "dora.base_result": "DoRA: the base layer's result, read by the magnitude scale (one per adapter)",
    "dora.lora_result": "DoRA: lora_B(lora_A(x)), read by the magnitude scale (one per adapter)",
    "dora.scales": "DoRA: ‖W+sBA‖ and magnitude/‖W+sBA‖ per output feature, per adapter",
    "dora.weight_copies": "DoRA with dropout: each adapted weight cast to the adapter dtype (QDoRA: dequantised from "
                          "4-bit) for F.linear, kept for backward (peft 0.21.2 tuners/lora/dora.py DoraLinearLayer.forward)",
    "lm_head.lora_input": "lm_head adapter input (cast to the adapter dtype / after dropout)",
    "lm_head.lora_dropout_mask": "lm_head adapter dropout mask (bool on CUDA)",
    "lm_head.lora_rank": "lm_head adapter rank-r intermediate",
    "embedding.lora_rank": "embed_tokens adapter: rank-r lookup read by lora_embedding_B",
    "autocast_weight_copies": "bf16 copies of every linear weight kept by autocast",
}


# Where a term's tensor comes from, for the terms that one library function makes (the rest: DEFAULT_SOURCE).
_DORA_PY = "peft 0.21.2 src/peft/tuners/lora/dora.py DoraLinearLayer.forward"
TERM_SOURCES = {
    "dora.base_result": f"{_DORA_PY} lines 163-165: F.linear(x, weight), read by (mag_norm_scale - 1) * base_result",
    "dora.lora_result": f"{_DORA_PY} lines 155, 165: lora_B(lora_A(x)), read by mag_norm_scale * lora_result",
    "dora.scales": f"{_DORA_PY} lines 143-153: weight_norm (detached) and mag_norm_scale = magnitude / weight_norm",
    "dora.weight_copies": (f"{_DORA_PY} lines 141-142 and 163: weight = dequantize_module_weight(base_layer)"
                           ".to(x.dtype), a fresh tensor when the dtypes differ or the weight is 4-bit, kept by "
                           "F.linear for the input's gradient; measured by tests/advisor/estimate/test_dora_saved_tensors.py"),
}
DEFAULT_SOURCE = "advisor.activations (transformers/peft forward code)"


def _term_key(term: str) -> str:
    return term.removeprefix("activations.").removeprefix("layers.")


def describe(term: str) -> str:
    """Plain-language meaning of an activation term such as 'layers.mlp.gate_act_up'."""
    return TERMS.get(_term_key(term), "saved for backward")


def term_source(term: str) -> str:
    """The code a saved-tensor term is read from (file, function and lines where one function makes it)."""
    return TERM_SOURCES.get(_term_key(term), DEFAULT_SOURCE)


def act_bytes(stack: Stack) -> int:
    """Bytes per element of activations between layers."""
    return 4 if stack.pure_fp32 else 2


def adapter_bytes(stack: Stack) -> int:
    if stack.pure_fp32:
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
    The norm's result is a separate tensor, saved by the linears that read it (_linears).
    Liger's RMSNorm saves its input as it came (residual dtype) and a fp32 rstd, whatever trains."""
    if stack.liger:
        saved.add(f"{name}.input", residual_bytes(stack) * h)
        saved.add(f"{name}.rsqrt", FP32)
        return
    saved.add(f"{name}.input_fp32", FP32 * h)
    saved.add(f"{name}.rsqrt", FP32)  # (b, s, 1) fp32 reciprocal RMS
    if stack.is_full:
        fp32_out = fp32_norm or stack.mixed_precision or stack.pure_fp32
        saved.add(f"{name}.normalised", (FP32 if fp32_out else act_bytes(stack)) * h)


def residual_bytes(stack: Stack) -> int:
    """Dtype of the residual stream between layers: fp32 under autocast (fp32 weights) and in fp32."""
    return FP32 if stack.mixed_precision else act_bytes(stack)


def weight_bytes(stack: Stack) -> int:
    """Bytes per element of the frozen base weights as a layer reads them (QLoRA: dequantised 16-bit)."""
    return 4 if stack.fp32_weights else 2


def embedding_needs_grad(arch: Architecture, stack: Stack) -> bool:
    """Whether the embedding output requires a gradient, so the first layer saves what the others do:
    full fine-tuning, checkpointing (peft/Trainer enable_input_require_grads), or a trainable embedding
    (LoRA on embed_tokens, modules_to_save embed_tokens)."""
    if stack.is_full or stack.grad_checkpointing:
        return True
    return "embed_tokens" in arch.head_targets(stack.lora_targets) or "embed_tokens" in stack.saved_modules


def _stream_bytes(stack: Stack, stream: str) -> int:
    """Dtype of the tensor a linear reads: norm outputs stay fp32 under autocast."""
    if stack.mixed_precision and stream in (ATTN_IN, MLP_IN, SHARED_IN):
        return FP32
    return act_bytes(stack)


def lora_target_names(arch: Architecture, stack: Stack) -> set[str]:
    if stack.is_full:
        return set()
    return {lin.name for lin in arch.lora_targeted(stack.lora_targets)}


def _linears(saved: Saved, arch: Architecture, layer: Layer, stack: Stack, attn_in_grad: bool) -> None:
    """Inputs saved by the layer's dense linears and their LoRA adapters (experts: _mlp).

    Dropout keeps a bool mask on CUDA (fused native_dropout); on the CPU at::_dropout keeps a
    noise tensor of the input dtype instead (advisor.measure converts that to CUDA terms).
    `attn_in_grad` is False for the first
    layer of a frozen-embedding model: nothing upstream needs a gradient, so the dropout there
    saves nothing."""
    amp = stack.mixed_precision
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
        if stack.is_full:
            if amp and sb == FP32:
                saved.add("linear_inputs.autocast_casts", 2 * width)  # each linear casts separately
            elif lin.stream == ATTN_OUT and fused_attention:
                pass  # o_proj reads the attention kernel's output itself (same storage, counted there)
            else:
                once(lin.stream, sb * width, f"linear_inputs.{lin.stream}")
            continue
        if stack.is_qlora and stack.bnb_saves_inputs:
            once(lin.stream, sb * width, "qlora.saved_inputs")
        if lin.name not in targets:
            continue  # frozen linear: backward needs only its weight
        lora_adapter(saved, stack, width, lin.out_features, sb, mask_needed,
                     lambda nbytes, stream=lin.stream: once(stream, nbytes, "lora.inputs"))
        if stack.dora:
            _dora_fixed(saved, stack, width, lin.out_features, attn_in_grad or lin.stream != ATTN_IN)


def _dora_fixed(saved: Saved, stack: Stack, width: int, out: int, input_grad: bool) -> None:
    """Per-adapter DoRA tensors independent of the batch: ‖W+sBA‖ (kept by the division that forms the
    scale) and the two scale vectors the products keep; with dropout > 0, the weight cast to the adapter
    dtype that F.linear keeps for the input's gradient (peft dora.py: weight = weight.to(x.dtype)).
    Under autocast the cast is autocast's cached 16-bit copy, already among the weight copies. Under QLoRA (QDoRA)
    the weight is always a fresh tensor: dora.py dequantize_module_weight(base_layer) dequantises the 4-bit weight
    every forward (peft utils/integrations.py dequantize_bnb_weight), and F.linear keeps that copy for backward."""
    ab = adapter_bytes(stack)
    saved.add_fixed("dora.scales", 3 * ab * out)
    amp = stack.mixed_precision
    fresh = stack.is_qlora or ab != weight_bytes(stack)
    if stack.lora_dropout > 0 and not amp and input_grad and fresh:
        saved.add_fixed("dora.weight_copies", ab * width * out)


def lora_adapter(saved: Saved, stack: Stack, width: int, out: int, sb: int, mask_needed: bool, share,
                 prefix: str = "lora") -> None:
    """What one peft LoRA linear (lora.Linear.forward) saves per token on top of its frozen base, and DoRA's
    extra tensors (DoraLinearVariant.forward). `share(nbytes)` counts an input the base stream already
    provides (dropout 0, adapter dtype = input dtype); `prefix` names the terms (lm_head adapters apart)."""
    amp = stack.mixed_precision
    ab = adapter_bytes(stack)
    dropout = stack.lora_dropout > 0
    names = {"mask": f"{prefix}.dropout_masks", "input": f"{prefix}.inputs", "rank": f"{prefix}.rank"}
    if prefix == "lm_head":
        names = {"mask": "lm_head.lora_dropout_mask", "input": "lm_head.lora_input", "rank": "lm_head.lora_rank"}
    if amp:
        # autocast: lora_A reads its own bf16 cast of the (possibly dropped-out) input
        if mask_needed:
            saved.add(names["mask"], BOOL * width)
        saved.add(names["input"], 2 * width)
        saved.add(names["rank"], 2 * stack.lora_rank)
    else:
        if dropout:
            if mask_needed:
                saved.add(names["mask"], BOOL * width)
            saved.add(names["input"], ab * width)  # dropout output, one per adapter
        elif ab != sb:
            saved.add(names["input"], ab * width)  # x.to(adapter dtype), one per adapter
        else:
            share(sb * width)
        saved.add(names["rank"], ab * stack.lora_rank)
    if stack.dora:
        # peft DoraLinearLayer.forward: result_dora = (m/‖W+sBA‖ - 1)·base_result + m/‖W+sBA‖·lora_result·s.
        # Both products keep their tensor operand for the magnitude's gradient. Dropout 0: base_result is
        # the base layer's own output (its dtype); dropout > 0: F.linear(dropout(x), W.to(x.dtype)) in the
        # adapter dtype. Under autocast both are the autocast dtype.
        rb = 2 if amp else (ab if dropout else act_bytes(stack))
        saved.add("dora.base_result", rb * out)
        saved.add("dora.lora_result", (2 if amp else ab) * out)


def _attention(saved: Saved, arch: Architecture, stack: Stack, s: int, padded: bool = False) -> None:
    spec = arch.spec
    a = act_bytes(stack)
    q = spec.num_attention_heads * spec.head_dim
    kv = spec.num_key_value_heads * spec.head_dim
    heads = spec.num_attention_heads
    fam = families.traits(spec.family)
    if spec.qk_norm:
        saved.add("attention.qk_norm", FP32 * (q + kv))
        if stack.is_full:
            saved.add("attention.qk_norm", (FP32 if fam.norm_weight_offset_fp32 else a) * (q + kv))
    if stack.attention == "eager":
        rep = heads // max(spec.num_key_value_heads, 1)
        k_saved = q if rep > 1 else kv
        saved.add("attention.qkv", a * (q + 2 * k_saved))
        scores = heads * s  # per token: one row of the b·heads·s·s matrix
        if fam.attention_softcap:
            saved.add("attention.softcap", a * scores)
        if stack.pure_fp32:
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
    full = stack.is_full
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
    if stack.liger:
        # LigerSiLUMulFunction / LigerGELUMulFunction: gate and up only, the activation recomputed
        saved.add("mlp.gate_up", 2 * a * f)
        return
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
    input_grad = not first or embedding_needs_grad(arch, stack)
    for i in range(spec.norms_per_layer):  # input/post-attention (+ Gemma's pre/post feed-forward)
        if i > 0 or input_grad:
            _norm(saved, "norms", h, stack, fp32_norm)
    _attention(saved, arch, stack, shape.seq_len, shape.padded)
    _linears(saved, arch, layer, stack, input_grad)
    _mlp(saved, arch, layer, stack)
    return saved


@dataclass
class LossTransient:
    """The loss path's largest short-lived buffer, named and sourced for the overhead table."""

    name: str
    bytes: int
    formula: str
    source: str


@dataclass
class ActivationEstimate:
    saved: dict[str, int]  # bytes saved at the end of forward, by term
    recompute: int  # one layer's activations rebuilt during backward (checkpointing)
    loss_transient: int  # the loss path's transient (fp32 logits gradients; one chunk with a chunked/fused loss)
    loss: LossTransient | None = None

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
    if recompute and stack.precision.startswith("amp"):
        # the recomputed layer runs under autocast again: each linear saves its weight's 16-bit cast for backward
        # (measured on the CPU by benchmarks/rl_census.py, LoRA amp-bf16 with checkpointing)
        recompute += int(2 * max(sum(lin.weight_params for lin in layer.linears) for layer in arch.layers) * arch.scale)
    loss = loss_transient(arch, stack, shape)
    return ActivationEstimate(saved=saved, recompute=recompute, loss_transient=loss.bytes, loss=loss)


# torchtune CEWithChunkedOutputLoss(num_output_chunks=8): the default of every torchtune recipe config.
CHUNKED_LOSS_CHUNKS = 8


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def liger_chunk_rows(tokens: int, vocab: int, hidden: int) -> int:
    """Rows of logits Liger's fused linear cross-entropy materialises at once: inc_factor = ceil(V / H),
    chunk = min(BT, next_pow2(ceil(BT / inc_factor))) (fused_linear_cross_entropy_forward, chunk_mem_const=1)."""
    inc = -(-vocab // hidden)
    return min(tokens, _next_pow2(-(-tokens // inc)))


# trl/kernels/chunked_logprob.py @1.16.0: TOKEN_CHUNK_SIZE tokens × _CHUNKED_LOGPROB_CHUNK_SIZE vocabulary entries
# per projection tile (trl/trainer/utils.py)
TRL_TOKEN_CHUNK = 4096
TRL_VOCAB_CHUNK = 32768


def _lm_head_trains(stack: Stack) -> bool:
    return stack.method == "full" or "lm_head" in stack.saved_modules


def loss_transient(arch: Architecture, stack: Stack, shape: Shape) -> LossTransient:
    """The loss path's transient at the start of backward (standard, chunked, TRL, CCE) or inside forward (Liger)."""
    v, h = arch.spec.vocab_size, arch.spec.hidden_size
    tokens = shape.micro_batch * shape.seq_len
    a = act_bytes(stack)
    w = 4 if stack.precision in ("fp32", "amp-bf16", "amp-fp16") else 2  # lm_head weight dtype
    if stack.loss == "trl":
        tile = min(tokens, TRL_TOKEN_CHUNK) * min(v, TRL_VOCAB_CHUNK) * a
        weight = v * h * (FP32 + w) if _lm_head_trains(stack) else 0
        return LossTransient(
            "overhead.loss_gradients", int(tokens * h * (FP32 + a) + tile + weight),
            f"b·s × hidden × (4 + {a}) B: grad_hidden accumulated in fp32 and its {a}-byte copy, one "
            f"{min(tokens, TRL_TOKEN_CHUNK):,} × {min(v, TRL_VOCAB_CHUNK):,} logits tile"
            + (", lm_head's gradient in fp32 and its cast" if weight else ""),
            "TRL 1.16.0 trl/kernels/chunked_logprob.py ChunkedLogProbFunction.backward: grad_hidden (and grad_weight) "
            "= torch.zeros(..., dtype=float32), mm_buf = torch.empty((min(N, TOKEN_CHUNK_SIZE), chunk_size)), "
            "grad_hidden.to(hidden.dtype)",
        )
    if stack.loss == "cce":
        weight = v * h * a if _lm_head_trains(stack) else 0
        return LossTransient(
            "overhead.loss_gradients", int(tokens * h * a + weight + 12 * v),
            f"b·s × hidden × {a} B: de = zeros_like(e)" + (", dc = zeros_like(c) in the activation dtype"
                                                           if weight else "")
            + ", the vocabulary ordering (argsort int64 → int32)",
            "cut-cross-entropy 25.1.1 cut_cross_entropy/cce_backward.py cce_backward_kernel (de, dc = zeros_like); "
            "cce.py sort_logit_avg",
        )
    if stack.liger:
        rows = liger_chunk_rows(tokens, v, h)
        return LossTransient(
            "overhead.loss_chunk_logits", rows * v * a + FP32 * tokens,
            f"{rows:,} rows × vocab × {a} B: one chunk of logits (rows = next_pow2(b·s / ceil(V/H))), "
            "plus the fp32 per-token loss",
            "liger-kernel ops/fused_linear_cross_entropy.py (commit 00eba634) fused_linear_cross_entropy_forward: "
            "inc_factor = cdiv(V, H), chunk_size = next_power_of_2(cdiv(BT, inc_factor)); loss_1d fp32",
        )
    if stack.chunked_loss:
        rows = shape.micro_batch * -(-shape.seq_len // CHUNKED_LOSS_CHUNKS)
        return LossTransient(
            "overhead.loss_gradients", (2 * FP32 + a) * v * rows,
            f"one chunk of {rows:,} tokens × vocab × (2 × 4 B + {a} B): fp32 grads of its log_softmax output "
            f"and input, and their {a}-byte cast (8 chunks, one at a time)",
            "torchtune CEWithChunkedOutputLoss (modules/loss/ce_chunked_output_loss.py, num_output_chunks=8): "
            "each chunk upcast to fp32 and put through F.cross_entropy separately",
        )
    return LossTransient(
        "overhead.loss_gradients", int(2 * FP32 * v * tokens),
        "2 × b·s·vocab × 4 B: fp32 grads of log_softmax output and input",
        "transformers ForCausalLMLoss upcasts logits to fp32; torch log_softmax backward",
    )


def dora_transient(arch: Architecture, stack: Stack) -> int:
    """DoRA's forward-time peak inside one adapted layer (peft dora.py, with grad enabled):
    get_lora_weight builds lora_B(lora_A(eye(in))) -- the in×in identity stays saved by lora_A while
    the in×out product lives -- then get_weight_norm adds s·BA to W cast to the adapter dtype
    (a copy when the dtypes differ) and takes the row norms: in² + in·r + (3 + copy)·in·out elements
    of the adapter dtype (QLoRA: plus the dequantised 16-bit weight). The largest adapted module counts."""
    if not stack.dora or stack.is_full:
        return 0
    ab, r = adapter_bytes(stack), stack.lora_rank
    copy = 1 if ab != weight_bytes(stack) else 0
    deq = 2 if stack.is_qlora else 0
    sizes = [(lin.in_features, lin.out_features) for lin in arch.lora_targeted(stack.lora_targets)]
    heads = arch.head_targets(stack.lora_targets)
    v, h = arch.spec.vocab_size, arch.spec.hidden_size
    if "lm_head" in heads:
        sizes.append((h, v))
    best = max((ab * (i * i + i * r + (3 + copy) * i * o) + deq * i * o for i, o in sizes), default=0)
    if "embed_tokens" in heads:  # DoraEmbeddingLayer: (A @ B).T and W + s·BA, no identity matrix
        best = max(best, ab * 3 * v * h)
    return int(best)


# Terms sized per sequence position, shared by the micro-batch's rows (not per token).
PER_POSITION = {"rope.cos_sin"}


@dataclass
class _Census:
    per_token: dict[str, float]  # bytes per token (PER_POSITION terms: per position), by term
    fixed: dict[str, float]  # bytes per micro-batch
    weight_copies: float  # autocast's 16-bit weight copies (independent of the batch)
    layer_kinds: list[Saved]  # one per distinct decoder-layer kind (checkpointing recomputes the largest)


# Stack fields the saved-tensor census never reads (they move model states, not activations): one
# census serves every sharding, GPU count, offload and optimizer of the same training recipe.
_STATE_ONLY = frozenset({"gpus", "sharding", "offload", "optimizer"})


def _census(arch: Architecture, stack: Stack, seq_len: int, padded: bool) -> _Census:
    key = ("census", tuple(v for k, v in stack.__dict__.items() if k not in _STATE_ONLY), seq_len, padded)
    if key not in arch._memo:
        arch._memo[key] = _count(arch, stack, Shape(micro_batch=1, seq_len=seq_len, padded=padded))
    return arch._memo[key]


def _count(arch: Architecture, stack: Stack, shape: Shape) -> _Census:
    """The saved-tensor census of one micro-batch row: the decoder layers, the rotary tables, the embedding, the
    final norm and loss path, and autocast's weight copies."""
    spec = arch.spec
    a = act_bytes(stack)
    h = spec.hidden_size
    fam = families.traits(spec.family)
    totals: dict[str, float] = {}
    fixed: dict[str, float] = {}
    by_kind = _layer_kinds(arch, stack, shape)
    _layer_terms(arch, stack, by_kind, totals, fixed)
    # Rotary cos/sin, computed once per forward and shared by every layer.
    # Shape (1, s, head_dim): one copy per sequence position, not per batch row.
    # (families.json rope_tables: Gemma 3 computes a local and a global table)
    totals["rope.cos_sin"] = 2 * a * spec.head_dim * fam.rope_tables
    full = stack.is_full
    heads = () if full else arch.head_targets(stack.lora_targets)
    saved_modules = () if full else stack.saved_modules
    _embedding_terms(stack, h, heads, saved_modules, totals, fixed)
    fin = _final_saved(arch, stack, heads, saved_modules, fixed)
    for k, val in fin.terms.items():
        totals[k] = totals.get(k, 0.0) + val
    for k, val in fin.fixed.items():
        fixed[k] = fixed.get(k, 0.0) + val
    return _Census(totals, fixed, _weight_copies(arch, stack), list(by_kind.values()))


def _layer_kinds(arch: Architecture, stack: Stack, shape: Shape) -> dict[tuple, Saved]:
    """What one layer of each kind saves: layers of one kind (dense / MoE, its linears, the first) save the same
    bytes. Keyed by `_kind`, in the order the kinds first appear."""
    by_kind: dict[tuple, Saved] = {}
    for i, layer in enumerate(arch.layers):
        key = _kind(i, layer)
        if key not in by_kind:
            by_kind[key] = layer_saved(arch, layer, stack, shape, first=i == 0)
    return by_kind


def _kind(i: int, layer: Layer) -> tuple:
    return layer.moe, len(layer.linears), i == 0


def _layer_terms(arch: Architecture, stack: Stack, by_kind: dict[tuple, Saved], totals: dict[str, float],
                 fixed: dict[str, float]) -> None:
    """The decoder layers' terms into `totals` / `fixed`: every layer's saved tensors, or with checkpointing
    only each layer's input."""
    if stack.grad_checkpointing:
        # Reentrant checkpointing keeps each layer's input hidden states (residual stream).
        stream = FP32 if stack.mixed_precision else act_bytes(stack)
        totals["checkpoint.layer_inputs"] = len(arch.layers) * stream * arch.spec.hidden_size
        return
    for i, layer in enumerate(arch.layers):  # summed in layer order, as the per-term totals are reported
        s = by_kind[_kind(i, layer)]
        for k, val in s.terms.items():
            totals[f"layers.{k}"] = totals.get(f"layers.{k}", 0.0) + val
        for k, val in s.fixed.items():
            fixed[f"layers.{k}"] = fixed.get(f"layers.{k}", 0.0) + val


def _embedding_terms(stack: Stack, h: int, heads, saved_modules, totals: dict[str, float],
                     fixed: dict[str, float]) -> None:
    """The embedding's saved tensors when its weight (or an adapter on it) trains."""
    if stack.is_full or "embed_tokens" in heads or "embed_tokens" in saved_modules:
        totals["embedding.indices"] = INT64  # F.embedding keeps the token ids for its weight gradient
    if "embed_tokens" not in heads:
        return
    # peft lora.Embedding.forward: after_A = F.embedding(x, lora_embedding_A.T), kept by after_A @ B
    totals["embedding.lora_rank"] = (2 if stack.mixed_precision else adapter_bytes(stack)) * stack.lora_rank
    if stack.dora:  # DoraEmbeddingVariant: the scale multiplies the base and the adapter outputs
        totals["dora.base_result"] = totals.get("dora.base_result", 0.0) + act_bytes(stack) * h
        totals["dora.lora_result"] = totals.get("dora.lora_result", 0.0) + adapter_bytes(stack) * h
        fixed["dora.scales"] = fixed.get("dora.scales", 0.0) + 3 * adapter_bytes(stack) * h


def _final_saved(arch: Architecture, stack: Stack, heads, saved_modules, fixed: dict[str, float]) -> Saved:
    """Final norm, lm_head input and the loss path's saved tensors (per token); the loss path's per-micro-batch
    buffers go into `fixed` directly."""
    fam = families.traits(arch.spec.family)
    fin = Saved()
    _norm(fin, "final_norm", arch.spec.hidden_size, stack, fam.norm_weight_offset_fp32)
    lm_head_trains = stack.is_full or "lm_head" in saved_modules  # the weight (or a trainable copy) gets a gradient
    if stack.loss == "trl":
        _trl_loss(fin, stack, arch.spec.hidden_size)
    elif stack.loss == "cce":
        _cce_loss(fin, stack, arch.spec, fixed)
    elif stack.liger:
        _liger_loss(fin, stack, arch.spec, lm_head_trains, fixed)
    else:
        _logits_loss(fin, stack, arch.spec, fam, heads, lm_head_trains)
    return fin


def _trl_loss(fin: Saved, stack: Stack, h: int) -> None:
    # ChunkedLogProbFunction.forward: ctx.save_for_backward(hidden, weight, bias, targets, log_z, entropy); hidden
    # and targets are hidden_states[mask] / labels[mask] (copies on CUDA), log_z and entropy fp32 per token; the
    # weight is lm_head's own (a parameter, or peft's trainable copy). Gemma 2's soft-capping is inside the kernel.
    fin.add("loss.trl_hidden", residual_bytes(stack) * h)
    fin.add("loss.trl_targets", INT64 + 1)  # and the bool mask the masked fill/scatter of the outputs keeps
    fin.add("loss.trl_logz_entropy", 2 * FP32)


def _cce_loss(fin: Saved, stack: Stack, spec, fixed: dict[str, float]) -> None:
    # LinearCrossEntropyFunction.forward: ctx.save_for_backward(e, c, lse, targets, valids, logit_avg): e the lm_head
    # input (the final norm's output), lse fp32, valids int32 per valid token; targets are the batch's labels
    fin.add("loss.cce_hidden", residual_bytes(stack) * spec.hidden_size)
    fin.add("loss.cce_lse_valids", FP32 + 4)
    fixed["loss.cce_logit_avg"] = float(FP32 * spec.vocab_size)


def _liger_loss(fin: Saved, stack: Stack, spec, lm_head_trains: bool, fixed: dict[str, float]) -> None:
    # LigerFusedLinearCrossEntropyFunction.forward (reduction mean/sum): ctx.save_for_backward(grad_input,
    # grad_weight, grad_bias) -- the hidden states' gradient (input dtype) and, when lm_head's weight
    # trains, its V×H gradient in the weight's dtype (accum_dtype None). No logits, no targets; Gemma 2's
    # final soft-capping happens inside the kernel.
    h, v = spec.hidden_size, spec.vocab_size
    fin.add("loss.flce_grad_input", residual_bytes(stack) * h)
    if lm_head_trains:
        fixed["loss.flce_grad_weight"] = float(v * h * (4 if stack.fp32_weights else 2))


def _logits_loss(fin: Saved, stack: Stack, spec, fam, heads, lm_head_trains: bool) -> None:
    """Standard and chunked (torchtune) loss: lm_head's input (and an adapter's), the soft-cap, and every token's
    fp32 log_softmax until backward."""
    h, v = spec.hidden_size, spec.vocab_size
    a = act_bytes(stack)
    amp = stack.mixed_precision
    if lm_head_trains:  # lm_head (the tied embedding, or peft's trainable copy) keeps its input
        fin.add("lm_head.input", 2 * h if amp else a * h)
    if "lm_head" in heads:  # peft lora.Linear on lm_head: the adapter's input, mask and rank-r tensor
        sb = FP32 if amp else a  # the final norm's output dtype
        lora_adapter(fin, stack, h, v, sb, True, lambda nbytes: fin.add("lm_head.lora_input", nbytes),
                     prefix="lm_head")
        if stack.dora:
            _dora_fixed(fin, stack, h, v, True)
    if fam.final_logit_softcap:
        fin.add("logits.softcap_tanh", a * v)
    # Standard and chunked (torchtune) loss alike keep every token's fp32 log_softmax until backward.
    fin.add("loss.log_softmax_fp32", FP32 * v)
    fin.add("loss.targets", INT64)


def _weight_copies(arch: Architecture, stack: Stack) -> float:
    """Autocast's 16-bit copies of the linear weights (mixed precision only), independent of the batch."""
    if not stack.mixed_precision:
        return 0.0
    # bf16 copies of every linear weight, lm_head included. With checkpointing the layers run
    # under no_grad in forward, so only lm_head's copy is kept (the recomputed layer's own
    # copies are not counted separately).
    layers_w = 0 if stack.grad_checkpointing else arch.linear_weights_unscaled * arch.scale
    # Liger's, TRL's and CCE's fused losses use lm_head's weight inside an autograd.Function (autocast's weight
    # cache is not involved: TRL casts each tile's slice of it, CCE's kernels read it as it is): not cached.
    fused = stack.liger_loss or stack.loss in ("trl", "cce")
    return 2 * (layers_w + (0 if fused else arch.spec.vocab_size * arch.spec.hidden_size))
