"""The reference model of DPO (and of GRPO with beta > 0): where its weights live and what its forward costs.

TRL 1.16.0 builds it the same way in both trainers (dpo_trainer.py:907-929 and :984-990; grpo_trainer.py:982-1003
and :1182-1188; trl/models/utils.py:246-342):
- PEFT and no ref_model: none is loaded (dpo_trainer.py:909-910); the reference forward runs the policy under
  `use_adapter(model, None)`, adapters switched off (dpo_trainer.py:1328-1336, grpo_trainer.py:2723-2737);
- DPO with precompute_ref_log_probs (not FSDP): none during training; one pass over the data before it
  (dpo_trainer.py:1195-1203) stores two floats per pair;
- otherwise a second copy from the checkpoint in the policy's dtype (`setdefault("dtype", self.model.dtype)`,
  dpo_trainer.py:924, grpo_trainer.py:1001), frozen and placed like the policy: DeepSpeed `prepare_deepspeed` keeps
  ZeRO-3 (sharded) and forces ZeRO-1/2 to stage 0, a full replica (models/utils.py:282-287); FSDP shards it with the
  policy's plugin (models/utils.py:292-342); DDP and one GPU hold a full replica.
Its forward is under torch.no_grad with checkpointing off (dpo_trainer.py:1327): nothing saved, one layer's working
set alive at a time.
"""

from __future__ import annotations

from advisor.estimate.activations import act_bytes
from advisor.estimate.memory import PARAM_BYTES, nf4_bytes_per_param
from advisor.model.architecture import Architecture
from advisor.stacks import Stack

SRC = ("trl 1.16.0 trl/trainer/dpo_trainer.py:907-929, 984-990; grpo_trainer.py:982-1003, 1182-1188; "
       "trl/models/utils.py:246-342 (prepare_deepspeed: ZeRO-1/2 -> stage 0; prepare_fsdp)")

HOW = {
    "none": "no reference model (GRPO beta 0: grpo_trainer.py:984-986)",
    "adapter-off": "no second copy: the policy with its LoRA adapter switched off (use_adapter(model, None))",
    "precomputed": "no reference model during training: its log-probs are computed once before training "
                   "(precompute_ref_log_probs) and kept as 2 floats per pair",
}


def how(stack: Stack) -> str:
    """How the reference is held, in words (the estimate's JSON says it)."""
    ref = stack.objective.reference(stack.method)
    if ref != "copy":
        return HOW[ref]
    shard = stack.shard_degree_params
    placed = (f"sharded like the policy over {shard} GPUs ({stack.sharding})" if shard > 1 else
              "a full replica on every GPU" + (" (DeepSpeed forces ZeRO-1/2 reference engines to stage 0)"
                                              if stack.sharding in ("zero1", "zero2") else ""))
    return f"a frozen copy in the policy's dtype, {placed}"


def weights(arch: Architecture, stack: Stack) -> tuple[int, str]:
    """(bytes per GPU, formula) of the reference's weights: 0 unless it is a copy."""
    if stack.objective.reference(stack.method) != "copy":
        return 0, ""
    P, shard = arch.params_total, stack.shard_degree_params
    if stack.method == "qlora":  # quantization_config is passed on to the copy (dpo_trainer.py:915-916)
        q = arch.linear_weight_params
        nf4 = nf4_bytes_per_param(stack.double_quant)
        total = q * nf4 + (P - q) * 2
        return int(total / shard), f"{q:,} NF4 linear weights × {nf4:.4f} B + {P - q:,} × 2 B, / {shard} shards"
    pb = PARAM_BYTES[stack.precision]
    return int(P * pb / shard), f"{P:,} params × {pb} B ({stack.precision} load dtype)" + (
        f" / {shard} shards" if shard > 1 else " (full replica)")


def nograd_layer(arch: Architecture, stack: Stack, rows: int, seq: int, padded: bool) -> int:
    """Bytes one decoder layer's forward keeps alive at once without gradients: the MLP's gate/activation, up and
    their product (3 × intermediate) beside the residual, its norm and the attention output (3 × hidden), and, for
    padded rows, the (rows, 1, seq, seq) attention mask transformers builds once per forward."""
    spec = arch.spec
    f = spec.moe_intermediate_size * spec.num_experts_per_tok if spec.is_moe else spec.intermediate_size
    a = act_bytes(stack)
    tokens = rows * seq
    mask = rows * seq * seq if padded and stack.attention != "flash" else 0
    return int(tokens * (3 * f + 3 * spec.hidden_size) * a + mask)
