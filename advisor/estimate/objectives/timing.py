"""Step time of DPO and GRPO, on the SFT time model (advisor.estimate.throughput) plus what these trainers add.

DPO (trl 1.16.0 dpo_trainer.py:1284-1347): each micro-step trains on 2 × per_device_train_batch_size rows (chosen +
rejected) and runs the reference forward over the same rows without gradients (none when precomputed).

GRPO (grpo_trainer.py:1522-1551, 2430-2760, 3020-3160): once per generation batch (steps_per_generation
micro-steps; default one per optimizer step) it generates, syncs the policy's weights into vLLM, runs the
no-gradient old-policy / reference passes (chunked by per_device_train_batch_size), then trains the micro-steps on
prompt + completion tokens. TRL's loop is synchronous: vLLM server GPUs wait while the trainer steps and vice versa.

Generation, decode step by decode step: the batch streams the generator's weights and its KV cache from memory at
small batch and is compute-bound at large batch (max of the two: the roofline); vLLM decodes at most the
concurrency its KV pool and max_num_seqs allow, in waves; transformers' generate decodes every row for every step
from eager PyTorch (one kernel launch after another). Every completion is assumed to run to max_completion_length
(with G = 8 samples one usually does, and the padded width follows the longest). Prefill is compute-bound, in
chunks of max_num_batched_tokens for vLLM. The generation constants (per-step overheads) are not calibrated against
measured GRPO runs; the band of these steps is the held-out band of unseen GPU classes, widened for generation.

The fused head scores only response tokens: the SFT model's lm_head matmul and loss traffic over prompt positions
are taken off.
"""

from __future__ import annotations

import math

from advisor.estimate import throughput as tm
from advisor.estimate.objectives import generation, vllm
from advisor.estimate.objectives.memory import rows_through_policy
from advisor.model.architecture import Architecture
from advisor.objective import SFT
from advisor.results import StepNumbers, Throughput
from advisor.stacks import Shape, Stack
from advisor.units import GB, TERA
from pricing.gpus import GPU, get_gpu

# Host time of one vLLM decode step beyond the GPU's (scheduler, sampler, CUDA-graph replay): an assumption of a few
# milliseconds, not fitted (no held-out GRPO step times); the device check measures it.
VLLM_STEP_OVERHEAD_S = 0.004
# transformers generate's own host work per decode step (logits processors, stopping criteria, cache bookkeeping)
HF_GENERATE_STEP_S = 0.002
# The band of the generation share of a step: uncalibrated, so wider than any calibrated segment's.
GENERATION_BAND = (0.4, 2.0)


def _rate(gpu, stack: Stack, mfu: float | None) -> float:
    return tm.matmul_rate(gpu, stack, tm.constants(), mfu)


def _bw(gpu) -> float:
    return gpu.mem_bandwidth_tb_s * TERA * tm.table()["bandwidth_efficiency"]


def forward_seconds(c: tm.Counts, stack: Stack, rows: int, seq: int, scored: int, gpu, mfu: float | None) -> float:
    """One forward without gradients over rows × seq tokens (reference, old-policy and prefill passes): matmuls at
    the sustained rate but no faster than the weights stream, fused attention forward, elementwise traffic, the
    fused head over `scored` positions only, and the eager host dispatch of one forward."""
    T = rows * seq
    rate, bw = _rate(gpu, stack, mfu), _bw(gpu)
    mm = 2.0 * (c.matmul_active - c.lm_head) * T + 2.0 * c.lm_head * scored
    wbytes = 2.0 * (c.dense_weight_total + c.expert_weight_total + c.lm_head)
    s_ctx = seq / 2 if c.window is None else min(seq / 2, c.window)
    attn = 4.0 * c.layers * s_ctx * c.d_attn * T
    t = tm.table()
    cls = tm.gpu_class(gpu)
    att_eff = (t["attention_efficiency"][cls] * tm.sustained_fraction(gpu) / t["mamf_fraction"][cls]
               if mfu is None else mfu)
    elem = tm._elementwise_bytes(c, stack, seq) * c.layers * T
    gpu_work = max(mm / rate, wbytes / bw) + attn / (gpu.peak_tflops(stack.precision) * TERA * att_eff) + elem / bw
    k = tm.constants()
    host = t["kernels"]["layer_forward"]["eager"] * c.layers * k["dispatch_seconds_per_kernel"]
    if stack.framework == "hf":
        host += t["module_calls"]["layer"] * c.layers * k["module_call_seconds_hf"]
    return max(gpu_work, host)


