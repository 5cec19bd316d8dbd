"""The planner's side of DPO and GRPO: which generation setups a config tries, where generation runs and what the
candidate says about it.

- GRPO without --vllm tries the three generators TRL offers: transformers `generate` in the trainer, vLLM colocated
  in every training GPU (its budget sized from that GPU), and vLLM as a server on GPUs of the same instance -- the
  `trl vllm-serve` + `accelerate launch` recipe of TRL's docs, where a node's first GPUs serve and the rest train --
  so server GPUs are rented with the training GPUs, on the same instance, and priced with it;
- a setup vLLM would refuse to start (its pool cannot hold one max_model_len request) is ruled out with the reason;
- each candidate says what runs where and how much of its time is generation.
"""

from __future__ import annotations

import math

from advisor.objective import Objective
from advisor.planner.request import PlanRequest

MODES = ("none", "colocate", "server")


def objectives_for(request: PlanRequest, gpu, gpus: int) -> list[tuple[Objective, int]]:
    """(objective, training GPUs) for each generation setup worth pricing on `gpus` GPUs of `gpu`."""
    o = request.objective
    if o.kind != "grpo":
        return [(o, gpus)]
    modes = MODES if request.vllm_searched else (o.vllm,)
    out = []
    for mode in modes:
        fields = dict(o.__dict__, vllm=mode, card_bytes=int(gpu.usable_bytes) if mode != "none" else None)
        if mode != "colocate":
            fields["vllm_sleep"] = False
        if mode == "none":
            fields["vllm_gpu_memory_utilization"] = None
        if mode != "server":
            fields["vllm_server_gpus"] = 1
        train = gpus - (fields["vllm_server_gpus"] if mode == "server" else 0)
        if train < 1:
            continue
        # TRL's default steps_per_generation = gradient accumulation: each GPU generates its share of the global batch
        fields["generation_batch_per_gpu"] = global_batch(request, train) // train
        out.append((Objective(**fields), train))
    return out


def global_batch(request: PlanRequest, gpus: int) -> int:
    """The global batch a run on `gpus` training GPUs uses: the requested one, or for GRPO the nearest multiple of
    both the GPU count and num_generations (TRL refuses a generation batch that splits a prompt's group,
    grpo_config.py:1131-1135)."""
    wanted = request.sequences_per_step
    if request.objective.kind != "grpo":
        return wanted
    unit = math.lcm(gpus, request.objective.num_generations)
    return max(unit, round(wanted / unit) * unit)


def server_shortfall(request: PlanRequest, gpus: int) -> str | None:
    """Why server mode cannot run on `gpus` GPUs (it needs its own besides at least one training GPU)."""
    o = request.objective
    if o.kind == "grpo" and o.vllm == "server" and not request.vllm_searched and gpus <= o.vllm_server_gpus:
        return (f"--vllm server: {o.vllm_server_gpus} GPU(s) serve vLLM, so the instance needs more than that to "
                "train as well")
    return None


def refusal_reason(est) -> str | None:
    """A plan-level reason (counted across offers) when vLLM or TRL would refuse this setup, else None."""
    info = getattr(est, "objective", None)
    if info is None or not info.refusals:
        return None
    text = info.refusals[0]
    if "max_model_len" in text:
        return ("vLLM would refuse to start: its KV pool cannot hold one max_model_len request at this "
                "gpu_memory_utilization on this GPU (vllm 0.33.0 kv_cache_planning.py:50-87)")
    return "vLLM's budget does not hold its own weights and activations on this GPU"
