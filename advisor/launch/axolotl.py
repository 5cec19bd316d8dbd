"""`launch`'s axolotl.yaml: the candidate's stack in axolotl's own config format.

Written beside the accelerate bundle when the plan was made from an axolotl config (`plan --from-config`,
recorded as the plan's `config_framework` assumption), so the user keeps their framework. Every key is a
documented axolotl key (https://github.com/axolotl-ai-cloud/axolotl, commit 067b021c8b87):
src/axolotl/utils/schemas/model.py (base_model, output_dir), peft.py (adapter, load_in_4bit, lora_r,
lora_alpha, lora_dropout, lora_target_modules, lora_target_linear, lora_modules_to_save, peft_use_dora),
config.py (datasets, sequence_len, sample_packing, bf16, fp16, gradient_checkpointing, flash_attention,
sdp_attention, eager_attention, chunked_cross_entropy, deepspeed, fsdp_config, torch_compile, plugins),
training.py (micro_batch_size, gradient_accumulation_steps, num_epochs, optimizer, learning_rate),
fsdp.py (FSDPConfig: fsdp_version, offload_params, activation_checkpointing, auto_wrap_policy,
transformer_layer_cls_to_wrap, min_num_params, reshard_after_forward, state_dict_type) and
src/axolotl/integrations/liger/args.py (liger_rope, liger_rms_norm, liger_glu_activation,
liger_fused_linear_cross_entropy; plugin axolotl.integrations.liger.LigerPlugin as in
examples/deepseek-v2/qlora-fsdp-2_5.yaml). advisor/workload/training_config.py reads it back (the tests' check).
"""

from __future__ import annotations

from collections.abc import Mapping

from advisor.launch.caveats import expert_lora
from advisor.results import Candidate

AXOLOTL_FILE = "axolotl.yaml"
# axolotl's Cut Cross-Entropy plugin (src/axolotl/integrations/cut_cross_entropy); needs cut-cross-entropy installed
CCE_PLUGIN = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"
LIGER_PLUGIN = "axolotl.integrations.liger.LigerPlugin"
_ATTENTION_KEYS = {"flash": "flash_attention", "sdpa": "sdp_attention", "eager": "eager_attention"}


def wants_axolotl(options: Mapping[str, object]) -> bool:
    """True when the plan came from an axolotl config (cli/workload_sources.py records config_framework)."""
    return options.get("config_framework") == "axolotl"


def precision_keys(precision: str) -> tuple[dict, str]:
    """axolotl's bf16/fp16 keys for a precision, and a caveat where axolotl cannot say it exactly: its bf16 /
    fp16 also set the load dtype (src/axolotl/utils/config/__init__.py normalize_config: torch_dtype), so
    fp32 weights under autocast (amp-*) have no axolotl spelling. bf16 is written false explicitly because
    its default is "auto" (config.py)."""
    if precision in ("bf16", "amp-bf16"):
        keys = {"bf16": True}
    elif precision in ("fp16", "amp-fp16"):
        keys = {"bf16": False, "fp16": True}
    else:
        keys = {"bf16": False, "fp16": False}
    note = (f"axolotl has no fp32-weights autocast mode: {precision} is written as 16-bit weights, which use "
            "less memory than the estimate") if precision.startswith("amp-") else ""
    return keys, note


def _sharding(c: Candidate, layer: str | None, ds_file: str) -> dict:
    if c.stack.is_zero:
        return {"deepspeed": ds_file}  # the bundle's ds_config.json: stage, offload, buckets as estimated
    if c.stack.sharding != "fsdp":
        return {}  # one GPU, or DDP: `accelerate launch` with num_processes > 1
    fsdp: dict = {"fsdp_version": 2, "offload_params": c.stack.offloads, "reshard_after_forward": True,
                  "state_dict_type": "SHARDED_STATE_DICT", "activation_checkpointing": c.stack.grad_checkpointing}
    if layer:
        fsdp.update(auto_wrap_policy="TRANSFORMER_BASED_WRAP", transformer_layer_cls_to_wrap=layer)
    else:
        fsdp.update(auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=100_000_000)
    return {"fsdp_config": fsdp}


def _adapter(c: Candidate, family: str, moe: bool) -> dict:
    st = c.stack
    if st.is_full:
        return {}
    targets = st.lora_targets.strip()
    out: dict = {"adapter": st.method, **({"load_in_4bit": True} if st.is_qlora else {}),
                 "lora_r": st.lora_rank, "lora_alpha": st.lora_alpha,
                 "lora_dropout": 0.0 if expert_lora(c, family, moe) else st.lora_dropout}
    if targets == "all-linear":
        out["lora_target_linear"] = True
    else:
        out["lora_target_modules"] = [t.strip() for t in targets.split(",") if t.strip()]
    if st.saved_modules:
        out["lora_modules_to_save"] = list(st.saved_modules)
    if st.dora:
        out["peft_use_dora"] = True
    return out


def axolotl_config(c: Candidate, *, model_name: str, family: str, moe: bool, layer: str | None, dataset: str,
                   epochs: float, optimizer: str, ds_file: str) -> tuple[dict, list[str]]:
    """The axolotl config for candidate `c` and the caveats of writing it (as LaunchWarnings by the caller).
    `optimizer` is the transformers OptimizerNames spelling launch already writes (advisor/launch/bundle.py)."""
    st = c.stack
    precision, note = precision_keys(c.stack.precision)
    notes = [note] if note else []
    cfg: dict = {
        "base_model": model_name,
        **_adapter(c, family, moe),
        "datasets": [{"path": dataset, "type": "completion", "field": "text"}],  # datasets.py SFTDataset
        "output_dir": "./output",
        "sequence_len": c.shape.seq_len,
        "sample_packing": not c.shape.padded,
        "micro_batch_size": c.shape.micro_batch,
        "gradient_accumulation_steps": c.shape.grad_accum,
        "num_epochs": float(epochs),
        "optimizer": optimizer,
        "learning_rate": 2e-5 if st.is_full else 2e-4,  # as training_args.yaml
        **precision,
        # under FSDP checkpointing is fsdp_config.activation_checkpointing (as in accelerate_config.yaml)
        "gradient_checkpointing": st.grad_checkpointing and c.stack.sharding != "fsdp",
        _ATTENTION_KEYS[st.attention]: True,
    }
    if st.chunked_loss and not st.liger:
        cfg["chunked_cross_entropy"] = True
    if st.loss == "cce":
        cfg.update(plugins=[CCE_PLUGIN], cut_cross_entropy=True)
    elif st.loss == "trl":
        # axolotl trains with transformers' Trainer: its loss (or Liger's fused one) is not TRL's fused LM head
        notes.append("axolotl computes transformers' loss on full fp32 logits (Liger's fused one with --liger); the "
                     "estimate assumed TRL's fused LM head: re-estimate with --loss standard, or --loss cce for "
                     "axolotl's CutCrossEntropyPlugin")
    if st.compile:
        cfg["torch_compile"] = True
    if st.liger:
        cfg.update(plugins=[LIGER_PLUGIN], liger_rope=True, liger_rms_norm=True, liger_glu_activation=True,
                   liger_fused_linear_cross_entropy=True)
    cfg.update(_sharding(c, layer, ds_file))
    if st.is_qlora and not st.double_quant:
        notes.append("axolotl quantises the 4-bit constants too (double quantisation); the estimate assumed not")
    return cfg, notes
