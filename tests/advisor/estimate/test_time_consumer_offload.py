"""Issue 33: hours where the evidence is thin. CPU offload priced from the code that runs it (the host's Adam step,
the PCIe bytes of each offload setting, what hides behind compute), consumer cards' power limits and PCIe-only
boxes, what Turing cannot run (Liger's Triton kernels, FlashAttention-2, bf16), and the plausibility guard on
consumer-card QLoRA: no prediction faster than the best published run of its GPU class."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from advisor.api import estimate_throughput
from advisor.estimate.engine import Engine
from advisor.estimate.throughput import (
    cpu_optimizer_seconds,
    flops_per_token,
    gpu_class,
    host_link_gb_s,
    liger_runs_on,
    offload_seconds,
    size_bucket,
    step_time,
    sustained_fraction,
    table,
)
from advisor.planner.configs import stacks_for
from advisor.results import StepNumbers
from advisor.stacks import Shape, Stack
from benchmarks import time_calibration as tc
from pricing.gpus import get_gpu

LLAMA_8B = "meta-llama/Llama-3.1-8B"
CONSUMER_CARDS = ("RTX3090", "RTX4090", "L4", "A10G", "T4", "L40S", "A5000", "RTX6000-Ada")


def _run(model: str, stack: Stack, shape: Shape, gpu, **kw) -> StepNumbers:
    return step_time(Engine.of(model).counts(stack), stack, shape, gpu, grad_accum=shape.grad_accum or 1,
                     with_band=False, **kw)


# ----------------------------------------------------------------------------- the plausibility guard


def _class_cap(gpu, method: str, params: float) -> tuple[float, dict]:
    """The stored cap of the card's own class (looked up in the JSON itself), rescaled to the card's sustained rate;
    a class without published runs of the method falls back as advisor.estimate.throughput.mfu_cap does."""
    caps = table()["plausibility"]["caps"]
    cls, bucket = gpu_class(gpu), size_bucket(params)
    keys = []
    for m in (method, "qlora") if method == "lora" else (method,):
        own = f"{cls}/{m}/{bucket}"
        keys += [own] if own in caps else [f"{cls}/{m}", f"*/{m}/{bucket}", f"*/{m}"]
    found = [(caps[k]["mfu"] * sustained_fraction(gpu) / caps[k]["sustained_fraction"], caps[k]) for k in keys
             if k in caps]
    return max(found, key=lambda x: x[0])


def test_consumer_classes_have_published_qlora_runs_behind_their_caps():
    caps = table()["plausibility"]["caps"]
    for cls in ("ada", "ampere-workstation"):
        assert f"{cls}/qlora" in caps, cls
        assert caps[f"{cls}/qlora"]["gpu"] in CONSUMER_CARDS
    # rows bound by the host or a TCP network are no evidence of a ceiling, and set none
    assert all(cap["source"] not in ("raytmpl", "rayvic", "raygptj", "raydolly") for cap in caps.values())


@pytest.fixture(scope="module")
def sweep() -> list[tuple]:
    out = []
    models = ("meta-llama/Llama-3.1-8B", "mistralai/Mistral-7B-v0.3", "Qwen/Qwen2.5-7B", "meta-llama/Llama-2-13b-hf",
              "meta-llama/Llama-3.2-3B")
    for model, card, method, n in itertools.product(models, CONSUMER_CARDS, ("qlora", "lora", "full"), (1, 2, 4)):
        gpu = get_gpu(card)
        half = "bf16" if gpu.supports_bf16 else "fp16"
        for sharding in (("none",) if n == 1 else ("ddp", "fsdp")):
            stack = Stack(method=method, precision=half if method != "full" else f"amp-{half}", gpus=n,
                          sharding=sharding, grad_checkpointing=True, attention="sdpa",
                          optimizer="adamw-8bit" if method == "full" else "adamw")
            out.append((model, stack, gpu))
    return out


def test_no_consumer_card_prediction_beats_the_best_published_mfu_of_its_class(sweep):
    """Models × consumer cards × methods × GPU counts: every predicted MFU is at most the cap of the card's own
    class (for QLoRA on GA102 and Ada, the best published consumer-card QLoRA run)."""
    for model, stack, gpu in sweep:
        c = Engine.of(model).counts(stack)
        limit, entry = _class_cap(gpu, stack.method, c.params_total)
        for shape in (Shape(micro_batch=4, seq_len=2048, grad_accum=2), Shape(micro_batch=16, seq_len=1024)):
            r = step_time(c, stack, shape, gpu, grad_accum=shape.grad_accum or 1, with_band=False)
            model_fpt, _ = flops_per_token(c, stack, shape.seq_len)
            mfu = r.tokens_per_sec * model_fpt / (stack.gpus * gpu.peak_tflops(stack.precision) * 1e12)
            assert mfu <= limit * (1 + 1e-9), (model, stack.label(), gpu.name, shape, mfu, entry["row"])


def test_the_guard_holds_consumer_qlora_to_its_class_cap():
    """The issue's 4 × RTX 3090 QLoRA run against its class's caps: under a cap it is left alone, and a cap below
    it holds it there (the guard acts on consumer classes, not only on datacenter ones)."""
    stack = Stack(method="qlora", grad_checkpointing=True, gpus=4, sharding="ddp")
    shape = Shape(micro_batch=16, seq_len=1024)
    gpu = get_gpu("RTX3090")
    model = "mistralai/Mistral-7B-v0.3"
    caps = table()["plausibility"]["caps"]
    free = _run(model, stack, shape, gpu, caps={})
    guarded = _run(model, stack, shape, gpu)
    assert guarded.mfu == pytest.approx(free.mfu) and not guarded.capped
    half = {k: {**v, "mfu": v["mfu"] / 2} for k, v in caps.items()}
    held = _run(model, stack, shape, gpu, caps=half)
    limit = half["ampere-workstation/qlora/3-15B"]["mfu"] * sustained_fraction(gpu) / half[
        "ampere-workstation/qlora/3-15B"]["sustained_fraction"]
    assert held.capped and held.mfu == pytest.approx(limit)


# ----------------------------------------------------------------------------- CPU offload


def test_the_host_adam_step_is_bound_by_host_memory_bandwidth_growing_with_cores():
    """DeepSpeedCPUAdam streams 28 B per parameter; a 4-vCPU host is slower than a 16-vCPU one, and past the node's
    memory bandwidth more cores buy nothing."""
    stack = Stack(method="full", gpus=1, sharding="zero3", offload="optimizer")
    o = table()["cpu_optimizer"]
    small, medium, big, huge = (cpu_optimizer_seconds(stack, 7e9, 1, v) for v in (4, 16, 128, 512))
    assert small > medium > big == huge
    assert big == pytest.approx(7e9 * o["bytes_per_param"] / (o["node_gb_s"] * 1e9))
    # the ranks of a node share its cores and memory: 8 GPUs on one node update the whole model there
    eight = Stack(method="full", gpus=8, sharding="zero3", offload="optimizer")
    assert cpu_optimizer_seconds(eight, 7e9, 1, 16) == pytest.approx(7e9 * 28 / (o["node_gb_s"] * 1e9))
    assert cpu_optimizer_seconds(eight, 7e9, 2, 16) == pytest.approx(cpu_optimizer_seconds(eight, 7e9, 1, 16) / 2)
    # FSDP's CPUOffload steps torch's AdamW on the CPU, several times slower than DeepSpeed's
    fsdp = stack.model_copy(update={"sharding": "fsdp", "offload": "both"})
    assert cpu_optimizer_seconds(fsdp, 7e9, 1, 128) == pytest.approx(big * o["torch_slowdown"])


def test_offload_pcie_bytes_follow_each_setting():
    """ZeRO-2 optimizer offload moves each micro-batch's gradients out and back when accumulating; ZeRO-3 parameter
    offload copies every shard in for every fetch (the recompute fetches again); FSDP CPUOffload copies the
    flat-parameter shard in for forward and backward; parameter offload alone keeps the optimizer on the GPU."""
    c = Engine.of(LLAMA_8B).counts(Stack(method="full"))
    gpu = get_gpu("A100-80GB")
    link = host_link_gb_s(gpu) * 1e9

    def pcie(stack: Stack, accum: int) -> float:
        o = offload_seconds(c, stack, gpu, c.params_total, per_mb=1.0, grad_accum=accum, nodes=1)
        return (o.pcie_overlapped + o.pcie_serial) * link

    p = c.params_total / 8
    z2 = Stack(method="full", gpus=8, sharding="zero2", offload="optimizer")
    assert pcie(z2, 1) == pytest.approx(p * (4 + 2))  # fp32 gradient partition out, 16-bit partition back
    assert pcie(z2, 4) == pytest.approx(p * (4 + 2 * 4 + 2 * 3 + 2))
    z3 = z2.model_copy(update={"sharding": "zero3"})
    assert pcie(z3, 4) == pytest.approx(p * (4 + 2))  # ZeRO-3 accumulates on the GPU
    both = z3.model_copy(update={"offload": "both"})
    ckpt = both.model_copy(update={"grad_checkpointing": True})
    assert pcie(ckpt, 1) - pcie(both, 1) == pytest.approx(c.params_total * 2 / 8)  # the recompute's fetch
    fsdp = Stack(method="full", gpus=8, sharding="fsdp", offload="both", grad_checkpointing=True)
    assert pcie(fsdp, 1) == pytest.approx(c.params_total * 2 / 8 * 2 + p * 2)  # no third gather under FSDP
    params_only = offload_seconds(c, z3.model_copy(update={"offload": "params"}), gpu, c.params_total, 1.0, 1, 1)
    assert params_only.cpu_step == 0


def test_the_host_step_waits_while_prefetched_copies_hide_behind_compute():
    """ZeRO-Offload's CPU step runs while the GPU waits (DeepSpeed's ZenFlow blog: 'over 60% of each iteration is
    pure GPU wait time'); parameter copies prefetched during compute hide behind it."""
    c = Engine.of(LLAMA_8B).counts(Stack(method="full"))
    gpu = get_gpu("A100-80GB")
    stack = Stack(method="full", gpus=8, sharding="zero3", offload="both")
    short = offload_seconds(c, stack, gpu, c.params_total, per_mb=0.01, grad_accum=1, nodes=1)
    long = offload_seconds(c, stack, gpu, c.params_total, per_mb=100.0, grad_accum=1, nodes=1)
    assert long.cpu_step == short.cpu_step > 0
    assert long.exposed < short.exposed
    assert long.exposed == pytest.approx(long.pcie_overlapped * (1 - table()["comm_overlap"]["zero3"]))


