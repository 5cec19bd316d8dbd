"""No HF-stack time prediction is faster than the best published run of any framework
for its GPU class, method and model size. The caps are data (mfu.json `plausibility`, written by the
calibration from its rows, each naming the row that set it); a grid of setups is swept through the time
model alone and any prediction above its cap fails."""

from __future__ import annotations

import itertools

import pytest

from advisor.estimate.engine import Engine
from advisor.estimate.throughput import flops_per_token, gpu_class, size_bucket, step_time, sustained_fraction, table
from advisor.stacks import Shape, Stack
from benchmarks import time_calibration as tc
from benchmarks.throughput_rows import load_rows
from pricing.gpus import get_gpu

MODELS = ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B")
METHODS = ("full", "lora", "qlora")
GPUS = ("H100", "A100-80GB", "L4", "L40S", "RTX4090")
COUNTS = (1, 2, 4, 8)


def _limit(gpu, method: str, params: float) -> tuple[float, dict]:
    """The stored cap for a setup, looked up here from the JSON itself (not through advisor.estimate.throughput): the
    segment's own entry, else the loosest of its fallbacks, rescaled to the card's sustained rate (for LoRA,
    QLoRA's too)."""
    caps = table()["plausibility"]["caps"]
    cls, bucket = gpu_class(gpu), size_bucket(params)
    keys = []
    for m in (method, "qlora") if method == "lora" else (method,):  # QLoRA's best bounds LoRA from below
        own = f"{cls}/{m}/{bucket}"
        keys += [own] if own in caps else [f"{cls}/{m}", f"*/{m}/{bucket}", f"*/{m}"]
    found = [(caps[k]["mfu"] * sustained_fraction(gpu) / caps[k]["sustained_fraction"], caps[k]) for k in keys
             if k in caps]
    assert found, f"no plausibility cap for {cls}/{method}"
    return max(found, key=lambda x: x[0])


@pytest.fixture(scope="module")
def grid() -> list[tuple]:
    out = []
    for model, method, name, n in itertools.product(MODELS, METHODS, GPUS, COUNTS):
        stack = Stack(method=method, precision="amp-bf16" if method == "full" else "bf16", attention="flash",
                      grad_checkpointing=True, gpus=n, sharding="fsdp" if n > 1 else "none",
                      optimizer="adamw-8bit" if method == "full" else "adamw")
        engine = Engine.of(model)
        out.append((model, stack, get_gpu(name), engine.counts(stack)))
    return out


def test_no_hf_prediction_beats_the_best_published_run(grid):
    capped = 0
    for model, stack, gpu, c in grid:
        for shape in (Shape(micro_batch=1, seq_len=2048, grad_accum=8),
                      Shape(micro_batch=8, seq_len=4096, grad_accum=1)):
            r = step_time(c, stack, shape, gpu, grad_accum=shape.grad_accum, with_band=False)
            limit, entry = _limit(gpu, stack.method, c.params_total)
            model_fpt, _ = flops_per_token(c, stack, shape.seq_len)
            mfu = r.tokens_per_sec * model_fpt / (stack.gpus * gpu.peak_tflops(stack.precision) * 1e12)
            assert mfu <= limit * (1 + 1e-9), (model, stack.label(), gpu.name, shape, mfu, entry)
            # the guard is exercised: against caps at half the published runs, every setup is held to them
            half = {k: {**v, "mfu": v["mfu"] / 2} for k, v in table()["plausibility"]["caps"].items()}
            h = step_time(c, stack, shape, gpu, grad_accum=shape.grad_accum, with_band=False, caps=half)
            assert h.mfu <= limit / 2 * (1 + 1e-9)
            capped += int(h.capped)
    assert capped, "the sweep never reached a cap: the guard is not exercised"


def test_the_cap_is_for_the_hf_default_and_says_so():
    """A tuned framework may run faster than the HF-stack cap; an hf prediction that hits it says which row set it."""
    shape = Shape(micro_batch=4, seq_len=2048, grad_accum=2)
    hf = Stack(method="full", precision="amp-bf16", optimizer="adamw-8bit", attention="flash", liger=True,
               sharding="zero3", gpus=8)
    tuned = hf.model_copy(update={"framework": "tuned"})
    e = Engine.of("meta-llama/Llama-3.1-8B")
    t_hf = e.throughput(hf, shape, "H100")
    t_tuned = e.throughput(tuned, shape, "H100")
    assert t_tuned.tokens_per_sec > t_hf.tokens_per_sec
    assert "plausibility_cap" in t_hf.assumptions and "plausibility_cap" not in t_tuned.assumptions
    limit, cap = _limit(get_gpu("H100"), "full", e.counts(hf).params_total)
    assert cap["row"] in t_hf.assumptions["plausibility_cap"]
    assert t_hf.mfu == pytest.approx(limit)


def test_stored_caps_are_the_best_measured_runs_of_the_calibration_rows():
    """The data is what the rows say: recomputing the caps from the published rows gives the stored ones, and
    each names a row whose measured MFU it is."""
    cases, _ = tc.cases(load_rows())
    caps = tc.plausibility_caps(cases)
    assert caps == table()["plausibility"]["caps"]
    by_id = {c.row.id: c for c in cases}
    for key, cap in caps.items():
        assert tc.measured_mfu(by_id[cap["row"]]) == pytest.approx(cap["mfu"], abs=1e-4), key
        assert cap["source"] == by_id[cap["row"]].source
