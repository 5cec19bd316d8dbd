"""Per-GPU memory of one DPO or GRPO step, phase by phase, from the SFT estimate of the same rows.

The policy's model states, saved activations and backward workspace are the SFT estimate's
(advisor.estimate.memory) at the rows the trainer actually puts through the policy -- DPO: chosen and rejected
concatenated, 2 × per_device_train_batch_size rows (trl 1.16.0 dpo_trainer.py:146-207, :169; CPU-verified input
(4, 15) at batch 2); GRPO: per_device_train_batch_size completions of prompt + completion tokens
(grpo_trainer.py:1544-1546, 2441-2504) -- padded rows (DPO ignores padding_free, dpo_trainer.py:732-739; GRPO pads
prompts left and completions right). Then:
- the SFT logits path (logits, fp32 log_softmax, their gradients) is replaced by TRL's fused log-prob head
  (objectives/fused_head.py);
- the reference model's weights and its no-gradient forward are added (objectives/reference.py);
- GRPO adds generation (transformers' KV cache, objectives/generation.py, or vLLM's share, objectives/vllm.py),
  the no-gradient old-policy / reference passes (chunked by per_device_train_batch_size, grpo_trainer.py:1440-1445)
  and the buffered generation batch.
Each phase of the step is summed on its own (the policy's activations are alive during the reference forward; the
gradients of the last step are freed before generation); the peak is the largest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from advisor.estimate import memory as sft_memory
from advisor.estimate.activations import loss_transient
from advisor.estimate.objectives import fused_head, generation, reference, vllm
from advisor.model.architecture import Architecture
from advisor.objective import SFT, TRL
from advisor.results import Breakdown, Component, MemoryEstimate, ObjectiveMemory
from advisor.stacks import Shape, Stack
from advisor.units import GiB, MiB

# Allocated buffers of the SFT estimate that are alive in every phase (the rest of its overhead rows are
# transients of the backward pass).
_FIXED = ("overhead.ddp_buckets", "overhead.nccl_buffers", "overhead.zero3_reduce_bucket")
_RESERVE = ("overhead.allocator", "overhead.cuda_context")
_SFT_LOSS = ("activations.loss.", "activations.logits.", "activations.lm_head.")


def rows_through_policy(stack: Stack, micro_batch: int) -> int:
    """Rows one micro-step puts through the policy: DPO 2 per pair (chosen + rejected), else the micro-batch."""
    return 2 * micro_batch if stack.objective.kind == "dpo" else micro_batch


# (gradients, activations, generation, other) bytes alive in one phase of the step
Phase = tuple[int, int, int, int]


@dataclass
class _Extras:
    """What the objective's own phases add: components, and what the estimate reports about generation and vLLM."""

    components: dict[str, Component] = field(default_factory=dict)
    generation: dict[str, str | int | float | bool] = field(default_factory=dict)
    vllm: dict[str, str | int | float | bool] = field(default_factory=dict)
    refusals: list[str] = field(default_factory=list)