def head_saving(c: tm.Counts, stack: Stack, rows: int, seq: int, scored: int, grad_accum: int, gpu,
                mfu: float | None) -> float:
    """Seconds of the SFT step's lm_head matmuls and loss traffic over positions the fused head does not score."""
    unscored = max(rows * seq - scored, 0) * grad_accum
    passes = 3.0 if c.lm_head_trained or stack.method == "full" else 2.0
    mm = 2.0 * c.lm_head * passes * unscored / _rate(gpu, stack, mfu)
    mode = "fused" if stack.liger else "chunked" if stack.loss == "chunked" else "eager"
    loss = tm.table()["elementwise_bytes"]["loss_per_vocab"][mode] * c.vocab * unscored / _bw(gpu)
    return mm + loss


def _decode_vllm(c: tm.Counts, arch: Architecture, stack: Stack, share: vllm.Share, prompt: int, completion: int,
                 gpu, mfu: float | None) -> tuple[float, float]:
    """(prefill, decode) seconds of vLLM generating `share.sequences` completions on one GPU (tp ranks split the
    weights and the heads but each sees the whole tp group's batch)."""
    rate, bw = _rate(gpu, stack, mfu), _bw(gpu)
    tp = share.tensor_parallel
    params = c.matmul_active / tp
    # the server gets each prompt once with n = G (vllm_generation.py:593-658); colocate sends every completion as
    # its own request and prefix caching only shares blocks computed in earlier steps, so no sharing is assumed
    unique = share.sequences // stack.objective.num_generations if stack.objective.vllm == "server" else share.sequences
    prefill_tokens = max(unique, 1) * prompt
    chunks = max(1, math.ceil(prefill_tokens / vllm.COLOCATE_BATCHED_TOKENS))
    prefill = max(2.0 * params * prefill_tokens / rate, chunks * share.weights / bw)
    if not share.concurrency:
        return prefill, math.inf
    decode = 0.0
    left = share.sequences
    per_token_kv = share.kv_per_token
    for _ in range(share.waves):
        n = min(left, share.concurrency)
        left -= n
        kv_read = n * (prompt + completion / 2) * per_token_kv
        step = max((share.weights + kv_read) / bw, 2.0 * params * n / rate) + VLLM_STEP_OVERHEAD_S
        decode += completion * step
    return prefill, decode


def _decode_hf(c: tm.Counts, arch: Architecture, stack: Stack, batch: int, prompt: int, completion: int, gpu,
               mfu: float | None) -> tuple[float, float]:
    """(prefill, decode) seconds of transformers generate: every row decodes every step, eagerly; under autocast
    each step also casts every fp32 weight to 16-bit (read 4 B, write and read 2 B per parameter)."""
    rate, bw = _rate(gpu, stack, mfu), _bw(gpu)
    per_param = {"fp32": 4.0, "amp-bf16": 8.0, "amp-fp16": 8.0}.get(stack.precision, 2.0)
    if stack.method == "qlora":  # bitsandbytes dequantises every 4-bit linear per call
        per_param = 0.5 + 2.0 * tm.table()["nf4_dequant_bytes_per_param"] / 2
    wbytes = c.params_total * per_param
    prefill = max(2.0 * c.matmul_active * batch * prompt / rate, wbytes / bw)
    kb, vb = generation.kv_dtypes(stack)
    per_kv = generation.kv_per_token(arch, kb, vb)
    t = tm.table()
    k = tm.constants()
    kernels = t["kernels"]["layer_forward"]["eager"]
    calls = t["module_calls"]["layer"]
    if stack.method != "full" and c.adapted_linears:
        kernels += t["kernels"]["lora_per_adapted_linear"]["forward"] * c.adapted_linears / max(c.layers, 1)
        calls += t["module_calls"]["lora_per_adapted_linear"] * c.adapted_linears / max(c.layers, 1)
    host = (kernels * k["dispatch_seconds_per_kernel"] + calls * k["module_call_seconds_hf"]) * c.layers \
        + HF_GENERATE_STEP_S
    kv_read = batch * (prompt + completion / 2) * per_kv
    step = max((wbytes + kv_read) / bw, 2.0 * c.matmul_active * batch / rate, host)
    return prefill, completion * step


