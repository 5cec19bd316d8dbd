"""Time model: how many training tokens per second a stack reaches on a set of GPUs.

One optimizer step on each GPU is

    step = grad_accum × max(GPU work of one micro-batch, host dispatch of its kernels)
           + optimizer step + communication that compute does not hide + fixed step overhead

and the GPU work of one micro-batch is a sum of named mechanisms, each from a count:

* **matmuls** — FLOPs per token after Kaplan et al. 2020 and PaLM (Chowdhery et al. 2022, app. B):
  2 per weight forward, 2 more for input gradients, 2 more for weight gradients of trained weights
  (LoRA/QLoRA: frozen weights get none), one more forward with activation checkpointing
  (Korthikanti et al. 2022, §4). They run at the dense peak *as the card sustains it* (the maximum
  achievable matmul FLOPS measured per card, mfu.json `sustained_matmul`) times the framework's fitted
  matmul efficiency — and never faster than the weights can be read from memory (roofline: a pass
  over M tokens reads every weight once, so at small M the weight traffic, not the FLOPs, sets the
  time; for MoE every expert's weights are read while each sees only M·k/E tokens).
* **attention** — 2·2·s_ctx·d_attn FLOPs per token per layer forward (QKᵀ and A·V over the average
  causal context), backward 2×, at the fused kernel's published utilisation (FlashAttention-2 paper
  on A100, FlashAttention-3 paper for FA2 on H100); eager attention also moves its b·heads·s² score
  matrix (bytes counted from transformers' eager_attention_forward).
* **elementwise traffic** — RMSNorm, RoPE, SwiGLU, residual adds, LoRA's input casts and dropout,
  the fp32 loss path: bytes per token counted op by op from transformers' and peft's forward
  code (mfu.json `elementwise_bytes`), backward twice the forward; Liger Kernel and torch.compile
  fuse them into fewer passes (counted the same way).
* **QLoRA dequantisation** — bitsandbytes reads the NF4 weight and its absmax constants and writes a
  16-bit copy before every matmul that uses it (forward, backward, recompute).
* **DoRA** — peft recomputes the weight norm ‖W + s·BA‖ of every adapted linear in every forward.
* **MoE routing** — softmax/top-k and the gather/scatter of each token to its k experts.
* **kernel dispatch** — eager PyTorch issues every kernel from Python; when the kernels are small
  the host, not the GPU, sets the pace (kernel counts per layer in mfu.json `kernels`; one fitted
  dispatch time per kernel), and the HF stack's modeling code adds one `nn.Module` call with its hooks
  per module it runs (mfu.json `module_calls`).

The training framework (`Stack.framework`: "hf", what the launch bundle runs, or "tuned", torchtitan-like
stacks) picks the fitted matmul efficiency and per-step host cost; the sustained matmul rate is per card,
under its power and clock limits (mfu.json `sustained_matmul`). An "hf" prediction is never faster than
the best published run of any framework in its GPU class × method × model size (mfu.json `plausibility`).

The optimizer step moves its state bytes once (fused AdamW / DeepSpeed FusedAdam); communication
volumes follow the ZeRO paper (Rajbhandari et al. 2020, §7) over the named link (NVLink, PCIe — staged
through host memory where the cards have no peer-to-peer —, or the inter-node network). Every
constant is in advisor/data/mfu.json with its source, or marked fitted with the held-out figure of
`benchmarks/time_calibration.py` (leave-one-source-out cross-validation), which also writes the
per-segment error bands `band()` returns.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from advisor import techniques
from advisor.errors import BadInput
from advisor.estimate.memory import nf4_bytes_per_param
from advisor.results import StepNumbers, Throughput
from advisor.stacks import Shape, Stack
from advisor.units import BILLION, BYTES_16BIT, BYTES_FP32, GB, TERA
from pricing.gpus import GPU, get_gpu

MFU_FILE = Path(__file__).parents[1] / "data" / "mfu.json"


@lru_cache(maxsize=1)
def table() -> dict:
    """The documented constants of the time model (advisor/data/mfu.json)."""
    return json.loads(MFU_FILE.read_text(encoding="utf-8"))


def gpu_class(gpu) -> str:
    """Efficiency class of a GPU from its architecture (keys of mfu.json's per-class tables)."""
    return _class_of(gpu.architecture, gpu.vendor)


@lru_cache(maxsize=256)
def _class_of(architecture: str, vendor: str) -> str:
    arch = architecture.lower()
    if vendor.upper() == "AMD":
        return "cdna"
    for key, cls in (("blackwell", "blackwell"), ("hopper", "hopper"), ("ada", "ada"),
                     ("turing", "turing"), ("volta", "volta"), ("pascal", "volta")):
        if key in arch:
            return cls
    if "ga100" in arch:
        return "ampere-datacenter"
    return "ampere-workstation"  # GA102/GA104 parts: A10, A10G, A40, A6000, RTX 3090


def segment(gpu, stack: Stack) -> str:
    """The calibration segment a setup belongs to: GPU class × method (the unit of the error band); DPO and GRPO
    steps are segments of their own (no calibration rows yet: the band of unseen classes)."""
    seg = f"{gpu_class(gpu)}/{stack.method}"
    return seg if stack.objective.is_sft else f"{seg}/{stack.objective.kind}"


# --------------------------------------------------------------------------- parameter counts


@dataclass(frozen=True)
class Counts:
    """What the time model needs to know about the model for one stack (text model only: the
    vision tower of a multimodal model does not run on text batches)."""

    layers: int
    d_attn: int  # num_attention_heads × head_dim
    matmul_active: float  # weights multiplied per token: layer linears (routed experts only) + lm_head
    layer_linear_total: float  # all layer linears (every expert)
    params_total: float
    adapters_total: float  # LoRA parameters (0 for full)
    adapters_active: float
    window: int | None
    hidden: int = 0
    head_dim: int = 0
    q_dim: int = 0
    kv_dim: int = 0
    mlp_width: float = 0.0  # SwiGLU width a token passes through per layer (MoE: k experts + shared expert)
    vocab: int = 0
    lm_head: float = 0.0  # vocab × hidden (the output projection's weights, tied or not)
    dense_weight_total: float = 0.0  # layer linears that every token multiplies (not routed experts) + routers
    expert_weight_total: float = 0.0  # routed experts' weights over all layers
    expert_tokens_fraction: float = 1.0  # k / E: share of a micro-batch's tokens each expert sees
    moe_layers: int = 0
    top_k: int = 0
    quantised_weight_total: float = 0.0  # what bitsandbytes stores in NF4 (non-expert linears of the text model)
    quantised_linears: int = 0  # Linear4bit modules in the text model
    adapted_linears: int = 0  # LoRA-wrapped linears in the text model
    adapted_in_features: float = 0.0  # Σ in_features over the adapted linears (LoRA input traffic)
    adapted_out_features: float = 0.0  # Σ out_features over the adapted linears (DoRA's output rescaling)
    adapted_weight_total: float = 0.0  # Σ in×out over the adapted linears (DoRA's weight norm)
    param_tensors: int = 0  # parameter tensors (ZeRO-3 fetches each one per pass)
    trainable_tensors: int = 0
    extra_trainable: float = 0.0  # peft modules_to_save (trained in full beside the adapters)
    lm_head_trained: bool = False


def counts(arch, stack: Stack) -> Counts:
    """Counts from the memory estimate's module inventory (`arch`, an advisor.model.architecture.Architecture;
    for a model, `Engine.of(model).arch`). Memoised per (method, rank, targets, modules_to_save)."""
    key = ("counts", stack.method, stack.lora_rank, stack.lora_targets, stack.modules_to_save)
    if key not in arch._memo:
        arch._memo[key] = _counts(arch, stack)
    return arch._memo[key]


def _counts(arch, stack: Stack) -> Counts:
    m = arch.spec
    k = m.num_experts_per_tok / m.num_experts if m.is_moe else 1.0
    lt = _LayerTotals()
    for layer in arch.layers:
        for lin in layer.linears:
            lt.add_linear(lin, k)
        lt.add_layer(layer, m)
    L = max(m.num_hidden_layers, 1)
    ad = _adapter_totals(arch, stack)
    trainable_tensors = 2 * ad.linears if stack.is_adapter else 0
    lm_head = float(m.vocab_size * m.hidden_size)
    lt.matmul_active += lm_head  # lm_head projection (tied or not, the matmul happens)
    extra, saved_tensors, lm_head_trained = _saved_modules(stack, lm_head)
    trainable_tensors += saved_tensors
    tensors = lt.tensors + 2 + (0 if m.tie_word_embeddings else 1)  # embedding, final norm, lm_head
    if stack.is_full:
        trainable_tensors = tensors
    scale = arch.scale  # --params mode: the synthetic shape stretched to the given size
    return Counts(
        layers=m.num_hidden_layers, d_attn=m.num_attention_heads * m.head_dim, matmul_active=lt.matmul_active * scale,
        layer_linear_total=lt.linear_total * scale, params_total=float(arch.params_total),
        adapters_total=ad.total, adapters_active=ad.active, window=m.sliding_window, hidden=m.hidden_size,
        head_dim=m.head_dim, q_dim=m.num_attention_heads * m.head_dim, kv_dim=m.num_key_value_heads * m.head_dim,
        mlp_width=lt.mlp_width / L, vocab=m.vocab_size, lm_head=lm_head * scale, dense_weight_total=lt.dense * scale,
        expert_weight_total=lt.experts * scale, expert_tokens_fraction=k, moe_layers=lt.moe_layers,
        top_k=m.num_experts_per_tok if m.is_moe else 0, quantised_weight_total=lt.quantised * scale,
        quantised_linears=lt.linears, adapted_linears=ad.linears, adapted_in_features=ad.in_features * scale,
        adapted_out_features=ad.out_features * scale,
        adapted_weight_total=ad.weights * scale, param_tensors=tensors, trainable_tensors=trainable_tensors,
        extra_trainable=extra * scale, lm_head_trained=lm_head_trained,
    )


@dataclass
class _LayerTotals:
    """Sums over the decoder layers, added layer by layer in order (the float sums depend on it)."""

    linear_total: float = 0.0  # every linear's weights, experts included, + routers
    matmul_active: float = 0.0  # weights a token multiplies (routed experts at k / E)
    dense: float = 0.0  # weights every token multiplies + routers
    experts: float = 0.0  # routed experts' weights
    quantised: float = 0.0  # what bitsandbytes stores in NF4 (the non-expert linears)
    linears: int = 0  # non-expert Linear modules
    tensors: int = 0  # parameter tensors
    moe_layers: int = 0
    mlp_width: float = 0.0  # Σ SwiGLU width a token passes through

    def add_linear(self, lin, k: float) -> None:
        self.linear_total += lin.weight_params
        self.matmul_active += lin.weight_params * (k if lin.expert else 1.0)
        if lin.expert:
            self.experts += lin.weight_params
            self.tensors += 1
        else:
            self.dense += lin.weight_params
            self.quantised += lin.weight_params
            self.linears += lin.count
            self.tensors += lin.count * (2 if lin.bias else 1)

    def add_layer(self, layer, m) -> None:
        """A layer's parameters beyond its linears: the MoE router (a matmul over every token) and its norms."""
        self.linear_total += layer.other_params
        self.matmul_active += layer.other_params
        self.dense += layer.other_params
        self.tensors += m.norms_per_layer + (2 if m.qk_norm else 0) + (1 if layer.other_params else 0)
        if layer.moe:
            self.moe_layers += 1
            fe = m.moe_intermediate_size or m.intermediate_size
            self.mlp_width += m.num_experts_per_tok * fe + m.shared_expert_intermediate_size
        else:
            self.mlp_width += m.intermediate_size


@dataclass(frozen=True)
class _AdapterTotals:
    """LoRA's parameters and the text model's adapted linears (all zero for full fine-tuning)."""

    total: float = 0.0
    active: float = 0.0
    linears: int = 0
    in_features: float = 0.0
    out_features: float = 0.0
    weights: float = 0.0


def _adapter_totals(arch, stack: Stack) -> _AdapterTotals:
    if not stack.is_adapter:
        return _AdapterTotals()
    adapted = 0
    adapted_in = adapted_out = adapted_w = 0.0
    ids = {id(lin) for layer in arch.layers for lin in layer.linears}  # the text model's linears
    for lin in arch.lora_targeted(stack.lora_targets):
        if id(lin) in ids:
            adapted += lin.count
            adapted_in += lin.count * lin.in_features
            adapted_out += lin.count * lin.out_features
            adapted_w += lin.weight_params
    return _AdapterTotals(total=float(arch.lora_params(stack.lora_rank, stack.lora_targets)),
                          active=float(arch.lora_params_per_token(stack.lora_rank, stack.lora_targets)),
                          linears=adapted, in_features=adapted_in, out_features=adapted_out, weights=adapted_w)


def _saved_modules(stack: Stack, lm_head: float) -> tuple[float, int, bool]:
    """(parameters, tensors, whether lm_head is one) of the modules peft trains fully beside the adapters."""
    extra, tensors, lm_head_trained = 0.0, 0, False
    if not (stack.is_adapter and stack.modules_to_save):
        return extra, tensors, lm_head_trained
    for name in (n.strip() for n in stack.modules_to_save.split(",") if n.strip()):
        if name in ("lm_head", "embed_tokens", "wte", "output"):
            extra += lm_head
            tensors += 1
            lm_head_trained |= name in ("lm_head", "output")
    return extra, tensors, lm_head_trained


# --------------------------------------------------------------------------- FLOPs


def flops_per_token(c: Counts, stack: Stack, seq_len: int) -> tuple[float, float]:
    """(model FLOPs, executed FLOPs) per trained token.

    Forward: 2 FLOPs per weight per token, plus attention 2·2·s_ctx·d_attn per layer (QKᵀ and
    A·V) with s_ctx the average causal context (s/2: FlashAttention skips masked tiles; capped
    by a sliding window). Backward: 2× forward for weights that get gradients, 1× for frozen
    weights (input gradients only), 2× for attention (no weights). Checkpointing adds one
    forward of the decoder layers (executed, not model FLOPs; the lm_head is outside them).
    """
    s_ctx = seq_len / 2 if c.window is None else min(seq_len / 2, c.window)
    attn_fwd = 4.0 * c.layers * s_ctx * c.d_attn
    mm_fwd = 2.0 * c.matmul_active
    ad_fwd = 2.0 * c.adapters_active
    if stack.is_full:
        model = 3 * mm_fwd + 3 * attn_fwd
    else:
        model = 2 * mm_fwd + 3 * attn_fwd + 3 * ad_fwd + (2.0 * c.lm_head if c.lm_head_trained else 0.0)
    executed = model + ((mm_fwd - 2.0 * c.lm_head + attn_fwd + ad_fwd) if stack.grad_checkpointing else 0.0)
    if stack.loss in ("trl", "cce"):
        # both recompute each logits tile in backward instead of keeping it (trl/kernels/chunked_logprob.py
        # ChunkedLogProbFunction.backward torch.mm(hidden_chunk, w_chunk.t()); cut_cross_entropy/cce_backward.py)
        executed += 2.0 * c.lm_head
    return model, executed


# --------------------------------------------------------------------------- constants


def constants(overrides: dict | None = None) -> dict:
    """The fitted constants (mfu.json `fitted`), with `overrides` for the calibration's search
    (a fresh dict; read-only callers use `_fitted`)."""
    fitted = dict(_fitted())
    if overrides:
        fitted.update(overrides)
    return fitted


_FITTED: list = [None, {}]  # (the table it was read from, its fitted values): follows table.cache_clear()


def _fitted() -> dict:
    t = table()
    if _FITTED[0] is not t:
        _FITTED[:] = [t, {k: v["value"] for k, v in t["fitted"].items() if not k.startswith("_")}]
    return _FITTED[1]


def internode_gbps(gpu, gpus_per_node: int, interconnect: str = "") -> float:
    """Default per-node network: 400 Gb/s for 8-GPU NVLink (HPC) instances, else 100 Gb/s."""
    t = table()["internode_gbps"]
    hpc = gpus_per_node >= 8 and gpu.interconnect in ("nvlink", "infinity-fabric")
    return float(t["hpc"] if hpc or "efa" in interconnect.lower() or "infiniband" in interconnect.lower()
                 else t["other"])


def sustained_fraction(gpu) -> float:
    """Share of the dense peak a long GEMM sustains on this card under its power and clock limits
    (mfu.json `sustained_matmul`, measured or derived per card; the class's MAMF otherwise)."""
    t = table()
    entry = t["sustained_matmul"].get(gpu.name)
    fraction = float(entry["fraction"]) if entry else float(t["mamf_fraction"][gpu_class(gpu)])
    cap = getattr(gpu, "power_limit_w", None)
    if cap and entry and entry.get("power_w") and cap < entry["power_w"]:
        # a card capped below its rated power: clock ∝ power^(1/3), as the derived entries (mfu.json
        # `_sustained_matmul`: CMOS dynamic power C·V²·f with V rising with f along the DVFS curve)
        fraction *= (cap / entry["power_w"]) ** (1.0 / 3.0)
    return fraction


def matmul_rate(gpu, stack: Stack, k: dict, mfu: float | None = None) -> float:
    """FLOP/s the training matmuls of one GPU reach: dense peak × the share of it a long GEMM sustains
    on this card × the framework's fitted training-matmul efficiency; `mfu` (--mfu) replaces the last two."""
    peak = gpu.peak_tflops(stack.precision) * TERA
    if mfu is not None:
        return peak * mfu
    return peak * sustained_fraction(gpu) * k[f"matmul_efficiency_{stack.framework}"]


def module_calls(c: Counts, stack: Stack) -> float:
    """nn.Module calls of one micro-batch in the HF stack's eager modeling code (mfu.json `module_calls`):
    every decoder layer's modules, peft's adapter modules, again under recompute; 0 for 'tuned'."""
    if stack.framework != "hf":
        return 0.0
    t = table()["module_calls"]
    per_layer = float(t["layer"])
    if stack.is_adapter and c.adapted_linears:
        per_layer += t["lora_per_adapted_linear"] * c.adapted_linears / max(c.layers, 1)
    return per_layer * c.layers * (2.0 if stack.grad_checkpointing else 1.0)


def size_bucket(params: float) -> str:
    """The model-size bucket of the plausibility caps (mfu.json `plausibility`)."""
    b = params / BILLION
    return "<3B" if b < 3 else "3-15B" if b < 15 else "15-45B" if b < 45 else ">45B"


CAP_METHODS = {"full": ("full",), "lora": ("lora", "qlora"), "qlora": ("qlora",)}


def mfu_cap(gpu, stack: Stack, c: Counts, caps: dict | None = None) -> tuple[float, str]:
    """(largest MFU an 'hf' prediction may claim, which measurement sets it): the best published MFU of
    any framework for this GPU class × method × model size (mfu.json `plausibility`, written by
    benchmarks/time_calibration.py), rescaled from the measured card's sustained rate to this card's.
    Where that segment was not measured, the loosest of its fallbacks (the class × method over all sizes,
    the method and size over all classes, the method over all classes); (0, "") when nothing was measured
    for the method. `caps` replaces the table's (the calibration's folds)."""
    value, key, entry = _best_cap(gpu, stack, c, caps)
    if not entry:
        return 0.0, ""
    return value, (f"{key}: {entry['row']} ({entry['source']}, {entry['framework']}) measured MFU "
                   f"{entry['mfu']:.3f} on {entry['gpu']}")


def _best_cap(gpu, stack: Stack, c: Counts, caps: dict | None) -> tuple[float, str, dict | None]:
    """(cap, its key, its entry) for mfu_cap, without formatting (step_time calls it per config)."""
    if caps is None:
        caps = (table().get("plausibility") or {}).get("caps") or {}
    cls, bucket = gpu_class(gpu), size_bucket(c.params_total)
    keys = []
    # a QLoRA run does LoRA's FLOPs plus dequantisation: what it reached, LoRA can reach too
    for m in CAP_METHODS[stack.method]:
        own = f"{cls}/{m}/{bucket}"
        keys += [own] if own in caps else [f"{cls}/{m}", f"*/{m}/{bucket}", f"*/{m}"]
    best, best_key, best_entry = 0.0, "", None
    scale = sustained_fraction(gpu)
    for key in keys:
        entry = caps.get(key)
        if entry and entry["mfu"] * scale / entry["sustained_fraction"] > best:
            best, best_key, best_entry = entry["mfu"] * scale / entry["sustained_fraction"], key, entry
    return best, best_key, best_entry


def _elementwise_bytes(c: Counts, stack: Stack, seq_len: int) -> float:
    """Bytes the non-matmul ops move per token per forward pass of one decoder layer (mfu.json
    `elementwise_bytes`: counted op by op; Liger and torch.compile fuse the chains)."""
    t = table()["elementwise_bytes"]
    mode = "compiled" if stack.compile else "liger" if stack.liger else "eager"
    per = t[mode]
    b = per["hidden"] * c.hidden + per["q"] * c.q_dim + per["kv"] * c.kv_dim + per["mlp"] * c.mlp_width
    if c.moe_layers:
        # gather each token to its k experts and scatter the weighted outputs back (16-bit, read + write)
        b += t["moe_dispatch_per_hidden"] * c.top_k * c.hidden * c.moe_layers / max(c.layers, 1)
    return b


def _loss_bytes(c: Counts, stack: Stack) -> float:
    """Bytes per token of the logits path (forward + backward), by loss implementation."""
    t = table()["elementwise_bytes"]["loss_per_vocab"]
    mode = (stack.loss if stack.loss in ("trl", "cce") else "fused" if stack.liger else
            "chunked" if stack.loss == "chunked" else "compiled" if stack.compile else "eager")
    return t[mode] * c.vocab


def _kernels_per_microbatch(c: Counts, stack: Stack) -> float:
    """Kernels one micro-batch launches (forward, backward, recompute) — mfu.json `kernels`."""
    t = table()["kernels"]
    mode = "compiled" if stack.compile else "liger" if stack.liger else "eager"
    fwd = t["layer_forward"][mode]
    passes = 3.0 + (1.0 if stack.grad_checkpointing else 0.0)  # backward ≈ 2 forwards of kernels
    per_layer = fwd * passes
    if stack.is_adapter and c.adapted_linears:
        lora = t["lora_per_adapted_linear"]
        per_adapter = lora["forward"] * (2 if stack.grad_checkpointing else 1) + lora["backward"]
        if stack.dora:
            per_adapter += t["dora_per_adapted_linear"] * (2 if stack.grad_checkpointing else 1)
        if stack.compile:
            per_adapter *= t["compiled_lora_factor"]
        per_layer += per_adapter * c.adapted_linears / max(c.layers, 1)
    if stack.is_qlora:
        per_layer += t["dequant_per_linear_pass"] * (c.quantised_linears / max(c.layers, 1)) * (passes - 1)
    if c.moe_layers:
        per_layer += t["moe_layer"] * passes * c.moe_layers / max(c.layers, 1)
    if stack.shards_params:
        per_layer += t["fsdp_layer"]
    return per_layer * c.layers + t["model_per_microbatch"]


def _optimizer_seconds(c: Counts, stack: Stack, gpu, trainable: float, bw: float) -> float:
    t = table()
    # LoRA adapters are fp32 (peft default) and DeepSpeed's 16-bit modes keep fp32 masters: the
    # optimizer traffic is then the mixed-precision kind
    mixed = (stack.mixed_precision or stack.pure_fp32 or stack.is_adapter
             or stack.is_zero)
    opt_bytes = techniques.get(stack.optimizer).step_bytes(mixed)  # advisor/data/optimizers.csv
    grad_bytes = BYTES_16BIT if stack.is_full and not mixed else BYTES_FP32
    passes = t["grad_clip_passes"] + (t["loss_scale_passes"] if "fp16" in stack.precision else 0)
    clip = passes * grad_bytes * trainable / stack.shard_degree_grads  # (unscale,) norm, then rescale
    return (trainable / stack.shard_degree_optimizer * opt_bytes + clip) / bw


def _weight_bytes(c: Counts, stack: Stack) -> float:
    """Bytes of all weights as stored on the GPU (QLoRA: NF4 linears with their constants, the rest 16-bit)."""
    if stack.method == "qlora":
        return c.quantised_weight_total * nf4_bytes_per_param(stack.double_quant) + (c.params_total - c.quantised_weight_total) * 2
    return c.params_total * 2


def gather_passes(stack: Stack) -> float:
    """Times FSDP / ZeRO-3 gather every weight per micro-batch: forward and backward, and under ZeRO-3 once more for
    the recompute of activation checkpointing (DeepSpeed 0.19.8 deepspeed/runtime/zero/parameter_offload.py: the
    pre-forward hook of every module fetches its partitioned parameters, and the recomputed forward runs those
    hooks again). FSDP's checkpointing sits inside each FSDP unit (accelerate's fsdp_activation_checkpointing:
    torch apply_activation_checkpointing after wrapping, FSDP(CheckpointWrapper(layer))), so the recompute runs
    while backward's unshard holds the parameters: no third gather."""
    return 2.0 + (1.0 if stack.grad_checkpointing and stack.sharding == "zero3" else 0.0)


def _comm_seconds(c: Counts, stack: Stack, gpu, trainable: float, per_mb: float, grad_accum: int, nodes: int,
                  net: float, k: dict) -> tuple[float, float]:
    """(collective seconds per step, the part compute does not hide): ZeRO paper (Rajbhandari et al. 2020, §7)
    volumes over the link the GPUs share."""
    t = table()
    n = stack.gpus
    if n <= 1 or stack.sharding == "none":
        return 0.0, 0.0
    grad_bytes = trainable * (2 if stack.method == "full" else 4)  # LoRA adapters/grads in fp32
    ring = (n - 1) / n
    if stack.sharding == "ddp":
        volume = 2 * ring * grad_bytes  # all-reduce once per step (no_sync while accumulating)
        hideable = per_mb * 2 / 3  # overlaps the last micro-batch's backward
    elif stack.sharding in ("zero1", "zero2"):
        volume = ring * (grad_bytes + trainable * 2)  # reduce-scatter grads + all-gather params
        hideable = per_mb * 2 / 3
    else:  # fsdp / zero3: gather weights for every pass of every micro-batch
        volume = ring * (gather_passes(stack) * _weight_bytes(c, stack) * grad_accum + grad_bytes)
        hideable = per_mb * grad_accum
    link = link_gb_s(gpu, nodes, net, k["socket_network_efficiency"])
    comm = volume / (link * GB * t["collective_efficiency"])
    return comm, comm - min(t["comm_overlap"].get(stack.sharding, 0.0) * comm, hideable)


@dataclass(frozen=True)
class Offload:
    """CPU offload of one optimizer step (seconds): the host's optimizer step, PCIe traffic that overlaps
    compute (prefetched parameters, gradients copied out during backward), PCIe traffic that does not
    (parameters copied back after the step), and what of it all the step waits for."""

    cpu_step: float = 0.0
    pcie_overlapped: float = 0.0
    pcie_serial: float = 0.0
    exposed: float = 0.0


def host_link_gb_s(gpu) -> float:
    """GB/s per direction a pinned host <-> device copy sustains: the card's PCIe link (a PCIe card's own link;
    an SXM/OAM module's host link by class, mfu.json `host_link`) × the measured share of it."""
    h = table()["host_link"]
    spec = (gpu.link_gb_s_per_direction if gpu.interconnect == "pcie"
            else h["spec_gb_s_per_direction"].get(gpu_class(gpu), h["spec_gb_s_per_direction"]["default"]))
    return spec * h["sustained_fraction"]


def cpu_optimizer_seconds(stack: Stack, trainable: float, nodes: int, host_vcpus_per_gpu: float | None = None
                          ) -> float:
    """The optimizer step on the host: every rank updates its partition of the trainable parameters, the ranks of
    a node at once on its cores and memory. DeepSpeedCPUAdam (ZeRO offload; DeepSpeed 0.19.8
    csrc/includes/cpu_adam.h Adam_Optimizer::Step_AVX) streams fp32 param, grad, exp_avg and exp_avg_sq in and
    param, exp_avg, exp_avg_sq out: 28 B per parameter at the host's memory bandwidth, which grows with the cores
    a rank has (OpenMP over TILE-sized chunks) up to the node's. FSDP's CPUOffload runs the torch optimizer on the
    CPU instead (mfu.json `cpu_optimizer` `torch_slowdown`)."""
    o = table()["cpu_optimizer"]
    gpn = max(1, stack.gpus // max(nodes, 1))
    params_node = trainable * gpn / stack.gpus
    vcpus = host_vcpus_per_gpu or o["default_vcpus_per_gpu"]
    cores = vcpus * gpn / o["vcpus_per_core"]
    bandwidth = min(cores * o["gb_s_per_core"], o["node_gb_s"]) * GB
    seconds = params_node * o["bytes_per_param"] / bandwidth
    return seconds * (o["torch_slowdown"] if stack.sharding == "fsdp" else 1.0)


def offload_seconds(c: Counts, stack: Stack, gpu, trainable: float, per_mb: float, grad_accum: int, nodes: int,
                    host_vcpus_per_gpu: float | None = None) -> Offload:
    """CPU offload, from the code that runs it (each rank's bytes over its PCIe link per optimizer step):

    * DeepSpeed ZeRO-1/2 offload_optimizer (deepspeed/runtime/zero/stage_1_and_2.py @0.19.8): with accumulation
      every micro-batch's gradients go to the host and, after the first, come back to be added to
      (async_accumulate_grad_in_cpu_via_gpu: 2 B out every micro-batch, 2 B in from the second); at the boundary
      the partition is copied into the fp32 host buffer (async_inplace_copy_grad_to_fp32_buffer_from_gpu: 4 B);
      after the host step the 16-bit partition is copied back (step: bit16_partitions[...].copy_, 2 B).
    * ZeRO-3 offload_optimizer (stage3.py @0.19.8): gradient partitions accumulate on the GPU and go to the host
      fp32 at the boundary (partition_grads, _offload_grad_partition_at_boundary: 4 B); the updated 16-bit
      partition comes back after the step (_reassign_or_swap_out_partitioned_parameters, 2 B) unless the
      parameters live on the host (offload_param), whose partition is copied in before every fetch
      (gather_passes per micro-batch, prefetched like the gathers).
    * FSDP CPUOffload(offload_params=True) (torch/distributed/fsdp): the flat-parameter shard is copied in before
      every unshard (forward, backward) and the sharded gradient out after every reduce-scatter; the optimizer
      steps on the CPU.

    Overlap: prefetched parameter copies and gradient copies issued during backward (overlap_comm, non_blocking
    copies on a side stream) hide behind compute like the collectives do; the host optimizer step and the copy
    back after it run while the GPU waits (DeepSpeed's ZenFlow blog: with offload 'over 60% of each iteration
    is pure GPU wait time', blogs/deepspeed-zenflow/README.md)."""
    if stack.offload == "none":
        return Offload()
    t = table()
    n = stack.gpus
    link = host_link_gb_s(gpu) * GB
    part = trainable / n
    weights = _weight_bytes(c, stack) / n
    overlapped = serial = 0.0
    if stack.sharding == "fsdp":
        grad_dtype = 2 if stack.method == "full" or stack.adapter_dtype == "bf16" else 4
        overlapped = (weights * 2.0 + part * grad_dtype) * grad_accum
    else:
        if stack.offload in ("optimizer", "both"):
            if stack.sharding == "zero3":
                overlapped += part * 4
            else:
                accum = (2 * grad_accum + 2 * (grad_accum - 1)) if grad_accum > 1 else 0
                overlapped += part * (4 + accum)
            if stack.offload == "optimizer":
                serial += part * 2
        if stack.offload in ("params", "both") and stack.sharding == "zero3":
            overlapped += weights * gather_passes(stack) * grad_accum
    pcie_overlapped, pcie_serial = overlapped / link, serial / link
    cpu = cpu_optimizer_seconds(stack, trainable, nodes, host_vcpus_per_gpu) if stack.offload != "params" else 0.0
    if stack.offload == "params" and stack.sharding == "zero3":
        cpu = 0.0  # ZeRO-3 parameter offload alone keeps the optimizer on the GPU (offload_optimizer none)
    hidden = min(t["comm_overlap"].get(stack.sharding, 0.0) * pcie_overlapped, per_mb * grad_accum)
    return Offload(cpu_step=cpu, pcie_overlapped=pcie_overlapped, pcie_serial=pcie_serial,
                   exposed=pcie_overlapped - hidden + pcie_serial)


OFFLOAD_TIME_SOURCE = ("DeepSpeedCPUAdam, DeepSpeed 0.19.8 csrc/includes/cpu_adam.h Adam_Optimizer::Step_AVX: 28 B "
                       "of host memory traffic per parameter; PCIe bytes per setting from deepspeed/runtime/zero/"
                       "stage_1_and_2.py and stage3.py; advisor/data/mfu.json cpu_optimizer, host_link")


def host_staged(gpu) -> bool:
    """A PCIe card without peer-to-peer (GeForce): NCCL stages every collective through host memory (SHM transport;
    advisor/data/mfu.json `no_p2p_host_staged_gb_s`)."""
    return gpu.interconnect == "pcie" and not getattr(gpu, "pcie_p2p", True)


# Issue 48's mechanism classes, where the newest published runs disagree with the model: a row (or a setup) belongs
# to every class whose mechanism it runs. benchmarks/time_calibration.py writes each class's held-out figures into
# mfu.json fit.held_out_by_group; a setup in a class with fewer than THIN_CLASS_ROWS held-out rows or
# THIN_CLASS_SOURCES sources takes the band of held-out GPU classes and says so (`band`).
NO_P2P_MULTI, DORA, QLORA, CPU_OFFLOAD = "consumer multi-GPU (no P2P)", "DoRA", "QLoRA", "CPU offload"
MECHANISM_CLASSES = (NO_P2P_MULTI, DORA, QLORA, CPU_OFFLOAD)
THIN_CLASS_ROWS, THIN_CLASS_SOURCES = 3, 2


def mechanism_classes(gpu, stack: Stack) -> list[str]:
    """The issue-48 classes this setup belongs to (MECHANISM_CLASSES order)."""
    runs = (host_staged(gpu) and stack.gpus > 1, stack.dora, stack.method == "qlora", stack.offloads)
    return [name for name, on in zip(MECHANISM_CLASSES, runs) if on]


def thin_classes(gpu, stack: Stack) -> list[str]:
    """This setup's mechanism classes whose held-out evidence is thin, each with its rows and sources in words."""
    groups = (table().get("fit") or {}).get("held_out_by_group") or {}
    out = []
    for name in mechanism_classes(gpu, stack):
        g = groups.get(name) or {"rows": 0, "sources": 0}
        if g["rows"] < THIN_CLASS_ROWS or g["sources"] < THIN_CLASS_SOURCES:
            out.append(f"{name}: {g['rows']} held-out row{'s' if g['rows'] != 1 else ''} of {g['sources']} "
                       f"source{'s' if g['sources'] != 1 else ''}")
    return out


def link_gb_s(gpu, nodes: int, net_gbps: float, socket_efficiency: float = 1.0) -> float:
    """GB/s per direction a GPU's collectives get: NVLink/xGMI, or PCIe — staged through host memory
    where the cards have no peer-to-peer (GeForce) — and, across nodes, one node's network; a network without
    RDMA (under RDMA_GBPS: TCP sockets over Ethernet) reaches `socket_efficiency` of its line rate."""
    t = table()
    link = gpu.link_gb_s_per_direction
    if host_staged(gpu):
        link = min(link, t["no_p2p_host_staged_gb_s"])
    if nodes > 1:
        # NCCL rings cross each node boundary once per direction, so across nodes the bus
        # bandwidth is bounded by one node's network (nccl-tests busbw ≈ NIC bandwidth per node).
        link = min(link, net_gbps / 8 * (1.0 if net_gbps >= RDMA_GBPS else socket_efficiency))
    return link


# Node networks from this rate up are RDMA fabrics (EFA, InfiniBand, RoCE: every pricing/data/fabrics.csv entry
# at 200 Gb/s or more has gpudirect_rdma true); below it NCCL runs its socket transport over TCP.
RDMA_GBPS = 200.0


# --------------------------------------------------------------------------- the time model


def _adapter_seconds(c: Counts, stack: Stack, T: int, rate: float, bw: float) -> tuple[float, float]:
    """(QLoRA dequantisation, DoRA) seconds of one micro-batch of T tokens."""
    t = table()
    ckpt = 1.0 if stack.grad_checkpointing else 0.0
    dequant = 0.0
    if stack.is_qlora:
        dequant = c.quantised_weight_total * t["nf4_dequant_bytes_per_param"] * (2.0 + ckpt) / bw
    dora = 0.0
    if stack.dora and stack.is_adapter:
        # the weight norm of W + s·BA every forward, and the rescaling of every adapted output
        dora = (c.adapted_weight_total * t["dora_bytes_per_weight"] * (1.0 + ckpt)
                + c.adapted_out_features * t["dora_bytes_per_output_feature"] * (3.0 + ckpt) / 3.0 * T) / bw
        if stack.lora_dropout > 0:
            # with dropout peft cannot reuse the base output: DoRA runs the base matmul again on the
            # dropped-out input (forward + input gradient)
            dora += 2.0 * c.adapted_weight_total * T * (2.0 + ckpt) / rate
    return dequant, dora


def _attention_seconds(c: Counts, stack: Stack, shape: Shape, gpu, attn_flops: float, rate: float, bw: float,
                       mfu: float | None) -> float:
    """Attention of one micro-batch: fused kernels at their published utilisation — under the same power/clock
    limit as the card's GEMMs —; eager runs its matmuls at the GEMM rate and also moves the score matrix."""
    t = table()
    ckpt = 1.0 if stack.grad_checkpointing else 0.0
    if stack.attention == "eager":
        heads = c.d_attn / max(c.head_dim, 1)
        score = t["eager_score_bytes"]["forward"] * (1.0 + ckpt) + t["eager_score_bytes"]["backward"]
        return attn_flops / rate + c.layers * shape.micro_batch * heads * shape.seq_len ** 2 * score / bw
    cls = gpu_class(gpu)
    att_eff = (t["attention_efficiency"][cls] * sustained_fraction(gpu) / t["mamf_fraction"][cls]
               if mfu is None else mfu)
    return attn_flops / (gpu.peak_tflops(stack.precision) * TERA * att_eff)


def step_time(c: Counts, stack: Stack, shape: Shape, gpu, *, grad_accum: int = 1, nodes: int = 1,
              gpus_per_node: int | None = None, mfu: float | None = None, network_gbps: float | None = None,
              fitted: dict | None = None, with_band: bool = True, caps: dict | None = None,
              host_vcpus_per_gpu: float | None = None) -> StepNumbers:
    """Seconds per optimizer step by component, tokens/s and its band: a frozen StepNumbers record (the planner
    calls this per config; `throughput` builds the typed Throughput from it). `fitted` overrides the fitted constants and `caps` the plausibility caps ({}: none)
    — the calibration's search and folds only."""
    t = table()
    k = constants(fitted) if fitted else _fitted()
    n = stack.gpus
    gpn = gpus_per_node or max(1, n // nodes)
    T = shape.micro_batch * shape.seq_len  # tokens per micro-batch per GPU
    model_fpt, exec_fpt = flops_per_token(c, stack, shape.seq_len)
    peak = gpu.peak_tflops(stack.precision) * TERA
    bw = gpu.mem_bandwidth_tb_s * TERA * t["bandwidth_efficiency"]
    rate = matmul_rate(gpu, stack, k, mfu)
    ckpt = 1.0 if stack.grad_checkpointing else 0.0

    # matmuls: FLOPs at the sustained rate, but no faster than the weights stream from memory
    s_ctx = shape.seq_len / 2 if c.window is None else min(shape.seq_len / 2, c.window)
    attn_fwd = 4.0 * c.layers * s_ctx * c.d_attn
    attn_flops = attn_fwd * (3.0 + ckpt) * T
    matmul = _matmul_seconds(c, stack, exec_fpt * T - attn_flops, T, rate, bw)
    attention = _attention_seconds(c, stack, shape, gpu, attn_flops, rate, bw, mfu)
    elementwise = _elementwise_seconds(c, stack, shape, T, bw)
    dequant, dora = _adapter_seconds(c, stack, T, rate, bw)

    gpu_work = matmul + attention + elementwise + dequant + dora
    launches, calls, host = _host_seconds(c, stack, k)
    per_mb = max(gpu_work, host)
    compute = matmul + attention  # the FLOP-bound part (what --mfu scales)
    if nodes > 1:
        per_mb /= t["multi_node_efficiency"]  # stragglers and synchronisation jitter across nodes

    trainable = (c.params_total if stack.is_full else c.adapters_total + c.extra_trainable)
    net = (network_gbps if network_gbps is not None else internode_gbps(gpu, gpn)) if nodes > 1 else 0.0
    comm, exposed = _comm_seconds(c, stack, gpu, trainable, per_mb, grad_accum, nodes, net, k)
    off = offload_seconds(c, stack, gpu, trainable, per_mb, grad_accum, nodes, host_vcpus_per_gpu)
    optimizer = off.cpu_step if stack.offload != "none" else _optimizer_seconds(c, stack, gpu, trainable, bw)
    exposed += off.exposed

    step_overhead = k[f"step_overhead_s_{stack.framework}"]
    step = grad_accum * per_mb + optimizer + exposed + step_overhead
    # plausibility guard ('hf' only): never faster than the best published run of any framework in this segment
    cap = _best_cap(gpu, stack, c, caps)[0] if stack.framework == "hf" and mfu is None else 0.0
    capped = bool(cap) and T * grad_accum * n / step * model_fpt / (n * peak) > cap
    if capped:
        step = T * grad_accum * n / (cap * n * peak / model_fpt)
    tokens_per_sec = T * grad_accum * n / step
    out = {
        "tokens_per_sec": tokens_per_sec, "mfu": tokens_per_sec * model_fpt / (n * peak), "internode_gbps": net,
        "step_seconds": step, "compute_seconds": grad_accum * compute, "matmul_seconds": grad_accum * matmul,
        "attention_seconds": grad_accum * attention, "elementwise_seconds": grad_accum * elementwise,
        "dequant_seconds": grad_accum * dequant, "dora_seconds": grad_accum * dora,
        "dispatch_seconds": grad_accum * host, "overhead_seconds": grad_accum * max(0.0, host - gpu_work),
        "optimizer_seconds": optimizer, "step_overhead_seconds": step_overhead, "comm_seconds": comm,
        "comm_exposed_seconds": exposed, "offload_pcie_seconds": off.pcie_overlapped + off.pcie_serial,
        "offload_exposed_seconds": off.exposed, "cpu_optimizer_seconds": off.cpu_step,
        "model_flops_per_token": model_fpt, "executed_flops_per_token": exec_fpt,
        "kernel_efficiency": rate / peak, "kernels_per_micro_batch": launches,
        "tokens_per_step": T * grad_accum * n, "peak_flops_per_gpu": peak,
        "module_calls_per_micro_batch": calls, "sustained_fraction": sustained_fraction(gpu),
        "mfu_cap": cap,
    }
    band_fields = _band_fields(gpu, stack, tokens_per_sec) if with_band else {}
    return StepNumbers(**{k_: float(v) for k_, v in out.items()}, capped=bool(capped), **band_fields)


def _matmul_seconds(c: Counts, stack: Stack, mm_flops: float, T: int, rate: float, bw: float) -> float:
    """The linears of one micro-batch of T tokens (`mm_flops` executed FLOPs): at the sustained rate, but no faster
    than their weights stream from memory (dense and expert weights apart)."""
    ckpt = 1.0 if stack.grad_checkpointing else 0.0
    weight_passes = (3.0 if stack.is_full else 2.0) + ckpt  # fwd, dgrad, (wgrad), recompute
    dense_bytes = 2.0 * (c.dense_weight_total + c.lm_head) * weight_passes
    expert_bytes = 2.0 * c.expert_weight_total * weight_passes  # every expert is read by each pass
    # grouped expert GEMMs multiply only M·k/E rows each: below the ridge they stream weights
    mm_expert = 2.0 * c.expert_weight_total * c.expert_tokens_fraction * T * weight_passes
    return (max((mm_flops - mm_expert) / rate, dense_bytes / bw)
            + (max(mm_expert / rate, expert_bytes / bw) if c.expert_weight_total else 0.0))


def _elementwise_seconds(c: Counts, stack: Stack, shape: Shape, T: int, bw: float) -> float:
    """Elementwise traffic of one micro-batch (norms, RoPE, SwiGLU, residuals, casts, LoRA inputs, loss) at the
    card's effective bandwidth."""
    t = table()
    ckpt = 1.0 if stack.grad_checkpointing else 0.0
    passes = 3.0 + ckpt  # forward + backward (twice the forward's bytes) + recompute
    elem = _elementwise_bytes(c, stack, shape.seq_len) * c.layers * passes * T
    if stack.is_adapter and c.adapted_linears:
        lb = t["elementwise_bytes"]["lora_per_input_feature"]
        per_in = lb[stack.adapter_dtype] * (1.0 - (lb["dropout_share"] if stack.lora_dropout == 0 else 0.0))
        elem += per_in * c.adapted_in_features * (3.0 + ckpt) / 3.0 * T * (0.5 if stack.compile else 1.0)
    elem += _loss_bytes(c, stack) * T
    return elem / bw


def _host_seconds(c: Counts, stack: Stack, k: Mapping) -> tuple[float, float, float]:
    """(kernel launches, module calls, host seconds) of one micro-batch: dispatch, ZeRO-3's parameter fetches and
    the Python module calls."""
    ckpt = 1.0 if stack.grad_checkpointing else 0.0
    launches = _kernels_per_microbatch(c, stack)
    host = launches * k["dispatch_seconds_per_kernel"]
    if stack.sharding == "zero3":
        host += c.param_tensors * (2.0 + ckpt) * k["zero3_param_fetch_s"]
    calls = module_calls(c, stack)
    host += calls * k["module_call_seconds_hf"]
    return launches, calls, host


def _band_fields(gpu, stack: Stack, tokens_per_sec: float) -> dict[str, float | int]:
    """The held-out band around `tokens_per_sec` and the calibration rows behind it."""
    low, high, rows = _band_factors(gpu, stack)
    return {"tokens_per_sec_low": float(tokens_per_sec * low), "tokens_per_sec_high": float(tokens_per_sec * high),
            "interval_rows": int(rows)}


# --------------------------------------------------------------------------- uncertainty


FRAMEWORK_BAND_ROWS = 3  # a framework's own segment band needs this many held-out rows, else all frameworks'
# A segment (GPU class x method) is calibrated only with at least this many held-out rows: with one row its p80 is
# its p90 (one error, not a spread), so fewer rows widen to the band of held-out GPU classes and say so (issue 45).
MIN_CALIBRATED_ROWS = 3


def liger_runs_on(gpu) -> bool:
    """Whether Liger Kernel's Triton kernels are supported on this card (mfu.json `_unpriced`): ROCm, or NVIDIA
    compute capability 8.0 and newer."""
    if gpu.vendor.upper() == "AMD":
        return True
    need = table()["unpriced"]["liger_min_compute_capability"]
    return float(gpu.compute_capability or 0) >= need


def unpriced(gpu, stack: Stack) -> list[str]:
    """Mechanisms of this setup the time model cannot price on this card (mfu.json `_unpriced`), each a sentence."""
    out = []
    if stack.liger and not liger_runs_on(gpu):
        out.append(f"Liger Kernel's Triton kernels are not supported on {gpu.name} (compute capability "
                   f"{gpu.compute_capability}; Triton targets 8.0+, its bf16 kernels fail on sm_75)")
    if stack.attention == "flash" and not gpu.supports_flash_attention:
        out.append(f"FlashAttention-2 does not run on {gpu.name} (Ampere or newer)")
    if "bf16" in stack.precision and not gpu.supports_bf16:
        out.append(f"{gpu.name} has no bf16 tensor cores: bf16 matmuls are emulated (use fp16)")
    return out


def _band_entry(gpu, stack: Stack) -> tuple[dict, str]:
    bands = table().get("bands") or {}
    why = unpriced(gpu, stack)
    if why:
        entry = bands.get("unseen") or {"rows": 0, "low": 0.5, "high": 2.0}
        return entry, f"not priced ({'; '.join(why)}): the band of held-out GPU classes"
    thin = thin_classes(gpu, stack)
    if thin:
        entry = bands.get("unseen") or {"rows": 0, "low": 0.5, "high": 2.0}
        return entry, f"thin evidence ({'; '.join(thin)}): the band of held-out GPU classes"
    seg = segment(gpu, stack)
    own = ((bands.get("frameworks") or {}).get(stack.framework) or {}).get(seg)
    if own is not None and own["rows"] >= FRAMEWORK_BAND_ROWS:
        return own, f"{seg}: {own['rows']} held-out calibration rows of the {stack.framework} framework"
    entry = (bands.get("segments") or {}).get(seg)
    if entry is None or entry.get("rows", 0) < MIN_CALIBRATED_ROWS:
        rows = 0 if entry is None else int(entry.get("rows", 0))
        entry = bands.get("unseen") or {"rows": 0, "low": 0.5, "high": 2.0}
        return entry, f"{seg}: {thin_rows_words(rows)}; the band of held-out GPU classes"
    return entry, f"{seg}: {entry['rows']} held-out calibration rows"


def thin_rows_words(rows: int) -> str:
    """Why a segment's own band is not used: no rows, or fewer than MIN_CALIBRATED_ROWS."""
    if rows <= 0:
        return "no calibration rows"
    return f"only {rows} held-out calibration row{'s' if rows != 1 else ''} (fewer than {MIN_CALIBRATED_ROWS}: uncalibrated)"


def _band_factors(gpu, stack: Stack) -> tuple[float, float, int]:
    entry, _ = _band_entry(gpu, stack)
    return float(entry["low"]), float(entry["high"]), int(entry.get("rows", 0))


def band(gpu, stack: Stack) -> tuple[float, float, str]:
    """(low_factor, high_factor, basis): multiply a predicted tokens/s by the factors for the p10-p90
    interval of held-out error in this setup's segment (GPU class × method). low ≤ 1 ≤ high, so the
    interval holds the point estimate; segments with fewer calibration rows get wider bands
    (benchmarks/time_calibration.py writes them into mfu.json `bands`). Hours and cost scale by the
    inverse: hours_high = hours / low_factor."""
    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu)
    entry, basis = _band_entry(g, stack)
    return float(entry["low"]), float(entry["high"]), basis


def band_quantile(gpu, stack: Stack, q: float) -> tuple[float, str]:
    """(factor, basis): measured/predicted tokens/s at quantile `q` of this segment's held-out error
    (stored at 0.1, 0.2, 0.8, 0.9; 0.5 is the point estimate, 1.0; log-linear between, clamped to
    0.1-0.9). For a pessimistic budget at the 80th percentile of hours: hours_p80 = hours /
    band_quantile(gpu, stack, 0.2)[0]."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"band_quantile: q must be in (0, 1), got {q}")
    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu)
    entry, basis = _band_entry(g, stack)
    stored = entry.get("quantiles") or {"0.1": entry["low"], "0.9": entry["high"]}
    return quantile_factor(stored, q), basis


def quantile_factor(stored: Mapping, q: float) -> float:
    """The factor at quantile `q` from factors stored at some quantiles ({0.1: low, 0.9: high}, ...; 1.0 at
    0.5): log-linear between them, clamped to the outermost. One rule for the time model's held-out band and
    a measured run's step-time spread (advisor/planner/configs.py)."""
    knots = sorted([(float(k), math.log(float(v))) for k, v in stored.items()] + [(0.5, 0.0)])
    q = min(max(q, knots[0][0]), knots[-1][0])
    for (q0, v0), (q1, v1) in zip(knots, knots[1:]):
        if q0 <= q <= q1:
            return math.exp(v0 + (v1 - v0) * (q - q0) / (q1 - q0))
    return math.exp(knots[-1][1])


# --------------------------------------------------------------------------- typed result


def throughput(c: Counts, stack: Stack, shape: Shape, gpu, *, nodes: int = 1, mfu: float | None = None,
               network_gbps: float | None = None) -> Throughput:
    """Tokens per second (total over `stack.gpus` GPUs on `nodes` nodes) at the shape's gradient
    accumulation (1 when unknown), with every term visible and the held-out error band."""
    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu)
    if mfu is not None and not 0 < mfu <= 1:
        raise BadInput(f"--mfu: must be a fraction in (0, 1], got {mfu}.")
    grad_accum = shape.grad_accum or 1
    gpn = max(1, stack.gpus // nodes)
    r = step_time(c, stack, shape, g, grad_accum=grad_accum, nodes=nodes, gpus_per_node=gpn, mfu=mfu,
                  network_gbps=network_gbps)
    t = table()
    k = constants()
    low, high, basis = band(g, stack)
    assumptions: dict[str, str | int | float | bool] = {
        "gpu_class": gpu_class(g),
        "kernel_efficiency": round(r.kernel_efficiency, 4),
        "kernel_efficiency_source": ("--mfu" if mfu is not None
                                     else f"advisor/data/mfu.json (sustained rate of the card × fitted "
                                          f"{stack.framework} matmul efficiency)"),
        "framework": stack.framework,
        "sustained_matmul_fraction": round(r.sustained_fraction, 4),
        "peak_tflops_per_gpu": g.peak_tflops(stack.precision),
        "dispatch_seconds_per_kernel": k["dispatch_seconds_per_kernel"],
        "comm_overlap": t["comm_overlap"].get(stack.sharding, 0.0),
        "grad_accum": grad_accum,
        "nodes": nodes,
        "flops": "Kaplan 2020 / PaLM app. B: 6N full, 4N LoRA, +2N recompute, +attention (causal)",
        "interval": f"p10-p90 of held-out error ({basis})",
    }
    if r.capped:
        _, why = mfu_cap(g, stack, c)
        assumptions["plausibility_cap"] = (f"capped at MFU {r.mfu_cap:.3f}: no faster than the best published "
                                           f"run of any framework ({why})")
    if host_staged(g) and stack.gpus > 1:
        assumptions["pcie_p2p"] = False
        assumptions["comm_host_staged"] = (
            f"{r.comm_seconds:.2f} s/step of collectives ({r.comm_exposed_seconds:.2f} s not hidden) staged through "
            f"host memory at {t['no_p2p_host_staged_gb_s']:g} GB/s: no PCIe peer-to-peer on {g.name}, NCCL "
            "falls back to its SHM transport (NVIDIA/nccl-tests issue #117, P2P=Disabled 5.9-8.4 GB/s on RTX 4090s; "
            "NCCL src/transport/p2p.cc p2pCanConnect, src/transport/shm.cc)")
    why = unpriced(g, stack)
    if why:
        assumptions["not_priced"] = "; ".join(why) + " — the band is that of GPU classes held out whole"
    if stack.offload != "none":
        o = t["cpu_optimizer"]
        assumptions["offload"] = (f"host optimizer {r.cpu_optimizer_seconds:.2f} s/step at {o['default_vcpus_per_gpu']} "
                                  f"vCPUs per GPU (the price sheet's median; more cores, less time, up to "
                                  f"{o['node_gb_s']:g} GB/s of host memory), PCIe {r.offload_pcie_seconds:.2f} s/step "
                                  f"at {host_link_gb_s(g):.1f} GB/s, {r.offload_exposed_seconds:.2f} s not hidden ({OFFLOAD_TIME_SOURCE})")
    if nodes > 1:
        assumptions["internode_gbps"] = r.internode_gbps
    return Throughput(
        tokens_per_sec=r.tokens_per_sec,
        mfu=r.mfu,
        step_seconds=r.step_seconds,
        flops_per_token=r.model_flops_per_token,
        grad_accum=grad_accum,
        nodes=nodes,
        compute_seconds_per_step=r.compute_seconds,
        comm_seconds_per_step=r.comm_exposed_seconds,
        tokens_per_sec_low=r.tokens_per_sec_low,
        tokens_per_sec_high=r.tokens_per_sec_high,
        interval_basis={"segment": segment(g, stack), "rows": int(r.interval_rows or 0),
                        "low_factor": round(low, 4), "high_factor": round(high, 4), "basis": basis},
        components=r.components(),
        assumptions=assumptions,
    )


__all__ = ["Counts", "band", "band_quantile", "counts", "flops_per_token", "gpu_class", "matmul_rate", "mfu_cap",
           "module_calls", "segment", "size_bucket", "step_time", "sustained_fraction", "table", "throughput"]
