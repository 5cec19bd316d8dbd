"""TRL DPO and GRPO configs (`trl dpo --config` / `trl grpo --config`, DPOConfig / GRPOConfig YAML) -> the plan's
objective options, for advisor/workload/training_config.py's TRL reader.

Keys are trl 1.16.0's (trl/trainer/dpo_config.py, grpo_config.py; their fields beyond TrainingArguments). Every one
is accounted for: the ones that move memory or time become objective options (`objective`, `beta`, `loss_type`,
`num_generations`, `max_completion_length`, `vllm`, ...); those that do not (sampling temperature, clipping epsilons,
reward weights, server addresses, logging) are `ignored`; keys older TRL or ms-swift had but TRL 1.16 refuses with
a TypeError (`max_prompt_length`, `rpo_alpha`, `use_liger_loss`, `reference_free`) are said so in a note.
"""

from __future__ import annotations

import math
from typing import Any

from advisor.errors import BadInput
from advisor.objective import (
    DPO_LOSSES,
    DPO_MAX_LENGTH,
    GRPO_GENERATIONS,
    GRPO_LOSSES,
    OPTION_FIELDS,
    objective_of,
    pop_objective,
)
from advisor.text import plain

# GRPOConfig fields only GRPO has (grpo_config.py): any of them makes the config a GRPO run
GRPO_KEYS = {
    "num_generations", "num_generations_eval", "max_completion_length", "ds3_gather_for_generation",
    "generation_batch_size", "steps_per_generation", "use_vllm", "vllm_mode", "vllm_gpu_memory_utilization",
    "vllm_max_model_length", "vllm_tensor_parallel_size", "vllm_enable_sleep_mode", "num_iterations", "epsilon",
    "epsilon_high", "reward_weights", "scale_rewards", "vllm_importance_sampling_correction", "reward_funcs",
    "mask_truncated_completions", "cast_lm_head_to_fp32", "use_transformers_paged",
    "use_transformers_continuous_batching", "generation_kwargs",
}
# DPOConfig fields only DPO has (dpo_config.py)
DPO_KEYS = {"precompute_ref_log_probs", "precompute_ref_batch_size", "loss_weights", "ld_alpha", "f_divergence_type",
            "f_alpha_divergence_coef", "label_smoothing", "use_weighting", "discopop_tau", "rpo_alpha",
            "reference_free"}
# Fields with no effect on memory, time or cost (sampling, clipping, rewards, servers, logging)
IGNORED = {
    "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "generation_kwargs", "chat_template_kwargs",
    "cache_implementation", "epsilon", "epsilon_high", "delta", "sapo_temperature_neg", "sapo_temperature_pos",
    "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg", "importance_sampling_level",
    "reward_weights", "multi_objective_aggregation", "scale_rewards", "mask_truncated_completions",
    "top_entropy_quantile", "entropy_coef", "use_adaptive_entropy", "entropy_coef_min", "entropy_coef_max",
    "entropy_coef_delta", "entropy_target", "max_tool_calling_iterations", "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min", "vllm_importance_sampling_cap",
    "off_policy_mask_threshold", "use_bias_correction_kl", "log_completions", "log_multimodal",
    "num_completions_to_print", "log_unique_prompts", "log_completions_hub_repo", "vllm_server_base_url",
    "vllm_server_host", "vllm_server_port", "vllm_server_timeout", "vllm_group_port", "vllm_model_impl",
    "vllm_structured_outputs_regex", "num_generations_eval", "shuffle_dataset", "reward_funcs",
    "loss_weights", "f_divergence_type", "f_alpha_divergence_coef", "label_smoothing", "discopop_tau",
    "ref_model_mixup_alpha", "ref_model_sync_steps", "router_aux_loss_coef", "disable_dropout", "pad_token",
    "pad_to_multiple_of", "precompute_ref_batch_size", "truncation_mode", "activation_offloading",
    "transformers_continuous_batching_config", "reward_model_name_or_path", "dataset_train_split",
    "dataset_test_split", "dataset_config", "dataset_streaming",
}
# Plan option -> the TRL config key it is read from, where the two are spelled apart (the others are the same)
KEY_OF = {"vllm": "vllm_mode", "vllm_sleep": "vllm_enable_sleep_mode", "ref_model": "precompute_ref_log_probs",
          "importance_sampling": "vllm_importance_sampling_correction", "objective": "loss_type"}
# Keys TRL 1.16.0's DPOConfig / GRPOConfig refuse (TypeError): older TRL releases or ms-swift
NOT_IN_TRL_1_16 = ("max_prompt_length", "rpo_alpha", "use_liger_loss", "reference_free")