def estimate(arch: Architecture, stack: Stack, shape: Shape, compact: bool = True) -> MemoryEstimate:
    """The per-GPU estimate of a DPO or GRPO step (compact=False scores every position, as TRL does off CUDA)."""
    o = stack.objective
    base = stack.model_copy(update={"objective": SFT})
    rows = rows_through_policy(stack, shape.micro_batch)
    seq = shape.seq_len
    prompt, completion = o.split(seq)
    row_shape = Shape(micro_batch=rows, seq_len=seq, grad_accum=shape.grad_accum, padded=True)
    sft = sft_memory.estimate(arch, base, row_shape)
    comps = _policy_components(arch, stack, base, row_shape, sft)
    head = _objective_components(arch, stack, shape, rows, seq, completion, compact, comps)

    W = _sum(comps, "weights.")
    G = _sum(comps, "gradients.")
    OPT = _sum(comps, "optimizer.")
    A = _sum(comps, "activations.")
    fixed = sum(comps[k].bytes for k in _FIXED if k in comps)
    phases, g_between = _training_phases(arch, stack, shape, comps, head, G, A, fixed)

    extras = _Extras()
    if o.kind == "dpo":
        _dpo_reference(arch, stack, rows, seq, completion, compact, fixed, g_between, A, phases, extras)
    else:
        _grpo(arch, stack, shape, seq, prompt, completion, compact, fixed, phases, extras)
    comps.update(extras.components)

    frag = int(sft_memory.ALLOCATOR_FLOOR_BYTES + sft_memory.ALLOCATOR_DYNAMIC_FRACTION * (A + head.backward))
    comps["overhead.allocator"] = Component(
        bytes=frag, formula=f"{sft_memory.ALLOCATOR_FLOOR_BYTES // MiB} MiB + "
                            f"{sft_memory.ALLOCATOR_DYNAMIC_FRACTION:.0%} of activations and the fused head's "
                            "backward buffers",
        source="PyTorch caching allocator: block rounding and fragmentation (reserved − allocated)")
    totals = {name: W + OPT + g + a + gen + other for name, (g, a, gen, other) in phases.items()}
    peak_name = max(totals, key=totals.get)
    g_peak, a_peak, gen_peak, _ = phases[peak_name]
    peak_allocated = totals[peak_name]
    peak_reserved = peak_allocated + frag
    device_total = peak_reserved + sft_memory.CUDA_CONTEXT_BYTES
    breakdown = Breakdown(weights=W, gradients=g_peak, optimizer=OPT, activations=a_peak, generation=gen_peak,
                          overhead=device_total - (W + g_peak + OPT + a_peak + gen_peak), total=device_total)
    assumptions = dict(sft.assumptions)
    assumptions.update(_assumptions(stack, rows, seq, prompt, completion, compact, peak_name))
    warnings = list(sft.warnings) + extras.refusals
    info = ObjectiveMemory(
        kind=o.kind, reference=reference.how(stack), rows_per_micro_batch=rows, scored_tokens=head.scored,
        phases={name: total + frag + sft_memory.CUDA_CONTEXT_BYTES for name, total in totals.items()},
        peak_phase=peak_name, generation=extras.generation, vllm=extras.vllm, refusals=extras.refusals)
    return MemoryEstimate(model=sft.model, stack=stack, shape=shape, breakdown=breakdown, components=comps,
                          peak_allocated=peak_allocated, peak_reserved=peak_reserved, device_total=device_total,
                          static_bytes=W + G + OPT, cpu_ram_bytes=sft.cpu_ram_bytes, assumptions=assumptions,
                          warnings=warnings, objective=info)


def _policy_components(arch: Architecture, stack: Stack, base: Stack, row_shape: Shape,
                       sft: MemoryEstimate) -> dict[str, Component]:
    """The SFT estimate's components of the same rows without its loss path (TRL's fused head replaces it)."""
    comps = dict(sft.components)
    loss_name = loss_transient(arch, base, row_shape).name
    for key in [k for k in comps if k.startswith(_SFT_LOSS) or k == loss_name]:
        del comps[key]
    copies = comps.get("activations.autocast_weight_copies")
    if copies is not None and not stack.liger:  # the fused head casts lm_head's weight inside its autograd.Function
        # (chunked_logprob.py:351-353, no graph): no 16-bit copy of lm_head stays saved, as the SFT loss path keeps
        left = copies.bytes - 2 * arch.spec.vocab_size * arch.spec.hidden_size
        comps["activations.autocast_weight_copies"] = Component(bytes=max(left, 0), formula=copies.formula + " (not "
                                                                "lm_head's: the fused head casts it chunk by chunk)",
                                                                source=copies.source)
    return comps


def _objective_components(arch: Architecture, stack: Stack, shape: Shape, rows: int, seq: int, completion: int,
                          compact: bool, comps: dict[str, Component]):
    """Adds the fused head's saved tensors, the DPO / GRPO loss, the reference's weights and the head's backward
    buffers to `comps`; returns the policy's fused head (fused_head.fused_head)."""
    o = stack.objective
    outputs = fused_head.DPO_OUTPUTS if o.kind == "dpo" else fused_head.GRPO_OUTPUTS
    head = fused_head.fused_head(arch, stack, rows, seq, completion, outputs, compact)
    for term, (nbytes, formula) in head.saved.items():
        comps[f"activations.{term}"] = Component(bytes=nbytes, formula=formula, source=fused_head.SRC)
    if o.kind == "grpo":
        # the clipped-ratio loss over the completions (grpo_trainer.py:3096-3160, loss "dapo"): exp(log-ratio) and the
        # two-sided min keep fp32 (rows, completion) tensors, the completion mask (int64) multiplies the loss; beta > 0
        # adds exp(ref - logp) and its product (CPU census: 20 B, 28 B with beta, per row and completion token)
        per = 20 + (8 if o.effective_beta else 0)
        comps["activations.grpo_loss"] = Component(
            bytes=rows * completion * per + rows * 4 + 4,
            formula=f"{rows} rows × {completion} completion tokens × {per} B (fp32 ratio, min, int64 mask"
                    + (", KL terms" if o.effective_beta else "") + ")", source="trl 1.16.0 grpo_trainer.py:3020-3160")
    else:  # -logsigmoid over the pairs' margins keeps its fp32 input (dpo_trainer.py:1387-1389; 8 B per pair on the
        # CPU census)
        comps["activations.dpo_loss"] = Component(bytes=shape.micro_batch * 8, formula="2 fp32 per pair (loss margins)",
                                                  source="trl 1.16.0 dpo_trainer.py:1349-1528")
    ref_bytes, ref_formula = reference.weights(arch, stack)
    if ref_bytes:
        comps["weights.reference"] = Component(bytes=ref_bytes, formula=ref_formula, source=reference.SRC)
    comps["overhead.fused_head_backward"] = Component(
        bytes=head.backward, formula=fused_head.head_formula(head, stack), source=fused_head.SRC)
    return head


