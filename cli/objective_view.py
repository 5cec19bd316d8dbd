"""What `estimate` prints about a DPO or GRPO step beyond the memory table: the reference model, the phases of the
step, generation and vLLM's share (numbers from advisor.results.ObjectiveMemory, words only here)."""

from __future__ import annotations

from advisor.estimate.engine import Engine, usable_limit
from advisor.text import md, plain
from advisor.units import GB, GiB
from pricing.gpus import get_gpu


def _gb(n: float) -> str:
    return f"{n / GB:.2f} GB"


def _lines(est) -> list[str]:
    o = est.objective
    obj = est.stack.objective
    out = []
    if o.kind == "dpo":
        out.append(f"objective: DPO, {o.rows_per_micro_batch} rows per micro-batch (chosen + rejected of "
                   f"{est.shape.micro_batch} pair(s)); TRL's fused head scores {o.scored_tokens:,} response tokens "
                   "(no full logits)")
    else:
        g = o.generation
        out.append(f"objective: GRPO, {est.shape.micro_batch} completion(s) per micro-batch; generation batch "
                   f"{g.get('completions_per_generation', 0):,} completions per GPU ({g.get('prompts_per_generation', 0)} "
                   f"prompt(s) × {obj.num_generations}), {g.get('prompt_tokens', 0):,} prompt + "
                   f"{g.get('completion_tokens', 0):,} completion tokens each")
    out.append(f"reference model: {o.reference}")
    peak = o.peak_phase
    out.append("phases (device total): " + "; ".join(
        f"{name} {_gb(b)}" + (" (peak)" if name == peak else "") for name, b in o.phases.items()))
    if o.kind == "grpo":
        out.append(_generation(est))
    for r in o.refusals:
        out.append(f"REFUSED: {r}")
    return out


def _generation(est) -> str:
    o, obj = est.objective, est.stack.objective
    g, v = o.generation, o.vllm
    batch = g.get("completions_per_generation", 0)
    tokens = g.get("prompt_tokens", 0) + g.get("completion_tokens", 0)
    if obj.vllm == "none":
        kb, vb = g.get("key_bytes", 2), g.get("value_bytes", 2)
        return (f"generation: transformers generate inside the trainer: KV cache {_gb(g.get('kv_cache_bytes', 0))} for "
                f"{batch:,} completions × {tokens:,} tokens ({kb} B keys, {vb} B values per element"
                + ("; fp32 keys because the weights are fp32 under bf16 autocast -- TRL's default load dtype" if kb == 4
                   and vb == 2 else "") + ")")
    if not v:
        return "generation: vLLM not sized (no GPU given)"
    where = ("colocated in every training GPU" if obj.vllm == "colocate" else
             f"as a server on {obj.vllm_server_gpus} GPU(s) of the instance, not on the training GPUs")
    card = v.get("card_bytes", 0)
    pool_tokens = v["kv_pool"] // max(v["kv_per_token"], 1)
    text = (f"generation: vLLM {where} at gpu_memory_utilization {v['utilization']:g} of {card / GiB:.1f} GiB: budget "
            f"{_gb(v['budget'])} = weights {_gb(v['weights'])} + activations {_gb(v['activation_peak'])} + graphs and "
            f"non-torch {_gb(v['cudagraph'] + v['non_torch'])} + KV pool {_gb(v['kv_pool'])} ({pool_tokens:,} tokens); "
            f"{v['sequences']:,} completions × {tokens:,} tokens need {_gb(v['kv_needed'])} of KV: {v['concurrency']:,} "
            f"at once, {v['waves']} wave(s); max_model_len {v['max_model_len']:,}")
    if obj.vllm == "colocate" and obj.vllm_sleep:
        text += "; asleep while training (level 2: weights and KV cache freed)"
    return text


def objective_lines(est) -> list[str]:
    """Terminal lines (plain text)."""
    return [plain(line) for line in _lines(est)]


def objective_markdown(est) -> list[str]:
    """Markdown bullets."""
    return [f"- {md(line)}" for line in _lines(est)]


def per_card(spec, stack, shape, cards, headroom: float) -> str:
    """A colocated vLLM takes a share of each card: which common cards hold the trainer and that share."""
    engine = Engine.of(spec)
    yes, no = [], []
    for name in cards:
        gpu = get_gpu(name)
        sized = stack.model_copy(update={"objective": stack.objective.model_copy(
            update={"card_bytes": int(gpu.usable_bytes)})})
        est = engine.memory(sized, shape)
        ok = est.device_total <= usable_limit(gpu, headroom) and not est.objective.refusals
        (yes if ok else no).append(f"{name} {gpu.memory_gb:g}GB")
    listed = ", ".join(yes) or "none of the common cards"
    return (f"fits with {headroom:.0%} headroom, vLLM's share sized per card, on: {listed}"
            + (f"; not on: {', '.join(no)}" if no else "") + "  (--gpu NAME for one card)")
