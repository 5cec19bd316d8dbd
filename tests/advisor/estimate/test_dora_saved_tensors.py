"""DoRA's weight copies, measured with torch's saved-tensor hooks on a tiny random-initialised Llama.

peft 0.21.2 tuners/lora/dora.py DoraLinearLayer.forward reruns the base matmul when dropout is on:
`weight = dequantize_module_weight(base_layer).to(x.dtype)` and `F.linear(x, weight)`, which keeps the cast weight
for the input's gradient. With bf16 weights and fp32 adapters (peft's default) the cast is a fresh fp32 copy of
every adapted weight whose input needs a gradient; `benchmarks.measure` records every tensor autograd saves
(saved_tensors_hooks, one count per storage) and flags the casts of parameters. The estimate's term must be those
bytes exactly. (Under QLoRA the dequantised weight is always fresh; bitsandbytes does not run on a CPU.)"""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from advisor import api  # noqa: E402
from advisor.stacks import Shape, Stack  # noqa: E402
from benchmarks.measure import LLAMA_SMALL, measure, model_spec  # noqa: E402

SHAPE = Shape(micro_batch=1, seq_len=64)
TERM = "activations.layers.dora.weight_copies"


def _both(stack: Stack):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        measured = measure(LLAMA_SMALL, stack, SHAPE)
    return measured, api.estimate_memory(model_spec(LLAMA_SMALL, "small"), stack, SHAPE).components


def test_dora_with_dropout_keeps_an_fp32_copy_of_every_adapted_weight():
    measured, comps = _both(Stack(method="lora", dora=True, lora_dropout=0.05, loss="standard"))
    copies = [s for s in measured.saved if s.weight_copy]
    assert copies and all(s.dtype == "float32" and s.op == "linear" for s in copies)
    assert all("lora_magnitude_vector" in s.module for s in copies)  # made inside peft's DoRA layer
    assert measured.weight_copies == sum(s.storage_bytes for s in copies)
    assert comps[TERM].bytes == measured.weight_copies
    assert "dora.py" in comps[TERM].source


@pytest.mark.parametrize("stack", [Stack(method="lora", dora=True, lora_dropout=0.0, loss="standard"),
                                   Stack(method="lora", dora=True, lora_dropout=0.05, adapter_dtype="bf16",
                                         loss="standard")], ids=["no-dropout", "bf16-adapters"])
def test_no_copy_without_dropout_or_when_the_dtypes_match(stack):
    """Without dropout peft reuses the base layer's result; with bf16 adapters `.to(x.dtype)` returns the weight
    itself: autograd keeps the parameter, no copy."""
    measured, comps = _both(stack)
    assert measured.weight_copies == 0
    assert TERM not in comps