def kind_of(data: dict) -> str:
    """'grpo', 'dpo' or 'sft' from a TRL config's keys (loss_type's value tells DPO from GRPO)."""
    keys = set(data)
    if keys & GRPO_KEYS:
        return "grpo"
    if keys & DPO_KEYS:
        return "dpo"
    loss = data.get("loss_type")
    names = loss if isinstance(loss, list) else [loss] if isinstance(loss, str) else []
    if names and all(n in GRPO_LOSSES for n in names):
        return "grpo"
    if names and all(n in DPO_LOSSES for n in names) or "beta" in keys:
        return "dpo"
    return "sft"


def read(k, out: dict[str, Any], pins: dict[str, Any], method: str, micro_batch: int | None,
         accum: int | None) -> None:
    """Fill `out` (plan options) and `pins` from a TRL DPO / GRPO config read through `k` (training_config._Keys)."""
    kind = kind_of(k.data)
    if kind == "sft":
        return
    out["objective"] = kind
    for name in IGNORED:
        if name in k.data:
            k.ignored_names = k.ignored_names | {name}
    for name in NOT_IN_TRL_1_16:
        if name in k.data and name != "max_prompt_length":
            k.notes.append(f"{name}: not a TRL 1.16.0 {kind.upper()}Config field (older TRL or ms-swift; "
                           "DPOConfig/GRPOConfig raise TypeError on it): not modelled")
    _precision(k, pins, method)
    beta = _num(k, "beta")
    if beta is not None:
        out["beta"] = beta
    loss = k.names("loss_type")
    if loss:
        out["loss_type"] = ",".join(loss)
    prompt = k.int("max_prompt_length")
    if prompt is not None:
        out["max_prompt_length"] = prompt
        k.notes.append("max_prompt_length: not a TRL 1.16.0 field (TRL no longer truncates prompts); read as the "
                       "longest prompt you state")
    if kind == "dpo":
        _dpo(k, out, method)
    else:
        _grpo(k, out, micro_batch, accum)
    _validate(k, out)


def _num(k, key: str) -> float | None:
    """A number from the config; text that YAML would have read as a number unquoted ('0.1' in quotes) is
    refused: TRL's HfArgumentParser takes a YAML string for a float field as text. Exponents without a dot
    (5e-2), which PyYAML itself reads as text, stay numbers (training_config.typed)."""
    value = k.data.get(key)
    if isinstance(value, str) and len(value) <= 40:
        import yaml  # only for a quoted value: a plan without a config file does not load PyYAML

        try:
            loaded = yaml.safe_load(value)
        except yaml.YAMLError:
            loaded = None
        if isinstance(loaded, (int, float)) and not isinstance(loaded, bool):
            raise BadInput(f"{k.what}: {key}: expected a number, not the quoted text {plain(value)!r} (remove the "
                           "quotes).")
    return k.num(key)


def _validate(k, out: dict[str, Any]) -> None:
    """The objective these settings make, built now so a value out of range is refused under the config's
    file and key (the plan's own check would name a flag the user never typed)."""
    fields = {option: out[option] for option in OPTION_FIELDS if option in out}
    try:
        objective_of(pop_objective(fields))
    except ValueError as exc:  # BadInput, or the Objective's own check (ObjectiveError)
        flag, _, rest = str(exc).partition(": ")
        option = flag.lstrip("-").split(" ")[0].replace("-", "_")
        key = KEY_OF.get(option, option)
        if key == "steps_per_generation" and key not in k.data:
            key = "generation_batch_size"  # read as steps_per_generation (_steps)
        raise BadInput(f"{k.what}: {key}: {rest}") from None


def _precision(k, pins: dict[str, Any], method: str) -> None:
    """TRL 1.16.0 loads float32 unless model_init_kwargs (or the CLI's dtype) says otherwise (trl/trainer/
    utils.py:1332); with bf16 (the default) that is fp32 weights under bf16 autocast -- for LoRA as for full."""
    init = k.data.get("model_init_kwargs")
    dtype = k.data.get("dtype") or k.data.get("torch_dtype") or (
        (init.get("dtype") or init.get("torch_dtype")) if isinstance(init, dict) else None)
    if dtype in ("bfloat16", "float16", "bf16", "fp16"):
        return  # the SFT reader's 16-bit choice stands
    fp16 = k.data.get("fp16") is True
    pins["precision"] = "amp-fp16" if fp16 else ("amp-bf16" if k.data.get("bf16", True) is not False else "fp32")
    k.notes.append("model_init_kwargs.dtype not set: TRL 1.16 loads float32 (trl/trainer/utils.py:1332), planned as "
                   "fp32 weights under bf16 autocast (set dtype: bfloat16 to halve the weights)")
    del method


