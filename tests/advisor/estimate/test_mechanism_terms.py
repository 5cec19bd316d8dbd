"""Issue 48's mechanisms are named terms of `gpu-advisor estimate --format json`, each with its source, and each is
checked against what the library that runs it does where that library runs on a CPU:

- no-P2P host-staged collectives (GeForce cards): `throughput.assumptions.comm_host_staged`; the 2x RTX 4090 FSDP
  LoRA all-gather priced at the host-staged copy rate (NCCL itself needs GPUs: the rate is nccl-tests' measurement);
- DoRA's weight copies: `activations.layers.dora.weight_copies` (measured in tests/advisor/estimate/test_dora_saved_tensors.py);
- QLoRA's fp32 casts: `assumptions.qlora_fp32_casts` (peft's own function in tests/advisor/estimate/test_qlora_casts.py);
- CPU offload: `assumptions.cpu_offload` and `throughput.assumptions.offload`, the host RAM against torch's AdamW;
- Gemma 2's default attention: `assumptions.attention_default`, against the model transformers builds.
"""

from __future__ import annotations

import json

import pytest
from helpers.cli_run import gpu_advisor

from advisor.estimate.throughput import table
from pricing.gpus import get_gpu

LLAMA3_8B = "meta-llama/Meta-Llama-3-8B"


def _estimate(capsys, *args) -> dict:
    code, out, err = gpu_advisor(capsys, "estimate", *args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def test_two_rtx4090_fsdp_lora_prices_the_all_gather_through_host_memory(capsys):
    """FSDP gathers every 16-bit weight forward and backward per micro-batch (checkpointing inside the unit: no
    third gather) and reduce-scatters the fp32 adapter gradients; on GeForce cards NCCL stages it through pinned
    host memory, so the bytes move at the host-staged copy rate, not at the PCIe link's."""
    args = (LLAMA3_8B, "--method", "lora", "--gpus", "2", "--sharding", "fsdp", "--grad-checkpointing",
            "--seq-len", "1024", "--gpu")
    geforce = _estimate(capsys, *args, "RTX4090")
    t = table()
    params, trainable = geforce["model"]["params_total"], geforce["model"]["params_trainable"]
    volume = 0.5 * (2 * 2 * params + 4 * trainable)  # ring (n-1)/n of two 2-byte gathers + fp32 grads
    rate = min(get_gpu("RTX4090").link_gb_s_per_direction, t["no_p2p_host_staged_gb_s"])
    assert rate == t["no_p2p_host_staged_gb_s"] < get_gpu("RTX4090").link_gb_s_per_direction
    tp = geforce["throughput"]
    assert tp["components"]["comm_seconds"] == pytest.approx(volume / (rate * 1e9 * t["collective_efficiency"]))
    assert tp["assumptions"]["pcie_p2p"] is False
    assert "nccl-tests issue #117" in tp["assumptions"]["comm_host_staged"]
    assert f"{tp['components']['comm_seconds']:.2f} s/step" in tp["assumptions"]["comm_host_staged"]
    # the same job on a PCIe card with peer-to-peer (RTX 6000 Ada, same Ada compute class) is not host-staged
    workstation = _estimate(capsys, *args, "RTX6000-Ada")["throughput"]
    assert "comm_host_staged" not in workstation["assumptions"]
    assert workstation["components"]["comm_seconds"] < tp["components"]["comm_seconds"] / 3
    assert tp["tokens_per_sec"] < workstation["tokens_per_sec"] / 2


def test_each_mechanism_is_a_named_term_with_its_source(capsys):
    qdora = _estimate(capsys, "meta-llama/Llama-2-7b-hf", "--method", "qlora", "--dora", "--adapter-dtype", "bf16",
                      "--gpus", "2", "--sharding", "fsdp", "--offload", "both",
                      "--seq-len", "1024", "--gpu", "RTX4090")
    copies = qdora["components"]["activations.layers.dora.weight_copies"]
    assert copies["bytes"] > 0 and "dequantize_module_weight" in copies["source"] and "dora.py" in copies["source"]
    assert "prepare_model_for_kbit_training" in qdora["assumptions"]["qlora_fp32_casts"]
    offload = qdora["assumptions"]["cpu_offload"]
    assert f"{qdora['cpu_ram_bytes'] / 1e9:.2f} GB" in offload and "ZeRO-Offload" in offload
    assert "cpu_adam.h" in qdora["throughput"]["assumptions"]["offload"]
    assert "comm_host_staged" in qdora["throughput"]["assumptions"]
    plain = _estimate(capsys, "meta-llama/Llama-2-7b-hf", "--method", "lora", "--seq-len", "1024")
    for term in ("qlora_fp32_casts", "cpu_offload", "attention_default"):
        assert term not in plain["assumptions"], term
    assert "activations.layers.dora.weight_copies" not in plain["components"]


def test_cpu_offload_host_ram_is_what_torch_adamw_keeps_for_fp32_masters():
    """Optimizer offload keeps fp32 master weights, fp32 gradients and both Adam states on the host: build them for
    a tiny bf16 model, step the real torch.optim.AdamW on them, and count the bytes."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from advisor import api
    from advisor.stacks import Shape, Stack
    from benchmarks.measure import LLAMA_SMALL, model_spec

    cfg = {k: v for k, v in LLAMA_SMALL.items() if k != "model_type"}
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg)).to(torch.bfloat16)
    masters = [p.detach().float().requires_grad_(True) for p in model.parameters()]
    for m in masters:
        m.grad = torch.zeros_like(m)
    opt = torch.optim.AdamW(masters)
    opt.step()
    states = [s for st in opt.state.values() for s in st.values() if torch.is_tensor(s) and s.dim() > 0]
    host = sum(t.numel() * t.element_size() for t in [*masters, *(m.grad for m in masters), *states])

    stack = Stack(method="full", gpus=2, sharding="zero2", offload="optimizer")
    est = api.estimate_memory(model_spec(LLAMA_SMALL, "small"), stack, Shape(seq_len=64))
    assert est.cpu_ram_bytes == host
    assert f"{host / 1e9:.2f} GB" in est.assumptions["cpu_offload"]
    assert est.components["optimizer.states"].bytes == 0  # none of it left on the GPU


def test_gemma2_default_attention_is_what_the_installed_transformers_builds(capsys):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Gemma2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, head_dim=16, vocab_size=256)
    built = transformers.Gemma2ForCausalLM(cfg).config._attn_implementation
    est = _estimate(capsys, "google/gemma-2-2b", "--method", "lora", "--seq-len", "512")
    assert est["stack"]["attention"] == built == "eager"
    assert "modeling_gemma2.py" in est["assumptions"]["attention_default"]
    assert "attention_default" not in _estimate(capsys, "google/gemma-2-2b", "--method", "lora", "--attention",
                                                "flash", "--seq-len", "512")["assumptions"]
