"""TRL's fused log-prob head: how DPO and GRPO score tokens without the (rows, seq, vocab) logits.

Both trainers patch the policy (and reference) with `add_fused_lm_head` (trl/trainer/utils.py:1548-1698; installed at
dpo_trainer.py:954-962 and grpo_trainer.py:1066-1077). The backbone runs with use_cache=False; its last hidden states
`[:, :-1]` and labels `[:, 1:]` go to `_ChunkedLogProbFunction` (trl/kernels/chunked_logprob.py:311-465), which
projects them through lm_head in tiles of TOKEN_CHUNK_SIZE = 4096 tokens (:31) × 32,768 vocabulary columns
(`_CHUNKED_LOGPROB_CHUNK_SIZE`, utils.py:1506) with an online log-sum-exp in fp32. So the SFT logits path (b·s·V
16-bit logits, fp32 log_softmax, their gradients) is replaced by the terms below.

Which positions are projected (utils.py:1642-1658): on CUDA/XPU with Triton ("compact") only those whose label is
not -100 -- the completion tokens -- gathered by `hidden_states[mask]` (a copy); elsewhere (the CPU) every position,
`hidden_states.reshape(-1, H)` of the non-contiguous `[:, :-1]` slice (also a copy), with labels clamped to 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.estimate.activations import act_bytes, residual_bytes, weight_bytes
from advisor.model.architecture import Architecture
from advisor.stacks import Stack

TOKEN_CHUNK = 4096  # trl/kernels/chunked_logprob.py:31 TOKEN_CHUNK_SIZE
VOCAB_CHUNK = 32768  # trl/trainer/utils.py:1506 _CHUNKED_LOGPROB_CHUNK_SIZE
RUNNING_STATS = 7  # chunked_logprob.py:340-346: running_max, sum_exp, x_sum_exp, sq_sum_exp, z_sum, max_before_target,
#                    target_logit -- fp32 [N] each
SRC = "trl 1.16.0 trl/kernels/chunked_logprob.py ChunkedLogProbFunction (:311-465); trl/trainer/utils.py:1548-1698"

# Per-token outputs each trainer asks the policy's fused head for (differentiable ones need a saved mask).
DPO_OUTPUTS = ("log_probs", "entropy", "mean_logits", "is_top1")  # dpo_trainer.py:957
GRPO_OUTPUTS = ("log_probs", "entropy")  # grpo_trainer.py:1072


@dataclass(frozen=True)
class Head:
    """One fused-head call over `rows` rows of `seq` tokens: what it saves for backward and its transients."""

    scored: int  # positions projected through lm_head
    saved: dict[str, tuple[int, str]]  # term -> (bytes, formula)
    forward_tile: int  # live during the forward call (mm_buf, running statistics, dtype casts of a tile)
    backward: int  # live during its backward (fp32 gradients, the tile again, the casts back)
    outputs: int  # its per-token outputs re-expanded to (rows, seq - 1)


def head_trains(stack: Stack) -> bool:
    """Whether lm_head's weight gets a gradient: full fine-tuning (TRL refuses a LoRA adapter on lm_head,
    dpo_trainer.py:835-842), or peft modules_to_save lm_head."""
    return stack.method == "full" or "lm_head" in stack.saved_modules


def fused_head(arch: Architecture, stack: Stack, rows: int, seq: int, completion: int, outputs: tuple[str, ...],
               compact: bool = True) -> Head:
    """The fused head of one forward with gradients over `rows` × `seq` tokens of which `completion` per row are
    scored (compact=True: CUDA; False: every position, as on the CPU)."""
    spec = arch.spec
    h, v = spec.hidden_size, spec.vocab_size
    positions = rows * max(seq - 1, 0)
    n = rows * min(completion, max(seq - 1, 0)) if compact else positions
    hb = residual_bytes(stack)  # last hidden state: the residual stream's dtype (fp32 under autocast on fp32 weights)
    cb = act_bytes(stack)  # autocast dtype of the tiles (compute_dtype, chunked_logprob.py:331-333)
    where = "completion positions (hidden_states[mask])" if compact else "every position (not Triton: all scored)"
    saved = {
        "fused_head.hidden": (n * h * hb, f"{n:,} {where} × hidden {h} × {hb} B: the copy ctx.save_for_backward keeps "
                                          "(chunked_logprob.py:386)"),
        "fused_head.targets": (n * 8, f"{n:,} labels × 8 B (int64)"),
        "fused_head.log_z_entropy": (n * 4 * 2, f"{n:,} × 2 fp32 (log-sum-exp and entropy per position)"),
    }
    # the outputs re-expanded to (rows, seq - 1) by masked_scatter(mask, x) (compact) or masked_fill(~mask, 0) keep
    # one bool mask for backward (utils.py:1655-1658; one on the CPU census, where only log_probs reaches the loss)
    saved["fused_head.output_mask"] = (positions, f"one bool label mask × {positions:,} positions")
    tile_rows = min(n, TOKEN_CHUNK)
    tile = tile_rows * VOCAB_CHUNK * cb  # mm_buf is (min(N, 4096), 32768) whatever the vocabulary (:347)
    casts = (tile_rows * h * cb if hb != cb else 0) + (min(v, VOCAB_CHUNK) * h * cb if weight_bytes(stack) != cb else 0)
    forward_tile = tile + RUNNING_STATS * n * 4 + casts
    grad_hidden = n * h * 4 + (n * h * hb if hb != 4 else 0)  # fp32 accumulator, then .to(hidden.dtype) (:455-458)
    grad_weight = 0
    if head_trains(stack):
        wb = weight_bytes(stack)  # under ZeRO-3 the gathered, unsharded head (maybe_gather_lm_head_ctx, utils.py:200-233)
        grad_weight = v * h * 4 + (v * h * wb if wb != 4 else 0)
    backward = grad_hidden + grad_weight + tile + casts
    out_bytes = positions * sum(1 if o == "is_top1" else 4 for o in outputs)
    return Head(scored=n, saved=saved, forward_tile=forward_tile, backward=backward, outputs=out_bytes)


def head_formula(head: Head, stack: Stack) -> str:
    """The backward transient in words (for the estimate's overhead row)."""
    text = f"fp32 gradient of the {head.scored:,} scored hidden states + one 4,096 × 32,768 tile"
    if head_trains(stack):
        text += " + lm_head's fp32 weight gradient (vocab × hidden, unsharded: gathered under ZeRO-3)"
    return text
