"""Training objectives beyond SFT: what DPO and GRPO hold and run per step, modelled from the code that runs
them (TRL 1.16.0 and vLLM 0.33.0; each term cites file:line in those releases, `advisor.objective.TRL` /
`advisor.objective.VLLM`). The `Objective` record a `Stack` carries (sft, dpo, grpo, their settings and TRL's
defaults) lives in advisor/objective.py, below the stacks and everything that uses them.

- `fused_head`: TRL's chunked log-prob LM head (what replaces the SFT logits path);
- `reference`: where the reference model lives (a copy, sharded or replicated; the adapter switched off; none);
- `generation`: transformers' `generate` inside the trainer (its KV cache) and GRPO's buffered batch;
- `vllm`: vLLM colocated (its budget, weights, KV pool, refusals, sleep mode) or as a server on its own GPUs;
- `memory`: the per-GPU estimate of a DPO or GRPO step, phase by phase (advisor.estimate.engine calls it);
- `timing`: the step time (generation, weight sync, no-gradient passes, training).

This module only names its parts; import them directly.
"""
