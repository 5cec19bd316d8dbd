"""QLoRA's fp32 casts, checked against peft's own prepare_model_for_kbit_training on a tiny random model.

bitsandbytes does not install on CPU, so the model is a bf16 one: the function casts every fp16/bf16 parameter
whose class is not Params4bit, i.e. (in a 4-bit model) all but the quantised nn.Linear weights. The test counts
the bytes of exactly those parameters after the real call and compares them with the estimate's term."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from advisor.estimate.engine import Engine  # noqa: E402
from advisor.estimate.memory import BYTES_16BIT, BYTES_FP32, kbit_cast_bytes, kbit_cast_params  # noqa: E402
from advisor.model.catalog import from_hf_config  # noqa: E402
from advisor.stacks import Shape, Stack  # noqa: E402

TINY = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 176,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 320,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


def _quantised(name: str, module) -> bool:
    """The weights bitsandbytes would hold as Params4bit: nn.Linear weights inside the decoder (lm_head stays)."""
    return isinstance(module, torch.nn.Linear) and not name.endswith("lm_head")


def test_prepare_model_for_kbit_training_casts_what_the_estimate_counts():
    config = transformers.LlamaConfig(**{k: v for k, v in TINY.items() if k not in ("architectures", "torch_dtype")})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    quantised = {f"{n}.weight" for n, m in model.named_modules() if _quantised(n, m)}
    before = {n: p.dtype for n, p in model.named_parameters()}
    peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    rest = [(n, p) for n, p in model.named_parameters() if n not in quantised]
    assert all(before[n] == torch.bfloat16 and p.dtype == torch.float32 for n, p in rest)  # the real cast ran
    fp32_bytes = sum(p.numel() * p.element_size() for _, p in rest)

    arch = Engine.of(from_hf_config(TINY, name="tiny-llama", source="test")).arch
    assert kbit_cast_params(arch) * BYTES_FP32 == fp32_bytes
    stack = Stack(method="qlora")
    assert kbit_cast_bytes(arch, stack) == fp32_bytes - sum(p.numel() for _, p in rest) * BYTES_16BIT
    est = Engine.of(from_hf_config(TINY, name="tiny-llama", source="test")).memory(stack, Shape(seq_len=64))
    # the bundle keeps them 16-bit (TRL 1.16.0 does not call the function): its term is the 16-bit bytes
    assert est.components["weights.16bit_rest"].bytes == fp32_bytes // 2
    assert f"+{kbit_cast_bytes(arch, stack) / 1e9:.2f} GB" in est.assumptions["qlora_fp32_casts"]


def test_the_bundle_trl_path_does_not_call_prepare_model_for_kbit_training():
    """What the estimate models as the default: TRL's SFTTrainer source has no call of it."""
    import inspect
    from pathlib import Path

    from trl.trainer import sft_trainer

    bundle = Path(__file__).resolve().parents[3] / "advisor" / "launch" / "templates" / "train.py"
    assert "prepare_model_for_kbit_training" not in inspect.getsource(sft_trainer)
    assert "prepare_model_for_kbit_training" not in bundle.read_text(encoding="utf-8")


def test_qdora_with_dropout_keeps_a_dequantised_copy_of_every_adapted_weight():
    """peft dora.py: with dropout the base matmul reruns on dequantize_module_weight(base_layer).to(x.dtype), a fresh
    tensor F.linear keeps for the input's gradient -- under QLoRA even when the adapters share the compute dtype."""
    engine = Engine.of("meta-llama/Llama-2-7b-hf")
    arch = engine.arch
    shape = Shape(seq_len=512)
    spec = arch.spec
    # the first layer's q/k/v input (the frozen embedding's output) needs no gradient: F.linear keeps no weight there
    first_qkv = spec.hidden_size * (spec.hidden_size + 2 * spec.num_key_value_heads * spec.hidden_size
                                    // spec.num_attention_heads)
    for dtype, nbytes in (("bf16", 2), ("fp32", 4)):
        kept = engine.memory(Stack(method="qlora", dora=True, adapter_dtype=dtype), shape).components
        assert kept["activations.layers.dora.weight_copies"].bytes == (arch.linear_weight_params - first_qkv) * nbytes
    no_dropout = engine.memory(Stack(method="qlora", dora=True, lora_dropout=0.0), shape).components
    assert "activations.layers.dora.weight_copies" not in no_dropout
    lora_bf16 = engine.memory(Stack(method="lora", dora=True, adapter_dtype="bf16"), shape).components
    assert "activations.layers.dora.weight_copies" not in lora_bf16  # the bf16 weight itself is what F.linear keeps