def _sync_seconds(c: tm.Counts, stack: Stack, gpu, nodes: int, network_gbps: float | None) -> float:
    """Pushing the policy's weights into vLLM once per generation (vllm_generation.py:481-517): colocate copies
    every tensor on the device (load_weights), PEFT first merges and then unmerges the adapter in place; ZeRO-3
    gathers parameters first; server mode streams them over NCCL to the server's GPUs (vllm_client.py:821-859)."""
    bw = _bw(gpu)
    o = stack.objective
    P2 = c.params_total * 2.0
    n = stack.gpus
    link = tm.link_gb_s(gpu, nodes, network_gbps or tm.internode_gbps(gpu, max(1, n // nodes))) * GB
    t = 0.0
    if stack.sharding == "zero3" and n > 1:
        t += P2 * (n - 1) / n / link
    if stack.method != "full":
        t += 4.0 * c.adapted_weight_total * 2.0 / bw  # merge and unmerge: read + write the adapted weights twice
    if o.vllm == "colocate":
        t += 2.0 * P2 / bw
    elif o.vllm == "server":
        t += P2 / tm.link_gb_s(gpu, 1, 0.0) / GB
    return t


def step(arch: Architecture, stack: Stack, shape: Shape, gpu, *, nodes: int = 1, mfu: float | None = None,
         network_gbps: float | None = None) -> StepNumbers:
    """The time model's numbers for one optimizer step of a DPO or GRPO stack (the record Engine.step returns for
    SFT, with generation_seconds, sync_seconds, nograd_seconds, reference_seconds and train_seconds set)."""
    o = stack.objective
    base = stack.model_copy(update={"objective": SFT})
    c = tm.counts(arch, base)
    ga = shape.grad_accum or 1
    rows = rows_through_policy(stack, shape.micro_batch)
    seq = shape.seq_len
    prompt, completion = o.split(seq)
    scored = rows * completion
    train = tm.step_time(c, base, Shape(micro_batch=rows, seq_len=seq, grad_accum=ga, padded=True), gpu,
                         grad_accum=ga, nodes=nodes, gpus_per_node=max(1, stack.gpus // nodes), mfu=mfu,
                         network_gbps=network_gbps, with_band=False)
    train_s = max(train.step_seconds - head_saving(c, base, rows, seq, scored, ga, gpu, mfu), 1e-9)
    extra = {"generation_seconds": 0.0, "sync_seconds": 0.0, "nograd_seconds": 0.0, "reference_seconds": 0.0}
    if o.kind == "dpo":
        if o.reference(stack.method) != "precomputed":
            extra["reference_seconds"] = ga * forward_seconds(c, base, rows, seq, scored, gpu, mfu)
    else:
        batch = o.generation_batch(shape.micro_batch, shape.grad_accum, stack.gpus)
        spg = max(batch // shape.micro_batch, 1)
        per_step = ga / (spg * o.num_iterations)  # generations per optimizer step
        old = (o.vllm != "none" and o.importance_sampling) or ga % (spg * o.num_iterations) != 0
        passes = int(old) + int(o.effective_beta != 0.0)
        extra["nograd_seconds"] = per_step * passes * spg * forward_seconds(c, base, shape.micro_batch, seq,
                                                                            shape.micro_batch * completion, gpu, mfu)
        gen = _generation_seconds(arch, c, stack, batch, seq, prompt, completion, gpu, mfu)
        extra["generation_seconds"] = per_step * gen
        if o.vllm != "none":
            extra["sync_seconds"] = per_step * _sync_seconds(c, stack, gpu, nodes, network_gbps)
    step_s = train_s + sum(extra.values())
    n = stack.gpus
    tokens = rows * seq * ga * n
    tps = tokens / step_s
    model_fpt = train.model_flops_per_token
    peak = train.peak_flops_per_gpu
    band = tm.band(gpu, stack)
    slow = train_s / band[0] + (step_s - train_s) / GENERATION_BAND[0]
    fast = train_s / band[1] + (step_s - train_s) / GENERATION_BAND[1]
    return train.model_copy(update={
        **{k: float(v) for k, v in extra.items()}, "step_seconds": float(step_s), "train_seconds": float(train_s),
        "tokens_per_step": float(tokens), "tokens_per_sec": float(tps), "mfu": float(tps * model_fpt / (n * peak)),
        "tokens_per_sec_low": float(tokens / slow), "tokens_per_sec_high": float(tokens / fast), "interval_rows": 0})


def _generation_seconds(arch: Architecture, c: tm.Counts, stack: Stack, batch: int, seq: int, prompt: int,
                        completion: int, gpu, mfu: float | None) -> float:
    o = stack.objective
    if o.vllm == "none":
        prefill, decode = _decode_hf(c, arch, stack, batch, prompt, completion, gpu, mfu)
        return prefill + decode
    card = o.card_bytes or int(gpu.usable_bytes)
    server = o.vllm == "server"
    share = vllm.share(arch, stack, seq, batch * (stack.gpus if server else 1), card, server=server)
    prefill, decode = _decode_vllm(c, arch, stack, share, prompt, completion, gpu, mfu)
    return prefill + decode


def throughput(arch: Architecture, stack: Stack, shape: Shape, gpu, *, nodes: int = 1, mfu: float | None = None,
               network_gbps: float | None = None) -> Throughput:
    """The typed `Throughput` of a DPO or GRPO step (`estimate --gpu` shows it), components by phase."""
    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu)
    r = step(arch, stack, shape, g, nodes=nodes, mfu=mfu, network_gbps=network_gbps)
    low, high, basis = tm.band(g, stack)
    return Throughput(
        tokens_per_sec=r.tokens_per_sec, mfu=r.mfu, step_seconds=r.step_seconds,
        flops_per_token=r.model_flops_per_token, grad_accum=shape.grad_accum or 1, nodes=nodes,
        compute_seconds_per_step=r.compute_seconds, comm_seconds_per_step=r.comm_exposed_seconds,
        tokens_per_sec_low=r.tokens_per_sec_low, tokens_per_sec_high=r.tokens_per_sec_high,
        interval_basis={"segment": tm.segment(g, stack), "rows": 0, "low_factor": round(low, 4),
                        "high_factor": round(high, 4),
                        "basis": f"{basis}; {'generation' if stack.objective.kind == 'grpo' else 'reference forward'} "
                                 f"share widened to {GENERATION_BAND[0]:g}-{GENERATION_BAND[1]:g}x (uncalibrated)"},
        components=r.components(),
        assumptions={"objective": stack.objective.label(stack.method),
                     "tokens": "tokens through the policy: rows (DPO 2 per pair) × row length",
                     "generation": "every completion to max_completion_length; vLLM decode per step = max(weights + "
                                   "KV read / bandwidth, 2·P·concurrency / rate) + 4 ms host (uncalibrated)"},
    )
