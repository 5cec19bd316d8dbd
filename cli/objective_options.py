"""The objective options, defined once: `estimate` and `plan` (and `launch`, through plan's options) take
`--objective sft|dpo|grpo` and its settings; `objective_from` builds the `Objective` (advisor/estimate/objectives/
spec.py) the stack carries. Options left out take TRL 1.16.0's defaults for the objective."""

from __future__ import annotations

from typing import Any

import click

from advisor.objective import KINDS, REF_MODELS, VLLM_MODES, Objective, objective_of, pop_objective
from cli.options import choice

# (declaration, click type or None for a flag pair, help); the destination is the option's name
_SPECS: list[tuple[str, Any, str]] = [
    ("--objective", choice(KINDS), "what one step trains: sft (default), dpo (preference pairs) or grpo "
                                   "(generated completions scored by rewards)"),
    ("--ref-model", choice(REF_MODELS),
     "DPO / GRPO with beta > 0: how the reference is held (default: TRL's: adapter-off under LoRA/QLoRA, a frozen "
     "copy for full fine-tuning; precomputed: DPO log-probs computed before training)"),
    ("--loss-type", str, "TRL loss type(s), comma list (DPO default sigmoid, GRPO dapo)"),
    ("--beta", click.FloatRange(0, 1e6), "KL coefficient (DPO default 0.1; GRPO 0.0 = no reference model)"),
    ("--max-prompt-length", click.IntRange(min=1),
     "prompt tokens per row (GRPO default 512; DPO default half of --seq-len); TRL 1.16 does not truncate prompts"),
    ("--num-generations", click.IntRange(min=2), "GRPO completions per prompt [8]"),
    ("--max-completion-length", click.IntRange(min=1), "GRPO tokens per completion [512]"),
    ("--vllm", choice(VLLM_MODES), "GRPO generation: colocate (vLLM inside the training GPUs), server (vLLM on GPUs "
                                   "of its own) or none (transformers generate) [estimate: none; plan: searched]"),
    ("--vllm-gpu-memory-utilization", click.FloatRange(0, 1, min_open=True),
     "vLLM's share of each GPU it runs on (colocate default 0.3, server 0.9)"),
    ("--vllm-server-gpus", click.IntRange(min=1), "GPUs of the instance that serve vLLM [1]"),
    ("--vllm-tensor-parallel-size", click.IntRange(min=1), "colocated vLLM's tensor-parallel size [1]"),
    ("--vllm-sleep/--no-vllm-sleep", None,
     "colocated vLLM sleeps (level 2) between generations, freeing its memory for training"),
    ("--vllm-max-model-length", str,
     "vLLM's context: tokens, or 'model' for the model's own (TRL's default when unset) [prompt + completion]"),
    ("--importance-sampling/--no-importance-sampling", None,
     "GRPO with vLLM: TRL's importance-sampling correction (an extra no-gradient pass) [on]"),
    ("--num-iterations", click.IntRange(min=1), "GRPO updates per generation batch (mu) [1]"),
    ("--steps-per-generation", click.IntRange(min=1), "GRPO micro-steps per generation [the gradient accumulation]"),
]


def objective_options(f):
    """Decorator adding every objective option (no defaults here: an absent option takes TRL's)."""
    for decl, kind, help_text in reversed(_SPECS):
        dest = decl.split("/")[0][2:].replace("-", "_")
        if kind is None:
            f = click.option(decl, dest, default=None, help=help_text)(f)
        else:
            f = click.option(decl, dest, type=kind, default=None, help=help_text)(f)
    return f


def objective_from(options: dict[str, Any]) -> Objective:
    """Pop the objective options and build the Objective (a setting of another objective: exit 2)."""
    return objective_of(pop_objective(options))
