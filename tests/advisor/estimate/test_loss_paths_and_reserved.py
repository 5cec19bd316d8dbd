"""Issue 33, memory: the loss the launch bundle's train.py runs is the estimate's default (TRL 1.16.0 SFTTrainer's
fused LM head), Cut Cross-Entropy has its own bytes from its implementation (and axolotl's CCE plugin maps to it),
and the reserved figure a card shows never exceeds the card."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
from pathlib import Path

import pytest

from advisor.api import estimate_memory
from advisor.estimate.activations import TRL_TOKEN_CHUNK, TRL_VOCAB_CHUNK
from advisor.estimate.alloc_trace import parse_lengths
from advisor.stacks import Shape, Stack
from advisor.workload.training_config import read_config
from pricing.gpus import get_gpu

LLAMA_8B = "meta-llama/Llama-3.1-8B"


# ----------------------------------------------------------------------------- the default: TRL's fused LM head


def test_the_default_loss_is_the_one_trls_sft_trainer_computes():
    """TRL 1.16.0's SFTTrainer adds its fused LM head and takes -log_probs as the loss unless a compute_loss_func,
    label smoothing or DFT is asked for; the chunk sizes the estimate uses are the installed kernel's."""
    from trl.kernels import chunked_logprob
    from trl.trainer import sft_trainer, utils

    init = inspect.getsource(sft_trainer.SFTTrainer.__init__)
    assert "add_fused_lm_head(" in init and '"entropy"' in init
    assert "-outputs.log_probs" in inspect.getsource(sft_trainer.SFTTrainer.compute_loss)
    assert chunked_logprob.TOKEN_CHUNK_SIZE == TRL_TOKEN_CHUNK and utils._CHUNKED_LOGPROB_CHUNK_SIZE == TRL_VOCAB_CHUNK
    assert Stack().loss == "trl"
    est = estimate_memory(LLAMA_8B, Stack(method="lora", grad_checkpointing=True), Shape(seq_len=4096))
    assert "TRL" in est.assumptions["loss"]
    assert "activations.loss.log_softmax_fp32" not in est.components
    assert "activations.loss.trl_hidden" in est.components


def test_trls_fused_head_keeps_no_logits_where_transformers_loss_keeps_them_in_fp32():
    """At 4k tokens of an 8B Llama (vocabulary 128,256), transformers' loss keeps 2.1 GB of fp32 log-softmax and
    needs 4.2 GB of fp32 logits gradients; TRL's keeps the hidden states of the labelled tokens and needs one tile."""
    shape = Shape(micro_batch=1, seq_len=4096)
    std = estimate_memory(LLAMA_8B, Stack(method="lora", loss="standard"), shape)
    trl = estimate_memory(LLAMA_8B, Stack(method="lora"), shape)
    assert std.components["activations.loss.log_softmax_fp32"].bytes == 4 * 4096 * 128256
    saved_std = std.breakdown.activations
    assert saved_std - trl.breakdown.activations > 4 * 4096 * 128256 * 0.9
    tile = 4096 * 32768 * 2
    assert trl.components["overhead.loss_gradients"].bytes == 4096 * 4096 * (4 + 2) + tile
    assert std.components["overhead.loss_gradients"].bytes == 2 * 4 * 4096 * 128256


def test_an_adapter_on_lm_head_is_refused_where_the_fused_loss_would_skip_it():
    with pytest.raises(ValueError, match="lm_head"):
        Stack(method="lora", lora_targets="q_proj,v_proj,lm_head")
    with pytest.raises(ValueError, match="lm_head"):
        Stack(method="lora", lora_targets="q_proj,lm_head", loss="cce")
    assert Stack(method="lora", lora_targets="q_proj,lm_head", loss="standard").loss == "standard"
    assert Stack(method="lora", modules_to_save="lm_head").loss == "trl"  # a trained copy is the weight it reads


def test_liger_under_trl_keeps_its_layer_kernels_but_not_its_loss():
    """SFTTrainer sets liger_kernel_config fused_linear_cross_entropy False: Liger's norms and SwiGLU apply, the
    loss path is TRL's."""
    est = estimate_memory(LLAMA_8B, Stack(method="lora", liger=True), Shape(seq_len=2048))
    assert "activations.loss.trl_hidden" in est.components and "activations.loss.flce_grad_input" not in est.components
    assert "activations.layers.norms.input" in est.components  # Liger's RMSNorm saves its input as it came
    fused = estimate_memory(LLAMA_8B, Stack(method="lora", liger=True, loss="standard"), Shape(seq_len=2048))
    assert "activations.loss.flce_grad_input" in fused.components


# ----------------------------------------------------------------------------- Cut Cross-Entropy


CCE_LINES = json.loads((Path(__file__).parents[2] / "data" / "cut_cross_entropy_allocations.json").read_text())


def _cce_line(file: str, needle: str) -> str:
    """The vendored line of cut-cross-entropy's `file` that contains `needle`, normalised by ast."""
    [line] = [ln["code"] for ln in CCE_LINES["lines"] if ln["file"].endswith(file) and needle in ln["code"]]
    return ast.unparse(ast.parse(line))