def test_deepspeeds_own_zero_offload_timing_is_reproduced():
    """DeepSpeed's zenflow-corebinding blog (blogs/zenflow-corebinding/README.md @2b68bbc5): Qwen2.5-3B, ZeRO-2 with
    the optimizer on the CPU, 2 × A100-40GB on a 2 × EPYC 7742 host, 4 × 512 tokens per GPU: 2,887 ms per step, and
    240 ms for Qwen2.5-1.5B without offload against 1,365 ms with it. The model has the step within a quarter and
    offload costing several times the step."""
    gpu = get_gpu("A100")
    shape = Shape(micro_batch=4, seq_len=512, grad_accum=1)
    z2 = Stack(method="full", precision="bf16", gpus=2, sharding="zero2", offload="optimizer")
    three = _run("Qwen/Qwen2.5-3B", z2, shape, gpu, host_vcpus_per_gpu=128)
    assert three.step_seconds == pytest.approx(2.887, rel=0.25)
    one_off = _run("Qwen/Qwen2.5-1.5B", z2, shape, gpu, host_vcpus_per_gpu=128)
    one_on = _run("Qwen/Qwen2.5-1.5B", z2.model_copy(update={"offload": "none"}), shape, gpu)
    assert 3.0 < one_off.step_seconds / one_on.step_seconds < 9.0  # published 1,365 / 240 = 5.7


