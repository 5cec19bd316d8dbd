"""Measure what a real PyTorch training step holds, to validate the memory estimator.

Builds a small random-initialised transformers model from a config.json-style dict on the
CPU, applies a technique `Stack` (full / LoRA, precision, attention, checkpointing,
optimizer), runs forward + backward + one optimizer step on random token ids and counts,
exactly, in bytes:

- weights: every parameter storage once (tied embeddings once);
- gradients: every `.grad` after backward;
- optimizer: every tensor in `optimizer.state` after one step;
- activations: every storage autograd saves for backward during the forward pass
  (`torch.autograd.graph.saved_tensors_hooks`), deduplicated by storage and excluding
  storages owned by parameters or buffers (those are weights).

Also records which module and torch function saved each tensor, so the estimator's
activation model can be checked term by term. torch, transformers and peft are imported
inside functions only. This is validation code: it lives in benchmarks/, outside the
installed package.
"""

from __future__ import annotations

import re
import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from advisor.stacks import Shape, Stack


class Unmeasurable(Exception):
    """This stack cannot be measured on a CPU-only torch (the reason says why)."""


@dataclass
class SavedTensor:
    """One distinct storage autograd saved for backward (the first tensor that saved it)."""

    module: str  # dotted module path that was running, e.g. model.layers.0.self_attn.q_proj
    op: str  # innermost torch function running when autograd saved it, e.g. linear
    shape: tuple[int, ...]
    dtype: str
    storage_bytes: int  # full bytes of the storage (views share one storage)
    weight_copy: bool = False  # a cast copy of a parameter (autocast), not a real activation
    transient: bool = False  # saved by a graph that died within forward: not alive when backward starts
    numel: int = 0


@dataclass
class Measured:
    """Exact bytes one training step holds, per component, plus details for debugging."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    params_total: int
    params_trainable: int
    buffers: int = 0  # bytes of registered buffers (rotary inv_freq, ...), not in weights
    weights_by_dtype: dict[str, int] = field(default_factory=dict)
    gradients_by_dtype: dict[str, int] = field(default_factory=dict)
    optimizer_by_dtype: dict[str, int] = field(default_factory=dict)
    activations_by_dtype: dict[str, int] = field(default_factory=dict)
    activations_by_module: dict[str, int] = field(default_factory=dict)  # layer index folded to '*'
    activations_by_op: dict[str, int] = field(default_factory=dict)  # "module :: op", layers folded
    weight_copies: int = 0  # part of `activations`: autocast's casts of parameters saved for backward
    # CPU dropout saves a float noise tensor (input dtype); CUDA's fused native_dropout saves
    # a bool mask (1 byte per element). `activations_cuda` swaps the one for the other.
    dropout_mask_bytes: int = 0
    dropout_mask_elements: int = 0
    saved_tensor_calls: int = 0  # times the pack hook ran (tensors saved, with repeats)
    # bytes saved by graphs built and dropped within forward (not alive at backward; not in `activations`)
    transient_graphs: int = 0
    saved_storages: int = 0  # distinct non-parameter storages saved
    # checkpointing: most bytes one layer saves while recomputed in backward (as on CUDA:
    # dropout masks counted as bool)
    recompute_max_layer: int = 0
    saved: list[SavedTensor] = field(default_factory=list)
    recomputed: list[SavedTensor] = field(default_factory=list)  # what that largest recompute saved
    loss: float = 0.0

    @property
    def activations_cuda(self) -> int:
        """Saved bytes as a CUDA run would hold them (bool dropout masks); what we compare."""
        return self.activations - self.dropout_mask_bytes + self.dropout_mask_elements


def _storage_key(t) -> tuple[int, int]:
    s = t.untyped_storage()
    return (s.data_ptr(), s.nbytes())


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _fold_layers(name: str) -> str:
    """model.layers.3.mlp -> model.layers.*.mlp, so per-layer totals can be read at a glance."""
    return re.sub(r"\.(layers|h|blocks)\.\d+(?=\.|$)", r".\1.*", name)


# --- building the model ------------------------------------------------------------------


_DROPOUT_KEYS = (
    "attention_dropout",
    "hidden_dropout",
    "embd_pdrop",
    "resid_pdrop",
    "attn_pdrop",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "router_jitter_noise",
)


def full_config(config: dict) -> dict:
    """The config.json transformers would write for `config` (all defaults filled in)."""
    from transformers import AutoConfig

    cfg = dict(config)
    model_type = cfg.pop("model_type")
    return AutoConfig.for_model(model_type, **cfg).to_dict()


def model_spec(config: dict, name: str = "validation case"):
    """Our ModelSpec for `config`, read as a Hub config.json: the case's keys as written,
    transformers' defaults for the rest (transformers 5 renames some keys when it saves,
    e.g. Qwen3-MoE's num_experts -> num_local_experts; Hub files keep the original names)."""
    from advisor.model.catalog import from_hf_config

    cfg = {**full_config(config), **config}
    return from_hf_config(cfg, name=name, source="benchmarks.measure (random-initialised)")