def _training_phases(arch: Architecture, stack: Stack, shape: Shape, comps: dict[str, Component], head, G: int,
                     A: int, fixed: int) -> tuple[dict[str, Phase], int]:
    """The policy's training micro-step, phase by phase (backward start, end of backward at accumulation 1, the
    fused head's forward tile), and the gradients kept between micro-steps."""
    transients = sum(c.bytes for k, c in comps.items()
                     if k.startswith("overhead.") and k not in _FIXED and k not in _RESERVE)
    workspace = comps["overhead.backward_workspace"].bytes if "overhead.backward_workspace" in comps else 0
    ga1 = shape.grad_accum == 1
    g_between = 0 if ga1 else G  # gradients kept between micro-steps (zero_grad(set_to_none) at a new step)
    g_start = min(_head_gradient(arch, stack), G) if ga1 else G
    phases: dict[str, Phase] = {}
    phases["backward start"] = (g_start, A, 0, transients + fixed)
    if ga1:
        phases["end of backward"] = (G, 0, 0, workspace + fixed)
    phases["policy forward (fused head tile)"] = (g_between, A, 0, head.forward_tile + fixed)
    return phases, g_between


def _dpo_reference(arch: Architecture, stack: Stack, rows: int, seq: int, completion: int, compact: bool, fixed: int,
                   g_between: int, A: int, phases: dict[str, Phase], extras: _Extras) -> None:
    """DPO's no-gradient reference forward of the same rows, unless its log-probs were precomputed."""
    ref = stack.objective.reference(stack.method)
    if ref == "precomputed":
        return
    outputs = fused_head.DPO_OUTPUTS if ref == "adapter-off" else ("log_probs",)
    ref_head = fused_head.fused_head(arch, stack, rows, seq, completion, outputs, compact)
    tr = reference.nograd_layer(arch, stack, rows, seq, True) + ref_head.forward_tile + ref_head.outputs
    extras.components["overhead.reference_forward"] = Component(
        bytes=tr, formula=f"no-gradient forward of the same {rows} rows: one layer's working set, the "
                          "padded attention mask, the fused head's tile and its per-token outputs",
        source="trl 1.16.0 dpo_trainer.py:1318-1347 (torch.no_grad, checkpointing off)")
    phases["reference forward"] = (g_between, A, 0, tr + fixed)


