"""Realistic `Plan` fixtures built directly from the result models (no planner needed).

The numbers are plausible, not authoritative: memory follows the DESIGN.md rules of thumb for
Llama-3.1-8B (16-bit weights 16 GB, NF4 about 5.7 GB, AdamW fp32 states 12 B/param when full),
throughput is n_gpus x dense bf16 peak x MFU / FLOPs-per-token (6P full, 4P LoRA, +2P with
checkpointing), cost is wall hours x instance price. Prices resemble public list prices.
"""

from __future__ import annotations

import itertools

from advisor.results import Breakdown, Candidate, Cost, MemoryFit, ModelInfo, Offer, Plan, Rejection, Timing
from advisor.stacks import Shape, Stack

GB = 10**9
GENERATED_AT = "2026-11-30T08:00:00+00:00"
FRESH_DATE = "2026-11-25"
STALE_DATE = "2026-09-14"  # 77 days before GENERATED_AT

LLAMA_8B = ModelInfo(
    name="meta-llama/Llama-3.1-8B",
    family="llama",
    source="catalog",
    params_total=8_030_261_248,
    params_trainable=8_030_261_248,
    params_active=8_030_261_248,
)
LORA_TRAINABLE = 41_943_040  # r16 on all linear layers of Llama-3.1-8B

# gpu -> (usable bytes per GPU, dense bf16 TFLOP/s from pricing/data/gpus.csv)
GPUS = {
    "A10G": (int(22.06 * 2**30), 70.0),
    "L40S": (int(44.52 * 2**30), 362.0),
    "A100-80GB": (int(79.2 * 2**30), 312.0),
    "H100": (int(79.1 * 2**30), 989.0),
}

# (provider, region, instance, gpu, gpus per node, on-demand $/h, spot $/h or None, source)
OFFERS = [
    ("aws", "us-east-1", "g5.xlarge", "A10G", 1, 1.006, 0.45, "aws-pricing-api"),
    ("aws", "us-east-1", "g5.12xlarge", "A10G", 4, 5.672, 2.10, "aws-pricing-api"),
    ("aws", "us-east-1", "g6e.xlarge", "L40S", 1, 1.861, 0.84, "aws-pricing-api"),
    ("aws", "us-east-1", "p4de.24xlarge", "A100-80GB", 8, 40.966, 16.00, "aws-pricing-api"),
    ("aws", "us-east-1", "p5.48xlarge", "H100", 8, 98.32, 39.00, "aws-pricing-api"),
    ("gcp", "us-central1", "a2-ultragpu-1g", "A100-80GB", 1, 5.07, 1.60, "gcp-billing-catalog"),
    ("gcp", "us-central1", "a3-highgpu-8g", "H100", 8, 88.49, 29.00, "gcp-billing-catalog"),
    ("lambda", "us-west-1", "gpu_1x_a100_sxm4_80gb", "A100-80GB", 1, 1.79, None, "lambda-snapshot"),
    ("lambda", "us-west-1", "gpu_1x_h100_sxm5", "H100", 1, 3.29, None, "lambda-snapshot"),
    ("lambda", "us-west-1", "gpu_8x_h100_sxm5", "H100", 8, 23.92, None, "lambda-snapshot"),
    ("runpod", "US", "1x L40S", "L40S", 1, 0.86, 0.43, "runpod-snapshot"),
    ("runpod", "US", "1x A100 80GB SXM", "A100-80GB", 1, 1.89, 1.05, "runpod-snapshot"),
    ("runpod", "US", "8x H100 SXM", "H100", 8, 21.52, 12.00, "runpod-snapshot"),
]
STALE_SOURCES = {"runpod-snapshot"}  # these prices are older than 30 days when stale=True

# stack name -> (method, optimizer, grad ckpt, sharding, mfu, static memory builder)
STACKS = {
    "qlora": ("qlora", "paged-adamw-8bit", True, "none", 0.22),
    "lora": ("lora", "adamw", True, "none", 0.33),
    "full": ("full", "adamw", True, "fsdp", 0.38),
}