def test_the_vendored_cce_lines_are_the_installed_source_where_it_is_installed():
    """The quoted allocation list is the package's own code: where cut-cross-entropy is installed (it is not in the
    test extra: its Triton wheel is ~1 GB and never runs on a CPU), every quoted line is at its line number."""
    spec = importlib.util.find_spec("cut_cross_entropy")
    if spec is None:
        pytest.skip("cut-cross-entropy is not installed; the vendored lines carry the wheel's sha256 instead")
    root = Path(spec.origin).parent.parent
    for ln in CCE_LINES["lines"]:
        source = (root / ln["file"]).read_text().splitlines()
        assert source[ln["line"] - 1].strip() == ln["code"], ln


def test_cce_keeps_what_its_autograd_function_saves():
    """cut-cross-entropy's kernels are Triton (CUDA only; its torch_compile fallback builds the full logits, which is
    not what CCE keeps), so this reads the implementation's own allocation list (vendored with its provenance in
    tests/data/cut_cross_entropy_allocations.json) rather than running it: LinearCrossEntropyFunction.forward saves
    (e, c, lse, targets, valids, logit_avg); lse is fp32 per token, valids int32 per token, logit_avg fp32 per
    vocabulary entry; backward allocates de = zeros_like(e) and dc."""
    saved = ast.parse(_cce_line("cce.py", "save_for_backward")).body[0].value
    names = [ast.unparse(a) for a in saved.args]
    assert names == ["e", "c", "lse", "params.targets", "params.valids", "logit_avg"]
    assert _cce_line("cce_lse_forward.py", "lse =") == "lse = e.new_full((B,), -float('inf'), dtype=torch.float32)"
    assert _cce_line("cce_lse_forward.py", "logit_avg") == "logit_avg = e.new_full((V,), 0.0, dtype=torch.float32)"
    assert ".nonzero().to(torch.int32)" in _cce_line("utils.py", "valids")
    assert _cce_line("cce_backward.py", "de =") == "de = torch.zeros_like(e)"
    assert _cce_line("cce_backward.py", "dc =") == "dc = torch.zeros_like(c, dtype=e.dtype)"

    shape = Shape(micro_batch=2, seq_len=2048)
    cce = estimate_memory(LLAMA_8B, Stack(method="lora", loss="cce"), shape)
    tokens, h, v = 4096, 4096, 128256
    comps = {k: c.bytes for k, c in cce.components.items()}
    assert comps["activations.loss.cce_hidden"] == 2 * h * tokens  # e (bf16); c is lm_head's weight
    assert comps["activations.loss.cce_lse_valids"] == (4 + 4) * tokens  # lse fp32 + valids int32
    assert comps["activations.loss.cce_logit_avg"] == 4 * v
    assert comps["overhead.loss_gradients"] == 2 * h * tokens + 12 * v  # de, the vocabulary ordering


def test_cce_drops_the_logits_terms():
    shape = Shape(micro_batch=2, seq_len=2048)
    std = estimate_memory(LLAMA_8B, Stack(method="lora", loss="standard"), shape)
    cce = estimate_memory(LLAMA_8B, Stack(method="lora", loss="cce"), shape)
    logits_terms = ("activations.loss.log_softmax_fp32", "activations.loss.targets", "activations.logits.softcap_tanh")
    assert all(t not in cce.components for t in logits_terms)
    assert std.breakdown.activations - cce.breakdown.activations > 4 * 4096 * 128256 * 0.95
    assert "Cut Cross-Entropy" in cce.assumptions["loss"] and "cce-loss" in cce.stack.label()
    with pytest.raises(ValueError, match="--loss cce"):
        Stack(loss="cce", liger=True)


def test_axolotls_cut_cross_entropy_plugin_maps_to_cce_not_chunked(tmp_path):
    cfg = tmp_path / "axolotl.yaml"
    cfg.write_text("base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nlora_r: 16\nsequence_len: 1024\n"
                   "micro_batch_size: 2\nbf16: true\n"
                   "plugins:\n  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin\n"
                   "cut_cross_entropy: true\n")
    assert read_config(cfg).options["pins"]["loss"] == "cce"
    plain = tmp_path / "plain.yaml"
    plain.write_text("base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nsequence_len: 1024\n")
    assert read_config(plain).options["pins"]["loss"] == "standard"  # axolotl's Trainer: transformers' loss


# ----------------------------------------------------------------------------- the card's own limit


def test_reserved_never_shows_more_than_the_card_has():
    """The issue's case: Qwen 7B LoRA on an A100-80GB with variable lengths once showed 102.8 GiB reserved. On the
    card, the caching allocator frees its cached blocks and retries before it fails, so max_memory_reserved stays
    under what the card leaves PyTorch; on an unlimited card the same replay keeps more."""
    stack = Stack(method="lora", loss="standard", grad_checkpointing=True)
    shape = Shape(micro_batch=4, seq_len=4096)
    lengths = parse_lengths("1500,1200,4096")
    free = estimate_memory("Qwen/Qwen2.5-7B", stack, shape, lengths=lengths, expandable_segments=False)
    card = estimate_memory("Qwen/Qwen2.5-7B", stack, shape, gpu="A100-80GB", lengths=lengths,
                           expandable_segments=False)
    usable = get_gpu("A100-80GB").usable_bytes
    assert free.reserved.shows > usable  # what the uncapped replay claimed
    assert card.reserved.card_bytes < usable and card.reserved.needed <= card.reserved.shows <= card.reserved.card_bytes
    assert card.reserved.needed == free.reserved.needed  # what the run needs does not depend on the card