def _dtype_for(precision: str):
    import torch

    return {
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
        "fp32": torch.float32,
        "amp-bf16": torch.float32,
        "amp-fp16": torch.float32,
    }[precision]


def _check_measurable(stack: Stack) -> None:
    if stack.method == "qlora":
        raise Unmeasurable("QLoRA needs bitsandbytes' NF4 kernels, which need a CUDA GPU")
    if stack.optimizer in ("adamw-8bit", "paged-adamw-8bit"):
        raise Unmeasurable("8-bit AdamW is bitsandbytes (CUDA only)")
    if stack.attention == "flash":
        raise Unmeasurable("FlashAttention 2 needs a CUDA GPU (flash-attn)")
    if stack.optimizer == "adamw-fp32" and stack.precision in ("bf16", "fp16"):
        # torch.optim.AdamW keeps its states in the parameter dtype; fp32 states for 16-bit
        # weights (plus an fp32 master copy) is a DeepSpeed/accelerate recipe, not one torch
        # optimizer. With fp32 or amp weights 'adamw-fp32' is exactly torch AdamW (measured).
        raise Unmeasurable("adamw-fp32 with 16-bit weights is not a torch.optim optimizer")
    if stack.sharding != "none" or stack.gpus != 1 or stack.offload != "none":
        raise Unmeasurable("sharding and offload need several processes; measured on one")
    if stack.liger:
        raise Unmeasurable("Liger Kernel's Triton kernels need a GPU (modelled from liger-kernel's source instead)")
    if stack.compile:
        raise Unmeasurable("torch.compile'd graphs save tensors inside compiled autograd functions, out of reach "
                           "of saved_tensors_hooks; eager memory is what the estimate assumes")


def build_model(config: dict, stack: Stack):
    """Random-initialised model from `config` with the stack applied (dropout off, train mode)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(config)
    model_type = cfg.pop("model_type")
    for key in _DROPOUT_KEYS:
        cfg[key] = 0.0
    cfg["use_cache"] = False
    hf_config = AutoConfig.for_model(model_type, **cfg)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(
        hf_config, attn_implementation=stack.attention, dtype=torch.float32
    )
    model.to(_dtype_for(stack.precision))
    return apply_stack(model, stack)


def apply_stack(model, stack: Stack, *, reentrant: bool = True):
    """peft LoRA adapters and gradient checkpointing, set up as a user of `stack` would (train mode).

    Reentrant checkpointing (the CPU harness) saves each layer's input through
    ctx.save_for_backward, so saved-tensor hooks see it; the GPU harness uses the
    non-reentrant default that accelerate and Trainer use."""
    if stack.method != "full":
        from peft import LoraConfig, get_peft_model

        targets = stack.lora_targets
        target_modules: Any = "all-linear" if targets == "all-linear" else [
            t.strip() for t in targets.split(",") if t.strip()
        ]
        lora = LoraConfig(
            r=stack.lora_rank,
            lora_alpha=stack.lora_alpha,
            lora_dropout=stack.lora_dropout,
            target_modules=target_modules,
            task_type="CAUSAL_LM",
            use_dora=stack.dora,
            modules_to_save=list(stack.saved_modules) or None,
        )
        # peft's default (autocast_adapter_dtype=True) keeps adapters in fp32 on 16-bit
        # weights; adapter_dtype 'bf16' is the older / torchtune behaviour (adapters in the
        # base weights' dtype).
        model = get_peft_model(model, lora, autocast_adapter_dtype=stack.adapter_dtype == "fp32")
    if stack.grad_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
        if stack.method != "full":
            # with a frozen embedding nothing upstream needs a gradient; peft/Trainer make the
            # input require one so checkpointed layers still backpropagate.
            model.enable_input_require_grads()
    model.train()
    return model


CHUNKED_LOSS_CHUNKS = 8


def chunked_cross_entropy(logits, labels, chunks: int = CHUNKED_LOSS_CHUNKS, ignore_index: int = -100,
                          num_items_in_batch=None):
    """The reference chunked loss --loss chunked stands for, the way torchtune's CEWithChunkedOutputLoss computes it
    (modules/loss/ce_chunked_output_loss.py): labels shifted as transformers shifts them, the sequence cut into
    `chunks` pieces, each piece upcast to fp32 and reduced on its own, so backward holds one chunk's fp32 gradients
    at a time. (The launch bundle no longer runs it: TRL's SFTTrainer computes its own fused, chunked loss.)"""
    import torch.nn.functional as F

    shifted = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    total = None
    for logit_chunk, label_chunk in zip(logits.chunk(chunks, dim=1), shifted.chunk(chunks, dim=1)):
        part = F.cross_entropy(logit_chunk.reshape(-1, logit_chunk.size(-1)).float(), label_chunk.reshape(-1),
                               ignore_index=ignore_index, reduction="sum")
        total = part if total is None else total + part
    count = num_items_in_batch if num_items_in_batch is not None else (shifted != ignore_index).sum().clamp(min=1)
    return total / count


def make_optimizer(params, stack: Stack):
    """The torch optimizer a user of `stack.optimizer` gets (states in the parameter dtype)."""
    import torch

    if stack.optimizer in ("adamw", "adamw-fp32"):
        # 'adamw-fp32' only reaches here with fp32 (or amp: fp32) weights, where torch AdamW
        # already keeps fp32 states -- the same two tensors per parameter.
        return torch.optim.AdamW(params, lr=1e-4, foreach=False)
    if stack.optimizer == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=False)
    if stack.optimizer == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(params, scale_parameter=False, relative_step=False, lr=1e-3)
    raise Unmeasurable(f"optimizer {stack.optimizer!r} has no torch equivalent here")