def test_an_offloaded_plan_says_what_it_assumed_about_the_host():
    t = estimate_throughput(LLAMA_8B, Stack(method="full", gpus=8, sharding="zero3", offload="both"),
                            Shape(micro_batch=2, seq_len=2048, grad_accum=4), "A10G")
    assert "vCPUs per GPU" in t.assumptions["offload"] and "PCIe" in t.assumptions["offload"]
    assert t.components["cpu_optimizer_seconds"] > 0


# ----------------------------------------------------------------------------- cards and networks


def test_a_power_capped_card_sustains_a_lower_clock():
    """The dual-3090 rig of fsdp_qlora's benchmark ran its cards at 280 W of 350 W: clock ∝ power^(1/3)."""
    stock = get_gpu("RTX3090")
    capped = dataclasses.replace(stock, power_limit_w=280.0)
    assert sustained_fraction(capped) == pytest.approx(sustained_fraction(stock) * (280 / 350) ** (1 / 3))
    assert sustained_fraction(dataclasses.replace(stock, power_limit_w=500.0)) == sustained_fraction(stock)


def test_consumer_boxes_without_nvlink_pay_pcie_collectives_and_tcp_networks_less_than_line_rate():
    shape = Shape(micro_batch=2, seq_len=2048, grad_accum=1)
    fsdp = Stack(method="lora", gpus=2, sharding="fsdp", grad_checkpointing=True)
    geforce = _run(LLAMA_8B, fsdp, shape, get_gpu("RTX4090"))
    pro = _run(LLAMA_8B, fsdp, shape, dataclasses.replace(get_gpu("RTX4090"), pcie_p2p=True))
    # NCCL through host memory: the host-staged copy rate, not the PCIe link (mfu.json no_p2p_host_staged_gb_s)
    link = get_gpu("RTX4090").link_gb_s_per_direction
    assert geforce.comm_seconds == pytest.approx(pro.comm_seconds * link / table()["no_p2p_host_staged_gb_s"])
    multi = Stack(method="full", gpus=16, sharding="zero3")
    ethernet = _run(LLAMA_8B, multi, shape, get_gpu("A10G"), nodes=16, network_gbps=100.0)
    rdma = _run(LLAMA_8B, multi, shape, get_gpu("A10G"), nodes=16, network_gbps=200.0)
    eff = table()["fitted"]["socket_network_efficiency"]["value"]
    assert ethernet.comm_seconds == pytest.approx(rdma.comm_seconds * 2 / eff)