def _grpo(arch, stack, shape, seq, prompt, completion, compact, fixed, phases: dict[str, Phase],
          extras: _Extras) -> None:
    """GRPO's phases beyond the training micro-step: generation, the no-gradient passes, the buffered batch, and
    vLLM's share (colocated) alive through all of them or asleep between generations."""
    o = stack.objective
    mb = shape.micro_batch
    batch = o.generation_batch(mb, shape.grad_accum, stack.gpus)
    spg = batch // mb
    use_vllm = o.vllm != "none"
    # old-policy log-probs: vLLM's importance-sampling correction, or generation misaligned with the optimizer
    # step (grpo_trainer.py:2642-2657); reference log-probs when beta != 0 (:2710-2739)
    old_pass = (use_vllm and o.importance_sampling) or (shape.grad_accum or spg) % (spg * o.num_iterations) != 0
    ref_pass = o.effective_beta != 0.0
    vectors = int(old_pass) + int(ref_pass) + int(use_vllm)  # + vLLM's sampling log-probs
    buf, buf_formula = generation.buffered_batch(batch, seq, completion, vectors)
    extras.components["overhead.grpo_buffered_batch"] = Component(
        bytes=buf, formula=buf_formula, source="trl 1.16.0 grpo_trainer.py:1522-1551, 2441-2504")
    extras.generation.update(mode=o.vllm, completions_per_generation=batch,
                             prompts_per_generation=max(batch // o.num_generations, 0), steps_per_generation=spg,
                             prompt_tokens=prompt, completion_tokens=completion, old_policy_pass=old_pass,
                             reference_pass=ref_pass)
    pb = sft_memory.PARAM_BYTES[stack.precision]
    # (generation's bytes, vLLM's memory alive while training)
    gen_total, resident = _GENERATION[o.vllm](arch, stack, seq, batch, prompt, completion, pb, extras)
    if o.vllm == "colocate" and stack.method != "full" and stack.sharding == "zero3" and stack.gpus > 1:
        # PEFT weight sync gathers every parameter at once to merge the adapter (vllm_generation.py:443-469)
        sync = int(arch.params_total * pb * (1 - 1 / stack.gpus))
        extras.components["generation.peft_merge_gather"] = Component(
            bytes=sync, formula="ZeRO-3 + LoRA: the whole policy gathered to merge the adapter before the weight push",
            source="trl 1.16.0 trl/generation/vllm_generation.py:443-469")
        phases["weight sync"] = (0, 0, gen_total, sync + fixed)
    if resident and o.vllm_sleep:
        extras.components["generation.vllm_asleep"] = Component(
            bytes=resident, formula="what a sleeping vLLM keeps while the trainer steps (level 2 frees its weights "
                                    "and KV cache): non-torch memory (vllm#17117 log)", source=vllm.SRC)
    phases["generation"] = (0, 0, gen_total, fixed)
    if old_pass or ref_pass:
        _nograd_passes(arch, stack, mb, seq, completion, compact, int(old_pass) + int(ref_pass),
                       resident, buf, fixed, phases, extras)
    # training micro-steps: the buffered batch and vLLM's resident share beside every SFT-like phase
    for name in [n for n in phases if n not in ("generation", "no-gradient passes", "weight sync")]:
        g, a, _, other = phases[name]
        phases[name] = (g, a, resident, other + buf)


def _hf_generation(arch, stack, seq, batch, prompt, completion, pb, extras: _Extras) -> tuple[int, int]:
    """transformers' generate inside the trainer: its KV cache, prefill working set and ZeRO-3's gathered weights."""
    kv, kv_formula = generation.hf_kv_cache(arch, stack, batch, prompt, completion)
    tr, tr_formula = generation.hf_transient(arch, stack, batch, prompt, completion)
    gather = generation.zero3_gather(arch, stack, pb)
    extras.components["generation.kv_cache"] = Component(bytes=kv, formula=kv_formula, source=generation.SRC)
    extras.components["generation.transient"] = Component(bytes=tr, formula=tr_formula, source=generation.SRC)
    if gather:
        extras.components["generation.zero3_gathered_params"] = Component(
            bytes=gather, formula="ZeRO-3 ds3_gather_for_generation: every parameter gathered for generate",
            source="trl 1.16.0 trl/models/utils.py:141-150")
    kb, vb = generation.kv_dtypes(stack)
    extras.generation.update(kv_cache_bytes=kv, key_bytes=kb, value_bytes=vb,
                             kv_bytes_per_token=generation.kv_per_token(arch, kb, vb))
    return kv + tr + gather, 0


def _colocated_vllm(arch, stack, seq, batch, prompt, completion, pb, extras: _Extras) -> tuple[int, int]:
    """vLLM inside the training GPUs: its budget (utilisation × the card), all of it resident unless it sleeps."""
    o = stack.objective
    if o.card_bytes is None:
        extras.refusals.append("vLLM colocated: no GPU to size its budget (utilisation × the card's memory); pass --gpu")
        return 0, 0
    s = vllm.share(arch, stack, seq, batch, o.card_bytes)
    extras.refusals.extend(s.refusals)
    extras.vllm.update(s.as_dict(), utilization=o.utilization, sleep=o.vllm_sleep, card_bytes=o.card_bytes)
    extras.components["generation.vllm_budget"] = Component(
        bytes=s.budget, formula=f"ceil({o.utilization:g} × {o.card_bytes:,} B): its weights "
        f"({'bitsandbytes 4-bit' if stack.method == 'qlora' else '16-bit'}, {s.weights:,} B), profiled "
        f"activations ({s.activation_peak:,} B), graphs and non-torch ({s.cudagraph + s.non_torch:,} B) and "
        f"the KV pool ({s.kv_pool:,} B, {s.kv_per_token:,} B per token)", source=vllm.SRC)
    resident = vllm.SLEEP_RESIDUAL_BYTES if o.vllm_sleep else s.budget
    extras.generation.update(kv_cache_bytes=s.kv_needed, kv_pool_bytes=s.kv_pool, concurrency=s.concurrency,
                             waves=s.waves)
    return s.budget, resident


def _vllm_server(arch, stack, seq, batch, prompt, completion, pb, extras: _Extras) -> tuple[int, int]:
    """vLLM as a server: generation on GPUs of its own (nothing on the training GPUs); `share` is sized by the
    planner / estimate for the server's card."""
    o = stack.objective
    if o.card_bytes is not None:
        s = vllm.share(arch, stack, seq, batch * stack.gpus, o.card_bytes, server=True)
        extras.refusals.extend(s.refusals)
        extras.vllm.update(s.as_dict(), utilization=o.utilization, server_gpus=o.vllm_server_gpus,
                           card_bytes=o.card_bytes)
        extras.generation.update(kv_cache_bytes=s.kv_needed, kv_pool_bytes=s.kv_pool, concurrency=s.concurrency,
                                 waves=s.waves)
    return 0, 0


# GRPO's generation per --vllm mode
_GENERATION = {"none": _hf_generation, "colocate": _colocated_vllm, "server": _vllm_server}


def _nograd_passes(arch, stack, rows, seq, completion, compact, passes: int, resident: int, buf: int, fixed: int,
                   phases: dict[str, Phase], extras: _Extras) -> None:
    """The old-policy / reference log-probs: no-gradient forwards of `rows` rows at a time, beside the buffered
    generation batch and vLLM's resident share."""
    head = fused_head.fused_head(arch, stack, rows, seq, completion, fused_head.GRPO_OUTPUTS, compact)
    tr = reference.nograd_layer(arch, stack, rows, seq, True) + head.forward_tile + head.outputs
    extras.components["overhead.nograd_passes"] = Component(
        bytes=tr, formula=f"no-gradient forward of {rows} rows at a time ({passes} pass(es): "
                          "old-policy / reference log-probs): one layer's working set, mask, fused-head tile",
        source="trl 1.16.0 grpo_trainer.py:2634-2739, 1440-1445")
    phases["no-gradient passes"] = (0, 0, resident, tr + buf + fixed)


def _head_gradient(arch: Architecture, stack: Stack) -> int:
    """lm_head's gradient, the first one backward allocates (advisor.estimate.memory's rule for accumulation 1)."""
    if stack.method == "full":
        return int((arch.lm_head_params or arch.embed_params) * sft_memory.PARAM_BYTES[stack.precision]
                   / stack.shard_degree_grads)
    if "lm_head" in stack.saved_modules:
        return int(arch.spec.vocab_size * arch.spec.hidden_size * sft_memory.PARAM_BYTES[stack.precision]
                   / stack.shard_degree_grads)
    return 0


def _sum(comps: dict[str, Component], prefix: str) -> int:
    return sum(c.bytes for k, c in comps.items() if k.startswith(prefix))


def _assumptions(stack: Stack, rows: int, seq: int, prompt: int, completion: int, compact: bool,
                 peak: str) -> dict[str, str]:
    o = stack.objective
    out = {
        "objective": (f"DPO ({TRL}): chosen and rejected rows concatenated, {rows} rows of {seq} tokens per micro-batch"
                      if o.kind == "dpo" else
                      f"GRPO ({TRL}): {rows} completions of {prompt} prompt + {completion} completion tokens per "
                      f"micro-batch, {o.num_generations} per prompt"),
        "loss": ("TRL's fused chunked log-prob head over the " + (f"{completion} response tokens of each row (CUDA)"
                 if compact else "every position (off CUDA)") + "; no full logits, no fp32 log_softmax"),
        "padding": "padded rows (TRL 1.16 DPO ignores padding_free; GRPO pads prompts left, completions right)",
        "peak_phase": peak,
        "reference": o.reference(stack.method),
    }
    if o.kind == "grpo":
        out["generation"] = {"none": "transformers generate inside the trainer (its KV cache on the training GPU)",
                             "colocate": f"vLLM colocated at gpu_memory_utilization {o.utilization:g}"
                                         + (" with sleep mode (level 2)" if o.vllm_sleep else ""),
                             "server": f"vLLM server on {o.vllm_server_gpus} GPU(s) of the instance at "
                                       f"{o.utilization:g}"}[o.vllm]
        if o.vllm != "none":
            out["vllm_calibration"] = (f"vLLM's share modelled from its source ({vllm.SRC}); CUDA-graph and non-torch "
                                       f"memory ({(vllm.CUDAGRAPH_BYTES + vllm.NON_TORCH_BYTES) / GiB:.2f} GiB) are "
                                       "uncalibrated until scripts/device_check.sh runs on a GPU")
    return out
