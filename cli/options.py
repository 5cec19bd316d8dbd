"""The stack options, defined once: `estimate` takes them with defaults, `plan` as pins.

Each option names a `Stack` (or `Shape`) field. `estimate` builds one stack from them; `plan`
passes only the options the user gave (a pin fixes that dimension, the rest are searched).
"""

from __future__ import annotations

from typing import Any

import click

from advisor.stacks import ATTENTIONS, FRAMEWORKS, LOSSES, OFFLOADS, OPTIMIZERS, PRECISIONS, SHARDINGS


def choice(values) -> click.Choice:
    """A click choice that takes any case ('LoRA', 'BF16') and passes on the canonical value."""
    return click.Choice(list(values), case_sensitive=False)


# (option declaration, field, click type or None for a boolean flag pair, estimate default, help)
_SPECS: list[tuple[str, str, Any, Any, str]] = [
    ("--lora-rank", "lora_rank", click.IntRange(min=1), 16, "LoRA rank r"),
    ("--lora-alpha", "lora_alpha", click.IntRange(min=1), None, "LoRA alpha (default: 2 × rank)"),
    ("--lora-dropout", "lora_dropout", click.FloatRange(0, 1, max_open=True), 0.05, "LoRA dropout"),
    ("--lora-targets", "lora_targets", str, "all-linear",
     "all-linear or module names, e.g. q_proj,v_proj (lm_head and embed_tokens where peft supports them)"),
    ("--adapter-dtype", "adapter_dtype", choice(["fp32", "bf16"]), "fp32",
     "peft keeps adapters in fp32 by default; torchtune/older peft in bf16"),
    ("--dora/--no-dora", "dora", None, False, "DoRA (peft use_dora=True): LoRA plus a learned magnitude per output"),
    ("--modules-to-save", "modules_to_save", str, "",
     "modules trained fully beside the adapters (peft modules_to_save), e.g. embed_tokens,lm_head"),
    ("--double-quant/--no-double-quant", "double_quant", None, True, "QLoRA double quantisation"),
    ("--bnb-legacy/--no-bnb-legacy", "bnb_saves_inputs", None, False,
     "bitsandbytes 0.41-0.42, which kept every 4-bit linear's input for backward"),
    ("--precision", "precision", choice(PRECISIONS), "bf16",
     "bf16/fp16/fp32: weights held in that dtype; amp-*: fp32 master weights + autocast (mixed precision)"),
    ("--optimizer", "optimizer", choice(OPTIMIZERS), "adamw", "optimizer"),
    ("--grad-checkpointing/--no-grad-checkpointing", "grad_checkpointing", None, False, "activation checkpointing"),
    ("--attention", "attention", choice(ATTENTIONS), None,
     "default: sdpa, or eager where transformers has no SDPA for the model (Gemma 2)"),
    ("--liger/--no-liger", "liger", None, False,
     "Liger Kernel (use_liger_kernel): fused linear cross-entropy, RMSNorm, SwiGLU, RoPE"),
    ("--loss", "loss", choice(LOSSES), "trl",
     "loss path: trl = TRL SFTTrainer's fused LM head (what the launch bundle runs; no logits kept), standard = "
     "transformers' full fp32 logits, chunked = torchtune's chunked cross-entropy, cce = Cut Cross-Entropy"),
    ("--compile/--no-compile", "compile", None, False, "torch.compile (TrainingArguments torch_compile)"),
    ("--sharding", "sharding", choice(SHARDINGS), None, "default: none on 1 GPU, fsdp on more"),
    ("--offload", "offload", choice(OFFLOADS), "none", "CPU offload (needs fsdp/zero)"),
    ("--framework", "framework", choice(FRAMEWORKS), "hf",
     "what runs the training steps (time only): hf = transformers Trainer/TRL + peft + accelerate/DeepSpeed, "
     "as the launch bundle writes; tuned = torchtitan/llm-foundry-like FSDP2/compile stacks"),
]
FIELDS = [spec[1] for spec in _SPECS]


def stack_options(f=None, *, pins: bool = False):
    """Decorator adding every stack option. `pins=True` (plan): no defaults; a given option pins
    that dimension of the search and an absent one is searched."""
    def decorate(func):
        for decl, field, kind, default, help_text in reversed(_SPECS):
            names = [decl] if kind is None else [decl, field]
            if kind is None:
                option = click.option(decl, field, default=None if pins else default,
                                      show_default=not pins, help=help_text + (" [searched]" if pins else ""))
            else:
                option = click.option(*names, type=kind, default=None if pins else default,
                                      show_default=not pins and default not in (None, ""),
                                      help=help_text + (" [searched]" if pins else ""))
            func = option(func)
        return func

    return decorate(f) if f is not None else decorate


def given(options: dict[str, Any]) -> dict[str, Any]:
    """The stack fields the user set (pins), popped from a command's options."""
    return {field: options.pop(field) for field in FIELDS if options.get(field) is not None}


def as_args(field: str, value: Any) -> list[str]:
    """The command-line words that set `field` to `value` (for commands that reproduce a plan)."""
    decl = next(d for d, f, *_ in _SPECS if f == field)
    if "/" in decl:
        yes, no = decl.split("/")
        return [yes if value else no]
    return [decl, str(value)]