def test_turing_gets_no_liger_from_the_planner_and_an_unpriced_stack_says_so():
    """Triton supports NVIDIA compute capability 8.0+ and Liger's bf16 kernels fail on sm_75: the planner never adds
    Liger on a T4 or V100 (it still does on an A10G), and a pinned one is reported as not priced, with the widest
    band."""
    assert not liger_runs_on(get_gpu("T4")) and not liger_runs_on(get_gpu("V100")) and liger_runs_on(get_gpu("A10G"))
    for card in ("T4", "V100"):
        assert not any(s.liger for s in stacks_for(get_gpu(card), 1, ("qlora", "lora", "full"), "llama", {}))
    assert any(s.liger for s in stacks_for(get_gpu("A10G"), 1, ("qlora",), "llama", {}))
    shape = Shape(micro_batch=2, seq_len=1024, grad_accum=4)
    plain = estimate_throughput(LLAMA_8B, Stack(method="qlora", precision="fp16"), shape, "T4")
    liger = estimate_throughput(LLAMA_8B, Stack(method="qlora", precision="fp16", liger=True), shape, "T4")
    bf16 = estimate_throughput(LLAMA_8B, Stack(method="qlora", precision="bf16"), shape, "T4")
    assert "not_priced" not in plain.assumptions
    assert "Liger" in liger.assumptions["not_priced"] and "bf16" in bf16.assumptions["not_priced"]
    unseen = table()["bands"]["unseen"]
    assert liger.interval_basis["low_factor"] == unseen["low"] and liger.interval_basis["high_factor"] == unseen["high"]
    assert (liger.tokens_per_sec_high / liger.tokens_per_sec) >= (plain.tokens_per_sec_high / plain.tokens_per_sec)


def test_each_issue_group_is_judged_on_enough_held_out_rows():
    """Issue 33's bar: consumer and mid cards and CPU-offload runs, each from 8 rows of 3 sources, held out by source
    within 20 % median |error| and ±10 % signed; the HF-stack H100/A100 figure no worse than before (10.4 %)."""
    groups = table()["fit"]["held_out_by_group"]
    for name in ("consumer and mid cards", "CPU offload"):
        g = groups[name]
        assert g["rows"] >= tc.GOAL_ROWS and g["sources"] >= tc.GOAL_SOURCES, name
        assert g["median_abs_error"] <= 0.20 and abs(g["signed_median"]) <= 0.10, name
    assert groups["H100/A100 HF stack"]["median_abs_error"] <= 0.105
    assert groups["class:volta"]["status"] == "uncalibrated"