def _dpo(k, out: dict[str, Any], method: str) -> None:
    out["seq_len"] = k.int("max_length") or DPO_MAX_LENGTH  # per sequence, prompt + response (dpo_config.py:195)
    if k.bool("precompute_ref_log_probs", False):
        out["ref_model"] = "precomputed"
    if k.bool("sync_ref_model", False) and method != "full":
        raise BadInput(f"{k.what}: sync_ref_model needs a full fine-tune (TRL refuses it with PEFT, "
                       "dpo_trainer.py:992-1009).")
    if k.bool("padding_free", False):
        k.notes.append("padding_free: TRL 1.16 DPO ignores it and pads (dpo_trainer.py:732-739)")
    if k.bool("use_weighting", False):
        k.notes.append("use_weighting: one more per-token output of the log-prob head (not modelled: a few bytes "
                       "per token)")
    k.num("ld_alpha")


def _grpo(k, out: dict[str, Any], micro_batch: int | None, accum: int | None) -> None:
    g = k.int("num_generations", GRPO_GENERATIONS)
    out["num_generations"] = g
    c = k.int("max_completion_length")
    if c is not None:
        out["max_completion_length"] = c
    if k.bool("use_vllm", False):
        _vllm(k, out)
    else:
        _no_vllm(k, out)
    _steps(k, out, micro_batch)
    k.bool("ds3_gather_for_generation", True)
    _grpo_notes(k)
    # the global batch counts completions and must hold whole prompt groups (grpo_config.py:1131-1135)
    per_gpu = (micro_batch or 8) * (accum or 1)
    if per_gpu % g:
        out["global_batch"] = math.lcm(per_gpu, g)
        k.notes.append(f"global batch {per_gpu} completions is not a multiple of num_generations {g}: planned at "
                       f"{out['global_batch']}")


def _vllm(k, out: dict[str, Any]) -> None:
    """use_vllm: true -- the mode and its settings (grpo_config.py:587-680)."""
    mode = k.text("vllm_mode", "colocate")
    if mode not in ("colocate", "server"):
        raise BadInput(f"{k.what}: vllm_mode: expected colocate or server (got {plain(mode)[:20]!r}).")
    out["vllm"] = mode
    util = _num(k, "vllm_gpu_memory_utilization")
    if util is not None and mode == "colocate":
        if not 0 < util <= 1:
            raise BadInput(f"{k.what}: vllm_gpu_memory_utilization: expected a fraction in (0, 1] (got {util}).")
        out["vllm_gpu_memory_utilization"] = util
    mml = k.int("vllm_max_model_length")
    out["vllm_max_model_length"] = mml if mml is not None else "model"
    if mml is None:
        k.notes.append("vllm_max_model_length not set: vLLM takes the model's context, which its KV pool must "
                       "hold for one request (or it refuses to start)")
    tp = k.int("vllm_tensor_parallel_size")
    if tp is not None and mode == "colocate":
        out["vllm_tensor_parallel_size"] = tp
    if k.bool("vllm_enable_sleep_mode", False) and mode == "colocate":
        out["vllm_sleep"] = True
    if k.bool("vllm_importance_sampling_correction", True) is False:
        out["importance_sampling"] = False


def _no_vllm(k, out: dict[str, Any]) -> None:
    out["vllm"] = "none"
    for name in ("vllm_mode", "vllm_gpu_memory_utilization", "vllm_max_model_length", "vllm_tensor_parallel_size",
                 "vllm_enable_sleep_mode", "vllm_importance_sampling_correction"):
        if name in k.data:
            k.raw(name)
            k.notes.append(f"{name}: use_vllm is false, so it has no effect")


def _steps(k, out: dict[str, Any], micro_batch: int | None) -> None:
    """num_iterations, and steps_per_generation (or generation_batch_size over the micro-batch)."""
    mu = k.int("num_iterations")
    if mu is not None:
        out["num_iterations"] = mu
    spg = k.int("steps_per_generation")
    gen_batch = k.int("generation_batch_size")
    if spg is not None:
        out["steps_per_generation"] = spg
    elif gen_batch is not None and micro_batch:
        out["steps_per_generation"] = max(1, gen_batch // micro_batch)
        k.notes.append("generation_batch_size: read as steps_per_generation on one GPU")


def _grpo_notes(k) -> None:
    if k.bool("cast_lm_head_to_fp32", False):
        k.notes.append("cast_lm_head_to_fp32: the log-prob head's fp32 copy is not modelled")
    if k.bool("use_transformers_paged", False) or k.bool("use_transformers_continuous_batching", False):
        k.notes.append("transformers continuous batching / paged generation: modelled as plain generate")
    if k.bool("sync_ref_model", False):
        k.notes.append("sync_ref_model: the reference copy is mixed with the policy every few steps (memory as a copy)")