def breakdown(method: str, n_gpus: int, micro_batch: int, seq_len: int) -> Breakdown:
    """Per-GPU memory for Llama-3.1-8B under a stack (rules of thumb from DESIGN.md)."""
    p = LLAMA_8B.params_total
    if method == "qlora":
        weights = int(5.7 * GB)
        grads, opt = LORA_TRAINABLE * 4, LORA_TRAINABLE * 2
    elif method == "lora":
        weights = p * 2
        grads, opt = LORA_TRAINABLE * 4, LORA_TRAINABLE * 8
    else:  # full FSDP: 2 B weights + 2 B grads + 12 B AdamW fp32 states/master, all sharded
        weights = p * 2 // n_gpus + int(0.9 * GB)  # + gathered layers during compute
        grads, opt = p * 2 // n_gpus, p * 12 // n_gpus
    activations = int(0.85 * GB * micro_batch * seq_len / 2048)
    overhead = int(1.6 * GB) if n_gpus == 1 else int(2.4 * GB)
    total = weights + grads + opt + activations + overhead
    return Breakdown(weights=weights, gradients=grads, optimizer=opt, activations=activations,
                     overhead=overhead, total=total)


def candidate(offer: tuple, stack: str, *, nodes: int = 1, spot: bool = False, micro_batch: int = 4,
              seq_len: int = 2048, tokens: float = 100e6, stale: bool = False, rank: int = 0) -> Candidate:
    provider, region, instance, gpu, per_node, price, spot_price, source = offer
    method, optimizer, ckpt, sharding, mfu = STACKS[stack]
    n_gpus = per_node * nodes
    if sharding == "none" and n_gpus > 1:
        sharding = "ddp"
    usable, tflops = GPUS[gpu]
    mem = breakdown(method, n_gpus, micro_batch, seq_len)
    p = LLAMA_8B.params_total
    flops_per_token = (6 if method == "full" else 4) * p + (2 * p if ckpt else 0)
    if nodes > 1:
        mfu *= 0.85  # inter-node all-gather/reduce-scatter over EFA/InfiniBand
    tps = n_gpus * tflops * 1e12 * mfu / flops_per_token
    train_hours = tokens / tps / 3600
    hours = train_hours + 0.25 + (0.1 * train_hours if spot else 0.0)  # setup; spot allowance
    price_hour = (spot_price if spot else price) * nodes
    stale = stale and source in STALE_SOURCES
    label = (method if method == "full" else f"{method} r16") + f" · bf16 · {optimizer}" + \
        (" · ckpt" if ckpt else "") + " · flash" + (f" · {sharding}×{n_gpus}" if sharding != "none" else "")
    return Candidate(
        rank=rank, nodes=nodes, memory=mem, label=label,
        offer=Offer(provider=provider, region=region, instance_type=instance, gpu_model=gpu, gpu_count=per_node,
                    source=source, price_date=STALE_DATE if stale else FRESH_DATE, stale=stale),
        stack=Stack(method=method, precision="bf16", optimizer=optimizer, grad_checkpointing=ckpt, attention="flash",
                    sharding=sharding, lora_rank=16, gpus=n_gpus),
        shape=Shape(micro_batch=micro_batch, grad_accum=max(1, 32 // (micro_batch * n_gpus)), seq_len=seq_len),
        fit=MemoryFit(peak_bytes=mem.total, usable_bytes=usable),
        timing=Timing(tokens_per_sec=round(tps, 1), mfu=mfu, hours=hours, train_hours=train_hours),
        cost=Cost(spot=spot, usd=hours * price_hour, on_demand_usd=hours * price * nodes,
                  spot_usd=hours * spot_price * nodes if spot_price else None,
                  usd_per_m_tokens=hours * price_hour / (tokens / 1e6), price_hour=price_hour),
    )


def fits(c: Candidate) -> bool:
    return c.fit.peak_bytes <= c.fit.usable_bytes * 0.9


def finish(model: ModelInfo, cands: list[Candidate], baseline: Candidate | None, rejected: list[Rejection],
           command: str, notice: str = "", tokens: float = 100e6) -> Plan:
    """Rank by cost, compute Pareto front (cost, hours), best per GPU and per provider."""
    cands = sorted(cands, key=lambda c: (c.cost.usd, c.timing.hours))
    cands = [c.model_copy(update={"rank": i + 1}) for i, c in enumerate(cands)]
    pareto, best_hours = [], float("inf")
    for c in cands:  # sorted by cost: a point is on the front if it is faster than every cheaper one
        if c.timing.hours < best_hours:
            pareto.append(c)
            best_hours = c.timing.hours
    best_gpu: dict[str, Candidate] = {}
    best_provider: dict[str, Candidate] = {}
    for c in cands:
        best_gpu.setdefault(c.offer.gpu_model, c)
        best_provider.setdefault(c.offer.provider, c)
    saving = baseline.cost.usd - cands[0].cost.usd if (baseline and cands) else None
    return Plan(
        model=model,
        workload={"tokens": int(tokens), "epochs": 2, "seq_len": 2048, "global_batch": 32,
                  "dataset_tokens": int(tokens / 2), "budget_usd": None},
        candidates=cands, pareto=pareto, baseline=baseline, best_per_gpu=best_gpu,
        best_per_provider=best_provider, rejected=rejected,
        assumptions={"mfu_full": 0.38, "mfu_lora": 0.33, "mfu_qlora": 0.22, "headroom": 0.10,
                     "setup_hours": 0.25, "spot_interruption_allowance": 0.10,
                     "billing_granularity": "per second", "currency": "USD"},
        warnings=[], command=command, generated_at=GENERATED_AT, saving_vs_baseline_usd=saving,
        notice=notice,
    )


BASELINE_OFFER = OFFERS[3]  # aws p4de.24xlarge, 8x A100-80GB: "just rent the big box, full FT"
COMMAND = "gpu-advisor plan meta-llama/Llama-3.1-8B --tokens 50M --epochs 2 --seq-len 2048"


def single_gpu_plan(stale: bool = True) -> Plan:
    """A few single-GPU QLoRA/LoRA candidates; the answer is one cheap card."""
    cands = []
    for offer in OFFERS:
        if offer[4] != 1:
            continue
        for stack in ("qlora", "lora"):
            for spot in (False, True) if offer[6] else (False,):
                c = candidate(offer, stack, spot=spot, stale=stale)
                if fits(c):
                    cands.append(c)
    baseline = candidate(BASELINE_OFFER, "full", stale=stale)
    rejected = [
        Rejection(reason="does not fit in GPU memory (LoRA needs 22.1 GB, A10G has 22.1 GiB usable minus headroom)",
                  count=6, example="aws g5.xlarge · lora r16 · bf16 · adamw"),
        Rejection(reason="full fine-tuning needs sharding over at least 4 GPUs", count=9,
                  example="lambda gpu_1x_h100_sxm5 · full · bf16 · adamw"),
    ]
    return finish(LLAMA_8B, cands, baseline, rejected, COMMAND + " --max-gpus 1")


def multi_node_plan() -> Plan:
    """Full fine-tuning with FSDP on 1-2 nodes of 8 GPUs; a 2-node H100 run is the fastest."""
    cands = []
    for offer in OFFERS:
        if offer[4] != 8:
            continue
        for nodes in (1, 2):
            cands.append(candidate(offer, "full", nodes=nodes, tokens=2e9, stale=True))
    baseline = candidate(BASELINE_OFFER, "full", nodes=2, tokens=2e9)
    plan = finish(LLAMA_8B, cands, baseline,
                  [Rejection(reason="A10G: full fine-tuning does not fit even with FSDP×8", count=4,
                             example="aws g5.12xlarge · full · fsdp×4")],
                  COMMAND.replace("50M", "1B") + " --method full --max-nodes 2", tokens=2e9)
    return plan


def nothing_fits_plan() -> Plan:
    """A 70B full fine-tune on single small cards: every offer is rejected."""
    model = ModelInfo(name="meta-llama/Llama-3.1-70B", family="llama", source="catalog",
                      params_total=70_553_706_496, params_trainable=70_553_706_496,
                      params_active=70_553_706_496)
    rejected = [
        Rejection(reason="does not fit in GPU memory: needs 1,129 GB per GPU for weights, gradients and AdamW states",
                  count=38, example="lambda gpu_1x_h100_sxm5 · full · bf16 · adamw (needs 1,129 GB, has 84.9 GB)"),
        Rejection(reason="--max-gpus 1 excludes multi-GPU instances", count=22,
                  example="aws p5.48xlarge (8× H100)"),
        Rejection(reason="CPU offload needs 1,058 GB host RAM; instance has 64 GB", count=5,
                  example="runpod 1x A100 80GB SXM · offload-optimizer"),
    ]
    return finish(model, [], None, rejected,
                  "gpu-advisor plan meta-llama/Llama-3.1-70B --method full --max-gpus 1",
                  notice="Nothing fits: no offer can hold this job with the allowed settings.")


def big_plan(n: int = 500) -> Plan:
    """`n` candidates: every offer x stack x nodes x spot x micro-batch, some prices stale."""
    cands = []
    combos = itertools.product(OFFERS, ("qlora", "lora", "full"), (1, 2), (False, True), (1, 2, 4, 8, 16))
    for offer, stack, nodes, spot, mb in combos:
        if spot and offer[6] is None:
            continue
        if stack != "full" and nodes > 1:
            continue
        c = candidate(offer, stack, nodes=nodes, spot=spot, micro_batch=mb, stale=True)
        if fits(c):
            cands.append(c)
    while len(cands) < n:  # pad with longer-sequence variants
        base = cands[len(cands) % 40]
        cands.append(candidate(next(o for o in OFFERS if o[2] == base.offer.instance_type),
                               {"qlora": "qlora", "lora": "lora", "full": "full"}[base.stack.method],
                               nodes=base.nodes, spot=base.cost.spot, micro_batch=1,
                               seq_len=1024 + 128 * (len(cands) % 8), stale=True))
    cands = cands[:n]
    return finish(LLAMA_8B, cands, candidate(BASELINE_OFFER, "full", stale=True), [
        Rejection(reason="does not fit in GPU memory", count=212, example="aws g5.xlarge · lora r16 · mb16"),
        Rejection(reason="over budget", count=31, example="aws p5.48xlarge ×2 · full"),
    ], COMMAND)


HOSTILE = "<script>alert(1)</script>"


def hostile_plan() -> Plan:
    """Every free-text field carries markup or Markdown specials."""
    plan = single_gpu_plan()
    evil_inst = '"><img src=x onerror=alert(2)>|x|'
    model = plan.model.model_copy(update={"name": "Llama</title><script>alert(3)</script>|*_[`x`](y)$x$"})

    def spoil(c: Candidate) -> Candidate:
        offer = c.offer.model_copy(update={"provider": HOSTILE, "instance_type": evil_inst,
                                           "region": "<b>r</b>&amp;", "source": "<svg onload=alert(4)>"})
        return c.model_copy(update={"offer": offer, "label": c.label + " <i>|</i>"})

    cands = [spoil(c) for c in plan.candidates]
    return plan.model_copy(update={
        "model": model, "candidates": cands, "pareto": [spoil(c) for c in plan.pareto],
        "baseline": spoil(plan.baseline), "best_per_gpu": {k: spoil(v) for k, v in plan.best_per_gpu.items()},
        "best_per_provider": {HOSTILE: cands[0]},
        "rejected": [Rejection(reason=HOSTILE + " | pipe", count=1, example="<iframe src=//x>")],
        "assumptions": {**plan.assumptions, "<script>k</script>": "</style><script>v</script>"},
        "warnings": ["<script>w</script>"], "notice": "<marquee>notice</marquee>",
        "command": "gpu-advisor plan '</code><script>alert(5)</script>' ```",
    })

