"""Time model: how many training tokens per second a stack reaches on a set of GPUs.

step time = grad_accum × (compute + per-layer overhead + QLoRA dequantisation) + optimizer step
            + the part of communication that compute does not hide.

* FLOPs per token follow Kaplan et al. 2020 (C ≈ 6N per token, +attention 6·n_layer·n_ctx·d_attn)
  and PaLM (Chowdhery et al. 2022, appendix B: 6N + 12·L·H·Q·T; MFU vs HFU). LoRA/QLoRA skip the
  weight gradient of frozen weights (backward = 1× instead of 2× forward, so ≈ 4N);
  activation checkpointing recomputes the forward (+2N, Korthikanti et al. 2022, §4).
* Achieved compute = GPUs × dense peak × kernel efficiency (advisor/data/mfu.json, `--mfu`).
* Communication volumes from the ZeRO paper (Rajbhandari et al. 2020, §7): DDP all-reduce 2Ψ,
  ZeRO-3/FSDP all-gather (forward and backward) + reduce-scatter 3Ψ, ring factor (n−1)/n.
* The reported `mfu` is PaLM's model-FLOPs utilisation: useful FLOPs (no recompute) per second
  over peak, after every overhead — comparable with published MFU figures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from advisor.modelspec import ModelSpec
from advisor.results import Throughput
from advisor.stacks import Shape, Stack

MFU_FILE = Path(__file__).parent / "data" / "mfu.json"


@lru_cache(maxsize=1)
def table() -> dict:
    """The documented efficiency table (advisor/data/mfu.json)."""
    return json.loads(MFU_FILE.read_text())


def gpu_class(gpu) -> str:
    """Efficiency class of a GPU from its architecture (keys of mfu.json's kernel_efficiency)."""
    arch = gpu.architecture.lower()
    if gpu.vendor.upper() == "AMD":
        return "cdna"
    for key, cls in (("blackwell", "blackwell"), ("hopper", "hopper"), ("ada", "ada"),
                     ("turing", "turing"), ("volta", "volta")):
        if key in arch:
            return cls
    if "ga100" in arch:
        return "ampere-datacenter"
    return "ampere-workstation"  # GA102 parts: A10, A10G, A6000, RTX 3090


# --------------------------------------------------------------------------- parameter counts


@dataclass(frozen=True)
class Counts:
    """Parameter counts the FLOPs and traffic terms need (text model; embeddings are lookups)."""

    layers: int
    d_attn: int  # num_attention_heads × head_dim
    matmul_active: float  # weights multiplied per token: layer linears (routed experts only) + lm_head
    layer_linear_total: float  # all layer linears (every expert): what NF4 quantises / dequantises
    params_total: float
    adapters_total: float  # LoRA parameters (0 for full)
    adapters_active: float
    window: int | None


def counts(arch, stack: Stack) -> Counts:
    """Linear-layer parameter counts from the memory estimate's module inventory (advisor.architecture;
    a ModelSpec is built through its engine); the vision tower's matmuls are left out of the FLOPs
    (text-only batches never run it) but its adapters are trainable, so they count in the optimizer's
    traffic."""
    if isinstance(arch, ModelSpec):
        from advisor.engine import Engine

        arch = Engine.of(arch).arch
    key = ("counts", stack.method, stack.lora_rank, stack.lora_targets)
    if key not in arch._memo:
        arch._memo[key] = _counts(arch, stack)
    return arch._memo[key]


def _counts(arch, stack: Stack) -> Counts:
    m = arch.spec
    k = m.num_experts_per_tok / m.num_experts if m.is_moe else 1.0
    linear_total = matmul_active = 0.0
    for layer in arch.layers:
        for lin in layer.linears:
            linear_total += lin.weight_params
            matmul_active += lin.weight_params * (k if lin.expert else 1.0)
        linear_total += layer.other_params  # MoE router, a matmul over every token
        matmul_active += layer.other_params
    adapters_total = adapters_active = 0.0
    if stack.method != "full":
        adapters_total = float(arch.lora_params(stack.lora_rank, stack.lora_targets))
        adapters_active = float(arch.lora_params_per_token(stack.lora_rank, stack.lora_targets))
    matmul_active += m.vocab_size * m.hidden_size  # lm_head projection (tied or not, the matmul happens)
    scale = arch.scale  # --params mode: the synthetic shape stretched to the given size
    return Counts(m.num_hidden_layers, m.num_attention_heads * m.head_dim, matmul_active * scale,
                  linear_total * scale, float(arch.params_total), adapters_total, adapters_active, m.sliding_window)


# --------------------------------------------------------------------------- FLOPs


def flops_per_token(c: Counts, stack: Stack, seq_len: int) -> tuple[float, float]:
    """(model FLOPs, executed FLOPs) per trained token.

    Forward: 2 FLOPs per weight per token, plus attention 2·2·s_ctx·d_attn per layer (QKᵀ and
    A·V) with s_ctx the average causal context (s/2: FlashAttention skips masked tiles; capped
    by a sliding window). Backward: 2× forward for weights that get gradients, 1× for frozen
    weights (input gradients only), 2× for attention (no weights). Checkpointing adds one
    forward (executed, not model FLOPs).
    """
    s_ctx = seq_len / 2 if c.window is None else min(seq_len / 2, c.window)
    attn_fwd = 4.0 * c.layers * s_ctx * c.d_attn
    mm_fwd = 2.0 * c.matmul_active
    ad_fwd = 2.0 * c.adapters_active
    if stack.method == "full":
        model = 3 * mm_fwd + 3 * attn_fwd
    else:
        model = 2 * mm_fwd + 3 * attn_fwd + 3 * ad_fwd
    executed = model + ((mm_fwd + attn_fwd + ad_fwd) if stack.grad_checkpointing else 0.0)
    return model, executed


# --------------------------------------------------------------------------- the time model


def internode_gbps(gpu, gpus_per_node: int, interconnect: str = "") -> float:
    """Default per-node network: 400 Gb/s for 8-GPU NVLink (HPC) instances, else 100 Gb/s."""
    t = table()["internode_gbps"]
    hpc = gpus_per_node >= 8 and gpu.interconnect in ("nvlink", "infinity-fabric")
    return float(t["hpc"] if hpc or "efa" in interconnect.lower() or "infiniband" in interconnect.lower()
                 else t["other"])


def kernel_efficiency(gpu, stack: Stack) -> float:
    t = table()
    return (t["kernel_efficiency"][gpu_class(gpu)] * t["method_factor"][stack.method]
            * t["attention_factor"][stack.attention])


def step_time(c: Counts, stack: Stack, shape: Shape, gpu, *, grad_accum: int = 1, nodes: int = 1,
              gpus_per_node: int | None = None, mfu: float | None = None,
              network_gbps: float | None = None) -> dict[str, float]:
    """Seconds per optimizer step, by component (plain floats: the planner calls this per config)."""
    t = table()
    n = stack.gpus
    gpn = gpus_per_node or max(1, n // nodes)
    tokens_mb = shape.micro_batch * shape.seq_len
    model_fpt, exec_fpt = flops_per_token(c, stack, shape.seq_len)
    eff = mfu if mfu is not None else kernel_efficiency(gpu, stack)
    peak = gpu.peak_tflops(stack.precision) * 1e12
    bw = gpu.mem_bandwidth_tb_s * 1e12 * t["bandwidth_efficiency"]

    compute = tokens_mb * exec_fpt / (peak * eff)
    if nodes > 1:
        compute /= t["multi_node_efficiency"] ** (nodes - 1)
    overhead = c.layers * t["layer_overhead_s"]
    if stack.sharding in ("zero3", "fsdp"):
        overhead += c.layers * t["zero3_layer_overhead_s"]
    passes = 3 if stack.grad_checkpointing else 2
    dequant = c.layer_linear_total * t["nf4_dequant_bytes_per_param"] * passes / bw if stack.method == "qlora" else 0.0
    per_mb = compute + overhead + dequant

    trainable = c.params_total if stack.method == "full" else c.adapters_total
    # LoRA adapters are fp32 (peft default), so their optimizer traffic is the mixed-precision kind
    mixed = stack.precision.startswith("amp") or stack.precision == "fp32" or stack.method != "full"
    mode = "amp" if mixed else "pure16"
    opt_bytes = t["optimizer_bytes_per_param"][mode][stack.optimizer]
    if stack.offload in ("optimizer", "both"):
        shard = trainable / n
        optimizer = trainable / nodes / t["cpu_adam_params_per_s"] + shard * 4 / (t["pcie_gb_s"] * 1e9)
    else:
        optimizer = trainable / stack.shard_degree_optimizer * opt_bytes / bw

    comm = 0.0
    hideable = 0.0
    net = 0.0
    if nodes > 1:
        net = network_gbps if network_gbps is not None else internode_gbps(gpu, gpn)
    if n > 1 and stack.sharding != "none":
        grad_bytes = trainable * (2 if stack.method == "full" else 4)  # LoRA adapters/grads in fp32
        weight_bytes = (c.layer_linear_total * 0.53 + (c.params_total - c.layer_linear_total) * 2
                        if stack.method == "qlora" else c.params_total * 2)
        ring = (n - 1) / n
        if stack.sharding == "ddp":
            volume = 2 * ring * grad_bytes  # all-reduce once per step (no_sync while accumulating)
            hideable = per_mb * 2 / 3  # overlaps the last micro-batch's backward
        elif stack.sharding in ("zero1", "zero2"):
            volume = ring * (grad_bytes + trainable * 2)  # reduce-scatter grads + all-gather params
            hideable = per_mb * 2 / 3
        else:  # fsdp / zero3: gather weights for forward and backward of every micro-batch
            volume = ring * (2 * weight_bytes * grad_accum + grad_bytes)
            hideable = per_mb * grad_accum
        link = gpu.link_gb_s_per_direction
        if nodes > 1:
            # NCCL rings cross each node boundary once per direction, so across nodes the bus
            # bandwidth is bounded by one node's network (nccl-tests busbw ≈ NIC bandwidth per node).
            link = min(link, net / 8)
        comm = volume / (link * 1e9 * t["collective_efficiency"])
    overlap = t["comm_overlap"].get(stack.sharding, 0.0)
    exposed = comm - min(overlap * comm, hideable)

    step = grad_accum * per_mb + optimizer + exposed + t["step_overhead_s"]
    tokens_per_sec = tokens_mb * grad_accum * n / step
    return {
        "tokens_per_sec": tokens_per_sec, "mfu": tokens_per_sec * model_fpt / (n * peak), "internode_gbps": net,
        "step_seconds": step, "compute_seconds": grad_accum * compute, "overhead_seconds": grad_accum * overhead,
        "dequant_seconds": grad_accum * dequant, "optimizer_seconds": optimizer,
        "step_overhead_seconds": t["step_overhead_s"], "comm_seconds": comm,
        "comm_exposed_seconds": exposed, "model_flops_per_token": model_fpt, "executed_flops_per_token": exec_fpt,
        "kernel_efficiency": eff, "tokens_per_step": tokens_mb * grad_accum * n, "peak_flops_per_gpu": peak,
    }


def throughput(c: Counts, stack: Stack, shape: Shape, gpu, *, nodes: int = 1, mfu: float | None = None,
               network_gbps: float | None = None) -> Throughput:
    """Tokens per second (total over `stack.gpus` GPUs on `nodes` nodes) at the shape's gradient
    accumulation (1 when unknown), with every term visible."""
    from pricing.gpus import GPU, get_gpu

    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu)
    if mfu is not None and not 0 < mfu <= 1:
        from advisor.errors import BadInput

        raise BadInput(f"--mfu: must be a fraction in (0, 1], got {mfu}.")
    grad_accum = shape.grad_accum or 1
    gpn = max(1, stack.gpus // nodes)
    r = step_time(c, stack, shape, g, grad_accum=grad_accum, nodes=nodes, gpus_per_node=gpn, mfu=mfu,
                  network_gbps=network_gbps)
    t = table()
    assumptions: dict[str, str | int | float | bool] = {
        "gpu_class": gpu_class(g),
        "kernel_efficiency": round(r["kernel_efficiency"], 4),
        "kernel_efficiency_source": "--mfu" if mfu is not None else "advisor/data/mfu.json",
        "peak_tflops_per_gpu": g.peak_tflops(stack.precision),
        "layer_overhead_s": t["layer_overhead_s"],
        "comm_overlap": t["comm_overlap"].get(stack.sharding, 0.0),
        "grad_accum": grad_accum,
        "nodes": nodes,
        "flops": "Kaplan 2020 / PaLM app. B: 6N full, 4N LoRA, +2N recompute, +attention (causal)",
    }
    if nodes > 1:
        assumptions["internode_gbps"] = r["internode_gbps"]
    return Throughput(
        tokens_per_sec=r["tokens_per_sec"],
        mfu=r["mfu"],
        step_seconds=r["step_seconds"],
        flops_per_token=r["model_flops_per_token"],
        grad_accum=grad_accum,
        nodes=nodes,
        compute_seconds_per_step=r["compute_seconds"],
        comm_seconds_per_step=r["comm_exposed_seconds"],
        components={k: float(v) for k, v in r.items() if k.endswith("_seconds") or k.endswith("_per_token")},
        assumptions=assumptions,
    )


def estimate_throughput(model: ModelSpec | str, stack: Stack, shape: Shape, gpu, *, grad_accum: int | None = None,
                        nodes: int = 1, mfu: float | None = None, network_gbps: float | None = None) -> Throughput:
    """Library entry point: tokens/s of `model` for one setup (see Engine.throughput).
    `grad_accum`, when given, replaces the shape's."""
    from advisor.engine import Engine

    if grad_accum is not None:
        shape = shape.model_copy(update={"grad_accum": grad_accum})
    return Engine.of(model).throughput(stack, shape, gpu, nodes=nodes, mfu=mfu, network_gbps=network_gbps)
