"""`plan --from-config` of a TRL DPO or GRPO config plans that objective: every RL key is read (none "not
understood"), TRL 1.16's own defaults fill the rest, and keys TRL 1.16 refuses are said so."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from helpers.cli_run import gpu_advisor

from advisor.workload.training_config import read_config

GRPO = {
    "model_name_or_path": "meta-llama/Llama-3.1-8B", "use_peft": True, "lora_r": 16, "lora_alpha": 32,
    "per_device_train_batch_size": 8, "gradient_accumulation_steps": 4, "num_train_epochs": 1, "learning_rate": 1e-6,
    "bf16": True, "model_init_kwargs": {"dtype": "bfloat16"}, "gradient_checkpointing": True,
    "num_generations": 8, "max_completion_length": 1024, "use_vllm": True, "vllm_mode": "colocate",
    "vllm_gpu_memory_utilization": 0.3, "vllm_max_model_length": 1536, "beta": 0.04, "loss_type": "dapo",
    "temperature": 1.0, "epsilon": 0.2, "scale_rewards": "group", "reward_weights": [1.0], "num_iterations": 1,
    "logging_steps": 10, "output_dir": "out", "report_to": "none",
}
DPO = {
    "model_name_or_path": "meta-llama/Llama-3.1-8B", "use_peft": True, "per_device_train_batch_size": 4,
    "gradient_accumulation_steps": 8, "num_train_epochs": 2, "beta": 0.1, "loss_type": ["sigmoid"],
    "max_length": 2048, "learning_rate": 5e-7, "output_dir": "out", "rpo_alpha": 0.1, "label_smoothing": 0.0,
}


def write(tmp_path: Path, name: str, data: dict) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def plan_json(capsys, path: Path, *args) -> tuple[dict, str]:
    code, out, err = gpu_advisor(capsys, "plan", "--from-config", path, "--gpu", "H100,H200", "--format", "json",
                                 *args)
    assert code == 0, err
    return json.loads(out), err


def test_a_trl_grpo_config_plans_grpo_with_its_generation_settings_and_no_unread_key(tmp_path, capsys):
    path = write(tmp_path, "grpo.yaml", {**GRPO, "max_prompt_length": 512})
    plan, err = plan_json(capsys, path, "--prompts", "2000")
    assert "not understood" not in err
    assert plan["workload"]["objective"] == "grpo" and plan["workload"]["prompts"] == 2000
    o = plan["candidates"][0]["stack"]["objective"]
    assert (o["kind"], o["vllm"], o["vllm_gpu_memory_utilization"], o["num_generations"]) == ("grpo", "colocate", 0.3, 8)
    assert (o["max_completion_length"], o["beta"], o["vllm_max_model_length"]) == (1024, 0.04, 1536)
    assert plan["workload"]["seq_len"] == 512 + 1024
    assert plan["candidates"][0]["timing"]["generation_hours"] > 0
    pins = read_config(path)
    assert "max_prompt_length" in " ".join(pins.notes)  # not a TRL 1.16 field: read as the stated prompt length
    assert {"temperature", "epsilon", "scale_rewards", "reward_weights"} <= set(pins.ignored)


def test_a_trl_dpo_config_plans_dpo_at_its_max_length_and_says_rpo_alpha_is_not_trl_1_16(tmp_path, capsys):
    path = write(tmp_path, "dpo.yaml", DPO)
    plan, err = plan_json(capsys, path, "--pairs", "10000")
    assert plan["workload"]["objective"] == "dpo" and plan["workload"]["seq_len"] == 2048
    assert plan["candidates"][0]["stack"]["objective"]["kind"] == "dpo"
    # no model_init_kwargs dtype: TRL 1.16 loads float32, so the plan holds fp32 weights under bf16 autocast
    assert plan["candidates"][0]["stack"]["precision"] == "amp-bf16"
    notes = " ".join(read_config(path).notes)
    assert "rpo_alpha: not a TRL 1.16.0" in notes and "loads float32" in notes
    assert "label_smoothing" in read_config(path).ignored
    unread = " ".join(line for line in err.splitlines() if "not understood" in line)
    assert "rpo_alpha" in unread  # TRL 1.16 refuses it: listed, never dropped silently
    for key in ("beta", "loss_type", "max_length", "label_smoothing"):
        assert key not in unread


def test_grpo_without_vllm_max_model_length_sizes_vllms_pool_for_the_models_context(tmp_path, capsys):
    cfg = {k: v for k, v in GRPO.items() if k != "vllm_max_model_length"}
    path = write(tmp_path, "grpo.yaml", cfg)
    code, out, err = gpu_advisor(capsys, "plan", "--from-config", path, "--gpu", "H100", "--prompts", "2000",
                                 "--format", "json")
    plan = json.loads(out)
    # Llama-3.1's 131,072-token context needs 16 GiB of KV for one request: more than 0.3 of an H100 leaves
    assert any("vLLM would refuse to start" in r["reason"] for r in plan["rejected"])
    assert "vllm_max_model_length" in " ".join(read_config(path).notes)
    del code, err