# --- hooks ---------------------------------------------------------------------------------


class _Held:
    """A saved tensor as autograd stores it during the recorded forward (see _Recorder.pack)."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


class _Recorder:
    """Pack hook + module stack + torch-function stack: who saved which storage."""

    def __init__(self, model, excluded: set[tuple[int, int]]):
        import torch
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        self.excluded = excluded
        self.param_ptrs = {k[0] for k in excluded}
        self.module_stack: list[str] = []
        self.fn_stack: list[str] = []
        self.seen: dict[tuple[int, int], SavedTensor] = {}
        self.holders: dict[tuple[int, int], list] = {}
        self.keep: list[Any] = []  # hold saved tensors so no storage address is ever reused
        self.calls = 0
        self.phase = "forward"
        self.recompute: dict[str, dict[tuple[int, int], SavedTensor]] = defaultdict(dict)
        # autocast's casts of parameters, held (strongly) until the recorder is closed so
        # that no freed cast's address can be reused by an activation and misclassified
        self.weight_copies: dict[int, Any] = {}
        self.handles = []
        self.reentered: str | None = None
        for name, module in model.named_modules():
            self.handles.append(module.register_forward_pre_hook(self._enter(name)))
            self.handles.append(module.register_forward_hook(self._leave(name), always_call=True))
        recorder = self

        class FnMode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                recorder.fn_stack.append(getattr(func, "__name__", str(func)))
                try:
                    return func(*args, **(kwargs or {}))
                finally:
                    recorder.fn_stack.pop()

        copy_ops = {torch.ops.aten._to_copy.default}

        class CastMode(TorchDispatchMode):
            """Remember outputs of dtype casts whose input is a parameter (autocast's weight casts)."""

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if func in copy_ops and isinstance(args[0], torch.Tensor):
                    if args[0].untyped_storage().data_ptr() in recorder.param_ptrs:
                        recorder.weight_copies[out.untyped_storage().data_ptr()] = out
                return out

        self.fn_mode = FnMode()
        self.cast_mode = CastMode()
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def _enter(self, name):
        import torch

        def hook(module, args):
            self.module_stack.append(name)
            if self.phase == "backward" and self.reentered is None and torch._C._len_torch_function_stack() == 0:
                # checkpointing recomputes layers inside autograd.backward, whose torch function
                # handler runs with our mode switched off: switch it on again for this module
                self.fn_mode.__enter__()
                self.reentered = name

        return hook

    def _leave(self, name):
        def hook(module, args, output):
            if self.module_stack and self.module_stack[-1] == name:
                self.module_stack.pop()
            if self.reentered == name:
                self.fn_mode.__exit__(None, None, None)
                self.reentered = None

        return hook

    def pack(self, t):
        key = _storage_key(t)
        module = self.module_stack[-1] if self.module_stack else "<top>"
        if self.phase == "backward":
            # reentrant checkpointing recomputes one layer at a time during backward
            # (the layer input checkpointing saved in forward is already counted there)
            if key not in self.excluded and key not in self.seen:
                layer = re.match(r"(.*?\.(?:layers|h|blocks)\.\d+)", module)
                self.recompute[layer.group(1) if layer else module][key] = self._record(t, key, module)
            return t
        self.calls += 1
        # autograd stores what pack returns: a holder whose life is the graph node's. A graph built and
        # dropped inside forward (peft DoRA's lora_B(lora_A(eye)) for the weight norm) frees its holders
        # before backward, so `live_keys` can tell those transients from what backward will read.
        holder = _Held(t)
        self.holders.setdefault(key, []).append(weakref.ref(holder))
        if key in self.excluded or key in self.seen:
            return holder
        self.seen[key] = self._record(t, key, module)
        self.keep.append(t.detach())  # pins the storage, not the graph that produced t
        return holder

    def live_keys(self) -> set[tuple[int, int]]:
        """Storages some graph node still holds (call at the end of forward, before backward)."""
        return {key for key, refs in self.holders.items() if any(ref() is not None for ref in refs)}

    def _record(self, t, key, module) -> SavedTensor:
        return SavedTensor(
            module=module,
            op=self.fn_stack[-1] if self.fn_stack else "<autograd.Function>",
            shape=tuple(t.shape),
            dtype=_dtype_name(t.dtype),
            storage_bytes=key[1],
            numel=t.numel(),
            weight_copy=key[0] in self.weight_copies,
        )

    @staticmethod
    def unpack(t):
        return t.tensor if isinstance(t, _Held) else t

    def close(self):
        for h in self.handles:
            h.remove()
        self.weight_copies.clear()


def _cuda_bytes(s: SavedTensor) -> int:
    """Bytes this saved tensor takes on CUDA: dropout keeps a bool mask there, a float noise here."""
    return s.numel if s.op == "dropout" else s.storage_bytes


def _tensor_bytes(tensors) -> tuple[int, dict[str, int]]:
    """Bytes of distinct storages among `tensors`, total and by dtype."""
    seen: set[tuple[int, int]] = set()
    by_dtype: dict[str, int] = defaultdict(int)
    for t in tensors:
        key = _storage_key(t)
        if key in seen:
            continue
        seen.add(key)
        by_dtype[_dtype_name(t.dtype)] += key[1]
    return sum(by_dtype.values()), dict(by_dtype)


def measure(config: dict, stack: Stack, shape: Shape, *, steps: int = 1) -> Measured:
    """Run `steps` training steps of `config` under `stack` at `shape` and count bytes exactly.

    Raises Unmeasurable when the stack needs CUDA-only pieces (QLoRA, 8-bit AdamW, flash).
    """
    _check_measurable(stack)
    if steps < 1:
        raise ValueError("steps: must be at least 1")
    model = build_model(config, stack)
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    weights, weights_by_dtype = _tensor_bytes(params)
    buffers, _ = _tensor_bytes(list(model.buffers()))
    excluded = {_storage_key(t) for t in [*params, *model.buffers()]}
    params_total, params_trainable = _param_counts(params)
    optimizer = make_optimizer(trainable, stack)
    run = _train(model, optimizer, _inputs(model, shape), stack, steps, excluded)
    optimizer_bytes, optimizer_by_dtype = _tensor_bytes(_optimizer_state(optimizer))
    recorder = run.recorder
    saved = [r for r in recorder.seen.values() if not r.transient]
    transient = sum(r.storage_bytes for r in recorder.seen.values() if r.transient)
    by_dtype, by_module, by_op = _saved_by(saved)
    recompute_layer, recompute = _largest_recompute(recorder)
    return Measured(
        weights=weights,
        gradients=run.gradients,
        optimizer=optimizer_bytes,
        activations=sum(s.storage_bytes for s in saved),
        params_total=params_total,
        params_trainable=params_trainable,
        buffers=buffers,
        weights_by_dtype=weights_by_dtype,
        gradients_by_dtype=run.gradients_by_dtype,
        optimizer_by_dtype=optimizer_by_dtype,
        activations_by_dtype=by_dtype,
        activations_by_module=by_module,
        activations_by_op=by_op,
        weight_copies=sum(s.storage_bytes for s in saved if s.weight_copy),
        transient_graphs=transient,
        saved_tensor_calls=recorder.calls,
        saved_storages=len(saved),
        dropout_mask_bytes=sum(s.storage_bytes for s in saved if s.op == "dropout"),
        dropout_mask_elements=sum(_cuda_bytes(s) for s in saved if s.op == "dropout"),
        recompute_max_layer=recompute,
        recomputed=list(recorder.recompute[recompute_layer].values()) if recompute else [],
        saved=saved,
        loss=run.loss,
    )


def _param_counts(params) -> tuple[int, int]:
    """(all, trainable) parameter elements; tied weights are one parameter object: each storage once."""
    seen_params: set[tuple[int, int]] = set()
    params_total = params_trainable = 0
    for p in params:
        key = _storage_key(p)
        if key in seen_params:
            continue
        seen_params.add(key)
        params_total += p.numel()
        params_trainable += p.numel() if p.requires_grad else 0
    return params_total, params_trainable


def _inputs(model, shape: Shape) -> dict:
    """Seeded random token ids as inputs and labels; a padded shape's last row ends with an eighth of padding
    (transformers then builds a mask)."""
    import torch

    vocab = model.config.get_text_config().vocab_size
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (shape.micro_batch, shape.seq_len), generator=generator)
    inputs = {"input_ids": ids, "labels": ids}
    if shape.padded:
        mask = torch.ones_like(ids)
        mask[-1, -max(1, shape.seq_len // 8):] = 0
        inputs["attention_mask"] = mask
    return inputs


@dataclass
class _Run:
    """What the recorded (last) training step left: its recorder, the gradients' bytes and the loss."""

    recorder: _Recorder
    gradients: int
    gradients_by_dtype: dict[str, int]
    loss: float


def _train(model, optimizer, inputs: dict, stack: Stack, steps: int, excluded: set) -> _Run:
    """`steps` optimizer steps; the last one's forward and backward run under the recorder."""
    import torch

    autocast_dtype = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(stack.precision)
    for _ in range(steps - 1):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=autocast_dtype, enabled=autocast_dtype is not None):
            loss = _loss(model, inputs, stack)
        loss.backward()
        del loss
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    recorder = _Recorder(model, excluded)
    with torch.autocast("cpu", dtype=autocast_dtype, enabled=autocast_dtype is not None):
        with recorder.hooks, recorder.fn_mode, recorder.cast_mode:
            loss = _loss(model, inputs, stack)
    recorder.phase = "backward"
    live = recorder.live_keys()
    for key, record in recorder.seen.items():
        record.transient = key not in live
    with recorder.hooks, recorder.fn_mode:
        loss.backward()
    recorder.close()
    loss_value = float(loss.detach())
    del loss
    trainable = [p for p in model.parameters() if p.requires_grad]
    gradients, gradients_by_dtype = _tensor_bytes([p.grad for p in trainable if p.grad is not None])
    optimizer.step()
    return _Run(recorder, gradients, gradients_by_dtype, loss_value)


def _optimizer_state(optimizer) -> list:
    import torch

    return [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]


def _saved_by(saved: list[SavedTensor]) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """Saved bytes by dtype, by module (layers folded) and by module and op."""
    by_dtype: dict[str, int] = defaultdict(int)
    by_module: dict[str, int] = defaultdict(int)
    by_op: dict[str, int] = defaultdict(int)
    for s in saved:
        by_dtype[s.dtype] += s.storage_bytes
        by_module[_fold_layers(s.module)] += s.storage_bytes
        by_op[f"{_fold_layers(s.module)} :: {s.op}"] += s.storage_bytes
    return dict(by_dtype), dict(by_module), dict(by_op)


def _largest_recompute(recorder: _Recorder) -> tuple[str, int]:
    """(layer, bytes) of the layer whose recompute holds the most, as CUDA would ("", 0 without recompute)."""
    recompute_layer, recompute = "", 0
    for layer, records in recorder.recompute.items():
        total = sum(_cuda_bytes(r) for r in records.values())
        if total > recompute:
            recompute_layer, recompute = layer, total
    return recompute_layer, recompute


def _loss(model, inputs: dict, stack: Stack):
    """The training loss as the stack computes it: transformers' own, the reference chunked loss on the
    logits (the model returns logits only; Trainer then drops them before backward), or TRL 1.16.0's
    SFTTrainer loss (--loss trl): its fused LM head, added as SFTTrainer.__init__ adds it, and
    compute_loss's sum of -log_probs over the labelled tokens (trl/trainer/sft_trainer.py)."""
    if stack.loss == "trl":
        from trl.trainer.utils import add_fused_lm_head

        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        if not getattr(base, "_advisor_fused_lm_head", False):
            add_fused_lm_head(base, outputs=("log_probs", "entropy", "is_top1"))
            base._advisor_fused_lm_head = True
        out = model(**inputs, fused_lm_head=True)
        return -out.log_probs.sum() / out.label_mask.sum().clamp(min=1)
    if stack.loss != "chunked":
        return model(**inputs).loss
    labels = inputs["labels"]
    logits = model(**{k: v for k, v in inputs.items() if k != "labels"}).logits
    return chunked_cross_entropy(logits, labels)


def activation_target(m: Measured, stack: Stack) -> int:
    """The activation bytes the estimator must match for this measurement.

    What autograd saves in forward, as CUDA would hold it (bool dropout masks), plus -- with
    gradient checkpointing -- the one layer that backward recomputes at a time (its saved
    tensors live until that layer's backward ends). A sum, hence an upper bound: by the time
    the first layer is recomputed the logits path has been freed.
    """
    return m.activations_cuda + (m.recompute_max_layer if stack.grad_checkpointing else 0)


# Tolerances the issue sets for the estimator against these measurements.
TOLERANCE = {"weights": 0.02, "gradients": 0.02, "optimizer": 0.02, "activations": 0.10}

# A small Llama (3 layers, GQA 4:2) for the harness's own checks and the saved-tensor dump.
LLAMA_SMALL = {
    "model_type": "llama", "vocab_size": 4096, "hidden_size": 256, "intermediate_size": 688,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "max_position_embeddings": 2048, "tie_word_embeddings": False,
}


# --- the validation matrix -------------------------------------------------------------------
# Real families at CPU-sized widths. Not shrunk to pass: some cases are dominated by per-layer
# activations (many layers, long sequences, eager s^2 scores), others by the logits path
# (Gemma's 262k vocabulary with a tiny hidden size).


@dataclass(frozen=True)
class ValidationCase:
    name: str
    config: dict
    stack: Stack
    shape: Shape


def _cfg(model_type: str, **kw) -> dict:
    return {"model_type": model_type, "max_position_embeddings": 4096, **kw}


_LLAMA = _cfg("llama", vocab_size=4096, hidden_size=512, intermediate_size=1376, num_hidden_layers=6,
              num_attention_heads=8, num_key_value_heads=4, head_dim=64, tie_word_embeddings=False)
_LLAMA_32K = {**_LLAMA, "vocab_size": 32000, "num_hidden_layers": 4}
_QWEN2 = _cfg("qwen2", vocab_size=16384, hidden_size=384, intermediate_size=1024, num_hidden_layers=6,
              num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=True)
_QWEN3 = _cfg("qwen3", vocab_size=32768, hidden_size=256, intermediate_size=768, num_hidden_layers=8,
              num_attention_heads=4, num_key_value_heads=2, head_dim=128, tie_word_embeddings=True)
_QWEN3_MOE = _cfg("qwen3_moe", vocab_size=8192, hidden_size=256, intermediate_size=768, num_hidden_layers=6,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_experts=8,
                  num_experts_per_tok=2, moe_intermediate_size=256, tie_word_embeddings=False)
_MIXTRAL = _cfg("mixtral", vocab_size=8000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                tie_word_embeddings=False)
_GEMMA2 = _cfg("gemma2", vocab_size=262144, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
               num_attention_heads=2, num_key_value_heads=1, head_dim=64, query_pre_attn_scalar=64,
               sliding_window=128, tie_word_embeddings=True)
_GEMMA3 = _cfg("gemma3_text", vocab_size=262144, hidden_size=128, intermediate_size=512, num_hidden_layers=3,
               num_attention_heads=2, num_key_value_heads=1, head_dim=64, query_pre_attn_scalar=64,
               sliding_window=64, tie_word_embeddings=True)
_PHI3 = _cfg("phi3", vocab_size=32064, hidden_size=384, intermediate_size=1024, num_hidden_layers=6,
             num_attention_heads=6, num_key_value_heads=6, tie_word_embeddings=False)
# fp16 GEMMs run at ~1 GFLOP/s on these CPUs (no fp16 kernels; bf16 has AVX512-BF16), so the
# fp16 / amp-fp16 cases use a narrow model; their byte sizes match bf16 / amp-bf16 anyway.
_LLAMA_TINY = {**_LLAMA, "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 2,
               "num_attention_heads": 2, "num_key_value_heads": 1}
_LLAMA_3L = {**_LLAMA, "num_hidden_layers": 3}
_MISTRAL = _cfg("mistral", vocab_size=32768, hidden_size=256, intermediate_size=896, num_hidden_layers=8,
                num_attention_heads=4, num_key_value_heads=2, head_dim=64, sliding_window=4096,
                tie_word_embeddings=False)


def _case(name: str, config: dict, micro_batch: int, seq_len: int, padded: bool = False, **stack) -> ValidationCase:
    shape = Shape(micro_batch=micro_batch, seq_len=seq_len, padded=padded)
    # the harness computes transformers' own loss (model(..., labels).loss) unless a case says chunked
    return ValidationCase(name, config, Stack(**{"loss": "standard", **stack}), shape)


VALIDATION_CASES: tuple[ValidationCase, ...] = (
    _case("llama-4k full bf16 sdpa", _LLAMA, 2, 512, method="full", precision="bf16", attention="sdpa"),
    _case("llama-4k full bf16 sdpa padded", _LLAMA, 2, 512, padded=True, method="full", precision="bf16",
          attention="sdpa"),
    _case("qwen2 lora-d0.05 bf16 sdpa padded", _QWEN2, 2, 256, padded=True, method="lora", precision="bf16",
          attention="sdpa"),
    _case("llama-4k full fp32 sdpa ckpt sgd", _LLAMA, 2, 512, method="full", precision="fp32",
          attention="sdpa", grad_checkpointing=True, optimizer="sgd"),
    _case("llama-tiny full fp16 sdpa", _LLAMA_TINY, 1, 64, method="full", precision="fp16", attention="sdpa"),
    _case("llama-tiny lora-d0 amp-fp16 sdpa", _LLAMA_TINY, 1, 64, method="lora", lora_dropout=0.0,
          precision="amp-fp16", attention="sdpa"),
    _case("llama-32k lora-d0 bf16 eager s1024", _LLAMA_32K, 1, 1024, method="lora", lora_dropout=0.0,
          precision="bf16", attention="eager"),
    _case("llama-32k lora-d0.05 amp-bf16 sdpa", _LLAMA_32K, 4, 256, method="lora", lora_dropout=0.05,
          precision="amp-bf16", attention="sdpa"),
    _case("qwen2 full fp32 eager (bias, tied)", _QWEN2, 1, 256, method="full", precision="fp32",
          attention="eager"),
    _case("qwen2 lora-d0 bf16 sdpa ckpt", _QWEN2, 4, 128, method="lora", lora_dropout=0.0,
          precision="bf16", attention="sdpa", grad_checkpointing=True),
    _case("qwen3 lora-d0.05 q,v bf16 sdpa (qk-norm)", _QWEN3, 2, 512, method="lora", lora_dropout=0.05,
          lora_targets="q_proj,v_proj", precision="bf16", attention="sdpa"),
    _case("qwen3 full amp-bf16 eager adafactor", _QWEN3, 4, 64, method="full", precision="amp-bf16",
          attention="eager", optimizer="adafactor"),
    _case("qwen3_moe full bf16 sdpa", _QWEN3_MOE, 2, 256, method="full", precision="bf16", attention="sdpa"),
    # MoE cases run in bf16, not amp: CPU autocast does not cover torch._grouped_mm, so fused
    # experts stay fp32 on the CPU while CUDA runs them in bf16 (amp is measured on dense families).
    _case("qwen3_moe lora-d0 bf16 sdpa ckpt", _QWEN3_MOE, 2, 256, method="lora", lora_dropout=0.0,
          precision="bf16", attention="sdpa", grad_checkpointing=True),
    _case("qwen3_moe lora-d0 bf16 sdpa", _QWEN3_MOE, 2, 256, method="lora", lora_dropout=0.0,
          precision="bf16", attention="sdpa"),
    _case("mixtral full bf16 eager", _MIXTRAL, 1, 512, method="full", precision="bf16", attention="eager"),
    _case("gemma2-262k full bf16 eager (softcap)", _GEMMA2, 1, 256, method="full", precision="bf16",
          attention="eager"),
    _case("gemma3-262k lora-d0.05 bf16 sdpa", _GEMMA3, 2, 128, method="lora", lora_dropout=0.05,
          precision="bf16", attention="sdpa"),
    _case("gemma3-262k full amp-bf16 sdpa ckpt adamw-fp32", _GEMMA3, 1, 256, method="full",
          precision="amp-bf16", attention="sdpa", grad_checkpointing=True, optimizer="adamw-fp32"),
    _case("phi3 full bf16 eager (fused qkv)", _PHI3, 2, 256, method="full", precision="bf16", attention="eager"),
    _case("phi3 lora-d0.05 amp-bf16 sdpa ckpt", _PHI3, 2, 256, method="lora", lora_dropout=0.05,
          precision="amp-bf16", attention="sdpa", grad_checkpointing=True),
    _case("mistral full amp-bf16 sdpa ckpt s1024", _MISTRAL, 1, 1024, method="full", precision="amp-bf16",
          attention="sdpa", grad_checkpointing=True),
    _case("mistral lora-d0 bf16-adapters bf16 eager", _MISTRAL, 2, 256, method="lora", lora_dropout=0.0,
          adapter_dtype="bf16", precision="bf16", attention="eager"),
    # Techniques. DoRA with dropout keeps each adapted weight cast to fp32; without dropout it
    # keeps the base layer's own output (Qwen2: minus the q/k/v bias); its weight-norm graph is built and
    # dropped inside forward (the harness tells those transients apart).
    _case("llama-3l lora-d0.05 dora bf16 sdpa", _LLAMA_3L, 2, 128, method="lora", dora=True, lora_dropout=0.05,
          precision="bf16", attention="sdpa"),
    _case("qwen2 lora-d0 dora bf16 sdpa (bias)", _QWEN2, 2, 128, method="lora", dora=True, lora_dropout=0.0,
          precision="bf16", attention="sdpa"),
    _case("llama-3l lora-d0.05 q,v,lm_head bf16 sdpa", _LLAMA_3L, 2, 128, method="lora", lora_dropout=0.05,
          lora_targets="q_proj,v_proj,lm_head", precision="bf16", attention="sdpa"),
    _case("mistral lora-d0.05 q,v,embed_tokens bf16 sdpa", _MISTRAL, 2, 128, method="lora", lora_dropout=0.05,
          lora_targets="q_proj,v_proj,embed_tokens", precision="bf16", attention="sdpa"),
    _case("llama-3l lora-d0 modules_to_save embed,lm_head bf16 sdpa", _LLAMA_3L, 2, 128, method="lora",
          lora_dropout=0.0, modules_to_save="embed_tokens,lm_head", precision="bf16", attention="sdpa"),
    _case("llama-32k lora-d0 chunked-loss bf16 sdpa", _LLAMA_32K, 2, 128, method="lora", lora_dropout=0.0,
          loss="chunked", precision="bf16", attention="sdpa"),
    # TRL 1.16.0 SFTTrainer's fused LM head (the launch bundle's loss): no logits kept
    _case("llama-32k lora-d0 trl-loss bf16 sdpa", _LLAMA_32K, 2, 128, method="lora", lora_dropout=0.0,
          loss="trl", precision="bf16", attention="sdpa"),
    _case("llama-32k full trl-loss bf16 sdpa", _LLAMA_32K, 2, 128, method="full", loss="trl", precision="bf16",
          attention="sdpa"),
    _case("llama-32k lora-d0 trl-loss bf16 ckpt", _LLAMA_32K, 2, 128, method="lora", lora_dropout=0.0,
          loss="trl", precision="bf16", attention="sdpa", grad_checkpointing=True),
    _case("llama-32k full trl-loss amp-bf16 sdpa", _LLAMA_32K, 2, 128, method="full", loss="trl",
          precision="amp-bf16", attention="sdpa"),
)

# Stacks the CPU cannot run, each with its reason (the benchmark prints them).
EXCLUDED_STACKS: tuple[tuple[str, Stack, str], ...] = (
    ("qlora", Stack(loss="standard", method="qlora"), "QLoRA needs bitsandbytes' NF4 kernels (CUDA only)"),
    ("adamw-8bit", Stack(loss="standard", optimizer="adamw-8bit"), "bitsandbytes 8-bit AdamW is CUDA only"),
    ("flash", Stack(loss="standard", attention="flash"), "flash-attn is CUDA only; sdpa saves the same q/k/v/out/lse"),
    ("adamw-fp32 on 16-bit weights", Stack(loss="standard", optimizer="adamw-fp32", precision="bf16"),
     "torch AdamW keeps states in the parameter dtype; measured with fp32/amp weights instead"),
    ("sharding / offload", Stack(loss="standard", gpus=2, sharding="fsdp"), "needs several processes; one is measured"),
    ("liger", Stack(loss="standard", liger=True), "Liger Kernel's Triton kernels need a GPU; modelled from liger-kernel's source"),
    ("compile", Stack(loss="standard", compile=True), "torch.compile saves tensors inside compiled functions, out of the hooks' reach"),
)
